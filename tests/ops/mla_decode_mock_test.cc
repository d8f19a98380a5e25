// Contract tests of the K3 MLA decode on the recording mock: the kernel
// lookups, the two launches of a token (geometry, argument counts, the NoPE
// and gate flags as argument bytes, shared memory, stream), and the copies
// of the device-resident step (the output is the only download).
#include <utility>
#include <vector>

#include "mla_test_support.h"
#include "sparkrt/ops/mla_decode.h"

using namespace mlatest;
using opstest::contains;
using sparkrt::DevicePtr;
using sparkrt::Dim3;
using sparkrt::testing::MockArg;
namespace ops = sparkrt::ops;

namespace {

// One token's inputs for `cfg`, constant as in the seed's tests (the mock
// does not compute).
struct TwinInputs {
  std::vector<float> q, k, v, g;
  explicit TwinInputs(const ops::MlaConfig& cfg)
      : q(cfg.qk_row(), 0.1f), k(cfg.qk_row(), 0.2f), v(cfg.v_row(), 0.3f), g(cfg.v_row(), 0.0f) {}
  ops::MlaTokenInputs at(uint32_t pos) const {
    return {.q = q, .k = k, .v = v, .g = g, .pos = pos, .theta = 10000.0f};
  }
};

// A mock device with the kernels resolved, the test twin configuration and
// one token's inputs for it.
struct TwinMock : MockDevice {
  struct Parts {
    ops::MlaDecodeKernels kernels;
    ops::MlaConfig cfg;
    TwinInputs in;
  };
  Parts twin{resolve_kernels<ops::MlaDecodeKernels>(*dev), ops::MlaConfig::small_test(),
             TwinInputs(ops::MlaConfig::small_test())};
};

ops::MlaDeviceKv alloc_kv(sparkrt::Device& dev, const ops::MlaConfig& cfg, size_t capacity) {
  auto kv = ops::MlaDeviceKv::alloc(dev, capacity, cfg);
  REQUIRE_MESSAGE(kv.ok(), kv.status().ToString());
  return *std::move(kv);
}

}  // namespace

TEST_CASE("k3 mla mock: resolve looks up the rope entry, then the sdpa entry") {
  MockDevice m;
  const ops::MlaDecodeKernels k = resolve_kernels<ops::MlaDecodeKernels>(*m.dev);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"mla_decode", "k3_mla_maybe_rope_f32"},
      {"mla_decode", "k3_mla_sdpa_gate_f32"},
  };
  CHECK(m.mock.lookups() == expected);
  CHECK(k.rope.entry() == "k3_mla_maybe_rope_f32");
  CHECK(k.sdpa.entry() == "k3_mla_sdpa_gate_f32");
  CHECK(m.mock.launch_count() == 0);

  SUBCASE("a missing entry is the lookup's error") {
    MockDevice m2;
    REQUIRE_OK(m2.mock.deny_lookup("mla_decode", "k3_mla_sdpa_gate_f32"));
    auto r = ops::MlaDecodeKernels::resolve(*m2.dev);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kNotFound);
    CHECK(contains(r.status(), "k3_mla_sdpa_gate_f32"));
  }
}

TEST_CASE("k3 mla mock: the twin configuration's launch contract (host KV)") {
  TwinMock m;
  const auto& [kernels, cfg, in] = m.twin;
  REQUIRE(cfg.mla_use_nope);
  REQUIRE(cfg.mla_use_output_gate);
  ops::MlaHostKv kv(cfg);
  auto out = ops::mla_decode_token(*m.dev, kernels, cfg, in.at(3), kv, m.stream);
  REQUIRE_MESSAGE(out.ok(), out.status().ToString());
  CHECK(out->size() == cfg.v_row());
  CHECK(kv.seq_len() == 1);

  const auto launches = m.mock.launches();
  REQUIRE_MESSAGE(launches.size() == 2, "rope then sdpa_gate");
  const auto& rope = launches[0];
  INFO("rope: ", rope);
  CHECK(rope.entry == "k3_mla_maybe_rope_f32");
  CHECK(rope.grid == Dim3{(cfg.heads + 127) / 128});
  CHECK(rope.block == Dim3{128});
  CHECK(rope.shared_mem == 0);
  CHECK(rope.stream == m.stream);
  REQUIRE(rope.args.size() == 8);
  CHECK(rope.args[2] == MockArg::of(cfg.heads));
  CHECK(rope.args[3] == MockArg::of(cfg.qk_nope_head_dim));
  CHECK(rope.args[4] == MockArg::of(cfg.qk_rope_head_dim));
  CHECK(rope.args[5] == MockArg::of(uint32_t{3}));
  CHECK(rope.args[6] == MockArg::of(10000.0f));
  CHECK_MESSAGE(rope.args[7] == MockArg::of(uint32_t{1}), "twin is NoPE");

  const auto& sdpa = launches[1];
  INFO("sdpa: ", sdpa);
  CHECK(sdpa.entry == "k3_mla_sdpa_gate_f32");
  CHECK(sdpa.grid == Dim3{cfg.heads});
  CHECK(sdpa.block == Dim3{32});
  CHECK(sdpa.shared_mem == 0);
  CHECK(sdpa.stream == m.stream);
  REQUIRE(sdpa.args.size() == 10);
  CHECK(sdpa.args[0] == rope.args[0]);              // the rotated q
  CHECK(sdpa.args[5] == MockArg::of(uint32_t{1}));  // seq_len
  CHECK(sdpa.args[6] == MockArg::of(cfg.heads));
  CHECK(sdpa.args[7] == MockArg::of(cfg.qk_head_dim()));
  CHECK(sdpa.args[8] == MockArg::of(cfg.v_head_dim));
  CHECK_MESSAGE(sdpa.args[9] == MockArg::of(uint32_t{1}), "twin uses output gate");

  // The step's device memory is gone once it returns.
  CHECK(m.mock.counters().live_allocations == 0);
}

