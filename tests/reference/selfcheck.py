#!/usr/bin/python3
"""Self-check of the reference scripts; exits 1 on any failure, 3 without torch.

Usage: selfcheck.py [--keep DIR] [--family F ...]

Per family (default checkpoint, seeds 0 and 1):
  * KV-cache decode logits == full-sequence no-cache logits, fp32 (max abs < 1e-5)
    and fp64 (< 1e-10), over a 5-token prompt + 16 new tokens;
  * greedy tokens are not all one id, and seeds 0 and 1 give different tokens;
  * the safetensors files are well formed (header length % 8, contiguous offsets,
    file size) and a 3-shard copy (index total_size, weight_map) gives the same logits;
  * bf16 / f16 checkpoints store exactly torch's rounding of the fp32 weights;
  * run_reference.py as a subprocess: < 3 s, JSON shape, argmax/token consistency,
    --no-cache agrees, --dtype bfloat16 runs.
Plus layout variants: --no-prefix (gpt2 buffers, llama/opt base layouts) and
--untied/--tied give the logits their weights imply; opt pre/post-LN both run;
llama3 inv_freq against an independent scalar implementation of Meta's
apply_scaling, with all three frequency bands populated; phi4mini's longrope
switch (short_factor, then long_factor with the cache dropped once) and
partial rotary.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

try:
    import torch
except ImportError:
    print("torch is not importable by " + sys.executable, file=sys.stderr)
    sys.exit(3)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
sys.path.insert(0, HERE)
import make_checkpoint  # noqa: E402
import quant_ref  # noqa: E402
import ref_models  # noqa: E402
import run_reference  # noqa: E402
import st_io  # noqa: E402

PROMPT = [3, 17, 5, 42, 8]
NEW = 16
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("  FAIL " + what)
    return ok


def make(out, *args):
    make_checkpoint.main(["--out", out] + list(args))


def cached_vs_full(model, prompt, n):
    """Each row of the cached run against a no-cache run over the sequence up to it
    (its last row): for phi3's longrope the whole sequence's length picks the rope,
    so rows before the switch differ from a single run over everything."""
    toks, pre, steps = ref_models.generate(model, prompt, n)
    full = torch.cat([ref_models.full_logits(model, prompt)] +
                     [ref_models.full_logits(model, prompt + toks[:i + 1])[-1:] for i in range(len(steps))])
    cat = torch.cat([pre] + [s[None] for s in steps])
    return toks, cat, (cat - full).abs().max().item()


def check_safetensors_file(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    ok = check(n % 8 == 0, "%s: header length %d not a multiple of 8" % (path, n))
    header = json.loads(data[8:8 + n])
    ok &= check(header.get("__metadata__") == {"format": "pt"}, "%s: __metadata__" % path)
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    pos = 0
    for b, e in spans:
        ok &= check(b == pos, "%s: offsets not contiguous at %d" % (path, b))
        pos = e
    ok &= check(8 + n + pos == len(data), "%s: file size %d != %d" % (path, len(data), 8 + n + pos))
    for k, v in header.items():
        if k == "__metadata__":
            continue
        cnt = 1
        for s in v["shape"]:
            cnt *= s
        ok &= check(v["data_offsets"][1] - v["data_offsets"][0] == cnt * st_io.DTYPE_SIZE[v["dtype"]],
                    "%s: %s size" % (path, k))
    return header, ok


def raw_tensor_bytes(path, name):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    h = json.loads(data[8:8 + n])[name]
    b, e = h["data_offsets"]
    return h, data[8 + n + b:8 + n + e]


def family_checks(fam, tmp):
    print("[%s]" % fam)
    tokens_by_seed = {}
    for seed in (0, 1):
        d = os.path.join(tmp, "%s-s%d" % (fam, seed))
        make(d, "--family", fam, "--seed", str(seed))
        check_safetensors_file(os.path.join(d, "model.safetensors"))
        m = run_reference.load(d)
        toks, cat, diff = cached_vs_full(m, PROMPT, NEW)
        check(diff < 1e-5, "%s seed %d: cache vs no-cache fp32 max abs diff %.3g" % (fam, seed, diff))
        m64 = run_reference.load(d, torch.float64)
        toks64, cat64, diff64 = cached_vs_full(m64, PROMPT, NEW)
        check(diff64 < 1e-10, "%s seed %d: cache vs no-cache fp64 max abs diff %.3g" % (fam, seed, diff64))
        d3264 = (cat.double() - cat64).abs().max().item() if toks == toks64 else float("inf")
        check(len(set(toks)) > 1, "%s seed %d: greedy tokens all one id %s" % (fam, seed, toks))
        tokens_by_seed[seed] = toks
        print("  seed %d tokens %s  distinct %d  cache-vs-full fp32 %.2e fp64 %.2e  fp32-vs-fp64 %.2e"
              % (seed, toks, len(set(toks)), diff, diff64, d3264))
    check(tokens_by_seed[0] != tokens_by_seed[1], "%s: seeds 0 and 1 give the same tokens" % fam)

    base = os.path.join(tmp, "%s-s0" % fam)
    ref = run_reference.load(base)
    _, ref_logits, _ = cached_vs_full(ref, PROMPT, NEW)

    # sharded copy
    sh = os.path.join(tmp, "%s-shards" % fam)
    make(sh, "--family", fam, "--shards", "3")
    with open(os.path.join(sh, "model.safetensors.index.json")) as f:
        index = json.load(f)
    files = sorted(set(index["weight_map"].values()))
    check(files == ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)], "%s: shard names %s" % (fam, files))
    total, names = 0, set()
    for fn in files:
        header, _ = check_safetensors_file(os.path.join(sh, fn))
        for k, v in header.items():
            if k != "__metadata__":
                total += v["data_offsets"][1] - v["data_offsets"][0]
                names.add(k)
                check(index["weight_map"].get(k) == fn, "%s: weight_map[%s]" % (fam, k))
    check(names == set(index["weight_map"]), "%s: weight_map names != shard names" % fam)
    check(index["metadata"]["total_size"] == total, "%s: total_size %d != %d" % (fam, index["metadata"]["total_size"], total))
    check(not os.path.exists(os.path.join(sh, "model.safetensors")), "%s: sharded dir has model.safetensors" % fam)
    _, sh_logits, _ = cached_vs_full(run_reference.load(sh), PROMPT, NEW)
    check(torch.equal(sh_logits, ref_logits), "%s: sharded checkpoint gives other logits" % fam)

    # half-precision storage: exact torch rounding, bytes = upper half of fp32 for bf16
    fp32 = st_io.load_file(os.path.join(base, "model.safetensors"))
    for dt in ("bfloat16", "float16"):
        hd = os.path.join(tmp, "%s-%s" % (fam, dt))
        make(hd, "--family", fam, "--dtype", dt)
        with open(os.path.join(hd, "config.json")) as f:
            check(json.load(f)["torch_dtype"] == dt, "%s: torch_dtype %s" % (fam, dt))
        check_safetensors_file(os.path.join(hd, "model.safetensors"))
        got = st_io.load_file(os.path.join(hd, "model.safetensors"))
        tdt = make_checkpoint.TORCH_DTYPES[dt]
        for k, v in fp32.items():
            kdt = make_checkpoint.fam_deepseek.stored_dtype(k, tdt)  # float32 where transformers keeps it
            check(got[k].dtype == kdt and torch.equal(got[k], v.to(kdt)), "%s %s: %s not torch-rounded" % (fam, dt, k))
        name = next(iter(fp32))
        h, raw = raw_tensor_bytes(os.path.join(hd, "model.safetensors"), name)
        check(h["dtype"] == {"bfloat16": "BF16", "float16": "F16"}[dt], "%s: dtype tag %s" % (fam, h["dtype"]))
        if dt == "bfloat16":
            f32 = fp32[name].to(torch.bfloat16).float().reshape(-1)
            upper = b"".join(struct.pack("<f", float(x))[2:] for x in f32[:64])
            check(raw[:128] == upper, "%s: bf16 bytes are not the upper 16 bits of float32" % fam)
        m = run_reference.load(hd)
        toks, _, diff = cached_vs_full(m, PROMPT, NEW)
        check(diff < 1e-5, "%s %s: cache vs no-cache %.3g" % (fam, dt, diff))
    return base


def cli_checks(fam, ckpt):
    script = os.path.join(HERE, "run_reference.py")
    prompt = ",".join(map(str, PROMPT))
    t0 = time.time()
    p = subprocess.run([sys.executable, script, "--checkpoint", ckpt, "--prompt-ids", prompt,
                        "--max-new-tokens", str(NEW)], capture_output=True, text=True)
    dt = time.time() - t0
    if not check(p.returncode == 0, "%s: run_reference exit %d: %s" % (fam, p.returncode, p.stderr[-500:])):
        return
    # a hang guard only (timings on a shared machine are noise): 10x the ~1 s it takes
    check(dt < 30.0, "%s: run_reference took %.2f s" % (fam, dt))
    out = json.loads(p.stdout)
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    V = cfg["vocab_size"] if "vocab_size" in cfg else cfg["text_config"]["vocab_size"]  # gemma3 nests it
    check(set(out) == {"token_ids", "prefill_logits", "step_logits"}, "%s: JSON keys %s" % (fam, sorted(out)))
    check(len(out["token_ids"]) == NEW, "%s: token count" % fam)
    check(len(out["prefill_logits"]) == len(PROMPT) and all(len(r) == V for r in out["prefill_logits"]),
          "%s: prefill_logits shape" % fam)
    check(len(out["step_logits"]) == NEW - 1 and all(len(r) == V for r in out["step_logits"]),
          "%s: step_logits shape" % fam)
    rows = [out["prefill_logits"][-1]] + out["step_logits"]
    am = [int(torch.argmax(torch.tensor(r))) for r in rows]
    check(am == out["token_ids"], "%s: token_ids are not the argmax of the logits rows" % fam)
    p2 = subprocess.run([sys.executable, script, "--checkpoint", ckpt, "--prompt-ids", prompt,
                         "--max-new-tokens", str(NEW), "--no-cache"], capture_output=True, text=True)
    if check(p2.returncode == 0, "%s: --no-cache exit %d" % (fam, p2.returncode)):
        o2 = json.loads(p2.stdout)
        check(o2["token_ids"] == out["token_ids"], "%s: --no-cache tokens differ" % fam)
        a = torch.tensor(out["prefill_logits"] + out["step_logits"])
        b = torch.tensor(o2["prefill_logits"] + o2["step_logits"])
        check((a - b).abs().max().item() < 1e-5, "%s: --no-cache logits differ" % fam)
    p3 = subprocess.run([sys.executable, script, "--checkpoint", ckpt, "--prompt-ids", prompt,
                         "--max-new-tokens", "4", "--dtype", "bfloat16"], capture_output=True, text=True)
    check(p3.returncode == 0 and len(json.loads(p3.stdout)["token_ids"]) == 4, "%s: --dtype bfloat16 run" % fam)
    print("  cli %.2f s, %d tokens, %d prefill rows, %d step rows" % (dt, len(out["token_ids"]),
                                                                      len(out["prefill_logits"]), len(out["step_logits"])))


def variant_checks(tmp):
    print("[variants]")
    # --no-prefix: same seed draws the same weights (the gpt2 mask buffers draw nothing)
    for fam, expect in (("gpt2", ["h.0.attn.bias", "h.0.attn.masked_bias", "wte.weight", "h.0.attn.c_attn.weight"]),
                        ("llama", ["embed_tokens.weight", "layers.0.self_attn.q_proj.weight", "norm.weight"]),
                        ("qwen3", ["layers.0.self_attn.q_norm.weight"]),
                        ("opt", ["decoder.embed_tokens.weight", "decoder.layers.0.fc1.weight",
                                 "decoder.final_layer_norm.weight"])):
        a = os.path.join(tmp, fam + "-np")
        b = os.path.join(tmp, fam + "-tied")
        make(a, "--family", fam, "--no-prefix")
        make(b, "--family", fam, "--tied")
        t = st_io.load_file(os.path.join(a, "model.safetensors"))
        check(all(e in t for e in expect), "%s --no-prefix: missing %s" % (fam, [e for e in expect if e not in t]))
        check(not any(k.startswith(("transformer.", "model.", "lm_head")) for k in t), "%s --no-prefix: prefixed names" % fam)
        if fam == "gpt2":
            P = json.load(open(os.path.join(a, "config.json")))["n_positions"]
            check(list(t["h.0.attn.bias"].shape) == [1, 1, P, P] and torch.equal(
                t["h.0.attn.bias"][0, 0], torch.tril(torch.ones(P, P))), "gpt2 attn.bias buffer")
            check(list(t["h.0.attn.masked_bias"].shape) == [] and float(t["h.0.attn.masked_bias"]) == -1e4,
                  "gpt2 masked_bias")
        _, la, _ = cached_vs_full(run_reference.load(a), PROMPT, 8)
        _, lb, _ = cached_vs_full(run_reference.load(b), PROMPT, 8)
        check(torch.equal(la, lb), "%s --no-prefix logits != prefixed tied logits" % fam)
    # untied gpt2/opt/qwen2 and tied llama/mistral: lm_head present exactly when untied and used
    for fam, flag in (("gpt2", "--untied"), ("opt", "--untied"), ("qwen2", "--untied"),
                      ("llama", "--tied"), ("mistral", "--tied"), ("llama3", "--untied")):
        d = os.path.join(tmp, fam + flag)
        make(d, "--family", fam, flag)
        cfg = json.load(open(os.path.join(d, "config.json")))
        t = st_io.load_file(os.path.join(d, "model.safetensors"))
        untied = flag == "--untied"
        check(cfg["tie_word_embeddings"] == (not untied), "%s %s: tie_word_embeddings" % (fam, flag))
        check(("lm_head.weight" in t) == untied, "%s %s: lm_head.weight presence" % (fam, flag))
        m = run_reference.load(d)
        emb = [k for k in t if k.endswith("embed_tokens.weight") or k.endswith("wte.weight")][0]
        want = t["lm_head.weight"] if untied else t[emb]
        check(torch.equal(m.lm_head, want.float()), "%s %s: lm_head not the expected tensor" % (fam, flag))
        toks, _, diff = cached_vs_full(m, PROMPT, NEW)
        check(diff < 1e-5 and len(set(toks)) > 1, "%s %s: diff %.3g tokens %s" % (fam, flag, diff, toks))
    # OPT LN placement both ways; post-LN has no decoder.final_layer_norm
    for fam, flag in (("opt", "--post-ln"), ("opt-proj", "--pre-ln")):
        d = os.path.join(tmp, fam + flag)
        make(d, "--family", fam, flag)
        cfg = json.load(open(os.path.join(d, "config.json")))
        t = st_io.load_file(os.path.join(d, "model.safetensors"))
        pre = flag == "--pre-ln"
        check(cfg["do_layer_norm_before"] == pre, "%s %s: do_layer_norm_before" % (fam, flag))
        check(("model.decoder.final_layer_norm.weight" in t) == pre, "%s %s: final_layer_norm presence" % (fam, flag))
        toks, _, diff = cached_vs_full(run_reference.load(d), PROMPT, NEW)
        check(diff < 1e-5 and len(set(toks)) > 1, "%s %s: diff %.3g tokens %s" % (fam, flag, diff, toks))
        print("  %s %s tokens %s diff %.2e" % (fam, flag, toks, diff))
    # llama3 frequencies against Meta's scalar apply_scaling
    cfg = make_checkpoint.llama_like_config("llama3", True)
    rs = cfg["rope_scaling"]
    hd = cfg["head_dim"]
    base = [1.0 / (cfg["rope_theta"] ** (i / hd)) for i in range(0, hd, 2)]
    lo_w = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
    hi_w = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
    want, bands = [], set()
    for f in base:
        wl = 2 * math.pi / f
        if wl < hi_w:
            want.append(f); bands.add("kept")
        elif wl > lo_w:
            want.append(f / rs["factor"]); bands.add("divided")
        else:
            s = (rs["original_max_position_embeddings"] / wl - rs["low_freq_factor"]) / (
                rs["high_freq_factor"] - rs["low_freq_factor"])
            want.append((1 - s) * f / rs["factor"] + s * f); bands.add("smoothed")
    got = ref_models.llama3_inv_freq(
        1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)), rs)
    err = max(abs(g - w) / w for g, w in zip(got.tolist(), want))
    check(err < 1e-6, "llama3 inv_freq relative error %.3g" % err)
    check(bands == {"kept", "smoothed", "divided"}, "llama3 bands populated: %s" % sorted(bands))
    print("  llama3 inv_freq vs scalar apply_scaling rel err %.1e, bands %s" % (err, sorted(bands)))
    # phi4mini's longrope: original_max_position_embeddings 16, so PROMPT + NEW passes it.
    # The switch changes the logits (long_factor is used after it); the cache is dropped
    # exactly once (at 16 cached positions and a 17th new one); the last 4 of each head's
    # 16 dims are not rotated (partial_rotary_factor 0.75); tied lm_head.
    d = os.path.join(tmp, "phi4mini-s0")
    m = run_reference.load(d)
    check(m.rot == 12 and m.longrope and m.orig == 16, "phi4mini: rotary dims %d" % m.rot)
    check(abs(m.attention_scaling - math.sqrt(1 + math.log(4) / math.log(16))) < 1e-12, "phi4mini attention_factor")
    drops = [p for p in range(1, 40) if m.drops_cache(p, 1)]
    check(drops == [16], "phi4mini: cache dropped at %s" % drops)
    toks, cat, _ = cached_vs_full(m, PROMPT, NEW)
    m.inv_long = m.inv_short
    _, cat_short, _ = cached_vs_full(m, PROMPT, NEW)
    rows_before = 16  # row i is position i: positions 0..15 see a sequence of at most 16
    check(torch.equal(cat[:rows_before], cat_short[:rows_before]), "phi4mini: rows before the switch differ")
    check((cat[rows_before:] - cat_short[rows_before:]).abs().max().item() > 1e-2,
          "phi4mini: long_factor changes nothing after the switch")
    x = torch.randn(4, 3, 16)
    cos, sin = m.rope(torch.arange(3), torch.float32)
    check(torch.equal(m.rotate(x, cos[None], sin[None])[..., 12:], x[..., 12:]), "phi4mini: dims 12..15 rotated")
    print("  phi4mini longrope: cache dropped at %s, attention_factor %.4f" % (drops, m.attention_scaling))
    # max-new-tokens 0 and 1
    d = os.path.join(tmp, "llama-s0")
    toks, pre, steps = ref_models.generate(run_reference.load(d), PROMPT, 0)
    check(toks == [] and steps == [] and pre.shape[0] == len(PROMPT), "max-new-tokens 0")
    toks, pre, steps = ref_models.generate(run_reference.load(d), PROMPT, 1)
    check(len(toks) == 1 and steps == [], "max-new-tokens 1")


def quant_checks(tmp):
    """quant_ref.py: the formats' values by hand, round trips, and quantized checkpoints
    that run close to the unquantized ones they came from."""
    check([quant_ref.e4m3_value(b) for b in (0x38, 0x7E, 0x01, 0xB8)] == [1.0, 448.0, 2.0 ** -9, -1.0],
          "e4m3 values")
    check(math.isnan(quant_ref.e4m3_value(0x7F)), "e4m3 0x7f is NaN")
    blocks = torch.zeros(1, 2, 1, 16, dtype=torch.uint8)
    blocks[0, 0, 0, 0], blocks[0, 1, 0, 0] = 0x21, 0xF7  # (0.5, 1.0) and (6, -6)
    w = quant_ref.mxfp4_dequantize(blocks, torch.tensor([[[128], [125]]], dtype=torch.uint8))
    check(w.shape == (1, 32, 2) and w[0, :2, 0].tolist() == [1.0, 2.0] and w[0, :2, 1].tolist() == [1.5, -1.5],
          "mxfp4 bytes by hand: %s" % w[0, :2].tolist())
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 64, 40, generator=g)
    rt = quant_ref.mxfp4_dequantize(*quant_ref.mxfp4_quantize(x))
    check(torch.equal(quant_ref.mxfp4_dequantize(*quant_ref.mxfp4_quantize(rt)), rt), "mxfp4 round trip is stable")
    check(((rt - x).norm() / x.norm()).item() < 0.2, "mxfp4 round trip error")
    y = torch.randn(24, 20, generator=g)
    ry = quant_ref.fp8_dequantize(*quant_ref.fp8_quantize(y, (8, 4)), (8, 4))
    check(((ry - y).norm() / y.norm()).item() < 0.05, "fp8 round trip error")
    for fam, args in (("qwen3_moe", ["--quantize", "fp8", "--fp8-block", "8,4"]),
                      ("gpt_oss", ["--quantize", "mxfp4"])):
        plain, quant = os.path.join(tmp, fam + "-plain"), os.path.join(tmp, fam + "-q")
        make(quant, "--family", fam, *args)
        cfg = json.load(open(os.path.join(quant, "config.json")))
        check("quantization_config" in cfg, "%s: quantization_config written" % fam)
        if fam == "gpt_oss":  # the unquantized model of the same shape and seed
            c, t = make_checkpoint.build(fam, 0, False, True, True, overrides={"hidden_size": 64,
                                                                               "intermediate_size": 32})
            make_checkpoint.write(plain, c, t, "float32", 1)
        else:
            make(plain, "--family", fam)
        a = ref_models.full_logits(run_reference.load(plain), PROMPT)
        b = ref_models.full_logits(run_reference.load(quant), PROMPT)
        # quantization noise, not another model: a wrong layout or nibble order
        # leaves the logits uncorrelated
        r = torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1].item()
        check(not torch.equal(a, b) and r > 0.8, "%s: quantized logits correlate %.3f with the model's" % (fam, r))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", help="write the checkpoints here and keep them")
    ap.add_argument("--family", action="append", choices=make_checkpoint.FAMILIES)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tmp = a.keep or tempfile.mkdtemp(prefix="stowage-ref-")
    os.makedirs(tmp, exist_ok=True)
    try:
        for fam in a.family or make_checkpoint.FAMILIES:
            base = family_checks(fam, tmp)
            cli_checks(fam, base)
        if not a.family:
            variant_checks(tmp)
            quant_checks(tmp)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("selfcheck: %d failure(s)" % len(failures))
        sys.exit(1)
    print("selfcheck: all checks passed")


if __name__ == "__main__":
    main()
