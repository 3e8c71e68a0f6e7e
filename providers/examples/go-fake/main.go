// go-fake serves k8s.io/cloud-provider's own fake.Cloud through the ccm-rs
// Go adapter. fake.Cloud is a test spy, not a cloud: cloud keeps its data and
// answers, replacing only the methods whose answers no cloud gives (below).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"

	"github.com/ccm-rs/ccm-rs/provider-sdk/go/adapter"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// newFake is fake.Cloud configured as a small cloud: three instances in one
// zone, load balancers on 192.0.2.10, routes and volume labels stored.
func newFake() *fake.Cloud {
	return &fake.Cloud{
		EnableInstancesV2: true,
		ExtID:             map[types.NodeName]string{"conformance-node-1": "i-1", "conformance-node-2": "i-2", "node-3": "i-3"},
		ProviderID:        map[types.NodeName]string{"conformance-node-1": "fake://i-1", "conformance-node-2": "fake://i-2", "node-3": "fake://i-3"},
		Addresses:         []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.10"}},
		Zone:              cloudprovider.Zone{FailureDomain: "fake-a", Region: "fake"},
		ExternalIP:        net.ParseIP("192.0.2.10"),
		RouteMap:          map[string]*fake.Route{},
		ClusterList:       []string{"fake-cluster"},
		MasterName:        "10.0.0.1",
		VolumeLabelMap:    map[string]map[string]string{"pv-1": {v1.LabelTopologyZone: "fake-a"}},
	}
}

// cloud is fake.Cloud with the methods below; fake.Cloud's accessors would
// return the embedded *fake.Cloud, skipping them.
type cloud struct {
	*fake.Cloud
	mu sync.Mutex // fake.Cloud's Balancers and RouteMap lookups are not safe for concurrent calls
	// owners are the cluster and Service each load balancer was created
	// for, by name: fake.Cloud keeps neither, and a listing needs both.
	owners map[string]owner
}

type owner struct {
	cluster string
	service types.NamespacedName
	uid     types.UID
}

func (c *cloud) InstancesV2() (cloudprovider.InstancesV2, bool)   { return c, true }
func (c *cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }
func (c *cloud) Routes() (cloudprovider.Routes, bool)             { return c, true }

// instance is a node's id in fake.Cloud's ExtID (name → id), or "": fake.Cloud
// answers the three calls below alike for every node, never InstanceNotFound.
func (c *cloud) instance(node *v1.Node) string {
	want, byID := strings.CutPrefix(node.Spec.ProviderID, "fake://")
	for name, id := range c.ExtID {
		if byID && id == want || !byID && string(name) == node.Name {
			return id
		}
	}
	return ""
}

func (c *cloud) InstanceExists(_ context.Context, n *v1.Node) (bool, error) {
	return c.instance(n) != "", nil
}
func (c *cloud) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	if c.instance(node) == "" {
		return false, cloudprovider.InstanceNotFound
	}
	return c.Cloud.InstanceShutdown(ctx, node)
}
func (c *cloud) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	if c.instance(node) == "" {
		return nil, cloudprovider.InstanceNotFound
	}
	return c.Cloud.InstanceMetadata(ctx, node)
}

// fake.Cloud answers Exists for every Service, without the ports Ensure reports.
func (c *cloud) GetLoadBalancer(ctx context.Context, cluster string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.Balancers[c.GetLoadBalancerName(ctx, cluster, svc)]
	in := v1.LoadBalancerIngress{IP: c.ExternalIP.String(), IPMode: c.BalancerIPMode}
	for _, p := range b.Ports {
		in.Ports = append(in.Ports, v1.PortStatus{Port: p.Port, Protocol: p.Protocol})
	}
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{in}}, ok, nil
}

func (c *cloud) EnsureLoadBalancer(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	status, err := c.Cloud.EnsureLoadBalancer(ctx, cluster, svc, nodes)
	if err == nil {
		if c.owners == nil {
			c.owners = map[string]owner{}
		}
		c.owners[c.GetLoadBalancerName(ctx, cluster, svc)] = owner{cluster: cluster,
			service: types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, uid: svc.UID}
	}
	return status, err
}

