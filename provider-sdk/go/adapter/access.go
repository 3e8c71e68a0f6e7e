package adapter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
)

// accessHelp names what gives a provider cluster access, for the errors of
// a cloud that needs it and has none.
const accessHelp = "set KUBECONFIG (or Options.Kubeconfig) to a kubeconfig for the provider's ServiceAccount; " +
	"see docs/deploy.md \"Provider cluster access\""

// DefaultInformerSyncTimeout is how long New waits for the informers of an
// InformerUser cloud to sync when Options.InformerSyncTimeout is 0.
const DefaultInformerSyncTimeout = time.Minute

// DefaultKubeconfigWait is how long New waits for a kubeconfig that does not
// exist yet when Options.KubeconfigWait is 0: the controller writes the
// provider's kubeconfig after it starts, and a provider run as a native
// sidecar starts first.
const DefaultKubeconfigWait = 2 * time.Minute

// kubeconfigPoll is how often a missing kubeconfig is looked for again.
const kubeconfigPoll = 200 * time.Millisecond

// ErrNoClusterAccess is what the ControllerClientBuilder of a provider
// given no cluster access answers from Client and Config.
var ErrNoClusterAccess = errors.New("adapter: the provider has no cluster access: " + accessHelp)

// kubeconfigPath is Options.Kubeconfig, else $KUBECONFIG ("" when neither
// is set: no cluster access). A provider never falls back to ~/.kube/config
// or to an in-cluster token: it is given access explicitly or has none.
func kubeconfigPath(opts Options) string {
	if opts.Kubeconfig != "" {
		return opts.Kubeconfig
	}
	return os.Getenv("KUBECONFIG")
}

// loadKubeconfig builds the rest.Config of a kubeconfig (a list of files
// separated by the OS's path list separator, as kubectl reads $KUBECONFIG).
// client-go keeps re-reading a user's tokenFile (the controller replaces the
// provider's token in place).
func loadKubeconfig(path string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path} // must exist
	if paths := strings.Split(path, string(os.PathListSeparator)); len(paths) > 1 {
		rules = &clientcmd.ClientConfigLoadingRules{Precedence: paths}
	}
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("adapter: cluster access from kubeconfig %q: %w", path, err)
	}
	return config, nil
}

// clientBuilder is the cloudprovider.ControllerClientBuilder of a provider
// given a kubeconfig: every config and client it hands out answers Event
// writes in the adapter (see events.go), so the cloud's Events become
// warnings of the contract instead of reaching the API server.
type clientBuilder struct {
	config *rest.Config
	// taken is set once the cloud has asked for a config or a client: only
	// then can it emit Events, and only then do load balancer calls wait
	// for them.
	taken atomic.Bool
}

func newClientBuilder(config *rest.Config, events *eventQueue) *clientBuilder {
	c := rest.CopyConfig(config)
	c.Wrap(events.wrap)
	return &clientBuilder{config: c}
}

// configFor is a copy of the config with name in the user agent, as
// upstream's SimpleControllerClientBuilder.
func (b *clientBuilder) configFor(name string) *rest.Config {
	return rest.AddUserAgent(rest.CopyConfig(b.config), name)
}

func (b *clientBuilder) Config(name string) (*rest.Config, error) {
	b.taken.Store(true)
	return b.configFor(name), nil
}

func (b *clientBuilder) ConfigOrDie(name string) *rest.Config {
	c, _ := b.Config(name)
	return c
}

func (b *clientBuilder) Client(name string) (kubernetes.Interface, error) {
	b.taken.Store(true)
	return kubernetes.NewForConfig(b.configFor(name))
}

func (b *clientBuilder) ClientOrDie(name string) kubernetes.Interface {
	c, err := b.Client(name)
	if err != nil {
		die(fmt.Sprintf("adapter: client %q: %v", name, err))
	}
	return c
}

// noAccess is the ControllerClientBuilder of a provider given no cluster
// access: upstream's OrDie methods end the process, and so do these, with
// a message naming what to set rather than a nil pointer later.
type noAccess struct{}

