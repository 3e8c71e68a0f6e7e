package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"io"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

var testLabels = Labels{Name: "t", Version: "9.8.7", Revision: "abc", Source: "https://example.invalid/x", Epoch: 1700000000}

func digest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func platformImage(t *testing.T, idx v1.ImageIndex, arch string) v1.Image {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no %s image in the index", arch)
	return nil
}

// The same inputs give the same digests: the images are reproducible.
func TestSameInputsSameDigests(t *testing.T) {
	bins := map[string][]byte{"linux/amd64": []byte("amd64 binary"), "linux/arm64": []byte("arm64 binary")}
	var digests []v1.Hash
	for range 2 {
		base, err := Base(testLabels)
		if err != nil {
			t.Fatal(err)
		}
		app, err := App(base, "/x", bins, testLabels)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, digest(t, base), digest(t, app))
	}
	if digests[0] != digests[2] || digests[1] != digests[3] {
		t.Fatalf("two builds differ: %v", digests)
	}
	later := testLabels
	later.Epoch++
	base, err := Base(later)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, base) == digests[0] {
		t.Fatal("another epoch gave the same digest: the epoch is not in the image")
	}
}

// Every tar entry sorted, stamped with the epoch, owned by numeric ids.
func TestLayerEntries(t *testing.T) {
	files := []File{{Path: "z", Mode: 0o644, Data: []byte("z")}, {Path: "a/", Mode: 0o755}, {Path: "a/b", Mode: 0o600, UID: NonRoot, GID: NonRoot, Data: []byte("b")}}
	layer, err := Layer(files, testLabels.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(time.Unix(testLabels.Epoch, 0)) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v uname %q gname %q", h.Name, h.ModTime, h.Uname, h.Gname)
		}
		if h.Name == "a/b" && (h.Uid != NonRoot || h.Mode != 0o600) {
			t.Errorf("a/b: uid %d mode %o", h.Uid, h.Mode)
		}
	}
	if got := strings.Join(names, " "); got != "a/ a/b z" {
		t.Fatalf("entries %q, want sorted", got)
	}
}

func TestAppConfig(t *testing.T) {
	base, err := Base(testLabels)
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string][]byte{"linux/amd64": []byte("amd64 binary"), "linux/arm64": []byte("arm64 binary")}
	app, err := App(base, "/x", bins, testLabels)
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		img := platformImage(t, app, arch)
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cfg.Config
		if c.User != "65532:65532" || len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/x" || cfg.Architecture != arch {
			t.Errorf("%s: user %q entrypoint %q arch %q", arch, c.User, c.Entrypoint, cfg.Architecture)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.version":  "9.8.7",
			"org.opencontainers.image.revision": "abc",
			"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
		} {
			if c.Labels[k] != want {
				t.Errorf("%s: label %s = %q, want %q", arch, k, c.Labels[k], want)
			}
		}
		fs := files(t, img)
		if string(fs["x"]) != arch+" binary" {
			t.Errorf("%s: /x holds %q", arch, fs["x"])
		}
	}

	if _, err := App(base, "/x", map[string][]byte{"linux/amd64": nil}, testLabels); err == nil || !strings.Contains(err.Error(), "no binary for linux/arm64") {
		t.Errorf("a missing platform: err %v", err)
	}
	if _, err := App(base, "x", bins, testLabels); err == nil {
		t.Error("a relative entrypoint was accepted")
	}
}

func TestBaseHasUsersAndCertificates(t *testing.T) {
	base, err := Base(testLabels)
	if err != nil {
		t.Fatal(err)
	}
	fs := files(t, platformImage(t, base, "amd64"))
	if !strings.Contains(string(fs["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd: %q", fs["etc/passwd"])
	}
	n := 0
	rest := fs["etc/ssl/certs/ca-certificates.crt"]
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Fatal(err)
		}
		n++
	}
	// Mozilla's store has well over a hundred roots.
	if n < 100 || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("%d certificates, %d bytes left over", n, len(rest))
	}
	for _, sh := range []string{"bin/sh", "bin/", "usr/"} {
		if _, ok := fs[sh]; ok {
			t.Errorf("the base has %s", sh)
		}
	}
}

// files reads an image's flattened filesystem: path -> content.
func files(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = data
	}
}
