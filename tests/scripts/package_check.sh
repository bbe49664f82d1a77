#!/usr/bin/env bash
# Builds the .deb and .tar.gz from a finished build and checks them: lintian
# reports no errors, the .deb declares computed library dependencies, and the
# tarball holds the same programs.
# usage: package_check.sh BUILD_DIR
set -euo pipefail
build=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "package_check: $*" >&2; exit 1; }
cpack --config "$build/CPackConfig.cmake" -G "DEB;TGZ" -B "$out" > "$out/cpack.log" 2>&1 || { cat "$out/cpack.log" >&2; fail "cpack failed"; }
deb=$(ls "$out"/stowage_*.deb)
tgz=$(ls "$out"/stowage-*.tar.gz)
# dpkg-shlibdeps computed these; a hand-made list would miss LibTorch or Qt.
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libtorch1.13 libqt6widgets6 libqt6core6 libstdc++6; do
  grep -q "$lib" <<< "$depends" || fail "Depends lacks $lib: $depends"
done
# Listed first, then searched: `lister | grep -q` under pipefail fails when grep
# stops reading at the first match and the lister dies of SIGPIPE.
deb_files=$(dpkg-deb -c "$deb")
tgz_files=$(tar -tzf "$tgz")
grep -q "./usr/share/stowage/demo/model.safetensors.index.json" <<< "$deb_files" || fail "the demo is not in the .deb"
grep -q "bin/stowage-cli$" <<< "$tgz_files" || fail "stowage-cli is not in the tarball"
# Errors fail; warnings (no manual page, ldconfig in maintainer scripts) are listed.
lintian --fail-on error "$deb" > "$out/lintian.txt" 2>&1 || { cat "$out/lintian.txt" >&2; fail "lintian reports errors on $(basename "$deb")"; }
grep -v "root privileges" "$out/lintian.txt" || true
echo "package_check: $(basename "$deb") ($(stat -c %s "$deb") bytes) and $(basename "$tgz"): lintian without errors"
