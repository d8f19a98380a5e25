#include "sparkrt/ops/turbo_kv_cache.h"

#include <string_view>

#include "absl/strings/str_format.h"
#include "op_checks.h"
#include "sparkrt/kernel_launch.h"

namespace sparkrt::ops {
namespace {

namespace format = sparkrt::contract::turbo_kv_cache;  // the format and launch contract
using detail::check_heads;
using detail::check_row_stride;
using detail::invalid;

absl::Status check_layout(std::string_view op, uint32_t bits, uint32_t block_size,
                          uint32_t num_kv_heads, uint32_t head_dim) {
  if (!format::valid_bits(bits))
    return invalid(op, absl::StrFormat("bits %d must be 2, 3 or 4", bits));
  SPARKRT_RETURN_IF_ERROR(check_heads(op, num_kv_heads, head_dim, block_size));
  if (head_dim % format::kGroup != 0)
    return invalid(op, absl::StrFormat("head_dim %d must be a multiple of %d (the values of a "
                                       "scale group)",
                                       head_dim, format::kGroup));
  return absl::OkStatus();
}

absl::Status write(Device& dev, const Kernel& kernel, bool dependent, uint32_t bits,
                   const ReshapeAndCacheTurboArgs& a, Stream stream) {
  if (a.num_tokens == 0) return absl::OkStatus();
  const std::string_view op = kernel.entry();
  SPARKRT_RETURN_IF_ERROR(check_layout(op, bits, a.block_size, a.num_kv_heads, a.head_dim));
  SPARKRT_RETURN_IF_ERROR(
      check_row_stride(op, "key_stride", a.key_stride, a.num_kv_heads, a.head_dim));
  SPARKRT_RETURN_IF_ERROR(
      check_row_stride(op, "value_stride", a.value_stride, a.num_kv_heads, a.head_dim));
  const format::Layout lay = format::layout(bits, a.block_size, a.num_kv_heads, a.head_dim);
  if (a.k_block_stride_bytes < lay.k_block_stride_bytes || a.k_block_stride_bytes % 2 != 0)
    return invalid(op, absl::StrFormat("k_block_stride_bytes %d must be even and at least one "
                                       "dense BF16 block (%d bytes)",
                                       a.k_block_stride_bytes, lay.k_block_stride_bytes));
  SPARKRT_RETURN_IF_ERROR(detail::check_turbo_v_sections(op, bits, a.block_size, a.num_kv_heads,
                                                          a.head_dim, a.v_data_section_bytes,
                                                          a.v_block_stride_bytes));
  return KernelLaunch(dev, kernel)
      .dependent_launch(dependent)
      .grid({a.num_tokens})
      .block({format::kThreads})
      .arg(a.key)
      .arg(a.value)
      .arg(a.k_cache)
      .arg(a.v_cache)
      .arg(a.slot_mapping)
      .arg(a.num_kv_heads)
      .arg(a.head_dim)
      .arg(a.block_size)
      .arg(a.key_stride)
      .arg(a.value_stride)
      .arg(a.k_block_stride_bytes)
      .arg(a.v_block_stride_bytes)
      .arg(a.v_data_section_bytes)
      .launch(stream);
}

}  // namespace

absl::StatusOr<TurboKvCacheKernels> TurboKvCacheKernels::resolve(Device& dev) {
  TurboKvCacheKernels k;
  constexpr const char* m = format::kModule;
  const detail::KernelEntry entries[] = {
      {m, "reshape_and_cache_flash_bf16k_turbo2v", &k.reshape_and_cache_flash_bf16k_turbo2v},
      {m, "reshape_and_cache_flash_bf16k_turbo3v", &k.reshape_and_cache_flash_bf16k_turbo3v},
      {m, "reshape_and_cache_flash_bf16k_turbo4v", &k.reshape_and_cache_flash_bf16k_turbo4v},
      {m, "hadamard_transform_bf16", &k.hadamard_transform_bf16},
  };
  SPARKRT_RETURN_IF_ERROR(detail::resolve_all(dev, entries));
  k.dependent_launch = detail::may_launch_dependent(dev, entries);
  return k;
}

absl::StatusOr<TurboCacheLayout> turbo_cache_layout(uint32_t bits, uint32_t block_size,
                                                    uint32_t num_kv_heads, uint32_t head_dim) {
  SPARKRT_RETURN_IF_ERROR(
      check_layout("turbo_cache_layout", bits, block_size, num_kv_heads, head_dim));
  const format::Layout l = format::layout(bits, block_size, num_kv_heads, head_dim);
  return TurboCacheLayout{bits, l.k_block_stride_bytes, l.v_data_section_bytes,
                          l.v_block_stride_bytes};
}

absl::Status reshape_and_cache_bf16k_turbo2v(Device& dev, const TurboKvCacheKernels& k,
                                             const ReshapeAndCacheTurboArgs& a, Stream stream) {
  return write(dev, k.reshape_and_cache_flash_bf16k_turbo2v, k.dependent_launch, 2, a, stream);
}
absl::Status reshape_and_cache_bf16k_turbo3v(Device& dev, const TurboKvCacheKernels& k,
                                             const ReshapeAndCacheTurboArgs& a, Stream stream) {
  return write(dev, k.reshape_and_cache_flash_bf16k_turbo3v, k.dependent_launch, 3, a, stream);
}
absl::Status reshape_and_cache_bf16k_turbo4v(Device& dev, const TurboKvCacheKernels& k,
                                             const ReshapeAndCacheTurboArgs& a, Stream stream) {
  return write(dev, k.reshape_and_cache_flash_bf16k_turbo4v, k.dependent_launch, 4, a, stream);
}

absl::Status hadamard_transform_bf16(Device& dev, const TurboKvCacheKernels& k,
                                     const HadamardArgs& a, Stream stream) {
  if (a.num_tokens == 0 || a.num_heads == 0) return absl::OkStatus();
  constexpr std::string_view op = "hadamard_transform_bf16";
  const uint32_t d = a.head_dim;
  if (d < format::kMinRotationDim || d > format::kMaxRotationDim || (d & (d - 1)) != 0)
    return invalid(op, absl::StrFormat("head_dim %d must be a power of two in [%d, %d]", d,
                                       format::kMinRotationDim, format::kMaxRotationDim));
  SPARKRT_RETURN_IF_ERROR(check_row_stride(op, "in_stride", a.in_stride, a.num_heads, d));
  SPARKRT_RETURN_IF_ERROR(check_row_stride(op, "out_stride", a.out_stride, a.num_heads, d));
  if (a.in == a.out && a.in_stride != a.out_stride)
    return invalid(op, absl::StrFormat("in place (in == out %#x) needs in_stride %d == "
                                       "out_stride %d",
                                       a.in.addr, a.in_stride, a.out_stride));
  return KernelLaunch(dev, k.hadamard_transform_bf16)
      .dependent_launch(k.dependent_launch)
      .grid({a.num_tokens, a.num_heads})
      .block({format::kThreads})
      .arg(a.in)
      .arg(a.out)
      .arg(a.head_dim)
      .arg(a.in_stride)
      .arg(a.out_stride)
      .launch(stream);
}

}  // namespace sparkrt::ops
