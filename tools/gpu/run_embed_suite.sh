#!/usr/bin/env bash
# The embedding checks on a GPU machine: the C, Rust and Python decode-step
# programs on cuda (and on vulkan where its loader is found), the Python test
# suite on cuda (the Triton case included), and the C API's launch cost
# against KernelLaunch (sparkrt_gpu_bench), against a build tree made
# elsewhere and carried (tools/gpu/pack_carry.sh; the Python package comes
# from this source tree).
#
#   tools/gpu/run_embed_suite.sh [build-dir]      # default: build
#
# Needs python3 with numpy and pytest (torch and Triton for the Triton case).
# Exit status: non-zero when any program or test failed.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-build}" && pwd) || { echo "no build folder ${1:-build}" >&2; exit 2; }
export LD_LIBRARY_PATH=$build/lib/bundled:$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export SPARKRT_C_LIBRARY=$build/lib/libsparkrt_c.so.0 PYTHONPATH=$repo/python PYTHONDONTWRITEBYTECODE=1
status=0
run() {
  echo "== $*"
  "$@" || { echo "FAILED: $*"; status=1; }
}
backends=cuda
if SPARKRT_BACKEND=vulkan "$build/bin/sparkrt" info >/dev/null 2>&1; then backends="cuda vulkan"; fi
for b in $backends; do
  run env SPARKRT_BACKEND=$b "$build/bin/embed_c_decode"
  run env SPARKRT_BACKEND=$b "$build/bin/rust_decode"
  run env SPARKRT_BACKEND=$b python3 "$repo/python/examples/decode_step.py"
done
run env SPARKRT_TEST_BACKENDS=cuda python3 -m pytest -q -rs -p no:cacheprovider "$repo/python/tests"
run "$build/bin/sparkrt_gpu_bench" --reps 61
exit $status
