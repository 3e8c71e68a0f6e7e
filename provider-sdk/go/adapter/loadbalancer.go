package adapter

import (
	"context"
	"errors"

	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// loadBalancers serves LoadBalancerService from cloudprovider.LoadBalancer.
type loadBalancers struct {
	pb.UnimplementedLoadBalancerServiceServer
	*Adapter
}

// target checks the cluster name and the Service of an Ensure or Update:
// at least one port.
func target(cluster string, s *pb.Service) error {
	if v := sdk.CheckName("cluster_name", cluster); v != nil {
		return v.Invalid()
	}
	if v := sdk.CheckService("service", s); v != nil {
		return v.Invalid()
	}
	return nil
}

// targetRef checks the cluster name and the Service of a read or the
// delete: ports are not needed to find a load balancer.
func targetRef(cluster string, s *pb.Service) error {
	if v := sdk.CheckName("cluster_name", cluster); v != nil {
		return v.Invalid()
	}
	if v := sdk.CheckServiceRef("service", s); v != nil {
		return v.Invalid()
	}
	return nil
}

// started refuses to start a mutation its caller has already given up on:
// the cloud call could not be taken back.
func started(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return sdk.FromError(err)
	}
	return nil
}

// elsewhere is the implemented_elsewhere answer for err.
func elsewhere(err error) *pb.ImplementedElsewhere {
	return &pb.ImplementedElsewhere{Message: sdk.Bounded(err.Error())}
}

func (a loadBalancers) GetLoadBalancer(ctx context.Context, req *pb.GetLoadBalancerRequest) (*pb.GetLoadBalancerResponse, error) {
	if err := targetRef(req.GetClusterName(), req.GetService()); err != nil {
		return nil, err
	}
	status, exists, err := a.lb.GetLoadBalancer(ctx, req.GetClusterName(), toService(req.GetService()))
	if err != nil {
		return nil, cloudError(err)
	}
	if !exists {
		return &pb.GetLoadBalancerResponse{Existence: pb.LoadBalancerExistence_LOAD_BALANCER_EXISTENCE_NOT_EXISTS}, nil
	}
	resp := &pb.GetLoadBalancerResponse{Existence: pb.LoadBalancerExistence_LOAD_BALANCER_EXISTENCE_EXISTS}
	if status != nil {
		s, v := fromStatus("status", status)
		if v != nil {
			return nil, v.BadAnswer("an invalid load balancer status")
		}
		resp.Status = s
	}
	return resp, nil
}

func (a loadBalancers) GetLoadBalancerName(ctx context.Context, req *pb.GetLoadBalancerNameRequest) (*pb.GetLoadBalancerNameResponse, error) {
	if err := targetRef(req.GetClusterName(), req.GetService()); err != nil {
		return nil, err
	}
	name := a.lb.GetLoadBalancerName(ctx, req.GetClusterName(), toService(req.GetService()))
	if name == "" {
		return nil, sdk.Internal("provider answered an empty load balancer name")
	}
	return &pb.GetLoadBalancerNameResponse{Name: name}, nil
}

func (a loadBalancers) EnsureLoadBalancer(ctx context.Context, req *pb.EnsureLoadBalancerRequest) (*pb.EnsureLoadBalancerResponse, error) {
	if err := target(req.GetClusterName(), req.GetService()); err != nil {
		return nil, err
	}
	if v := sdk.CheckNodeRefs("nodes", req.GetNodes()); v != nil {
		return nil, v.Invalid()
	}
	if err := started(ctx); err != nil {
		return nil, err
	}
	status, err := a.lb.EnsureLoadBalancer(ctx, req.GetClusterName(), toService(req.GetService()), toNodes(req.GetNodes()))
	if errors.Is(err, cloudprovider.ImplementedElsewhere) {
		return &pb.EnsureLoadBalancerResponse{Result: &pb.EnsureLoadBalancerResponse_ImplementedElsewhere{
			ImplementedElsewhere: elsewhere(err),
		}}, nil
	}
	if err != nil {
		return nil, cloudError(err)
	}
	if status == nil {
		// Upstream's service controller refuses it too.
		return nil, sdk.Internal("EnsureLoadBalancer answered a nil status and no error")
	}
	s, v := fromStatus("status", status)
	if v != nil {
		return nil, v.BadAnswer("an invalid status")
	}
	return &pb.EnsureLoadBalancerResponse{Result: &pb.EnsureLoadBalancerResponse_Status{Status: s}}, nil
}

func (a loadBalancers) UpdateLoadBalancer(ctx context.Context, req *pb.UpdateLoadBalancerRequest) (*pb.UpdateLoadBalancerResponse, error) {
	if err := target(req.GetClusterName(), req.GetService()); err != nil {
		return nil, err
	}
	if v := sdk.CheckNodeRefs("nodes", req.GetNodes()); v != nil {
		return nil, v.Invalid()
	}
	if err := started(ctx); err != nil {
		return nil, err
	}
	// The contract: never "updated" (nor created) for a load balancer that
	// does not exist, so the controller learns it must ensure it again;
	// cloudprovider implementations often answer nil for it.
	svc := toService(req.GetService())
	_, exists, err := a.lb.GetLoadBalancer(ctx, req.GetClusterName(), svc)
	if err == nil && !exists {
		return nil, sdk.NotFound("no load balancer for service " + svc.Namespace + "/" + svc.Name)
	}
	if err == nil {
		err = a.lb.UpdateLoadBalancer(ctx, req.GetClusterName(), svc, toNodes(req.GetNodes()))
	}
	if errors.Is(err, cloudprovider.ImplementedElsewhere) {
		return &pb.UpdateLoadBalancerResponse{Result: &pb.UpdateLoadBalancerResponse_ImplementedElsewhere{
			ImplementedElsewhere: elsewhere(err),
		}}, nil
	}
	if err != nil {
		return nil, cloudError(err)
	}
	return &pb.UpdateLoadBalancerResponse{Result: &pb.UpdateLoadBalancerResponse_Updated{Updated: &pb.LoadBalancerUpdated{}}}, nil
}

func (a loadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, req *pb.EnsureLoadBalancerDeletedRequest) (*pb.EnsureLoadBalancerDeletedResponse, error) {
	if err := targetRef(req.GetClusterName(), req.GetService()); err != nil {
		return nil, err
	}
	if err := started(ctx); err != nil {
		return nil, err
	}
	err := a.lb.EnsureLoadBalancerDeleted(ctx, req.GetClusterName(), toService(req.GetService()))
	// Upstream's service controller ignores ImplementedElsewhere on
	// deletion, and the contract has no such answer for it.
	if err != nil && !errors.Is(err, cloudprovider.ImplementedElsewhere) {
		return nil, cloudError(err)
	}
	return &pb.EnsureLoadBalancerDeletedResponse{}, nil
}

func (a loadBalancers) ListLoadBalancers(context.Context, *pb.ListLoadBalancersRequest) (*pb.ListLoadBalancersResponse, error) {
	return nil, sdk.Unimplemented("ListLoadBalancers: cloudprovider.LoadBalancer cannot list load balancers")
}
