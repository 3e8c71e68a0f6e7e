package main

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		nilFile bool
		want    map[string]time.Duration
		routes  bool
		wantErr string
	}{
		{name: "no file", nilFile: true, want: map[string]time.Duration{}},
		{name: "empty file", config: " \n", want: map[string]time.Duration{}},
		{name: "empty object", config: `{}`, want: map[string]time.Duration{}},
		{
			name:   "latencies",
			config: `{"latency": {"EnsureLoadBalancer": "50ms", "UpdateLoadBalancer": "1.5s", "InstanceMetadata": "0s", "*": "2ms"}}`,
			want: map[string]time.Duration{
				"EnsureLoadBalancer": 50 * time.Millisecond,
				"UpdateLoadBalancer": 1500 * time.Millisecond,
				"InstanceMetadata":   0,
				"*":                  2 * time.Millisecond,
			},
		},
		{name: "routes", config: `{"routes": true}`, want: map[string]time.Duration{}, routes: true},
		{name: "unknown method", config: `{"latency": {"EnsureLoadbalancer": "5ms"}}`, wantErr: `unknown method "EnsureLoadbalancer"`},
		{name: "disabled interface", config: `{"latency": {"NodeAddresses": "5ms"}}`, wantErr: `unknown method "NodeAddresses"`},
		{name: "bad duration", config: `{"latency": {"EnsureLoadBalancer": "50"}}`, wantErr: "latency of EnsureLoadBalancer"},
		{name: "negative duration", config: `{"latency": {"GetZone": "-1s"}}`, wantErr: "is negative"},
		{name: "duration not a string", config: `{"latency": {"GetZone": 5}}`, wantErr: "cloud config"},
		{name: "unknown field", config: `{"latencies": {}}`, wantErr: `unknown field "latencies"`},
		{name: "not json", config: `latency: {}`, wantErr: "cloud config"},
		{name: "trailing data", config: `{} {}`, wantErr: "trailing data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c *benchCloud
			var err error
			if tt.nilFile {
				c, err = newBenchCloud(nil)
			} else {
				c, err = newBenchCloud(strings.NewReader(tt.config))
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(c.latency) != len(tt.want) {
				t.Fatalf("latency = %v, want %v", c.latency, tt.want)
			}
			for m, d := range tt.want {
				if got, ok := c.latency[m]; !ok || got != d {
					t.Errorf("latency[%s] = %v (%v), want %v", m, got, ok, d)
				}
			}
			if _, ok := c.Routes(); ok != tt.routes {
				t.Errorf("Routes() ok = %v, want %v", ok, tt.routes)
			}
		})
	}
}

func TestRegistered(t *testing.T) {
	cloud, err := cloudprovider.GetCloudProvider("bench", nil)
	if err != nil || cloud == nil {
		t.Fatalf("GetCloudProvider(bench) = %v, %v", cloud, err)
	}
	if _, ok := cloud.InstancesV2(); !ok {
		t.Error("InstancesV2 disabled")
	}
	if _, ok := cloud.Instances(); ok {
		t.Error("Instances (v1) enabled")
	}
	if _, ok := cloud.LoadBalancer(); !ok {
		t.Error("LoadBalancer disabled")
	}
	if _, ok := cloud.Zones(); !ok {
		t.Error("Zones disabled")
	}
	if _, ok := cloud.Routes(); ok {
		t.Error("Routes enabled without configuration")
	}
	if _, ok := cloud.Clusters(); ok {
		t.Error("Clusters enabled")
	}
	if !cloud.HasClusterID() || cloud.ProviderName() != "bench" {
		t.Errorf("HasClusterID = %v, ProviderName = %q", cloud.HasClusterID(), cloud.ProviderName())
	}
}

