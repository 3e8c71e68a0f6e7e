#!/usr/bin/env bash
# `make test-images` (after `make images`): hack/ocibuild's TestImages
# unpacks each image for this machine's architecture and runs its entrypoint
# as its user (and a Go provider put on the base image as docs/deploy.md
# says); then the images are written again from the same inputs into
# another directory and must have the same digests (reproducible).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
images=${CCM_IMAGES_OUT:-$root/_out/images}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A Go adapter provider on the base image, the way docs/deploy.md ("Your
# provider on the base image") says: the Go example, both architectures.
for arch in amd64 arm64; do
  (cd "$root/providers/examples/go-fake" && GOOS=linux GOARCH=$arch go build -o "$work/$arch/go-fake" .)
done
(cd "$root/hack/ocibuild" && go run . app -base "$images/provider-base" -out "$work/go-fake" -entrypoint /go-fake \
  -bin "linux/amd64=$work/amd64/go-fake" -bin "linux/arm64=$work/arm64/go-fake" \
  -name go-fake -version 1.0.0 -revision "$(git -C "$root" rev-parse HEAD)" \
  -epoch "$(git -C "$root" log -1 --format=%ct)") >/dev/null

(cd "$root/hack/ocibuild" && CCM_IMAGES_DIR=$images CCM_GO_PROVIDER_IMAGE=$work/go-fake go test -count=1 -run '^TestImages$' -v .)

again=$work/again
CCM_IMAGES_OUT=$again "$root/hack/images.sh" 2>/dev/null >/dev/null
if ! diff <(cut -d' ' -f1,2 <(tr -s ' ' <"$images/digests.txt")) <(cut -d' ' -f1,2 <(tr -s ' ' <"$again/digests.txt")); then
  echo "test-images: a second build of the same inputs has other digests (above)" >&2
  exit 1
fi
echo "test-images: a second build has the same digests"
