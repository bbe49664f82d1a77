#!/usr/bin/env bash
# Installs the build into a staging root and runs the installed programs from
# there: the CLI must find the installed demo and plugin, the window must
# render its screenshot, and the desktop metadata must validate.
# usage: install_check.sh BUILD_DIR
set -euo pipefail
build=$1
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cmake --install "$build" --prefix "$stage/usr" > "$stage/install.log"
usr=$stage/usr
fail() { echo "install_check: $*" >&2; exit 1; }

for f in bin/stowage bin/stowage-cli lib/stowage/libstowage_run.so share/stowage/demo/config.json \
         share/applications/org.stowage.Stowage.desktop share/metainfo/org.stowage.Stowage.metainfo.xml \
         share/icons/hicolor/scalable/apps/org.stowage.Stowage.svg share/icons/hicolor/48x48/apps/org.stowage.Stowage.png \
         share/doc/stowage/copyright share/doc/stowage/changelog.gz; do
  [ -e "$usr/$f" ] || fail "$f is not installed"
done

# The installed CLI opens the installed demo (not the build's)...
"$usr/bin/stowage-cli" inspect > "$stage/inspect.txt"
head -1 "$stage/inspect.txt" | grep -q "^$usr/share/stowage/demo/" || fail "inspect did not open the installed demo: $(head -1 "$stage/inspect.txt")"
# ...and runs it through the installed plugin: "And God said" is <s> + the
# ids tools/train_demo's tokenizer gives for it.
"$usr/bin/stowage-cli" run --prompt "And God said" --max-new-tokens 8 --ignore-eos --json > "$stage/run.json"
/usr/bin/python3 - "$stage/run.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["prompt_ids"] == [0, 297, 388, 389], j["prompt_ids"]
assert len(j["token_ids"]) == 8, j["token_ids"]
assert j["text"].strip(), "no text"
PY

# The installed window renders a screenshot of the demo's plan.
QT_QPA_PLATFORM=offscreen "$usr/bin/stowage" --screenshot "$stage/shot.png" > "$stage/gui.log" 2>&1 || { cat "$stage/gui.log" >&2; fail "stowage --screenshot failed"; }
[ "$(stat -c %s "$stage/shot.png")" -gt 20000 ] || fail "the screenshot is suspiciously small"

desktop-file-validate "$usr/share/applications/org.stowage.Stowage.desktop"
appstreamcli validate --no-net "$usr/share/metainfo/org.stowage.Stowage.metainfo.xml" > /dev/null
echo "install_check: installed into $usr and ran stowage-cli run and stowage --screenshot from there"
