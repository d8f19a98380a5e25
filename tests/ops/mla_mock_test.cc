// Contract tests of the mla op wrappers on the recording mock: the lookups in
// order, and for each op the launch exactly as docs/kernels.md ("Module
// mla") says: grid, block, shared memory, stream, every argument's kind and
// bytes in the kernel's order. Empty work and shapes the kernels cannot
// honour launch nothing.
#include <string>
#include <utility>
#include <vector>

#include "mla_test_support.h"
#include "sparkrt/ops/mla.h"

using namespace mlatest;
using opstest::contains;
using opstest::kGb10Properties;
using sparkrt::DevicePtr;
using sparkrt::Dim3;
using sparkrt::testing::MockArg;
namespace ops = sparkrt::ops;

namespace {

struct MlaMock : MockDevice {
  explicit MlaMock(const char* properties = nullptr) : MockDevice(properties) {}
  ops::MlaKernels kernels = resolve_kernels<ops::MlaKernels>(*dev);
  // `s` is InvalidArgument naming `text`, and nothing more was launched.
  void refused(const absl::Status& s, const char* text, size_t launches_before) const {
    INFO(s.ToString());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, text));
    CHECK(mock.launch_count() == launches_before);
  }
};

// Random values for the arguments both decode ops share, q to inv_sqrt_d.
template <typename Args>
Args random_decode_args(MlaMock& f, uint32_t block_size, uint32_t q_head_dim) {
  Args a{};
  a.q = f.fake_ptr();
  a.k_cache = f.fake_ptr();
  a.v_cache = f.fake_ptr();
  a.o = f.fake_ptr();
  a.block_tables = f.fake_ptr();
  a.seq_lens = f.fake_ptr();
  a.max_blocks_per_seq = f.u32(1, 512);
  a.num_q_heads = f.u32(1, 128);
  a.num_kv_heads = 1;
  a.q_head_dim = q_head_dim;
  a.kv_cache_dim = 576;
  a.block_size = block_size;
  a.inv_sqrt_d = f.f32(0.01f, 0.2f);
  a.num_seqs = f.u32(1, 16);
  return a;
}

// The kernel arguments those fields become, in order, with `outputs` in
// place of o, followed by `rest`.
template <typename Args>
std::vector<MockArg> decode_launch_args(const Args& a, const std::vector<MockArg>& rest,
                                        const std::vector<MockArg>& outputs) {
  std::vector<MockArg> args = {MockArg::of(a.q), MockArg::of(a.k_cache), MockArg::of(a.v_cache)};
  args.insert(args.end(), outputs.begin(), outputs.end());
  args.insert(
      args.end(),
      {MockArg::of(a.block_tables), MockArg::of(a.seq_lens), MockArg::of(a.max_blocks_per_seq),
       MockArg::of(a.num_q_heads), MockArg::of(a.num_kv_heads), MockArg::of(a.q_head_dim),
       MockArg::of(a.kv_cache_dim), MockArg::of(a.block_size), MockArg::of(a.inv_sqrt_d)});
  args.insert(args.end(), rest.begin(), rest.end());
  return args;
}
template <typename Args>
std::vector<MockArg> decode_launch_args(const Args& a, const std::vector<MockArg>& rest) {
  return decode_launch_args(a, rest, {MockArg::of(a.o)});
}

}  // namespace

TEST_CASE("mla mock: MlaKernels::resolve looks each entry up once, in order") {
  MockDevice m;
  const ops::MlaKernels k = resolve_kernels<ops::MlaKernels>(*m.dev);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"mla", "mla_batched_gemv"},       {"mla", "mla_q_rope_scatter"},
      {"mla", "mla_q_rope_writeback"},   {"mla", "mla_cache_assemble"},
      {"mla", "mla_paged_decode_nvfp4"}, {"mla", "mla_paged_decode_nvfp4_split"},
      {"mla", "mla_paged_decode_fp8"},   {"mla", "mla_paged_decode_fp8_split"},
      {"mla", "mla_decode_combine"},
  };
  CHECK(m.mock.lookups() == expected);
  CHECK(k.mla_paged_decode_fp8.entry() == "mla_paged_decode_fp8");
  resolve_kernels<ops::MlaKernels>(*m.dev);
  CHECK(m.mock.lookups().size() == expected.size());

  SUBCASE("the first missing entry stops the lookups") {
    MockDevice m2;
    REQUIRE_OK(m2.mock.deny_lookup("mla", "mla_cache_assemble"));
    auto r = ops::MlaKernels::resolve(*m2.dev);
    CHECK(r.status().code() == absl::StatusCode::kNotFound);
    CHECK(contains(r.status(), "mla_cache_assemble"));
    CHECK(m2.mock.lookups().size() == 4);
  }
}

