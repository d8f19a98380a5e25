// The mla ops on the cpu reference backend against float64 computations
// written here from docs/kernels.md ("Module mla"). Inputs are random and
// never zero; outputs are poisoned first; cache slots no token owns hold NaN
// (FP8 codes 0x7f, NVFP4 scales 0x7f), so reading one poisons the result.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <random>
#include <vector>

#include "mla_test_support.h"
#include "sparkrt/ops/mla.h"
#include "sparkrt/verify/float64.h"
#include "sparkrt/verify/tolerances.h"

using namespace opstest;
using namespace mlatest;
namespace ops = sparkrt::ops;
namespace verify = sparkrt::verify;
namespace vs_float64 = sparkrt::verify::reference_vs_float64;
using sparkrt::numeric::f32_to_bf16;
using sparkrt::numeric::f32_to_fp8_e4m3;

namespace {

constexpr bf16_bits kNanBf16 = 0xffff;
constexpr uint8_t kNanFp8 = 0x7f;

using Cpu = CpuDevice<ops::MlaKernels>;

// |got - want| <= rel * |want| + abs, counting and reporting misses.
struct Tolerance {
  double rel, abs;
  uint64_t misses = 0;
  void check(double got, double want, const char* what, uint64_t i) {
    if (std::fabs(got - want) <= rel * std::fabs(want) + abs) return;
    if (misses++ < 8) FAIL_CHECK(what, "[", i, "] = ", got, ", float64 ", want);
  }
};

}  // namespace

TEST_CASE("mla cpu: mla_batched_gemv against float64") {
  Cpu c;
  INFO("seed ", c.seed);
  const uint32_t heads = 3, n_out = 37, k = 70, in_stride = k + 5, out_stride = n_out + 3;
  auto input = random_bf16(c.gen, heads * in_stride);
  for (uint32_t h = 0; h < heads; ++h)
    for (uint32_t i = k; i < in_stride; ++i) input[h * in_stride + i] = kNanBf16;  // never read
  const auto weight = random_bf16(c.gen, uint64_t{heads} * n_out * k);
  Buffer din(*c.dev, input), dw(*c.dev, weight), dout(*c.dev, heads * out_stride * 2);
  dout.poison();
  REQUIRE_OK(ops::mla_batched_gemv(*c.dev, c.kernels,
                                   {.input = din,
                                    .weight = dw,
                                    .output = dout,
                                    .n_out = n_out,
                                    .k = k,
                                    .num_heads = heads,
                                    .input_stride = in_stride,
                                    .output_stride = out_stride}));
  const auto got = dout.download<bf16_bits>();
  const verify::Bound& bound = vs_float64::kMlaBatchedGemv;
  Tolerance tol{bound.rel, 0.0};
  for (uint32_t h = 0; h < heads; ++h) {
    for (uint32_t n = 0; n < out_stride; ++n) {
      const bf16_bits o = got[h * out_stride + n];
      if (n >= n_out) {
        CHECK_MESSAGE(o == kNanBf16, "padding of head ", h, " was written");
        continue;
      }
      double ref = 0, mag = 0;
      for (uint32_t i = 0; i < k; ++i) {
        const double t = bf16_value(weight[(uint64_t{h} * n_out + n) * k + i]) *
                         bf16_value(input[h * in_stride + i]);
        ref += t;
        mag += std::fabs(t);
      }
      tol.abs = bound.abs * mag;
      tol.check(bf16_value(o), ref, "output", h * out_stride + n);
    }
  }
  CHECK(tol.misses == 0);
}

