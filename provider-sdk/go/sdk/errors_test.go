package sdk

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

func TestEveryConstructorRoundTripsThroughAGRPCStatus(t *testing.T) {
	cases := []struct {
		err    *Error
		code   codes.Code
		reason string
	}{
		{InstanceNotFound("i-1 is gone"), codes.NotFound, "INSTANCE_NOT_FOUND"},
		{RetryAfter("provisioning", 1500*time.Millisecond), codes.Unavailable, "RETRY_AFTER"},
		{InvalidServiceSpec("spec.ports[0].protocol", "SCTP unsupported"), codes.InvalidArgument, "INVALID_SERVICE_SPEC"},
		{InvalidAnnotation("example.com/lb-type", "must be nlb or alb"), codes.InvalidArgument, "INVALID_ANNOTATION"},
		{QuotaExceeded("no more LBs"), codes.ResourceExhausted, "QUOTA_EXCEEDED"},
		{ConflictingResource("cidr routed elsewhere"), codes.AlreadyExists, "CONFLICTING_RESOURCE"},
		{OperationPending("busy"), codes.Aborted, "OPERATION_PENDING"},
		{CloudUnavailable("throttled", 2*time.Second), codes.Unavailable, "CLOUD_UNAVAILABLE"},
		{CloudUnavailable("down", 0), codes.Unavailable, "CLOUD_UNAVAILABLE"},
		{CredentialsInvalid("expired"), codes.PermissionDenied, "CREDENTIALS_INVALID"},
		{InvalidRequest("node.name", "is required"), codes.InvalidArgument, "INVALID_REQUEST"},
		{NotLeader(Token{Term: 9, Holder: "cp-2_beef"}), codes.FailedPrecondition, "NOT_LEADER"},
		{Internal("bug"), codes.Internal, ""},
		{Unimplemented("no"), codes.Unimplemented, ""},
		{Unknown("cloud said 500"), codes.Unknown, ""},
	}
	for _, c := range cases {
		t.Run(c.err.Message, func(t *testing.T) {
			s := c.err.GRPCStatus()
			if s.Code() != c.code {
				t.Errorf("code = %v, want %v", s.Code(), c.code)
			}
			var info *errdetails.ErrorInfo
			for _, d := range s.Details() {
				if i, ok := d.(*errdetails.ErrorInfo); ok {
					info = i
				}
			}
			switch {
			case c.reason == "" && info != nil:
				t.Errorf("unexpected ErrorInfo %v", info)
			case c.reason != "" && (info == nil || info.Reason != c.reason || info.Domain != ErrorDomain):
				t.Errorf("ErrorInfo = %v, want reason %s in domain %s", info, c.reason, ErrorDomain)
			}
			if back := FromStatus(s); !reflect.DeepEqual(back, c.err) {
				t.Errorf("round trip = %+v, want %+v", back, c.err)
			}
		})
	}
}

func TestDetailsAsTheContractPrescribes(t *testing.T) {
	s := RetryAfter("provisioning", 3*time.Second).GRPCStatus()
	var retry *errdetails.RetryInfo
	for _, d := range s.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if retry == nil || retry.RetryDelay.AsDuration() != 3*time.Second {
		t.Errorf("RetryInfo = %v, want 3s", retry)
	}
	s = InvalidAnnotation("example.com/x", "bad").GRPCStatus()
	var br *errdetails.BadRequest
	for _, d := range s.Details() {
		if b, ok := d.(*errdetails.BadRequest); ok {
			br = b
		}
	}
	if br == nil || len(br.FieldViolations) != 1 || br.FieldViolations[0].Field != "metadata.annotations[example.com/x]" {
		t.Errorf("BadRequest = %v", br)
	}
	s = NotLeader(Token{Term: 7, Holder: "cp-1"}).GRPCStatus()
	for _, d := range s.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok && (i.Metadata["term"] != "7" || i.Metadata["holder"] != "cp-1") {
			t.Errorf("NOT_LEADER metadata = %v", i.Metadata)
		}
	}
}

