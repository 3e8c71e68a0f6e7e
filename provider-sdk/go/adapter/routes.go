package adapter

import (
	"context"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// routes serves RoutesService from cloudprovider.Routes; the adapter
// paginates the cloud's whole listing.
type routes struct {
	pb.UnimplementedRoutesServiceServer
	*Adapter
}

func (a routes) ListRoutes(ctx context.Context, req *pb.ListRoutesRequest) (*pb.ListRoutesResponse, error) {
	if v := sdk.CheckName("cluster_name", req.GetClusterName()); v != nil {
		return nil, v.Invalid()
	}
	// The cloud lists every route: a malformed page request is refused
	// before, with the violation sdk.Page would give.
	if v := sdk.CheckPageRequest(req.GetPageSize(), req.GetPageToken()); v != nil {
		return nil, v.Invalid()
	}
	all, err := a.routes.ListRoutes(ctx, req.GetClusterName())
	if err != nil {
		return nil, cloudError(err)
	}
	out := make([]*pb.Route, 0, len(all))
	for i, r := range all {
		if r == nil {
			return nil, sdk.Internal("provider answered a nil route")
		}
		route, v := fromRoute("routes", i, r)
		if v != nil {
			return nil, v.BadAnswer("an invalid route")
		}
		out = append(out, route)
	}
	page, next, v := sdk.Page(out, (*pb.Route).GetDestinationCidr, req.GetPageSize(), req.GetPageToken())
	if v != nil {
		return nil, v.Invalid()
	}
	return &pb.ListRoutesResponse{Routes: page, NextPageToken: next}, nil
}

func (a routes) CreateRoute(ctx context.Context, req *pb.CreateRouteRequest) (*pb.CreateRouteResponse, error) {
	if v := sdk.CheckName("cluster_name", req.GetClusterName()); v != nil {
		return nil, v.Invalid()
	}
	if v := sdk.CheckName("name_hint", req.GetNameHint()); v != nil {
		return nil, v.Invalid()
	}
	if v := sdk.CheckRoute("route", req.GetRoute()); v != nil {
		return nil, v.Invalid()
	}
	if req.GetRoute().GetBlackhole() {
		return nil, sdk.InvalidRequest("route.blackhole", "cannot create a blackhole route")
	}
	if err := started(ctx); err != nil {
		return nil, err
	}
	route := toRoute(req.GetRoute(), a.opts.RoutesTargetNodeAddresses)
	if err := a.routes.CreateRoute(ctx, req.GetClusterName(), req.GetNameHint(), route); err != nil {
		if a.opts.IsRouteConflict != nil && a.opts.IsRouteConflict(err) {
			return nil, sdk.ConflictingResource(err.Error())
		}
		return nil, cloudError(err)
	}
	// cloudprovider.Routes does not report the route it created: the
	// answer's route stays unset.
	return &pb.CreateRouteResponse{}, nil
}

func (a routes) DeleteRoute(ctx context.Context, req *pb.DeleteRouteRequest) (*pb.DeleteRouteResponse, error) {
	if v := sdk.CheckName("cluster_name", req.GetClusterName()); v != nil {
		return nil, v.Invalid()
	}
	if v := sdk.CheckRoute("route", req.GetRoute()); v != nil {
		return nil, v.Invalid()
	}
	if err := started(ctx); err != nil {
		return nil, err
	}
	route := toRoute(req.GetRoute(), a.opts.RoutesTargetNodeAddresses)
	if err := a.routes.DeleteRoute(ctx, req.GetClusterName(), route); err != nil {
		if a.opts.IsRouteNotFound != nil && a.opts.IsRouteNotFound(err) {
			return &pb.DeleteRouteResponse{}, nil // already gone: the contract's DeleteRoute is idempotent
		}
		return nil, cloudError(err)
	}
	return &pb.DeleteRouteResponse{}, nil
}
