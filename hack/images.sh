#!/usr/bin/env bash
# `make images`: the OCI images as OCI image layouts under _out/images/<name>
# (CCM_IMAGES_OUT overrides), each an image index for linux/amd64 and
# linux/arm64, built without a container daemon:
#
#   provider-base              users (65532 nonroot), CA certificates, /tmp; no shell
#   cloud-controller-manager   the base + /cloud-controller-manager
#   fake-provider              the base + /fake-provider
#   local-provider             the base + /local-provider
#
# The Rust binaries are static (musl) release builds in
# target/<triple>/release, built with CCM_BUILD_COMMIT so `--version` names
# the commit; hack/ocibuild (go-containerregistry) writes the layouts with
# every timestamp at SOURCE_DATE_EPOCH (the commit's time), so two builds of
# one commit have the same digests. A layout is rewritten only when its
# inputs (binaries, version, commit, epoch, ocibuild) changed.
#
# Needs: rustup's x86_64-/aarch64-unknown-linux-musl targets (added here)
# and a C compiler for each (ring and psm compile C): <arch>-linux-gnu-gcc,
# from Debian's gcc-x86-64-linux-gnu / gcc-aarch64-linux-gnu (the native one
# is the machine's gcc); .ci/run installs them.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${CCM_IMAGES_OUT:-$root/_out/images}
cd "$root"

version=$(sed -n '/^\[workspace\.package\]/,/^\[/ s/^version = "\(.*\)"$/\1/p' Cargo.toml)
[[ -n $version ]] || { echo "images: error: no version in Cargo.toml [workspace.package]" >&2; exit 1; }
commit=$(git rev-parse HEAD)
# A build of uncommitted changes says so; its timestamps are still the commit's.
[[ -z $(git status --porcelain --untracked-files=no) ]] || commit+=-dirty
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
source_url=$(sed -n '/^\[workspace\.package\]/,/^\[/ s/^repository = "\(.*\)"$/\1/p' Cargo.toml)

triples=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
declare -A platform=([x86_64-unknown-linux-musl]=linux/amd64 [aarch64-unknown-linux-musl]=linux/arm64)
# image name = binary name -> cargo package
declare -A package=([cloud-controller-manager]=cloud-controller-manager [fake-provider]=ccm-fake-provider [local-provider]=ccm-local-provider)
declare -A description=(
  [cloud-controller-manager]="The ccm-rs Kubernetes cloud-controller-manager; its cloud is a provider process reached over gRPC on a Unix socket."
  [fake-provider]="ccm-rs fake provider: an in-memory cloud with fault injection, for tests and demos."
  [local-provider]="ccm-rs local provider: instances from an inventory, load balancers as L4 proxies, routes in a kernel table."
  [provider-base]="ccm-rs base image for provider binaries (e.g. a Go adapter provider): users 65532 nonroot, CA certificates, no shell."
)

# The musl targets and a C cross compiler per target.
if command -v rustup >/dev/null; then
  installed=$(rustup target list --installed)
  for t in "${triples[@]}"; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t"
  done
fi
for t in "${triples[@]}"; do
  arch=${t%%-*}
  cc=$arch-linux-gnu-gcc
  command -v "$cc" >/dev/null || {
    echo "images: error: $cc not found (the C compiler for $t): apt-get install gcc-${arch//_/-}-linux-gnu" >&2
    exit 1
  }
  T=${t//-/_}
  export "CC_$T=$cc" "AR_$T=$arch-linux-gnu-ar"
  export "CARGO_TARGET_${T^^}_LINKER=$cc"
  # The checkout's and cargo's paths are not in the binaries: the same
  # commit builds the same bytes wherever it is checked out.
  export "CARGO_TARGET_${T^^}_RUSTFLAGS=--remap-path-prefix=$root=/src --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
done
export CCM_BUILD_COMMIT=$commit CARGO_INCREMENTAL=0
# The release profile (LTO) without the debug info std ships; symbols stay
# for readable panics.
export CARGO_PROFILE_RELEASE_STRIP=debuginfo

build_bin() {
  local start
  start=$(date +%s)
  ${CARGO:-cargo} build --locked --release --target "$1" -p "${package[$2]}" --bin "$2"
  echo "images: $2 for $1: $(( $(date +%s) - start ))s" >&2
}
# `hack/images.sh TRIPLE NAME` builds that one binary only (to split the
# release builds into steps).
if (($#)); then
  build_bin "$1" "$2"
  exit
fi
for t in "${triples[@]}"; do
  for name in cloud-controller-manager fake-provider local-provider; do
    build_bin "$t" "$name"
  done
done

# hack/ocibuild, built once per content of its sources.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
src=$root/hack/ocibuild
key=$( { cd "$src" && cat go.mod go.sum ./*.go; go version; echo ocibuild-v1; } | sha256sum | cut -c1-16)
cache=${CCM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccm-rs}/ocibuild/$key
if [[ ! -x $cache/ocibuild ]]; then
  mkdir -p "${cache%/*}"
  tmp=$(mktemp -d "${cache%/*}/tmp.XXXXXX")
  (cd "$src" && go build -o "$tmp/ocibuild" .) || { rm -rf "$tmp"; echo "images: error: building hack/ocibuild failed" >&2; exit 1; }
  rm -rf "$cache" && mv "$tmp" "$cache"
fi
find "${cache%/*}" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -mtime +7 -exec rm -rf {} + 2>/dev/null || true
touch "$cache"
ocibuild=$cache/ocibuild

mkdir -p "$out/.keys"
labels=(-version "$version" -revision "$commit" -epoch "$epoch" -source "$source_url")
# build NAME KEY-INPUTS... -- OCIBUILD-ARGS...: writes $out/NAME unless its key is current.
build() {
  local name=$1; shift
  local inputs=()
  while [[ $1 != -- ]]; do inputs+=("$1"); shift; done
  shift
  local k
  k=$( { printf '%s\n' "$key" "${labels[@]}" "$@"; sha256sum "${inputs[@]}" | cut -d' ' -f1; } | sha256sum | cut -c1-32)
  if [[ -f $out/$name/index.json && $(cat "$out/.keys/$name" 2>/dev/null) == "$k" ]]; then
    echo "images: $name: up to date" >&2
    return
  fi
  "$ocibuild" "$@" -out "$out/$name" -name "$name" -description "${description[$name]}" "${labels[@]}" >/dev/null
  echo "$k" >"$out/.keys/$name"
  echo "images: $name: written" >&2
}

build provider-base /dev/null -- base
for name in cloud-controller-manager fake-provider local-provider; do
  bins=() files=()
  for t in "${triples[@]}"; do
    f=target/$t/release/$name
    files+=("$f")
    bins+=(-bin "${platform[$t]}=$f")
  done
  build "$name" "${files[@]}" "$out/provider-base/index.json" -- app -base "$out/provider-base" -entrypoint "/$name" "${bins[@]}"
done

# name, index digest, size of all blobs.
for name in provider-base cloud-controller-manager fake-provider local-provider; do
  digest=$(sed -n 's/.*"digest": *"\([^"]*\)".*/\1/p' "$out/$name/index.json")
  printf '%-26s %s %s\n' "$name" "$digest" "$(du -sh "$out/$name/blobs" | cut -f1)"
done | tee "$out/digests.txt"
