// References for kernels/ptx/paged_attention.cu (contracts in docs/kernels.md,
// "Module paged_attention"): decode attention, one query token per sequence,
// over a paged KV cache. f32 scores, softmax and accumulation, one rounding to
// bf16 at the output.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "sparkrt/numeric.h"
#include "operands.h"
#include "reference.h"
#include "sparkrt/contract/paged_attention.h"
#include "split_softmax.h"

namespace sparkrt::reference {
namespace {

namespace pa = contract::paged_attention;  // the module's launch contract

// The scalars of a decode launch, by meaning rather than position.
struct DecodeShape {
  uint32_t num_seqs;  // grid.y
  uint32_t max_blocks_per_seq;
  uint32_t num_q_heads;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint32_t block_size;
  float inv_sqrt_d;
  uint32_t q_stride;
  uint64_t block_stride;  // elements per cache block
  uint32_t sliding_window;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  // Split entries: num_splits > 0, partials instead of `out` at argument 3
  // (part_acc) and 4 (part_ml); block_tables and seq_lens move to 5 and 6.
  uint32_t num_splits = 0;
  // Split-merge entries: `out` at 3, part_acc 4, part_ml 5, counters 6,
  // block_tables and seq_lens at 7 and 8; the partials are merged into `out`.
  bool merge = false;
};

// The scalars all six decode entries take in this order, from argument
// `first` on (6 for the one-pass entries, 7 for the split ones, 9 for the
// split-merge ones).
DecodeShape leading_scalars(const Launch& l, uint32_t first) {
  DecodeShape s{};
  s.num_seqs = l.grid()[1];
  s.max_blocks_per_seq = l.value<uint32_t>(first);
  s.num_q_heads = l.value<uint32_t>(first + 1);
  s.num_kv_heads = l.value<uint32_t>(first + 2);
  s.head_dim = l.value<uint32_t>(first + 3);
  s.block_size = l.value<uint32_t>(first + 4);
  s.inv_sqrt_d = l.value<float>(first + 5);
  return s;
}

constexpr float kLog2e = 1.4426950408889634f;
// How a cache element reads as f32.
inline float load(bf16_bits v, float) { return bf16_to_f32(v); }
inline float load(fp8_bits v, float scale) { return fp8_e4m3_to_f32(v) * scale; }

// out = sum_z 2^(m_z - M) acc_z / sum_z 2^(m_z - M) l_z over the splits with
// l_z > 0 (M their largest m_z); zeros when there are none.
void combine(const float* part_acc, const float* part_ml, bf16_bits* out, uint64_t rows,
             uint32_t n, uint32_t d) {
  merge_split_partials(
      part_acc, part_ml, rows, n, d, [](uint64_t) { return -INFINITY; },
      [&](uint64_t r, uint32_t j, float o) { out[r * d + j] = f32_to_bf16(o); });
}

template <typename CacheT>
absl::Status decode(const Launch& l, const DecodeShape& s) {
  if (s.num_seqs == 0) return absl::OkStatus();
  const uint32_t hq = s.num_q_heads;
  const uint32_t hkv = s.num_kv_heads;
  const uint32_t d = s.head_dim;
  if (hkv == 0 || d == 0 || s.block_size == 0 || hq == 0 || hq % hkv != 0)
    return invalid_launch(
        l, absl::StrFormat("num_q_heads %d must be a positive multiple of num_kv_heads "
                           "%d; head_dim %d and block_size %d must be > 0",
                           hq, hkv, d, s.block_size));
  // grid.x = num_q_heads / hpc, where a CTA serves hpc in 1..8 query heads
  // of one KV head; the result does not depend on hpc.
  const uint32_t gx = l.grid()[0];
  const uint32_t hpc = gx != 0 && hq % gx == 0 ? hq / gx : 0;
  if (hpc == 0 || hpc > pa::kMaxHeadsPerCta || (hq / hkv) % hpc != 0)
    return invalid_launch(
        l, absl::StrFormat("grid.x %d must be num_q_heads %d / hpc, with hpc at most %d "
                           "dividing the GQA group of %d",
                           gx, hq, pa::kMaxHeadsPerCta, hq / hkv));
  if (s.num_splits > 0 && l.grid()[2] != s.num_splits)
    return invalid_launch(
        l, absl::StrFormat("grid.z %d must equal num_splits %d", l.grid()[2], s.num_splits));
  if (d % pa::kHeadDimAlign != 0 || d > pa::kMaxHeadDim)
    return invalid_launch(l, absl::StrFormat("head_dim %d must be a multiple of %d and at most %d",
                                             d, pa::kHeadDimAlign, pa::kMaxHeadDim));
  if (s.q_stride < uint64_t{hq} * d)
    return invalid_launch(
        l, absl::StrFormat("q_stride %d is shorter than num_q_heads * head_dim = %d", s.q_stride,
                           uint64_t{hq} * d));
  const uint64_t row = uint64_t{hkv} * d;
  if (s.block_stride < uint64_t{s.block_size} * row)
    return invalid_launch(
        l, absl::StrFormat("cache block stride %d is below block_size * num_kv_heads * "
                           "head_dim = %d elements",
                           s.block_stride, uint64_t{s.block_size} * row));

  const bool split = s.num_splits > 0;
  const uint32_t arg_tables = s.merge ? 7 : split ? 5 : 4;
  SPARKRT_ASSIGN_OR_RETURN(auto seq_lens, operand<const int32_t>(l, arg_tables + 1, "seq_lens",
                                                                 s.num_seqs,
                                                                 "one length per sequence"));
  const uint64_t capacity = uint64_t{s.max_blocks_per_seq} * s.block_size;
  uint64_t table_extent = 0;
  for (uint32_t q = 0; q < s.num_seqs; ++q) {
    if (seq_lens[q] < 0 || uint64_t(seq_lens[q]) > capacity)
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: seq_lens[%d] = %d is outside [0, max_blocks_per_seq %d * block_size %d = %d]",
          l.entry(), q, seq_lens[q], s.max_blocks_per_seq, s.block_size, capacity));
    if (seq_lens[q] > 0)
      table_extent = uint64_t{q} * s.max_blocks_per_seq + (seq_lens[q] - 1) / s.block_size + 1;
  }
  SPARKRT_ASSIGN_OR_RETURN(
      auto tables, operand<const int32_t>(l, arg_tables, "block_tables", table_extent,
                                          "the blocks of every sequence's last token"));
  // The window's first token of each sequence, and the furthest cache row.
  std::vector<uint32_t> first(s.num_seqs, 0);
  uint64_t cache_extent = 0;
  for (uint32_t q = 0; q < s.num_seqs; ++q) {
    const uint32_t len = static_cast<uint32_t>(seq_lens[q]);
    if (s.sliding_window != 0 && len > s.sliding_window) first[q] = len - s.sliding_window;
    for (uint32_t t = first[q]; t < len; ++t) {
      const int32_t block = tables[uint64_t{q} * s.max_blocks_per_seq + t / s.block_size];
      if (block < 0)
        return absl::OutOfRangeError(absl::StrFormat(
            "%s: block_tables[%d][%d] = %d is negative but sequence %d's token %d lives there",
            l.entry(), q, t / s.block_size, block, q, t));
      cache_extent = std::max(cache_extent, uint64_t(block) * s.block_stride +
                                                uint64_t{t % s.block_size + 1} * row);
    }
  }
  const uint64_t q_extent = uint64_t{s.num_seqs - 1} * s.q_stride + uint64_t{hq} * d;
  SPARKRT_ASSIGN_OR_RETURN(auto qv, operand<const bf16_bits>(l, 0, "q", q_extent,
                                                             "every sequence's query heads"));
  const std::string why = "the cached tokens of every sequence";
  SPARKRT_ASSIGN_OR_RETURN(auto k_cache, operand<const CacheT>(l, 1, "k_cache", cache_extent, why));
  SPARKRT_ASSIGN_OR_RETURN(auto v_cache, operand<const CacheT>(l, 2, "v_cache", cache_extent, why));
  std::span<bf16_bits> out;
  std::span<float> part_acc, part_ml;
  const uint32_t n = std::max<uint32_t>(s.num_splits, 1);
  const uint64_t rows = uint64_t{s.num_seqs} * hq;
  if (split) {
    const uint32_t arg_part = s.merge ? 4 : 3;
    SPARKRT_ASSIGN_OR_RETURN(part_acc, operand<float>(l, arg_part, "part_acc", rows * n * d,
                                                      "every split's partial output"));
    SPARKRT_ASSIGN_OR_RETURN(part_ml, operand<float>(l, arg_part + 1, "part_ml", rows * n * 2,
                                                     "every split's (max, sum)"));
  }
  if (s.merge) {
    // One arrival counter per CTA group, zero at launch (the kernel returns
    // it to zero, so a workspace zeroed once stays usable).
    const uint64_t groups = uint64_t{s.num_seqs} * gx;
    SPARKRT_ASSIGN_OR_RETURN(auto counters,
                             operand<uint32_t>(l, 6, "counters", groups,
                                               "one arrival counter per (sequence, head group)"));
    for (uint64_t i = 0; i < groups; ++i)
      if (counters[i] != 0)
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s: counters[%d] = %d is not zero; zero the workspace once after allocating it "
            "(paged_decode_workspace_bytes)",
            l.entry(), i, counters[i]));
  }
  if (!split || s.merge) {
    SPARKRT_ASSIGN_OR_RETURN(out, operand<bf16_bits>(l, 3, "out", rows * d,
                                                     "every sequence's output heads"));
  }

  const uint32_t group = hq / hkv;
  std::vector<float> scores;
  std::vector<float> acc(d);
  for (uint32_t q = 0; q < s.num_seqs; ++q) {
    const uint32_t len = static_cast<uint32_t>(seq_lens[q]);
    const auto row_of = [&](uint32_t t, uint32_t kvh) {
      const int32_t block = tables[uint64_t{q} * s.max_blocks_per_seq + t / s.block_size];
      return uint64_t(block) * s.block_stride + (uint64_t{t % s.block_size} * hkv + kvh) * d;
    };
    for (uint32_t h = 0; h < hq; ++h) {
      const uint32_t kvh = h / group;
      const uint64_t qoff = uint64_t{q} * s.q_stride + uint64_t{h} * d;
      const uint64_t qrow = uint64_t{q} * hq + h;
      // Split z's tokens by the split-KV rule; one pass covers the window.
      for (uint32_t z = 0; z < n; ++z) {
        const auto [b, e] = pa::token_range(len, s.sliding_window, s.num_splits, z);
        scores.assign(e - b, 0.0f);
        float max_score = -INFINITY;
        for (uint32_t t = b; t < e; ++t) {
          const uint64_t k = row_of(t, kvh);
          float dot = 0.0f;
          for (uint32_t j = 0; j < d; ++j)
            dot += bf16_to_f32(qv[qoff + j]) * load(k_cache[k + j], s.k_scale);
          // Partials are kept in base 2 (the split contract); one pass in base e.
          const float score = s.inv_sqrt_d * dot;
          scores[t - b] = split ? score * kLog2e : score;
          max_score = std::max(max_score, scores[t - b]);
        }
        float sum = 0.0f;
        for (float& p : scores) {
          p = split ? std::exp2(p - max_score) : std::exp(p - max_score);
          sum += p;
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (uint32_t t = b; t < e; ++t) {
          const uint64_t v = row_of(t, kvh);
          const float p = scores[t - b];
          for (uint32_t j = 0; j < d; ++j) acc[j] += p * load(v_cache[v + j], s.v_scale);
        }
        if (split) {
          const uint64_t prow = qrow * n + z;
          for (uint32_t j = 0; j < d; ++j) part_acc[prow * d + j] = acc[j];
          part_ml[2 * prow] = max_score;  // -inf for an empty split
          part_ml[2 * prow + 1] = sum;    // 0 for an empty split
        } else {
          for (uint32_t j = 0; j < d; ++j)
            out[qrow * d + j] = f32_to_bf16(sum > 0.0f ? acc[j] / sum : 0.0f);
        }
      }
    }
  }
  if (s.merge) combine(part_acc.data(), part_ml.data(), out.data(), rows, n, d);
  return absl::OkStatus();
}

