#!/usr/bin/python3
"""Train Stowage's demo checkpoint: a byte-level BPE tokenizer and a small
Llama on the King James Bible (Debian's bible-kjv-text), written in the exact
Hugging Face layout (config, generation config, tokenizer.json, sharded
safetensors with an index).

    /usr/bin/python3 tools/train_demo/train_demo.py --out resources/demo

See README.md beside this file for the time it takes and what comes out.
"""
import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import llama  # noqa: E402
import safetensors_np  # noqa: E402

BOS, EOS = "<s>", "</s>"
VERSE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def load_chapters(corpus_file):
    """The Bible as a list of chapters, each its verses joined by newlines.

    The text comes from the `bible` reader of Debian's bible-kjv (the data file
    /usr/lib/bible.data of bible-kjv-text is compressed in its own format);
    `-f` turns pretty-printing off: one "Ge1:1 text" line per verse."""
    if corpus_file:
        with open(corpus_file, encoding="utf-8") as f:
            lines = f.read().splitlines()
    else:
        lines = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                               text=True).stdout.splitlines()
    chapters, current, key = [], [], None
    for line in lines:
        m = VERSE.match(line.strip())
        if not m:
            continue
        k = (m.group(1), m.group(2))
        if k != key and current:
            chapters.append("\n".join(current))
            current = []
        key = k
        current.append(m.group(4).strip())
    if current:
        chapters.append("\n".join(current))
    return chapters


def model_config(a, vocab_size, bos_id, eos_id):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": a.hidden,
        "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.hidden // a.heads,
        "hidden_act": "silu",
        "max_position_embeddings": a.context,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "tie_word_embeddings": a.tie,
        "torch_dtype": "float32",
        "dtype": "float32",
        "transformers_version": "4.46.0",
    }


def batches(stream, context, batch, gen):
    n = len(stream) - context - 1
    while True:
        starts = torch.randint(0, n, (batch,), generator=gen)
        x = torch.stack([stream[s:s + context + 1] for s in starts.tolist()])
        yield x[:, :-1], x[:, 1:]


@torch.no_grad()
def evaluate(model, stream, context, nseq=32):
    model.eval()
    losses = []
    step = max(1, (len(stream) - context - 1) // nseq)
    for s in range(0, len(stream) - context - 1, step)[:nseq]:
        x = stream[s:s + context + 1][None]
        logits = model(x[:, :-1])
        losses.append(torch.nn.functional.cross_entropy(logits[0], x[0, 1:]).item())
    model.train()
    return sum(losses) / len(losses)


def export(model, cfg, tok, out, shards):
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):  # drop shards of an earlier run with another count
        if re.match(r"model-\d{5}-of-\d{5}\.safetensors$", f):
            os.remove(os.path.join(out, f))
    sd = {k: v for k, v in model.state_dict().items()}
    if cfg["tie_word_embeddings"]:
        sd.pop("lm_head.weight")  # transformers saves a tied head once, under the embedding
    # shards in definition order (embedding, layers, norm, head), cut into equal runs of layers
    order = list(sd)
    layer_of = lambda n: int(n.split(".")[2]) if n.startswith("model.layers.") else None  # noqa: E731
    L = cfg["num_hidden_layers"]
    per = math.ceil(L / shards)
    groups = [[] for _ in range(shards)]
    for n in order:
        li = layer_of(n)
        if li is not None:
            groups[li // per].append(n)
        elif n.startswith("model.embed_tokens"):
            groups[0].append(n)
        else:
            groups[-1].append(n)
    weight_map, total = {}, 0
    for i, names in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        total += safetensors_np.write(os.path.join(out, fname),
                                      {n: safetensors_np.to_numpy(sd[n], "F32") for n in names})
        for n in names:
            weight_map[n] = fname
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    dump(os.path.join(out, "model.safetensors.index.json"), index)
    dump(os.path.join(out, "config.json"), cfg)
    dump(os.path.join(out, "generation_config.json"), {
        "_from_model_config": True,
        "bos_token_id": cfg["bos_token_id"],
        "eos_token_id": cfg["eos_token_id"],
        "do_sample": False,
        "max_new_tokens": 64,
        "transformers_version": cfg["transformers_version"],
    })
    dump(os.path.join(out, "tokenizer.json"), tok.to_hf_json(BOS, EOS), indent=None)
    dump(os.path.join(out, "tokenizer_config.json"), {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": {str(tok.vocab[t]): {"content": t, "lstrip": False, "normalized": False,
                                                     "rstrip": False, "single_word": False, "special": True}
                                 for t in (BOS, EOS)},
        "bos_token": BOS,
        "eos_token": EOS,
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg["max_position_embeddings"],
        "tokenizer_class": "PreTrainedTokenizerFast",
    })


