// The C API's op entry points: each copies the C args into the C++ op's Args
// struct (field by field, in the kernel's order) and calls the op, with the
// op family's kernels resolved once per device.
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "c_api_internal.h"
#include "sparkrt/ops/kv_cache.h"
#include "sparkrt/ops/mla.h"
#include "sparkrt/ops/paged_attention.h"
#include "sparkrt/ops/turbo_kv_cache.h"
#include "sparkrt/ops/turbo_paged_attention.h"

namespace ops = sparkrt::ops;
using sparkrt::DevicePtr;
using sparkrt::Stream;
using sparkrt::capi::check_in_struct;
using sparkrt::capi::dev;
using sparkrt::capi::guarded;
using sparkrt::capi::LazyKernels;

namespace sparkrt::capi {

struct OpKernels {
  LazyKernels<ops::KvCacheKernels> kv_cache;
  LazyKernels<ops::PagedAttentionKernels> paged_attention;
  LazyKernels<ops::TurboKvCacheKernels> turbo_kv_cache;
  LazyKernels<ops::TurboPagedAttentionKernels> turbo_paged_attention;
  LazyKernels<ops::MlaKernels> mla;
};

OpKernels* new_op_kernels() { return new OpKernels; }
void destroy_op_kernels(OpKernels* k) { delete k; }

}  // namespace sparkrt::capi

namespace {

using sparkrt::capi::OpKernels;

// Checks the handle, the args pointer and its struct_size, resolves the op
// family's kernels, then runs `op(device, kernels)`.
template <typename CArgs, typename Family, typename Op>
sparkrt_status* run_op(const char* function, sparkrt_device* device, const CArgs* args,
                       const char* type, size_t needed, Family OpKernels::*family, Op&& op) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(args);
  return guarded(function, [&]() -> absl::Status {
    if (auto s = check_in_struct(function, type, args->struct_size, needed); !s.ok()) return s;
    auto kernels = ((*device->ops).*family).get(dev(device));
    if (!kernels.ok()) return kernels.status();
    return op(dev(device), **kernels);
  });
}

absl::Status bad_field(const char* function, const char* field, int64_t value, const char* allowed) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s is %d; give %s", function, field, value, allowed));
}

}  // namespace

