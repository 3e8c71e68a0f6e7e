package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
)

// providerName is the name the bench cloud is registered under
// (--cloud-provider=bench).
const providerName = "bench"

// What every instance looks like; the same defaults as the Rust fake
// provider (providers/fake), so both controllers do the same work.
const (
	providerIDPrefix = "fake://"
	instanceType     = "fake.medium"
	zoneName         = "fake-zone-a"
	regionName       = "fake-region"
)

// firstNodeIP is the InternalIP of the first instance; later ones count up.
var firstNodeIP = netip.MustParseAddr("10.0.0.10")

// defaultLBIPPool is the load balancer pool without "lbIPPool" in the
// cloud config (TEST-NET-1, as the Rust fake's default).
const defaultLBIPPool = "192.0.2.0/24"

// latencyMethods are the calls the bench cloud serves, named as in
// cloudprovider.Interface; "*" sets the latency of every one of them
// (a method's own entry wins).
var latencyMethods = map[string]bool{
	"*": true,
	// InstancesV2
	"InstanceExists": true, "InstanceShutdown": true, "InstanceMetadata": true,
	// LoadBalancer
	"GetLoadBalancer": true, "GetLoadBalancerName": true, "EnsureLoadBalancer": true,
	"UpdateLoadBalancer": true, "EnsureLoadBalancerDeleted": true,
	// Zones
	"GetZone": true, "GetZoneByProviderID": true, "GetZoneByNodeName": true,
	// Routes (only with "routes": true)
	"ListRoutes": true, "CreateRoute": true, "DeleteRoute": true,
}

// benchConfig is the --cloud-config file.
type benchConfig struct {
	// Latency per method ("50ms", "1s", Go duration syntax).
	Latency map[string]string `json:"latency"`
	// Routes enables the Routes interface (off by default, as --configure-cloud-routes
	// needs a cluster CIDR).
	Routes bool `json:"routes"`
	// LBIPPool is the IPv4 CIDR load balancer addresses come from (absent or
	// null: defaultLBIPPool). Its network and broadcast addresses are not
	// handed out.
	LBIPPool *string `json:"lbIPPool"`
	// Quota, if set, meters every cloud call (all but GetLoadBalancerName,
	// which computes a name): beyond it a call fails at once with
	// RequestLimitExceeded (quota.go).
	Quota *quotaConfig `json:"quota"`
	// StatsListen, if set, is a loopback address serving GET /calls: the
	// calls by method, and how many the quota refused (quota.go).
	StatsListen string `json:"statsListen"`
}

// lbPool is the usable range of the load balancer pool: the CIDR without its
// network and broadcast addresses.
type lbPool struct {
	cidr        netip.Prefix
	first, last netip.Addr
}

// size is the number of addresses in the pool.
func (p lbPool) size() uint64 {
	return uint64(addrUint32(p.last)-addrUint32(p.first)) + 1
}

// contains reports whether ip is one of the pool's usable addresses.
func (p lbPool) contains(ip netip.Addr) bool {
	return ip.Is4() && ip.Compare(p.first) >= 0 && ip.Compare(p.last) <= 0
}

