package fakeaws

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
)

const ec2Version = "2016-11-15"

const ec2NS = "http://ec2.amazonaws.com/doc/2016-11-15/"

// ec2 answers one EC2 action.
func (c *Cloud) ec2(action string, p params) (node, *apiError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var kids []node
	var err *apiError
	switch action {
	case "DescribeInstances":
		kids, err = c.describeInstances(p)
	case "DescribeInstanceTopology":
		// No instance type of this fake has a topology (AWS has them only
		// for some accelerated types).
		kids = []node{items("instanceSet", "item", nil)}
	case "DescribeAvailabilityZones":
		kids, err = c.describeZones(p)
	case "DescribeSecurityGroups":
		kids, err = c.describeSecurityGroups(p)
	case "CreateSecurityGroup":
		kids, err = c.createSecurityGroup(p)
	case "DeleteSecurityGroup":
		kids, err = c.deleteSecurityGroup(p)
	case "AuthorizeSecurityGroupIngress":
		kids, err = c.authorizeIngress(p)
	case "RevokeSecurityGroupIngress":
		kids, err = c.revokeIngress(p)
	case "CreateTags", "DeleteTags":
		kids, err = c.changeTags(action == "CreateTags", p)
	case "DescribeSubnets":
		kids, err = c.describeSubnets(p)
	case "DescribeRouteTables":
		kids, err = c.describeRouteTables(p)
	case "CreateRoute":
		kids, err = c.createRoute(p)
	case "DeleteRoute":
		kids, err = c.deleteRoute(p)
	case "ModifyInstanceAttribute":
		kids, err = c.modifyInstanceAttribute(p)
	default:
		return node{}, unknownAction("EC2", action)
	}
	if err != nil {
		return node{}, err
	}
	n := el(action+"Response", append([]node{tx("requestId", fmt.Sprintf("fakeaws-%d", c.next()))}, kids...)...)
	n.attrs = ` xmlns="` + ec2NS + `"`
	return n, nil
}

// filters are the request's Filter.N.Name / Filter.N.Value.M.
type filter struct {
	name   string
	values []string
}

func (p params) filters() []filter {
	var out []filter
	for _, i := range p.indexes("Filter") {
		f := p.sub("Filter", i)
		out = append(out, filter{name: f.get("Name"), values: f.list("Value")})
	}
	return out
}

// matches says whether every filter holds for a resource whose values for
// a filter name field gives (nil, false for a name it does not know).
func matches(filters []filter, field func(name string) ([]string, bool)) (bool, *apiError) {
	for _, f := range filters {
		have, known := field(f.name)
		if !known {
			return false, invalid("The filter '%s' is invalid (fakeaws implements only the filters k8s.io/cloud-provider-aws uses)", f.name)
		}
		hit := false
		for _, want := range f.values {
			for _, v := range have {
				if ok, _ := path.Match(want, v); ok || want == v {
					hit = true
				}
			}
		}
		if !hit {
			return false, nil
		}
	}
	return true, nil
}

// tagField answers the tag filters: tag:<key> and tag-key.
func tagField(tags map[string]string, name string) ([]string, bool) {
	if k, ok := strings.CutPrefix(name, "tag:"); ok {
		if v, ok := tags[k]; ok {
			return []string{v}, true
		}
		return nil, true
	}
	if name == "tag-key" {
		keys := make([]string, 0, len(tags))
		for k := range tags {
			keys = append(keys, k)
		}
		return keys, true
	}
	return nil, false
}

var stateCodes = map[string]string{"pending": "0", "running": "16", "shutting-down": "32", "terminated": "48", "stopping": "64", "stopped": "80"}

