package adapter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// testRoutes keeps routes by CIDR.
type testRoutes struct {
	routes map[string]*cloudprovider.Route
	err    error
	got    *cloudprovider.Route
	hint   string
	lists  int
}

func (r *testRoutes) ListRoutes(context.Context, string) ([]*cloudprovider.Route, error) {
	r.lists++
	var out []*cloudprovider.Route
	for _, route := range r.routes {
		out = append(out, route)
	}
	return out, r.err
}

func (r *testRoutes) CreateRoute(_ context.Context, _ string, hint string, route *cloudprovider.Route) error {
	r.got, r.hint = route, hint
	return r.err
}

func (r *testRoutes) DeleteRoute(_ context.Context, _ string, route *cloudprovider.Route) error {
	r.got = route
	return r.err
}

func TestListRoutesIsPaginated(t *testing.T) {
	tr := &testRoutes{routes: map[string]*cloudprovider.Route{}}
	for i := range 1200 {
		cidr := fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
		tr.routes[cidr] = &cloudprovider.Route{Name: "r", TargetNode: types.NodeName(fmt.Sprint("n", i)), DestinationCIDR: cidr}
	}
	a := routes{Adapter: newAdapter(t, &testCloud{routes: tr}, Options{})}
	seen := map[string]int{}
	token := ""
	for {
		r, err := a.ListRoutes(ctx, &pb.ListRoutesRequest{ClusterName: "c", PageSize: 100, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Routes) > 100 {
			t.Fatalf("page of %d", len(r.Routes))
		}
		for _, route := range r.Routes {
			seen[route.DestinationCidr]++
		}
		if r.NextPageToken == "" {
			break
		}
		token = r.NextPageToken
	}
	if len(seen) != 1200 {
		t.Errorf("saw %d routes", len(seen))
	}
	for cidr, n := range seen {
		if n != 1 {
			t.Errorf("%s seen %d times", cidr, n)
		}
	}
	// A malformed page request is refused before the cloud lists anything.
	lists := tr.lists
	_, err := a.ListRoutes(ctx, &pb.ListRoutesRequest{ClusterName: "c", PageToken: "bogus"})
	checkErr(t, "bad token", err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "page_token"})
	_, err = a.ListRoutes(ctx, &pb.ListRoutesRequest{ClusterName: "c", PageSize: -1})
	checkErr(t, "negative size", err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "page_size"})
	if tr.lists != lists {
		t.Errorf("the cloud listed routes %d times for malformed page requests", tr.lists-lists)
	}
}

func TestCreateAndDeleteRoute(t *testing.T) {
	tr := &testRoutes{}
	a := routes{Adapter: newAdapter(t, &testCloud{routes: tr}, Options{RoutesTargetNodeAddresses: true})}
	route := &pb.Route{TargetNode: "n1", DestinationCidr: "10.244.1.0/24",
		TargetNodeAddresses: []*pb.NodeAddress{{Type: pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP, Address: "10.0.0.1"}}}
	if _, err := a.CreateRoute(ctx, &pb.CreateRouteRequest{ClusterName: "c", NameHint: "uid-1", Route: route}); err != nil {
		t.Fatal(err)
	}
	if tr.hint != "uid-1" || tr.got.TargetNode != "n1" || tr.got.DestinationCIDR != "10.244.1.0/24" || !tr.got.EnableNodeAddresses ||
		len(tr.got.TargetNodeAddresses) != 1 || tr.got.TargetNodeAddresses[0].Type != corev1.NodeInternalIP {
		t.Errorf("route = %+v", tr.got)
	}
	for _, c := range []struct {
		req   *pb.CreateRouteRequest
		field string
	}{
		{&pb.CreateRouteRequest{ClusterName: "c", NameHint: "h"}, "route"},
		{&pb.CreateRouteRequest{ClusterName: "c", Route: route}, "name_hint"},
		{&pb.CreateRouteRequest{ClusterName: "c", NameHint: "h", Route: &pb.Route{TargetNode: "n", DestinationCidr: "10.0.0.0/33"}}, "route.destination_cidr"},
		{&pb.CreateRouteRequest{ClusterName: "c", NameHint: "h", Route: &pb.Route{DestinationCidr: "10.0.0.0/24", Blackhole: true}}, "route.blackhole"},
	} {
		_, err := a.CreateRoute(ctx, c.req)
		checkErr(t, c.field, err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, c.field})
	}
	tr.err = sdk.ConflictingResource("routed to n2")
	_, err := a.CreateRoute(ctx, &pb.CreateRouteRequest{ClusterName: "c", NameHint: "h", Route: route})
	checkErr(t, "conflict", err, want{codes.AlreadyExists, pb.ErrorReason_ERROR_REASON_CONFLICTING_RESOURCE, ""})
	tr.err = nil
	// A blackhole route as listed can be deleted.
	if _, err := a.DeleteRoute(ctx, &pb.DeleteRouteRequest{ClusterName: "c", Route: &pb.Route{Name: "r1", DestinationCidr: "10.0.0.0/24", Blackhole: true}}); err != nil {
		t.Fatal(err)
	}
	if tr.got.Name != "r1" || !tr.got.Blackhole {
		t.Errorf("deleted %+v", tr.got)
	}
}

