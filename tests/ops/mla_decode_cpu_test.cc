// The K3 MLA decode on the cpu reference backend against float64 computations
// written here from docs/kernels.md ("Module mla_decode"): the RoPE and NoPE
// rule, softmax attention with the output gate, and a multi-token decode in
// which the host-KV and device-resident steps must agree with each other
// bit for bit and with float64. Inputs are random and never zero; outputs
// are poisoned first.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "mla_test_support.h"
#include "sparkrt/ops/mla_decode.h"
#include "sparkrt/verify/float64.h"
#include "sparkrt/verify/tolerances.h"

using namespace opstest;
using namespace mlatest;
namespace ops = sparkrt::ops;
namespace verify = sparkrt::verify;
namespace vs_float64 = sparkrt::verify::reference_vs_float64;

namespace {

struct Cpu : CpuDevice<ops::MlaDecodeKernels> {
  uint32_t u32_pos() { return std::uniform_int_distribution<uint32_t>(0, 9000)(gen); }

  // k3_mla_maybe_rope_f32 on uploads of q and k; returns the rotated pair.
  std::pair<std::vector<float>, std::vector<float>> rope(const std::vector<float>& q,
                                                         const std::vector<float>& k,
                                                         uint32_t heads, uint32_t nope_dim,
                                                         uint32_t rope_dim, uint32_t pos,
                                                         float theta, bool use_nope) {
    Buffer dq(*dev, q), dk(*dev, k);
    REQUIRE_OK(ops::k3_mla_maybe_rope(*dev, kernels,
                                      {.q = dq,
                                       .k = dk,
                                       .heads = heads,
                                       .nope_dim = nope_dim,
                                       .rope_dim = rope_dim,
                                       .pos = pos,
                                       .theta = theta,
                                       .use_nope = use_nope}));
    return {dq.download<float>(), dk.download<float>()};
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rotate-half RoPE in float64 (sparkrt/verify/float64.h) of each head's dims
// [nope, nope + rope).
std::vector<double> rope_f64(const std::vector<float>& x, uint32_t heads, uint32_t nope,
                             uint32_t rope, uint32_t pos, double theta, bool use_nope) {
  std::vector<double> y(x.begin(), x.end());
  if (use_nope) return y;
  const uint32_t dq = nope + rope;
  for (uint32_t h = 0; h < heads; ++h)
    verify::rope_rotate_half(std::span<double>(y).subspan(h * dq + nope, rope), rope, theta,
                             [&](uint32_t) { return double(pos); });
  return y;
}

// Softmax attention in float64 (sparkrt/verify/float64.h) of q [heads][dq]
// over rows k [t][heads][dq], v [t][heads][dv], times sigmoid(g) when gated.
std::vector<double> sdpa_f64(const std::vector<double>& q, const std::vector<double>& k,
                             const std::vector<double>& v, const std::vector<float>& g,
                             uint32_t seq_len, uint32_t heads, uint32_t dq, uint32_t dv,
                             bool gate) {
  std::vector<double> out(uint64_t{heads} * dv, 0.0);
  for (uint32_t h = 0; h < heads; ++h) {
    const auto o = verify::attention(
        std::span<const double>(q).subspan(h * dq, dq), seq_len, dv, 1 / std::sqrt(double(dq)),
        [&](uint32_t t, uint32_t d) { return k[(uint64_t{t} * heads + h) * dq + d]; },
        [&](uint32_t t, uint32_t d) { return v[(uint64_t{t} * heads + h) * dv + d]; });
    for (uint32_t d = 0; d < dv; ++d)
      out[h * dv + d] = gate ? o[d] / (1.0 + std::exp(-double(g[h * dv + d]))) : o[d];
  }
  return out;
}

// Attention outputs: |got - want| <= 2^-16 |want| + 2^-15 max|v| (f32 dots,
// exp and sums against float64).
void check_attention(const std::vector<float>& got, const std::vector<double>& want, double vmax) {
  REQUIRE(got.size() == want.size());
  uint64_t misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = vs_float64::kK3SdpaGate(want[i], vmax);
    if (!(std::fabs(got[i] - want[i]) <= tol) && misses++ < 8)
      FAIL_CHECK("out[", i, "] = ", got[i], ", float64 ", want[i]);
  }
  CHECK(misses == 0);
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

}  // namespace

TEST_CASE("k3 mla cpu: RoPE rotates each head's rope dims, NoPE leaves q and k alone") {
  Cpu c;
  INFO("seed ", c.seed);
  const uint32_t heads = 5, nope = 24, rope = 16, dq = nope + rope;
  for (float theta : {10000.0f, 1e6f}) {
    const uint32_t pos = c.u32_pos();
    CAPTURE(theta);
    CAPTURE(pos);
    const auto q = random_f32(c.gen, heads * dq), k = random_f32(c.gen, heads * dq);
    const auto rotated = c.rope(q, k, heads, nope, rope, pos, theta, /*use_nope=*/false);
    const auto pairs = {std::pair{&q, &rotated.first}, std::pair{&k, &rotated.second}};
    for (const auto& [in, out] : pairs) {
      const auto& got = *out;
      const auto want = rope_f64(*in, heads, nope, rope, pos, theta, false);
      uint64_t misses = 0;
      for (uint32_t h = 0; h < heads; ++h)
        for (uint32_t d = 0; d < dq; ++d) {
          const uint32_t i = h * dq + d;
          if (d < nope) {
            CHECK(got[i] == (*in)[i]);  // the nope part is never touched
            continue;
          }
          const uint32_t j = d - nope < rope / 2 ? i + rope / 2 : i - rope / 2;  // its partner
          const double tol = vs_float64::kK3Rope(0, std::fabs((*in)[i]) + std::fabs((*in)[j]));
          if (!(std::fabs(got[i] - want[i]) <= tol) && misses++ < 8)
            FAIL_CHECK("x[", i, "] = ", got[i], ", float64 ", want[i]);
        }
      CHECK(misses == 0);
    }
  }

  SUBCASE("NoPE: not a bit changes, whatever the rope dims") {
    const auto q = random_f32(c.gen, heads * (nope + 17));
    const auto k = random_f32(c.gen, heads * (nope + 17));
    const auto [q2, k2] = c.rope(q, k, heads, nope, 17, 1234, 10000.0f, /*use_nope=*/true);
    CHECK(same_bits(q2, q));
    CHECK(same_bits(k2, k));
  }
}

namespace {

// One attention case, 3 heads, dq 48, on random inputs: `run` launches a
// form of it into a poisoned output, which must match float64.
template <typename Run>
void check_sdpa_form(Cpu& c, uint32_t seq_len, uint32_t dv, bool gate, Run run) {
  const uint32_t heads = 3, dq = 48;
  const auto q = random_f32(c.gen, heads * dq);
  const auto k = random_f32(c.gen, uint64_t{seq_len} * heads * dq + 1);
  const auto v = random_f32(c.gen, uint64_t{seq_len} * heads * dv + 1);
  const auto g = random_f32(c.gen, heads * dv, 0.25f, 4.0f);
  Buffer dqb(*c.dev, q), dkb(*c.dev, k), dvb(*c.dev, v), dgb(*c.dev, g);
  Buffer dout(*c.dev, heads * dv * sizeof(float));
  dout.poison();
  REQUIRE_OK(run(ops::K3MlaSdpaGateArgs{.q = dqb,
                                        .k = dkb,
                                        .v = dvb,
                                        .g = gate ? dgb.ptr() : sparkrt::DevicePtr{},
                                        .out = dout,
                                        .seq_len = seq_len,
                                        .heads = heads,
                                        .dq = dq,
                                        .dv = dv,
                                        .use_gate = gate}));
  const auto want = sdpa_f64(
      std::vector<double>(q.begin(), q.end()), std::vector<double>(k.begin(), k.end()),
      std::vector<double>(v.begin(), v.end()), g, seq_len, heads, dq, dv, gate);
  check_attention(dout.download<float>(), want, max_abs(v));
}

}  // namespace

TEST_CASE("k3 mla cpu: sdpa with and without the output gate against float64") {
  Cpu c;
  INFO("seed ", c.seed);
  for (uint32_t dv : {40u, 300u})
    for (uint32_t seq_len : {0u, 1u, 9u})
      for (bool gate : {false, true}) {
        CAPTURE(dv);
        CAPTURE(seq_len);
        CAPTURE(gate);
        check_sdpa_form(c, seq_len, dv, gate, [&](const ops::K3MlaSdpaGateArgs& a) {
          return ops::k3_mla_sdpa_gate(*c.dev, c.kernels, a);
        });
      }
}

TEST_CASE("k3 mla cpu: split-KV attention against float64, every split count") {
  Cpu c;
  INFO("seed ", c.seed);
  auto sk = ops::K3MlaSplitKernels::resolve(*c.dev);
  REQUIRE_MESSAGE(sk.ok(), sk.status().ToString());
  for (uint32_t dv : {40u, 300u})
    for (uint32_t seq_len : {0u, 1u, 37u, 200u})
      for (uint32_t splits : {1u, 2u, 7u, 64u})
        for (bool gate : {false, true}) {
          CAPTURE(dv);
          CAPTURE(seq_len);
          CAPTURE(splits);
          CAPTURE(gate);
          Buffer ws(*c.dev, ops::k3_mla_split_workspace_bytes(3, dv, splits));
          ws.poison();
          check_sdpa_form(c, seq_len, dv, gate, [&](const ops::K3MlaSdpaGateArgs& a) {
            return ops::k3_mla_sdpa_gate_split(*c.dev, *sk, a, {.ptr = ws, .max_splits = splits},
                                               splits);
          });
        }
}

TEST_CASE("k3 mla cpu: the split-KV launch refuses what its kernels cannot run") {
  Cpu c;
  auto sk = ops::K3MlaSplitKernels::resolve(*c.dev);
  REQUIRE_MESSAGE(sk.ok(), sk.status().ToString());
  Buffer buf(*c.dev, 4096);
  const ops::K3MlaSdpaGateArgs a{.q = buf, .k = buf, .v = buf, .g = buf, .out = buf,
                                 .seq_len = 4, .heads = 2, .dq = 8, .dv = 8, .use_gate = true};
  const ops::K3MlaSplitWorkspace ws{.ptr = buf, .max_splits = 4};
  const auto refused = [&](const ops::K3MlaSdpaGateArgs& args, const ops::K3MlaSplitWorkspace& w,
                           uint32_t splits, const char* text) {
    const absl::Status s = ops::k3_mla_sdpa_gate_split(*c.dev, *sk, args, w, splits);
    INFO(s.ToString());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, text));
  };
  refused(a, ws, 0, "num_splits 0");
  refused(a, ws, 5, "the workspace holds 4");
  refused(a, {.ptr = buf, .max_splits = 1000}, 200, "at most 128");
  refused(a, {.ptr = {}, .max_splits = 4}, 2, "workspace is null");
  ops::K3MlaSdpaGateArgs wide = a;
  wide.dq = 1025;
  refused(wide, ws, 2, "k3_mla_sdpa_gate");
  ops::K3MlaSdpaGateArgs no_g = a;
  no_g.g = {};
  refused(no_g, ws, 2, "g is null");
}

