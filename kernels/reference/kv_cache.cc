// References for kernels/ptx/kv_cache.cu (contracts in docs/kernels.md,
// "Module kv_cache"). Each resolves every buffer with the exact extent the
// contract touches for this launch, so an undersized buffer is an error that
// names the operand and the extent, never a stray host access.
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

namespace sparkrt::reference {
namespace {

// Largest slot in a pool addressable without overflowing a 64-bit extent.
constexpr int64_t kMaxSlot = int64_t{1} << 40;

// Where one token's row of a paged cache starts and how far the pool must
// reach, in elements.
struct CacheGeometry {
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint32_t block_size;
  uint64_t block_stride;  // elements per block

  uint64_t row(int64_t slot) const {
    const uint64_t s = static_cast<uint64_t>(slot);
    return (s / block_size) * block_stride + (s % block_size) * num_kv_heads * head_dim;
  }
  uint64_t row_elems() const { return uint64_t{num_kv_heads} * head_dim; }
};

// A pool whose blocks hold exactly block_size rows (every cache but the fp8
// one, which takes its block stride as an argument).
CacheGeometry dense_cache(uint32_t num_kv_heads, uint32_t head_dim, uint32_t block_size) {
  return {num_kv_heads, head_dim, block_size, uint64_t{block_size} * num_kv_heads * head_dim};
}

// The shared shape of the token-to-slot writers: checks the scalars, reads
// the slot mapping, and finds the extents the launch touches.
struct SlotWrite {
  uint32_t num_tokens = 0;
  std::span<const int64_t> slots;
  int64_t last_token = -1;  // last token with a slot; -1 when every slot is negative
  uint64_t cache_extent = 0;
};

absl::StatusOr<SlotWrite> plan_slot_write(const Launch& l, uint32_t slot_arg,
                                          const CacheGeometry& g) {
  if (g.num_kv_heads == 0 || g.head_dim == 0 || g.block_size == 0)
    return invalid_launch(l, absl::StrFormat("num_kv_heads %d, head_dim %d and block_size %d must be > 0",
                                      g.num_kv_heads, g.head_dim, g.block_size));
  if (g.block_stride < uint64_t{g.block_size} * g.row_elems())
    return invalid_launch(l, absl::StrFormat("cache block stride %d is below block_size * num_kv_heads * "
                                      "head_dim = %d elements",
                                      g.block_stride, uint64_t{g.block_size} * g.row_elems()));
  SlotWrite w;
  w.num_tokens = l.grid()[0];
  SPARKRT_ASSIGN_OR_RETURN(w.slots, operand<const int64_t>(l, slot_arg, "slot_mapping",
                                                           w.num_tokens, "one slot per token"));
  for (uint32_t t = 0; t < w.num_tokens; ++t) {
    const int64_t slot = w.slots[t];
    if (slot < 0) continue;
    if (slot > kMaxSlot)
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: slot_mapping[%d] = %d is beyond any cache (limit 2^40 slots)", l.entry(), t, slot));
    w.last_token = t;
    w.cache_extent = std::max(w.cache_extent, g.row(slot) + g.row_elems());
  }
  return w;
}

// The contiguous row extent of `tokens` rows `stride` apart.
uint64_t rows_extent(int64_t last_token, uint32_t stride, uint64_t row_elems) {
  return last_token < 0 ? 0 : uint64_t(last_token) * stride + row_elems;
}

absl::Status check_stride(const Launch& l, const char* name, uint32_t stride,
                          const CacheGeometry& g) {
  if (stride >= g.row_elems()) return absl::OkStatus();
  return invalid_launch(l, absl::StrFormat("%s %d is shorter than a row of num_kv_heads * head_dim = %d",
                                    name, stride, g.row_elems()));
}

// The bf16 rows a slot write reads, `stride` elements apart, as far as the
// last token with a slot.
absl::StatusOr<std::span<const bf16_bits>> source_rows(const Launch& l, uint32_t arg,
                                                       const char* name, uint32_t stride,
                                                       const CacheGeometry& g, const SlotWrite& w,
                                                       const std::string& why) {
  return operand<const bf16_bits>(l, arg, name, rows_extent(w.last_token, stride, g.row_elems()),
                                  why);
}

std::string slot_why(const SlotWrite& w) {
  return w.last_token < 0 ? std::string("no token")
                          : absl::StrFormat("token %d's slot (the furthest row written)",
                                            w.last_token);
}

}  // namespace
}  // namespace sparkrt::reference

