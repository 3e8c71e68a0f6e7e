package main

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"

	"github.com/ccm-rs/ccm-rs/tests/real-ccm/aws/fakeaws"
)

// TestMissingInstance pins how the AWS cloud answers for an instance that
// does not exist (a well-formed id the fake does not hold): InstanceExists
// says false, but InstanceShutdown and InstanceMetadata fail with AWS's own
// InvalidInstanceID.NotFound, not cloudprovider.InstanceNotFound, so the
// adapter answers UNKNOWN unless told that awsv1.IsAWSErrorInstanceNotFound
// means "not found" (docs/real-ccm.md).
func TestMissingInstance(t *testing.T) {
	c, err := fakeaws.New(fakeaws.Config{ClusterID: "missing"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	cfg := filepath.Join(t.TempDir(), "cloud.conf")
	if err := os.WriteFile(cfg, []byte(fakeaws.CloudConfig(c, srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "fake")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "fake")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	cloud, err := cloudprovider.InitCloudProvider("aws", cfg)
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := cloud.InstancesV2()
	node := &v1.Node{Spec: v1.NodeSpec{ProviderID: "aws:///us-east-1a/i-0000000000000dead"}}
	node.Name = "gone"
	ctx := context.Background()

	exists, err := v2.InstanceExists(ctx, node)
	if exists || err != nil {
		t.Errorf("InstanceExists: %v, %v; want false, nil", exists, err)
	}
	_, shutdownErr := v2.InstanceShutdown(ctx, node)
	_, metadataErr := v2.InstanceMetadata(ctx, node)
	for _, tc := range []struct {
		call string
		err  error
	}{
		{"InstanceShutdown", shutdownErr},
		{"InstanceMetadata", metadataErr},
	} {
		if tc.err == nil || errors.Is(tc.err, cloudprovider.InstanceNotFound) || !awsv1.IsAWSErrorInstanceNotFound(tc.err) {
			t.Errorf("%s: %v; want AWS's own not-found error (IsAWSErrorInstanceNotFound), not cloudprovider.InstanceNotFound", tc.call, tc.err)
		}
	}
}
