#!/usr/bin/env bash
# Compares the code of every kernel module between two source trees: each
# kernels/ptx/<module>.cu is compiled as the build compiles it (the flags of
# kernels/CMakeLists.txt, without -lineinfo, whose line numbers change with
# any edit) to PTX for each architecture the build targets (compute_80, the
# shipped PTX; compute_90 and compute_121, what the cubins are assembled
# from, with their own #if __CUDA_ARCH__ paths), and the PTX is compared line
# for line once the per-file hash in the names of anonymous-namespace symbols
# (_INTERNAL_xxxxxxxx, _GLOBAL__N__xxxxxxxx) is masked. Where the PTX differs
# (virtual registers renumbered, say), the sm_90 and sm_121 cubins are built
# and their machine code (every .text.* section) compared byte for byte. A
# refactor that must not change the kernels shows "identical" or "same
# machine code" for every module.
#
#   tools/compare_kernel_code.sh OLD_TREE [NEW_TREE]   # NEW_TREE: this checkout
#
# Exit status: 0 when every module is identical, 1 when one differs or exists
# in one tree only, 2 on a usage or compile error.
set -uo pipefail
old=${1:?usage: $0 OLD_TREE [NEW_TREE]}
new=${2:-$(cd "$(dirname "$0")/.." && pwd)}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "no nvcc (set NVCC)" >&2; exit 2; }
work=$(mktemp -d)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT  # KEEP=1 keeps the PTX for a diff
flags=(-std=c++17 -O3 --expt-relaxed-constexpr -Werror all-warnings)

archs=(compute_80 compute_90 compute_121)
compile() {  # tree module out-prefix
  for arch in "${archs[@]}"; do
    "$nvcc" "${flags[@]}" -I"$1/kernels/include" -ptx -arch="$arch" -o "$3.$arch.raw" \
      "$1/kernels/ptx/$2.cu" || return 1
    sed -E 's/(_INTERNAL_|_GLOBAL__N__)[0-9a-f]{8}/\1x/g' "$3.$arch.raw" > "$3.$arch.ptx"
  done
}

status=0
modules=$( (ls "$old/kernels/ptx" "$new/kernels/ptx") | sed -n 's/\.cu$//p' | sort -u)
for m in $modules; do
  if [ ! -f "$old/kernels/ptx/$m.cu" ] || [ ! -f "$new/kernels/ptx/$m.cu" ]; then
    echo "$m: in one tree only"
    status=1
    continue
  fi
  compile "$old" "$m" "$work/old_$m" || exit 2
  compile "$new" "$m" "$work/new_$m" || exit 2
  differs=()
  for arch in "${archs[@]}"; do
    cmp -s "$work/old_$m.$arch.ptx" "$work/new_$m.$arch.ptx" || differs+=("$arch")
  done
  if [ ${#differs[@]} -eq 0 ]; then
    echo "$m: identical"
    continue
  fi
  machine=same
  for arch in sm_90 sm_121; do
    for side in old new; do
      tree=$old
      [ $side = new ] && tree=$new
      "$nvcc" "${flags[@]}" -I"$tree/kernels/include" -cubin -arch=$arch \
        -o "$work/${side}_$m.$arch.cubin" "$tree/kernels/ptx/$m.cu" || exit 2
    done
    python3 - "$work/old_$m.$arch.cubin" "$work/new_$m.$arch.cubin" <<'PY' || machine=differs
import struct, sys
def text_sections(path):  # ELF64: name -> bytes of every .text.* section
    d = open(path, "rb").read()
    shoff = struct.unpack_from("<Q", d, 0x28)[0]
    size, count, names = struct.unpack_from("<HHH", d, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * size) for i in range(count)]
    base = hdrs[names][4]
    out = {}
    for h in hdrs:
        name = d[base + h[0]:d.index(b"\0", base + h[0])].decode()
        if name.startswith(".text."):
            out[name] = d[h[4]:h[4] + h[5]]
    return out
sys.exit(0 if text_sections(sys.argv[1]) == text_sections(sys.argv[2]) else 1)
PY
  done
  if [ $machine = same ]; then
    echo "$m: same machine code (sm_90, sm_121); PTX differs for ${differs[*]}"
  else
    echo "$m: machine code differs (PTX: diff $work/old_$m.${differs[0]}.ptx" \
      "$work/new_$m.${differs[0]}.ptx)"
    status=1
  fi
done
exit $status
