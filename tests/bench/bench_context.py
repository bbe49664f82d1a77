#!/usr/bin/env python3
"""Where a simulated GPU runs out as the context grows: predicted against run.

    tests/bench/bench_context.py [--cli build/ci/app/stowage-cli]

For the bundled demo and a 440 MB fp32 Llama (bench_predict's), all on one
simulated GPU: `stowage-cli plan --context-sweep` says at which prompt length
the GPU's budget is passed (weights + the KV cache of every layer + a pass's
activation room); the budget is chosen so that this happens at a target
length. Then `stowage-cli run` with prompts of growing length (bisection)
finds the first that fails. It must fail within one KV block (the buffers grow
by an eighth of what they hold) of the prediction, with one line naming the
device, and a shorter prompt must still run. ctest checks the same on a tiny
Llama and the demo in-process (tst_runtime contextRunsOutWherePredicted); this
runs the CLI on a model of realistic size. Exit 0 when every case holds.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_predict as bp  # noqa: E402


def sweep(exe, ckpt, budget, longest):
    out = bp.cli(["plan", ckpt, "--max-memory", "0=%d" % budget, "--max-memory", "cpu=64GB",
                  "--device-map", os.path.join(os.path.dirname(ckpt) or ".", "all-gpu.json"),
                  "--context-sweep", str(longest)], exe).stdout
    gpu = [d for d in json.loads(out)["devices"] if d["device"] == "0"][0]
    return gpu["runs_out_at"]


def runs(exe, ckpt, budget, n):
    ids = ",".join(str(2 + i % 97) for i in range(n))
    p = bp.cli(["run", ckpt, "--device-map", os.path.join(os.path.dirname(ckpt) or ".", "all-gpu.json"),
                "--max-memory", "0=%d" % budget, "--max-memory", "cpu=64GB", "--simulate-gpus", "--prompt-ids", ids,
                "--max-new-tokens", "1", "--json"], exe, check=False)
    if p.returncode == 0:
        return True, ""
    return False, p.stderr.strip()


def case(exe, name, ckpt, target, longest):
    with open(os.path.join(os.path.dirname(ckpt), "all-gpu.json"), "w") as f:
        json.dump({"": 0}, f)
    # The budget that the sweep says a prompt of `target` tokens fills:
    # bisect on the budget until the crossing is target + 1.
    lo, hi = 1, 1 << 40
    while hi - lo > 1:
        mid = (lo + hi) // 2
        at = sweep(exe, ckpt, mid, longest)
        if at is None or at > target + 1:
            hi = mid
        else:
            lo = mid
    budget = hi
    predicted = sweep(exe, ckpt, budget, longest)
    # The first prompt length that fails.
    good, bad = 1, longest
    assert runs(exe, ckpt, budget, good)[0], "%s: a 1-token prompt failed" % name
    ok, message = runs(exe, ckpt, budget, bad)
    assert not ok, "%s: the longest prompt ran" % name
    while bad - good > 1:
        mid = (good + bad) // 2
        ok, m = runs(exe, ckpt, budget, mid)
        if ok:
            good = mid
        else:
            bad, message = mid, m
    block = min(max(target // 8, 16), 256)
    held = predicted - block <= bad <= predicted
    again = runs(exe, ckpt, budget, max(1, target // 2))[0]
    print("%-10s budget %12d B  predicted %6d  first failing %6d  (block %d) %s; shorter prompt %s" % (
        name, budget, predicted, bad, block, "within" if held else "OUTSIDE", "runs" if again else "FAILS"))
    print("           " + message.splitlines()[-1] if message else "")
    return held and again and message.count("\n") == 0 and "device 0" in message


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=None)
    a = ap.parse_args()
    exe = bp.find_cli(a.cli)
    if exe is None:
        return 2
    print("machine: " + bp.cpu_line())
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench_context_") as tmp:
        demo = os.path.join(tmp, "demo")
        subprocess.run(["cp", "-r", os.path.join(bp.ROOT, "resources", "demo"), demo], check=True)
        ok = case(exe, "demo", demo, 200, 256) and ok
        big = os.path.join(tmp, "llama440")
        os.makedirs(big)
        bp.write_llama440(big)
        ok = case(exe, "llama440", big, 1500, 2048) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
