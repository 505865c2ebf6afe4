#!/usr/bin/env bash
# Installs the Debian 12 packages codedesk needs and creates the session's users.
# Idempotent and quick when everything is present (one dpkg-query, no apt).
# Used by the Dockerfile, `make install` and CI alike.
#
#   install-system.sh [--no-build-tools]
#
# By default it also installs what pip needs to build the one dependency that ships no wheel
# (evdev, required by pynput on Linux: a C compiler, Python's and the kernel's headers). The
# container's final stage passes --no-build-tools: its virtualenv is built in the build stage.
set -euo pipefail

BUILD_TOOLS=1
for arg in "$@"; do
  case "$arg" in
    --no-build-tools) BUILD_TOOLS=0 ;;
    *) echo "install-system.sh: unknown option $arg (use --no-build-tools)" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  # Python (the virtualenv's interpreter) and setpriv (util-linux: every drop to a session user)
  python3 python3-venv util-linux ca-certificates
  # Playwright's own Node.js needs it (gcc brings it on a build host, nothing does in the image)
  libatomic1
  # display, desktop and applications
  xvfb xauth x11-xserver-utils x11-utils xfce4 xfce4-terminal thunar mousepad ristretto
  dbus dbus-x11 at-spi2-core xdg-utils exo-utils xfconf libglib2.0-bin chromium
  # viewer
  x11vnc novnc websockify
  # desktop tools
  xdotool wmctrl xclip
  # fonts
  fonts-dejavu fonts-noto-core fonts-noto-cjk fonts-noto-color-emoji
  # documents
  tesseract-ocr tesseract-ocr-eng libreoffice-core libreoffice-writer libreoffice-calc
  libreoffice-impress poppler-utils
  # the files server: search (ripgrep), patch (GNU patch), binary files named by type (file)
  ripgrep patch file
  # process tools used by tests and the session
  procps psmisc iproute2
  # the egress firewall (runtime/desktop/firewall.py)
  nftables
  # screen video (runtime/desktop/video.py)
  ffmpeg
)
if [ "$BUILD_TOOLS" = 1 ]; then
  PACKAGES+=(gcc libc6-dev linux-libc-dev python3-dev)
fi

# The tests' own tools (make test sets this; the image does not): tsc type-checks scripts
# against the generated declarations.
if [ "${CODEDESK_TEST_TOOLS:-}" = 1 ]; then PACKAGES+=(node-typescript); fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# One dpkg-query for the whole list: packages it does not print, or prints as not
# installed, are missing.
declare -A installed=()
while read -r name status; do
  [ "$status" = "install ok installed" ] && installed["$name"]=1
done < <(dpkg-query -W -f='${Package} ${Status}\n' "${PACKAGES[@]}" 2>/dev/null || true)
missing=()
for p in "${PACKAGES[@]}"; do
  [ -n "${installed[$p]:-}" ] || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The unprivileged user that owns every desktop process, capability server and exec'd program.
DESKTOP_USER="${CODEDESK_DESKTOP_USER:-desktop}"
if ! id "$DESKTOP_USER" >/dev/null 2>&1; then
  $SUDO useradd --create-home --shell /bin/bash "$DESKTOP_USER"
fi
# The viewer's user (x11vnc, websockify): it holds the viewer's secret, so it is not the desktop
# user. A system account: no home, no shell, no password.
VIEWER_USER="${CODEDESK_VIEWER_USER:-codedesk-view}"
if ! id "$VIEWER_USER" >/dev/null 2>&1; then
  $SUDO useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$VIEWER_USER"
fi

# The runtime's user in the container (`codedesk serve` as non-root; it holds the HTTP token and
# asks the session supervisor to start capability servers as the desktop user). Unused on a host
# where the runtime runs as root or as a developer.
RUNTIME_USER="${CODEDESK_RUNTIME_USER:-codedesk}"
if ! id "$RUNTIME_USER" >/dev/null 2>&1; then
  $SUDO useradd --system --create-home --home-dir "/home/$RUNTIME_USER" --shell /usr/sbin/nologin "$RUNTIME_USER"
fi

# X servers run as that user; the socket directory must exist, root-owned and sticky, first.
if [ ! -d /tmp/.X11-unix ]; then
  $SUDO install -d -m 1777 -o root -g root /tmp/.X11-unix
fi
