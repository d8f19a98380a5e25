#!/usr/bin/env bash
# A/B of two build trees on one GPU, back to back: the decode benchmarks
# (sparkrt_kv_cache_bench --decode-only --decode-subset, sparkrt_mla_bench
# --decode-only) and, with SPARKRT_AB_LAUNCH=1, the launch benchmark
# (sparkrt_gpu_bench) of build A, then B, then B, then A, so that a drift of the board over the run (clock, power
# cap) weighs on both alike; then tools/gpu/ab_compare.py prints B / A per
# shape and the spread of the two runs.
#
#   tools/gpu/ab_bench.sh BUILD_A BUILD_B        # e.g. the old and the new tree
#
# Results go to $OUT (default ./ab-results): <bench>.<A|B>.<run>.json and
# ab.md. Each build runs with its own lib/ (and lib/bundled/, falling back to
# BUILD_B's for a tree built without the bundle).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
a=$(cd "${1:?usage: $0 BUILD_A BUILD_B}" && pwd) || exit 2
b=$(cd "${2:?usage: $0 BUILD_A BUILD_B}" && pwd) || exit 2
out=${OUT:-$repo/ab-results}
mkdir -p "$out"
unset SPARKRT_BACKEND SPARKRT_KERNEL_PATH SPARKRT_PLUGIN_PATH SPARKRT_SYNC_LAUNCHES

run() {  # label build run
  local label=$1 build=$2 n=$3 bundled=$2/lib/bundled
  [ -d "$bundled" ] || bundled=$b/lib/bundled
  local path="$bundled:$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -d /usr/local/nvidia/lib64 ] && path="$path:/usr/local/nvidia/lib64"
  echo "== $label run $n ($build)"
  LD_LIBRARY_PATH=$path "$build/bin/sparkrt_kv_cache_bench" --decode-only --decode-subset \
    --json "$out/kv.$label.$n.json" > "$out/kv.$label.$n.txt" 2>&1 || return 1
  LD_LIBRARY_PATH=$path "$build/bin/sparkrt_mla_bench" --decode-only \
    --json "$out/mla.$label.$n.json" > "$out/mla.$label.$n.txt" 2>&1 || return 1
  [ "${SPARKRT_AB_LAUNCH:-0}" = 1 ] || return 0
  LD_LIBRARY_PATH=$path "$build/bin/sparkrt_gpu_bench" --json "$out/launch.$label.$n.json" \
    > "$out/launch.$label.$n.txt" 2>&1
}

status=0
run A "$a" 1 && run B "$b" 1 && run B "$b" 2 && run A "$a" 2 || status=1
python3 "$repo/tools/gpu/ab_compare.py" "$out" | tee "$out/ab.md" || status=1
exit $status
