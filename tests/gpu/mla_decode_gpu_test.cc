// The Kimi K3 gated-NoPE MLA decode (module mla_decode) on a GPU backend (cuda, or vulkan with
// --backend=vulkan) against the cpu backend, which runs the reference implementations (the oracle).
// Both devices get the same random, non-zero inputs; every output buffer is poisoned (f32 NaN) on
// both before the op runs, so an element the GPU fails to write, or writes where it should not,
// shows up. The op wrappers are the same calls on both backends. Tolerances are those of
// docs/kernels.md ("Module mla_decode", "Tolerances").
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpu_test_support.h"
#include "sparkrt/numeric.h"
#include "sparkrt/ops/mla_decode.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/verify/tolerances.h"

namespace sparkrt {
namespace {

namespace ops = sparkrt::ops;
namespace vs_cpu = verify::gpu_vs_reference;  // docs/kernels.md, "Tolerances"
using numeric::bf16_bits;
using numeric::fp8_bits;
using namespace gpu_test;

using Side = OpSide<ops::MlaDecodeKernels>;
using Pair = DevicePair<Side>;
Pair& pair() { return op_pair<ops::MlaDecodeKernels>(); }

TEST_CASE("k3_mla_maybe_rope matches the reference, NoPE changes nothing") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  struct Shape {
    uint32_t heads, nope, rope;
  };
  for (const Shape& s : {Shape{4, 32, 16}, Shape{64, 128, 64}, Shape{130, 128, 64}, Shape{1, 0, 8}})
    for (uint32_t pos : {0u, 7u, 8191u, 100000u}) {
      INFO("heads " << s.heads << " nope " << s.nope << " rope " << s.rope << " pos " << pos);
      const uint32_t dq = s.nope + s.rope;
      const auto qh = random_f32(gen, size_t{s.heads} * dq),
                 kh = random_f32(gen, size_t{s.heads} * dq);
      BufferPair q(pair(), qh), k(pair(), kh);
      for (int side = 0; side < 2; ++side) {
        Side& d = pair().side(side);
        REQUIRE_OK(ops::k3_mla_maybe_rope(*d.dev, d.k,
                                          {.q = q.on(side),
                                           .k = k.on(side),
                                           .heads = s.heads,
                                           .nope_dim = s.nope,
                                           .rope_dim = s.rope,
                                           .pos = pos,
                                           .theta = 10000.0f,
                                           .use_nope = false}));
      }
      for (const BufferPair* t : {&q, &k}) {
        const auto& in = t == &q ? qh : kh;
        const auto g = t->read<float>(0), c = t->read<float>(1);
        Tally tally;
        for (uint32_t h = 0; h < s.heads; ++h)
          for (uint32_t d = 0; d < dq; ++d) {
            const size_t i = size_t{h} * dq + d;
            if (d < s.nope) {  // the nope part is never written
              if (g[i] != in[i] || c[i] != in[i]) tally.mismatch(i, g[i], c[i]);
              continue;
            }
            const size_t j = d - s.nope < s.rope / 2 ? i + s.rope / 2 : i - s.rope / 2;
            tally.add(i, g[i], c[i], vs_cpu::kK3Rope(0, std::fabs(in[i]) + std::fabs(in[j])));
          }
        tally.check(t == &q ? "rope q" : "rope k");
      }
      // NoPE: both rows unchanged, even with an odd rope_dim.
      BufferPair q2(pair(), qh), k2(pair(), kh);
      for (int side = 0; side < 2; ++side) {
        Side& d = pair().side(side);
        REQUIRE_OK(ops::k3_mla_maybe_rope(*d.dev, d.k,
                                          {.q = q2.on(side), .k = k2.on(side), .heads = s.heads,
                                           .nope_dim = s.nope, .rope_dim = s.rope - 1, .pos = pos,
                                           .theta = 10000.0f, .use_nope = true}));
      }
      CHECK(q2.read<float>(0) == qh);
      CHECK(k2.read<float>(0) == kh);
      CHECK(q2.read<float>(1) == qh);
    }
}

TEST_CASE("k3_mla_sdpa_gate matches the reference over lengths, dims and the gate") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (uint32_t heads : {4u, 64u})
    for (uint32_t seq : {0u, 1u, 100u, 2000u})
      for (uint32_t dv : {40u, 128u, 300u})
        for (bool gate : {false, true}) {
          if (heads == 64 && seq == 2000 && dv == 300) continue;  // keeps the reference quick
          const uint32_t dq = heads == 4 ? 48 : 192;
          INFO("heads " << heads << " seq_len " << seq << " dq " << dq << " dv " << dv
                        << " gate " << gate);
          const auto vh = random_f32(gen, size_t{seq} * heads * dv + 1);
          double max_v = 0;
          for (float x : vh) max_v = std::max(max_v, double(std::fabs(x)));
          BufferPair q(pair(), random_f32(gen, size_t{heads} * dq, 0.05f, 0.3f));
          BufferPair k(pair(), random_f32(gen, size_t{seq} * heads * dq + 1)), v(pair(), vh);
          BufferPair g(pair(), random_f32(gen, size_t{heads} * dv, 0.25f, 4.0f));
          BufferPair out(pair(), size_t{heads} * dv * 4);
          out.poison();
          for (int side = 0; side < 2; ++side) {
            Side& d = pair().side(side);
            // Without the gate g is not read: pass null once.
            const DevicePtr gp = gate || dv != 40 ? g.on(side) : DevicePtr{};
            REQUIRE_OK(ops::k3_mla_sdpa_gate(
                *d.dev, d.k,
                {.q = q.on(side), .k = k.on(side), .v = v.on(side), .g = gp, .out = out.on(side),
                 .seq_len = seq, .heads = heads, .dq = dq, .dv = dv, .use_gate = gate}));
          }
          const auto go = out.read<float>(0), co = out.read<float>(1);
          Tally t;
          for (size_t i = 0; i < go.size(); ++i) {
            if (seq == 0 && go[i] != 0.0f) t.mismatch(i, go[i], co[i]);
            t.add(i, go[i], co[i], vs_cpu::kK3SdpaGate(co[i], max_v));
          }
          t.check("sdpa out");
        }
}