namespace {

// T tokens through both steps side by side, each checked against float64.
// `split`: the device KV is allocated for the configuration, so its step
// attends in the split-KV form from 33 tokens on (the host-KV step stays one
// pass, and the two agree only within the bound there).
void decode_both_ways(Cpu& c, const ops::MlaConfig& cfg, uint32_t tokens, bool split = false) {
  const float theta = 10000.0f;
  const uint32_t start = c.u32_pos();
  CAPTURE(start);
  const uint32_t h = cfg.heads, dq = cfg.qk_head_dim(), dv = cfg.v_head_dim;
  ops::MlaHostKv host(cfg);
  auto dkv = split ? ops::MlaDeviceKv::alloc(*c.dev, tokens, cfg)
                   : ops::MlaDeviceKv::alloc(*c.dev, tokens, cfg.qk_row(), cfg.v_row());
  REQUIRE_MESSAGE(dkv.ok(), dkv.status().ToString());
  std::vector<double> k64, v64;  // the float64 cache
  double vmax = 0;
  for (uint32_t t = 0; t < tokens; ++t) {
    CAPTURE(t);
    const auto q = random_f32(c.gen, cfg.qk_row()), k = random_f32(c.gen, cfg.qk_row());
    const auto v = random_f32(c.gen, cfg.v_row()), g = random_f32(c.gen, cfg.v_row(), 0.25f, 4.0f);
    const ops::MlaTokenInputs in{.q = q, .k = k, .v = v, .g = g, .pos = start + t, .theta = theta};
    auto out_host = ops::mla_decode_token(*c.dev, c.kernels, cfg, in, host);
    REQUIRE_MESSAGE(out_host.ok(), out_host.status().ToString());
    auto out_dev = ops::mla_decode_token_on_device(*c.dev, c.kernels, cfg, in, *dkv);
    REQUIRE_MESSAGE(out_dev.ok(), out_dev.status().ToString());
    CHECK(host.seq_len() == t + 1);
    CHECK(dkv->seq_len() == t + 1);
    const bool one_pass = !split || t + 1 <= sparkrt::contract::mla_decode::kSdpaThreads;
    if (one_pass)
      CHECK_MESSAGE(same_bits(*out_host, *out_dev), "host-KV and device-resident outputs differ");

    const auto q_rot = rope_f64(q, h, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, start + t, theta,
                                cfg.mla_use_nope);
    const auto k_rot = rope_f64(k, h, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, start + t, theta,
                                cfg.mla_use_nope);
    k64.insert(k64.end(), k_rot.begin(), k_rot.end());
    v64.insert(v64.end(), v.begin(), v.end());
    vmax = std::max(vmax, max_abs(v));
    check_attention(*out_dev,
                    sdpa_f64(q_rot, k64, v64, g, t + 1, h, dq, dv, cfg.mla_use_output_gate), vmax);
  }
  // Both caches hold the same rotated k and v rows.
  std::vector<float> dev_k(tokens * cfg.qk_row()), dev_v(tokens * cfg.v_row());
  REQUIRE_OK(c.dev->copy_d2h(dkv->k(), dev_k));
  REQUIRE_OK(c.dev->copy_d2h(dkv->v(), dev_v));
  CHECK(same_bits(dev_k, std::vector<float>(host.k().begin(), host.k().end())));
  CHECK(same_bits(dev_v, std::vector<float>(host.v().begin(), host.v().end())));

  // The device KV is full now: the next token is refused and changes nothing.
  const std::vector<float> q(cfg.qk_row(), 0.5f), v(cfg.v_row(), 0.5f);
  auto more = ops::mla_decode_token_on_device(
      *c.dev, c.kernels, cfg, {.q = q, .k = q, .v = v, .g = v, .pos = start + tokens}, *dkv);
  CHECK(more.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(contains(more.status(), "full"));
  CHECK(dkv->seq_len() == tokens);
}

}  // namespace

TEST_CASE("k3 mla cpu: multi-token decode, host KV and device-resident KV agree") {
  Cpu c;
  INFO("seed ", c.seed);
  SUBCASE("the test twin: NoPE, output gate") {
    decode_both_ways(c, ops::MlaConfig::small_test(), 12);
  }
  SUBCASE("RoPE, no gate") {
    decode_both_ways(c,
                     {.heads = 3,
                      .qk_nope_head_dim = 16,
                      .qk_rope_head_dim = 8,
                      .v_head_dim = 24,
                      .mla_use_nope = false,
                      .mla_use_output_gate = false},
                     10);
  }
  SUBCASE("RoPE and gate, split-KV past 32 tokens") {
    decode_both_ways(c,
                     {.heads = 4,
                      .qk_nope_head_dim = 16,
                      .qk_rope_head_dim = 8,
                      .v_head_dim = 20,
                      .mla_use_nope = false,
                      .mla_use_output_gate = true},
                     90, /*split=*/true);
  }
  SUBCASE("RoPE and gate, one head, wide V") {
    decode_both_ways(c,
                     {.heads = 1,
                      .qk_nope_head_dim = 64,
                      .qk_rope_head_dim = 32,
                      .v_head_dim = 260,
                      .mla_use_nope = false,
                      .mla_use_output_gate = true},
                     7);
  }
}