TEST_CASE("k3 mla mock: the second device-resident token downloads only the output") {
  TwinMock m;
  const auto& [kernels, cfg, in] = m.twin;
  ops::MlaDeviceKv kv = alloc_kv(*m.dev, cfg, 8);
  REQUIRE(ops::mla_decode_token_on_device(*m.dev, kernels, cfg, in.at(0), kv, m.stream).ok());
  const auto before = m.mock.counters();
  auto out = ops::mla_decode_token_on_device(*m.dev, kernels, cfg, in.at(1), kv, m.stream);
  REQUIRE_MESSAGE(out.ok(), out.status().ToString());
  const auto after = m.mock.counters();
  const uint64_t pulled = after.d2h_blocking - before.d2h_blocking;
  CHECK_MESSAGE(pulled == 1, "resident MLA must not re-download KV; D2H is output only (got ",
                pulled, ")");
  CHECK(after.d2h_async == before.d2h_async);
  CHECK(after.bytes_d2h - before.bytes_d2h == cfg.v_row() * sizeof(float));
  CHECK(kv.seq_len() == 2);
  // Nothing is allocated per token, and the K/V upload is one row each.
  CHECK(after.allocations == before.allocations);
  CHECK(after.bytes_h2d - before.bytes_h2d ==
        (2 * cfg.qk_row() + 2 * cfg.v_row()) * sizeof(float));  // q, k, g, v

  // The sdpa of the second token reads the device rows, both of them.
  const auto launches = m.mock.launches();
  REQUIRE(launches.size() == 4);
  const auto& sdpa = launches[3];
  CHECK(sdpa.args[1] == MockArg::of(kv.k()));
  CHECK(sdpa.args[2] == MockArg::of(kv.v()));
  CHECK(sdpa.args[5] == MockArg::of(uint32_t{2}));
  CHECK(sdpa.stream == m.stream);
  // The rope of the second token rotates at its position.
  CHECK(launches[2].args[5] == MockArg::of(uint32_t{1}));
}

