// Contract tests of the kv_cache op wrappers on the
// recording mock: which kernels are looked up and in what order, and for each
// op the launch exactly as the kernel contract (docs/kernels.md) and the op's
// documented geometry say: grid, block, shared memory, stream, and every
// argument's kind and bytes. Empty work launches nothing; shapes the kernels
// cannot honour launch nothing either.
#include <random>
#include <utility>
#include <vector>

#include "ops_mock_support.h"

using namespace opstest;
using sparkrt::Dim3;
using sparkrt::testing::MockArg;
namespace ops = sparkrt::ops;

namespace {

// A fresh mock device (ops_mock_support.h) with the KV-cache kernels resolved.
struct MockFixture : MockDevice {
  ops::KvCacheKernels kernels = resolve<ops::KvCacheKernels>(*dev);
};

}  // namespace

TEST_CASE("ops mock: KvCacheKernels::resolve looks each entry up once, in order") {
  auto dev = open_device("mock");
  auto mock = MockDevice::attach(*dev);
  const ops::KvCacheKernels k = resolve<ops::KvCacheKernels>(*dev);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"kv_cache", "fill_slots_from_block_table"},
      {"kv_cache", "reshape_and_cache"},
      {"kv_cache", "reshape_and_cache_flash_v_only"},
      {"kv_cache", "reshape_and_cache_fp8"},
      {"kv_cache", "fused_k_norm_rope_cache_write_bf16"},
      {"kv_cache", "fused_k_norm_rope_cache_write_bf16_mrope"},
      {"kv_cache", "fused_k_norm_rope_cache_write_fp8"},
  };
  CHECK(mock.lookups() == expected);
  CHECK(mock.launch_count() == 0);
  CHECK(k.reshape_and_cache.entry() == "reshape_and_cache");
  CHECK(k.fused_k_norm_rope_cache_write_fp8.module() == "kv_cache");

  // Resolving again is served from the runtime's cache: no new lookups.
  resolve<ops::KvCacheKernels>(*dev);
  CHECK(mock.lookups().size() == expected.size());
}

TEST_CASE("ops mock: resolve reports the first missing kernel and stops") {
  auto dev = open_device("mock");
  auto mock = MockDevice::attach(*dev);
  REQUIRE_OK(mock.deny_lookup("kv_cache", "reshape_and_cache_fp8"));
  auto k = ops::KvCacheKernels::resolve(*dev);
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().code() == absl::StatusCode::kNotFound);
  CHECK(contains(k.status(), "reshape_and_cache_fp8"));
  const auto lookups = mock.lookups();
  REQUIRE(lookups.size() == 4);
  CHECK(lookups.back().second == "reshape_and_cache_fp8");
}

TEST_CASE("ops mock: fill_slots_from_block_table") {
  MockFixture f;
  const ops::FillSlotsArgs a{.slots = f.fake_ptr(),
                             .block_table = f.fake_ptr(),
                             .start_pos = f.u32(0, 5000),
                             .count = f.u32(257, 2000),
                             .block_size = 16};
  REQUIRE_OK(ops::fill_slots_from_block_table(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "kv_cache", "fill_slots_from_block_table",
               Dim3{(a.count + 255) / 256}, Dim3{256}, f.stream,
               {MockArg::of(a.slots), MockArg::of(a.block_table), MockArg::of(a.start_pos),
                MockArg::of(a.count), MockArg::of(a.block_size)});

  SUBCASE("count 0 launches nothing") {
    ops::FillSlotsArgs empty = a;
    empty.count = 0;
    REQUIRE_OK(ops::fill_slots_from_block_table(*f.dev, f.kernels, empty, f.stream));
    CHECK(f.mock.launch_count() == 1);
  }
  SUBCASE("block_size 0 is refused") {
    ops::FillSlotsArgs bad = a;
    bad.block_size = 0;
    const absl::Status s = ops::fill_slots_from_block_table(*f.dev, f.kernels, bad, f.stream);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, "block_size"));
    CHECK(f.mock.launch_count() == 1);
  }
}

