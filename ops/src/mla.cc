#include "sparkrt/ops/mla.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "absl/strings/str_format.h"
#include "op_checks.h"
#include "sparkrt/kernel_launch.h"

namespace sparkrt::ops {
namespace {

using detail::check_at_most;
using detail::check_nonzero;
using detail::check_scale;
using detail::invalid;


// The rope part [kv_lora, kv_lora + rope) must stay inside each head's
// mla_cache_dim row.
absl::Status check_rope_slot(std::string_view op, uint32_t rope, uint32_t kv_lora,
                             uint32_t mla_cache_dim) {
  if (uint64_t{kv_lora} + rope <= mla_cache_dim) return absl::OkStatus();
  return invalid(op, absl::StrFormat("kv_lora %d + rope %d exceeds mla_cache_dim %d: the rope "
                                     "part must fit in each head's row",
                                     kv_lora, rope, mla_cache_dim));
}

// What both decode entries require of their shapes.
absl::Status check_decode(std::string_view op, uint32_t max_blocks_per_seq, uint32_t num_q_heads,
                          uint32_t num_kv_heads, uint32_t q_head_dim, uint32_t kv_cache_dim,
                          uint32_t block_size) {
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "max_blocks_per_seq", max_blocks_per_seq));
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "block_size", block_size));
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "num_kv_heads", num_kv_heads));
  if (num_q_heads == 0 || num_q_heads % num_kv_heads != 0) {
    return invalid(op, absl::StrFormat("num_q_heads %d must be a positive multiple of "
                                       "num_kv_heads %d",
                                       num_q_heads, num_kv_heads));
  }
  if (kv_cache_dim <= contract::mla::kRopeDim || kv_cache_dim > contract::mla::kMaxDim) {
    return invalid(op, absl::StrFormat("kv_cache_dim %d must be in (%d, %d]: a row ends with "
                                       "the %d rope values and V is the rest",
                                       kv_cache_dim, contract::mla::kRopeDim,
                                       contract::mla::kMaxDim, contract::mla::kRopeDim));
  }
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "q_head_dim", q_head_dim));
  return check_at_most(op, "q_head_dim", q_head_dim, "kv_cache_dim", kv_cache_dim);
}

// The arguments every decode entry starts with, q to inv_sqrt_d, in their
// order; `outputs` are the entry's output pointers (o, or the split partials).
template <typename Args>
KernelLaunch& decode_head(KernelLaunch& launch, const Args& a,
                          std::initializer_list<DevicePtr> outputs) {
  launch.arg(a.q).arg(a.k_cache).arg(a.v_cache);
  for (DevicePtr p : outputs) launch.arg(p);
  return launch.arg(a.block_tables)
      .arg(a.seq_lens)
      .arg(a.max_blocks_per_seq)
      .arg(a.num_q_heads)
      .arg(a.num_kv_heads)
      .arg(a.q_head_dim)
      .arg(a.kv_cache_dim)
      .arg(a.block_size)
      .arg(a.inv_sqrt_d);
}

}  // namespace

absl::StatusOr<MlaKernels> MlaKernels::resolve(Device& dev) {
  MlaKernels k;
  const detail::KernelEntry entries[] = {
      {contract::mla::kModule, "mla_batched_gemv", &k.mla_batched_gemv},
      {contract::mla::kModule, "mla_q_rope_scatter", &k.mla_q_rope_scatter},
      {contract::mla::kModule, "mla_q_rope_writeback", &k.mla_q_rope_writeback},
      {contract::mla::kModule, "mla_cache_assemble", &k.mla_cache_assemble},
      {contract::mla::kModule, "mla_paged_decode_nvfp4", &k.mla_paged_decode_nvfp4},
      {contract::mla::kModule, "mla_paged_decode_nvfp4_split", &k.mla_paged_decode_nvfp4_split},
      {contract::mla::kModule, "mla_paged_decode_fp8", &k.mla_paged_decode_fp8},
      {contract::mla::kModule, "mla_paged_decode_fp8_split", &k.mla_paged_decode_fp8_split},
      {contract::mla::kModule, "mla_decode_combine", &k.mla_decode_combine},
  };
  SPARKRT_RETURN_IF_ERROR(detail::resolve_all(dev, entries));
  return k;
}

