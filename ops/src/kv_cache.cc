#include "sparkrt/ops/kv_cache.h"

#include <string_view>

#include "absl/strings/str_format.h"
#include "op_checks.h"
#include "sparkrt/kernel_launch.h"

namespace sparkrt::ops {
namespace {

using contract::kv_cache::kCopyThreads;
using detail::check_cache_stride;
using detail::check_heads;
using detail::check_nonzero;
using detail::check_row_stride;
using detail::check_scale;
using detail::invalid;

absl::Status check_rope(std::string_view op, uint32_t head_dim, uint32_t rotary_dim) {
  if (rotary_dim % 2 == 0 && rotary_dim <= head_dim) return absl::OkStatus();
  return invalid(op, absl::StrFormat("rotary_dim %d must be even and <= head_dim %d", rotary_dim,
                                     head_dim));
}

}  // namespace

absl::StatusOr<KvCacheKernels> KvCacheKernels::resolve(Device& dev) {
  KvCacheKernels k;
  constexpr const char* m = contract::kv_cache::kModule;
  const detail::KernelEntry entries[] = {
      {m, "fill_slots_from_block_table", &k.fill_slots_from_block_table},
      {m, "reshape_and_cache", &k.reshape_and_cache},
      {m, "reshape_and_cache_flash_v_only", &k.reshape_and_cache_flash_v_only},
      {m, "reshape_and_cache_fp8", &k.reshape_and_cache_fp8},
      {m, "fused_k_norm_rope_cache_write_bf16", &k.fused_k_norm_rope_cache_write_bf16},
      {m, "fused_k_norm_rope_cache_write_bf16_mrope", &k.fused_k_norm_rope_cache_write_bf16_mrope},
      {m, "fused_k_norm_rope_cache_write_fp8", &k.fused_k_norm_rope_cache_write_fp8},
  };
  SPARKRT_RETURN_IF_ERROR(detail::resolve_all(dev, entries));
  k.dependent_launch = detail::may_launch_dependent(dev, entries);
  return k;
}

absl::Status fill_slots_from_block_table(Device& dev, const KvCacheKernels& k,
                                         const FillSlotsArgs& a, Stream stream) {
  if (a.count == 0) return absl::OkStatus();
  SPARKRT_RETURN_IF_ERROR(check_nonzero("fill_slots_from_block_table", "block_size",
                                            a.block_size));
  return KernelLaunch(dev, k.fill_slots_from_block_table)
      .dependent_launch(k.dependent_launch)
      .grid({div_ceil(a.count, kCopyThreads)})
      .block({kCopyThreads})
      .arg(a.slots)
      .arg(a.block_table)
      .arg(a.start_pos)
      .arg(a.count)
      .arg(a.block_size)
      .launch(stream);
}

absl::Status reshape_and_cache(Device& dev, const KvCacheKernels& k, const ReshapeAndCacheArgs& a,
                               Stream stream) {
  if (a.num_tokens == 0) return absl::OkStatus();
  constexpr std::string_view op = "reshape_and_cache";
  SPARKRT_RETURN_IF_ERROR(check_heads(op, a.num_kv_heads, a.head_dim, a.block_size));
  SPARKRT_RETURN_IF_ERROR(
      check_row_stride(op, "key_stride", a.key_stride, a.num_kv_heads, a.head_dim));
  SPARKRT_RETURN_IF_ERROR(
      check_row_stride(op, "value_stride", a.value_stride, a.num_kv_heads, a.head_dim));
  return KernelLaunch(dev, k.reshape_and_cache)
      .dependent_launch(k.dependent_launch)
      .grid({a.num_tokens})
      .block({kCopyThreads})
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
      .launch(stream);
}

absl::Status reshape_and_cache_flash_v_only(Device& dev, const KvCacheKernels& k,
                                            const ReshapeAndCacheVOnlyArgs& a, Stream stream) {
  if (a.num_tokens == 0) return absl::OkStatus();
  constexpr std::string_view op = "reshape_and_cache_flash_v_only";
  SPARKRT_RETURN_IF_ERROR(check_heads(op, a.num_kv_heads, a.head_dim, a.block_size));
  SPARKRT_RETURN_IF_ERROR(
      check_row_stride(op, "value_stride", a.value_stride, a.num_kv_heads, a.head_dim));
  return KernelLaunch(dev, k.reshape_and_cache_flash_v_only)
      .dependent_launch(k.dependent_launch)
      .grid({a.num_tokens})
      .block({kCopyThreads})
      .arg(a.value)
      .arg(a.v_cache)
      .arg(a.slot_mapping)
      .arg(a.num_kv_heads)
      .arg(a.head_dim)
      .arg(a.block_size)
      .arg(a.value_stride)
      .launch(stream);
}

absl::Status reshape_and_cache_fp8(Device& dev, const KvCacheKernels& k,
                                   const ReshapeAndCacheFp8Args& a, Stream stream) {
  if (a.num_tokens == 0) return absl::OkStatus();
  constexpr std::string_view op = "reshape_and_cache_fp8";
  SPARKRT_RETURN_IF_ERROR(check_heads(op, a.num_kv_heads, a.head_dim, a.block_size));
  SPARKRT_RETURN_IF_ERROR(
      check_row_stride(op, "key_stride", a.key_stride, a.num_kv_heads, a.head_dim));
  SPARKRT_RETURN_IF_ERROR(
      check_row_stride(op, "value_stride", a.value_stride, a.num_kv_heads, a.head_dim));
  SPARKRT_RETURN_IF_ERROR(
      check_cache_stride(op, a.cache_stride, a.block_size, a.num_kv_heads, a.head_dim));
  SPARKRT_RETURN_IF_ERROR(check_scale(op, "k_scale", a.k_scale));
  SPARKRT_RETURN_IF_ERROR(check_scale(op, "v_scale", a.v_scale));
  return KernelLaunch(dev, k.reshape_and_cache_fp8)
      .dependent_launch(k.dependent_launch)
      .grid({a.num_tokens})
      .block({kCopyThreads})
      .arg(a.key)
      .arg(a.value)
      .arg(a.k_cache)
      .arg(a.v_cache)
      .arg(a.slot_mapping)
      .arg(a.num_kv_heads)
      .arg(a.head_dim)
      .arg(a.block_size)
      .arg(a.k_scale)
      .arg(a.v_scale)
      .arg(a.key_stride)
      .arg(a.value_stride)
      .arg(a.cache_stride)
      .launch(stream);
}

namespace {

absl::Status check_fused(std::string_view op, uint32_t num_kv_heads, uint32_t head_dim,
                         uint32_t rotary_dim, uint32_t block_size) {
  SPARKRT_RETURN_IF_ERROR(check_heads(op, num_kv_heads, head_dim, block_size));
  return check_rope(op, head_dim, rotary_dim);
}

}  // namespace

absl::Status fused_k_norm_rope_cache_write_bf16(Device& dev, const KvCacheKernels& k,
                                                const FusedKNormRopeArgs& a, Stream stream) {
  if (a.num_tokens == 0) return absl::OkStatus();
  SPARKRT_RETURN_IF_ERROR(check_fused("fused_k_norm_rope_cache_write_bf16", a.num_kv_heads,
                                          a.head_dim, a.rotary_dim, a.block_size));
  return KernelLaunch(dev, k.fused_k_norm_rope_cache_write_bf16)
      .dependent_launch(k.dependent_launch)
      .grid({a.num_tokens, a.num_kv_heads})
      .block({a.head_dim})
      .arg(a.k_in)
      .arg(a.k_norm_weight)
      .arg(a.positions)
      .arg(a.k_cache)
      .arg(a.slot_mapping)
      .arg(a.num_kv_heads)
      .arg(a.head_dim)
      .arg(a.rotary_dim)
      .arg(a.block_size)
      .arg(a.rms_eps)
      .arg(a.theta)
      .launch(stream);
}

absl::Status fused_k_norm_rope_cache_write_bf16_mrope(Device& dev, const KvCacheKernels& k,
                                                      const FusedKNormRopeMropeArgs& a,
                                                      Stream stream) {
  if (a.num_tokens == 0) return absl::OkStatus();
  SPARKRT_RETURN_IF_ERROR(check_fused("fused_k_norm_rope_cache_write_bf16_mrope",
                                          a.num_kv_heads, a.head_dim, a.rotary_dim,
                                          a.block_size));
  return KernelLaunch(dev, k.fused_k_norm_rope_cache_write_bf16_mrope)
      .dependent_launch(k.dependent_launch)
      .grid({a.num_tokens, a.num_kv_heads})
      .block({a.head_dim})
      .arg(a.k_in)
      .arg(a.k_norm_weight)
      .arg(a.pos_t)
      .arg(a.pos_h)
      .arg(a.pos_w)
      .arg(a.k_cache)
      .arg(a.slot_mapping)
      .arg(a.num_kv_heads)
      .arg(a.head_dim)
      .arg(a.rotary_dim)
      .arg(a.block_size)
      .arg(a.rms_eps)
      .arg(a.theta)
      .launch(stream);
}

absl::Status fused_k_norm_rope_cache_write_fp8(Device& dev, const KvCacheKernels& k,
                                               const FusedKNormRopeFp8Args& a, Stream stream) {
  if (a.num_tokens == 0) return absl::OkStatus();
  constexpr std::string_view op = "fused_k_norm_rope_cache_write_fp8";
  SPARKRT_RETURN_IF_ERROR(
      check_fused(op, a.num_kv_heads, a.head_dim, a.rotary_dim, a.block_size));
  SPARKRT_RETURN_IF_ERROR(check_scale(op, "inv_scale", a.inv_scale));
  return KernelLaunch(dev, k.fused_k_norm_rope_cache_write_fp8)
      .dependent_launch(k.dependent_launch)
      .grid({a.num_tokens, a.num_kv_heads})
      .block({a.head_dim})
      .arg(a.k_in)
      .arg(a.k_norm_weight)
      .arg(a.positions)
      .arg(a.k_cache)
      .arg(a.slot_mapping)
      .arg(a.num_kv_heads)
      .arg(a.head_dim)
      .arg(a.rotary_dim)
      .arg(a.block_size)
      .arg(a.rms_eps)
      .arg(a.theta)
      .arg(a.inv_scale)
      .launch(stream);
}

}  // namespace sparkrt::ops