func node(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

func TestInstances(t *testing.T) {
	ctx := context.Background()
	c, err := newBenchCloud(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Allocation order is first sight, by any of the three calls; stable after.
	steps := []struct {
		node   *v1.Node
		call   string
		wantIP string
		wantID string
	}{
		{node("n1", ""), "metadata", "10.0.0.10", "fake://n1"},
		{node("n2", ""), "exists", "10.0.0.11", "fake://n2"},
		{node("n1", ""), "metadata", "10.0.0.10", "fake://n1"},
		{node("n1", "fake://n1"), "metadata", "10.0.0.10", "fake://n1"},
		{node("n3", ""), "shutdown", "10.0.0.12", "fake://n3"},
		{node("n2", "fake://n2"), "metadata", "10.0.0.11", "fake://n2"},
		{node("n4", "fake://i-4"), "metadata", "10.0.0.13", "fake://i-4"},
		{node("n4", "fake://i-4"), "metadata", "10.0.0.13", "fake://i-4"},
		{node("n3", ""), "metadata", "10.0.0.12", "fake://n3"},
	}
	for i, s := range steps {
		switch s.call {
		case "exists":
			if ok, err := c.InstanceExists(ctx, s.node); !ok || err != nil {
				t.Fatalf("step %d: InstanceExists = %v, %v", i, ok, err)
			}
		case "shutdown":
			if down, err := c.InstanceShutdown(ctx, s.node); down || err != nil {
				t.Fatalf("step %d: InstanceShutdown = %v, %v", i, down, err)
			}
		}
		md, err := c.InstanceMetadata(ctx, s.node)
		if err != nil {
			t.Fatalf("step %d: InstanceMetadata: %v", i, err)
		}
		want := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: s.wantIP}, {Type: v1.NodeHostName, Address: s.node.Name}}
		if len(md.NodeAddresses) != 2 || md.NodeAddresses[0] != want[0] || md.NodeAddresses[1] != want[1] {
			t.Errorf("step %d: addresses = %v, want %v", i, md.NodeAddresses, want)
		}
		if md.ProviderID != s.wantID || md.InstanceType != "fake.medium" || md.Zone != "fake-zone-a" || md.Region != "fake-region" {
			t.Errorf("step %d: metadata = %+v", i, md)
		}
	}
	// A providerID of another cloud is not ours.
	foreign := node("n9", "aws:///i-9")
	if ok, err := c.InstanceExists(ctx, foreign); ok || err != nil {
		t.Errorf("InstanceExists(foreign) = %v, %v", ok, err)
	}
	if _, err := c.InstanceMetadata(ctx, foreign); err != cloudprovider.InstanceNotFound {
		t.Errorf("InstanceMetadata(foreign) error = %v", err)
	}
	zone, err := c.GetZoneByNodeName(ctx, types.NodeName("n1"))
	if err != nil || zone != (cloudprovider.Zone{FailureDomain: "fake-zone-a", Region: "fake-region"}) {
		t.Errorf("GetZoneByNodeName = %v, %v", zone, err)
	}
}

func service(uid string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "svc-" + uid, Namespace: "default", UID: types.UID(uid)},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeLoadBalancer,
			Ports: []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
}