TEST_CASE("mla cpu: q rope scatter, then writeback of the rotated part") {
  Cpu c;
  INFO("seed ", c.seed);
  const uint32_t nq = 5, nope = 24, rope = 16, hd = nope + rope + 8, kv_lora = 48, dim = 72;
  const auto q_full = random_bf16(c.gen, nq * hd);
  const auto absorbed0 = random_bf16(c.gen, nq * dim);  // the latent parts, kept
  Buffer dq(*c.dev, q_full), dabs(*c.dev, absorbed0), dcont(*c.dev, nq * rope * 2);
  dcont.poison();
  REQUIRE_OK(ops::mla_q_rope_scatter(*c.dev, c.kernels,
                                     {.q_full = dq,
                                      .q_absorbed_buf = dabs,
                                      .q_rope_contiguous = dcont,
                                      .nq = nq,
                                      .hd = hd,
                                      .nope = nope,
                                      .rope = rope,
                                      .kv_lora = kv_lora,
                                      .mla_cache_dim = dim}));
  const auto cont = dcont.download<bf16_bits>();
  auto absorbed = dabs.download<bf16_bits>();
  for (uint32_t h = 0; h < nq; ++h) {
    for (uint32_t i = 0; i < rope; ++i) {
      CHECK(cont[h * rope + i] == q_full[h * hd + nope + i]);
      CHECK(absorbed[h * dim + kv_lora + i] == q_full[h * hd + nope + i]);
    }
    for (uint32_t d = 0; d < dim; ++d)
      if (d < kv_lora || d >= kv_lora + rope)
        CHECK(absorbed[h * dim + d] == absorbed0[h * dim + d]);
  }

  // Writeback puts a new rope part (as RoPE would) into the same slots.
  const auto rotated = random_bf16(c.gen, nq * rope);
  Buffer drot(*c.dev, rotated);
  REQUIRE_OK(ops::mla_q_rope_writeback(*c.dev, c.kernels,
                                       {.q_rope_direct = drot,
                                        .q_absorbed_buf = dabs,
                                        .nq = nq,
                                        .rope = rope,
                                        .kv_lora = kv_lora,
                                        .mla_cache_dim = dim}));
  const auto after = dabs.download<bf16_bits>();
  for (uint32_t h = 0; h < nq; ++h)
    for (uint32_t d = 0; d < dim; ++d) {
      const bool slot = d >= kv_lora && d < kv_lora + rope;
      CHECK(after[h * dim + d] == (slot ? rotated[h * rope + d - kv_lora] : absorbed[h * dim + d]));
    }
}

TEST_CASE("mla cpu: mla_cache_assemble builds [latent | rope | 0] and [latent | 0]") {
  Cpu c;
  INFO("seed ", c.seed);
  for (auto [kv_lora, rope, dim] :
       {std::tuple<uint32_t, uint32_t, uint32_t>{512, 64, 576}, {48, 16, 80}}) {
    CAPTURE(dim);
    const auto latent = random_bf16(c.gen, kv_lora), k_rope = random_bf16(c.gen, rope);
    // One row in the middle of a poisoned pool: nothing around it changes.
    Buffer dl(*c.dev, latent), dr(*c.dev, k_rope), dk(*c.dev, 3 * dim * 2), dv(*c.dev, 3 * dim * 2);
    dk.poison();
    dv.poison();
    REQUIRE_OK(ops::mla_cache_assemble(*c.dev, c.kernels,
                                       {.kv_latent = dl,
                                        .k_rope = dr,
                                        .k_cache = dk.ptr() + dim * 2,
                                        .v_cache = dv.ptr() + dim * 2,
                                        .kv_lora = kv_lora,
                                        .rope = rope,
                                        .mla_cache_dim = dim}));
    const auto k = dk.download<bf16_bits>(), v = dv.download<bf16_bits>();
    for (uint32_t i = 0; i < 3 * dim; ++i) {
      if (i < dim || i >= 2 * dim) {
        CHECK(k[i] == kNanBf16);
        CHECK(v[i] == kNanBf16);
        continue;
      }
      const uint32_t d = i - dim;
      const bf16_bits want_k = d < kv_lora          ? latent[d]
                               : d < kv_lora + rope ? k_rope[d - kv_lora]
                                                    : 0;
      CHECK(k[i] == want_k);
      CHECK(v[i] == (d < kv_lora ? latent[d] : bf16_bits{0}));
    }
  }
}