func addrUint32(ip netip.Addr) uint32 {
	b := ip.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func uint32Addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// parseLBIPPool parses the "lbIPPool" field: an IPv4 CIDR without host bits
// and with at least one address between its network and broadcast addresses.
func parseLBIPPool(s string) (lbPool, error) {
	bad := func(format string, args ...any) (lbPool, error) {
		return lbPool{}, fmt.Errorf("cloud config: lbIPPool %q: "+format, append([]any{s}, args...)...)
	}
	cidr, err := netip.ParsePrefix(s)
	if err != nil {
		return bad("not a CIDR (want an IPv4 CIDR such as %s): %v", defaultLBIPPool, err)
	}
	if !cidr.Addr().Is4() {
		return bad("not IPv4; the bench cloud only has IPv4 load balancer addresses")
	}
	if masked := cidr.Masked(); masked != cidr {
		return bad("host bits are set (did you mean %s?)", masked)
	}
	if cidr.Bits() > 30 {
		return bad("a /%d has no addresses besides its network and broadcast addresses; use /30 or shorter", cidr.Bits())
	}
	network := addrUint32(cidr.Addr())
	broadcast := network | (math.MaxUint32 >> cidr.Bits())
	return lbPool{cidr: cidr, first: uint32Addr(network + 1), last: uint32Addr(broadcast - 1)}, nil
}

// parsedConfig is a checked benchConfig.
type parsedConfig struct {
	latency     map[string]time.Duration
	routes      bool
	pool        lbPool
	quota       *quotaConfig
	statsListen string
}

// parseConfig reads the cloud-config; nil or empty means no latency
// anywhere, no routes and the default pool.
func parseConfig(r io.Reader) (parsedConfig, error) {
	pool, err := parseLBIPPool(defaultLBIPPool)
	if err != nil {
		panic(err) // a constant
	}
	out := parsedConfig{latency: map[string]time.Duration{}, pool: pool}
	if r == nil {
		return out, nil
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return parsedConfig{}, fmt.Errorf("reading cloud config: %w", err)
	}
	if strings.TrimSpace(string(data)) == "" {
		return out, nil
	}
	var c benchConfig
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return parsedConfig{}, fmt.Errorf("cloud config: %w", err)
	}
	if dec.More() {
		return parsedConfig{}, errors.New("cloud config: trailing data after the JSON object")
	}
	for method, s := range c.Latency {
		if !latencyMethods[method] {
			return parsedConfig{}, fmt.Errorf("cloud config: latency: unknown method %q (known: %s)", method, knownMethods())
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return parsedConfig{}, fmt.Errorf("cloud config: latency of %s: %w", method, err)
		}
		if d < 0 {
			return parsedConfig{}, fmt.Errorf("cloud config: latency of %s: %s is negative", method, s)
		}
		out.latency[method] = d
	}
	out.routes = c.Routes
	if c.Quota != nil {
		if _, err := newBucket(*c.Quota, time.Now()); err != nil {
			return parsedConfig{}, err
		}
		out.quota = c.Quota
	}
	out.statsListen = c.StatsListen
	if c.LBIPPool != nil {
		if out.pool, err = parseLBIPPool(*c.LBIPPool); err != nil {
			return parsedConfig{}, err
		}
	}
	return out, nil
}

