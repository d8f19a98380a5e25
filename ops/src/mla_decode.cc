#include "sparkrt/ops/mla_decode.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"
#include "op_checks.h"
#include "sparkrt/kernel_launch.h"

namespace sparkrt::ops {
namespace {

using detail::check_nonzero;
using detail::invalid;

namespace md = contract::mla_decode;

constexpr uint64_t kScratchAlign = 256;

uint64_t aligned_bytes(uint64_t n) { return round_up(n, kScratchAlign); }
uint64_t aligned_floats(size_t n) { return aligned_bytes(uint64_t{n} * sizeof(float)); }

// part_acc, then 256-byte aligned part_ml (the contract's partials).
uint64_t part_acc_bytes(uint32_t heads, uint32_t dv, uint32_t splits) {
  return aligned_bytes(uint64_t{heads} * splits * dv * sizeof(float));
}

absl::Status check_length(std::string_view op, const char* name, size_t got, size_t want,
                          const char* shape) {
  if (got == want) return absl::OkStatus();
  return invalid(op, absl::StrFormat("%s has %d values, the configuration needs %d (%s)", name, got,
                                     want, shape));
}

// FailedPrecondition for one more row than a full device KV holds.
absl::Status check_not_full(std::string_view op, const MlaDeviceKv& kv) {
  if (!kv.full()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s: the device KV is full (%d of %d tokens); allocate a larger MlaDeviceKv or truncate "
      "this one",
      op, kv.seq_len(), kv.capacity()));
}

// The inputs of one token against the configuration.
absl::Status check_inputs(std::string_view op, const MlaConfig& cfg, const MlaTokenInputs& in) {
  SPARKRT_RETURN_IF_ERROR(cfg.validate());
  const char* qk_shape = "heads * qk_head_dim";
  const char* v_shape = "heads * v_head_dim";
  SPARKRT_RETURN_IF_ERROR(check_length(op, "q", in.q.size(), cfg.qk_row(), qk_shape));
  SPARKRT_RETURN_IF_ERROR(check_length(op, "k", in.k.size(), cfg.qk_row(), qk_shape));
  SPARKRT_RETURN_IF_ERROR(check_length(op, "v", in.v.size(), cfg.v_row(), v_shape));
  if (cfg.mla_use_output_gate || !in.g.empty())
    SPARKRT_RETURN_IF_ERROR(check_length(op, "g", in.g.size(), cfg.v_row(), v_shape));
  return absl::OkStatus();
}

K3MlaRopeArgs rope_args(const MlaConfig& cfg, const MlaTokenInputs& in, DevicePtr q, DevicePtr k) {
  return {.q = q,
          .k = k,
          .heads = cfg.heads,
          .nope_dim = cfg.qk_nope_head_dim,
          .rope_dim = cfg.qk_rope_head_dim,
          .pos = in.pos,
          .theta = in.theta,
          .use_nope = cfg.mla_use_nope};
}

K3MlaSdpaGateArgs sdpa_args(const MlaConfig& cfg, DevicePtr q, DevicePtr k, DevicePtr v,
                            DevicePtr g, DevicePtr out, size_t seq_len) {
  return {.q = q,
          .k = k,
          .v = v,
          .g = cfg.mla_use_output_gate ? g : DevicePtr{},
          .out = out,
          .seq_len = static_cast<uint32_t>(seq_len),
          .heads = cfg.heads,
          .dq = cfg.qk_head_dim(),
          .dv = cfg.v_head_dim,
          .use_gate = cfg.mla_use_output_gate};
}

// Device memory of one host-KV step, freed when the step ends (after its
// stream is drained, so no queued copy or kernel still uses it).
class StepMemory {
 public:
  StepMemory(Device& dev, Stream stream) : dev_(dev), stream_(stream) {}
  ~StepMemory() {
    dev_.synchronize(stream_).IgnoreError();
    for (DevicePtr p : held_) dev_.free(p).IgnoreError();
  }
  StepMemory(const StepMemory&) = delete;
  StepMemory& operator=(const StepMemory&) = delete;

  absl::StatusOr<DevicePtr> floats(size_t n) {
    auto p = dev_.alloc(n * sizeof(float));
    if (p.ok()) held_.push_back(*p);
    return p;
  }

