#!/usr/bin/env bash
# Installs llama.cpp's llama-server (plus llama-cli etc.) from Debian sid (unstable) packages into a
# private prefix, runnable on older distributions such as Debian 12: sid's binaries need a newer
# glibc/libstdc++ than the host has, so we unpack sid's own libc6 too and start every binary through
# sid's dynamic loader. No root, no chroot, nothing under /usr or the system's apt configuration.
#
# Usage: tools/engines/install-llama-cpp.sh [PREFIX]     (default: build/engines/llama.cpp)
# Env:   LLAMA_CPP_PREFIX      prefix when no argument is given
#        LLAMA_CPP_FORCE=1     reinstall even if the prefix already works
#        LLAMA_CPP_PACKAGES    packages to install (default: llama.cpp-tools; add e.g.
#                              llama.cpp-tools-extra for ggml-rpc-server and llama-tokenize)
#        LLAMA_CPP_MIRROR / LLAMA_CPP_SUITE / LLAMA_CPP_KEYRING   (deb.debian.org / sid / Debian keyring)
# Result: PREFIX/bin/llama-server, PREFIX/bin/llama-cli, ... (wrappers, safe to symlink elsewhere)
set -euo pipefail

die() { echo "install-llama-cpp: error: $*" >&2; exit 1; }
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=${1:-${LLAMA_CPP_PREFIX:-$root/build/engines/llama.cpp}}
mirror=${LLAMA_CPP_MIRROR:-http://deb.debian.org/debian}
suite=${LLAMA_CPP_SUITE:-sid}
keyring=${LLAMA_CPP_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
packages=${LLAMA_CPP_PACKAGES:-llama.cpp-tools}
stamp_name=.install-llama-cpp.stamp

# Fast path: already installed and the wrapper actually runs.
if [ -z "${LLAMA_CPP_FORCE:-}" ] && [ -f "$prefix/$stamp_name" ] &&
   "$prefix/bin/llama-server" --version >/dev/null 2>&1; then
  echo "llama.cpp already installed in $prefix ($(head -n1 "$prefix/$stamp_name"))"
  exit 0
fi

for tool in apt-get dpkg-deb dpkg readlink; do
  command -v "$tool" >/dev/null || die "'$tool' not found (needs a Debian/Ubuntu host)"
done
# The loader name and multiarch paths below are x86_64-specific.
[ "$(dpkg --print-architecture)" = amd64 ] || die "only amd64 hosts are supported"
[ -r "$keyring" ] || die "keyring $keyring missing (install debian-archive-keyring or set LLAMA_CPP_KEYRING)"
tri=x86_64-linux-gnu

mkdir -p "$(dirname "$prefix")"
prefix=$(cd "$(dirname "$prefix")" && pwd)/$(basename "$prefix")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/install-llama-cpp.XXXXXX")
stage=$prefix.partial
trap 'rm -rf "$tmp" "$stage"' EXIT
log=$tmp/apt.log
fail() { tail -n 15 "$log" >&2 2>/dev/null || true; die "$*"; }

# A throw-away apt "system": own sources, lists, cache and an (almost) empty dpkg status, so apt
# resolves the complete runtime closure from sid, independent of what the host has installed.
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/empty.d"
echo "deb [signed-by=$keyring] $mirror $suite main" > "$tmp/sources.list"
# Stubs for dependencies that are not needed to run the binaries: debconf (maintainer scripts only),
# wget|curl (a Debian packaging dependency; no binary links against or needs them).
for p in debconf wget; do
  printf 'Package: %s\nStatus: install ok installed\nVersion: 9999\nArchitecture: amd64\nMaintainer: stub\nDescription: stub\n\n' "$p"
done > "$tmp/status"
apt=(apt-get -q -o Dir::Etc::sourcelist="$tmp/sources.list" -o Dir::Etc::sourceparts=-
     -o Dir::Etc::preferences="$tmp/none" -o Dir::Etc::preferencesparts="$tmp/empty.d"
     -o Dir::State="$tmp" -o Dir::State::Lists="$tmp/lists" -o Dir::State::status="$tmp/status"
     -o Dir::Cache="$tmp/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User=root
     -o APT::Architecture=amd64 -o APT::Architectures=amd64 -o APT::Default-Release=
     -o APT::Install-Recommends=0 -o APT::Install-Suggests=0 -o Acquire::Languages=none)

echo "install-llama-cpp: resolving $packages from $suite ..."
"${apt[@]}" update >"$log" 2>&1 || fail "apt-get update for $mirror $suite failed"
# No libggml0-backend-blas: the CPU backend is faster than reference BLAS and the BLAS backend would
# pick up whatever libblas.so.3 the host has.
# shellcheck disable=SC2086
"${apt[@]}" -y --download-only install $packages >>"$log" 2>&1 || fail "resolving/downloading $packages from $suite failed"
debs=("$tmp"/cache/archives/*.deb)
[ -e "${debs[0]}" ] || fail "apt downloaded no packages"

echo "install-llama-cpp: unpacking ${#debs[@]} packages ($(du -ch "${debs[@]}" | tail -n1 | cut -f1)) ..."
rm -rf "$stage"; mkdir -p "$stage/bin"
for deb in "${debs[@]}"; do
  dpkg-deb -x "$deb" "$stage" || die "unpacking $(basename "$deb") failed"
done
lib=$stage/usr/lib/$tri
[ -f "$lib/ld-linux-x86-64.so.2" ] || die "sid libc6 has no $lib/ld-linux-x86-64.so.2"

# ggml picks its CPU backend variant (libggml-cpu-haswell.so, -zen4, ...) at run time by scanning
# the compiled-in /usr/lib/$tri/ggml/backends0 (absent here), the executable's directory and the
# current directory. Started through ld.so, the "executable" (/proc/self/exe) is the loader itself,
# so linking the backends next to the loader makes ggml find them. (GGML_BACKEND_PATH only loads a
# single backend file, not the best variant.)
backends=("$lib"/ggml/backends*/libggml-*.so)
[ -e "${backends[0]}" ] || die "no ggml backends found under $lib/ggml"
for b in "${backends[@]}"; do ln -sfn "${b#"$lib/"}" "$lib/"; done

# Wrappers: sid loader + sid libraries only (--inhibit-cache skips the host's /etc/ld.so.cache;
# the llama/ dir replaces the binaries' absolute RUNPATH /usr/lib/$tri/llama).
for exe in "$stage"/usr/bin/llama-* "$stage/usr/libexec/$tri/llama/bin"/*; do
  [ -f "$exe" ] || continue
  cat > "$stage/bin/$(basename "$exe")" <<EOF
#!/bin/sh
# Generated by tools/engines/install-llama-cpp.sh: runs Debian sid's binary via sid's own loader.
p=\$(dirname "\$(readlink -f "\$0")")/..
l=\$p/usr/lib/$tri
export OPENSSL_MODULES="\$l/ossl-modules"
exec "\$l/ld-linux-x86-64.so.2" --inhibit-cache --argv0 "\$0" --library-path "\$l:\$l/llama" "\$p/${exe#"$stage/"}" "\$@"
EOF
  chmod +x "$stage/bin/$(basename "$exe")"
done
[ -x "$stage/bin/llama-server" ] || die "llama-server missing from $packages"

# Check it runs and loads a CPU backend: a missing model must fail at the model, not the backends.
out=$("$stage/bin/llama-server" --version 2>&1) || die "unpacked llama-server does not run: $(tail -n1 <<<"$out")"
version=$(grep -m1 -o '^version: .*' <<<"$out") || die "unexpected llama-server --version output: $out"
version=${version#version: }
probe=$("$stage/bin/llama-server" -lv 4 --host 127.0.0.1 --port 0 -m "$tmp/none.gguf" 2>&1 || true)
cpu=$(grep -o 'loaded CPU backend from .*' <<<"$probe" | head -n1) ||
  die "llama-server could not load a ggml CPU backend: $(grep -m1 -i backend <<<"$probe")"

printf '%s\n%s\n' "$version" "${cpu##*/}" > "$stage/$stamp_name"
(cd "$tmp/cache/archives" && ls ./*.deb) >> "$stage/$stamp_name"
rm -rf "$prefix"; mv "$stage" "$prefix"
echo "install-llama-cpp: installed llama.cpp $version (CPU backend ${cpu##*/}) in $prefix"
