package adapter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// testLB answers from fixed values and records what it got. err is every
// call's error; updateErr, when set, is UpdateLoadBalancer's instead.
type testLB struct {
	status    *corev1.LoadBalancerStatus
	exists    bool
	name      string
	err       error
	updateErr error
	calls     int
	updates   int
	svc       *corev1.Service
	nodes     []*corev1.Node
}

func (l *testLB) GetLoadBalancer(_ context.Context, _ string, s *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	l.calls++
	l.svc = s
	return l.status, l.exists, l.err
}

func (l *testLB) GetLoadBalancerName(_ context.Context, _ string, s *corev1.Service) string {
	l.svc = s
	return l.name
}

func (l *testLB) EnsureLoadBalancer(_ context.Context, _ string, s *corev1.Service, n []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	l.calls++
	l.svc, l.nodes = s, n
	return l.status, l.err
}

func (l *testLB) UpdateLoadBalancer(_ context.Context, _ string, s *corev1.Service, n []*corev1.Node) error {
	l.calls++
	l.updates++
	l.svc, l.nodes = s, n
	if l.updateErr != nil {
		return l.updateErr
	}
	return l.err
}

func (l *testLB) EnsureLoadBalancerDeleted(_ context.Context, _ string, s *corev1.Service) error {
	l.calls++
	l.svc = s
	return l.err
}

func service() *pb.Service {
	return &pb.Service{
		Namespace: "default", Name: "web", Uid: "0b7d8a43-3c8e-4d1b-9d55-9e7d2f2c1a11",
		Ports:                 []*pb.ServicePort{{Name: "http", Protocol: pb.Protocol_PROTOCOL_TCP, Port: 80, NodePort: 30080}},
		ExternalTrafficPolicy: pb.TrafficPolicy_TRAFFIC_POLICY_CLUSTER,
		SessionAffinity:       pb.SessionAffinity_SESSION_AFFINITY_NONE,
	}
}

var vip = corev1.LoadBalancerIPModeVIP

func TestEnsureLoadBalancer(t *testing.T) {
	ok := &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{
		IP: "192.0.2.10", IPMode: &vip, Ports: []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP}},
	}}}
	cases := []struct {
		name     string
		lb       testLB
		status   *pb.LoadBalancerStatus
		elsewere bool
		err      *want
	}{
		{name: "status", lb: testLB{status: ok}, status: &pb.LoadBalancerStatus{Ingress: []*pb.LoadBalancerIngress{{
			Ip: "192.0.2.10", IpMode: pb.IpMode_IP_MODE_VIP, Ports: []*pb.PortStatus{{Port: 80, Protocol: pb.Protocol_PROTOCOL_TCP}},
		}}}},
		{name: "no ingress yet", lb: testLB{status: &corev1.LoadBalancerStatus{}}, status: &pb.LoadBalancerStatus{}},
		{name: "implemented elsewhere", lb: testLB{err: fmt.Errorf("ours: %w", cloudprovider.ImplementedElsewhere)}, elsewere: true},
		{name: "retry error", lb: testLB{err: api.NewRetryError("provisioning", 5*time.Second)},
			err: &want{codes.Unavailable, pb.ErrorReason_ERROR_REASON_RETRY_AFTER, ""}},
		{name: "sdk error", lb: testLB{err: sdk.QuotaExceeded("no more")},
			err: &want{codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED, ""}},
		{name: "sdk error with spec field", lb: testLB{err: sdk.InvalidServiceSpec("spec.ports[0].protocol", "no SCTP")},
			err: &want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_SERVICE_SPEC, "spec.ports[0].protocol"}},
		{name: "plain error", lb: testLB{err: errCloud}, err: &want{code: codes.Unknown}},
		{name: "not implemented", lb: testLB{err: cloudprovider.NotImplemented}, err: &want{code: codes.Unimplemented}},
		{name: "sdk unimplemented", lb: testLB{err: sdk.Unimplemented("no")}, err: &want{code: codes.Unimplemented}},
		{name: "deadline", lb: testLB{err: fmt.Errorf("api: %w", context.DeadlineExceeded)}, err: &want{code: codes.DeadlineExceeded}},
		// A cloud API's own gRPC status is no contract answer: its
		// UNIMPLEMENTED would read as a capability not advertised.
		{name: "cloud API's UNIMPLEMENTED", lb: testLB{err: status.Error(codes.Unimplemented, "unknown method CreateLB")},
			err: &want{code: codes.Unknown}},
		{name: "cloud API's UNIMPLEMENTED wrapped", lb: testLB{err: fmt.Errorf("lb api: %w", status.Error(codes.Unimplemented, "no"))},
			err: &want{code: codes.Unknown}},
		{name: "cloud API's DEADLINE_EXCEEDED", lb: testLB{err: status.Error(codes.DeadlineExceeded, "slow")}, err: &want{code: codes.Unknown}},
		{name: "nil status", lb: testLB{}, err: &want{code: codes.Internal}},
		{name: "invalid ip", lb: testLB{status: &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "<nil>"}}}},
			err: &want{code: codes.Internal}},
		{name: "no ip nor hostname", lb: testLB{status: &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{}}}},
			err: &want{code: codes.Internal}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := loadBalancers{Adapter: newAdapter(t, &testCloud{lb: &c.lb}, Options{})}
			r, err := a.EnsureLoadBalancer(ctx, &pb.EnsureLoadBalancerRequest{
				ClusterName: "c", Service: service(), Nodes: []*pb.NodeRef{nodeRef("n1", ""), nodeRef("n2", "")},
			})
			if c.err != nil {
				checkErr(t, "EnsureLoadBalancer", err, *c.err)
				if c.err.reason == pb.ErrorReason_ERROR_REASON_RETRY_AFTER {
					if d := sdk.FromError(err).RetryDelay; d == nil || *d != 5*time.Second {
						t.Errorf("retry delay %v", d)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.elsewere {
				if r.GetImplementedElsewhere() == nil || r.GetImplementedElsewhere().Message != "ours: implemented by alternate to cloud provider" {
					t.Errorf("got %v", r)
				}
				return
			}
			if !proto.Equal(r.GetStatus(), c.status) {
				t.Errorf("status = %v, want %v", r.GetStatus(), c.status)
			}
			if len(c.lb.nodes) != 2 || c.lb.nodes[1].Name != "n2" {
				t.Errorf("nodes = %v", c.lb.nodes)
			}
		})
	}
}

