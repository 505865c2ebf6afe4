#!/usr/bin/env bash
# Makes a Debian 12 base image from Debian's packages, for build hosts that can install
# packages but cannot pull images from a registry: debootstrap (minbase) from the mirror this
# host's apt is configured with, imported into Docker as TAG (default codedesk-base:bookworm).
#
#   desktop-image/make-base-image.sh [TAG]
#
# The image is what `debian:12-slim` is for the Dockerfile: apt, the mirror's sources (main,
# updates, security), no docs, no apt caches. Needs root and debootstrap (installed if missing).
set -euo pipefail

TAG="${1:-codedesk-base:bookworm}"
SUITE=bookworm
DOCKER="${DOCKER:-docker}"

if [ "$(id -u)" -ne 0 ]; then
  echo "make-base-image.sh: debootstrap needs root; run it as root (or with sudo)" >&2
  exit 1
fi

# The host's Debian mirrors, as apt is configured here (deb822 or one-line format).
sources_uris() {
  { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p'
  } | sed 's:/*$::'
}
MIRROR="${CODEDESK_DEBIAN_MIRROR:-$(sources_uris | grep -m1 -E '/debian$' || true)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY="${CODEDESK_DEBIAN_SECURITY_MIRROR:-$(sources_uris | grep -m1 -E '/debian-security$' || true)}"
SECURITY="${SECURITY:-http://deb.debian.org/debian-security}"

if ! command -v debootstrap >/dev/null; then
  echo "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

root="$(mktemp -d /var/tmp/codedesk-base.XXXXXX)"
trap 'rm -rf --one-file-system "$root"' EXIT
echo "making the base image $TAG: debootstrap $SUITE (minbase) from $MIRROR"
debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >"$root.log" 2>&1 || {
  tail -20 "$root.log" >&2
  echo "make-base-image.sh: debootstrap from $MIRROR failed (log above, full log in $root.log)" >&2
  exit 1
}
rm -f "$root.log"

cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
rm -f "$root/etc/apt/sources.list"

# A mirror that serves a fixed snapshot has Release files past their Valid-Until date: keep the
# host's setting for that, so apt in the image accepts what apt on this host accepts.
if apt-config dump 2>/dev/null | grep -q '^Acquire::Check-Valid-Until "false"'; then
  printf 'Acquire::Check-Valid-Until "false";\n' >"$root/etc/apt/apt.conf.d/99codedesk-mirror"
fi
# What debian:12-slim does: no apt caches, no docs, man pages or translations in layers.
printf 'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n' >"$root/etc/apt/apt.conf.d/docker-clean"
printf 'Acquire::Languages "none";\n' >"$root/etc/apt/apt.conf.d/docker-no-languages"
install -m 0644 "$(dirname "$0")/dpkg-slim.cfg" "$root/etc/dpkg/dpkg.cfg.d/docker-slim"
find "$root/usr/share/doc" -mindepth 2 ! -name copyright -type f -delete 2>/dev/null || true
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + 2>/dev/null || true
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/cache/apt/*.bin \
  "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log

tar --numeric-owner -C "$root" -c . | "$DOCKER" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' \
  --message "debootstrap --variant=minbase $SUITE from $MIRROR" - "$TAG" >/dev/null
echo "base image $TAG made from Debian's packages ($MIRROR)"
