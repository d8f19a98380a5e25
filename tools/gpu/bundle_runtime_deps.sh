#!/usr/bin/env bash
# Copies the shared libraries a build tree needs but a GPU machine may lack
# (abseil: Debian ships it, the GPU image does not) into <build>/lib/bundled,
# so the tree runs there with LD_LIBRARY_PATH=<build>/lib/bundled. A folder of
# its own: <build>/lib is on the binaries' RPATH, and copies there would shadow
# the system's libraries in local builds.
#
#   tools/gpu/bundle_runtime_deps.sh build-cuda
set -euo pipefail
build=${1:?usage: bundle_runtime_deps.sh <build-dir>}
[ -d "$build/lib" ] || { echo "no $build/lib: build the tree first" >&2; exit 1; }

mapfile -t elves < <(find "$build/lib" "$build/bin" "$build/tests" -type f \
  \( -name '*.so' -o -name '*.so.*' -o -perm -u+x \) 2>/dev/null |
  while read -r f; do head -c 4 "$f" 2>/dev/null | grep -q ELF && echo "$f"; done)
dest="$build/lib/bundled"
mkdir -p "$dest"
copied=0
for lib in $(ldd "${elves[@]}" 2>/dev/null | awk '/=> \// && /libabsl_/ {print $3}' | sort -u); do
  if [ ! -e "$dest/$(basename "$lib")" ]; then
    cp -L "$lib" "$dest/"
    copied=$((copied + 1))
  fi
done
echo "bundled $copied new abseil libraries into $dest ($(ls "$dest" | wc -l) in total)"
