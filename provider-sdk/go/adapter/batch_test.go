package adapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// errGone is a cloud's own "no such instance" error, told by
// Options.IsInstanceNotFound.
var errGone = errors.New("server not found")

// tableV2 is an InstancesV2 answering by providerID, safe for the
// fan-out's concurrent calls; it records every node it is asked about.
type tableV2 struct {
	mu    sync.Mutex
	asked []string
}

func (c *tableV2) answer(n *corev1.Node) InstanceAnswer {
	c.mu.Lock()
	c.asked = append(c.asked, n.Spec.ProviderID)
	c.mu.Unlock()
	switch n.Spec.ProviderID {
	case "test://run":
		return InstanceAnswer{Exists: true, Metadata: &cloudprovider.InstanceMetadata{InstanceType: "m5", Zone: "z1",
			NodeAddresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}}
	case "test://off":
		return InstanceAnswer{Exists: true, Shutdown: true, Metadata: &cloudprovider.InstanceMetadata{ProviderID: "test://off"}}
	case "test://gone":
		return InstanceAnswer{Err: errGone}
	case "test://nil":
		return InstanceAnswer{Exists: true}
	case "test://bad":
		return InstanceAnswer{Exists: true, Metadata: &cloudprovider.InstanceMetadata{Zone: "no spaces allowed"}}
	case "test://throttled":
		return InstanceAnswer{Err: sdk.QuotaExceeded("throttled")}
	}
	return InstanceAnswer{Err: errCloud}
}

func (c *tableV2) InstanceExists(_ context.Context, n *corev1.Node) (bool, error) {
	a := c.answer(n)
	return a.Exists, a.Err
}

func (c *tableV2) InstanceShutdown(_ context.Context, n *corev1.Node) (bool, error) {
	a := c.answer(n)
	return a.Shutdown, a.Err
}

func (c *tableV2) InstanceMetadata(_ context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	a := c.answer(n)
	return a.Metadata, a.Err
}

// batchV2 answers the same table in batches, and counts them.
type batchV2 struct {
	tableV2
	batches int
	// override, when set, replaces the table's answers.
	override func([]InstanceQuery) ([]InstanceAnswer, error)
}

func (c *batchV2) InstancesBatch(_ context.Context, queries []InstanceQuery) ([]InstanceAnswer, error) {
	c.batches++
	if c.override != nil {
		return c.override(queries)
	}
	out := make([]InstanceAnswer, len(queries))
	for i, q := range queries {
		out[i] = c.answer(q.Node)
	}
	return out, nil
}

var batchOpts = Options{IsInstanceNotFound: func(err error) bool { return errors.Is(err, errGone) }}

// everyQuery asks every question about every node of the table and a
// foreign and a malformed one.
func everyQuery() []*pb.InstanceQuery {
	var qs []*pb.InstanceQuery
	for _, id := range []string{"test://run", "test://off", "test://gone", "test://nil", "test://bad", "test://throttled", "test://boom", "aws:///i-1"} {
		for _, q := range []pb.InstanceQuestion{pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE, pb.InstanceQuestion_INSTANCE_QUESTION_SHUTDOWN, pb.InstanceQuestion_INSTANCE_QUESTION_METADATA} {
			qs = append(qs, &pb.InstanceQuery{Key: fmt.Sprintf("%s/%d", id, q), Node: nodeRef("n", id), Question: q})
		}
	}
	return append(qs, &pb.InstanceQuery{Key: "no node", Question: pb.InstanceQuestion_INSTANCE_QUESTION_METADATA})
}

// single is what the single call answers for q, as a batch result.
func single(a instances, q *pb.InstanceQuery) *pb.InstanceResult {
	r := &pb.InstanceResult{Key: q.GetKey()}
	var err error
	switch q.GetQuestion() {
	case pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE:
		var x *pb.InstanceExistsResponse
		x, err = a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: q.GetNode()})
		r.Result = &pb.InstanceResult_Existence{Existence: x}
	case pb.InstanceQuestion_INSTANCE_QUESTION_SHUTDOWN:
		var x *pb.InstanceShutdownResponse
		x, err = a.InstanceShutdown(ctx, &pb.InstanceShutdownRequest{Node: q.GetNode()})
		r.Result = &pb.InstanceResult_Shutdown{Shutdown: x}
	default:
		var x *pb.InstanceMetadataResponse
		x, err = a.InstanceMetadata(ctx, &pb.InstanceMetadataRequest{Node: q.GetNode()})
		r.Result = &pb.InstanceResult_Metadata{Metadata: x}
	}
	if err != nil {
		return sdk.ErrorResult(q.GetKey(), err)
	}
	return r
}

