// Package adapter serves any k8s.io/cloud-provider cloudprovider.Interface
// as a ccm-rs provider, so a team with an in-process cloud-controller-manager
// keeps its cloud code and runs it next to the ccm-rs controller:
//
//	cloud, err := cloudprovider.InitCloudProvider(name, configPath)
//	...
//	err = adapter.Serve(ctx, cloud, adapter.Options{Endpoint: endpoint})
//
// What the cloud supports decides the capabilities advertised:
// InstancesV2 (or else Instances, translated the way upstream's node and
// node-lifecycle controllers use it) → CAPABILITY_INSTANCES; LoadBalancer;
// Routes; Zones (only without InstancesV2: upstream never calls Zones of
// a cloud that has InstancesV2); Clusters; PVLabeler (by type assertion)
// → CAPABILITY_VOLUME_LABELS. cloudprovider.Interface has no listing of
// load balancers, so CAPABILITY_LIST_LOAD_BALANCERS is never advertised.
//
// Errors of the cloud are mapped to the contract: cloudprovider.InstanceNotFound
// → NOT_FOUND / INSTANCE_NOT_FOUND, cloudprovider.NotImplemented →
// UNIMPLEMENTED, an api.RetryError → UNAVAILABLE / RETRY_AFTER with its
// delay, cloudprovider.ImplementedElsewhere from EnsureLoadBalancer or
// UpdateLoadBalancer → the implemented_elsewhere answer, an *sdk.Error
// (sdk.QuotaExceeded, sdk.ConflictingResource, sdk.NotLeader, ...) as it is,
// context deadlines and cancellations → DEADLINE_EXCEEDED and CANCELLED,
// anything else, a gRPC status of the cloud's own API included (even
// UNIMPLEMENTED) → UNKNOWN (nobody can tell whether it happened). An answer
// the contract forbids (an invalid address, an empty load balancer name, a
// nil status) is a cloud bug and answered INTERNAL.
package adapter

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// Options configure the adapter; the zero value works for most clouds.
type Options struct {
	// Endpoint is where to serve (default sdk.DefaultEndpoint).
	Endpoint string
	// Name is the provider's name, a DNS-1123 label (default
	// cloud.ProviderName()).
	Name string
	// ProviderIDScheme is the part of providerIDs before "://" (default
	// cloud.ProviderName()). A Node whose providerID has another scheme is
	// refused (INVALID_ARGUMENT) before the cloud sees it: a cloud can only
	// know that its own instance is gone.
	ProviderIDScheme string
	// ExtraProviderIDSchemes are further schemes of the cloud's providerIDs
	// (for example "hrobot" beside "hcloud"): a Node of one of them reaches
	// the cloud too (schemes.go).
	ExtraProviderIDSchemes []string
	// VendorVersion is the provider's version (default: the main module's
	// version from the build information, or "unknown").
	VendorVersion string
	// Manifest are diagnostic facts for GetProviderInfo; no secrets.
	Manifest map[string]string
	// AnnotationPrefixes and AnnotationKeys are the Service annotations the
	// cloud reads (GetProviderCapabilities.annotations).
	AnnotationPrefixes []string
	AnnotationKeys     []string
	// RoutesTargetNodeAddresses advertises CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES
	// and sets cloudprovider.Route.EnableNodeAddresses on the routes the
	// cloud gets. Contract 1.1.0 then asks that the cloud's ListRoutes
	// return each route's TargetNodeAddresses as created, and that its
	// CreateRoute for a CIDR already routed to the same node update the
	// route in place (the controller sends no DeleteRoute first).
	RoutesTargetNodeAddresses bool
	// Probe reports readiness (nil error: READY; an error: NOT_READY with
	// its message). Default: always READY.
	Probe func(ctx context.Context) error
	// ClientBuilder is passed to cloud.Initialize, which New calls before
	// it asks the cloud for any interface, as the upstream
	// cloud-controller-manager does (nil unless set: clouds that need a
	// Kubernetes client must be given one).
	ClientBuilder cloudprovider.ControllerClientBuilder
	// SocketMode, GracePeriod and Logger are passed to sdk.Serve.
	SocketMode  fs.FileMode
	GracePeriod time.Duration
	Logger      *slog.Logger
}

