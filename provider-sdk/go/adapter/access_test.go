package adapter

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
)

// fakeAPI is an HTTPS server on loopback standing for the API server: it
// lists and watches Nodes (one, "node-1"), answers 404 otherwise, and
// records every request that reaches it.
type fakeAPI struct {
	srv        *httptest.Server
	kubeconfig string
	tokenFile  string
	// forbidNodes answers the Node list 403, as for a ServiceAccount
	// without the right.
	forbidNodes bool
	done        chan struct{}
	mu          sync.Mutex
	requests    []string // "METHOD path Authorization"
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	f := &fakeAPI{done: make(chan struct{})}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.done)
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	f.tokenFile = filepath.Join(dir, "token")
	f.kubeconfig = filepath.Join(dir, "kubeconfig")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	// What the controller writes for a provider ServiceAccount: a projected
	// token file and the cluster's CA, by path.
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: provider
  user:
    tokenFile: %s
contexts:
- name: provider
  context: {cluster: cluster, user: provider}
current-context: provider
`, f.srv.URL, ca, f.tokenFile)
	for path, data := range map[string][]byte{ca: caPEM, f.tokenFile: []byte("token-1"), f.kubeconfig: []byte(kubeconfig)} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
	forbid := f.forbidNodes
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/api/v1/nodes" && forbid:
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"nodes is forbidden"}`)
	case r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("sendInitialEvents") == "true":
		// No streaming lists here: client-go falls back to a list.
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`)
	case r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") == "true":
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-f.done:
		}
	case r.URL.Path == "/api/v1/nodes":
		fmt.Fprint(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"node-1","resourceVersion":"7"}}]}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}
}

func (f *fakeAPI) seen(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.requests {
		if strings.HasPrefix(r, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// builderCloud keeps the builder Initialize got, and lists Nodes with it
// when list is set (as hcloud and the AWS CCM use the client at start).
type builderCloud struct {
	*testCloud
	list  bool
	cb    cloudprovider.ControllerClientBuilder
	nodes int
	err   error
}

func (c *builderCloud) Initialize(cb cloudprovider.ControllerClientBuilder, _ <-chan struct{}) {
	c.cb = cb
	if !c.list {
		return
	}
	client, err := cb.Client("cloud")
	if err != nil {
		c.err = err
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		c.err = err
		return
	}
	c.nodes = len(nodes.Items)
}

// givenBuilder is a ControllerClientBuilder of the caller's.
type givenBuilder struct{ config *rest.Config }

func (b givenBuilder) Config(string) (*rest.Config, error) { return rest.CopyConfig(b.config), nil }
func (b givenBuilder) ConfigOrDie(string) *rest.Config     { return rest.CopyConfig(b.config) }
func (b givenBuilder) Client(string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(b.config)
}
func (b givenBuilder) ClientOrDie(string) kubernetes.Interface {
	c, _ := kubernetes.NewForConfig(b.config)
	return c
}

// A real cloud (hcloud, DigitalOcean, AWS) uses the builder in Initialize:
// the adapter gives it one from $KUBECONFIG or Options.Kubeconfig, honouring
// the kubeconfig's tokenFile and certificate-authority; without access one
// whose errors name what to set, never nil; Options.ClientBuilder overrides.
func TestTheCloudsClientBuilder(t *testing.T) {
	api := newFakeAPI(t)
	given := givenBuilder{config: &rest.Config{Host: "https://127.0.0.1:1"}}
	cases := []struct {
		name       string
		env        string
		opts       Options
		wantNodes  int
		wantErr    string // of the cloud's Client
		wantNewErr string
		wantGiven  bool
		late       bool // the kubeconfig is written after New starts, as the controller does
	}{
		{name: "no access", wantErr: "KUBECONFIG"},
		{name: "KUBECONFIG", env: api.kubeconfig, wantNodes: 1},
		{name: "Options.Kubeconfig before KUBECONFIG", env: "/nonexistent", opts: Options{Kubeconfig: api.kubeconfig}, wantNodes: 1},
		{name: "a kubeconfig that never appears", env: filepath.Join(t.TempDir(), "missing"), opts: Options{KubeconfigWait: 300 * time.Millisecond}, wantNewErr: `missing" did not appear within 300ms`},
		{name: "a kubeconfig written after the provider started", env: filepath.Join(t.TempDir(), "later"), opts: Options{KubeconfigWait: 10 * time.Second}, late: true, wantNodes: 1},
		{name: "a list of kubeconfigs, as kubectl reads it", env: filepath.Join(t.TempDir(), "missing") + ":" + api.kubeconfig, wantNodes: 1},
		{name: "Options.ClientBuilder overrides", env: api.kubeconfig, opts: Options{ClientBuilder: given}, wantGiven: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", c.env)
			cloud := &builderCloud{testCloud: &testCloud{}, list: !c.wantGiven}
			if c.late {
				content, err := os.ReadFile(api.kubeconfig)
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					time.Sleep(300 * time.Millisecond) // the controller writes it later
					_ = os.WriteFile(c.env+".tmp", content, 0o600)
					_ = os.Rename(c.env+".tmp", c.env)
				}()
			}
			a, err := New(cloud, c.opts)
			if c.wantNewErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantNewErr) {
					t.Fatalf("New: %v, want an error naming %q", err, c.wantNewErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if cloud.cb == nil {
				t.Fatal("Initialize got a nil ControllerClientBuilder")
			}
			if c.wantGiven {
				if cloud.cb != cloudprovider.ControllerClientBuilder(given) {
					t.Errorf("the cloud got %T, not Options.ClientBuilder", cloud.cb)
				}
				return
			}
			if c.wantErr != "" {
				if !errors.Is(cloud.err, ErrNoClusterAccess) || !strings.Contains(cloud.err.Error(), c.wantErr) ||
					!strings.Contains(cloud.err.Error(), `docs/deploy.md "Provider cluster access"`) {
					t.Errorf("Client: %v", cloud.err)
				}
				if _, err := cloud.cb.Config("x"); !errors.Is(err, ErrNoClusterAccess) {
					t.Errorf("Config: %v", err)
				}
				return
			}
			if cloud.err != nil || cloud.nodes != c.wantNodes {
				t.Fatalf("the cloud listed %d nodes, error %v", cloud.nodes, cloud.err)
			}
			if got := api.seen("GET /api/v1/nodes"); len(got) == 0 || !strings.HasSuffix(got[0], "Bearer token-1") {
				t.Errorf("requests %v, want the token of the tokenFile", got)
			}
			// client-go's transport re-reads a BearerTokenFile (a rotated
			// projected token), the token read at load only seeds it.
			if cfg, err := cloud.cb.Config("x"); err != nil || cfg.BearerTokenFile != api.tokenFile {
				t.Errorf("Config: BearerTokenFile %q, %v", cfg.BearerTokenFile, err)
			}
		})
	}
}

