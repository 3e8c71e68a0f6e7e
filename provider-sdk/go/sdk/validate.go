package sdk

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"unicode"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

// Limits of the contract (types.proto), as Kubernetes' own.
const (
	MaxNameBytes        = 253
	MaxAnnotationsBytes = 256 * 1024
	MaxLabelValueBytes  = 63
	MaxLabelKeyBytes    = 253 + 1 + 63
)

// Violation is a contract violation: which field, and what is wrong.
type Violation struct {
	Field   string
	Problem string
}

func (v *Violation) Error() string { return v.Field + ": " + v.Problem }

// Invalid is the answer to a request with this violation: INVALID_ARGUMENT
// / INVALID_REQUEST naming the field.
func (v *Violation) Invalid() *Error { return InvalidRequest(v.Field, v.Problem) }

// BadAnswer is the answer when a provider's own answer has this violation:
// INTERNAL, as a provider bug must not reach the controller as a valid
// answer. what says which answer, for example "an invalid InstanceMetadata".
func (v *Violation) BadAnswer(what string) *Error {
	return Internal(fmt.Sprintf("provider answered %s: %v", what, v))
}

func violation(field, format string, args ...any) *Violation {
	return &Violation{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// CheckName checks a REQUIRED name: non-empty, at most MaxNameBytes.
func CheckName(field, v string) *Violation {
	if v == "" {
		return violation(field, "is required")
	}
	if len(v) > MaxNameBytes {
		return violation(field, "is %d bytes, more than %d", len(v), MaxNameBytes)
	}
	return nil
}

// CheckIP checks an IP address in its canonical text (RFC 5952 for IPv6),
// the form the contract sends and compares: "2001:DB8::1" and
// "2001:db8:0:0:0:0:0:1" are refused naming the canonical form, and an
// IPv4-mapped IPv6 address naming the IPv4 one. As the Rust and Python SDKs.
func CheckIP(field, v string) *Violation {
	a, err := netip.ParseAddr(v)
	if err != nil || a.Zone() != "" {
		return violation(field, "%q is not an IP address", v)
	}
	if a.Is4In6() {
		return violation(field, "%q is an IPv4-mapped IPv6 address; use the IPv4 address", v)
	}
	if canonical := a.String(); canonical != v {
		return violation(field, "%q is not in canonical form; use %q", v, canonical)
	}
	return nil
}

// CheckCIDR checks "address/prefix": an IP address without a zone, and a
// prefix length in decimal digits without a leading zero or a sign, at most
// the address's bit length. Host bits may be set, as the Rust SDK allows.
func CheckCIDR(field, v string) *Violation {
	if _, err := netip.ParsePrefix(v); err != nil {
		return violation(field, "%q is not a CIDR", v)
	}
	return nil
}

// enumName is what generated enums have.
type enumName interface {
	~int32
	String() string
}

func knownEnum[E enumName](field string, v E, names map[int32]string) *Violation {
	if v == 0 {
		return violation(field, "is UNSPECIFIED")
	}
	if _, ok := names[int32(v)]; !ok {
		return violation(field, "unknown enum value %d", int32(v))
	}
	return nil
}

func optionalEnum[E enumName](field string, v E, names map[int32]string) *Violation {
	if _, ok := names[int32(v)]; !ok {
		return violation(field, "unknown enum value %d", int32(v))
	}
	return nil
}

func isLabelName(s string) bool {
	if s == "" || len(s) > 63 || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// IsDNSSubdomain reports whether s is a DNS-1123 subdomain.
func IsDNSSubdomain(s string) bool {
	if s == "" || len(s) > MaxNameBytes {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" || len(part) > 63 || part[0] == '-' || part[len(part)-1] == '-' {
			return false
		}
		for i := 0; i < len(part); i++ {
			if c := part[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// IsDNSLabel reports whether s is a DNS-1123 label of at most 63
// characters (a provider's name, a KEP-5778 platform).
func IsDNSLabel(s string) bool {
	return len(s) <= 63 && IsDNSSubdomain(s) && !strings.Contains(s, ".")
}

// CheckLabelValue checks Kubernetes' label-value syntax (empty allowed).
func CheckLabelValue(field, v string) *Violation {
	if len(v) > MaxLabelValueBytes {
		return violation(field, "label value is %d bytes, more than %d", len(v), MaxLabelValueBytes)
	}
	if v != "" && !isLabelName(v) {
		return violation(field, "%q is not a valid label value", v)
	}
	return nil
}

// CheckLabelKey checks Kubernetes' label-key syntax: an optional
// DNS-subdomain prefix and "/", then a name of at most 63 characters.
func CheckLabelKey(field, k string) *Violation {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name = k
	}
	if len(k) > MaxLabelKeyBytes || !isLabelName(name) || hasPrefix && !IsDNSSubdomain(prefix) {
		return violation(field, "%q is not a valid label key", k)
	}
	return nil
}

// CheckLabels checks every key and value; the field of a violation is
// "<field>[<key>]". Keys are checked in sorted order, so the answer is
// stable.
func CheckLabels(field string, labels map[string]string) *Violation {
	for _, k := range sortedKeys(labels) {
		f := field + "[" + k + "]"
		if v := CheckLabelKey(f, k); v != nil {
			return v
		}
		if v := CheckLabelValue(f, labels[k]); v != nil {
			return v
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// CheckAnnotations checks that keys are non-empty and the total size is
// within MaxAnnotationsBytes.
func CheckAnnotations(field string, annotations map[string]string) *Violation {
	total := 0
	for k, v := range annotations {
		if k == "" {
			return violation(field, "annotation key is empty")
		}
		total += len(k) + len(v)
	}
	if total > MaxAnnotationsBytes {
		return violation(field, "annotations total %d bytes, more than %d", total, MaxAnnotationsBytes)
	}
	return nil
}

// CheckProviderID checks "<scheme>://<id>" without whitespace.
func CheckProviderID(field, v string) *Violation {
	if x := CheckName(field, v); x != nil {
		return x
	}
	scheme, id, ok := strings.Cut(v, "://")
	if !ok || scheme == "" || id == "" || strings.IndexFunc(v, unicode.IsSpace) >= 0 {
		return violation(field, "%q is not of the form <scheme>://<id>", v)
	}
	return nil
}

// CheckNodeAddress checks a known type and an address: a canonical IP for
// the *_IP types, a DNS name (DNS-1123 subdomain) for the others.
func CheckNodeAddress(field string, a *pb.NodeAddress) *Violation {
	if v := knownEnum(field+".type", a.GetType(), pb.NodeAddressType_name); v != nil {
		return v
	}
	if a.GetAddress() == "" {
		return violation(field+".address", "is required")
	}
	switch a.GetType() {
	case pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP, pb.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_IP:
		return CheckIP(field+".address", a.GetAddress())
	}
	if !IsDNSSubdomain(a.GetAddress()) {
		return violation(field+".address", "%q is not a DNS name", a.GetAddress())
	}
	return nil
}

// CheckNodeAddresses checks each address, "<field>[<i>]".
func CheckNodeAddresses(field string, addresses []*pb.NodeAddress) *Violation {
	for i, a := range addresses {
		if v := CheckNodeAddress(fmt.Sprintf("%s[%d]", field, i), a); v != nil {
			return v
		}
	}
	return nil
}

// CheckNodeRef checks a REQUIRED NodeRef.
func CheckNodeRef(field string, n *pb.NodeRef) *Violation {
	if n == nil {
		return violation(field, "is required")
	}
	if v := CheckName(field+".name", n.GetName()); v != nil {
		return v
	}
	if v := CheckNodeAddresses(field+".addresses", n.GetAddresses()); v != nil {
		return v
	}
	if v := CheckLabels(field+".labels", n.GetLabels()); v != nil {
		return v
	}
	return CheckAnnotations(field+".annotations", n.GetAnnotations())
}

// CheckNodeRefs checks each node, "<field>[<i>]".
func CheckNodeRefs(field string, nodes []*pb.NodeRef) *Violation {
	for i, n := range nodes {
		if v := CheckNodeRef(fmt.Sprintf("%s[%d]", field, i), n); v != nil {
			return v
		}
	}
	return nil
}

// CheckLoadBalancerStatus checks ingress points as the apiserver accepts
// them in a Service's status (the controller writes the status as it is):
// an IP or a hostname each; a canonical IP (never IPv4-mapped); a hostname that is a DNS
// name and no IP address; ip_mode only with an IP; known enums.
func CheckLoadBalancerStatus(field string, s *pb.LoadBalancerStatus) *Violation {
	for i, ing := range s.GetIngress() {
		f := fmt.Sprintf("%s.ingress[%d]", field, i)
		if ing.GetIp() == "" && ing.GetHostname() == "" {
			return violation(f, "neither ip nor hostname is set")
		}
		if ip := ing.GetIp(); ip != "" {
			if v := CheckIP(f+".ip", ip); v != nil {
				return v
			}
		}
		if h := ing.GetHostname(); h != "" {
			if !IsDNSSubdomain(h) {
				return violation(f+".hostname", "%q is not a DNS name", h)
			}
			if looksLikeIP(h) {
				return violation(f+".hostname", "%q is an IP address; use ip", h)
			}
		}
		if v := optionalEnum(f+".ip_mode", ing.GetIpMode(), pb.IpMode_name); v != nil {
			return v
		}
		if ing.GetIpMode() != 0 && ing.GetIp() == "" {
			return violation(f+".ip_mode", "is set without ip (Kubernetes allows ipMode only with an ip)")
		}
		for j, p := range ing.GetPorts() {
			if v := knownEnum(fmt.Sprintf("%s.ports[%d].protocol", f, j), p.GetProtocol(), pb.Protocol_name); v != nil {
				return v
			}
		}
	}
	return nil
}

// looksLikeIP reports whether the apiserver reads s as an IP address (Go's
// netutils.ParseIPSloppy), which also takes IPv4 octets with leading zeros
// that netip refuses: "010.0.0.1" is no hostname.
func looksLikeIP(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	octets := strings.Split(s, ".")
	if len(octets) != 4 {
		return false
	}
	for _, o := range octets {
		if len(o) < 1 || len(o) > 3 || strings.Trim(o, "0123456789") != "" {
			return false
		}
		if n, _ := strconv.Atoi(o); n > 255 {
			return false
		}
	}
	return true
}

// CheckServiceRef checks a REQUIRED Service as the reads and the delete
// need it: its identity, and any ports well-formed, but none required (a
// Service whose ports were dropped must still lose its load balancer).
func CheckServiceRef(field string, s *pb.Service) *Violation {
	if s == nil {
		return violation(field, "is required")
	}
	return checkServiceFields(field, s)
}

// CheckService checks a REQUIRED Service as EnsureLoadBalancer and
// UpdateLoadBalancer need it: at least one port.
func CheckService(field string, s *pb.Service) *Violation {
	if v := CheckServiceRef(field, s); v != nil {
		return v
	}
	if len(s.GetPorts()) == 0 {
		return violation(field+".ports", "at least one port is required")
	}
	return nil
}

func checkServiceFields(field string, s *pb.Service) *Violation {
	if v := CheckName(field+".namespace", s.GetNamespace()); v != nil {
		return v
	}
	if v := CheckName(field+".name", s.GetName()); v != nil {
		return v
	}
	if v := CheckName(field+".uid", s.GetUid()); v != nil {
		return v
	}
	if v := CheckLabels(field+".labels", s.GetLabels()); v != nil {
		return v
	}
	if v := CheckAnnotations(field+".annotations", s.GetAnnotations()); v != nil {
		return v
	}
	for i, p := range s.GetPorts() {
		f := fmt.Sprintf("%s.ports[%d]", field, i)
		if v := knownEnum(f+".protocol", p.GetProtocol(), pb.Protocol_name); v != nil {
			return v
		}
		if p.GetPort() < 1 || p.GetPort() > 65535 {
			return violation(f+".port", "%d is not 1-65535", p.GetPort())
		}
		if p.GetNodePort() < 0 || p.GetNodePort() > 65535 {
			return violation(f+".node_port", "%d is not 0-65535", p.GetNodePort())
		}
	}
	for i, r := range s.GetLoadBalancerSourceRanges() {
		if v := CheckCIDR(fmt.Sprintf("%s.load_balancer_source_ranges[%d]", field, i), r); v != nil {
			return v
		}
	}
	if v := knownEnum(field+".external_traffic_policy", s.GetExternalTrafficPolicy(), pb.TrafficPolicy_name); v != nil {
		return v
	}
	if v := optionalEnum(field+".internal_traffic_policy", s.GetInternalTrafficPolicy(), pb.TrafficPolicy_name); v != nil {
		return v
	}
	if v := knownEnum(field+".session_affinity", s.GetSessionAffinity(), pb.SessionAffinity_name); v != nil {
		return v
	}
	for i, f := range s.GetIpFamilies() {
		if v := knownEnum(fmt.Sprintf("%s.ip_families[%d]", field, i), f, pb.IpFamily_name); v != nil {
			return v
		}
	}
	if v := optionalEnum(field+".ip_family_policy", s.GetIpFamilyPolicy(), pb.IpFamilyPolicy_name); v != nil {
		return v
	}
	if s.GetLoadBalancerIp() != "" {
		if v := CheckIP(field+".load_balancer_ip", s.GetLoadBalancerIp()); v != nil {
			return v
		}
	}
	for i, c := range s.GetClusterIps() {
		if c == "None" {
			continue
		}
		if v := CheckIP(fmt.Sprintf("%s.cluster_ips[%d]", field, i), c); v != nil {
			return v
		}
	}
	if s.GetStatus() != nil {
		return CheckLoadBalancerStatus(field+".status", s.GetStatus())
	}
	return nil
}

// CheckVolume checks a REQUIRED Volume.
func CheckVolume(field string, v *pb.Volume) *Violation {
	if v == nil {
		return violation(field, "is required")
	}
	if x := CheckName(field+".name", v.GetName()); x != nil {
		return x
	}
	if x := CheckName(field+".driver", v.GetDriver()); x != nil {
		return x
	}
	if x := CheckName(field+".volume_id", v.GetVolumeId()); x != nil {
		return x
	}
	return CheckLabels(field+".labels", v.GetLabels())
}

// CheckRoute checks a REQUIRED Route: a CIDR, a target node unless it is a
// blackhole route, well-formed addresses.
func CheckRoute(field string, r *pb.Route) *Violation {
	if r == nil {
		return violation(field, "is required")
	}
	if v := CheckCIDR(field+".destination_cidr", r.GetDestinationCidr()); v != nil {
		return v
	}
	if !r.GetBlackhole() {
		if v := CheckName(field+".target_node", r.GetTargetNode()); v != nil {
			return v
		}
	}
	return CheckNodeAddresses(field+".target_node_addresses", r.GetTargetNodeAddresses())
}

// CheckInstanceMetadata checks an InstanceMetadata answer: a well-formed
// providerID if any (empty is allowed: only a Node without one needs it,
// which the controller checks), label-safe instance type, zone and region
// (they become labels), parseable addresses, valid extra labels.
func CheckInstanceMetadata(field string, m *pb.InstanceMetadata) *Violation {
	if m.GetProviderId() != "" {
		if v := CheckProviderID(field+".provider_id", m.GetProviderId()); v != nil {
			return v
		}
	}
	if v := CheckLabelValue(field+".instance_type", m.GetInstanceType()); v != nil {
		return v
	}
	if v := CheckLabelValue(field+".zone", m.GetZone()); v != nil {
		return v
	}
	if v := CheckLabelValue(field+".region", m.GetRegion()); v != nil {
		return v
	}
	if v := CheckNodeAddresses(field+".node_addresses", m.GetNodeAddresses()); v != nil {
		return v
	}
	return CheckLabels(field+".additional_labels", m.GetAdditionalLabels())
}
