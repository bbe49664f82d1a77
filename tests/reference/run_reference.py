#!/usr/bin/python3
"""Reference greedy generation for a Hugging Face checkpoint, in plain torch.

Usage:
  run_reference.py --checkpoint DIR --prompt-ids 1,2,3 --max-new-tokens N
                   [--dtype float32|float64|bfloat16] [--kv-dtype float16] [--no-cache]

Loads DIR/config.json and DIR/model.safetensors (or the shards named by
DIR/model.safetensors.index.json), runs the prompt as one prefill, then greedy
(argmax, first max on ties) decode steps with a KV cache; EOS is ignored.
Prints one JSON object on stdout:
  {"token_ids": [N ids],
   "prefill_logits": [[V floats] for each prompt position],
   "step_logits": [[V floats] for each decode step's input position]}
step_logits[i] are the logits at the position of token_ids[i] (fed back as the
decode input), from which token_ids[i + 1] was chosen: N - 1 entries, since
the last chosen token is never fed back (as in transformers' generate).
--no-cache recomputes the whole sequence at every step instead (same output
format; for cross-checking). Exit 2 on bad arguments or checkpoints, 3 when
torch is not importable.
"""
import argparse
import json
import os
import sys

try:
    import torch
except ImportError:
    print("torch is not importable by " + sys.executable, file=sys.stderr)
    sys.exit(3)

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402
import ref_models  # noqa: E402
import quant_ref  # noqa: E402

COMPUTE_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def load(checkpoint, dtype=torch.float32):
    with open(os.path.join(checkpoint, "config.json")) as f:
        cfg = json.load(f)
    # a quantized checkpoint is dequantized first, as transformers 5.6 does without kernels
    tensors = quant_ref.dequantize(cfg, st_io.load_checkpoint(checkpoint))
    return ref_models.build_model(cfg, tensors, dtype)


@torch.no_grad()
def generate_no_cache(model, prompt_ids, n):
    seq = list(prompt_ids)
    prefill = None
    tokens, steps = [], []
    for i in range(n):
        logits = ref_models.full_logits(model, seq)
        if i == 0:
            prefill = logits
        else:
            steps.append(logits[-1])
        nxt = int(torch.argmax(logits[-1]))
        tokens.append(nxt)
        seq.append(nxt)
    if prefill is None:
        prefill = ref_models.full_logits(model, seq)
    return tokens, prefill, steps


def result_json(tokens, prefill, steps):
    return {
        "token_ids": tokens,
        "prefill_logits": prefill.float().tolist(),
        "step_logits": [s.float().tolist() for s in steps],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids, e.g. 1,2,3")
    ap.add_argument("--max-new-tokens", type=int, required=True)
    ap.add_argument("--dtype", default="float32", choices=sorted(COMPUTE_DTYPES),
                    help="compute dtype (weights are cast to it); float16 is not offered because "
                         "CPU matmul in this torch has no Half kernel")
    ap.add_argument("--kv-dtype", choices=["float16"],
                    help="keep keys and values rounded to this dtype (the engine's cache for an fp16 "
                         "checkpoint computed in fp32 on the CPU)")
    ap.add_argument("--no-cache", action="store_true")
    a = ap.parse_args(argv)
    try:
        prompt = [int(s) for s in a.prompt_ids.split(",") if s.strip() != ""]
    except ValueError:
        ap.error("--prompt-ids must be comma-separated integers")
    if not prompt:
        ap.error("--prompt-ids is empty")
    if a.max_new_tokens < 0:
        ap.error("--max-new-tokens must be >= 0")
    torch.set_num_threads(1)
    try:
        model = load(a.checkpoint, COMPUTE_DTYPES[a.dtype])
        if a.kv_dtype:
            model.kv_dtype = torch.float16
        vocab = model.cfg["vocab_size"]
        if any(t < 0 or t >= vocab for t in prompt):
            print("run_reference: prompt id out of range [0, %d)" % vocab, file=sys.stderr)
            sys.exit(2)
        if a.no_cache:
            out = generate_no_cache(model, prompt, a.max_new_tokens)
        else:
            out = ref_models.generate(model, prompt, a.max_new_tokens)
    except (OSError, ValueError, KeyError, NotImplementedError, RuntimeError) as e:
        # a missing tensor surfaces as KeyError, a wrong shape as RuntimeError
        print("run_reference: %s: %s: %s" % (a.checkpoint, type(e).__name__, e), file=sys.stderr)
        sys.exit(2)
    json.dump(result_json(*out), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