extern "C" {

// ---- KV-cache ops ----------------------------------------------------------

sparkrt_status* sparkrt_fill_slots_from_block_table(sparkrt_device* device,
                                                    const sparkrt_fill_slots_args* args,
                                                    SparkrtStream stream) {
  return run_op(__func__, device, args, "sparkrt_fill_slots_args", SPARKRT_C_FILL_SLOTS_ARGS_SIZE,
                &OpKernels::kv_cache, [&](sparkrt::Device& d, const ops::KvCacheKernels& k) {
                  return ops::fill_slots_from_block_table(
                      d, k,
                      {.slots = DevicePtr(args->slots),
                       .block_table = DevicePtr(args->block_table),
                       .start_pos = args->start_pos,
                       .count = args->count,
                       .block_size = args->block_size},
                      Stream{stream});
                });
}

sparkrt_status* sparkrt_reshape_and_cache(sparkrt_device* device,
                                          const sparkrt_reshape_and_cache_args* args,
                                          SparkrtStream stream) {
  return run_op(__func__, device, args, "sparkrt_reshape_and_cache_args",
                SPARKRT_C_RESHAPE_AND_CACHE_ARGS_SIZE, &OpKernels::kv_cache,
                [&](sparkrt::Device& d, const ops::KvCacheKernels& k) {
                  return ops::reshape_and_cache(d, k,
                                                {.key = DevicePtr(args->key),
                                                 .value = DevicePtr(args->value),
                                                 .k_cache = DevicePtr(args->k_cache),
                                                 .v_cache = DevicePtr(args->v_cache),
                                                 .slot_mapping = DevicePtr(args->slot_mapping),
                                                 .num_tokens = args->num_tokens,
                                                 .num_kv_heads = args->num_kv_heads,
                                                 .head_dim = args->head_dim,
                                                 .block_size = args->block_size,
                                                 .key_stride = args->key_stride,
                                                 .value_stride = args->value_stride},
                                                Stream{stream});
                });
}

sparkrt_status* sparkrt_reshape_and_cache_flash_v_only(
    sparkrt_device* device, const sparkrt_reshape_and_cache_v_only_args* args,
    SparkrtStream stream) {
  return run_op(__func__, device, args, "sparkrt_reshape_and_cache_v_only_args",
                SPARKRT_C_RESHAPE_AND_CACHE_V_ONLY_ARGS_SIZE, &OpKernels::kv_cache,
                [&](sparkrt::Device& d, const ops::KvCacheKernels& k) {
                  return ops::reshape_and_cache_flash_v_only(
                      d, k,
                      {.value = DevicePtr(args->value),
                       .v_cache = DevicePtr(args->v_cache),
                       .slot_mapping = DevicePtr(args->slot_mapping),
                       .num_tokens = args->num_tokens,
                       .num_kv_heads = args->num_kv_heads,
                       .head_dim = args->head_dim,
                       .block_size = args->block_size,
                       .value_stride = args->value_stride},
                      Stream{stream});
                });
}

sparkrt_status* sparkrt_reshape_and_cache_fp8(sparkrt_device* device,
                                              const sparkrt_reshape_and_cache_fp8_args* args,
                                              SparkrtStream stream) {
  return run_op(__func__, device, args, "sparkrt_reshape_and_cache_fp8_args",
                SPARKRT_C_RESHAPE_AND_CACHE_FP8_ARGS_SIZE, &OpKernels::kv_cache,
                [&](sparkrt::Device& d, const ops::KvCacheKernels& k) {
                  return ops::reshape_and_cache_fp8(d, k,
                                                    {.key = DevicePtr(args->key),
                                                     .value = DevicePtr(args->value),
                                                     .k_cache = DevicePtr(args->k_cache),
                                                     .v_cache = DevicePtr(args->v_cache),
                                                     .slot_mapping = DevicePtr(args->slot_mapping),
                                                     .num_tokens = args->num_tokens,
                                                     .num_kv_heads = args->num_kv_heads,
                                                     .head_dim = args->head_dim,
                                                     .block_size = args->block_size,
                                                     .k_scale = args->k_scale,
                                                     .v_scale = args->v_scale,
                                                     .key_stride = args->key_stride,
                                                     .value_stride = args->value_stride,
                                                     .cache_stride = args->cache_stride},
                                                    Stream{stream});
                });
}

sparkrt_status* sparkrt_fused_k_norm_rope_cache_write(sparkrt_device* device,
                                                      const sparkrt_fused_k_norm_rope_args* args,
                                                      SparkrtStream stream) {
  return run_op(
      __func__, device, args, "sparkrt_fused_k_norm_rope_args", SPARKRT_C_FUSED_K_NORM_ROPE_ARGS_SIZE,
      &OpKernels::kv_cache,
      [&](sparkrt::Device& d, const ops::KvCacheKernels& k) -> absl::Status {
        const Stream s{stream};
        switch (args->variant) {
          case SPARKRT_FUSED_K_BF16:
            return ops::fused_k_norm_rope_cache_write_bf16(
                d, k,
                {.k_in = DevicePtr(args->k_in),
                 .k_norm_weight = DevicePtr(args->k_norm_weight),
                 .positions = DevicePtr(args->positions),
                 .k_cache = DevicePtr(args->k_cache),
                 .slot_mapping = DevicePtr(args->slot_mapping),
                 .num_tokens = args->num_tokens,
                 .num_kv_heads = args->num_kv_heads,
                 .head_dim = args->head_dim,
                 .rotary_dim = args->rotary_dim,
                 .block_size = args->block_size,
                 .rms_eps = args->rms_eps,
                 .theta = args->theta},
                s);
          case SPARKRT_FUSED_K_BF16_MROPE:
            return ops::fused_k_norm_rope_cache_write_bf16_mrope(
                d, k,
                {.k_in = DevicePtr(args->k_in),
                 .k_norm_weight = DevicePtr(args->k_norm_weight),
                 .pos_t = DevicePtr(args->pos_t),
                 .pos_h = DevicePtr(args->pos_h),
                 .pos_w = DevicePtr(args->pos_w),
                 .k_cache = DevicePtr(args->k_cache),
                 .slot_mapping = DevicePtr(args->slot_mapping),
                 .num_tokens = args->num_tokens,
                 .num_kv_heads = args->num_kv_heads,
                 .head_dim = args->head_dim,
                 .rotary_dim = args->rotary_dim,
                 .block_size = args->block_size,
                 .rms_eps = args->rms_eps,
                 .theta = args->theta},
                s);
          case SPARKRT_FUSED_K_FP8:
            return ops::fused_k_norm_rope_cache_write_fp8(
                d, k,
                {.k_in = DevicePtr(args->k_in),
                 .k_norm_weight = DevicePtr(args->k_norm_weight),
                 .positions = DevicePtr(args->positions),
                 .k_cache = DevicePtr(args->k_cache),
                 .slot_mapping = DevicePtr(args->slot_mapping),
                 .num_tokens = args->num_tokens,
                 .num_kv_heads = args->num_kv_heads,
                 .head_dim = args->head_dim,
                 .rotary_dim = args->rotary_dim,
                 .block_size = args->block_size,
                 .rms_eps = args->rms_eps,
                 .theta = args->theta,
                 .inv_scale = args->inv_scale},
                s);
        }
        return bad_field("sparkrt_fused_k_norm_rope_cache_write", "variant", args->variant,
                         "SPARKRT_FUSED_K_BF16 (1), SPARKRT_FUSED_K_BF16_MROPE (2) or "
                         "SPARKRT_FUSED_K_FP8 (3)");
      });
}

// ---- paged decode attention ------------------------------------------------

sparkrt_status* sparkrt_paged_decode_attn(sparkrt_device* device,
                                          const sparkrt_paged_decode_args* args,
                                          SparkrtStream stream) {
  return run_op(
      __func__, device, args, "sparkrt_paged_decode_args", SPARKRT_C_PAGED_DECODE_ARGS_SIZE,
      &OpKernels::paged_attention,
      [&](sparkrt::Device& d, const ops::PagedAttentionKernels& k) -> absl::Status {
        const Stream s{stream};
        switch (args->cache_format) {
          case SPARKRT_CACHE_BF16:
            return ops::paged_decode_attn_bf16(d, k,
                                               {.q = DevicePtr(args->q),
                                                .k_cache = DevicePtr(args->k_cache),
                                                .v_cache = DevicePtr(args->v_cache),
                                                .out = DevicePtr(args->out),
                                                .block_tables = DevicePtr(args->block_tables),
                                                .seq_lens = DevicePtr(args->seq_lens),
                                                .max_blocks_per_seq = args->max_blocks_per_seq,
                                                .num_seqs = args->num_seqs,
                                                .num_q_heads = args->num_q_heads,
                                                .num_kv_heads = args->num_kv_heads,
                                                .head_dim = args->head_dim,
                                                .block_size = args->block_size,
                                                .inv_sqrt_d = args->inv_sqrt_d,
                                                .q_stride = args->q_stride,
                                                .sliding_window = args->sliding_window,
                                                .max_seq_len = args->max_seq_len,
                                                .workspace = DevicePtr(args->workspace),
                                                .workspace_bytes = args->workspace_bytes,
                                                .num_splits = args->num_splits},
                                               s);
          case SPARKRT_CACHE_FP8:
            return ops::paged_decode_attn_fp8(d, k,
                                              {.q = DevicePtr(args->q),
                                               .k_cache = DevicePtr(args->k_cache),
                                               .v_cache = DevicePtr(args->v_cache),
                                               .out = DevicePtr(args->out),
                                               .block_tables = DevicePtr(args->block_tables),
                                               .seq_lens = DevicePtr(args->seq_lens),
                                               .max_blocks_per_seq = args->max_blocks_per_seq,
                                               .num_seqs = args->num_seqs,
                                               .num_q_heads = args->num_q_heads,
                                               .num_kv_heads = args->num_kv_heads,
                                               .head_dim = args->head_dim,
                                               .block_size = args->block_size,
                                               .inv_sqrt_d = args->inv_sqrt_d,
                                               .k_scale = args->k_scale,
                                               .v_scale = args->v_scale,
                                               .q_stride = args->q_stride,
                                               .cache_stride = args->cache_stride,
                                               .sliding_window = args->sliding_window,
                                               .max_seq_len = args->max_seq_len,
                                               .workspace = DevicePtr(args->workspace),
                                               .workspace_bytes = args->workspace_bytes,
                                               .num_splits = args->num_splits},
                                              s);
        }
        return bad_field("sparkrt_paged_decode_attn", "cache_format", args->cache_format,
                         "SPARKRT_CACHE_BF16 (1) or SPARKRT_CACHE_FP8 (2)");
      });
}

uint64_t sparkrt_paged_decode_workspace_bytes(uint32_t num_seqs, uint32_t num_q_heads,
                                              uint32_t head_dim, uint32_t max_splits) {
  return ops::paged_decode_workspace_bytes(num_seqs, num_q_heads, head_dim,
                                           max_splits == 0 ? ops::kMaxDecodeSplits : max_splits);
}

// ---- TurboQuant ------------------------------------------------------------

sparkrt_status* sparkrt_turbo_cache_layout_get(uint32_t bits, uint32_t block_size,
                                               uint32_t num_kv_heads, uint32_t head_dim,
                                               sparkrt_turbo_cache_layout* out) {
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    auto l = ops::turbo_cache_layout(bits, block_size, num_kv_heads, head_dim);
    if (!l.ok()) return l.status();
    sparkrt_turbo_cache_layout full{};
    full.k_block_stride_bytes = l->k_block_stride_bytes;
    full.v_data_section_bytes = l->v_data_section_bytes;
    full.v_block_stride_bytes = l->v_block_stride_bytes;
    return sparkrt::capi::fill_out_struct(
        fn, "sparkrt_turbo_cache_layout", out, full,
        SPARKRT_STRUCT_SIZE(sparkrt_turbo_cache_layout, k_block_stride_bytes));
  });
}

