#!/bin/sh
# Writes a trimmed copy of each nvcc-built PTX module into the fuzz seed
# corpus: the module header (up to 60 lines), then every .entry from its
# signature through its opening brace and the first 20 lines of its body.
#
#   tests/fuzz/trim_ptx.sh build/share/sparkrt/kernels/*.ptx
set -eu
out_dir=$(dirname "$0")/corpus
for ptx in "$@"; do
  out=$out_dir/module_$(basename "$ptx")
  awk '
    /\.entry[ \t]/ { in_entry = 1; seen_entry = 1; body = -1 }
    !seen_entry { if (++header <= 60) print; next }
    in_entry {
      print
      if (body >= 0 && ++body >= 20) { print "}"; in_entry = 0 }
      else if (body < 0 && /^\{/) body = 0
    }
  ' "$ptx" >"$out"
  echo "$out: $(wc -c <"$out") bytes"
done
