package adapter

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

// errServerNotFound is a cloud's own "not found", as hcloud's
// hcloud.ErrorCodeNotFound or a 404 of a cloud API.
var errServerNotFound = errors.New("server 42 not found")

func isServerNotFound(err error) bool { return errors.Is(err, errServerNotFound) }

// Options.IsInstanceNotFound makes a cloud's own not-found errors
// InstanceNotFound: NOT_FOUND / INSTANCE_NOT_FOUND, and NOT_EXISTS where
// upstream takes InstanceNotFound as the answer; without it they are
// UNKNOWN and the Nodes of deleted instances are never removed.
func TestIsInstanceNotFound(t *testing.T) {
	notFound := want{code: codes.NotFound, reason: pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND}
	unknown := want{code: codes.Unknown}
	cases := []struct {
		name      string
		predicate func(error) bool
		call      func(a *Adapter) (any, error)
		want      *want
		answer    string
	}{
		{name: "V1 InstanceID: NOT_EXISTS, as upstream", predicate: isServerNotFound, answer: "INSTANCE_EXISTENCE_NOT_EXISTS",
			call: func(a *Adapter) (any, error) {
				r, err := instances{Adapter: a}.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: nodeRef("gone", "")})
				return r.GetExistence(), err
			}},
		{name: "V1 InstanceID without the predicate: UNKNOWN", want: &unknown,
			call: func(a *Adapter) (any, error) {
				return instances{Adapter: a}.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: nodeRef("gone", "")})
			}},
		{name: "metadata", predicate: isServerNotFound, want: &notFound,
			call: func(a *Adapter) (any, error) {
				return instances{Adapter: a}.InstanceMetadata(ctx, &pb.InstanceMetadataRequest{Node: nodeRef("gone", "test://42")})
			}},
		{name: "metadata without the predicate", want: &unknown,
			call: func(a *Adapter) (any, error) {
				return instances{Adapter: a}.InstanceMetadata(ctx, &pb.InstanceMetadataRequest{Node: nodeRef("gone", "test://42")})
			}},
		{name: "shutdown", predicate: isServerNotFound, want: &notFound,
			call: func(a *Adapter) (any, error) {
				return instances{Adapter: a}.InstanceShutdown(ctx, &pb.InstanceShutdownRequest{Node: nodeRef("gone", "test://42")})
			}},
		{name: "zone by providerID", predicate: isServerNotFound, want: &notFound,
			call: func(a *Adapter) (any, error) {
				return zones{Adapter: a}.GetZoneByProviderId(ctx, &pb.GetZoneByProviderIdRequest{ProviderId: "test://42"})
			}},
		{name: "another error stays UNKNOWN", predicate: func(error) bool { return false }, want: &unknown,
			call: func(a *Adapter) (any, error) {
				return instances{Adapter: a}.InstanceShutdown(ctx, &pb.InstanceShutdownRequest{Node: nodeRef("gone", "test://42")})
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v1 := &v1Instances{ids: map[types.NodeName]string{}, errs: map[string]error{}}
			for _, m := range []string{"InstanceID", "InstanceExistsByProviderID", "InstanceShutdownByProviderID", "NodeAddressesByProviderID",
				"NodeAddresses", "InstanceTypeByProviderID", "InstanceType"} {
				v1.errs[m] = fmt.Errorf("hcloud: %w", errServerNotFound)
			}
			z := &fixedZones{errs: map[string]error{"GetZoneByProviderID": errServerNotFound}}
			a := newAdapter(t, &testCloud{v1: v1, zones: z}, Options{IsInstanceNotFound: c.predicate})
			got, err := c.call(a)
			if c.want != nil {
				checkErr(t, c.name, err, *c.want)
				return
			}
			if err != nil || fmt.Sprint(got) != c.answer {
				t.Errorf("answer %v, %v; want %s", got, err, c.answer)
			}
		})
	}
}

// listLB is a LoadBalancer that can list (adapter.LoadBalancerLister).
type listLB struct {
	testLB
	list []LoadBalancerSummary
	err  error
}

func (l *listLB) ListLoadBalancers(context.Context, string) ([]LoadBalancerSummary, error) {
	return l.list, l.err
}

func summaries(n int) []LoadBalancerSummary {
	out := make([]LoadBalancerSummary, n)
	for i := range out {
		out[i] = LoadBalancerSummary{Name: fmt.Sprintf("lb-%03d", n-i), ServiceUID: types.UID(fmt.Sprintf("uid-%d", i)),
			ServiceNamespace: "default", ServiceName: fmt.Sprintf("svc-%d", i)}
	}
	out[0].Status = &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.7"}}}
	return out
}