func knownMethods() string {
	var names []string
	for m := range latencyMethods {
		names = append(names, m)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

type instance struct {
	id        string
	addresses []v1.NodeAddress
}

type loadBalancer struct {
	ip    netip.Addr
	hosts int
}

type route struct {
	name       string
	targetNode types.NodeName
	cidr       string
}

// benchCloud is the `bench` cloud: an in-memory cloud whose every call
// first sleeps its configured latency (holding no lock), then does its work
// under mu. k8s.io/cloud-provider/fake's fake.Cloud answers the calls it
// answers the way a cloud would (name, cluster ID, load balancer names,
// zones); the rest is here, because fake.Cloud gives every node the same
// addresses and every load balancer the same IP, says instances do not
// exist unless told otherwise, writes its maps without a lock and records
// every call (with its Service and Nodes) in slices that only grow.
type benchCloud struct {
	fake    *fake.Cloud
	latency map[string]time.Duration
	routes  bool
	pool    lbPool // the load balancer addresses

	mu        sync.Mutex
	instances map[string]*instance // by node name
	ids       map[string]string    // instance id -> node name
	nextIP    netip.Addr
	lbs       map[string]*loadBalancer // by load balancer name
	usedIPs   map[netip.Addr]bool
	// freeFrom is where the search for the lowest free load balancer
	// address starts: every pool address below it is in use. It moves up
	// past each address the search hands out and down to a freed address.
	freeFrom netip.Addr
	routeMap map[string]*route // by cluster name + "/" + destination CIDR

	quota  *bucket // nil: no quota
	counts callCounts
}

var (
	_ cloudprovider.Interface    = (*benchCloud)(nil)
	_ cloudprovider.InstancesV2  = (*benchCloud)(nil)
	_ cloudprovider.LoadBalancer = (*benchCloud)(nil)
	_ cloudprovider.Zones        = (*benchCloud)(nil)
	_ cloudprovider.Routes       = (*benchCloud)(nil)
)

func init() {
	cloudprovider.RegisterCloudProvider(providerName, func(r io.Reader) (cloudprovider.Interface, error) {
		return newBenchCloud(r)
	})
}

func newBenchCloud(r io.Reader) (*benchCloud, error) {
	cfg, err := parseConfig(r)
	if err != nil {
		return nil, err
	}
	c := &benchCloud{
		fake: &fake.Cloud{
			Provider:        providerName,
			Zone:            cloudprovider.Zone{FailureDomain: zoneName, Region: regionName},
			DisableClusters: true,
		},
		latency:   cfg.latency,
		routes:    cfg.routes,
		pool:      cfg.pool,
		instances: map[string]*instance{},
		ids:       map[string]string{},
		nextIP:    firstNodeIP,
		lbs:       map[string]*loadBalancer{},
		usedIPs:   map[netip.Addr]bool{},
		freeFrom:  cfg.pool.first,
		routeMap:  map[string]*route{},
	}
	if cfg.quota != nil {
		if c.quota, err = newBucket(*cfg.quota, time.Now()); err != nil {
			return nil, err
		}
	}
	if cfg.statsListen != "" {
		if err := c.serveStats(cfg.statsListen); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// wait counts the call and charges it to the quota (a throttled call fails
// at once, as a cloud's API answers), then sleeps the latency configured
// for method, or until ctx ends. GetLoadBalancerName computes a name and
// calls no cloud API: neither counted nor charged.
func (c *benchCloud) wait(ctx context.Context, method string) error {
	if method != "GetLoadBalancerName" {
		if err := c.admit(method); err != nil {
			return err
		}
	}
	d, ok := c.latency[method]
	if !ok {
		d = c.latency["*"]
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cloudprovider.Interface

func (c *benchCloud) Initialize(b cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	c.fake.Initialize(b, stop)
}
func (c *benchCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }
func (c *benchCloud) Instances() (cloudprovider.Instances, bool)       { return nil, false }
func (c *benchCloud) InstancesV2() (cloudprovider.InstancesV2, bool)   { return c, true }
func (c *benchCloud) Zones() (cloudprovider.Zones, bool)               { return c, true }
func (c *benchCloud) Clusters() (cloudprovider.Clusters, bool)         { return c.fake.Clusters() }
func (c *benchCloud) Routes() (cloudprovider.Routes, bool) {
	if !c.routes {
		return nil, false
	}
	return c, true
}
func (c *benchCloud) ProviderName() string { return c.fake.ProviderName() }
func (c *benchCloud) HasClusterID() bool   { return c.fake.HasClusterID() }

// Instances (V2)

// resolve finds the node's instance, creating it on first sight: by
// providerID when the node has one of ours, else by name. A providerID of
// another scheme is not ours. Called with mu held.
func (c *benchCloud) resolve(node *v1.Node) *instance {
	name, id := node.Name, node.Name
	if node.Spec.ProviderID != "" {
		var ok bool
		id, ok = strings.CutPrefix(node.Spec.ProviderID, providerIDPrefix)
		if !ok || id == "" {
			return nil
		}
		if owner, ok := c.ids[id]; ok {
			return c.instances[owner]
		}
	}
	if inst, ok := c.instances[name]; ok {
		return inst
	}
	inst := &instance{
		id: id,
		addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: c.nextIP.String()},
			{Type: v1.NodeHostName, Address: name},
		},
	}
	c.nextIP = c.nextIP.Next()
	c.instances[name] = inst
	c.ids[id] = name
	return inst
}

func (c *benchCloud) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	if err := c.wait(ctx, "InstanceExists"); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resolve(node) != nil, nil
}

func (c *benchCloud) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	if err := c.wait(ctx, "InstanceShutdown"); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resolve(node) == nil {
		return false, cloudprovider.InstanceNotFound
	}
	return false, nil
}

func (c *benchCloud) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	if err := c.wait(ctx, "InstanceMetadata"); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inst := c.resolve(node)
	if inst == nil {
		return nil, cloudprovider.InstanceNotFound
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID:    providerIDPrefix + inst.id,
		InstanceType:  instanceType,
		NodeAddresses: append([]v1.NodeAddress(nil), inst.addresses...),
		Zone:          zoneName,
		Region:        regionName,
	}, nil
}

// LoadBalancer

func (c *benchCloud) GetLoadBalancerName(ctx context.Context, clusterName string, service *v1.Service) string {
	_ = c.wait(ctx, "GetLoadBalancerName")
	return c.fake.GetLoadBalancerName(ctx, clusterName, service) // cloudprovider.DefaultLoadBalancerName
}

func lbStatus(ip netip.Addr, service *v1.Service) *v1.LoadBalancerStatus {
	ports := make([]v1.PortStatus, 0, len(service.Spec.Ports))
	for _, p := range service.Spec.Ports {
		ports = append(ports, v1.PortStatus{Port: p.Port, Protocol: p.Protocol})
	}
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: ip.String(), Ports: ports}}}
}

