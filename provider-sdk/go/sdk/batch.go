package sdk

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

const (
	// MaxBatchQueries is the most queries one BatchInstances request may
	// carry (contract 1.4.0).
	MaxBatchQueries = 500
	// BatchConcurrency is how many single calls a BatchInstances served by
	// fan-out makes at once.
	BatchConcurrency = 16
)

// SingleInstances are InstancesService's single-Node methods: what
// FanOutInstances asks.
type SingleInstances interface {
	InstanceExists(context.Context, *pb.InstanceExistsRequest) (*pb.InstanceExistsResponse, error)
	InstanceShutdown(context.Context, *pb.InstanceShutdownRequest) (*pb.InstanceShutdownResponse, error)
	InstanceMetadata(context.Context, *pb.InstanceMetadataRequest) (*pb.InstanceMetadataResponse, error)
}

// CheckBatchInstancesRequest checks what makes a whole BatchInstances
// request invalid (contract 1.4.0): 1 to MaxBatchQueries queries, each key
// non-empty, at most MaxNameBytes and distinct, each question known. A
// query's node is not checked here: a bad node fails only its query, with
// the error the single call would answer.
func CheckBatchInstancesRequest(req *pb.BatchInstancesRequest) *Violation {
	queries := req.GetQueries()
	if len(queries) == 0 {
		return violation("queries", "at least one query is required")
	}
	if len(queries) > MaxBatchQueries {
		return violation("queries", "has %d queries, more than %d", len(queries), MaxBatchQueries)
	}
	seen := make(map[string]int, len(queries))
	for i, q := range queries {
		f := fmt.Sprintf("queries[%d]", i)
		if v := CheckName(f+".key", q.GetKey()); v != nil {
			return v
		}
		if j, twice := seen[q.GetKey()]; twice {
			return violation(f+".key", "%q is also the key of queries[%d]", q.GetKey(), j)
		}
		seen[q.GetKey()] = i
		if v := knownEnum(f+".question", q.GetQuestion(), pb.InstanceQuestion_name); v != nil {
			return v
		}
	}
	return nil
}

// QueryErrorOf is the QueryError of a query whose single call would have
// answered err: the same code, reason, message (cut to MaxErrorTextBytes),
// first field violation and retry delay (in milliseconds, rounded up).
func QueryErrorOf(err error) *pb.QueryError {
	e := FromError(err)
	if e == nil || e.Code == codes.OK {
		e = Internal(fmt.Sprintf("provider answered an error with code OK: %v", err))
	}
	q := &pb.QueryError{Code: int32(e.Code), Reason: e.Reason, Message: Bounded(e.Message)}
	if len(e.Violations) > 0 {
		q.Field = Bounded(e.Violations[0].Field)
	}
	if e.RetryDelay != nil && *e.RetryDelay > 0 {
		ms := (*e.RetryDelay + time.Millisecond - 1) / time.Millisecond
		q.RetryDelayMs = uint32(min(int64(ms), math.MaxUint32))
	}
	return q
}

// ErrorResult is the result of the query with key whose single call would
// have answered err.
func ErrorResult(key string, err error) *pb.InstanceResult {
	return &pb.InstanceResult{Key: key, Result: &pb.InstanceResult_Error{Error: QueryErrorOf(err)}}
}

// FanOutInstances answers queries with the single methods, at most
// BatchConcurrency at once, each query with what its single call answers
// (its error as a QueryError), in the order of the queries. A panic fails
// only its query (INTERNAL); queries not started when ctx is done fail with
// ctx's error.
func FanOutInstances(ctx context.Context, single SingleInstances, queries []*pb.InstanceQuery) []*pb.InstanceResult {
	results := make([]*pb.InstanceResult, len(queries))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(BatchConcurrency, len(queries)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(queries); i = int(next.Add(1) - 1) {
				results[i] = askOne(ctx, single, queries[i])
			}
		}()
	}
	wg.Wait()
	return results
}

func askOne(ctx context.Context, single SingleInstances, q *pb.InstanceQuery) (r *pb.InstanceResult) {
	if err := ctx.Err(); err != nil {
		return ErrorResult(q.GetKey(), err)
	}
	defer func() {
		if p := recover(); p != nil {
			r = ErrorResult(q.GetKey(), Internal(fmt.Sprintf("provider panicked: %v", p)))
		}
	}()
	r = &pb.InstanceResult{Key: q.GetKey()}
	var err error
	switch q.GetQuestion() {
	case pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE:
		var a *pb.InstanceExistsResponse
		a, err = single.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: q.GetNode()})
		r.Result = &pb.InstanceResult_Existence{Existence: a}
	case pb.InstanceQuestion_INSTANCE_QUESTION_SHUTDOWN:
		var a *pb.InstanceShutdownResponse
		a, err = single.InstanceShutdown(ctx, &pb.InstanceShutdownRequest{Node: q.GetNode()})
		r.Result = &pb.InstanceResult_Shutdown{Shutdown: a}
	case pb.InstanceQuestion_INSTANCE_QUESTION_METADATA:
		var a *pb.InstanceMetadataResponse
		a, err = single.InstanceMetadata(ctx, &pb.InstanceMetadataRequest{Node: q.GetNode()})
		r.Result = &pb.InstanceResult_Metadata{Metadata: a}
	default:
		err = InvalidRequest("question", fmt.Sprintf("unknown question %d", int32(q.GetQuestion())))
	}
	if err != nil {
		return ErrorResult(q.GetKey(), err)
	}
	return r
}

