#!/usr/bin/env bash
# Installs what Stowage needs to build and test on Debian 12, only when missing.
set -euo pipefail
packages=(cmake ninja-build g++ ccache pkg-config
  qt6-base-dev qt6-charts-dev libqt6opengl6-dev libgl-dev
  libtorch-dev libopenblas0-pthread nlohmann-json3-dev
  libpcre2-dev libutf8proc-dev libsentencepiece-dev
  python3-torch python3-numpy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
