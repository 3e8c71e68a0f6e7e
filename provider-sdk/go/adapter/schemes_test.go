package adapter

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

// The report of issue 27: hcloud's CCM issues hcloud:// and hrobot://
// (dedicated servers) providerIDs; through the adapter, a Node hrobot://321
// was refused as another cloud's.
func TestExtraProviderIDSchemesReachTheCloud(t *testing.T) {
	v2 := &v2Instances{exists: true}
	cloud := &testCloud{v2: v2}
	a := instances{Adapter: newAdapter(t, cloud, Options{ProviderIDScheme: "hcloud"})}
	_, err := a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: nodeRef("n", "hrobot://321")})
	checkErr(t, "without the option", err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "node.provider_id"})
	if err == nil || !strings.Contains(err.Error(), `"hrobot://321" is not a providerID of this provider (scheme "hcloud")`) {
		t.Errorf("without the option: %v", err)
	}

	a = instances{Adapter: newAdapter(t, cloud, Options{ProviderIDScheme: "hcloud", ExtraProviderIDSchemes: []string{"hrobot"}})}
	for _, id := range []string{"hrobot://321", "hcloud://1"} {
		r, err := a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: nodeRef("n", id)})
		if err != nil || r.Existence != pb.InstanceExistence_INSTANCE_EXISTENCE_EXISTS {
			t.Errorf("%s: %v %v", id, r, err)
		}
		if got := v2.got.Spec.ProviderID; got != id {
			t.Errorf("the cloud saw %q, want %q", got, id)
		}
	}
	_, err = a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: nodeRef("n", "aws:///us-east-1a/i-1")})
	checkErr(t, "another cloud's", err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "node.provider_id"})

	info, err := identity{Adapter: a.Adapter}.GetProviderInfo(ctx, &pb.GetProviderInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.ProviderIdScheme != "hcloud" || !reflect.DeepEqual(info.ProviderIdSchemes, []string{"hcloud", "hrobot"}) {
		t.Errorf("identity: %v", info)
	}
	if info.ContractVersion != "1.4.0" {
		t.Errorf("contract version %q", info.ContractVersion)
	}
}

func TestExtraProviderIDSchemesAreChecked(t *testing.T) {
	for _, extra := range [][]string{{"a://b"}, {""}, {"hrobot", "hrobot"}, {"h robot"}} {
		if _, err := New(&testCloud{}, Options{ExtraProviderIDSchemes: extra}); err == nil || !strings.Contains(err.Error(), "ExtraProviderIDSchemes") {
			t.Errorf("%q: %v", extra, err)
		}
	}
	// The default scheme listed again is no error.
	a := newAdapter(t, &testCloud{}, Options{ExtraProviderIDSchemes: []string{"test", "metal"}})
	if got := a.info.GetProviderIdSchemes(); !reflect.DeepEqual(got, []string{"test", "metal"}) {
		t.Errorf("schemes %q", got)
	}
}