sparkrt_status* sparkrt_reshape_and_cache_turbo(sparkrt_device* device,
                                                const sparkrt_reshape_and_cache_turbo_args* args,
                                                SparkrtStream stream) {
  return run_op(
      __func__, device, args, "sparkrt_reshape_and_cache_turbo_args",
      SPARKRT_C_RESHAPE_AND_CACHE_TURBO_ARGS_SIZE, &OpKernels::turbo_kv_cache,
      [&](sparkrt::Device& d, const ops::TurboKvCacheKernels& k) -> absl::Status {
        const ops::ReshapeAndCacheTurboArgs a{.key = DevicePtr(args->key),
                                              .value = DevicePtr(args->value),
                                              .k_cache = DevicePtr(args->k_cache),
                                              .v_cache = DevicePtr(args->v_cache),
                                              .slot_mapping = DevicePtr(args->slot_mapping),
                                              .num_tokens = args->num_tokens,
                                              .num_kv_heads = args->num_kv_heads,
                                              .head_dim = args->head_dim,
                                              .block_size = args->block_size,
                                              .key_stride = args->key_stride,
                                              .value_stride = args->value_stride,
                                              .k_block_stride_bytes = args->k_block_stride_bytes,
                                              .v_block_stride_bytes = args->v_block_stride_bytes,
                                              .v_data_section_bytes = args->v_data_section_bytes};
        switch (args->bits) {
          case 2: return ops::reshape_and_cache_bf16k_turbo2v(d, k, a, Stream{stream});
          case 3: return ops::reshape_and_cache_bf16k_turbo3v(d, k, a, Stream{stream});
          case 4: return ops::reshape_and_cache_bf16k_turbo4v(d, k, a, Stream{stream});
        }
        return bad_field("sparkrt_reshape_and_cache_turbo", "bits", args->bits, "2, 3 or 4");
      });
}