// sameResult: the same answer, or errors of the same code, reason, field
// and retry delay (the messages name the method asked).
func sameResult(a, b *pb.InstanceResult) bool {
	ea, eb := a.GetError(), b.GetError()
	if ea == nil || eb == nil {
		return proto.Equal(a, b)
	}
	return a.GetKey() == b.GetKey() && ea.GetCode() == eb.GetCode() && ea.GetReason() == eb.GetReason() &&
		ea.GetField() == eb.GetField() && ea.GetRetryDelayMs() == eb.GetRetryDelayMs()
}

func TestABatchAnswersEachQueryAsItsSingleCall(t *testing.T) {
	for _, c := range []struct {
		name  string
		cloud cloudprovider.InstancesV2
	}{
		{"fan-out", &tableV2{}},
		{"native", &batchV2{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := instances{Adapter: newAdapter(t, &testCloud{v2: c.cloud}, batchOpts)}
			queries := everyQuery()
			resp, err := a.BatchInstances(ctx, &pb.BatchInstancesRequest{Queries: queries})
			if err != nil {
				t.Fatal(err)
			}
			got := resp.GetResults()
			if len(got) != len(queries) {
				t.Fatalf("%d results to %d queries", len(got), len(queries))
			}
			for i, q := range queries {
				if want := single(a, q); !sameResult(got[i], want) {
					t.Errorf("%s: batch %v, single call %v", q.GetKey(), got[i].GetResult(), want.GetResult())
				}
			}
			// What the single calls say, spelled out for a few.
			for key, w := range map[string]want{
				"test://gone/1":      {codes.Unknown, 0, ""}, // an error is no answer to InstanceExists
				"test://gone/3":      {codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""},
				"test://nil/3":       {codes.Internal, 0, ""},
				"test://bad/3":       {codes.Internal, 0, ""},
				"test://throttled/2": {codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED, ""},
				"aws:///i-1/1":       {codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "node.provider_id"},
				"no node":            {codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "node"},
			} {
				for i, q := range queries {
					if q.GetKey() != key {
						continue
					}
					e := got[i].GetError()
					if e.GetCode() != int32(w.code) || e.GetReason() != w.reason || e.GetField() != w.field {
						t.Errorf("%s: %v, want %v", key, got[i].GetResult(), w)
					}
				}
			}
			if md := got[2].GetMetadata().GetMetadata(); md.GetProviderId() != "test://run" || md.GetZone() != "z1" {
				t.Errorf("metadata without a providerID gets the Node's: %v", md)
			}
		})
	}
}

func TestANativeBatchIsOneCloudCallWithoutForeignNodes(t *testing.T) {
	cloud := &batchV2{}
	a := instances{Adapter: newAdapter(t, &testCloud{v2: cloud}, batchOpts)}
	resp, err := a.BatchInstances(ctx, &pb.BatchInstancesRequest{Queries: everyQuery()})
	if err != nil || len(resp.GetResults()) != len(everyQuery()) {
		t.Fatal(resp, err)
	}
	if cloud.batches != 1 {
		t.Errorf("%d InstancesBatch calls, want 1", cloud.batches)
	}
	for _, id := range cloud.asked {
		if id == "aws:///i-1" || id == "" {
			t.Errorf("the cloud was asked about %q", id)
		}
	}
	if len(cloud.asked) != 7*3 {
		t.Errorf("the cloud answered %d queries, want 21", len(cloud.asked))
	}
	// Only foreign nodes: the cloud is not called.
	cloud.batches = 0
	resp, err = a.BatchInstances(ctx, &pb.BatchInstancesRequest{Queries: []*pb.InstanceQuery{
		{Key: "a", Node: nodeRef("n", "aws:///i-1"), Question: pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE}}})
	if err != nil || resp.GetResults()[0].GetError().GetField() != "node.provider_id" || cloud.batches != 0 {
		t.Errorf("%v %v, %d cloud calls", resp, err, cloud.batches)
	}
}

