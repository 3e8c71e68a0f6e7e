package adapter

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

func apiRetry() error { return api.NewRetryError("later", time.Second) }

func TestCapabilitiesFollowWhatTheCloudSupports(t *testing.T) {
	const (
		inst   = pb.Capability_CAPABILITY_INSTANCES
		batch  = pb.Capability_CAPABILITY_INSTANCES_BATCH
		lbs    = pb.Capability_CAPABILITY_LOAD_BALANCERS
		rts    = pb.Capability_CAPABILITY_ROUTES
		rtAddr = pb.Capability_CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES
		zns    = pb.Capability_CAPABILITY_ZONES
		clus   = pb.Capability_CAPABILITY_CLUSTERS
		vols   = pb.Capability_CAPABILITY_VOLUME_LABELS
	)
	z := &fixedZones{}
	cases := []struct {
		name  string
		cloud cloudprovider.Interface
		opts  Options
		want  []pb.Capability
	}{
		{"nothing", &testCloud{}, Options{}, nil},
		{"InstancesV2 turns Zones off, as upstream", &testCloud{v2: &v2Instances{}, zones: z}, Options{}, []pb.Capability{inst, batch}},
		{"Instances V1 with Zones", &testCloud{v1: v1Cloud(), zones: z}, Options{}, []pb.Capability{inst, batch, zns}},
		{"everything", &labeler{testCloud: &testCloud{v1: v1Cloud(), lb: &testLB{}, routes: &testRoutes{}, zones: z, clusters: &testClusters{}}},
			Options{RoutesTargetNodeAddresses: true}, []pb.Capability{inst, batch, lbs, rts, rtAddr, zns, clus, vols}},
		{"target node addresses only with routes", &testCloud{lb: &testLB{}}, Options{RoutesTargetNodeAddresses: true}, []pb.Capability{lbs}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := newAdapter(t, c.cloud, c.opts).Capabilities()
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("capabilities = %v, want %v", got, c.want)
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	a := newAdapter(t, &testCloud{untagged: true}, Options{AllowUntaggedCloud: true, VendorVersion: "1.2.3", Manifest: map[string]string{"region": "r1"},
		AnnotationPrefixes: []string{"service.beta.example.com/"}, AnnotationKeys: []string{"service.beta.example.com/type"}})
	id := identity{Adapter: a}
	info, _ := id.GetProviderInfo(ctx, &pb.GetProviderInfoRequest{})
	want := &pb.GetProviderInfoResponse{Name: "test", VendorVersion: "1.2.3", ProviderIdScheme: "test", ContractVersion: "1.4.0",
		HasClusterId: proto.Bool(false), Manifest: map[string]string{"region": "r1"}}
	if !proto.Equal(info, want) {
		t.Errorf("info = %v", info)
	}
	caps, _ := id.GetProviderCapabilities(ctx, &pb.GetProviderCapabilitiesRequest{})
	if caps.Annotations.KnownKeys[0] != "service.beta.example.com/type" {
		t.Errorf("capabilities = %v", caps)
	}
	p, _ := id.Probe(ctx, &pb.ProbeRequest{})
	if p.State != pb.ProbeState_PROBE_STATE_READY {
		t.Errorf("probe = %v", p)
	}
	a.opts.Probe = func(context.Context) error { return fmt.Errorf("credentials expired") }
	p, _ = id.Probe(ctx, &pb.ProbeRequest{})
	if p.State != pb.ProbeState_PROBE_STATE_NOT_READY || p.Message != "credentials expired" {
		t.Errorf("probe = %v", p)
	}
	// Defaults: the cloud's name, and a version from the build information.
	info, _ = identity{Adapter: newAdapter(t, &testCloud{}, Options{})}.GetProviderInfo(ctx, &pb.GetProviderInfoRequest{})
	if info.VendorVersion == "" || info.Name != "test" {
		t.Errorf("default info = %v", info)
	}
}

func TestNewRefusesAnInvalidIdentity(t *testing.T) {
	for _, opts := range []Options{{Name: "Not_A_Label"}, {Name: strings.Repeat("a", 64)}, {Name: "a.b"}, {ProviderIDScheme: "aws://"}, {ProviderIDScheme: "a b"}} {
		if _, err := New(&testCloud{}, opts); err == nil {
			t.Errorf("%+v accepted", opts)
		}
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("nil cloud accepted")
	}
}

// tokenLB records the fencing token and request id its calls carried.
type tokenLB struct {
	testLB
	token     sdk.Token
	requestID string
	nodes     int
}

func (l *tokenLB) EnsureLoadBalancer(ctx context.Context, _ string, _ *corev1.Service, n []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	l.token, _ = sdk.FencingToken(ctx)
	l.requestID = sdk.RequestID(ctx)
	l.nodes = len(n)
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}}, nil
}

type initCloud struct {
	*testCloud
	initialized chan struct{}
}

