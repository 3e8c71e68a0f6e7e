package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// quotaConfig is "quota" in the cloud config: the cloud's API quota as a
// token bucket, as clouds meter their APIs (EC2: a bucket of 100 that
// refills at 20 per second for non-mutating calls).
type quotaConfig struct {
	// QPS is the refill rate in calls per second (> 0).
	QPS float64 `json:"qps"`
	// Burst is the bucket's size (>= 1); 0 means one second's worth,
	// at least 1.
	Burst int `json:"burst"`
}

// throttleError is what the bench cloud answers beyond its quota: the
// error an AWS SDK call returns when EC2 throttles it. The cloud-node and
// service controllers treat it as any other cloud error (requeue with
// their own backoff), which is what the quota scenario measures.
type throttleError struct {
	method     string
	retryAfter time.Duration
}

func (e *throttleError) Error() string {
	return fmt.Sprintf("%s: RequestLimitExceeded: Request limit exceeded.\n\tstatus code: 503, retry after %s", e.method, e.retryAfter.Round(time.Millisecond))
}

// Code is the AWS SDK's awserr.Error code.
func (e *throttleError) Code() string { return "RequestLimitExceeded" }

// bucket is a token bucket; starts full.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	size   float64
	tokens float64
	last   time.Time
}

func newBucket(q quotaConfig, now time.Time) (*bucket, error) {
	if !(q.QPS > 0) || math.IsInf(q.QPS, 0) {
		return nil, fmt.Errorf("cloud config: quota.qps %v: want a number of calls per second above 0", q.QPS)
	}
	if q.Burst < 0 {
		return nil, fmt.Errorf("cloud config: quota.burst %d is negative", q.Burst)
	}
	size := float64(q.Burst)
	if size == 0 {
		size = math.Max(1, math.Ceil(q.QPS))
	}
	return &bucket{rate: q.QPS, size: size, tokens: size, last: now}, nil
}

// take takes a token, or says how long until one is there.
func (b *bucket) take(now time.Time) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = math.Min(b.size, b.tokens+elapsed*b.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}

// callCounts counts the calls that reached the cloud, per method: all of
// them, and those refused for the quota.
type callCounts struct {
	mu sync.Mutex
	by map[string]*methodCount
}

type methodCount struct {
	Calls   uint64 `json:"calls"`
	Refused uint64 `json:"refused"`
}

func (c *callCounts) add(method string, refused bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]*methodCount{}
	}
	m := c.by[method]
	if m == nil {
		m = &methodCount{}
		c.by[method] = m
	}
	m.Calls++
	if refused {
		m.Refused++
	}
}

func (c *callCounts) snapshot() map[string]methodCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]methodCount, len(c.by))
	for k, v := range c.by {
		out[k] = *v
	}
	return out
}

// admit counts a call of method and charges it to the quota, if any: nil,
// or the throttling error to answer at once.
func (c *benchCloud) admit(method string) error {
	if c.quota != nil {
		if ok, wait := c.quota.take(time.Now()); !ok {
			c.counts.add(method, true)
			return &throttleError{method: method, retryAfter: wait}
		}
	}
	c.counts.add(method, false)
	return nil
}

// serveStats answers GET /calls with the call counts by method as JSON
// ({"InstanceMetadata": {"calls": 5, "refused": 1}}), for the benchmark
// to read from outside the process. Loopback only: no authentication.
func (c *benchCloud) serveStats(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cloud config: statsListen %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /calls", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c.counts.snapshot())
	})
	go func() {
		if err := http.Serve(l, mux); err != nil {
			klog.Errorf("bench cloud stats server: %v", err)
		}
	}()
	return nil
}