absl::Status mla_batched_gemv(Device& dev, const MlaKernels& k, const MlaBatchedGemvArgs& a,
                              Stream stream) {
  if (a.n_out == 0 || a.num_heads == 0) return absl::OkStatus();
  constexpr std::string_view op = "mla_batched_gemv";
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "k", a.k));
  SPARKRT_RETURN_IF_ERROR(check_at_most(op, "k", a.k, "input_stride", a.input_stride));
  SPARKRT_RETURN_IF_ERROR(
      check_at_most(op, "n_out", a.n_out, "output_stride", a.output_stride));
  return KernelLaunch(dev, k.mla_batched_gemv)
      .grid({div_ceil(a.n_out, contract::mla::kGemvOutputsPerCta), a.num_heads})
      .block({contract::mla::kThreads})
      .arg(a.input)
      .arg(a.weight)
      .arg(a.output)
      .arg(a.n_out)
      .arg(a.k)
      .arg(a.input_stride)
      .arg(a.output_stride)
      .launch(stream);
}

absl::Status mla_q_rope_scatter(Device& dev, const MlaKernels& k, const MlaQRopeScatterArgs& a,
                                Stream stream) {
  if (a.nq == 0 || a.rope == 0) return absl::OkStatus();
  constexpr std::string_view op = "mla_q_rope_scatter";
  if (uint64_t{a.nope} + a.rope > a.hd) {
    return invalid(op, absl::StrFormat("nope %d + rope %d exceeds hd %d, the q_full head width",
                                       a.nope, a.rope, a.hd));
  }
  SPARKRT_RETURN_IF_ERROR(check_rope_slot(op, a.rope, a.kv_lora, a.mla_cache_dim));
  return KernelLaunch(dev, k.mla_q_rope_scatter)
      .grid({1})
      .block({contract::mla::kThreads})
      .arg(a.q_full)
      .arg(a.q_absorbed_buf)
      .arg(a.q_rope_contiguous)
      .arg(a.nq)
      .arg(a.hd)
      .arg(a.nope)
      .arg(a.rope)
      .arg(a.kv_lora)
      .arg(a.mla_cache_dim)
      .launch(stream);
}

absl::Status mla_q_rope_writeback(Device& dev, const MlaKernels& k, const MlaQRopeWritebackArgs& a,
                                  Stream stream) {
  if (a.nq == 0 || a.rope == 0) return absl::OkStatus();
  SPARKRT_RETURN_IF_ERROR(
      check_rope_slot("mla_q_rope_writeback", a.rope, a.kv_lora, a.mla_cache_dim));
  return KernelLaunch(dev, k.mla_q_rope_writeback)
      .grid({1})
      .block({contract::mla::kThreads})
      .arg(a.q_rope_direct)
      .arg(a.q_absorbed_buf)
      .arg(a.nq)
      .arg(a.rope)
      .arg(a.kv_lora)
      .arg(a.mla_cache_dim)
      .launch(stream);
}

absl::Status mla_cache_assemble(Device& dev, const MlaKernels& k, const MlaCacheAssembleArgs& a,
                                Stream stream) {
  if (a.mla_cache_dim == 0) return absl::OkStatus();
  constexpr std::string_view op = "mla_cache_assemble";
  SPARKRT_RETURN_IF_ERROR(check_rope_slot(op, a.rope, a.kv_lora, a.mla_cache_dim));
  const uint32_t threads = std::max(a.mla_cache_dim, contract::mla::kThreads);
  SPARKRT_RETURN_IF_ERROR(check_at_most(op, "mla_cache_dim", threads,
                                            "the device's threads per block",
                                            dev.properties().max_threads_per_block));
  return KernelLaunch(dev, k.mla_cache_assemble)
      .grid({1})
      .block({threads})
      .arg(a.kv_latent)
      .arg(a.k_rope)
      .arg(a.k_cache)
      .arg(a.v_cache)
      .arg(a.kv_lora)
      .arg(a.rope)
      .arg(a.mla_cache_dim)
      .launch(stream);
}

