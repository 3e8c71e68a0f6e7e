package sdk

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

// MaxErrorTextBytes is the longest error message or violation text sent:
// they travel in HTTP/2 trailers, and a provider echoing a 200 KB annotation
// into its error would otherwise exceed what peers accept.
const MaxErrorTextBytes = 4096

// FieldViolation is one google.rpc.BadRequest field violation.
type FieldViolation struct {
	Field       string
	Description string
}

// Error is an error of the provider contract: a gRPC code and, for the
// contract's own failures, a reason (google.rpc.ErrorInfo in domain
// ErrorDomain), a retry delay (google.rpc.RetryInfo) and field violations
// (google.rpc.BadRequest). Build it with the constructors (InstanceNotFound,
// RetryAfter, ...). A handler may return it wrapped (fmt.Errorf with %w):
// the code and details are kept, the message is the whole text.
type Error struct {
	Code codes.Code
	// Reason is ERROR_REASON_UNSPECIFIED for errors without one (INTERNAL,
	// UNKNOWN, UNIMPLEMENTED, deadlines).
	Reason  pb.ErrorReason
	Message string
	// RetryDelay is sent as RetryInfo when set.
	RetryDelay *time.Duration
	Violations []FieldViolation
	// NewestLeader is the newest fencing token seen (NOT_LEADER only).
	NewestLeader *Token
}

func newError(code codes.Code, reason pb.ErrorReason, message string) *Error {
	return &Error{Code: code, Reason: reason, Message: message}
}

func (e *Error) withField(field, description string) *Error {
	e.Violations = append(e.Violations, FieldViolation{Field: field, Description: description})
	return e
}

// Error returns the message alone: it ends up in Events, where gRPC framing
// is noise.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Message
}

// InstanceNotFound: the node's instance does not exist (NOT_FOUND).
func InstanceNotFound(message string) *Error {
	return newError(codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, message)
}

// RetryAfter: not done yet; the controller calls again after exactly delay
// (UNAVAILABLE with RetryInfo).
func RetryAfter(message string, delay time.Duration) *Error {
	e := newError(codes.Unavailable, pb.ErrorReason_ERROR_REASON_RETRY_AFTER, message)
	e.RetryDelay = &delay
	return e
}

// InvalidServiceSpec: the Service's spec cannot be realised; field is a
// path such as "spec.ports[0].protocol" (INVALID_ARGUMENT).
func InvalidServiceSpec(field, description string) *Error {
	return newError(codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_SERVICE_SPEC,
		field+": "+description).withField(field, description)
}

// InvalidAnnotation: an annotation has a value the provider cannot use
// (INVALID_ARGUMENT, field "metadata.annotations[<key>]").
func InvalidAnnotation(key, description string) *Error {
	return newError(codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_ANNOTATION,
		"annotation "+key+": "+description).withField("metadata.annotations["+key+"]", description)
}

// QuotaExceeded: a cloud quota or capacity limit was hit (RESOURCE_EXHAUSTED).
func QuotaExceeded(message string) *Error {
	return newError(codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED, message)
}

// ConflictingResource: a cloud resource exists and belongs to something
// else (ALREADY_EXISTS).
func ConflictingResource(message string) *Error {
	return newError(codes.AlreadyExists, pb.ErrorReason_ERROR_REASON_CONFLICTING_RESOURCE, message)
}

// OperationPending: another operation on the same key is in progress
// (ABORTED).
func OperationPending(message string) *Error {
	return newError(codes.Aborted, pb.ErrorReason_ERROR_REASON_OPERATION_PENDING, message)
}

// CloudUnavailable: the cloud API is unreachable or throttling
// (UNAVAILABLE); retryAfter > 0 is sent as a hint when to retry.
func CloudUnavailable(message string, retryAfter time.Duration) *Error {
	e := newError(codes.Unavailable, pb.ErrorReason_ERROR_REASON_CLOUD_UNAVAILABLE, message)
	if retryAfter > 0 {
		e.RetryDelay = &retryAfter
	}
	return e
}

// CredentialsInvalid: the provider's own cloud credentials are unusable
// (PERMISSION_DENIED).
func CredentialsInvalid(message string) *Error {
	return newError(codes.PermissionDenied, pb.ErrorReason_ERROR_REASON_CREDENTIALS_INVALID, message)
}

// InvalidRequest: the request breaks the contract; field names the
// offending field (INVALID_ARGUMENT).
func InvalidRequest(field, description string) *Error {
	return newError(codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST,
		field+": "+description).withField(field, description)
}

// NotLeader: a mutation from a deposed leader (FAILED_PRECONDITION); newest
// is the newest fencing token seen for the cluster. The write must not have
// been applied.
func NotLeader(newest Token) *Error {
	e := newError(codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_NOT_LEADER,
		fmt.Sprintf("refused: a newer leader has written (term %d, holder %q)", newest.Term, newest.Holder))
	e.NewestLeader = &newest
	return e
}

// Internal: a provider bug or an unexpected cloud answer (INTERNAL).
func Internal(message string) *Error { return newError(codes.Internal, 0, message) }