// dieCloud takes a client with ClientOrDie (or a config with ConfigOrDie)
// in Initialize, as hcloud does.
type dieCloud struct {
	*testCloud
	config bool
}

func (c *dieCloud) Initialize(cb cloudprovider.ControllerClientBuilder, _ <-chan struct{}) {
	if c.config {
		_ = cb.ConfigOrDie("cloud").Host
	} else {
		_ = cb.ClientOrDie("cloud").CoreV1()
	}
}

// Run in a child process by TestOrDieWithoutAccessEndsTheProcess.
func TestDieChild(t *testing.T) {
	if os.Getenv("ADAPTER_TEST_DIE") == "" {
		t.Skip("run by TestOrDieWithoutAccessEndsTheProcess")
	}
	_, _ = New(&dieCloud{testCloud: &testCloud{}, config: os.Getenv("ADAPTER_TEST_DIE") == "config"}, Options{})
	t.Fatal("New returned")
}

// A cloud that needs a client and has none ends the process at start with
// a message naming what to set, not a nil pointer in a handler later.
func TestOrDieWithoutAccessEndsTheProcess(t *testing.T) {
	for _, which := range []string{"client", "config"} {
		t.Run(which, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDieChild$", "-test.v")
			cmd.Env = append(os.Environ(), "ADAPTER_TEST_DIE="+which, "KUBECONFIG=")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			cmd.Stdout = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("child: %v; output:\n%s", err, stderr.String())
			}
			out := stderr.String()
			for _, want := range []string{"no cluster access", "KUBECONFIG", `docs/deploy.md "Provider cluster access"`} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "nil pointer") || strings.Contains(out, "New returned") {
				t.Errorf("output:\n%s", out)
			}
		})
	}
}

