package main

import (
	"context"
	"flag"
	"io"
	"reflect"
	"testing"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccm-rs/ccm-rs/provider-sdk/go/adapter"
)

func TestHybridFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want adapter.Options
		err  bool
	}{
		{nil, adapter.Options{Endpoint: "unix:///var/run/cloud-provider/provider.sock"}, false},
		{[]string{"--endpoint", "unix:///p.sock", "--load-balancer-class", "example.com/cloud", "--load-balancer-class=example.com/nlb",
			"--unclassed-services", "declined", "--platform", "cloud", "--platform", "metal"},
			adapter.Options{Endpoint: "unix:///p.sock", LoadBalancerClasses: []string{"example.com/cloud", "example.com/nlb"},
				DeclineUnclassedServices: true, Platforms: []string{"cloud", "metal"}}, false},
		{[]string{"--unclassed-services", "declined", "--unclassed-services=served"}, adapter.Options{Endpoint: "unix:///var/run/cloud-provider/provider.sock"}, false},
		{[]string{"--unclassed-services", "maybe"}, adapter.Options{}, true},
	} {
		fs := flag.NewFlagSet("go-fake", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		got, err := options(fs, c.args)
		if (err != nil) != c.err || err == nil && !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %+v, %v", c.args, got, err)
		}
	}
	// What the adapter would refuse is refused at start, naming the option.
	fs := flag.NewFlagSet("go-fake", flag.ContinueOnError)
	opts, err := options(fs, []string{"--load-balancer-class", "no-prefix"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adapter.New(&cloud{Cloud: newFake()}, opts); err == nil {
		t.Error("a class without a prefix was accepted")
	}
}

// DeleteRoute is decided by (cluster, CIDR) alone (docs/spec.md §7), where
// fake.Cloud also matches the target node.
func TestDeleteRouteIsDecidedByClusterAndCIDR(t *testing.T) {
	ctx := context.Background()
	c := &cloud{Cloud: newFake()}
	for _, cluster := range []string{"a", "b"} {
		r := &cloudprovider.Route{TargetNode: "conformance-node-1", DestinationCIDR: "10.244.1.0/24"}
		if err := c.CreateRoute(ctx, cluster, "uid-1", r); err != nil {
			t.Fatal(err)
		}
	}
	left := func(cluster string) int {
		t.Helper()
		routes, err := c.ListRoutes(ctx, cluster)
		if err != nil {
			t.Fatal(err)
		}
		return len(routes)
	}
	// As listed when the node is gone: a blackhole without a target.
	if err := c.DeleteRoute(ctx, "a", &cloudprovider.Route{DestinationCIDR: "10.244.1.0/24", Blackhole: true}); err != nil {
		t.Fatal(err)
	}
	if n := left("a"); n != 0 {
		t.Errorf("cluster a: %d routes left after deleting its CIDR", n)
	}
	if n := left("b"); n != 1 {
		t.Errorf("cluster b: %d routes, want its own 1", n)
	}
	// A route already gone or never created: OK, and later calls still work.
	for _, r := range []*cloudprovider.Route{
		{TargetNode: "conformance-node-1", DestinationCIDR: "10.244.1.0/24"},
		{TargetNode: "conformance-node-2", DestinationCIDR: "10.244.9.0/24"},
	} {
		if err := c.DeleteRoute(ctx, "a", r); err != nil {
			t.Errorf("DeleteRoute(%+v): %v", r, err)
		}
	}
	if c.Err != nil {
		t.Errorf("fake.Cloud's sticky error is set: %v", c.Err)
	}
	other := &cloudprovider.Route{TargetNode: "conformance-node-2", DestinationCIDR: "10.244.1.0/24"}
	if err := c.CreateRoute(ctx, "b", "uid-2", other); err == nil {
		t.Error("a CIDR routed to another node was routed again")
	}
}
