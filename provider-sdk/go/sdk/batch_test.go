package sdk

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

const (
	qExists   = pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE
	qShutdown = pb.InstanceQuestion_INSTANCE_QUESTION_SHUTDOWN
	qMetadata = pb.InstanceQuestion_INSTANCE_QUESTION_METADATA
)

func query(key, node string, question pb.InstanceQuestion) *pb.InstanceQuery {
	return &pb.InstanceQuery{Key: key, Node: &pb.NodeRef{Name: node, ProviderId: "test://" + node}, Question: question}
}

func TestBatchRequestsAreCheckedNamingTheField(t *testing.T) {
	many := func(n int) []*pb.InstanceQuery {
		qs := make([]*pb.InstanceQuery, n)
		for i := range qs {
			qs[i] = query(fmt.Sprint(i), "n", qExists)
		}
		return qs
	}
	cases := []struct {
		name    string
		queries []*pb.InstanceQuery
		field   string
	}{
		{"one query", many(1), ""},
		{"500 queries", many(500), ""},
		{"no query", nil, "queries"},
		{"501 queries", many(501), "queries"},
		{"empty key", append(many(3), query("", "n", qExists)), "queries[3].key"},
		{"long key", []*pb.InstanceQuery{query(strings.Repeat("k", 254), "n", qExists)}, "queries[0].key"},
		{"253-byte key", []*pb.InstanceQuery{query(strings.Repeat("k", 253), "n", qExists)}, ""},
		{"key twice", append(many(2), query("0", "m", qShutdown)), "queries[2].key"},
		{"question unspecified", append(many(1), query("x", "n", 0)), "queries[1].question"},
		{"question unknown", append(many(1), query("x", "n", 9)), "queries[1].question"},
		// A bad node fails only its query (the single call's check).
		{"node missing", []*pb.InstanceQuery{{Key: "a", Question: qExists}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := CheckBatchInstancesRequest(&pb.BatchInstancesRequest{Queries: c.queries})
			switch {
			case c.field == "" && v != nil:
				t.Errorf("refused: %v", v)
			case c.field != "" && (v == nil || v.Field != c.field):
				t.Errorf("want a violation of %s, got %v", c.field, v)
			}
		})
	}
}

func TestQueryErrorsCarryWhatTheSingleCallWouldSend(t *testing.T) {
	cases := []struct {
		err  error
		want *pb.QueryError
	}{
		{InstanceNotFound("gone"), &pb.QueryError{Code: int32(codes.NotFound), Reason: pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, Message: "gone"}},
		{InvalidRequest("node.provider_id", "not ours"), &pb.QueryError{Code: int32(codes.InvalidArgument),
			Reason: pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, Message: "node.provider_id: not ours", Field: "node.provider_id"}},
		{RetryAfter("later", 1500*time.Millisecond), &pb.QueryError{Code: int32(codes.Unavailable),
			Reason: pb.ErrorReason_ERROR_REASON_RETRY_AFTER, Message: "later", RetryDelayMs: 1500}},
		{CloudUnavailable("slow down", 1500*time.Microsecond), &pb.QueryError{Code: int32(codes.Unavailable),
			Reason: pb.ErrorReason_ERROR_REASON_CLOUD_UNAVAILABLE, Message: "slow down", RetryDelayMs: 2}},
		{fmt.Errorf("wrapped: %w", QuotaExceeded("quota")), &pb.QueryError{Code: int32(codes.ResourceExhausted),
			Reason: pb.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED, Message: "wrapped: quota"}},
		{errors.New("boom"), &pb.QueryError{Code: int32(codes.Unknown), Message: "boom"}},
		{context.DeadlineExceeded, &pb.QueryError{Code: int32(codes.DeadlineExceeded), Message: context.DeadlineExceeded.Error()}},
		{&Error{Code: codes.OK, Message: "odd"}, &pb.QueryError{Code: int32(codes.Internal), Message: "provider answered an error with code OK: odd"}},
	}
	for _, c := range cases {
		if got := QueryErrorOf(c.err); !proto.Equal(got, c.want) {
			t.Errorf("%v: got %v, want %v", c.err, got, c.want)
		}
	}
	if got := QueryErrorOf(Unknown(strings.Repeat("x", 2*MaxErrorTextBytes))); len(got.GetMessage()) > MaxErrorTextBytes {
		t.Errorf("message of %d bytes", len(got.GetMessage()))
	}
}

