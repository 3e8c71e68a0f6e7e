package adapter

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

var ctx = context.Background()

func nodeRef(name, providerID string) *pb.NodeRef {
	return &pb.NodeRef{Name: name, ProviderId: providerID}
}

func TestForeignProviderIDsNeverReachTheCloud(t *testing.T) {
	v2 := &v2Instances{exists: false}
	a := instances{Adapter: newAdapter(t, &testCloud{v2: v2}, Options{})}
	for _, id := range []string{"aws:///us-east-1a/i-1", "test:/x", "test://", "i-1", "testing://x"} {
		_, err := a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: nodeRef("n", id)})
		checkErr(t, "InstanceExists "+id, err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "node.provider_id"})
		_, err = a.InstanceShutdown(ctx, &pb.InstanceShutdownRequest{Node: nodeRef("n", id)})
		checkErr(t, "InstanceShutdown "+id, err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "node.provider_id"})
		_, err = a.InstanceMetadata(ctx, &pb.InstanceMetadataRequest{Node: nodeRef("n", id)})
		checkErr(t, "InstanceMetadata "+id, err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, "node.provider_id"})
	}
	if v2.calls != 0 {
		t.Errorf("the cloud was called %d times", v2.calls)
	}
	// The scheme option decides what is foreign.
	a = instances{Adapter: newAdapter(t, &testCloud{v2: v2}, Options{ProviderIDScheme: "aws"})}
	r, err := a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: nodeRef("n", "aws:///us-east-1a/i-1")})
	if err != nil || r.Existence != pb.InstanceExistence_INSTANCE_EXISTENCE_NOT_EXISTS {
		t.Errorf("own scheme: %v %v", r, err)
	}
}

func TestRequestsAreValidatedNamingTheField(t *testing.T) {
	a := instances{Adapter: newAdapter(t, &testCloud{v2: &v2Instances{}}, Options{})}
	for _, c := range []struct {
		node  *pb.NodeRef
		field string
	}{
		{nil, "node"},
		{&pb.NodeRef{}, "node.name"},
		{&pb.NodeRef{Name: "n", Addresses: []*pb.NodeAddress{{Address: "10.0.0.1"}}}, "node.addresses[0].type"},
	} {
		_, err := a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: c.node})
		checkErr(t, fmt.Sprint(c.node), err, want{codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID_REQUEST, c.field})
	}
}

func TestTheNodeTheCloudSees(t *testing.T) {
	v2 := &v2Instances{exists: true}
	a := instances{Adapter: newAdapter(t, &testCloud{v2: v2}, Options{})}
	ref := &pb.NodeRef{
		Name: "n1", Uid: "u-1", ProviderId: "test://i-1",
		Addresses:   []*pb.NodeAddress{{Type: pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP, Address: "10.0.0.1"}, {Type: pb.NodeAddressType_NODE_ADDRESS_TYPE_HOSTNAME, Address: "n1"}},
		Labels:      map[string]string{"l": "v"},
		Annotations: map[string]string{"a": "b"},
	}
	if _, err := a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: ref}); err != nil {
		t.Fatal(err)
	}
	n := v2.got
	if n.Name != "n1" || n.UID != "u-1" || n.Spec.ProviderID != "test://i-1" || n.Labels["l"] != "v" || n.Annotations["a"] != "b" ||
		!reflect.DeepEqual(n.Status.Addresses, []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "n1"}}) {
		t.Errorf("node = %+v", n)
	}
}

func TestInstancesV2(t *testing.T) {
	md := &cloudprovider.InstanceMetadata{
		ProviderID: "test://i-1", InstanceType: "m1", Zone: "z", Region: "r",
		NodeAddresses:    []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "1.2.3.4"}},
		AdditionalLabels: map[string]string{"example.com/x": "y"},
	}
	cases := []struct {
		name    string
		v2      v2Instances
		node    *pb.NodeRef
		exists  pb.InstanceExistence
		shut    pb.InstanceShutdownState
		md      *pb.InstanceMetadata
		errWant *want // for all three calls
	}{
		{name: "exists", v2: v2Instances{exists: true, shutdown: true, md: md}, node: nodeRef("n", ""),
			exists: pb.InstanceExistence_INSTANCE_EXISTENCE_EXISTS, shut: pb.InstanceShutdownState_INSTANCE_SHUTDOWN_STATE_SHUT_DOWN,
			md: &pb.InstanceMetadata{ProviderId: "test://i-1", InstanceType: "m1", Zone: "z", Region: "r",
				NodeAddresses:    []*pb.NodeAddress{{Type: pb.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_IP, Address: "1.2.3.4"}},
				AdditionalLabels: map[string]string{"example.com/x": "y"}}},
		{name: "empty providerID: the node's stands", v2: v2Instances{md: &cloudprovider.InstanceMetadata{}}, node: nodeRef("n", "test://i-9"),
			exists: pb.InstanceExistence_INSTANCE_EXISTENCE_NOT_EXISTS, shut: pb.InstanceShutdownState_INSTANCE_SHUTDOWN_STATE_RUNNING,
			md: &pb.InstanceMetadata{ProviderId: "test://i-9"}},
		{name: "cloud error", v2: v2Instances{err: errCloud}, node: nodeRef("n", ""),
			errWant: &want{code: codes.Unknown}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := instances{Adapter: newAdapter(t, &testCloud{v2: &c.v2}, Options{})}
			e, err1 := a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: c.node})
			s, err2 := a.InstanceShutdown(ctx, &pb.InstanceShutdownRequest{Node: c.node})
			m, err3 := a.InstanceMetadata(ctx, &pb.InstanceMetadataRequest{Node: c.node})
			if c.errWant != nil {
				for i, err := range []error{err1, err2, err3} {
					checkErr(t, fmt.Sprint("call ", i), err, *c.errWant)
				}
				return
			}
			if err1 != nil || err2 != nil || err3 != nil {
				t.Fatal(err1, err2, err3)
			}
			if e.Existence != c.exists || s.State != c.shut || !proto.Equal(m.Metadata, c.md) {
				t.Errorf("got %v %v %v", e, s, m)
			}
		})
	}
}