func (c *initCloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {
	close(c.initialized)
}

// The whole way, over the socket: 16 MiB limits, metadata reaching the
// cloud, unadvertised services unimplemented, Initialize called.
func TestServeOverTheSocket(t *testing.T) {
	lb := &tokenLB{}
	cloud := &initCloud{testCloud: &testCloud{lb: lb}, initialized: make(chan struct{})}
	path := filepath.Join(t.TempDir(), "p.sock")
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(sctx, cloud, Options{Endpoint: "unix://" + path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	for i := 0; ; i++ {
		if c, err := net.Dial("unix", path); err == nil {
			_ = c.Close()
			break
		}
		if i > 200 {
			t.Fatal("never served")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-cloud.initialized:
	default:
		t.Error("Initialize not called")
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(sdk.MaxMessageBytes), grpc.MaxCallRecvMsgSize(sdk.MaxMessageBytes)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	nodes := make([]*pb.NodeRef, 5000)
	for i := range nodes {
		n := &pb.NodeRef{Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{}}
		for l := range 10 {
			n.Labels[fmt.Sprintf("example.com/label-%02d-padding-padding-padding", l)] = fmt.Sprintf("%08d-%s", i, strings.Repeat("v", 50))
		}
		nodes[i] = n
	}
	req := &pb.EnsureLoadBalancerRequest{ClusterName: "c", Service: service(), Nodes: nodes}
	if size := proto.Size(req); size <= 4<<20 || size >= sdk.MaxMessageBytes {
		t.Fatalf("request of %d bytes does not test the limit", size)
	}
	callCtx := metadata.AppendToOutgoingContext(context.Background(), sdk.RequestIDMetadata, "r-1", sdk.FencingTokenMetadata, "4:cp-a")
	r, err := pb.NewLoadBalancerServiceClient(conn).EnsureLoadBalancer(callCtx, req)
	if err != nil {
		t.Fatalf("a request over 4 MiB: %v", err)
	}
	if r.GetStatus().GetIngress()[0].GetIp() != "192.0.2.1" || lb.nodes != 5000 || lb.token != (sdk.Token{Term: 4, Holder: "cp-a"}) || lb.requestID != "r-1" {
		t.Errorf("answer %v; the cloud saw %d nodes, token %v, request id %q", r, lb.nodes, lb.token, lb.requestID)
	}
	// A malformed fencing token never reaches the cloud.
	bad := metadata.AppendToOutgoingContext(context.Background(), sdk.FencingTokenMetadata, "x:y")
	_, err = pb.NewLoadBalancerServiceClient(conn).EnsureLoadBalancer(bad, &pb.EnsureLoadBalancerRequest{ClusterName: "c", Service: service()})
	if e := sdk.FromStatus(status.Convert(err)); e.Code != codes.InvalidArgument || e.Violations[0].Field != "metadata[x-ccm-fencing-token]" {
		t.Errorf("malformed token: %v", err)
	}
	_, err = pb.NewInstancesServiceClient(conn).InstanceExists(context.Background(), &pb.InstanceExistsRequest{Node: nodeRef("n", "")})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unadvertised InstancesService: %v", err)
	}
	_, err = pb.NewLoadBalancerServiceClient(conn).ListLoadBalancers(context.Background(), &pb.ListLoadBalancersRequest{ClusterName: "c"})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("ListLoadBalancers: %v", err)
	}
	caps, err := pb.NewIdentityServiceClient(conn).GetProviderCapabilities(context.Background(), &pb.GetProviderCapabilitiesRequest{})
	if err != nil || !reflect.DeepEqual(caps.Capabilities, []pb.Capability{pb.Capability_CAPABILITY_LOAD_BALANCERS}) {
		t.Errorf("capabilities = %v, %v", caps, err)
	}
}

// orderCloud records the order of the adapter's calls into the cloud.
type orderCloud struct {
	*testCloud
	calls []string
	stop  <-chan struct{}
}

func (c *orderCloud) Initialize(_ cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	c.calls = append(c.calls, "Initialize")
	c.stop = stop
}

func (c *orderCloud) InstancesV2() (cloudprovider.InstancesV2, bool) {
	c.calls = append(c.calls, "InstancesV2")
	return c.testCloud.InstancesV2()
}

func (c *orderCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	c.calls = append(c.calls, "LoadBalancer")
	return c.testCloud.LoadBalancer()
}

// Upstream's cloud-controller-manager calls Initialize before it asks the
// cloud for any interface (app/controllermanager.go); real clouds (hcloud)
// keep what Initialize gave them (an event recorder, clients) in the
// interfaces they return, so asking first hands out half-made ones.
func TestInitializeComesBeforeTheCloudsInterfaces(t *testing.T) {
	cloud := &orderCloud{testCloud: &testCloud{v2: &v2Instances{}, lb: &testLB{}}}
	a, err := New(cloud, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cloud.calls) == 0 || cloud.calls[0] != "Initialize" {
		t.Fatalf("calls = %v, want Initialize first", cloud.calls)
	}
	if n := strings.Count(strings.Join(cloud.calls, " "), "Initialize"); n != 1 {
		t.Errorf("Initialize called %d times: %v", n, cloud.calls)
	}
	select {
	case <-cloud.stop:
		t.Fatal("the stop channel is closed while the adapter lives")
	default:
	}
	a.Close()
	a.Close()
	select {
	case <-cloud.stop:
	default:
		t.Error("Close did not close the stop channel")
	}
}