// Adapter serves one cloud. The interfaces the cloud supports are read once,
// in New: the capabilities must stay the same for the provider's lifetime.
type Adapter struct {
	cloud cloudprovider.Interface
	// stop is the channel cloud.Initialize was given; Close closes it.
	stop         chan struct{}
	closeOnce    sync.Once
	opts         Options
	info         *pb.GetProviderInfoResponse
	capabilities []pb.Capability
	instancesV2  cloudprovider.InstancesV2
	instances    cloudprovider.Instances
	lb           cloudprovider.LoadBalancer
	routes       cloudprovider.Routes
	zones        cloudprovider.Zones
	clusters     cloudprovider.Clusters
	volumes      cloudprovider.PVLabeler
}

// New checks the provider's identity, calls cloud.Initialize (with
// Options.ClientBuilder and a stop channel that Close closes), then reads
// what the cloud supports: upstream's cloud-controller-manager initialises
// a cloud before it asks for any of its interfaces, and clouds keep what
// Initialize gave them (clients, an event recorder) in those interfaces.
func New(cloud cloudprovider.Interface, opts Options) (*Adapter, error) {
	if cloud == nil {
		return nil, fmt.Errorf("adapter: no cloud")
	}
	a := &Adapter{cloud: cloud, opts: opts, stop: make(chan struct{})}
	name, scheme, version := opts.Name, opts.ProviderIDScheme, opts.VendorVersion
	if name == "" {
		name = cloud.ProviderName()
	}
	if scheme == "" {
		scheme = cloud.ProviderName()
	}
	if version == "" {
		version = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			version = bi.Main.Version
		}
	}
	if !isDNSLabel(name) {
		return nil, fmt.Errorf("adapter: provider name %q is not a DNS-1123 label of at most 63 characters (set Options.Name)", name)
	}
	if scheme == "" || strings.ContainsAny(scheme, ":/") || strings.ContainsFunc(scheme, func(r rune) bool { return r <= ' ' }) {
		return nil, fmt.Errorf("adapter: providerID scheme %q is not the part before \"://\" (set Options.ProviderIDScheme)", scheme)
	}
	a.info = &pb.GetProviderInfoResponse{
		Name:             name,
		VendorVersion:    version,
		ProviderIdScheme: scheme,
		ContractVersion:  sdk.ContractVersion,
		HasClusterId:     ptr(cloud.HasClusterID()),
		Manifest:         copyMap(opts.Manifest),
	}
	if err := a.ownSchemes(opts.ExtraProviderIDSchemes); err != nil {
		return nil, err
	}
	cloud.Initialize(opts.ClientBuilder, a.stop)
	if v2, ok := cloud.InstancesV2(); ok && v2 != nil {
		a.instancesV2 = v2
	} else if v1, ok := cloud.Instances(); ok && v1 != nil {
		a.instances = v1
	}
	if a.instancesV2 != nil || a.instances != nil {
		a.capabilities = append(a.capabilities, pb.Capability_CAPABILITY_INSTANCES)
	}
	if lb, ok := cloud.LoadBalancer(); ok && lb != nil {
		a.lb = lb
		a.capabilities = append(a.capabilities, pb.Capability_CAPABILITY_LOAD_BALANCERS)
	}
	if r, ok := cloud.Routes(); ok && r != nil {
		a.routes = r
		a.capabilities = append(a.capabilities, pb.Capability_CAPABILITY_ROUTES)
		if opts.RoutesTargetNodeAddresses {
			a.capabilities = append(a.capabilities, pb.Capability_CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES)
		}
	}
	// Upstream: "Implementation of [InstancesV2] will disable calls to the
	// Zones interface."
	if z, ok := cloud.Zones(); ok && z != nil && a.instancesV2 == nil {
		a.zones = z
		a.capabilities = append(a.capabilities, pb.Capability_CAPABILITY_ZONES)
	}
	if c, ok := cloud.Clusters(); ok && c != nil {
		a.clusters = c
		a.capabilities = append(a.capabilities, pb.Capability_CAPABILITY_CLUSTERS)
	}
	if v, ok := cloud.(cloudprovider.PVLabeler); ok {
		a.volumes = v
		a.capabilities = append(a.capabilities, pb.Capability_CAPABILITY_VOLUME_LABELS)
	}
	return a, nil
}

