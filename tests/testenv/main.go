// Command ccm-testenv runs a real kube-apiserver (k8s.io/kubernetes, same code
// as the release binary) on top of an embedded etcd 3.6 in one process, bound
// to 127.0.0.1, with RBAC on. It exists so that every test of this project
// talks to a real control plane rather than a fake.
//
// Contract with callers (the Rust test support crate, the Makefile, humans):
//
//   - our own flags come first; everything after "--" is passed to the
//     kube-apiserver verbatim (and may override our defaults);
//   - when /readyz answers ok, exactly one JSON line is printed on stdout:
//     {"event":"ready","kubeconfig":"…","url":"https://127.0.0.1:PORT",…};
//   - all logs go to stderr; any start-up failure is one line
//     "ccm-testenv: error: …" on stderr and exit code 1;
//   - a data directory left by an earlier run with --keep is reused: the same
//     CA, serving certificate, service-account keys, admin token and etcd
//     data (and, without --port, the same port if it is free), so the old
//     kubeconfig and every object survive a restart;
//   - SIGTERM/SIGINT stop the apiserver (open watches are ended at once),
//     then etcd, within a few seconds, then remove the state this process
//     used (unless --keep) and exit 0.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/ccm-rs/ccm-rs/tests/testenv/internal/ports"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"k8s.io/component-base/cli"

	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

type options struct {
	dataDir      string
	port         int
	keep         bool
	readyTimeout time.Duration
	etcdLog      string
	apiserverV   int
	stopTimeout  time.Duration
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "ccm-testenv: error: %v\n", err)
		os.Exit(1)
	}
}