MlaNvfp4BlockLayout mla_nvfp4_block_layout(uint32_t block_size, uint32_t num_kv_heads,
                                           uint32_t kv_cache_dim) {
  const uint64_t values = uint64_t{block_size} * num_kv_heads * kv_cache_dim;
  MlaNvfp4BlockLayout layout;
  // 16-byte aligned sections, so either can be read with vector loads.
  layout.data_section_bytes = round_up<uint64_t>((values + 1) / 2, 16);
  layout.block_stride_bytes =
      round_up<uint64_t>(layout.data_section_bytes + (values + 15) / 16, 16);
  return layout;
}

namespace {

// The tiled decode's shared memory is the contract's layout
// (contract::mla::tiled_fixed_bytes, tiled_stage_bytes, tiled_nvfp4_stage_bytes).
// A fifth stage fits an H200 but is slower (docs/benchmark-notes.md, "Score loop and stages").
constexpr uint32_t kMlaTiledMaxStages = 4;
struct TiledLayout {
  uint32_t teams, stages;
};
uint32_t tiled_layout_bytes(bool separate_v, TiledLayout l) {
  return contract::mla::tiled_fixed_bytes(l.teams) +
         l.stages * contract::mla::tiled_stage_bytes(separate_v);
}
// The smallest layout: one team, two stages.
constexpr TiledLayout kSmallestTiledLayout = {1, 2};

uint64_t partials_acc_bytes(uint32_t num_seqs, uint32_t num_q_heads, uint32_t dv,
                            uint32_t splits) {
  return round_up<uint64_t>(uint64_t{num_seqs} * num_q_heads * splits * dv * sizeof(float),
                            256);
}

// The split partials in a workspace (part_acc, then part_ml) and their
// merge into o by mla_decode_combine.
struct SplitPartials {
  DevicePtr acc, ml;
};
SplitPartials split_partials(DevicePtr workspace, uint32_t num_seqs, uint32_t num_q_heads,
                             uint32_t dv, uint32_t splits) {
  return {workspace, workspace + partials_acc_bytes(num_seqs, num_q_heads, dv, splits)};
}
absl::Status combine_partials(Device& dev, const MlaKernels& k, const SplitPartials& parts,
                              DevicePtr o, DevicePtr sinks, uint32_t num_q_heads,
                              uint32_t num_seqs, uint32_t dv, uint32_t splits, Stream stream) {
  return KernelLaunch(dev, k.mla_decode_combine)
      .grid({num_q_heads, num_seqs})
      .block({contract::mla::kThreads})
      .arg(parts.acc)
      .arg(parts.ml)
      .arg(o)
      .arg(sinks)
      .arg(num_q_heads)
      .arg(dv)
      .arg(splits)
      .launch(stream);
}

absl::Status check_fp8_decode(const MlaPagedDecodeFp8Args& a) {
  constexpr std::string_view op = "mla_paged_decode_fp8";
  SPARKRT_RETURN_IF_ERROR(check_decode(op, a.max_blocks_per_seq, a.num_q_heads, a.num_kv_heads,
                                           a.q_head_dim, a.kv_cache_dim, a.block_size));
  SPARKRT_RETURN_IF_ERROR(check_scale(op, "k_scale", a.k_scale));
  SPARKRT_RETURN_IF_ERROR(check_scale(op, "v_scale", a.v_scale));
  const uint64_t block = uint64_t{a.block_size} * a.num_kv_heads * a.kv_cache_dim;
  if (a.cache_stride < block) {
    return invalid(
        op, absl::StrFormat("cache_stride %d is smaller than one cache block "
                            "(block_size %d * num_kv_heads %d * kv_cache_dim %d = %d "
                            "bytes)",
                            a.cache_stride, a.block_size, a.num_kv_heads, a.kv_cache_dim, block));
  }
  if (a.comp_pool.is_null() && a.comp_block_count != 0) {
    return invalid(op, absl::StrFormat("comp_block_count %d needs a comp_pool; pass 0 when "
                                       "there is no compressed pool",
                                       a.comp_block_count));
  }
  return absl::OkStatus();
}

// Whether the tiled kernel takes the shape and alignment of these arguments
// (see mla.h), leaving shared memory aside.
bool tiled_shape(const MlaPagedDecodeFp8Args& a) {
  const bool aligned = a.k_cache.addr % 16 == 0 && a.v_cache.addr % 16 == 0 &&
                       a.o.addr % 16 == 0 && a.comp_pool.addr % 16 == 0 &&
                       a.cache_stride % 16 == 0;
  return aligned && a.kv_cache_dim == contract::mla::kCacheDim && a.q_head_dim % 16 == 0;
}
// NVFP4: a token's data row (288 bytes) is 16-byte aligned when the blocks
// are; its 36 scale bytes need only 4-byte alignment (the kernel copies them
// a word at a time).
bool tiled_shape(const MlaPagedDecodeNvfp4Args& a) {
  const bool aligned = a.k_cache.addr % 16 == 0 && a.v_cache.addr % 16 == 0 &&
                       a.o.addr % 16 == 0 && a.block_stride_bytes % 16 == 0 &&
                       a.data_section_bytes % 4 == 0;
  return aligned && a.kv_cache_dim == contract::mla::kCacheDim && a.q_head_dim % 16 == 0;
}

// The shared memory of the tiled kernel with stages of `stage` bytes on this
// device, beside `static_bytes` of the entry's static shared memory; 0: no
// layout fits. Two teams of consumer warps overlap one tile's softmax with
// another's products; every stage beyond the two the teams read keeps more
// copies in flight. On 99 KB parts one team with two stages is what fits
// for fp8.
uint32_t tiled_shared_bytes(const DeviceProperties& props, uint32_t stage,
                            uint32_t static_bytes = 0) {
  const uint32_t optin = props.max_shared_memory_per_block_optin;
  const uint32_t budget = optin > static_bytes ? optin - static_bytes : 0;
  for (uint32_t teams : {2u, 1u}) {
    const uint32_t fixed = contract::mla::tiled_fixed_bytes(teams);
    if (budget < fixed + 2 * stage) continue;
    const uint32_t stages = std::min(kMlaTiledMaxStages, (budget - fixed) / stage);
    return fixed + stages * stage;
  }
  return 0;
}
uint32_t tiled_shared_bytes(const DeviceProperties& props, const MlaPagedDecodeFp8Args& a) {
  if (!tiled_shape(a)) return 0;
  return tiled_shared_bytes(props, contract::mla::tiled_stage_bytes(a.v_cache != a.k_cache));
}
// The NVFP4 one-pass entry's static scratch counts against the same limit.
uint32_t tiled_shared_bytes(const DeviceProperties& props, const MlaPagedDecodeNvfp4Args& a) {
  if (!tiled_shape(a)) return 0;
  return tiled_shared_bytes(props, contract::mla::tiled_nvfp4_stage_bytes(a.v_cache != a.k_cache),
                            contract::mla::kPerHeadSharedBytes);
}

// The split count of a tiled plan (1: none): forced (num_splits > 1, which
// the workspace must hold), or the op's choice where a workspace is given.
// `tokens` bounds the tokens a sequence attends.
absl::StatusOr<uint32_t> tiled_splits(std::string_view op, const DeviceProperties& props,
                                      const Dim3& grid, uint32_t num_seqs, uint32_t num_q_heads,
                                      uint32_t kv_cache_dim, DevicePtr workspace,
                                      uint64_t workspace_bytes, uint32_t num_splits,
                                      uint64_t tokens) {
  // How many splits the workspace has room for.
  const bool aligned_ws = workspace.addr % 16 == 0;
  uint32_t room = 0;
  if (!workspace.is_null() && aligned_ws) {
    for (uint32_t n = kMlaMaxDecodeSplits; n >= 2 && room == 0; --n)
      if (mla_decode_workspace_bytes(num_seqs, num_q_heads, kv_cache_dim, n) <= workspace_bytes)
        room = n;
  }
  if (num_splits > 1) {
    if (num_splits > kMlaMaxDecodeSplits) {
      return invalid(op, absl::StrFormat("num_splits %d is above the most the op supports (%d)",
                                         num_splits, kMlaMaxDecodeSplits));
    }
    if (num_splits > room) {
      return invalid(
          op, absl::StrFormat("num_splits %d needs a 16-byte aligned workspace of %d bytes; got "
                              "%d bytes at %#x (size it with mla_decode_workspace_bytes)",
                              num_splits,
                              mla_decode_workspace_bytes(num_seqs, num_q_heads, kv_cache_dim,
                                                         num_splits),
                              workspace_bytes, workspace.addr));
    }
    return num_splits;
  }
  if (num_splits == 1 || room == 0) return 1u;
  // Split only what fills at most half of the device (one tiled CTA per
  // multiprocessor: its shared memory), into as many splits as keep it
  // within one wave, each at least kMlaMinTilesPerSplit tiles of the longest
  // sequence the block table (or the window) allows.
  const uint64_t ctas = uint64_t{grid.x} * num_seqs;
  const uint64_t slots = props.multiprocessor_count;
  if (ctas * 2 > slots) return 1u;
  const uint64_t by_length = tokens / (uint64_t{contract::mla::kTile} * kMlaMinTilesPerSplit);
  const uint64_t n = std::min<uint64_t>({slots / ctas, by_length, room});
  return n >= 2 ? static_cast<uint32_t>(n) : 1u;
}

}  // namespace

