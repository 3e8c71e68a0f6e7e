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
// node-lifecycle controllers use it) → CAPABILITY_INSTANCES and
// CAPABILITY_INSTANCES_BATCH (natively for a cloud implementing
// InstancesBatcher, else by asking the single methods); LoadBalancer;
// Routes; Zones (only without InstancesV2: upstream never calls Zones of
// a cloud that has InstancesV2); Clusters; PVLabeler (by type assertion)
// → CAPABILITY_VOLUME_LABELS; a LoadBalancer that implements
// LoadBalancerLister → CAPABILITY_LIST_LOAD_BALANCERS.
//
// The cloud gets a ControllerClientBuilder from $KUBECONFIG (see
// Options.Kubeconfig), and its Event writes become the warnings of the load
// balancer responses (see provider-sdk/go/README.md).
//
// Errors of the cloud are mapped to the contract: cloudprovider.InstanceNotFound
// (or, for instances and zones, an error Options.IsInstanceNotFound
// recognises) → NOT_FOUND / INSTANCE_NOT_FOUND, cloudprovider.NotImplemented →
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
	"k8s.io/client-go/informers"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

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
	// LoadBalancerClasses are the spec.loadBalancerClass values whose
	// Services the cloud serves, for a controller running several providers
	// (contract 1.3.0, GetProviderInfo.load_balancer_classes; hybrid.go):
	// the controller routes a Service with one of them to this provider.
	// Each a class with a DNS-subdomain prefix ("example.com/cloud"), at
	// most 32, none twice.
	LoadBalancerClasses []string
	// DeclineUnclassedServices says the cloud never serves Services without
	// a class, even as the controller's default provider (contract 1.3.0,
	// unclassed_services DECLINED). Unset: it serves them as the default,
	// as every provider before 1.3.0.
	DeclineUnclassedServices bool
	// Platforms are the KEP-5778 platforms the cloud manages (contract
	// 1.3.0, GetProviderInfo.platforms): a Node without a providerID whose
	// cloudprovider.kubernetes.io/platform label or annotation names one is
	// the cloud's to initialise. DNS-1123 labels, at most 16, none twice. A
	// cloud implementing SupportedPlatformer adds its own.
	Platforms []string
	// VendorVersion is the provider's version (default: the main module's
	// version from the build information; for a build without one (a
	// "go build" in the module's own tree says "(devel)"), its VCS revision,
	// with "-dirty" for modified sources; else "unknown").
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
	// Kubeconfig is the kubeconfig that gives the provider cluster access
	// (default: $KUBECONFIG; neither set: no cluster access). The cloud's
	// Initialize gets a ControllerClientBuilder of its clients; their Event
	// writes are answered by the adapter, and Warnings about a Service
	// become warnings of the next load balancer response about it.
	// client-go re-reads the user's tokenFile, so the token may rotate. Without access, the builder's Client and Config
	// answer ErrNoClusterAccess and its ClientOrDie and ConfigOrDie end the
	// process with a message naming KUBECONFIG.
	Kubeconfig string
	// KubeconfigWait bounds New's wait for a Kubeconfig that does not exist
	// yet, written by the controller after the provider started (default
	// DefaultKubeconfigWait; negative: do not wait).
	KubeconfigWait time.Duration
	// ClientBuilder, when set, is passed to cloud.Initialize instead (and
	// gives the informers of an InformerUser cloud); its clients are the
	// caller's: their Events go where they send them.
	ClientBuilder cloudprovider.ControllerClientBuilder
	// InformerSyncTimeout bounds New's wait for the informers an
	// InformerUser cloud asked for in SetInformers (default
	// DefaultInformerSyncTimeout).
	InformerSyncTimeout time.Duration
	// AllowUntaggedCloud lets a cloud whose HasClusterID() is false start
	// (with a warning), as upstream's --allow-untagged-cloud; without it
	// New refuses such a cloud, as upstream's cloud-controller-manager does.
	AllowUntaggedCloud bool
	// IsInstanceNotFound tells the cloud's own "instance not found" errors
	// (for clouds that do not return cloudprovider.InstanceNotFound):
	// errors for which it answers true are taken as InstanceNotFound by the
	// instances and zones services. Without it such an error is UNKNOWN,
	// and the Nodes of deleted instances are never removed.
	IsInstanceNotFound func(error) bool
	// IsRouteNotFound tells the cloud's "no such route" errors of
	// DeleteRoute: the contract's DeleteRoute is idempotent, so such an
	// error answers OK (upstream's route controller only retried it).
	IsRouteNotFound func(error) bool
	// IsRouteConflict tells the cloud's errors of CreateRoute for a CIDR
	// another route holds: they answer ALREADY_EXISTS /
	// CONFLICTING_RESOURCE, as the contract asks, instead of UNKNOWN.
	IsRouteConflict func(error) bool
	// LoadBalancerConcurrency is how many load balancer mutations
	// (EnsureLoadBalancer, UpdateLoadBalancer, EnsureLoadBalancerDeleted)
	// the cloud gets at once (default 1: upstream's
	// --concurrent-service-syncs default, which clouds were written for; the
	// controller runs ten workers). A mutation waiting for its turn honours
	// its deadline.
	LoadBalancerConcurrency int
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
	batcher      InstancesBatcher
	lb           cloudprovider.LoadBalancer
	routes       cloudprovider.Routes
	zones        cloudprovider.Zones
	clusters     cloudprovider.Clusters
	volumes      cloudprovider.PVLabeler
	lister       LoadBalancerLister
	// builder is what cloud.Initialize got; events receives the Event
	// writes of its clients when it is the adapter's own.
	builder    cloudprovider.ControllerClientBuilder
	events     *eventQueue
	eventGrace time.Duration
	// lbTurns holds one token per load balancer mutation allowed at once.
	lbTurns chan struct{}
}