// informerCloud implements InformerUser as hcloud does (a Node lister from
// the factory) and records the order of the adapter's calls.
type informerCloud struct {
	*testCloud
	calls []string
	nodes listersv1.NodeLister
}

func (c *informerCloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {
	c.calls = append(c.calls, "Initialize")
}

func (c *informerCloud) SetInformers(f informers.SharedInformerFactory) {
	c.calls = append(c.calls, "SetInformers")
	c.nodes = f.Core().V1().Nodes().Lister()
}

func (c *informerCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	c.calls = append(c.calls, "LoadBalancer")
	return c.testCloud.LoadBalancer()
}

// SetInformers after Initialize (upstream's order), with informers that
// have synced when New returns; not called without access; a clear error
// when they do not sync in time.
func TestSetInformers(t *testing.T) {
	cases := []struct {
		name      string
		access    bool
		given     bool
		forbid    bool
		wantCalls string
		wantErr   []string
	}{
		{name: "KUBECONFIG", access: true, wantCalls: "Initialize SetInformers LoadBalancer"},
		{name: "Options.ClientBuilder", given: true, wantCalls: "Initialize SetInformers LoadBalancer"},
		{name: "no access: not called", wantCalls: "Initialize LoadBalancer"},
		{name: "never synced", access: true, forbid: true, wantErr: []string{"v1.Node", "did not sync within 300ms", "list and watch"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api := newFakeAPI(t)
			api.forbidNodes = c.forbid
			opts := Options{InformerSyncTimeout: 300 * time.Millisecond}
			t.Setenv("KUBECONFIG", "")
			if c.access {
				t.Setenv("KUBECONFIG", api.kubeconfig)
			}
			if c.given {
				config, err := loadKubeconfig(api.kubeconfig)
				if err != nil {
					t.Fatal(err)
				}
				opts.ClientBuilder = givenBuilder{config: config}
				opts.InformerSyncTimeout = 10 * time.Second
			} else if !c.forbid {
				opts.InformerSyncTimeout = 10 * time.Second
			}
			cloud := &informerCloud{testCloud: &testCloud{lb: &testLB{}}}
			a, err := New(cloud, opts)
			if c.wantErr != nil {
				if err == nil {
					a.Close()
					t.Fatal("New succeeded")
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if got := strings.Join(cloud.calls, " "); got != c.wantCalls {
				t.Errorf("calls %q, want %q", got, c.wantCalls)
			}
			if cloud.nodes == nil {
				return
			}
			if _, err := cloud.nodes.Get("node-1"); err != nil {
				t.Errorf("the lister has not synced when New returned: %v", err)
			}
		})
	}
}

// Upstream's resync: --min-resync-period (12h) times [1, 2).
func TestResyncPeriodIsUpstreams(t *testing.T) {
	for range 100 {
		if p := resyncPeriod(); p < 12*time.Hour || p >= 24*time.Hour {
			t.Fatalf("resync %v", p)
		}
	}
}