 private:
  Device& dev_;
  Stream stream_;
  std::vector<DevicePtr> held_;
};

absl::Status upload(Device& dev, std::span<const float> host, DevicePtr dst, Stream stream) {
  if (host.empty()) return absl::OkStatus();
  return dev.copy_h2d_async(host.data(), dst, host.size_bytes(), stream);
}

// Waits for the stream, then downloads `n` floats (one blocking copy).
absl::StatusOr<std::vector<float>> download(Device& dev, DevicePtr src, size_t n, Stream stream) {
  SPARKRT_RETURN_IF_ERROR(dev.synchronize(stream));
  std::vector<float> host(n);
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(src, host.data(), n * sizeof(float)));
  return host;
}

}  // namespace

// ── MlaConfig ───────────────────────────────────────────────────────────────

MlaConfig MlaConfig::small_test() {
  return {.heads = 4,
          .qk_nope_head_dim = 32,
          .qk_rope_head_dim = 16,
          .v_head_dim = 32,
          .mla_use_nope = true,
          .mla_use_output_gate = true};
}

absl::Status MlaConfig::validate() const {
  constexpr std::string_view op = "MlaConfig";
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "heads", heads));
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "qk_head_dim", qk_head_dim()));
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "v_head_dim", v_head_dim));
  if (!mla_use_nope && qk_rope_head_dim % 2 != 0) {
    return invalid(op, absl::StrFormat("qk_rope_head_dim %d must be even (rotate-half RoPE "
                                       "pairs dim i with i + %d/2), or turn mla_use_nope on",
                                       qk_rope_head_dim, qk_rope_head_dim));
  }
  return absl::OkStatus();
}

// ── kernels and launches ────────────────────────────────────────────────────

absl::StatusOr<MlaDecodeKernels> MlaDecodeKernels::resolve(Device& dev) {
  MlaDecodeKernels k;
  const detail::KernelEntry entries[] = {
      {md::kModule, md::kRopeEntry, &k.rope},
      {md::kModule, md::kSdpaEntry, &k.sdpa},
  };
  SPARKRT_RETURN_IF_ERROR(detail::resolve_all(dev, entries));
  return k;
}

absl::StatusOr<K3MlaSplitKernels> K3MlaSplitKernels::resolve(Device& dev) {
  K3MlaSplitKernels k;
  const detail::KernelEntry entries[] = {
      {md::kModule, md::kSplitEntry, &k.split},
      {md::kModule, md::kCombineEntry, &k.combine},
  };
  SPARKRT_RETURN_IF_ERROR(detail::resolve_all(dev, entries));
  return k;
}

absl::Status k3_mla_maybe_rope(Device& dev, const MlaDecodeKernels& k, const K3MlaRopeArgs& a,
                               Stream stream) {
  if (a.heads == 0) return absl::OkStatus();
  if (!a.use_nope && a.rope_dim % 2 != 0)
    return invalid(contract::mla_decode::kRopeEntry,
                   absl::StrFormat("rope_dim %d must be even", a.rope_dim));
  return KernelLaunch(dev, k.rope)
      .grid({div_ceil(a.heads, contract::mla_decode::kRopeThreads)})
      .block({contract::mla_decode::kRopeThreads})
      .arg(a.q)
      .arg(a.k)
      .arg(a.heads)
      .arg(a.nope_dim)
      .arg(a.rope_dim)
      .arg(a.pos)
      .arg(a.theta)
      .arg(uint32_t{a.use_nope})
      .launch(stream);
}

namespace {

// What both attention forms refuse.
absl::Status check_sdpa(std::string_view op, const K3MlaSdpaGateArgs& a) {
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "dq", a.dq));
  if (a.use_gate && a.g.is_null()) return invalid(op, "the output gate is on but g is null");
  return absl::OkStatus();
}

}  // namespace

absl::Status k3_mla_sdpa_gate(Device& dev, const MlaDecodeKernels& k, const K3MlaSdpaGateArgs& a,
                              Stream stream) {
  if (a.heads == 0 || a.dv == 0) return absl::OkStatus();
  SPARKRT_RETURN_IF_ERROR(check_sdpa(md::kSdpaEntry, a));
  return KernelLaunch(dev, k.sdpa)
      .grid({a.heads})
      .block({contract::mla_decode::kSdpaThreads})
      .arg(a.q)
      .arg(a.k)
      .arg(a.v)
      .arg(a.g)
      .arg(a.out)
      .arg(a.seq_len)
      .arg(a.heads)
      .arg(a.dq)
      .arg(a.dv)
      .arg(uint32_t{a.use_gate})
      .launch(stream);
}