namespace {

enum class Encoding { kFp8, kNvfp4 };

// A decode problem over a paged MLA cache: ragged sequences whose blocks are
// scattered through the pool, optional sinks and compressed rows.
struct DecodeProblem {
  Encoding enc = Encoding::kFp8;
  uint32_t hq = 4, hkv = 1, dq = 576, dim = 576, block_size = 16, window = 0;
  std::vector<int32_t> lens{};
  bool shared_pool = false;  // v_cache == k_cache
  bool sinks_on = false;
  uint32_t n_comp = 0;  // compressed rows per sequence; 0: no pool
  uint32_t stride_pad = 0;
  uint32_t splits = 0;  // 0: the op's choice, else forced (with a workspace)

  uint32_t max_blocks = 0;
  uint64_t stride = 0, data_section = 0;  // bytes per block; NVFP4 data section
  float k_scale = 1.0f, v_scale = 1.0f, inv_sqrt_d = 0.0f;
  std::vector<int32_t> tables{};
  std::vector<bf16_bits> q{};
  std::vector<uint8_t> k_pool{}, v_pool{}, comp{};
  std::vector<float> sinks{};

  uint32_t seqs() const { return static_cast<uint32_t>(lens.size()); }
  uint32_t dv() const { return dim - 64; }
  uint64_t row() const { return uint64_t{hkv} * dim; }
  const std::vector<uint8_t>& v_of() const { return shared_pool ? k_pool : v_pool; }

  // Value index of (token t of sequence s, kv head, dim d) within its block,
  // and the block.
  uint64_t index(uint32_t t, uint32_t kvh, uint32_t d) const {
    return uint64_t{t % block_size} * row() + uint64_t{kvh} * dim + d;
  }
  int32_t block(uint32_t s, uint32_t t) const {
    return tables[uint64_t{s} * max_blocks + t / block_size];
  }