func TestInstancesV2ErrorsAndBadAnswers(t *testing.T) {
	node := nodeRef("n", "")
	// InstanceNotFound is NOT_FOUND for shutdown and metadata, but never
	// NOT_EXISTS (nor INSTANCE_NOT_FOUND) for existence.
	a := instances{Adapter: newAdapter(t, &testCloud{v2: &v2Instances{err: fmt.Errorf("vm: %w", cloudprovider.InstanceNotFound)}}, Options{})}
	_, err := a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: node})
	checkErr(t, "InstanceExists", err, want{code: codes.Unknown})
	_, err = a.InstanceShutdown(ctx, &pb.InstanceShutdownRequest{Node: node})
	checkErr(t, "InstanceShutdown", err, want{codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""})
	_, err = a.InstanceMetadata(ctx, &pb.InstanceMetadataRequest{Node: node})
	checkErr(t, "InstanceMetadata", err, want{codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""})

	for name, md := range map[string]*cloudprovider.InstanceMetadata{
		"nil":          nil,
		"address type": {ProviderID: "test://i", NodeAddresses: []corev1.NodeAddress{{Type: "Weird", Address: "x"}}},
		"address":      {ProviderID: "test://i", NodeAddresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "x"}}},
		"providerID":   {ProviderID: "i-1"},
		"zone":         {ProviderID: "test://i", Zone: "not a label"},
		"label":        {ProviderID: "test://i", AdditionalLabels: map[string]string{"a b": "c"}},
	} {
		a := instances{Adapter: newAdapter(t, &testCloud{v2: &v2Instances{md: md}}, Options{})}
		_, err := a.InstanceMetadata(ctx, &pb.InstanceMetadataRequest{Node: node})
		checkErr(t, "bad metadata: "+name, err, want{code: codes.Internal})
	}
}