func parseOptions(args []string) (options, []string, error) {
	var o options
	fs := flag.NewFlagSet("ccm-testenv", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, `Usage: ccm-testenv [flags] [-- kube-apiserver flags]

Runs etcd and kube-apiserver in one process on 127.0.0.1 and prints one JSON
line on stdout once /readyz is ok. Stop it with SIGTERM or Ctrl-C.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.dataDir, "data-dir", "", "directory for etcd data, certificates, keys, tokens and the admin kubeconfig (default: a new temporary directory)")
	fs.IntVar(&o.port, "port", 0, "secure port of the kube-apiserver on 127.0.0.1 (0: pick a free port)")
	fs.BoolVar(&o.keep, "keep", false, "keep the data directory's contents on exit (default: remove what this process wrote)")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 120*time.Second, "give up if /readyz is not ok within this time")
	fs.StringVar(&o.etcdLog, "etcd-log-level", "error", "embedded etcd log level")
	fs.IntVar(&o.apiserverV, "v", 0, "kube-apiserver log verbosity")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 10*time.Second, "on SIGTERM, stop waiting for kube-apiserver, and then for etcd, after this long each")
	split := len(args)
	for i, a := range args {
		if a == "--" {
			split = i
			break
		}
	}
	if err := fs.Parse(args[:split]); err != nil {
		return o, nil, err
	}
	if fs.NArg() > 0 {
		return o, nil, fmt.Errorf("unexpected argument %q (kube-apiserver flags go after \"--\")", fs.Arg(0))
	}
	var extra []string
	if split < len(args) {
		extra = args[split+1:]
	}
	if o.port < 0 || o.port > 65535 {
		return o, nil, fmt.Errorf("--port %d is out of range", o.port)
	}
	return o, extra, nil
}

func run() error {
	opts, extra, err := parseOptions(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		return err
	}

	dir, created, err := prepareDataDir(opts.dataDir)
	if err != nil {
		return err
	}
	if err := checkFreeSpace(dir); err != nil {
		if created {
			_ = os.RemoveAll(dir)
		}
		return err
	}
	lock, err := lockDataDir(dir)
	if err != nil {
		return err
	}
	// From here on the directory is ours; clean it up however we leave.
	var st *state
	// Whether to remove st on exit (unless --keep): always for state this
	// run generated; for an earlier run's state only once it served, so a
	// failed start never destroys what --keep left behind.
	removeState := false
	cleanup := func() {
		if st != nil && removeState && !opts.keep {
			st.remove()
		}
		lock.release(opts.keep || !created)
	}
	defer cleanup()

	reused := hasState(dir)
	apiPort, err := pickPort(dir, opts.port, reused)
	if err != nil {
		return err
	}
	if reused {
		st, err = reuseState(dir, apiPort)
	} else {
		st, err = writeState(dir, apiPort)
	}
	if err != nil {
		return err
	}
	removeState = !reused

	etcd, etcdClientPort, err := startEtcdOnFreePorts(dir, opts.etcdLog, apiPort)
	if err != nil {
		return err
	}
	defer stopEtcd(etcd, opts.stopTimeout)

	// The apiserver's own signal handler turns SIGTERM/SIGINT into a graceful
	// shutdown and makes cli.Run return. Until it has installed itself we
	// must not die on a signal without cleaning up, so we also listen here.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	apiErr := make(chan int, 1)
	go func() {
		os.Args = append([]string{"kube-apiserver"}, apiserverFlags(st, etcdClientPort, apiPort, opts.apiserverV, extra)...)
		apiErr <- cli.Run(app.NewAPIServerCommand())
	}()

	ctx, cancel := context.WithTimeout(context.Background(), opts.readyTimeout)
	defer cancel()
	readyErr := make(chan error, 1)
	go func() { readyErr <- waitReady(ctx, st) }()

	select {
	case code := <-apiErr:
		return fmt.Errorf("kube-apiserver exited with code %d before it was ready (see stderr above)", code)
	case err := <-readyErr:
		if err != nil {
			return fmt.Errorf("kube-apiserver not ready: %w", err)
		}
	case s := <-sigs:
		// Not ready yet, so the apiserver may not have its own handler in
		// place: do not wait for it. Deferred cleanup stops etcd and removes
		// our state; the half-started apiserver dies with the process.
		fmt.Fprintf(os.Stderr, "ccm-testenv: stopped by %v before ready\n", s)
		return nil
	}

	line, _ := json.Marshal(map[string]any{
		"event":      "ready",
		"kubeconfig": st.kubeconfig,
		"url":        st.url,
		"data_dir":   dir,
		"pid":        os.Getpid(),
		"token_file": st.tokens,
		"ca_file":    st.caCert,
		"reused":     reused,
	})
	fmt.Println(string(line))
	removeState = true

	var code int
	select {
	case code = <-apiErr:
	case s := <-sigs:
		// The apiserver got the same signal and shuts down gracefully; open
		// watches end at once (--shutdown-watch-termination-grace-period).
		start := time.Now()
		fmt.Fprintf(os.Stderr, "ccm-testenv: %v: stopping kube-apiserver\n", s)
		select {
		case code = <-apiErr:
			fmt.Fprintf(os.Stderr, "ccm-testenv: kube-apiserver stopped in %v\n", time.Since(start).Round(time.Millisecond))
		case <-time.After(opts.stopTimeout):
			// Its goroutines die with the process; stop etcd regardless.
			fmt.Fprintf(os.Stderr, "ccm-testenv: kube-apiserver still running %v after %v; stopping etcd anyway\n", opts.stopTimeout, s)
		}
	}
	if code != 0 {
		return fmt.Errorf("kube-apiserver exited with code %d", code)
	}
	return nil
}

// pickPort is the apiserver port: the one asked for; else, on a reused data
// directory, the port of the earlier run if it is free, so its kubeconfig
// keeps working unchanged; else any free one.
func pickPort(dir string, port int, reused bool) (int, error) {
	if port != 0 || !reused {
		return reservePort(port)
	}
	if prev := previousPort(dir); prev != 0 {
		if p, err := reservePort(prev); err == nil {
			return p, nil
		}
		fmt.Fprintf(os.Stderr, "ccm-testenv: the earlier port %d is taken; picking another (the kubeconfig is rewritten)\n", prev)
	}
	return reservePort(0)
}

// stopEtcd closes etcd and waits until its server has stopped, at most
// timeout: Close may wait up to etcd's request timeout (7s) for clients that
// are still connected, such as a kube-apiserver that did not stop in time.
func stopEtcd(e *embed.Etcd, timeout time.Duration) {
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Close()
		<-e.Server.StopNotify()
	}()
	select {
	case <-done:
		fmt.Fprintf(os.Stderr, "ccm-testenv: etcd stopped in %v\n", time.Since(start).Round(time.Millisecond))
	case <-time.After(timeout):
		fmt.Fprintf(os.Stderr, "ccm-testenv: etcd still stopping after %v; exiting anyway\n", timeout)
	}
}

func apiserverFlags(st *state, etcdPort, apiPort, verbosity int, extra []string) []string {
	flags := []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + st.servingCert,
		"--tls-private-key-file=" + st.servingKey,
		"--cert-dir=" + st.certDir,
		"--client-ca-file=" + st.caCert,
		"--token-auth-file=" + st.tokens,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + st.saPub,
		"--service-account-signing-key-file=" + st.saKey,
		"--authorization-mode=Node,RBAC",
		"--anonymous-auth=false",
		// No ServiceAccount controller runs here, so the admission plugin
		// would reject every Pod for lack of a default ServiceAccount.
		"--disable-admission-plugins=ServiceAccount",
		"--service-cluster-ip-range=10.96.0.0/16",
		// The endpoint reconciler would keep publishing 127.0.0.1 as the
		// kubernetes Service endpoint; upstream's test server disables it too.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
		// End open watches as soon as shutdown starts rather than letting the
		// HTTP server wait --request-timeout (60s) for them: without this a
		// SIGTERM with any client watching takes a minute.
		"--shutdown-watch-termination-grace-period=2s",
		"--v=" + strconv.Itoa(verbosity),
	}
	return append(flags, extra...)
}

// waitReady polls /readyz with the admin token until it answers 200.
func waitReady(ctx context.Context, st *state) error {
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(st.caCert)
	if err != nil {
		return err
	}
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, st.url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+st.adminToken)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %s)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startEtcdOnFreePorts starts etcd on two free loopback ports other than
// apiPort (chosen, and released, just before), and returns it and its
// client port. A port found free can be taken by another process before
// etcd binds it (tests start control planes and listeners concurrently), so
// a bind that fails because the address is in use is retried on new ports.
func startEtcdOnFreePorts(dir, logLevel string, apiPort int) (*embed.Etcd, int, error) {
	const attempts = 5
	for attempt := 1; ; attempt++ {
		free, err := ports.Free(2, apiPort)
		if err != nil {
			return nil, 0, err
		}
		clientPort, peerPort := free[0], free[1]
		e, err := startEtcd(dir, clientPort, peerPort, logLevel)
		if err == nil {
			return e, clientPort, nil
		}
		if attempt == attempts || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, 0, err
		}
		fmt.Fprintf(os.Stderr, "ccm-testenv: %v; trying other ports\n", err)
	}
}

// walSegmentBytes is the size etcd preallocates for each write-ahead log
// segment: 8 MiB instead of etcd's 64 MB, since a test cluster writes little
// and several run at once (each test binary starts its own).
const walSegmentBytes = 8 << 20

// minFreeBytes is what a start needs on the data directory's filesystem: a
// WAL segment, the bbolt file's first growth, certificates and logs, with
// room to spare.
const minFreeBytes = 64 << 20

// checkFreeSpace fails with one clear line where etcd would otherwise panic
// ("failed to create WAL") with the cause buried above a stack trace.
func checkFreeSpace(dir string) error {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	free := fs.Bavail * uint64(fs.Bsize)
	if free < minFreeBytes {
		return fmt.Errorf("data directory %s has %d MiB free; ccm-testenv needs at least %d MiB (etcd preallocates its write-ahead log)", dir, free>>20, minFreeBytes>>20)
	}
	return nil
}

func startEtcd(dir string, clientPort, peerPort int, logLevel string) (e *embed.Etcd, err error) {
	// etcd reports some failures (a WAL it cannot create or open) by
	// panicking through its logger; the record with the cause is on stderr
	// above, so the error points there instead of a stack trace.
	defer func() {
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("embedded etcd in %s failed: %v (its log record above has the cause)", filepath.Join(dir, "etcd"), r)
		}
	}()
	wal.SegmentSizeBytes = walSegmentBytes
	cfg := embed.NewConfig()
	cfg.Name = "ccm-testenv"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.UnsafeNoFsync = true // test data only; as k8s.io/apiserver's own test server does
	client := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(clientPort)}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(peerPort)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.WatchProgressNotifyInterval = 5 * time.Second
	cfg.LogLevel = logLevel
	cfg.LogOutputs = []string{"stderr"}
	e, err = embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("embedded etcd not ready after 60s")
	}
}

// reservePort checks that 127.0.0.1:port can be bound (or finds a free one
// for port 0) and releases it again for the real listener.
func reservePort(port int) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return 0, fmt.Errorf("port 127.0.0.1:%d is already in use", port)
		}
		return 0, fmt.Errorf("cannot listen on 127.0.0.1:%d: %w", port, err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, err
	}
	return p, nil
}
