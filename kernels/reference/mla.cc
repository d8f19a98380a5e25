// References for kernels/ptx/mla.cu (contracts in docs/kernels.md, "Module
// mla"): the MLA helpers (batched GEMV, q rope scatter and writeback, cache
// row assembly) and paged decode over the compressed MLA cache in FP8 E4M3
// and NVFP4. f32 arithmetic, one rounding to bf16 at each output.
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
#include "sparkrt/contract/mla.h"
#include "split_softmax.h"

namespace sparkrt::reference {
namespace {

using contract::mla::kGemvOutputsPerCta;
using contract::mla::kMaxDim;     // q_head_dim and kv_cache_dim
using contract::mla::kRopeDim;    // the rope part ending each MLA cache row
using contract::mla::kTile;       // tokens per tile; a split takes whole tiles
using contract::mla::kTiledRows;  // query heads per CTA of the tiled decode
constexpr float kLog2e = 1.4426950408889634f;

// q_absorbed_buf[h][kv_lora + i] for h < nq, i < rope must stay inside each
// head's mla_cache_dim row, and q_full's rope part inside its hd row.
absl::Status check_rope_layout(const Launch& l, uint32_t rope, uint32_t kv_lora,
                               uint32_t mla_cache_dim) {
  if (uint64_t{kv_lora} + rope <= mla_cache_dim) return absl::OkStatus();
  return invalid_launch(l, absl::StrFormat("kv_lora %d + rope %d exceeds mla_cache_dim %d", kv_lora,
                                           rope, mla_cache_dim));
}

// The scalars of an MLA decode launch, by meaning rather than position.
struct MlaDecodeShape {
  uint32_t num_seqs;  // grid.y
  uint32_t max_blocks_per_seq;
  uint32_t num_q_heads;
  uint32_t num_kv_heads;
  uint32_t q_head_dim;
  uint32_t kv_cache_dim;
  uint32_t block_size;
  float inv_sqrt_d;
  uint32_t sliding_window = 0;
  // fp8
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  uint64_t cache_stride = 0;  // bytes per block
  uint32_t comp_block_count = 0;
  // nvfp4
  bool nvfp4 = false;
  uint64_t block_stride_bytes = 0;
  uint64_t data_section_bytes = 0;
  // split entries: > 0, partials at arguments 3 and 4, every later argument
  // one further on.
  uint32_t num_splits = 0;

