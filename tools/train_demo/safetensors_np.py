"""Reading and writing .safetensors with numpy only (the format: 8-byte
little-endian header length, a JSON header, then the raw little-endian data).
"""
import json
import os
import struct

import numpy as np

# bfloat16 has no numpy dtype: it is stored and read as its uint16 bit pattern
_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64, "I32": np.int32}


def to_numpy(t, dtype):
    """A torch tensor as (safetensors dtype name, little-endian numpy array)."""
    import torch

    t = t.detach().cpu().contiguous()
    if dtype == "BF16":
        return "BF16", t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    if dtype == "F32":
        return "F32", t.to(torch.float32).numpy()
    raise ValueError(dtype)


def write(path, tensors):
    """tensors: {name: (dtype name, numpy array)}; written sorted by name."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    names = sorted(tensors)
    for name in names:
        dt, arr = tensors[name]
        n = arr.nbytes
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + n]}
        offset += n
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)  # align the data to 8 bytes, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name][1]).astype(tensors[name][1].dtype.newbyteorder("<")).tobytes())
    return offset


def read(path):
    """{name: (dtype name, numpy array)} from one .safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        arr = np.frombuffer(data[base + a:base + b], dtype=np.dtype(_DTYPES[h["dtype"]]).newbyteorder("<"))
        out[name] = (h["dtype"], arr.reshape(h["shape"]))
    return out


def read_checkpoint(folder):
    """All tensors of a sharded checkpoint, through model.safetensors.index.json."""
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        index = json.load(f)
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(read(os.path.join(folder, shard)))
    missing = set(index["weight_map"]) - set(out)
    if missing:
        raise ValueError(f"index names tensors no shard holds: {sorted(missing)[:5]}")
    return out