// The registered functions live at namespace scope (the macro's doing).
using namespace sparkrt::reference;  // NOLINT(build/namespaces)

SPARKRT_REFERENCE_KERNEL(kv_cache, fill_slots_from_block_table) {
  const uint32_t start_pos = launch.value<uint32_t>(2);
  const uint32_t count = launch.value<uint32_t>(3);
  const uint32_t block_size = launch.value<uint32_t>(4);
  if (count == 0) return absl::OkStatus();
  if (block_size == 0) return invalid_launch(launch, "block_size must be > 0");
  const uint64_t threads = uint64_t{launch.grid()[0]} * launch.block()[0];
  if (threads < count)
    return invalid_launch(
        launch, absl::StrFormat("grid %d x block %d covers %d of count %d slots",
                                launch.grid()[0], launch.block()[0], threads, count));
  const uint64_t last = uint64_t{start_pos} + count - 1;
  SPARKRT_ASSIGN_OR_RETURN(auto slots,
                           operand<int64_t>(launch, 0, "slots", count, "count slots"));
  SPARKRT_ASSIGN_OR_RETURN(
      auto table, operand<const int32_t>(launch, 1, "block_table", last / block_size + 1,
                                         absl::StrFormat("position %d", last)));
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t pos = uint64_t{start_pos} + i;
    slots[i] = int64_t{table[pos / block_size]} * block_size + int64_t(pos % block_size);
  }
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(kv_cache, reshape_and_cache) {
  const uint32_t num_kv_heads = launch.value<uint32_t>(5);
  const uint32_t head_dim = launch.value<uint32_t>(6);
  const uint32_t block_size = launch.value<uint32_t>(7);
  const CacheGeometry geom = dense_cache(num_kv_heads, head_dim, block_size);
  const uint32_t key_stride = launch.value<uint32_t>(8);
  const uint32_t value_stride = launch.value<uint32_t>(9);
  SPARKRT_ASSIGN_OR_RETURN(const SlotWrite w, plan_slot_write(launch, 4, geom));
  if (auto s = check_stride(launch, "key_stride", key_stride, geom); !s.ok()) return s;
  if (auto s = check_stride(launch, "value_stride", value_stride, geom); !s.ok()) return s;
  const std::string why = slot_why(w);
  SPARKRT_ASSIGN_OR_RETURN(auto key, source_rows(launch, 0, "key", key_stride, geom, w, why));
  SPARKRT_ASSIGN_OR_RETURN(auto value,
                           source_rows(launch, 1, "value", value_stride, geom, w, why));
  SPARKRT_ASSIGN_OR_RETURN(auto k_cache,
                           operand<bf16_bits>(launch, 2, "k_cache", w.cache_extent, why));
  SPARKRT_ASSIGN_OR_RETURN(auto v_cache,
                           operand<bf16_bits>(launch, 3, "v_cache", w.cache_extent, why));
  for (uint32_t t = 0; t < w.num_tokens; ++t) {
    if (w.slots[t] < 0) continue;
    const uint64_t dst = geom.row(w.slots[t]);
    for (uint64_t e = 0; e < geom.row_elems(); ++e) {
      k_cache[dst + e] = key[uint64_t{t} * key_stride + e];
      v_cache[dst + e] = value[uint64_t{t} * value_stride + e];
    }
  }
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(kv_cache, reshape_and_cache_flash_v_only) {
  const uint32_t num_kv_heads = launch.value<uint32_t>(3);
  const uint32_t head_dim = launch.value<uint32_t>(4);
  const uint32_t block_size = launch.value<uint32_t>(5);
  const uint32_t value_stride = launch.value<uint32_t>(6);
  const CacheGeometry geom = dense_cache(num_kv_heads, head_dim, block_size);
  SPARKRT_ASSIGN_OR_RETURN(const SlotWrite w, plan_slot_write(launch, 2, geom));
  if (auto s = check_stride(launch, "value_stride", value_stride, geom); !s.ok()) return s;
  const std::string why = slot_why(w);
  SPARKRT_ASSIGN_OR_RETURN(auto value,
                           source_rows(launch, 0, "value", value_stride, geom, w, why));
  SPARKRT_ASSIGN_OR_RETURN(auto v_cache,
                           operand<bf16_bits>(launch, 1, "v_cache", w.cache_extent, why));
  for (uint32_t t = 0; t < w.num_tokens; ++t) {
    if (w.slots[t] < 0) continue;
    const uint64_t dst = geom.row(w.slots[t]);
    for (uint64_t e = 0; e < geom.row_elems(); ++e)
      v_cache[dst + e] = value[uint64_t{t} * value_stride + e];
  }
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(kv_cache, reshape_and_cache_fp8) {
  const uint32_t num_kv_heads = launch.value<uint32_t>(5);
  const uint32_t head_dim = launch.value<uint32_t>(6);
  const uint32_t block_size = launch.value<uint32_t>(7);
  const float k_scale = launch.value<float>(8);
  const float v_scale = launch.value<float>(9);
  const uint32_t key_stride = launch.value<uint32_t>(10);
  const uint32_t value_stride = launch.value<uint32_t>(11);
  const uint64_t cache_stride = launch.value<uint64_t>(12);
  const CacheGeometry geom{num_kv_heads, head_dim, block_size, cache_stride};
  SPARKRT_ASSIGN_OR_RETURN(const SlotWrite w, plan_slot_write(launch, 4, geom));
  if (auto s = check_stride(launch, "key_stride", key_stride, geom); !s.ok()) return s;
  if (auto s = check_stride(launch, "value_stride", value_stride, geom); !s.ok()) return s;
  const std::string why = slot_why(w);
  SPARKRT_ASSIGN_OR_RETURN(auto key, source_rows(launch, 0, "key", key_stride, geom, w, why));
  SPARKRT_ASSIGN_OR_RETURN(auto value,
                           source_rows(launch, 1, "value", value_stride, geom, w, why));
  SPARKRT_ASSIGN_OR_RETURN(auto k_cache,
                           operand<fp8_bits>(launch, 2, "k_cache", w.cache_extent, why));
  SPARKRT_ASSIGN_OR_RETURN(auto v_cache,
                           operand<fp8_bits>(launch, 3, "v_cache", w.cache_extent, why));
  for (uint32_t t = 0; t < w.num_tokens; ++t) {
    if (w.slots[t] < 0) continue;
    const uint64_t dst = geom.row(w.slots[t]);
    for (uint64_t e = 0; e < geom.row_elems(); ++e) {
      k_cache[dst + e] = f32_to_fp8_e4m3(bf16_to_f32(key[uint64_t{t} * key_stride + e]) / k_scale);
      v_cache[dst + e] =
          f32_to_fp8_e4m3(bf16_to_f32(value[uint64_t{t} * value_stride + e]) / v_scale);
    }
  }
  return absl::OkStatus();
}

namespace sparkrt::reference {
namespace {

enum class FusedOut { kBf16, kFp8 };

// The fused K path (RMSNorm -> RoPE -> one rounding at the cache write).
// `num_pos` position arrays start at argument 2 (1 scalar, 3 for MRoPE); the
// remaining arguments follow them in the same order in every variant.
absl::Status fused_k_path(const Launch& l, uint32_t num_pos, FusedOut out_kind) {
  const uint32_t a = 2 + num_pos;  // index of k_cache
  const uint32_t num_kv_heads = l.value<uint32_t>(a + 2);
  const uint32_t head_dim = l.value<uint32_t>(a + 3);
  const uint32_t rotary_dim = l.value<uint32_t>(a + 4);
  const uint32_t block_size = l.value<uint32_t>(a + 5);
  const float eps = l.value<float>(a + 6);
  const float theta = l.value<float>(a + 7);
  const float inv_scale = out_kind == FusedOut::kFp8 ? l.value<float>(a + 8) : 1.0f;
  const CacheGeometry geom = dense_cache(num_kv_heads, head_dim, block_size);
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim)
    return invalid_launch(l, absl::StrFormat("rotary_dim %d must be even and <= head_dim %d", rotary_dim,
                                      head_dim));
  if (l.grid()[1] != num_kv_heads || l.block()[0] != head_dim)
    return invalid_launch(l, absl::StrFormat("the launch must be grid (num_tokens, num_kv_heads = %d), "
                                      "block (head_dim = %d); got grid.y %d, block.x %d",
                                      num_kv_heads, head_dim, l.grid()[1], l.block()[0]));
  SPARKRT_ASSIGN_OR_RETURN(const SlotWrite w, plan_slot_write(l, a + 1, geom));
  const std::string why = slot_why(w);
  const uint64_t used_tokens = uint64_t(w.last_token + 1);
  SPARKRT_ASSIGN_OR_RETURN(
      auto k_in, operand<const bf16_bits>(l, 0, "k_in", used_tokens * geom.row_elems(), why));
  SPARKRT_ASSIGN_OR_RETURN(auto weight, operand<const bf16_bits>(l, 1, "k_norm_weight",
                                                                 w.last_token < 0 ? 0 : head_dim,
                                                                 "one weight per element"));
  std::span<const int32_t> pos[3];
  static const char* const kPosNames[3][3] = {
      {"positions", "", ""}, {"pos_t", "pos_h", "pos_w"}, {"", "", ""}};
  for (uint32_t p = 0; p < num_pos; ++p) {
    SPARKRT_ASSIGN_OR_RETURN(
        pos[p], operand<const int32_t>(l, 2 + p, kPosNames[num_pos == 1 ? 0 : 1][p], used_tokens,
                                       why));
  }
  std::span<bf16_bits> cache_bf16;
  std::span<fp8_bits> cache_fp8;
  if (out_kind == FusedOut::kBf16) {
    SPARKRT_ASSIGN_OR_RETURN(cache_bf16, operand<bf16_bits>(l, a, "k_cache", w.cache_extent, why));
  } else {
    SPARKRT_ASSIGN_OR_RETURN(cache_fp8, operand<fp8_bits>(l, a, "k_cache", w.cache_extent, why));
  }

  const uint32_t half = rotary_dim / 2;
  std::vector<float> inv_freq(half);
  for (uint32_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0f * static_cast<float>(i) / static_cast<float>(rotary_dim));
  std::vector<float> y(head_dim);
  for (uint32_t t = 0; t < w.num_tokens; ++t) {
    if (w.slots[t] < 0) continue;
    for (uint32_t h = 0; h < num_kv_heads; ++h) {
      const uint64_t src = (uint64_t{t} * num_kv_heads + h) * head_dim;
      float sum_sq = 0.0f;
      for (uint32_t d = 0; d < head_dim; ++d) {
        const float x = bf16_to_f32(k_in[src + d]);
        sum_sq += x * x;
      }
      const float denom = std::sqrt(sum_sq / static_cast<float>(head_dim) + eps);
      for (uint32_t d = 0; d < head_dim; ++d)
        y[d] = bf16_to_f32(k_in[src + d]) * bf16_to_f32(weight[d]) / denom;
      for (uint32_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos[num_pos == 1 ? 0 : i % 3][t]) * inv_freq[i];
        const float c = std::cos(angle);
        const float s = std::sin(angle);
        const float lo = y[i];
        const float hi = y[i + half];
        y[i] = lo * c - hi * s;
        y[i + half] = hi * c + lo * s;
      }
      const uint64_t dst = geom.row(w.slots[t]) + uint64_t{h} * head_dim;
      for (uint32_t d = 0; d < head_dim; ++d) {
        if (out_kind == FusedOut::kBf16) {
          cache_bf16[dst + d] = f32_to_bf16(y[d]);
        } else {
          cache_fp8[dst + d] = f32_to_fp8_e4m3(y[d] * inv_scale);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace sparkrt::reference

SPARKRT_REFERENCE_KERNEL(kv_cache, fused_k_norm_rope_cache_write_bf16) {
  return sparkrt::reference::fused_k_path(launch, 1, sparkrt::reference::FusedOut::kBf16);
}

SPARKRT_REFERENCE_KERNEL(kv_cache, fused_k_norm_rope_cache_write_bf16_mrope) {
  return sparkrt::reference::fused_k_path(launch, 3, sparkrt::reference::FusedOut::kBf16);
}

SPARKRT_REFERENCE_KERNEL(kv_cache, fused_k_norm_rope_cache_write_fp8) {
  return sparkrt::reference::fused_k_path(launch, 1, sparkrt::reference::FusedOut::kFp8);
}
