// The MLA ops and the K3 MLA decode on the cuda backend against the cpu
// backend, which runs the reference implementations (the oracle). Both
// devices get the same random, non-zero inputs; every output buffer is
// poisoned (0xff: bf16 and fp8 NaN, f32 NaN) on both before the op runs, so
// an element the GPU fails to write, or writes where it should not, shows up.
// The op wrappers are the same calls on both backends. Tolerances are those
// of docs/kernels.md ("Module mla_decode", "Tolerances").
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
#include "sparkrt/ops/k3_mla_decode.h"
#include "sparkrt/ops/mla.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/verify/tolerances.h"

namespace sparkrt {
namespace {

namespace ops = sparkrt::ops;
namespace vs_cpu = verify::gpu_vs_reference;  // docs/kernels.md, "Tolerances"
using numeric::bf16_bits;
using numeric::fp8_bits;
using namespace gpu_test;

// One device with both kernel sets resolved.
struct Side {
  std::unique_ptr<Device> dev;
  ops::MlaKernels m;
  ops::K3MlaDecodeKernels k3;

  explicit Side(const std::string& backend)
      : dev(require_value(Device::open({.backend = backend}))),
        m(require_value(ops::MlaKernels::resolve(*dev))),
        k3(require_value(ops::K3MlaDecodeKernels::resolve(*dev))) {}
};

// The two devices every test compares, opened once: side 0 is cuda, side 1
// the cpu reference.
using Pair = DevicePair<Side>;
Pair& pair() {
  static Pair p;
  return p;
}

float random_mag(std::mt19937_64& gen, float lo, float hi) {
  const float m = std::uniform_real_distribution<float>(lo, hi)(gen);
  return (gen() & 1) ? -m : m;
}
std::vector<bf16_bits> random_bf16(std::mt19937_64& gen, size_t n, float lo = 0.25f,
                                   float hi = 2.0f) {
  std::vector<bf16_bits> v(n);
  for (auto& x : v) x = sparkrt::numeric::f32_to_bf16(random_mag(gen, lo, hi));
  return v;
}
std::vector<float> random_f32(std::mt19937_64& gen, size_t n, float lo = 0.25f, float hi = 2.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = random_mag(gen, lo, hi);
  return v;
}
// e4m3 codes of values of magnitude [lo, hi] (never zero, never NaN).
std::vector<fp8_bits> random_fp8(std::mt19937_64& gen, size_t n, float lo, float hi) {
  std::vector<fp8_bits> v(n);
  for (auto& x : v) x = sparkrt::numeric::f32_to_fp8_e4m3(random_mag(gen, lo, hi));
  return v;
}

double bf16d(uint16_t b) { return sparkrt::numeric::bf16_to_f32(b); }
double fp8d(uint8_t b) { return sparkrt::numeric::fp8_e4m3_to_f32(b); }

// Counts of one elementwise comparison.
struct Tally {
  size_t bad = 0, compared = 0, first = 0;
  double worst = 0, first_gpu = 0, first_cpu = 0;
  void add(size_t i, double gpu, double cpu, double bound) {
    ++compared;
    const double err = std::fabs(gpu - cpu);
    if (!(err <= bound) && bad++ == 0) {
      first = i;
      first_gpu = gpu;
      first_cpu = cpu;
    }
    if (bound > 0) worst = std::max(worst, err / bound);
  }
  void mismatch(size_t i, double gpu, double cpu) {
    if (bad++ == 0) {
      first = i;
      first_gpu = gpu;
      first_cpu = cpu;
    }
  }
  void check(const std::string& what) const {
    INFO(what << ": " << bad << " bad of " << compared << " compared; first at " << first
              << " gpu " << first_gpu << " cpu " << first_cpu << "; worst error / bound "
              << worst);
    CHECK(compared > 0);
    CHECK(bad == 0);
  }
};

// ── the copies and the GEMV ─────────────────────────────────────────────────

TEST_CASE("mla_batched_gemv matches the reference over heads, shapes and strides") {
  Pair& p = pair();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  struct Shape {
    uint32_t heads, n_out, k, input_stride, output_stride;
  };
  // q_nope absorption into a 576-wide row, the V up-projection, and odd sizes.
  for (const Shape& s : {Shape{16, 512, 128, 192, 576}, Shape{64, 512, 128, 192, 576},
                         Shape{128, 128, 512, 512, 128}, Shape{16, 517, 100, 103, 530},
                         Shape{64, 9, 64, 64, 16}, Shape{128, 512, 128, 192, 576}}) {
    INFO("heads " << s.heads << " n_out " << s.n_out << " k " << s.k << " input_stride "
                  << s.input_stride << " output_stride " << s.output_stride);
    const auto in = random_bf16(gen, size_t{s.heads} * s.input_stride);
    const auto w = random_bf16(gen, size_t{s.heads} * s.n_out * s.k);
    Twin input(p, in), weight(p, w), out(p, size_t{s.heads} * s.output_stride * 2);
    out.poison();
    for (int side = 0; side < 2; ++side) {
      Side& d = p.side(side);
      REQUIRE_OK(ops::mla_batched_gemv(
          *d.dev, d.m,
          {.input = input.on(side), .weight = weight.on(side), .output = out.on(side),
           .n_out = s.n_out, .k = s.k, .num_heads = s.heads, .input_stride = s.input_stride,
           .output_stride = s.output_stride}));
    }
    const auto g = out.read<uint16_t>(0), c = out.read<uint16_t>(1);
    Tally t;
    for (uint32_t h = 0; h < s.heads; ++h)
      for (uint32_t n = 0; n < s.output_stride; ++n) {
        const size_t i = size_t{h} * s.output_stride + n;
        if (n >= s.n_out) {  // past n_out: never written
          if (g[i] != 0xffff || c[i] != 0xffff) t.mismatch(i, bf16d(g[i]), bf16d(c[i]));
          continue;
        }
        double abs_sum = 0;
        for (uint32_t j = 0; j < s.k; ++j)
          abs_sum += std::fabs(bf16d(w[(size_t{h} * s.n_out + n) * s.k + j]) *
                               bf16d(in[size_t{h} * s.input_stride + j]));
        t.add(i, bf16d(g[i]), bf16d(c[i]), vs_cpu::kMlaBatchedGemv(bf16d(c[i]), abs_sum));
      }
    t.check("mla_batched_gemv");
  }
}

TEST_CASE("mla_q_rope_scatter and mla_q_rope_writeback match the reference bit for bit") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  struct Shape {
    uint32_t nq, hd, nope, rope, kv_lora, dim;
  };
  for (const Shape& s : {Shape{16, 192, 128, 64, 512, 576}, Shape{64, 192, 128, 64, 512, 576},
                         Shape{128, 192, 128, 64, 512, 576}, Shape{7, 50, 16, 32, 100, 140},
                         Shape{300, 200, 128, 64, 512, 600}}) {
    INFO("nq " << s.nq << " hd " << s.hd << " nope " << s.nope << " rope " << s.rope
               << " kv_lora " << s.kv_lora << " mla_cache_dim " << s.dim);
    // The absorbed buffer starts with random contents: only the rope parts may change.
    Twin q_full(pair(), random_bf16(gen, size_t{s.nq} * s.hd));
    Twin absorbed(pair(), random_bf16(gen, size_t{s.nq} * s.dim));
    Twin contiguous(pair(), size_t{s.nq} * s.rope * 2 + 64);  // poisoned tail: not written
    Twin rotated(pair(), random_bf16(gen, size_t{s.nq} * s.rope));
    contiguous.poison();
    for (int side = 0; side < 2; ++side) {
      Side& d = pair().side(side);
      REQUIRE_OK(ops::mla_q_rope_scatter(
          *d.dev, d.m,
          {.q_full = q_full.on(side), .q_absorbed_buf = absorbed.on(side),
           .q_rope_contiguous = contiguous.on(side), .nq = s.nq, .hd = s.hd, .nope = s.nope,
           .rope = s.rope, .kv_lora = s.kv_lora, .mla_cache_dim = s.dim}));
    }
    check_bitwise<uint16_t>(contiguous, "scatter: q_rope_contiguous");
    check_bitwise<uint16_t>(absorbed, "scatter: q_absorbed_buf");
    for (int side = 0; side < 2; ++side) {
      Side& d = pair().side(side);
      REQUIRE_OK(ops::mla_q_rope_writeback(
          *d.dev, d.m,
          {.q_rope_direct = rotated.on(side), .q_absorbed_buf = absorbed.on(side), .nq = s.nq,
           .rope = s.rope, .kv_lora = s.kv_lora, .mla_cache_dim = s.dim}));
    }
    check_bitwise<uint16_t>(absorbed, "writeback: q_absorbed_buf");
    // The writeback really wrote: the rope parts are the rotated input now.
    const auto a = absorbed.read<uint16_t>(0), r = rotated.read<uint16_t>(0);
    size_t wrong = 0;
    for (uint32_t h = 0; h < s.nq; ++h)
      for (uint32_t i = 0; i < s.rope; ++i)
        wrong += a[size_t{h} * s.dim + s.kv_lora + i] != r[size_t{h} * s.rope + i];
    CHECK(wrong == 0);
  }
}

TEST_CASE("mla_cache_assemble matches the reference bit for bit") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  struct Shape {
    uint32_t kv_lora, rope, dim;
  };
  for (const Shape& s : {Shape{512, 64, 576}, Shape{512, 64, 600}, Shape{128, 32, 200},
                         Shape{960, 64, 1024}, Shape{100, 20, 130}}) {
    INFO("kv_lora " << s.kv_lora << " rope " << s.rope << " mla_cache_dim " << s.dim);
    Twin latent(pair(), random_bf16(gen, s.kv_lora)), k_rope(pair(), random_bf16(gen, s.rope));
    // Three rows each; the op writes the middle one, its neighbours stay poisoned.
    Twin kc(pair(), size_t{3} * s.dim * 2), vc(pair(), size_t{3} * s.dim * 2);
    kc.poison();
    vc.poison();
    for (int side = 0; side < 2; ++side) {
      Side& d = pair().side(side);
      REQUIRE_OK(ops::mla_cache_assemble(*d.dev, d.m,
                                         {.kv_latent = latent.on(side),
                                          .k_rope = k_rope.on(side),
                                          .k_cache = kc.on(side) + uint64_t{s.dim} * 2,
                                          .v_cache = vc.on(side) + uint64_t{s.dim} * 2,
                                          .kv_lora = s.kv_lora,
                                          .rope = s.rope,
                                          .mla_cache_dim = s.dim}));
    }
    check_bitwise<uint16_t>(kc, "k_cache");
    check_bitwise<uint16_t>(vc, "v_cache");
    const auto k = kc.read<uint16_t>(0);
    size_t poisoned_middle = 0;
    for (uint32_t d = 0; d < s.dim; ++d) poisoned_middle += k[s.dim + d] == 0xffff;
    CHECK(poisoned_middle == 0);
  }
}