sparkrt_status* sparkrt_hadamard_transform_bf16(sparkrt_device* device,
                                                const sparkrt_hadamard_args* args,
                                                SparkrtStream stream) {
  return run_op(__func__, device, args, "sparkrt_hadamard_args", SPARKRT_C_HADAMARD_ARGS_SIZE,
                &OpKernels::turbo_kv_cache,
                [&](sparkrt::Device& d, const ops::TurboKvCacheKernels& k) {
                  return ops::hadamard_transform_bf16(d, k,
                                                      {.in = DevicePtr(args->in),
                                                       .out = DevicePtr(args->out),
                                                       .num_tokens = args->num_tokens,
                                                       .num_heads = args->num_heads,
                                                       .head_dim = args->head_dim,
                                                       .in_stride = args->in_stride,
                                                       .out_stride = args->out_stride},
                                                      Stream{stream});
                });
}

sparkrt_status* sparkrt_paged_decode_attn_turbo(sparkrt_device* device,
                                                const sparkrt_paged_decode_turbo_args* args,
                                                SparkrtStream stream) {
  return run_op(
      __func__, device, args, "sparkrt_paged_decode_turbo_args",
      SPARKRT_C_PAGED_DECODE_TURBO_ARGS_SIZE, &OpKernels::turbo_paged_attention,
      [&](sparkrt::Device& d, const ops::TurboPagedAttentionKernels& k) -> absl::Status {
        const ops::PagedDecodeAttnTurboArgs a{.q = DevicePtr(args->q),
                                              .k_cache = DevicePtr(args->k_cache),
                                              .v_cache = DevicePtr(args->v_cache),
                                              .out = DevicePtr(args->out),
                                              .block_tables = DevicePtr(args->block_tables),
                                              .seq_lens = DevicePtr(args->seq_lens),
                                              .max_blocks_per_seq = args->max_blocks_per_seq,
                                              .num_seqs = args->num_seqs,
                                              .num_q_heads = args->num_q_heads,
                                              .num_kv_heads = args->num_kv_heads,
                                              .head_dim = args->head_dim,
                                              .block_size = args->block_size,
                                              .inv_sqrt_d = args->inv_sqrt_d,
                                              .q_stride = args->q_stride,
                                              .v_block_stride_bytes = args->v_block_stride_bytes,
                                              .v_data_section_bytes = args->v_data_section_bytes,
                                              .sliding_window = args->sliding_window,
                                              .max_seq_len = args->max_seq_len,
                                              .workspace = DevicePtr(args->workspace),
                                              .workspace_bytes = args->workspace_bytes,
                                              .num_splits = args->num_splits};
        switch (args->bits) {
          case 2: return ops::paged_decode_attn_bf16k_turbo2v(d, k, a, Stream{stream});
          case 3: return ops::paged_decode_attn_bf16k_turbo3v(d, k, a, Stream{stream});
          case 4: return ops::paged_decode_attn_bf16k_turbo4v(d, k, a, Stream{stream});
        }
        return bad_field("sparkrt_paged_decode_attn_turbo", "bits", args->bits, "2, 3 or 4");
      });
}

