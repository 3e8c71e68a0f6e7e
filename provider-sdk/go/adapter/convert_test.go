package adapter

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

func TestTheServiceTheCloudSees(t *testing.T) {
	class, timeout, alloc := "example.com/lb", int32(60), false
	full := service()
	full.Labels = map[string]string{"app": "web"}
	full.Annotations = map[string]string{"service.beta.example.com/type": "nlb"}
	full.Ports = append(full.Ports, &pb.ServicePort{Protocol: pb.Protocol_PROTOCOL_UDP, Port: 53, AppProtocol: "dns"})
	full.LoadBalancerClass = &class
	full.LoadBalancerSourceRanges = []string{"10.0.0.0/8"}
	full.ExternalTrafficPolicy = pb.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	full.InternalTrafficPolicy = pb.TrafficPolicy_TRAFFIC_POLICY_CLUSTER
	full.HealthCheckNodePort = 31000
	full.SessionAffinity = pb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP
	full.SessionAffinityTimeoutSeconds = &timeout
	full.IpFamilies = []pb.IpFamily{pb.IpFamily_IP_FAMILY_IPV6, pb.IpFamily_IP_FAMILY_IPV4}
	full.IpFamilyPolicy = pb.IpFamilyPolicy_IP_FAMILY_POLICY_PREFER_DUAL_STACK
	full.AllocateLoadBalancerNodePorts = &alloc
	full.LoadBalancerIp = "192.0.2.1"
	full.ClusterIps = []string{"fd00::10", "10.96.0.10"}
	full.Status = &pb.LoadBalancerStatus{Ingress: []*pb.LoadBalancerIngress{{Ip: "192.0.2.1", IpMode: pb.IpMode_IP_MODE_PROXY,
		Ports: []*pb.PortStatus{{Port: 80, Protocol: pb.Protocol_PROTOCOL_TCP, Error: "Pending"}}}}}

	icp := corev1.ServiceInternalTrafficPolicyCluster
	pdsp := corev1.IPFamilyPolicyPreferDualStack
	proxy := corev1.LoadBalancerIPModeProxy
	pending := "Pending"
	want := corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer,
		Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080},
			{Protocol: corev1.ProtocolUDP, Port: 53, AppProtocol: ptr("dns")},
		},
		LoadBalancerClass:             &class,
		LoadBalancerSourceRanges:      []string{"10.0.0.0/8"},
		ExternalTrafficPolicy:         corev1.ServiceExternalTrafficPolicyLocal,
		InternalTrafficPolicy:         &icp,
		HealthCheckNodePort:           31000,
		SessionAffinity:               corev1.ServiceAffinityClientIP,
		SessionAffinityConfig:         &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}},
		IPFamilies:                    []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
		IPFamilyPolicy:                &pdsp,
		AllocateLoadBalancerNodePorts: &alloc,
		LoadBalancerIP:                "192.0.2.1",
		ClusterIP:                     "fd00::10",
		ClusterIPs:                    []string{"fd00::10", "10.96.0.10"},
	}
	svc := toService(full)
	if !reflect.DeepEqual(svc.Spec, want) {
		t.Errorf("spec =\n%+v\nwant\n%+v", svc.Spec, want)
	}
	if svc.Namespace != "default" || svc.Name != "web" || svc.UID != "0b7d8a43-3c8e-4d1b-9d55-9e7d2f2c1a11" ||
		svc.Labels["app"] != "web" || svc.Annotations["service.beta.example.com/type"] != "nlb" || svc.Kind != "Service" {
		t.Errorf("metadata = %+v", svc.ObjectMeta)
	}
	wantStatus := corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: &proxy,
		Ports: []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP, Error: &pending}}}}}
	if !reflect.DeepEqual(svc.Status.LoadBalancer, wantStatus) {
		t.Errorf("status = %+v", svc.Status.LoadBalancer)
	}
	// And back.
	back, v := fromStatus("status", &svc.Status.LoadBalancer)
	if v != nil || !proto.Equal(back, full.Status) {
		t.Errorf("status back = %v, %v", back, v)
	}
}