func (c *Cloud) describeInstances(p params) ([]node, *apiError) {
	ids := p.list("InstanceId")
	for _, id := range ids {
		if !strings.HasPrefix(id, "i-") {
			return nil, notFound("InvalidInstanceID.Malformed", "Invalid id: \"%s\"", id)
		}
		if !slices.ContainsFunc(c.instances, func(i *Instance) bool { return i.ID == id }) {
			return nil, notFound("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
		}
	}
	filters := p.filters()
	var reservations []node
	for _, in := range c.instances {
		if len(ids) > 0 && !slices.Contains(ids, in.ID) {
			continue
		}
		ok, err := matches(filters, func(name string) ([]string, bool) {
			switch name {
			case "instance-id":
				return []string{in.ID}, true
			case "private-dns-name":
				return []string{in.PrivateDNSName}, true
			case "instance-state-name":
				return []string{in.State}, true
			case "vpc-id":
				return []string{c.cfg.VPC}, true
			case "availability-zone":
				return []string{in.Zone}, true
			}
			return tagField(in.Tags, name)
		})
		if err != nil {
			return nil, err
		}
		if ok {
			reservations = append(reservations, el("", tx("reservationId", "r-"+strings.TrimPrefix(in.ID, "i-")), tx("ownerId", c.cfg.AccountID), items("instancesSet", "item", []node{c.instanceNode(in)})))
		}
	}
	return []node{items("reservationSet", "item", reservations)}, nil
}

func (c *Cloud) instanceNode(in *Instance) node {
	var groups []node
	for _, g := range in.SecurityGroups {
		name := g
		if sg := c.group(g); sg != nil {
			name = sg.Name
		}
		groups = append(groups, el("", tx("groupId", g), tx("groupName", name)))
	}
	kids := []node{
		tx("instanceId", in.ID),
		tx("imageId", "ami-0fa4e000000000001"),
		el("instanceState", tx("code", stateCodes[in.State]), tx("name", in.State)),
		tx("privateDnsName", in.PrivateDNSName),
		tx("instanceType", in.InstanceType),
		el("placement", tx("availabilityZone", in.Zone), tx("tenancy", "default")),
		items("groupSet", "item", groups),
		tagNodes("tagSet", "item", in.Tags),
	}
	// A terminated instance has no network interfaces, addresses or subnet.
	if in.State != "terminated" {
		kids = append(kids, tx("subnetId", in.SubnetID), tx("vpcId", c.cfg.VPC), tx("privateIpAddress", in.PrivateIP))
		if in.PublicIP != "" {
			kids = append(kids, tx("ipAddress", in.PublicIP))
		}
		if in.PublicDNSName != "" {
			kids = append(kids, tx("dnsName", in.PublicDNSName))
		}
		eni := el("",
			tx("networkInterfaceId", "eni-"+strings.TrimPrefix(in.ID, "i-")),
			tx("subnetId", in.SubnetID), tx("vpcId", c.cfg.VPC), tx("status", "in-use"),
			tx("privateIpAddress", in.PrivateIP), tx("privateDnsName", in.PrivateDNSName),
			el("attachment", tx("deviceIndex", "0"), tx("status", "attached")),
			items("groupSet", "item", groups),
			items("privateIpAddressesSet", "item", []node{el("", tx("privateIpAddress", in.PrivateIP), tx("privateDnsName", in.PrivateDNSName), tx("primary", "true"))}),
		)
		kids = append(kids, items("networkInterfaceSet", "item", []node{eni}))
	}
	return el("", kids...)
}

func (c *Cloud) describeZones(p params) ([]node, *apiError) {
	names := p.list("ZoneName")
	filters := p.filters()
	var zones []node
	for i, z := range c.cfg.Zones {
		id := fmt.Sprintf("use1-az%d", i+1)
		if len(names) > 0 && !slices.Contains(names, z) {
			continue
		}
		ok, err := matches(filters, func(name string) ([]string, bool) {
			switch name {
			case "zone-name":
				return []string{z}, true
			case "zone-id":
				return []string{id}, true
			case "region-name":
				return []string{c.cfg.Region}, true
			case "zone-type":
				return []string{"availability-zone"}, true
			case "state":
				return []string{"available"}, true
			}
			return nil, false
		})
		if err != nil {
			return nil, err
		}
		if ok {
			zones = append(zones, el("", tx("zoneName", z), tx("zoneId", id), tx("zoneType", "availability-zone"), tx("zoneState", "available"), tx("regionName", c.cfg.Region), tx("groupName", c.cfg.Region), tx("optInStatus", "opt-in-not-required")))
		}
	}
	for _, n := range names {
		if !slices.Contains(c.cfg.Zones, n) {
			return nil, invalid("The zone '%s' does not exist.", n)
		}
	}
	return []node{items("availabilityZoneInfo", "item", zones)}, nil
}

func (c *Cloud) group(id string) *securityGroup {
	for _, g := range c.groups {
		if g.ID == id {
			return g
		}
	}
	return nil
}

func (c *Cloud) describeSecurityGroups(p params) ([]node, *apiError) {
	ids, names := p.list("GroupId"), p.list("GroupName")
	for _, id := range ids {
		if c.group(id) == nil {
			return nil, notFound("InvalidGroup.NotFound", "The security group '%s' does not exist", id)
		}
	}
	filters := p.filters()
	var out []node
	for _, g := range c.groups {
		if len(ids) > 0 && !slices.Contains(ids, g.ID) || len(names) > 0 && !slices.Contains(names, g.Name) {
			continue
		}
		ok, err := matches(filters, func(name string) ([]string, bool) {
			switch name {
			case "group-id":
				return []string{g.ID}, true
			case "group-name":
				return []string{g.Name}, true
			case "vpc-id":
				return []string{g.VPC}, true
			case "ip-permission.group-id":
				var refs []string
				for _, perm := range g.Ingress {
					refs = append(refs, perm.Groups...)
				}
				return refs, true
			}
			return tagField(g.Tags, name)
		})
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, c.groupNode(g))
		}
	}
	return []node{items("securityGroupInfo", "item", out)}, nil
}

