package fakeaws

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"strings"
)

const elbVersion = "2012-06-01"

const elbNS = "http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/"

// elb answers one classic Elastic Load Balancing action.
func (c *Cloud) elb(action string, p params) (node, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var kids []node
	var err *apiError
	switch action {
	case "DescribeLoadBalancers":
		kids, err = c.describeLoadBalancers(p)
	case "CreateLoadBalancer":
		kids, err = c.createLoadBalancer(p)
	case "DeleteLoadBalancer":
		// AWS answers success for a load balancer that does not exist.
		delete(c.lbs, p.get("LoadBalancerName"))
	case "DescribeLoadBalancerAttributes":
		kids, err = c.describeAttributes(p)
	case "ModifyLoadBalancerAttributes":
		kids, err = c.modifyAttributes(p)
	case "ConfigureHealthCheck":
		kids, err = c.configureHealthCheck(p)
	case "RegisterInstancesWithLoadBalancer", "DeregisterInstancesFromLoadBalancer":
		kids, err = c.registerInstances(action == "RegisterInstancesWithLoadBalancer", p)
	case "CreateLoadBalancerListeners", "DeleteLoadBalancerListeners":
		err = c.changeListeners(action == "CreateLoadBalancerListeners", p)
	case "AttachLoadBalancerToSubnets", "DetachLoadBalancerFromSubnets":
		kids, err = c.changeSubnets(action == "AttachLoadBalancerToSubnets", p)
	case "ApplySecurityGroupsToLoadBalancer":
		kids, err = c.applySecurityGroups(p)
	case "AddTags":
		err = c.addLBTags(p)
	default:
		return node{}, unknownAction("Elastic Load Balancing", action)
	}
	if err != nil {
		return node{}, err
	}
	n := el(action+"Response",
		el(action+"Result", kids...),
		el("ResponseMetadata", tx("RequestId", fmt.Sprintf("fakeaws-%d", c.next()))))
	n.attrs = ` xmlns="` + elbNS + `"`
	return n, nil
}

func (c *Cloud) lb(name string) (*LoadBalancer, *apiError) {
	if lb, ok := c.lbs[name]; ok {
		return lb, nil
	}
	return nil, notFound("LoadBalancerNotFound", "There is no ACTIVE Load Balancer named '%s'", name)
}