// The decode entries' scalars. Every entry has q, k_cache, v_cache, then
// `outputs` pointers (out; the split's part_acc, part_ml; the split-merge's
// out, part_acc, part_ml, counters), block_tables, seq_lens, the shape up to
// inv_sqrt_d, the dtype's own arguments and, for the split entries,
// num_splits (merge: the split-merge entry).
// Each value is the entry's count of output pointers.
enum class Outputs : uint32_t { kOut = 1, kPartials = 2, kMerge = 4 };

DecodeShape bf16_shape(const Launch& l, Outputs outputs) {
  const uint32_t first = 5 + static_cast<uint32_t>(outputs);  // max_blocks_per_seq
  DecodeShape s = leading_scalars(l, first);
  s.q_stride = l.value<uint32_t>(first + 6);
  s.sliding_window = l.value<uint32_t>(first + 7);
  if (outputs != Outputs::kOut) s.num_splits = l.value<uint32_t>(first + 8);
  s.merge = outputs == Outputs::kMerge;
  s.block_stride = uint64_t{s.block_size} * s.num_kv_heads * s.head_dim;
  return s;
}

DecodeShape fp8_shape(const Launch& l, Outputs outputs) {
  const uint32_t first = 5 + static_cast<uint32_t>(outputs);
  DecodeShape s = leading_scalars(l, first);
  s.k_scale = l.value<float>(first + 6);
  s.v_scale = l.value<float>(first + 7);
  s.q_stride = l.value<uint32_t>(first + 8);
  s.block_stride = l.value<uint64_t>(first + 9);
  s.sliding_window = l.value<uint32_t>(first + 10);
  if (outputs != Outputs::kOut) s.num_splits = l.value<uint32_t>(first + 11);
  s.merge = outputs == Outputs::kMerge;
  return s;
}

