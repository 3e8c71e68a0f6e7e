package sdk

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

type callKey struct{}

type call struct {
	requestID string
	traceID   string
	token     *Token
}

// RequestID is the controller's x-ccm-request-id of the call, or an id the
// SDK generated when the request had none. Log it with the request.
func RequestID(ctx context.Context) string {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		return c.requestID
	}
	return ""
}

// TraceID is the W3C trace id (32 lowercase hex digits) of the call's
// traceparent metadata, to join the controller's trace; "" when the call
// carried none or a malformed one.
func TraceID(ctx context.Context) string {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		return c.traceID
	}
	return ""
}

// parseTraceparent returns the trace id of a version-00 W3C traceparent
// ("00-<32 hex>-<16 hex>-<2 hex>", neither id all zeros), or "".
func parseTraceparent(v string) string {
	parts := strings.Split(strings.TrimSpace(v), "-")
	if len(parts) != 4 || parts[0] != "00" {
		return ""
	}
	hex := func(s string, n int) bool {
		if len(s) != n {
			return false
		}
		for _, r := range s {
			if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
				return false
			}
		}
		return true
	}
	zero := func(s string) bool { return strings.Trim(s, "0") == "" }
	if !hex(parts[1], 32) || !hex(parts[2], 16) || !hex(parts[3], 2) || zero(parts[1]) || zero(parts[2]) {
		return ""
	}
	return parts[1]
}

// FencingToken is the fencing token of the leader that sent the call, if
// it carried one (mutations from a controller running with leader
// election). A malformed token never reaches a handler: the SDK answers
// INVALID_ARGUMENT for it.
func FencingToken(ctx context.Context) (Token, bool) {
	if c, ok := ctx.Value(callKey{}).(*call); ok && c.token != nil {
		return *c.token, true
	}
	return Token{}, false
}

var nextID atomic.Uint64

// callContext reads the request id and the fencing token of one call; a
// malformed fencing token is refused naming the metadata key, as a write
// whose sender cannot be told must not be applied.
func callContext(ctx context.Context) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	c := &call{}
	if ids := md.Get(RequestIDMetadata); len(ids) > 0 && ids[0] != "" && len(ids[0]) <= 128 {
		c.requestID = ids[0]
	} else {
		c.requestID = fmt.Sprintf("sdk-%d-%d", os.Getpid(), nextID.Add(1))
	}
	// grpc-timeout counts from when the request is read: a provider paused
	// past the caller's deadline must not act on what it gave up on.
	if ds := md.Get(DeadlineMetadata); len(ds) == 1 {
		if ms, err := strconv.ParseInt(ds[0], 10, 64); err == nil && ms >= 0 {
			if late := time.Since(time.UnixMilli(ms)); late > 0 {
				return ctx, fmt.Errorf("the caller gave up %d ms before this request was read (%s): %w",
					late.Milliseconds(), DeadlineMetadata, context.DeadlineExceeded)
			}
		}
	}
	if tps := md.Get(TraceparentMetadata); len(tps) == 1 {
		c.traceID = parseTraceparent(tps[0])
	}
	if tokens := md.Get(FencingTokenMetadata); len(tokens) > 0 {
		field := "metadata[" + FencingTokenMetadata + "]"
		if len(tokens) > 1 {
			return ctx, InvalidRequest(field, fmt.Sprintf("given %d times", len(tokens)))
		}
		t, err := ParseToken(tokens[0])
		if err != nil {
			return ctx, InvalidRequest(field, err.Error())
		}
		c.token = &t
	}
	return context.WithValue(ctx, callKey{}, c), nil
}

const contractPackage = "ccmrs.cloudprovider.v1"

// UnaryInterceptor gives the contract's handlers the call's request id and fencing token
// (RequestID, FencingToken), refuses a malformed fencing token, turns a
// handler's panic into INTERNAL, logs failures with the request id, and
// turns every error into a contract error (FromError). It serves
// BatchInstances for every InstancesService (natively or by fan-out, see
// batch.go) and so adds CAPABILITY_INSTANCES_BATCH to capabilities that
// list CAPABILITY_INSTANCES.
func UnaryInterceptor(logger *slog.Logger) grpc.UnaryServerInterceptor {
	if logger == nil {
		logger = slog.Default()
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		if !strings.HasPrefix(info.FullMethod, "/"+contractPackage+".") {
			// Health and reflection answer with their own codes.
			return handler(ctx, req)
		}
		start := time.Now()
		ctx, err = callContext(ctx)
		if err == nil {
			if info.FullMethod == pb.InstancesService_BatchInstances_FullMethodName {
				handler = serveBatch(info.Server, handler)
			}
			resp, err = protect(ctx, req, handler, logger, info.FullMethod)
		}
		if err == nil {
			if info.FullMethod == pb.IdentityService_GetProviderCapabilities_FullMethodName {
				resp = announceBatch(resp)
			}
			return resp, nil
		}
		e := FromError(err)
		logger.LogAttrs(ctx, slog.LevelDebug, "call failed",
			slog.String("method", info.FullMethod), slog.String("request_id", RequestID(ctx)),
			slog.String("trace_id", TraceID(ctx)),
			slog.String("code", e.Code.String()), slog.String("reason", ReasonName(e.Reason)),
			slog.Duration("took", time.Since(start)), slog.String("error", e.Error()))
		return nil, e
	}
}

func protect(ctx context.Context, req any, handler grpc.UnaryHandler, logger *slog.Logger, method string) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			logger.Error("handler panicked", "method", method, "request_id", RequestID(ctx),
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			resp, err = nil, Internal(fmt.Sprintf("provider panicked: %v", p))
		}
	}()
	return handler(ctx, req)
}
