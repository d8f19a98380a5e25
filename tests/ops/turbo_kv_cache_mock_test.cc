// Contract tests of the turbo_kv_cache op wrappers on the recording mock: the
// lookups, the layout helper's strides (the format's own examples), each
// write's and the rotation's launch exactly as the contract says, nothing
// launched for empty work, and the shapes the format cannot hold refused
// before anything is launched.
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ops_mock_support.h"
#include "sparkrt/ops/turbo_kv_cache.h"

using namespace opstest;
using sparkrt::Dim3;
using sparkrt::testing::MockArg;
namespace ops = sparkrt::ops;

namespace {

struct Fixture : MockDevice {
  ops::TurboKvCacheKernels kernels = resolve<ops::TurboKvCacheKernels>(*dev);
};

using WriteOp = absl::Status (*)(sparkrt::Device&, const ops::TurboKvCacheKernels&,
                                 const ops::ReshapeAndCacheTurboArgs&, sparkrt::Stream);
struct Variant {
  uint32_t bits;
  WriteOp op;
  const char* entry;
};
const Variant kVariants[] = {
    {2, ops::reshape_and_cache_bf16k_turbo2v, "reshape_and_cache_flash_bf16k_turbo2v"},
    {3, ops::reshape_and_cache_bf16k_turbo3v, "reshape_and_cache_flash_bf16k_turbo3v"},
    {4, ops::reshape_and_cache_bf16k_turbo4v, "reshape_and_cache_flash_bf16k_turbo4v"},
};

}  // namespace

TEST_CASE("ops mock: TurboKvCacheKernels::resolve looks each entry up once, in order") {
  Fixture f;
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"turbo_kv_cache", "reshape_and_cache_flash_bf16k_turbo2v"},
      {"turbo_kv_cache", "reshape_and_cache_flash_bf16k_turbo3v"},
      {"turbo_kv_cache", "reshape_and_cache_flash_bf16k_turbo4v"},
      {"turbo_kv_cache", "hadamard_transform_bf16"},
  };
  CHECK(f.mock.lookups() == expected);
  CHECK(f.mock.launch_count() == 0);
}

TEST_CASE("turbo_cache_layout: the format's strides, and shapes it cannot hold") {
  // block_size 16, 8 KV heads, head_dim 128: K 32768 bytes, V 9216 / 7168 / 5120.
  const uint64_t v_stride[] = {5120, 7168, 9216};
  for (uint32_t bits : {2u, 3u, 4u}) {
    auto l = ops::turbo_cache_layout(bits, 16, 8, 128);
    REQUIRE_OK(l.status());
    CHECK(l->bits == bits);
    CHECK(l->k_block_stride_bytes == 32768);
    CHECK(l->v_data_section_bytes == uint64_t{16} * 8 * 128 * bits / 8);
    CHECK(l->v_block_stride_bytes == v_stride[bits - 2]);
  }
  // An odd shape: 3 heads of 48 dims, blocks of 5 tokens, 3 bits.
  auto odd = ops::turbo_cache_layout(3, 5, 3, 48);
  REQUIRE_OK(odd.status());
  CHECK(odd->v_data_section_bytes == 5 * 3 * 48 * 3 / 8);
  CHECK(odd->v_block_stride_bytes == 5 * 3 * 48 * 3 / 8 + 5 * 3 * 48 / 16);
  for (auto [bits, block, heads, dim, what] :
       {std::tuple{1u, 16u, 8u, 128u, "bits"}, std::tuple{5u, 16u, 8u, 128u, "bits"},
        std::tuple{4u, 16u, 8u, 120u, "multiple of 16"}, std::tuple{4u, 0u, 8u, 128u, "block_size"},
        std::tuple{4u, 16u, 0u, 128u, "num_kv_heads"}, std::tuple{4u, 16u, 8u, 0u, "head_dim"}}) {
    auto l = ops::turbo_cache_layout(bits, block, heads, dim);
    CHECK(l.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(l.status(), what));
  }
}