template <typename CacheT>
absl::Status split_decode(const Launch& l, const DecodeShape& s) {
  if (s.num_splits == 0 || s.num_splits > pa::kCombineMaxSplits)
    return invalid_launch(l, absl::StrFormat("num_splits %d must be in [1, %d]", s.num_splits,
                                             pa::kCombineMaxSplits));
  return decode<CacheT>(l, s);
}

}  // namespace
}  // namespace sparkrt::reference

SPARKRT_REFERENCE_KERNEL(paged_attention, paged_decode_attn_bf16) {
  using namespace sparkrt::reference;
  return decode<bf16_bits>(launch, bf16_shape(launch, Outputs::kOut));
}

SPARKRT_REFERENCE_KERNEL(paged_attention, paged_decode_attn_fp8) {
  using namespace sparkrt::reference;
  return decode<fp8_bits>(launch, fp8_shape(launch, Outputs::kOut));
}

SPARKRT_REFERENCE_KERNEL(paged_attention, paged_decode_attn_bf16_split) {
  using namespace sparkrt::reference;
  return split_decode<bf16_bits>(launch, bf16_shape(launch, Outputs::kPartials));
}

SPARKRT_REFERENCE_KERNEL(paged_attention, paged_decode_attn_fp8_split) {
  using namespace sparkrt::reference;
  return split_decode<fp8_bits>(launch, fp8_shape(launch, Outputs::kPartials));
}

