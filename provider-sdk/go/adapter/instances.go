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

// instances serves InstancesService from InstancesV2 or, for a cloud
// without it, from Instances the way upstream's node controller
// (getInstanceMetadata) and node-lifecycle controller
// (ensureNodeExistsByProviderID, shutdownInCloudProvider) use it.
type instances struct {
	pb.UnimplementedInstancesServiceServer
	*Adapter
}

// node checks the request's node and converts it. A Node whose providerID
// has a scheme the cloud does not own (or is not a providerID) is refused before the cloud
// sees it: the cloud can only know that its own instance is gone, and
// NOT_EXISTS about another cloud's instance would make the controller
// delete the Node.
func (a *Adapter) node(n *pb.NodeRef) (*corev1.Node, error) {
	if v := sdk.CheckNodeRef("node", n); v != nil {
		return nil, v.Invalid()
	}
	if id := n.GetProviderId(); id != "" && !sdk.OwnsProviderID(a.info, id) {
		return nil, sdk.ForeignProviderID(a.info, id)
	}
	return toNode(n), nil
}

// providerID is the node's providerID or, for a Node without one, the one
// Instances.InstanceID gives (cloudprovider.GetInstanceProviderID). Errors
// are the cloud's: InstanceNotFound means the instance does not exist.
func (a *Adapter) providerID(ctx context.Context, node *corev1.Node) (string, error) {
	if node.Spec.ProviderID != "" {
		return node.Spec.ProviderID, nil
	}
	id, err := a.instances.InstanceID(ctx, types.NodeName(node.Name))
	if err != nil {
		return "", err
	}
	if id == "" {
		return "", sdk.Internal(fmt.Sprintf("Instances.InstanceID answered an empty instance id for node %q, and no error", node.Name))
	}
	return a.info.GetProviderIdScheme() + "://" + id, nil
}

func (a instances) InstanceExists(ctx context.Context, req *pb.InstanceExistsRequest) (*pb.InstanceExistsResponse, error) {
	node, err := a.node(req.GetNode())
	if err != nil {
		return nil, err
	}
	var exists bool
	if a.instancesV2 != nil {
		exists, err = a.instancesV2.InstanceExists(ctx, node)
	} else {
		var providerID string
		providerID, err = a.providerID(ctx, node)
		if a.notFound(err) {
			// Upstream: InstanceID's InstanceNotFound means the Node is gone.
			return &pb.InstanceExistsResponse{Existence: pb.InstanceExistence_INSTANCE_EXISTENCE_NOT_EXISTS}, nil
		}
		if err == nil {
			exists, err = a.instances.InstanceExistsByProviderID(ctx, providerID)
		}
	}
	return a.existence(exists, err)
}

// existence is the answer to InstanceExists of a cloud that answered
// exists, err: for a single call and for a query of a batch.
func (a *Adapter) existence(exists bool, err error) (*pb.InstanceExistsResponse, error) {
	if a.notFound(err) {
		// An error is not an answer: upstream's node-lifecycle controller
		// deletes no Node on it, and the contract never says
		// INSTANCE_NOT_FOUND here.
		return nil, sdk.Unknown(fmt.Sprintf("instance existence unknown: the cloud answered InstanceNotFound as an error, not false: %v", err))
	}
	if err != nil {
		return nil, a.instanceError(err)
	}
	if exists {
		return &pb.InstanceExistsResponse{Existence: pb.InstanceExistence_INSTANCE_EXISTENCE_EXISTS}, nil
	}
	return &pb.InstanceExistsResponse{Existence: pb.InstanceExistence_INSTANCE_EXISTENCE_NOT_EXISTS}, nil
}

func (a instances) InstanceShutdown(ctx context.Context, req *pb.InstanceShutdownRequest) (*pb.InstanceShutdownResponse, error) {
	node, err := a.node(req.GetNode())
	if err != nil {
		return nil, err
	}
	var shutdown bool
	if a.instancesV2 != nil {
		shutdown, err = a.instancesV2.InstanceShutdown(ctx, node)
	} else {
		var providerID string
		providerID, err = a.providerID(ctx, node)
		if err == nil {
			shutdown, err = a.instances.InstanceShutdownByProviderID(ctx, providerID)
			if errors.Is(err, cloudprovider.NotImplemented) {
				// Upstream takes it as "not shut down".
				shutdown, err = false, nil
			}
		}
	}
	return a.shutdownState(shutdown, err)
}

