package adapter

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// zones serves ZonesService from cloudprovider.Zones.
type zones struct {
	pb.UnimplementedZonesServiceServer
	*Adapter
}

func fromZone(z cloudprovider.Zone) (*pb.Zone, error) {
	out := &pb.Zone{FailureDomain: z.FailureDomain, Region: z.Region}
	for _, v := range []*sdk.Violation{
		sdk.CheckLabelValue("zone.failure_domain", out.FailureDomain),
		sdk.CheckLabelValue("zone.region", out.Region),
	} {
		if v != nil {
			return nil, v.BadAnswer("an invalid zone")
		}
	}
	return out, nil
}

func (a zones) GetZoneByProviderId(ctx context.Context, req *pb.GetZoneByProviderIdRequest) (*pb.GetZoneByProviderIdResponse, error) {
	if v := sdk.CheckName("provider_id", req.GetProviderId()); v != nil {
		return nil, v.Invalid()
	}
	z, err := a.zones.GetZoneByProviderID(ctx, req.GetProviderId())
	if err != nil {
		return nil, a.instanceError(err)
	}
	zone, err := fromZone(z)
	if err != nil {
		return nil, err
	}
	return &pb.GetZoneByProviderIdResponse{Zone: zone}, nil
}

func (a zones) GetZoneByNodeName(ctx context.Context, req *pb.GetZoneByNodeNameRequest) (*pb.GetZoneByNodeNameResponse, error) {
	if v := sdk.CheckName("node_name", req.GetNodeName()); v != nil {
		return nil, v.Invalid()
	}
	z, err := a.zones.GetZoneByNodeName(ctx, types.NodeName(req.GetNodeName()))
	if err != nil {
		return nil, a.instanceError(err)
	}
	zone, err := fromZone(z)
	if err != nil {
		return nil, err
	}
	return &pb.GetZoneByNodeNameResponse{Zone: zone}, nil
}

// clusters serves ClustersService from cloudprovider.Clusters.
type clusters struct {
	pb.UnimplementedClustersServiceServer
	*Adapter
}

func (a clusters) ListClusters(ctx context.Context, _ *pb.ListClustersRequest) (*pb.ListClustersResponse, error) {
	names, err := a.clusters.ListClusters(ctx)
	if err != nil {
		return nil, cloudError(err)
	}
	return &pb.ListClustersResponse{ClusterNames: names}, nil
}

func (a clusters) Master(ctx context.Context, req *pb.MasterRequest) (*pb.MasterResponse, error) {
	if v := sdk.CheckName("cluster_name", req.GetClusterName()); v != nil {
		return nil, v.Invalid()
	}
	// The contract answers NOT_FOUND for a cluster the provider does not
	// list; cloudprovider.Clusters implementations often answer anything.
	names, err := a.clusters.ListClusters(ctx)
	if err != nil {
		return nil, cloudError(err)
	}
	if !slices.Contains(names, req.GetClusterName()) {
		return nil, sdk.NotFound("no cluster " + strconv.Quote(req.GetClusterName()))
	}
	address, err := a.clusters.Master(ctx, req.GetClusterName())
	if err != nil {
		return nil, cloudError(err)
	}
	if address == "" {
		return nil, sdk.Internal("provider answered an empty control-plane address")
	}
	return &pb.MasterResponse{Address: address}, nil
}

// volumes serves VolumesService from cloudprovider.PVLabeler.
type volumes struct {
	pb.UnimplementedVolumesServiceServer
	*Adapter
}

func (a volumes) GetVolumeLabels(ctx context.Context, req *pb.GetVolumeLabelsRequest) (*pb.GetVolumeLabelsResponse, error) {
	if v := sdk.CheckVolume("volume", req.GetVolume()); v != nil {
		return nil, v.Invalid()
	}
	labels, err := a.volumes.GetLabelsForVolume(ctx, toVolume(req.GetVolume()))
	if errors.Is(err, cloudprovider.DiskNotFound) {
		// A volume the cloud does not know: nothing to add.
		return &pb.GetVolumeLabelsResponse{}, nil
	}
	if err != nil {
		return nil, cloudError(err)
	}
	if v := sdk.CheckLabels("labels", labels); v != nil {
		return nil, v.BadAnswer("invalid volume labels")
	}
	return &pb.GetVolumeLabelsResponse{Labels: copyMap(labels)}, nil
}
