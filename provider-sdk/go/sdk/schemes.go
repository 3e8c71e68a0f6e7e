package sdk

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

const (
	// MaxProviderIDSchemes is the most providerID schemes one provider may
	// own (GetProviderInfo.provider_id_schemes, contract 1.2.0).
	MaxProviderIDSchemes = 16
	// MaxNodeWarnings is the most warnings about a Node one InstanceMetadata
	// answer may carry (contract 1.2.0); the controller publishes no more.
	MaxNodeWarnings = 16
	// MaxWarningReasonBytes is the longest Event reason the API server takes.
	MaxWarningReasonBytes = 128
)

// CheckScheme checks a providerID scheme: the part before "://", so not
// empty, without ':', '/' or whitespace.
func CheckScheme(field, v string) *Violation {
	if x := CheckName(field, v); x != nil {
		return x
	}
	if strings.ContainsAny(v, ":/") || strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return violation(field, "%q is not a providerID scheme (the part before \"://\")", v)
	}
	return nil
}

// CheckProviderIDSchemes checks GetProviderInfo.provider_id_schemes: empty,
// or valid schemes, none twice, at most MaxProviderIDSchemes, with
// provider_id_scheme among them.
func CheckProviderIDSchemes(info *pb.GetProviderInfoResponse) *Violation {
	schemes := info.GetProviderIdSchemes()
	if len(schemes) == 0 {
		return nil
	}
	if v := checkList("provider_id_schemes", schemes, MaxProviderIDSchemes, CheckScheme); v != nil {
		return v
	}
	if !slices.Contains(schemes, info.GetProviderIdScheme()) {
		return violation("provider_id_schemes", "does not contain provider_id_scheme %q", info.GetProviderIdScheme())
	}
	return nil
}

// OwnedSchemes are the providerID schemes a provider owns by its identity:
// provider_id_schemes, or provider_id_scheme alone.
func OwnedSchemes(info *pb.GetProviderInfoResponse) []string {
	if s := info.GetProviderIdSchemes(); len(s) > 0 {
		return s
	}
	return []string{info.GetProviderIdScheme()}
}

// OwnsProviderID reports whether id is "<scheme>://<id>" with a scheme the
// provider owns: a Node with any other providerID is not its to judge.
func OwnsProviderID(info *pb.GetProviderInfoResponse, id string) bool {
	scheme, rest, ok := strings.Cut(id, "://")
	return ok && rest != "" && slices.Contains(OwnedSchemes(info), scheme)
}

// ForeignProviderID is the answer to a request about a Node whose
// providerID the provider does not own (INVALID_ARGUMENT, field
// node.provider_id): never NOT_EXISTS, which would make the controller
// delete another cloud's Node.
func ForeignProviderID(info *pb.GetProviderInfoResponse, id string) *Error {
	owned := OwnedSchemes(info)
	quoted := make([]string, len(owned))
	for i, s := range owned {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	what := "scheme"
	if len(owned) > 1 {
		what = "schemes"
	}
	return InvalidRequest("node.provider_id", fmt.Sprintf(
		"%q is not a providerID of this provider (%s %s); it can only answer for its own instances", id, what, strings.Join(quoted, ", ")))
}

// IsWarningReason reports whether reason is what a Warning asks for: an
// ASCII capital, then letters and digits, at most MaxWarningReasonBytes.
func IsWarningReason(reason string) bool {
	if reason == "" || len(reason) > MaxWarningReasonBytes || reason[0] < 'A' || reason[0] > 'Z' {
		return false
	}
	for i := 0; i < len(reason); i++ {
		if !isAlnum(reason[i]) {
			return false
		}
	}
	return true
}

// CheckNodeWarnings checks InstanceMetadataResponse.warnings: at most
// MaxNodeWarnings, each with a CamelCase reason and a message.
func CheckNodeWarnings(field string, warnings []*pb.Warning) *Violation {
	if len(warnings) > MaxNodeWarnings {
		return violation(field, "has %d entries, more than %d", len(warnings), MaxNodeWarnings)
	}
	for i, w := range warnings {
		if !IsWarningReason(w.GetReason()) {
			return violation(fmt.Sprintf("%s[%d].reason", field, i), "%q is not a CamelCase reason of at most %d characters", w.GetReason(), MaxWarningReasonBytes)
		}
		if w.GetMessage() == "" {
			return violation(fmt.Sprintf("%s[%d].message", field, i), "is required")
		}
	}
	return nil
}
