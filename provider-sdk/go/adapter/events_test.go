package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// eventCloud makes its event recorders in Initialize from the builder's
// client, as hcloud (core/v1) and newer clouds (events.k8s.io/v1) do, and
// its load balancer emits what emit says.
type eventCloud struct {
	*testCloud
	lb *eventLB
}

type eventLB struct {
	testLB
	recorder    record.EventRecorder
	newRecorder events.EventRecorder
	emit        func(l *eventLB, svc *corev1.Service)
}

func (c *eventCloud) Initialize(cb cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	client := cb.ClientOrDie("events")
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	c.lb.recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "test-ccm"})
	nb := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	nb.StartRecordingToSink(stop)
	c.lb.newRecorder = nb.NewRecorder(scheme.Scheme, "test-ccm")
	go func() {
		<-stop
		b.Shutdown()
		nb.Shutdown()
	}()
}

func (c *eventCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.lb, true }

func (l *eventLB) EnsureLoadBalancer(ctx context.Context, cluster string, s *corev1.Service, n []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	if l.emit != nil {
		l.emit(l, s)
	}
	return l.testLB.EnsureLoadBalancer(ctx, cluster, s, n)
}

// logged records what the adapter logs of the cloud's Events.
type logged struct {
	mu  sync.Mutex
	got []string
}

func (g *logged) log(e cloudEvent, why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.got = append(g.got, e.kind+" "+e.reason+": "+why)
}

func (g *logged) all() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.got, "; ")
}

// eventAdapter is an adapter given a kubeconfig for api, serving an
// eventCloud, with the Events reaching its queue counted.
func eventAdapter(t *testing.T, api *fakeAPI) (*Adapter, *eventLB, *logged, *atomic.Int32) {
	t.Helper()
	t.Setenv("KUBECONFIG", api.kubeconfig)
	lb := &eventLB{testLB: testLB{status: &corev1.LoadBalancerStatus{}, exists: true}}
	a := newAdapter(t, &eventCloud{testCloud: &testCloud{}, lb: lb}, Options{})
	g := &logged{}
	a.events.log = g.log
	return a, lb, g, &a.events.writes
}