func TestANativeBatchsWholeCallErrors(t *testing.T) {
	cloud := &batchV2{}
	a := instances{Adapter: newAdapter(t, &testCloud{v2: cloud}, batchOpts)}
	req := &pb.BatchInstancesRequest{Queries: []*pb.InstanceQuery{
		{Key: "a", Node: nodeRef("n", "test://run"), Question: pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE},
		{Key: "b", Node: nodeRef("m", "test://off"), Question: pb.InstanceQuestion_INSTANCE_QUESTION_SHUTDOWN},
	}}
	for _, c := range []struct {
		name   string
		answer func([]InstanceQuery) ([]InstanceAnswer, error)
		want   want
	}{
		{"throttled", func([]InstanceQuery) ([]InstanceAnswer, error) { return nil, apiRetry() },
			want{codes.Unavailable, pb.ErrorReason_ERROR_REASON_RETRY_AFTER, ""}},
		{"quota", func([]InstanceQuery) ([]InstanceAnswer, error) { return nil, sdk.QuotaExceeded("RequestLimitExceeded") },
			want{codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED, ""}},
		{"not found names no instance", func([]InstanceQuery) ([]InstanceAnswer, error) { return nil, errGone },
			want{codes.Unknown, 0, ""}},
		{"an answer short", func(q []InstanceQuery) ([]InstanceAnswer, error) { return make([]InstanceAnswer, len(q)-1), nil },
			want{codes.Internal, 0, ""}},
	} {
		cloud.override = c.answer
		_, err := a.BatchInstances(ctx, req)
		checkErr(t, c.name, err, c.want)
	}
	// Queries refused before the cloud keep their errors; the others get
	// the cloud's.
	cloud.override = func([]InstanceQuery) ([]InstanceAnswer, error) { return nil, sdk.QuotaExceeded("RequestLimitExceeded") }
	mixed := &pb.BatchInstancesRequest{Queries: append([]*pb.InstanceQuery{
		{Key: "c", Node: nodeRef("n", "aws:///i-1"), Question: pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE}}, req.GetQueries()...)}
	resp, err := a.BatchInstances(ctx, mixed)
	if r := resp.GetResults(); err != nil || len(r) != 3 || r[0].GetError().GetField() != "node.provider_id" ||
		r[1].GetError().GetReason() != pb.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED || r[2].GetError().GetReason() != pb.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED {
		t.Errorf("mixed: %v %v", r, err)
	}
	// The questions arrive as asked.
	var got []InstanceQuestion
	cloud.override = func(q []InstanceQuery) ([]InstanceAnswer, error) {
		for _, x := range q {
			got = append(got, x.Question)
		}
		return []InstanceAnswer{{Exists: true}, {Shutdown: true}}, nil
	}
	resp, err = a.BatchInstances(ctx, req)
	if err != nil || fmt.Sprint(got) != "[exists shutdown]" ||
		resp.GetResults()[0].GetExistence().GetExistence() != pb.InstanceExistence_INSTANCE_EXISTENCE_EXISTS ||
		resp.GetResults()[1].GetShutdown().GetState() != pb.InstanceShutdownState_INSTANCE_SHUTDOWN_STATE_SHUT_DOWN {
		t.Errorf("questions %v, answer %v %v", got, resp, err)
	}
}

// nativeCloud implements InstancesBatcher on the cloudprovider.Interface.
type nativeCloud struct {
	*testCloud
	batches int
}

func (c *nativeCloud) InstancesBatch(_ context.Context, q []InstanceQuery) ([]InstanceAnswer, error) {
	c.batches++
	return make([]InstanceAnswer, len(q)), nil
}

func TestTheBatcherMayBeTheCloudAndTheSDKServesAndChecksIt(t *testing.T) {
	cloud := &nativeCloud{testCloud: &testCloud{v2: &tableV2{}}}
	a := newAdapter(t, cloud, batchOpts)
	path := filepath.Join(t.TempDir(), "p.sock")
	srv := sdk.NewServer(nil)
	a.Register(srv)
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sdk.Serve(sctx, "unix://"+path, srv, sdk.ServeOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	t.Cleanup(func() { stop(); <-done })
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
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	caps, err := pb.NewIdentityServiceClient(conn).GetProviderCapabilities(ctx, &pb.GetProviderCapabilitiesRequest{})
	if err != nil || fmt.Sprint(caps.GetCapabilities()) != "[CAPABILITY_INSTANCES CAPABILITY_INSTANCES_BATCH]" {
		t.Errorf("capabilities %v %v", caps.GetCapabilities(), err)
	}
	c := pb.NewInstancesServiceClient(conn)
	resp, err := c.BatchInstances(ctx, &pb.BatchInstancesRequest{Queries: []*pb.InstanceQuery{
		{Key: "a", Node: nodeRef("n", "test://run"), Question: pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE},
		// The zero answer to a metadata question is nil metadata: INTERNAL.
		{Key: "b", Node: nodeRef("n", "test://run"), Question: pb.InstanceQuestion_INSTANCE_QUESTION_METADATA},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResults()
	if len(r) != 2 || r[0].GetExistence().GetExistence() != pb.InstanceExistence_INSTANCE_EXISTENCE_NOT_EXISTS ||
		r[1].GetError().GetCode() != int32(codes.Internal) || cloud.batches != 1 {
		t.Errorf("results %v after %d batches", r, cloud.batches)
	}
	_, err = c.BatchInstances(ctx, &pb.BatchInstancesRequest{})
	if e := sdk.FromStatus(status.Convert(err)); e.Reason != pb.ErrorReason_ERROR_REASON_INVALID_REQUEST || cloud.batches != 1 {
		t.Errorf("no queries: %v", err)
	}
}
