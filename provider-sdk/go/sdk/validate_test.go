package sdk

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

func serviceFixture() *pb.Service {
	return &pb.Service{
		Namespace: "default",
		Name:      "web",
		Uid:       "0b7d8a43-3c8e-4d1b-9d55-9e7d2f2c1a11",
		Ports: []*pb.ServicePort{{
			Protocol: pb.Protocol_PROTOCOL_TCP, Port: 80, NodePort: 30080,
		}},
		ExternalTrafficPolicy: pb.TrafficPolicy_TRAFFIC_POLICY_CLUSTER,
		SessionAffinity:       pb.SessionAffinity_SESSION_AFFINITY_NONE,
	}
}

func TestACompleteServicePasses(t *testing.T) {
	if v := CheckService("service", serviceFixture()); v != nil {
		t.Fatal(v)
	}
}

func TestEachBrokenServiceFieldIsNamed(t *testing.T) {
	cases := []struct {
		field string
		brk   func(*pb.Service)
	}{
		{"service.uid", func(s *pb.Service) { s.Uid = "" }},
		{"service.namespace", func(s *pb.Service) { s.Namespace = strings.Repeat("n", 254) }},
		{"service.ports", func(s *pb.Service) { s.Ports = nil }},
		{"service.ports[0].protocol", func(s *pb.Service) { s.Ports[0].Protocol = 0 }},
		{"service.ports[0].protocol", func(s *pb.Service) { s.Ports[0].Protocol = 99 }},
		{"service.ports[0].port", func(s *pb.Service) { s.Ports[0].Port = 70000 }},
		{"service.ports[0].node_port", func(s *pb.Service) { s.Ports[0].NodePort = -1 }},
		{"service.load_balancer_source_ranges[0]", func(s *pb.Service) { s.LoadBalancerSourceRanges = []string{"10.0.0.0/33"} }},
		{"service.external_traffic_policy", func(s *pb.Service) { s.ExternalTrafficPolicy = 0 }},
		{"service.internal_traffic_policy", func(s *pb.Service) { s.InternalTrafficPolicy = 7 }},
		{"service.session_affinity", func(s *pb.Service) { s.SessionAffinity = 0 }},
		{"service.ip_families[0]", func(s *pb.Service) { s.IpFamilies = []pb.IpFamily{0} }},
		{"service.ip_family_policy", func(s *pb.Service) { s.IpFamilyPolicy = 9 }},
		{"service.load_balancer_ip", func(s *pb.Service) { s.LoadBalancerIp = "1.2.3" }},
		{"service.cluster_ips[0]", func(s *pb.Service) { s.ClusterIps = []string{"10.0.0"} }},
		{"service.annotations", func(s *pb.Service) {
			s.Annotations = map[string]string{"big": strings.Repeat("x", MaxAnnotationsBytes)}
		}},
		{"service.labels[k]", func(s *pb.Service) { s.Labels = map[string]string{"k": strings.Repeat("v", 64)} }},
		{"service.status.ingress[0]", func(s *pb.Service) {
			s.Status = &pb.LoadBalancerStatus{Ingress: []*pb.LoadBalancerIngress{{}}}
		}},
	}
	for _, c := range cases {
		s := serviceFixture()
		c.brk(s)
		v := CheckService("service", s)
		if v == nil || v.Field != c.field {
			t.Errorf("want a violation of %s, got %v", c.field, v)
		}
	}
	if v := CheckService("service", nil); v == nil || v.Field != "service" {
		t.Errorf("nil service: %v", v)
	}
	// Reads and the delete need no ports.
	s := serviceFixture()
	s.Ports = nil
	if v := CheckServiceRef("service", s); v != nil {
		t.Errorf("CheckServiceRef without ports: %v", v)
	}
	s.ClusterIps = []string{"None"}
	if v := CheckServiceRef("service", s); v != nil {
		t.Errorf("headless: %v", v)
	}
}

