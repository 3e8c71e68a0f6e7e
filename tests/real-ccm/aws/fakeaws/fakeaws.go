// Package fakeaws is an in-memory fake of the parts of the EC2 and classic
// Elastic Load Balancing query APIs that k8s.io/cloud-provider-aws calls to
// initialise Nodes and to serve LoadBalancer Services: one region, one VPC
// with a public subnet (an internet-gateway route) per zone, a node security
// group, instances and load balancers, all tagged for one cluster.
//
// It speaks the wire protocols the AWS SDK for Go v2 uses (form-encoded
// POSTs answered with XML) so the cloud runs unchanged against it; an
// action it does not implement is answered with the error AWS gives for an
// unknown action (InvalidAction), naming the action, so a gap shows.
// Signatures and credentials are not checked.
//
// Tests steer it through a small JSON endpoint under /control/ (see
// ServeHTTP): add, terminate or remove an instance, list the load
// balancers, read the calls it answered.
package fakeaws

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// Config is the fake cloud's fixed topology.
type Config struct {
	Region    string   // default us-east-1
	Zones     []string // default <region>a, <region>b
	VPC       string   // default vpc-0fa4e000000000001
	ClusterID string   // the kubernetes.io/cluster/<id> tag on the cluster's resources (required)
	AccountID string   // default 123456789012
}

// Instance is one EC2 instance as the control endpoint adds and shows it.
type Instance struct {
	ID             string            `json:"id"`
	PrivateDNSName string            `json:"privateDnsName"`
	PrivateIP      string            `json:"privateIp"`
	PublicIP       string            `json:"publicIp,omitempty"`
	PublicDNSName  string            `json:"publicDnsName,omitempty"`
	Zone           string            `json:"zone"`
	InstanceType   string            `json:"instanceType"`
	State          string            `json:"state"`
	SubnetID       string            `json:"subnetId"`
	SecurityGroups []string          `json:"securityGroups"`
	Tags           map[string]string `json:"tags"`
}

// LoadBalancer is one classic load balancer as the control endpoint shows it.
type LoadBalancer struct {
	Name           string            `json:"name"`
	DNSName        string            `json:"dnsName"`
	Scheme         string            `json:"scheme"`
	Listeners      []Listener        `json:"listeners"`
	Subnets        []string          `json:"subnets"`
	SecurityGroups []string          `json:"securityGroups"`
	Instances      []string          `json:"instances"`
	HealthCheck    *HealthCheck      `json:"healthCheck,omitempty"`
	Tags           map[string]string `json:"tags"`
	// attributes are kept as sent (ModifyLoadBalancerAttributes), keyed by
	// their query names without the LoadBalancerAttributes. prefix.
	attributes params
	backends   map[int32][]string // instance port → policy names
	policies   map[string]bool
}

// Listener is a classic load balancer's listener.
type Listener struct {
	Protocol         string `json:"protocol"`
	LoadBalancerPort int32  `json:"loadBalancerPort"`
	InstanceProtocol string `json:"instanceProtocol"`
	InstancePort     int32  `json:"instancePort"`
	SSLCertificateID string `json:"sslCertificateId,omitempty"`
}

// HealthCheck is a classic load balancer's health check.
type HealthCheck struct {
	Target             string `json:"target"`
	Interval           int32  `json:"interval"`
	Timeout            int32  `json:"timeout"`
	UnhealthyThreshold int32  `json:"unhealthyThreshold"`
	HealthyThreshold   int32  `json:"healthyThreshold"`
}

// Call is one API request the fake answered.
type Call struct {
	Service  string `json:"service"` // ec2 or elb
	Action   string `json:"action"`
	Mutating bool   `json:"mutating"`
	Error    string `json:"error,omitempty"`
	UnixMs   int64  `json:"unixMs"`
}

type permission struct {
	Protocol string
	From, To *int32
	Cidrs    []string
	Groups   []string
}

type securityGroup struct {
	ID, Name, Description, VPC string
	Tags                       map[string]string
	Ingress                    []permission
}

type subnet struct {
	ID, Zone, CIDR, VPC string
	Tags                map[string]string
}

type route struct{ Destination, Gateway, Instance string }

type routeTable struct {
	ID, VPC string
	Main    bool
	Subnets []string
	Routes  []route
	Tags    map[string]string
}

// Cloud is the fake's state; its methods are safe for concurrent use.
type Cloud struct {
	cfg Config

	mu          sync.Mutex
	seq         int
	instances   []*Instance // in creation order
	groups      []*securityGroup
	subnets     []*subnet
	routeTables []*routeTable
	lbs         map[string]*LoadBalancer
	calls       []Call
}

// maxCalls bounds the call record.
const maxCalls = 100_000