size_t k3_mla_split_workspace_bytes(uint32_t heads, uint32_t dv, uint32_t max_splits) {
  return part_acc_bytes(heads, dv, max_splits) + uint64_t{heads} * max_splits * 2 * sizeof(float);
}

absl::Status k3_mla_sdpa_gate_split(Device& dev, const K3MlaSplitKernels& k,
                                    const K3MlaSdpaGateArgs& a, const K3MlaSplitWorkspace& ws,
                                    uint32_t num_splits, Stream stream) {
  constexpr std::string_view op = "k3_mla_sdpa_gate_split";
  if (a.heads == 0 || a.dv == 0) return absl::OkStatus();
  SPARKRT_RETURN_IF_ERROR(check_sdpa(op, a));
  if (a.dq > md::kSplitMaxDq) {
    return invalid(op, absl::StrFormat("dq %d is above the %d the split kernel stages; use "
                                       "k3_mla_sdpa_gate",
                                       a.dq, md::kSplitMaxDq));
  }
  if (ws.ptr.is_null()) return invalid(op, "the workspace is null");
  if (num_splits == 0 || num_splits > std::min(ws.max_splits, md::kMaxSplits)) {
    return invalid(op, absl::StrFormat("num_splits %d must be in [1, %d] (the workspace holds %d, "
                                       "the merge takes at most %d)",
                                       num_splits, std::min(ws.max_splits, md::kMaxSplits),
                                       ws.max_splits, md::kMaxSplits));
  }
  // The partials are laid out for num_splits (the workspace holds more).
  const DevicePtr part_acc = ws.ptr;
  const DevicePtr part_ml = ws.ptr + part_acc_bytes(a.heads, a.dv, num_splits);
  SPARKRT_RETURN_IF_ERROR(KernelLaunch(dev, k.split)
                              .grid({a.heads, num_splits})
                              .block({md::kSplitThreads})
                              .arg(a.q)
                              .arg(a.k)
                              .arg(a.v)
                              .arg(part_acc)
                              .arg(part_ml)
                              .arg(a.seq_len)
                              .arg(a.heads)
                              .arg(a.dq)
                              .arg(a.dv)
                              .arg(num_splits)
                              .launch(stream));
  return KernelLaunch(dev, k.combine)
      .grid({a.heads})
      .block({md::kCombineThreads})
      .arg(part_acc)
      .arg(part_ml)
      .arg(a.g)
      .arg(a.out)
      .arg(a.heads)
      .arg(a.dv)
      .arg(num_splits)
      .arg(uint32_t{a.use_gate})
      .launch(stream);
}

uint32_t k3_mla_plan_splits(const DeviceProperties& props, uint32_t heads, uint32_t dq,
                            uint32_t seq_len) {
  if (heads == 0 || seq_len <= md::kSdpaThreads || dq > md::kSplitMaxDq) return 0;
  // Two whole waves of two CTAs per multiprocessor (a split kernel CTA
  // holds ~31K registers): fewer, longer splits lose to the last wave's
  // tail, more cost merge work (H200, 64 heads: 8 splits beat 17 and 33 at
  // 8K and 32K tokens).
  const uint64_t slots = 4 * uint64_t{std::max<uint32_t>(props.multiprocessor_count, 1)};
  const uint64_t by_device = slots / heads;
  const uint64_t by_tokens = (uint64_t{seq_len} + kMinSplitTokens - 1) / kMinSplitTokens;
  return static_cast<uint32_t>(
      std::clamp<uint64_t>(std::min(by_device, by_tokens), 1, md::kMaxSplits));
}

namespace {

// The device-resident step's attention: split-KV where `kv` has the form
// and the plan splits, else one pass.
absl::Status attend(Device& dev, const MlaDecodeKernels& k, const MlaDeviceKv& kv,
                    const K3MlaSdpaGateArgs& a, Stream stream) {
  const K3MlaSplitWorkspace ws = kv.workspace();
  const uint32_t splits =
      std::min(k3_mla_plan_splits(dev.properties(), a.heads, a.dq, a.seq_len), ws.max_splits);
  if (splits == 0) return k3_mla_sdpa_gate(dev, k, a, stream);
  return k3_mla_sdpa_gate_split(dev, kv.split_kernels(), a, ws, splits, stream);
}

}  // namespace