func (c *Cloud) describeLoadBalancers(p params) ([]node, *apiError) {
	names := p.list("LoadBalancerNames.member")
	if len(names) == 0 {
		for n := range c.lbs {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	var out []node
	for _, n := range names {
		lb, err := c.lb(n)
		if err != nil {
			return nil, err
		}
		out = append(out, c.lbNode(lb))
	}
	return []node{items("LoadBalancerDescriptions", "member", out)}, nil
}

func members(wrapper string, values []string) node {
	var kids []node
	for _, v := range values {
		kids = append(kids, tx("", v))
	}
	return items(wrapper, "member", kids)
}

func (c *Cloud) lbNode(lb *LoadBalancer) node {
	var listeners, instances, backends []node
	for _, l := range lb.Listeners {
		kids := []node{tx("Protocol", l.Protocol), tx("LoadBalancerPort", strconv.Itoa(int(l.LoadBalancerPort))), tx("InstanceProtocol", l.InstanceProtocol), tx("InstancePort", strconv.Itoa(int(l.InstancePort)))}
		if l.SSLCertificateID != "" {
			kids = append(kids, tx("SSLCertificateId", l.SSLCertificateID))
		}
		listeners = append(listeners, el("", el("Listener", kids...), members("PolicyNames", nil)))
	}
	for _, id := range lb.Instances {
		instances = append(instances, el("", tx("InstanceId", id)))
	}
	ports := make([]int, 0, len(lb.backends))
	for port := range lb.backends {
		ports = append(ports, int(port))
	}
	sort.Ints(ports)
	for _, port := range ports {
		backends = append(backends, el("", tx("InstancePort", strconv.Itoa(port)), members("PolicyNames", lb.backends[int32(port)])))
	}
	var zones []string
	for _, s := range c.subnets {
		if slices.Contains(lb.Subnets, s.ID) {
			zones = append(zones, s.Zone)
		}
	}
	hc := lb.HealthCheck
	return el("",
		tx("LoadBalancerName", lb.Name),
		tx("DNSName", lb.DNSName),
		tx("CanonicalHostedZoneName", lb.DNSName),
		tx("CanonicalHostedZoneNameID", "Z35SXDOTRQ7X7K"),
		items("ListenerDescriptions", "member", listeners),
		el("Policies", members("AppCookieStickinessPolicies", nil), members("LBCookieStickinessPolicies", nil), members("OtherPolicies", nil)),
		items("BackendServerDescriptions", "member", backends),
		members("AvailabilityZones", zones),
		members("Subnets", lb.Subnets),
		tx("VPCId", c.cfg.VPC),
		items("Instances", "member", instances),
		el("HealthCheck", tx("Target", hc.Target), tx("Interval", strconv.Itoa(int(hc.Interval))), tx("Timeout", strconv.Itoa(int(hc.Timeout))), tx("UnhealthyThreshold", strconv.Itoa(int(hc.UnhealthyThreshold))), tx("HealthyThreshold", strconv.Itoa(int(hc.HealthyThreshold)))),
		el("SourceSecurityGroup", tx("OwnerAlias", c.cfg.AccountID), tx("GroupName", c.groupName(lb.SecurityGroups))),
		members("SecurityGroups", lb.SecurityGroups),
		tx("CreatedTime", "2026-01-01T00:00:00.000Z"),
		tx("Scheme", lb.Scheme),
	)
}

func (c *Cloud) groupName(ids []string) string {
	if len(ids) > 0 {
		if g := c.group(ids[0]); g != nil {
			return g.Name
		}
	}
	return ""
}

func (p params) listeners() ([]Listener, *apiError) {
	var out []Listener
	for _, i := range p.indexes("Listeners.member") {
		s := p.sub("Listeners.member", i)
		lbPort, err := s.int32ptr("LoadBalancerPort")
		if err != nil {
			return nil, err
		}
		port, err := s.int32ptr("InstancePort")
		if err != nil {
			return nil, err
		}
		if lbPort == nil || port == nil || s.get("Protocol") == "" {
			return nil, &apiError{Code: "ValidationError", Message: "a listener needs Protocol, LoadBalancerPort and InstancePort"}
		}
		l := Listener{Protocol: strings.ToUpper(s.get("Protocol")), LoadBalancerPort: *lbPort, InstanceProtocol: strings.ToUpper(s.get("InstanceProtocol")), InstancePort: *port, SSLCertificateID: s.get("SSLCertificateId")}
		if l.InstanceProtocol == "" {
			l.InstanceProtocol = l.Protocol
		}
		out = append(out, l)
	}
	return out, nil
}

func (c *Cloud) checkSubnetsAndGroups(subnets, groups []string) *apiError {
	for _, s := range subnets {
		if !slices.ContainsFunc(c.subnets, func(x *subnet) bool { return x.ID == s }) {
			return &apiError{Code: "InvalidSubnet", Message: fmt.Sprintf("subnet %s does not exist", s)}
		}
	}
	for _, g := range groups {
		if c.group(g) == nil {
			return &apiError{Code: "InvalidSecurityGroup", Message: fmt.Sprintf("security group %s does not exist", g)}
		}
	}
	return nil
}

func (c *Cloud) createLoadBalancer(p params) ([]node, *apiError) {
	name := p.get("LoadBalancerName")
	if name == "" || len(name) > 32 {
		return nil, &apiError{Code: "ValidationError", Message: fmt.Sprintf("LoadBalancerName %q must have 1 to 32 characters", name)}
	}
	if _, ok := c.lbs[name]; ok {
		return nil, &apiError{Code: "DuplicateLoadBalancerName", Message: fmt.Sprintf("Load Balancer named '%s' already exists", name)}
	}
	listeners, err := p.listeners()
	if err != nil {
		return nil, err
	}
	if len(listeners) == 0 {
		return nil, &apiError{Code: "ValidationError", Message: "at least one listener is required"}
	}
	subnets, groups := p.list("Subnets.member"), p.list("SecurityGroups.member")
	if len(subnets) == 0 {
		return nil, &apiError{Code: "ValidationError", Message: "fakeaws serves VPC load balancers: Subnets are required"}
	}
	if err := c.checkSubnetsAndGroups(subnets, groups); err != nil {
		return nil, err
	}
	scheme := p.get("Scheme")
	if scheme == "" {
		scheme = "internet-facing"
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	dns := fmt.Sprintf("%s-%d.%s.elb.amazonaws.com", name, h.Sum32(), c.cfg.Region)
	if scheme == "internal" {
		dns = "internal-" + dns
	}
	lb := &LoadBalancer{
		Name: name, DNSName: dns, Scheme: scheme, Listeners: listeners, Subnets: subnets, SecurityGroups: groups,
		Instances: []string{}, Tags: p.tags("Tags.member"),
		// AWS's defaults for a new classic load balancer.
		HealthCheck: &HealthCheck{Target: fmt.Sprintf("TCP:%d", listeners[0].InstancePort), Interval: 30, Timeout: 5, UnhealthyThreshold: 2, HealthyThreshold: 10},
		attributes: params{
			"AccessLog.Enabled":              {"false"},
			"ConnectionDraining.Enabled":     {"false"},
			"ConnectionDraining.Timeout":     {"300"},
			"ConnectionSettings.IdleTimeout": {"60"},
			"CrossZoneLoadBalancing.Enabled": {"false"},
		},
		backends: map[int32][]string{},
		policies: map[string]bool{},
	}
	c.lbs[name] = lb
	return []node{tx("DNSName", dns)}, nil
}

func (c *Cloud) describeAttributes(p params) ([]node, *apiError) {
	lb, err := c.lb(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	return []node{attributeTree("LoadBalancerAttributes", lb.attributes)}, nil
}

// attributeTree writes the attributes (AccessLog.Enabled, …) as nested
// elements: <AccessLog><Enabled>false</Enabled></AccessLog>.
func attributeTree(name string, attrs params) node {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	root := el(name)
	root.kids = []node{}
	for _, k := range keys {
		group, field, _ := strings.Cut(k, ".")
		at := slices.IndexFunc(root.kids, func(n node) bool { return n.name == group })
		if at < 0 {
			root.kids = append(root.kids, node{name: group, kids: []node{}})
			at = len(root.kids) - 1
		}
		root.kids[at].kids = append(root.kids[at].kids, tx(field, attrs.get(k)))
	}
	return root
}

func (c *Cloud) modifyAttributes(p params) ([]node, *apiError) {
	lb, err := c.lb(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	changes := p.under("LoadBalancerAttributes")
	if len(changes) == 0 {
		return nil, &apiError{Code: "ValidationError", Message: "no LoadBalancerAttributes"}
	}
	for k := range changes {
		if group, field, ok := strings.Cut(k, "."); !ok || strings.Contains(field, ".") || !slices.Contains([]string{"AccessLog", "ConnectionDraining", "ConnectionSettings", "CrossZoneLoadBalancing"}, group) {
			return nil, &apiError{Code: "ValidationError", Message: fmt.Sprintf("fakeaws does not implement the load balancer attribute %q", k)}
		}
	}
	// Attributes left out keep their values, as on AWS.
	for k, v := range changes {
		lb.attributes[k] = v
	}
	return []node{tx("LoadBalancerName", lb.Name), attributeTree("LoadBalancerAttributes", lb.attributes)}, nil
}

func (c *Cloud) configureHealthCheck(p params) ([]node, *apiError) {
	lb, err := c.lb(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	s := p.under("HealthCheck")
	hc := HealthCheck{Target: s.get("Target")}
	for _, f := range []struct {
		key string
		to  *int32
	}{{"Interval", &hc.Interval}, {"Timeout", &hc.Timeout}, {"UnhealthyThreshold", &hc.UnhealthyThreshold}, {"HealthyThreshold", &hc.HealthyThreshold}} {
		v, err := s.int32ptr(f.key)
		if err != nil {
			return nil, err
		}
		if v == nil {
			return nil, &apiError{Code: "ValidationError", Message: "HealthCheck." + f.key + " is required"}
		}
		*f.to = *v
	}
	if hc.Target == "" {
		return nil, &apiError{Code: "ValidationError", Message: "HealthCheck.Target is required"}
	}
	lb.HealthCheck = &hc
	return []node{el("HealthCheck", tx("Target", hc.Target), tx("Interval", strconv.Itoa(int(hc.Interval))), tx("Timeout", strconv.Itoa(int(hc.Timeout))), tx("UnhealthyThreshold", strconv.Itoa(int(hc.UnhealthyThreshold))), tx("HealthyThreshold", strconv.Itoa(int(hc.HealthyThreshold))))}, nil
}

func (c *Cloud) registerInstances(register bool, p params) ([]node, *apiError) {
	lb, err := c.lb(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, i := range p.indexes("Instances.member") {
		ids = append(ids, p.sub("Instances.member", i).get("InstanceId"))
	}
	for _, id := range ids {
		i := slices.IndexFunc(c.instances, func(in *Instance) bool { return in.ID == id })
		if register && (i < 0 || c.instances[i].State != "running") {
			return nil, &apiError{Code: "InvalidInstance", Message: fmt.Sprintf("EC2 instance %s is not in running state or does not exist", id)}
		}
	}
	for _, id := range ids {
		has := slices.Contains(lb.Instances, id)
		if register && !has {
			lb.Instances = append(lb.Instances, id)
		}
		if !register && has {
			lb.Instances = slices.DeleteFunc(lb.Instances, func(s string) bool { return s == id })
		}
	}
	var out []node
	for _, id := range lb.Instances {
		out = append(out, el("", tx("InstanceId", id)))
	}
	return []node{items("Instances", "member", out)}, nil
}

func (c *Cloud) changeListeners(create bool, p params) *apiError {
	lb, err := c.lb(p.get("LoadBalancerName"))
	if err != nil {
		return err
	}
	if !create {
		for _, port := range p.list("LoadBalancerPorts.member") {
			lb.Listeners = slices.DeleteFunc(lb.Listeners, func(l Listener) bool { return strconv.Itoa(int(l.LoadBalancerPort)) == port })
		}
		return nil
	}
	listeners, err := p.listeners()
	if err != nil {
		return err
	}
	for _, l := range listeners {
		if slices.ContainsFunc(lb.Listeners, func(x Listener) bool { return x.LoadBalancerPort == l.LoadBalancerPort && x != l }) {
			return &apiError{Code: "DuplicateListener", Message: fmt.Sprintf("a listener on port %d already exists", l.LoadBalancerPort)}
		}
		if !slices.Contains(lb.Listeners, l) {
			lb.Listeners = append(lb.Listeners, l)
		}
	}
	return nil
}

func (c *Cloud) changeSubnets(attach bool, p params) ([]node, *apiError) {
	lb, err := c.lb(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	subnets := p.list("Subnets.member")
	if err := c.checkSubnetsAndGroups(subnets, nil); err != nil {
		return nil, err
	}
	for _, s := range subnets {
		if attach && !slices.Contains(lb.Subnets, s) {
			lb.Subnets = append(lb.Subnets, s)
		}
		if !attach {
			lb.Subnets = slices.DeleteFunc(lb.Subnets, func(x string) bool { return x == s })
		}
	}
	return []node{members("Subnets", lb.Subnets)}, nil
}

func (c *Cloud) applySecurityGroups(p params) ([]node, *apiError) {
	lb, err := c.lb(p.get("LoadBalancerName"))
	if err != nil {
		return nil, err
	}
	groups := p.list("SecurityGroups.member")
	if err := c.checkSubnetsAndGroups(nil, groups); err != nil {
		return nil, err
	}
	lb.SecurityGroups = groups
	return []node{members("SecurityGroups", groups)}, nil
}

func (c *Cloud) addLBTags(p params) *apiError {
	tags := p.tags("Tags.member")
	for _, n := range p.list("LoadBalancerNames.member") {
		lb, err := c.lb(n)
		if err != nil {
			return err
		}
		for k, v := range tags {
			lb.Tags[k] = v
		}
	}
	return nil
}