// New is a fake cloud with cfg's topology: a public subnet per zone, a
// main route table with an internet gateway, and the node security group
// (NodeSecurityGroup), all tagged for the cluster.
func New(cfg Config) (*Cloud, error) {
	if cfg.ClusterID == "" {
		return nil, fmt.Errorf("fakeaws: no cluster id")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if len(cfg.Zones) == 0 {
		cfg.Zones = []string{cfg.Region + "a", cfg.Region + "b"}
	}
	if cfg.VPC == "" {
		cfg.VPC = "vpc-0fa4e000000000001"
	}
	if cfg.AccountID == "" {
		cfg.AccountID = "123456789012"
	}
	c := &Cloud{cfg: cfg, lbs: map[string]*LoadBalancer{}}
	tags := func() map[string]string { return map[string]string{c.clusterTag(): "owned"} }
	rt := &routeTable{ID: "rtb-0fa4e000000000001", VPC: cfg.VPC, Main: true, Tags: tags(), Routes: []route{
		{Destination: "10.0.0.0/16", Gateway: "local"},
		{Destination: "0.0.0.0/0", Gateway: "igw-0fa4e000000000001"},
	}}
	c.routeTables = append(c.routeTables, rt)
	for i, z := range cfg.Zones {
		s := &subnet{ID: fmt.Sprintf("subnet-0fa4e0000000000%02d", i+1), Zone: z, CIDR: fmt.Sprintf("10.0.%d.0/24", i+1), VPC: cfg.VPC, Tags: tags()}
		s.Tags["kubernetes.io/role/elb"] = "1"
		c.subnets = append(c.subnets, s)
		rt.Subnets = append(rt.Subnets, s.ID)
	}
	c.groups = append(c.groups, &securityGroup{ID: NodeSecurityGroup, Name: "nodes." + cfg.ClusterID, Description: "cluster nodes", VPC: cfg.VPC, Tags: tags()})
	return c, nil
}

// NodeSecurityGroup is the security group of every instance.
const NodeSecurityGroup = "sg-0fa4e000000000001"

func (c *Cloud) clusterTag() string { return "kubernetes.io/cluster/" + c.cfg.ClusterID }

// Region, VPC and Subnet are for the cloud config of the provider under test.
func (c *Cloud) Region() string { return c.cfg.Region }
func (c *Cloud) VPC() string    { return c.cfg.VPC }
func (c *Cloud) Subnet() string { return c.subnets[0].ID }
func (c *Cloud) Zone() string   { return c.cfg.Zones[0] }

func (c *Cloud) next() int {
	c.seq++
	return c.seq
}

// AddInstance adds a running instance; empty fields get defaults (an id, the
// first zone's subnet, an address in it, the node security group, the
// cluster tag). The private DNS name is required: it is the Node's name.
func (c *Cloud) AddInstance(in Instance) (Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if in.PrivateDNSName == "" {
		return Instance{}, fmt.Errorf("an instance needs a privateDnsName (the Node's name)")
	}
	for _, i := range c.instances {
		if i.ID == in.ID || i.PrivateDNSName == in.PrivateDNSName && i.State != "terminated" {
			return Instance{}, fmt.Errorf("instance %s (%s) exists", i.ID, i.PrivateDNSName)
		}
	}
	n := c.next()
	if in.ID == "" {
		in.ID = fmt.Sprintf("i-0fa4e%012x", n)
	}
	if in.Zone == "" {
		in.Zone = c.cfg.Zones[(n-1)%len(c.cfg.Zones)]
	}
	var sub *subnet
	for _, s := range c.subnets {
		if s.Zone == in.Zone {
			sub = s
		}
	}
	if sub == nil {
		return Instance{}, fmt.Errorf("no subnet in zone %q (zones: %v)", in.Zone, c.cfg.Zones)
	}
	in.SubnetID = sub.ID
	if in.PrivateIP == "" {
		in.PrivateIP = fmt.Sprintf("%s.%d", strings.TrimSuffix(sub.CIDR, ".0/24"), 10+n%240)
	}
	if in.InstanceType == "" {
		in.InstanceType = "m5.large"
	}
	if in.State == "" {
		in.State = "running"
	}
	if len(in.SecurityGroups) == 0 {
		in.SecurityGroups = []string{NodeSecurityGroup}
	}
	if in.Tags == nil {
		in.Tags = map[string]string{}
	}
	if _, ok := in.Tags[c.clusterTag()]; !ok {
		in.Tags[c.clusterTag()] = "owned"
	}
	stored := in
	c.instances = append(c.instances, &stored)
	return stored, nil
}

// SetInstanceState sets an instance's state (running, stopped,
// terminated, …); false if there is no such instance.
func (c *Cloud) SetInstanceState(id, state string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range c.instances {
		if i.ID == id {
			i.State = state
			return true
		}
	}
	return false
}

// Instances are the instances, terminated ones included.
func (c *Cloud) Instances() []Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Instance, 0, len(c.instances))
	for _, i := range c.instances {
		out = append(out, *i)
	}
	return out
}