// CheckInstanceResult checks one result against the question it answers:
// an answer of that kind (a known existence or shutdown state; metadata as
// CheckInstanceMetadata and CheckNodeWarnings ask) or an error with a code
// other than OK and a known reason.
func CheckInstanceResult(field string, question pb.InstanceQuestion, r *pb.InstanceResult) *Violation {
	switch x := r.GetResult().(type) {
	case *pb.InstanceResult_Error:
		e := x.Error
		if e == nil {
			return violation(field+".error", "is empty")
		}
		if e.GetCode() <= 0 || e.GetCode() > int32(codes.Unauthenticated) {
			return violation(field+".error.code", "%d is not a gRPC status code other than OK", e.GetCode())
		}
		return optionalEnum(field+".error.reason", e.GetReason(), pb.ErrorReason_name)
	case *pb.InstanceResult_Existence:
		if question != pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE {
			return violation(field, "is an existence, the query asks %s", question)
		}
		return knownEnum(field+".existence.existence", x.Existence.GetExistence(), pb.InstanceExistence_name)
	case *pb.InstanceResult_Shutdown:
		if question != pb.InstanceQuestion_INSTANCE_QUESTION_SHUTDOWN {
			return violation(field, "is a shutdown state, the query asks %s", question)
		}
		return knownEnum(field+".shutdown.state", x.Shutdown.GetState(), pb.InstanceShutdownState_name)
	case *pb.InstanceResult_Metadata:
		if question != pb.InstanceQuestion_INSTANCE_QUESTION_METADATA {
			return violation(field, "is metadata, the query asks %s", question)
		}
		if x.Metadata.GetMetadata() == nil {
			return violation(field+".metadata.metadata", "is required")
		}
		if v := CheckInstanceMetadata(field+".metadata.metadata", x.Metadata.GetMetadata()); v != nil {
			return v
		}
		return CheckNodeWarnings(field+".metadata.warnings", x.Metadata.GetWarnings())
	default:
		return violation(field, "has neither an answer nor an error")
	}
}

// SettleBatch is the answer to queries made of a provider's results: for
// each query, in the queries' order, its result, or INTERNAL for a query
// the results answer not exactly once or with a result CheckInstanceResult
// refuses (as a single call's invalid answer is INTERNAL: a provider bug
// in one answer fails only its query). Results of keys not asked are
// dropped.
func SettleBatch(queries []*pb.InstanceQuery, results []*pb.InstanceResult) []*pb.InstanceResult {
	byKey := make(map[string]int, len(results))
	count := make(map[string]int, len(results))
	for i, r := range results {
		if _, ok := byKey[r.GetKey()]; !ok {
			byKey[r.GetKey()] = i
		}
		count[r.GetKey()]++
	}
	out := make([]*pb.InstanceResult, len(queries))
	for i, q := range queries {
		j, ok := byKey[q.GetKey()]
		switch {
		case !ok:
			out[i] = ErrorResult(q.GetKey(), Internal("provider answered no result for this query"))
		case count[q.GetKey()] > 1:
			out[i] = ErrorResult(q.GetKey(), Internal(fmt.Sprintf("provider answered %d results for this query", count[q.GetKey()])))
		default:
			if v := CheckInstanceResult(fmt.Sprintf("results[%d]", j), q.GetQuestion(), results[j]); v != nil {
				out[i] = ErrorResult(q.GetKey(), v.BadAnswer("an invalid result"))
			} else {
				out[i] = results[j]
			}
		}
	}
	return out
}

// serveBatch serves BatchInstances for any InstancesService registered on
// a server with UnaryInterceptor: the request is checked, then the
// provider's own BatchInstances answers it natively, or, when that answers
// UNIMPLEMENTED (the generated Unimplemented stub every service embeds),
// the service's single methods answer it by fan-out; either way each
// result is checked (SettleBatch).
func serveBatch(server any, handler func(context.Context, any) (any, error)) func(context.Context, any) (any, error) {
	return func(ctx context.Context, req any) (any, error) {
		r, ok := req.(*pb.BatchInstancesRequest)
		if !ok {
			return handler(ctx, req)
		}
		if v := CheckBatchInstancesRequest(r); v != nil {
			return nil, v.Invalid()
		}
		resp, err := handler(ctx, req)
		if status.Code(err) == codes.Unimplemented {
			single, ok := server.(SingleInstances)
			if !ok {
				return nil, err
			}
			return &pb.BatchInstancesResponse{Results: SettleBatch(r.GetQueries(), FanOutInstances(ctx, single, r.GetQueries()))}, nil
		}
		if err != nil {
			return nil, err
		}
		answer, _ := resp.(*pb.BatchInstancesResponse)
		return &pb.BatchInstancesResponse{Results: SettleBatch(r.GetQueries(), answer.GetResults())}, nil
	}
}

// announceBatch adds CAPABILITY_INSTANCES_BATCH to the capabilities of a
// provider that has CAPABILITY_INSTANCES: the SDK serves the batch for it
// (serveBatch).
func announceBatch(resp any) any {
	caps, ok := resp.(*pb.GetProviderCapabilitiesResponse)
	if !ok {
		return resp
	}
	has := func(c pb.Capability) bool {
		for _, x := range caps.GetCapabilities() {
			if x == c {
				return true
			}
		}
		return false
	}
	if !has(pb.Capability_CAPABILITY_INSTANCES) || has(pb.Capability_CAPABILITY_INSTANCES_BATCH) {
		return resp
	}
	// A copy: the provider may answer the same message every time.
	c := proto.Clone(caps).(*pb.GetProviderCapabilitiesResponse)
	c.Capabilities = append(c.Capabilities, pb.Capability_CAPABILITY_INSTANCES_BATCH)
	return c
}