// ---- MLA -------------------------------------------------------------------

sparkrt_status* sparkrt_mla_batched_gemv(sparkrt_device* device,
                                         const sparkrt_mla_batched_gemv_args* args,
                                         SparkrtStream stream) {
  return run_op(__func__, device, args, "sparkrt_mla_batched_gemv_args",
                SPARKRT_C_MLA_BATCHED_GEMV_ARGS_SIZE, &OpKernels::mla,
                [&](sparkrt::Device& d, const ops::MlaKernels& k) {
                  return ops::mla_batched_gemv(d, k,
                                               {.input = DevicePtr(args->input),
                                                .weight = DevicePtr(args->weight),
                                                .output = DevicePtr(args->output),
                                                .n_out = args->n_out,
                                                .k = args->k,
                                                .num_heads = args->num_heads,
                                                .input_stride = args->input_stride,
                                                .output_stride = args->output_stride},
                                               Stream{stream});
                });
}

sparkrt_status* sparkrt_mla_q_rope_scatter(sparkrt_device* device,
                                           const sparkrt_mla_q_rope_scatter_args* args,
                                           SparkrtStream stream) {
  return run_op(__func__, device, args, "sparkrt_mla_q_rope_scatter_args",
                SPARKRT_C_MLA_Q_ROPE_SCATTER_ARGS_SIZE, &OpKernels::mla,
                [&](sparkrt::Device& d, const ops::MlaKernels& k) {
                  return ops::mla_q_rope_scatter(
                      d, k,
                      {.q_full = DevicePtr(args->q_full),
                       .q_absorbed_buf = DevicePtr(args->q_absorbed_buf),
                       .q_rope_contiguous = DevicePtr(args->q_rope_contiguous),
                       .nq = args->nq,
                       .hd = args->hd,
                       .nope = args->nope,
                       .rope = args->rope,
                       .kv_lora = args->kv_lora,
                       .mla_cache_dim = args->mla_cache_dim},
                      Stream{stream});
                });
}