func exists(key string) *pb.InstanceResult {
	return &pb.InstanceResult{Key: key, Result: &pb.InstanceResult_Existence{Existence: &pb.InstanceExistsResponse{
		Existence: pb.InstanceExistence_INSTANCE_EXISTENCE_EXISTS}}}
}

func metadataResult(key string, md *pb.InstanceMetadata) *pb.InstanceResult {
	return &pb.InstanceResult{Key: key, Result: &pb.InstanceResult_Metadata{Metadata: &pb.InstanceMetadataResponse{Metadata: md}}}
}

func TestSettleKeepsValidResultsAndFailsOnlyTheBadOnes(t *testing.T) {
	queries := []*pb.InstanceQuery{query("a", "a", qExists), query("b", "b", qMetadata)}
	ok := metadataResult("b", &pb.InstanceMetadata{InstanceType: "m5"})
	cases := []struct {
		name    string
		results []*pb.InstanceResult
		// want is, per query, "" for the provider's own result, else a
		// piece of the INTERNAL message.
		want [2]string
	}{
		{"any order", []*pb.InstanceResult{ok, exists("a")}, [2]string{"", ""}},
		{"an error answers any question", []*pb.InstanceResult{ErrorResult("a", InstanceNotFound("gone")), ok}, [2]string{"", ""}},
		{"missing", []*pb.InstanceResult{ok}, [2]string{"no result", ""}},
		{"twice", []*pb.InstanceResult{exists("a"), exists("a"), ok}, [2]string{"2 results", ""}},
		{"unknown keys dropped", []*pb.InstanceResult{exists("a"), ok, exists("c")}, [2]string{"", ""}},
		{"wrong kind", []*pb.InstanceResult{exists("a"), exists("b")}, [2]string{"", "results[1]: is an existence"}},
		{"no result", []*pb.InstanceResult{{Key: "a"}, ok}, [2]string{"neither an answer nor an error", ""}},
		{"unspecified existence", []*pb.InstanceResult{{Key: "a", Result: &pb.InstanceResult_Existence{Existence: &pb.InstanceExistsResponse{}}}, ok},
			[2]string{"results[0].existence.existence: is UNSPECIFIED", ""}},
		{"nil metadata", []*pb.InstanceResult{exists("a"), metadataResult("b", nil)}, [2]string{"", "results[1].metadata.metadata: is required"}},
		{"invalid metadata", []*pb.InstanceResult{exists("a"), metadataResult("b", &pb.InstanceMetadata{Zone: "not a label!"})},
			[2]string{"", "results[1].metadata.metadata.zone"}},
		{"error code OK", []*pb.InstanceResult{{Key: "a", Result: &pb.InstanceResult_Error{Error: &pb.QueryError{}}}, ok},
			[2]string{"results[0].error.code", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := SettleBatch(queries, c.results)
			if len(got) != 2 {
				t.Fatalf("%d results", len(got))
			}
			for i, want := range c.want {
				r := got[i]
				if r.GetKey() != queries[i].GetKey() {
					t.Errorf("result %d has key %q", i, r.GetKey())
				}
				if want == "" {
					if r.GetError() != nil && c.name != "an error answers any question" {
						t.Errorf("%s: %v", r.GetKey(), r.GetError())
					}
					continue
				}
				if e := r.GetError(); e.GetCode() != int32(codes.Internal) || !strings.Contains(e.GetMessage(), want) {
					t.Errorf("%s: got %v, want INTERNAL with %q", r.GetKey(), r.GetResult(), want)
				}
			}
		})
	}
}

// singles answers by node name: "gone" does not exist, "panic" panics,
// "slow" waits for release; it records the most calls at once.
type singles struct {
	pb.UnimplementedInstancesServiceServer
	inFlight, most atomic.Int32
	release        chan struct{}
	calls          atomic.Int32
}

