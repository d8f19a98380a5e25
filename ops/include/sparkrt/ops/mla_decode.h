// Kimi K3 gated-NoPE MLA decode: the host side of the `mla_decode` kernel
// module (contract in sparkrt/contract/mla_decode.h, docs/kernels.md "Module
// mla_decode", which defines the model's attention).
//
// One decode token rotates the rope part of q and the new k
// (k3_mla_maybe_rope_f32, or leaves them alone: NoPE), then attends over
// every cached K/V row and multiplies the result by sigmoid(g) when the
// output gate is on. The attention has two forms with the same result: the
// one-pass k3_mla_sdpa_gate_f32 (one warp per head), and split-KV
// (k3_mla_sdpa_split_f32 over heads x splits CTAs, then
// k3_mla_sdpa_combine_f32), which the token steps choose from the shape and
// the device (k3_mla_plan_splits) where the device KV carries the split
// form's kernels and workspace. Everything is f32 and per head:
// q, k [heads][qk_head_dim], v, g, out [heads][v_head_dim].
//
// Two token steps:
//   mla_decode_token            the KV cache lives on the host
//                                  (MlaHostKv): the rotated k comes back,
//                                  and the whole cache is uploaded per token.
//   mla_decode_token_on_device  the KV cache lives on the device
//                                  (MlaDeviceKv): the new row is written
//                                  there, and only the output comes back.
//
//   auto kernels = sparkrt::ops::MlaDecodeKernels::resolve(dev);  // once
//   auto kv = sparkrt::ops::MlaDeviceKv::alloc(dev, 4096, cfg);
//   auto out = sparkrt::ops::mla_decode_token_on_device(
//       dev, *kernels, cfg, {.q = q, .k = k, .v = v, .g = g, .pos = pos}, *kv, stream);
//
// Both steps return once the output is on the host.
#ifndef SPARKRT_OPS_MLA_DECODE_H_
#define SPARKRT_OPS_MLA_DECODE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/contract/mla_decode.h"
#include "sparkrt/device.h"
#include "sparkrt/types.h"

namespace sparkrt::ops {

// The attention shape of one Kimi K3 MLA layer.
struct MlaConfig {
  uint32_t heads = 0;
  uint32_t qk_nope_head_dim = 0;
  uint32_t qk_rope_head_dim = 0;  // even unless mla_use_nope
  uint32_t v_head_dim = 0;
  bool mla_use_nope = false;         // true: no RoPE at all (NoPE)
  bool mla_use_output_gate = false;  // true: out *= sigmoid(g)

  uint32_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  size_t qk_row() const { return size_t{heads} * qk_head_dim(); }  // q, k values per token
  size_t v_row() const { return size_t{heads} * v_head_dim; }      // v, g, out values per token

  // A small configuration for tests, NoPE and output gate on: 4 heads,
  // 32 nope + 16 rope dims, 32 v dims.
  static MlaConfig small_test();

  // InvalidArgument when the kernels cannot run this shape.
  absl::Status validate() const;
};

// The rope and one-pass attention kernels, resolved once per device.
struct MlaDecodeKernels {
  Kernel rope;
  Kernel sdpa;

  // The first lookup that fails is returned as is.
  static absl::StatusOr<MlaDecodeKernels> resolve(Device& dev);
};

// ── the launches ────────────────────────────────────────────────────────────

// Rotate-half RoPE of each head's dims [nope_dim, nope_dim + rope_dim) of q
// and k, in place, at position `pos`; nothing when use_nope.
// Grid (ceil(heads / 128)), block (128).
struct K3MlaRopeArgs {
  DevicePtr q;  // f32[heads][nope_dim + rope_dim]
  DevicePtr k;  // f32[heads][nope_dim + rope_dim]
  uint32_t heads = 0;
  uint32_t nope_dim = 0;
  uint32_t rope_dim = 0;  // even
  uint32_t pos = 0;
  float theta = 10000.0f;
  bool use_nope = false;  // passed as u32 0/1
};
absl::Status k3_mla_maybe_rope(Device& dev, const MlaDecodeKernels& k, const K3MlaRopeArgs& a,
                               Stream stream = {});

// out[h] = softmax_t(q[h] . k[t][h] / sqrt(dq)) . v[t][h] over t < seq_len,
// times sigmoid(g[h]) elementwise when use_gate. Grid (heads), block (32).
struct K3MlaSdpaGateArgs {
  DevicePtr q;    // f32[heads][dq]
  DevicePtr k;    // f32[seq_len][heads][dq]
  DevicePtr v;    // f32[seq_len][heads][dv]
  DevicePtr g;    // f32[heads][dv]; not read (may be null) without the gate
  DevicePtr out;  // f32[heads][dv], written (zeros when seq_len is 0)
  uint32_t seq_len = 0;
  uint32_t heads = 0;
  uint32_t dq = 0;
  uint32_t dv = 0;
  bool use_gate = false;  // passed as u32 0/1
};
absl::Status k3_mla_sdpa_gate(Device& dev, const MlaDecodeKernels& k, const K3MlaSdpaGateArgs& a,
                              Stream stream = {});

// Split-KV attention: the same out as k3_mla_sdpa_gate (up to f32 rounding)
// from heads x num_splits CTAs of 8 warps, each over a range of the tokens
// (split_kv::token_range), whose partials k3_mla_sdpa_combine_f32 then
// merges per head. Grids (heads, num_splits) and (heads).
struct K3MlaSplitKernels {
  Kernel split;
  Kernel combine;

