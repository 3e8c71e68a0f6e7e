// Package sdk is the server side of the ccm-rs provider contract
// (ccmrs.cloudprovider.v1) for Go providers: the Unix socket (stale socket
// cleanup, mode 0600 by default), gRPC health and reflection on the same
// socket, the contract's 16 MiB message limits, graceful shutdown on
// SIGTERM and SIGINT, the controller's request id and fencing token in the
// call's context, errors with the contract's codes, reasons and details,
// request and answer validation naming the field, keyset pagination, and
// BatchInstances for every InstancesService (batch.go).
//
// Most Go providers do not use it directly: package adapter serves any
// k8s.io/cloud-provider cloudprovider.Interface with it.
package sdk

import "time"

const (
	// ErrorDomain is the google.rpc.ErrorInfo domain of every contract error.
	ErrorDomain = "ccmrs.cloudprovider.v1"
	// RequestIDMetadata is the gRPC metadata key of the controller's request id.
	RequestIDMetadata = "x-ccm-request-id"
	// TraceparentMetadata is the W3C Trace Context key: one trace id for
	// every call of one reconcile, a new span id per call (TraceID).
	TraceparentMetadata = "traceparent"
	// DeadlineMetadata is the gRPC metadata key of the instant the
	// controller gives up on a call, in milliseconds since the Unix epoch.
	DeadlineMetadata = "x-ccm-deadline"
	// FencingTokenMetadata is the gRPC metadata key of the leader's fencing
	// token on mutations: "<term>:<holder>".
	FencingTokenMetadata = "x-ccm-fencing-token"
	// ContractVersion is the contract version reported in GetProviderInfo.
	ContractVersion = "1.4.0"
	// MaxMessageBytes is the message size both sides accept, each way.
	MaxMessageBytes = 16 * 1024 * 1024
	// DefaultEndpoint is where the controller looks for the provider.
	DefaultEndpoint = "unix:///var/run/cloud-provider/provider.sock"
	// DefaultSocketMode is the permission of the socket file; 0660 when the
	// controller runs as another user of the same group.
	DefaultSocketMode = 0o600
	// DefaultGracePeriod bounds how long shutdown waits for calls in flight.
	DefaultGracePeriod = 25 * time.Second
)
