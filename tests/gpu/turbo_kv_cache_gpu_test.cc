// The TurboQuant cache writes and the rotation on a GPU backend (cuda, or vulkan with
// --backend=vulkan) against the cpu backend's references, which share the format's quantizer
// (sparkrt/contract/turbo_kv_cache.h): every K and V byte, the scales included, must match bit for
// bit, and so must the rotation (the same f32 butterflies and one bf16 rounding). Pools poisoned
// (0xff) on both first, negative slots, padded K blocks and row strides, values off the fast path.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <random>
#include <vector>

#include "gpu_test_support.h"
#include "sparkrt/ops/turbo_kv_cache.h"
#include "sparkrt/sparkrt.h"

namespace sparkrt {
namespace {

namespace ops = sparkrt::ops;
using namespace gpu_test;
using numeric::bf16_bits;

using Side = OpSide<ops::TurboKvCacheKernels>;
using Pair = DevicePair<Side>;
Pair& pair() { return op_pair<ops::TurboKvCacheKernels>(); }

// Values the quantizer must treat as the contract says, off its fast path:
// zeros, signed zeros, subnormals, the tiniest and largest normals,
// infinities and NaN.
const bf16_bits kSpecialValues[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x0080, 0x8080, 0x0d00,
                                    0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x1000, 0x6f00};

// A tenth of the values replaced by special ones, and every fifth 16-value
// group of the first token made all zero (absmax 0).
void sprinkle_special(std::vector<bf16_bits>& v, std::mt19937_64& gen) {
  std::uniform_int_distribution<size_t> pick(0, std::size(kSpecialValues) - 1);
  for (bf16_bits& x : v)
    if (gen() % 10 == 0) x = kSpecialValues[pick(gen)];
  for (size_t g = 0; g + 16 <= std::min<size_t>(v.size(), 4096); g += 80)
    std::fill(v.begin() + g, v.begin() + g + 16, bf16_bits{0});
}

TEST_CASE("turbo cache writes match the reference bit for bit") {
  Pair& p = pair();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  struct Shape {
    uint32_t tokens, kv_heads, dim, block_size, stride_pad;
    bool special;  // values off the fast path mixed in
  };
  for (uint32_t bits : {2u, 3u, 4u})
    for (const Shape& c :
         {Shape{1, 1, 64, 16, 0, false}, Shape{257, 8, 128, 16, 8, false},
          Shape{1000, 4, 256, 32, 0, false}, Shape{77, 3, 48, 5, 3, false},
          Shape{300, 8, 128, 16, 0, true}, Shape{33, 3, 48, 5, 3, true}}) {
      INFO(bits << "-bit, tokens " << c.tokens << " kv_heads " << c.kv_heads << " head_dim "
                << c.dim << " block_size " << c.block_size << " special values " << c.special);
      const uint32_t row = c.kv_heads * c.dim, stride = row + c.stride_pad;
      const uint32_t blocks = (c.tokens + c.block_size - 1) / c.block_size + 3;
      auto lay = ops::turbo_cache_layout(bits, c.block_size, c.kv_heads, c.dim);
      REQUIRE_OK(lay.status());
      const uint64_t k_block = lay->k_block_stride_bytes + 32;  // padded K blocks
      BufferPair key(p, random_bf16(gen, size_t{c.tokens} * stride));
      auto values = random_bf16(gen, size_t{c.tokens} * stride, 0.001f, 3.0f);
      if (c.special) sprinkle_special(values, gen);
      BufferPair value(p, values);
      BufferPair slots(p, random_slots(gen, c.tokens, blocks, c.block_size));
      BufferPair kc(p, blocks * k_block), vc(p, blocks * lay->v_block_stride_bytes);
      kc.poison();
      vc.poison();
      for (int side = 0; side < 2; ++side) {
        Side& s = p.side(side);
        const ops::ReshapeAndCacheTurboArgs a{
            .key = key.on(side), .value = value.on(side), .k_cache = kc.on(side),
            .v_cache = vc.on(side), .slot_mapping = slots.on(side), .num_tokens = c.tokens,
            .num_kv_heads = c.kv_heads, .head_dim = c.dim, .block_size = c.block_size,
            .key_stride = stride, .value_stride = stride, .k_block_stride_bytes = k_block,
            .v_block_stride_bytes = lay->v_block_stride_bytes,
            .v_data_section_bytes = lay->v_data_section_bytes};
        REQUIRE_OK(bits == 2   ? ops::reshape_and_cache_bf16k_turbo2v(*s.dev, s.k, a)
                   : bits == 3 ? ops::reshape_and_cache_bf16k_turbo3v(*s.dev, s.k, a)
                               : ops::reshape_and_cache_bf16k_turbo4v(*s.dev, s.k, a));
      }
      check_bitwise<uint8_t>(kc, "k_cache");
      check_bitwise<uint8_t>(vc, "v_cache");
    }
}

TEST_CASE("hadamard_transform_bf16 matches the reference bit for bit, in place too") {
  Pair& p = pair();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (uint32_t d : {64u, 128u, 256u, 512u}) {
    INFO("head_dim " << d);
    const uint32_t tokens = 300, heads = 8, stride = heads * d + 24;
    BufferPair in(p, random_bf16(gen, size_t{tokens} * stride)), out(p, size_t{tokens} * stride * 2);
    out.poison();
    for (int side = 0; side < 2; ++side) {
      Side& s = p.side(side);
      REQUIRE_OK(ops::hadamard_transform_bf16(
          *s.dev, s.k,
          {.in = in.on(side), .out = out.on(side), .num_tokens = tokens, .num_heads = heads,
           .head_dim = d, .in_stride = stride, .out_stride = stride}));
      // And back, in place.
      REQUIRE_OK(ops::hadamard_transform_bf16(
          *s.dev, s.k,
          {.in = in.on(side), .out = in.on(side), .num_tokens = tokens, .num_heads = heads,
           .head_dim = d, .in_stride = stride, .out_stride = stride}));
    }
    check_bitwise<uint16_t>(out, "out");
    check_bitwise<uint16_t>(in, "in place");
  }
}

}  // namespace
}  // namespace sparkrt