TEST_CASE("mla mock: mla_batched_gemv") {
  MlaMock f;
  const uint32_t n_out = f.u32(9, 600), k = f.u32(1, 512);
  const ops::MlaBatchedGemvArgs a{.input = f.fake_ptr(),
                                  .weight = f.fake_ptr(),
                                  .output = f.fake_ptr(),
                                  .n_out = n_out,
                                  .k = k,
                                  .num_heads = f.u32(1, 128),
                                  .input_stride = k + f.u32(0, 64),
                                  .output_stride = n_out + f.u32(0, 64)};
  REQUIRE_OK(ops::mla_batched_gemv(*f.dev, f.kernels, a, f.stream));
  check_launch(
      f.only_launch(), "mla", "mla_batched_gemv", Dim3{(n_out + 7) / 8, a.num_heads}, Dim3{256},
      f.stream,
      {MockArg::of(a.input), MockArg::of(a.weight), MockArg::of(a.output), MockArg::of(a.n_out),
       MockArg::of(a.k), MockArg::of(a.input_stride), MockArg::of(a.output_stride)});

  SUBCASE("no outputs or no heads launch nothing") {
    ops::MlaBatchedGemvArgs e = a;
    e.n_out = 0;
    REQUIRE_OK(ops::mla_batched_gemv(*f.dev, f.kernels, e, f.stream));
    e = a;
    e.num_heads = 0;
    REQUIRE_OK(ops::mla_batched_gemv(*f.dev, f.kernels, e, f.stream));
    CHECK(f.mock.launch_count() == 1);
  }
  SUBCASE("strides shorter than a head are refused") {
    ops::MlaBatchedGemvArgs b = a;
    b.input_stride = a.k - 1;
    f.refused(ops::mla_batched_gemv(*f.dev, f.kernels, b, f.stream), "input_stride", 1);
    b = a;
    b.output_stride = a.n_out - 1;
    f.refused(ops::mla_batched_gemv(*f.dev, f.kernels, b, f.stream), "output_stride", 1);
    b = a;
    b.k = 0;
    f.refused(ops::mla_batched_gemv(*f.dev, f.kernels, b, f.stream), "k must be > 0", 1);
  }
}

TEST_CASE("mla mock: mla_q_rope_scatter and mla_q_rope_writeback") {
  MlaMock f;
  const ops::MlaQRopeScatterArgs s{.q_full = f.fake_ptr(),
                                   .q_absorbed_buf = f.fake_ptr(),
                                   .q_rope_contiguous = f.fake_ptr(),
                                   .nq = f.u32(1, 128),
                                   .hd = 192,
                                   .nope = 128,
                                   .rope = 64,
                                   .kv_lora = 512,
                                   .mla_cache_dim = 576};
  REQUIRE_OK(ops::mla_q_rope_scatter(*f.dev, f.kernels, s, f.stream));
  check_launch(
      f.only_launch(), "mla", "mla_q_rope_scatter", Dim3{1}, Dim3{256}, f.stream,
      {MockArg::of(s.q_full), MockArg::of(s.q_absorbed_buf), MockArg::of(s.q_rope_contiguous),
       MockArg::of(s.nq), MockArg::of(s.hd), MockArg::of(s.nope), MockArg::of(s.rope),
       MockArg::of(s.kv_lora), MockArg::of(s.mla_cache_dim)});

  const ops::MlaQRopeWritebackArgs w{.q_rope_direct = f.fake_ptr(),
                                     .q_absorbed_buf = s.q_absorbed_buf,
                                     .nq = s.nq,
                                     .rope = 64,
                                     .kv_lora = 512,
                                     .mla_cache_dim = 576};
  REQUIRE_OK(ops::mla_q_rope_writeback(*f.dev, f.kernels, w, f.stream));
  const auto launches = f.mock.launches();
  REQUIRE(launches.size() == 2);
  check_launch(launches[1], "mla", "mla_q_rope_writeback", Dim3{1}, Dim3{256}, f.stream,
               {MockArg::of(w.q_rope_direct), MockArg::of(w.q_absorbed_buf), MockArg::of(w.nq),
                MockArg::of(w.rope), MockArg::of(w.kv_lora), MockArg::of(w.mla_cache_dim)});

  SUBCASE("nothing to copy launches nothing") {
    ops::MlaQRopeScatterArgs e = s;
    e.rope = 0;
    REQUIRE_OK(ops::mla_q_rope_scatter(*f.dev, f.kernels, e, f.stream));
    ops::MlaQRopeWritebackArgs ew = w;
    ew.nq = 0;
    REQUIRE_OK(ops::mla_q_rope_writeback(*f.dev, f.kernels, ew, f.stream));
    CHECK(f.mock.launch_count() == 2);
  }
  SUBCASE("a rope part outside its row is refused") {
    ops::MlaQRopeScatterArgs b = s;
    b.hd = 191;
    f.refused(ops::mla_q_rope_scatter(*f.dev, f.kernels, b, f.stream), "exceeds hd", 2);
    b = s;
    b.kv_lora = 513;
    f.refused(ops::mla_q_rope_scatter(*f.dev, f.kernels, b, f.stream), "mla_cache_dim", 2);
    ops::MlaQRopeWritebackArgs bw = w;
    bw.mla_cache_dim = 575;
    f.refused(ops::mla_q_rope_writeback(*f.dev, f.kernels, bw, f.stream), "mla_cache_dim", 2);
  }
}

