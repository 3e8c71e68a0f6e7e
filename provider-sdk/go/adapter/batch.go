package adapter

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// InstancesBatcher is implemented by a cloud whose API answers for many
// instances at once (one describe call for a page of ids), on the
// InstancesV2 its InstancesV2() returns or on the cloudprovider.Interface
// itself: the adapter then answers BatchInstances (contract 1.4.0) with
// one InstancesBatch call instead of one call per query, so the
// controller's batches spend one quota unit. Without it the adapter
// answers a batch by asking the cloud's single methods, 16 at once.
//
// answers[i] answers queries[i]: Exists, Shutdown or Metadata by the
// question, as InstancesV2's InstanceExists, InstanceShutdown and
// InstanceMetadata would answer, or Err, which the adapter maps as it maps
// those methods' errors (Options.IsInstanceNotFound included). A non-nil
// error fails the whole batch: only for a failure that left every query
// unanswered (the cloud unreachable, throttling). The queries' Nodes are
// checked before, as for the single calls: the cloud sees no Node of
// another cloud's providerID scheme.
type InstancesBatcher interface {
	InstancesBatch(ctx context.Context, queries []InstanceQuery) (answers []InstanceAnswer, err error)
}

// InstanceQuestion is what one InstanceQuery asks.
type InstanceQuestion int

const (
	// QuestionExists asks InstancesV2.InstanceExists: InstanceAnswer.Exists.
	QuestionExists InstanceQuestion = iota + 1
	// QuestionShutdown asks InstancesV2.InstanceShutdown: InstanceAnswer.Shutdown.
	QuestionShutdown
	// QuestionMetadata asks InstancesV2.InstanceMetadata: InstanceAnswer.Metadata.
	QuestionMetadata
)

func (q InstanceQuestion) String() string {
	switch q {
	case QuestionExists:
		return "exists"
	case QuestionShutdown:
		return "shutdown"
	case QuestionMetadata:
		return "metadata"
	}
	return fmt.Sprintf("InstanceQuestion(%d)", int(q))
}

// InstanceQuery is one question about one Node's instance. The same Node
// may be asked several questions in one batch.
type InstanceQuery struct {
	Node     *corev1.Node
	Question InstanceQuestion
}

// InstanceAnswer answers one InstanceQuery: the field of its question, or
// Err.
type InstanceAnswer struct {
	Exists   bool
	Shutdown bool
	Metadata *cloudprovider.InstanceMetadata
	Err      error
}

var questions = map[pb.InstanceQuestion]InstanceQuestion{
	pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE: QuestionExists,
	pb.InstanceQuestion_INSTANCE_QUESTION_SHUTDOWN:  QuestionShutdown,
	pb.InstanceQuestion_INSTANCE_QUESTION_METADATA:  QuestionMetadata,
}

// batcherOf is the cloud's InstancesBatcher (on its InstancesV2 first), if
// it has one.
func batcherOf(cloud cloudprovider.Interface, v2 cloudprovider.InstancesV2) InstancesBatcher {
	if b, ok := v2.(InstancesBatcher); ok {
		return b
	}
	if b, ok := cloud.(InstancesBatcher); ok {
		return b
	}
	return nil
}

// BatchInstances answers with the cloud's InstancesBatcher, else by
// fan-out over the single methods (each query then is exactly its single
// call). The SDK has checked the request, and checks every result.
func (a instances) BatchInstances(ctx context.Context, req *pb.BatchInstancesRequest) (*pb.BatchInstancesResponse, error) {
	if a.batcher == nil {
		return &pb.BatchInstancesResponse{Results: sdk.FanOutInstances(ctx, a, req.GetQueries())}, nil
	}
	results := make([]*pb.InstanceResult, len(req.GetQueries()))
	var asked []InstanceQuery
	var at []int // asked[k] is query at[k]
	for i, q := range req.GetQueries() {
		node, err := a.node(q.GetNode())
		if err != nil {
			results[i] = sdk.ErrorResult(q.GetKey(), err)
			continue
		}
		asked = append(asked, InstanceQuery{Node: node, Question: questions[q.GetQuestion()]})
		at = append(at, i)
	}
	if len(asked) == 0 {
		return &pb.BatchInstancesResponse{Results: results}, nil
	}
	answers, err := a.batcher.InstancesBatch(ctx, asked)
	switch {
	case err != nil && a.notFound(err):
		// No query's instance is named by it: not an answer about one.
		err = sdk.Unknown(fmt.Sprintf("InstancesBatch answered InstanceNotFound for the whole batch: %v", err))
	case err != nil:
		err = a.instanceError(err)
	case len(answers) != len(asked):
		err = sdk.Internal(fmt.Sprintf("InstancesBatch answered %d answers to %d queries", len(answers), len(asked)))
	}
	if err != nil {
		if len(asked) == len(results) {
			return nil, err
		}
		// The queries refused above keep their own errors.
		for _, i := range at {
			results[i] = sdk.ErrorResult(req.GetQueries()[i].GetKey(), err)
		}
		return &pb.BatchInstancesResponse{Results: results}, nil
	}
	for k, ans := range answers {
		q := req.GetQueries()[at[k]]
		results[at[k]] = a.result(q, asked[k].Node, ans)
	}
	return &pb.BatchInstancesResponse{Results: results}, nil
}

// result is the result of query q (node converted) the cloud answered
// ans: what the single call would answer for the same answer.
func (a instances) result(q *pb.InstanceQuery, node *corev1.Node, ans InstanceAnswer) *pb.InstanceResult {
	r := &pb.InstanceResult{Key: q.GetKey()}
	var err error
	switch q.GetQuestion() {
	case pb.InstanceQuestion_INSTANCE_QUESTION_EXISTENCE:
		var x *pb.InstanceExistsResponse
		x, err = a.existence(ans.Exists, ans.Err)
		r.Result = &pb.InstanceResult_Existence{Existence: x}
	case pb.InstanceQuestion_INSTANCE_QUESTION_SHUTDOWN:
		var x *pb.InstanceShutdownResponse
		x, err = a.shutdownState(ans.Shutdown, ans.Err)
		r.Result = &pb.InstanceResult_Shutdown{Shutdown: x}
	default:
		var x *pb.InstanceMetadataResponse
		x, err = a.metadata(q.GetNode(), node, ans.Metadata, ans.Err, "InstancesBatch")
		r.Result = &pb.InstanceResult_Metadata{Metadata: x}
	}
	if err != nil {
		return sdk.ErrorResult(q.GetKey(), err)
	}
	return r
}