TEST_CASE("ops mock: reshape_and_cache") {
  MockFixture f;
  const uint32_t heads = f.u32(1, 8), dim = 128;
  const ops::ReshapeAndCacheArgs a{.key = f.fake_ptr(),
                                   .value = f.fake_ptr(),
                                   .k_cache = f.fake_ptr(),
                                   .v_cache = f.fake_ptr(),
                                   .slot_mapping = f.fake_ptr(),
                                   .num_tokens = f.u32(1, 5000),
                                   .num_kv_heads = heads,
                                   .head_dim = dim,
                                   .block_size = 32,
                                   .key_stride = heads * dim * 3,  // a fused QKV row
                                   .value_stride = heads * dim + f.u32(0, 64)};
  REQUIRE_OK(ops::reshape_and_cache(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "kv_cache", "reshape_and_cache", Dim3{a.num_tokens}, Dim3{256},
               f.stream,
               {MockArg::of(a.key), MockArg::of(a.value), MockArg::of(a.k_cache),
                MockArg::of(a.v_cache), MockArg::of(a.slot_mapping), MockArg::of(a.num_kv_heads),
                MockArg::of(a.head_dim), MockArg::of(a.block_size), MockArg::of(a.key_stride),
                MockArg::of(a.value_stride)});

  SUBCASE("no tokens launches nothing") {
    ops::ReshapeAndCacheArgs empty = a;
    empty.num_tokens = 0;
    REQUIRE_OK(ops::reshape_and_cache(*f.dev, f.kernels, empty, f.stream));
    CHECK(f.mock.launch_count() == 1);
  }
  SUBCASE("a row stride shorter than a row is refused") {
    ops::ReshapeAndCacheArgs bad = a;
    bad.key_stride = heads * dim - 1;
    const absl::Status s = ops::reshape_and_cache(*f.dev, f.kernels, bad, f.stream);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, "key_stride"));
    CHECK(f.mock.launch_count() == 1);
  }
}

TEST_CASE("ops mock: reshape_and_cache_flash_v_only") {
  MockFixture f;
  const uint32_t heads = f.u32(1, 8);
  const ops::ReshapeAndCacheVOnlyArgs a{.value = f.fake_ptr(),
                                        .v_cache = f.fake_ptr(),
                                        .slot_mapping = f.fake_ptr(),
                                        .num_tokens = f.u32(1, 5000),
                                        .num_kv_heads = heads,
                                        .head_dim = 64,
                                        .block_size = 16,
                                        .value_stride = heads * 64};
  REQUIRE_OK(ops::reshape_and_cache_flash_v_only(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "kv_cache", "reshape_and_cache_flash_v_only", Dim3{a.num_tokens},
               Dim3{256}, f.stream,
               {MockArg::of(a.value), MockArg::of(a.v_cache), MockArg::of(a.slot_mapping),
                MockArg::of(a.num_kv_heads), MockArg::of(a.head_dim), MockArg::of(a.block_size),
                MockArg::of(a.value_stride)});
  ops::ReshapeAndCacheVOnlyArgs empty = a;
  empty.num_tokens = 0;
  REQUIRE_OK(ops::reshape_and_cache_flash_v_only(*f.dev, f.kernels, empty, f.stream));
  CHECK(f.mock.launch_count() == 1);
}

TEST_CASE("ops mock: reshape_and_cache_fp8") {
  MockFixture f;
  const uint32_t heads = f.u32(1, 8), dim = 256, block = 16;
  const ops::ReshapeAndCacheFp8Args a{
      .key = f.fake_ptr(),
      .value = f.fake_ptr(),
      .k_cache = f.fake_ptr(),
      .v_cache = f.fake_ptr(),
      .slot_mapping = f.fake_ptr(),
      .num_tokens = f.u32(1, 5000),
      .num_kv_heads = heads,
      .head_dim = dim,
      .block_size = block,
      .k_scale = f.f32(0.01f, 2.0f),
      .v_scale = f.f32(0.01f, 2.0f),
      .key_stride = heads * dim,
      .value_stride = heads * dim * 2,
      .cache_stride = uint64_t{block} * heads * dim + f.u32(0, 4096)};
  REQUIRE_OK(ops::reshape_and_cache_fp8(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "kv_cache", "reshape_and_cache_fp8", Dim3{a.num_tokens},
               Dim3{256}, f.stream,
               {MockArg::of(a.key), MockArg::of(a.value), MockArg::of(a.k_cache),
                MockArg::of(a.v_cache), MockArg::of(a.slot_mapping), MockArg::of(a.num_kv_heads),
                MockArg::of(a.head_dim), MockArg::of(a.block_size), MockArg::of(a.k_scale),
                MockArg::of(a.v_scale), MockArg::of(a.key_stride), MockArg::of(a.value_stride),
                MockArg::of(a.cache_stride)});

  SUBCASE("no tokens launches nothing") {
    ops::ReshapeAndCacheFp8Args empty = a;
    empty.num_tokens = 0;
    REQUIRE_OK(ops::reshape_and_cache_fp8(*f.dev, f.kernels, empty, f.stream));
    CHECK(f.mock.launch_count() == 1);
  }
  SUBCASE("a cache stride below one block is refused") {
    ops::ReshapeAndCacheFp8Args bad = a;
    bad.cache_stride = uint64_t{block} * heads * dim - 1;
    const absl::Status s = ops::reshape_and_cache_fp8(*f.dev, f.kernels, bad, f.stream);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, "cache_stride"));
    CHECK(f.mock.launch_count() == 1);
  }
  SUBCASE("a zero scale is refused") {
    ops::ReshapeAndCacheFp8Args bad = a;
    bad.v_scale = 0.0f;
    const absl::Status s = ops::reshape_and_cache_fp8(*f.dev, f.kernels, bad, f.stream);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, "v_scale"));
    CHECK(f.mock.launch_count() == 1);
  }
}