func TestServiceDefaultsAreTheAPIServers(t *testing.T) {
	s := service()
	s.SessionAffinity = pb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP
	svc := toService(s)
	if c := svc.Spec.SessionAffinityConfig; c == nil || *c.ClientIP.TimeoutSeconds != DefaultSessionAffinityTimeout {
		t.Errorf("ClientIP timeout = %+v", c)
	}
	if a := svc.Spec.AllocateLoadBalancerNodePorts; a == nil || !*a {
		t.Errorf("allocateLoadBalancerNodePorts = %v", a)
	}
	if svc.Spec.InternalTrafficPolicy != nil || svc.Spec.IPFamilyPolicy != nil || svc.Spec.LoadBalancerClass != nil {
		t.Errorf("unset optional fields set: %+v", svc.Spec)
	}
	if svc.Spec.ClusterIP != "" || svc.Labels != nil {
		t.Errorf("empty fields filled: %+v", svc)
	}
}

func TestTheVolumeTheCloudSees(t *testing.T) {
	cases := []struct {
		driver string
		check  func(corev1.PersistentVolumeSource) bool
	}{
		{"kubernetes.io/aws-ebs", func(s corev1.PersistentVolumeSource) bool {
			return s.AWSElasticBlockStore != nil && s.AWSElasticBlockStore.VolumeID == "vol/1"
		}},
		{"kubernetes.io/gce-pd", func(s corev1.PersistentVolumeSource) bool {
			return s.GCEPersistentDisk != nil && s.GCEPersistentDisk.PDName == "vol/1"
		}},
		{"kubernetes.io/azure-disk", func(s corev1.PersistentVolumeSource) bool {
			return s.AzureDisk != nil && s.AzureDisk.DataDiskURI == "vol/1" && s.AzureDisk.DiskName == "1"
		}},
		{"kubernetes.io/cinder", func(s corev1.PersistentVolumeSource) bool { return s.Cinder != nil && s.Cinder.VolumeID == "vol/1" }},
		{"kubernetes.io/vsphere-volume", func(s corev1.PersistentVolumeSource) bool {
			return s.VsphereVolume != nil && s.VsphereVolume.VolumePath == "vol/1"
		}},
		{"ebs.csi.aws.com", func(s corev1.PersistentVolumeSource) bool {
			return s.CSI != nil && s.CSI.Driver == "ebs.csi.aws.com" && s.CSI.VolumeHandle == "vol/1"
		}},
	}
	for _, c := range cases {
		pv := toVolume(&pb.Volume{Name: "pv", Uid: "u", Driver: c.driver, VolumeId: "vol/1", Labels: map[string]string{"a": "b"}})
		if !c.check(pv.Spec.PersistentVolumeSource) || pv.Name != "pv" || pv.UID != "u" || pv.Labels["a"] != "b" {
			t.Errorf("%s: %+v", c.driver, pv)
		}
	}
}

func TestAnswersTheContractCannotCarry(t *testing.T) {
	weird := corev1.LoadBalancerIPMode("Magic")
	for name, st := range map[string]*corev1.LoadBalancerStatus{
		"ip mode":  {Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: &weird}}},
		"protocol": {Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1", Ports: []corev1.PortStatus{{Port: 1, Protocol: "QUIC"}}}}},
		"hostname": {Ingress: []corev1.LoadBalancerIngress{{Hostname: "192.0.2.1"}}},
	} {
		if _, v := fromStatus("status", st); v == nil {
			t.Errorf("%s accepted", name)
		}
	}
	if _, v := fromAddresses("a", []corev1.NodeAddress{{Type: "Weird", Address: "x"}}); v == nil || v.Field != "a[0].type" {
		t.Errorf("address type: %v", v)
	}
}
