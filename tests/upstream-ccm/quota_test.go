package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBucketRefusesBeyondBurstAndRefills(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b, err := newBucket(quotaConfig{QPS: 2, Burst: 3}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if ok, _ := b.take(t0); !ok {
			t.Fatalf("call %d within the burst refused", i)
		}
	}
	ok, wait := b.take(t0)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("fourth call: ok=%v wait=%v, want refused for 500ms", ok, wait)
	}
	if ok, _ := b.take(t0.Add(500 * time.Millisecond)); !ok {
		t.Fatal("a token refilled after 1/qps was refused")
	}
	// A long pause refills to the burst, not beyond.
	t1 := t0.Add(time.Hour)
	for i := 0; i < 3; i++ {
		if ok, _ := b.take(t1); !ok {
			t.Fatalf("call %d after a pause refused", i)
		}
	}
	if ok, _ := b.take(t1); ok {
		t.Fatal("the bucket grew beyond its burst")
	}
}

func TestBucketDefaultBurstIsOneSecond(t *testing.T) {
	for _, tt := range []struct {
		qps  float64
		size float64
	}{{20, 20}, {1, 1}, {0.5, 1}, {2.5, 3}} {
		b, err := newBucket(quotaConfig{QPS: tt.qps}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if b.size != tt.size {
			t.Errorf("qps %v: burst %v, want %v", tt.qps, b.size, tt.size)
		}
	}
}

func TestQuotaConfigErrors(t *testing.T) {
	for config, want := range map[string]string{
		`{"quota": {"qps": 0}}`:              "quota.qps 0",
		`{"quota": {"qps": -1}}`:             "quota.qps -1",
		`{"quota": {"qps": 1, "burst": -2}}`: "quota.burst -2 is negative",
		`{"quota": {"qps": 1, "brust": 2}}`:  "unknown field",
	} {
		_, err := parseConfig(strings.NewReader(config))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", config, err, want)
		}
	}
}

// Beyond the quota a call fails at once with EC2's throttling code, and
// both the calls and the refusals are counted; GetLoadBalancerName is not
// a cloud call.
func TestQuotaThrottlesCloudCallsAndCountsThem(t *testing.T) {
	c, err := newBenchCloud(strings.NewReader(`{"quota": {"qps": 0.001, "burst": 2}, "latency": {"*": "1h"}}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", UID: "u"}}
	c.latency = nil // the latency only proves a refusal does not wait
	if _, err := c.InstanceMetadata(ctx, node); err != nil {
		t.Fatal(err)
	}
	c.GetLoadBalancerName(ctx, "kubernetes", svc)
	if _, err := c.InstanceExists(ctx, node); err != nil {
		t.Fatal(err)
	}
	c.latency = map[string]time.Duration{"*": time.Hour}
	start := time.Now()
	_, err = c.InstanceMetadata(ctx, node)
	var throttled *throttleError
	if !errors.As(err, &throttled) || throttled.Code() != "RequestLimitExceeded" {
		t.Fatalf("third call: %v, want RequestLimitExceeded", err)
	}
	if !strings.Contains(err.Error(), "RequestLimitExceeded: Request limit exceeded.") {
		t.Errorf("message %q", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a refused call took %v: it must not wait its latency", d)
	}
	got := c.counts.snapshot()
	want := map[string]methodCount{
		"InstanceMetadata": {Calls: 2, Refused: 1},
		"InstanceExists":   {Calls: 1},
	}
	if len(got) != len(want) || got["InstanceMetadata"] != want["InstanceMetadata"] || got["InstanceExists"] != want["InstanceExists"] {
		t.Errorf("counts %v, want %v", got, want)
	}
}

func TestStatsEndpointServesTheCounts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := newBenchCloud(strings.NewReader(`{"statsListen": "` + addr + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.InstanceMetadata(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/calls")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]methodCount
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got["InstanceMetadata"] != (methodCount{Calls: 1}) || len(got) != 1 {
		t.Errorf("GET /calls: %v", got)
	}
	// A second cloud on the same address is a configuration error.
	if _, err := newBenchCloud(strings.NewReader(`{"statsListen": "` + addr + `"}`)); err == nil || !strings.Contains(err.Error(), "statsListen") {
		t.Errorf("second listener on %s: %v", addr, err)
	}
}
