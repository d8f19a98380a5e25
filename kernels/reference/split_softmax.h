// The merge of split-KV softmax partials, shared by the references of the
// decode kernels that split (paged_attention, mla; docs/kernels.md).
#ifndef SPARKRT_KERNELS_REFERENCE_SPLIT_SOFTMAX_H_
#define SPARKRT_KERNELS_REFERENCE_SPLIT_SOFTMAX_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace sparkrt::reference {

// For each of `rows` outputs with `n` splits of `d` values: out = sum_z
// 2^(m_z - M) acc_z / (sum_z 2^(m_z - M) l_z + 2^(sink - M)) over the splits
// with l_z > 0, M the largest of their m_z and the sink; zeros when the
// denominator is 0. part_ml holds (m_z, l_z) in base 2; sink_of(row) is the
// row's extra logit in base 2, -inf for none; store(row, j, o) writes output
// value j of a row.
template <typename SinkOf, typename Store>
void merge_split_partials(const float* part_acc, const float* part_ml, uint64_t rows, uint32_t n,
                          uint32_t d, SinkOf sink_of, Store store) {
  for (uint64_t r = 0; r < rows; ++r) {
    const float* ml = part_ml + r * n * 2;
    const float sink = sink_of(r);
    float m = sink;
    for (uint32_t z = 0; z < n; ++z)
      if (ml[2 * z + 1] > 0.0f) m = std::max(m, ml[2 * z]);
    float total = 0.0f;
    if (m != -INFINITY) {
      if (sink != -INFINITY) total = std::exp2(sink - m);
      for (uint32_t z = 0; z < n; ++z)
        if (ml[2 * z + 1] > 0.0f) total += std::exp2(ml[2 * z] - m) * ml[2 * z + 1];
    }
    for (uint32_t j = 0; j < d; ++j) {
      float o = 0.0f;
      if (total > 0.0f) {
        for (uint32_t z = 0; z < n; ++z)
          if (ml[2 * z + 1] > 0.0f) o += std::exp2(ml[2 * z] - m) * part_acc[(r * n + z) * d + j];
        o /= total;
      }
      store(r, j, o);
    }
  }
}

}  // namespace sparkrt::reference

#endif  // SPARKRT_KERNELS_REFERENCE_SPLIT_SOFTMAX_H_
