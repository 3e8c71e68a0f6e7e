package adapter

import (
	"context"
	"errors"

	"google.golang.org/grpc/status"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"

	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// notFound tells whether err says an instance does not exist:
// cloudprovider.InstanceNotFound, or an error Options.IsInstanceNotFound
// recognises.
func (a *Adapter) notFound(err error) bool {
	return err != nil && (errors.Is(err, cloudprovider.InstanceNotFound) ||
		a.opts.IsInstanceNotFound != nil && a.opts.IsInstanceNotFound(err))
}

// instanceError is cloudError for the instances and zones services, where
// the cloud's own not-found errors are InstanceNotFound.
func (a *Adapter) instanceError(err error) error {
	var e *sdk.Error
	if err != nil && !errors.As(err, &e) && a.notFound(err) {
		return sdk.InstanceNotFound(err.Error())
	}
	return cloudError(err)
}

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