func TestLoadBalancerRequestsAreValidated(t *testing.T) {
	lb := &testLB{}
	a := loadBalancers{Adapter: newAdapter(t, &testCloud{lb: lb}, Options{})}
	noPorts := service()
	noPorts.Ports = nil
	badNode := []*pb.NodeRef{{Name: "n", Labels: map[string]string{"bad key": ""}}}
	for _, c := range []struct {
		cluster string
		svc     *pb.Service
		nodes   []*pb.NodeRef
		field   string
	}{
		{"", service(), nil, "cluster_name"},
		{"c", nil, nil, "service"},
		{"c", noPorts, nil, "service.ports"},
		{"c", service(), badNode, "nodes[0].labels[bad key]"},
	} {
		_, err := a.EnsureLoadBalancer(ctx, &pb.EnsureLoadBalancerRequest{ClusterName: c.cluster, Service: c.svc, Nodes: c.nodes})
		checkErr(t, "Ensure "+c.field, err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, c.field})
		_, err = a.UpdateLoadBalancer(ctx, &pb.UpdateLoadBalancerRequest{ClusterName: c.cluster, Service: c.svc, Nodes: c.nodes})
		checkErr(t, "Update "+c.field, err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, c.field})
	}
	// Reads and the delete need no ports.
	if _, err := a.EnsureLoadBalancerDeleted(ctx, &pb.EnsureLoadBalancerDeletedRequest{ClusterName: "c", Service: noPorts}); err != nil {
		t.Errorf("delete without ports: %v", err)
	}
	if _, err := a.GetLoadBalancer(ctx, &pb.GetLoadBalancerRequest{ClusterName: "c", Service: noPorts}); err != nil {
		t.Errorf("get without ports: %v", err)
	}
	if lb.calls != 2 {
		t.Errorf("the cloud got %d calls, want 2", lb.calls)
	}
}

func TestMutationsOfACallerThatGaveUpDoNotStart(t *testing.T) {
	lb := &testLB{status: &corev1.LoadBalancerStatus{}}
	a := loadBalancers{Adapter: newAdapter(t, &testCloud{lb: lb}, Options{})}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err := a.EnsureLoadBalancer(gone, &pb.EnsureLoadBalancerRequest{ClusterName: "c", Service: service()})
	checkErr(t, "Ensure", err, want{code: codes.Canceled})
	_, err = a.UpdateLoadBalancer(gone, &pb.UpdateLoadBalancerRequest{ClusterName: "c", Service: service()})
	checkErr(t, "Update", err, want{code: codes.Canceled})
	_, err = a.EnsureLoadBalancerDeleted(gone, &pb.EnsureLoadBalancerDeletedRequest{ClusterName: "c", Service: service()})
	checkErr(t, "Delete", err, want{code: codes.Canceled})
	if lb.calls != 0 {
		t.Errorf("the cloud got %d calls", lb.calls)
	}
}

