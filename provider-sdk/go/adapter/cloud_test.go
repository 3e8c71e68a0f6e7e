package adapter

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// testCloud is a cloudprovider.Interface whose parts each test chooses.
type testCloud struct {
	v2       cloudprovider.InstancesV2
	v1       cloudprovider.Instances
	lb       cloudprovider.LoadBalancer
	routes   cloudprovider.Routes
	zones    cloudprovider.Zones
	clusters cloudprovider.Clusters
	untagged bool // HasClusterID() is false
}

func (c *testCloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (c *testCloud) ProviderName() string                                              { return "test" }
func (c *testCloud) HasClusterID() bool                                                { return !c.untagged }
func (c *testCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return c.lb, c.lb != nil }
func (c *testCloud) Instances() (cloudprovider.Instances, bool)                        { return c.v1, c.v1 != nil }
func (c *testCloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return c.v2, c.v2 != nil }
func (c *testCloud) Zones() (cloudprovider.Zones, bool)                                { return c.zones, c.zones != nil }
func (c *testCloud) Clusters() (cloudprovider.Clusters, bool)                          { return c.clusters, c.clusters != nil }
func (c *testCloud) Routes() (cloudprovider.Routes, bool)                              { return c.routes, c.routes != nil }

// labeler adds PVLabeler to a testCloud.
type labeler struct {
	*testCloud
	labels map[string]string
	err    error
	got    *corev1.PersistentVolume
}

func (l *labeler) GetLabelsForVolume(_ context.Context, pv *corev1.PersistentVolume) (map[string]string, error) {
	l.got = pv
	return l.labels, l.err
}

// v2Instances answers from fixed values and records the node it got.
type v2Instances struct {
	exists   bool
	shutdown bool
	md       *cloudprovider.InstanceMetadata
	err      error
	calls    int
	got      *corev1.Node
}

func (i *v2Instances) InstanceExists(_ context.Context, n *corev1.Node) (bool, error) {
	i.calls++
	i.got = n
	return i.exists, i.err
}

func (i *v2Instances) InstanceShutdown(_ context.Context, n *corev1.Node) (bool, error) {
	i.calls++
	i.got = n
	return i.shutdown, i.err
}

func (i *v2Instances) InstanceMetadata(_ context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	i.calls++
	i.got = n
	return i.md, i.err
}

// v1Instances is an Instances V1 cloud: instance ids by node name, and per
// providerID answers; errors per method name.
type v1Instances struct {
	ids      map[types.NodeName]string
	exists   map[string]bool
	shutdown map[string]bool
	addrs    map[string][]corev1.NodeAddress // by providerID or by node name
	itypes   map[string]string
	errs     map[string]error
	calls    []string
}

func (i *v1Instances) call(name string) error {
	i.calls = append(i.calls, name)
	return i.errs[name]
}

func (i *v1Instances) NodeAddresses(_ context.Context, n types.NodeName) ([]corev1.NodeAddress, error) {
	return i.addrs[string(n)], i.call("NodeAddresses")
}

func (i *v1Instances) NodeAddressesByProviderID(_ context.Context, id string) ([]corev1.NodeAddress, error) {
	return i.addrs[id], i.call("NodeAddressesByProviderID")
}

func (i *v1Instances) InstanceID(_ context.Context, n types.NodeName) (string, error) {
	if err := i.call("InstanceID"); err != nil {
		return "", err
	}
	id, ok := i.ids[n]
	if !ok {
		return "", cloudprovider.InstanceNotFound
	}
	return id, nil
}

func (i *v1Instances) InstanceType(_ context.Context, n types.NodeName) (string, error) {
	return i.itypes[string(n)], i.call("InstanceType")
}

func (i *v1Instances) InstanceTypeByProviderID(_ context.Context, id string) (string, error) {
	return i.itypes[id], i.call("InstanceTypeByProviderID")
}

func (i *v1Instances) AddSSHKeyToAllInstances(context.Context, string, []byte) error {
	return cloudprovider.NotImplemented
}

func (i *v1Instances) CurrentNodeName(_ context.Context, h string) (types.NodeName, error) {
	return types.NodeName(h), nil
}

func (i *v1Instances) InstanceExistsByProviderID(_ context.Context, id string) (bool, error) {
	return i.exists[id], i.call("InstanceExistsByProviderID")
}

func (i *v1Instances) InstanceShutdownByProviderID(_ context.Context, id string) (bool, error) {
	return i.shutdown[id], i.call("InstanceShutdownByProviderID")
}

// fixedZones answers one zone, or an error.
type fixedZones struct {
	zone  cloudprovider.Zone
	errs  map[string]error
	calls []string
}

func (z *fixedZones) GetZone(context.Context) (cloudprovider.Zone, error) { return z.zone, nil }

func (z *fixedZones) GetZoneByProviderID(context.Context, string) (cloudprovider.Zone, error) {
	z.calls = append(z.calls, "GetZoneByProviderID")
	return z.zone, z.errs["GetZoneByProviderID"]
}

func (z *fixedZones) GetZoneByNodeName(context.Context, types.NodeName) (cloudprovider.Zone, error) {
	z.calls = append(z.calls, "GetZoneByNodeName")
	return z.zone, z.errs["GetZoneByNodeName"]
}

func newAdapter(t *testing.T, cloud cloudprovider.Interface, opts Options) *Adapter {
	t.Helper()
	a, err := New(cloud, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// want describes an expected error: code, reason, and the BadRequest field.
type want struct {
	code   codes.Code
	reason pb.ErrorReason
	field  string
}

func checkErr(t *testing.T, what string, err error, w want) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, w.code)
		return
	}
	e := sdk.FromError(err)
	if e.Code != w.code || e.Reason != w.reason {
		t.Errorf("%s: got %v/%v (%v), want %v/%v", what, e.Code, e.Reason, e, w.code, w.reason)
	}
	if w.field != "" && (len(e.Violations) != 1 || e.Violations[0].Field != w.field) {
		t.Errorf("%s: violations %v, want field %s", what, e.Violations, w.field)
	}
}

var errCloud = errors.New("cloud API said 500")