sparkrt_status* sparkrt_mla_q_rope_writeback(sparkrt_device* device,
                                             const sparkrt_mla_q_rope_writeback_args* args,
                                             SparkrtStream stream) {
  return run_op(__func__, device, args, "sparkrt_mla_q_rope_writeback_args",
                SPARKRT_C_MLA_Q_ROPE_WRITEBACK_ARGS_SIZE, &OpKernels::mla,
                [&](sparkrt::Device& d, const ops::MlaKernels& k) {
                  return ops::mla_q_rope_writeback(
                      d, k,
                      {.q_rope_direct = DevicePtr(args->q_rope_direct),
                       .q_absorbed_buf = DevicePtr(args->q_absorbed_buf),
                       .nq = args->nq,
                       .rope = args->rope,
                       .kv_lora = args->kv_lora,
                       .mla_cache_dim = args->mla_cache_dim},
                      Stream{stream});
                });
}

sparkrt_status* sparkrt_mla_cache_assemble(sparkrt_device* device,
                                           const sparkrt_mla_cache_assemble_args* args,
                                           SparkrtStream stream) {
  return run_op(__func__, device, args, "sparkrt_mla_cache_assemble_args",
                SPARKRT_C_MLA_CACHE_ASSEMBLE_ARGS_SIZE, &OpKernels::mla,
                [&](sparkrt::Device& d, const ops::MlaKernels& k) {
                  return ops::mla_cache_assemble(d, k,
                                                 {.kv_latent = DevicePtr(args->kv_latent),
                                                  .k_rope = DevicePtr(args->k_rope),
                                                  .k_cache = DevicePtr(args->k_cache),
                                                  .v_cache = DevicePtr(args->v_cache),
                                                  .kv_lora = args->kv_lora,
                                                  .rope = args->rope,
                                                  .mla_cache_dim = args->mla_cache_dim},
                                                 Stream{stream});
                });
}