// ── paged decode over the compressed cache ──────────────────────────────────

struct DecodeCase {
  bool nvfp4;
  uint32_t q_heads, kv_heads, q_dim, kv_dim, block_size;
  std::vector<int32_t> lens;
  uint32_t window = 0;     // fp8 only
  bool sinks = false;      // fp8 only
  uint32_t comp = 0;       // compressed rows per sequence, fp8 only
  // fp8 only: with a workspace, 0 lets the op split (the cuda side does for
  // few sequences, the cpu side never); n > 1 forces n splits on both sides.
  bool workspace = false;
  uint32_t splits = 0;
};

std::string describe(const DecodeCase& c) {
  std::string lens;
  for (int32_t l : c.lens) lens += std::to_string(l) + " ";
  return std::string(c.nvfp4 ? "nvfp4" : "fp8") + " q_heads " + std::to_string(c.q_heads) +
         " kv_heads " + std::to_string(c.kv_heads) + " q_head_dim " + std::to_string(c.q_dim) +
         " kv_cache_dim " + std::to_string(c.kv_dim) + " block_size " +
         std::to_string(c.block_size) + " window " + std::to_string(c.window) + " sinks " +
         (c.sinks ? "on" : "null") + " comp_block_count " + std::to_string(c.comp) +
         (c.workspace ? " workspace, splits " + std::to_string(c.splits) : "") + " lens " + lens;
}

