#!/usr/bin/env python3
"""Experts in RAM against whole-layer offload, measured in one run.

    tests/bench/bench_moe.py [--cli build/ci/app/stowage-cli] [--tokens 32]

Two mixtures of experts of random fp32 weights with the Hub's names, written
here: a Mixtral shape (hidden 512, 8 experts of width 1024, top-2, 8
layers, vocab 8000; 423 MB) and a Qwen3-MoE shape (hidden 512, 32 experts
of width 256, top-4, 8 layers; 423 MB). Each runs on one simulated GPU of
170 MB behind a link throttled to 2 GB/s, with RAM for the rest, planned two
ways:

  * auto: transformers' placement; whole decoder layers are offloaded to RAM
    and every routed expert of an offloaded layer a token needs crosses the
    link (accelerate-like moves the unit's weights, experts as routed);
  * experts_in_ram: every dense part on the GPU, the routed experts of the
    layers that do not fit in RAM.

Per strategy and policy: decode tokens/s measured (`run --json`, greedy,
--ignore-eos, warm, median of 3) and the user-facing prediction (`plan
--report` with this machine's stored profile, the simulated GPU described as
RAM behind the 2 GB/s link), and the ratio of the two. Never part of ctest.
"""
import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_predict as bp  # noqa: E402  (cpu_line, cli, simulated_gpu_profile, ROOT's st_io)

POLICIES = ["accelerate-like", "prefetch", "compute-where-it-lives"]


def write_moe(folder, family):
    import torch
    from st_io import save_file
    vocab, hidden, layers, heads, kv = 8000, 512, 8, 8, 4
    if family == "mixtral":
        experts, inter, topk = 8, 1024, 2
    else:
        experts, inter, topk = 32, 256, 4
    head_dim = hidden // heads
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    tensors = [("model.embed_tokens.weight", r(vocab, hidden))]
    for i in range(layers):
        p = "model.layers.%d." % i
        tensors += [(p + "self_attn.q_proj.weight", r(heads * head_dim, hidden)),
                    (p + "self_attn.k_proj.weight", r(kv * head_dim, hidden)),
                    (p + "self_attn.v_proj.weight", r(kv * head_dim, hidden)),
                    (p + "self_attn.o_proj.weight", r(hidden, heads * head_dim)),
                    (p + "input_layernorm.weight", torch.ones(hidden)),
                    (p + "post_attention_layernorm.weight", torch.ones(hidden))]
        if family == "mixtral":
            tensors.append((p + "block_sparse_moe.gate.weight", r(experts, hidden)))
            for e in range(experts):
                q = p + "block_sparse_moe.experts.%d." % e
                tensors += [(q + "w1.weight", r(inter, hidden)), (q + "w3.weight", r(inter, hidden)),
                            (q + "w2.weight", r(hidden, inter))]
        else:
            tensors += [(p + "self_attn.q_norm.weight", torch.ones(head_dim)),
                        (p + "self_attn.k_norm.weight", torch.ones(head_dim)),
                        (p + "mlp.gate.weight", r(experts, hidden))]
            for e in range(experts):
                q = p + "mlp.experts.%d." % e
                tensors += [(q + "gate_proj.weight", r(inter, hidden)), (q + "up_proj.weight", r(inter, hidden)),
                            (q + "down_proj.weight", r(hidden, inter))]
    tensors += [("model.norm.weight", torch.ones(hidden)), ("lm_head.weight", r(vocab, hidden))]
    cfg = {"model_type": family, "vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "float32",
           "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "num_experts_per_tok": topk}
    if family == "mixtral":
        cfg.update({"architectures": ["MixtralForCausalLM"], "intermediate_size": inter, "num_local_experts": experts})
    else:
        cfg.update({"architectures": ["Qwen3MoeForCausalLM"], "intermediate_size": 4 * inter,
                    "moe_intermediate_size": inter, "num_experts": experts, "head_dim": head_dim,
                    "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []})
    os.makedirs(folder, exist_ok=True)
    save_file(tensors, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def run(exe, ckpt, strategy, budgets, policy, tokens, profile_file, tmp):
    args = ["run", ckpt, "--strategy", strategy, "--prompt-ids", "1,5,9,13", "--max-new-tokens", str(tokens),
            "--ignore-eos", "--json", "--policy", policy, "--hardware", profile_file, "--simulate-gpus", "--throttle",
            "--offload-folder", os.path.join(tmp, "offload")]
    for b in budgets:
        args += ["--max-memory", b]
    bp.cli(args, exe)  # warm
    got = sorted(json.loads(bp.cli(args, exe).stdout)["timings"]["decode_tokens_per_s"] for _ in range(3))
    return got[1], got[0], got[2]


def predicted(exe, ckpt, strategy, budgets, profile_file, tmp):
    report = os.path.join(tmp, "report.json")
    args = ["plan", ckpt, "--strategy", strategy, "--report", report, "--hardware", profile_file, "--json"]
    for b in budgets:
        args += ["--max-memory", b]
    bp.cli(args, exe)
    rep = json.load(open(report))
    return ({c["policy"]: c["tokens_per_second"] for c in rep["cost"]},
            {d["device"]: d["used"] for d in rep["devices"]})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=None)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    exe = bp.find_cli(a.cli)
    if exe is None:
        return 2
    print("machine: " + bp.cpu_line())
    print("load: %s  (others' work slows every figure)" % open("/proc/loadavg").read().split(" ", 3)[:3])
    with tempfile.TemporaryDirectory(prefix="bench_moe_") as tmp:
        stored = json.loads(bp.cli(["hardware", "--json"], exe).stdout)
        profile = bp.simulated_gpu_profile(stored, 1 << 40)
        profile_file = os.path.join(tmp, "profile.json")
        json.dump(profile, open(profile_file, "w"))
        print("%-10s %-15s %-16s %10s %10s %7s  %6s  %s" % ("model", "strategy", "policy", "measured", "shown",
                                                           "ratio", "spread", "bytes per device"))
        for family in ("mixtral", "qwen3_moe"):
            ckpt = os.path.join(tmp, family)
            t0 = time.time()
            write_moe(ckpt, family)
            print("# wrote %s (%.0f MB) in %.0f s" % (family, os.path.getsize(os.path.join(ckpt, "model.safetensors"))
                                                     / 1e6, time.time() - t0), flush=True)
            # dense parts 25 MB + embeddings 33 MB; each layer's experts 50 MB
            budgets = ["0=170MB", "cpu=4GB"]
            speeds = {}
            for strategy in ("auto", "experts_in_ram"):
                shown, devices = predicted(exe, ckpt, strategy, budgets, profile_file, tmp)
                for policy in POLICIES:
                    got, lo, hi = run(exe, ckpt, strategy, budgets, policy, a.tokens, profile_file, tmp)
                    speeds[(strategy, policy)] = got
                    print("%-10s %-15s %-16s %10.1f %10.1f %6.2fx  %5.0f%%  %s" % (
                        family, strategy, policy, got, shown[policy], shown[policy] / got, 100 * (hi - lo) / got,
                        ", ".join("%s %.0f MB" % (d, b / 1e6) for d, b in devices.items() if b)), flush=True)
            for policy in POLICIES:
                print("# %s %s: experts_in_ram decodes %.2fx as fast as auto" % (
                    family, policy, speeds[("experts_in_ram", policy)] / speeds[("auto", policy)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