TEST_CASE("k3 mla mock: a full device KV is an error before any work") {
  TwinMock m;
  const auto& [kernels, cfg, in] = m.twin;
  ops::MlaDeviceKv kv = alloc_kv(*m.dev, cfg, 2);
  for (uint32_t pos = 0; pos < 2; ++pos)
    REQUIRE(
        ops::mla_decode_token_on_device(*m.dev, kernels, cfg, in.at(pos), kv, m.stream).ok());
  CHECK(kv.full());
  const auto before = m.mock.counters();
  auto out = ops::mla_decode_token_on_device(*m.dev, kernels, cfg, in.at(2), kv, m.stream);
  REQUIRE_FALSE(out.ok());
  CHECK(out.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(contains(out.status(), "full"));
  CHECK(kv.seq_len() == 2);
  const auto after = m.mock.counters();
  CHECK(after.launches == before.launches);
  CHECK(after.h2d_async + after.h2d_blocking == before.h2d_async + before.h2d_blocking);
  CHECK(after.d2d_async == before.d2d_async);

  SUBCASE("append says so too and writes nothing") {
    const std::vector<float> v(cfg.v_row(), 1.0f);
    const absl::Status s = kv.append(kv.scratch_k(), v, m.stream);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(m.mock.counters().d2d_async == before.d2d_async);
  }
  SUBCASE("truncate makes room again") {
    REQUIRE_OK(kv.truncate(1));
    CHECK(ops::mla_decode_token_on_device(*m.dev, kernels, cfg, in.at(1), kv, m.stream).ok());
    CHECK(kv.seq_len() == 2);
    CHECK(kv.truncate(3).code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("k3 mla mock: a failed launch leaves the device KV as it was") {
  TwinMock m;
  const auto& [kernels, cfg, in] = m.twin;
  ops::MlaDeviceKv kv = alloc_kv(*m.dev, cfg, 4);
  REQUIRE_OK(m.mock.fail_launch(2));  // the sdpa, after the append
  auto out = ops::mla_decode_token_on_device(*m.dev, kernels, cfg, in.at(0), kv, m.stream);
  REQUIRE_FALSE(out.ok());
  CHECK(out.status().code() == absl::StatusCode::kInternal);
  CHECK(kv.seq_len() == 0);

  SUBCASE("and the host KV too") {
    ops::MlaHostKv host(cfg);
    REQUIRE_OK(m.mock.fail_launch(2));
    CHECK_FALSE(ops::mla_decode_token(*m.dev, kernels, cfg, in.at(0), host, m.stream).ok());
    CHECK(host.seq_len() == 0);
    CHECK(m.mock.counters().live_allocations == 3);  // only the device KV's own memory
  }
}

TEST_CASE("k3 mla mock: the rope and sdpa launches pass their flags as u32") {
  MockDevice m;
  const auto kernels = resolve_kernels<ops::MlaDecodeKernels>(*m.dev);
  const ops::K3MlaRopeArgs r{.q = m.fake_ptr(),
                             .k = m.fake_ptr(),
                             .heads = m.u32(129, 300),
                             .nope_dim = 128,
                             .rope_dim = 64,
                             .pos = m.u32(0, 100000),
                             .theta = m.f32(1e3f, 1e6f),
                             .use_nope = false};
  REQUIRE_OK(ops::k3_mla_maybe_rope(*m.dev, kernels, r, m.stream));
  const ops::K3MlaSdpaGateArgs s{.q = m.fake_ptr(),
                                 .k = m.fake_ptr(),
                                 .v = m.fake_ptr(),
                                 .g = DevicePtr{},
                                 .out = m.fake_ptr(),
                                 .seq_len = m.u32(1, 9000),
                                 .heads = m.u32(1, 128),
                                 .dq = 192,
                                 .dv = 128,
                                 .use_gate = false};
  REQUIRE_OK(ops::k3_mla_sdpa_gate(*m.dev, kernels, s, m.stream));
  const auto launches = m.mock.launches();
  REQUIRE(launches.size() == 2);
  check_launch(launches[0], "mla_decode", "k3_mla_maybe_rope_f32", Dim3{(r.heads + 127) / 128},
               Dim3{128}, m.stream,
               {MockArg::of(r.q), MockArg::of(r.k), MockArg::of(r.heads), MockArg::of(r.nope_dim),
                MockArg::of(r.rope_dim), MockArg::of(r.pos), MockArg::of(r.theta),
                MockArg::of(uint32_t{0})});
  check_launch(launches[1], "mla_decode", "k3_mla_sdpa_gate_f32", Dim3{s.heads}, Dim3{32}, m.stream,
               {MockArg::of(s.q), MockArg::of(s.k), MockArg::of(s.v), MockArg::of(s.g),
                MockArg::of(s.out), MockArg::of(s.seq_len), MockArg::of(s.heads), MockArg::of(s.dq),
                MockArg::of(s.dv), MockArg::of(uint32_t{0})});

  SUBCASE("no heads launches nothing") {
    ops::K3MlaRopeArgs r0 = r;
    r0.heads = 0;
    ops::K3MlaSdpaGateArgs s0 = s;
    s0.heads = 0;
    REQUIRE_OK(ops::k3_mla_maybe_rope(*m.dev, kernels, r0, m.stream));
    REQUIRE_OK(ops::k3_mla_sdpa_gate(*m.dev, kernels, s0, m.stream));
    CHECK(m.mock.launch_count() == 2);
  }
  SUBCASE("bad shapes launch nothing") {
    ops::K3MlaRopeArgs odd = r;
    odd.rope_dim = 63;
    CHECK(ops::k3_mla_maybe_rope(*m.dev, kernels, odd, m.stream).code() ==
          absl::StatusCode::kInvalidArgument);
    ops::K3MlaSdpaGateArgs gate = s;
    gate.use_gate = true;  // with a null g
    const absl::Status st = ops::k3_mla_sdpa_gate(*m.dev, kernels, gate, m.stream);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(st, "g is null"));
    CHECK(m.mock.launch_count() == 2);
  }
}

TEST_CASE("k3 mla mock: wrong ranks and configurations are refused before any work") {
  TwinMock m;
  auto& [kernels, cfg, in] = m.twin;
  ops::MlaHostKv host(cfg);
  ops::MlaDeviceKv dkv = alloc_kv(*m.dev, cfg, 4);
  const auto expect_invalid = [&](const ops::MlaConfig& c, const ops::MlaTokenInputs& t,
                                  const char* text) {
    auto a = ops::mla_decode_token(*m.dev, kernels, c, t, host, m.stream);
    auto b = ops::mla_decode_token_on_device(*m.dev, kernels, c, t, dkv, m.stream);
    for (const absl::Status& s : {a.status(), b.status()}) {
      INFO(s.ToString());
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK(contains(s, text));
    }
  };
  SUBCASE("q one value short") {
    in.q.pop_back();
    expect_invalid(cfg, in.at(0), "q has");
  }
  SUBCASE("k one value long") {
    in.k.push_back(0.0f);
    expect_invalid(cfg, in.at(0), "k has");
  }
  SUBCASE("v of the wrong rank") {
    in.v.resize(cfg.heads);
    expect_invalid(cfg, in.at(0), "v has");
  }
  SUBCASE("no g with the gate on") {
    ops::MlaTokenInputs t = in.at(0);
    t.g = {};
    expect_invalid(cfg, t, "g has");
  }
  SUBCASE("odd rope dims with RoPE on") {
    ops::MlaConfig c = cfg;
    c.mla_use_nope = false;
    c.qk_rope_head_dim = 15;
    c.qk_nope_head_dim = 33;  // the same row length
    expect_invalid(c, in.at(0), "even");
  }
  SUBCASE("no heads") {
    ops::MlaConfig c = cfg;
    c.heads = 0;
    expect_invalid(c, in.at(0), "heads");
  }
  SUBCASE("caches shaped for another configuration") {
    ops::MlaConfig c = cfg;
    c.heads = 2;
    c.qk_nope_head_dim = 2 * cfg.qk_nope_head_dim;
    c.qk_rope_head_dim = 2 * cfg.qk_rope_head_dim;
    c.v_head_dim = 2 * cfg.v_head_dim;
    REQUIRE(c.qk_row() == cfg.qk_row());
    ops::MlaHostKv other(c.qk_row(), c.v_row() + 1);
    auto s = ops::mla_decode_token(*m.dev, kernels, c, in.at(0), other, m.stream);
    CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s.status(), "do not match"));
  }
  CHECK(m.mock.launch_count() == 0);
  CHECK(host.seq_len() == 0);
  CHECK(dkv.seq_len() == 0);

  SUBCASE("MlaDeviceKv::alloc refuses empty shapes") {
    for (auto [cap, k, v] : {std::tuple<size_t, size_t, size_t>{0, 4, 4}, {4, 0, 4}, {4, 4, 0}}) {
      auto kv = ops::MlaDeviceKv::alloc(*m.dev, cap, k, v);
      CHECK(kv.status().code() == absl::StatusCode::kInvalidArgument);
    }
  }
  SUBCASE("MlaDeviceKv::alloc reports running out of memory and leaks nothing") {
    const uint64_t live = m.mock.counters().live_bytes;
    REQUIRE_OK(m.mock.cap_memory(live + cfg.qk_row() * 4 * 100));
    auto kv = ops::MlaDeviceKv::alloc(*m.dev, 100, cfg.qk_row(), cfg.v_row());
    CHECK(kv.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(m.mock.counters().live_bytes == live);
  }
}

TEST_CASE("k3 mla mock: the split plan follows the device and the shape") {
  MockDevice h200;  // 132 multiprocessors
  MockDevice gb10(opstest::kGb10Properties);
  const auto& hp = h200.dev->properties();
  const auto& gp = gb10.dev->properties();
  REQUIRE(hp.multiprocessor_count == 132);
  REQUIRE(gp.multiprocessor_count == 48);
  // One warp pass covers up to 32 tokens: no split form.
  CHECK(ops::k3_mla_plan_splits(hp, 64, 192, 32) == 0);
  // dq beyond what the split kernel stages: the one-pass kernel.
  CHECK(ops::k3_mla_plan_splits(hp, 64, 1025, 8192) == 0);
  CHECK(ops::k3_mla_plan_splits(hp, 0, 192, 8192) == 0);
  // Two waves of two CTAs a multiprocessor: 4 * 132 / 64 = 8 splits on an
  // H200, 4 * 48 / 64 = 3 on a GB10; more heads than slots: 1.
  CHECK(ops::k3_mla_plan_splits(hp, 64, 192, 8192) == 8);
  CHECK(ops::k3_mla_plan_splits(hp, 64, 192, 32768) == 8);
  CHECK(ops::k3_mla_plan_splits(gp, 64, 192, 8192) == 3);
  CHECK(ops::k3_mla_plan_splits(gp, 256, 192, 8192) == 1);
  // Short contexts: at least kMinSplitTokens tokens a split.
  CHECK(ops::k3_mla_plan_splits(hp, 64, 192, 33) == 1);
  CHECK(ops::k3_mla_plan_splits(hp, 16, 192, 1024) == 1024 / ops::kMinSplitTokens);
  // Few heads: capped by the merge's limit.
  CHECK(ops::k3_mla_plan_splits(hp, 1, 192, 1 << 20) == sparkrt::contract::mla_decode::kMaxSplits);
}

TEST_CASE("k3 mla mock: past 32 tokens the device-resident step attends in the split form") {
  TwinMock m;
  const auto& [kernels, cfg, in] = m.twin;
  ops::MlaDeviceKv kv = alloc_kv(*m.dev, cfg, 64);
  REQUIRE(kv.workspace().max_splits == sparkrt::contract::mla_decode::kMaxSplits);
  for (uint32_t pos = 0; pos < 40; ++pos)
    REQUIRE(ops::mla_decode_token_on_device(*m.dev, kernels, cfg, in.at(pos), kv, m.stream).ok());
  const auto launches = m.mock.launches();
  // 32 tokens of rope + one pass, then 8 of rope + split + combine.
  REQUIRE(launches.size() == 32 * 2 + 8 * 3);
  const uint32_t splits =
      ops::k3_mla_plan_splits(m.dev->properties(), cfg.heads, cfg.qk_head_dim(), 40);
  REQUIRE(splits == 1);  // 40 tokens: one split of 8 warps per head
  const auto& split = launches[launches.size() - 2];
  const auto& combine = launches.back();
  INFO("split: ", split);
  INFO("combine: ", combine);
  CHECK(launches[63].entry == "k3_mla_sdpa_gate_f32");
  CHECK(launches[64].entry == "k3_mla_maybe_rope_f32");
  CHECK(split.entry == "k3_mla_sdpa_split_f32");
  CHECK(split.grid == Dim3{cfg.heads, splits});
  CHECK(split.block == Dim3{256});
  CHECK(split.stream == m.stream);
  REQUIRE(split.args.size() == 10);
  CHECK(split.args[0] == MockArg::of(kv.scratch_q()));
  CHECK(split.args[1] == MockArg::of(kv.k()));
  CHECK(split.args[2] == MockArg::of(kv.v()));
  CHECK(split.args[3] == MockArg::of(kv.workspace().ptr));
  CHECK(split.args[5] == MockArg::of(uint32_t{40}));
  CHECK(split.args[9] == MockArg::of(splits));
  CHECK(combine.entry == "k3_mla_sdpa_combine_f32");
  CHECK(combine.grid == Dim3{cfg.heads});
  CHECK(combine.block == Dim3{128});
  REQUIRE(combine.args.size() == 8);
  CHECK(combine.args[0] == split.args[3]);  // the partials the split wrote
  CHECK(combine.args[1] == split.args[4]);
  CHECK(combine.args[2] == MockArg::of(kv.scratch_g()));
  CHECK(combine.args[3] == MockArg::of(kv.scratch_out()));
  CHECK(combine.args[6] == MockArg::of(splits));
  CHECK(combine.args[7] == MockArg::of(uint32_t{1}));  // the twin's gate

  SUBCASE("a KV allocated by rows has no split form: one pass at every length") {
    auto rows = ops::MlaDeviceKv::alloc(*m.dev, 64, cfg.qk_row(), cfg.v_row());
    REQUIRE_OK(rows.status());
    CHECK(rows->workspace().max_splits == 0);
    REQUIRE_OK(m.mock.reset());
    for (uint32_t pos = 0; pos < 40; ++pos)
      REQUIRE(
          ops::mla_decode_token_on_device(*m.dev, kernels, cfg, in.at(pos), *rows, m.stream).ok());
    CHECK(m.mock.launches().back().entry == "k3_mla_sdpa_gate_f32");
  }
}
