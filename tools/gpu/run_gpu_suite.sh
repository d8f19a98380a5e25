#!/usr/bin/env bash
# The GPU suite: every test labelled `gpu` and the CUDA benchmark, run on a
# machine with an NVIDIA GPU against a build tree made elsewhere (the GPU
# image has no abseil; bundle it first with tools/gpu/bundle_runtime_deps.sh,
# which the target sparkrt_gpu_bundle runs).
#
#   tools/gpu/run_gpu_suite.sh [build-dir]      # default: build
#
# Logs and results go to $OUT (default ./gpu-results): device.txt,
# ctest_gpu.log, bench.txt, bench.json, and for the KV-cache ops
# kv_bench.{txt,json} (sparkrt_kv_cache_bench) and kv_torch.json, kv_table.md
# (the PyTorch baseline on the same shapes, tools/gpu/kv_torch_baseline.py),
# and for the MLA ops mla_bench.{txt,json} (sparkrt_mla_bench), and for a chain of
# decode layers decode_layer.{txt,json} (sparkrt_decode_layer_bench: what dependent
# launches gain in a graph, what a trace costs a host-submitted step) and
# decode_layer_torch.{txt,json} (the same chain in PyTorch, one CUDA graph,
# tools/gpu/decode_layer_torch.py); power.csv, the board's
# power and SM clock every 100 ms, and power.txt, their summary per phase
# (tools/gpu/power_summary.py): a phase under the power cap ran below the full clock.
# Exit status: non-zero when a test failed or a benchmark did not run.
#
# Narrower runs: SPARKRT_GPU_TESTS=<ctest regex> runs only the matching gpu
# tests; SPARKRT_GPU_SKIP_LAUNCH_BENCH=1 skips sparkrt_gpu_bench;
# SPARKRT_GPU_SKIP_KV_BENCH=1 skips the KV-cache benchmark and its baseline;
# SPARKRT_GPU_SKIP_MLA_BENCH=1 skips the MLA benchmark;
# SPARKRT_GPU_SKIP_DECODE_LAYER_BENCH=1 skips the decode-layer benchmark and its
# PyTorch counterpart.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-build}" && pwd) || { echo "no build folder ${1:-build}" >&2; exit 2; }
out=${OUT:-$repo/gpu-results}
mkdir -p "$out"

# CTest files hold the build machine's absolute paths; when the tree was built
# elsewhere, make those paths lead here.
orig_src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
orig_build=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$build/CMakeCache.txt")
if [ -n "$orig_src" ] && [ "$orig_src" != "$repo" ]; then
  if [ ! -e "$orig_src" ]; then
    mkdir -p "$(dirname "$orig_src")" && ln -s "$repo" "$orig_src"
  fi
  [ "$(cd "$orig_build" 2>/dev/null && pwd -P)" = "$(cd "$build" && pwd -P)" ] ||
    echo "warning: $orig_build does not lead to $build; ctest paths may not resolve" >&2
fi

export LD_LIBRARY_PATH="$build/lib/bundled:$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -d /usr/local/nvidia/lib64 ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/usr/local/nvidia/lib64"
unset SPARKRT_BACKEND SPARKRT_KERNEL_PATH SPARKRT_PLUGIN_PATH SPARKRT_SYNC_LAUNCHES

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(uname -srm)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1
  echo "missing libraries:"
  ldd "$build"/lib/libsparkrt.so "$build"/lib/sparkrt/plugins/*.so "$build"/bin/sparkrt_gpu_bench 2>&1 |
    grep 'not found' || echo "  none"
} | tee "$out/device.txt"

# Power and clock samples, and a timestamped line where each phase starts.
sampler=
: > "$out/phases.txt"
phase() { echo "$(date -u '+%Y/%m/%d %H:%M:%S.%3N') $1" >> "$out/phases.txt"; }
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms 100 > "$out/power.csv" 2>/dev/null &
  sampler=$!
fi

status=0
echo "== ctest -L gpu"
phase "gpu tests"
ctest --test-dir "$build" -L gpu ${SPARKRT_GPU_TESTS:+-R "$SPARKRT_GPU_TESTS"} \
  --output-on-failure --timeout 300 2>&1 | tee "$out/ctest_gpu.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
# The demo's trace on cuda (trace.demo_png.cuda, one of the gpu tests): the
# JSON, the whole run and one decode step as PNGs.
mkdir -p "$out/trace"
cp "$build"/tests/trace/demo_cuda/demo_trace_cuda*.{json,png} "$out/trace/" 2>/dev/null || true

if [ "${SPARKRT_GPU_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  # API errors are expected: the suite feeds the driver bad input on purpose.
  echo "== compute-sanitizer (memcheck) on the conformance suite"
  compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 9 \
    "$build/bin/sparkrt_conformance" --backend=cuda 2>&1 | tail -n 30 |
    tee "$out/sanitizer.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [ "${SPARKRT_GPU_SKIP_LAUNCH_BENCH:-0}" != 1 ]; then
  echo "== sparkrt_gpu_bench"
  phase "launch bench"
  "$build/bin/sparkrt_gpu_bench" --json "$out/bench.json" 2>&1 | tee "$out/bench.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [ "${SPARKRT_GPU_SKIP_KV_BENCH:-0}" != 1 ] && [ -x "$build/bin/sparkrt_kv_cache_bench" ]; then
  echo "== sparkrt_kv_cache_bench"
  phase "kv bench"
  "$build/bin/sparkrt_kv_cache_bench" --json "$out/kv_bench.json" 2>&1 | tee "$out/kv_bench.txt"
  if [ "${PIPESTATUS[0]}" -eq 0 ]; then
    echo "== PyTorch baseline on the same shapes"
    phase "torch baseline"
    PYTHONUNBUFFERED=1 python3 "$repo/tools/gpu/kv_torch_baseline.py" --sparkrt "$out/kv_bench.json" \
      --json "$out/kv_torch.json" --markdown "$out/kv_table.md" || status=1
  else
    status=1
  fi
fi

if [ "${SPARKRT_GPU_SKIP_MLA_BENCH:-0}" != 1 ] && [ -x "$build/bin/sparkrt_mla_bench" ]; then
  echo "== sparkrt_mla_bench"
  phase "mla bench"
  "$build/bin/sparkrt_mla_bench" --json "$out/mla_bench.json" 2>&1 | tee "$out/mla_bench.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [ "${SPARKRT_GPU_SKIP_DECODE_LAYER_BENCH:-0}" != 1 ] &&
   [ -x "$build/bin/sparkrt_decode_layer_bench" ]; then
  echo "== sparkrt_decode_layer_bench"
  phase "decode layer bench"
  "$build/bin/sparkrt_decode_layer_bench" --json "$out/decode_layer.json" 2>&1 |
    tee "$out/decode_layer.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  echo "== PyTorch decode-layer chain on the same shape"
  phase "decode layer torch"
  PYTHONUNBUFFERED=1 python3 "$repo/tools/gpu/decode_layer_torch.py" \
    --json "$out/decode_layer_torch.json" 2>&1 | tee "$out/decode_layer_torch.txt"
  # 77: no torch with CUDA here, which the script says; not a failure.
  torch_rc=${PIPESTATUS[0]}
  [ "$torch_rc" -eq 0 ] || [ "$torch_rc" -eq 77 ] || status=1
fi

phase "end"
if [ -n "$sampler" ]; then
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  echo "== power and SM clock by phase"
  python3 "$repo/tools/gpu/power_summary.py" "$out/power.csv" "$out/phases.txt" |
    tee "$out/power.txt"
fi

echo "== done: status $status, results in $out"
exit $status
