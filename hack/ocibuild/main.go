// Command ocibuild writes the project's OCI images as OCI image layouts,
// without a container daemon, with go-containerregistry (the library behind
// crane and ko): `make images` (hack/images.sh) runs it.
//
//	ocibuild base -out DIR [labels]
//	    the base image: one layer with /etc/passwd and /etc/group (user and
//	    group 65532 "nonroot"), /etc/ssl/certs/ca-certificates.crt, /tmp and
//	    /home/nonroot; no shell, no entrypoint; linux/amd64 and linux/arm64.
//	ocibuild app -base DIR -out DIR -entrypoint /NAME -bin linux/amd64=PATH -bin linux/arm64=PATH [labels]
//	    the base plus one layer holding the binary at /NAME, run as 65532.
//	ocibuild sbom -roots A,B -version V -epoch E [-lock Cargo.lock] METADATA.json...
//	    the CycloneDX SBOM of the crates packages A, B link (from
//	    `cargo metadata --filter-platform`, one file per platform).
//
// Labels: -name, -description, -version, -revision, -source and -epoch
// (seconds; SOURCE_DATE_EPOCH). Every timestamp is the epoch, tar entries are
// sorted and owned by numeric ids, so the same inputs give the same digests.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the uid and gid every image runs as (distroless's "nonroot").
const NonRoot = 65532

// Platforms are the platforms every image is built for, in index order.
var Platforms = []v1.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64", Variant: "v8"},
}

// Labels are the OCI annotations (org.opencontainers.image.*) an image carries.
type Labels struct {
	Name, Description, Version, Revision, Source string
	Epoch                                        int64
}

func (l Labels) created() time.Time { return time.Unix(l.Epoch, 0).UTC() }

func (l Labels) annotations() map[string]string {
	m := map[string]string{
		"org.opencontainers.image.created":  l.created().Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	for k, v := range map[string]string{
		"title": l.Name, "description": l.Description, "version": l.Version,
		"revision": l.Revision, "source": l.Source,
	} {
		if v != "" {
			m["org.opencontainers.image."+k] = v
		}
	}
	return m
}

// File is one entry of a layer.
type File struct {
	Path     string // without a leading slash
	Mode     int64  // permission bits (and sticky); a trailing "/" in Path makes a directory
	UID, GID int
	Data     []byte
}

// Layer writes files as a gzipped tar layer: entries sorted by path, every
// mtime the epoch, numeric owners only, so equal inputs are equal bytes.
func Layer(files []File, epoch int64) (v1.Layer, error) {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(epoch, 0).UTC()
	for _, f := range sorted {
		h := &tar.Header{
			Name: f.Path, Mode: f.Mode, Uid: f.UID, Gid: f.GID,
			ModTime: mtime, Format: tar.FormatPAX,
		}
		if strings.HasSuffix(f.Path, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// BaseFiles are the base layer's files: users, CA certificates, /tmp.
func BaseFiles() ([]File, error) {
	certs, err := caBundle()
	if err != nil {
		return nil, err
	}
	nr := fmt.Sprint(NonRoot)
	return []File{
		{Path: "etc/", Mode: 0o755},
		{Path: "etc/passwd", Mode: 0o644, Data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
				"nonroot:x:" + nr + ":" + nr + ":nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "etc/group", Mode: 0o644, Data: []byte(
			"root:x:0:\nnobody:x:65534:\nnonroot:x:" + nr + ":\n")},
		{Path: "etc/ssl/", Mode: 0o755},
		{Path: "etc/ssl/certs/", Mode: 0o755},
		{Path: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: certs},
		{Path: "home/", Mode: 0o755},
		{Path: "home/nonroot/", Mode: 0o700, UID: NonRoot, GID: NonRoot},
		{Path: "root/", Mode: 0o700},
		{Path: "tmp/", Mode: 0o1777},
	}, nil
}

func baseConfig(l Labels, p v1.Platform) *v1.ConfigFile {
	return &v1.ConfigFile{
		Architecture: p.Architecture,
		Variant:      p.Variant,
		OS:           p.OS,
		Created:      v1.Time{Time: l.created()},
		Config: v1.Config{
			User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
			WorkingDir: "/",
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
			},
			Labels: l.annotations(),
		},
	}
}

// Base builds the base image for every platform.
func Base(l Labels) (v1.ImageIndex, error) {
	files, err := BaseFiles()
	if err != nil {
		return nil, err
	}
	layer, err := Layer(files, l.Epoch)
	if err != nil {
		return nil, err
	}
	var imgs []v1.Image
	for _, p := range Platforms {
		img, err := mutate.ConfigFile(ociImage(), baseConfig(l, p))
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: v1.Time{Time: l.created()}, CreatedBy: "ocibuild base", Comment: "users 65532 nonroot, CA certificates, /tmp"},
		})
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	return index(imgs, l)
}