// ── MlaHostKv ───────────────────────────────────────────────────────────────

absl::Status MlaHostKv::append(std::span<const float> k, std::span<const float> v) {
  constexpr std::string_view op = "MlaHostKv::append";
  SPARKRT_RETURN_IF_ERROR(check_length(op, "k", k.size(), k_row_, "one K row"));
  SPARKRT_RETURN_IF_ERROR(check_length(op, "v", v.size(), v_row_, "one V row"));
  k_.insert(k_.end(), k.begin(), k.end());
  v_.insert(v_.end(), v.begin(), v.end());
  ++seq_len_;
  return absl::OkStatus();
}

// ── MlaDeviceKv ─────────────────────────────────────────────────────────────

absl::StatusOr<MlaDeviceKv> MlaDeviceKv::alloc(Device& dev, size_t capacity,
                                               const MlaConfig& cfg) {
  SPARKRT_RETURN_IF_ERROR(cfg.validate());
  if (cfg.qk_head_dim() > md::kSplitMaxDq) return alloc(dev, capacity, cfg.qk_row(), cfg.v_row());
  SPARKRT_ASSIGN_OR_RETURN(auto kernels, K3MlaSplitKernels::resolve(dev));
  SPARKRT_ASSIGN_OR_RETURN(
      auto kv, alloc_rows(dev, capacity, cfg.qk_row(), cfg.v_row(),
                          k3_mla_split_workspace_bytes(cfg.heads, cfg.v_head_dim)));
  kv.split_kernels_ = kernels;
  kv.workspace_ = {kv.scratch_out() + aligned_floats(kv.v_row_), md::kMaxSplits};
  return kv;
}

absl::StatusOr<MlaDeviceKv> MlaDeviceKv::alloc(Device& dev, size_t capacity, size_t k_row,
                                               size_t v_row) {
  return alloc_rows(dev, capacity, k_row, v_row, 0);
}

absl::StatusOr<MlaDeviceKv> MlaDeviceKv::alloc_rows(Device& dev, size_t capacity, size_t k_row,
                                                    size_t v_row, size_t workspace_bytes) {
  constexpr std::string_view op = "MlaDeviceKv::alloc";
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "capacity", capacity));
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "k_row", k_row));
  SPARKRT_RETURN_IF_ERROR(check_nonzero(op, "v_row", v_row));
  MlaDeviceKv kv;
  kv.dev_ = &dev;
  kv.capacity_ = capacity;
  kv.k_row_ = k_row;
  kv.v_row_ = v_row;
  // A failure below frees what was allocated: kv's destructor runs.
  SPARKRT_ASSIGN_OR_RETURN(auto k, dev.alloc(capacity * k_row * sizeof(float)));
  kv.k_ = k;
  SPARKRT_ASSIGN_OR_RETURN(auto v, dev.alloc(capacity * v_row * sizeof(float)));
  kv.v_ = v;
  // Scratch: q and g back to back (one upload), k, out, the workspace.
  const uint64_t scratch_bytes = aligned_floats(k_row + v_row) + aligned_floats(k_row) +
                                 aligned_floats(v_row) + workspace_bytes;
  SPARKRT_ASSIGN_OR_RETURN(auto scratch, dev.alloc(scratch_bytes));
  kv.scratch_ = scratch;
  SPARKRT_ASSIGN_OR_RETURN(void* staging,
                               dev.alloc_host((2 * k_row + 3 * v_row) * sizeof(float)));
  kv.staging_ = static_cast<float*>(staging);
  return kv;
}

MlaDeviceKv::~MlaDeviceKv() { release(); }

MlaDeviceKv::MlaDeviceKv(MlaDeviceKv&& other) noexcept { *this = std::move(other); }

