package main

// The "node-init-floor" subcommand: the least a controller can do to
// initialise Nodes, for `make bench-compare` to measure both CCMs against.
// It is client-go with protobuf on the wire, one informer and a workqueue
// with N workers, no cloud and no client-side rate limit, and it makes the
// same two writes per Node as ccm-rs, in the same order: the addresses
// (a merge patch of status), then providerID, the instance labels and the
// uninitialized taint's removal (one Update).

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

const uninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"

// floorLabels are the labels upstream's cloud-node controller writes for an
// instance of the bench cloud.
var floorLabels = map[string]string{
	v1.LabelInstanceTypeStable:      instanceType,
	v1.LabelInstanceType:            instanceType,
	v1.LabelTopologyZone:            zoneName,
	v1.LabelFailureDomainBetaZone:   zoneName,
	v1.LabelTopologyRegion:          regionName,
	v1.LabelFailureDomainBetaRegion: regionName,
}

func runNodeInitFloor(args []string) int {
	fs := flag.NewFlagSet("node-init-floor", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster")
	workers := fs.Int("workers", 8, "concurrent Node initialisations")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := nodeInitFloor(*kubeconfig, *workers); err != nil {
		fmt.Fprintf(os.Stderr, "node-init-floor: %v\n", err)
		return 1
	}
	return 0
}

func nodeInitFloor(kubeconfig string, workers int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.QPS = -1 // no client-side limit
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if n, ok := obj.(*v1.Node); ok && tainted(n) {
			queue.Add(n.Name)
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced) {
		return ctx.Err()
	}

	ips := &addressPool{next: firstNodeIP}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				name, quit := queue.Get()
				if quit {
					return
				}
				if err := initialise(ctx, client, nodes.Lister().Get, name, ips); err != nil {
					fmt.Fprintf(os.Stderr, "node-init-floor: %s: %v\n", name, err)
					queue.AddRateLimited(name)
				} else {
					queue.Forget(name)
				}
				queue.Done(name)
			}
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
	return nil
}

func tainted(n *v1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == uninitializedTaint {
			return true
		}
	}
	return false
}

// addressPool hands out one InternalIP per Node name, as the bench cloud
// gives each instance its own.
type addressPool struct {
	mu    sync.Mutex
	next  netip.Addr
	given map[string]netip.Addr
}

func (p *addressPool) of(name string) netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.given == nil {
		p.given = map[string]netip.Addr{}
	}
	if a, ok := p.given[name]; ok {
		return a
	}
	a := p.next
	p.next = p.next.Next()
	p.given[name] = a
	return a
}

func initialise(ctx context.Context, client kubernetes.Interface, get func(string) (*v1.Node, error), name string, ips *addressPool) error {
	cur, err := get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !tainted(cur) {
		return nil
	}
	addresses := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"Hostname","address":%q}]}}`, ips.of(name), name)
	written, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(addresses), metav1.PatchOptions{}, "status")
	if err != nil {
		return err
	}
	n := written.DeepCopy()
	if n.Spec.ProviderID == "" {
		n.Spec.ProviderID = providerIDPrefix + name
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range floorLabels {
		n.Labels[k] = v
	}
	kept := n.Spec.Taints[:0]
	for _, t := range n.Spec.Taints {
		if t.Key != uninitializedTaint {
			kept = append(kept, t)
		}
	}
	n.Spec.Taints = kept
	updateCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = client.CoreV1().Nodes().Update(updateCtx, n, metav1.UpdateOptions{})
	return err
}
