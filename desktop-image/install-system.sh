#!/usr/bin/env bash
# Installs the Debian 12 packages codedesk needs and creates the desktop user.
# Idempotent and quick when everything is present. Used by the Dockerfile,
# `make install` and CI alike.
set -euo pipefail

PACKAGES=(
  # display, desktop and applications
  xvfb xauth x11-xserver-utils x11-utils xfce4 xfce4-terminal thunar mousepad ristretto
  dbus-x11 at-spi2-core xdg-utils chromium
  # viewer
  x11vnc novnc websockify
  # desktop tools
  xdotool wmctrl xclip
  # fonts
  fonts-dejavu fonts-noto-core fonts-noto-cjk fonts-noto-color-emoji
  # documents
  tesseract-ocr tesseract-ocr-eng libreoffice-core libreoffice-writer libreoffice-calc
  libreoffice-impress poppler-utils
  # process tools used by tests and the session
  procps psmisc iproute2 sudo
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The unprivileged user that owns every desktop process and exec'd program.
DESKTOP_USER="${CODEDESK_DESKTOP_USER:-desktop}"
if ! id "$DESKTOP_USER" >/dev/null 2>&1; then
  $SUDO useradd --create-home --shell /bin/bash "$DESKTOP_USER"
fi
