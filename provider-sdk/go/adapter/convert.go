package adapter

import (
	"fmt"
	"maps"
	"path"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// The conversions between the contract's messages and the Kubernetes
// objects a Go cloud expects. Requests are converted after validation, so
// their enums are known; answers are checked while converted back, and a
// value the contract cannot carry is a violation (the adapter answers
// INTERNAL for it).

var addressTypes = map[pb.NodeAddressType]corev1.NodeAddressType{
	pb.NodeAddressType_NODE_ADDRESS_TYPE_HOSTNAME:     corev1.NodeHostName,
	pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP:  corev1.NodeInternalIP,
	pb.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_IP:  corev1.NodeExternalIP,
	pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_DNS: corev1.NodeInternalDNS,
	pb.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_DNS: corev1.NodeExternalDNS,
}

var protocols = map[pb.Protocol]corev1.Protocol{
	pb.Protocol_PROTOCOL_TCP:  corev1.ProtocolTCP,
	pb.Protocol_PROTOCOL_UDP:  corev1.ProtocolUDP,
	pb.Protocol_PROTOCOL_SCTP: corev1.ProtocolSCTP,
}

var trafficPolicies = map[pb.TrafficPolicy]corev1.ServiceExternalTrafficPolicy{
	pb.TrafficPolicy_TRAFFIC_POLICY_CLUSTER: corev1.ServiceExternalTrafficPolicyCluster,
	pb.TrafficPolicy_TRAFFIC_POLICY_LOCAL:   corev1.ServiceExternalTrafficPolicyLocal,
}

var affinities = map[pb.SessionAffinity]corev1.ServiceAffinity{
	pb.SessionAffinity_SESSION_AFFINITY_NONE:      corev1.ServiceAffinityNone,
	pb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP: corev1.ServiceAffinityClientIP,
}

var ipFamilies = map[pb.IpFamily]corev1.IPFamily{
	pb.IpFamily_IP_FAMILY_IPV4: corev1.IPv4Protocol,
	pb.IpFamily_IP_FAMILY_IPV6: corev1.IPv6Protocol,
}

var ipFamilyPolicies = map[pb.IpFamilyPolicy]corev1.IPFamilyPolicy{
	pb.IpFamilyPolicy_IP_FAMILY_POLICY_SINGLE_STACK:       corev1.IPFamilyPolicySingleStack,
	pb.IpFamilyPolicy_IP_FAMILY_POLICY_PREFER_DUAL_STACK:  corev1.IPFamilyPolicyPreferDualStack,
	pb.IpFamilyPolicy_IP_FAMILY_POLICY_REQUIRE_DUAL_STACK: corev1.IPFamilyPolicyRequireDualStack,
}

var ipModes = map[pb.IpMode]corev1.LoadBalancerIPMode{
	pb.IpMode_IP_MODE_VIP:   corev1.LoadBalancerIPModeVIP,
	pb.IpMode_IP_MODE_PROXY: corev1.LoadBalancerIPModeProxy,
}

// reverse inverts one of the maps above.
func reverse[K, V comparable](m map[K]V) map[V]K {
	r := make(map[V]K, len(m))
	for k, v := range m {
		r[v] = k
	}
	return r
}

var (
	addressTypesBack = reverse(addressTypes)
	protocolsBack    = reverse(protocols)
	ipModesBack      = reverse(ipModes)
)

// DefaultSessionAffinityTimeout is what the apiserver defaults
// sessionAffinityConfig.clientIP.timeoutSeconds to.
const DefaultSessionAffinityTimeout = 10800

func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func ptr[T any](v T) *T { return &v }

// toAddresses converts a NodeRef's or Route's addresses.
func toAddresses(as []*pb.NodeAddress) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for _, a := range as {
		out = append(out, corev1.NodeAddress{Type: addressTypes[a.GetType()], Address: a.GetAddress()})
	}
	return out
}

// fromAddresses converts a cloud's addresses; a type the contract does not
// know is a violation.
func fromAddresses(field string, as []corev1.NodeAddress) ([]*pb.NodeAddress, *sdk.Violation) {
	var out []*pb.NodeAddress
	for i, a := range as {
		t, ok := addressTypesBack[a.Type]
		if !ok {
			return nil, &sdk.Violation{Field: fmt.Sprintf("%s[%d].type", field, i), Problem: fmt.Sprintf("unknown address type %q", a.Type)}
		}
		out = append(out, &pb.NodeAddress{Type: t, Address: a.Address})
	}
	return out, sdk.CheckNodeAddresses(field, out)
}