  // The first lookup that fails is returned as is.
  static absl::StatusOr<K3MlaSplitKernels> resolve(Device& dev);
};
// The partials' device memory: f32 part_acc [heads][num_splits][dv], then,
// 256-byte aligned, part_ml [heads][num_splits][2]; sized for max_splits.
struct K3MlaSplitWorkspace {
  DevicePtr ptr;
  uint32_t max_splits = 0;
};
size_t k3_mla_split_workspace_bytes(uint32_t heads, uint32_t dv,
                                    uint32_t max_splits = contract::mla_decode::kMaxSplits);
// InvalidArgument (nothing launched) for num_splits 0 or above the
// workspace's max_splits or contract::mla_decode::kMaxSplits, dq above
// kSplitMaxDq, a null workspace, or the gate on with a null g.
absl::Status k3_mla_sdpa_gate_split(Device& dev, const K3MlaSplitKernels& k,
                                    const K3MlaSdpaGateArgs& a, const K3MlaSplitWorkspace& ws,
                                    uint32_t num_splits, Stream stream = {});

// The split count the token steps use: 0 (the one-pass kernel) where one
// warp pass covers the tokens (seq_len <= 32) or dq is above kSplitMaxDq;
// otherwise as many as fill two whole waves of two CTAs per multiprocessor
// (at least 1), at least kMinSplitTokens tokens a split, at most kMaxSplits.
inline constexpr uint32_t kMinSplitTokens = 64;
uint32_t k3_mla_plan_splits(const DeviceProperties& props, uint32_t heads, uint32_t dq,
                            uint32_t seq_len);

// ── KV caches ───────────────────────────────────────────────────────────────

struct MlaTokenInputs;  // below

// The K/V rows of one sequence on the host: row t of k() is token t's
// rotated k, [heads][qk_head_dim]; of v(), its v.
class MlaHostKv {
 public:
  MlaHostKv(size_t k_row, size_t v_row) : k_row_(k_row), v_row_(v_row) {}
  explicit MlaHostKv(const MlaConfig& cfg) : MlaHostKv(cfg.qk_row(), cfg.v_row()) {}

  // InvalidArgument when a row has the wrong length.
  absl::Status append(std::span<const float> k, std::span<const float> v);

  size_t seq_len() const { return seq_len_; }
  size_t k_row() const { return k_row_; }
  size_t v_row() const { return v_row_; }
  std::span<const float> k() const { return k_; }
  std::span<const float> v() const { return v_; }

 private:
  size_t k_row_, v_row_;
  size_t seq_len_ = 0;
  std::vector<float> k_, v_;
};

// The K/V rows of one sequence in device memory, room for `capacity` tokens,
// plus what the device-resident step needs per token, so that a token
// allocates nothing: device scratch, page-locked host staging (the step's
// copies are then asynchronous DMA), and, when allocated for a
// configuration, the split-KV kernels and workspace. Owns its memory; the
// Device must outlive it.
class MlaDeviceKv {
 public:
  // For `cfg` (validated), with the split-KV form (unless qk_head_dim is
  // above kSplitMaxDq). InvalidArgument for a zero capacity or an invalid
  // cfg; a failed kernel lookup as is; the device's error when it is out of
  // memory (nothing is left allocated).
  static absl::StatusOr<MlaDeviceKv> alloc(Device& dev, size_t capacity, const MlaConfig& cfg);
  // Rows only: no split form, so the step attends with the one-pass kernel.
  // InvalidArgument for a zero capacity or row.
  static absl::StatusOr<MlaDeviceKv> alloc(Device& dev, size_t capacity, size_t k_row,
                                           size_t v_row);

