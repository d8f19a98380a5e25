#include "sparkrt/ops/paged_attention.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/strings/str_format.h"
#include "op_checks.h"
#include "sparkrt/kernel_launch.h"

namespace sparkrt::ops {
namespace {

namespace pa = sparkrt::contract::paged_attention;  // the module's launch contract
using detail::check_attention;
using detail::check_cache_stride;
using detail::check_scale;
using detail::invalid;

}  // namespace

absl::StatusOr<PagedAttentionKernels> PagedAttentionKernels::resolve(Device& dev) {
  PagedAttentionKernels k;
  constexpr const char* m = pa::kModule;
  const detail::KernelEntry entries[] = {
      {m, "paged_decode_attn_bf16", &k.paged_decode_attn_bf16},
      {m, "paged_decode_attn_fp8", &k.paged_decode_attn_fp8},
      {m, "paged_decode_attn_bf16_split", &k.paged_decode_attn_bf16_split},
      {m, "paged_decode_attn_fp8_split", &k.paged_decode_attn_fp8_split},
      {m, "paged_decode_attn_combine", &k.paged_decode_attn_combine},
      {m, "paged_decode_attn_bf16_split_merge", &k.paged_decode_attn_bf16_split_merge},
      {m, "paged_decode_attn_fp8_split_merge", &k.paged_decode_attn_fp8_split_merge},
  };
  SPARKRT_RETURN_IF_ERROR(detail::resolve_all(dev, entries));
  k.dependent_launch = detail::may_launch_dependent(dev, entries);
  return k;
}

namespace {

// The geometry-relevant fields of either decode op.
struct DecodeShape {
  uint32_t max_blocks_per_seq;
  uint32_t num_seqs;
  uint32_t num_q_heads;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint32_t block_size;
  uint32_t q_stride;
  uint32_t sliding_window;
  uint32_t max_seq_len;
  DevicePtr workspace;
  uint64_t workspace_bytes;
  uint32_t num_splits;
  DevicePtr k_cache;
  DevicePtr v_cache;
  uint32_t elem_bytes;          // of a cache element
  uint64_t block_stride_bytes;  // between cache blocks
};

uint64_t block_stride_bytes(const PagedDecodeAttnArgs& a) {
  return uint64_t{a.block_size} * a.num_kv_heads * a.head_dim * 2;
}
uint64_t block_stride_bytes(const PagedDecodeAttnFp8Args& a) { return a.cache_stride; }

template <typename A>
DecodeShape shape_of(const A& a) {
  return {a.max_blocks_per_seq,
          a.num_seqs,
          a.num_q_heads,
          a.num_kv_heads,
          a.head_dim,
          a.block_size,
          a.q_stride,
          a.sliding_window,
          a.max_seq_len,
          a.workspace,
          a.workspace_bytes,
          a.num_splits,
          a.k_cache,
          a.v_cache,
          std::is_same_v<A, PagedDecodeAttnArgs> ? 2u : 1u,
          block_stride_bytes(a)};
}

// Dynamic shared memory for the decode entries' staging
// (pa::staging_bytes: each warp's stages of K and V rows), or 0 when
// that does not leave room for two CTAs per multiprocessor, and the kernel
// loads rows into registers. A multiprocessor's shared memory is the
// per-block opt-in limit + 1 KB on sm_80..sm_121, and each CTA reserves 1 KB
// of it besides its static shared memory (within the contract's budget).
constexpr uint32_t kCtaReservedSmem = 1024;
// The split rule (plan_decode): from how many K/V bytes a split reads two
// CTAs per multiprocessor beat one, per cache dtype (fp8 CTAs do the same
// work per token on half the bytes), before the one-launch merge's share.
constexpr uint64_t kDecodeLongSplitBytesBf16 = 2 * 1024 * 1024;
constexpr uint64_t kDecodeLongSplitBytesFp8 = 256 * 1024;

uint32_t decode_shared_mem(const DeviceProperties& props, const DecodeShape& s) {
  const uint32_t row = s.head_dim * s.elem_bytes;
  if (row % 16 != 0 || s.block_stride_bytes % 16 != 0) return 0;  // 16-byte copies
  const uint32_t bytes = pa::staging_bytes(s.head_dim, s.elem_bytes);
  const uint32_t per_cta = (props.max_shared_memory_per_block_optin + kCtaReservedSmem) / 2;
  return pa::kStaticSmemBudget + kCtaReservedSmem + bytes <= per_cta ? bytes : 0;
}

constexpr uint64_t kWorkspaceAlign = 256;

uint64_t align_up(uint64_t bytes) { return round_up(bytes, kWorkspaceAlign); }

uint64_t partials_acc_bytes(uint32_t num_seqs, uint32_t num_q_heads, uint32_t head_dim,
                            uint32_t splits) {
  return align_up(uint64_t{num_seqs} * num_q_heads * splits * head_dim * sizeof(float));
}

// The partial outputs, then (aligned) the partial (max, sum) pairs.
uint64_t partials_bytes(uint32_t num_seqs, uint32_t num_q_heads, uint32_t head_dim,
                        uint32_t splits) {
  return partials_acc_bytes(num_seqs, num_q_heads, head_dim, splits) +
         uint64_t{num_seqs} * num_q_heads * splits * 2 * sizeof(float);
}

// Whether a workspace of `bytes` holds `splits` splits: the counters of every
// (sequence, query head) in its counter region, the partials after it.
bool workspace_holds(uint64_t bytes, uint32_t num_seqs, uint32_t num_q_heads, uint32_t head_dim,
                     uint32_t splits) {
  const uint64_t counters = paged_decode_counter_bytes(bytes);
  return uint64_t{num_seqs} * num_q_heads * sizeof(uint32_t) <= counters &&
         partials_bytes(num_seqs, num_q_heads, head_dim, splits) <= bytes - counters;
}

absl::StatusOr<DecodePlan> plan_decode(std::string_view op, const DeviceProperties& props,
                                       const DecodeShape& s) {
  SPARKRT_RETURN_IF_ERROR(check_attention(op, s.max_blocks_per_seq, s.num_q_heads,
                                              s.num_kv_heads, s.head_dim, s.block_size,
                                              s.q_stride));
  if (s.head_dim % pa::kHeadDimAlign != 0 || s.head_dim > pa::kMaxHeadDim) {
    return invalid(op, absl::StrFormat("head_dim %d must be a multiple of 8 and at most %d",
                                       s.head_dim, pa::kMaxHeadDim));
  }
  // Each lane reads 8 elements of a row at once (16 bytes of bf16).
  if (s.k_cache.addr % 16 != 0 || s.v_cache.addr % 16 != 0) {
    return invalid(op, absl::StrFormat("k_cache %#x and v_cache %#x must be 16-byte aligned",
                                       s.k_cache.addr, s.v_cache.addr));
  }
  DecodePlan plan;
  plan.shared_mem = decode_shared_mem(props, s);
  // The most query heads of one KV head a CTA can serve (the rows of the
  // kernel's tensor-core tiles): each K/V row is then read once for all of
  // them, and once per CTA of its group when the group is larger.
  const uint32_t group = s.num_q_heads / s.num_kv_heads;
  plan.heads_per_cta = detail::largest_divisor_at_most(group, pa::kMaxHeadsPerCta);

  // How many splits the workspace has room for.
  const uint32_t room =
      s.workspace.is_null()
          ? 0
          : paged_decode_workspace_splits(s.workspace_bytes, s.num_seqs, s.num_q_heads, s.head_dim);
  if (s.num_splits == 1) return plan;
  if (s.num_splits > 1) {
    if (s.num_splits > kMaxDecodeSplits) {
      return invalid(op, absl::StrFormat("num_splits %d is above the most the op supports (%d)",
                                         s.num_splits, kMaxDecodeSplits));
    }
    SPARKRT_RETURN_IF_ERROR(detail::check_forced_splits(
        op, s.num_splits, room,
        paged_decode_workspace_bytes(s.num_seqs, s.num_q_heads, s.head_dim, s.num_splits),
        s.workspace_bytes, s.workspace.addr));
    plan.num_splits = s.num_splits;
    return plan;
  }

  // Automatic: split only when the one-pass CTAs leave at least half of the
  // device's resident CTA slots (two per multiprocessor) empty, into parts
  // that run in one wave, each with a useful run of tokens.
  const uint64_t ctas = uint64_t{s.num_q_heads / plan.heads_per_cta} * s.num_seqs;
  const uint64_t sms = std::max<uint32_t>(props.multiprocessor_count, 1);
  if (ctas > sms || room < 2) return plan;
  const uint64_t context =
      detail::decode_context(s.max_blocks_per_seq, s.block_size, s.max_seq_len, s.sliding_window);
  // CTAs per multiprocessor. One: fewer, longer splits finish sooner, as a
  // split's fixed costs (its block-table and partial round trips, its share
  // of the merge) outweigh what a second CTA adds in flight. Two where a split
  // of that count would read the dtype's long-split bytes or more (twice as
  // many when it takes the one-launch merge, whose cost grows with the
  // splits): bandwidth bounds such splits. Launches without staging (rows
  // loaded into registers, few bytes in flight) take two below the merge, as
  // one was not measured there. Measured on the H200 (docs/benchmark-notes.md,
  // "Split count").
  const uint64_t token_bytes = 2ull * s.head_dim * s.elem_bytes;  // K and V rows
  const uint64_t one_per_sm = sms / ctas;
  const bool merges = one_per_sm >= kMinMergeSplits;
  const uint64_t split_bytes = context / one_per_sm * token_bytes;
  uint64_t long_split = s.elem_bytes == 1 ? kDecodeLongSplitBytesFp8 : kDecodeLongSplitBytesBf16;
  if (merges) long_split *= 2;
  const uint64_t per_sm =
      split_bytes >= long_split || (plan.shared_mem == 0 && !merges) ? 2 : 1;
  const uint64_t splits =
      std::min({per_sm * sms / ctas, context / kMinTokensPerSplit, uint64_t{room}});
  if (splits >= 2) plan.num_splits = static_cast<uint32_t>(splits);
  return plan;
}

}  // namespace

uint32_t paged_decode_workspace_splits(uint64_t workspace_bytes, uint32_t num_seqs,
                                       uint32_t num_q_heads, uint32_t head_dim) {
  for (uint32_t n = kMaxDecodeSplits; n >= 2; --n)
    if (workspace_holds(workspace_bytes, num_seqs, num_q_heads, head_dim, n)) return n;
  return 0;
}

DecodePartials paged_decode_partials(DevicePtr workspace, uint64_t workspace_bytes,
                                     uint32_t num_seqs, uint32_t num_q_heads, uint32_t head_dim,
                                     uint32_t splits) {
  const DevicePtr acc = workspace + paged_decode_counter_bytes(workspace_bytes);
  return {acc, acc + partials_acc_bytes(num_seqs, num_q_heads, head_dim, splits)};
}

uint64_t paged_decode_counter_bytes(uint64_t workspace_bytes) {
  return workspace_bytes / 16 / kWorkspaceAlign * kWorkspaceAlign;
}

uint64_t paged_decode_workspace_bytes(uint32_t num_seqs, uint32_t num_q_heads, uint32_t head_dim,
                                      uint32_t max_splits) {
  // The smallest W that holds them: with c = paged_decode_counter_bytes(W)
  // (W / 16 rounded down to 256), c must hold a counter per (sequence, query
  // head) and W - c the partials. For a given c, W lies in [16c, 16c + 4095]
  // and needs W >= partials + c; the smallest c that allows both gives the
  // smallest W.
  const uint64_t partials = partials_bytes(num_seqs, num_q_heads, head_dim, max_splits);
  uint64_t c = align_up(uint64_t{num_seqs} * num_q_heads * sizeof(uint32_t));
  if (partials > 4095) c = std::max(c, align_up((partials - 4095 + 14) / 15));
  return std::max(16 * c, partials + c);
}

absl::StatusOr<DecodeWorkspace> DecodeWorkspace::create(Device& dev, uint32_t num_seqs,
                                                         uint32_t num_q_heads, uint32_t head_dim,
                                                         uint32_t max_splits) {
  const uint64_t bytes = paged_decode_workspace_bytes(num_seqs, num_q_heads, head_dim, max_splits);
  auto ptr = dev.alloc(bytes);
  if (!ptr.ok()) return ptr.status();
  DecodeWorkspace ws(&dev, *ptr, bytes);
  if (absl::Status s = dev.memset(*ptr, 0, bytes); !s.ok()) return s;  // ws frees it
  return ws;
}

DecodeWorkspace::DecodeWorkspace(DecodeWorkspace&& other) noexcept
    : dev_(std::exchange(other.dev_, nullptr)),
      ptr_(std::exchange(other.ptr_, DevicePtr{})),
      bytes_(std::exchange(other.bytes_, 0)) {}

DecodeWorkspace& DecodeWorkspace::operator=(DecodeWorkspace&& other) noexcept {
  if (this != &other) {
    release();
    dev_ = std::exchange(other.dev_, nullptr);
    ptr_ = std::exchange(other.ptr_, DevicePtr{});
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DecodeWorkspace::~DecodeWorkspace() { release(); }

void DecodeWorkspace::release() {
  // A destructor cannot report: a failed free (the device already closed) is dropped.
  if (dev_ != nullptr && !ptr_.is_null()) (void)dev_->free(ptr_);
  dev_ = nullptr;
  ptr_ = DevicePtr{};
  bytes_ = 0;
}

absl::StatusOr<DecodePlan> plan_paged_decode(const Device& dev, const PagedDecodeAttnArgs& a) {
  return plan_decode("paged_decode_attn_bf16", dev.properties(), shape_of(a));
}

absl::StatusOr<DecodePlan> plan_paged_decode(const Device& dev, const PagedDecodeAttnFp8Args& a) {
  return plan_decode("paged_decode_attn_fp8", dev.properties(), shape_of(a));
}

namespace {

// The decode entries of one cache dtype.
struct DecodeEntries {
  const Kernel& one_pass;
  const Kernel& split;
  const Kernel& split_merge;
};

// The arguments after the inputs' leading (q, k_cache, v_cache, outputs...)
// that only one dtype has, in the kernel's order.
KernelLaunch& dtype_args(KernelLaunch& l, const PagedDecodeAttnArgs& a) {
  return l.arg(a.q_stride).arg(a.sliding_window);
}
KernelLaunch& dtype_args(KernelLaunch& l, const PagedDecodeAttnFp8Args& a) {
  return l.arg(a.k_scale).arg(a.v_scale).arg(a.q_stride).arg(a.cache_stride).arg(a.sliding_window);
}

// One decode launch: q, k_cache, v_cache, then `outputs` (out and/or the
// workspace pieces), the shape, the dtype's arguments and, for the split
// entries, num_splits.
template <typename Args>
absl::Status launch_decode(Device& dev, const Kernel& kernel, bool dependent, const Args& a,
                           const DecodePlan& plan, std::initializer_list<DevicePtr> outputs,
                           Stream stream) {
  KernelLaunch l(dev, kernel);
  l.dependent_launch(dependent)
      .grid({a.num_q_heads / plan.heads_per_cta, a.num_seqs, plan.num_splits})
      .block({pa::kThreads})
      .shared_mem(plan.shared_mem)
      .arg(a.q)
      .arg(a.k_cache)
      .arg(a.v_cache);
  for (DevicePtr p : outputs) l.arg(p);
  l.arg(a.block_tables)
      .arg(a.seq_lens)
      .arg(a.max_blocks_per_seq)
      .arg(a.num_q_heads)
      .arg(a.num_kv_heads)
      .arg(a.head_dim)
      .arg(a.block_size)
      .arg(a.inv_sqrt_d);
  dtype_args(l, a);
  if (plan.num_splits > 1) l.arg(plan.num_splits);
  return l.launch(stream);
}

// The decode op for either dtype once its own checks passed: one pass,
// split-merge, or split then combine, as `plan` says.
template <typename Args>
absl::Status decode(Device& dev, const PagedAttentionKernels& k, const DecodeEntries& e,
                    const Args& a, const DecodePlan& plan, Stream stream) {
  const bool dep = k.dependent_launch;
  if (plan.num_splits == 1) return launch_decode(dev, e.one_pass, dep, a, plan, {a.out}, stream);
  const DevicePtr counters = a.workspace;
  const auto [part_acc, part_ml] = paged_decode_partials(
      a.workspace, a.workspace_bytes, a.num_seqs, a.num_q_heads, a.head_dim, plan.num_splits);
  if (plan.num_splits >= kMinMergeSplits) {
    return launch_decode(dev, e.split_merge, dep, a, plan, {a.out, part_acc, part_ml, counters},
                         stream);
  }
  SPARKRT_RETURN_IF_ERROR(launch_decode(dev, e.split, dep, a, plan, {part_acc, part_ml}, stream));
  return KernelLaunch(dev, k.paged_decode_attn_combine)
      .dependent_launch(dep)
      .grid({a.num_q_heads, a.num_seqs})
      .block({pa::kThreads})
      .arg(part_acc)
      .arg(part_ml)
      .arg(a.out)
      .arg(a.num_q_heads)
      .arg(a.head_dim)
      .arg(plan.num_splits)
      .launch(stream);
}

}  // namespace

absl::Status paged_decode_attn_bf16(Device& dev, const PagedAttentionKernels& k,
                                    const PagedDecodeAttnArgs& a, Stream stream) {
  if (a.num_seqs == 0) return absl::OkStatus();
  auto plan = plan_decode("paged_decode_attn_bf16", dev.properties(), shape_of(a));
  if (!plan.ok()) return plan.status();
  return decode(dev, k,
                {k.paged_decode_attn_bf16, k.paged_decode_attn_bf16_split,
                 k.paged_decode_attn_bf16_split_merge},
                a, *plan, stream);
}

absl::Status paged_decode_attn_fp8(Device& dev, const PagedAttentionKernels& k,
                                   const PagedDecodeAttnFp8Args& a, Stream stream) {
  if (a.num_seqs == 0) return absl::OkStatus();
  constexpr std::string_view op = "paged_decode_attn_fp8";
  auto plan = plan_decode(op, dev.properties(), shape_of(a));
  if (!plan.ok()) return plan.status();
  SPARKRT_RETURN_IF_ERROR(
      check_cache_stride(op, a.cache_stride, a.block_size, a.num_kv_heads, a.head_dim));
  if (a.cache_stride % 8 != 0) {
    return invalid(op, absl::StrFormat("cache_stride %d must be a multiple of 8 (rows are read "
                                       "8 elements at a time)",
                                       a.cache_stride));
  }
  SPARKRT_RETURN_IF_ERROR(check_scale(op, "k_scale", a.k_scale));
  SPARKRT_RETURN_IF_ERROR(check_scale(op, "v_scale", a.v_scale));
  return decode(dev, k,
                {k.paged_decode_attn_fp8, k.paged_decode_attn_fp8_split,
                 k.paged_decode_attn_fp8_split_merge},
                a, *plan, stream);
}

}  // namespace sparkrt::ops