MlaDeviceKv& MlaDeviceKv::operator=(MlaDeviceKv&& other) noexcept {
  if (this != &other) {
    release();
    dev_ = std::exchange(other.dev_, nullptr);
    k_ = std::exchange(other.k_, DevicePtr{});
    v_ = std::exchange(other.v_, DevicePtr{});
    scratch_ = std::exchange(other.scratch_, DevicePtr{});
    staging_ = std::exchange(other.staging_, nullptr);
    split_kernels_ = std::exchange(other.split_kernels_, K3MlaSplitKernels{});
    workspace_ = std::exchange(other.workspace_, K3MlaSplitWorkspace{});
    capacity_ = std::exchange(other.capacity_, 0);
    k_row_ = other.k_row_;
    v_row_ = other.v_row_;
    seq_len_ = std::exchange(other.seq_len_, 0);
  }
  return *this;
}

void MlaDeviceKv::release() {
  if (dev_ == nullptr) return;
  for (DevicePtr p : {k_, v_, scratch_})
    if (!p.is_null()) dev_->free(p).IgnoreError();
  if (staging_ != nullptr) dev_->free_host(staging_).IgnoreError();
  dev_ = nullptr;
}

DevicePtr MlaDeviceKv::scratch_k() const { return scratch_ + aligned_floats(k_row_ + v_row_); }
DevicePtr MlaDeviceKv::scratch_out() const { return scratch_k() + aligned_floats(k_row_); }

absl::Status MlaDeviceKv::append(DevicePtr k_src, std::span<const float> v, Stream stream) {
  constexpr std::string_view op = "MlaDeviceKv::append";
  SPARKRT_RETURN_IF_ERROR(check_not_full(op, *this));
  SPARKRT_RETURN_IF_ERROR(check_length(op, "v", v.size(), v_row_, "one V row"));
  SPARKRT_RETURN_IF_ERROR(
      dev_->copy_d2d_async(k_src, k_row_ptr(seq_len_), k_row_ * sizeof(float), stream));
  SPARKRT_RETURN_IF_ERROR(upload(*dev_, v, v_row_ptr(seq_len_), stream));
  ++seq_len_;
  return absl::OkStatus();
}

absl::Status MlaDeviceKv::truncate(size_t seq_len) {
  if (seq_len > seq_len_) {
    return invalid("MlaDeviceKv::truncate",
                   absl::StrFormat("%d is beyond the %d live rows", seq_len, seq_len_));
  }
  seq_len_ = seq_len;
  return absl::OkStatus();
}

// ── token steps ─────────────────────────────────────────────────────────────

absl::StatusOr<std::vector<float>> mla_decode_token(Device& dev,
                                                       const MlaDecodeKernels& kernels,
                                                       const MlaConfig& cfg,
                                                       const MlaTokenInputs& in, MlaHostKv& kv,
                                                       Stream stream) {
  constexpr std::string_view op = "mla_decode_token";
  SPARKRT_RETURN_IF_ERROR(check_inputs(op, cfg, in));
  if (kv.k_row() != cfg.qk_row() || kv.v_row() != cfg.v_row()) {
    return invalid(op, absl::StrFormat("the host KV rows (%d, %d values) do not match the "
                                       "configuration (%d, %d)",
                                       kv.k_row(), kv.v_row(), cfg.qk_row(), cfg.v_row()));
  }
  const size_t seq_len = kv.seq_len() + 1;
  StepMemory mem(dev, stream);
  SPARKRT_ASSIGN_OR_RETURN(auto dq, mem.floats(cfg.qk_row()));
  // The cache with room for the new row last, which the rope rotates in place.
  SPARKRT_ASSIGN_OR_RETURN(auto dk, mem.floats(seq_len * cfg.qk_row()));
  const DevicePtr dk_new = dk + kv.k().size_bytes();
  SPARKRT_RETURN_IF_ERROR(upload(dev, in.q, dq, stream));
  SPARKRT_RETURN_IF_ERROR(upload(dev, in.k, dk_new, stream));
  SPARKRT_RETURN_IF_ERROR(
      k3_mla_maybe_rope(dev, kernels, rope_args(cfg, in, dq, dk_new), stream));
  SPARKRT_ASSIGN_OR_RETURN(auto k_rotated, download(dev, dk_new, cfg.qk_row(), stream));

  SPARKRT_ASSIGN_OR_RETURN(auto dv, mem.floats(seq_len * cfg.v_row()));
  SPARKRT_ASSIGN_OR_RETURN(auto dout, mem.floats(cfg.v_row()));
  DevicePtr dg{};
  if (cfg.mla_use_output_gate) {
    SPARKRT_ASSIGN_OR_RETURN(auto g, mem.floats(cfg.v_row()));
    dg = g;
    SPARKRT_RETURN_IF_ERROR(upload(dev, in.g, dg, stream));
  }
  SPARKRT_RETURN_IF_ERROR(upload(dev, kv.k(), dk, stream));
  SPARKRT_RETURN_IF_ERROR(upload(dev, kv.v(), dv, stream));
  SPARKRT_RETURN_IF_ERROR(upload(dev, in.v, dv + kv.v().size_bytes(), stream));
  SPARKRT_RETURN_IF_ERROR(
      k3_mla_sdpa_gate(dev, kernels, sdpa_args(cfg, dq, dk, dv, dg, dout, seq_len), stream));
  SPARKRT_ASSIGN_OR_RETURN(auto out, download(dev, dout, cfg.v_row(), stream));
  // Only a complete step changes the cache.
  SPARKRT_RETURN_IF_ERROR(kv.append(k_rotated, in.v));
  return out;
}

