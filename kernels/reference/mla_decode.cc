// References for kernels/ptx/mla_decode.cu (contracts in docs/kernels.md,
// "Module mla_decode"): the kernels of one K3 gated-NoPE MLA decode token, in
// f32: the RoPE, the one-pass attention, and the split-KV attention's splits
// and merge.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "operands.h"
#include "reference.h"
#include "sparkrt/contract/mla_decode.h"
#include "sparkrt/contract/split_kv.h"
#include "split_softmax.h"

namespace sparkrt::reference {
namespace {

// Rotate-half RoPE of x[0, rope_dim): angles, cos and sin in f64 rounded
// once to f32, the rotation in f32 (products and sums rounded separately,
// as the kernel does without fused multiply-adds).
void rope_rotate(float* x, uint32_t rope_dim, uint32_t pos, double theta) {
  const uint32_t half = rope_dim / 2;
  for (uint32_t i = 0; i < half; ++i) {
    const double angle = double(pos) * std::pow(theta, -2.0 * double(i) / double(rope_dim));
    const float c = static_cast<float>(std::cos(angle));
    const float s = static_cast<float>(std::sin(angle));
    const float a = x[i], b = x[i + half];
    const float ac = a * c, bs = b * s, bc = b * c, as = a * s;
    x[i] = ac - bs;
    x[i + half] = bc + as;
  }
}

constexpr float kLog2e = 1.4426950408889634f;

// q[h] . k[t][h] in f32, dims in order.
float dot_qk(std::span<const float> q, std::span<const float> k, uint32_t h, uint64_t t,
             uint32_t heads, uint32_t dq) {
  float dot = 0.0f;
  for (uint32_t d = 0; d < dq; ++d) dot += q[h * dq + d] * k[(t * heads + h) * dq + d];
  return dot;
}

// The output gate: o * sigmoid(g).
float gated(float o, float g) { return o * (1.0f / (1.0f + std::exp(-g))); }

// The one-pass and merge entries take one CTA per head.
absl::Status check_cta_per_head(const Launch& launch, uint32_t heads) {
  if (launch.grid()[0] == heads) return absl::OkStatus();
  return invalid_launch(
      launch, absl::StrFormat("grid.x %d must equal heads %d (one CTA per head)",
                              launch.grid()[0], heads));
}

}  // namespace
}  // namespace sparkrt::reference