// waitFor waits (at most 10 s) until n Event writes reached the adapter.
func waitFor(t *testing.T, received *atomic.Int32, n int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for received.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Events reached the adapter", received.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func svcObject(s *pb.Service) *corev1.Service { return toService(s) }

// The cloud's Events never reach the API server: a Warning about the
// Service is a warning of the response, anything else is logged.
func TestTheCloudsEventsBecomeWarnings(t *testing.T) {
	long := strings.Repeat("é", 600) // 1200 bytes
	other := service()
	other.Name, other.Uid = "other", "uid-other"
	cases := []struct {
		name   string
		emit   func(l *eventLB, svc *corev1.Service)
		writes int32
		want   []*pb.Warning
		logged string
	}{
		{name: "core/v1 Warning about the Service", writes: 1,
			emit: func(l *eventLB, svc *corev1.Service) {
				l.recorder.Event(svc, corev1.EventTypeWarning, "PortIgnored", "port 81: SCTP is not supported")
			},
			want: []*pb.Warning{{Reason: "PortIgnored", Message: "port 81: SCTP is not supported"}}},
		{name: "events.k8s.io/v1 Warning about the Service", writes: 1,
			emit: func(l *eventLB, svc *corev1.Service) {
				l.newRecorder.Eventf(svc, nil, corev1.EventTypeWarning, "HealthCheckIgnored", "Ensure", "health check %d ignored", 8080)
			},
			want: []*pb.Warning{{Reason: "HealthCheckIgnored", Message: "health check 8080 ignored"}}},
		{name: "a Normal Event is no warning", writes: 1,
			emit: func(l *eventLB, svc *corev1.Service) {
				l.recorder.Event(svc, corev1.EventTypeNormal, "Created", "load balancer created")
			}},
		{name: "a Warning about a Node waits for the Node's InstanceMetadata", writes: 1,
			emit: func(l *eventLB, _ *corev1.Service) {
				l.recorder.Event(&corev1.Node{}, corev1.EventTypeWarning, "NodeIgnored", "no server for node")
			}},
		{name: "a Warning about anything else is logged", writes: 1,
			emit: func(l *eventLB, _ *corev1.Service) {
				l.recorder.Event(&corev1.ConfigMap{}, corev1.EventTypeWarning, "ConfigIgnored", "bad config")
			},
			logged: "ConfigMap ConfigIgnored: about a ConfigMap, not a Service or a Node"},
		{name: "a Warning about another Service waits for it", writes: 1,
			emit: func(l *eventLB, _ *corev1.Service) {
				l.recorder.Event(svcObject(other), corev1.EventTypeWarning, "Other", "x")
			}},
		{name: "a repeated Warning (PATCHed by client-go) is one warning", writes: 3,
			emit: func(l *eventLB, svc *corev1.Service) {
				for range 3 {
					l.recorder.Event(svc, corev1.EventTypeWarning, "Retrying", "cloud API slow")
				}
			},
			want: []*pb.Warning{{Reason: "Retrying", Message: "cloud API slow"}}},
		{name: "a long message is cut to 1024 bytes", writes: 1,
			emit: func(l *eventLB, svc *corev1.Service) {
				l.recorder.Event(svc, corev1.EventTypeWarning, "Long", long)
			},
			want: []*pb.Warning{{Reason: "Long", Message: strings.Repeat("é", 512)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api := newFakeAPI(t)
			a, lb, g, received := eventAdapter(t, api)
			lb.emit = func(l *eventLB, svc *corev1.Service) {
				c.emit(l, svc)
				waitFor(t, received, c.writes)
			}
			r, err := loadBalancers{Adapter: a}.EnsureLoadBalancer(ctx, &pb.EnsureLoadBalancerRequest{ClusterName: "c", Service: service()})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := fmt.Sprint(r.GetWarnings()), fmt.Sprint(c.want); got != want {
				t.Errorf("warnings %s, want %s", got, want)
			}
			if got := g.all(); got != c.logged {
				t.Errorf("logged %q, want %q", got, c.logged)
			}
			if got := api.seen(""); strings.Contains(strings.Join(got, " "), "events") {
				t.Errorf("Event writes reached the API server: %v", got)
			}
		})
	}
}

// A Warning the cloud emits about a Node rides on the next InstanceMetadata
// answer about that Node (uid-checked), which the controller publishes as a
// Warning Event on the Node; an answer about another Node does not take it.
func TestTheCloudsWarningsAboutANodeRideOnItsInstanceMetadata(t *testing.T) {
	api := newFakeAPI(t)
	t.Setenv("KUBECONFIG", api.kubeconfig)
	lb := &eventLB{testLB: testLB{status: &corev1.LoadBalancerStatus{}, exists: true}}
	v2 := &v2Instances{md: &cloudprovider.InstanceMetadata{ProviderID: "test://i-1", InstanceType: "m1"}}
	a := newAdapter(t, &eventCloud{testCloud: &testCloud{v2: v2}, lb: lb}, Options{})
	node := &corev1.Node{}
	node.Name, node.UID = "node-1", "uid-n1"
	lb.recorder.Event(node, corev1.EventTypeWarning, "MaintenanceScheduled", "instance i-1 retires on 2026-12-01")
	lb.recorder.Event(node, corev1.EventTypeWarning, "not camel case", "")
	waitFor(t, &a.events.writes, 2)

	ask := func(name, uid string) []*pb.Warning {
		t.Helper()
		r, err := instances{Adapter: a}.InstanceMetadata(ctx, &pb.InstanceMetadataRequest{
			Node: &pb.NodeRef{Name: name, Uid: uid, ProviderId: "test://i-1"}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetWarnings()
	}
	if got := ask("node-2", "uid-n2"); len(got) != 0 {
		t.Errorf("another Node's answer took %v", got)
	}
	if got := ask("node-1", "uid-old"); len(got) != 0 {
		t.Errorf("the answer about an older Node of that name took %v", got)
	}
	got := ask("node-1", "uid-n1")
	want := []*pb.Warning{
		{Reason: "MaintenanceScheduled", Message: "instance i-1 retires on 2026-12-01"},
		{Reason: "ProviderWarning", Message: "not camel case"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("warnings %v, want %v", got, want)
	}
	if v := sdk.CheckNodeWarnings("warnings", got); v != nil {
		t.Errorf("the warnings break the contract: %v", v)
	}
	if again := ask("node-1", "uid-n1"); len(again) != 0 {
		t.Errorf("a warning was answered twice: %v", again)
	}
}

// client-go's broadcaster delivers asynchronously: the grace after the
// call catches what the cloud emitted just before returning; a warning
// arriving later is carried by the next response about the Service.
func TestWarningsOfTheCloudArriveLate(t *testing.T) {
	api := newFakeAPI(t)
	a, lb, _, received := eventAdapter(t, api)
	lbs := loadBalancers{Adapter: a}
	lb.emit = func(l *eventLB, svc *corev1.Service) {
		l.recorder.Event(svc, corev1.EventTypeWarning, "JustBefore", "emitted as the call returned")
	}
	r, err := lbs.EnsureLoadBalancer(ctx, &pb.EnsureLoadBalancerRequest{ClusterName: "c", Service: service()})
	if err != nil || len(r.GetWarnings()) != 1 || r.GetWarnings()[0].GetReason() != "JustBefore" {
		t.Fatalf("Ensure: %v, %v", r, err)
	}
	lb.emit = nil
	lb.recorder.Event(svcObject(service()), corev1.EventTypeWarning, "Late", "after the response")
	waitFor(t, received, 2)
	u, err := lbs.UpdateLoadBalancer(ctx, &pb.UpdateLoadBalancerRequest{ClusterName: "c", Service: service()})
	if err != nil || fmt.Sprint(u.GetWarnings()) != fmt.Sprint([]*pb.Warning{{Reason: "Late", Message: "after the response"}}) {
		t.Fatalf("Update: %v, %v", u, err)
	}
	lb.recorder.Event(svcObject(service()), corev1.EventTypeWarning, "Later", "x")
	waitFor(t, received, 3)
	d, err := lbs.EnsureLoadBalancerDeleted(ctx, &pb.EnsureLoadBalancerDeletedRequest{ClusterName: "c", Service: service()})
	if err != nil || len(d.GetWarnings()) != 1 || d.GetWarnings()[0].GetReason() != "Later" {
		t.Fatalf("Delete: %v, %v", d, err)
	}
}

// The queue is bounded in count, bytes and time, and one response carries
// at most maxWarningsPerAnswer; nothing is lost without a log line.
func TestEventQueueBounds(t *testing.T) {
	warning := func(ns, name string, uid types.UID, i int) cloudEvent {
		return cloudEvent{kind: "Service", namespace: ns, name: name, uid: uid, typ: corev1.EventTypeWarning,
			reason: "R", message: fmt.Sprintf("m%d", i)}
	}
	cases := []struct {
		name   string
		events []cloudEvent
		after  time.Duration // the clock moves before the takes
		takes  []int         // warnings of successive responses about default/web uid-1
		logged int
	}{
		{name: "more than one response carries", events: func() (out []cloudEvent) {
			for i := range 20 {
				out = append(out, warning("default", "web", "uid-1", i))
			}
			return
		}(), takes: []int{16, 4, 0}},
		{name: "more than the queue holds", events: func() (out []cloudEvent) {
			for i := range maxPendingEvents + 44 {
				out = append(out, warning("default", fmt.Sprintf("svc-%d", i), "", i))
			}
			return
		}(), logged: 44},
		{name: "more bytes than the queue holds", events: func() (out []cloudEvent) {
			for i := range 300 {
				e := warning("default", "web", "uid-1", i)
				e.message = fmt.Sprintf("%04d", i) + strings.Repeat("x", 2000)
				out = append(out, e)
			}
			return
		}(), logged: 300 - maxPendingBytes/(1+maxWarningMessageBytes), takes: []int{16}},
		{name: "an older Service of the name", events: []cloudEvent{warning("default", "web", "uid-0", 0)}, takes: []int{0}},
		{name: "never taken: logged when held too long", events: []cloudEvent{warning("default", "web", "uid-1", 0)},
			after: eventHold + time.Second, takes: []int{0}, logged: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := newEventQueue()
			g := &logged{}
			q.log = g.log
			now := time.Unix(1000, 0)
			q.now = func() time.Time { return now }
			for _, e := range c.events {
				e.at = now
				q.add(e)
			}
			if q.bytes > maxPendingBytes || len(q.pending) > maxPendingEvents {
				t.Errorf("%d waiting, %d bytes", len(q.pending), q.bytes)
			}
			now = now.Add(c.after)
			for i, n := range c.takes {
				if got := q.take("Service", "default", "web", "uid-1"); len(got) != n {
					t.Errorf("response %d carried %d warnings, want %d", i, len(got), n)
				}
			}
			if got := len(g.got); got != c.logged {
				t.Errorf("logged %d, want %d: %v", got, c.logged, g.all())
			}
		})
	}
}

// recordingTransport stands for the API server behind the adapter's
// transport.
type recordingTransport struct{ got []string }

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = append(r.got, req.Method+" "+req.URL.Path)
	return response(req, http.StatusOK, []byte(`{}`)), nil
}

// The adapter answers Event writes as the API server would; everything
// else passes.
func TestEventTransport(t *testing.T) {
	event := func(apiVersion string) string {
		if apiVersion == "v1" {
			return `{"apiVersion":"v1","kind":"Event","metadata":{"name":"web.1"},"involvedObject":{"kind":"Service","namespace":"default","name":"web"},"type":"Warning","reason":"R","message":"m","count":1}`
		}
		return `{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"web.2"},"regarding":{"kind":"Service","namespace":"default","name":"web"},"type":"Warning","reason":"R","note":"n","action":"A","eventTime":"2026-01-01T00:00:00.000000Z","reportingController":"c","reportingInstance":"i"}`
	}
	cases := []struct {
		name, method, path, body string
		code                     int
		passed                   bool
		check                    func(t *testing.T, body []byte)
	}{
		{name: "core/v1 create", method: "POST", path: "/api/v1/namespaces/default/events", body: event("v1"), code: 201,
			check: func(t *testing.T, body []byte) {
				var e corev1.Event
				if err := json.Unmarshal(body, &e); err != nil || e.Name != "web.1" || e.Namespace != "default" || e.UID == "" || e.ResourceVersion == "" || e.Kind != "Event" {
					t.Errorf("answer %s: %v", body, err)
				}
			}},
		{name: "behind a path prefix", method: "POST", path: "/k8s/api/v1/namespaces/default/events", body: event("v1"), code: 201},
		{name: "events.k8s.io/v1 create", method: "POST", path: "/apis/events.k8s.io/v1/namespaces/default/events", body: event("events"), code: 201},
		{name: "patch of an Event answered before", method: "PATCH", path: "/api/v1/namespaces/default/events/web.1", body: `{"count":2,"message":"m2"}`, code: 200,
			check: func(t *testing.T, body []byte) {
				var e corev1.Event
				if err := json.Unmarshal(body, &e); err != nil || e.Count != 2 || e.Message != "m2" || e.Reason != "R" {
					t.Errorf("answer %s: %v", body, err)
				}
			}},
		{name: "patch of an unknown Event: 404, so client-go creates it", method: "PATCH", path: "/api/v1/namespaces/default/events/nope", body: `{"count":2}`, code: 404},
		{name: "update", method: "PUT", path: "/api/v1/namespaces/default/events/web.1", body: event("v1"), code: 200},
		{name: "delete", method: "DELETE", path: "/api/v1/namespaces/default/events/web.1", code: 200},
		{name: "not an Event", method: "POST", path: "/api/v1/namespaces/default/events", body: `{"apiVersion":"v1","kind":"Event","count":"x"}`, code: 400},
		{name: "too large", method: "POST", path: "/api/v1/namespaces/default/events", body: strings.Repeat(" ", maxEventBodyBytes+1), code: 413},
		{name: "reads pass", method: "GET", path: "/api/v1/namespaces/default/events", passed: true, code: 200},
		{name: "other writes pass", method: "POST", path: "/api/v1/namespaces/default/configmaps", body: `{}`, passed: true, code: 200},
	}
	q := newEventQueue()
	q.log = (&logged{}).log
	next := &recordingTransport{}
	rt := q.wrap(next)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(next.got)
			req, err := http.NewRequest(c.method, "https://127.0.0.1:6443"+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/strategic-merge-patch+json")
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.code {
				t.Errorf("code %d, want %d: %s", resp.StatusCode, c.code, body)
			}
			if passed := len(next.got) > before; passed != c.passed {
				t.Errorf("passed to the API server: %v", passed)
			}
			if !c.passed {
				var meta struct{ Kind string }
				if err := json.Unmarshal(body, &meta); err != nil || meta.Kind == "" {
					t.Errorf("answer %s is not an object of the API: %v", body, err)
				}
			}
			if c.check != nil {
				c.check(t, body)
			}
		})
	}
}