absl::StatusOr<std::vector<float>> mla_decode_token_on_device(Device& dev,
                                                                 const MlaDecodeKernels& kernels,
                                                                 const MlaConfig& cfg,
                                                                 const MlaTokenInputs& in,
                                                                 MlaDeviceKv& kv, Stream stream) {
  constexpr std::string_view op = "mla_decode_token_on_device";
  SPARKRT_RETURN_IF_ERROR(check_not_full(op, kv));
  SPARKRT_RETURN_IF_ERROR(check_inputs(op, cfg, in));
  if (kv.k_row() != cfg.qk_row() || kv.v_row() != cfg.v_row()) {
    return invalid(op, absl::StrFormat("the device KV rows (%d, %d values) do not match the "
                                       "configuration (%d, %d)",
                                       kv.k_row(), kv.v_row(), cfg.qk_row(), cfg.v_row()));
  }
  // The row this token fills; it becomes live only when the step succeeds.
  const size_t row = kv.seq_len();
  const size_t kr = cfg.qk_row(), vr = cfg.v_row();
  const bool gate = cfg.mla_use_output_gate;
  // Page-locked staging, laid out as the copies read it: q and g back to
  // back (as in the scratch), k, v, out.
  float* const st_q = kv.staging_;
  float* const st_k = st_q + kr + vr;
  float* const st_v = st_k + kr;
  float* const st_out = st_v + vr;
  auto step = [&]() -> absl::StatusOr<std::vector<float>> {
    // Each copy is queued as soon as its staging is filled, so the DMA of
    // one overlaps the memcpy of the next.
    std::memcpy(st_q, in.q.data(), kr * sizeof(float));
    if (gate) std::memcpy(st_q + kr, in.g.data(), vr * sizeof(float));
    SPARKRT_RETURN_IF_ERROR(
        dev.copy_h2d_async(st_q, kv.scratch_q(), (kr + (gate ? vr : 0)) * sizeof(float), stream));
    const DevicePtr k_new = kv.k_row_ptr(row);
    std::memcpy(st_k, in.k.data(), kr * sizeof(float));
    SPARKRT_RETURN_IF_ERROR(dev.copy_h2d_async(st_k, k_new, kr * sizeof(float), stream));
    SPARKRT_RETURN_IF_ERROR(
        k3_mla_maybe_rope(dev, kernels, rope_args(cfg, in, kv.scratch_q(), k_new), stream));
    std::memcpy(st_v, in.v.data(), vr * sizeof(float));
    SPARKRT_RETURN_IF_ERROR(
        dev.copy_h2d_async(st_v, kv.v_row_ptr(row), vr * sizeof(float), stream));
    SPARKRT_RETURN_IF_ERROR(attend(dev, kernels, kv,
                                   sdpa_args(cfg, kv.scratch_q(), kv.k(), kv.v(), kv.scratch_g(),
                                             kv.scratch_out(), row + 1),
                                   stream));
    SPARKRT_RETURN_IF_ERROR(dev.synchronize(stream));
    SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(kv.scratch_out(), st_out, vr * sizeof(float)));
    return std::vector<float>(st_out, st_out + vr);
  };
  auto out = step();
  if (out.ok()) {
    kv.seq_len_ = row + 1;
  } else {
    // Queued copies read the staging: drain before it is written again.
    dev.synchronize(stream).IgnoreError();
  }
  return out;
}

}  // namespace sparkrt::ops