// ListLoadBalancers makes the cloud an adapter.LoadBalancerLister: the
// load balancers created for the cluster, with their Services.
func (c *cloud) ListLoadBalancers(ctx context.Context, cluster string) ([]adapter.LoadBalancerSummary, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []adapter.LoadBalancerSummary
	for name := range c.Balancers {
		o, ok := c.owners[name]
		if !ok || o.cluster != cluster {
			continue
		}
		out = append(out, adapter.LoadBalancerSummary{Name: name, ServiceUID: o.uid,
			ServiceNamespace: o.service.Namespace, ServiceName: o.service.Name})
	}
	return out, nil
}

// fake.Cloud deletes nothing from its Balancers.
func (c *cloud) EnsureLoadBalancerDeleted(ctx context.Context, cluster string, svc *v1.Service) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.Balancers, c.GetLoadBalancerName(ctx, cluster, svc))
	delete(c.owners, c.GetLoadBalancerName(ctx, cluster, svc))
	return c.Cloud.EnsureLoadBalancerDeleted(ctx, cluster, svc)
}

// fake.Cloud fails an identical route, and the deletion of a missing one or
// by another target (the contract decides by cluster and CIDR alone), then
// keeps failing every later call (f.Err); routed gives the stored route.
func (c *cloud) routed(cluster, cidr string) (cloudprovider.Route, bool) {
	for _, r := range c.RouteMap {
		if r.ClusterName == cluster && r.Route.DestinationCIDR == cidr {
			return r.Route, true
		}
	}
	return cloudprovider.Route{}, false
}
func (c *cloud) CreateRoute(ctx context.Context, cluster, hint string, r *cloudprovider.Route) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stored, ok := c.routed(cluster, r.DestinationCIDR); ok && stored.TargetNode != r.TargetNode {
		return sdk.ConflictingResource(r.DestinationCIDR + " is routed to " + string(stored.TargetNode))
	} else if !ok {
		return c.Cloud.CreateRoute(ctx, cluster, hint, r)
	}
	return nil
}
func (c *cloud) DeleteRoute(ctx context.Context, cluster string, r *cloudprovider.Route) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stored, ok := c.routed(cluster, r.DestinationCIDR); ok {
		return c.Cloud.DeleteRoute(ctx, cluster, &stored)
	}
	return nil
}

// fake.Cloud fails for a volume it does not know; DiskNotFound is "no labels".
func (c *cloud) GetLabelsForVolume(ctx context.Context, pv *v1.PersistentVolume) (map[string]string, error) {
	if _, ok := c.VolumeLabelMap[pv.Name]; !ok {
		return nil, cloudprovider.DiskNotFound
	}
	return c.Cloud.GetLabelsForVolume(ctx, pv)
}

// options are the adapter's options from the command line: the endpoint,
// and what a controller running several providers routes by (contract
// 1.3.0), as the Rust fake provider's flags of the same names.
func options(fs *flag.FlagSet, args []string) (adapter.Options, error) {
	var o adapter.Options
	fs.StringVar(&o.Endpoint, "endpoint", sdk.DefaultEndpoint, "unix:///absolute/path of the provider socket")
	fs.Func("load-balancer-class", "a spec.loadBalancerClass whose Services this provider serves (repeatable)", func(v string) error {
		o.LoadBalancerClasses = append(o.LoadBalancerClasses, v)
		return nil
	})
	fs.Func("unclassed-services", "served|declined: whether Services without a class are served when the controller makes this provider its default (default: unset, served)", func(v string) error {
		switch v {
		case "served":
			o.DeclineUnclassedServices = false
		case "declined":
			o.DeclineUnclassedServices = true
		default:
			return fmt.Errorf("%q is neither served nor declined", v)
		}
		return nil
	})
	fs.Func("platform", "a KEP-5778 platform whose Nodes this provider initialises (repeatable)", func(v string) error {
		o.Platforms = append(o.Platforms, v)
		return nil
	})
	return o, fs.Parse(args)
}

func main() {
	opts, _ := options(flag.CommandLine, os.Args[1:]) // flag.CommandLine exits on an error
	if err := adapter.Serve(context.Background(), &cloud{Cloud: newFake()}, opts); err != nil {
		log.Fatal(err)
	}
}
