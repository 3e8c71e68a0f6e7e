package adapter

import (
	"context"
	"errors"

	"google.golang.org/grpc/status"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"

	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// cloudError maps an error of the cloud to the contract (see the package
// documentation). ImplementedElsewhere is handled by the load balancer
// methods before, where it is an answer.
func cloudError(err error) error {
	var e *sdk.Error
	var retry *api.RetryError
	var foreign interface{ GRPCStatus() *status.Status }
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		return sdk.FromError(err)
	case errors.Is(err, cloudprovider.InstanceNotFound):
		return sdk.InstanceNotFound(err.Error())
	case errors.Is(err, cloudprovider.NotImplemented):
		return sdk.Unimplemented(err.Error())
	case errors.As(err, &retry):
		return sdk.RetryAfter(err.Error(), retry.RetryAfter())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return sdk.FromError(err)
	case errors.As(err, &foreign):
		// A gRPC status of the cloud's own API: its codes are not the
		// contract's. sdk.FromError would pass UNIMPLEMENTED on (for the
		// generated Unimplemented* stubs), and the controller would read
		// a cloud SDK's UNIMPLEMENTED as a capability not advertised.
		return sdk.Unknown(err.Error())
	default:
		return sdk.FromError(err)
	}
}