// A cloud whose LoadBalancer implements LoadBalancerLister offers
// ListLoadBalancers (paginated, each load balancer once); one that does
// not, does not.
func TestListLoadBalancers(t *testing.T) {
	lbs := pb.Capability_CAPABILITY_LOAD_BALANCERS
	list := pb.Capability_CAPABILITY_LIST_LOAD_BALANCERS
	cases := []struct {
		name     string
		lb       cloudprovider.LoadBalancer
		caps     []pb.Capability
		pageSize int32
		pages    []int
		err      *want
	}{
		{name: "no lister", lb: &testLB{}, caps: []pb.Capability{lbs}, err: &want{code: codes.Unimplemented}},
		{name: "one page", lb: &listLB{list: summaries(3)}, caps: []pb.Capability{lbs, list}, pages: []int{3}},
		{name: "pages", lb: &listLB{list: summaries(5)}, caps: []pb.Capability{lbs, list}, pageSize: 2, pages: []int{2, 2, 1}},
		{name: "empty", lb: &listLB{}, caps: []pb.Capability{lbs, list}, pages: []int{0}},
		{name: "the cloud's error", lb: &listLB{err: errCloud}, caps: []pb.Capability{lbs, list}, err: &want{code: codes.Unknown}},
		{name: "listed twice", lb: &listLB{list: append(summaries(2), summaries(2)[0])}, caps: []pb.Capability{lbs, list}, err: &want{code: codes.Internal}},
		{name: "no service uid", lb: &listLB{list: []LoadBalancerSummary{{Name: "lb"}}}, caps: []pb.Capability{lbs, list}, err: &want{code: codes.Internal}},
		{name: "no name", lb: &listLB{list: []LoadBalancerSummary{{ServiceUID: "u"}}}, caps: []pb.Capability{lbs, list}, err: &want{code: codes.Internal}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newAdapter(t, &testCloud{lb: c.lb}, Options{})
			if got := fmt.Sprint(a.Capabilities()); got != fmt.Sprint(c.caps) {
				t.Errorf("capabilities %s, want %v", got, c.caps)
			}
			token := ""
			seen := map[string]bool{}
			for i := 0; ; i++ {
				r, err := loadBalancers{Adapter: a}.ListLoadBalancers(ctx, &pb.ListLoadBalancersRequest{ClusterName: "c", PageSize: c.pageSize, PageToken: token})
				if c.err != nil {
					checkErr(t, "list", err, *c.err)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if i >= len(c.pages) || len(r.GetLoadBalancers()) != c.pages[i] {
					t.Fatalf("page %d has %d entries, want pages %v", i, len(r.GetLoadBalancers()), c.pages)
				}
				for _, l := range r.GetLoadBalancers() {
					if seen[l.GetName()] || l.GetServiceUid() == "" || l.GetServiceName() == "" {
						t.Errorf("entry %v", l)
					}
					seen[l.GetName()] = true
					if l.GetName() == "lb-005" && l.GetStatus().GetIngress()[0].GetIp() != "192.0.2.7" {
						t.Errorf("status of %v", l)
					}
				}
				if token = r.GetNextPageToken(); token == "" {
					break
				}
			}
			if len(seen) != sum(c.pages) {
				t.Errorf("%d listed, want %d", len(seen), sum(c.pages))
			}
		})
	}
}

func sum(xs []int) (n int) {
	for _, x := range xs {
		n += x
	}
	return
}

// slowLB counts the mutations running at once.
type slowLB struct {
	testLB
	mu        sync.Mutex
	running   int
	most      int
	calls     int
	releaseCh chan struct{}
}

func (l *slowLB) enter(ctx context.Context) {
	l.mu.Lock()
	l.running++
	l.calls++
	l.most = max(l.most, l.running)
	l.mu.Unlock()
	select {
	case <-l.releaseCh:
	case <-ctx.Done():
	}
	l.mu.Lock()
	l.running--
	l.mu.Unlock()
}

func (l *slowLB) EnsureLoadBalancer(ctx context.Context, _ string, _ *corev1.Service, _ []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	l.enter(ctx)
	return &corev1.LoadBalancerStatus{}, nil
}

func (l *slowLB) UpdateLoadBalancer(ctx context.Context, _ string, _ *corev1.Service, _ []*corev1.Node) error {
	l.enter(ctx)
	return nil
}

func (l *slowLB) EnsureLoadBalancerDeleted(ctx context.Context, _ string, _ *corev1.Service) error {
	l.enter(ctx)
	return nil
}

