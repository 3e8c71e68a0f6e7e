package fakeaws

import (
	"context"
	"errors"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing/types"
	"github.com/aws/smithy-go"
)

// clients are the AWS SDK's own EC2 and ELB clients against a fresh fake,
// so these tests check the wire format the cloud provider reads.
func clients(t *testing.T) (*Cloud, *ec2.Client, *elb.Client) {
	t.Helper()
	c, err := New(Config{ClusterID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: aws.AnonymousCredentials{},
	}
	e := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(srv.URL) })
	l := elb.NewFromConfig(cfg, func(o *elb.Options) { o.BaseEndpoint = aws.String(srv.URL) })
	return c, e, l
}

func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	if err != nil {
		return "not an API error: " + err.Error()
	}
	return ""
}

func TestDescribeInstances(t *testing.T) {
	c, e, _ := clients(t)
	a, err := c.AddInstance(Instance{PrivateDNSName: "ip-10-0-1-10.ec2.internal", PublicIP: "203.0.113.10"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.AddInstance(Instance{PrivateDNSName: "ip-10-0-2-11.ec2.internal"})
	c.SetInstanceState(b.ID, "terminated")
	for _, tc := range []struct {
		name string
		in   ec2.DescribeInstancesInput
		want []string
		code string
	}{
		{"by id", ec2.DescribeInstancesInput{InstanceIds: []string{a.ID}}, []string{a.ID}, ""},
		{"by two ids", ec2.DescribeInstancesInput{InstanceIds: []string{a.ID, b.ID}}, []string{a.ID, b.ID}, ""},
		{"unknown id", ec2.DescribeInstancesInput{InstanceIds: []string{"i-0000000000000dead"}}, nil, "InvalidInstanceID.NotFound"},
		{"malformed id", ec2.DescribeInstancesInput{InstanceIds: []string{"conformance-missing"}}, nil, "InvalidInstanceID.Malformed"},
		{"by name, alive", ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
			{Name: aws.String("private-dns-name"), Values: []string{"ip-10-0-2-11.ec2.internal", "ip-10-0-1-10.ec2.internal"}},
			{Name: aws.String("instance-state-name"), Values: []string{"running", "stopped"}},
		}}, []string{a.ID}, ""},
		{"by cluster tag", ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("tag-key"), Values: []string{"kubernetes.io/cluster/test"}}}}, []string{a.ID, b.ID}, ""},
		{"unknown filter", ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("owner-id"), Values: []string{"1"}}}}, nil, "InvalidParameterValue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := e.DescribeInstances(context.Background(), &tc.in)
			if got := code(err); got != tc.code {
				t.Fatalf("error code %q, want %q (%v)", got, tc.code, err)
			}
			if err != nil {
				return
			}
			var got []string
			for _, r := range out.Reservations {
				for _, i := range r.Instances {
					got = append(got, aws.ToString(i.InstanceId))
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("instances %v, want %v", got, tc.want)
			}
		})
	}
	out, err := e.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{a.ID}})
	if err != nil {
		t.Fatal(err)
	}
	i := out.Reservations[0].Instances[0]
	if aws.ToString(i.Placement.AvailabilityZone) != "us-east-1a" || i.State.Name != ec2types.InstanceStateNameRunning ||
		aws.ToString(i.PublicIpAddress) != "203.0.113.10" || len(i.NetworkInterfaces) != 1 ||
		aws.ToString(i.NetworkInterfaces[0].PrivateIpAddresses[0].PrivateIpAddress) != a.PrivateIP ||
		i.InstanceType != "m5.large" || aws.ToString(i.SecurityGroups[0].GroupId) != NodeSecurityGroup {
		t.Fatalf("instance read back wrong: %+v", i)
	}
}