  double value(const std::vector<uint8_t>& pool, double scale, uint32_t s, uint32_t t, uint32_t kvh,
               uint32_t d) const {
    const uint64_t base = uint64_t(block(s, t)) * stride, i = index(t, kvh, d);
    if (enc == Encoding::kFp8) return fp8_value(pool[base + i]) * scale;
    const uint8_t byte = pool[base + i / 2];
    return e2m1_value(i % 2 ? byte >> 4 : byte & 0xf) *
           fp8_value(pool[base + data_section + i / 16]);
  }
  double comp_value(double scale, uint32_t s, uint32_t j, uint32_t kvh, uint32_t d) const {
    return fp8_value(comp[(uint64_t{s} * n_comp + j) * row() + uint64_t{kvh} * dim + d]) * scale;
  }
};

void fill_pool(DecodeProblem& p, std::mt19937_64& gen, std::vector<uint8_t>& pool, uint32_t blocks,
               const std::vector<bool>& live_token, float scale) {
  std::uniform_real_distribution<float> mag(0.25f, 2.0f), scale_mag(0.05f, 0.4f);
  std::bernoulli_distribution neg(0.5);
  std::uniform_int_distribution<int> nibble(1, 7);
  pool.assign(uint64_t{blocks} * p.stride, kNanFp8);
  const uint32_t slots = p.block_size;
  for (uint32_t b = 0; b < blocks; ++b) {
    for (uint32_t o = 0; o < slots; ++o) {
      if (!live_token[uint64_t{b} * slots + o]) continue;
      const uint64_t base = uint64_t{b} * p.stride;
      for (uint64_t i = uint64_t{o} * p.row(); i < uint64_t{o + 1} * p.row(); ++i) {
        if (p.enc == Encoding::kFp8) {
          pool[base + i] = f32_to_fp8_e4m3((neg(gen) ? -mag(gen) : mag(gen)) / scale);
        } else {
          const uint8_t n = static_cast<uint8_t>(nibble(gen) | (neg(gen) ? 8 : 0));
          uint8_t& byte = pool[base + i / 2];
          byte = i % 2 ? static_cast<uint8_t>((byte & 0x0f) | (n << 4))
                       : static_cast<uint8_t>((byte & 0xf0) | n);
          if (i % 16 == 0) pool[base + p.data_section + i / 16] = f32_to_fp8_e4m3(scale_mag(gen));
        }
      }
    }
  }
}

DecodeProblem make_decode(std::mt19937_64& gen, DecodeProblem p) {
  const int32_t longest = std::max(1, *std::max_element(p.lens.begin(), p.lens.end()));
  p.max_blocks = static_cast<uint32_t>((longest + p.block_size - 1) / p.block_size) + 1;
  if (p.enc == Encoding::kFp8) {
    p.stride = uint64_t{p.block_size} * p.row() + p.stride_pad;
    p.k_scale = 0.02f;
    p.v_scale = 0.03f;
  } else {
    const auto layout = ops::mla_nvfp4_block_layout(p.block_size, p.hkv, p.dim);
    p.data_section = layout.data_section_bytes;
    p.stride = layout.block_stride_bytes + p.stride_pad;
  }
  p.inv_sqrt_d = 1.0f / std::sqrt(192.0f);

  uint32_t used = 0;
  for (int32_t len : p.lens) used += (len + p.block_size - 1) / p.block_size;
  const uint32_t blocks = used + 2;  // two spare blocks nobody owns
  const auto ids = shuffled_blocks(gen, static_cast<int32_t>(blocks));
  p.tables.assign(uint64_t{p.seqs()} * p.max_blocks, -1);
  std::vector<bool> live(uint64_t{blocks} * p.block_size, false);
  uint32_t next = 0;
  for (uint32_t s = 0; s < p.seqs(); ++s) {
    for (uint32_t b = 0; b < (p.lens[s] + p.block_size - 1) / p.block_size; ++b)
      p.tables[uint64_t{s} * p.max_blocks + b] = ids[next++];
    for (int32_t t = 0; t < p.lens[s]; ++t)
      live[uint64_t(p.block(s, t)) * p.block_size + t % p.block_size] = true;
  }
  fill_pool(p, gen, p.k_pool, blocks, live, p.k_scale);
  if (!p.shared_pool) fill_pool(p, gen, p.v_pool, blocks, live, p.v_scale);

  p.q = random_bf16(gen, uint64_t{p.seqs()} * p.hq * p.dq);
  if (p.sinks_on) {
    std::uniform_real_distribution<float> sink(-1.0f, 3.0f);
    for (uint32_t h = 0; h < p.hq; ++h) p.sinks.push_back(sink(gen));
  }
  if (p.n_comp > 0) {
    const auto raw = random_bf16(gen, uint64_t{p.seqs()} * p.n_comp * p.row());
    for (bf16_bits b : raw) p.comp.push_back(f32_to_fp8_e4m3(bf16_value(b) / p.k_scale));
  }
  return p;
}

// Softmax attention in float64 (sparkrt/verify/float64.h) over each
// sequence's compressed rows and window; a sink is one more logit in the
// denominator. *vmax: the largest |V| attended.
std::vector<double> decode_f64(const DecodeProblem& p, double* vmax) {
  std::vector<double> out(uint64_t{p.seqs()} * p.hq * p.dv(), 0.0);
  const uint32_t group = p.hq / p.hkv;
  const auto& vpool = p.v_of();
  const double vscale = p.shared_pool ? p.k_scale : p.v_scale;
  *vmax = 0;
  for (uint32_t s = 0; s < p.seqs(); ++s) {
    const uint32_t len = p.lens[s];
    const uint32_t first = p.window != 0 && len > p.window ? len - p.window : 0;
    for (uint32_t h = 0; h < p.hq; ++h) {
      const uint32_t kvh = h / group;
      // Virtual tokens: compressed rows j < n_comp, then the window.
      const uint32_t n = p.n_comp + (len - first);
      const auto k_at = [&](uint32_t u, uint32_t d) {
        return u < p.n_comp ? p.comp_value(p.k_scale, s, u, kvh, d)
                            : p.value(p.k_pool, p.k_scale, s, first + u - p.n_comp, kvh, d);
      };
      const auto v_at = [&](uint32_t u, uint32_t d) {
        const double v = u < p.n_comp ? p.comp_value(vscale, s, u, kvh, d)
                                       : p.value(vpool, vscale, s, first + u - p.n_comp, kvh, d);
        *vmax = std::max(*vmax, std::fabs(v));
        return v;
      };
      std::vector<double> q(p.dq);
      for (uint32_t d = 0; d < p.dq; ++d) q[d] = bf16_value(p.q[(uint64_t{s} * p.hq + h) * p.dq + d]);
      const auto o = verify::attention(q, n, p.dv(), p.inv_sqrt_d, k_at, v_at,
                                       p.sinks.empty() ? std::nullopt
                                                       : std::optional<double>(p.sinks[h]));
      std::copy(o.begin(), o.end(), out.begin() + (uint64_t{s} * p.hq + h) * p.dv());
    }
  }
  return out;
}

// The fields both decode ops share, from a problem and its buffers.
template <typename Args>
Args decode_args(const DecodeProblem& p, sparkrt::DevicePtr q, sparkrt::DevicePtr k_cache,
                 sparkrt::DevicePtr v_cache, sparkrt::DevicePtr o, sparkrt::DevicePtr tables,
                 sparkrt::DevicePtr lens) {
  Args a{};
  a.q = q;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  a.o = o;
  a.block_tables = tables;
  a.seq_lens = lens;
  a.max_blocks_per_seq = p.max_blocks;
  a.num_q_heads = p.hq;
  a.num_kv_heads = p.hkv;
  a.q_head_dim = p.dq;
  a.kv_cache_dim = p.dim;
  a.block_size = p.block_size;
  a.inv_sqrt_d = p.inv_sqrt_d;
  a.num_seqs = p.seqs();
  return a;
}

void run_decode(Cpu& c, const DecodeProblem& p) {
  Buffer dq(*c.dev, p.q), dtables(*c.dev, p.tables), dlens(*c.dev, p.lens);
  Buffer dk(*c.dev, p.k_pool);
  Buffer dv(*c.dev, p.shared_pool ? std::vector<uint8_t>(1) : p.v_pool);
  const sparkrt::DevicePtr v_cache = p.shared_pool ? dk.ptr() : dv.ptr();
  Buffer dsinks(*c.dev, p.sinks.empty() ? std::vector<float>(1) : p.sinks);
  Buffer dcomp(*c.dev, p.comp.empty() ? std::vector<uint8_t>(1) : p.comp);
  const uint64_t out_elems = uint64_t{p.seqs()} * p.hq * p.dv();
  Buffer dout(*c.dev, out_elems * 2);
  dout.poison();
  const uint64_t ws_bytes =
      p.splits > 1 ? ops::mla_decode_workspace_bytes(p.seqs(), p.hq, p.dim, p.splits) : 1;
  Buffer dws(*c.dev, ws_bytes);
  dws.poison();
  if (p.enc == Encoding::kFp8) {
    auto a = decode_args<ops::MlaPagedDecodeFp8Args>(p, dq, dk, v_cache, dout, dtables, dlens);
    a.k_scale = p.k_scale;
    a.v_scale = p.shared_pool ? p.k_scale : p.v_scale;
    a.cache_stride = p.stride;
    a.sliding_window = p.window;
    a.sinks = p.sinks.empty() ? sparkrt::DevicePtr{} : dsinks.ptr();
    a.comp_pool = p.comp.empty() ? sparkrt::DevicePtr{} : dcomp.ptr();
    a.comp_block_count = p.n_comp;
    if (p.splits > 1) {
      a.workspace = dws.ptr();
      a.workspace_bytes = ws_bytes;
      a.num_splits = p.splits;
    }
    REQUIRE_OK(ops::mla_paged_decode_fp8(*c.dev, c.kernels, a));
  } else {
    auto a = decode_args<ops::MlaPagedDecodeNvfp4Args>(p, dq, dk, v_cache, dout, dtables, dlens);
    a.block_stride_bytes = p.stride;
    a.data_section_bytes = p.data_section;
    if (p.splits > 1) {
      a.workspace = dws.ptr();
      a.workspace_bytes = ws_bytes;
      a.num_splits = p.splits;
    }
    REQUIRE_OK(ops::mla_paged_decode_nvfp4(*c.dev, c.kernels, a));
  }
  const auto got = dout.download<bf16_bits>();
  double vmax = 0;
  const auto ref = decode_f64(p, &vmax);
  const verify::Bound& bound = vs_float64::kMlaPagedDecode;
  Tolerance tol{bound.rel, bound.abs * vmax};
  for (uint64_t i = 0; i < out_elems; ++i) tol.check(bf16_value(got[i]), ref[i], "o", i);
  CHECK(tol.misses == 0);
}

}  // namespace

