"""transformers + Accelerate on the GPU, on the model and map device_check.sh
times: greedy token ids and decode tokens/s, as JSON on one line.

    python3 tests/gpu/hf_reference.py MODEL_DIR MAP.json PROMPT_IDS NEW_TOKENS
"""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    path, map_file, prompt, new = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with open(map_file) as f:
        device_map = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(path, device_map=device_map, dtype=torch.float32)
    model.generation_config.pad_token_id = model.generation_config.eos_token_id
    ids = torch.tensor([[int(t) for t in prompt.split(",")]], device="cuda")

    def generate(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        torch.cuda.synchronize()
        return time.perf_counter() - start, out

    generate(4)  # warm-up: CUDA context, kernels, Accelerate's hooks
    first, _ = generate(1)
    full, out = generate(new + 1)
    print(json.dumps({"decode_tokens_per_s": new / (full - first),
                      "token_ids": out[0, ids.shape[1]:ids.shape[1] + new].tolist()}))


if __name__ == "__main__":
    main()