func (s *singles) enter(n *pb.NodeRef) (func(), error) {
	s.calls.Add(1)
	now := s.inFlight.Add(1)
	for m := s.most.Load(); now > m && !s.most.CompareAndSwap(m, now); m = s.most.Load() {
	}
	done := func() { s.inFlight.Add(-1) }
	switch n.GetName() {
	case "panic":
		panic("cloud SDK bug")
	case "slow":
		<-s.release
	case "gone":
		return done, InstanceNotFound("no instance for " + n.GetName())
	case "":
		return done, InvalidRequest("node.name", "is required")
	}
	return done, nil
}

func (s *singles) InstanceExists(_ context.Context, r *pb.InstanceExistsRequest) (*pb.InstanceExistsResponse, error) {
	done, err := s.enter(r.GetNode())
	defer done()
	if err != nil {
		return &pb.InstanceExistsResponse{Existence: pb.InstanceExistence_INSTANCE_EXISTENCE_NOT_EXISTS}, nil
	}
	return &pb.InstanceExistsResponse{Existence: pb.InstanceExistence_INSTANCE_EXISTENCE_EXISTS}, nil
}

func (s *singles) InstanceShutdown(_ context.Context, r *pb.InstanceShutdownRequest) (*pb.InstanceShutdownResponse, error) {
	done, err := s.enter(r.GetNode())
	defer done()
	if err != nil {
		return nil, err
	}
	return &pb.InstanceShutdownResponse{State: pb.InstanceShutdownState_INSTANCE_SHUTDOWN_STATE_RUNNING}, nil
}

func (s *singles) InstanceMetadata(_ context.Context, r *pb.InstanceMetadataRequest) (*pb.InstanceMetadataResponse, error) {
	done, err := s.enter(r.GetNode())
	defer done()
	if err != nil {
		return nil, err
	}
	if r.GetNode().GetName() == "bad" {
		return &pb.InstanceMetadataResponse{Metadata: &pb.InstanceMetadata{NodeAddresses: []*pb.NodeAddress{
			{Type: pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP, Address: "10.0.0"}}}}, nil
	}
	return &pb.InstanceMetadataResponse{Metadata: &pb.InstanceMetadata{ProviderId: r.GetNode().GetProviderId(), InstanceType: "m5"}}, nil
}

func TestFanOutAnswersEachQueryAsItsSingleCallAtMost16AtOnce(t *testing.T) {
	s := &singles{release: make(chan struct{})}
	queries := make([]*pb.InstanceQuery, 0, 40)
	for i := range 40 {
		queries = append(queries, query(fmt.Sprint("slow-", i), "slow", qExists))
	}
	done := make(chan []*pb.InstanceResult)
	go func() { done <- FanOutInstances(context.Background(), s, queries) }()
	deadline := time.After(10 * time.Second)
	for s.inFlight.Load() < BatchConcurrency {
		select {
		case <-deadline:
			t.Fatalf("only %d calls in flight", s.inFlight.Load())
		case <-time.After(time.Millisecond):
		}
	}
	close(s.release)
	results := <-done
	if m := s.most.Load(); m != BatchConcurrency {
		t.Errorf("at most %d calls at once, want %d", m, BatchConcurrency)
	}
	for i, r := range results {
		if r.GetKey() != queries[i].GetKey() || r.GetExistence().GetExistence() != pb.InstanceExistence_INSTANCE_EXISTENCE_EXISTS {
			t.Errorf("result %d: %v", i, r)
		}
	}
}