func (noAccess) Config(string) (*rest.Config, error)         { return nil, ErrNoClusterAccess }
func (noAccess) Client(string) (kubernetes.Interface, error) { return nil, ErrNoClusterAccess }
func (noAccess) ConfigOrDie(name string) *rest.Config {
	die(fmt.Sprintf("adapter: the cloud asked for a Kubernetes config (%q) at start-up, but the provider has no cluster access: %s", name, accessHelp))
	return nil
}
func (noAccess) ClientOrDie(name string) kubernetes.Interface {
	die(fmt.Sprintf("adapter: the cloud asked for a Kubernetes client (%q) at start-up, but the provider has no cluster access: %s", name, accessHelp))
	return nil
}

// die ends the process as klog.Fatal would, without its stack dump: this
// is a configuration error, not a crash.
var die = func(msg string) {
	klog.Error(msg) // unstructured: the message as it is, not quoted
	klog.FlushAndExit(klog.ExitFlushTimeout, 1)
}

// resyncPeriod is upstream's informer resync: --min-resync-period (12h)
// times a random factor in [1, 2), so replicas do not resync together.
func resyncPeriod() time.Duration {
	return time.Duration(float64(12*time.Hour) * (1 + rand.Float64()))
}

// informers gives an InformerUser cloud a SharedInformerFactory of the
// builder's client, as upstream's cloud-controller-manager does right
// after Initialize; without cluster access it is not called (logged).
func (a *Adapter) informers(cloud cloudprovider.InformerUser) (informers.SharedInformerFactory, error) {
	var client kubernetes.Interface
	var err error
	switch b := a.builder.(type) {
	case noAccess:
		klog.InfoS("adapter: the cloud implements InformerUser but the provider has no cluster access, so SetInformers is not called; " + accessHelp)
		return nil, nil
	case *clientBuilder:
		// Not b.Client: the adapter's own client is not the cloud taking one.
		client, err = kubernetes.NewForConfig(b.configFor("shared-informers"))
	default:
		client, err = b.Client("shared-informers")
	}
	if err != nil {
		return nil, fmt.Errorf("adapter: a client for the cloud's informers: %w", err)
	}
	factory := informers.NewSharedInformerFactory(client, resyncPeriod())
	cloud.SetInformers(factory)
	return factory, nil
}

// syncInformers starts the informers the cloud asked for and waits until
// they have synced (at most Options.InformerSyncTimeout), so the cloud's
// listers are filled before the first call.
func (a *Adapter) syncInformers(factory informers.SharedInformerFactory) error {
	factory.Start(a.stop)
	timeout := a.opts.InformerSyncTimeout
	if timeout <= 0 {
		timeout = DefaultInformerSyncTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	synced := factory.WaitForCacheSync(ctx.Done())
	var missing []string
	for typ, ok := range synced {
		if !ok {
			missing = append(missing, typeName(typ))
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("adapter: the cloud's informers (%s) did not sync within %v: can the provider's ServiceAccount list and watch them? (docs/deploy.md \"Provider cluster access\")",
			strings.Join(missing, ", "), timeout)
	}
	return nil
}

func typeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.String()
}

// builderFor is the ControllerClientBuilder New gives the cloud: the
// option's (its clients are the caller's, and their Events go where they
// send them), else one from the kubeconfig, else noAccess.
func builderFor(opts Options, events *eventQueue) (cloudprovider.ControllerClientBuilder, error) {
	if opts.ClientBuilder != nil {
		return opts.ClientBuilder, nil
	}
	path := kubeconfigPath(opts)
	if path == "" {
		return noAccess{}, nil
	}
	wait := opts.KubeconfigWait
	if wait == 0 {
		wait = DefaultKubeconfigWait
	}
	if err := awaitFile(path, wait); err != nil {
		return nil, err
	}
	config, err := loadKubeconfig(path)
	if err != nil {
		return nil, err
	}
	return newClientBuilder(config, events), nil
}

// awaitFile waits, at most wait, for a single-file kubeconfig to exist (a
// list of files is read as kubectl reads it: missing ones are skipped).
// Polling, not inotify: the file lives in an emptyDir another container
// writes, and one stat per poll for at most wait is all it costs.
func awaitFile(path string, wait time.Duration) error {
	if strings.Contains(path, string(os.PathListSeparator)) {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		_, err := os.Stat(path)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return nil // loadKubeconfig reports any other error
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("adapter: the kubeconfig %q did not appear within %s: %s", path, wait, accessHelp)
		}
		time.Sleep(kubeconfigPoll)
	}
}
