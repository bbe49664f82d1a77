#!/usr/bin/env python3
"""Writes and reads offload folders the way Accelerate does (offload_weight /
load_offloaded_weight: numpy memmap .dat files plus index.json, bfloat16 kept
as int16 bits, 0-d tensors stored as one element), so tests can check that
Stowage's folders interchange with Accelerate's.

  accelerate_offload.py write CHECKPOINT.safetensors FOLDER float32|bfloat16
  accelerate_offload.py check CHECKPOINT.safetensors FOLDER
"""
import json
import os
import struct
import sys

import numpy as np
import torch

DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + e])
        t = torch.frombuffer(raw, dtype=DT[info["dtype"]]) if raw else torch.empty(0, dtype=DT[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out


def offload_weight(weight, name, folder, index):
    # Accelerate's offload_weight, step for step
    dtype = None
    if weight.dtype == torch.bfloat16:
        weight = weight.view(torch.int16)
        dtype = "bfloat16"
    array = weight.cpu().numpy()
    index[name] = {"dtype": dtype or str(array.dtype), "shape": list(array.shape)}
    if array.ndim == 0:
        array = array[None]
    mm = np.memmap(os.path.join(folder, f"{name}.dat"), dtype=array.dtype, mode="w+", shape=array.shape)
    mm[:] = array[:]
    mm.flush()


def load_offloaded_weight(path, info):
    shape = tuple(info["shape"]) or (1,)
    dtype = info["dtype"]
    if dtype == "bfloat16":
        w = np.memmap(path, dtype="int16", shape=shape, mode="r")
        w = torch.from_numpy(np.array(w)).view(torch.bfloat16)
    else:
        w = torch.from_numpy(np.array(np.memmap(path, dtype=dtype, shape=shape, mode="r")))
    return w[0] if len(info["shape"]) == 0 else w


def main():
    mode, ckpt, folder = sys.argv[1:4]
    tensors = read_safetensors(ckpt)
    if mode == "write":
        target = {"float32": torch.float32, "bfloat16": torch.bfloat16}[sys.argv[4]]
        os.makedirs(folder, exist_ok=True)
        index = {}
        for name, t in tensors.items():
            offload_weight(t.to(target) if t.is_floating_point() else t, name, folder, index)
        with open(os.path.join(folder, "index.json"), "w") as f:
            json.dump(index, f, indent=2)
        return 0
    with open(os.path.join(folder, "index.json")) as f:
        index = json.load(f)
    if not index:
        print("empty index", file=sys.stderr)
        return 1
    for name, info in index.items():
        w = load_offloaded_weight(os.path.join(folder, f"{name}.dat"), info)
        want = tensors[name].to(w.dtype)
        if w.shape != want.shape or not torch.equal(w, want):
            print(f"{name}: differs", file=sys.stderr)
            return 1
    print(f"{len(index)} tensors match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
