#!/usr/bin/env python3
"""The engine's layers include only downward (docs/architecture.md):

    formats <- model <- plan <- runtime;  tokenizer uses formats only.

Every public header in engine/include/stowage/ belongs to one layer (the
table below); a source file in engine/LAYER/ may include headers of its own
layer and of the layers below it, never above. Also: no Qt anywhere in the
engine, no LibTorch outside engine/runtime/, none in a public header.
Exit 1 with one line per violation."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"

LAYERS = ["formats", "model", "plan", "runtime"]
HEADERS = {
    "formats": ["checkpoint.h", "config.h", "dtype.h", "error.h", "fileio.h", "formats.h", "hubcache.h",
                "mappedfile.h", "offloadfolder.h", "safetensorswriter.h", "tensorinfo.h", "units.h"],
    "model": ["moduletree.h", "families.h"],
    "plan": ["device.h", "planner.h", "kvcache.h", "costmodel.h", "hardware.h", "moduledevices.h",
             "placementlayout.h"],
    "runtime": ["runtime.h", "session.h", "telemetry.h"],
    "tokenizer": ["tokenizer.h"],
}
# What each folder may include, beyond its own headers.
ALLOWED = {
    "formats": {"formats"},
    "model": {"formats", "model"},
    "plan": {"formats", "model", "plan"},
    "runtime": {"formats", "model", "plan", "runtime", "tokenizer"},
    "tokenizer": {"formats", "tokenizer"},
}

layer_of = {h: layer for layer, hs in HEADERS.items() for h in hs}
problems = []

public = sorted(p.name for p in (ENGINE / "include" / "stowage").glob("*.h"))
for name in public:
    if name not in layer_of:
        problems.append(f"engine/include/stowage/{name}: not assigned to a layer in tests/scripts/check_layers.py")

include_re = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def check(path: pathlib.Path, folder: str):
    text = path.read_text(encoding="utf-8", errors="replace")
    rel = path.relative_to(ROOT)
    for inc in include_re.findall(text):
        if inc.startswith(("Q", "qt")) or "/Q" in inc:
            problems.append(f"{rel}: includes Qt ({inc}); the engine has no Qt")
        if inc.startswith(("torch/", "ATen/", "c10/", "caffe2/")) and folder != "runtime":
            problems.append(f"{rel}: includes LibTorch ({inc}) outside engine/runtime")
        if inc.startswith("stowage/"):
            h = inc.split("/", 1)[1]
            layer = layer_of.get(h)
            if layer and layer not in ALLOWED[folder]:
                problems.append(f"{rel}: {folder} includes {inc}, which belongs to {layer} (above it)")


for folder in ALLOWED:
    for path in sorted((ENGINE / folder).rglob("*")):
        if path.suffix in (".cpp", ".h"):
            check(path, folder)
for name in public:
    layer = layer_of.get(name)
    path = ENGINE / "include" / "stowage" / name
    if layer:
        check(path, layer)
    if re.search(r'#\s*include\s*[<"](torch|ATen|c10)/', path.read_text()):
        problems.append(f"engine/include/stowage/{name}: a public header includes LibTorch")

for p in problems:
    print(p)
if problems:
    sys.exit(1)
print(f"engine layers: {len(public)} public headers, includes only downward")
