package adapter

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
)

// The README's "A provider in ten lines" is internal/example/main.go, as
// it is.
func TestTheReadmeExampleIsTheProgram(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	program, err := os.ReadFile("internal/example/main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## A provider in ten lines\n")
	if !ok {
		t.Fatal(`the README has no "## A provider in ten lines"`)
	}
	_, block, ok := strings.Cut(section, "```go\n")
	if ok {
		block, _, ok = strings.Cut(block, "```\n")
	}
	if !ok {
		t.Fatal("no go code block under the heading")
	}
	if block != string(program) {
		t.Errorf("the README's example differs from internal/example/main.go:\n%s", block)
	}
}

// The example program builds, serves on the socket it is given, answers
// GetProviderInfo, and stops cleanly on SIGTERM.
func TestTheReadmeExampleRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "example")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./internal/example")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "p.sock")
	cmd := exec.CommandContext(ctx, bin, "--endpoint", "unix://"+sock)
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the example exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("never served\n%s", out.String())
		}
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
	defer callCancel()
	info, err := pb.NewIdentityServiceClient(conn).GetProviderInfo(callCtx, &pb.GetProviderInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetName() != "mycloud" || info.GetProviderIdScheme() != "mycloud" || info.GetVendorVersion() == "(devel)" || !info.GetHasClusterId() {
		t.Errorf("info %v", info)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30 s of SIGTERM")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
}