func v1Cloud() *v1Instances {
	return &v1Instances{
		ids:      map[types.NodeName]string{"n1": "i-1", "blank": ""},
		exists:   map[string]bool{"test://i-1": true},
		shutdown: map[string]bool{"test://i-1": true},
		addrs: map[string][]corev1.NodeAddress{
			"test://i-1": {{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			"n1":         {{Type: corev1.NodeInternalIP, Address: "10.0.0.2"}},
		},
		itypes: map[string]string{"test://i-1": "big", "n1": "small"},
		errs:   map[string]error{},
	}
}

func TestInstancesV1ExistenceAndShutdownAsUpstreamsNodeLifecycleController(t *testing.T) {
	cases := []struct {
		name   string
		node   *pb.NodeRef
		errs   map[string]error
		exists pb.InstanceExistence
		shut   pb.InstanceShutdownState
		e1, e2 *want
	}{
		{name: "by name: InstanceID, then by providerID", node: nodeRef("n1", ""),
			exists: pb.InstanceExistence_INSTANCE_EXISTENCE_EXISTS, shut: pb.InstanceShutdownState_INSTANCE_SHUTDOWN_STATE_SHUT_DOWN},
		{name: "by providerID", node: nodeRef("other", "test://i-2"),
			exists: pb.InstanceExistence_INSTANCE_EXISTENCE_NOT_EXISTS, shut: pb.InstanceShutdownState_INSTANCE_SHUTDOWN_STATE_RUNNING},
		{name: "InstanceID says not found", node: nodeRef("gone", ""),
			exists: pb.InstanceExistence_INSTANCE_EXISTENCE_NOT_EXISTS,
			e2:     &want{codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""}},
		{name: "InstanceID answers an empty id", node: nodeRef("blank", ""),
			e1: &want{code: codes.Internal}, e2: &want{code: codes.Internal}},
		{name: "InstanceID not implemented", node: nodeRef("n1", ""), errs: map[string]error{"InstanceID": cloudprovider.NotImplemented},
			e1: &want{code: codes.Unimplemented}, e2: &want{code: codes.Unimplemented}},
		{name: "shutdown not implemented is running", node: nodeRef("n1", ""),
			errs:   map[string]error{"InstanceShutdownByProviderID": cloudprovider.NotImplemented},
			exists: pb.InstanceExistence_INSTANCE_EXISTENCE_EXISTS, shut: pb.InstanceShutdownState_INSTANCE_SHUTDOWN_STATE_RUNNING},
		{name: "InstanceNotFound from the existence check is an error, not NOT_EXISTS", node: nodeRef("n1", ""),
			errs: map[string]error{"InstanceExistsByProviderID": cloudprovider.InstanceNotFound, "InstanceShutdownByProviderID": cloudprovider.InstanceNotFound},
			e1:   &want{code: codes.Unknown}, e2: &want{codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v1 := v1Cloud()
			if c.errs != nil {
				v1.errs = c.errs
			}
			a := instances{Adapter: newAdapter(t, &testCloud{v1: v1}, Options{})}
			e, err := a.InstanceExists(ctx, &pb.InstanceExistsRequest{Node: c.node})
			if c.e1 != nil {
				checkErr(t, "InstanceExists", err, *c.e1)
			} else if err != nil || e.Existence != c.exists {
				t.Errorf("InstanceExists = %v, %v; want %v", e, err, c.exists)
			}
			s, err := a.InstanceShutdown(ctx, &pb.InstanceShutdownRequest{Node: c.node})
			if c.e2 != nil {
				checkErr(t, "InstanceShutdown", err, *c.e2)
			} else if err != nil || s.State != c.shut {
				t.Errorf("InstanceShutdown = %v, %v; want %v", s, err, c.shut)
			}
		})
	}
}

func TestInstancesV1MetadataAsUpstreamsNodeController(t *testing.T) {
	zone := cloudprovider.Zone{FailureDomain: "za", Region: "r"}
	cases := []struct {
		name     string
		node     *pb.NodeRef
		errs     map[string]error
		zoneErrs map[string]error
		md       *pb.InstanceMetadata
		err      *want
	}{
		{name: "by providerID from InstanceID, zone by providerID", node: nodeRef("n1", ""),
			md: &pb.InstanceMetadata{ProviderId: "test://i-1", InstanceType: "big", Zone: "za", Region: "r",
				NodeAddresses: []*pb.NodeAddress{{Type: pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP, Address: "10.0.0.1"}}}},
		{name: "by-providerID failures fall back to the name", node: nodeRef("n1", ""),
			errs:     map[string]error{"NodeAddressesByProviderID": errCloud, "InstanceTypeByProviderID": errCloud},
			zoneErrs: map[string]error{"GetZoneByProviderID": errCloud},
			md: &pb.InstanceMetadata{ProviderId: "test://i-1", InstanceType: "small", Zone: "za", Region: "r",
				NodeAddresses: []*pb.NodeAddress{{Type: pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP, Address: "10.0.0.2"}}}},
		{name: "InstanceID not implemented: by name, no providerID", node: nodeRef("n1", ""),
			errs: map[string]error{"InstanceID": cloudprovider.NotImplemented},
			md: &pb.InstanceMetadata{InstanceType: "small", Zone: "za", Region: "r",
				NodeAddresses: []*pb.NodeAddress{{Type: pb.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP, Address: "10.0.0.2"}}}},
		{name: "unknown instance", node: nodeRef("gone", ""),
			err: &want{codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""}},
		{name: "not found by providerID nor by name", node: nodeRef("n1", "test://i-1"),
			errs: map[string]error{"NodeAddressesByProviderID": cloudprovider.InstanceNotFound, "NodeAddresses": cloudprovider.InstanceNotFound},
			err:  &want{codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""}},
		{name: "not found by providerID, no lookup by name", node: nodeRef("n1", "test://i-1"),
			errs: map[string]error{"NodeAddressesByProviderID": cloudprovider.InstanceNotFound, "NodeAddresses": cloudprovider.NotImplemented},
			err:  &want{codes.NotFound, pb.ErrorReason_ERROR_REASON_INSTANCE_NOT_FOUND, ""}},
		{name: "zone failures fail the call", node: nodeRef("n1", ""),
			zoneErrs: map[string]error{"GetZoneByProviderID": errCloud, "GetZoneByNodeName": errCloud},
			err:      &want{code: codes.Unknown}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v1 := v1Cloud()
			if c.errs != nil {
				v1.errs = c.errs
			}
			z := &fixedZones{zone: zone, errs: c.zoneErrs}
			a := instances{Adapter: newAdapter(t, &testCloud{v1: v1, zones: z}, Options{})}
			r, err := a.InstanceMetadata(ctx, &pb.InstanceMetadataRequest{Node: c.node})
			if c.err != nil {
				checkErr(t, "InstanceMetadata", err, *c.err)
				return
			}
			if err != nil || !proto.Equal(r.Metadata, c.md) {
				t.Errorf("InstanceMetadata = %v, %v; want %v", r, err, c.md)
			}
		})
	}
}
