package adapter

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// LoadBalancerLister is an optional interface of a cloud's
// cloudprovider.LoadBalancer: a cloud that can list the load balancers it
// created for a cluster (by a tag or label naming the cluster and the
// Service's uid) implements it, and the adapter advertises
// CAPABILITY_LIST_LOAD_BALANCERS, so the controller's orphan sweeper
// deletes load balancers whose Service is gone.
type LoadBalancerLister interface {
	// ListLoadBalancers lists every load balancer the cloud created for
	// clusterName, each once; the adapter paginates. An error means the
	// listing is incomplete, and the sweeper deletes nothing.
	ListLoadBalancers(ctx context.Context, clusterName string) ([]LoadBalancerSummary, error)
}

// LoadBalancerSummary is one load balancer of a listing.
type LoadBalancerSummary struct {
	// Name is the load balancer's cloud name (REQUIRED, unique in the
	// listing).
	Name string
	// ServiceUID is metadata.uid of the Service it was created for
	// (REQUIRED): the sweeper deletes it when no Service has that uid.
	ServiceUID types.UID
	// ServiceNamespace and ServiceName are the Service's when it was
	// created, for humans (OPTIONAL).
	ServiceNamespace, ServiceName string
	// Status is the load balancer's current status (OPTIONAL).
	Status *corev1.LoadBalancerStatus
}

// turn waits for one of the Options.LoadBalancerConcurrency turns of the
// load balancer mutations (or the call's end); done gives it back.
func (a *Adapter) turn(ctx context.Context) (done func(), err error) {
	select {
	case a.lbTurns <- struct{}{}:
		return func() { <-a.lbTurns }, nil
	case <-ctx.Done():
		return nil, sdk.FromError(ctx.Err())
	}
}

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
	done, err := a.turn(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := started(ctx); err != nil {
		return nil, err
	}
	status, err := a.lb.EnsureLoadBalancer(ctx, req.GetClusterName(), toService(req.GetService()), toNodes(req.GetNodes()))
	a.waitForEvents(ctx)
	if errors.Is(err, cloudprovider.ImplementedElsewhere) {
		return &pb.EnsureLoadBalancerResponse{Result: &pb.EnsureLoadBalancerResponse_ImplementedElsewhere{
			ImplementedElsewhere: elsewhere(err),
		}, Warnings: a.warnings(req.GetService())}, nil
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
	return &pb.EnsureLoadBalancerResponse{Result: &pb.EnsureLoadBalancerResponse_Status{Status: s}, Warnings: a.warnings(req.GetService())}, nil
}

func (a loadBalancers) UpdateLoadBalancer(ctx context.Context, req *pb.UpdateLoadBalancerRequest) (*pb.UpdateLoadBalancerResponse, error) {
	if err := target(req.GetClusterName(), req.GetService()); err != nil {
		return nil, err
	}
	if v := sdk.CheckNodeRefs("nodes", req.GetNodes()); v != nil {
		return nil, v.Invalid()
	}
	done, err := a.turn(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
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
		a.waitForEvents(ctx)
	}
	if errors.Is(err, cloudprovider.ImplementedElsewhere) {
		return &pb.UpdateLoadBalancerResponse{Result: &pb.UpdateLoadBalancerResponse_ImplementedElsewhere{
			ImplementedElsewhere: elsewhere(err),
		}, Warnings: a.warnings(req.GetService())}, nil
	}
	if err != nil {
		return nil, cloudError(err)
	}
	return &pb.UpdateLoadBalancerResponse{Result: &pb.UpdateLoadBalancerResponse_Updated{Updated: &pb.LoadBalancerUpdated{}},
		Warnings: a.warnings(req.GetService())}, nil
}

func (a loadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, req *pb.EnsureLoadBalancerDeletedRequest) (*pb.EnsureLoadBalancerDeletedResponse, error) {
	if err := targetRef(req.GetClusterName(), req.GetService()); err != nil {
		return nil, err
	}
	done, err := a.turn(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := started(ctx); err != nil {
		return nil, err
	}
	err = a.lb.EnsureLoadBalancerDeleted(ctx, req.GetClusterName(), toService(req.GetService()))
	a.waitForEvents(ctx)
	// Upstream's service controller ignores ImplementedElsewhere on
	// deletion, and the contract has no such answer for it.
	if err != nil && !errors.Is(err, cloudprovider.ImplementedElsewhere) {
		return nil, cloudError(err)
	}
	return &pb.EnsureLoadBalancerDeletedResponse{Warnings: a.warnings(req.GetService())}, nil
}

// ListLoadBalancers serves the cloud's LoadBalancerLister (registered
// only with CAPABILITY_LIST_LOAD_BALANCERS); the adapter paginates the
// whole listing by name.
func (a loadBalancers) ListLoadBalancers(ctx context.Context, req *pb.ListLoadBalancersRequest) (*pb.ListLoadBalancersResponse, error) {
	if a.lister == nil {
		return nil, sdk.Unimplemented("ListLoadBalancers: the cloud's LoadBalancer does not implement adapter.LoadBalancerLister")
	}
	if v := sdk.CheckName("cluster_name", req.GetClusterName()); v != nil {
		return nil, v.Invalid()
	}
	if v := sdk.CheckPageRequest(req.GetPageSize(), req.GetPageToken()); v != nil {
		return nil, v.Invalid()
	}
	all, err := a.lister.ListLoadBalancers(ctx, req.GetClusterName())
	if err != nil {
		return nil, cloudError(err)
	}
	out := make([]*pb.LoadBalancerSummary, 0, len(all))
	seen := make(map[string]bool, len(all))
	for i, l := range all {
		field := fmt.Sprintf("load_balancers[%d]", i)
		if v := sdk.CheckName(field+".name", l.Name); v != nil {
			return nil, v.BadAnswer("an invalid load balancer listing")
		}
		if l.ServiceUID == "" {
			return nil, sdk.Internal(fmt.Sprintf("provider answered an invalid load balancer listing: %s.service_uid: is required (load balancer %q)", field, l.Name))
		}
		if seen[l.Name] {
			// Each appears on exactly one page: the pages are keyed by name.
			return nil, sdk.Internal(fmt.Sprintf("provider answered an invalid load balancer listing: %s.name: %q is listed twice", field, l.Name))
		}
		seen[l.Name] = true
		summary := &pb.LoadBalancerSummary{Name: l.Name, ServiceUid: string(l.ServiceUID),
			ServiceNamespace: l.ServiceNamespace, ServiceName: l.ServiceName}
		if l.Status != nil {
			s, v := fromStatus(field+".status", l.Status)
			if v != nil {
				return nil, v.BadAnswer("an invalid load balancer listing")
			}
			summary.Status = s
		}
		out = append(out, summary)
	}
	page, next, v := sdk.Page(out, (*pb.LoadBalancerSummary).GetName, req.GetPageSize(), req.GetPageToken())
	if v != nil {
		return nil, v.Invalid()
	}
	return &pb.ListLoadBalancersResponse{LoadBalancers: page, NextPageToken: next}, nil
}