func isDNSLabel(s string) bool {
	return len(s) <= 63 && sdk.IsDNSSubdomain(s) && !strings.Contains(s, ".")
}

// Capabilities are what the adapter advertises for the cloud.
func (a *Adapter) Capabilities() []pb.Capability {
	return append([]pb.Capability(nil), a.capabilities...)
}

// Register registers IdentityService and the services of the cloud's
// capabilities on srv (made with sdk.NewServer); the others stay
// unregistered, so gRPC answers UNIMPLEMENTED for them.
func (a *Adapter) Register(srv *grpc.Server) {
	pb.RegisterIdentityServiceServer(srv, identity{Adapter: a})
	if a.instancesV2 != nil || a.instances != nil {
		pb.RegisterInstancesServiceServer(srv, instances{Adapter: a})
	}
	if a.lb != nil {
		pb.RegisterLoadBalancerServiceServer(srv, loadBalancers{Adapter: a})
	}
	if a.routes != nil {
		pb.RegisterRoutesServiceServer(srv, routes{Adapter: a})
	}
	if a.zones != nil {
		pb.RegisterZonesServiceServer(srv, zones{Adapter: a})
	}
	if a.clusters != nil {
		pb.RegisterClustersServiceServer(srv, clusters{Adapter: a})
	}
	if a.volumes != nil {
		pb.RegisterVolumesServiceServer(srv, volumes{Adapter: a})
	}
}

// Close closes the stop channel the cloud's Initialize was given; Serve
// calls it when it returns. Calling it again does nothing.
func (a *Adapter) Close() {
	a.closeOnce.Do(func() { close(a.stop) })
}

// Serve serves the cloud on Options.Endpoint until ctx is done or
// SIGTERM/SIGINT (see sdk.Serve), then closes the adapter.
func (a *Adapter) Serve(ctx context.Context) error {
	defer a.Close()
	srv := sdk.NewServer(a.opts.Logger)
	a.Register(srv)
	endpoint := a.opts.Endpoint
	if endpoint == "" {
		endpoint = sdk.DefaultEndpoint
	}
	logger := a.opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Info("serving cloud", "provider", a.info.Name, "version", a.info.VendorVersion, "capabilities", a.capabilities)
	return sdk.Serve(ctx, endpoint, srv, sdk.ServeOptions{
		SocketMode: a.opts.SocketMode, GracePeriod: a.opts.GracePeriod, Logger: a.opts.Logger,
	})
}

// Serve is New, then Adapter.Serve.
func Serve(ctx context.Context, cloud cloudprovider.Interface, opts Options) error {
	a, err := New(cloud, opts)
	if err != nil {
		return err
	}
	return a.Serve(ctx)
}

type identity struct {
	pb.UnimplementedIdentityServiceServer
	*Adapter
}

func (a identity) GetProviderInfo(context.Context, *pb.GetProviderInfoRequest) (*pb.GetProviderInfoResponse, error) {
	return a.info, nil
}

func (a identity) GetProviderCapabilities(context.Context, *pb.GetProviderCapabilitiesRequest) (*pb.GetProviderCapabilitiesResponse, error) {
	return &pb.GetProviderCapabilitiesResponse{
		Capabilities: a.capabilities,
		Annotations:  &pb.AnnotationSchema{Prefixes: a.opts.AnnotationPrefixes, KnownKeys: a.opts.AnnotationKeys},
	}, nil
}

func (a identity) Probe(ctx context.Context, _ *pb.ProbeRequest) (*pb.ProbeResponse, error) {
	if a.opts.Probe != nil {
		if err := a.opts.Probe(ctx); err != nil {
			return &pb.ProbeResponse{State: pb.ProbeState_PROBE_STATE_NOT_READY, Message: sdk.Bounded(err.Error())}, nil
		}
	}
	return &pb.ProbeResponse{State: pb.ProbeState_PROBE_STATE_READY}, nil
}
