package sdk

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testIdentity echoes what the SDK put in the call's context.
type testIdentity struct {
	pb.UnimplementedIdentityServiceServer
	entered chan<- struct{}
	release <-chan struct{}
}

func (testIdentity) Probe(ctx context.Context, _ *pb.ProbeRequest) (*pb.ProbeResponse, error) {
	msg := "id=" + RequestID(ctx)
	if tok, ok := FencingToken(ctx); ok {
		msg += " token=" + tok.String()
	}
	if trace := TraceID(ctx); trace != "" {
		msg += " trace=" + trace
	}
	return &pb.ProbeResponse{State: pb.ProbeState_PROBE_STATE_READY, Message: msg}, nil
}

func (testIdentity) GetProviderCapabilities(_ context.Context, r *pb.GetProviderCapabilitiesRequest) (*pb.GetProviderCapabilitiesResponse, error) {
	switch r.GetControllerVersion() {
	case "panic":
		panic("boom")
	case "plain-error":
		return nil, io.ErrUnexpectedEOF
	}
	return &pb.GetProviderCapabilitiesResponse{}, nil
}

// GetProviderInfo says it has entered, then hangs until released: a call in
// flight at shutdown.
func (t testIdentity) GetProviderInfo(context.Context, *pb.GetProviderInfoRequest) (*pb.GetProviderInfoResponse, error) {
	t.entered <- struct{}{}
	<-t.release
	return &pb.GetProviderInfoResponse{Name: "test"}, nil
}

type served struct {
	path string
	conn *grpc.ClientConn
	stop context.CancelFunc
	done chan error
}

func serve(t *testing.T, opts ServeOptions, id testIdentity) *served {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.sock")
	srv := NewServer(quiet)
	pb.RegisterIdentityServiceServer(srv, id)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts.Logger = quiet
	go func() { done <- Serve(ctx, "unix://"+path, srv, opts) }()
	waitForSocket(t, path)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s := &served{path: path, conn: conn, stop: stop, done: done}
	t.Cleanup(func() { _ = conn.Close(); stop(); <-done })
	return s
}

func waitForSocket(t *testing.T, path string) {
	t.Helper()
	for range 200 {
		if c, err := net.Dial("unix", path); err == nil {
			_ = c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never accepted connections", path)
}

func TestServeSetsTheSocketModeAndServesHealthAndReflection(t *testing.T) {
	s := serve(t, ServeOptions{}, testIdentity{})
	fi, err := os.Stat(s.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	ctx := context.Background()
	h := healthpb.NewHealthClient(s.conn)
	for _, svc := range []string{"", "ccmrs.cloudprovider.v1.IdentityService"} {
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, r, err)
		}
	}
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("health of an unknown service: %v (health keeps its own codes)", err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(s.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range r.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	if !strings.Contains(strings.Join(names, ","), "ccmrs.cloudprovider.v1.IdentityService") {
		t.Errorf("reflection lists %v", names)
	}
}

func TestSocketModeOption(t *testing.T) {
	s := serve(t, ServeOptions{SocketMode: 0o660}, testIdentity{})
	if fi, err := os.Stat(s.path); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v %v, want 0660", fi.Mode().Perm(), err)
	}
}

func TestRequestIDAndFencingTokenReachTheHandler(t *testing.T) {
	s := serve(t, ServeOptions{}, testIdentity{})
	c := pb.NewIdentityServiceClient(s.conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(),
		RequestIDMetadata, "req-42", FencingTokenMetadata, "7:cp-1")
	r, err := c.Probe(ctx, &pb.ProbeRequest{})
	if err != nil || r.Message != "id=req-42 token=7:cp-1" {
		t.Errorf("Probe = %v, %v", r, err)
	}
	r, err = c.Probe(context.Background(), &pb.ProbeRequest{})
	if err != nil || !strings.HasPrefix(r.Message, "id=sdk-") {
		t.Errorf("Probe without request id = %v, %v", r, err)
	}
	ctx = metadata.AppendToOutgoingContext(context.Background(), RequestIDMetadata, "req-43",
		TraceparentMetadata, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	r, err = c.Probe(ctx, &pb.ProbeRequest{})
	if err != nil || r.Message != "id=req-43 trace=0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("Probe with a traceparent = %v, %v", r, err)
	}
}

func TestMalformedFencingTokensAreRefusedNamingTheMetadata(t *testing.T) {
	s := serve(t, ServeOptions{}, testIdentity{})
	c := pb.NewIdentityServiceClient(s.conn)
	for _, md := range [][]string{
		{FencingTokenMetadata, "not-a-term:x"},
		{FencingTokenMetadata, "1:a", FencingTokenMetadata, "2:b"},
	} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), md...)
		_, err := c.Probe(ctx, &pb.ProbeRequest{})
		e := FromStatus(status.Convert(err))
		if e.Code != codes.InvalidArgument || e.Reason != pb.ErrorReason_ERROR_REASON_INVALID_REQUEST ||
			len(e.Violations) != 1 || e.Violations[0].Field != "metadata[x-ccm-fencing-token]" {
			t.Errorf("%v: got %+v", md, e)
		}
	}
}