func TestFanOutFailsOnlyTheFailingQueries(t *testing.T) {
	s := &singles{}
	queries := []*pb.InstanceQuery{
		query("1", "web-1", qExists), query("2", "gone", qExists), query("3", "gone", qMetadata),
		query("4", "panic", qShutdown), query("5", "web-1", qMetadata), query("6", "web-1", qShutdown),
		{Key: "7", Question: qMetadata}, query("8", "bad", qMetadata),
	}
	results := SettleBatch(queries, FanOutInstances(context.Background(), s, queries))
	want := []string{"EXISTS", "NOT_EXISTS", "NotFound INSTANCE_NOT_FOUND", "Internal provider panicked: cloud SDK bug",
		"m5", "RUNNING", "InvalidArgument INVALID_REQUEST node.name", "Internal provider answered an invalid result: results[7].metadata.metadata.node_addresses[0].address"}
	for i, r := range results {
		var got string
		switch {
		case r.GetError() != nil:
			e := r.GetError()
			got = strings.TrimSpace(fmt.Sprint(codes.Code(e.GetCode()), " ", ReasonName(e.GetReason()), " ", e.GetField()))
			if e.GetReason() == 0 {
				got = codes.Code(e.GetCode()).String() + " " + e.GetMessage()
			}
		case r.GetExistence() != nil:
			got = strings.TrimPrefix(r.GetExistence().GetExistence().String(), "INSTANCE_EXISTENCE_")
		case r.GetShutdown() != nil:
			got = strings.TrimPrefix(r.GetShutdown().GetState().String(), "INSTANCE_SHUTDOWN_STATE_")
		case r.GetMetadata() != nil:
			got = r.GetMetadata().GetMetadata().GetInstanceType()
		}
		if !strings.HasPrefix(got, want[i]) || r.GetKey() != queries[i].GetKey() {
			t.Errorf("query %s: got %q (key %q), want %q", queries[i].GetKey(), got, r.GetKey(), want[i])
		}
	}
}

func TestFanOutAfterTheCallerGaveUpStartsNothing(t *testing.T) {
	s := &singles{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	results := FanOutInstances(ctx, s, []*pb.InstanceQuery{query("a", "a", qExists), query("b", "b", qMetadata)})
	for _, r := range results {
		if r.GetError().GetCode() != int32(codes.Canceled) {
			t.Errorf("%s: %v", r.GetKey(), r.GetResult())
		}
	}
	if n := s.calls.Load(); n != 0 {
		t.Errorf("%d single calls", n)
	}
}

// native answers the batch itself, in reverse order, once per call.
type native struct {
	singles
	batches atomic.Int32
	answer  func(*pb.BatchInstancesRequest) (*pb.BatchInstancesResponse, error)
}

func (n *native) BatchInstances(_ context.Context, r *pb.BatchInstancesRequest) (*pb.BatchInstancesResponse, error) {
	n.batches.Add(1)
	return n.answer(r)
}

type capsIdentity struct {
	pb.UnimplementedIdentityServiceServer
	caps []pb.Capability
}

func (c capsIdentity) GetProviderCapabilities(context.Context, *pb.GetProviderCapabilitiesRequest) (*pb.GetProviderCapabilitiesResponse, error) {
	return &pb.GetProviderCapabilitiesResponse{Capabilities: c.caps}, nil
}

func serveInstances(t *testing.T, id pb.IdentityServiceServer, inst pb.InstancesServiceServer) *grpc.ClientConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.sock")
	srv := NewServer(quiet)
	pb.RegisterIdentityServiceServer(srv, id)
	if inst != nil {
		pb.RegisterInstancesServiceServer(srv, inst)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, "unix://"+path, srv, ServeOptions{Logger: quiet}) }()
	waitForSocket(t, path)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); stop(); <-done })
	return conn
}

