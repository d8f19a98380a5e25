// References for kernels/ptx/turbo_paged_attention.cu (contracts in
// docs/kernels.md, "Module turbo_paged_attention"): exact softmax attention
// over the dequantized V, scores and sums in double, one bf16 rounding of the
// output (the split entries write f32 partials in base 2, as the bf16 decode
// does, for paged_attention's combine).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "operands.h"
#include "reference.h"
#include "sparkrt/contract/turbo_paged_attention.h"
#include "sparkrt/numeric.h"

namespace sparkrt::reference {
namespace {

namespace contract_tpa = contract::turbo_paged_attention;
namespace format = contract::turbo_kv_cache;

absl::Status decode_turbo(const Launch& l, uint32_t bits, bool split) {
  // Arguments: q, k_cache, v_cache, out | (part_acc, part_ml), block_tables,
  // seq_lens, then the scalars.
  const uint32_t first = split ? 7 : 6;
  const uint32_t arg_tables = first - 2;
  const uint32_t max_blocks = l.value<uint32_t>(first), hq = l.value<uint32_t>(first + 1);
  const uint32_t hkv = l.value<uint32_t>(first + 2), d = l.value<uint32_t>(first + 3);
  const uint32_t block_size = l.value<uint32_t>(first + 4);
  const float inv_sqrt_d = l.value<float>(first + 5);
  const uint32_t q_stride = l.value<uint32_t>(first + 6);
  const uint64_t v_stride = l.value<uint64_t>(first + 7), v_data = l.value<uint64_t>(first + 8);
  const uint32_t window = l.value<uint32_t>(first + 9);
  const uint32_t num_splits = split ? l.value<uint32_t>(first + 10) : 0;
  const uint32_t num_seqs = l.grid()[1];
  if (num_seqs == 0) return absl::OkStatus();
  if (hkv == 0 || hq == 0 || hq % hkv != 0 || block_size == 0)
    return invalid_launch(l, absl::StrFormat("num_q_heads %d must be a positive multiple of "
                                             "num_kv_heads %d; block_size %d must be > 0",
                                             hq, hkv, block_size));
  const uint32_t gx = l.grid()[0];
  const uint32_t hpc = gx != 0 && hq % gx == 0 ? hq / gx : 0;
  if (hpc == 0 || hpc > contract_tpa::kMaxHeadsPerCta || (hq / hkv) % hpc != 0)
    return invalid_launch(l, absl::StrFormat("grid.x %d must be num_q_heads %d / hpc, with hpc at "
                                             "most %d dividing the GQA group of %d",
                                             gx, hq, contract_tpa::kMaxHeadsPerCta, hq / hkv));
  if (!contract_tpa::valid_head_dim(d))
    return invalid_launch(l, absl::StrFormat("head_dim %d must be 64, 128 or 256", d));
  if (split && (num_splits == 0 || num_splits > 256 || l.grid()[2] != num_splits))
    return invalid_launch(l, absl::StrFormat("num_splits %d must be in [1, 256] and equal grid.z "
                                             "%d",
                                             num_splits, l.grid()[2]));
  if (q_stride < uint64_t{hq} * d)
    return invalid_launch(l, absl::StrFormat("q_stride %d is shorter than num_q_heads * head_dim "
                                             "= %d",
                                             q_stride, uint64_t{hq} * d));
  if (l.address(2) % 4 != 0 || v_stride % 4 != 0)
    return invalid_launch(l, absl::StrFormat("v_cache %#x and v_block_stride_bytes %d must be "
                                             "multiples of 4",
                                             l.address(2), v_stride));
  const format::Layout lay = format::layout(bits, block_size, hkv, d);
  if (!format::v_sections_fit(lay, block_size, v_data, v_stride))
    return invalid_launch(l, absl::StrFormat("v_data_section_bytes %d and v_block_stride_bytes %d "
                                             "do not hold a block (at least %d and %d)",
                                             v_data, v_stride, lay.v_data_section_bytes,
                                             lay.v_block_stride_bytes));
  const uint64_t row = uint64_t{hkv} * d;
  SPARKRT_ASSIGN_OR_RETURN(
      auto k_windows,
      paged_windows(l, arg_tables, num_seqs, max_blocks, block_size, window,
                    [&](uint64_t b, uint32_t o) {
                      return b * block_size * row + (uint64_t{o} + 1) * row;
                    }));
  SPARKRT_ASSIGN_OR_RETURN(
      auto v_windows, paged_windows(l, arg_tables, num_seqs, max_blocks, block_size, window,
                                    [&](uint64_t b, uint32_t o) {
                                      return b * v_stride + v_data +
                                             (uint64_t{o} + 1) * lay.v_token_scale_bytes;
                                    }));
  const std::string why = "the furthest token of any window";
  SPARKRT_ASSIGN_OR_RETURN(auto q, operand<const bf16_bits>(
                                       l, 0, "q", uint64_t(num_seqs - 1) * q_stride + hq * d,
                                       "one query row per sequence"));
  SPARKRT_ASSIGN_OR_RETURN(auto kc,
                           operand<const bf16_bits>(l, 1, "k_cache", k_windows.cache_extent, why));
  SPARKRT_ASSIGN_OR_RETURN(auto vc,
                           operand<const uint8_t>(l, 2, "v_cache", v_windows.cache_extent, why));
  const uint32_t n_parts = split ? num_splits : 1;
  std::span<bf16_bits> out;
  std::span<float> part_acc, part_ml;
  if (split) {
    SPARKRT_ASSIGN_OR_RETURN(part_acc, operand<float>(l, 3, "part_acc",
                                                      uint64_t{num_seqs} * hq * n_parts * d,
                                                      "[num_seqs][num_q_heads][num_splits][head_dim]"));
    SPARKRT_ASSIGN_OR_RETURN(part_ml, operand<float>(l, 4, "part_ml",
                                                     uint64_t{num_seqs} * hq * n_parts * 2,
                                                     "[num_seqs][num_q_heads][num_splits][2]"));
  } else {
    SPARKRT_ASSIGN_OR_RETURN(out, operand<bf16_bits>(l, 3, "out", uint64_t{num_seqs} * hq * d,
                                                     "[num_seqs][num_q_heads][head_dim]"));
  }

  std::vector<double> v(d), acc(d), scores;
  for (uint32_t s = 0; s < num_seqs; ++s) {
    const uint32_t len = uint32_t(k_windows.seq_lens[s]);
    for (uint32_t z = 0; z < n_parts; ++z) {
      const contract_tpa::TokenRange r = contract_tpa::token_range(len, window, num_splits, z);
      for (uint32_t h = 0; h < hq; ++h) {
        const uint32_t kvh = h / (hq / hkv);
        const bf16_bits* qh = q.data() + uint64_t{s} * q_stride + uint64_t{h} * d;
        scores.assign(r.t1 > r.t0 ? r.t1 - r.t0 : 0, 0.0);
        double m = -INFINITY;
        for (uint32_t t = r.t0; t < r.t1; ++t) {
          const uint64_t b = uint64_t(k_windows.tables[uint64_t{s} * max_blocks + t / block_size]);
          const bf16_bits* k = kc.data() + b * block_size * row + uint64_t{t % block_size} * row +
                               uint64_t{kvh} * d;
          double dot = 0.0;
          for (uint32_t i = 0; i < d; ++i) dot += double(bf16_to_f32(qh[i])) * bf16_to_f32(k[i]);
          // Base 2, as the kernel's partials: score * inv_sqrt_d * log2(e).
          scores[t - r.t0] = dot * double(inv_sqrt_d) * 1.4426950408889634;
          m = std::max(m, scores[t - r.t0]);
        }
        double l_sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (uint32_t t = r.t0; t < r.t1; ++t) {
          const double p = std::exp2(scores[t - r.t0] - m);
          l_sum += p;
          const uint64_t b = uint64_t(v_windows.tables[uint64_t{s} * max_blocks + t / block_size]);
          const uint8_t* data = vc.data() + b * v_stride + uint64_t{t % block_size} *
                                                                lay.v_token_data_bytes +
                                uint64_t{kvh} * lay.v_head_data_bytes;
          const uint8_t* sc = vc.data() + b * v_stride + v_data +
                              uint64_t{t % block_size} * lay.v_token_scale_bytes +
                              uint64_t{kvh} * (d / format::kGroup);
          for (uint32_t g = 0; g < d / format::kGroup; ++g) {
            const double scale = fp8_e4m3_to_f32(sc[g]);
            const uint8_t* packed = data + g * format::kGroup * bits / 8;
            for (uint32_t i = 0; i < format::kGroup; ++i)
              acc[g * format::kGroup + i] +=
                  p * double(format::centroid(bits, format::unpack_index(packed, bits, i))) * scale;
          }
        }
        const uint64_t qrow = uint64_t{s} * hq + h;
        if (split) {
          const uint64_t prow = qrow * n_parts + z;
          for (uint32_t i = 0; i < d; ++i) part_acc[prow * d + i] = float(acc[i]);
          part_ml[2 * prow] = float(m);
          part_ml[2 * prow + 1] = float(l_sum);
        } else {
          for (uint32_t i = 0; i < d; ++i)
            out[qrow * d + i] = f32_to_bf16(l_sum > 0.0 ? float(acc[i] / l_sum) : 0.0f);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace sparkrt::reference

using namespace sparkrt::reference;  // NOLINT(build/namespaces)

#define SPARKRT_TURBO_DECODE_REFERENCE(bits)                                              \
  SPARKRT_REFERENCE_KERNEL(turbo_paged_attention, paged_decode_attn_bf16k_turbo##bits##v) { \
    return decode_turbo(launch, bits, false);                                             \
  }                                                                                       \
  SPARKRT_REFERENCE_KERNEL(turbo_paged_attention,                                         \
                           paged_decode_attn_bf16k_turbo##bits##v_split) {                \
    return decode_turbo(launch, bits, true);                                              \
  }
SPARKRT_TURBO_DECODE_REFERENCE(2)
SPARKRT_TURBO_DECODE_REFERENCE(3)
SPARKRT_TURBO_DECODE_REFERENCE(4)