func (c *Cloud) groupNode(g *securityGroup) node {
	var perms []node
	for _, perm := range g.Ingress {
		kids := []node{tx("ipProtocol", perm.Protocol)}
		if perm.From != nil {
			kids = append(kids, tx("fromPort", i32(perm.From)))
		}
		if perm.To != nil {
			kids = append(kids, tx("toPort", i32(perm.To)))
		}
		var ranges, groups []node
		for _, r := range perm.Cidrs {
			ranges = append(ranges, el("", tx("cidrIp", r)))
		}
		for _, gid := range perm.Groups {
			groups = append(groups, el("", tx("groupId", gid), tx("userId", c.cfg.AccountID)))
		}
		kids = append(kids, items("ipRanges", "item", ranges), items("groups", "item", groups))
		perms = append(perms, el("", kids...))
	}
	return el("",
		tx("ownerId", c.cfg.AccountID), tx("groupId", g.ID), tx("groupName", g.Name),
		tx("groupDescription", g.Description), tx("vpcId", g.VPC),
		items("ipPermissions", "item", perms), items("ipPermissionsEgress", "item", nil),
		tagNodes("tagSet", "item", g.Tags),
	)
}

func (c *Cloud) createSecurityGroup(p params) ([]node, *apiError) {
	name, vpc := p.get("GroupName"), p.get("VpcId")
	if name == "" || p.get("GroupDescription") == "" {
		return nil, &apiError{Code: "MissingParameter", Message: "GroupName and GroupDescription are required"}
	}
	if vpc != c.cfg.VPC {
		return nil, notFound("InvalidVpcID.NotFound", "The vpc ID '%s' does not exist", vpc)
	}
	for _, g := range c.groups {
		if g.Name == name && g.VPC == vpc {
			return nil, &apiError{Code: "InvalidGroup.Duplicate", Message: fmt.Sprintf("The security group '%s' already exists for VPC '%s'", name, vpc)}
		}
	}
	g := &securityGroup{ID: fmt.Sprintf("sg-0fa4e1%011x", c.next()), Name: name, Description: p.get("GroupDescription"), VPC: vpc, Tags: map[string]string{}}
	for _, i := range p.indexes("TagSpecification") {
		spec := p.sub("TagSpecification", i)
		if spec.get("ResourceType") == "security-group" {
			for k, v := range spec.tags("Tag") {
				g.Tags[k] = v
			}
		}
	}
	c.groups = append(c.groups, g)
	return []node{tx("return", "true"), tx("groupId", g.ID), tagNodes("tagSet", "item", g.Tags)}, nil
}

