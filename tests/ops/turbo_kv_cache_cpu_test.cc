// The TurboQuant cache writes and the rotation on the cpu backend (the
// references) against an independent float64 reading of the format
// (turbo_test_support.h): each group's indices and matched-norm scale, K
// copied raw, nothing written outside the slots (pools poisoned first), and
// the normalized Walsh-Hadamard transform; also the quantization MSE per bit
// width that docs/kernels.md quotes ("Quality").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "turbo_test_support.h"

using namespace opstest;

TEST_CASE("turbo cache writes: K raw, V's indices and scales as the format says (cpu)") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::TurboKvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " (replay: --set-env=SPARKRT_TEST_SEED=" << seed << ")");
  std::mt19937_64 gen(seed);
  for (uint32_t bits : {2u, 3u, 4u})
    for (const auto& [heads, dim, block_size] :
         {std::tuple{1u, 64u, 16u}, std::tuple{4u, 128u, 32u}, std::tuple{2u, 256u, 16u},
          std::tuple{3u, 48u, 5u}}) {
      CAPTURE(bits);
      CAPTURE(dim);
      const Shape s{bits, heads, dim, block_size, 7};
      const uint32_t tokens = std::min(40u, s.blocks * block_size);
      const uint32_t key_stride = uint32_t(s.row()) + 8, value_stride = uint32_t(s.row()) * 2;
      const auto key = random_bf16(gen, uint64_t{tokens} * key_stride);
      auto value = random_bf16(gen, uint64_t{tokens} * value_stride, 0.001f, 3.0f);
      // One all-zero group and one tiny one exercise the fallback scale.
      std::fill_n(value.begin(), 16, sparkrt::numeric::f32_to_bf16(0.0f));
      std::fill_n(value.begin() + 16, 16, sparkrt::numeric::f32_to_bf16(1e-30f));
      const auto slots = random_slots(gen, tokens, uint64_t{s.blocks} * block_size);
      Buffer kb(*dev, key), vb(*dev, value), sb(*dev, slots);
      Cache c(*dev, s);
      REQUIRE_OK(write(*dev, k, c, kb, vb, sb, tokens, key_stride, value_stride));
      const auto kc = c.kc.download<uint8_t>();
      const auto vc = c.vc.download<uint8_t>();
      std::vector<bool> k_written(kc.size()), v_written(vc.size());
      const std::vector<double> cb = codebook(bits);
      uint64_t groups = 0, ties = 0;
      for (uint32_t t = 0; t < tokens; ++t) {
        if (slots[t] < 0) continue;
        const uint64_t b = uint64_t(slots[t]) / block_size, o = uint64_t(slots[t]) % block_size;
        const uint64_t k_at = b * s.k_block() + o * s.row() * 2;
        for (uint64_t i = 0; i < s.row() * 2; ++i) {
          k_written[k_at + i] = true;
          REQUIRE(kc[k_at + i] == reinterpret_cast<const uint8_t*>(key.data())[uint64_t{t} * key_stride * 2 + i]);
        }
        const uint64_t data_at = b * s.v_block() + o * s.row() * bits / 8;
        const uint64_t scale_at = b * s.v_block() + s.v_data() + o * s.row() / 16;
        for (uint64_t i = 0; i < s.row() * bits / 8; ++i) v_written[data_at + i] = true;
        for (uint64_t g = 0; g < s.row() / 16; ++g) {
          v_written[scale_at + g] = true;
          ++groups;
          double x[16], absmax = 0, norm_x = 0, norm_c = 0;
          for (int i = 0; i < 16; ++i) {
            x[i] = bf16_value(value[uint64_t{t} * value_stride + g * 16 + i]);
            absmax = std::max(absmax, std::fabs(x[i]));
            norm_x += x[i] * x[i];
          }
          for (uint32_t i = 0; i < 16; ++i) {
            const uint32_t idx = field(vc.data() + data_at, bits, g * 16 + i);
            REQUIRE(idx < cb.size());
            norm_c += cb[idx] * cb[idx];
            // The nearest centroid of y = x / absmax * outer (upper on a bound);
            // values within 1e-5 of a bound may fall either way in f32.
            const double y = absmax > 0 ? x[i] / absmax * cb.back() : 0.0;
            uint32_t want = 0;
            bool near_bound = false;
            for (uint32_t j = 0; j + 1 < cb.size(); ++j) {
              const double bound = (cb[j] + cb[j + 1]) / 2;
              if (y >= bound) want = j + 1;
              near_bound |= std::fabs(y - bound) < 1e-5;
            }
            if (near_bound) {
              ++ties;
              continue;
            }
            REQUIRE(idx == want);
          }
          // The matched norm (or absmax / outer for a zero or tiny group),
          // within E4M3's half step.
          const double exact = norm_x > 1e-60 ? std::sqrt(norm_x / norm_c) : absmax / cb.back();
          const double stored = fp8_value(vc[scale_at + g]);
          INFO("token " << t << " group " << g << ": scale " << stored << ", matched norm " << exact);
          CHECK(std::fabs(stored - std::min(exact, 448.0)) <= fp8_ulp(exact) / 2 + 1e-12);
        }
      }
      MESSAGE(bits << "-bit, head_dim " << dim << ": " << groups << " groups checked, " << ties
                   << " values within 1e-5 of a bound");
      for (size_t i = 0; i < kc.size(); ++i)
        if (!k_written[i]) REQUIRE(kc[i] == 0xff);
      for (size_t i = 0; i < vc.size(); ++i)
        if (!v_written[i]) REQUIRE(vc[i] == 0xff);
    }
}