// The split-KV form against the cpu backend's: lengths around the split
// grain, split counts up to the merge's limit (many splits empty), rows
// that are not 16-byte multiples (the scalar path), with and without the gate.
TEST_CASE("k3_mla_sdpa_gate_split matches the reference over lengths, splits, dims and the gate") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  ops::K3MlaSplitKernels sk[2];
  for (int side = 0; side < 2; ++side) {
    auto k = ops::K3MlaSplitKernels::resolve(*pair().side(side).dev);
    REQUIRE_MESSAGE(k.ok(), std::string(k.status().ToString()));
    sk[side] = *k;
  }
  struct Shape {
    uint32_t heads, seq, dq, dv, splits;
  };
  const Shape shapes[] = {{4, 0, 48, 40, 3},      {4, 1, 48, 40, 1},     {4, 33, 48, 128, 2},
                          {4, 100, 45, 300, 7},   {64, 2000, 192, 128, 16}, {64, 700, 192, 128, 128},
                          {16, 5000, 192, 128, 40}, {3, 257, 1024, 36, 5}, {8, 90, 13, 7, 4}};
  for (const Shape& sh : shapes)
    for (bool gate : {false, true}) {
      INFO("heads " << sh.heads << " seq_len " << sh.seq << " dq " << sh.dq << " dv " << sh.dv
                    << " splits " << sh.splits << " gate " << gate);
      const auto vh = random_f32(gen, size_t{sh.seq} * sh.heads * sh.dv + 1);
      double max_v = 0;
      for (float x : vh) max_v = std::max(max_v, double(std::fabs(x)));
      BufferPair q(pair(), random_f32(gen, size_t{sh.heads} * sh.dq, 0.05f, 0.3f));
      BufferPair k(pair(), random_f32(gen, size_t{sh.seq} * sh.heads * sh.dq + 1)), v(pair(), vh);
      BufferPair g(pair(), random_f32(gen, size_t{sh.heads} * sh.dv, 0.25f, 4.0f));
      BufferPair out(pair(), size_t{sh.heads} * sh.dv * 4);
      BufferPair ws(pair(), ops::k3_mla_split_workspace_bytes(sh.heads, sh.dv, sh.splits));
      out.poison();
      ws.poison();
      for (int side = 0; side < 2; ++side) {
        Side& d = pair().side(side);
        REQUIRE_OK(ops::k3_mla_sdpa_gate_split(
            *d.dev, sk[side],
            {.q = q.on(side), .k = k.on(side), .v = v.on(side),
             .g = gate ? g.on(side) : DevicePtr{}, .out = out.on(side), .seq_len = sh.seq,
             .heads = sh.heads, .dq = sh.dq, .dv = sh.dv, .use_gate = gate},
            {.ptr = ws.on(side), .max_splits = sh.splits}, sh.splits));
      }
      const auto go = out.read<float>(0), co = out.read<float>(1);
      Tally t;
      for (size_t i = 0; i < go.size(); ++i) {
        if (sh.seq == 0 && go[i] != 0.0f) t.mismatch(i, go[i], co[i]);
        t.add(i, go[i], co[i], vs_cpu::kK3SdpaGate(co[i], max_v));
      }
      t.check("split sdpa out");
    }
}