void run_decode(const DecodeCase& c, std::mt19937_64& gen) {
  INFO(describe(c));
  const uint32_t seqs = uint32_t(c.lens.size());
  const int32_t longest = std::max(1, *std::max_element(c.lens.begin(), c.lens.end()));
  const uint32_t max_blocks = uint32_t((longest + c.block_size - 1) / c.block_size) + 1;
  uint32_t used = 0;
  for (int32_t l : c.lens) used += (l + c.block_size - 1) / c.block_size;
  const uint32_t pool_blocks = used + 2;
  std::vector<int32_t> ids(pool_blocks);
  for (uint32_t i = 0; i < pool_blocks; ++i) ids[i] = int32_t(i);
  std::shuffle(ids.begin(), ids.end(), gen);
  std::vector<int32_t> tables(size_t{seqs} * max_blocks, -1);
  uint32_t next = 0;
  for (uint32_t s = 0; s < seqs; ++s)
    for (uint32_t b = 0; b < (c.lens[s] + c.block_size - 1) / c.block_size; ++b)
      tables[size_t{s} * max_blocks + b] = ids[next++];

  const uint32_t dv = c.kv_dim - 64;
  const uint64_t row = uint64_t{c.kv_heads} * c.kv_dim;
  const float k_scale = 0.021f, v_scale = 0.017f;
  double max_v = 0;
  uint64_t stride = 0;
  ops::MlaNvfp4BlockLayout layout;
  std::vector<uint8_t> kp, vp;
  if (c.nvfp4) {
    layout = ops::mla_nvfp4_block_layout(c.block_size, c.kv_heads, c.kv_dim);
    stride = layout.block_stride_bytes;
    kp.resize(pool_blocks * stride);
    vp.resize(pool_blocks * stride);
    for (auto* pool : {&kp, &vp})
      for (uint64_t b = 0; b < pool_blocks; ++b) {
        uint8_t* base = pool->data() + b * stride;
        // Any nibble pattern is a value; scales small enough for a soft softmax.
        for (uint64_t i = 0; i < layout.data_section_bytes; ++i) base[i] = uint8_t(gen());
        for (uint64_t i = layout.data_section_bytes; i < stride; ++i)
          base[i] = sparkrt::numeric::f32_to_fp8_e4m3(
              std::uniform_real_distribution<float>(0.05f, 0.4f)(gen));
      }
    for (uint64_t b = 0; b < pool_blocks; ++b)
      for (uint64_t i = layout.data_section_bytes; i < stride; ++i)
        max_v = std::max(max_v, 6.0 * fp8d(vp[b * stride + i]));
  } else {
    stride = c.block_size * row + 64;  // padded blocks
    kp = random_fp8(gen, pool_blocks * stride, 2.0f, 100.0f);
    vp = random_fp8(gen, pool_blocks * stride, 2.0f, 100.0f);
    for (auto x : vp) max_v = std::max(max_v, std::fabs(fp8d(x)) * v_scale);
  }
  std::vector<uint8_t> comp_rows = random_fp8(gen, size_t{seqs} * c.comp * row + 1, 2.0f, 100.0f);
  if (c.comp > 0)
    for (auto x : comp_rows) max_v = std::max(max_v, std::fabs(fp8d(x)) * v_scale);

  Twin q(pair(), random_bf16(gen, size_t{seqs} * c.q_heads * c.q_dim));
  // K and V in separate pools, except once where V is K itself (as MLA stores it).
  const bool shared = !c.nvfp4 && c.window == 0 && c.comp == 0 && c.sinks;
  Twin kc(pair(), kp), vc(pair(), vp), tb(pair(), tables), lb(pair(), c.lens),
      sinks(pair(), random_f32(gen, c.q_heads, 0.5f, 4.0f)), comp(pair(), comp_rows);
  if (shared)
    for (auto x : kp) max_v = std::max(max_v, std::fabs(fp8d(x)) * v_scale);
  Twin out(pair(), size_t{seqs} * c.q_heads * dv * 2);
  out.poison();
  const uint64_t ws_bytes =
      c.workspace ? ops::mla_decode_workspace_bytes(seqs, c.q_heads, c.kv_dim) : 16;
  Twin ws(pair(), ws_bytes);
  ws.poison();
  // The DeepSeek scale, 1/sqrt(nope + rope), not 1/sqrt(576).
  const float inv_sqrt_d = 1.0f / std::sqrt(192.0f);
  auto fp8_args = [&](int side) -> ops::MlaPagedDecodeFp8Args {
    return {.q = q.on(side),
            .k_cache = kc.on(side),
            .v_cache = shared ? kc.on(side) : vc.on(side),
            .o = out.on(side),
            .block_tables = tb.on(side),
            .seq_lens = lb.on(side),
            .max_blocks_per_seq = max_blocks,
            .num_q_heads = c.q_heads,
            .num_kv_heads = c.kv_heads,
            .q_head_dim = c.q_dim,
            .kv_cache_dim = c.kv_dim,
            .block_size = c.block_size,
            .inv_sqrt_d = inv_sqrt_d,
            .k_scale = k_scale,
            .v_scale = v_scale,
            .cache_stride = stride,
            .num_seqs = seqs,
            .sliding_window = c.window,
            .sinks = c.sinks ? sinks.on(side) : DevicePtr{},
            .comp_pool = c.comp > 0 ? comp.on(side) : DevicePtr{},
            .comp_block_count = c.comp,
            .workspace = c.workspace ? ws.on(side) : DevicePtr{},
            .workspace_bytes = ws_bytes,
            .num_splits = c.splits};
  };
  if (!c.nvfp4 && c.splits > 1) {
    // Where the tiled kernel does not fit (SPARKRT_CUDA_SHARED_MEMORY_OPTIN
    // set to a smaller part's), forced splits are refused and nothing runs.
    Side& d = pair().side(0);
    auto unsplit = fp8_args(0);
    unsplit.num_splits = 0;
    const auto plan = ops::plan_mla_paged_decode_fp8(*d.dev, unsplit);
    REQUIRE_OK(plan.status());
    if (!plan->tiled) {
      const absl::Status s = ops::mla_paged_decode_fp8(*d.dev, d.m, fp8_args(0));
      MESSAGE("forced splits refused: " << s.ToString());
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK(std::string(s.message()).find("shared memory") != std::string::npos);
      return;
    }
  }
  for (int side = 0; side < 2; ++side) {
    Side& d = pair().side(side);
    if (c.nvfp4) {
      REQUIRE_OK(ops::mla_paged_decode_nvfp4(
          *d.dev, d.m,
          {.q = q.on(side), .k_cache = kc.on(side), .v_cache = vc.on(side), .o = out.on(side),
           .block_tables = tb.on(side), .seq_lens = lb.on(side), .max_blocks_per_seq = max_blocks,
           .num_q_heads = c.q_heads, .num_kv_heads = c.kv_heads, .q_head_dim = c.q_dim,
           .kv_cache_dim = c.kv_dim, .block_size = c.block_size, .inv_sqrt_d = inv_sqrt_d,
           .block_stride_bytes = layout.block_stride_bytes,
           .data_section_bytes = layout.data_section_bytes, .num_seqs = seqs}));
    } else {
      REQUIRE_OK(ops::mla_paged_decode_fp8(*d.dev, d.m, fp8_args(side)));
    }
  }
  const auto g = out.read<uint16_t>(0), r = out.read<uint16_t>(1);
  Tally t;
  for (size_t i = 0; i < g.size(); ++i)
    t.add(i, bf16d(g[i]), bf16d(r[i]), vs_cpu::kPagedDecodeAttn(bf16d(r[i]), max_v));
  t.check("decode output");
  // A sequence with nothing to attend gets exact zeros, with or without a sink.
  size_t nonzero_empty = 0;
  for (uint32_t s = 0; s < seqs; ++s)
    if (c.lens[s] == 0 && c.comp == 0)
      for (size_t i = size_t{s} * c.q_heads * dv; i < size_t{s + 1} * c.q_heads * dv; ++i)
        nonzero_empty += g[i] != 0;
  CHECK(nonzero_empty == 0);
}

