package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestRelease checks what `make release` wrote (CCM_RELEASE_DIR, set by
// `make test-release`): every artifact there and in SHA256SUMS, the sums
// right, and one version everywhere: Cargo.toml, the chart's appVersion,
// each image's labels and its binary's --version.
func TestRelease(t *testing.T) {
	base := os.Getenv("CCM_RELEASE_DIR")
	if base == "" {
		t.Skip("CCM_RELEASE_DIR is not set: `make test-release` builds the release and runs this")
	}
	if os.Geteuid() != 0 {
		t.Fatal("running an image's entrypoint in its own root (chroot) as uid 65532 needs root")
	}
	version := workspaceVersion(t)
	dir := filepath.Join(base, version)
	chartVersion := one(t, "Chart.yaml version", read(t, "deploy/helm/ccm-rs/Chart.yaml"), `(?m)^version: "?([^"\s]+)"?$`)

	images := []string{"provider-base", "cloud-controller-manager", "fake-provider", "local-provider"}
	want := []string{"CHANGELOG.md", "ccm-rs-" + chartVersion + ".tgz", "sbom.cdx.json"}
	for _, name := range images {
		want = append(want, name+"-"+version+".oci.tar")
	}

	// SHA256SUMS lists exactly the artifacts, each with its sum.
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		listed[file] = true
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s: sha256 %x, SHA256SUMS says %s", file, h, sum)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" {
			onDisk = append(onDisk, e.Name())
		}
	}
	for _, w := range want {
		if !listed[w] {
			t.Errorf("%s is not in SHA256SUMS", w)
		}
	}
	if len(onDisk) != len(want) || len(listed) != len(want) {
		t.Errorf("files %v, SHA256SUMS lists %d, want %v", onDisk, len(listed), want)
	}

	// The chart: its own version in the file name, appVersion the version.
	chart := chartYAML(t, filepath.Join(dir, "ccm-rs-"+chartVersion+".tgz"))
	if got := one(t, "packaged Chart.yaml appVersion", chart, `(?m)^appVersion: "?([^"\s]+)"?$`); got != version {
		t.Errorf("the packaged chart's appVersion is %q, the version %q", got, version)
	}

	// Each image: the version in the layout's ref name and labels, and the
	// binary's --version.
	for _, name := range images {
		layoutDir := untar(t, filepath.Join(dir, name+"-"+version+".oci.tar"))
		ref := one(t, name+" index.json ref name", readFile(t, filepath.Join(layoutDir, "index.json")), `"org.opencontainers.image.ref.name": "([^"]+)"`)
		if ref != version {
			t.Errorf("%s: ref name %q", name, ref)
		}
		idx, err := ReadIndex(layoutDir)
		if err != nil {
			t.Fatal(err)
		}
		img := platformImage(t, idx, runtime.GOARCH)
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Config.Labels["org.opencontainers.image.version"]; got != version {
			t.Errorf("%s: version label %q", name, got)
		}
		if name == "provider-base" {
			continue
		}
		root := unpack(t, img)
		out, err := runIn(t, root, "/"+name, "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", name, err)
		}
		if !strings.HasPrefix(string(out), name+" "+version+" (commit ") {
			t.Errorf("%s --version: %q", name, out)
		}
	}

	// The SBOM names the release and the crates the binaries link.
	var bom cdxBOM
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "sbom.cdx.json"))), &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Version != version {
		t.Errorf("sbom: format %q, version %q", bom.BOMFormat, bom.Metadata.Component.Version)
	}
	lock := readFile(t, "../../Cargo.lock")
	names := map[string]bool{}
	for _, c := range bom.Components {
		names[c.Name] = true
		if strings.HasPrefix(c.Purl, "pkg:cargo/") && !strings.Contains(lock, "name = \""+c.Name+"\"\nversion = \""+c.Version+"\"") {
			t.Errorf("sbom: %s@%s is not in Cargo.lock", c.Name, c.Version)
		}
	}
	for _, n := range []string{"cloud-controller-manager", "ccm-fake-provider", "ccm-local-provider", "kube-client", "tokio", "ring", "golang.org/x/crypto/x509roots/fallback"} {
		if !names[n] {
			t.Errorf("sbom: no component %s", n)
		}
	}
	if names["proptest"] {
		t.Error("sbom: lists proptest, a dev-dependency the binaries do not link")
	}

	// The version's CHANGELOG section (or Unreleased before the release).
	notes := readFile(t, filepath.Join(dir, "CHANGELOG.md"))
	if !regexp.MustCompile(`^## \[(` + regexp.QuoteMeta(version) + `|Unreleased)\]`).MatchString(notes) {
		t.Errorf("CHANGELOG.md starts %q", notes[:min(len(notes), 60)])
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// chartYAML reads ccm-rs/Chart.yaml from a packaged chart.
func chartYAML(t *testing.T, tgz string) string {
	t.Helper()
	f, err := os.Open(tgz)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s has no ccm-rs/Chart.yaml", tgz)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "ccm-rs/Chart.yaml" {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return string(data)
		}
	}
}

// untar unpacks an OCI layout tar into a new directory.
func untar(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^(oci-layout|index\.json|blobs/|blobs/sha256/|blobs/sha256/[0-9a-f]{64})$`).MatchString(h.Name) {
			t.Fatalf("%s: unexpected entry %q", file, h.Name)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