func (c *Cloud) deleteSecurityGroup(p params) ([]node, *apiError) {
	id := p.get("GroupId")
	if c.group(id) == nil {
		return nil, notFound("InvalidGroup.NotFound", "The security group '%s' does not exist", id)
	}
	for _, lb := range c.lbs {
		if slices.Contains(lb.SecurityGroups, id) {
			return nil, &apiError{Code: "DependencyViolation", Message: fmt.Sprintf("resource %s has a dependent object (load balancer %s)", id, lb.Name)}
		}
	}
	for _, g := range c.groups {
		for _, perm := range g.Ingress {
			if slices.Contains(perm.Groups, id) {
				return nil, &apiError{Code: "DependencyViolation", Message: fmt.Sprintf("resource %s has a dependent object (a rule of %s)", id, g.ID)}
			}
		}
	}
	for _, in := range c.instances {
		if in.State != "terminated" && slices.Contains(in.SecurityGroups, id) {
			return nil, &apiError{Code: "DependencyViolation", Message: fmt.Sprintf("resource %s has a dependent object (instance %s)", id, in.ID)}
		}
	}
	c.groups = slices.DeleteFunc(c.groups, func(g *securityGroup) bool { return g.ID == id })
	return []node{tx("return", "true"), tx("groupId", id)}, nil
}

// permissions reads IpPermissions.N: one rule per (protocol, ports) with its
// CIDRs and source groups.
func (p params) permissions() ([]permission, *apiError) {
	var out []permission
	for _, i := range p.indexes("IpPermissions") {
		s := p.sub("IpPermissions", i)
		from, err := s.int32ptr("FromPort")
		if err != nil {
			return nil, err
		}
		to, err := s.int32ptr("ToPort")
		if err != nil {
			return nil, err
		}
		perm := permission{Protocol: s.get("IpProtocol"), From: from, To: to}
		for _, j := range s.indexes("IpRanges") {
			perm.Cidrs = append(perm.Cidrs, s.sub("IpRanges", j).get("CidrIp"))
		}
		for _, j := range s.indexes("Groups") {
			perm.Groups = append(perm.Groups, s.sub("Groups", j).get("GroupId"))
		}
		if len(s.indexes("Ipv6Ranges")) > 0 || len(s.indexes("PrefixListIds")) > 0 {
			return nil, invalid("fakeaws implements IPv4 ranges and security group sources only")
		}
		if perm.Protocol == "" {
			return nil, &apiError{Code: "MissingParameter", Message: "IpProtocol is required"}
		}
		out = append(out, perm)
	}
	return out, nil
}

func samePorts(a, b permission) bool {
	eq := func(x, y *int32) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	return a.Protocol == b.Protocol && eq(a.From, b.From) && eq(a.To, b.To)
}

func (c *Cloud) authorizeIngress(p params) ([]node, *apiError) {
	g := c.group(p.get("GroupId"))
	if g == nil {
		return nil, notFound("InvalidGroup.NotFound", "The security group '%s' does not exist", p.get("GroupId"))
	}
	perms, err := p.permissions()
	if err != nil {
		return nil, err
	}
	// All or nothing, as AWS does.
	ingress := append([]permission(nil), g.Ingress...)
	for _, perm := range perms {
		for _, src := range perm.Groups {
			if c.group(src) == nil {
				return nil, notFound("InvalidGroup.NotFound", "The security group '%s' does not exist", src)
			}
		}
		at := slices.IndexFunc(ingress, func(q permission) bool { return samePorts(q, perm) })
		if at < 0 {
			ingress = append(ingress, permission{Protocol: perm.Protocol, From: perm.From, To: perm.To})
			at = len(ingress) - 1
		}
		rule := &ingress[at]
		for _, cidr := range perm.Cidrs {
			if slices.Contains(rule.Cidrs, cidr) {
				return nil, &apiError{Code: "InvalidPermission.Duplicate", Message: fmt.Sprintf("the specified rule \"peer: %s, %s\" already exists", cidr, perm.Protocol)}
			}
			rule.Cidrs = append(slices.Clone(rule.Cidrs), cidr)
		}
		for _, src := range perm.Groups {
			if slices.Contains(rule.Groups, src) {
				return nil, &apiError{Code: "InvalidPermission.Duplicate", Message: fmt.Sprintf("the specified rule \"peer: %s, %s\" already exists", src, perm.Protocol)}
			}
			rule.Groups = append(slices.Clone(rule.Groups), src)
		}
	}
	g.Ingress = ingress
	return []node{tx("return", "true")}, nil
}

