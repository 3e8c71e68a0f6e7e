package main

import (
	"os"
	"regexp"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile("../../" + path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// one returns the single submatch of re in text, failing when there is not
// exactly one match.
func one(t *testing.T, what, text, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindAllStringSubmatch(text, -1)
	if len(m) != 1 {
		t.Fatalf("%s: %d matches of %s, want 1", what, len(m), re)
	}
	return m[0][1]
}

// The version of ccm-rs is the workspace's; the chart's appVersion, the
// image tags the manifests name and docs/versions.md say the same, and
// docs/versions.md names the chart's own version as Chart.yaml does.
func TestVersionsAgree(t *testing.T) {
	version := workspaceVersion(t)
	chart := read(t, "deploy/helm/ccm-rs/Chart.yaml")
	chartVersion := one(t, "Chart.yaml version", chart, `(?m)^version: "?([^"\s]+)"?$`)
	doc := read(t, "docs/versions.md")
	row := func(prefix string) string {
		t.Helper()
		return one(t, "docs/versions.md row "+prefix, doc, `(?m)^\| `+regexp.QuoteMeta(prefix)+`[^|]*\| ([^|]+?) \|`)
	}
	got := map[string]string{
		"Chart.yaml appVersion":               one(t, "Chart.yaml appVersion", chart, `(?m)^appVersion: "?([^"\s]+)"?$`),
		"deploy/base/deployment.yaml":         one(t, "deployment image", read(t, "deploy/base/deployment.yaml"), `image: ghcr.io/ccm-rs/cloud-controller-manager:(\S+)`),
		"deploy/overlays/fake":                one(t, "fake overlay", read(t, "deploy/overlays/fake/kustomization.yaml"), `newTag: "?([^"\s]+)"?`),
		"deploy/overlays/local":               one(t, "local overlay", read(t, "deploy/overlays/local/kustomization.yaml"), `newTag: "?([^"\s]+)"?`),
		"docs/versions.md (the version)":      row("**the version**"),
		"docs/versions.md (appVersion)":       row("the Helm chart's `appVersion`"),
		"docs/versions.md (the images named)": one(t, "docs/versions.md images", row("the images the manifests name"), "cloud-controller-manager:([^`]+)`"),
	}
	for what, v := range got {
		if v != version {
			t.Errorf("%s says %q, Cargo.toml [workspace.package] says %q", what, v, version)
		}
	}
	if v := row("the Helm chart's own `version`"); v != chartVersion {
		t.Errorf("docs/versions.md says the chart's version is %q, Chart.yaml says %q", v, chartVersion)
	}
}