TEST_CASE("ops mock: fused_k_norm_rope_cache_write_bf16") {
  MockFixture f;
  for (uint32_t dim : {64u, 128u, 256u}) {
    CAPTURE(dim);
    REQUIRE_OK(f.mock.reset());
    const ops::FusedKNormRopeArgs a{.k_in = f.fake_ptr(),
                                    .k_norm_weight = f.fake_ptr(),
                                    .positions = f.fake_ptr(),
                                    .k_cache = f.fake_ptr(),
                                    .slot_mapping = f.fake_ptr(),
                                    .num_tokens = f.u32(1, 5000),
                                    .num_kv_heads = f.u32(1, 16),
                                    .head_dim = dim,
                                    .rotary_dim = dim / 2,
                                    .block_size = 16,
                                    .rms_eps = f.f32(1e-6f, 1e-5f),
                                    .theta = f.f32(1e4f, 1e6f)};
    REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16(*f.dev, f.kernels, a, f.stream));
    check_launch(f.only_launch(), "kv_cache", "fused_k_norm_rope_cache_write_bf16",
                 Dim3{a.num_tokens, a.num_kv_heads}, Dim3{dim}, f.stream,
                 {MockArg::of(a.k_in), MockArg::of(a.k_norm_weight), MockArg::of(a.positions),
                  MockArg::of(a.k_cache), MockArg::of(a.slot_mapping),
                  MockArg::of(a.num_kv_heads), MockArg::of(a.head_dim),
                  MockArg::of(a.rotary_dim), MockArg::of(a.block_size), MockArg::of(a.rms_eps),
                  MockArg::of(a.theta)});
    ops::FusedKNormRopeArgs empty = a;
    empty.num_tokens = 0;
    REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16(*f.dev, f.kernels, empty, f.stream));
    CHECK(f.mock.launch_count() == 1);
    ops::FusedKNormRopeArgs odd = a;
    odd.rotary_dim = dim / 2 + 1;
    const absl::Status s =
        ops::fused_k_norm_rope_cache_write_bf16(*f.dev, f.kernels, odd, f.stream);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, "rotary_dim"));
    CHECK(f.mock.launch_count() == 1);
  }
}