func TestLoadBalancerIPs(t *testing.T) {
	ctx := context.Background()
	c, err := newBenchCloud(nil)
	if err != nil {
		t.Fatal(err)
	}
	ensure := func(uid string) string {
		t.Helper()
		st, err := c.EnsureLoadBalancer(ctx, "kubernetes", service(uid), []*v1.Node{node("n1", "")})
		if err != nil {
			t.Fatalf("EnsureLoadBalancer(%s): %v", uid, err)
		}
		if len(st.Ingress) != 1 || len(st.Ingress[0].Ports) != 1 || st.Ingress[0].Ports[0].Port != 80 {
			t.Fatalf("EnsureLoadBalancer(%s) status = %+v", uid, st)
		}
		return st.Ingress[0].IP
	}
	exists := func(uid string) bool {
		t.Helper()
		_, ok, err := c.GetLoadBalancer(ctx, "kubernetes", service(uid))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if exists("a") {
		t.Fatal("load balancer exists before EnsureLoadBalancer")
	}
	steps := []struct {
		op, uid, want string
	}{
		{"ensure", "a", "192.0.2.1"},
		{"ensure", "b", "192.0.2.2"},
		{"ensure", "a", "192.0.2.1"}, // stable
		{"update", "a", ""},
		{"ensure", "c", "192.0.2.3"},
		{"delete", "a", ""},
		{"delete", "a", ""},          // deleting a missing one succeeds
		{"ensure", "d", "192.0.2.1"}, // the freed one is reused
		{"ensure", "e", "192.0.2.4"},
		{"ensure", "b", "192.0.2.2"},
	}
	for i, s := range steps {
		switch s.op {
		case "ensure":
			if got := ensure(s.uid); got != s.want {
				t.Errorf("step %d: ensure %s = %s, want %s", i, s.uid, got, s.want)
			}
			if !exists(s.uid) {
				t.Errorf("step %d: %s does not exist after ensure", i, s.uid)
			}
		case "update":
			if err := c.UpdateLoadBalancer(ctx, "kubernetes", service(s.uid), nil); err != nil {
				t.Errorf("step %d: update: %v", i, err)
			}
		case "delete":
			if err := c.EnsureLoadBalancerDeleted(ctx, "kubernetes", service(s.uid)); err != nil {
				t.Errorf("step %d: delete: %v", i, err)
			}
			if exists(s.uid) {
				t.Errorf("step %d: %s exists after delete", i, s.uid)
			}
		}
	}
	if got, want := c.GetLoadBalancerName(ctx, "kubernetes", service("a-b-c")), cloudprovider.DefaultLoadBalancerName(service("a-b-c")); got != want {
		t.Errorf("GetLoadBalancerName = %q, want %q", got, want)
	}
}

func TestLoadBalancerIPChoice(t *testing.T) {
	ctx := context.Background()
	withStatus := func(uid, ip string) *v1.Service {
		s := service(uid)
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
		return s
	}
	requesting := func(uid, ip string) *v1.Service {
		s := service(uid)
		s.Spec.LoadBalancerIP = ip
		return s
	}
	tests := []struct {
		name    string
		before  []*v1.Service // ensured first, in order
		svc     *v1.Service
		want    string
		wantErr string
	}{
		{name: "lowest free", svc: service("a"), want: "192.0.2.1"},
		{name: "status survives a restart", svc: withStatus("a", "192.0.2.7"), want: "192.0.2.7"},
		{name: "status ip taken", before: []*v1.Service{service("b")}, svc: withStatus("a", "192.0.2.1"), want: "192.0.2.2"},
		{name: "status ip outside the pool", svc: withStatus("a", "198.51.100.1"), want: "192.0.2.1"},
		{name: "requested", svc: requesting("a", "192.0.2.50"), want: "192.0.2.50"},
		{name: "requested again", before: []*v1.Service{requesting("a", "192.0.2.50")}, svc: requesting("a", "192.0.2.50"), want: "192.0.2.50"},
		{name: "requested moves", before: []*v1.Service{service("a")}, svc: requesting("a", "192.0.2.9"), want: "192.0.2.9"},
		{name: "requested in use", before: []*v1.Service{service("b")}, svc: requesting("a", "192.0.2.1"), wantErr: "in use"},
		{name: "requested outside the pool", svc: requesting("a", "10.1.1.1"), wantErr: "not in the pool"},
		{name: "requested ipv6", svc: requesting("a", "2001:db8::1"), wantErr: "only has IPv4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newBenchCloud(nil)
			for _, b := range tt.before {
				if _, err := c.EnsureLoadBalancer(ctx, "k", b, nil); err != nil {
					t.Fatal(err)
				}
			}
			st, err := c.EnsureLoadBalancer(ctx, "k", tt.svc, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Ingress[0].IP; got != tt.want {
				t.Errorf("ip = %s, want %s", got, tt.want)
			}
			// Exactly the addresses of the existing load balancers are in use.
			if len(c.usedIPs) != len(c.lbs) {
				t.Errorf("%d addresses in use for %d load balancers", len(c.usedIPs), len(c.lbs))
			}
			for _, lb := range c.lbs {
				if !c.usedIPs[lb.ip] {
					t.Errorf("%s is not marked in use", lb.ip)
				}
			}
		})
	}
}

func TestLoadBalancerPoolRunsOut(t *testing.T) {
	c, _ := newBenchCloud(nil)
	for i := 1; i <= 254; i++ {
		if _, err := c.EnsureLoadBalancer(context.Background(), "k", service("u"+strconv.Itoa(i)), nil); err != nil {
			t.Fatalf("ensure %d: %v", i, err)
		}
	}
	_, err := c.EnsureLoadBalancer(context.Background(), "k", service("one-too-many"), nil)
	if err == nil || !strings.Contains(err.Error(), "all 254 addresses of the pool 192.0.2.0/24") {
		t.Fatalf("the 255th load balancer: error = %v", err)
	}
}

func TestParseLBIPPool(t *testing.T) {
	tests := []struct {
		name        string
		config      string
		first, last string
		size        uint64
		wantErr     []string // substrings of the error
	}{
		{name: "default: no file", first: "192.0.2.1", last: "192.0.2.254", size: 254},
		{name: "default: field absent", config: `{"routes": true}`, first: "192.0.2.1", last: "192.0.2.254", size: 254},
		{name: "default: null", config: `{"lbIPPool": null}`, first: "192.0.2.1", last: "192.0.2.254", size: 254},
		{name: "default spelled out", config: `{"lbIPPool": "192.0.2.0/24"}`, first: "192.0.2.1", last: "192.0.2.254", size: 254},
		{name: "/16", config: `{"lbIPPool": "10.96.0.0/16"}`, first: "10.96.0.1", last: "10.96.255.254", size: 65534},
		{name: "/29", config: `{"lbIPPool": "198.51.100.8/29"}`, first: "198.51.100.9", last: "198.51.100.14", size: 6},
		{name: "/30", config: `{"lbIPPool": "203.0.113.4/30"}`, first: "203.0.113.5", last: "203.0.113.6", size: 2},
		{name: "/0", config: `{"lbIPPool": "0.0.0.0/0"}`, first: "0.0.0.1", last: "255.255.255.254", size: 1<<32 - 2},
		{name: "/8 at the top", config: `{"lbIPPool": "255.0.0.0/8"}`, first: "255.0.0.1", last: "255.255.255.254", size: 1<<24 - 2},
		{name: "malformed: no prefix length", config: `{"lbIPPool": "10.0.0.0"}`, wantErr: []string{`lbIPPool "10.0.0.0"`, "not a CIDR"}},
		{name: "malformed: prefix too long", config: `{"lbIPPool": "10.0.0.0/33"}`, wantErr: []string{`lbIPPool "10.0.0.0/33"`, "not a CIDR"}},
		{name: "malformed: bad address", config: `{"lbIPPool": "10.0.0.256/24"}`, wantErr: []string{`lbIPPool "10.0.0.256/24"`, "not a CIDR"}},
		{name: "malformed: word", config: `{"lbIPPool": "pool"}`, wantErr: []string{`lbIPPool "pool"`, "not a CIDR"}},
		{name: "malformed: empty", config: `{"lbIPPool": ""}`, wantErr: []string{`lbIPPool ""`, "not a CIDR"}},
		{name: "malformed: not a string", config: `{"lbIPPool": 24}`, wantErr: []string{"cloud config", "lbIPPool"}},
		{name: "ipv6", config: `{"lbIPPool": "2001:db8::/64"}`, wantErr: []string{`lbIPPool "2001:db8::/64"`, "not IPv4"}},
		{name: "ipv4-mapped ipv6", config: `{"lbIPPool": "::ffff:192.0.2.0/120"}`, wantErr: []string{`lbIPPool "::ffff:192.0.2.0/120"`, "not IPv4"}},
		{name: "host bits", config: `{"lbIPPool": "10.96.1.0/16"}`, wantErr: []string{`lbIPPool "10.96.1.0/16"`, "host bits are set", "10.96.0.0/16"}},
		{name: "/31", config: `{"lbIPPool": "192.0.2.0/31"}`, wantErr: []string{`lbIPPool "192.0.2.0/31"`, "a /31 has no addresses besides its network and broadcast addresses"}},
		{name: "/32", config: `{"lbIPPool": "192.0.2.1/32"}`, wantErr: []string{`lbIPPool "192.0.2.1/32"`, "a /32 has no addresses besides its network and broadcast addresses"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c *benchCloud
			var err error
			if tt.config == "" {
				c, err = newBenchCloud(nil)
			} else {
				c, err = newBenchCloud(strings.NewReader(tt.config))
			}
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("no error, want one containing %q", tt.wantErr)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error = %v, want one containing %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got := c.pool.first.String(); got != tt.first {
				t.Errorf("first = %s, want %s", got, tt.first)
			}
			if got := c.pool.last.String(); got != tt.last {
				t.Errorf("last = %s, want %s", got, tt.last)
			}
			if got := c.pool.size(); got != tt.size {
				t.Errorf("size = %d, want %d", got, tt.size)
			}
			if c.freeFrom != c.pool.first {
				t.Errorf("freeFrom = %s, want %s", c.freeFrom, c.pool.first)
			}
		})
	}
}

// checkPool checks that exactly the addresses of the existing load
// balancers are in use, all in the pool, and that every pool address below
// freeFrom is in use.
func checkPool(t *testing.T, c *benchCloud) {
	t.Helper()
	if len(c.usedIPs) != len(c.lbs) {
		t.Errorf("%d addresses in use for %d load balancers", len(c.usedIPs), len(c.lbs))
	}
	for name, lb := range c.lbs {
		if !c.usedIPs[lb.ip] {
			t.Errorf("%s (%s) is not marked in use", lb.ip, name)
		}
		if !c.pool.contains(lb.ip) {
			t.Errorf("%s (%s) is outside the pool", lb.ip, name)
		}
	}
	for ip := c.pool.first; ip.Compare(c.freeFrom) < 0 && c.pool.contains(ip); ip = ip.Next() {
		if !c.usedIPs[ip] {
			t.Errorf("%s is free but below freeFrom %s", ip, c.freeFrom)
		}
	}
}

func TestLoadBalancerSmallPool(t *testing.T) {
	ctx := context.Background()
	c, err := newBenchCloud(strings.NewReader(`{"lbIPPool": "198.51.100.8/29"}`))
	if err != nil {
		t.Fatal(err)
	}
	ensure := func(svc *v1.Service) (string, error) {
		t.Helper()
		st, err := c.EnsureLoadBalancer(ctx, "k", svc, nil)
		checkPool(t, c)
		if err != nil {
			return "", err
		}
		return st.Ingress[0].IP, nil
	}
	del := func(uid string) {
		t.Helper()
		if err := c.EnsureLoadBalancerDeleted(ctx, "k", service(uid)); err != nil {
			t.Fatal(err)
		}
		checkPool(t, c)
	}
	// 6 usable addresses, .9 to .14, lowest first.
	for i := 1; i <= 6; i++ {
		uid := "u" + strconv.Itoa(i)
		got, err := ensure(service(uid))
		if want := "198.51.100." + strconv.Itoa(8+i); err != nil || got != want {
			t.Fatalf("ensure %s = %s, %v; want %s", uid, got, err, want)
		}
	}
	// The 7th fails, says why, and creates nothing.
	_, err = ensure(service("u7"))
	const full = "no free load balancer address: all 6 addresses of the pool 198.51.100.8/29 (198.51.100.9-198.51.100.14) are in use"
	if err == nil || err.Error() != full {
		t.Fatalf("7th ensure: error = %v, want %q", err, full)
	}
	if _, ok, _ := c.GetLoadBalancer(ctx, "k", service("u7")); ok {
		t.Fatal("the failed 7th load balancer exists")
	}
	// Ensuring an existing one still works with the pool full.
	if got, err := ensure(service("u2")); err != nil || got != "198.51.100.10" {
		t.Fatalf("re-ensure u2 = %s, %v", got, err)
	}
	// A freed address is reused, lowest first.
	del("u5")
	del("u3")
	for _, s := range []struct{ uid, want string }{{"u7", "198.51.100.11"}, {"u8", "198.51.100.13"}} {
		if got, err := ensure(service(s.uid)); err != nil || got != s.want {
			t.Fatalf("ensure %s = %s, %v; want %s", s.uid, got, err, s.want)
		}
	}
	if _, err := ensure(service("u9")); err == nil || err.Error() != full {
		t.Fatalf("ensure u9 with the pool full: error = %v", err)
	}
	// spec.loadBalancerIP and the status address must lie in the pool.
	del("u1") // frees .9
	requesting := func(uid, ip string) *v1.Service {
		s := service(uid)
		s.Spec.LoadBalancerIP = ip
		return s
	}
	withStatus := func(uid, ip string) *v1.Service {
		s := service(uid)
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
		return s
	}
	for _, ip := range []string{"198.51.100.8", "198.51.100.15", "192.0.2.1"} { // network, broadcast, default pool
		_, err := ensure(requesting("r", ip))
		want := "spec.loadBalancerIP " + ip + " is not in the pool 198.51.100.8/29 (198.51.100.9-198.51.100.14)"
		if err == nil || err.Error() != want {
			t.Errorf("requesting %s: error = %v, want %q", ip, err, want)
		}
	}
	if _, err := ensure(requesting("r", "198.51.100.10")); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("requesting an address in use: error = %v", err)
	}
	// A status address outside the pool (or its network address) is ignored.
	if got, err := ensure(withStatus("s", "198.51.100.8")); err != nil || got != "198.51.100.9" {
		t.Fatalf("status outside the pool: got %s, %v; want the free 198.51.100.9", got, err)
	}
	// A status or requested address inside the pool is honoured.
	del("s")
	del("u6") // .14
	if got, err := ensure(withStatus("s", "198.51.100.14")); err != nil || got != "198.51.100.14" {
		t.Fatalf("status in the pool: got %s, %v", got, err)
	}
	del("s")
	if got, err := ensure(requesting("r", "198.51.100.14")); err != nil || got != "198.51.100.14" {
		t.Fatalf("requested in the pool: got %s, %v", got, err)
	}
	// The lowest free one is still .9, below the requested one.
	if got, err := ensure(service("u10")); err != nil || got != "198.51.100.9" {
		t.Fatalf("ensure u10 = %s, %v; want 198.51.100.9", got, err)
	}
}

