package main

// The "node-init-floor" subcommand: the least a controller can do to
// initialise Nodes, for `make bench-compare` to measure both CCMs against.
// It is client-go with protobuf on the wire, one informer, a workqueue with
// N workers, no client-side rate limit and the bench cloud called in
// process at zero latency, and it makes the same two writes per Node as
// ccm-rs, in the same order: the addresses (a merge patch of status), then
// providerID, the instance labels and the uninitialized taint's removal
// (one Update).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

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

	cloud, err := newBenchCloud(nil) // no latency
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				name, quit := queue.Get()
				if quit {
					return
				}
				if err := initialise(ctx, client, nodes.Lister().Get, name, cloud); err != nil {
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
		if t.Key == cloudproviderapi.TaintExternalCloudProvider {
			return true
		}
	}
	return false
}

// initialise makes the two writes for one tainted Node, with what the
// bench cloud answers for it: the addresses (a merge patch of status), then
// providerID, the instance labels and the taint's removal (one Update).
func initialise(ctx context.Context, client kubernetes.Interface, get func(string) (*v1.Node, error), name string, cloud *benchCloud) error {
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
	meta, err := cloud.InstanceMetadata(ctx, cur)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"addresses": meta.NodeAddresses}})
	if err != nil {
		return err
	}
	n, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return err
	}
	if n.Spec.ProviderID == "" {
		n.Spec.ProviderID = meta.ProviderID
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for _, k := range []string{v1.LabelInstanceTypeStable, v1.LabelInstanceType} {
		n.Labels[k] = meta.InstanceType
	}
	for _, k := range []string{v1.LabelTopologyZone, v1.LabelFailureDomainBetaZone} {
		n.Labels[k] = meta.Zone
	}
	for _, k := range []string{v1.LabelTopologyRegion, v1.LabelFailureDomainBetaRegion} {
		n.Labels[k] = meta.Region
	}
	kept := n.Spec.Taints[:0]
	for _, t := range n.Spec.Taints {
		if t.Key != cloudproviderapi.TaintExternalCloudProvider {
			kept = append(kept, t)
		}
	}
	n.Spec.Taints = kept
	_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	return err
}