// shutdownState is the answer to InstanceShutdown of a cloud that
// answered shutdown, err.
func (a *Adapter) shutdownState(shutdown bool, err error) (*pb.InstanceShutdownResponse, error) {
	if err != nil {
		return nil, a.instanceError(err)
	}
	if shutdown {
		return &pb.InstanceShutdownResponse{State: pb.InstanceShutdownState_INSTANCE_SHUTDOWN_STATE_SHUT_DOWN}, nil
	}
	return &pb.InstanceShutdownResponse{State: pb.InstanceShutdownState_INSTANCE_SHUTDOWN_STATE_RUNNING}, nil
}

func (a instances) InstanceMetadata(ctx context.Context, req *pb.InstanceMetadataRequest) (*pb.InstanceMetadataResponse, error) {
	node, err := a.node(req.GetNode())
	if err != nil {
		return nil, err
	}
	if a.instancesV2 != nil {
		md, err := a.instancesV2.InstanceMetadata(ctx, node)
		return a.metadata(req.GetNode(), node, md, err, "InstancesV2.InstanceMetadata")
	}
	md, err := a.metadataV1(ctx, node)
	if err != nil {
		return nil, a.instanceError(err)
	}
	return a.metadata(req.GetNode(), node, md, nil, "")
}

// metadata is the answer to InstanceMetadata about ref (node converted) of
// a cloud whose method what answered md, err: nil metadata is INTERNAL, an
// empty providerID the Node's own (as upstream), the Node's warnings ride
// on it.
func (a *Adapter) metadata(ref *pb.NodeRef, node *corev1.Node, md *cloudprovider.InstanceMetadata, err error, what string) (*pb.InstanceMetadataResponse, error) {
	if err != nil {
		return nil, a.instanceError(err)
	}
	if md == nil {
		return nil, sdk.Internal(what + " answered nil metadata and no error")
	}
	if md.ProviderID == "" {
		c := *md
		c.ProviderID = node.Spec.ProviderID
		md = &c
	}
	out, v := fromMetadata(md)
	if v != nil {
		return nil, v.BadAnswer("an invalid InstanceMetadata")
	}
	return &pb.InstanceMetadataResponse{Metadata: out, Warnings: a.nodeWarnings(ref)}, nil
}

// metadataV1 is upstream's getInstanceMetadata for a cloud without
// InstancesV2: the providerID (InstanceID for a Node without one, unless
// not implemented), addresses and instance type by providerID falling back
// to the node name, and the zone from Zones when the cloud has them.
func (a *Adapter) metadataV1(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	providerID, err := a.providerID(ctx, node)
	if errors.Is(err, cloudprovider.NotImplemented) {
		providerID, err = "", nil
	}
	if err != nil {
		return nil, err
	}
	name := types.NodeName(node.Name)
	addresses, err := byIDOrName(ctx, providerID, name, a.instances.NodeAddressesByProviderID, a.instances.NodeAddresses)
	if err != nil {
		return nil, err
	}
	instanceType, err := byIDOrName(ctx, providerID, name, a.instances.InstanceTypeByProviderID, a.instances.InstanceType)
	if err != nil {
		return nil, err
	}
	md := &cloudprovider.InstanceMetadata{ProviderID: providerID, InstanceType: instanceType, NodeAddresses: addresses}
	if a.zones != nil {
		zone, err := byIDOrName(ctx, providerID, name, a.zones.GetZoneByProviderID, a.zones.GetZoneByNodeName)
		if err != nil {
			return nil, fmt.Errorf("zone: %w", err)
		}
		md.Zone, md.Region = zone.FailureDomain, zone.Region
	}
	return md, nil
}

// byIDOrName asks by providerID (when there is one) and, when that fails,
// by node name, as upstream does. The error is the name lookup's, or the
// providerID lookup's when the name lookup is not implemented.
func byIDOrName[T any](ctx context.Context, providerID string, name types.NodeName,
	byID func(context.Context, string) (T, error), byName func(context.Context, types.NodeName) (T, error)) (T, error) {
	var idErr error
	if providerID != "" {
		v, err := byID(ctx, providerID)
		if err == nil {
			return v, nil
		}
		idErr = err
	}
	v, err := byName(ctx, name)
	if err != nil && idErr != nil && errors.Is(err, cloudprovider.NotImplemented) {
		err = idErr
	}
	return v, err
}

func fromMetadata(md *cloudprovider.InstanceMetadata) (*pb.InstanceMetadata, *sdk.Violation) {
	addresses, v := fromAddresses("metadata.node_addresses", md.NodeAddresses)
	if v != nil {
		return nil, v
	}
	out := &pb.InstanceMetadata{
		ProviderId:       md.ProviderID,
		InstanceType:     md.InstanceType,
		NodeAddresses:    addresses,
		Zone:             md.Zone,
		Region:           md.Region,
		AdditionalLabels: copyMap(md.AdditionalLabels),
	}
	return out, sdk.CheckInstanceMetadata("metadata", out)
}