// NotFound: the resource the call operates on does not exist (NOT_FOUND,
// no reason): UpdateLoadBalancer of a load balancer that is gone, Master of
// a cluster ListClusters does not list.
func NotFound(message string) *Error { return newError(codes.NotFound, 0, message) }

// Unimplemented: the method is not implemented (UNIMPLEMENTED).
func Unimplemented(message string) *Error { return newError(codes.Unimplemented, 0, message) }

// Unknown: a failure whose effect is unknown, for example a cloud API
// error in the middle of an operation (UNKNOWN): the controller retries the
// same request.
func Unknown(message string) *Error { return newError(codes.Unknown, 0, message) }

// FromError turns any error a handler returned into a contract error:
// an *Error (possibly wrapped) keeps its code and details; context
// deadlines and cancellations become DEADLINE_EXCEEDED and CANCELLED; a
// gRPC UNIMPLEMENTED status stays UNIMPLEMENTED (what the generated
// Unimplemented* methods return); everything else is UNKNOWN, because
// nobody can tell whether it happened. Other gRPC statuses (for example
// from a cloud API's own gRPC client) are not passed on as they are: their
// codes do not mean what the contract's codes mean. A handler that returns
// a cloud API's gRPC errors must map that API's UNIMPLEMENTED itself (the
// adapter makes it UNKNOWN): passed on, it would read as a capability not
// advertised.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e == err {
			return e
		}
		c := *e
		c.Message = err.Error()
		return &c
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return newError(codes.DeadlineExceeded, 0, err.Error())
	case errors.Is(err, context.Canceled):
		return newError(codes.Canceled, 0, err.Error())
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unimplemented {
		return Unimplemented(s.Message())
	}
	return Unknown(err.Error())
}

// ReasonName is the wire form of a reason: the value's name without
// "ERROR_REASON_", for example "INSTANCE_NOT_FOUND".
func ReasonName(r pb.ErrorReason) string {
	return strings.TrimPrefix(r.String(), "ERROR_REASON_")
}

func parseReason(s string) pb.ErrorReason {
	v, ok := pb.ErrorReason_value["ERROR_REASON_"+s]
	if !ok {
		return pb.ErrorReason_ERROR_REASON_UNSPECIFIED
	}
	return pb.ErrorReason(v)
}

// GRPCStatus encodes the error as the contract prescribes; gRPC calls it
// for an error a handler returns. Texts are cut to MaxErrorTextBytes.
func (e *Error) GRPCStatus() *status.Status {
	s := status.New(e.Code, Bounded(e.Message))
	var ds []protoadapt.MessageV1
	if e.Reason != pb.ErrorReason_ERROR_REASON_UNSPECIFIED {
		info := &errdetails.ErrorInfo{Reason: ReasonName(e.Reason), Domain: ErrorDomain}
		if e.NewestLeader != nil {
			info.Metadata = map[string]string{
				"term":   strconv.FormatUint(e.NewestLeader.Term, 10),
				"holder": Bounded(e.NewestLeader.Holder),
			}
		}
		ds = append(ds, info)
	}
	if e.RetryDelay != nil {
		ds = append(ds, &errdetails.RetryInfo{RetryDelay: durationpb.New(*e.RetryDelay)})
	}
	if len(e.Violations) > 0 {
		br := &errdetails.BadRequest{}
		for _, v := range e.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
				Field: Bounded(v.Field), Description: Bounded(v.Description),
			})
		}
		ds = append(ds, br)
	}
	if len(ds) == 0 || e.Code == codes.OK {
		return s
	}
	withDetails, err := s.WithDetails(ds...)
	if err != nil {
		return s
	}
	return withDetails
}

// FromStatus reads a gRPC status back into an error. Unknown reasons and
// foreign domains keep only the code.
func FromStatus(s *status.Status) *Error {
	e := &Error{Code: s.Code(), Message: Bounded(s.Message())}
	for _, d := range s.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() != ErrorDomain {
				continue
			}
			e.Reason = parseReason(d.GetReason())
			if e.Reason == pb.ErrorReason_ERROR_REASON_NOT_LEADER {
				if t, err := ParseToken(d.GetMetadata()["term"] + ":" + d.GetMetadata()["holder"]); err == nil {
					e.NewestLeader = &t
				}
			}
		case *errdetails.RetryInfo:
			if d.GetRetryDelay() != nil {
				delay := d.GetRetryDelay().AsDuration()
				e.RetryDelay = &delay
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.Violations = append(e.Violations, FieldViolation{
					Field: Bounded(v.GetField()), Description: Bounded(v.GetDescription()),
				})
			}
		}
	}
	return e
}

// Bounded returns text as valid UTF-8 of at most MaxErrorTextBytes, cut at
// a character boundary and saying so.
func Bounded(text string) string {
	text = strings.ToValidUTF8(text, "\uFFFD")
	if len(text) <= MaxErrorTextBytes {
		return text
	}
	suffix := fmt.Sprintf("... (%d bytes, cut)", len(text))
	end := MaxErrorTextBytes - len(suffix)
	for end > 0 && !utf8.RuneStart(text[end]) {
		end--
	}
	return text[:end] + suffix
}