func TestHandlerPanicsAndPlainErrors(t *testing.T) {
	s := serve(t, ServeOptions{}, testIdentity{})
	c := pb.NewIdentityServiceClient(s.conn)
	_, err := c.GetProviderCapabilities(context.Background(), &pb.GetProviderCapabilitiesRequest{ControllerVersion: "panic"})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panic: %v", err)
	}
	_, err = c.GetProviderCapabilities(context.Background(), &pb.GetProviderCapabilitiesRequest{ControllerVersion: "plain-error"})
	if status.Code(err) != codes.Unknown {
		t.Errorf("plain error: %v", err)
	}
	// The server survived.
	if _, err := c.GetProviderCapabilities(context.Background(), &pb.GetProviderCapabilitiesRequest{}); err != nil {
		t.Error(err)
	}
}

func TestShutdownDrainsWithinTheGracePeriodAndRemovesTheSocket(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	s := serve(t, ServeOptions{GracePeriod: 300 * time.Millisecond}, testIdentity{entered: entered, release: release})
	hung := make(chan error, 1)
	go func() {
		_, err := pb.NewIdentityServiceClient(s.conn).GetProviderInfo(context.Background(), &pb.GetProviderInfoRequest{})
		hung <- err
	}()
	select {
	case <-entered: // the call is in flight
	case err := <-hung:
		t.Fatalf("the call ended before shutdown: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the call never reached the handler")
	}
	start := time.Now()
	s.stop()
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("Serve returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the grace period")
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("stopped after %v, before the grace period", took)
	}
	if err := <-hung; status.Code(err) != codes.Unavailable {
		t.Errorf("the call cut off: %v", err)
	}
	if _, err := os.Lstat(s.path); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	s.done <- nil // for the cleanup
}

func TestListenReplacesStaleSocketsOnly(t *testing.T) {
	dir := t.TempDir()
	// A stale socket: bound, then its listener gone without unlinking.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
	l2, err := Listen(stale, 0o600)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	// A live socket is left alone.
	if _, err := Listen(stale, 0o600); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("live socket: %v", err)
	}
	_ = l2.Close()
	// A regular file is never removed.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file, 0o600); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Error("regular file changed")
	}
}

func TestEndpoints(t *testing.T) {
	for in, want := range map[string]string{"unix:///run/p.sock": "/run/p.sock", "unix:/run/p.sock": "/run/p.sock"} {
		if got, err := SocketPath(in); err != nil || got != want {
			t.Errorf("%s: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"unix://relative.sock", "tcp://127.0.0.1:1", "/run/p.sock"} {
		if _, err := SocketPath(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
