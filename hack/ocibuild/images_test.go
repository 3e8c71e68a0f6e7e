package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestImages checks the layouts `make images` wrote (CCM_IMAGES_DIR, set by
// `make test-images`): each image for this machine's architecture is
// unpacked and its entrypoint run in it (chroot) as the image's user.
func TestImages(t *testing.T) {
	dir := os.Getenv("CCM_IMAGES_DIR")
	if dir == "" {
		t.Skip("CCM_IMAGES_DIR is not set: `make test-images` builds the images and runs this")
	}
	if os.Geteuid() != 0 {
		t.Fatal("running an image's entrypoint in its own root (chroot) as uid 65532 needs root")
	}
	version := workspaceVersion(t)
	head := gitHead(t)

	roots := map[string]string{}
	for _, name := range []string{"provider-base", "cloud-controller-manager", "fake-provider", "local-provider"} {
		idx, err := ReadIndex(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var archs []string
		for _, d := range m.Manifests {
			archs = append(archs, d.Platform.Architecture)
		}
		if strings.Join(archs, ",") != "amd64,arm64" {
			t.Errorf("%s: platforms %v, want amd64 and arm64", name, archs)
		}
		img := platformImage(t, idx, runtime.GOARCH)
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cfg.Config
		if c.User != "65532:65532" {
			t.Errorf("%s: user %q", name, c.User)
		}
		if got := c.Labels["org.opencontainers.image.version"]; got != version {
			t.Errorf("%s: version label %q, Cargo.toml says %q", name, got, version)
		}
		rev := c.Labels["org.opencontainers.image.revision"]
		if strings.TrimSuffix(rev, "-dirty") != head {
			t.Errorf("%s: revision label %q, HEAD is %s", name, rev, head)
		}
		root := unpack(t, img)
		roots[name] = root
		if _, err := os.Lstat(filepath.Join(root, "bin/sh")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: /bin/sh: %v (want none)", name, err)
		}
		if name == "provider-base" {
			if len(c.Entrypoint) != 0 {
				t.Errorf("the base has an entrypoint %q", c.Entrypoint)
			}
			continue
		}
		if len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/"+name {
			t.Fatalf("%s: entrypoint %q", name, c.Entrypoint)
		}
		out, err := runIn(t, root, c.Entrypoint[0], "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", name, err)
		}
		if want := name + " " + version + " (commit " + rev + ")\n"; string(out) != want {
			t.Errorf("%s --version: %q, want %q", name, out, want)
		}
	}

	out, err := runIn(t, roots["cloud-controller-manager"], "/cloud-controller-manager", "--help").Output()
	if err != nil || !strings.Contains(string(out), "--provider-endpoint") {
		t.Errorf("cloud-controller-manager --help: %v\n%s", err, out)
	}

	// The fake provider serves on a socket in its root; the controller's
	// `provider info`, from its image, asks it.
	info := serveAndProbe(t, roots["cloud-controller-manager"], roots["fake-provider"], "/fake-provider")
	if info.VendorVersion != version {
		t.Errorf("the fake provider's vendor_version %q, want %q", info.VendorVersion, version)
	}

	// A provider put on the base image as docs/deploy.md says
	// (hack/test-images.sh builds the Go example that way).
	if dir := os.Getenv("CCM_GO_PROVIDER_IMAGE"); dir != "" {
		idx, err := ReadIndex(dir)
		if err != nil {
			t.Fatal(err)
		}
		img := platformImage(t, idx, runtime.GOARCH)
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Config.User != "65532:65532" || len(cfg.Config.Entrypoint) != 1 {
			t.Fatalf("%s: user %q entrypoint %q", dir, cfg.Config.User, cfg.Config.Entrypoint)
		}
		root := unpack(t, img)
		if _, err := os.Stat(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")); err != nil {
			t.Errorf("the base's CA certificates: %v", err)
		}
		info := serveAndProbe(t, roots["cloud-controller-manager"], root, cfg.Config.Entrypoint[0])
		if info.Name == "" {
			t.Errorf("the Go provider has no name")
		}
	}
}

type providerInfo struct {
	Name          string `json:"name"`
	VendorVersion string `json:"vendor_version"`
	Probe         struct {
		State string `json:"state"`
	} `json:"probe"`
}

// serveAndProbe starts entrypoint in provRoot on /tmp/provider.sock as the
// image's user and asks it with `provider info` from the controller's
// image, which must find it READY.
func serveAndProbe(t *testing.T, ctlRoot, provRoot, entrypoint string) providerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prov := runIn(t, provRoot, entrypoint, "--endpoint", "unix:///tmp/provider.sock")
	prov.Stderr = os.Stderr
	if err := prov.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prov.Process.Kill(); _ = prov.Wait() }()
	sock := filepath.Join(provRoot, "tmp/provider.sock")
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s made no socket at /tmp/provider.sock in 30s", entrypoint)
		case <-time.After(50 * time.Millisecond):
		}
	}
	probe := exec.CommandContext(ctx, filepath.Join(ctlRoot, "cloud-controller-manager"),
		"provider", "info", "--output", "json", "--provider-endpoint", "unix://"+sock)
	probe.Stderr = os.Stderr
	out, err := probe.Output()
	if err != nil {
		t.Fatalf("provider info (%s): %v", entrypoint, err)
	}
	var info providerInfo
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("provider info (%s): %v\n%s", entrypoint, err, out)
	}
	if info.Probe.State != "READY" {
		t.Errorf("provider info (%s): %s", entrypoint, out)
	}
	return info
}

// runIn makes a command running path in root (chroot) as 65532:65532.
func runIn(t *testing.T, root, path string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/nonroot"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: NonRoot, Gid: NonRoot},
	}
	return cmd
}

// unpack writes an image's flattened filesystem into a new directory, with
// its modes and owners.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	// The image's "/" is traversed by uid 65532 after the chroot.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^[a-z0-9._/-]+$`).MatchString(h.Name) || strings.Contains(h.Name, "..") {
			t.Fatalf("unexpected path %q in the image", h.Name)
		}
		p := filepath.Join(root, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: tar type %c, the images hold only files and directories", h.Name, h.Typeflag)
		}
		if err := os.Chown(p, h.Uid, h.Gid); err != nil {
			t.Fatal(err)
		}
		// Chmod after chown: chown clears the sticky and set-id bits.
		if err := os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
}

func modeBits(m int64) os.FileMode {
	var b os.FileMode
	if m&0o1000 != 0 {
		b |= os.ModeSticky
	}
	return b
}

func workspaceVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../Cargo.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "[workspace.package]")
	m := regexp.MustCompile(`(?m)^version = "([^"]+)"`).FindStringSubmatch(after)
	if !ok || m == nil {
		t.Fatal("no version in Cargo.toml [workspace.package]")
	}
	return m[1]
}

func gitHead(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
