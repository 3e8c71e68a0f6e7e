#!/usr/bin/env bash
# `make release` (after `make images tools-bin`): the versioned artifacts in
# _out/release/<version>/ (CCM_RELEASE_OUT overrides _out/release):
#
#   <image>-<version>.oci.tar   each image of _out/images as a tar of its OCI
#                               layout (skopeo copy --all oci-archive:FILE ...)
#   ccm-rs-<chart version>.tgz  the Helm chart (helm package)
#   sbom.cdx.json               CycloneDX SBOM of the shipped crates and data
#   CHANGELOG.md                the CHANGELOG section of the version
#   SHA256SUMS                  of every file above
#
# The version is the workspace's (Cargo.toml); the chart's appVersion must
# equal it, and every image's labels must (hack/ocibuild's tests check).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
images=${CCM_IMAGES_OUT:-$root/_out/images}
helm=$root/target/testenv/bin/helm
[[ -x $helm ]] || { echo "release: error: $helm missing: run make tools-bin" >&2; exit 1; }

version=$(sed -n '/^\[workspace\.package\]/,/^\[/ s/^version = "\(.*\)"$/\1/p' Cargo.toml)
app_version=$(sed -n 's/^appVersion: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' deploy/helm/ccm-rs/Chart.yaml)
[[ $app_version == "$version" ]] || {
  echo "release: error: deploy/helm/ccm-rs/Chart.yaml appVersion $app_version != Cargo.toml version $version (docs/versions.md)" >&2
  exit 1
}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
out=${CCM_RELEASE_OUT:-$root/_out/release}/$version
rm -rf "$out"
mkdir -p "$out"

names=(provider-base cloud-controller-manager fake-provider local-provider)
for name in "${names[@]}"; do
  [[ -f $images/$name/index.json ]] || { echo "release: error: $images/$name missing: run make images" >&2; exit 1; }
  got=$(grep -o '"org.opencontainers.image.ref.name": *"[^"]*"' "$images/$name/index.json" | sed 's/.*: *"\(.*\)"/\1/')
  [[ $got == "$version" ]] || { echo "release: error: $images/$name is version $got, not $version: run make images" >&2; exit 1; }
  # Sorted, owned by root, stamped with the epoch: the same layout gives
  # the same tar.
  tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --mode=u=rwX,go=rX \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$images/$name" -cf "$out/$name-$version.oci.tar" oci-layout index.json blobs
done

"$helm" package deploy/helm/ccm-rs --destination "$out" >/dev/null

# The SBOM: the crates the three binaries link on each image platform.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
metas=()
for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
  ${CARGO:-cargo} metadata --locked --format-version 1 --filter-platform "$t" >"$out/.metadata-$t.json"
  metas+=("$out/.metadata-$t.json")
done
(cd hack/ocibuild && go run . sbom -lock "$root/Cargo.lock" -version "$version" -epoch "$epoch" \
  -roots cloud-controller-manager,ccm-fake-provider,ccm-local-provider "${metas[@]}") >"$out/sbom.cdx.json"
rm -f "${metas[@]}"

# The version's CHANGELOG section; before its release that is "Unreleased".
section() { awk -v h="$1" '$0 == h { on = 1; print; next } on && /^## / { exit } on' CHANGELOG.md; }
notes=$(section "## [$version]")
if [[ -z $notes ]]; then
  echo "release: CHANGELOG.md has no \"## [$version]\" section yet: taking \"## [Unreleased]\"" >&2
  notes=$(section "## [Unreleased]")
fi
[[ -n $notes ]] || { echo "release: error: no CHANGELOG.md section for $version" >&2; exit 1; }
printf '%s\n' "$notes" >"$out/CHANGELOG.md"

(cd "$out" && sha256sum -- * | LC_ALL=C sort -k2 >SHA256SUMS)
echo "release: $out" >&2
ls -l "$out" >&2
