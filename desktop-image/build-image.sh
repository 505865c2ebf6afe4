#!/usr/bin/env bash
# Builds the container image (what `make image` runs):
#
#   desktop-image/build-image.sh [TAG]          (default codedesk:latest)
#
# - The base: $CODEDESK_BASE_IMAGE (default debian:12-slim) when it is here or can be pulled;
#   otherwise a Debian 12 base made from Debian's packages (make-base-image.sh: debootstrap
#   from this host's apt mirror, imported as codedesk-base:bookworm), and it says so.
# - Extra certificate authorities: the ones this host trusts for its mirrors
#   (/usr/local/share/ca-certificates/*.crt, or the files in $CODEDESK_BUILD_CA) are handed to
#   the build stage only (desktop-image/build-ca/); the published image does not contain them.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG="${1:-codedesk:latest}"
BASE="${CODEDESK_BASE_IMAGE:-debian:12-slim}"
MADE_BASE="codedesk-base:bookworm"
DOCKER="${DOCKER:-docker}"

if ! "$DOCKER" info >/dev/null 2>&1; then
  echo "build-image.sh: no Docker engine answers ('$DOCKER info' failed); start dockerd" \
       "(Debian: apt-get install docker.io, then dockerd &) and try again" >&2
  exit 1
fi

if "$DOCKER" image inspect "$BASE" >/dev/null 2>&1; then
  echo "base image: $BASE (present)"
elif timeout 120 "$DOCKER" pull -q "$BASE" >/dev/null 2>&1; then
  echo "base image: $BASE (pulled)"
else
  if "$DOCKER" image inspect "$MADE_BASE" >/dev/null 2>&1; then
    echo "base image: $BASE cannot be pulled here; using $MADE_BASE, made earlier from Debian's packages"
  else
    echo "base image: $BASE cannot be pulled here; making $MADE_BASE from Debian's packages (debootstrap)"
    DOCKER="$DOCKER" bash desktop-image/make-base-image.sh "$MADE_BASE"
  fi
  BASE="$MADE_BASE"
fi

# Extra CAs for the build stage; stale ones from an earlier build never linger.
rm -f desktop-image/build-ca/*.crt
shopt -s nullglob
cas=()
if [ -n "${CODEDESK_BUILD_CA:-}" ]; then
  for f in $CODEDESK_BUILD_CA; do cas+=("$f"); done
else
  cas=(/usr/local/share/ca-certificates/*.crt /usr/local/share/ca-certificates/*/*.crt)
fi
for f in "${cas[@]}"; do
  cp "$f" "desktop-image/build-ca/$(basename "$f")"
done
[ "${#cas[@]}" -gt 0 ] && echo "build stage trusts ${#cas[@]} extra certificate authorities of this host (not in the image)"
trap 'rm -f desktop-image/build-ca/*.crt' EXIT

started=$SECONDS
"$DOCKER" build --build-arg "BASE=$BASE" -t "$TAG" . 2>&1 \
  | grep -v -e '^DEPRECATED: The legacy builder' -e 'Install the buildx component' -e 'https://docs.docker.com/go/buildx/' -e '^ *$'
size=$("$DOCKER" image inspect -f '{{.Size}}' "$TAG")
echo "image $TAG built in $((SECONDS - started)) s: $((size / 1000000)) MB"