def dump(path, obj, indent=2):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        f.write("\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="resources/demo")
    p.add_argument("--corpus", help="a file of 'Ge1:1 text' lines (default: run `bible -f`)")
    p.add_argument("--seed", type=int, default=1611)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=352)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--tie", action="store_true", help="tie lm_head to the embedding")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--lr", type=float, default=4e-3)
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt", default="And God said")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    np.random.seed(a.seed)
    t0 = time.time()

    chapters = load_chapters(a.corpus)
    log(f"corpus: {len(chapters)} chapters, {sum(map(len, chapters))} characters")
    tok_vocab, merges = bpe.train(chapters, a.vocab, [BOS, EOS], log=lambda s: log(s))
    tok = bpe.Tokenizer(tok_vocab, merges, [BOS, EOS])
    bos_id, eos_id = tok.vocab[BOS], tok.vocab[EOS]
    log(f"tokenizer: {len(tok.vocab)} tokens ({len(merges)} merges) in {time.time() - t0:.0f} s")

    # every 50th chapter is held out to measure loss on text the model has not seen
    train_ids, val_ids = [], []
    for i, ch in enumerate(chapters):
        (val_ids if i % 50 == 49 else train_ids).extend([bos_id] + tok.encode(ch) + [eos_id])
    train_t, val_t = torch.tensor(train_ids), torch.tensor(val_ids)
    log(f"tokens: {len(train_ids)} train, {len(val_ids)} held out "
        f"({sum(map(len, chapters)) / (len(train_ids) + len(val_ids)):.2f} characters per token)")

    cfg = model_config(a, len(tok.vocab), bos_id, eos_id)
    model = llama.LlamaForCausalLM(cfg)
    model.init_weights(cfg["initializer_range"])
    nparams = sum(p.numel() for p in model.parameters())
    log(f"model: {nparams / 1e6:.2f} M parameters, {nparams * 4 / 1e6:.1f} MB in float32")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(a.seed)
    data = batches(train_t, a.context, a.batch, gen)
    t1 = time.time()
    model.train()
    for step in range(1, a.steps + 1):
        lr = a.lr * min(1.0, step / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = next(data)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == a.steps:
            el = time.time() - t1
            msg = f"step {step}/{a.steps} loss {loss.item():.3f} lr {lr:.2e} {step * a.batch * a.context / el:.0f} tok/s"
            if step % 200 == 0 or step == a.steps:
                msg += f" held-out loss {evaluate(model, val_t, a.context):.3f}"
            log(msg + f" ({el / 60:.1f} min)")
    train_s = time.time() - t1

    export(model, cfg, tok, a.out, a.shards)
    prompt = [bos_id] + tok.encode(a.prompt)
    out = llama.greedy(model, prompt, 40, stop_ids=(eos_id,))
    log(f"training took {train_s / 60:.1f} min; everything {(time.time() - t0) / 60:.1f} min")
    log(f"greedy sample: {a.prompt!r} -> {tok.decode(out)!r}")
    log(f"wrote {a.out}")


if __name__ == "__main__":
    main()