// Ported from the Rust SDK's statuses_kubernetes_refuses_are_refused (found
// there by a property test): each refused status passed once, and the
// apiserver refuses each in the Service's status, so the Service never
// showed its address.
func TestStatusesKubernetesRefusesAreRefused(t *testing.T) {
	one := func(ip, hostname string, mode pb.IpMode) *pb.LoadBalancerStatus {
		return &pb.LoadBalancerStatus{Ingress: []*pb.LoadBalancerIngress{{Ip: ip, Hostname: hostname, IpMode: mode}}}
	}
	unspecified, vip := pb.IpMode_IP_MODE_UNSPECIFIED, pb.IpMode_IP_MODE_VIP
	tcp := &pb.LoadBalancerStatus{Ingress: []*pb.LoadBalancerIngress{{Ip: "1.2.3.4", Ports: []*pb.PortStatus{{Port: 80}}}}}
	for _, c := range []struct {
		status *pb.LoadBalancerStatus
		field  string
	}{
		// The Rust SDK's cases.
		{one("", "0", vip), "s.ingress[0].ip_mode"},
		{one("", "lb.example.com", vip), "s.ingress[0].ip_mode"},
		{one("", "010.0.0.1", unspecified), "s.ingress[0].hostname"},
		{one("::ffff:1.2.3.4", "", vip), "s.ingress[0].ip"},
		// More of the same rules.
		{one("", "", unspecified), "s.ingress[0]"},
		{one("", "1.2.3.4", unspecified), "s.ingress[0].hostname"},
		{one("", "001.002.003.004", unspecified), "s.ingress[0].hostname"},
		{one("", "Lb.example.com", unspecified), "s.ingress[0].hostname"},
		{one("1.2.3", "", unspecified), "s.ingress[0].ip"},
		{one("::ffff:1.2.3.4", "lb.example.com", unspecified), "s.ingress[0].ip"},
		{one("1.2.3.4", "", 7), "s.ingress[0].ip_mode"},
		{tcp, "s.ingress[0].ports[0].protocol"},
	} {
		if v := CheckLoadBalancerStatus("s", c.status); v == nil || v.Field != c.field {
			t.Errorf("%v: want a violation of %s, got %v", c.status, c.field, v)
		}
	}
	for _, ok := range []*pb.LoadBalancerStatus{
		// The Rust SDK's cases.
		one("1.2.3.4", "", vip),
		one("", "lb.example.com", unspecified),
		one("", "1.2.3.4444", unspecified),
		one("2001:db8::1", "lb.example.com", vip),
		// Not IPv4 addresses, even sloppily read.
		one("", "256.0.0.1", unspecified),
		one("", "1.2.3", unspecified),
		one("", "0", unspecified),
		{},
	} {
		if v := CheckLoadBalancerStatus("s", ok); v != nil {
			t.Errorf("%v refused: %v", ok, v)
		}
	}
}

func TestNodeAddressesOfIPTypesMustParse(t *testing.T) {
	bad := &pb.NodeAddress{Type: pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP, Address: "not-an-ip"}
	if v := CheckNodeAddress("a", bad); v == nil || v.Field != "a.address" {
		t.Errorf("got %v", v)
	}
	host := &pb.NodeAddress{Type: pb.NodeAddressType_NODE_ADDRESS_TYPE_HOSTNAME, Address: "node-1"}
	if v := CheckNodeAddress("a", host); v != nil {
		t.Errorf("got %v", v)
	}
	if v := CheckNodeAddress("a", &pb.NodeAddress{Address: "x"}); v == nil || v.Field != "a.type" {
		t.Errorf("got %v", v)
	}
}

func TestNodeRefs(t *testing.T) {
	cases := []struct {
		node  *pb.NodeRef
		field string
	}{
		{nil, "node"},
		{&pb.NodeRef{}, "node.name"},
		{&pb.NodeRef{Name: "n", Addresses: []*pb.NodeAddress{{Type: 2, Address: "10.0.0.1"}, {Type: 3, Address: "x"}}}, "node.addresses[1].address"},
		{&pb.NodeRef{Name: "n", Labels: map[string]string{"-bad": ""}}, "node.labels[-bad]"},
		{&pb.NodeRef{Name: "n", Annotations: map[string]string{"": "v"}}, "node.annotations"},
	}
	for _, c := range cases {
		if v := CheckNodeRef("node", c.node); v == nil || v.Field != c.field {
			t.Errorf("%v: want %s, got %v", c.node, c.field, v)
		}
	}
}