// Token steps on both backends, host-KV (one pass) and device-resident
// (split-KV from 33 tokens): every output agrees with the cpu backend's
// device-resident step within the sdpa bound.
void run_token_steps(const ops::MlaConfig& cfg, uint32_t tokens, std::mt19937_64& gen) {
  Pair& p = pair();
  INFO("heads " << cfg.heads << " nope " << cfg.qk_nope_head_dim << " rope "
                << cfg.qk_rope_head_dim << " v " << cfg.v_head_dim << " NoPE "
                << cfg.mla_use_nope << " gate " << cfg.mla_use_output_gate << " tokens "
                << tokens);
  REQUIRE_OK(cfg.validate());
  std::unique_ptr<ops::MlaDeviceKv> dkv[2];
  for (int side = 0; side < 2; ++side) {
    auto kv = ops::MlaDeviceKv::alloc(*p.side(side).dev, tokens, cfg);
    REQUIRE_MESSAGE(kv.ok(), std::string(kv.status().ToString()));
    dkv[side] = std::make_unique<ops::MlaDeviceKv>(*std::move(kv));
  }
  ops::MlaHostKv hkv[2] = {ops::MlaHostKv(cfg), ops::MlaHostKv(cfg)};
  const Stream stream = [&] {
    auto s = p.gpu.dev->create_stream();
    REQUIRE_MESSAGE(s.ok(), std::string(s.status().ToString()));
    return *s;
  }();
  double max_v = 0;
  Tally dev_vs_cpu, host_vs_cpu, cpu_host_vs_dev;
  for (uint32_t t = 0; t < tokens; ++t) {
    const auto q = random_f32(gen, cfg.qk_row(), 0.05f, 0.3f), k = random_f32(gen, cfg.qk_row());
    const auto v = random_f32(gen, cfg.v_row()), g = random_f32(gen, cfg.v_row());
    for (float x : v) max_v = std::max(max_v, double(std::fabs(x)));
    const ops::MlaTokenInputs in{.q = q, .k = k, .v = v, .g = g, .pos = 1000 + 3 * t};
    std::vector<float> out[2][2];  // [side][host, device]
    for (int side = 0; side < 2; ++side) {
      Side& d = p.side(side);
      const Stream st = side == 0 ? stream : Stream{};
      auto h = ops::mla_decode_token(*d.dev, d.k, cfg, in, hkv[side], st);
      REQUIRE_MESSAGE(h.ok(), std::string(h.status().ToString()));
      auto o = ops::mla_decode_token_on_device(*d.dev, d.k, cfg, in, *dkv[side], st);
      REQUIRE_MESSAGE(o.ok(), std::string(o.status().ToString()));
      out[side][0] = *std::move(h);
      out[side][1] = *std::move(o);
      REQUIRE(out[side][0].size() == cfg.v_row());
      REQUIRE(out[side][1].size() == cfg.v_row());
    }
    CHECK(dkv[0]->seq_len() == t + 1);
    CHECK(hkv[0].seq_len() == t + 1);
    for (size_t i = 0; i < cfg.v_row(); ++i) {
      const double ref = out[1][1][i], bound = vs_cpu::kK3SdpaGate(ref, max_v);
      const size_t at = size_t{t} * cfg.v_row() + i;
      dev_vs_cpu.add(at, out[0][1][i], ref, bound);
      host_vs_cpu.add(at, out[0][0][i], ref, bound);
      cpu_host_vs_dev.add(at, out[1][0][i], ref, bound);
    }
  }
  dev_vs_cpu.check("device-resident step, cuda vs cpu");
  host_vs_cpu.check("host-KV step on cuda vs the cpu device-resident step");
  cpu_host_vs_dev.check("host-KV vs device-resident step on cpu");
  // The gpu cache rows are the cpu's (the rotated k within the rope bound, v exact).
  const size_t kn = size_t{tokens} * cfg.qk_row(), vn = size_t{tokens} * cfg.v_row();
  std::vector<float> kg(kn), kcpu(kn), vg(vn), vcpu(vn);
  REQUIRE_OK(p.gpu.dev->synchronize(stream));
  REQUIRE_OK(p.gpu.dev->copy_d2h(dkv[0]->k(), kg.data(), kn * 4));
  REQUIRE_OK(p.cpu.dev->copy_d2h(dkv[1]->k(), kcpu.data(), kn * 4));
  REQUIRE_OK(p.gpu.dev->copy_d2h(dkv[0]->v(), vg.data(), vn * 4));
  REQUIRE_OK(p.cpu.dev->copy_d2h(dkv[1]->v(), vcpu.data(), vn * 4));
  CHECK(vg == vcpu);
  Tally krows;
  for (size_t i = 0; i < kn; ++i) {
    // The rope bound with |a| + |b| <= 4 (inputs within ±2).
    krows.add(i, kg[i], kcpu[i], vs_cpu::kK3Rope(0, 4.0));
    if (kg[i] != hkv[0].k()[i]) krows.mismatch(i, kg[i], hkv[0].k()[i]);
  }
  krows.check("device K rows (cuda vs cpu, and the cuda host-KV rows)");
  // Full: FailedPrecondition, and nothing changes.
  const auto q = random_f32(gen, cfg.qk_row()), k = random_f32(gen, cfg.qk_row());
  const auto v = random_f32(gen, cfg.v_row()), g = random_f32(gen, cfg.v_row());
  auto full = ops::mla_decode_token_on_device(*p.gpu.dev, p.gpu.k, cfg,
                                                 {.q = q, .k = k, .v = v, .g = g, .pos = 1},
                                                 *dkv[0], stream);
  CHECK(full.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(dkv[0]->seq_len() == tokens);
  REQUIRE_OK(p.gpu.dev->synchronize(stream));
  REQUIRE_OK(p.gpu.dev->destroy_stream(stream));
}

TEST_CASE("K3 token steps, host-KV and device-resident, agree with the cpu backend") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  run_token_steps(ops::MlaConfig::small_test(), 40, gen);
  run_token_steps({.heads = 16, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64,
                   .v_head_dim = 128, .mla_use_nope = false, .mla_use_output_gate = true},
                  48, gen);
  run_token_steps({.heads = 64, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64,
                   .v_head_dim = 128, .mla_use_nope = false, .mla_use_output_gate = false},
                  70, gen);
  run_token_steps({.heads = 128, .qk_nope_head_dim = 64, .qk_rope_head_dim = 32,
                   .v_head_dim = 64, .mla_use_nope = true, .mla_use_output_gate = true},
                  9, gen);
}

}  // namespace
}  // namespace sparkrt
