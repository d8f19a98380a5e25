// References for kernels/ptx/turbo_kv_cache.cu (format and contracts in
// docs/kernels.md, "TurboQuant V cache" and "Module turbo_kv_cache"). The
// group quantizer and the packing are the contract header's, the CUDA
// source's too, so the bytes match the GPU's bit for bit; every buffer is
// resolved with the exact extent the launch touches.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "absl/strings/str_format.h"
#include "operands.h"
#include "reference.h"
#include "sparkrt/contract/turbo_kv_cache.h"
#include "sparkrt/numeric.h"

namespace sparkrt::reference {
namespace {

namespace format = contract::turbo_kv_cache;

// Largest slot in a pool addressable without overflowing a 64-bit extent.
constexpr int64_t kMaxSlot = int64_t{1} << 40;

absl::Status write_turbo(const Launch& l, uint32_t bits) {
  const uint32_t num_tokens = l.grid()[0];
  const uint32_t heads = l.value<uint32_t>(5), d = l.value<uint32_t>(6);
  const uint32_t block_size = l.value<uint32_t>(7);
  const uint32_t key_stride = l.value<uint32_t>(8), value_stride = l.value<uint32_t>(9);
  const uint64_t k_stride = l.value<uint64_t>(10), v_stride = l.value<uint64_t>(11);
  const uint64_t v_data = l.value<uint64_t>(12);
  if (!format::valid_shape(bits, block_size, heads, d))
    return invalid_launch(l, absl::StrFormat("num_kv_heads %d and block_size %d must be > 0 and "
                                             "head_dim %d a positive multiple of %d",
                                             heads, block_size, d, format::kGroup));
  const format::Layout lay = format::layout(bits, block_size, heads, d);
  const uint64_t row = uint64_t{heads} * d;
  if (key_stride < row || value_stride < row)
    return invalid_launch(l, absl::StrFormat("key_stride %d and value_stride %d must be at least "
                                             "num_kv_heads * head_dim = %d",
                                             key_stride, value_stride, row));
  if (k_stride < lay.k_block_stride_bytes ||
      !format::v_sections_fit(lay, block_size, v_data, v_stride))
    return invalid_launch(
        l, absl::StrFormat("k_block_stride_bytes %d, v_data_section_bytes %d and "
                           "v_block_stride_bytes %d do not hold a block (at least %d, %d and %d)",
                           k_stride, v_data, v_stride, lay.k_block_stride_bytes,
                           lay.v_data_section_bytes, lay.v_block_stride_bytes));
  SPARKRT_ASSIGN_OR_RETURN(auto slots, operand<const int64_t>(l, 4, "slot_mapping", num_tokens,
                                                              "one slot per token"));
  int64_t last = -1;
  uint64_t k_extent = 0, v_extent = 0;
  for (uint32_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slots[t];
    if (slot < 0) continue;
    if (slot > kMaxSlot)
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: slot_mapping[%d] = %d is beyond any cache (limit 2^40 slots)", l.entry(), t, slot));
    last = t;
    const uint64_t b = uint64_t(slot) / block_size, o = uint64_t(slot) % block_size;
    k_extent = std::max(k_extent, b * k_stride + (o + 1) * row * 2);
    v_extent = std::max(v_extent, b * v_stride + v_data + (o + 1) * lay.v_token_scale_bytes);
  }
  if (last < 0) return absl::OkStatus();
  const std::string why = absl::StrFormat("token %d's slot (the furthest row written)", last);
  SPARKRT_ASSIGN_OR_RETURN(
      auto key, operand<const bf16_bits>(l, 0, "key", uint64_t(last) * key_stride + row, why));
  SPARKRT_ASSIGN_OR_RETURN(auto value, operand<const bf16_bits>(
                                           l, 1, "value", uint64_t(last) * value_stride + row, why));
  SPARKRT_ASSIGN_OR_RETURN(auto k_cache, operand<uint8_t>(l, 2, "k_cache", k_extent, why));
  SPARKRT_ASSIGN_OR_RETURN(auto v_cache, operand<uint8_t>(l, 3, "v_cache", v_extent, why));
  for (uint32_t t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0) continue;
    const uint64_t b = uint64_t(slots[t]) / block_size, o = uint64_t(slots[t]) % block_size;
    std::copy_n(reinterpret_cast<const uint8_t*>(key.data() + uint64_t{t} * key_stride), row * 2,
                k_cache.data() + b * k_stride + o * row * 2);
    uint8_t* data = v_cache.data() + b * v_stride + o * lay.v_token_data_bytes;
    uint8_t* scales = v_cache.data() + b * v_stride + v_data + o * lay.v_token_scale_bytes;
    for (uint64_t g = 0; g < row / format::kGroup; ++g) {
      float x[format::kGroup];
      for (uint32_t i = 0; i < format::kGroup; ++i)
        x[i] = bf16_to_f32(value[uint64_t{t} * value_stride + g * format::kGroup + i]);
      uint8_t idx[format::kGroup];
      const float s = format::quantize_group(x, bits, idx);
      format::pack_group(idx, bits, data + g * format::kGroup * bits / 8);
      scales[g] = f32_to_fp8_e4m3(s);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace sparkrt::reference

using namespace sparkrt::reference;  // NOLINT(build/namespaces)

SPARKRT_REFERENCE_KERNEL(turbo_kv_cache, reshape_and_cache_flash_bf16k_turbo2v) {
  return write_turbo(launch, 2);
}
SPARKRT_REFERENCE_KERNEL(turbo_kv_cache, reshape_and_cache_flash_bf16k_turbo3v) {
  return write_turbo(launch, 3);
}
SPARKRT_REFERENCE_KERNEL(turbo_kv_cache, reshape_and_cache_flash_bf16k_turbo4v) {
  return write_turbo(launch, 4);
}

// The normalized Walsh-Hadamard transform of each (token, head) row, in f32
// in the kernel's order of butterflies, one bf16 rounding.
SPARKRT_REFERENCE_KERNEL(turbo_kv_cache, hadamard_transform_bf16) {
  namespace format = sparkrt::contract::turbo_kv_cache;
  const uint32_t d = launch.value<uint32_t>(2);
  const uint32_t in_stride = launch.value<uint32_t>(3), out_stride = launch.value<uint32_t>(4);
  const uint32_t tokens = launch.grid()[0], heads = launch.grid()[1];
  if (d < format::kMinRotationDim || d > format::kMaxRotationDim || (d & (d - 1)) != 0)
    return invalid_launch(launch, absl::StrFormat("head_dim %d must be a power of two in [%d, %d]",
                                                  d, format::kMinRotationDim,
                                                  format::kMaxRotationDim));
  if (tokens == 0 || heads == 0) return absl::OkStatus();
  const uint64_t row = uint64_t{heads} * d;
  if (in_stride < row || out_stride < row)
    return invalid_launch(launch, absl::StrFormat("in_stride %d and out_stride %d must be at least "
                                                  "num_heads * head_dim = %d",
                                                  in_stride, out_stride, row));
  const std::string why = absl::StrFormat("%d tokens of %d heads", tokens, heads);
  SPARKRT_ASSIGN_OR_RETURN(
      auto in, operand<const bf16_bits>(launch, 0, "in", uint64_t(tokens - 1) * in_stride + row, why));
  SPARKRT_ASSIGN_OR_RETURN(
      auto out, operand<bf16_bits>(launch, 1, "out", uint64_t(tokens - 1) * out_stride + row, why));
  const float scale = 1.0f / std::sqrt(float(d));
  float x[format::kMaxRotationDim];
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t h = 0; h < heads; ++h) {
      for (uint32_t i = 0; i < d; ++i) x[i] = bf16_to_f32(in[uint64_t{t} * in_stride + h * d + i]);
      for (uint32_t s = 1; s < d; s *= 2)
        for (uint32_t p = 0; p < d / 2; ++p) {
          const uint32_t i = (p / s) * 2 * s + p % s;
          const float a = x[i], b = x[i + s];
          x[i] = a + b;
          x[i + s] = a - b;
        }
      for (uint32_t i = 0; i < d; ++i)
        out[uint64_t{t} * out_stride + h * d + i] = f32_to_bf16(x[i] * scale);
    }
  return absl::OkStatus();
}