func TestZonesAndClusters(t *testing.T) {
	z := &fixedZones{zone: cloudprovider.Zone{FailureDomain: "za", Region: "r"}}
	a := zones{Adapter: newAdapter(t, &testCloud{v1: v1Cloud(), zones: z}, Options{})}
	r, err := a.GetZoneByNodeName(ctx, &pb.GetZoneByNodeNameRequest{NodeName: "n1"})
	if err != nil || r.Zone.FailureDomain != "za" || r.Zone.Region != "r" {
		t.Errorf("by name = %v, %v", r, err)
	}
	_, err = a.GetZoneByProviderId(ctx, &pb.GetZoneByProviderIdRequest{})
	checkErr(t, "empty providerID", err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "provider_id"})
	z.errs = map[string]error{"GetZoneByProviderID": cloudprovider.InstanceNotFound}
	_, err = a.GetZoneByProviderId(ctx, &pb.GetZoneByProviderIdRequest{ProviderId: "test://gone"})
	checkErr(t, "unknown instance", err, want{codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""})
	z.zone.FailureDomain = "bad zone"
	_, err = a.GetZoneByNodeName(ctx, &pb.GetZoneByNodeNameRequest{NodeName: "n1"})
	checkErr(t, "bad zone", err, want{code: codes.Internal})

	c := clusters{Adapter: newAdapter(t, &testCloud{clusters: &testClusters{names: []string{"a"}, master: "10.0.0.1"}}, Options{})}
	l, err := c.ListClusters(ctx, &pb.ListClustersRequest{})
	if err != nil || len(l.ClusterNames) != 1 {
		t.Errorf("ListClusters = %v, %v", l, err)
	}
	m, err := c.Master(ctx, &pb.MasterRequest{ClusterName: "a"})
	if err != nil || m.Address != "10.0.0.1" {
		t.Errorf("Master = %v, %v", m, err)
	}
	_, err = c.Master(ctx, &pb.MasterRequest{ClusterName: "b"})
	checkErr(t, "unlisted cluster", err, want{code: codes.NotFound})
	c = clusters{Adapter: newAdapter(t, &testCloud{clusters: &testClusters{names: []string{"a"}}}, Options{})}
	_, err = c.Master(ctx, &pb.MasterRequest{ClusterName: "a"})
	checkErr(t, "empty address", err, want{code: codes.Internal})
	_, err = c.Master(ctx, &pb.MasterRequest{})
	checkErr(t, "no cluster", err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "cluster_name"})
}

type testClusters struct {
	names  []string
	master string
}

func (c *testClusters) ListClusters(context.Context) ([]string, error) { return c.names, nil }
func (c *testClusters) Master(context.Context, string) (string, error) { return c.master, nil }

func TestVolumeLabels(t *testing.T) {
	l := &labeler{testCloud: &testCloud{}, labels: map[string]string{"topology.kubernetes.io/zone": "za"}}
	a := volumes{Adapter: newAdapter(t, l, Options{})}
	vol := &pb.Volume{Name: "pv", Driver: "kubernetes.io/aws-ebs", VolumeId: "vol-1"}
	r, err := a.GetVolumeLabels(ctx, &pb.GetVolumeLabelsRequest{Volume: vol})
	if err != nil || r.Labels["topology.kubernetes.io/zone"] != "za" || l.got.Spec.AWSElasticBlockStore.VolumeID != "vol-1" {
		t.Errorf("labels = %v, %v", r, err)
	}
	l.labels, l.err = nil, fmt.Errorf("looking: %w", cloudprovider.DiskNotFound)
	r, err = a.GetVolumeLabels(ctx, &pb.GetVolumeLabelsRequest{Volume: vol})
	if err != nil || len(r.Labels) != 0 {
		t.Errorf("unknown disk = %v, %v", r, err)
	}
	l.labels, l.err = map[string]string{"bad key": "x"}, nil
	_, err = a.GetVolumeLabels(ctx, &pb.GetVolumeLabelsRequest{Volume: vol})
	checkErr(t, "bad labels", err, want{code: codes.Internal})
	_, err = a.GetVolumeLabels(ctx, &pb.GetVolumeLabelsRequest{})
	checkErr(t, "no volume", err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "volume"})
}

func TestCloudErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want want
	}{
		{cloudprovider.InstanceNotFound, want{codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""}},
		{fmt.Errorf("vm i-1: %w", cloudprovider.InstanceNotFound), want{codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""}},
		{cloudprovider.NotImplemented, want{code: codes.Unimplemented}},
		{fmt.Errorf("wrapped: %w", apiRetry()), want{codes.Unavailable, pb.ErrorReason_ERROR_REASON_RETRY_AFTER, ""}},
		{context.DeadlineExceeded, want{code: codes.DeadlineExceeded}},
		{context.Canceled, want{code: codes.Canceled}},
		{sdk.CredentialsInvalid("expired"), want{codes.PermissionDenied, pb.ErrorReason_ERROR_REASON_CREDENTIALS_INVALID, ""}},
		{sdk.NotLeader(sdk.Token{Term: 3, Holder: "b"}), want{codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_NOT_LEADER, ""}},
		{cloudprovider.ImplementedElsewhere, want{code: codes.Unknown}},
		{errCloud, want{code: codes.Unknown}},
	} {
		checkErr(t, c.err.Error(), cloudError(c.err), c.want)
	}
	if cloudError(nil) != nil {
		t.Error("cloudError(nil) != nil")
	}
}

// A cloud whose DeleteRoute fails for a route that is already gone, and
// whose CreateRoute fails for a CIDR another route holds (the published AWS
// cloud: InvalidRoute.NotFound, RouteAlreadyExists), answers as the
// contract asks once the adapter is told which errors those are; without
// the options both stay UNKNOWN.
func TestRouteErrorPredicates(t *testing.T) {
	gone := errors.New("api error InvalidRoute.NotFound: no route with destination-cidr-block 10.244.1.0/24")
	taken := errors.New("api error RouteAlreadyExists: The route identified by 10.244.1.0/24 already exists")
	told := Options{
		IsRouteNotFound: func(err error) bool { return strings.Contains(err.Error(), "InvalidRoute.NotFound") },
		IsRouteConflict: func(err error) bool { return strings.Contains(err.Error(), "RouteAlreadyExists") },
	}
	route := &pb.Route{TargetNode: "n1", DestinationCidr: "10.244.1.0/24"}
	cases := []struct {
		name   string
		opts   Options
		err    error
		create *want // nil: OK
		delete *want
	}{
		{name: "not told: gone", err: gone, create: &want{code: codes.Unknown}, delete: &want{code: codes.Unknown}},
		{name: "not told: taken", err: taken, create: &want{code: codes.Unknown}, delete: &want{code: codes.Unknown}},
		{name: "told: a delete of a route already gone succeeds", opts: told, err: gone, create: &want{code: codes.Unknown}},
		{name: "told: a create over another route conflicts", opts: told, err: taken,
			create: &want{code: codes.AlreadyExists, reason: pb.ErrorReason_ERROR_REASON_CONFLICTING_RESOURCE}, delete: &want{code: codes.Unknown}},
		{name: "told: other errors stay UNKNOWN", opts: told, err: errCloud, create: &want{code: codes.Unknown}, delete: &want{code: codes.Unknown}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := routes{Adapter: newAdapter(t, &testCloud{routes: &testRoutes{err: c.err}}, c.opts)}
			_, err := a.CreateRoute(ctx, &pb.CreateRouteRequest{ClusterName: "c", NameHint: "h", Route: route})
			if c.create == nil && err != nil {
				t.Errorf("CreateRoute: %v", err)
			} else if c.create != nil {
				checkErr(t, "CreateRoute", err, *c.create)
			}
			_, err = a.DeleteRoute(ctx, &pb.DeleteRouteRequest{ClusterName: "c", Route: route})
			if c.delete == nil && err != nil {
				t.Errorf("DeleteRoute: %v", err)
			} else if c.delete != nil {
				checkErr(t, "DeleteRoute", err, *c.delete)
			}
		})
	}
}