TEST_CASE("mla cpu: mla_paged_decode_fp8 with windows, sinks and the compressed pool") {
  Cpu c;
  INFO("seed ", c.seed);
  for (bool sinks : {false, true})
    for (uint32_t n_comp : {0u, 5u})
      for (uint32_t window : {0u, 24u}) {
        CAPTURE(sinks);
        CAPTURE(n_comp);
        CAPTURE(window);
        // Ragged: one token, none (zeros, or the compressed rows only), a
        // partial block, several blocks.
        DecodeProblem p{.hq = 4,
                        .window = window,
                        .lens = {1, 0, 40, 70},
                        .sinks_on = sinks,
                        .n_comp = n_comp,
                        .stride_pad = 64};
        run_decode(c, make_decode(c.gen, p));
      }
}

TEST_CASE("mla cpu: mla_paged_decode_fp8 over the latent part only, GQA, one shared pool") {
  Cpu c;
  INFO("seed ", c.seed);
  DecodeProblem p{.hq = 6,
                  .hkv = 2,
                  .dq = 512,
                  .block_size = 32,
                  .lens = {45, 3},
                  .shared_pool = true,
                  .sinks_on = true,
                  .n_comp = 2};
  run_decode(c, make_decode(c.gen, p));
}

TEST_CASE("mla cpu: mla_paged_decode_fp8 split-KV partials merged by mla_decode_combine") {
  Cpu c;
  INFO("seed ", c.seed);
  // Up to 5 tiles of 64 tokens: 2 and 3 splits share them, 7 leaves some
  // splits empty; the empty sequence has only empty splits.
  for (uint32_t splits : {2u, 3u, 7u})
    for (bool sinks : {false, true}) {
      CAPTURE(splits);
      CAPTURE(sinks);
      DecodeProblem p{.hq = 20,
                      .hkv = 1,
                      .block_size = 64,
                      .window = sinks ? 0u : 150u,
                      .lens = {1, 0, 130, 300},
                      .shared_pool = sinks,
                      .sinks_on = sinks,
                      .n_comp = sinks ? 3u : 0u,
                      .splits = splits};
      run_decode(c, make_decode(c.gen, p));
    }
}