// Load balancer mutations reach the cloud one at a time unless
// Options.LoadBalancerConcurrency allows more (upstream's
// --concurrent-service-syncs default is 1); one waiting for its turn
// honours its deadline and never reaches the cloud.
func TestLoadBalancerMutationsAreSerial(t *testing.T) {
	cases := []struct {
		name        string
		concurrency int
		want        int
	}{
		{name: "default: one at a time", want: 1},
		{name: "four allowed", concurrency: 4, want: 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lb := &slowLB{testLB: testLB{exists: true}, releaseCh: make(chan struct{})}
			a := loadBalancers{Adapter: newAdapter(t, &testCloud{lb: lb}, Options{LoadBalancerConcurrency: c.concurrency})}
			calls := []func(context.Context) error{
				func(ctx context.Context) error {
					_, err := a.EnsureLoadBalancer(ctx, &pb.EnsureLoadBalancerRequest{ClusterName: "c", Service: service()})
					return err
				},
				func(ctx context.Context) error {
					_, err := a.UpdateLoadBalancer(ctx, &pb.UpdateLoadBalancerRequest{ClusterName: "c", Service: service()})
					return err
				},
				func(ctx context.Context) error {
					_, err := a.EnsureLoadBalancerDeleted(ctx, &pb.EnsureLoadBalancerDeletedRequest{ClusterName: "c", Service: service()})
					return err
				},
			}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					errs <- calls[i%len(calls)](ctx)
				}()
			}
			// Let the calls pile up, then release them one by one.
			deadline := time.Now().Add(10 * time.Second)
			for released := 0; released < 8; {
				lb.mu.Lock()
				running := lb.running
				lb.mu.Unlock()
				// More running than allowed: release at once, the count
				// has failed already.
				if running == min(c.want, 8-released) || running > c.want || time.Now().After(deadline) {
					lb.releaseCh <- struct{}{}
					released++
					continue
				}
				time.Sleep(time.Millisecond)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			if lb.most != c.want {
				t.Errorf("at most %d mutations at once, want %d", lb.most, c.want)
			}
		})
	}
	// A call that waits past its deadline is not started.
	lb := &slowLB{testLB: testLB{exists: true}, releaseCh: make(chan struct{})}
	a := loadBalancers{Adapter: newAdapter(t, &testCloud{lb: lb}, Options{})}
	first, cancelFirst := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelFirst()
	go func() {
		_, _ = a.EnsureLoadBalancer(first, &pb.EnsureLoadBalancerRequest{ClusterName: "c", Service: service()})
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		lb.mu.Lock()
		running := lb.running
		lb.mu.Unlock()
		if running == 1 || time.Now().After(deadline) {
			break
		}
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := a.UpdateLoadBalancer(short, &pb.UpdateLoadBalancerRequest{ClusterName: "c", Service: service()})
	checkErr(t, "waiting past the deadline", err, want{code: codes.DeadlineExceeded})
	cancelFirst()
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.calls != 1 {
		t.Errorf("the cloud got %d calls, want 1", lb.calls)
	}
	if _, err := New(&testCloud{}, Options{LoadBalancerConcurrency: -1}); err == nil {
		t.Error("a negative concurrency accepted")
	}
}

// vendor_version: the option, else the module's version, else the VCS
// revision, else "unknown"; never "(devel)".
func TestVendorVersion(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{name: "module version", bi: debug.BuildInfo{Main: debug.Module{Version: "v1.35.0"}}, want: "v1.35.0"},
		{name: "(devel) with a revision", bi: debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "0a1b2c", "vcs.modified", "false")}, want: "0a1b2c"},
		{name: "modified sources", bi: debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "0a1b2c", "vcs.modified", "true")}, want: "0a1b2c-dirty"},
		{name: "nothing known", bi: debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, want: "unknown"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := versionOf(&c.bi); got != c.want {
				t.Errorf("version %q, want %q", got, c.want)
			}
		})
	}
	a := newAdapter(t, &testCloud{}, Options{})
	if v := a.info.GetVendorVersion(); v == "" || v == "(devel)" {
		t.Errorf("vendor_version %q", v)
	}
	if v := newAdapter(t, &testCloud{}, Options{VendorVersion: "2.0.0"}).info.GetVendorVersion(); v != "2.0.0" {
		t.Errorf("vendor_version %q", v)
	}
}

// HasClusterID() false refuses to start, as upstream, unless
// Options.AllowUntaggedCloud (upstream's --allow-untagged-cloud).
func TestUntaggedCloud(t *testing.T) {
	cases := []struct {
		name    string
		cloud   *testCloud
		allow   bool
		wantErr string
	}{
		{name: "tagged", cloud: &testCloud{}},
		{name: "untagged", cloud: &testCloud{untagged: true}, wantErr: "AllowUntaggedCloud"},
		{name: "untagged, allowed", cloud: &testCloud{untagged: true}, allow: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := New(c.cloud, Options{AllowUntaggedCloud: c.allow})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "no ClusterID found") {
					t.Errorf("New: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a.Close()
			if got := a.info.GetHasClusterId(); got == c.cloud.untagged {
				t.Errorf("has_cluster_id %v", got)
			}
		})
	}
}