func TestLabelSyntaxIsKubernetesSyntax(t *testing.T) {
	for _, ok := range []string{"a", "example.com/rack", "team_1.x-y", "k8s.io/x"} {
		if v := CheckLabelKey("f", ok); v != nil {
			t.Errorf("%q: %v", ok, v)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "Example.com/x", "a/b/c", "/x", "x/", "has space"} {
		if CheckLabelKey("f", bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, ok := range []string{"", "zone-a_1.b"} {
		if v := CheckLabelValue("f", ok); v != nil {
			t.Errorf("%q: %v", ok, v)
		}
	}
	for _, bad := range []string{"-x", "x y", "x/y", strings.Repeat("v", 64)} {
		if CheckLabelValue("f", bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if CheckProviderID("f", "fake://i-1") != nil {
		t.Error("fake://i-1 refused")
	}
	for _, bad := range []string{"", "i-1", "://x", "fake://", "fake://a b"} {
		if CheckProviderID("f", bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCIDRsAndIPs(t *testing.T) {
	// As the Rust SDK: host bits may be set; the prefix is decimal digits
	// without a leading zero or a sign; no zones.
	for _, ok := range []string{"10.0.0.0/8", "fd00::/64", "0.0.0.0/0", "10.0.0.1/8", "::ffff:1.2.3.4/104", "fd00::/128"} {
		if v := CheckCIDR("f", ok); v != nil {
			t.Errorf("%q: %v", ok, v)
		}
	}
	for _, bad := range []string{"10.0.0.0", "10.0.0.0/", "10.0.0/8", "fd00::/129", "x/1", "10.0.0.0/+8", "10.0.0.0/-0", "10.0.0.0/33",
		"10.0.0.0/08", "10.0.0.0/00", "fd00::/064", "10.0.0.0/ 8", "10.0.0.0/8/8", "010.0.0.0/8", "fe80::1%eth0/64", "/8", ""} {
		if CheckCIDR("f", bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if CheckIP("f", "::1") != nil {
		t.Error("::1 refused")
	}
	for _, bad := range []string{"256.0.0.1", "fe80::1%eth0", ""} {
		if CheckIP("f", bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRoutesVolumesAndMetadata(t *testing.T) {
	if v := CheckRoute("route", &pb.Route{DestinationCidr: "10.0.0.0/24"}); v == nil || v.Field != "route.target_node" {
		t.Errorf("route without target: %v", v)
	}
	if v := CheckRoute("route", &pb.Route{DestinationCidr: "10.0.0.0/24", Blackhole: true}); v != nil {
		t.Errorf("blackhole route: %v", v)
	}
	if v := CheckVolume("volume", &pb.Volume{Name: "pv", Driver: "d"}); v == nil || v.Field != "volume.volume_id" {
		t.Errorf("volume: %v", v)
	}
	md := &pb.InstanceMetadata{ProviderId: "fake://i-1", Zone: "zone a"}
	if v := CheckInstanceMetadata("metadata", md); v == nil || v.Field != "metadata.zone" {
		t.Errorf("metadata: %v", v)
	}
	md = proto.Clone(md).(*pb.InstanceMetadata)
	md.Zone, md.ProviderId = "", ""
	if v := CheckInstanceMetadata("metadata", md); v != nil {
		t.Errorf("empty providerID refused: %v", v)
	}
}

// As the Rust SDK's dns_addresses_are_dns_names_and_ips_are_canonical
// (issue 25, finding 9): the DNS address types hold DNS names, and IPs are
// in canonical text (RFC 5952), never IPv4-mapped.
func TestDNSAddressesAreDNSNamesAndIPsAreCanonical(t *testing.T) {
	const (
		hostname    = pb.NodeAddressType_NODE_ADDRESS_TYPE_HOSTNAME
		internalDNS = pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_DNS
		externalDNS = pb.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_DNS
		internalIP  = pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP
		externalIP  = pb.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_IP
	)
	cases := []struct {
		typ     pb.NodeAddressType
		address string
		ok      bool
	}{
		{hostname, "$(rm -rf /)", false},
		{internalDNS, "-bad-.example", false},
		{externalDNS, "Upper.Example", false},
		{hostname, "n1.", false},
		{internalIP, "fd00:0:0:0:0:0:0:1", false},
		{internalIP, "FD00::1", false},
		{externalIP, "::ffff:192.0.2.1", false},
		{hostname, "n1", true},
		{internalDNS, "n1.internal.example", true},
		{internalIP, "fd00::1", true},
		{externalIP, "192.0.2.1", true},
	}
	for _, c := range cases {
		v := CheckNodeAddress("a", &pb.NodeAddress{Type: c.typ, Address: c.address})
		if c.ok && v != nil {
			t.Errorf("%v %q: %v", c.typ, c.address, v)
		}
		if !c.ok && (v == nil || v.Field != "a.address") {
			t.Errorf("%v %q: got %v", c.typ, c.address, v)
		}
	}
	for _, bad := range []string{"2001:DB8::1", "2001:db8:0:0:0:0:0:1", "2001:db8::0:1"} {
		s := &pb.LoadBalancerStatus{Ingress: []*pb.LoadBalancerIngress{{Ip: bad}}}
		v := CheckLoadBalancerStatus("s", s)
		if v == nil || v.Field != "s.ingress[0].ip" || !strings.Contains(v.Problem, "canonical") {
			t.Errorf("%q: got %v", bad, v)
		}
	}
	s := serviceFixture()
	s.LoadBalancerIp = "::ffff:1.2.3.4"
	if v := CheckService("service", s); v == nil || v.Field != "service.load_balancer_ip" || !strings.Contains(v.Problem, "IPv4-mapped") {
		t.Errorf("got %v", v)
	}
}
