package adapter

import (
	"reflect"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

// platformCloud is a testCloud that names its platform, as KEP-5778's
// GetSupportedPlatform.
type platformCloud struct {
	*testCloud
	platform string
}

func (c *platformCloud) GetSupportedPlatform() string { return c.platform }

// Contract 1.3.0: what a controller running several providers routes by
// reaches GetProviderInfo as the options say.
func TestHybridIdentity(t *testing.T) {
	declined := pb.UnclassedServices_UNCLASSED_SERVICES_DECLINED
	unset := pb.UnclassedServices_UNCLASSED_SERVICES_UNSPECIFIED
	for _, c := range []struct {
		name      string
		cloud     cloudprovider.Interface
		opts      Options
		classes   []string
		unclassed pb.UnclassedServices
		platforms []string
	}{
		{"nothing declared: as before 1.3.0", &testCloud{}, Options{}, nil, unset, nil},
		{"a cloud beside an on-premises default",
			&testCloud{}, Options{LoadBalancerClasses: []string{"example.com/cloud", "example.com/nlb"}, DeclineUnclassedServices: true, Platforms: []string{"cloud"}},
			[]string{"example.com/cloud", "example.com/nlb"}, declined, []string{"cloud"}},
		{"the cloud's own platform is added",
			&platformCloud{&testCloud{}, "hetzner"}, Options{Platforms: []string{"cloud"}}, nil, unset, []string{"cloud", "hetzner"}},
		{"the cloud's platform named in the options too is listed once",
			&platformCloud{&testCloud{}, "cloud"}, Options{Platforms: []string{"cloud"}}, nil, unset, []string{"cloud"}},
		{"a cloud without a platform adds none",
			&platformCloud{&testCloud{}, ""}, Options{}, nil, unset, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			info, err := identity{Adapter: newAdapter(t, c.cloud, c.opts)}.GetProviderInfo(ctx, &pb.GetProviderInfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(info.LoadBalancerClasses, c.classes) || info.UnclassedServices != c.unclassed || !reflect.DeepEqual(info.Platforms, c.platforms) {
				t.Errorf("identity: classes %q unclassed %v platforms %q", info.LoadBalancerClasses, info.UnclassedServices, info.Platforms)
			}
			if info.ContractVersion != "1.4.0" {
				t.Errorf("contract version %q", info.ContractVersion)
			}
		})
	}
}

// A mistake stops the adapter at start naming the option, not at every
// handshake.
func TestHybridOptionsAreChecked(t *testing.T) {
	for _, c := range []struct {
		name  string
		cloud cloudprovider.Interface
		opts  Options
		want  string
	}{
		{"a class without a prefix", &testCloud{}, Options{LoadBalancerClasses: []string{"cloud"}}, "Options.LoadBalancerClasses"},
		{"a class twice", &testCloud{}, Options{LoadBalancerClasses: []string{"example.com/a", "example.com/a"}}, "load_balancer_classes[1]"},
		{"too many classes", &testCloud{}, Options{LoadBalancerClasses: func() []string {
			out := make([]string, 33)
			for i := range out {
				out[i] = "example.com/c" + strings.Repeat("x", i)
			}
			return out
		}()}, "more than 32"},
		{"a platform that is no label", &testCloud{}, Options{Platforms: []string{"Cloud"}}, "Options.Platforms"},
		{"a platform twice", &testCloud{}, Options{Platforms: []string{"a", "a"}}, "platforms[1]"},
		{"the cloud's platform is no label", &platformCloud{&testCloud{}, "on prem"}, Options{}, `GetSupportedPlatform() "on prem"`},
	} {
		if _, err := New(c.cloud, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}