// toNode is the Node a Go cloud sees for a NodeRef: name, uid, labels,
// annotations, spec.providerID and status.addresses; nothing else travels.
func toNode(n *pb.NodeRef) *corev1.Node {
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.GetName(),
			UID:         types.UID(n.GetUid()),
			Labels:      copyMap(n.GetLabels()),
			Annotations: copyMap(n.GetAnnotations()),
		},
		Spec:   corev1.NodeSpec{ProviderID: n.GetProviderId()},
		Status: corev1.NodeStatus{Addresses: toAddresses(n.GetAddresses())},
	}
}

func toNodes(ns []*pb.NodeRef) []*corev1.Node {
	out := make([]*corev1.Node, 0, len(ns))
	for _, n := range ns {
		out = append(out, toNode(n))
	}
	return out
}

// toService is the Service a Go cloud sees: metadata (namespace, name,
// uid, labels, annotations), type LoadBalancer, the spec fields the
// contract carries with the apiserver's defaults where the contract says
// "unset means the default" (allocateLoadBalancerNodePorts true, ClientIP
// affinity timeout 10800), and status.loadBalancer. Not carried:
// spec.ports[].targetPort, selector, externalIPs and the rest of the spec.
func toService(s *pb.Service) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   s.GetNamespace(),
			Name:        s.GetName(),
			UID:         types.UID(s.GetUid()),
			Labels:      copyMap(s.GetLabels()),
			Annotations: copyMap(s.GetAnnotations()),
		},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			LoadBalancerSourceRanges:      append([]string(nil), s.GetLoadBalancerSourceRanges()...),
			ExternalTrafficPolicy:         trafficPolicies[s.GetExternalTrafficPolicy()],
			HealthCheckNodePort:           s.GetHealthCheckNodePort(),
			SessionAffinity:               affinities[s.GetSessionAffinity()],
			LoadBalancerIP:                s.GetLoadBalancerIp(),
			ClusterIPs:                    append([]string(nil), s.GetClusterIps()...),
			AllocateLoadBalancerNodePorts: ptr(true),
		},
	}
	for _, p := range s.GetPorts() {
		port := corev1.ServicePort{
			Name:     p.GetName(),
			Protocol: protocols[p.GetProtocol()],
			Port:     p.GetPort(),
			NodePort: p.GetNodePort(),
		}
		if p.GetAppProtocol() != "" {
			port.AppProtocol = ptr(p.GetAppProtocol())
		}
		svc.Spec.Ports = append(svc.Spec.Ports, port)
	}
	if s.LoadBalancerClass != nil {
		svc.Spec.LoadBalancerClass = ptr(s.GetLoadBalancerClass())
	}
	if p, ok := trafficPolicies[s.GetInternalTrafficPolicy()]; ok {
		svc.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicy(p))
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		timeout := int32(DefaultSessionAffinityTimeout)
		if s.SessionAffinityTimeoutSeconds != nil {
			timeout = s.GetSessionAffinityTimeoutSeconds()
		}
		svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
	}
	for _, f := range s.GetIpFamilies() {
		svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, ipFamilies[f])
	}
	if p, ok := ipFamilyPolicies[s.GetIpFamilyPolicy()]; ok {
		svc.Spec.IPFamilyPolicy = ptr(p)
	}
	if s.AllocateLoadBalancerNodePorts != nil {
		svc.Spec.AllocateLoadBalancerNodePorts = ptr(s.GetAllocateLoadBalancerNodePorts())
	}
	if len(svc.Spec.ClusterIPs) > 0 {
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	}
	if s.GetStatus() != nil {
		svc.Status.LoadBalancer = toStatus(s.GetStatus())
	}
	return svc
}

func toStatus(s *pb.LoadBalancerStatus) corev1.LoadBalancerStatus {
	var out corev1.LoadBalancerStatus
	for _, ing := range s.GetIngress() {
		in := corev1.LoadBalancerIngress{IP: ing.GetIp(), Hostname: ing.GetHostname()}
		if m, ok := ipModes[ing.GetIpMode()]; ok {
			in.IPMode = ptr(m)
		}
		for _, p := range ing.GetPorts() {
			ps := corev1.PortStatus{Port: p.GetPort(), Protocol: protocols[p.GetProtocol()]}
			if p.GetError() != "" {
				ps.Error = ptr(p.GetError())
			}
			in.Ports = append(in.Ports, ps)
		}
		out.Ingress = append(out.Ingress, in)
	}
	return out
}