TEST_CASE("mla_paged_decode_fp8 matches the reference: heads, blocks, windows, sinks, pool") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  uint32_t n = 0;
  for (uint32_t q_heads : {16u, 64u, 128u})
    for (uint32_t block_size : {16u, 64u})
      for (bool sinks : {false, true})
        for (uint32_t comp : {0u, 5u}) {
          // Ragged: empty, one token, block-size edges, a longer one; fewer
          // tokens with more heads to keep the reference quick.
          const int32_t longer = int32_t(q_heads == 128 ? 300 + gen() % 200 : 600 + gen() % 600);
          std::vector<int32_t> lens = {0, 1, int32_t(block_size), int32_t(block_size) + 1,
                                       int32_t(2 + gen() % 100), longer};
          const uint32_t window = (n % 2 == 1) ? 37 + 61 * (n % 5) : 0;
          const uint32_t q_dim = n % 3 == 2 ? 512 : 576;  // 512: latent-only scores
          run_decode({.nvfp4 = false, .q_heads = q_heads, .kv_heads = 1, .q_dim = q_dim,
                      .kv_dim = 576, .block_size = block_size, .lens = lens, .window = window,
                      .sinks = sinks, .comp = comp},
                     gen);
          ++n;
        }
  // A window longer than every sequence, and a pool without a window.
  run_decode({.nvfp4 = false, .q_heads = 64, .kv_heads = 1, .q_dim = 576, .kv_dim = 576,
              .block_size = 64, .lens = {2000, 3}, .window = 4096, .sinks = true, .comp = 0},
             gen);
  // Grouped KV heads and a small head dim.
  run_decode({.nvfp4 = false, .q_heads = 8, .kv_heads = 2, .q_dim = 80, .kv_dim = 128,
              .block_size = 16, .lens = {333, 5, 0}, .window = 100, .sinks = true, .comp = 3},
             gen);
}

