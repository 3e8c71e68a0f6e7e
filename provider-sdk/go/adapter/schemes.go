package adapter

import (
	"fmt"
	"slices"

	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// ownSchemes adds the cloud's further providerID schemes
// (Options.ExtraProviderIDSchemes) to the identity: a cloud with several
// kinds of instance (hcloud's servers and hrobot's dedicated machines)
// answers for a Node of each, and the controller is told all of them
// (GetProviderInfo.provider_id_schemes, contract 1.2.0). The default scheme
// listed again is no error.
func (a *Adapter) ownSchemes(extra []string) error {
	if len(extra) == 0 {
		return nil
	}
	schemes := []string{a.info.GetProviderIdScheme()}
	for _, s := range extra {
		if s != schemes[0] {
			schemes = append(schemes, s)
		}
	}
	a.info.ProviderIdSchemes = slices.Clip(schemes)
	if v := sdk.CheckProviderIDSchemes(a.info); v != nil {
		return fmt.Errorf("adapter: Options.ExtraProviderIDSchemes %q: %v", extra, v)
	}
	return nil
}
