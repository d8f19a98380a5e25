#!/usr/bin/env bash
# The vulkan backend on an NVIDIA GPU, against cuda on the same device: the
# conformance suite on both, the op tests of every module (vulkan against the
# cpu reference), the demo with each KV cache, and sparkrt_kv_cache_bench and
# sparkrt_mla_bench on cuda and vulkan in the order cuda, vulkan, vulkan, cuda
# (the ratio's spread), for the cache writes and the decode shapes of
# docs/benchmarks.md, with the host cost of a launch.
#
#   tools/gpu/run_vulkan_suite.sh [build-dir] [deb-dir]
#
# The GPU image has no Vulkan loader: deb-dir holds libvulkan1 and the GL
# vendor-neutral libraries NVIDIA's Vulkan driver needs (`apt-get download
# libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2`), and
# vulkan-validationlayers, unpacked into / here. The conformance suite and the
# op tests run under the validation layer: any report of it fails the run.
# Every timing starts after the benches' warm-up (SPARKRT_BENCH_WARMUP_MS,
# bench/gpu/bench_support.h): the driver clocks Vulkan work up slowly after
# idle. Results go to $OUT (default ./gpu-results): vulkan_*.log,
# copy_{cuda,vulkan}.{txt,json} (and vkprobe.{txt,json} with VKPROBE=path),
# trace/demo_trace_vulkan*.{json,png} (the demo's trace),
# kv_{writes,decode}_{cuda,vulkan}_{1,2}.json, mla_{cuda,vulkan}_{1,2}.json and
# vulkan_vs_cuda.md (tools/gpu/backend_compare.py). MLA_ARGS passes options
# to sparkrt_mla_bench (default: all its shapes); PART=tests or PART=bench runs
# one half.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-build}" && pwd) || { echo "no build folder ${1:-build}" >&2; exit 2; }
debs=${2:-}
out=${OUT:-$repo/gpu-results}
mkdir -p "$out"

if [ -n "$debs" ]; then
  for f in "$debs"/*.deb; do dpkg -x "$f" / || exit 2; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
export LD_LIBRARY_PATH="$build/lib/bundled:$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -d /usr/local/nvidia/lib64 ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/usr/local/nvidia/lib64"
unset SPARKRT_BACKEND SPARKRT_KERNEL_PATH SPARKRT_PLUGIN_PATH SPARKRT_SYNC_LAUNCHES

status=0
run() {  # name, command...
  local name=$1; shift
  echo "== $name"
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$out/$name.log"
  [ $rc -eq 0 ] || { echo "-- $name: exit $rc"; status=1; }
  if grep -q "sparkrt vulkan validation" "$out/$name.log"; then
    echo "-- $name: the validation layer reported (see $name.log)"; status=1
  fi
}
validate=--set-env=SPARKRT_VULKAN_VALIDATION=1
bin=$build/bin
part=${PART:-all}
if [ "$part" != bench ]; then
run vulkan_info env SPARKRT_BACKEND=vulkan "$bin/sparkrt" info
run conformance_vulkan "$bin/sparkrt_conformance" --backend=vulkan "$validate"
run conformance_cuda "$bin/sparkrt_conformance" --backend=cuda
for m in kv_cache paged_attention mla mla_decode turbo_kv_cache turbo_paged_attention; do
  run "vulkan_$m" "$bin/sparkrt_${m}_gpu_test" --backend=vulkan --set-env=SPARKRT_KERNEL_PATH= \
    "$validate"
done
run demo_vulkan env SPARKRT_BACKEND=vulkan "$bin/sparkrt" demo
# The demo's trace on vulkan, checked (device spans of every op), with the
# whole run and one decode step as PNGs in $OUT/trace.
mkdir -p "$out/trace"
run trace_vulkan env SPARKRT_BACKEND=vulkan python3 "$repo/tests/trace/check_demo_trace.py" \
  "$bin/sparkrt" "$repo/tools/trace_png.py" "$out/trace"
for kv in turbo2 turbo3 turbo4; do
  run "demo_vulkan_$kv" env SPARKRT_BACKEND=vulkan "$bin/sparkrt" demo --kv "$kv"
done
# Every buffer over 1 MiB sparse, over 1 MiB allocations: the KV pools of the
# op tests span several, which their kernels read and write across.
cap=--set-env=SPARKRT_VULKAN_MAX_ALLOCATION=1048576
run conformance_vulkan_sparse "$bin/sparkrt_conformance" --backend=vulkan "$validate" "$cap"
run vulkan_kv_cache_sparse "$bin/sparkrt_kv_cache_gpu_test" --backend=vulkan \
  --set-env=SPARKRT_KERNEL_PATH= "$validate" "$cap"
fi
[ "$part" = tests ] && exit $status

shapes=(--decode-shape 8x4096x32x8 --decode-shape 32x4096x32x8 --decode-shape 8x16384x32x8
        --decode-shape 32x16384x32x8 --decode-shape 128x4096x32x8 --decode-shape 1x4096x32x8)
bench() {  # backend, index
  "$bin/sparkrt_kv_cache_bench" --backend "$1" --writes-only --reps "${REPS:-9}" \
    --json "$out/kv_writes_$1_$2.json" > "$out/kv_writes_$1_$2.txt" 2>&1 || status=1
  "$bin/sparkrt_kv_cache_bench" --backend "$1" "${shapes[@]}" --reps "${REPS:-9}" \
    --json "$out/kv_decode_$1_$2.json" > "$out/kv_decode_$1_$2.txt" 2>&1 || status=1
  tail -n 3 "$out/kv_decode_$1_$2.txt"
  # shellcheck disable=SC2086  # MLA_ARGS is a list of options
  "$bin/sparkrt_mla_bench" --backend "$1" --reps "${REPS:-9}" ${MLA_ARGS:-} \
    --json "$out/mla_$1_$2.json" > "$out/mla_$1_$2.txt" 2>&1 || status=1
  tail -n 12 "$out/mla_$1_$2.txt"
}
# Device copies through sparkrt on both backends, beside vkprobe's compute
# copies (VKPROBE=path to its binary, when carried: the driver's ceiling).
echo "== sparkrt_copy_bench: cuda, vulkan"
for b in cuda vulkan; do
  "$bin/sparkrt_copy_bench" --backend "$b" --sizes 256M,1G,2G --reps "${REPS:-9}" \
    --json "$out/copy_$b.json" > "$out/copy_$b.txt" 2>&1 || status=1
  tail -n 13 "$out/copy_$b.txt"
done
if [ -n "${VKPROBE:-}" ]; then
  echo "== vkprobe (LS 256)"
  "$VKPROBE" --quick --no-extras --filter LS256 --reps 10 --json "$out/vkprobe.json" \
    > "$out/vkprobe.txt" 2>&1 || status=1
  grep -E '^copy-(desc|bda) ' "$out/vkprobe.txt" | awk '{print $(NF-1), $0}' | sort -rn | head -n 4
fi
echo "== sparkrt_kv_cache_bench and sparkrt_mla_bench: cuda, vulkan, vulkan, cuda"
bench cuda 1; bench vulkan 1; bench vulkan 2; bench cuda 2
python3 "$repo/tools/gpu/backend_compare.py" "$out" | tee "$out/vulkan_vs_cuda.md" || status=1
exit $status