func TestForeignDomainsAndUnknownReasonsKeepOnlyTheCode(t *testing.T) {
	for _, info := range []*errdetails.ErrorInfo{
		{Reason: "INSTANCE_NOT_FOUND", Domain: "example.com"},
		{Reason: "SOMETHING_NEW", Domain: ErrorDomain},
		{Reason: "UNSPECIFIED", Domain: ErrorDomain},
	} {
		s, err := status.New(codes.NotFound, "x").WithDetails(info)
		if err != nil {
			t.Fatal(err)
		}
		if e := FromStatus(s); e.Code != codes.NotFound || e.Reason != pb.ErrorReason_ERROR_REASON_UNSPECIFIED {
			t.Errorf("%v: got %+v", info, e)
		}
	}
}

func TestLongAndInvalidTextsAreCut(t *testing.T) {
	huge := strings.Repeat("é", 100_000)
	s := InvalidAnnotation("example.com/x", huge).GRPCStatus()
	if len(s.Message()) > MaxErrorTextBytes {
		t.Errorf("message is %d bytes", len(s.Message()))
	}
	back := FromStatus(s)
	if d := back.Violations[0].Description; len(d) > MaxErrorTextBytes || !strings.HasSuffix(d, "(200000 bytes, cut)") {
		t.Errorf("description is %d bytes, ends %q", len(d), d[len(d)-30:])
	}
	if got := Bounded("short"); got != "short" {
		t.Errorf("Bounded(short) = %q", got)
	}
	if got := Bounded("a\xffb"); got != "a\uFFFDb" {
		t.Errorf("Bounded(invalid UTF-8) = %q", got)
	}
	// Invalid UTF-8 would make the details unmarshalable.
	if FromStatus(InvalidRequest("f", "\xff").GRPCStatus()).Reason != pb.ErrorReason_ERROR_REASON_INVALID_REQUEST {
		t.Error("details lost with invalid UTF-8")
	}
}

func TestFromError(t *testing.T) {
	wrapped := fmt.Errorf("creating lb: %w", QuotaExceeded("no more"))
	cases := []struct {
		name   string
		err    error
		code   codes.Code
		reason pb.ErrorReason
		msg    string
	}{
		{"contract error", OperationPending("busy"), codes.Aborted, pb.ErrorReason_ERROR_REASON_OPERATION_PENDING, "busy"},
		{"wrapped contract error", wrapped, codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED, "creating lb: no more"},
		{"deadline", fmt.Errorf("api: %w", context.DeadlineExceeded), codes.DeadlineExceeded, 0, "api: context deadline exceeded"},
		{"cancelled", context.Canceled, codes.Canceled, 0, "context canceled"},
		{"unimplemented status", status.Error(codes.Unimplemented, "nope"), codes.Unimplemented, 0, "nope"},
		{"a cloud API's NOT_FOUND is no contract answer", status.Error(codes.NotFound, "vm"), codes.Unknown, 0, "rpc error: code = NotFound desc = vm"},
		{"plain", errors.New("HTTP 500"), codes.Unknown, 0, "HTTP 500"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := FromError(c.err)
			if e.Code != c.code || e.Reason != c.reason || e.Message != c.msg {
				t.Errorf("got %v/%v/%q, want %v/%v/%q", e.Code, e.Reason, e.Message, c.code, c.reason, c.msg)
			}
		})
	}
	if FromError(nil) != nil {
		t.Error("FromError(nil) != nil")
	}
}

func TestReasonNames(t *testing.T) {
	if got := ReasonName(pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND); got != "INSTANCE_NOT_FOUND" {
		t.Errorf("got %q", got)
	}
	if got := parseReason("CLOUD_UNAVAILABLE"); got != pb.ErrorReason_ERROR_REASON_CLOUD_UNAVAILABLE {
		t.Errorf("got %v", got)
	}
}