SPARKRT_REFERENCE_KERNEL(paged_attention, paged_decode_attn_bf16_split_merge) {
  using namespace sparkrt::reference;
  return split_decode<bf16_bits>(launch, bf16_shape(launch, Outputs::kMerge));
}

SPARKRT_REFERENCE_KERNEL(paged_attention, paged_decode_attn_fp8_split_merge) {
  using namespace sparkrt::reference;
  return split_decode<fp8_bits>(launch, fp8_shape(launch, Outputs::kMerge));
}

// out = sum_z 2^(m_z - M) acc_z / sum_z 2^(m_z - M) l_z over the splits with
// l_z > 0 (M their largest m_z); zeros when there are none.
SPARKRT_REFERENCE_KERNEL(paged_attention, paged_decode_attn_combine) {
  using namespace sparkrt::reference;
  const uint32_t hq = launch.value<uint32_t>(3);
  const uint32_t d = launch.value<uint32_t>(4);
  const uint32_t n = launch.value<uint32_t>(5);
  const uint32_t num_seqs = launch.grid()[1];
  if (launch.grid()[0] != hq)
    return invalid_launch(launch, absl::StrFormat("grid.x %d must equal num_q_heads %d",
                                           launch.grid()[0], hq));
  const uint64_t rows = uint64_t{num_seqs} * hq;
  SPARKRT_ASSIGN_OR_RETURN(auto part_acc, operand<const float>(launch, 0, "part_acc",
                                                               rows * n * d,
                                                               "every split's partial output"));
  SPARKRT_ASSIGN_OR_RETURN(auto part_ml, operand<const float>(launch, 1, "part_ml", rows * n * 2,
                                                              "every split's (max, sum)"));
  SPARKRT_ASSIGN_OR_RETURN(auto out, operand<bf16_bits>(launch, 2, "out", rows * d,
                                                        "every sequence's output heads"));
  combine(part_acc.data(), part_ml.data(), out.data(), rows, n, d);
  return absl::OkStatus();
}