TEST_CASE("mla cpu: mla_paged_decode_nvfp4, packed and padded blocks") {
  Cpu c;
  INFO("seed ", c.seed);
  for (uint32_t pad : {0u, 48u})
    for (uint32_t dq : {576u, 512u}) {
      CAPTURE(pad);
      CAPTURE(dq);
      DecodeProblem p{
          .enc = Encoding::kNvfp4, .hq = 4, .dq = dq, .lens = {1, 0, 33, 64}, .stride_pad = pad};
      run_decode(c, make_decode(c.gen, p));
    }
  SUBCASE("a narrower row with GQA and a shared pool") {
    DecodeProblem p{.enc = Encoding::kNvfp4,
                    .hq = 4,
                    .hkv = 2,
                    .dq = 80,
                    .dim = 128,
                    .block_size = 8,
                    .lens = {20, 9},
                    .shared_pool = true};
    run_decode(c, make_decode(c.gen, p));
  }
}

TEST_CASE("mla cpu: mla_paged_decode_nvfp4 split-KV partials merged by mla_decode_combine") {
  Cpu c;
  INFO("seed ", c.seed);
  // Up to 5 tiles of 64 tokens: 2 and 3 splits share them, 7 leaves some
  // splits empty; the empty sequence has only empty splits.
  for (uint32_t splits : {2u, 3u, 7u})
    for (bool shared : {false, true}) {
      CAPTURE(splits);
      CAPTURE(shared);
      DecodeProblem p{.enc = Encoding::kNvfp4,
                      .hq = 20,
                      .hkv = 1,
                      .dq = shared ? 576u : 512u,
                      .block_size = 64,
                      .lens = {1, 0, 130, 300},
                      .shared_pool = shared,
                      .stride_pad = 32,
                      .splits = splits};
      run_decode(c, make_decode(c.gen, p));
    }
}

