package main

// The release's SBOM (CycloneDX 1.5 JSON), derived from what decides the
// shipped bytes: `cargo metadata --filter-platform <triple>` (the resolved
// graph for each image platform), Cargo.lock (checksums) and this
// program's own build info (the CA bundle module in every image).

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// cargoMetadata is the part of `cargo metadata --format-version 1` read here.
type cargoMetadata struct {
	Packages []struct {
		ID      string `json:"id"`
		Name    string `json:"name"`
		Version string `json:"version"`
		License string `json:"license"`
		Source  string `json:"source"`
	} `json:"packages"`
	Resolve struct {
		Nodes []struct {
			ID   string `json:"id"`
			Deps []struct {
				Pkg      string `json:"pkg"`
				DepKinds []struct {
					Kind *string `json:"kind"`
				} `json:"dep_kinds"`
			} `json:"deps"`
		} `json:"nodes"`
	} `json:"resolve"`
}

type cdxComponent struct {
	Type     string       `json:"type"`
	BOMRef   string       `json:"bom-ref"`
	Name     string       `json:"name"`
	Version  string       `json:"version"`
	Purl     string       `json:"purl,omitempty"`
	Licenses []cdxLicense `json:"licenses,omitempty"`
	Hashes   []cdxHash    `json:"hashes,omitempty"`
}

type cdxLicense struct {
	Expression string `json:"expression"`
}

type cdxHash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type cdxDependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

type cdxBOM struct {
	BOMFormat   string `json:"bomFormat"`
	SpecVersion string `json:"specVersion"`
	Version     int    `json:"version"`
	Metadata    struct {
		Timestamp string       `json:"timestamp"`
		Component cdxComponent `json:"component"`
	} `json:"metadata"`
	Components   []cdxComponent  `json:"components"`
	Dependencies []cdxDependency `json:"dependencies"`
}

// lockChecksums reads name@version -> sha256 from Cargo.lock.
func lockChecksums(r io.Reader) (map[string]string, error) {
	sums := map[string]string{}
	var name, version string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		val := func(prefix string) (string, bool) {
			v, ok := strings.CutPrefix(line, prefix)
			return strings.Trim(v, `"`), ok
		}
		if line == "[[package]]" {
			name, version = "", ""
		} else if v, ok := val("name = "); ok {
			name = v
		} else if v, ok := val("version = "); ok {
			version = v
		} else if v, ok := val("checksum = "); ok {
			sums[name+"@"+version] = v
		}
	}
	return sums, sc.Err()
}

// SBOM builds the bill of materials of the crates the roots (workspace
// package names) link, over every metadata (one per platform): normal
// dependencies only, as those are what the binaries contain.
func SBOM(metas []cargoMetadata, lock map[string]string, roots []string, version string, epoch int64) (*cdxBOM, error) {
	comps := map[string]cdxComponent{}
	deps := map[string]map[string]bool{}
	for _, m := range metas {
		byID := map[string]int{}
		for i, p := range m.Packages {
			byID[p.ID] = i
		}
		ref := func(id string) string {
			p := m.Packages[byID[id]]
			return "pkg:cargo/" + p.Name + "@" + p.Version
		}
		edges := map[string][]string{}
		for _, n := range m.Resolve.Nodes {
			for _, d := range n.Deps {
				for _, k := range d.DepKinds {
					if k.Kind == nil { // normal, not build or dev
						edges[n.ID] = append(edges[n.ID], d.Pkg)
						break
					}
				}
			}
		}
		var stack []string
		for _, r := range roots {
			found := false
			for _, p := range m.Packages {
				if p.Name == r && p.Source == "" {
					stack = append(stack, p.ID)
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("no workspace package %q in the metadata", r)
			}
		}
		seen := map[string]bool{}
		for len(stack) > 0 {
			id := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[id] {
				continue
			}
			seen[id] = true
			p := m.Packages[byID[id]]
			c := cdxComponent{Type: "library", BOMRef: ref(id), Name: p.Name, Version: p.Version}
			if p.Source != "" {
				c.Purl = c.BOMRef
			} else {
				c.Type = "application"
			}
			if p.License != "" {
				c.Licenses = []cdxLicense{{Expression: p.License}}
			}
			if sum := lock[p.Name+"@"+p.Version]; sum != "" {
				c.Hashes = []cdxHash{{Alg: "SHA-256", Content: sum}}
			}
			comps[c.BOMRef] = c
			if deps[c.BOMRef] == nil {
				deps[c.BOMRef] = map[string]bool{}
			}
			for _, d := range edges[id] {
				deps[c.BOMRef][ref(d)] = true
				stack = append(stack, d)
			}
		}
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, errors.New("no build info: build ocibuild with go build")
	}
	for _, d := range bi.Deps {
		if d.Path == "golang.org/x/crypto/x509roots/fallback" {
			purl := "pkg:golang/" + d.Path + "@" + d.Version
			comps[purl] = cdxComponent{
				Type: "data", BOMRef: purl, Name: d.Path, Version: d.Version, Purl: purl,
				Licenses: []cdxLicense{{Expression: "BSD-3-Clause"}},
			}
		}
	}

	bom := &cdxBOM{BOMFormat: "CycloneDX", SpecVersion: "1.5", Version: 1}
	bom.Metadata.Timestamp = time.Unix(epoch, 0).UTC().Format(time.RFC3339)
	bom.Metadata.Component = cdxComponent{Type: "application", BOMRef: "ccm-rs@" + version, Name: "ccm-rs", Version: version,
		Licenses: []cdxLicense{{Expression: "Apache-2.0"}}}
	refs := make([]string, 0, len(comps))
	for r := range comps {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	for _, r := range refs {
		bom.Components = append(bom.Components, comps[r])
		if on := deps[r]; on != nil {
			d := cdxDependency{Ref: r, DependsOn: []string{}}
			for o := range on {
				d.DependsOn = append(d.DependsOn, o)
			}
			sort.Strings(d.DependsOn)
			bom.Dependencies = append(bom.Dependencies, d)
		}
	}
	return bom, nil
}

// runSBOM: ocibuild sbom -lock Cargo.lock -roots a,b -version V -epoch E METADATA.json...
func runSBOM(lockPath, roots, version string, epoch int64, metaPaths []string) error {
	f, err := os.Open(lockPath)
	if err != nil {
		return err
	}
	defer f.Close()
	lock, err := lockChecksums(f)
	if err != nil {
		return err
	}
	var metas []cargoMetadata
	for _, p := range metaPaths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var m cargoMetadata
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		metas = append(metas, m)
	}
	bom, err := SBOM(metas, lock, strings.Split(roots, ","), version, epoch)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(bom)
}