func TestOtherLoadBalancerCalls(t *testing.T) {
	elsewhere := fmt.Errorf("x: %w", cloudprovider.ImplementedElsewhere)
	// Update: updated, NOT_FOUND when there is nothing to update (never
	// "updated"), or implemented elsewhere, from UpdateLoadBalancer itself
	// or from the GetLoadBalancer before it.
	lb := &testLB{exists: true}
	a := loadBalancers{Adapter: newAdapter(t, &testCloud{lb: lb}, Options{})}
	u, err := a.UpdateLoadBalancer(ctx, &pb.UpdateLoadBalancerRequest{ClusterName: "c", Service: service()})
	if err != nil || u.GetUpdated() == nil || lb.updates != 1 {
		t.Errorf("Update = %v, %v after %d updates", u, err, lb.updates)
	}
	lb = &testLB{}
	a = loadBalancers{Adapter: newAdapter(t, &testCloud{lb: lb}, Options{})}
	_, err = a.UpdateLoadBalancer(ctx, &pb.UpdateLoadBalancerRequest{ClusterName: "c", Service: service()})
	checkErr(t, "Update of a missing load balancer", err, want{code: codes.NotFound})
	if lb.updates != 0 {
		t.Errorf("a missing load balancer got %d updates", lb.updates)
	}
	lb = &testLB{exists: true, updateErr: elsewhere}
	a = loadBalancers{Adapter: newAdapter(t, &testCloud{lb: lb}, Options{})}
	u, err = a.UpdateLoadBalancer(ctx, &pb.UpdateLoadBalancerRequest{ClusterName: "c", Service: service()})
	if err != nil || u.GetImplementedElsewhere().GetMessage() != "x: implemented by alternate to cloud provider" || lb.updates != 1 {
		t.Errorf("Update elsewhere = %v, %v after %d updates", u, err, lb.updates)
	}
	lb = &testLB{exists: true, updateErr: api.NewRetryError("updating", time.Second)}
	a = loadBalancers{Adapter: newAdapter(t, &testCloud{lb: lb}, Options{})}
	_, err = a.UpdateLoadBalancer(ctx, &pb.UpdateLoadBalancerRequest{ClusterName: "c", Service: service()})
	checkErr(t, "Update retry", err, want{codes.Unavailable, pb.ErrorReason_ERROR_REASON_RETRY_AFTER, ""})
	lb = &testLB{err: elsewhere}
	a = loadBalancers{Adapter: newAdapter(t, &testCloud{lb: lb}, Options{})}
	u, err = a.UpdateLoadBalancer(ctx, &pb.UpdateLoadBalancerRequest{ClusterName: "c", Service: service()})
	if err != nil || u.GetImplementedElsewhere() == nil || lb.updates != 0 {
		t.Errorf("Update elsewhere (from Get) = %v, %v after %d updates", u, err, lb.updates)
	}
	// Delete: ImplementedElsewhere is ignored, as upstream does.
	if _, err := a.EnsureLoadBalancerDeleted(ctx, &pb.EnsureLoadBalancerDeletedRequest{ClusterName: "c", Service: service()}); err != nil {
		t.Errorf("Delete elsewhere: %v", err)
	}
	a = loadBalancers{Adapter: newAdapter(t, &testCloud{lb: &testLB{err: api.NewRetryError("deleting", time.Second)}}, Options{})}
	_, err = a.EnsureLoadBalancerDeleted(ctx, &pb.EnsureLoadBalancerDeletedRequest{ClusterName: "c", Service: service()})
	checkErr(t, "Delete retry", err, want{codes.Unavailable, pb.ErrorReason_ERROR_REASON_RETRY_AFTER, ""})
	// Get: existence and status.
	a = loadBalancers{Adapter: newAdapter(t, &testCloud{lb: &testLB{exists: false}}, Options{})}
	g, err := a.GetLoadBalancer(ctx, &pb.GetLoadBalancerRequest{ClusterName: "c", Service: service()})
	if err != nil || g.Existence != pb.LoadBalancerExistence_LOAD_BALANCER_EXISTENCE_NOT_EXISTS || g.Status != nil {
		t.Errorf("Get = %v, %v", g, err)
	}
	st := &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{Hostname: "lb.example.com"}}}
	a = loadBalancers{Adapter: newAdapter(t, &testCloud{lb: &testLB{exists: true, status: st}}, Options{})}
	g, err = a.GetLoadBalancer(ctx, &pb.GetLoadBalancerRequest{ClusterName: "c", Service: service()})
	if err != nil || g.Existence != pb.LoadBalancerExistence_LOAD_BALANCER_EXISTENCE_EXISTS || g.GetStatus().GetIngress()[0].GetHostname() != "lb.example.com" {
		t.Errorf("Get = %v, %v", g, err)
	}
	// Name: non-empty.
	a = loadBalancers{Adapter: newAdapter(t, &testCloud{lb: &testLB{name: ""}}, Options{})}
	_, err = a.GetLoadBalancerName(ctx, &pb.GetLoadBalancerNameRequest{ClusterName: "c", Service: service()})
	checkErr(t, "empty name", err, want{code: codes.Internal})
	a = loadBalancers{Adapter: newAdapter(t, &testCloud{lb: &testLB{name: "a0b7d"}}, Options{})}
	n, err := a.GetLoadBalancerName(ctx, &pb.GetLoadBalancerNameRequest{ClusterName: "c", Service: service()})
	if err != nil || n.Name != "a0b7d" {
		t.Errorf("name = %v, %v", n, err)
	}
	_, err = a.ListLoadBalancers(ctx, &pb.ListLoadBalancersRequest{ClusterName: "c"})
	checkErr(t, "list", err, want{code: codes.Unimplemented})
}
