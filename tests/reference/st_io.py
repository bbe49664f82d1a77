"""Minimal safetensors reader/writer (no `safetensors` package needed).

Format: 8-byte little-endian u64 header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}
(space-padded so the data starts on an 8-byte boundary), then the raw
little-endian tensor bytes; offsets are relative to the start of the data.
"""
import json
import os
import struct

import numpy as np
import torch

ST_DTYPES = {
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.float64: "F64",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
ST_TO_TORCH = {v: k for k, v in ST_DTYPES.items()}
DTYPE_SIZE = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1, "F8_E4M3": 1}
# numpy views for the dtypes numpy has; BF16 goes through int16 bits.
_NP_VIEW = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
            "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_, "BF16": np.int16,
            "F8_E4M3": np.uint8}  # torch 1.13 has no float8: its bytes load as uint8 (quant_ref.py)


def tensor_bytes(t):
    """Raw little-endian bytes of a tensor, row-major."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        # bf16 = upper 16 bits of the float32 pattern (round-to-nearest-even by torch)
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    if t.dtype == torch.bool:
        return t.to(torch.uint8).numpy().tobytes()
    arr = t.numpy()
    return arr.astype(arr.dtype.newbyteorder("<")).tobytes()


def save_file(tensors, path, metadata=None, dtypes=None):
    """tensors: list of (name, tensor) in the order they are laid out; dtypes: {name: dtype
    code} for tensors written byte for byte under another dtype (uint8 bytes as F8_E4M3)."""
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs = []
    offset = 0
    for name, t in tensors:
        b = tensor_bytes(t)
        code = (dtypes or {}).get(name) or ST_DTYPES[t.dtype]
        assert DTYPE_SIZE[code] * t.numel() == len(b), name
        header[name] = {"dtype": code, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
    return offset


def load_file(path):
    """Returns {name: torch tensor (stored dtype)}; validates offsets."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        b, e = info["data_offsets"]
        shape = info["shape"]
        count = 1
        for s in shape:
            count *= s
        if e - b != count * DTYPE_SIZE[dt] or base + e > len(data):
            raise ValueError("%s: bad data_offsets for %s" % (path, name))
        arr = np.frombuffer(data, dtype=np.dtype(_NP_VIEW[dt]).newbyteorder("<"),
                            count=count, offset=base + b).astype(_NP_VIEW[dt])
        t = torch.from_numpy(arr.copy()).reshape(shape)
        if dt == "BF16":
            t = t.view(torch.bfloat16)
        elif dt == "BOOL":
            t = t.to(torch.bool)
        out[name] = t
    return out


def load_checkpoint(folder):
    """Loads model.safetensors or the shards named by model.safetensors.index.json."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            part = load_file(os.path.join(folder, shard))
            for name, t in part.items():
                if weight_map.get(name) != shard:
                    raise ValueError("%s holds %s, index says %s" % (shard, name, weight_map.get(name)))
                tensors[name] = t
        missing = set(weight_map) - set(tensors)
        if missing:
            raise ValueError("index names tensors no shard holds: %s" % sorted(missing)[:5])
        return tensors
    return load_file(os.path.join(folder, "model.safetensors"))