func (c *Cloud) revokeIngress(p params) ([]node, *apiError) {
	g := c.group(p.get("GroupId"))
	if g == nil {
		return nil, notFound("InvalidGroup.NotFound", "The security group '%s' does not exist", p.get("GroupId"))
	}
	perms, err := p.permissions()
	if err != nil {
		return nil, err
	}
	ingress := append([]permission(nil), g.Ingress...)
	for _, perm := range perms {
		at := slices.IndexFunc(ingress, func(q permission) bool { return samePorts(q, perm) })
		missing := at < 0
		if !missing {
			rule := &ingress[at]
			for _, cidr := range perm.Cidrs {
				missing = missing || !slices.Contains(rule.Cidrs, cidr)
				rule.Cidrs = slices.DeleteFunc(slices.Clone(rule.Cidrs), func(s string) bool { return s == cidr })
			}
			for _, src := range perm.Groups {
				missing = missing || !slices.Contains(rule.Groups, src)
				rule.Groups = slices.DeleteFunc(slices.Clone(rule.Groups), func(s string) bool { return s == src })
			}
		}
		if missing {
			return nil, &apiError{Code: "InvalidPermission.NotFound", Message: fmt.Sprintf("The specified rule does not exist in this security group (%s %s)", g.ID, perm.Protocol)}
		}
	}
	g.Ingress = slices.DeleteFunc(ingress, func(q permission) bool { return len(q.Cidrs) == 0 && len(q.Groups) == 0 })
	return []node{tx("return", "true")}, nil
}

// tagsOf is the tag map of a resource by id, or nil.
func (c *Cloud) tagsOf(id string) map[string]string {
	for _, in := range c.instances {
		if in.ID == id {
			return in.Tags
		}
	}
	if g := c.group(id); g != nil {
		return g.Tags
	}
	for _, s := range c.subnets {
		if s.ID == id {
			return s.Tags
		}
	}
	for _, rt := range c.routeTables {
		if rt.ID == id {
			return rt.Tags
		}
	}
	return nil
}

func (c *Cloud) changeTags(create bool, p params) ([]node, *apiError) {
	ids := p.list("ResourceId")
	tags := p.tags("Tag")
	for _, id := range ids {
		if c.tagsOf(id) == nil {
			return nil, notFound("InvalidID", "The ID '%s' is not valid (fakeaws tags instances, security groups, subnets and route tables)", id)
		}
	}
	for _, id := range ids {
		t := c.tagsOf(id)
		for k, v := range tags {
			if create {
				t[k] = v
			} else if have, ok := t[k]; ok && (v == "" || v == have) {
				delete(t, k)
			}
		}
	}
	return []node{tx("return", "true")}, nil
}

func (c *Cloud) describeSubnets(p params) ([]node, *apiError) {
	ids := p.list("SubnetId")
	filters := p.filters()
	var out []node
	for _, s := range c.subnets {
		if len(ids) > 0 && !slices.Contains(ids, s.ID) {
			continue
		}
		ok, err := matches(filters, func(name string) ([]string, bool) {
			switch name {
			case "subnet-id":
				return []string{s.ID}, true
			case "vpc-id":
				return []string{s.VPC}, true
			case "availability-zone":
				return []string{s.Zone}, true
			}
			return tagField(s.Tags, name)
		})
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, el("", tx("subnetId", s.ID), tx("state", "available"), tx("vpcId", s.VPC), tx("cidrBlock", s.CIDR), tx("availableIpAddressCount", "250"), tx("availabilityZone", s.Zone), tx("defaultForAz", "false"), tx("mapPublicIpOnLaunch", "true"), tagNodes("tagSet", "item", s.Tags)))
		}
	}
	return []node{items("subnetSet", "item", out)}, nil
}

