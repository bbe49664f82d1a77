"""Quantized checkpoints: writing them as the Hub stores them, and dequantizing
them as transformers 5.6 loads them on a machine without FP8 / MXFP4 kernels.

Written from the formats' definitions, not from the engine:
* fine-grained FP8 (DeepSeek-V3, Qwen3 "-FP8"): each Linear weight stored as
  float8_e4m3fn (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; exponent
  0 subnormal; S.1111.111 NaN; no infinities; largest 448) beside
  `<name>_scale_inv`, float32, one per weight_block_size block, and
  weight = fp8 value * scale (Fp8Dequantize: in float32, then the load dtype).
* MXFP4 (OCP Microscaling, gpt-oss): groups of 32 e2m1 values (1 sign, 2
  exponent bits, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6) packed two to a
  byte, the even element in the low nibble, beside one e8m0 byte per group
  (the power of two 2^(byte - 127)); gpt-oss stores the experts' blocks
  [E, out, in/32, 16] and scales [E, out, in/32] for the model's [E, in, out]
  parameters (convert_moe_packed_tensors transposes them back).

torch 1.13 has no float8 dtype: the FP8 bytes travel as uint8 tensors and st_io
writes them with the dtype "F8_E4M3".
"""
import re

import numpy as np
import torch


def e4m3_value(b):
    """The float8_e4m3fn byte b as a Python float (from the bit fields)."""
    sign = -1.0 if b & 0x80 else 1.0
    exponent, mantissa = (b >> 3) & 0xF, b & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return float("nan")
    if exponent == 0:
        return sign * (mantissa / 8.0) * 2.0 ** -6
    return sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)


E4M3 = np.array([e4m3_value(b) for b in range(256)], dtype=np.float64)
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def _nearest_code(x, table, codes):
    """For each value of x, the code in `codes` whose table value is nearest."""
    vals = table[codes]
    idx = np.abs(x.reshape(-1, 1) - vals.reshape(1, -1)).argmin(axis=1)
    return codes[idx].reshape(x.shape)


# ---- FP8 --------------------------------------------------------------------

FP8_LINEAR = re.compile(r"layers\.\d+\..*proj(_with_mqa)?\.weight$")


def fp8_quantize(w, block):
    """w [rows, cols] float -> (uint8 codes [rows, cols], float32 scale_inv per block)."""
    w = w.double().numpy()
    rows, cols = w.shape
    b0, b1 = block
    sr, sc = -(-rows // b0), -(-cols // b1)
    codes = np.zeros((rows, cols), dtype=np.uint8)
    scales = np.zeros((sr, sc), dtype=np.float32)
    finite = np.array([b for b in range(256) if not np.isnan(E4M3[b])])
    for i in range(sr):
        for j in range(sc):
            blk = w[i * b0:(i + 1) * b0, j * b1:(j + 1) * b1]
            amax = float(np.abs(blk).max())
            scale = np.float32(amax / 448.0 if amax > 0 else 1.0)
            codes[i * b0:(i + 1) * b0, j * b1:(j + 1) * b1] = _nearest_code(blk / float(scale), E4M3, finite)
            scales[i, j] = scale
    return torch.from_numpy(codes), torch.from_numpy(scales)


def fp8_dequantize(codes, scales, block):
    """Fp8Dequantize: float32(code) * float32(scale of the block), in float32."""
    c = codes.numpy()
    rows, cols = c.shape
    b0, b1 = block
    values = E4M3[c].astype(np.float32)
    s = np.repeat(np.repeat(scales.float().numpy(), b0, axis=0), b1, axis=1)[:rows, :cols]
    return torch.from_numpy(values * s)


# ---- MXFP4 ------------------------------------------------------------------

def mxfp4_quantize(w):
    """w [E, in, out] float (the model's layout) -> (blocks uint8 [E, out, in/32, 16], scales uint8 [E, out, in/32])."""
    x = w.double().transpose(1, 2).contiguous().numpy()  # [E, out, in]
    E, R, C = x.shape
    assert C % 32 == 0, "MXFP4 groups 32 inputs: %d is not a multiple" % C
    groups = x.reshape(E, R, C // 32, 32)
    amax = np.abs(groups).max(axis=-1)
    # the shared exponent: the largest power of two at most amax, less e2m1's own largest exponent (2)
    exponent = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - 2, -127).astype(np.int64)
    exponent = np.clip(exponent, -127, 127)
    scaled = np.clip(groups / np.ldexp(1.0, exponent)[..., None], -6.0, 6.0)
    codes = _nearest_code(scaled, E2M1, np.arange(16)).astype(np.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return torch.from_numpy(blocks.astype(np.uint8)), torch.from_numpy((exponent + 127).astype(np.uint8))


def mxfp4_dequantize(blocks, scales):
    """convert_moe_packed_tensors: [E, out, in/32, 16] + [E, out, in/32] -> [E, in, out] float32."""
    b = blocks.numpy().astype(np.int64)
    lo, hi = E2M1[b & 0xF], E2M1[b >> 4]
    values = np.stack([lo, hi], axis=-1).reshape(b.shape[:-1] + (32,))  # element 2k low, 2k+1 high
    values = values * np.ldexp(1.0, scales.numpy().astype(np.int64) - 127)[..., None]
    E, R, G = scales.shape
    return torch.from_numpy(values.reshape(E, R, G * 32).astype(np.float32)).transpose(1, 2).contiguous()


# ---- checkpoints ------------------------------------------------------------

def quantize(method, cfg, tensors, block):
    """The checkpoint as the Hub stores it quantized: (cfg, tensors, {name: safetensors dtype})
    for names whose tensors are written byte for byte (the quantized forms)."""
    cfg = dict(cfg)
    raw = {}
    out = []
    if method == "fp8":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "weight_block_size": list(block)}
        for name, t in tensors:
            if FP8_LINEAR.search(name) and t.dim() == 2 and ".mlp.gate." not in name:
                codes, scales = fp8_quantize(t, block)
                out += [(name, codes), (name + "_scale_inv", scales)]
                raw[name], raw[name + "_scale_inv"] = "F8_E4M3", "F32"
            else:
                out.append((name, t))
    elif method == "mxfp4":
        cfg["quantization_config"] = {
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"],
            "quant_method": "mxfp4"}
        for name, t in tensors:
            if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
                blocks, scales = mxfp4_quantize(t)
                out += [(name + "_blocks", blocks), (name + "_scales", scales)]
                raw[name + "_blocks"], raw[name + "_scales"] = "U8", "U8"
            else:
                out.append((name, t))
    else:
        raise ValueError(method)
    return cfg, out, raw


def dequantize(cfg, tensors):
    """{name: tensor} as loaded, with the quantized forms replaced by float32 weights."""
    q = cfg.get("quantization_config")
    if not q:
        return tensors
    out = dict(tensors)
    if q["quant_method"] == "fp8":
        block = q.get("weight_block_size")
        for name in list(out):
            if name.endswith("_scale_inv"):
                weight = name[:-len("_scale_inv")]
                codes = out[weight]
                out[weight] = fp8_dequantize(codes, out.pop(name), block or list(codes.shape))
    elif q["quant_method"] == "mxfp4":
        for name in list(out):
            if name.endswith("_blocks"):
                base = name[:-len("_blocks")]
                out[base] = mxfp4_dequantize(out.pop(name), out.pop(base + "_scales"))
    else:
        raise NotImplementedError("quant_method " + q["quant_method"])
    return out