// New checks the provider's identity, calls cloud.Initialize (with a
// ControllerClientBuilder, see Options.Kubeconfig, and a stop channel that
// Close closes) and, for a cloud that implements
// cloudprovider.InformerUser, SetInformers, then reads what the cloud
// supports, then starts the cloud's informers and waits for them to sync:
// upstream's order (app/controllermanager.go). Clouds keep what Initialize
// gave them (clients, an event recorder) in their interfaces, so asking
// first would hand out half-made ones.
func New(cloud cloudprovider.Interface, opts Options) (*Adapter, error) {
	if cloud == nil {
		return nil, fmt.Errorf("adapter: no cloud")
	}
	a := &Adapter{cloud: cloud, opts: opts, stop: make(chan struct{}), events: newEventQueue(), eventGrace: eventGrace}
	name, scheme, version := opts.Name, opts.ProviderIDScheme, opts.VendorVersion
	if name == "" {
		name = cloud.ProviderName()
	}
	if scheme == "" {
		scheme = cloud.ProviderName()
	}
	if version == "" {
		version = buildVersion()
	}
	if !sdk.IsDNSLabel(name) {
		return nil, fmt.Errorf("adapter: provider name %q is not a DNS-1123 label of at most 63 characters (set Options.Name)", name)
	}
	if scheme == "" || strings.ContainsAny(scheme, ":/") || strings.ContainsFunc(scheme, func(r rune) bool { return r <= ' ' }) {
		return nil, fmt.Errorf("adapter: providerID scheme %q is not the part before \"://\" (set Options.ProviderIDScheme)", scheme)
	}
	if opts.LoadBalancerConcurrency < 0 {
		return nil, fmt.Errorf("adapter: Options.LoadBalancerConcurrency %d is negative", opts.LoadBalancerConcurrency)
	}
	a.lbTurns = make(chan struct{}, max(opts.LoadBalancerConcurrency, 1))
	hasID := cloud.HasClusterID()
	if !hasID {
		// Upstream's cloudInitializer, word for word where it can be.
		if !opts.AllowUntaggedCloud {
			return nil, fmt.Errorf("adapter: no ClusterID found.  A ClusterID is required for the cloud provider to function properly.  " +
				"This check can be bypassed by setting Options.AllowUntaggedCloud (upstream's --allow-untagged-cloud)")
		}
		klog.Warning("detected a cluster without a ClusterID.  A ClusterID will be required in the future.  Please tag your cluster to avoid any future issues")
	}
	a.info = &pb.GetProviderInfoResponse{
		Name:             name,
		VendorVersion:    version,
		ProviderIdScheme: scheme,
		ContractVersion:  sdk.ContractVersion,
		HasClusterId:     ptr(hasID),
		Manifest:         copyMap(opts.Manifest),
	}
	if err := a.ownSchemes(opts.ExtraProviderIDSchemes); err != nil {
		return nil, err
	}
	if err := a.declareHybrid(cloud, opts); err != nil {
		return nil, err
	}
	builder, err := builderFor(opts, a.events)
	if err != nil {
		return nil, err
	}
	a.builder = builder
	cloud.Initialize(builder, a.stop)
	informerUser, _ := cloud.(cloudprovider.InformerUser)
	var factory informers.SharedInformerFactory
	if informerUser != nil {
		if factory, err = a.informers(informerUser); err != nil {
			a.Close()
			return nil, err
		}
	}
	if v2, ok := cloud.InstancesV2(); ok && v2 != nil {
		a.instancesV2 = v2
	} else if v1, ok := cloud.Instances(); ok && v1 != nil {
		a.instances = v1
	}
	if a.instancesV2 != nil || a.instances != nil {
		// BatchInstances is served for every cloud: natively with an
		// InstancesBatcher, else by fan-out (batch.go).
		a.batcher = batcherOf(cloud, a.instancesV2)
		a.capabilities = append(a.capabilities, pb.Capability_CAPABILITY_INSTANCES, pb.Capability_CAPABILITY_INSTANCES_BATCH)
	}
	if lb, ok := cloud.LoadBalancer(); ok && lb != nil {
		a.lb = lb
		a.capabilities = append(a.capabilities, pb.Capability_CAPABILITY_LOAD_BALANCERS)
		if l, ok := lb.(LoadBalancerLister); ok {
			a.lister = l
			a.capabilities = append(a.capabilities, pb.Capability_CAPABILITY_LIST_LOAD_BALANCERS)
		}
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
	if factory != nil {
		if err := a.syncInformers(factory); err != nil {
			a.Close()
			return nil, err
		}
	}
	if _, ok := builder.(*clientBuilder); ok {
		go a.expireEvents()
	}
	return a, nil
}

// buildVersion is the main module's version, else the VCS revision of the
// build (with "-dirty" for modified sources), else "unknown": never
// "(devel)", which says nothing about what runs.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var revision, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision == "" {
		return "unknown"
	}
	if modified == "true" {
		revision += "-dirty"
	}
	return revision
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
