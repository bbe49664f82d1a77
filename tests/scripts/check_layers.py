#!/usr/bin/env python3
"""Every folder includes only what lies below it (docs/architecture.md).

The engine:

    formats <- model <- plan <- runtime;  tokenizer uses formats only;
    export (GGUF) uses model and tokenizer.

Every public header in engine/include/stowage/ belongs to one layer (the
table below); a source file in engine/LAYER/ may include headers of its own
layer and of the layers below it, never above. Also: no Qt anywhere in the
engine, no LibTorch outside engine/runtime/, none in a public header.

Above the engine:

    widgets/models <- widgets/views <- app/gui;  app/run (the worker's client)
    under app/gui;  app/cli and app/worker (the worker process) apart.

widgets/models never include views or anything in app/; widgets/views never
include app/; app/gui and app/run never include app/cli or app/worker;
nothing in widgets/, app/gui or app/run includes the runtime (model.h,
generate.h, runtimeinfo.h, session.h, telemetry.h) or LibTorch: the window
never links it, it talks to the worker process; app/cli, app/worker and
app/protocol (the wire words both ends share) never include Qt.

Usage: check_layers.py [--root DIR] (DIR defaults to this repository).
Exit 1 with one line per violation, each naming the file and the include."""
import argparse
import pathlib
import re
import sys

LAYERS = ["formats", "model", "plan", "runtime"]
HEADERS = {
    "formats": ["checkpoint.h", "config.h", "dtype.h", "error.h", "fileio.h", "hubcache.h", "mappedfile.h",
                "offloadfolder.h", "safetensors.h", "safetensorswriter.h", "tensorinfo.h", "torchbin.h",
                "units.h"],
    "model": ["moduletree.h", "families.h", "quantization.h"],
    "plan": ["device.h", "planner.h", "kvcache.h", "costmodel.h", "hardware.h", "moduledevices.h",
             "placementlayout.h", "shop.h", "gpuorder.h", "deploy.h",
             "runtimeenv.h"],
    "runtime": ["generate.h", "model.h", "runtimeinfo.h", "session.h", "telemetry.h"],
    "tokenizer": ["tokenizer.h", "chattemplate.h"],
    "export": ["gguf.h"],
}
# What each engine folder may include, beyond its own headers.
ALLOWED = {
    "formats": {"formats"},
    "model": {"formats", "model"},
    "plan": {"formats", "model", "plan"},
    "runtime": {"formats", "model", "plan", "runtime", "tokenizer"},
    "tokenizer": {"formats", "tokenizer"},
    "export": {"formats", "model", "tokenizer", "export"},
}

# The folders above the engine: which of their siblings' headers each may
# not include, and whether it may see the runtime or Qt.
APP = ["app/gui", "app/run", "app/cli", "app/worker"]
FRONT = {
    "widgets/models": {"forbidden": ["widgets/views"] + APP, "runtime": False, "qt": True},
    "widgets/views": {"forbidden": APP, "runtime": False, "qt": True},
    "app/gui": {"forbidden": ["app/cli", "app/worker"], "runtime": False, "qt": True},
    "app/run": {"forbidden": ["app/gui", "app/cli", "app/worker"], "runtime": False, "qt": True},
    "app/cli": {"forbidden": ["app/gui", "app/run"], "runtime": True, "qt": False},
    "app/worker": {"forbidden": ["app/gui", "app/run"], "runtime": True, "qt": False},
    "app/protocol": {"forbidden": ["widgets/models", "widgets/views"] + APP, "runtime": False, "qt": False},
}

TORCH = ("torch/", "ATen/", "c10/", "caffe2/")
include_re = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
layer_of = {h: layer for layer, hs in HEADERS.items() for h in hs}


def is_qt(inc):
    return inc.startswith(("Q", "qt")) or "/Q" in inc


def sources(folder: pathlib.Path):
    if not folder.is_dir():
        return []
    return [p for p in sorted(folder.rglob("*")) if p.suffix in (".cpp", ".h") and p.is_file()]


def check_engine(root: pathlib.Path, problems: list):
    engine = root / "engine"
    public = sorted(p.name for p in (engine / "include" / "stowage").glob("*.h"))
    for name in public:
        if name not in layer_of:
            problems.append(f"engine/include/stowage/{name}: not assigned to a layer in tests/scripts/check_layers.py")

    def check(path: pathlib.Path, folder: str):
        text = path.read_text(encoding="utf-8", errors="replace")
        rel = path.relative_to(root).as_posix()
        for inc in include_re.findall(text):
            if is_qt(inc):
                problems.append(f"{rel}: includes Qt ({inc}); the engine has no Qt")
            if inc.startswith(TORCH) and folder != "runtime":
                problems.append(f"{rel}: includes LibTorch ({inc}) outside engine/runtime")
            if inc.startswith("stowage/"):
                layer = layer_of.get(inc.split("/", 1)[1])
                if layer and layer not in ALLOWED[folder]:
                    problems.append(f"{rel}: {folder} includes {inc}, which belongs to {layer} (above it)")

    for folder in ALLOWED:
        for path in sources(engine / folder):
            check(path, folder)
    for name in public:
        layer = layer_of.get(name)
        path = engine / "include" / "stowage" / name
        if layer:
            check(path, layer)
        if re.search(r'#\s*include\s*[<"](torch|ATen|c10)/', path.read_text(encoding="utf-8", errors="replace")):
            problems.append(f"engine/include/stowage/{name}: a public header includes LibTorch")
    return len(public)


def front_folder(rel: str):
    """The FRONT folder a path (relative, posix) lies in, or None."""
    for folder in FRONT:
        if rel == folder or rel.startswith(folder + "/"):
            return folder
    return None


def check_front(root: pathlib.Path, problems: list):
    # Headers above the engine are included by name (each folder is an
    # include directory), so an include is resolved as the compiler would:
    # beside the including file first, else any front-end header whose path
    # ends with it. It is a violation only when every candidate is forbidden.
    headers = [p.relative_to(root).as_posix() for folder in FRONT for p in sources(root / folder) if p.suffix == ".h"]
    files = 0
    for folder, rule in FRONT.items():
        for path in sources(root / folder):
            files += 1
            rel = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8", errors="replace")
            for inc in include_re.findall(text):
                if not rule["qt"] and is_qt(inc):
                    problems.append(f"{rel}: includes Qt ({inc}); {folder} has no Qt")
                if not rule["runtime"]:
                    if inc.startswith(TORCH):
                        problems.append(f"{rel}: includes LibTorch ({inc}); {folder} never links it")
                    elif inc.startswith("stowage/") and layer_of.get(inc.split("/", 1)[1]) == "runtime":
                        problems.append(f"{rel}: includes the runtime ({inc}); {folder} never links it "
                                        f"(models run in the worker process)")
                beside = (path.parent / inc).resolve()
                if beside.is_file():
                    inside = beside.is_relative_to(root)
                    candidates = [beside.relative_to(root).as_posix()] if inside else []
                else:
                    candidates = [h for h in headers if h == inc or h.endswith("/" + inc)]
                owners = [front_folder(c) for c in candidates]
                if owners and all(o in rule["forbidden"] for o in owners):
                    problems.append(f"{rel}: {folder} includes {inc} ({candidates[0]}); "
                                    f"{folder} never includes {owners[0]}")
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[2],
                        help="the source tree to check (default: this repository)")
    root = parser.parse_args().root.resolve()
    problems = []
    public = check_engine(root, problems)
    front = check_front(root, problems)
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f"layers: {public} public engine headers, {front} files in widgets/ and app/, includes only downward")


if __name__ == "__main__":
    main()
