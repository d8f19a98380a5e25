// Decode attention over TurboQuant caches on a GPU backend (cuda, or vulkan with --backend=vulkan)
// against the cpu backend's reference, through the op wrappers: the caches are written on each side
// by its own write op (bit-identical, turbo_kv_cache_gpu_test), the outputs poisoned (0xff) first
// and compared within docs/kernels.md's tolerance of the bf16 decode (tensor-core products, f16 V
// and weights, f32 sums). GQA 1/4/8, head_dim 64/128/256, blocks of 16 and 32, ragged and empty
// sequences, sliding windows, the op's own split choice and forced splits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_support.h"
#include "sparkrt/ops/turbo_kv_cache.h"
#include "sparkrt/ops/turbo_paged_attention.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/verify/tolerances.h"

namespace sparkrt {
namespace {

namespace ops = sparkrt::ops;
namespace vs_cpu = verify::gpu_vs_reference;  // docs/kernels.md, "Tolerances"
using numeric::bf16_bits;
using namespace gpu_test;

struct Kernels {
  ops::TurboKvCacheKernels write;
  ops::TurboPagedAttentionKernels decode;
  static absl::StatusOr<Kernels> resolve(Device& dev) {
    auto w = ops::TurboKvCacheKernels::resolve(dev);
    if (!w.ok()) return w.status();
    auto d = ops::TurboPagedAttentionKernels::resolve(dev);
    if (!d.ok()) return d.status();
    return Kernels{*w, *d};
  }
};
using Side = OpSide<Kernels>;
using Pair = DevicePair<Side>;
Pair& pair() { return op_pair<Kernels>(); }

struct Case {
  uint32_t bits, q_heads, kv_heads, dim, block_size, window, splits;  // splits 0: the op's choice
  std::vector<int32_t> lens;
};

void run(const Case& c, std::mt19937_64& gen) {
  Pair& p = pair();
  INFO(c.bits << "-bit, " << c.q_heads << "/" << c.kv_heads << " heads, head_dim " << c.dim
              << ", block " << c.block_size << ", window " << c.window << ", splits " << c.splits);
  const uint32_t seqs = uint32_t(c.lens.size());
  const int32_t longest = *std::max_element(c.lens.begin(), c.lens.end());
  const uint32_t max_blocks = uint32_t(longest) / c.block_size + 2, blocks = seqs * max_blocks;
  const uint32_t row = c.kv_heads * c.dim, tokens = blocks * c.block_size;
  auto lay = ops::turbo_cache_layout(c.bits, c.block_size, c.kv_heads, c.dim);
  REQUIRE_OK(lay.status());
  std::vector<int64_t> slot_ids(tokens);
  for (uint32_t i = 0; i < tokens; ++i) slot_ids[i] = i;
  const auto ids = shuffled(gen, int32_t(blocks));
  BufferPair key(p, random_bf16(gen, size_t{tokens} * row));
  BufferPair value(p, random_bf16(gen, size_t{tokens} * row, 0.01f, 2.0f));
  BufferPair slots(p, slot_ids), tables(p, ids), lens(p, c.lens);
  const uint32_t q_stride = c.q_heads * c.dim + 8;
  BufferPair q(p, random_bf16(gen, size_t{seqs} * q_stride));
  BufferPair kc(p, blocks * lay->k_block_stride_bytes), vc(p, blocks * lay->v_block_stride_bytes);
  BufferPair out(p, size_t{seqs} * c.q_heads * c.dim * 2);
  BufferPair ws(p, ops::paged_decode_workspace_bytes(seqs, c.q_heads, c.dim));
  out.poison();
  uint32_t splits_used[2] = {0, 0};
  for (int side = 0; side < 2; ++side) {
    Side& s = p.side(side);
    REQUIRE_OK(s.dev->memset(ws.on(side), 0, ws.bytes()));
    const ops::ReshapeAndCacheTurboArgs w{
        .key = key.on(side), .value = value.on(side), .k_cache = kc.on(side),
        .v_cache = vc.on(side), .slot_mapping = slots.on(side), .num_tokens = tokens,
        .num_kv_heads = c.kv_heads, .head_dim = c.dim, .block_size = c.block_size,
        .key_stride = row, .value_stride = row,
        .k_block_stride_bytes = lay->k_block_stride_bytes,
        .v_block_stride_bytes = lay->v_block_stride_bytes,
        .v_data_section_bytes = lay->v_data_section_bytes};
    REQUIRE_OK(c.bits == 2   ? ops::reshape_and_cache_bf16k_turbo2v(*s.dev, s.k.write, w)
               : c.bits == 3 ? ops::reshape_and_cache_bf16k_turbo3v(*s.dev, s.k.write, w)
                             : ops::reshape_and_cache_bf16k_turbo4v(*s.dev, s.k.write, w));
    const ops::PagedDecodeAttnTurboArgs a{
        .q = q.on(side), .k_cache = kc.on(side), .v_cache = vc.on(side), .out = out.on(side),
        .block_tables = tables.on(side), .seq_lens = lens.on(side),
        .max_blocks_per_seq = max_blocks, .num_seqs = seqs, .num_q_heads = c.q_heads,
        .num_kv_heads = c.kv_heads, .head_dim = c.dim, .block_size = c.block_size,
        .inv_sqrt_d = float(1 / std::sqrt(double(c.dim))), .q_stride = q_stride,
        .v_block_stride_bytes = lay->v_block_stride_bytes,
        .v_data_section_bytes = lay->v_data_section_bytes, .sliding_window = c.window,
        .workspace = ws.on(side), .workspace_bytes = ws.bytes(), .num_splits = c.splits};
    auto plan = ops::plan_paged_decode_turbo(*s.dev, c.bits, a);
    REQUIRE_OK(plan.status());
    splits_used[side] = plan->num_splits;
    REQUIRE_OK(c.bits == 2   ? ops::paged_decode_attn_bf16k_turbo2v(*s.dev, s.k.decode, a)
               : c.bits == 3 ? ops::paged_decode_attn_bf16k_turbo3v(*s.dev, s.k.decode, a)
                             : ops::paged_decode_attn_bf16k_turbo4v(*s.dev, s.k.decode, a));
  }
  INFO("splits: gpu " << splits_used[0] << ", cpu " << splits_used[1]);
  // max |V| bounds the absolute term: the dequantized values stay within a
  // few times the inputs' largest magnitude (2).
  const double max_v = 4.0;
  const auto g = out.read<bf16_bits>(0), r = out.read<bf16_bits>(1);
  Tally t;
  for (size_t i = 0; i < g.size(); ++i) {
    const double gv = bf16d(g[i]), rv = bf16d(r[i]);
    t.add(i, gv, rv, vs_cpu::kPagedDecodeAttn(rv, max_v));
  }
  t.check("out");
}

TEST_CASE("turbo decode attention matches the reference over widths, GQA, dims, blocks, windows") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (uint32_t bits : {2u, 3u, 4u}) {
    run({bits, 32, 8, 128, 16, 0, 0, {0, 1, 17, 300, 4100}}, gen);
    run({bits, 8, 8, 64, 32, 0, 1, {5, 1000, 63}}, gen);
    run({bits, 16, 2, 256, 16, 700, 0, {2000, 31}}, gen);
    run({bits, 64, 8, 128, 32, 0, 0, {9000}}, gen);          // one sequence: the op splits
    run({bits, 32, 4, 128, 16, 0, 7, {3000, 2999, 17}}, gen);  // forced splits
    run({bits, 24, 4, 64, 16, 100, 3, {500, 0}}, gen);        // GQA 6, window and splits
  }
}

}  // namespace
}  // namespace sparkrt
