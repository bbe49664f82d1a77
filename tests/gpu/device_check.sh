#!/usr/bin/env bash
# The CUDA path of stowage-cli on a machine with a GPU and a PyTorch wheel (a
# CUDA LibTorch inside it) but no Qt: builds the engine and the CLI against
# the wheel's LibTorch, checks that GPU, CPU and disk placements give the same
# tokens as all-CPU with real CUDA copies, times the execution policies,
# checks tokens and speed against transformers + Accelerate themselves where
# they are installed, and compares CPU-offloaded decode with the pinned
# host->GPU copy bound. About 2 minutes on an H200 box, the build included.
# Without a GPU it still runs, on simulated GPUs: a check of the script itself
# on any machine (CI does not run it: a second build of the engine).
#
#   tests/gpu/device_check.sh [BUILD_DIR]
# nlohmann/json.hpp, PCRE2 and utf8proc: the Debian packages, or, on a machine
# without them, what tests/gpu/fetch_deps.sh put in build/gpu-deps beforehand
# (or STOWAGE_NLOHMANN_INCLUDE=folder for the header alone).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/gpu}
python=${PYTHON:-python3}
torch_prefix=$("$python" -c "import torch; print(torch.utils.cmake_prefix_path)" 2>/dev/null || true)
[ -n "$torch_prefix" ] || torch_prefix=/usr/lib/x86_64-linux-gnu/cmake
deps=$PWD/build/gpu-deps # tests/gpu/fetch_deps.sh fills it on Debian 12
nl=${STOWAGE_NLOHMANN_INCLUDE:-$deps}
# The tokenizer's PCRE2 and utf8proc: where this machine has no development
# packages of them, unpack the Debian ones that fetch_deps.sh brought.
if ! pkg-config --exists libpcre2-8 libutf8proc 2>/dev/null && ls "$deps"/debs/*.deb > /dev/null 2>&1; then
  root="$deps/root"
  for f in "$deps"/debs/*.deb; do dpkg-deb -x "$f" "$root"; done
  export PKG_CONFIG_PATH="$root/usr/lib/x86_64-linux-gnu/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root"
  export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "PCRE2 and utf8proc: unpacked from $deps/debs"
fi
gen=(); keep_going=(-k); command -v ninja >/dev/null && { gen=(-G Ninja); keep_going=(-k 0); }
# PyTorch 2.12 and later want C++20 in code that includes their headers.
std=$("$python" -c "import torch; v = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); print(20 if v >= (2, 12) else 17)" 2>/dev/null || echo 17)
echo "LibTorch: $("$python" -c "import torch; print(torch.__version__)" 2>/dev/null || echo "the system's") (C++$std)"
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSTOWAGE_WITH_QT=OFF -DCMAKE_CXX_STANDARD="$std" \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DSTOWAGE_NLOHMANN_INCLUDE="$nl" > "$build.configure.log" 2>&1 \
  || { tail -30 "$build.configure.log"; exit 1; }
# Keep going past the first failing file, so one run lists every error.
cmake --build "$build" -j"$(nproc)" --target stowage-cli stowage_run stowage-mkdemo -- "${keep_going[@]}" > "$build.build.log" 2>&1 \
  || { grep -E -A3 "error|undefined reference" "$build.build.log" | head -80; exit 1; }
cli="$build/app/stowage-cli"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

gpus=$("$python" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
sim=(); [ "$gpus" -gt 0 ] || sim=(--simulate-gpus)
echo "GPUs seen by torch: $gpus ${sim:+(none: simulated GPUs)}"

fail=0
check() { # name, expected, actual
  if [ "$2" == "$3" ]; then echo "ok   $1"; else echo "FAIL $1: expected $2, got $3"; fail=1; fi
}
tokens() { "$python" -c "import json,sys; print(json.load(sys.stdin)['token_ids'])"; }

# 1. Same tokens with every placement (tiny model, fp32).
"$build/app/stowage-mkdemo" "$work/tiny" > /dev/null
ref=$("$cli" run "$work/tiny" --prompt-ids 1,2,3,4 --max-new-tokens 24 --ignore-eos --json | tokens)
for map in '{"": 0}' \
           '{"transformer.wte": 0, "transformer.wpe": 0, "transformer.drop": 0, "transformer.h.0": 0, "transformer.h.1": "cpu", "transformer.h.2": "disk", "transformer.h.3": "cpu", "transformer.ln_f": 0, "lm_head": 0}'; do
  echo "$map" > "$work/map.json"
  for policy in accelerate-like prefetch compute-where-it-lives; do
    got=$("$cli" run "$work/tiny" --device-map "$work/map.json" --offload-folder "$work/off" --policy $policy \
          "${sim[@]}" --prompt-ids 1,2,3,4 --max-new-tokens 24 --ignore-eos --json | tokens)
    check "tokens, $policy, $(echo "$map" | head -c 40)..." "$ref" "$got"
  done
done
out=$("$cli" run "$work/tiny" --device-map "$work/map.json" --offload-folder "$work/off" "${sim[@]}" \
      --prompt-ids 1,2 --max-new-tokens 4 --ignore-eos --json)
peak0=$(echo "$out" | "$python" -c "import json,sys; print(json.load(sys.stdin)['peak_bytes'].get('0', 0) > 0)")
check "peak bytes reported for GPU 0" True "$peak0"

# 2. Speed: a 940 MB fp32 GPT-2-shaped model (16 blocks of 50 MB) with half
# its blocks in RAM.
"$build/app/stowage-mkdemo" "$work/big" 16 1024 32000 > /dev/null
half='{"transformer.wte": 0, "transformer.wpe": 0, "transformer.drop": 0'
for i in $(seq 0 15); do dev=0; [ $i -ge 8 ] && dev='"cpu"'; half="$half, \"transformer.h.$i\": $dev"; done
echo "$half, \"transformer.ln_f\": 0, \"lm_head\": 0}" > "$work/half.json"
echo '{"": 0}' > "$work/gpu.json"
field() { "$python" -c "import json,sys; d = json.load(sys.stdin); print($1)"; }
speed() { # map, policy: decode tok/s; the whole answer stays in $work/run-<policy>-<map>
  local out="$work/run-$2-$(basename "$1" .json).json"
  "$cli" run "$work/big" --device-map "$1" --policy "$2" "${sim[@]}" --prompt-ids 1,2,3,4,5,6,7,8 \
    --max-new-tokens 64 --ignore-eos --json > "$out"
  field "round(d['timings']['decode_tokens_per_s'], 2)" < "$out"; }
all_gpu=$(speed "$work/gpu.json" prefetch)
acc=$(speed "$work/half.json" accelerate-like)
pre=$(speed "$work/half.json" prefetch)
cwl=$(speed "$work/half.json" compute-where-it-lives)
echo "decode tok/s: all on GPU $all_gpu; half in RAM: accelerate-like $acc, prefetch $pre, compute-where-it-lives $cwl"
"$python" -c "print('prefetch / accelerate-like: %.2f, compute-where-it-lives / accelerate-like: %.2f' % ($pre / $acc, $cwl / $acc))"

# 2b. The reference itself: transformers + Accelerate (hooks that copy each
# RAM block to the GPU before it runs) on the same model, maps and prompt:
# the same first tokens, and the decode speed to beat.
if [ "$gpus" -gt 0 ] && "$python" -c "import transformers, accelerate" 2> /dev/null; then
  for m in gpu half; do
    "$python" tests/gpu/hf_reference.py "$work/big" "$work/$m.json" 1,2,3,4,5,6,7,8 64 2> "$work/hf-$m.log" \
      | tail -1 > "$work/hf-$m.json" || { tail -5 "$work/hf-$m.log"; fail=1; }
    check "first 16 tokens as transformers, $m" "$(field "d['token_ids'][:16]" < "$work/hf-$m.json")" \
      "$(field "d['token_ids'][:16]" < "$work/run-prefetch-$m.json")"
  done
  hf_gpu=$(field "round(d['decode_tokens_per_s'], 2)" < "$work/hf-gpu.json")
  hf_half=$(field "round(d['decode_tokens_per_s'], 2)" < "$work/hf-half.json")
  echo "transformers $("$python" -c "import transformers, accelerate; print(transformers.__version__ + ' + Accelerate ' + accelerate.__version__)") decode tok/s: all on GPU $hf_gpu; half in RAM $hf_half"
  "$python" -c "print('half in RAM: prefetch / Accelerate %.2f, accelerate-like / Accelerate %.2f; all on GPU: Stowage / transformers %.2f' % ($pre / $hf_half, $acc / $hf_half, $all_gpu / $hf_gpu))"
else
  echo "transformers + Accelerate: not importable or no GPU here, so no comparison with the reference itself"
fi

# 3. CPU-offloaded decode against the pinned-PCIe bound: with half the blocks
# in RAM, each token copies those bytes host->GPU (prefetch: pinned, on a side
# stream), so decode can be no faster than pinned bandwidth / those bytes.
ram_bytes=$("$python" - "$work/big/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
total = 0
for name, t in header.items():
    if name.startswith("transformer.h.") and int(name.split(".")[2]) >= 8:
        total += t["data_offsets"][1] - t["data_offsets"][0]
print(total)
PY
)
if [ "$gpus" -gt 0 ]; then
  pinned=$("$python" - <<'PY'
import time, torch
x = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
y = torch.empty_like(x, device="cuda")
y.copy_(x, non_blocking=True); torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(10):
    y.copy_(x, non_blocking=True)
torch.cuda.synchronize()
print(10 * x.numel() / (time.perf_counter() - t))
PY
)
  "$python" -c "
b, bw = $ram_bytes, $pinned
bound = bw / b
print('pinned host->GPU %.1f GB/s; %.0f MB in RAM per token: bound %.2f tok/s' % (bw / 1e9, b / 1e6, bound))
print('prefetch %.2f tok/s = %.0f%% of the pinned-PCIe bound; accelerate-like %.0f%%' % ($pre, 100 * $pre / bound, 100 * $acc / bound))"
else
  echo "pinned-PCIe bound: no GPU here (simulated GPUs copy through RAM); $((ram_bytes / 1000000)) MB in RAM per token"
fi
[ $fail -eq 0 ] && echo "device check passed" || { echo "device check FAILED"; exit 1; }