TEST_CASE("mla cpu: mla_paged_decode_nvfp4_split partials against float64") {
  Cpu c;
  INFO("seed ", c.seed);
  // Grouped KV heads (2 of 10 query heads each), ragged and empty sequences,
  // more splits than the longest has tiles; blocks of 16 tokens.
  const DecodeProblem p = make_decode(c.gen, DecodeProblem{.enc = Encoding::kNvfp4,
                                                           .hq = 20,
                                                           .hkv = 2,
                                                           .block_size = 16,
                                                           .lens = {200, 0, 1, 64, 65}});
  const uint32_t n = 5, dv = p.dv(), group = p.hq / p.hkv;
  Buffer dq(*c.dev, p.q), dtables(*c.dev, p.tables), dlens(*c.dev, p.lens), dk(*c.dev, p.k_pool),
      dv_pool(*c.dev, p.v_pool);
  const uint64_t parts = uint64_t{p.seqs()} * p.hq * n;
  const uint64_t ml_at = (parts * dv * 4 + 255) / 256 * 256;
  Buffer dws(*c.dev, ops::mla_decode_workspace_bytes(p.seqs(), p.hq, p.dim, n));
  dws.poison();
  REQUIRE_OK(sparkrt::KernelLaunch(*c.dev, c.kernels.mla_paged_decode_nvfp4_split)
                 .grid({p.hkv * ((group + 15) / 16), p.seqs(), n})
                 .block({320})
                 .arg(dq.ptr())
                 .arg(dk.ptr())
                 .arg(dv_pool.ptr())
                 .arg(dws.ptr())
                 .arg(dws.ptr() + ml_at)
                 .arg(dtables.ptr())
                 .arg(dlens.ptr())
                 .arg(p.max_blocks)
                 .arg(p.hq)
                 .arg(p.hkv)
                 .arg(p.dq)
                 .arg(p.dim)
                 .arg(p.block_size)
                 .arg(p.inv_sqrt_d)
                 .arg(p.stride)
                 .arg(p.data_section)
                 .launch());
  const auto ws = dws.download<float>();
  double vmax = 0;
  decode_f64(p, &vmax);
  uint64_t bad = 0;
  for (uint32_t s = 0; s < p.seqs(); ++s) {
    // Split z takes tiles [z per, (z + 1) per) of the sequence's 64-token tiles.
    const uint32_t len = p.lens[s], per = ((len + 63) / 64 + n - 1) / n;
    for (uint32_t h = 0; h < p.hq; ++h) {
      const uint32_t kvh = h / group;
      for (uint32_t z = 0; z < n; ++z) {
        const uint32_t b = std::min(len, z * per * 64), e = std::min(len, (z + 1) * per * 64);
        std::vector<double> x;
        for (uint32_t t = b; t < e; ++t) {
          double dot = 0;
          for (uint32_t d = 0; d < p.dq; ++d)
            dot += bf16_value(p.q[(uint64_t{s} * p.hq + h) * p.dq + d]) *
                   p.value(p.k_pool, 1.0, s, t, kvh, d);
          x.push_back(dot * p.inv_sqrt_d * std::numbers::log2e);
        }
        const uint64_t part = (uint64_t{s} * p.hq + h) * n + z;
        const double m_got = ws[ml_at / 4 + 2 * part], l_got = ws[ml_at / 4 + 2 * part + 1];
        const float* acc = &ws[part * dv];
        bool ok = true;
        if (x.empty()) {
          ok = m_got == -INFINITY && l_got == 0;
          for (uint32_t d = 0; d < dv; ++d) ok = ok && acc[d] == 0;
        } else {
          const double m = *std::max_element(x.begin(), x.end());
          double l = 0;
          for (double xi : x) l += std::exp2(xi - m);
          const double f = std::exp2(m_got - m);
          ok = std::fabs(m_got - m) <= vs_float64::kSplitMaxAbs &&
               std::fabs(l_got * f - l) <= vs_float64::kSplitSumRel * l;
          for (uint32_t d = 0; ok && d < dv; ++d) {
            double o = 0;
            for (uint32_t t = b; t < e; ++t)
              o += std::exp2(x[t - b] - m) * p.value(p.v_pool, 1.0, s, t, kvh, d);
            ok = std::fabs(acc[d] * f - o) <= vs_float64::kSplitAcc(o, l * vmax);
          }
        }
        if (!ok && bad++ < 8)
          FAIL_CHECK("split ", z, " of sequence ", s, " head ", h, " (tokens ", b, "..", e,
                     "): (max, sum) (", m_got, ", ", l_got, ")");
      }
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("mla cpu: decode with bad tables or short buffers is a clear error") {
  Cpu c;
  const DecodeProblem p = make_decode(c.gen, DecodeProblem{.hq = 2, .lens = {20, 33}});
  Buffer dq(*c.dev, p.q), dtables(*c.dev, p.tables), dlens(*c.dev, p.lens), dk(*c.dev, p.k_pool),
      dv(*c.dev, p.v_pool), dout(*c.dev, uint64_t{p.seqs()} * p.hq * p.dv() * 2);
  auto good = decode_args<ops::MlaPagedDecodeFp8Args>(p, dq, dk, dv, dout, dtables, dlens);
  good.k_scale = p.k_scale;
  good.v_scale = p.v_scale;
  good.cache_stride = p.stride;
  REQUIRE_OK(ops::mla_paged_decode_fp8(*c.dev, c.kernels, good));
  const auto expect = [&](const ops::MlaPagedDecodeFp8Args& a, absl::StatusCode code,
                          const char* text) {
    const absl::Status s = ops::mla_paged_decode_fp8(*c.dev, c.kernels, a);
    INFO(s.ToString());
    CHECK(s.code() == code);
    CHECK(contains(s, text));
    CHECK(contains(s, "mla_paged_decode_fp8"));
  };
  Buffer short_out(*c.dev, uint64_t{p.seqs()} * p.hq * p.dv() * 2 - 2);
  ops::MlaPagedDecodeFp8Args a = good;
  a.o = short_out;
  expect(a, absl::StatusCode::kOutOfRange, "o needs");
  a = good;
  a.sinks = short_out.ptr() + 0;  // room for the sinks, but the comp pool is missing
  a.comp_pool = dq;
  a.comp_block_count = 1000000;
  expect(a, absl::StatusCode::kOutOfRange, "comp_pool needs");

  auto tables = p.tables;
  tables[p.max_blocks + 1] = -1;  // sequence 1's token 16..31
  Buffer bad_tables(*c.dev, tables);
  a = good;
  a.block_tables = bad_tables;
  expect(a, absl::StatusCode::kOutOfRange, "is negative");
  Buffer long_lens(*c.dev, std::vector<int32_t>{20, int32_t(p.max_blocks * p.block_size + 1)});
  a = good;
  a.seq_lens = long_lens;
  expect(a, absl::StatusCode::kOutOfRange, "seq_lens[1]");
}