uint64_t mla_decode_workspace_bytes(uint32_t num_seqs, uint32_t num_q_heads, uint32_t kv_cache_dim,
                                    uint32_t max_splits) {
  const uint32_t dv =
      kv_cache_dim > contract::mla::kRopeDim ? kv_cache_dim - contract::mla::kRopeDim : 0;
  return partials_acc_bytes(num_seqs, num_q_heads, dv, max_splits) +
         uint64_t{num_seqs} * num_q_heads * max_splits * 2 * sizeof(float);
}

absl::StatusOr<MlaDecodePlan> plan_mla_paged_decode_fp8(const Device& dev,
                                                         const MlaPagedDecodeFp8Args& a) {
  constexpr std::string_view op = "mla_paged_decode_fp8";
  SPARKRT_RETURN_IF_ERROR(check_fp8_decode(a));
  const DeviceProperties& props = dev.properties();
  MlaDecodePlan plan;
  const uint32_t shared_mem = tiled_shared_bytes(props, a);
  if (shared_mem == 0) {
    if (a.num_splits > 1 && tiled_shape(a)) {
      const bool separate_v = a.v_cache != a.k_cache;
      return invalid(
          op,
          absl::StrFormat("num_splits %d needs the tiled kernel, which needs %d bytes of shared "
                          "memory per block for%s; device '%s' allows %d. Pass num_splits 0 or 1%s",
                          a.num_splits, tiled_layout_bytes(separate_v, kSmallestTiledLayout),
                          separate_v ? " a separate V pool" : " its two stages", props.name,
                          props.max_shared_memory_per_block_optin,
                          separate_v ? ", or keep V in the K pool (v_cache = k_cache)" : ""));
    }
    if (a.num_splits > 1) {
      return invalid(op, absl::StrFormat(
                             "num_splits %d needs the tiled kernel: kv_cache_dim %d (got %d), "
                             "q_head_dim a multiple of 16 (got %d), cache_stride a multiple of 16 "
                             "and 16-byte aligned k_cache, v_cache, o and comp_pool",
                             a.num_splits, contract::mla::kCacheDim, a.kv_cache_dim, a.q_head_dim));
    }
    plan.grid = {a.num_q_heads, a.num_seqs};
    plan.block = {contract::mla::kThreads};
    plan.shared_mem = contract::mla::kPerHeadSharedBytes;
    return plan;
  }
  plan.tiled = true;
  plan.block = {contract::mla::kTiledThreads};
  plan.shared_mem = shared_mem;
  const uint32_t group = a.num_q_heads / a.num_kv_heads;
  plan.grid = {a.num_kv_heads * div_ceil(group, contract::mla::kTiledRows), a.num_seqs};
  uint64_t tokens = uint64_t{a.max_blocks_per_seq} * a.block_size;
  if (a.sliding_window > 0) tokens = std::min<uint64_t>(tokens, a.sliding_window);
  if (!a.comp_pool.is_null()) tokens += a.comp_block_count;
  SPARKRT_ASSIGN_OR_RETURN(plan.num_splits,
                           tiled_splits(op, props, plan.grid, a.num_seqs, a.num_q_heads,
                                        a.kv_cache_dim, a.workspace, a.workspace_bytes,
                                        a.num_splits, tokens));
  plan.grid.z = plan.num_splits;
  return plan;
}