  uint64_t row() const { return uint64_t{num_kv_heads} * kv_cache_dim; }
  uint32_t dv() const { return kv_cache_dim - kRopeDim; }
};

absl::Status check_decode_shape(const Launch& l, const MlaDecodeShape& s) {
  if (s.num_kv_heads == 0 || s.num_q_heads == 0 || s.num_q_heads % s.num_kv_heads != 0)
    return invalid_launch(l, absl::StrFormat("num_q_heads %d must be a positive multiple of "
                                             "num_kv_heads %d",
                                             s.num_q_heads, s.num_kv_heads));
  // One CTA per query head, or the tiled geometry: 16 query heads of one KV
  // head per CTA, splits along z.
  const uint32_t group = s.num_q_heads / s.num_kv_heads;
  const uint32_t tiled_x = s.num_kv_heads * ((group + kTiledRows - 1) / kTiledRows);
  const bool tiled = l.grid()[0] == tiled_x;
  if (l.grid()[0] != s.num_q_heads && !tiled)
    return invalid_launch(l, absl::StrFormat("grid.x %d must equal num_q_heads %d or "
                                             "num_kv_heads * ceil(group / 16) = %d",
                                             l.grid()[0], s.num_q_heads, tiled_x));
  if (s.num_splits > 0 && !tiled)
    return invalid_launch(l, absl::StrFormat("a split launch has the tiled grid.x %d (got %d)",
                                             tiled_x, l.grid()[0]));
  if (l.grid()[2] != std::max<uint32_t>(s.num_splits, 1))
    return invalid_launch(l, absl::StrFormat("grid.z %d must be %s", l.grid()[2],
                                             s.num_splits > 0 ? "the split count" : "1"));
  if (s.block_size == 0 || s.max_blocks_per_seq == 0)
    return invalid_launch(l, "block_size and max_blocks_per_seq must be > 0");
  if (s.kv_cache_dim <= kRopeDim || s.kv_cache_dim > kMaxDim || s.q_head_dim == 0 ||
      s.q_head_dim > s.kv_cache_dim)
    return invalid_launch(l, absl::StrFormat("kv_cache_dim %d must be in (%d, %d] and q_head_dim "
                                             "%d in [1, kv_cache_dim]",
                                             s.kv_cache_dim, kRopeDim, kMaxDim, s.q_head_dim));
  if (s.nvfp4) {
    const uint64_t values = uint64_t{s.block_size} * s.row();
    if (s.kv_cache_dim % 16 != 0 || s.data_section_bytes < (values + 1) / 2 ||
        s.block_stride_bytes < s.data_section_bytes + values / 16)
      return invalid_launch(
          l, absl::StrFormat("an NVFP4 block of %d values needs kv_cache_dim %% 16 == 0 (got %d), "
                             "data_section_bytes >= %d (got %d) and block_stride_bytes >= "
                             "data_section_bytes + %d (got %d)",
                             values, s.kv_cache_dim, (values + 1) / 2, s.data_section_bytes,
                             values / 16, s.block_stride_bytes));
  } else if (s.cache_stride < uint64_t{s.block_size} * s.row()) {
    return invalid_launch(l, absl::StrFormat("cache_stride %d is below block_size * num_kv_heads "
                                             "* kv_cache_dim = %d",
                                             s.cache_stride, uint64_t{s.block_size} * s.row()));
  }
  return absl::OkStatus();
}

// Decode per the contract. Arguments 0..5 are q, k_cache, v_cache, o,
// block_tables, seq_lens in both one-pass entries; the fp8 entry's sinks and
// comp_pool are arguments 17 and 18. The split entries have part_acc,
// part_ml at 3 and 4 and no sinks; the fp8 one has comp_pool at 18.
absl::Status mla_decode(const Launch& l, const MlaDecodeShape& s) {
  if (s.num_seqs == 0) return absl::OkStatus();
  if (absl::Status st = check_decode_shape(l, s); !st.ok()) return st;
  const uint32_t hq = s.num_q_heads;
  const uint32_t group = hq / s.num_kv_heads;
  const uint32_t dq = s.q_head_dim, dv = s.dv();
  const uint64_t row = s.row();

  const uint64_t block_bytes = s.nvfp4 ? s.block_stride_bytes : s.cache_stride;
  const auto token_end = [&](uint64_t block, uint32_t offset) {
    const uint64_t end_value = uint64_t{offset + 1} * row;  // past the token's row
    return block * block_bytes +
           (s.nvfp4 ? s.data_section_bytes + (end_value - 1) / 16 + 1 : end_value);
  };
  const bool split = s.num_splits > 0;
  const uint32_t shift = split ? 1 : 0;  // arguments after o sit one further on
  SPARKRT_ASSIGN_OR_RETURN(const PagedWindows w,
                           paged_windows(l, 4 + shift, s.num_seqs, s.max_blocks_per_seq,
                                         s.block_size, s.sliding_window, token_end));
  const uint64_t cache_extent = w.cache_extent;  // bytes
  SPARKRT_ASSIGN_OR_RETURN(auto qv,
                           operand<const bf16_bits>(l, 0, "q", uint64_t{s.num_seqs} * hq * dq,
                                                    "every sequence's query heads"));
  const std::string why = "the cached tokens of every sequence";
  SPARKRT_ASSIGN_OR_RETURN(auto k_cache,
                           operand<const uint8_t>(l, 1, "k_cache", cache_extent, why));
  SPARKRT_ASSIGN_OR_RETURN(auto v_cache,
                           operand<const uint8_t>(l, 2, "v_cache", cache_extent, why));
  std::span<bf16_bits> out;
  std::span<float> part_acc, part_ml;
  const uint64_t rows = uint64_t{s.num_seqs} * hq;
  if (split) {
    SPARKRT_ASSIGN_OR_RETURN(part_acc, operand<float>(l, 3, "part_acc", rows * s.num_splits * dv,
                                                      "every split's partial output"));
    SPARKRT_ASSIGN_OR_RETURN(part_ml, operand<float>(l, 4, "part_ml", rows * s.num_splits * 2,
                                                     "every split's (max, sum)"));
  } else {
    SPARKRT_ASSIGN_OR_RETURN(
        out, operand<bf16_bits>(l, 3, "o", rows * dv, "every sequence's output heads"));
  }
  std::span<const float> sinks;
  std::span<const fp8_bits> comp;
  uint32_t n_comp = 0;
  if (!s.nvfp4) {
    if (!split) {
      SPARKRT_ASSIGN_OR_RETURN(
          sinks, optional_operand<const float>(l, 17, "sinks", hq, "one sink per query head"));
    }
    if (l.address(18) != 0) n_comp = s.comp_block_count;
    SPARKRT_ASSIGN_OR_RETURN(
        comp, operand<const fp8_bits>(l, 18, "comp_pool", uint64_t{s.num_seqs} * n_comp * row,
                                      "comp_block_count rows per sequence"));
  }

  // Element d of virtual token u of sequence q, kv head kvh: the compressed
  // rows first, then the window.
  const auto element = [&](std::span<const uint8_t> cache, float scale, uint32_t q, uint32_t u,
                           uint32_t kvh, uint32_t d) -> float {
    if (u < n_comp)
      return fp8_e4m3_to_f32(
                 comp[(uint64_t{q} * n_comp + u) * row + uint64_t{kvh} * s.kv_cache_dim + d]) *
             scale;
    const uint32_t t = w.first[q] + (u - n_comp);
    const uint64_t block =
        uint64_t(w.tables[uint64_t{q} * s.max_blocks_per_seq + t / s.block_size]);
    const uint64_t i = uint64_t{t % s.block_size} * row + uint64_t{kvh} * s.kv_cache_dim + d;
    if (!s.nvfp4) return fp8_e4m3_to_f32(cache[block * s.cache_stride + i]) * scale;
    const uint8_t* base = cache.data() + block * s.block_stride_bytes;
    const uint32_t byte = base[i / 2];
    return e2m1_to_f32(i % 2 ? byte >> 4 : byte & 0xfu) *
           fp8_e4m3_to_f32(base[s.data_section_bytes + i / 16]);
  };

  std::vector<float> scores;
  std::vector<float> acc(dv);
  for (uint32_t q = 0; q < s.num_seqs; ++q) {
    const uint32_t n = n_comp + (static_cast<uint32_t>(w.seq_lens[q]) - w.first[q]);
    for (uint32_t h = 0; h < hq; ++h) {
      const uint32_t kvh = h / group;
      const uint64_t qrow = uint64_t{q} * hq + h;
      scores.assign(n, 0.0f);
      for (uint32_t u = 0; u < n; ++u) {
        float dot = 0.0f;
        for (uint32_t d = 0; d < dq; ++d)
          dot += bf16_to_f32(qv[qrow * dq + d]) * element(k_cache, s.k_scale, q, u, kvh, d);
        scores[u] = s.inv_sqrt_d * dot;
      }
      // softmax over tokens [b, e) with `base`-scaled scores: the running
      // max and sum, the unnormalised output in acc.
      const auto attend = [&](uint32_t b, uint32_t e, float m, float sum, bool base2) {
        for (uint32_t u = b; u < e; ++u) m = std::max(m, base2 ? scores[u] * kLog2e : scores[u]);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (uint32_t u = b; u < e; ++u) {
          const float p =
              base2 ? std::exp2(scores[u] * kLog2e - m) : std::exp(scores[u] - m);
          sum += p;
          for (uint32_t d = 0; d < dv; ++d)
            acc[d] += p * element(v_cache, s.v_scale, q, u, kvh, d);
        }
        return std::pair<float, float>(m, sum);
      };
      if (!split) {
        // The sink is one more logit in the denominator that carries no value.
        const float m0 = sinks.empty() ? -INFINITY : sinks[h];
        const auto [m, sum] = attend(0, n, m0, 0.0f, false);
        const float total = sum + (sinks.empty() ? 0.0f : std::exp(sinks[h] - m));
        for (uint32_t d = 0; d < dv; ++d)
          out[qrow * dv + d] = f32_to_bf16(total > 0.0f ? acc[d] / total : 0.0f);
        continue;
      }
      // Split z: whole tiles, ceil(tiles / num_splits) of them.
      const uint32_t tiles = (n + kTile - 1) / kTile;
      const uint32_t per = (tiles + s.num_splits - 1) / s.num_splits;
      for (uint32_t z = 0; z < s.num_splits; ++z) {
        const uint32_t b = std::min(n, z * per * kTile), e = std::min(n, (z + 1) * per * kTile);
        const auto [m, sum] = attend(b, e, -INFINITY, 0.0f, true);
        const uint64_t prow = qrow * s.num_splits + z;
        for (uint32_t d = 0; d < dv; ++d) part_acc[prow * dv + d] = acc[d];
        part_ml[2 * prow] = m;  // -inf for an empty split
        part_ml[2 * prow + 1] = sum;
      }
    }
  }
  return absl::OkStatus();
}

// The scalars from max_blocks_per_seq (argument `first`) to inv_sqrt_d.
MlaDecodeShape common_decode_shape(const Launch& l, uint32_t first = 6) {
  MlaDecodeShape s{};
  s.num_seqs = l.grid()[1];
  s.max_blocks_per_seq = l.value<uint32_t>(first);
  s.num_q_heads = l.value<uint32_t>(first + 1);
  s.num_kv_heads = l.value<uint32_t>(first + 2);
  s.q_head_dim = l.value<uint32_t>(first + 3);
  s.kv_cache_dim = l.value<uint32_t>(first + 4);
  s.block_size = l.value<uint32_t>(first + 5);
  s.inv_sqrt_d = l.value<float>(first + 6);
  return s;
}

}  // namespace
}  // namespace sparkrt::reference