TEST_CASE("ops mock: fused_k_norm_rope_cache_write_bf16_mrope") {
  MockFixture f;
  const ops::FusedKNormRopeMropeArgs a{.k_in = f.fake_ptr(),
                                       .k_norm_weight = f.fake_ptr(),
                                       .pos_t = f.fake_ptr(),
                                       .pos_h = f.fake_ptr(),
                                       .pos_w = f.fake_ptr(),
                                       .k_cache = f.fake_ptr(),
                                       .slot_mapping = f.fake_ptr(),
                                       .num_tokens = f.u32(1, 5000),
                                       .num_kv_heads = f.u32(1, 16),
                                       .head_dim = 128,
                                       .rotary_dim = 128,
                                       .block_size = 32,
                                       .rms_eps = 1e-6f,
                                       .theta = 1e6f};
  REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16_mrope(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "kv_cache", "fused_k_norm_rope_cache_write_bf16_mrope",
               Dim3{a.num_tokens, a.num_kv_heads}, Dim3{128}, f.stream,
               {MockArg::of(a.k_in), MockArg::of(a.k_norm_weight), MockArg::of(a.pos_t),
                MockArg::of(a.pos_h), MockArg::of(a.pos_w), MockArg::of(a.k_cache),
                MockArg::of(a.slot_mapping), MockArg::of(a.num_kv_heads), MockArg::of(a.head_dim),
                MockArg::of(a.rotary_dim), MockArg::of(a.block_size), MockArg::of(a.rms_eps),
                MockArg::of(a.theta)});
  ops::FusedKNormRopeMropeArgs empty = a;
  empty.num_tokens = 0;
  REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16_mrope(*f.dev, f.kernels, empty, f.stream));
  CHECK(f.mock.launch_count() == 1);
}