// LoadBalancers are the load balancers, by name.
func (c *Cloud) LoadBalancers() []LoadBalancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]LoadBalancer, 0, len(c.lbs))
	for _, lb := range c.lbs {
		out = append(out, *lb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Calls are the API requests answered so far.
func (c *Cloud) Calls() []Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Call(nil), c.calls...)
}

func (c *Cloud) record(call Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls) < maxCalls {
		c.calls = append(c.calls, call)
	}
}

// maxBody bounds a request body.
const maxBody = 1 << 20

// ServeHTTP answers the EC2 and ELB query APIs (POST /, told apart by
// their Version), the instance metadata service (always 404: the provider
// must not need it), and the control endpoint:
//
//	GET  /control/instances              the instances (JSON)
//	POST /control/instances              add one (JSON Instance; answers it)
//	POST /control/instances/{id}/{state} set its state (terminated, stopped, running)
//	GET  /control/loadbalancers          the load balancers (JSON)
//	GET  /control/calls                  the calls answered (JSON)
func (c *Cloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/control/") {
		c.control(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/latest/") {
		http.Error(w, "fakeaws: no instance metadata service", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "fakeaws: request body unreadable or over 1 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	values, err := url.ParseQuery(string(body))
	if err != nil {
		http.Error(w, "fakeaws: body is not form-encoded: "+err.Error(), http.StatusBadRequest)
		return
	}
	p := params(values)
	action := p.get("Action")
	call := Call{Action: action, UnixMs: time.Now().UnixMilli()}
	var answer node
	var aerr *apiError
	switch p.get("Version") {
	case ec2Version:
		call.Service = "ec2"
		call.Mutating = !strings.HasPrefix(action, "Describe")
		answer, aerr = c.ec2(action, p)
	case elbVersion:
		call.Service = "elb"
		call.Mutating = !strings.HasPrefix(action, "Describe")
		answer, aerr = c.elb(action, p)
	default:
		call.Service = "unknown"
		aerr = &apiError{Code: "InvalidAction", Message: fmt.Sprintf("fakeaws implements EC2 (Version %s) and classic ELB (Version %s), not Version %q (action %q)", ec2Version, elbVersion, p.get("Version"), action)}
	}
	if aerr != nil {
		call.Error = aerr.Code
	}
	c.record(call)
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>`)
	if aerr != nil {
		status := aerr.Status
		if status == 0 {
			status = http.StatusBadRequest
		}
		if call.Service == "ec2" {
			el("Response", el("Errors", el("Error", tx("Code", aerr.Code), tx("Message", aerr.Message))), tx("RequestID", requestID(call))).write(&b)
		} else {
			el("ErrorResponse", el("Error", tx("Type", "Sender"), tx("Code", aerr.Code), tx("Message", aerr.Message)), tx("RequestId", requestID(call))).write(&b)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, b.String())
		return
	}
	answer.write(&b)
	_, _ = io.WriteString(w, b.String())
}

func requestID(c Call) string {
	return fmt.Sprintf("fakeaws-%d-%s", c.UnixMs, c.Action)
}

func unknownAction(service, action string) *apiError {
	return &apiError{Code: "InvalidAction", Message: fmt.Sprintf("fakeaws: %s action %q is not implemented", service, action)}
}

func (c *Cloud) control(w http.ResponseWriter, r *http.Request) {
	reply := func(v any, err error) {
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	path := strings.TrimPrefix(r.URL.Path, "/control/")
	switch {
	case r.Method == http.MethodGet && path == "instances":
		reply(c.Instances(), nil)
	case r.Method == http.MethodPost && path == "instances":
		var in Instance
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&in); err != nil {
			reply(nil, fmt.Errorf("instance: %w", err))
			return
		}
		reply(c.AddInstance(in))
	case r.Method == http.MethodPost && strings.HasPrefix(path, "instances/"):
		id, state, _ := strings.Cut(strings.TrimPrefix(path, "instances/"), "/")
		switch state {
		case "running", "stopped", "terminated", "pending", "stopping", "shutting-down":
		default:
			reply(nil, fmt.Errorf("unknown instance state %q", state))
			return
		}
		if !c.SetInstanceState(id, state) {
			http.Error(w, "no instance "+id, http.StatusNotFound)
			return
		}
		reply(map[string]string{"id": id, "state": state}, nil)
	case r.Method == http.MethodGet && path == "loadbalancers":
		reply(c.LoadBalancers(), nil)
	case r.Method == http.MethodGet && path == "calls":
		reply(c.Calls(), nil)
	default:
		http.Error(w, "fakeaws: unknown control request "+r.Method+" "+r.URL.Path, http.StatusNotFound)
	}
}
