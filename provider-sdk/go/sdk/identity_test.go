package sdk

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(prefix, i)
	}
	return out
}

// wantViolation fails the case name unless v is nil (field "") or a
// violation of field.
func wantViolation(t *testing.T, name string, v *Violation, field string) {
	t.Helper()
	switch {
	case field == "" && v != nil:
		t.Errorf("%s: %v", name, v)
	case field != "" && (v == nil || v.Field != field):
		t.Errorf("%s: got %v, want a violation of %s", name, v, field)
	}
}

func TestLoadBalancerClasses(t *testing.T) {
	for _, c := range []struct {
		name    string
		classes []string
		field   string // "" when valid
	}{
		{"none", nil, ""},
		{"one", []string{"example.com/cloud"}, ""},
		{"a name with capitals, dots and underscores", []string{"lb.example.com/Internal_v1.2", "k8s.io/x"}, ""},
		{"the longest", []string{strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "/" + strings.Repeat("c", 63)}, ""},
		{"the most", numbered("example.com/c%d", MaxLoadBalancerClasses), ""},
		{"too many", numbered("example.com/c%d", MaxLoadBalancerClasses+1), "load_balancer_classes"},
		{"without a prefix (reserved for end users)", []string{"example.com/a", "internal-vip"}, "load_balancer_classes[1]"},
		{"an upper-case prefix", []string{"Example.com/cloud"}, "load_balancer_classes[0]"},
		{"an empty name", []string{"example.com/"}, "load_balancer_classes[0]"},
		{"an empty prefix", []string{"/cloud"}, "load_balancer_classes[0]"},
		{"two slashes", []string{"example.com/a/b"}, "load_balancer_classes[0]"},
		{"a name too long", []string{"example.com/" + strings.Repeat("c", 64)}, "load_balancer_classes[0]"},
		{"a name ending in a dash", []string{"example.com/cloud-"}, "load_balancer_classes[0]"},
		{"whitespace", []string{"example.com/a b"}, "load_balancer_classes[0]"},
		{"empty", []string{""}, "load_balancer_classes[0]"},
		{"twice", []string{"example.com/a", "example.com/b", "example.com/a"}, "load_balancer_classes[2]"},
	} {
		wantViolation(t, c.name, CheckLoadBalancerClasses(&pb.GetProviderInfoResponse{LoadBalancerClasses: c.classes}), c.field)
	}
}

func TestPlatforms(t *testing.T) {
	for _, c := range []struct {
		name      string
		platforms []string
		field     string
	}{
		{"none", nil, ""},
		{"two", []string{"cloud", "bare-metal2"}, ""},
		{"the longest", []string{strings.Repeat("p", 63)}, ""},
		{"the most", numbered("p%d", MaxPlatforms), ""},
		{"too many", numbered("p%d", MaxPlatforms+1), "platforms"},
		{"too long", []string{strings.Repeat("p", 64)}, "platforms[0]"},
		{"a dot", []string{"cloud", "a.b"}, "platforms[1]"},
		{"upper case", []string{"Cloud"}, "platforms[0]"},
		{"a leading dash", []string{"-cloud"}, "platforms[0]"},
		{"a slash", []string{"example.com/cloud"}, "platforms[0]"},
		{"empty", []string{""}, "platforms[0]"},
		{"twice", []string{"cloud", "cloud"}, "platforms[1]"},
	} {
		wantViolation(t, c.name, CheckPlatforms(&pb.GetProviderInfoResponse{Platforms: c.platforms}), c.field)
	}
}

func TestUnclassedServices(t *testing.T) {
	for _, c := range []struct {
		value  pb.UnclassedServices
		valid  bool
		serves bool
	}{
		{pb.UnclassedServices_UNCLASSED_SERVICES_UNSPECIFIED, true, true},
		{pb.UnclassedServices_UNCLASSED_SERVICES_SERVED, true, true},
		{pb.UnclassedServices_UNCLASSED_SERVICES_DECLINED, true, false},
		// Not a value of 1.3.0: a provider may not send it, a receiver
		// takes it as UNSPECIFIED.
		{pb.UnclassedServices(7), false, true},
	} {
		info := &pb.GetProviderInfoResponse{UnclassedServices: c.value}
		if v := CheckUnclassedServices(info); (v == nil) != c.valid || v != nil && v.Field != "unclassed_services" {
			t.Errorf("%v: %v", c.value, v)
		}
		if got := ServesUnclassed(info); got != c.serves {
			t.Errorf("ServesUnclassed(%v) = %v", c.value, got)
		}
	}
}

func TestCheckIdentityChecksEveryList(t *testing.T) {
	valid := func() *pb.GetProviderInfoResponse {
		return &pb.GetProviderInfoResponse{ProviderIdScheme: "hcloud", ProviderIdSchemes: []string{"hcloud", "hrobot"},
			LoadBalancerClasses: []string{"example.com/cloud"}, Platforms: []string{"cloud"},
			UnclassedServices: pb.UnclassedServices_UNCLASSED_SERVICES_DECLINED}
	}
	if v := CheckIdentity(valid()); v != nil {
		t.Errorf("valid identity: %v", v)
	}
	for field, breakIt := range map[string]func(*pb.GetProviderInfoResponse){
		"provider_id_schemes[1]":   func(i *pb.GetProviderInfoResponse) { i.ProviderIdSchemes[1] = "a://" },
		"load_balancer_classes[0]": func(i *pb.GetProviderInfoResponse) { i.LoadBalancerClasses[0] = "cloud" },
		"unclassed_services":       func(i *pb.GetProviderInfoResponse) { i.UnclassedServices = 3 },
		"platforms[0]":             func(i *pb.GetProviderInfoResponse) { i.Platforms[0] = "Cloud" },
	} {
		info := valid()
		breakIt(info)
		if v := CheckIdentity(info); v == nil || v.Field != field {
			t.Errorf("%s broken: got %v", field, v)
		}
	}
}