TEST_CASE("mla_paged_decode_fp8 split-KV matches the reference: forced and automatic splits") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  // Few sequences: the op splits on the GPU. Long, ragged and empty ones;
  // more splits than some sequences have tiles.
  for (uint32_t splits : {0u, 2u, 5u, 13u})
    for (uint32_t q_heads : {16u, 128u}) {
      const bool sinks = splits % 2 == 1 || splits == 0;
      run_decode(
          {.nvfp4 = false,
           .q_heads = q_heads,
           .kv_heads = 1,
           .q_dim = 576,
           .kv_dim = 576,
           .block_size = 64,
           .lens = {q_heads == 16 ? int32_t(2500 + gen() % 1500) : int32_t(700 + gen() % 300), 0,
                    int32_t(1 + gen() % 130)},
           .window = splits == 2 ? 500u : 0u,
           .sinks = sinks,
           .comp = splits == 5 ? 4u : 0u,
           .workspace = true,
           .splits = splits},
          gen);
    }
  // The op's own split count for one long sequence and for grouped KV heads.
  run_decode({.nvfp4 = false, .q_heads = 64, .kv_heads = 1, .q_dim = 576, .kv_dim = 576,
              .block_size = 16, .lens = {4000}, .sinks = true, .workspace = true},
             gen);
  run_decode({.nvfp4 = false, .q_heads = 40, .kv_heads = 2, .q_dim = 512, .kv_dim = 576,
              .block_size = 32, .lens = {1500, 77}, .window = 1000, .workspace = true},
             gen);
}

