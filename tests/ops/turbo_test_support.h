// Shared by the TurboQuant cpu tests: an independent float64 reading of the
// format in docs/kernels.md ("TurboQuant V cache") — the codebooks as listed
// there, the bit-stream unpacking, the value a slot stores — and a cache on
// the cpu device written through the op.
#ifndef SPARKRT_TESTS_OPS_TURBO_TEST_SUPPORT_H_
#define SPARKRT_TESTS_OPS_TURBO_TEST_SUPPORT_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "ops_test_support.h"
#include "sparkrt/ops/turbo_kv_cache.h"

namespace opstest {

namespace ops = sparkrt::ops;

// The codebooks as docs/kernels.md lists them (ascending).
inline std::vector<double> codebook(uint32_t bits) {
  if (bits == 2) return {-1.5104, -0.4528, 0.4528, 1.5104};
  if (bits == 3) return {-2.1520, -1.3440, -0.7560, -0.2451, 0.2451, 0.7560, 1.3440, 2.1520};
  return {-2.7326, -2.0690, -1.6180, -1.2562, -0.9423, -0.6568, -0.3880, -0.1284,
          0.1284,  0.3880,  0.6568,  0.9423,  1.2562,  1.6180,  2.0690,  2.7326};
}

// Index i of a little-endian bit stream of `bits`-bit fields.
inline uint32_t field(const uint8_t* p, uint32_t bits, uint64_t i) {
  uint32_t v = 0;
  for (uint32_t b = 0; b < bits; ++b) {
    const uint64_t bit = i * bits + b;
    v |= uint32_t((p[bit / 8] >> (bit % 8)) & 1u) << b;
  }
  return v;
}

struct Shape {
  uint32_t bits, heads, dim, block_size, blocks;
  uint64_t row() const { return uint64_t{heads} * dim; }
  uint64_t k_block() const { return uint64_t{block_size} * row() * 2; }
  uint64_t v_data() const { return uint64_t{block_size} * row() * bits / 8; }
  uint64_t v_block() const { return v_data() + uint64_t{block_size} * row() / 16; }
};

// The value the format stores for dim j of head h at slot `slot`, decoded by
// the test from the pool's bytes.
inline double stored_v(const std::vector<uint8_t>& vc, const Shape& s, uint64_t slot, uint32_t h,
                uint32_t j) {
  const uint64_t b = slot / s.block_size, o = slot % s.block_size;
  const uint8_t* data = vc.data() + b * s.v_block() + o * s.row() * s.bits / 8;
  const uint64_t v = uint64_t{h} * s.dim + j;
  const uint8_t scale = vc[b * s.v_block() + s.v_data() + o * s.row() / 16 + v / 16];
  return codebook(s.bits)[field(data, s.bits, v)] * fp8_value(scale);
}

// A TurboQuant cache on the cpu device, written through the op.
struct Cache {
  Shape s;
  Buffer kc, vc;
  Cache(sparkrt::Device& dev, const Shape& shape)
      : s(shape), kc(dev, s.blocks * s.k_block()), vc(dev, s.blocks * s.v_block()) {
    kc.poison();
    vc.poison();
  }
};

inline absl::Status write(sparkrt::Device& dev, const ops::TurboKvCacheKernels& k, Cache& c,
                   const Buffer& key, const Buffer& value, const Buffer& slots, uint32_t tokens,
                   uint32_t key_stride, uint32_t value_stride) {
  const ops::ReshapeAndCacheTurboArgs a{.key = key,
                                        .value = value,
                                        .k_cache = c.kc,
                                        .v_cache = c.vc,
                                        .slot_mapping = slots,
                                        .num_tokens = tokens,
                                        .num_kv_heads = c.s.heads,
                                        .head_dim = c.s.dim,
                                        .block_size = c.s.block_size,
                                        .key_stride = key_stride,
                                        .value_stride = value_stride,
                                        .k_block_stride_bytes = c.s.k_block(),
                                        .v_block_stride_bytes = c.s.v_block(),
                                        .v_data_section_bytes = c.s.v_data()};
  if (c.s.bits == 2) return ops::reshape_and_cache_bf16k_turbo2v(dev, k, a);
  if (c.s.bits == 3) return ops::reshape_and_cache_bf16k_turbo3v(dev, k, a);
  return ops::reshape_and_cache_bf16k_turbo4v(dev, k, a);
}

// Distinct slots for `n` tokens over the pool, about 1 in 8 negative (skipped).
inline std::vector<int64_t> random_slots(std::mt19937_64& gen, uint32_t n, uint64_t capacity) {
  std::vector<int64_t> all(capacity);
  for (uint64_t i = 0; i < capacity; ++i) all[i] = int64_t(i);
  std::shuffle(all.begin(), all.end(), gen);
  all.resize(n);
  for (auto& x : all)
    if (gen() % 8 == 0) x = -1;
  return all;
}

}  // namespace opstest

#endif  // SPARKRT_TESTS_OPS_TURBO_TEST_SUPPORT_H_
