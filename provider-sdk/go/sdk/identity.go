package sdk

import (
	"fmt"
	"slices"
	"strings"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

const (
	// MaxLoadBalancerClasses is the most spec.loadBalancerClass values one
	// provider may serve (GetProviderInfo.load_balancer_classes, contract
	// 1.3.0).
	MaxLoadBalancerClasses = 32
	// MaxPlatforms is the most KEP-5778 platforms one provider may manage
	// (GetProviderInfo.platforms, contract 1.3.0).
	MaxPlatforms = 16
)

// CheckLoadBalancerClass checks one spec.loadBalancerClass a provider
// serves: a Kubernetes qualified name (a label key) WITH its DNS-subdomain
// prefix, for example "example.com/cloud". Kubernetes reserves unprefixed
// classes for end users.
func CheckLoadBalancerClass(field, v string) *Violation {
	if !strings.Contains(v, "/") || CheckLabelKey(field, v) != nil {
		return violation(field, "%q is not a loadBalancerClass: a DNS-subdomain prefix, \"/\" and a name (for example \"example.com/cloud\")", v)
	}
	return nil
}

// CheckPlatform checks one KEP-5778 platform: a DNS-1123 label of at most
// 63 characters.
func CheckPlatform(field, v string) *Violation {
	if !IsDNSLabel(v) {
		return violation(field, "%q is not a DNS-1123 label of at most 63 characters", v)
	}
	return nil
}

// CheckLoadBalancerClasses checks GetProviderInfo.load_balancer_classes
// (contract 1.3.0): valid classes, none twice, at most
// MaxLoadBalancerClasses.
func CheckLoadBalancerClasses(info *pb.GetProviderInfoResponse) *Violation {
	return checkList("load_balancer_classes", info.GetLoadBalancerClasses(), MaxLoadBalancerClasses, CheckLoadBalancerClass)
}

// CheckPlatforms checks GetProviderInfo.platforms (contract 1.3.0):
// DNS-1123 labels, none twice, at most MaxPlatforms.
func CheckPlatforms(info *pb.GetProviderInfoResponse) *Violation {
	return checkList("platforms", info.GetPlatforms(), MaxPlatforms, CheckPlatform)
}

// CheckUnclassedServices checks GetProviderInfo.unclassed_services
// (contract 1.3.0): UNSPECIFIED, SERVED or DECLINED. A receiver takes an
// unknown value as UNSPECIFIED; a provider declaring 1.3.0 has no other
// value to send.
func CheckUnclassedServices(info *pb.GetProviderInfoResponse) *Violation {
	return optionalEnum("unclassed_services", info.GetUnclassedServices(), pb.UnclassedServices_name)
}

// CheckIdentity checks what GetProviderInfo lists beyond the name and the
// scheme: provider_id_schemes (1.2.0), load_balancer_classes,
// unclassed_services and platforms (1.3.0). A provider checks its identity
// with it once, at start: the lists must be the same on every answer.
func CheckIdentity(info *pb.GetProviderInfoResponse) *Violation {
	for _, check := range []func(*pb.GetProviderInfoResponse) *Violation{
		CheckProviderIDSchemes, CheckLoadBalancerClasses, CheckUnclassedServices, CheckPlatforms,
	} {
		if v := check(info); v != nil {
			return v
		}
	}
	return nil
}

// ServesUnclassed reports whether the provider serves LoadBalancer Services
// without a class when the controller makes it the default: unless it
// DECLINES them (UNSPECIFIED, as every provider before 1.3.0, and an
// unknown value count as SERVED).
func ServesUnclassed(info *pb.GetProviderInfoResponse) bool {
	return info.GetUnclassedServices() != pb.UnclassedServices_UNCLASSED_SERVICES_DECLINED
}

func checkList(field string, values []string, most int, check func(field, v string) *Violation) *Violation {
	if len(values) > most {
		return violation(field, "has %d entries, more than %d", len(values), most)
	}
	for i, v := range values {
		f := fmt.Sprintf("%s[%d]", field, i)
		if x := check(f, v); x != nil {
			return x
		}
		if slices.Contains(values[:i], v) {
			return violation(f, "%q is listed twice", v)
		}
	}
	return nil
}
