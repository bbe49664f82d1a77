#!/usr/bin/env python3
"""check_layers.py must catch what it promises to catch: copy the sources
(engine/, widgets/, app/) to a temporary tree, plant one violation of each
rule, and expect check_layers.py --root on the copy to exit 1 with a line
naming every planted file and what it included. A rule removed from the
checker leaves its plant unnamed, and this test fails."""
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]

# Headers the plants include, written into the copy so the test does not
# depend on today's file names.
TARGETS = {
    "widgets/views/plantedview.h": "",
    "app/gui/plantedgui.h": "",
    "app/run/plantedrun.h": "",
    "app/cli/plantedcli.h": "",
    "app/worker/plantedworker.h": "",
}
# planted file -> the include it holds (each breaks one rule).
PLANTS = {
    "engine/formats/planted_up.cpp": '"stowage/planner.h"',
    "engine/plan/planted_qt.cpp": "<QString>",
    "engine/model/planted_torch.cpp": "<torch/torch.h>",
    "engine/include/stowage/plantedunassigned.h": "<vector>",
    "widgets/models/planted_view.cpp": '"plantedview.h"',
    "widgets/models/planted_gui.cpp": '"plantedgui.h"',
    "widgets/models/planted_session.cpp": '"stowage/session.h"',
    "widgets/views/planted_gui.cpp": '"plantedgui.h"',
    "widgets/views/planted_torch.cpp": "<ATen/ATen.h>",
    "app/gui/planted_worker.cpp": '"plantedworker.h"',
    "app/gui/planted_cli.cpp": '"plantedcli.h"',
    "app/gui/planted_runtime.cpp": '"stowage/model.h"',
    "app/gui/planted_telemetry.cpp": '"stowage/telemetry.h"',
    "app/run/planted_worker.cpp": '"plantedworker.h"',
    "app/run/planted_cli.cpp": '"plantedcli.h"',
    "app/cli/planted_qt.cpp": "<QJsonObject>",
    "app/worker/planted_qt.cpp": "<QtCore/QString>",
}
# Allowed includes, planted too: the checker must not name these.
ALLOWED = {
    "widgets/views/allowed_model.cpp": '"display.h"',
    "app/gui/allowed_run.cpp": '"plantedrun.h"',
    "app/worker/allowed_cli.cpp": '"plantedcli.h"',
    "app/worker/allowed_session.cpp": '"stowage/session.h"',
}


def run(root: pathlib.Path):
    r = subprocess.run([sys.executable, str(HERE / "check_layers.py"), "--root", str(root)],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="check_layers_") as tmp:
        root = pathlib.Path(tmp)
        for top in ("engine", "widgets", "app"):
            for src in (REPO / top).rglob("*"):
                if src.is_file() and src.suffix in (".h", ".cpp"):
                    dst = root / src.relative_to(REPO)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, dst)
        _, before = run(root)
        for rel, text in TARGETS.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text("#pragma once\n" + text)
        for rel, inc in {**PLANTS, **ALLOWED}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(f"#include {inc}\n")
        rc, out = run(root)
        if rc != 1:
            failures.append(f"check_layers.py exited {rc} on the planted tree, expected 1")
        if "Traceback" in out:
            failures.append("check_layers.py crashed")
        lines = [l for l in out.splitlines() if l not in before.splitlines()]
        for rel, inc in PLANTS.items():
            name = inc.strip('<>"')
            if not any(l.startswith(rel + ":") and (name in l or rel.endswith(".h")) for l in lines):
                failures.append(f"{rel} (#include {inc}) was not named")
        for rel in ALLOWED:
            if any(l.startswith(rel + ":") for l in lines):
                failures.append(f"{rel} was named, but its include is allowed")
    if failures:
        print("check_layers.py output on the planted tree:\n" + out)
        for f in failures:
            print("FAIL:", f)
        sys.exit(1)
    print(f"check_layers.py named all {len(PLANTS)} planted violations and none of {len(ALLOWED)} allowed includes")


if __name__ == "__main__":
    main()