func (c *Cloud) describeRouteTables(p params) ([]node, *apiError) {
	ids := p.list("RouteTableId")
	filters := p.filters()
	var out []node
	for _, rt := range c.routeTables {
		if len(ids) > 0 && !slices.Contains(ids, rt.ID) {
			continue
		}
		ok, err := matches(filters, func(name string) ([]string, bool) {
			switch name {
			case "route-table-id":
				return []string{rt.ID}, true
			case "vpc-id":
				return []string{rt.VPC}, true
			case "association.subnet-id":
				return rt.Subnets, true
			}
			return tagField(rt.Tags, name)
		})
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		var assocs, routes []node
		if rt.Main {
			assocs = append(assocs, el("", tx("routeTableAssociationId", "rtbassoc-main"), tx("routeTableId", rt.ID), tx("main", "true")))
		}
		subnets := slices.Clone(rt.Subnets)
		sort.Strings(subnets)
		for _, s := range subnets {
			assocs = append(assocs, el("", tx("routeTableAssociationId", "rtbassoc-"+strings.TrimPrefix(s, "subnet-")), tx("routeTableId", rt.ID), tx("subnetId", s), tx("main", "false")))
		}
		for _, r := range rt.Routes {
			kids := []node{tx("destinationCidrBlock", r.Destination), tx("state", "active"), tx("origin", "CreateRoute")}
			if r.Gateway != "" {
				kids = append(kids, tx("gatewayId", r.Gateway))
			}
			if r.Instance != "" {
				kids = append(kids, tx("instanceId", r.Instance))
			}
			routes = append(routes, el("", kids...))
		}
		out = append(out, el("", tx("routeTableId", rt.ID), tx("vpcId", rt.VPC), tx("ownerId", c.cfg.AccountID), items("associationSet", "item", assocs), items("routeSet", "item", routes), tagNodes("tagSet", "item", rt.Tags)))
	}
	return []node{items("routeTableSet", "item", out)}, nil
}

func (c *Cloud) routeTable(id string) (*routeTable, *apiError) {
	for _, rt := range c.routeTables {
		if rt.ID == id {
			return rt, nil
		}
	}
	return nil, notFound("InvalidRouteTableID.NotFound", "The routeTable ID '%s' does not exist", id)
}

func (c *Cloud) instance(id string) (*Instance, *apiError) {
	for _, in := range c.instances {
		if in.ID == id {
			return in, nil
		}
	}
	return nil, notFound("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
}

// createRoute adds an instance route; the same route again is accepted, a
// route to the destination with another target is RouteAlreadyExists.
func (c *Cloud) createRoute(p params) ([]node, *apiError) {
	rt, err := c.routeTable(p.get("RouteTableId"))
	if err != nil {
		return nil, err
	}
	dest, target := p.get("DestinationCidrBlock"), p.get("InstanceId")
	if dest == "" || target == "" {
		return nil, invalid("fakeaws creates instance routes only: DestinationCidrBlock and InstanceId are required")
	}
	if _, err := c.instance(target); err != nil {
		return nil, err
	}
	for _, r := range rt.Routes {
		if r.Destination == dest {
			if r.Instance == target {
				return []node{tx("return", "true")}, nil
			}
			return nil, &apiError{Code: "RouteAlreadyExists", Message: fmt.Sprintf("The route identified by %s already exists.", dest)}
		}
	}
	rt.Routes = append(rt.Routes, route{Destination: dest, Instance: target})
	return []node{tx("return", "true")}, nil
}

func (c *Cloud) deleteRoute(p params) ([]node, *apiError) {
	rt, err := c.routeTable(p.get("RouteTableId"))
	if err != nil {
		return nil, err
	}
	dest := p.get("DestinationCidrBlock")
	at := slices.IndexFunc(rt.Routes, func(r route) bool { return r.Destination == dest })
	if at < 0 {
		return nil, notFound("InvalidRoute.NotFound", "no route with destination-cidr-block %s in route table %s", dest, rt.ID)
	}
	rt.Routes = slices.Delete(rt.Routes, at, at+1)
	return nil, nil
}

// modifyInstanceAttribute accepts SourceDestCheck (what routes need); the
// fake does not model it further.
func (c *Cloud) modifyInstanceAttribute(p params) ([]node, *apiError) {
	if _, err := c.instance(p.get("InstanceId")); err != nil {
		return nil, err
	}
	for k := range p {
		if k != "Action" && k != "Version" && k != "InstanceId" && k != "SourceDestCheck.Value" {
			return nil, invalid("fakeaws implements ModifyInstanceAttribute for SourceDestCheck only, not %s", k)
		}
	}
	return []node{tx("return", "true")}, nil
}