// App adds a layer holding binaries[platform] at entrypoint to each image of
// base, makes it the entrypoint and sets the labels.
func App(base v1.ImageIndex, entrypoint string, binaries map[string][]byte, l Labels) (v1.ImageIndex, error) {
	if !path.IsAbs(entrypoint) || path.Clean(entrypoint) != entrypoint {
		return nil, fmt.Errorf("entrypoint %q: want a clean absolute path", entrypoint)
	}
	im, err := base.IndexManifest()
	if err != nil {
		return nil, err
	}
	var imgs []v1.Image
	seen := map[string]bool{}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			return nil, fmt.Errorf("base manifest %s has no platform", d.Digest)
		}
		key := platformKey(*d.Platform)
		bin, ok := binaries[key]
		if !ok {
			return nil, fmt.Errorf("no binary for %s (the base has it)", key)
		}
		seen[key] = true
		img, err := base.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		layer, err := Layer([]File{{Path: strings.TrimPrefix(entrypoint, "/"), Mode: 0o755, Data: bin}}, l.Epoch)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: v1.Time{Time: l.created()}, CreatedBy: "ocibuild app", Comment: entrypoint},
		})
		if err != nil {
			return nil, err
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cfg = cfg.DeepCopy()
		cfg.Created = v1.Time{Time: l.created()}
		cfg.Config.Entrypoint = []string{entrypoint}
		cfg.Config.Cmd = nil
		cfg.Config.User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)
		cfg.Config.Labels = l.annotations()
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	for key := range binaries {
		if !seen[key] {
			return nil, fmt.Errorf("binary for %s but the base has no such platform", key)
		}
	}
	return index(imgs, l)
}

func ociImage() v1.Image {
	return mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
}

func platformKey(p v1.Platform) string { return p.OS + "/" + p.Architecture }

func index(imgs []v1.Image, l Labels) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, img := range imgs {
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		p := cfg.Platform()
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, l.annotations()).(v1.ImageIndex), nil
}

// Write writes idx as the OCI layout dir (replacing what was there), its
// index.json naming it by version (org.opencontainers.image.ref.name), so
// `skopeo copy --all oci:DIR:VERSION docker://REPO:VERSION` pushes it.
func Write(dir string, idx v1.ImageIndex, version string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": version,
	}))
}

// ReadIndex reads the image index a layout written by Write names.
func ReadIndex(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	outer, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := outer.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		return nil, fmt.Errorf("%s: index.json should name one image index, names %d manifests", dir, len(m.Manifests))
	}
	return outer.ImageIndex(m.Manifests[0].Digest)
}

type binFlags map[string]string

func (b binFlags) String() string { return fmt.Sprint(map[string]string(b)) }
func (b binFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q: want PLATFORM=PATH, e.g. linux/amd64=target/x86_64-unknown-linux-musl/release/x", s)
	}
	b[k] = v
	return nil
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "sbom" {
		fs := flag.NewFlagSet("ocibuild sbom", flag.ContinueOnError)
		lock := fs.String("lock", "Cargo.lock", "the workspace's Cargo.lock")
		roots := fs.String("roots", "", "the shipped workspace packages, comma-separated")
		version := fs.String("version", "", "the release's version")
		epoch := fs.Int64("epoch", -1, "the timestamp, seconds since 1970 (SOURCE_DATE_EPOCH)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *roots == "" || *version == "" || *epoch < 0 || fs.NArg() == 0 {
			return errors.New("usage: ocibuild sbom -roots A,B -version V -epoch E [-lock Cargo.lock] CARGO-METADATA.json...")
		}
		return runSBOM(*lock, *roots, *version, *epoch, fs.Args())
	}
	if len(args) == 0 || (args[0] != "base" && args[0] != "app") {
		return errors.New("usage: ocibuild base|app|sbom ... (see the package comment)")
	}
	fs := flag.NewFlagSet("ocibuild "+args[0], flag.ContinueOnError)
	var l Labels
	out := fs.String("out", "", "the OCI layout directory to write")
	fs.StringVar(&l.Name, "name", "", "org.opencontainers.image.title")
	fs.StringVar(&l.Description, "description", "", "org.opencontainers.image.description")
	fs.StringVar(&l.Version, "version", "", "org.opencontainers.image.version (and the layout's ref name)")
	fs.StringVar(&l.Revision, "revision", "", "org.opencontainers.image.revision (the git commit)")
	fs.StringVar(&l.Source, "source", "", "org.opencontainers.image.source")
	fs.Int64Var(&l.Epoch, "epoch", -1, "every timestamp, seconds since 1970 (SOURCE_DATE_EPOCH)")
	baseDir := fs.String("base", "", "app: the base image's OCI layout")
	entrypoint := fs.String("entrypoint", "", "app: where the binary goes, the entrypoint")
	bins := binFlags{}
	fs.Var(bins, "bin", "app: PLATFORM=PATH, once per platform")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *out == "" || l.Version == "" || l.Epoch < 0 {
		return errors.New("-out, -version and -epoch are required")
	}
	var idx v1.ImageIndex
	var err error
	switch args[0] {
	case "base":
		idx, err = Base(l)
	case "app":
		if *baseDir == "" || *entrypoint == "" {
			return errors.New("app: -base and -entrypoint are required")
		}
		base, err := ReadIndex(*baseDir)
		if err != nil {
			return err
		}
		data := map[string][]byte{}
		for k, p := range bins {
			if data[k], err = os.ReadFile(p); err != nil {
				return err
			}
		}
		idx, err = App(base, *entrypoint, data, l)
		if err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	if err := Write(*out, idx, l.Version); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Println(d)
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
}