SPARKRT_REFERENCE_KERNEL(mla_decode, k3_mla_maybe_rope_f32) {
  using namespace sparkrt::reference;
  const uint32_t heads = launch.value<uint32_t>(2);
  const uint32_t nope_dim = launch.value<uint32_t>(3);
  const uint32_t rope_dim = launch.value<uint32_t>(4);
  const uint32_t pos = launch.value<uint32_t>(5);
  const float theta = launch.value<float>(6);
  const uint32_t use_nope = launch.value<uint32_t>(7);
  if (use_nope != 0 || heads == 0) return absl::OkStatus();  // NoPE: q and k stay as they are
  if (rope_dim % 2 != 0)
    return invalid_launch(launch, absl::StrFormat("rope_dim %d must be even", rope_dim));
  if (launch.grid()[0] * uint64_t{launch.block()[0]} < heads)
    return invalid_launch(launch, absl::StrFormat("grid.x %d * block.x %d threads cover fewer "
                                                  "than heads %d (one thread per head)",
                                                  launch.grid()[0], launch.block()[0], heads));
  const uint64_t dq = uint64_t{nope_dim} + rope_dim;
  const std::string why = "[heads][nope_dim + rope_dim]";
  SPARKRT_ASSIGN_OR_RETURN(auto q, operand<float>(launch, 0, "q", heads * dq, why));
  SPARKRT_ASSIGN_OR_RETURN(auto k, operand<float>(launch, 1, "k", heads * dq, why));
  for (uint32_t h = 0; h < heads; ++h) {
    rope_rotate(q.data() + h * dq + nope_dim, rope_dim, pos, theta);
    rope_rotate(k.data() + h * dq + nope_dim, rope_dim, pos, theta);
  }
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(mla_decode, k3_mla_sdpa_gate_f32) {
  using namespace sparkrt::reference;
  const uint32_t seq_len = launch.value<uint32_t>(5);
  const uint32_t heads = launch.value<uint32_t>(6);
  const uint32_t dq = launch.value<uint32_t>(7);
  const uint32_t dv = launch.value<uint32_t>(8);
  const bool gate = launch.value<uint32_t>(9) != 0;
  if (heads == 0 || dv == 0) return absl::OkStatus();
  SPARKRT_RETURN_IF_ERROR(check_cta_per_head(launch, heads));
  if (dq == 0) return invalid_launch(launch, "dq must be > 0");
  const uint64_t hq = uint64_t{heads} * dq, hv = uint64_t{heads} * dv;
  SPARKRT_ASSIGN_OR_RETURN(auto q, operand<const float>(launch, 0, "q", hq, "[heads][dq]"));
  SPARKRT_ASSIGN_OR_RETURN(
      auto k, operand<const float>(launch, 1, "k", seq_len * hq, "[seq_len][heads][dq]"));
  SPARKRT_ASSIGN_OR_RETURN(
      auto v, operand<const float>(launch, 2, "v", seq_len * hv, "[seq_len][heads][dv]"));
  SPARKRT_ASSIGN_OR_RETURN(
      auto g, operand<const float>(launch, 3, "g", gate ? hv : 0, "the gate [heads][dv]"));
  SPARKRT_ASSIGN_OR_RETURN(auto out, operand<float>(launch, 4, "out", hv, "[heads][dv]"));
  const float scale = 1.0f / std::sqrt(static_cast<float>(dq));
  std::vector<float> p(seq_len);
  for (uint32_t h = 0; h < heads; ++h) {
    float m = -INFINITY;
    for (uint32_t t = 0; t < seq_len; ++t) {
      p[t] = dot_qk(q, k, h, t, heads, dq) * scale;
      m = std::max(m, p[t]);
    }
    float sum = 0.0f;
    for (float& x : p) sum += (x = std::exp(x - m));
    for (uint32_t d = 0; d < dv; ++d) {
      float acc = 0.0f;
      for (uint32_t t = 0; t < seq_len; ++t) acc += p[t] * v[(t * uint64_t{heads} + h) * dv + d];
      float o = sum > 0.0f ? acc / sum : 0.0f;
      out[h * dv + d] = gate ? gated(o, g[h * dv + d]) : o;
    }
  }
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(mla_decode, k3_mla_sdpa_split_f32) {
  using namespace sparkrt::reference;
  namespace contract = sparkrt::contract::mla_decode;
  const uint32_t seq_len = launch.value<uint32_t>(5);
  const uint32_t heads = launch.value<uint32_t>(6);
  const uint32_t dq = launch.value<uint32_t>(7);
  const uint32_t dv = launch.value<uint32_t>(8);
  const uint32_t n = launch.value<uint32_t>(9);
  if (heads == 0 || n == 0) return absl::OkStatus();
  if (launch.grid()[0] != heads || launch.grid()[1] != n)
    return invalid_launch(launch, absl::StrFormat("grid (%d, %d) must be (heads %d, num_splits "
                                                  "%d)",
                                                  launch.grid()[0], launch.grid()[1], heads, n));
  if (dq == 0 || dq > contract::kSplitMaxDq)
    return invalid_launch(launch, absl::StrFormat("dq %d must be in [1, %d]", dq,
                                                  contract::kSplitMaxDq));
  const uint64_t hq = uint64_t{heads} * dq, hv = uint64_t{heads} * dv;
  SPARKRT_ASSIGN_OR_RETURN(auto q, operand<const float>(launch, 0, "q", hq, "[heads][dq]"));
  SPARKRT_ASSIGN_OR_RETURN(
      auto k, operand<const float>(launch, 1, "k", seq_len * hq, "[seq_len][heads][dq]"));
  SPARKRT_ASSIGN_OR_RETURN(
      auto v, operand<const float>(launch, 2, "v", seq_len * hv, "[seq_len][heads][dv]"));
  SPARKRT_ASSIGN_OR_RETURN(auto part_acc, operand<float>(launch, 3, "part_acc", hv * n,
                                                         "[heads][num_splits][dv]"));
  SPARKRT_ASSIGN_OR_RETURN(auto part_ml, operand<float>(launch, 4, "part_ml", uint64_t{heads} * n * 2,
                                                        "[heads][num_splits][2]"));
  const float scale = kLog2e / std::sqrt(static_cast<float>(dq));
  std::vector<float> s;
  for (uint32_t h = 0; h < heads; ++h) {
    for (uint32_t z = 0; z < n; ++z) {
      const auto r = sparkrt::contract::split_kv::token_range(seq_len, 0, n, z);
      s.clear();
      float m = -INFINITY;
      for (uint32_t t = r.t0; t < r.t1; ++t) {
        s.push_back(dot_qk(q, k, h, t, heads, dq) * scale);
        m = std::max(m, s.back());
      }
      float l = 0.0f;
      for (float& x : s) l += (x = std::exp2(x - m));
      float* acc = part_acc.data() + (uint64_t{h} * n + z) * dv;
      for (uint32_t d = 0; d < dv; ++d) {
        float a = 0.0f;
        for (uint32_t t = r.t0; t < r.t1; ++t)
          a += s[t - r.t0] * v[(t * uint64_t{heads} + h) * dv + d];
        acc[d] = a;
      }
      part_ml[(uint64_t{h} * n + z) * 2] = m;
      part_ml[(uint64_t{h} * n + z) * 2 + 1] = l;
    }
  }
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(mla_decode, k3_mla_sdpa_combine_f32) {
  using namespace sparkrt::reference;
  namespace contract = sparkrt::contract::mla_decode;
  const uint32_t heads = launch.value<uint32_t>(4);
  const uint32_t dv = launch.value<uint32_t>(5);
  const uint32_t n = launch.value<uint32_t>(6);
  const bool gate = launch.value<uint32_t>(7) != 0;
  if (heads == 0 || dv == 0) return absl::OkStatus();
  SPARKRT_RETURN_IF_ERROR(check_cta_per_head(launch, heads));
  if (n > contract::kMaxSplits)
    return invalid_launch(launch, absl::StrFormat("num_splits %d is above the %d a CTA merges",
                                                  n, contract::kMaxSplits));
  const uint64_t hv = uint64_t{heads} * dv;
  SPARKRT_ASSIGN_OR_RETURN(auto part_acc, operand<const float>(launch, 0, "part_acc", hv * n,
                                                               "[heads][num_splits][dv]"));
  SPARKRT_ASSIGN_OR_RETURN(auto part_ml,
                               operand<const float>(launch, 1, "part_ml", uint64_t{heads} * n * 2,
                                                    "[heads][num_splits][2]"));
  SPARKRT_ASSIGN_OR_RETURN(
      auto g, operand<const float>(launch, 2, "g", gate ? hv : 0, "the gate [heads][dv]"));
  SPARKRT_ASSIGN_OR_RETURN(auto out, operand<float>(launch, 3, "out", hv, "[heads][dv]"));
  merge_split_partials(
      part_acc.data(), part_ml.data(), heads, n, dv, [](uint64_t) { return -INFINITY; },
      [&](uint64_t h, uint32_t d, float o) {
        out[h * dv + d] = gate ? gated(o, g[h * dv + d]) : o;
      });
  return absl::OkStatus();
}