  ~MlaDeviceKv();
  MlaDeviceKv(MlaDeviceKv&& other) noexcept;
  MlaDeviceKv& operator=(MlaDeviceKv&& other) noexcept;
  MlaDeviceKv(const MlaDeviceKv&) = delete;
  MlaDeviceKv& operator=(const MlaDeviceKv&) = delete;

  // f32[capacity][k_row] and f32[capacity][v_row]; rows [0, seq_len) are live.
  DevicePtr k() const { return k_; }
  DevicePtr v() const { return v_; }
  DevicePtr k_row_ptr(size_t token) const { return k_ + token * k_row_ * sizeof(float); }
  DevicePtr v_row_ptr(size_t token) const { return v_ + token * v_row_ * sizeof(float); }
  size_t seq_len() const { return seq_len_; }
  size_t capacity() const { return capacity_; }
  bool full() const { return seq_len_ >= capacity_; }
  size_t k_row() const { return k_row_; }
  size_t v_row() const { return v_row_; }

  // Appends one token: its K row from device memory (one device-to-device
  // copy) and its V row from the host (one upload), both ordered on
  // `stream`; `v` must stay valid until the stream reaches the upload.
  // FailedPrecondition when full (nothing is written); InvalidArgument when
  // v has the wrong length.
  absl::Status append(DevicePtr k_src, std::span<const float> v, Stream stream = {});

  // Forgets the rows from `seq_len` on (InvalidArgument beyond seq_len()).
  absl::Status truncate(size_t seq_len);

  // Per-token device scratch: q and k (k_row floats each), g and out (v_row
  // floats each); g follows q directly.
  DevicePtr scratch_q() const { return scratch_; }
  DevicePtr scratch_g() const { return scratch_ + k_row_ * sizeof(float); }
  DevicePtr scratch_k() const;
  DevicePtr scratch_out() const;
  // The split-KV form (max_splits 0: none).
  const K3MlaSplitKernels& split_kernels() const { return split_kernels_; }
  K3MlaSplitWorkspace workspace() const { return workspace_; }

 private:
  friend absl::StatusOr<std::vector<float>> mla_decode_token_on_device(
      Device&, const MlaDecodeKernels&, const MlaConfig&, const MlaTokenInputs&, MlaDeviceKv&,
      Stream);
  MlaDeviceKv() = default;
  static absl::StatusOr<MlaDeviceKv> alloc_rows(Device& dev, size_t capacity, size_t k_row,
                                                size_t v_row, size_t workspace_bytes);
  void release();

  Device* dev_ = nullptr;
  DevicePtr k_, v_, scratch_;
  float* staging_ = nullptr;  // host: q, g, k, v, out, as the step copies them
  K3MlaSplitKernels split_kernels_;
  K3MlaSplitWorkspace workspace_;
  size_t capacity_ = 0, k_row_ = 0, v_row_ = 0, seq_len_ = 0;
};

// ── one decode token ────────────────────────────────────────────────────────

// One token's inputs, [heads][qk_head_dim] for q and k, [heads][v_head_dim]
// for v and g (g may be empty when the gate is off).
struct MlaTokenInputs {
  std::span<const float> q;
  std::span<const float> k;
  std::span<const float> v;
  std::span<const float> g;
  uint32_t pos = 0;  // the token's position, for RoPE
  float theta = 10000.0f;
};

// Host-KV step: uploads q and k, rotates them, downloads the rotated k and
// appends it with v to `kv`, uploads the whole cache and g, attends (one
// pass: the step's time is the upload), and
// downloads the output [heads][v_head_dim]. Device memory is allocated for
// the step and freed before it returns. `kv` is unchanged on error.
absl::StatusOr<std::vector<float>> mla_decode_token(Device& dev,
                                                       const MlaDecodeKernels& kernels,
                                                       const MlaConfig& cfg,
                                                       const MlaTokenInputs& in, MlaHostKv& kv,
                                                       Stream stream = {});

// Device-resident step: uploads q and g into kv's scratch and k and v into
// row seq_len() of the cache (through the page-locked staging), rotates q
// and the new k there, attends over the device rows (split-KV where kv has
// the form and k3_mla_plan_splits is not 0, else one pass), and downloads
// only the output. FailedPrecondition when `kv` is full (checked
// first: nothing runs); `kv` is unchanged on error.
absl::StatusOr<std::vector<float>> mla_decode_token_on_device(
    Device& dev, const MlaDecodeKernels& kernels, const MlaConfig& cfg, const MlaTokenInputs& in,
    MlaDeviceKv& kv, Stream stream = {});

}  // namespace sparkrt::ops

#endif  // SPARKRT_OPS_MLA_DECODE_H_
