package adapter

import (
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"
)

type builderCloud struct {
	*testCloud
	cb cloudprovider.ControllerClientBuilder
}

func (c *builderCloud) Initialize(cb cloudprovider.ControllerClientBuilder, _ <-chan struct{}) { c.cb = cb }

func TestFirstNoAccessBuilder(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	c := &builderCloud{testCloud: &testCloud{}}
	if _, err := New(c, Options{}); err != nil {
		t.Fatal(err)
	}
	if c.cb == nil {
		t.Fatal("Initialize got a nil ControllerClientBuilder")
	}
	if _, err := c.cb.Client("x"); err == nil || !strings.Contains(err.Error(), "KUBECONFIG") {
		t.Fatalf("Client: %v", err)
	}
}

func TestFirstVersionAndUntagged(t *testing.T) {
	a, err := New(&testCloud{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v := a.info.VendorVersion; v == "(devel)" || v == "" {
		t.Errorf("vendor_version = %q", v)
	}
	if _, err := New(&testCloud{untagged: true}, Options{}); err == nil {
		t.Error("an untagged cloud started")
	}
}