TEST_CASE("mla mock: mla_cache_assemble") {
  MlaMock f;
  const ops::MlaCacheAssembleArgs a{.kv_latent = f.fake_ptr(),
                                    .k_rope = f.fake_ptr(),
                                    .k_cache = f.fake_ptr(),
                                    .v_cache = f.fake_ptr(),
                                    .kv_lora = 512,
                                    .rope = 64,
                                    .mla_cache_dim = 576};
  REQUIRE_OK(ops::mla_cache_assemble(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "mla", "mla_cache_assemble", Dim3{1}, Dim3{576}, f.stream,
               {MockArg::of(a.kv_latent), MockArg::of(a.k_rope), MockArg::of(a.k_cache),
                MockArg::of(a.v_cache), MockArg::of(a.kv_lora), MockArg::of(a.rope),
                MockArg::of(a.mla_cache_dim)});

  SUBCASE("a small row still gets 256 threads") {
    ops::MlaCacheAssembleArgs small = a;
    small.kv_lora = 64;
    small.rope = 16;
    small.mla_cache_dim = 96;
    REQUIRE_OK(ops::mla_cache_assemble(*f.dev, f.kernels, small, f.stream));
    CHECK(f.mock.launches().back().block == Dim3{256});
  }
  SUBCASE("rows beyond a block of threads or with no room for rope are refused") {
    ops::MlaCacheAssembleArgs b = a;
    b.mla_cache_dim = f.dev->properties().max_threads_per_block + 1;
    f.refused(ops::mla_cache_assemble(*f.dev, f.kernels, b, f.stream), "threads per block", 1);
    b = a;
    b.rope = 65;
    f.refused(ops::mla_cache_assemble(*f.dev, f.kernels, b, f.stream), "exceeds mla_cache_dim", 1);
  }
}

// The scalars after inv_sqrt_d of the one-pass fp8 entry.
std::vector<MockArg> fp8_tail(const ops::MlaPagedDecodeFp8Args& a) {
  return {MockArg::of(a.k_scale),        MockArg::of(a.v_scale), MockArg::of(a.cache_stride),
          MockArg::of(a.sliding_window), MockArg::of(a.sinks),   MockArg::of(a.comp_pool),
          MockArg::of(a.comp_block_count)};
}

ops::MlaPagedDecodeFp8Args random_fp8_args(MlaMock& f) {
  const uint32_t block_size = 64;
  auto a = random_decode_args<ops::MlaPagedDecodeFp8Args>(f, block_size, 576);
  a.k_scale = f.f32(0.01f, 1.0f);
  a.v_scale = f.f32(0.01f, 1.0f);
  a.cache_stride = uint64_t{block_size} * 576 + f.u32(0, 4) * 64;
  a.sliding_window = f.u32(0, 4096);
  a.sinks = f.fake_ptr();
  a.comp_pool = f.fake_ptr();
  a.comp_block_count = f.u32(1, 64);
  return a;
}

// Shared memory of the tiled launch for the MLA row (576 values): 21184
// bytes per team of consumer warps and 64 of q scales, then per stage 64 rows
// of 592 bytes (+ 528 for a separate V row) and 96 bytes of token flags and
// barriers. On the default (H200-like) device, 227 KB: two teams and as many
// stages as fit, at most 4 (2 with a separate V pool).
constexpr uint32_t kTiledSharedV = 2 * 21184 + 64 + 4 * (64 * 592 + 96);
constexpr uint32_t kTiledSeparateV = 2 * 21184 + 64 + 2 * (64 * (592 + 528) + 96);
static_assert(kTiledSharedV <= 232448);
// The per-head geometry's scratch: q as f32 (1024 values) and 64 scores.
constexpr uint32_t kPerHeadShared = 4 * (1024 + 64);

TEST_CASE("mla mock: mla_paged_decode_fp8, tiled: 16 query heads of one KV head per CTA") {
  MlaMock f;
  auto a = random_fp8_args(f);
  a.num_seqs = f.u32(9, 16);  // enough CTAs that the op does not split
  uint32_t shared_mem = kTiledSeparateV;
  SUBCASE("sinks and compressed pool given, separate V pool") {}
  SUBCASE("no sinks, no compressed pool, V is K") {
    a.sinks = DevicePtr{};
    a.comp_pool = DevicePtr{};
    a.comp_block_count = 0;
    a.v_cache = a.k_cache;
    shared_mem = kTiledSharedV;
  }
  SUBCASE("grouped KV heads: ceil(group / 16) CTAs per KV head") {
    a.num_kv_heads = 4;
    a.num_q_heads = 4 * f.u32(1, 40);
    a.cache_stride *= 4;
  }
  SUBCASE("a workspace but a single pass asked for") {
    a.num_seqs = 1;
    a.workspace = f.fake_ptr();
    a.workspace_bytes = ops::mla_decode_workspace_bytes(1, a.num_q_heads);
    a.num_splits = 1;
  }
  const uint32_t group = a.num_q_heads / a.num_kv_heads;
  REQUIRE_OK(ops::mla_paged_decode_fp8(*f.dev, f.kernels, a, f.stream));
  // 8 consumer warps and the 2 warps that stage the tiles.
  check_launch(f.only_launch(), "mla", "mla_paged_decode_fp8",
               Dim3{a.num_kv_heads * ((group + 15) / 16), a.num_seqs}, Dim3{320}, f.stream,
               decode_launch_args(a, fp8_tail(a)), shared_mem);
  const auto plan = ops::plan_mla_paged_decode_fp8(*f.dev, a);
  REQUIRE_OK(plan.status());
  CHECK(plan->tiled);
  CHECK(plan->block == Dim3{320});
  CHECK(plan->shared_mem == shared_mem);
}

TEST_CASE("mla mock: mla_paged_decode_fp8 on a GB10-like device: one team, 2 stages in 99 KB") {
  MlaMock f(kGb10Properties);
  auto a = random_fp8_args(f);
  a.num_seqs = f.u32(9, 16);
  // Two teams need 116 KB even with 2 stages; one team with 2 (95 KB) fits.
  a.v_cache = a.k_cache;
  REQUIRE_OK(ops::mla_paged_decode_fp8(*f.dev, f.kernels, a, f.stream));
  constexpr uint32_t kTwoStages = 21184 + 64 + 2 * (64 * 592 + 96);
  const uint32_t group = a.num_q_heads / a.num_kv_heads;
  check_launch(f.only_launch(), "mla", "mla_paged_decode_fp8",
               Dim3{a.num_kv_heads * ((group + 15) / 16), a.num_seqs}, Dim3{320}, f.stream,
               decode_launch_args(a, fp8_tail(a)), kTwoStages);
  // A separate V pool needs 2 x 70 KB: no tiled geometry fits, one CTA per head.
  REQUIRE_OK(f.mock.reset());
  a.v_cache = f.fake_ptr();
  REQUIRE_OK(ops::mla_paged_decode_fp8(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "mla", "mla_paged_decode_fp8", Dim3{a.num_q_heads, a.num_seqs},
               Dim3{256}, f.stream, decode_launch_args(a, fp8_tail(a)), kPerHeadShared);
  // Splits need the tiled kernel: refused, naming the shared memory and the way out.
  a.workspace = f.fake_ptr();
  a.workspace_bytes = ops::mla_decode_workspace_bytes(a.num_seqs, a.num_q_heads);
  a.num_splits = 2;
  const size_t before = f.mock.launch_count();
  const absl::Status s = ops::mla_paged_decode_fp8(*f.dev, f.kernels, a, f.stream);
  f.refused(s, "needs 164800 bytes of shared memory per block for a separate V pool", before);
  CHECK(contains(s, "allows 101376"));
  CHECK(contains(s, "v_cache = k_cache"));
}

TEST_CASE("mla mock: mla_paged_decode_fp8 takes the stages shared memory holds, at most 4") {
  // Shared V: a stage is 37984 bytes; two teams take 42432 bytes, one team 21248.
  constexpr uint32_t kStage = 64 * 592 + 96;
  struct Case {
    uint32_t optin, shared_mem;
  };
  for (const Case& c : {Case{232448, 42432 + 4 * kStage},  // H200: capped at 4 stages
                        Case{200000, 42432 + 4 * kStage}, Case{194367, 42432 + 3 * kStage},
                        Case{160000, 42432 + 3 * kStage}, Case{118400, 42432 + 2 * kStage},
                        Case{118399, 21248 + 2 * kStage},  // two teams no longer fit
                        Case{101376, 21248 + 2 * kStage}}) {
    INFO("optin " << c.optin);
    const std::string props = "max_shared_memory_per_block_optin=" + std::to_string(c.optin);
    MlaMock f(props.c_str());
    auto a = random_fp8_args(f);
    a.num_seqs = f.u32(9, 16);
    a.v_cache = a.k_cache;
    const auto plan = ops::plan_mla_paged_decode_fp8(*f.dev, a);
    REQUIRE_OK(plan.status());
    CHECK(plan->tiled);
    CHECK(plan->shared_mem == c.shared_mem);
  }
}

TEST_CASE("mla mock: mla_paged_decode_fp8, one CTA per head for shapes the tiles do not take") {
  MlaMock f;
  auto a = random_fp8_args(f);
  SUBCASE("kv_cache_dim above 576") {
    a.kv_cache_dim = a.q_head_dim = 1024;
    a.cache_stride = 64 * 1024;
  }
  SUBCASE("kv_cache_dim not a multiple of 16") {
    a.kv_cache_dim = a.q_head_dim = 200;
    a.cache_stride = 64 * 200;
  }
  SUBCASE("kv_cache_dim below 576") {
    a.kv_cache_dim = a.q_head_dim = 512;
    a.cache_stride = 64 * 512;
  }
  SUBCASE("q_head_dim not a multiple of 16") { a.q_head_dim = 568; }
  SUBCASE("cache_stride not a multiple of 16") { a.cache_stride = 64 * 576 + 8; }
  SUBCASE("an unaligned cache") { a.k_cache = a.k_cache + 8; }
  SUBCASE("an unaligned output") { a.o = a.o + 2; }
  a.workspace = f.fake_ptr();  // never used by this geometry
  a.workspace_bytes = ops::mla_decode_workspace_bytes(a.num_seqs, a.num_q_heads, a.kv_cache_dim);
  REQUIRE_OK(ops::mla_paged_decode_fp8(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "mla", "mla_paged_decode_fp8", Dim3{a.num_q_heads, a.num_seqs},
               Dim3{256}, f.stream, decode_launch_args(a, fp8_tail(a)), kPerHeadShared);
  const auto plan = ops::plan_mla_paged_decode_fp8(*f.dev, a);
  REQUIRE_OK(plan.status());
  CHECK_FALSE(plan->tiled);
  CHECK(plan->block == Dim3{256});
  CHECK(plan->shared_mem == kPerHeadShared);
}

TEST_CASE("mla mock: mla_paged_decode_fp8, split-KV then combine") {
  MlaMock f;
  auto a = random_fp8_args(f);
  a.v_cache = a.k_cache;
  a.num_q_heads = 16;
  a.num_seqs = 1;
  a.max_blocks_per_seq = 64;  // 4096 tokens: 64 tiles
  a.sliding_window = 0;
  a.comp_pool = DevicePtr{};
  a.comp_block_count = 0;
  a.workspace = f.fake_ptr();
  a.workspace_bytes = ops::mla_decode_workspace_bytes(1, 16);
  uint32_t splits = 32;  // 132 multiprocessors, one CTA: 2 tiles a split
  SUBCASE("the op's choice") {}
  SUBCASE("a window bounds the split count") {
    a.sliding_window = 1000;  // 15 tiles: 7 splits
    splits = 7;
  }
  SUBCASE("a workspace for 5 splits") {
    a.workspace_bytes = ops::mla_decode_workspace_bytes(1, 16, 576, 5);
    splits = 5;
  }
  SUBCASE("forced") {
    a.num_splits = splits = f.u32(2, 64);
  }
  REQUIRE_OK(ops::mla_paged_decode_fp8(*f.dev, f.kernels, a, f.stream));
  const auto launches = f.mock.launches();
  REQUIRE(launches.size() == 2);
  const uint32_t dv = 512;
  const DevicePtr part_acc = a.workspace;
  const DevicePtr part_ml = a.workspace + (uint64_t{16} * splits * dv * 4 + 255) / 256 * 256;
  check_launch(launches[0], "mla", "mla_paged_decode_fp8_split", Dim3{1, 1, splits}, Dim3{320},
               f.stream,
               decode_launch_args(a,
                                  {MockArg::of(a.k_scale), MockArg::of(a.v_scale),
                                   MockArg::of(a.cache_stride), MockArg::of(a.sliding_window),
                                   MockArg::of(a.comp_pool), MockArg::of(a.comp_block_count)},
                                  {MockArg::of(part_acc), MockArg::of(part_ml)}),
               kTiledSharedV);
  check_launch(launches[1], "mla", "mla_decode_combine", Dim3{16, 1}, Dim3{256}, f.stream,
               {MockArg::of(part_acc), MockArg::of(part_ml), MockArg::of(a.o), MockArg::of(a.sinks),
                MockArg::of(a.num_q_heads), MockArg::of(dv), MockArg::of(splits)});
}

TEST_CASE("mla mock: mla_paged_decode_fp8 refuses what the kernel cannot run") {
  MlaMock f;
  const ops::MlaPagedDecodeFp8Args a{.q = f.fake_ptr(),
                                     .k_cache = f.fake_ptr(),
                                     .v_cache = f.fake_ptr(),
                                     .o = f.fake_ptr(),
                                     .block_tables = f.fake_ptr(),
                                     .seq_lens = f.fake_ptr(),
                                     .max_blocks_per_seq = 8,
                                     .num_q_heads = 16,
                                     .num_kv_heads = 1,
                                     .block_size = 16,
                                     .inv_sqrt_d = 0.07f,
                                     .cache_stride = 16 * 576,
                                     .num_seqs = 2};
  REQUIRE_OK(ops::mla_paged_decode_fp8(*f.dev, f.kernels, a, f.stream));
  const auto bad = [&](auto change, const char* text) {
    ops::MlaPagedDecodeFp8Args b = a;
    change(b);
    f.refused(ops::mla_paged_decode_fp8(*f.dev, f.kernels, b, f.stream), text, 1);
  };
  bad([](auto& b) { b.q_head_dim = 577; }, "q_head_dim 577 must be <= kv_cache_dim");
  bad([](auto& b) { b.q_head_dim = 0; }, "q_head_dim must be > 0");
  bad([](auto& b) { b.kv_cache_dim = b.q_head_dim = 64; }, "kv_cache_dim 64");
  bad([](auto& b) { b.kv_cache_dim = 1040; }, "kv_cache_dim 1040");
  bad(
      [](auto& b) {
        b.num_q_heads = 15;
        b.num_kv_heads = 2;
      },
      "multiple of num_kv_heads");
  bad([](auto& b) { b.block_size = 0; }, "block_size");
  bad([](auto& b) { b.cache_stride = 16 * 576 - 1; }, "cache_stride");
  bad([](auto& b) { b.k_scale = 0.0f; }, "k_scale");
  bad([](auto& b) { b.v_scale = -1.0f; }, "v_scale");
  bad([](auto& b) { b.comp_block_count = 3; }, "needs a comp_pool");
  bad([](auto& b) { b.num_splits = 2; }, "num_splits 2 needs a 16-byte aligned workspace");
  bad(
      [&](auto& b) {
        b.workspace = f.fake_ptr();
        b.workspace_bytes = ops::mla_decode_workspace_bytes(2, 16, 576, 3);
        b.num_splits = 4;
      },
      "mla_decode_workspace_bytes");
  bad(
      [&](auto& b) {
        b.workspace = f.fake_ptr();
        b.workspace_bytes = ops::mla_decode_workspace_bytes(2, 16, 576, 80);
        b.num_splits = 65;
      },
      "num_splits 65 is above");
  bad(
      [&](auto& b) {
        b.workspace = f.fake_ptr();
        b.workspace_bytes = ops::mla_decode_workspace_bytes(2, 16);
        b.cache_stride = 16 * 576 + 4;
        b.num_splits = 2;
      },
      "needs the tiled kernel");

  SUBCASE("no sequences launches nothing") {
    ops::MlaPagedDecodeFp8Args e = a;
    e.num_seqs = 0;
    e.block_size = 0;  // not even looked at
    REQUIRE_OK(ops::mla_paged_decode_fp8(*f.dev, f.kernels, e, f.stream));
    CHECK(f.mock.launch_count() == 1);
  }
}

// The scalars after inv_sqrt_d of both NVFP4 entries.
std::vector<MockArg> nvfp4_tail(const ops::MlaPagedDecodeNvfp4Args& a) {
  return {MockArg::of(a.block_stride_bytes), MockArg::of(a.data_section_bytes)};
}

// NVFP4 decode arguments over the MLA row with packed blocks of 64 tokens:
// the shape the tiled kernel takes.
ops::MlaPagedDecodeNvfp4Args random_nvfp4_args(MlaMock& f, uint32_t num_kv_heads = 1) {
  const uint32_t block_size = 64;
  auto a = random_decode_args<ops::MlaPagedDecodeNvfp4Args>(f, block_size, 576);
  a.num_kv_heads = num_kv_heads;
  a.num_q_heads = num_kv_heads * f.u32(1, 40);
  const ops::MlaNvfp4BlockLayout layout =
      ops::mla_nvfp4_block_layout(block_size, num_kv_heads, 576);
  a.data_section_bytes = layout.data_section_bytes;
  a.block_stride_bytes = layout.block_stride_bytes + 16 * f.u32(0, 4);
  return a;
}

// Shared memory of the tiled NVFP4 launch: the fixed part as for fp8, then
// per stage 64 K rows of 288 bytes with 15 * 32 bytes of skew, 64 * 36 K
// scale bytes (a separate V pool: 64 rows of 256 bytes, skew, 64 * 36 scale
// bytes), 96 bytes of flags and barriers. The one-pass entry's 4352 bytes of
// static scratch count against the device's limit.
constexpr uint32_t kNvStageSharedV = 64 * 288 + 480 + 64 * 36 + 96;
constexpr uint32_t kNvStageSeparateV = kNvStageSharedV + 64 * 256 + 480 + 64 * 36;
static_assert(kNvStageSharedV == 21312 && kNvStageSeparateV == 40480);
constexpr uint32_t kNvTiledSharedV = 2 * 21184 + 64 + 4 * kNvStageSharedV;
constexpr uint32_t kNvTiledSeparateV = 2 * 21184 + 64 + 4 * kNvStageSeparateV;
static_assert(kNvTiledSeparateV + kPerHeadShared <= 232448);

TEST_CASE("mla mock: mla_nvfp4_block_layout packs 16-byte aligned sections") {
  MlaMock f;
  const uint32_t block_size = f.u32(1, 128);
  const ops::MlaNvfp4BlockLayout layout = ops::mla_nvfp4_block_layout(block_size);
  CHECK(layout.data_section_bytes == uint64_t{block_size} * 576 / 2);
  CHECK(layout.block_stride_bytes % 16 == 0);
  CHECK(layout.block_stride_bytes >= layout.data_section_bytes + uint64_t{block_size} * 576 / 16);
  CHECK(layout.block_stride_bytes <
        layout.data_section_bytes + uint64_t{block_size} * 576 / 16 + 16);
}

TEST_CASE("mla mock: mla_paged_decode_nvfp4, tiled: 16 query heads of one KV head per CTA") {
  MlaMock f;
  auto a = random_nvfp4_args(f);
  a.num_seqs = f.u32(9, 16);  // enough CTAs that the op does not split
  uint32_t shared_mem = kNvTiledSeparateV;
  SUBCASE("separate V pool: 4 stages fit as well") {}
  SUBCASE("V is K") {
    a.v_cache = a.k_cache;
    shared_mem = kNvTiledSharedV;
  }
  SUBCASE("grouped KV heads: ceil(group / 16) CTAs per KV head") { a = random_nvfp4_args(f, 4); }
  SUBCASE("latent-only scores") { a.q_head_dim = 512; }
  SUBCASE("a workspace but a single pass asked for") {
    a.num_seqs = 1;
    a.workspace = f.fake_ptr();
    a.workspace_bytes = ops::mla_decode_workspace_bytes(1, a.num_q_heads);
    a.num_splits = 1;
  }
  const uint32_t group = a.num_q_heads / a.num_kv_heads;
  REQUIRE_OK(ops::mla_paged_decode_nvfp4(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "mla", "mla_paged_decode_nvfp4",
               Dim3{a.num_kv_heads * ((group + 15) / 16), a.num_seqs}, Dim3{320}, f.stream,
               decode_launch_args(a, nvfp4_tail(a)), shared_mem);
  const auto plan = ops::plan_mla_paged_decode_nvfp4(*f.dev, a);
  REQUIRE_OK(plan.status());
  CHECK(plan->tiled);
  CHECK(plan->block == Dim3{320});
  CHECK(plan->shared_mem == shared_mem);
  CHECK(plan->num_splits == 1);
}

TEST_CASE("mla mock: mla_paged_decode_nvfp4 on a GB10-like device: two teams, 2 stages") {
  MlaMock f(kGb10Properties);
  auto a = random_nvfp4_args(f);
  a.num_seqs = f.u32(9, 16);
  // 101376 bytes less the static 4352: two teams with 2 stages (85056) fit.
  a.v_cache = a.k_cache;
  REQUIRE_OK(ops::mla_paged_decode_nvfp4(*f.dev, f.kernels, a, f.stream));
  constexpr uint32_t kTwoStages = 2 * 21184 + 64 + 2 * kNvStageSharedV;
  static_assert(kTwoStages + kPerHeadShared <= 101376);
  const uint32_t group = a.num_q_heads / a.num_kv_heads;
  check_launch(f.only_launch(), "mla", "mla_paged_decode_nvfp4",
               Dim3{a.num_kv_heads * ((group + 15) / 16), a.num_seqs}, Dim3{320}, f.stream,
               decode_launch_args(a, nvfp4_tail(a)), kTwoStages);
  // A separate V pool needs 21248 + 2 * 40480 bytes and the scratch: per head.
  REQUIRE_OK(f.mock.reset());
  a.v_cache = f.fake_ptr();
  REQUIRE_OK(ops::mla_paged_decode_nvfp4(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "mla", "mla_paged_decode_nvfp4", Dim3{a.num_q_heads, a.num_seqs},
               Dim3{256}, f.stream, decode_launch_args(a, nvfp4_tail(a)));
  // Splits need the tiled kernel: refused, naming the shared memory and the way out.
  a.workspace = f.fake_ptr();
  a.workspace_bytes = ops::mla_decode_workspace_bytes(a.num_seqs, a.num_q_heads);
  a.num_splits = 2;
  const size_t before = f.mock.launch_count();
  const absl::Status s = ops::mla_paged_decode_nvfp4(*f.dev, f.kernels, a, f.stream);
  f.refused(s, "needs 106560 bytes of shared memory per block for a separate V pool", before);
  CHECK(contains(s, "allows 101376"));
  CHECK(contains(s, "v_cache = k_cache"));
}

TEST_CASE("mla mock: mla_paged_decode_nvfp4 takes the stages shared memory holds, at most 4") {
  // V is K: a stage is 21312 bytes; two teams take 42432 bytes, one team
  // 21248, the entry's static scratch 4352.
  constexpr uint32_t kStage = kNvStageSharedV, kStatic = kPerHeadShared;
  struct Case {
    uint32_t optin, shared_mem;  // 0: per head
  };
  for (const Case& c : {Case{232448, 42432 + 4 * kStage},  // H200: capped at 4 stages
                        Case{42432 + 4 * kStage + kStatic, 42432 + 4 * kStage},
                        Case{42432 + 4 * kStage + kStatic - 1, 42432 + 3 * kStage},
                        Case{42432 + 2 * kStage + kStatic, 42432 + 2 * kStage},
                        Case{42432 + 2 * kStage + kStatic - 1, 21248 + 2 * kStage},
                        Case{21248 + 2 * kStage + kStatic, 21248 + 2 * kStage},
                        Case{21248 + 2 * kStage + kStatic - 1, 0}}) {
    INFO("optin " << c.optin);
    const std::string props = "max_shared_memory_per_block_optin=" + std::to_string(c.optin);
    MlaMock f(props.c_str());
    auto a = random_nvfp4_args(f);
    a.num_seqs = f.u32(9, 16);
    a.v_cache = a.k_cache;
    const auto plan = ops::plan_mla_paged_decode_nvfp4(*f.dev, a);
    REQUIRE_OK(plan.status());
    CHECK(plan->tiled == (c.shared_mem != 0));
    CHECK(plan->shared_mem == c.shared_mem);
    CHECK(plan->block == Dim3{c.shared_mem != 0 ? 320u : 256u});
  }
}

TEST_CASE("mla mock: mla_paged_decode_nvfp4, one CTA per head for shapes the tiles do not take") {
  MlaMock f;
  const uint32_t block_size = f.u32(1, 128);
  auto a = random_decode_args<ops::MlaPagedDecodeNvfp4Args>(f, block_size, 512);
  const auto packed = [&](uint32_t heads, uint32_t dim) {
    const auto layout = ops::mla_nvfp4_block_layout(block_size, heads, dim);
    a.data_section_bytes = layout.data_section_bytes;
    a.block_stride_bytes = layout.block_stride_bytes + 256;
  };
  packed(1, 576);
  SUBCASE("kv_cache_dim above 576") {
    a.kv_cache_dim = a.q_head_dim = 1024;
    packed(1, 1024);
  }
  SUBCASE("kv_cache_dim below 576") {
    a.kv_cache_dim = a.q_head_dim = 128;
    packed(1, 128);
  }
  SUBCASE("q_head_dim not a multiple of 16") { a.q_head_dim = 568; }
  SUBCASE("block_stride_bytes not a multiple of 16") { a.block_stride_bytes += 8; }
  SUBCASE("data_section_bytes not a multiple of 4") {
    a.data_section_bytes += 2;
    a.block_stride_bytes += 16;
  }
  SUBCASE("an unaligned cache") { a.v_cache = a.v_cache + 8; }
  SUBCASE("an unaligned output") { a.o = a.o + 2; }
  a.workspace = f.fake_ptr();  // never used by this geometry
  a.workspace_bytes = ops::mla_decode_workspace_bytes(a.num_seqs, a.num_q_heads, a.kv_cache_dim);
  REQUIRE_OK(ops::mla_paged_decode_nvfp4(*f.dev, f.kernels, a, f.stream));
  // The per-head scratch is the entry's static shared memory: none at launch.
  check_launch(f.only_launch(), "mla", "mla_paged_decode_nvfp4", Dim3{a.num_q_heads, a.num_seqs},
               Dim3{256}, f.stream, decode_launch_args(a, nvfp4_tail(a)));
  const auto plan = ops::plan_mla_paged_decode_nvfp4(*f.dev, a);
  REQUIRE_OK(plan.status());
  CHECK_FALSE(plan->tiled);
  CHECK(plan->block == Dim3{256});
  CHECK(plan->shared_mem == 0);
}

TEST_CASE("mla mock: mla_paged_decode_nvfp4, split-KV then combine") {
  MlaMock f;
  auto a = random_nvfp4_args(f);
  a.v_cache = a.k_cache;
  a.num_q_heads = 16;
  a.num_seqs = 1;
  a.max_blocks_per_seq = 64;  // 4096 tokens: 64 tiles
  a.workspace = f.fake_ptr();
  a.workspace_bytes = ops::mla_decode_workspace_bytes(1, 16);
  uint32_t splits = 32;  // 132 multiprocessors, one CTA: 2 tiles a split
  uint32_t shared_mem = kNvTiledSharedV;
  SUBCASE("the op's choice") {}
  SUBCASE("short block tables bound the split count") {
    a.max_blocks_per_seq = 15;  // 960 tokens: 15 tiles, 7 splits
    splits = 7;
  }
  SUBCASE("a workspace for 5 splits") {
    a.workspace_bytes = ops::mla_decode_workspace_bytes(1, 16, 576, 5);
    splits = 5;
  }
  SUBCASE("forced") { a.num_splits = splits = f.u32(2, 64); }
  SUBCASE("separate V pool") {
    a.v_cache = f.fake_ptr();
    shared_mem = kNvTiledSeparateV;
  }
  SUBCASE("a batch of 8: 66 slots each, 16 splits by length") {
    a.num_seqs = 8;
    a.max_blocks_per_seq = 32;  // 2048 tokens: 16 tiles of 2
    a.workspace_bytes = ops::mla_decode_workspace_bytes(8, 16);
    splits = 16;
  }
  REQUIRE_OK(ops::mla_paged_decode_nvfp4(*f.dev, f.kernels, a, f.stream));
  const auto launches = f.mock.launches();
  REQUIRE(launches.size() == 2);
  const uint32_t dv = 512;
  const DevicePtr part_acc = a.workspace;
  const DevicePtr part_ml =
      a.workspace + (uint64_t{a.num_seqs} * 16 * splits * dv * 4 + 255) / 256 * 256;
  check_launch(launches[0], "mla", "mla_paged_decode_nvfp4_split", Dim3{1, a.num_seqs, splits},
               Dim3{320}, f.stream,
               decode_launch_args(a, nvfp4_tail(a), {MockArg::of(part_acc), MockArg::of(part_ml)}),
               shared_mem);
  check_launch(launches[1], "mla", "mla_decode_combine", Dim3{16, a.num_seqs}, Dim3{256}, f.stream,
               {MockArg::of(part_acc), MockArg::of(part_ml), MockArg::of(a.o),
                MockArg::of(DevicePtr{}), MockArg::of(a.num_q_heads), MockArg::of(dv),
                MockArg::of(splits)});
  const auto plan = ops::plan_mla_paged_decode_nvfp4(*f.dev, a);
  REQUIRE_OK(plan.status());
  CHECK(plan->num_splits == splits);
  CHECK(plan->grid == Dim3{1, a.num_seqs, splits});
}

TEST_CASE("mla mock: mla_paged_decode_nvfp4 refuses what the kernels cannot run") {
  MlaMock f;
  const uint32_t block_size = f.u32(1, 128);
  const ops::MlaNvfp4BlockLayout layout = ops::mla_nvfp4_block_layout(block_size);
  auto a = random_decode_args<ops::MlaPagedDecodeNvfp4Args>(f, block_size, 512);
  a.block_stride_bytes = layout.block_stride_bytes + 256;
  a.data_section_bytes = layout.data_section_bytes;
  REQUIRE_OK(ops::mla_paged_decode_nvfp4(*f.dev, f.kernels, a, f.stream));
  REQUIRE(f.mock.launch_count() == 1);
  const auto bad = [&](auto change, const char* text) {
    ops::MlaPagedDecodeNvfp4Args b = a;
    change(b);
    f.refused(ops::mla_paged_decode_nvfp4(*f.dev, f.kernels, b, f.stream), text, 1);
  };
  bad([&](auto& b) { b.data_section_bytes = layout.data_section_bytes - 1; },
      "data_section_bytes");
  bad([&](auto& b) { b.block_stride_bytes = b.data_section_bytes + uint64_t{block_size} * 36 - 1; },
      "block_stride_bytes");
  bad([](auto& b) { b.kv_cache_dim = 584; }, "multiple of 16");
  bad([](auto& b) { b.q_head_dim = 577; }, "q_head_dim 577 must be <= kv_cache_dim");
  bad([](auto& b) { b.block_size = 0; }, "block_size");
  bad([](auto& b) { b.num_splits = 2; }, "num_splits 2 needs a 16-byte aligned workspace");
  bad(
      [&](auto& b) {
        b.workspace = f.fake_ptr() + 8;
        b.workspace_bytes = ops::mla_decode_workspace_bytes(b.num_seqs, b.num_q_heads);
        b.num_splits = 2;
      },
      "16-byte aligned workspace");
  bad(
      [&](auto& b) {
        b.workspace = f.fake_ptr();
        b.workspace_bytes = ops::mla_decode_workspace_bytes(b.num_seqs, b.num_q_heads, 576, 3);
        b.num_splits = 4;
      },
      "mla_decode_workspace_bytes");
  bad(
      [&](auto& b) {
        b.workspace = f.fake_ptr();
        b.workspace_bytes = ops::mla_decode_workspace_bytes(b.num_seqs, b.num_q_heads, 576, 80);
        b.num_splits = 65;
      },
      "num_splits 65 is above");
  bad(
      [&](auto& b) {
        b.workspace = f.fake_ptr();
        b.workspace_bytes = ops::mla_decode_workspace_bytes(b.num_seqs, b.num_q_heads);
        b.data_section_bytes += 2;
        b.block_stride_bytes += 16;
        b.num_splits = 2;
      },
      "needs the tiled kernel");

  SUBCASE("no sequences launches nothing") {
    ops::MlaPagedDecodeNvfp4Args e = a;
    e.num_seqs = 0;
    e.block_size = 0;  // not even looked at
    REQUIRE_OK(ops::mla_paged_decode_nvfp4(*f.dev, f.kernels, e, f.stream));
    CHECK(f.mock.launch_count() == 1);
  }
}
