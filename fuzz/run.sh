#!/usr/bin/env bash
# fuzz/run.sh [SECONDS] [TARGET...] — docs/fuzzing.md
#
# For each target (default: all nine): replays the committed crash inputs in
# fuzz/regressions/TARGET/, then fuzzes for SECONDS (default 600) from the
# seeds make_corpus.py wrote plus the corpus kept from earlier runs, and
# prints a results row: executions, executions/s, coverage (libFuzzer's cov:
# and ft: at the end), corpus size. Exits 1 if any target crashed, hung,
# leaked or ran out of memory; the input is left in ARTIFACTS/TARGET/.
#
# Needs a build with STOWAGE_FUZZ=ON (cmake --workflow --preset fuzz builds
# build/fuzz); STOWAGE_FUZZ_BUILD names another build's fuzz/ folder (the
# asan preset's ctests set it). Extra libFuzzer flags: FUZZ_FLAGS="...".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${STOWAGE_FUZZ_BUILD:-$here/../build/fuzz/fuzz}
seconds=${1:-600}
shift $(($# > 0 ? 1 : 0))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors index config tokenizer_json vocab_merges sentencepiece devicemap
                                     torchbin worker)

# Longest input per target: a little over the largest seed.
max_len() {
    case $1 in
    tokenizer_json | sentencepiece) echo 16384 ;;
    safetensors | index | vocab_merges) echo 8192 ;;
    *) echo 4096 ;;
    esac
}

# Symbolized stack traces (Debian names it llvm-symbolizer-14).
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ] && [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]; then
    export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
fi

failed=0
printf '| target | seconds | executions | exec/s | cov | ft | corpus | result |\n'
printf '|---|---:|---:|---:|---:|---:|---:|---|\n'
for t in "${targets[@]}"; do
    bin=$build/fuzz_$t
    if [ ! -x "$bin" ]; then
        echo "fuzz/run.sh: $bin is not built (cmake --workflow --preset fuzz)" >&2
        exit 2
    fi
    corpus=$build/corpus/$t
    artifacts=$build/artifacts/$t
    log=$build/logs/$t.log
    mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
    result=ok
    # Every committed crash input must now pass.
    shopt -s nullglob
    regressions=("$here"/regressions/"$t"/*)
    shopt -u nullglob
    if [ ${#regressions[@]} -gt 0 ] && ! "$bin" -timeout=10 -rss_limit_mb=2048 "${regressions[@]}" >"$log.regressions" 2>&1; then
        echo "fuzz/run.sh: $t fails on a committed regression input (see $log.regressions)" >&2
        tail -30 "$log.regressions" >&2
        result="REGRESSION"
        failed=1
    fi
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
        -print_final_stats=1 -artifact_prefix="$artifacts/" ${FUZZ_FLAGS:-} "$corpus" "$build/seeds/$t" >"$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        result="FAILED (exit $rc, $(ls -t "$artifacts" | head -1))"
        failed=1
        echo "fuzz/run.sh: $t failed; the end of $log:" >&2
        tail -40 "$log" >&2
    fi
    last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
    cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
    ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
    corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$last")
    execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log")
    rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log")
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$t" "$seconds" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
        "${ft:-?}" "${corp:-?}" "$result"
done
exit $failed