TEST_CASE("ops mock: fused_k_norm_rope_cache_write_fp8") {
  MockFixture f;
  const ops::FusedKNormRopeFp8Args a{.k_in = f.fake_ptr(),
                                     .k_norm_weight = f.fake_ptr(),
                                     .positions = f.fake_ptr(),
                                     .k_cache = f.fake_ptr(),
                                     .slot_mapping = f.fake_ptr(),
                                     .num_tokens = f.u32(1, 5000),
                                     .num_kv_heads = f.u32(1, 16),
                                     .head_dim = 256,
                                     .rotary_dim = 64,
                                     .block_size = 16,
                                     .rms_eps = 1e-6f,
                                     .theta = 1e4f,
                                     .inv_scale = f.f32(0.5f, 50.0f)};
  REQUIRE_OK(ops::fused_k_norm_rope_cache_write_fp8(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "kv_cache", "fused_k_norm_rope_cache_write_fp8",
               Dim3{a.num_tokens, a.num_kv_heads}, Dim3{256}, f.stream,
               {MockArg::of(a.k_in), MockArg::of(a.k_norm_weight), MockArg::of(a.positions),
                MockArg::of(a.k_cache), MockArg::of(a.slot_mapping), MockArg::of(a.num_kv_heads),
                MockArg::of(a.head_dim), MockArg::of(a.rotary_dim), MockArg::of(a.block_size),
                MockArg::of(a.rms_eps), MockArg::of(a.theta), MockArg::of(a.inv_scale)});
  ops::FusedKNormRopeFp8Args empty = a;
  empty.num_tokens = 0;
  REQUIRE_OK(ops::fused_k_norm_rope_cache_write_fp8(*f.dev, f.kernels, empty, f.stream));
  CHECK(f.mock.launch_count() == 1);
}

TEST_CASE("ops mock: dependent launches are off for PTX modules, and on every launch when set") {
  MockFixture f;
  // The mock loads PTX (or, built without nvcc, signatures), never a cubin,
  // whose entries alone carry the dependent-launch wait.
  CHECK(f.kernels.fill_slots_from_block_table.image_format() != SPARKRT_IMAGE_CUBIN);
  CHECK(f.dev->properties().supports_dependent_launch);
  CHECK_FALSE(f.kernels.dependent_launch);
  const uint32_t heads = f.u32(1, 8), dim = 128, tokens = f.u32(1, 300);
  const auto cache_write = [&] {
    return ops::FusedKNormRopeArgs{.k_in = f.fake_ptr(), .k_norm_weight = f.fake_ptr(),
                                   .positions = f.fake_ptr(), .k_cache = f.fake_ptr(),
                                   .slot_mapping = f.fake_ptr(), .num_tokens = tokens,
                                   .num_kv_heads = heads, .head_dim = dim, .rotary_dim = dim,
                                   .block_size = 16, .rms_eps = 1e-6f, .theta = 1e4f};
  };
  for (const bool dependent : {true, false}) {
    CAPTURE(dependent);
    REQUIRE_OK(f.mock.reset());
    f.kernels.dependent_launch = dependent;
    REQUIRE_OK(ops::fill_slots_from_block_table(
        *f.dev, f.kernels,
        {.slots = f.fake_ptr(), .block_table = f.fake_ptr(), .count = tokens, .block_size = 16},
        f.stream));
    REQUIRE_OK(ops::reshape_and_cache(
        *f.dev, f.kernels,
        {.key = f.fake_ptr(), .value = f.fake_ptr(), .k_cache = f.fake_ptr(),
         .v_cache = f.fake_ptr(), .slot_mapping = f.fake_ptr(), .num_tokens = tokens,
         .num_kv_heads = heads, .head_dim = dim, .block_size = 16, .key_stride = heads * dim,
         .value_stride = heads * dim},
        f.stream));
    REQUIRE_OK(ops::reshape_and_cache_flash_v_only(
        *f.dev, f.kernels,
        {.value = f.fake_ptr(), .v_cache = f.fake_ptr(), .slot_mapping = f.fake_ptr(),
         .num_tokens = tokens, .num_kv_heads = heads, .head_dim = dim, .block_size = 16,
         .value_stride = heads * dim},
        f.stream));
    REQUIRE_OK(ops::reshape_and_cache_fp8(
        *f.dev, f.kernels,
        {.key = f.fake_ptr(), .value = f.fake_ptr(), .k_cache = f.fake_ptr(),
         .v_cache = f.fake_ptr(), .slot_mapping = f.fake_ptr(), .num_tokens = tokens,
         .num_kv_heads = heads, .head_dim = dim, .block_size = 16, .k_scale = 0.5f,
         .v_scale = 0.5f, .key_stride = heads * dim, .value_stride = heads * dim,
         .cache_stride = uint64_t{16} * heads * dim},
        f.stream));
    REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16(*f.dev, f.kernels, cache_write(), f.stream));
    const ops::FusedKNormRopeArgs k = cache_write();
    REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16_mrope(
        *f.dev, f.kernels,
        {.k_in = k.k_in, .k_norm_weight = k.k_norm_weight, .pos_t = k.positions,
         .pos_h = k.positions, .pos_w = k.positions, .k_cache = k.k_cache,
         .slot_mapping = k.slot_mapping, .num_tokens = tokens, .num_kv_heads = heads,
         .head_dim = dim, .rotary_dim = dim, .block_size = 16, .rms_eps = 1e-6f, .theta = 1e4f},
        f.stream));
    REQUIRE_OK(ops::fused_k_norm_rope_cache_write_fp8(
        *f.dev, f.kernels,
        {.k_in = k.k_in, .k_norm_weight = k.k_norm_weight, .positions = k.positions,
         .k_cache = k.k_cache, .slot_mapping = k.slot_mapping, .num_tokens = tokens,
         .num_kv_heads = heads, .head_dim = dim, .rotary_dim = dim, .block_size = 16,
         .rms_eps = 1e-6f, .theta = 1e4f, .inv_scale = 2.0f},
        f.stream));
    const auto launches = f.mock.launches();
    REQUIRE(launches.size() == 7);
    for (const auto& l : launches) {
      INFO("recorded: ", l);
      CHECK(l.dependent_launch == dependent);
    }
  }
}
