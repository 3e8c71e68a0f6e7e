package sdk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// SocketPath parses "unix:///abs/path" (or "unix:/abs/path") into a path.
func SocketPath(endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		rest, ok = strings.CutPrefix(endpoint, "unix:")
	}
	if !ok {
		return "", fmt.Errorf("invalid endpoint %q: only unix:///absolute/path endpoints are supported", endpoint)
	}
	if !strings.HasPrefix(rest, "/") {
		return "", fmt.Errorf("invalid endpoint %q: the socket path must be absolute", endpoint)
	}
	return rest, nil
}

// Listen binds the socket at path: removes a stale socket left by a dead
// server, refuses to touch a live one or a file that is not a socket, and
// sets the permission bits (whoever can connect can drive the cloud).
func Listen(path string, mode fs.FileMode) (*net.UnixListener, error) {
	switch fi, err := os.Lstat(path); {
	case err == nil && fi.Mode().Type() == fs.ModeSocket:
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("socket %s is in use by a running server", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("socket %s: removing the stale socket: %w", path, err)
		}
	case err == nil:
		return nil, fmt.Errorf("socket %s: exists and is not a socket; refusing to remove it", path)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	l.SetUnlinkOnClose(true)
	if err := os.Chmod(path, mode); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}

// NewServer returns a gRPC server with the contract's message limits both
// ways (gRPC-Go would otherwise refuse requests over 4 MiB) and
// UnaryInterceptor. Register the contract services on it, then Serve it.
func NewServer(logger *slog.Logger, opts ...grpc.ServerOption) *grpc.Server {
	base := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.ChainUnaryInterceptor(UnaryInterceptor(logger)),
	}
	return grpc.NewServer(append(base, opts...)...)
}

// ServeOptions tune Serve; the zero value is the contract's defaults.
type ServeOptions struct {
	// SocketMode is the socket file's permission bits (default 0600; 0660
	// when the controller runs as another user of the same group).
	SocketMode fs.FileMode
	// GracePeriod bounds how long shutdown waits for calls in flight
	// (default DefaultGracePeriod); calls still running then are cut off.
	GracePeriod time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Serve serves srv on endpoint, with grpc.health.v1 (SERVING for "" and
// every service registered on srv) and reflection on the same socket, until
// ctx is done or the process gets SIGTERM or SIGINT. It then reports
// NOT_SERVING, drains the calls in flight for at most the grace period, and
// removes the socket. It returns nil after such a shutdown.
func Serve(ctx context.Context, endpoint string, srv *grpc.Server, opts ServeOptions) error {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	mode, grace := opts.SocketMode, opts.GracePeriod
	if mode == 0 {
		mode = DefaultSocketMode
	}
	if grace <= 0 {
		grace = DefaultGracePeriod
	}
	path, err := SocketPath(endpoint)
	if err != nil {
		return err
	}
	services := srv.GetServiceInfo()
	hs := health.NewServer()
	if _, ok := services[healthpb.Health_ServiceDesc.ServiceName]; !ok {
		healthpb.RegisterHealthServer(srv, hs)
	}
	if _, ok := services["grpc.reflection.v1.ServerReflection"]; !ok {
		reflection.Register(srv)
	}
	names := make([]string, 0, len(services))
	for name := range services {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
		names = append(names, name)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	l, err := Listen(path, mode)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	logger.Info("provider serving", "socket", path, "services", names)

	select {
	case err := <-served:
		return fmt.Errorf("gRPC server: %w", err)
	case <-ctx.Done():
	}
	logger.Info("draining", "grace_period", grace)
	hs.Shutdown()
	drained := make(chan struct{})
	go func() { srv.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(grace):
		logger.Warn("grace period over; cutting off the calls in flight")
		// Stop closes the connections and cancels the calls' contexts; a
		// handler that ignores its context keeps running, and is not
		// waited for.
		srv.Stop()
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("gRPC server: %w", err)
	}
	logger.Info("provider stopped")
	return nil
}
