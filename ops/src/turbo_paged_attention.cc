#include "sparkrt/ops/turbo_paged_attention.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_format.h"
#include "op_checks.h"
#include "sparkrt/kernel_launch.h"

namespace sparkrt::ops {
namespace {

namespace tpa = sparkrt::contract::turbo_paged_attention;  // the module's launch contract
namespace format = sparkrt::contract::turbo_kv_cache;
using detail::invalid;

struct Entries {
  const Kernel& one_pass;
  const Kernel& split;
};
Entries entries_of(const TurboPagedAttentionKernels& k, uint32_t bits) {
  if (bits == 2) return {k.paged_decode_attn_bf16k_turbo2v, k.paged_decode_attn_bf16k_turbo2v_split};
  if (bits == 3) return {k.paged_decode_attn_bf16k_turbo3v, k.paged_decode_attn_bf16k_turbo3v_split};
  return {k.paged_decode_attn_bf16k_turbo4v, k.paged_decode_attn_bf16k_turbo4v_split};
}

absl::StatusOr<DecodePlan> plan(std::string_view op, const DeviceProperties& props, uint32_t bits,
                                const PagedDecodeAttnTurboArgs& a) {
  SPARKRT_RETURN_IF_ERROR(detail::check_attention(op, a.max_blocks_per_seq, a.num_q_heads,
                                                  a.num_kv_heads, a.head_dim, a.block_size,
                                                  a.q_stride));
  if (!tpa::valid_head_dim(a.head_dim))
    return invalid(op, absl::StrFormat("head_dim %d must be 64, 128 or 256", a.head_dim));
  if (a.k_cache.addr % 16 != 0)
    return invalid(op, absl::StrFormat("k_cache %#x must be 16-byte aligned (K rows are read "
                                       "16 bytes at a time)",
                                       a.k_cache.addr));
  if (a.v_cache.addr % 4 != 0 || a.v_block_stride_bytes % 4 != 0)
    return invalid(op, absl::StrFormat("v_cache %#x and v_block_stride_bytes %d must be multiples "
                                       "of 4 (packed rows are read 32 bits at a time)",
                                       a.v_cache.addr, a.v_block_stride_bytes));
  SPARKRT_RETURN_IF_ERROR(detail::check_turbo_v_sections(op, bits, a.block_size, a.num_kv_heads,
                                                          a.head_dim, a.v_data_section_bytes,
                                                          a.v_block_stride_bytes));
  DecodePlan p;
  p.heads_per_cta =
      detail::largest_divisor_at_most(a.num_q_heads / a.num_kv_heads, tpa::kMaxHeadsPerCta);
  const uint32_t room = a.workspace.is_null() ? 0
                                              : paged_decode_workspace_splits(
                                                    a.workspace_bytes, a.num_seqs, a.num_q_heads,
                                                    a.head_dim);
  if (a.num_splits == 1) return p;
  if (a.num_splits > 1) {
    SPARKRT_RETURN_IF_ERROR(detail::check_forced_splits(
        op, a.num_splits, room,
        paged_decode_workspace_bytes(a.num_seqs, a.num_q_heads, a.head_dim, a.num_splits),
        a.workspace_bytes, a.workspace.addr));
    p.num_splits = a.num_splits;
    return p;
  }
  // Automatic: split when the one-pass CTAs leave most multiprocessors idle,
  // into parts that run in one wave (two CTAs per multiprocessor), each with
  // a useful run of tokens.
  const uint64_t ctas = uint64_t{a.num_q_heads / p.heads_per_cta} * a.num_seqs;
  const uint64_t sms = std::max<uint32_t>(props.multiprocessor_count, 1);
  if (ctas > sms || room < 2) return p;
  const uint64_t context =
      detail::decode_context(a.max_blocks_per_seq, a.block_size, a.max_seq_len, a.sliding_window);
  const uint64_t splits = std::min({2 * sms / ctas, context / kMinTokensPerSplit, uint64_t{room}});
  if (splits >= 2) p.num_splits = uint32_t(splits);
  return p;
}

absl::Status decode(Device& dev, const TurboPagedAttentionKernels& k, uint32_t bits,
                    const PagedDecodeAttnTurboArgs& a, Stream stream) {
  if (a.num_seqs == 0) return absl::OkStatus();
  const Entries e = entries_of(k, bits);
  SPARKRT_ASSIGN_OR_RETURN(const DecodePlan p, plan(e.one_pass.entry(), dev.properties(), bits, a));
  const bool split = p.num_splits > 1;
  const DecodePartials parts =
      split ? paged_decode_partials(a.workspace, a.workspace_bytes, a.num_seqs, a.num_q_heads,
                                    a.head_dim, p.num_splits)
            : DecodePartials{};
  KernelLaunch l(dev, split ? e.split : e.one_pass);
  l.dependent_launch(k.dependent_launch)
      .grid({a.num_q_heads / p.heads_per_cta, a.num_seqs, p.num_splits})
      .block({tpa::kThreads})
      .arg(a.q)
      .arg(a.k_cache)
      .arg(a.v_cache);
  if (split)
    l.arg(parts.acc).arg(parts.ml);
  else
    l.arg(a.out);
  l.arg(a.block_tables)
      .arg(a.seq_lens)
      .arg(a.max_blocks_per_seq)
      .arg(a.num_q_heads)
      .arg(a.num_kv_heads)
      .arg(a.head_dim)
      .arg(a.block_size)
      .arg(a.inv_sqrt_d)
      .arg(a.q_stride)
      .arg(a.v_block_stride_bytes)
      .arg(a.v_data_section_bytes)
      .arg(a.sliding_window);
  if (split) l.arg(p.num_splits);
  SPARKRT_RETURN_IF_ERROR(l.launch(stream));
  if (!split) return absl::OkStatus();
  return KernelLaunch(dev, k.paged_decode_attn_combine)
      .dependent_launch(k.dependent_launch)
      .grid({a.num_q_heads, a.num_seqs})
      .block({sparkrt::contract::paged_attention::kThreads})
      .arg(parts.acc)
      .arg(parts.ml)
      .arg(a.out)
      .arg(a.num_q_heads)
      .arg(a.head_dim)
      .arg(p.num_splits)
      .launch(stream);
}

}  // namespace

absl::StatusOr<TurboPagedAttentionKernels> TurboPagedAttentionKernels::resolve(Device& dev) {
  TurboPagedAttentionKernels k;
  constexpr const char* m = tpa::kModule;
  const detail::KernelEntry entries[] = {
      {m, "paged_decode_attn_bf16k_turbo2v", &k.paged_decode_attn_bf16k_turbo2v},
      {m, "paged_decode_attn_bf16k_turbo3v", &k.paged_decode_attn_bf16k_turbo3v},
      {m, "paged_decode_attn_bf16k_turbo4v", &k.paged_decode_attn_bf16k_turbo4v},
      {m, "paged_decode_attn_bf16k_turbo2v_split", &k.paged_decode_attn_bf16k_turbo2v_split},
      {m, "paged_decode_attn_bf16k_turbo3v_split", &k.paged_decode_attn_bf16k_turbo3v_split},
      {m, "paged_decode_attn_bf16k_turbo4v_split", &k.paged_decode_attn_bf16k_turbo4v_split},
      {sparkrt::contract::paged_attention::kModule, "paged_decode_attn_combine",
       &k.paged_decode_attn_combine},
  };
  SPARKRT_RETURN_IF_ERROR(detail::resolve_all(dev, entries));
  k.dependent_launch = detail::may_launch_dependent(dev, entries);
  return k;
}

absl::StatusOr<DecodePlan> plan_paged_decode_turbo(const Device& dev, uint32_t bits,
                                                   const PagedDecodeAttnTurboArgs& a) {
  if (!format::valid_bits(bits))
    return invalid("plan_paged_decode_turbo", absl::StrFormat("bits %d must be 2, 3 or 4", bits));
  return plan("plan_paged_decode_turbo", dev.properties(), bits, a);
}

absl::Status paged_decode_attn_bf16k_turbo2v(Device& dev, const TurboPagedAttentionKernels& k,
                                             const PagedDecodeAttnTurboArgs& a, Stream stream) {
  return decode(dev, k, 2, a, stream);
}
absl::Status paged_decode_attn_bf16k_turbo3v(Device& dev, const TurboPagedAttentionKernels& k,
                                             const PagedDecodeAttnTurboArgs& a, Stream stream) {
  return decode(dev, k, 3, a, stream);
}
absl::Status paged_decode_attn_bf16k_turbo4v(Device& dev, const TurboPagedAttentionKernels& k,
                                             const PagedDecodeAttnTurboArgs& a, Stream stream) {
  return decode(dev, k, 4, a, stream);
}

}  // namespace sparkrt::ops
