#!/usr/bin/env bash
# Fills build/gpu-deps with what tests/gpu/device_check.sh needs on a GPU
# machine that has a PyTorch wheel but cannot install packages: the
# nlohmann/json header and the Debian 12 packages of PCRE2 and utf8proc (the
# tokenizer's two libraries), which device_check.sh unpacks there when that
# machine lacks them. Run it here, on Debian 12, then carry build/gpu-deps.
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=${1:-build/gpu-deps}
mkdir -p "$deps/debs"
[ -f /usr/include/nlohmann/json.hpp ] || { echo "nlohmann-json3-dev is not installed (.ci/setup.sh installs it)" >&2; exit 1; }
cp -r /usr/include/nlohmann "$deps/"
(cd "$deps/debs" && apt-get download -q libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
   libutf8proc-dev libutf8proc2 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
ls "$deps"/debs/*.deb > /dev/null
echo "$deps: $(du -sh "$deps" | cut -f1)"
