package sdk

import (
	"strings"
	"testing"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

func TestProviderIDSchemes(t *testing.T) {
	many := make([]string, MaxProviderIDSchemes+1)
	for i := range many {
		many[i] = "s" + strings.Repeat("x", i)
	}
	many[0] = "hcloud"
	for _, c := range []struct {
		name    string
		schemes []string
		field   string // "" when valid
	}{
		{"empty means provider_id_scheme alone", nil, ""},
		{"two", []string{"hcloud", "hrobot"}, ""},
		{"the default need not come first", []string{"hrobot", "hcloud"}, ""},
		{"without provider_id_scheme", []string{"hrobot"}, "provider_id_schemes"},
		{"twice", []string{"hcloud", "hrobot", "hrobot"}, "provider_id_schemes[2]"},
		{"not a scheme", []string{"hcloud", "a://b"}, "provider_id_schemes[1]"},
		{"empty entry", []string{"hcloud", ""}, "provider_id_schemes[1]"},
		{"whitespace", []string{"hcloud", "h robot"}, "provider_id_schemes[1]"},
		{"too many", many, "provider_id_schemes"},
	} {
		info := &pb.GetProviderInfoResponse{ProviderIdScheme: "hcloud", ProviderIdSchemes: c.schemes}
		wantViolation(t, c.name, CheckProviderIDSchemes(info), c.field)
	}
}

func TestOwnsProviderID(t *testing.T) {
	one := &pb.GetProviderInfoResponse{ProviderIdScheme: "hcloud"}
	two := &pb.GetProviderInfoResponse{ProviderIdScheme: "hcloud", ProviderIdSchemes: []string{"hcloud", "hrobot"}}
	for _, c := range []struct {
		info *pb.GetProviderInfoResponse
		id   string
		owns bool
	}{
		{one, "hcloud://1", true},
		{one, "hrobot://321", false},
		{two, "hrobot://321", true},
		{two, "hcloud://1", true},
		{two, "hrobot://", false},
		{two, "hrobot:/1", false},
		{two, "hrobotx://1", false},
		{two, "aws:///us-east-1a/i-1", false},
	} {
		if got := OwnsProviderID(c.info, c.id); got != c.owns {
			t.Errorf("OwnsProviderID(%v, %q) = %v", c.info.GetProviderIdSchemes(), c.id, got)
		}
	}
	err := ForeignProviderID(two, "aws://x")
	if len(err.Violations) != 1 || err.Violations[0].Field != "node.provider_id" || !strings.Contains(err.Message, `(schemes "hcloud", "hrobot")`) {
		t.Errorf("ForeignProviderID = %+v", err)
	}
	err = ForeignProviderID(one, "hrobot://321")
	if !strings.Contains(err.Message, `"hrobot://321" is not a providerID of this provider (scheme "hcloud")`) {
		t.Errorf("ForeignProviderID = %+v", err)
	}
}

func TestNodeWarnings(t *testing.T) {
	w := func(reason, message string) *pb.Warning { return &pb.Warning{Reason: reason, Message: message} }
	many := make([]*pb.Warning, MaxNodeWarnings+1)
	for i := range many {
		many[i] = w("Maintenance", "m")
	}
	for _, c := range []struct {
		warnings []*pb.Warning
		field    string
	}{
		{nil, ""},
		{[]*pb.Warning{w("MaintenanceScheduled", "Sunday")}, ""},
		{[]*pb.Warning{w("MaintenanceScheduled", "Sunday"), w("not camel", "x")}, "warnings[1].reason"},
		{[]*pb.Warning{w("", "x")}, "warnings[0].reason"},
		{[]*pb.Warning{w("A"+strings.Repeat("b", MaxWarningReasonBytes), "x")}, "warnings[0].reason"},
		{[]*pb.Warning{w("Maintenance", "")}, "warnings[0].message"},
		{many, "warnings"},
	} {
		v := CheckNodeWarnings("warnings", c.warnings)
		switch {
		case c.field == "" && v != nil:
			t.Errorf("%v: %v", c.warnings, v)
		case c.field != "" && (v == nil || v.Field != c.field):
			t.Errorf("%v: got %v, want a violation of %s", c.warnings, v, c.field)
		}
	}
}
