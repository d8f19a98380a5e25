// The KV-cache write ops on a GPU backend (cuda, or vulkan with --backend=vulkan) against the cpu
// backend, which runs the reference implementations (the oracle). Both
// devices get the same random, non-zero inputs; every output buffer is
// poisoned (0xff: bf16 and fp8 NaN) on both before the op runs, so an
// element the GPU fails to write, or writes where it should not, shows up.
// The op wrappers are the same calls on both backends. Tolerances are those
// of docs/kernels.md ("Tolerances").
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
#include "sparkrt/ops/kv_cache.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/verify/tolerances.h"

namespace sparkrt {
namespace {

namespace ops = sparkrt::ops;
namespace vs_cpu = verify::gpu_vs_reference;  // docs/kernels.md, "Tolerances"
using numeric::bf16_bits;
using numeric::fp8_bits;
using namespace gpu_test;

using Side = OpSide<ops::KvCacheKernels>;
using Pair = DevicePair<Side>;
Pair& pair() { return op_pair<ops::KvCacheKernels>(); }

TEST_CASE("fill_slots_from_block_table matches the reference") {
  Pair& p = pair();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (uint32_t block_size : {16u, 32u, 7u}) {
    const uint32_t start = 37, count = 3000;
    std::vector<int32_t> table(((start + count) + block_size - 1) / block_size + 1);
    for (auto& b : table) b = int32_t(gen() % 100000);
    BufferPair t(p, table), slots(p, size_t{count} * 8);
    slots.poison();
    for (int side = 0; side < 2; ++side) {
      Side& s = side == 0 ? p.gpu : p.cpu;
      REQUIRE_OK(ops::fill_slots_from_block_table(
          *s.dev, s.k, {.slots = slots.on(side), .block_table = t.on(side), .start_pos = start,
                        .count = count, .block_size = block_size}));
    }
    check_bitwise<int64_t>(slots, "slots");
  }
}

struct CopyShape {
  uint32_t tokens, kv_heads, dim, block_size, stride_pad;
};
// stride_pad 8 keeps rows 16-byte aligned (vector path); 3 does not (scalar).
// Rows of 4096 values take a CTA's threads more than once.
const CopyShape kCopyShapes[] = {
    {300, 8, 128, 16, 0}, {257, 1, 64, 32, 8}, {129, 4, 256, 16, 3}, {64, 2, 96, 32, 0},
    {5000, 8, 128, 16, 8}, {40, 16, 256, 16, 8},
};

TEST_CASE("reshape_and_cache and its V-only half match the reference bit for bit") {
  Pair& p = pair();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (const CopyShape& c : kCopyShapes) {
    INFO("tokens " << c.tokens << " kv_heads " << c.kv_heads << " head_dim " << c.dim
                   << " block_size " << c.block_size << " stride pad " << c.stride_pad);
    const uint32_t row = c.kv_heads * c.dim, stride = row + c.stride_pad;
    const uint32_t blocks = (c.tokens + c.block_size - 1) / c.block_size + 3;
    const size_t cache_bytes = size_t{blocks} * c.block_size * row * 2;
    BufferPair key(p, random_bf16(gen, size_t{c.tokens} * stride));
    BufferPair value(p, random_bf16(gen, size_t{c.tokens} * stride));
    BufferPair slots(p, random_slots(gen, c.tokens, blocks, c.block_size));
    BufferPair kc(p, cache_bytes), vc(p, cache_bytes), vo(p, cache_bytes);
    kc.poison();
    vc.poison();
    vo.poison();
    for (int side = 0; side < 2; ++side) {
      Side& s = side == 0 ? p.gpu : p.cpu;
      REQUIRE_OK(ops::reshape_and_cache(
          *s.dev, s.k,
          {.key = key.on(side), .value = value.on(side), .k_cache = kc.on(side),
           .v_cache = vc.on(side), .slot_mapping = slots.on(side), .num_tokens = c.tokens,
           .num_kv_heads = c.kv_heads, .head_dim = c.dim, .block_size = c.block_size,
           .key_stride = stride, .value_stride = stride}));
      REQUIRE_OK(ops::reshape_and_cache_flash_v_only(
          *s.dev, s.k,
          {.value = value.on(side), .v_cache = vo.on(side), .slot_mapping = slots.on(side),
           .num_tokens = c.tokens, .num_kv_heads = c.kv_heads, .head_dim = c.dim,
           .block_size = c.block_size, .value_stride = stride}));
    }
    check_bitwise<uint16_t>(kc, "k_cache");
    check_bitwise<uint16_t>(vc, "v_cache");
    check_bitwise<uint16_t>(vo, "v_cache (v only)");
  }
}

TEST_CASE("reshape_and_cache_fp8 matches the reference bit for bit, saturation included") {
  Pair& p = pair();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (const CopyShape& c : kCopyShapes) {
    INFO("tokens " << c.tokens << " kv_heads " << c.kv_heads << " head_dim " << c.dim
                   << " block_size " << c.block_size << " stride pad " << c.stride_pad);
    const uint32_t row = c.kv_heads * c.dim, stride = row + c.stride_pad;
    const uint32_t blocks = (c.tokens + c.block_size - 1) / c.block_size + 3;
    const uint64_t cache_stride = uint64_t{c.block_size} * row + 64;  // padded blocks
    // Values up to 2 / 0.004 = 500: some saturate at 448.
    const float k_scale = 0.004f, v_scale = 0.0371f;
    BufferPair key(p, random_bf16(gen, size_t{c.tokens} * stride, 0.001f, 2.0f));
    BufferPair value(p, random_bf16(gen, size_t{c.tokens} * stride, 0.001f, 2.0f));
    BufferPair slots(p, random_slots(gen, c.tokens, blocks, c.block_size));
    BufferPair kc(p, blocks * cache_stride), vc(p, blocks * cache_stride);
    kc.poison();
    vc.poison();
    for (int side = 0; side < 2; ++side) {
      Side& s = side == 0 ? p.gpu : p.cpu;
      REQUIRE_OK(ops::reshape_and_cache_fp8(
          *s.dev, s.k,
          {.key = key.on(side), .value = value.on(side), .k_cache = kc.on(side),
           .v_cache = vc.on(side), .slot_mapping = slots.on(side), .num_tokens = c.tokens,
           .num_kv_heads = c.kv_heads, .head_dim = c.dim, .block_size = c.block_size,
           .k_scale = k_scale, .v_scale = v_scale, .key_stride = stride, .value_stride = stride,
           .cache_stride = cache_stride}));
    }
    check_bitwise<uint8_t>(kc, "k_cache fp8");
    check_bitwise<uint8_t>(vc, "v_cache fp8");
  }
}

// Every bf16 code (NaN, infinities, subnormals, exact fp8 midpoints) through
// the fp8 write for scales whose quotients land on and near fp8 rounding
// midpoints, and for scales too small or too large for a reciprocal.
TEST_CASE("reshape_and_cache_fp8 is exact for every bf16 input") {
  Pair& p = pair();
  const uint32_t tokens = 64, dim = 1024, block_size = 16;
  std::vector<bf16_bits> all(size_t{tokens} * dim);
  for (size_t i = 0; i < all.size(); ++i) all[i] = bf16_bits(i);
  std::vector<int64_t> identity(tokens);
  for (uint32_t t = 0; t < tokens; ++t) identity[t] = t;
  BufferPair key(p, all), value(p, all), slots(p, identity);
  const uint64_t cache_stride = uint64_t{block_size} * dim;
  const float scales[][2] = {{1.0f, 3.0f},     {0.004f, 0.0371f}, {1.5f, 0.1f},
                             {1e-30f, 1e-38f}, {3e38f, 7.0f},     {0.33333334f, 6.5f}};
  for (const auto& sc : scales) {
    INFO("k_scale " << sc[0] << " v_scale " << sc[1]);
    BufferPair kc(p, tokens * dim), vc(p, tokens * dim);
    kc.poison();
    vc.poison();
    for (int side = 0; side < 2; ++side) {
      Side& s = side == 0 ? p.gpu : p.cpu;
      REQUIRE_OK(ops::reshape_and_cache_fp8(
          *s.dev, s.k,
          {.key = key.on(side), .value = value.on(side), .k_cache = kc.on(side),
           .v_cache = vc.on(side), .slot_mapping = slots.on(side), .num_tokens = tokens,
           .num_kv_heads = 1, .head_dim = dim, .block_size = block_size, .k_scale = sc[0],
           .v_scale = sc[1], .key_stride = dim, .value_stride = dim,
           .cache_stride = cache_stride}));
    }
    check_bitwise<uint8_t>(kc, "k_cache fp8");
    check_bitwise<uint8_t>(vc, "v_cache fp8");
  }
}

// Elementwise comparison of two caches of decoded values: bit-equal where
// the reference left the poison, else within rel * |ref| + abs_frac * max
// over the row of `row` elements.
template <typename T, typename Decode>
void check_close_rows(const BufferPair& t, size_t row, const verify::Bound& bound_of, Decode decode,
                      const char* what) {
  const auto g = t.read<T>(0), c = t.read<T>(1);
  size_t bad = 0, first = 0, compared = 0;
  double worst = 0;
  for (size_t r0 = 0; r0 + row <= g.size(); r0 += row) {
    double mx = 0;
    for (size_t i = r0; i < r0 + row; ++i)
      if (c[i] != T(~T(0))) mx = std::max(mx, std::fabs(decode(c[i])));
    for (size_t i = r0; i < r0 + row; ++i) {
      if (c[i] == T(~T(0))) {
        if (g[i] != c[i] && bad++ == 0) first = i;
        continue;
      }
      ++compared;
      const double a = decode(g[i]), b = decode(c[i]);
      const double err = std::fabs(a - b);
      const double bound = bound_of(b, mx);
      if (!(err <= bound)) {
        if (bad++ == 0) first = i;
      }
      if (bound > 0) worst = std::max(worst, err / bound);
    }
  }
  INFO(what << ": " << bad << " bad of " << compared << " compared; first at " << first
            << " gpu " << decode(g[first]) << " cpu " << decode(c[first])
            << "; worst error / bound " << worst);
  CHECK(compared > 0);
  CHECK(bad == 0);
}


TEST_CASE("fused K norm + RoPE cache writes match the reference") {
  Pair& p = pair();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  struct Shape {
    uint32_t tokens, kv_heads, dim, rotary, block_size;
  };
  for (const Shape& c : {Shape{200, 4, 128, 128, 16}, Shape{77, 2, 64, 32, 32},
                         Shape{100, 1, 256, 128, 16}, Shape{33, 8, 96, 96, 16}}) {
    INFO("tokens " << c.tokens << " kv_heads " << c.kv_heads << " head_dim " << c.dim
                   << " rotary " << c.rotary << " block_size " << c.block_size);
    const uint32_t row = c.kv_heads * c.dim;
    const uint32_t blocks = (c.tokens + c.block_size - 1) / c.block_size + 2;
    const size_t elems = size_t{blocks} * c.block_size * row;
    BufferPair k_in(p, random_bf16(gen, size_t{c.tokens} * row));
    BufferPair weight(p, random_bf16(gen, c.dim, 0.5f, 1.5f));
    std::vector<int32_t> pos(c.tokens), ph(c.tokens), pw(c.tokens);
    for (uint32_t t = 0; t < c.tokens; ++t) {
      pos[t] = int32_t(gen() % 4096);
      ph[t] = int32_t(gen() % 4096);
      pw[t] = int32_t(gen() % 4096);
    }
    BufferPair positions(p, pos), pos_h(p, ph), pos_w(p, pw);
    BufferPair slots(p, random_slots(gen, c.tokens, blocks, c.block_size));
    BufferPair kb(p, elems * 2), km(p, elems * 2), km_same(p, elems * 2), k8(p, elems);
    kb.poison();
    km.poison();
    km_same.poison();
    k8.poison();
    const float eps = 1e-5f, theta = 10000.0f, inv_scale = 1.0f / 0.015f;
    for (int side = 0; side < 2; ++side) {
      Side& s = side == 0 ? p.gpu : p.cpu;
      REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16(
          *s.dev, s.k,
          {.k_in = k_in.on(side), .k_norm_weight = weight.on(side), .positions = positions.on(side),
           .k_cache = kb.on(side), .slot_mapping = slots.on(side), .num_tokens = c.tokens,
           .num_kv_heads = c.kv_heads, .head_dim = c.dim, .rotary_dim = c.rotary,
           .block_size = c.block_size, .rms_eps = eps, .theta = theta}));
      REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16_mrope(
          *s.dev, s.k,
          {.k_in = k_in.on(side), .k_norm_weight = weight.on(side), .pos_t = positions.on(side),
           .pos_h = pos_h.on(side), .pos_w = pos_w.on(side), .k_cache = km.on(side),
           .slot_mapping = slots.on(side), .num_tokens = c.tokens, .num_kv_heads = c.kv_heads,
           .head_dim = c.dim, .rotary_dim = c.rotary, .block_size = c.block_size,
           .rms_eps = eps, .theta = theta}));
      REQUIRE_OK(ops::fused_k_norm_rope_cache_write_bf16_mrope(
          *s.dev, s.k,
          {.k_in = k_in.on(side), .k_norm_weight = weight.on(side), .pos_t = positions.on(side),
           .pos_h = positions.on(side), .pos_w = positions.on(side), .k_cache = km_same.on(side),
           .slot_mapping = slots.on(side), .num_tokens = c.tokens, .num_kv_heads = c.kv_heads,
           .head_dim = c.dim, .rotary_dim = c.rotary, .block_size = c.block_size,
           .rms_eps = eps, .theta = theta}));
      REQUIRE_OK(ops::fused_k_norm_rope_cache_write_fp8(
          *s.dev, s.k,
          {.k_in = k_in.on(side), .k_norm_weight = weight.on(side), .positions = positions.on(side),
           .k_cache = k8.on(side), .slot_mapping = slots.on(side), .num_tokens = c.tokens,
           .num_kv_heads = c.kv_heads, .head_dim = c.dim, .rotary_dim = c.rotary,
           .block_size = c.block_size, .rms_eps = eps, .theta = theta, .inv_scale = inv_scale}));
    }
    check_close_rows<uint16_t>(kb, c.dim, vs_cpu::kKNormRopeBf16, bf16d, "fused bf16");
    check_close_rows<uint16_t>(km, c.dim, vs_cpu::kKNormRopeBf16, bf16d, "fused bf16 mrope");
    check_close_rows<uint8_t>(k8, c.dim, vs_cpu::kKNormRopeFp8, fp8d, "fused fp8");
    // With equal positions the MRoPE variant is the scalar one, bit for bit (on the GPU too).
    const auto a = kb.read<uint16_t>(0), b = km_same.read<uint16_t>(0);
    CHECK(std::equal(a.begin(), a.end(), b.begin()));
  }
}

}  // namespace
}  // namespace sparkrt