SPARKRT_REFERENCE_KERNEL(mla, mla_batched_gemv) {
  using namespace sparkrt::reference;
  const uint32_t n_out = launch.value<uint32_t>(3);
  const uint32_t k = launch.value<uint32_t>(4);
  const uint32_t input_stride = launch.value<uint32_t>(5);
  const uint32_t output_stride = launch.value<uint32_t>(6);
  const uint32_t heads = launch.grid()[1];
  if (n_out == 0 || heads == 0) return absl::OkStatus();
  if (launch.grid()[0] != (n_out + kGemvOutputsPerCta - 1) / kGemvOutputsPerCta)
    return invalid_launch(launch, absl::StrFormat("grid.x %d must be ceil(n_out %d / %d)",
                                                  launch.grid()[0], n_out, kGemvOutputsPerCta));
  if (k == 0 || input_stride < k || output_stride < n_out)
    return invalid_launch(launch, absl::StrFormat("k %d must be > 0 and <= input_stride %d; n_out "
                                                  "%d <= output_stride %d",
                                                  k, input_stride, n_out, output_stride));
  SPARKRT_ASSIGN_OR_RETURN(
      auto input,
      operand<const bf16_bits>(launch, 0, "input", uint64_t{heads - 1} * input_stride + k,
                               "every head's input"));
  SPARKRT_ASSIGN_OR_RETURN(
      auto weight, operand<const bf16_bits>(launch, 1, "weight", uint64_t{heads} * n_out * k,
                                            "[num_heads][n_out][k]"));
  SPARKRT_ASSIGN_OR_RETURN(
      auto output,
      operand<bf16_bits>(launch, 2, "output", uint64_t{heads - 1} * output_stride + n_out,
                         "every head's output"));
  for (uint32_t h = 0; h < heads; ++h) {
    for (uint32_t n = 0; n < n_out; ++n) {
      const uint64_t w = (uint64_t{h} * n_out + n) * k;
      float dot = 0.0f;
      for (uint32_t i = 0; i < k; ++i)
        dot += bf16_to_f32(weight[w + i]) * bf16_to_f32(input[uint64_t{h} * input_stride + i]);
      output[uint64_t{h} * output_stride + n] = f32_to_bf16(dot);
    }
  }
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(mla, mla_q_rope_scatter) {
  using namespace sparkrt::reference;
  const uint32_t nq = launch.value<uint32_t>(3);
  const uint32_t hd = launch.value<uint32_t>(4);
  const uint32_t nope = launch.value<uint32_t>(5);
  const uint32_t rope = launch.value<uint32_t>(6);
  const uint32_t kv_lora = launch.value<uint32_t>(7);
  const uint32_t mla_cache_dim = launch.value<uint32_t>(8);
  if (nq == 0 || rope == 0) return absl::OkStatus();
  if (uint64_t{nope} + rope > hd)
    return invalid_launch(launch,
                          absl::StrFormat("nope %d + rope %d exceeds hd %d", nope, rope, hd));
  if (absl::Status s = check_rope_layout(launch, rope, kv_lora, mla_cache_dim); !s.ok()) return s;
  SPARKRT_ASSIGN_OR_RETURN(
      auto q_full,
      operand<const bf16_bits>(launch, 0, "q_full", uint64_t{nq - 1} * hd + nope + rope,
                               "every head's rope part"));
  SPARKRT_ASSIGN_OR_RETURN(auto absorbed,
                           operand<bf16_bits>(launch, 1, "q_absorbed_buf",
                                              uint64_t{nq - 1} * mla_cache_dim + kv_lora + rope,
                                              "every head's rope part"));
  SPARKRT_ASSIGN_OR_RETURN(auto contiguous, operand<bf16_bits>(launch, 2, "q_rope_contiguous",
                                                               uint64_t{nq} * rope, "[nq][rope]"));
  for (uint32_t h = 0; h < nq; ++h) {
    for (uint32_t i = 0; i < rope; ++i) {
      const bf16_bits x = q_full[uint64_t{h} * hd + nope + i];
      absorbed[uint64_t{h} * mla_cache_dim + kv_lora + i] = x;
      contiguous[uint64_t{h} * rope + i] = x;
    }
  }
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(mla, mla_q_rope_writeback) {
  using namespace sparkrt::reference;
  const uint32_t nq = launch.value<uint32_t>(2);
  const uint32_t rope = launch.value<uint32_t>(3);
  const uint32_t kv_lora = launch.value<uint32_t>(4);
  const uint32_t mla_cache_dim = launch.value<uint32_t>(5);
  if (nq == 0 || rope == 0) return absl::OkStatus();
  if (absl::Status s = check_rope_layout(launch, rope, kv_lora, mla_cache_dim); !s.ok()) return s;
  SPARKRT_ASSIGN_OR_RETURN(
      auto direct,
      operand<const bf16_bits>(launch, 0, "q_rope_direct", uint64_t{nq} * rope, "[nq][rope]"));
  SPARKRT_ASSIGN_OR_RETURN(auto absorbed,
                           operand<bf16_bits>(launch, 1, "q_absorbed_buf",
                                              uint64_t{nq - 1} * mla_cache_dim + kv_lora + rope,
                                              "every head's rope part"));
  for (uint32_t h = 0; h < nq; ++h)
    for (uint32_t i = 0; i < rope; ++i)
      absorbed[uint64_t{h} * mla_cache_dim + kv_lora + i] = direct[uint64_t{h} * rope + i];
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(mla, mla_cache_assemble) {
  using namespace sparkrt::reference;
  const uint32_t kv_lora = launch.value<uint32_t>(4);
  const uint32_t rope = launch.value<uint32_t>(5);
  const uint32_t dim = launch.value<uint32_t>(6);
  if (dim == 0) return absl::OkStatus();
  if (absl::Status s = check_rope_layout(launch, rope, kv_lora, dim); !s.ok()) return s;
  SPARKRT_ASSIGN_OR_RETURN(
      auto latent, operand<const bf16_bits>(launch, 0, "kv_latent", kv_lora, "the latent part"));
  SPARKRT_ASSIGN_OR_RETURN(auto k_rope,
                           operand<const bf16_bits>(launch, 1, "k_rope", rope, "the rope part"));
  SPARKRT_ASSIGN_OR_RETURN(auto k_cache,
                           operand<bf16_bits>(launch, 2, "k_cache", dim, "one cache row"));
  SPARKRT_ASSIGN_OR_RETURN(auto v_cache,
                           operand<bf16_bits>(launch, 3, "v_cache", dim, "one cache row"));
  constexpr bf16_bits kZero = 0;
  for (uint32_t d = 0; d < dim; ++d) {
    k_cache[d] = d < kv_lora ? latent[d] : d - kv_lora < rope ? k_rope[d - kv_lora] : kZero;
    v_cache[d] = d < kv_lora ? latent[d] : kZero;
  }
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(mla, mla_paged_decode_nvfp4) {
  using namespace sparkrt::reference;
  MlaDecodeShape s = common_decode_shape(launch);
  s.nvfp4 = true;
  s.block_stride_bytes = launch.value<uint64_t>(13);
  s.data_section_bytes = launch.value<uint64_t>(14);
  return mla_decode(launch, s);
}

SPARKRT_REFERENCE_KERNEL(mla, mla_paged_decode_nvfp4_split) {
  using namespace sparkrt::reference;
  MlaDecodeShape s = common_decode_shape(launch, 7);
  s.nvfp4 = true;
  s.block_stride_bytes = launch.value<uint64_t>(14);
  s.data_section_bytes = launch.value<uint64_t>(15);
  s.num_splits = launch.grid()[2];
  return mla_decode(launch, s);
}

SPARKRT_REFERENCE_KERNEL(mla, mla_paged_decode_fp8) {
  using namespace sparkrt::reference;
  MlaDecodeShape s = common_decode_shape(launch);
  s.k_scale = launch.value<float>(13);
  s.v_scale = launch.value<float>(14);
  s.cache_stride = launch.value<uint64_t>(15);
  s.sliding_window = launch.value<uint32_t>(16);
  s.comp_block_count = launch.value<uint32_t>(19);
  return mla_decode(launch, s);
}

SPARKRT_REFERENCE_KERNEL(mla, mla_paged_decode_fp8_split) {
  using namespace sparkrt::reference;
  MlaDecodeShape s = common_decode_shape(launch, 7);
  s.k_scale = launch.value<float>(14);
  s.v_scale = launch.value<float>(15);
  s.cache_stride = launch.value<uint64_t>(16);
  s.sliding_window = launch.value<uint32_t>(17);
  s.comp_block_count = launch.value<uint32_t>(19);
  s.num_splits = launch.grid()[2];
  return mla_decode(launch, s);
}

// o = sum_z 2^(m_z - M) acc_z / (sum_z 2^(m_z - M) l_z + 2^(sink - M)) over
// the splits with l_z > 0, M the largest of their m_z and the sink (base 2);
// zeros when the denominator is 0.
SPARKRT_REFERENCE_KERNEL(mla, mla_decode_combine) {
  using namespace sparkrt::reference;
  const uint32_t hq = launch.value<uint32_t>(4);
  const uint32_t dv = launch.value<uint32_t>(5);
  const uint32_t n = launch.value<uint32_t>(6);
  const uint32_t num_seqs = launch.grid()[1];
  if (launch.grid()[0] != hq)
    return invalid_launch(
        launch, absl::StrFormat("grid.x %d must equal num_q_heads %d", launch.grid()[0], hq));
  if (n == 0) return invalid_launch(launch, "num_splits must be > 0");
  const uint64_t rows = uint64_t{num_seqs} * hq;
  SPARKRT_ASSIGN_OR_RETURN(auto part_acc, operand<const float>(launch, 0, "part_acc",
                                                               rows * n * dv,
                                                               "every split's partial output"));
  SPARKRT_ASSIGN_OR_RETURN(auto part_ml, operand<const float>(launch, 1, "part_ml", rows * n * 2,
                                                              "every split's (max, sum)"));
  SPARKRT_ASSIGN_OR_RETURN(auto out, operand<bf16_bits>(launch, 2, "o", rows * dv,
                                                        "every sequence's output heads"));
  SPARKRT_ASSIGN_OR_RETURN(
      auto sinks, optional_operand<const float>(launch, 3, "sinks", hq, "one sink per query head"));
  merge_split_partials(
      part_acc.data(), part_ml.data(), rows, n, dv,
      [&](uint64_t r) { return sinks.empty() ? -INFINITY : sinks[r % hq] * kLog2e; },
      [&](uint64_t r, uint32_t j, float o) { out[r * dv + j] = f32_to_bf16(o); });
  return absl::OkStatus();
}