TEST_CASE("mla_paged_decode_nvfp4 matches the reference over heads, blocks and dims") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (uint32_t q_heads : {16u, 64u, 128u})
    for (uint32_t block_size : {16u, 64u}) {
      const int32_t longer = int32_t(q_heads == 128 ? 300 + gen() % 200 : 600 + gen() % 600);
      run_decode({.nvfp4 = true, .q_heads = q_heads, .kv_heads = 1,
                  .q_dim = block_size == 16 ? 512u : 576u, .kv_dim = 576,
                  .block_size = block_size,
                  .lens = {0, 1, int32_t(block_size) + 1, int32_t(3 + gen() % 60), longer}},
                 gen);
    }
  run_decode({.nvfp4 = true, .q_heads = 8, .kv_heads = 2, .q_dim = 80, .kv_dim = 128,
              .block_size = 16, .lens = {333, 5}},
             gen);
  run_decode({.nvfp4 = true, .q_heads = 16, .kv_heads = 1, .q_dim = 576, .kv_dim = 576,
              .block_size = 64, .lens = {3000}},
             gen);
}

// ── K3 MLA decode ───────────────────────────────────────────────────────────

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
      Twin q(pair(), qh), k(pair(), kh);
      for (int side = 0; side < 2; ++side) {
        Side& d = pair().side(side);
        REQUIRE_OK(ops::k3_mla_maybe_rope(*d.dev, d.k3,
                                          {.q = q.on(side),
                                           .k = k.on(side),
                                           .heads = s.heads,
                                           .nope_dim = s.nope,
                                           .rope_dim = s.rope,
                                           .pos = pos,
                                           .theta = 10000.0f,
                                           .use_nope = false}));
      }
      for (const Twin* t : {&q, &k}) {
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
      Twin q2(pair(), qh), k2(pair(), kh);
      for (int side = 0; side < 2; ++side) {
        Side& d = pair().side(side);
        REQUIRE_OK(ops::k3_mla_maybe_rope(*d.dev, d.k3,
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
          Twin q(pair(), random_f32(gen, size_t{heads} * dq, 0.05f, 0.3f));
          Twin k(pair(), random_f32(gen, size_t{seq} * heads * dq + 1)), v(pair(), vh);
          Twin g(pair(), random_f32(gen, size_t{heads} * dv, 0.25f, 4.0f));
          Twin out(pair(), size_t{heads} * dv * 4);
          out.poison();
          for (int side = 0; side < 2; ++side) {
            Side& d = pair().side(side);
            // Without the gate g is not read: pass null once.
            const DevicePtr gp = gate || dv != 40 ? g.on(side) : DevicePtr{};
            REQUIRE_OK(ops::k3_mla_sdpa_gate(
                *d.dev, d.k3,
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

// Token steps on both backends, host-KV and device-resident: every output
// agrees with the cpu backend's device-resident step within the sdpa bound.
void run_token_steps(const ops::MlaConfig& cfg, uint32_t tokens, std::mt19937_64& gen) {
  Pair& p = pair();
  INFO("heads " << cfg.heads << " nope " << cfg.qk_nope_head_dim << " rope "
                << cfg.qk_rope_head_dim << " v " << cfg.v_head_dim << " NoPE "
                << cfg.mla_use_nope << " gate " << cfg.mla_use_output_gate << " tokens "
                << tokens);
  REQUIRE_OK(cfg.validate());
  std::unique_ptr<ops::MlaDeviceKv> dkv[2];
  for (int side = 0; side < 2; ++side) {
    auto kv = ops::MlaDeviceKv::alloc(*p.side(side).dev, tokens, cfg.qk_row(), cfg.v_row());
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
      auto h = ops::k3_mla_decode_token(*d.dev, d.k3, cfg, in, hkv[side], st);
      REQUIRE_MESSAGE(h.ok(), std::string(h.status().ToString()));
      auto o = ops::k3_mla_decode_token_on_device(*d.dev, d.k3, cfg, in, *dkv[side], st);
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
  auto full = ops::k3_mla_decode_token_on_device(*p.gpu.dev, p.gpu.k3, cfg,
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
  run_token_steps(ops::MlaConfig::test_twin(), 40, gen);
  run_token_steps({.heads = 16, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64,
                   .v_head_dim = 128, .mla_use_nope = false, .mla_use_output_gate = true},
                  48, gen);
  run_token_steps({.heads = 64, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64,
                   .v_head_dim = 128, .mla_use_nope = false, .mla_use_output_gate = false},
                  12, gen);
  run_token_steps({.heads = 128, .qk_nope_head_dim = 64, .qk_rope_head_dim = 32,
                   .v_head_dim = 64, .mla_use_nope = true, .mla_use_output_gate = true},
                  9, gen);
}

}  // namespace
}  // namespace sparkrt