TEST_CASE("ops mock: reshape_and_cache_bf16k_turbo{2,3,4}v") {
  for (const Variant& v : kVariants) {
    CAPTURE(v.bits);
    Fixture f;
    const uint32_t heads = f.u32(1, 8), dim = 16 * f.u32(1, 16), block = f.u32(1, 64);
    auto lay = ops::turbo_cache_layout(v.bits, block, heads, dim);
    REQUIRE_OK(lay.status());
    const ops::ReshapeAndCacheTurboArgs a{.key = f.fake_ptr(),
                                          .value = f.fake_ptr(),
                                          .k_cache = f.fake_ptr(),
                                          .v_cache = f.fake_ptr(),
                                          .slot_mapping = f.fake_ptr(),
                                          .num_tokens = f.u32(1, 5000),
                                          .num_kv_heads = heads,
                                          .head_dim = dim,
                                          .block_size = block,
                                          .key_stride = heads * dim * 3,
                                          .value_stride = heads * dim + f.u32(0, 64),
                                          .k_block_stride_bytes = lay->k_block_stride_bytes + 64,
                                          .v_block_stride_bytes = lay->v_block_stride_bytes,
                                          .v_data_section_bytes = lay->v_data_section_bytes};
    REQUIRE_OK(v.op(*f.dev, f.kernels, a, f.stream));
    check_launch(f.only_launch(), "turbo_kv_cache", v.entry, Dim3{a.num_tokens}, Dim3{256},
                 f.stream,
                 {MockArg::of(a.key), MockArg::of(a.value), MockArg::of(a.k_cache),
                  MockArg::of(a.v_cache), MockArg::of(a.slot_mapping),
                  MockArg::of(a.num_kv_heads), MockArg::of(a.head_dim),
                  MockArg::of(a.block_size), MockArg::of(a.key_stride),
                  MockArg::of(a.value_stride), MockArg::of(a.k_block_stride_bytes),
                  MockArg::of(a.v_block_stride_bytes), MockArg::of(a.v_data_section_bytes)});

    ops::ReshapeAndCacheTurboArgs empty = a;
    empty.num_tokens = 0;
    REQUIRE_OK(v.op(*f.dev, f.kernels, empty, f.stream));
    CHECK(f.mock.launch_count() == 1);

    struct Bad {
      const char* what;
      void (*edit)(ops::ReshapeAndCacheTurboArgs&);
    };
    const Bad bad[] = {
        {"multiple of 16", [](ops::ReshapeAndCacheTurboArgs& b) { b.head_dim += 8; }},
        {"value_stride", [](ops::ReshapeAndCacheTurboArgs& b) { b.value_stride = 1; }},
        {"key_stride", [](ops::ReshapeAndCacheTurboArgs& b) { b.key_stride = 1; }},
        {"k_block_stride_bytes", [](ops::ReshapeAndCacheTurboArgs& b) { b.k_block_stride_bytes -= 66; }},
        {"k_block_stride_bytes", [](ops::ReshapeAndCacheTurboArgs& b) { b.k_block_stride_bytes += 1; }},
        {"v_block_stride_bytes", [](ops::ReshapeAndCacheTurboArgs& b) { b.v_block_stride_bytes -= 1; }},
        {"v_data_section_bytes", [](ops::ReshapeAndCacheTurboArgs& b) { b.v_data_section_bytes -= 1; }},
        {"block_size", [](ops::ReshapeAndCacheTurboArgs& b) { b.block_size = 0; }},
    };
    for (const Bad& b : bad) {
      CAPTURE(b.what);
      ops::ReshapeAndCacheTurboArgs x = a;
      b.edit(x);
      const absl::Status s = v.op(*f.dev, f.kernels, x, f.stream);
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK(contains(s, b.what));
      CHECK(contains(s, v.entry));
      CHECK(f.mock.launch_count() == 1);
    }
  }
}

TEST_CASE("ops mock: hadamard_transform_bf16") {
  Fixture f;
  const uint32_t heads = f.u32(1, 16), dim = 64u << f.u32(0, 3);
  const ops::HadamardArgs a{.in = f.fake_ptr(),
                            .out = f.fake_ptr(),
                            .num_tokens = f.u32(1, 4000),
                            .num_heads = heads,
                            .head_dim = dim,
                            .in_stride = heads * dim + f.u32(0, 100),
                            .out_stride = heads * dim};
  REQUIRE_OK(ops::hadamard_transform_bf16(*f.dev, f.kernels, a, f.stream));
  check_launch(f.only_launch(), "turbo_kv_cache", "hadamard_transform_bf16",
               Dim3{a.num_tokens, heads}, Dim3{256}, f.stream,
               {MockArg::of(a.in), MockArg::of(a.out), MockArg::of(a.head_dim),
                MockArg::of(a.in_stride), MockArg::of(a.out_stride)});
  ops::HadamardArgs empty = a;
  empty.num_tokens = 0;
  REQUIRE_OK(ops::hadamard_transform_bf16(*f.dev, f.kernels, empty, f.stream));
  empty = a;
  empty.num_heads = 0;
  REQUIRE_OK(ops::hadamard_transform_bf16(*f.dev, f.kernels, empty, f.stream));
  CHECK(f.mock.launch_count() == 1);
  for (uint32_t d : {32u, 96u, 1024u, 0u}) {
    ops::HadamardArgs bad = a;
    bad.head_dim = d;
    bad.in_stride = bad.out_stride = heads * 1024;
    const absl::Status s = ops::hadamard_transform_bf16(*f.dev, f.kernels, bad, f.stream);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, "power of two"));
  }
  ops::HadamardArgs in_place = a;
  in_place.out = in_place.in;
  in_place.in_stride = in_place.out_stride + 1;
  const absl::Status s = ops::hadamard_transform_bf16(*f.dev, f.kernels, in_place, f.stream);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(contains(s, "in place"));
  CHECK(f.mock.launch_count() == 1);
}