// Lowest free first, checked against a search of the whole pool after every
// step of a random mix of plain, requested and status-driven ensures, moves
// and deletes.
func TestLoadBalancerLowestFreeRandom(t *testing.T) {
	ctx := context.Background()
	c, err := newBenchCloud(strings.NewReader(`{"lbIPPool": "10.0.0.0/27"}`))
	if err != nil {
		t.Fatal(err)
	}
	lowestFree := func() (netip.Addr, bool) {
		for ip := c.pool.first; c.pool.contains(ip); ip = ip.Next() {
			if !c.usedIPs[ip] {
				return ip, true
			}
		}
		return netip.Addr{}, false
	}
	rng := rand.New(rand.NewPCG(1, 2))
	randomIP := func() string {
		return uint32Addr(addrUint32(c.pool.first) + uint32(rng.IntN(int(c.pool.size())))).String()
	}
	var full, allocated int
	for i := 0; i < 20000; i++ {
		uid := "u" + strconv.Itoa(rng.IntN(40))
		svc := service(uid)
		switch op := rng.IntN(10); {
		case op < 4: // plain ensure
			_, exists := c.lbs[cloudprovider.DefaultLoadBalancerName(svc)]
			want, ok := lowestFree()
			st, err := c.EnsureLoadBalancer(ctx, "k", svc, nil)
			switch {
			case exists:
				if err != nil {
					t.Fatalf("step %d: re-ensure %s: %v", i, uid, err)
				}
			case !ok:
				if err == nil {
					t.Fatalf("step %d: ensure %s got %s from a full pool", i, uid, st.Ingress[0].IP)
				}
				full++
			case err != nil || st.Ingress[0].IP != want.String():
				t.Fatalf("step %d: ensure %s = %v, %v; want %s", i, uid, st, err, want)
			default:
				allocated++
			}
		case op < 5: // requested address (may be taken: then an error)
			svc.Spec.LoadBalancerIP = randomIP()
			_, _ = c.EnsureLoadBalancer(ctx, "k", svc, nil)
		case op < 6: // status address (after a "restart")
			svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: randomIP()}}
			_, _ = c.EnsureLoadBalancer(ctx, "k", svc, nil)
		default:
			if err := c.EnsureLoadBalancerDeleted(ctx, "k", svc); err != nil {
				t.Fatal(err)
			}
		}
		checkPool(t, c)
		if t.Failed() {
			t.Fatalf("step %d", i)
		}
	}
	if full == 0 || allocated < 1000 {
		t.Errorf("the mix did not exercise a full pool (%d) or allocation (%d)", full, allocated)
	}
}