func (c *benchCloud) GetLoadBalancer(ctx context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	if err := c.wait(ctx, "GetLoadBalancer"); err != nil {
		return nil, false, err
	}
	name := cloudprovider.DefaultLoadBalancerName(service)
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.lbs[name]
	if !ok {
		return nil, false, nil
	}
	return lbStatus(lb.ip, service), true, nil
}

// chooseLBIP picks the address of a Service's load balancer, as the Rust
// fake does: the requested spec.loadBalancerIP, else the current one, else
// one the Service's status already shows (so addresses survive a restart of
// this process), else the lowest free one. Called with mu held.
func (c *benchCloud) chooseLBIP(service *v1.Service, current *loadBalancer) (netip.Addr, error) {
	if want := service.Spec.LoadBalancerIP; want != "" {
		ip, err := netip.ParseAddr(want)
		if err != nil || !ip.Is4() {
			return netip.Addr{}, fmt.Errorf("spec.loadBalancerIP %q: the bench cloud only has IPv4 addresses", want)
		}
		if current != nil && current.ip == ip {
			return ip, nil
		}
		if !c.pool.contains(ip) {
			return netip.Addr{}, fmt.Errorf("spec.loadBalancerIP %s is not in the pool %s (%s-%s)", ip, c.pool.cidr, c.pool.first, c.pool.last)
		}
		if c.usedIPs[ip] {
			return netip.Addr{}, fmt.Errorf("spec.loadBalancerIP %s is in use by another load balancer", ip)
		}
		return ip, nil
	}
	if current != nil {
		return current.ip, nil
	}
	for _, ing := range service.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err == nil && c.pool.contains(ip) && !c.usedIPs[ip] {
			return ip, nil
		}
	}
	// Lowest free first. Every address below freeFrom is in use, so the
	// search starts there; it walks past the addresses in use above it
	// (at most one map lookup each).
	for ip := c.freeFrom; c.pool.contains(ip); ip = ip.Next() {
		if !c.usedIPs[ip] {
			c.freeFrom = ip.Next() // the caller takes ip
			return ip, nil
		}
	}
	c.freeFrom = c.pool.last.Next()
	return netip.Addr{}, fmt.Errorf("no free load balancer address: all %d addresses of the pool %s (%s-%s) are in use", c.pool.size(), c.pool.cidr, c.pool.first, c.pool.last)
}

// releaseLBIP frees ip. Called with mu held.
func (c *benchCloud) releaseLBIP(ip netip.Addr) {
	delete(c.usedIPs, ip)
	if ip.Compare(c.freeFrom) < 0 {
		c.freeFrom = ip
	}
}

