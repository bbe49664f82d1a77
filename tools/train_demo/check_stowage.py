#!/usr/bin/python3
"""Check a written demo checkpoint against Stowage's own engine.

Loads the folder's shards with numpy into the plain-PyTorch Llama of llama.py,
encodes with bpe.py from the folder's tokenizer.json, decodes greedily, then
runs `stowage-cli tokenize` and `stowage-cli run --greedy --json` on the same
folder and compares ids and tokens.

    /usr/bin/python3 tools/train_demo/check_stowage.py resources/demo \
        --cli build/dev/app/stowage-cli --prompt "And God said" --max-new-tokens 40
"""
import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import llama  # noqa: E402
import safetensors_np  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--cli", default="build/dev/app/stowage-cli")
    p.add_argument("--prompt", default="And God said")
    p.add_argument("--text", default="In the beginning")
    p.add_argument("--max-new-tokens", type=int, default=40)
    a = p.parse_args()
    torch.set_num_threads(2)

    with open(os.path.join(a.folder, "config.json")) as f:
        cfg = json.load(f)
    tok = bpe.Tokenizer.from_hf_json(os.path.join(a.folder, "tokenizer.json"))
    model = llama.LlamaForCausalLM(cfg)
    tensors = safetensors_np.read_checkpoint(a.folder)
    sd = {k: torch.from_numpy(v.copy()) for k, (dt, v) in tensors.items()}
    if cfg.get("tie_word_embeddings", False):
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    model.load_state_dict(sd, strict=True)

    ok = True
    py_ids = tok.encode(a.text)
    st = json.loads(subprocess.run([a.cli, "tokenize", a.folder, "--text", a.text, "--json"], check=True,
                                   capture_output=True, text=True).stdout)
    same = st["ids"] == py_ids
    ok &= same
    print(f"tokenize {a.text!r}: python {py_ids} stowage {st['ids']} -> {'SAME' if same else 'DIFFERENT'}")

    prompt = [cfg["bos_token_id"]] + tok.encode(a.prompt)
    ref = llama.greedy(model, prompt, a.max_new_tokens, stop_ids=(cfg["eos_token_id"],))
    run = json.loads(subprocess.run([a.cli, "run", a.folder, "--prompt", a.prompt, "--max-new-tokens",
                                     str(a.max_new_tokens), "--greedy", "--json"], check=True,
                                    capture_output=True, text=True).stdout)
    same_prompt = run["prompt_ids"] == prompt
    same_tokens = run["token_ids"] == ref
    ok &= same_prompt and same_tokens
    print(f"prompt ids: python {prompt} stowage {run['prompt_ids']} -> {'SAME' if same_prompt else 'DIFFERENT'}")
    print(f"greedy tokens ({len(ref)}): {'SAME' if same_tokens else 'DIFFERENT'}")
    if not same_tokens:
        print(f"  python  {ref}\n  stowage {run['token_ids']}")
    print(f"python : {a.prompt}{tok.decode(ref)!s}")
    print(f"stowage: {a.prompt}{run['text']}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
