#!/usr/bin/env bash
# Packs what the GPU machine runs into one tarball (its size limit is 64 MiB):
# the tool, the conformance suite, the GPU op tests and benchmarks, the
# embedding examples (C, Rust; the Python package travels with the source
# tree), the libraries and plugins, stripped of debug info, with the abseil libraries
# the GPU image lacks (bundle_runtime_deps.sh) and, with a deb folder, the
# Vulkan loader's packages (run_vulkan_suite.sh says which).
#
#   tools/gpu/pack_carry.sh BUILD OUT.tgz [DEB_DIR]
#
# There: `tar xzf OUT.tgz` gives carry/build/... and carry/debs/.
set -euo pipefail
build=${1:?usage: pack_carry.sh BUILD OUT.tgz [DEB_DIR]}
out=${2:?usage: pack_carry.sh BUILD OUT.tgz [DEB_DIR]}
debs=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/bundle_runtime_deps.sh" "$build" >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/carry/build/bin"
cp -a "$build/lib" "$stage/carry/build/"
for b in sparkrt sparkrt_conformance sparkrt_gpu_tests sparkrt_gpu_bench sparkrt_kv_cache_bench \
         sparkrt_mla_bench sparkrt_kv_cache_gpu_test sparkrt_paged_attention_gpu_test \
         sparkrt_mla_gpu_test sparkrt_mla_decode_gpu_test sparkrt_turbo_kv_cache_gpu_test \
         sparkrt_turbo_paged_attention_gpu_test \
         sparkrt_collectives_gpu_test sparkrt_collectives_bench sparkrt_copy_bench \
         sparkrt_decode_layer_bench \
         embed_c_decode sparkrt_capi_tests; do
  [ -e "$build/bin/$b" ] && cp -a "$build/bin/$b" "$stage/carry/build/bin/"
done
# The test module sparkrt_gpu_tests loads from the build tree.
if [ -d "$build/tests/gpu/kernels" ]; then
  mkdir -p "$stage/carry/build/tests/gpu"
  cp -a "$build/tests/gpu/kernels" "$stage/carry/build/tests/gpu/"
fi
# The Rust example (tests/embed), built by cargo outside bin/.
rust=$build/tests/embed/rust/target/release/rust_decode
[ -e "$rust" ] && cp -a "$rust" "$stage/carry/build/bin/"
find "$stage/carry/build" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c \
  'head -c 4 "$1" | grep -q ELF && strip --strip-debug "$1"' _ {} \;
[ -n "$debs" ] && cp -a "$debs" "$stage/carry/debs"
tar czf "$out" -C "$stage" carry
echo "$out: $(du -h "$out" | cut -f1)"
