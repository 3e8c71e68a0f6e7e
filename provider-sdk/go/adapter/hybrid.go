package adapter

import (
	"fmt"
	"slices"

	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// SupportedPlatformer is a cloud that names the platform it manages, as
// KEP-5778 ("explicit node ownership", provisional) proposes for
// cloudprovider.Interface: GetSupportedPlatform. k8s.io/cloud-provider
// v0.36 has no such method yet; a cloud that implements it gets its
// platform added to Options.Platforms. An empty answer adds nothing.
type SupportedPlatformer interface {
	GetSupportedPlatform() string
}

// declareHybrid adds what a controller running several providers routes by
// (contract 1.3.0) to the identity: the load balancer classes the cloud
// serves, whether it declines Services without a class, and its platforms.
// Checked here, so a mistake stops the provider at start naming the option
// rather than making every handshake fail.
func (a *Adapter) declareHybrid(cloud cloudprovider.Interface, opts Options) error {
	a.info.LoadBalancerClasses = slices.Clone(opts.LoadBalancerClasses)
	if v := sdk.CheckLoadBalancerClasses(a.info); v != nil {
		return fmt.Errorf("adapter: Options.LoadBalancerClasses %q: %v", opts.LoadBalancerClasses, v)
	}
	if opts.DeclineUnclassedServices {
		a.info.UnclassedServices = pb.UnclassedServices_UNCLASSED_SERVICES_DECLINED
	}
	a.info.Platforms = slices.Clone(opts.Platforms)
	from := "Options.Platforms"
	if p, ok := cloud.(SupportedPlatformer); ok {
		if own := p.GetSupportedPlatform(); own != "" && !slices.Contains(a.info.Platforms, own) {
			a.info.Platforms = append(a.info.Platforms, own)
			from += fmt.Sprintf(" with the cloud's GetSupportedPlatform() %q", own)
		}
	}
	if v := sdk.CheckPlatforms(a.info); v != nil {
		return fmt.Errorf("adapter: %s %q: %v", from, a.info.Platforms, v)
	}
	return nil
}