sparkrt_status* sparkrt_mla_paged_decode(sparkrt_device* device,
                                         const sparkrt_mla_paged_decode_args* args,
                                         SparkrtStream stream) {
  return run_op(
      __func__, device, args, "sparkrt_mla_paged_decode_args",
      SPARKRT_C_MLA_PAGED_DECODE_ARGS_SIZE, &OpKernels::mla,
      [&](sparkrt::Device& d, const ops::MlaKernels& k) -> absl::Status {
        const Stream s{stream};
        switch (args->cache_format) {
          case SPARKRT_CACHE_FP8:
            return ops::mla_paged_decode_fp8(d, k,
                                             {.q = DevicePtr(args->q),
                                              .k_cache = DevicePtr(args->k_cache),
                                              .v_cache = DevicePtr(args->v_cache),
                                              .o = DevicePtr(args->o),
                                              .block_tables = DevicePtr(args->block_tables),
                                              .seq_lens = DevicePtr(args->seq_lens),
                                              .max_blocks_per_seq = args->max_blocks_per_seq,
                                              .num_q_heads = args->num_q_heads,
                                              .num_kv_heads = args->num_kv_heads,
                                              .q_head_dim = args->q_head_dim,
                                              .kv_cache_dim = args->kv_cache_dim,
                                              .block_size = args->block_size,
                                              .inv_sqrt_d = args->inv_sqrt_d,
                                              .k_scale = args->k_scale,
                                              .v_scale = args->v_scale,
                                              .cache_stride = args->cache_stride,
                                              .num_seqs = args->num_seqs,
                                              .sliding_window = args->sliding_window,
                                              .sinks = DevicePtr(args->sinks),
                                              .comp_pool = DevicePtr(args->comp_pool),
                                              .comp_block_count = args->comp_block_count,
                                              .workspace = DevicePtr(args->workspace),
                                              .workspace_bytes = args->workspace_bytes,
                                              .num_splits = args->num_splits},
                                             s);
          case SPARKRT_CACHE_NVFP4:
            return ops::mla_paged_decode_nvfp4(d, k,
                                               {.q = DevicePtr(args->q),
                                                .k_cache = DevicePtr(args->k_cache),
                                                .v_cache = DevicePtr(args->v_cache),
                                                .o = DevicePtr(args->o),
                                                .block_tables = DevicePtr(args->block_tables),
                                                .seq_lens = DevicePtr(args->seq_lens),
                                                .max_blocks_per_seq = args->max_blocks_per_seq,
                                                .num_q_heads = args->num_q_heads,
                                                .num_kv_heads = args->num_kv_heads,
                                                .q_head_dim = args->q_head_dim,
                                                .kv_cache_dim = args->kv_cache_dim,
                                                .block_size = args->block_size,
                                                .inv_sqrt_d = args->inv_sqrt_d,
                                                .block_stride_bytes = args->block_stride_bytes,
                                                .data_section_bytes = args->data_section_bytes,
                                                .num_seqs = args->num_seqs,
                                                .workspace = DevicePtr(args->workspace),
                                                .workspace_bytes = args->workspace_bytes,
                                                .num_splits = args->num_splits},
                                               s);
        }
        return bad_field("sparkrt_mla_paged_decode", "cache_format", args->cache_format,
                         "SPARKRT_CACHE_FP8 (2) or SPARKRT_CACHE_NVFP4 (3)");
      });
}

uint64_t sparkrt_mla_decode_workspace_bytes(uint32_t num_seqs, uint32_t num_q_heads,
                                            uint32_t kv_cache_dim, uint32_t max_splits) {
  return ops::mla_decode_workspace_bytes(num_seqs, num_q_heads, kv_cache_dim,
                                         max_splits == 0 ? ops::kMlaMaxDecodeSplits : max_splits);
}

sparkrt_status* sparkrt_mla_nvfp4_block_layout_get(uint32_t block_size, uint32_t num_kv_heads,
                                                   uint32_t kv_cache_dim,
                                                   sparkrt_mla_nvfp4_block_layout* out) {
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    const ops::MlaNvfp4BlockLayout l =
        ops::mla_nvfp4_block_layout(block_size, num_kv_heads, kv_cache_dim);
    sparkrt_mla_nvfp4_block_layout full{};
    full.data_section_bytes = l.data_section_bytes;
    full.block_stride_bytes = l.block_stride_bytes;
    return sparkrt::capi::fill_out_struct(
        fn, "sparkrt_mla_nvfp4_block_layout", out, full,
        SPARKRT_STRUCT_SIZE(sparkrt_mla_nvfp4_block_layout, data_section_bytes));
  });
}

}  // extern "C"