TEST_CASE("hadamard_transform_bf16 is the normalized Walsh-Hadamard transform, its own inverse (cpu)") {
  auto dev = open_device("cpu");
  const auto k = resolve<ops::TurboKvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " (replay: --set-env=SPARKRT_TEST_SEED=" << seed << ")");
  std::mt19937_64 gen(seed);
  for (uint32_t d : {64u, 128u, 256u, 512u}) {
    CAPTURE(d);
    const uint32_t tokens = 5, heads = 3, stride = heads * d + 16;
    const auto x = random_bf16(gen, uint64_t{tokens} * stride);
    Buffer in(*dev, x), out(*dev, x.size() * 2), back(*dev, x.size() * 2);
    out.poison();
    back.poison();
    const ops::HadamardArgs a{.in = in, .out = out, .num_tokens = tokens, .num_heads = heads,
                              .head_dim = d, .in_stride = stride, .out_stride = stride};
    REQUIRE_OK(ops::hadamard_transform_bf16(*dev, k, a));
    ops::HadamardArgs again = a;
    again.in = out;
    again.out = back;
    REQUIRE_OK(ops::hadamard_transform_bf16(*dev, k, again));
    const auto y = out.download<bf16_bits>(), z = back.download<bf16_bits>();
    for (uint32_t t = 0; t < tokens; ++t)
      for (uint32_t h = 0; h < heads; ++h) {
        const uint64_t r = uint64_t{t} * stride + uint64_t{h} * d;
        double max_in = 0;
        for (uint32_t i = 0; i < d; ++i) max_in = std::max(max_in, std::fabs(bf16_value(x[r + i])));
        for (uint32_t i = 0; i < d; ++i) {
          double exact = 0;  // H[i][j] = (-1)^popcount(i & j)
          for (uint32_t j = 0; j < d; ++j)
            exact += (__builtin_popcount(i & j) % 2 ? -1.0 : 1.0) * bf16_value(x[r + j]);
          exact /= std::sqrt(double(d));
          CHECK(std::fabs(bf16_value(y[r + i]) - exact) <= 0x1p-8 * std::fabs(exact) + 1e-5 * max_in);
          // Twice: x again, within two bf16 roundings.
          CHECK(std::fabs(bf16_value(z[r + i]) - bf16_value(x[r + i])) <=
                0x1p-7 * std::fabs(bf16_value(x[r + i])) + 0x1p-8 * max_in);
        }
      }
    // The padding between rows is not written.
    for (uint32_t t = 0; t < tokens; ++t)
      for (uint32_t i = heads * d; i < stride; ++i) CHECK(y[uint64_t{t} * stride + i] == 0xffff);
  }
}

TEST_CASE("TurboQuant quality: quantization MSE on Gaussian data, and what the rotation buys") {
  auto dev = open_device("cpu");
  const auto wk = resolve<ops::TurboKvCacheKernels>(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " (replay: --set-env=SPARKRT_TEST_SEED=" << seed << ")");
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  // MSE per unit variance over 524288 Gaussian values per width, next to the
  // Lloyd-Max optimum for N(0, 1) at a known variance; the per-group scale
  // (half a bit per value) takes 3 and 4 bits below it.
  const double optimum[] = {0.1175, 0.03454, 0.009497};
  const double limit[] = {0.135, 0.026, 0.0063};  // docs/kernels.md, "Quality"
  for (uint32_t bits : {2u, 3u, 4u}) {
    const Shape s{bits, 8, 128, 16, 32};
    const uint32_t tokens = s.blocks * s.block_size;
    std::vector<bf16_bits> v(uint64_t{tokens} * s.row());
    for (auto& x : v) x = sparkrt::numeric::f32_to_bf16(float(normal(gen)));
    std::vector<int64_t> slots(tokens);
    for (uint32_t i = 0; i < tokens; ++i) slots[i] = i;
    Buffer kb(*dev, v), vb(*dev, v), sb(*dev, slots);
    Cache c(*dev, s);
    REQUIRE_OK(write(*dev, wk, c, kb, vb, sb, tokens, uint32_t(s.row()), uint32_t(s.row())));
    const auto vc = c.vc.download<uint8_t>();
    double err = 0, var = 0;
    for (uint32_t t = 0; t < tokens; ++t)
      for (uint32_t h = 0; h < s.heads; ++h)
        for (uint32_t j = 0; j < s.dim; ++j) {
          const double x = bf16_value(v[uint64_t{t} * s.row() + h * s.dim + j]);
          const double d = stored_v(vc, s, t, h, j) - x;
          err += d * d;
          var += x * x;
        }
    const double mse = err / var;
    MESSAGE(bits << "-bit: MSE per unit variance " << mse << " (Lloyd-Max optimum "
                 << optimum[bits - 2] << ")");
    CHECK(mse <= limit[bits - 2]);
  }
}