func TestSecurityGroupIngress(t *testing.T) {
	_, e, _ := clients(t)
	ctx := context.Background()
	created, err := e.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
		GroupName: aws.String("k8s-elb-a"), Description: aws.String("d"), VpcId: aws.String("vpc-0fa4e000000000001"),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSecurityGroup, Tags: []ec2types.Tag{{Key: aws.String("kubernetes.io/cluster/test"), Value: aws.String("owned")}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	fromLB := []ec2types.IpPermission{{IpProtocol: aws.String("-1"), UserIdGroupPairs: []ec2types.UserIdGroupPair{{GroupId: created.GroupId}}}}
	for _, tc := range []struct {
		name string
		call func() error
		code string
	}{
		{"authorize", func() error {
			_, err := e.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(NodeSecurityGroup), IpPermissions: fromLB})
			return err
		}, ""},
		{"authorize again", func() error {
			_, err := e.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(NodeSecurityGroup), IpPermissions: fromLB})
			return err
		}, "InvalidPermission.Duplicate"},
		{"delete while referenced", func() error {
			_, err := e.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: created.GroupId})
			return err
		}, "DependencyViolation"},
		{"revoke", func() error {
			_, err := e.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(NodeSecurityGroup), IpPermissions: fromLB})
			return err
		}, ""},
		{"revoke again", func() error {
			_, err := e.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(NodeSecurityGroup), IpPermissions: fromLB})
			return err
		}, "InvalidPermission.NotFound"},
		{"delete", func() error {
			_, err := e.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: created.GroupId})
			return err
		}, ""},
	} {
		if got := code(tc.call()); got != tc.code {
			t.Fatalf("%s: error code %q, want %q", tc.name, got, tc.code)
		}
	}
}

func TestClassicLoadBalancer(t *testing.T) {
	c, _, l := clients(t)
	ctx := context.Background()
	in, _ := c.AddInstance(Instance{PrivateDNSName: "ip-10-0-1-10.ec2.internal"})
	_, err := l.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{
		LoadBalancerName: aws.String("a1"),
		Listeners:        []elbtypes.Listener{{Protocol: aws.String("tcp"), LoadBalancerPort: 80, InstanceProtocol: aws.String("tcp"), InstancePort: aws.Int32(30080)}},
		Subnets:          []string{"subnet-0fa4e000000000001"},
		SecurityGroups:   []string{NodeSecurityGroup},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.RegisterInstancesWithLoadBalancer(ctx, &elb.RegisterInstancesWithLoadBalancerInput{LoadBalancerName: aws.String("a1"), Instances: []elbtypes.Instance{{InstanceId: aws.String(in.ID)}}}); err != nil {
		t.Fatal(err)
	}
	// What k8s.io/cloud-provider-aws sets, read back equal (it compares
	// with reflect.DeepEqual and modifies when they differ).
	want := &elbtypes.LoadBalancerAttributes{
		AccessLog:              &elbtypes.AccessLog{Enabled: false},
		ConnectionDraining:     &elbtypes.ConnectionDraining{Enabled: false, Timeout: aws.Int32(300)},
		ConnectionSettings:     &elbtypes.ConnectionSettings{IdleTimeout: aws.Int32(60)},
		CrossZoneLoadBalancing: &elbtypes.CrossZoneLoadBalancing{Enabled: true},
	}
	if _, err := l.ModifyLoadBalancerAttributes(ctx, &elb.ModifyLoadBalancerAttributesInput{LoadBalancerName: aws.String("a1"), LoadBalancerAttributes: want}); err != nil {
		t.Fatal(err)
	}
	attrs, err := l.DescribeLoadBalancerAttributes(ctx, &elb.DescribeLoadBalancerAttributesInput{LoadBalancerName: aws.String("a1")})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(attrs.LoadBalancerAttributes, want) {
		t.Fatalf("attributes %+v, want %+v", attrs.LoadBalancerAttributes, want)
	}
	out, err := l.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerNames: []string{"a1"}})
	if err != nil {
		t.Fatal(err)
	}
	d := out.LoadBalancerDescriptions[0]
	if aws.ToString(d.DNSName) == "" || aws.ToString(d.Instances[0].InstanceId) != in.ID || aws.ToString(d.HealthCheck.Target) != "TCP:30080" ||
		aws.ToString(d.ListenerDescriptions[0].Listener.Protocol) != "TCP" || d.Subnets[0] != "subnet-0fa4e000000000001" {
		t.Fatalf("load balancer read back wrong: %+v", d)
	}
	if _, err := l.DeleteLoadBalancer(ctx, &elb.DeleteLoadBalancerInput{LoadBalancerName: aws.String("a1")}); err != nil {
		t.Fatal(err)
	}
	_, err = l.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerNames: []string{"a1"}})
	if got := code(err); got != "LoadBalancerNotFound" {
		t.Fatalf("after delete: error code %q, want LoadBalancerNotFound", got)
	}
	_, err = l.CreateLoadBalancerPolicy(ctx, &elb.CreateLoadBalancerPolicyInput{LoadBalancerName: aws.String("a1"), PolicyName: aws.String("p"), PolicyTypeName: aws.String("ProxyProtocolPolicyType")})
	if got := code(err); got != "InvalidAction" {
		t.Fatalf("an action the fake lacks: error code %q, want InvalidAction", got)
	}
}