// fromStatus converts and checks a cloud's load balancer status.
func fromStatus(field string, s *corev1.LoadBalancerStatus) (*pb.LoadBalancerStatus, *sdk.Violation) {
	out := &pb.LoadBalancerStatus{}
	for i, ing := range s.Ingress {
		f := fmt.Sprintf("%s.ingress[%d]", field, i)
		in := &pb.LoadBalancerIngress{Ip: ing.IP, Hostname: ing.Hostname}
		if ing.IPMode != nil {
			m, ok := ipModesBack[*ing.IPMode]
			if !ok {
				return nil, &sdk.Violation{Field: f + ".ip_mode", Problem: fmt.Sprintf("unknown IP mode %q", *ing.IPMode)}
			}
			in.IpMode = m
		}
		for j, p := range ing.Ports {
			proto, ok := protocolsBack[p.Protocol]
			if !ok {
				return nil, &sdk.Violation{Field: fmt.Sprintf("%s.ports[%d].protocol", f, j), Problem: fmt.Sprintf("unknown protocol %q", p.Protocol)}
			}
			ps := &pb.PortStatus{Port: p.Port, Protocol: proto}
			if p.Error != nil {
				ps.Error = *p.Error
			}
			in.Ports = append(in.Ports, ps)
		}
		out.Ingress = append(out.Ingress, in)
	}
	return out, sdk.CheckLoadBalancerStatus(field, out)
}

// toRoute is the cloudprovider.Route for a contract Route.
func toRoute(r *pb.Route, enableNodeAddresses bool) *cloudprovider.Route {
	return &cloudprovider.Route{
		Name:                r.GetName(),
		TargetNode:          types.NodeName(r.GetTargetNode()),
		EnableNodeAddresses: enableNodeAddresses,
		TargetNodeAddresses: toAddresses(r.GetTargetNodeAddresses()),
		DestinationCIDR:     r.GetDestinationCidr(),
		Blackhole:           r.GetBlackhole(),
	}
}

func fromRoute(field string, i int, r *cloudprovider.Route) (*pb.Route, *sdk.Violation) {
	addresses, v := fromAddresses(fmt.Sprintf("%s[%d].target_node_addresses", field, i), r.TargetNodeAddresses)
	if v != nil {
		return nil, v
	}
	return &pb.Route{
		Name:                r.Name,
		TargetNode:          string(r.TargetNode),
		TargetNodeAddresses: addresses,
		DestinationCidr:     r.DestinationCIDR,
		Blackhole:           r.Blackhole,
	}, nil
}

// toVolume is the PersistentVolume a PVLabeler sees: name, uid, labels,
// and the volume source the driver names (the in-tree plugins' legacy
// sources, CSI otherwise), as the controller derived driver and id from it.
func toVolume(v *pb.Volume) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		TypeMeta:   metav1.TypeMeta{Kind: "PersistentVolume", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: v.GetName(), UID: types.UID(v.GetUid()), Labels: copyMap(v.GetLabels())},
	}
	id := v.GetVolumeId()
	src := &pv.Spec.PersistentVolumeSource
	switch v.GetDriver() {
	case "kubernetes.io/aws-ebs":
		src.AWSElasticBlockStore = &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: id}
	case "kubernetes.io/gce-pd":
		src.GCEPersistentDisk = &corev1.GCEPersistentDiskVolumeSource{PDName: id}
	case "kubernetes.io/azure-disk":
		src.AzureDisk = &corev1.AzureDiskVolumeSource{DataDiskURI: id, DiskName: path.Base(id)}
	case "kubernetes.io/cinder":
		src.Cinder = &corev1.CinderPersistentVolumeSource{VolumeID: id}
	case "kubernetes.io/vsphere-volume":
		src.VsphereVolume = &corev1.VsphereVirtualDiskVolumeSource{VolumePath: id}
	default:
		src.CSI = &corev1.CSIPersistentVolumeSource{Driver: v.GetDriver(), VolumeHandle: id}
	}
	return pv
}