func (c *benchCloud) EnsureLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	if err := c.wait(ctx, "EnsureLoadBalancer"); err != nil {
		return nil, err
	}
	name := cloudprovider.DefaultLoadBalancerName(service)
	c.mu.Lock()
	defer c.mu.Unlock()
	lb := c.lbs[name]
	ip, err := c.chooseLBIP(service, lb)
	if err != nil {
		return nil, err
	}
	if lb == nil {
		lb = &loadBalancer{ip: ip}
		c.lbs[name] = lb
	} else if lb.ip != ip {
		c.releaseLBIP(lb.ip)
		lb.ip = ip
	}
	c.usedIPs[ip] = true
	lb.hosts = len(nodes)
	return lbStatus(lb.ip, service), nil
}

func (c *benchCloud) UpdateLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error {
	if err := c.wait(ctx, "UpdateLoadBalancer"); err != nil {
		return err
	}
	name := cloudprovider.DefaultLoadBalancerName(service)
	c.mu.Lock()
	defer c.mu.Unlock()
	if lb, ok := c.lbs[name]; ok {
		lb.hosts = len(nodes)
	}
	return nil
}

func (c *benchCloud) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *v1.Service) error {
	if err := c.wait(ctx, "EnsureLoadBalancerDeleted"); err != nil {
		return err
	}
	name := cloudprovider.DefaultLoadBalancerName(service)
	c.mu.Lock()
	defer c.mu.Unlock()
	if lb, ok := c.lbs[name]; ok {
		c.releaseLBIP(lb.ip)
		delete(c.lbs, name)
	}
	return nil
}

// Zones: fake.Cloud's, which answer its Zone field. They never sleep (its
// RequestDelay is 0) but append to its call log, which only grows; upstream's
// controllers do not call them while InstancesV2 is on.

func (c *benchCloud) GetZone(ctx context.Context) (cloudprovider.Zone, error) {
	if err := c.wait(ctx, "GetZone"); err != nil {
		return cloudprovider.Zone{}, err
	}
	return c.fake.GetZone(ctx)
}

func (c *benchCloud) GetZoneByProviderID(ctx context.Context, providerID string) (cloudprovider.Zone, error) {
	if err := c.wait(ctx, "GetZoneByProviderID"); err != nil {
		return cloudprovider.Zone{}, err
	}
	return c.fake.GetZoneByProviderID(ctx, providerID)
}

func (c *benchCloud) GetZoneByNodeName(ctx context.Context, nodeName types.NodeName) (cloudprovider.Zone, error) {
	if err := c.wait(ctx, "GetZoneByNodeName"); err != nil {
		return cloudprovider.Zone{}, err
	}
	return c.fake.GetZoneByNodeName(ctx, nodeName)
}

// Routes (only with "routes": true). Not fake.Cloud's: its CreateRoute and
// DeleteRoute store a failure in its Err field, which every later call then
// returns.

func (c *benchCloud) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	if err := c.wait(ctx, "ListRoutes"); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*cloudprovider.Route
	for k, r := range c.routeMap {
		if strings.HasPrefix(k, clusterName+"/") {
			out = append(out, &cloudprovider.Route{Name: r.name, TargetNode: r.targetNode, DestinationCIDR: r.cidr})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DestinationCIDR < out[j].DestinationCIDR })
	return out, nil
}

func (c *benchCloud) CreateRoute(ctx context.Context, clusterName string, nameHint string, r *cloudprovider.Route) error {
	if err := c.wait(ctx, "CreateRoute"); err != nil {
		return err
	}
	k := clusterName + "/" + r.DestinationCIDR
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.routeMap[k]; ok {
		if old.targetNode == r.TargetNode {
			return nil
		}
		return fmt.Errorf("%s is already routed to node %s by route %s", r.DestinationCIDR, old.targetNode, old.name)
	}
	cidr := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, r.DestinationCIDR)
	c.routeMap[k] = &route{name: "route-" + nameHint + "-" + cidr, targetNode: r.TargetNode, cidr: r.DestinationCIDR}
	return nil
}

func (c *benchCloud) DeleteRoute(ctx context.Context, clusterName string, r *cloudprovider.Route) error {
	if err := c.wait(ctx, "DeleteRoute"); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.routeMap, clusterName+"/"+r.DestinationCIDR)
	return nil
}