func TestEveryInstancesServiceServesTheBatchAndAnnouncesIt(t *testing.T) {
	ctx := context.Background()
	s := &singles{}
	conn := serveInstances(t, capsIdentity{caps: []pb.Capability{pb.Capability_CAPABILITY_INSTANCES}}, s)
	caps, err := pb.NewIdentityServiceClient(conn).GetProviderCapabilities(ctx, &pb.GetProviderCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []pb.Capability{pb.Capability_CAPABILITY_INSTANCES, pb.Capability_CAPABILITY_INSTANCES_BATCH}; fmt.Sprint(caps.GetCapabilities()) != fmt.Sprint(want) {
		t.Errorf("capabilities %v, want %v", caps.GetCapabilities(), want)
	}
	c := pb.NewInstancesServiceClient(conn)
	resp, err := c.BatchInstances(ctx, &pb.BatchInstancesRequest{Queries: []*pb.InstanceQuery{
		query("a", "web-1", qMetadata), query("b", "gone", qShutdown),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults(); len(r) != 2 || r[0].GetMetadata().GetMetadata().GetInstanceType() != "m5" ||
		r[1].GetError().GetReason() != pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND {
		t.Errorf("results %v", r)
	}
	_, err = c.BatchInstances(ctx, &pb.BatchInstancesRequest{Queries: []*pb.InstanceQuery{query("a", "x", qExists), query("a", "y", qExists)}})
	if e := FromStatus(status.Convert(err)); e.Reason != pb.ErrorReason_ERROR_REASON_INVALID_REQUEST ||
		len(e.Violations) != 1 || e.Violations[0].Field != "queries[1].key" {
		t.Errorf("a key twice: %v", err)
	}
	if n := s.calls.Load(); n != 2 {
		t.Errorf("%d single calls, want 2 (none for the refused request)", n)
	}
}

func TestProvidersWithoutInstancesAnnounceNoBatch(t *testing.T) {
	conn := serveInstances(t, capsIdentity{caps: []pb.Capability{pb.Capability_CAPABILITY_ROUTES}}, nil)
	caps, err := pb.NewIdentityServiceClient(conn).GetProviderCapabilities(context.Background(), &pb.GetProviderCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 1 {
		t.Errorf("capabilities %v %v", caps.GetCapabilities(), err)
	}
}

func TestANativeBatchAnswersAndIsChecked(t *testing.T) {
	ctx := context.Background()
	n := &native{}
	var mu sync.Mutex
	var got []string
	n.answer = func(r *pb.BatchInstancesRequest) (*pb.BatchInstancesResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		out := &pb.BatchInstancesResponse{}
		for i := len(r.GetQueries()) - 1; i >= 0; i-- {
			q := r.GetQueries()[i]
			got = append(got, q.GetKey())
			if q.GetNode().GetName() == "liar" {
				// the wrong kind: fails this query only
				out.Results = append(out.Results, metadataResult(q.GetKey(), &pb.InstanceMetadata{}))
				continue
			}
			out.Results = append(out.Results, exists(q.GetKey()))
		}
		return out, nil
	}
	conn := serveInstances(t, capsIdentity{caps: []pb.Capability{pb.Capability_CAPABILITY_INSTANCES, pb.Capability_CAPABILITY_INSTANCES_BATCH}}, n)
	caps, err := pb.NewIdentityServiceClient(conn).GetProviderCapabilities(ctx, &pb.GetProviderCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 2 {
		t.Errorf("announced twice? %v %v", caps.GetCapabilities(), err)
	}
	c := pb.NewInstancesServiceClient(conn)
	resp, err := c.BatchInstances(ctx, &pb.BatchInstancesRequest{Queries: []*pb.InstanceQuery{
		query("a", "web-1", qExists), query("b", "liar", qExists), query("c", "web-2", qExists),
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResults()
	if len(r) != 3 || r[0].GetExistence() == nil || r[2].GetExistence() == nil || r[1].GetError().GetCode() != int32(codes.Internal) {
		t.Errorf("results %v", r)
	}
	if n.batches.Load() != 1 || n.calls.Load() != 0 {
		t.Errorf("%d batches and %d single calls, want one batch", n.batches.Load(), n.calls.Load())
	}
	// A whole-call error stays the whole call's.
	n.answer = func(*pb.BatchInstancesRequest) (*pb.BatchInstancesResponse, error) {
		return nil, CloudUnavailable("cloud down", 2*time.Second)
	}
	_, err = c.BatchInstances(ctx, &pb.BatchInstancesRequest{Queries: []*pb.InstanceQuery{query("a", "web-1", qExists)}})
	if e := FromStatus(status.Convert(err)); e.Reason != pb.ErrorReason_ERROR_REASON_CLOUD_UNAVAILABLE || e.RetryDelay == nil || *e.RetryDelay != 2*time.Second {
		t.Errorf("whole-call error: %v", err)
	}
	// A native batch answering UNIMPLEMENTED is served by fan-out.
	n.answer = func(*pb.BatchInstancesRequest) (*pb.BatchInstancesResponse, error) {
		return nil, Unimplemented("not today")
	}
	resp, err = c.BatchInstances(ctx, &pb.BatchInstancesRequest{Queries: []*pb.InstanceQuery{query("a", "gone", qExists)}})
	if err != nil || resp.GetResults()[0].GetExistence().GetExistence() != pb.InstanceExistence_INSTANCE_EXISTENCE_NOT_EXISTS {
		t.Errorf("fan-out after UNIMPLEMENTED: %v %v", resp, err)
	}
}
