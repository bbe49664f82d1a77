#!/usr/bin/env bash
# The whole benchmark suite, one command, under 10 minutes on 2 cores:
#   tests/bench/run_all.sh [BUILD_DIR]        (default build/perf, else build/ci)
# Builds the benchmarks, then runs planning (7B/70B/405B), tokenizer,
# decode/memory/offload/prediction, and the user-facing prediction against
# `stowage-cli run` (bench_predict.py); each prints ratios measured in the same
# run. Benchmarks are never part of ctest. Exit status: 0 when every
# benchmark ran (a ratio past its goal is reported, not fatal).
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-}"
if [[ -z "$build" ]]; then
  for d in "$root/build/perf" "$root/build/ci"; do [[ -f "$d/build.ninja" ]] && build="$d" && break; done
fi
[[ -n "$build" && -f "$build/build.ninja" ]] || { echo "no configured build dir (give one)" >&2; exit 2; }
ninja -C "$build" -j2 bench_planner bench_tokenizer bench_decode stowage-cli >/dev/null || exit 2
start=$(date +%s)
echo "== machine"
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|L3)' | sed 's/  */ /g'
echo "flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|avx512_fp16|avx512_vnni|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)   (others' work on this machine slows every figure)"
failed=0
for b in bench_planner bench_tokenizer bench_decode; do
  echo; echo "== $b"
  t0=$(date +%s)
  (cd "$build" && "./tests/$b") || { echo "$b exited $?"; failed=1; }
  echo "($b: $(( $(date +%s) - t0 )) s)"
done
echo; echo "== bench_predict"
t0=$(date +%s)
/usr/bin/python3 "$root/tests/bench/bench_predict.py" --cli "$build/app/stowage-cli" || { echo "bench_predict exited $?"; failed=1; }
echo "(bench_predict: $(( $(date +%s) - t0 )) s)"
echo; echo "== bench_moe"
t0=$(date +%s)
/usr/bin/python3 "$root/tests/bench/bench_moe.py" --cli "$build/app/stowage-cli" || { echo "bench_moe exited $?"; failed=1; }
echo "(bench_moe: $(( $(date +%s) - t0 )) s)"
echo; echo "== bench_context"
t0=$(date +%s)
/usr/bin/python3 "$root/tests/bench/bench_context.py" --cli "$build/app/stowage-cli" || { echo "bench_context exited $?"; failed=1; }
echo "(bench_context: $(( $(date +%s) - t0 )) s)"
echo; echo "suite: $(( $(date +%s) - start )) s"
exit $failed
