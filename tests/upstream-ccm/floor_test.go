package main

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

func TestInitialiseMakesTheTwoWritesOfACloudNodeController(t *testing.T) {
	other := v1.Taint{Key: "dedicated", Value: "gpu", Effect: v1.TaintEffectNoSchedule}
	tests := []struct {
		name       string
		taints     []v1.Taint
		wantWrites []string
		wantTaints []v1.Taint
	}{
		{
			name:       "uninitialised",
			taints:     []v1.Taint{{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule}},
			wantWrites: []string{"patch/status", "update/"},
			wantTaints: []v1.Taint{},
		},
		{
			name:       "uninitialised beside another taint",
			taints:     []v1.Taint{other, {Key: cloudproviderapi.TaintExternalCloudProvider, Effect: v1.TaintEffectNoSchedule}},
			wantWrites: []string{"patch/status", "update/"},
			wantTaints: []v1.Taint{other},
		},
		{
			name:       "already initialised: nothing written",
			taints:     []v1.Taint{other},
			wantWrites: nil,
			wantTaints: []v1.Taint{other},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1.NodeSpec{Taints: tt.taints}}
			client := fake.NewClientset(node)
			get := func(name string) (*v1.Node, error) {
				return client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
			}
			client.ClearActions()
			cloud, err := newBenchCloud(nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := initialise(context.Background(), client, get, "n1", cloud); err != nil {
				t.Fatal(err)
			}
			var writes []string
			for _, a := range client.Actions() {
				if a.GetVerb() != "get" {
					writes = append(writes, a.GetVerb()+"/"+a.GetSubresource())
				}
			}
			if len(writes) != len(tt.wantWrites) {
				t.Fatalf("writes %v, want %v", writes, tt.wantWrites)
			}
			for i := range writes {
				if writes[i] != tt.wantWrites[i] {
					t.Fatalf("writes %v, want %v", writes, tt.wantWrites)
				}
			}
			got, _ := get("n1")
			if len(got.Spec.Taints) != len(tt.wantTaints) || (len(tt.wantTaints) > 0 && got.Spec.Taints[0] != tt.wantTaints[0]) {
				t.Fatalf("taints %v, want %v", got.Spec.Taints, tt.wantTaints)
			}
			if tt.wantWrites == nil {
				return
			}
			if got.Spec.ProviderID != "fake://n1" || got.Labels[v1.LabelTopologyZone] != zoneName || got.Labels[v1.LabelInstanceTypeStable] != instanceType {
				t.Fatalf("providerID %q, labels %v", got.Spec.ProviderID, got.Labels)
			}
			if len(got.Status.Addresses) != 2 || got.Status.Addresses[0].Address != firstNodeIP.String() {
				t.Fatalf("addresses %v", got.Status.Addresses)
			}
		})
	}
}