absl::Status mla_paged_decode_fp8(Device& dev, const MlaKernels& k, const MlaPagedDecodeFp8Args& a,
                                  Stream stream) {
  if (a.num_seqs == 0) return absl::OkStatus();
  auto plan = plan_mla_paged_decode_fp8(dev, a);
  if (!plan.ok()) return plan.status();
  if (plan->num_splits == 1) {
    KernelLaunch launch(dev, k.mla_paged_decode_fp8);
    return decode_head(launch.grid(plan->grid).block(plan->block).shared_mem(plan->shared_mem), a,
                       {a.o})
        .arg(a.k_scale)
        .arg(a.v_scale)
        .arg(a.cache_stride)
        .arg(a.sliding_window)
        .arg(a.sinks)
        .arg(a.comp_pool)
        .arg(a.comp_block_count)
        .launch(stream);
  }
  const uint32_t dv = a.kv_cache_dim - contract::mla::kRopeDim;
  const SplitPartials parts =
      split_partials(a.workspace, a.num_seqs, a.num_q_heads, dv, plan->num_splits);
  KernelLaunch split(dev, k.mla_paged_decode_fp8_split);
  SPARKRT_RETURN_IF_ERROR(
      decode_head(split.grid(plan->grid).block(plan->block).shared_mem(plan->shared_mem), a,
                  {parts.acc, parts.ml})
          .arg(a.k_scale)
          .arg(a.v_scale)
          .arg(a.cache_stride)
          .arg(a.sliding_window)
          .arg(a.comp_pool)
          .arg(a.comp_block_count)
          .launch(stream));
  return combine_partials(dev, k, parts, a.o, a.sinks, a.num_q_heads, a.num_seqs, dv,
                          plan->num_splits, stream);
}