// fillPool creates n load balancers u0..u<n-1> in a /16 and returns the
// cloud and the time each EnsureLoadBalancer took on average.
func fillPool(tb testing.TB, n int) (*benchCloud, time.Duration) {
	tb.Helper()
	c, err := newBenchCloud(strings.NewReader(`{"lbIPPool": "10.96.0.0/16"}`))
	if err != nil {
		tb.Fatal(err)
	}
	svcs := make([]*v1.Service, n)
	for i := range svcs {
		svcs[i] = service("u" + strconv.Itoa(i))
	}
	start := time.Now()
	for i, svc := range svcs {
		st, err := c.EnsureLoadBalancer(context.Background(), "k", svc, nil)
		if err != nil {
			tb.Fatalf("ensure %d: %v", i, err)
		}
		if want := uint32Addr(addrUint32(c.pool.first) + uint32(i)).String(); st.Ingress[0].IP != want {
			tb.Fatalf("ensure %d = %s, want %s", i, st.Ingress[0].IP, want)
		}
	}
	return c, time.Since(start) / time.Duration(n)
}

// 5,000 load balancers in a /16, then every 7th deleted and re-created
// under a new name: the freed addresses come back lowest first. Each
// EnsureLoadBalancer must stay well under a millisecond.
func TestLoadBalancerPool5000(t *testing.T) {
	const n = 5000
	ctx := context.Background()
	c, fill := fillPool(t, n)
	var freed []string
	for i := 0; i < n; i += 7 {
		freed = append(freed, uint32Addr(addrUint32(c.pool.first)+uint32(i)).String())
		if err := c.EnsureLoadBalancerDeleted(ctx, "k", service("u"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for i, want := range freed {
		st, err := c.EnsureLoadBalancer(ctx, "k", service("v"+strconv.Itoa(i)), nil)
		if err != nil || st.Ingress[0].IP != want {
			t.Fatalf("re-create %d = %v, %v; want %s", i, st, err, want)
		}
	}
	refill := time.Since(start) / time.Duration(len(freed))
	// The worst case: 5,000 addresses in use above freeFrom, so one search
	// looks at all of them (what every allocation did before freeFrom).
	c.freeFrom = c.pool.first
	start = time.Now()
	st, err := c.EnsureLoadBalancer(ctx, "k", service("w"), nil)
	worst := time.Since(start)
	if want := uint32Addr(addrUint32(c.pool.first) + n).String(); err != nil || st.Ingress[0].IP != want {
		t.Fatalf("ensure after %d = %v, %v; want %s", n, st, err, want)
	}
	checkPool(t, c)
	t.Logf("EnsureLoadBalancer with up to %d load balancers: %v per call filling, %v per call reusing %d freed addresses, %v for a search over all %d", n, fill, refill, len(freed), worst, n)
	for what, d := range map[string]time.Duration{"filling": fill, "reusing": refill} {
		if d >= time.Millisecond {
			t.Errorf("%s: %v per EnsureLoadBalancer, want well under 1ms", what, d)
		}
	}
}

// One new load balancer (and its deletion) with 5,000 in a /16, the freed
// address being the lowest free one.
func BenchmarkEnsureLoadBalancer5000(b *testing.B) {
	const n = 5000
	ctx := context.Background()
	c, _ := fillPool(b, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		old := service("u" + strconv.Itoa(i%n))
		if i >= n {
			old = service("b" + strconv.Itoa(i-n))
		}
		if err := c.EnsureLoadBalancerDeleted(ctx, "k", old); err != nil {
			b.Fatal(err)
		}
		if _, err := c.EnsureLoadBalancer(ctx, "k", service("b"+strconv.Itoa(i)), nil); err != nil {
			b.Fatal(err)
		}
	}
}

// The same, but each search starts at the bottom of the pool and walks past
// all 5,000 addresses in use (the cost without freeFrom).
func BenchmarkEnsureLoadBalancer5000FullScan(b *testing.B) {
	const n = 5000
	ctx := context.Background()
	c, _ := fillPool(b, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.freeFrom = c.pool.first
		if _, err := c.EnsureLoadBalancer(ctx, "k", service("b"), nil); err != nil {
			b.Fatal(err)
		}
		if err := c.EnsureLoadBalancerDeleted(ctx, "k", service("b")); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRoutes(t *testing.T) {
	ctx := context.Background()
	c, err := newBenchCloud(strings.NewReader(`{"routes": true}`))
	if err != nil {
		t.Fatal(err)
	}
	r := &cloudprovider.Route{TargetNode: "n1", DestinationCIDR: "10.244.1.0/24"}
	for i := 0; i < 2; i++ { // idempotent
		if err := c.CreateRoute(ctx, "k", "uid1", r); err != nil {
			t.Fatalf("CreateRoute: %v", err)
		}
	}
	if err := c.CreateRoute(ctx, "k", "uid2", &cloudprovider.Route{TargetNode: "n2", DestinationCIDR: "10.244.1.0/24"}); err == nil {
		t.Error("a second node got the same CIDR")
	}
	routes, err := c.ListRoutes(ctx, "k")
	if err != nil || len(routes) != 1 || routes[0].Name != "route-uid1-10-244-1-0-24" || routes[0].TargetNode != "n1" {
		t.Fatalf("ListRoutes = %+v, %v", routes, err)
	}
	if other, _ := c.ListRoutes(ctx, "other"); len(other) != 0 {
		t.Errorf("another cluster sees %d routes", len(other))
	}
	if err := c.DeleteRoute(ctx, "k", r); err != nil {
		t.Fatal(err)
	}
	if routes, _ := c.ListRoutes(ctx, "k"); len(routes) != 0 {
		t.Errorf("routes after delete: %+v", routes)
	}
}

func TestLatencyPerMethod(t *testing.T) {
	const d = 20 * time.Millisecond
	ctx := context.Background()
	c, err := newBenchCloud(strings.NewReader(`{"latency": {"EnsureLoadBalancer": "20ms", "InstanceMetadata": "20ms", "GetZone": "20ms", "ListRoutes": "0s", "*": "0s"}, "routes": true}`))
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		method string
		slow   bool
		call   func() error
	}{
		{"EnsureLoadBalancer", true, func() error {
			_, err := c.EnsureLoadBalancer(ctx, "k", service("a"), nil)
			return err
		}},
		{"InstanceMetadata", true, func() error { _, err := c.InstanceMetadata(ctx, node("n1", "")); return err }},
		{"GetZone", true, func() error { _, err := c.GetZone(ctx); return err }},
		{"UpdateLoadBalancer", false, func() error { return c.UpdateLoadBalancer(ctx, "k", service("a"), nil) }},
		{"InstanceExists", false, func() error { _, err := c.InstanceExists(ctx, node("n1", "")); return err }},
		{"ListRoutes", false, func() error { _, err := c.ListRoutes(ctx, "k"); return err }},
	}
	for _, tc := range calls {
		t.Run(tc.method, func(t *testing.T) {
			start := time.Now()
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if tc.slow && took < d {
				t.Errorf("%s took %v, want >= %v", tc.method, took, d)
			}
			if !tc.slow && took >= d {
				t.Errorf("%s took %v, want < %v (no latency configured)", tc.method, took, d)
			}
		})
	}
}

func TestLatencyWildcard(t *testing.T) {
	c, err := newBenchCloud(strings.NewReader(`{"latency": {"*": "20ms", "InstanceExists": "0s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.InstanceShutdown(context.Background(), node("n1", "")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("InstanceShutdown took %v under \"*\": 20ms", took)
	}
	start = time.Now()
	if _, err := c.InstanceExists(context.Background(), node("n1", "")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 20*time.Millisecond {
		t.Errorf("InstanceExists took %v; its own 0s should win over \"*\"", took)
	}
}

// The latency is slept outside the lock: N concurrent calls take about one
// latency, not N, and concurrent allocation hands out distinct addresses.
func TestLatencyIsConcurrent(t *testing.T) {
	const n, d = 20, 50 * time.Millisecond
	c, err := newBenchCloud(strings.NewReader(`{"latency": {"EnsureLoadBalancer": "50ms", "InstanceMetadata": "50ms"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	ips := make([]string, n)
	addrs := make([]string, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			uid := string(rune('a' + i))
			st, err := c.EnsureLoadBalancer(context.Background(), "k", service(uid), nil)
			if err != nil {
				t.Error(err)
				return
			}
			ips[i] = st.Ingress[0].IP
			md, err := c.InstanceMetadata(context.Background(), node("node-"+uid, ""))
			if err != nil {
				t.Error(err)
				return
			}
			addrs[i] = md.NodeAddresses[0].Address
		}(i)
	}
	wg.Wait()
	if took := time.Since(start); took >= n*d/2 {
		t.Errorf("%d concurrent calls of 2×%v took %v: the latency is serialised", n, d, took)
	}
	for _, got := range [][]string{ips, addrs} {
		seen := map[string]bool{}
		for _, ip := range got {
			if seen[ip] {
				t.Errorf("address %s handed out twice: %v", ip, got)
			}
			seen[ip] = true
		}
	}
}

func TestLatencyHonoursContext(t *testing.T) {
	c, err := newBenchCloud(strings.NewReader(`{"latency": {"EnsureLoadBalancer": "10s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.EnsureLoadBalancer(ctx, "k", service("a"), nil); err != context.DeadlineExceeded {
		t.Fatalf("error = %v, want context.DeadlineExceeded", err)
	}
	if _, ok, _ := c.GetLoadBalancer(context.Background(), "k", service("a")); ok {
		t.Error("a cancelled EnsureLoadBalancer created the load balancer")
	}
}