namespace {

absl::Status check_nvfp4_decode(const MlaPagedDecodeNvfp4Args& a) {
  constexpr std::string_view op = "mla_paged_decode_nvfp4";
  SPARKRT_RETURN_IF_ERROR(check_decode(op, a.max_blocks_per_seq, a.num_q_heads, a.num_kv_heads,
                                           a.q_head_dim, a.kv_cache_dim, a.block_size));
  if (a.kv_cache_dim % 16 != 0) {
    return invalid(op, absl::StrFormat("kv_cache_dim %d must be a multiple of 16 (one E4M3 "
                                       "scale per 16 values)",
                                       a.kv_cache_dim));
  }
  const uint64_t values = uint64_t{a.block_size} * a.num_kv_heads * a.kv_cache_dim;
  if (a.data_section_bytes < values / 2 ||
      a.block_stride_bytes < a.data_section_bytes + values / 16) {
    return invalid(
        op, absl::StrFormat("a block of %d values needs data_section_bytes >= %d (got %d) and "
                            "block_stride_bytes >= data_section_bytes + %d scale bytes (got %d); "
                            "mla_nvfp4_block_layout() gives a packed layout",
                            values, values / 2, a.data_section_bytes, values / 16,
                            a.block_stride_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MlaDecodePlan> plan_mla_paged_decode_nvfp4(const Device& dev,
                                                           const MlaPagedDecodeNvfp4Args& a) {
  constexpr std::string_view op = "mla_paged_decode_nvfp4";
  SPARKRT_RETURN_IF_ERROR(check_nvfp4_decode(a));
  const DeviceProperties& props = dev.properties();
  MlaDecodePlan plan;
  const uint32_t shared_mem = tiled_shared_bytes(props, a);
  if (shared_mem == 0) {
    if (a.num_splits > 1 && tiled_shape(a)) {
      const bool separate_v = a.v_cache != a.k_cache;
      const uint32_t smallest =
          contract::mla::tiled_fixed_bytes(kSmallestTiledLayout.teams) +
          kSmallestTiledLayout.stages * contract::mla::tiled_nvfp4_stage_bytes(separate_v) +
          contract::mla::kPerHeadSharedBytes;
      return invalid(
          op,
          absl::StrFormat("num_splits %d needs the tiled kernel, which needs %d bytes of shared "
                          "memory per block for%s (its static scratch included); device '%s' "
                          "allows %d. Pass num_splits 0 or 1%s",
                          a.num_splits, smallest,
                          separate_v ? " a separate V pool" : " its two stages", props.name,
                          props.max_shared_memory_per_block_optin,
                          separate_v ? ", or keep V in the K pool (v_cache = k_cache)" : ""));
    }
    if (a.num_splits > 1) {
      return invalid(op, absl::StrFormat(
                             "num_splits %d needs the tiled kernel: kv_cache_dim %d (got %d), "
                             "q_head_dim a multiple of 16 (got %d), block_stride_bytes a "
                             "multiple of 16, data_section_bytes a multiple of 4 and 16-byte "
                             "aligned k_cache, v_cache and o",
                             a.num_splits, contract::mla::kCacheDim, a.kv_cache_dim,
                             a.q_head_dim));
    }
    // The per-head scratch is the entry's static shared memory.
    plan.grid = {a.num_q_heads, a.num_seqs};
    plan.block = {contract::mla::kThreads};
    return plan;
  }
  plan.tiled = true;
  plan.block = {contract::mla::kTiledThreads};
  plan.shared_mem = shared_mem;
  const uint32_t group = a.num_q_heads / a.num_kv_heads;
  plan.grid = {a.num_kv_heads * div_ceil(group, contract::mla::kTiledRows), a.num_seqs};
  SPARKRT_ASSIGN_OR_RETURN(
      plan.num_splits,
      tiled_splits(op, props, plan.grid, a.num_seqs, a.num_q_heads, a.kv_cache_dim, a.workspace,
                   a.workspace_bytes, a.num_splits,
                   uint64_t{a.max_blocks_per_seq} * a.block_size));
  plan.grid.z = plan.num_splits;
  return plan;
}

absl::Status mla_paged_decode_nvfp4(Device& dev, const MlaKernels& k,
                                    const MlaPagedDecodeNvfp4Args& a, Stream stream) {
  if (a.num_seqs == 0) return absl::OkStatus();
  auto plan = plan_mla_paged_decode_nvfp4(dev, a);
  if (!plan.ok()) return plan.status();
  if (plan->num_splits == 1) {
    KernelLaunch launch(dev, k.mla_paged_decode_nvfp4);
    return decode_head(launch.grid(plan->grid).block(plan->block).shared_mem(plan->shared_mem), a,
                       {a.o})
        .arg(a.block_stride_bytes)
        .arg(a.data_section_bytes)
        .launch(stream);
  }
  const uint32_t dv = a.kv_cache_dim - contract::mla::kRopeDim;
  const SplitPartials parts =
      split_partials(a.workspace, a.num_seqs, a.num_q_heads, dv, plan->num_splits);
  KernelLaunch split(dev, k.mla_paged_decode_nvfp4_split);
  SPARKRT_RETURN_IF_ERROR(
      decode_head(split.grid(plan->grid).block(plan->block).shared_mem(plan->shared_mem), a,
                  {parts.acc, parts.ml})
          .arg(a.block_stride_bytes)
          .arg(a.data_section_bytes)
          .launch(stream));
  return combine_partials(dev, k, parts, a.o, DevicePtr{}, a.num_q_heads, a.num_seqs, dv,
                          plan->num_splits, stream);
}

}  // namespace sparkrt::ops
