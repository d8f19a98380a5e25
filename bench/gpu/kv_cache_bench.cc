// sparkrt_kv_cache_bench: the KV-cache writes and paged decode attention on
// a GPU backend (cuda unless --backend names another), through the op
// wrappers, against the copy ceiling.
//
//   sparkrt_kv_cache_bench [--backend cuda|vulkan] [--json out.json] [--reps 15] [--quick]
//                          [--decode-only | --writes-only] [--decode-subset]
//                          [--decode-shape BATCHxCONTEXTxQHEADSxKVHEADS]... [--splits N]
//                          [--window W] [--no-turbo]
//
// --decode-only skips the cache writes, --writes-only the decode; --decode-subset times a few decode
// shapes that span the cases (batch 1 and large batches, GQA 4 and 8, MHA),
// for comparing kernel builds (SPARKRT_KERNEL_PATH) in one session;
// --decode-shape (repeatable) times only the decode shapes given, in bf16 and
// fp8. --splits N asks the op for exactly N splits (1: none) instead of its
// own choice, to tune the split rule. --window W gives every decode a sliding
// window of W tokens (its bytes count the window's rows only; the PyTorch
// baseline skips such rows). A module the backend has no kernels for (the
// TurboQuant ones on vulkan) is left out, and said so. The run also times
// the host's cost of one launch (vector_ops.empty_10_args, back to back).
// --no-turbo leaves the TurboQuant rows out on any backend.
//
// Each configuration is timed as a CUDA graph of back-to-back ops (captured
// through sparkrt.graph.v1, so host submission never starves the GPU),
// replayed after a warm-up; the time per op is the median replay time over
// the ops in the graph. Inputs rotate over enough independent sets (K/V
// pools, block tables, token rows) that the data is at least three times the
// L2, so the numbers are memory's, not the cache's. Inputs are random and
// never zero.
//
// Bytes counted: cache writes read K and V rows and write them (plus the
// slot mapping); decode attention reads every K and V row of every sequence
// once, q, and writes out. TurboQuant rows (dtype turbo<b>v) count the bytes
// the format really holds: K in bf16, V's packed values and its scales. GB/s is those bytes over the time; the fraction is
// against the 4.24 TB/s device-to-device copy ceiling of an H200 (the run
// also measures its own copy ceiling and reports it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_support.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/ops/kv_cache.h"
#include "sparkrt/ops/paged_attention.h"
#include "sparkrt/ops/turbo_kv_cache.h"
#include "sparkrt/ops/turbo_paged_attention.h"
#include "sparkrt/sparkrt.h"

// Prefixes this bench's error messages (bench_support.h).
const char sparkrt::bench::kBenchName[] = "sparkrt_kv_cache_bench";

namespace {

namespace ops = sparkrt::ops;
using sparkrt::Device;
using sparkrt::DevicePtr;
using sparkrt::Stream;
using namespace sparkrt::bench;

struct Args {
  std::string backend = "cuda";
  std::string json;
  int reps = 15;
  bool quick = false;
  bool decode_only = false;
  bool writes_only = false;
  bool decode_subset = false;
  struct Shape {
    uint32_t batch, context, q_heads, kv_heads;
  };
  std::vector<Shape> decode_shapes;
  uint32_t splits = 0;  // 0: the op's choice
  uint32_t window = 0;  // decode's sliding window, 0: none
  bool turbo = true;
};

struct Row {
  std::string op, dtype;
  uint32_t tokens = 0, batch = 0, context = 0, q_heads = 0, kv_heads = 0, head_dim = 0,
           block_size = 0, hpc = 0, splits = 0, window = 0;
  double us = 0, bytes = 0;
  double gbps() const { return bytes / us / 1e3; }
  double frac() const { return gbps() / (kCeilingTBps * 1e3); }
};

// A prefill-like slot mapping: `tokens` tokens of sequences of `seq_len`,
// each filling whole blocks taken in random order from a pool.
std::vector<int64_t> prefill_slots(std::mt19937_64& gen, uint32_t tokens, uint32_t block_size,
                                   uint32_t pool_blocks) {
  std::vector<int32_t> ids(pool_blocks);
  for (uint32_t i = 0; i < pool_blocks; ++i) ids[i] = int32_t(i);
  std::shuffle(ids.begin(), ids.end(), gen);
  std::vector<int64_t> slots(tokens);
  for (uint32_t t = 0; t < tokens; ++t)
    slots[t] = int64_t{ids[t / block_size]} * block_size + t % block_size;
  return slots;
}

// The slot mappings of `sets` write sets, set s writing its tokens into its
// own blocks of the pool.
std::vector<int64_t> set_slots(std::mt19937_64& gen, int sets, uint32_t tokens,
                               uint32_t block_size, uint32_t blocks_per_set) {
  std::vector<int64_t> slots;
  for (int s = 0; s < sets; ++s) {
    auto one = prefill_slots(gen, tokens, block_size, blocks_per_set);
    for (auto& x : one) x += int64_t{s} * blocks_per_set * block_size;
    slots.insert(slots.end(), one.begin(), one.end());
  }
  return slots;
}

// One block table per set of `sets`, each over that set's blocks of the pool
// in random order.
std::vector<int32_t> shuffled_tables(std::mt19937_64& gen, int sets, uint64_t blocks_per_set) {
  std::vector<int32_t> tables(blocks_per_set * sets);
  for (int s = 0; s < sets; ++s) {
    std::vector<int32_t> ids(blocks_per_set);
    for (uint64_t i = 0; i < blocks_per_set; ++i) ids[i] = int32_t(s * blocks_per_set + i);
    std::shuffle(ids.begin(), ids.end(), gen);
    std::copy(ids.begin(), ids.end(), tables.begin() + s * blocks_per_set);
  }
  return tables;
}

Row bench_cache_write(Device& dev, const ops::KvCacheKernels& k, Filler& fill, Stream stream,
                      std::mt19937_64& gen, bool fp8, uint32_t tokens, int reps) {
  const uint32_t kv_heads = 8, dim = 128, block_size = 16, row = kv_heads * dim;
  const uint64_t in_bytes = uint64_t{tokens} * row * 2;  // one of K, V
  const uint64_t elem = fp8 ? 1 : 2;
  const uint64_t set_bytes = 2 * in_bytes + 2 * uint64_t{tokens} * row * elem;
  const int sets = rotation(set_bytes);
  const uint32_t blocks_per_set = (tokens + block_size - 1) / block_size;
  const uint32_t pool_blocks = blocks_per_set * uint32_t(sets);
  const uint64_t cache_stride = uint64_t{block_size} * row;
  Buf key(dev, in_bytes * sets), value(dev, in_bytes * sets);
  Buf kc(dev, pool_blocks * cache_stride * elem), vc(dev, pool_blocks * cache_stride * elem);
  fill.fill(key.ptr(), key.bytes(), Filler::kBf16);
  fill.fill(value.ptr(), value.bytes(), Filler::kBf16);
  fill.fill(kc.ptr(), kc.bytes(), fp8 ? Filler::kFp8 : Filler::kBf16);
  fill.fill(vc.ptr(), vc.bytes(), fp8 ? Filler::kFp8 : Filler::kBf16);
  const std::vector<int64_t> slots = set_slots(gen, sets, tokens, block_size, blocks_per_set);
  Buf sl(dev, slots.size() * 8);
  ok(dev.copy_h2d(slots, sl.ptr()), "upload");
  ok(dev.synchronize(), "sync");
  auto op = [&](int i, Stream st) -> absl::Status {
    const int s = i % sets;
    const DevicePtr kin = key.ptr() + in_bytes * s, vin = value.ptr() + in_bytes * s;
    const DevicePtr smap = sl.ptr() + uint64_t{tokens} * 8 * s;
    if (fp8)
      return ops::reshape_and_cache_fp8(
          dev, k,
          {.key = kin, .value = vin, .k_cache = kc.ptr(), .v_cache = vc.ptr(),
           .slot_mapping = smap, .num_tokens = tokens, .num_kv_heads = kv_heads,
           .head_dim = dim, .block_size = block_size, .k_scale = 0.02f, .v_scale = 0.03f,
           .key_stride = row, .value_stride = row, .cache_stride = cache_stride},
          st);
    return ops::reshape_and_cache(
        dev, k,
        {.key = kin, .value = vin, .k_cache = kc.ptr(), .v_cache = vc.ptr(),
         .slot_mapping = smap, .num_tokens = tokens, .num_kv_heads = kv_heads, .head_dim = dim,
         .block_size = block_size, .key_stride = row, .value_stride = row},
        st);
  };
  Row r;
  r.op = "reshape_and_cache";
  r.dtype = fp8 ? "fp8" : "bf16";
  r.tokens = tokens;
  r.kv_heads = kv_heads;
  r.head_dim = dim;
  r.block_size = block_size;
  r.bytes = double(set_bytes) + tokens * 8.0;
  const double est = r.bytes / (kCeilingTBps * 1e6) + 3.0;
  r.us = time_graph(dev, stream, graph_ops(sets, est), reps, op);
  return r;
}

Row bench_decode(Device& dev, const ops::PagedAttentionKernels& k, Filler& fill, Stream stream,
                 std::mt19937_64& gen, bool fp8, uint32_t batch, uint32_t context,
                 uint32_t q_heads, uint32_t kv_heads, uint32_t splits, uint32_t window,
                 int reps) {
  const uint32_t dim = 128, block_size = 16, row = kv_heads * dim;
  const uint64_t elem = fp8 ? 1 : 2;
  const uint32_t blocks_per_seq = (context + block_size - 1) / block_size;
  const uint64_t cache_stride = uint64_t{block_size} * row;
  const uint64_t kv_bytes = 2ull * batch * context * row * elem;  // K and V of one set
  const uint32_t read = window != 0 ? std::min(context, window) : context;  // tokens a step reads
  const uint64_t read_bytes = kv_bytes / context * read;
  const int sets = rotation(read_bytes);
  const uint64_t blocks_per_set = uint64_t{batch} * blocks_per_seq;
  const uint64_t pool_blocks = blocks_per_set * sets;
  Buf kc(dev, pool_blocks * cache_stride * elem), vc(dev, pool_blocks * cache_stride * elem);
  fill.fill(kc.ptr(), kc.bytes(), fp8 ? Filler::kFp8 : Filler::kBf16);
  fill.fill(vc.ptr(), vc.bytes(), fp8 ? Filler::kFp8 : Filler::kBf16);
  // One block table per set, over that set's blocks in random order.
  const std::vector<int32_t> tables = shuffled_tables(gen, sets, blocks_per_set);
  const std::vector<int32_t> lens(batch, int32_t(context));
  Buf bt(dev, tables.size() * 4), sl(dev, batch * 4);
  ok(dev.copy_h2d(tables, bt.ptr()), "upload");
  ok(dev.copy_h2d(lens, sl.ptr()), "upload");
  const uint64_t q_bytes = uint64_t{batch} * q_heads * dim * 2;
  Buf q(dev, q_bytes), out(dev, q_bytes);
  fill.fill(q.ptr(), q_bytes, Filler::kBf16);
  const auto ws = ok(ops::DecodeWorkspace::create(dev, batch, q_heads, dim), "workspace");
  const uint64_t ws_bytes = ws.bytes();
  ok(dev.synchronize(), "sync");
  const float inv_sqrt_d = 1.0f / std::sqrt(float(dim));

  ops::PagedDecodeAttnArgs a{.q = q.ptr(), .k_cache = kc.ptr(), .v_cache = vc.ptr(),
                             .out = out.ptr(), .block_tables = bt.ptr(), .seq_lens = sl.ptr(),
                             .max_blocks_per_seq = blocks_per_seq, .num_seqs = batch,
                             .num_q_heads = q_heads, .num_kv_heads = kv_heads, .head_dim = dim,
                             .block_size = block_size, .inv_sqrt_d = inv_sqrt_d,
                             .q_stride = q_heads * dim, .sliding_window = window,
                             .max_seq_len = context, .workspace = ws.ptr(),
                             .workspace_bytes = ws_bytes, .num_splits = splits};
  ops::PagedDecodeAttnFp8Args a8{.q = q.ptr(), .k_cache = kc.ptr(), .v_cache = vc.ptr(),
                                 .out = out.ptr(), .block_tables = bt.ptr(), .seq_lens = sl.ptr(),
                                 .max_blocks_per_seq = blocks_per_seq, .num_seqs = batch,
                                 .num_q_heads = q_heads, .num_kv_heads = kv_heads,
                                 .head_dim = dim, .block_size = block_size,
                                 .inv_sqrt_d = inv_sqrt_d, .k_scale = 0.02f, .v_scale = 0.03f,
                                 .q_stride = q_heads * dim, .cache_stride = cache_stride,
                                 .sliding_window = window, .max_seq_len = context,
                                 .workspace = ws.ptr(), .workspace_bytes = ws_bytes,
                                 .num_splits = splits};
  const auto plan = fp8 ? ok(ops::plan_paged_decode(dev, a8), "plan")
                        : ok(ops::plan_paged_decode(dev, a), "plan");
  auto op = [&](int i, Stream st) -> absl::Status {
    const DevicePtr table = bt.ptr() + uint64_t(i % sets) * blocks_per_set * 4;
    if (fp8) {
      auto b = a8;
      b.block_tables = table;
      return ops::paged_decode_attn_fp8(dev, k, b, st);
    }
    auto b = a;
    b.block_tables = table;
    return ops::paged_decode_attn_bf16(dev, k, b, st);
  };
  Row r;
  r.op = "paged_decode_attn";
  r.dtype = fp8 ? "fp8" : "bf16";
  r.batch = batch;
  r.context = context;
  r.q_heads = q_heads;
  r.kv_heads = kv_heads;
  r.head_dim = dim;
  r.block_size = block_size;
  r.hpc = plan.heads_per_cta;
  r.splits = plan.num_splits;
  r.window = window;
  r.bytes = double(read_bytes) + 2.0 * q_bytes;
  const double est = r.bytes / (kCeilingTBps * 1e6) + 5.0;
  r.us = time_graph(dev, stream, graph_ops(sets, est), reps, op);
  return r;
}


// The TurboQuant write of `tokens` tokens: K raw, V quantized to `bits`.
Row bench_turbo_write(Device& dev, const ops::TurboKvCacheKernels& k, Filler& fill, Stream stream,
                      std::mt19937_64& gen, uint32_t bits, uint32_t tokens, int reps) {
  const uint32_t kv_heads = 8, dim = 128, block_size = 16, row = kv_heads * dim;
  const auto lay = ok(ops::turbo_cache_layout(bits, block_size, kv_heads, dim), "layout");
  const uint64_t in_bytes = uint64_t{tokens} * row * 2;  // one of K, V
  const uint64_t v_bytes = uint64_t{tokens} * row * bits / 8 + uint64_t{tokens} * row / 16;
  const uint64_t set_bytes = 3 * in_bytes + v_bytes;  // K, V read; K, packed V written
  const int sets = rotation(set_bytes);
  const uint32_t blocks_per_set = (tokens + block_size - 1) / block_size;
  const uint64_t pool_blocks = uint64_t{blocks_per_set} * sets;
  Buf key(dev, in_bytes * sets), value(dev, in_bytes * sets);
  Buf kc(dev, pool_blocks * lay.k_block_stride_bytes), vc(dev, pool_blocks * lay.v_block_stride_bytes);
  fill.fill(key.ptr(), key.bytes(), Filler::kBf16);
  fill.fill(value.ptr(), value.bytes(), Filler::kBf16);
  const std::vector<int64_t> slots = set_slots(gen, sets, tokens, block_size, blocks_per_set);
  Buf sl(dev, slots.size() * 8);
  ok(dev.copy_h2d(slots, sl.ptr()), "upload");
  ok(dev.synchronize(), "sync");
  auto op = [&](int i, Stream st) -> absl::Status {
    const int s = i % sets;
    const ops::ReshapeAndCacheTurboArgs a{
        .key = key.ptr() + in_bytes * s, .value = value.ptr() + in_bytes * s,
        .k_cache = kc.ptr(), .v_cache = vc.ptr(),
        .slot_mapping = sl.ptr() + uint64_t{tokens} * 8 * s, .num_tokens = tokens,
        .num_kv_heads = kv_heads, .head_dim = dim, .block_size = block_size, .key_stride = row,
        .value_stride = row, .k_block_stride_bytes = lay.k_block_stride_bytes,
        .v_block_stride_bytes = lay.v_block_stride_bytes,
        .v_data_section_bytes = lay.v_data_section_bytes};
    if (bits == 2) return ops::reshape_and_cache_bf16k_turbo2v(dev, k, a, st);
    if (bits == 3) return ops::reshape_and_cache_bf16k_turbo3v(dev, k, a, st);
    return ops::reshape_and_cache_bf16k_turbo4v(dev, k, a, st);
  };
  Row r;
  r.op = "reshape_and_cache";
  r.dtype = "turbo" + std::to_string(bits) + "v";
  r.tokens = tokens;
  r.kv_heads = kv_heads;
  r.head_dim = dim;
  r.block_size = block_size;
  r.bytes = double(set_bytes) + tokens * 8.0;
  const double est = r.bytes / (kCeilingTBps * 1e6) + 3.0;
  r.us = time_graph(dev, stream, graph_ops(sets, est), reps, op);
  return r;
}

// Decode attention over a TurboQuant cache of `bits`, the shapes of
// bench_decode.
Row bench_turbo_decode(Device& dev, const ops::TurboPagedAttentionKernels& k, Filler& fill,
                       Stream stream, std::mt19937_64& gen, uint32_t bits, uint32_t batch,
                       uint32_t context, uint32_t q_heads, uint32_t kv_heads, uint32_t splits,
                       uint32_t window, int reps) {
  const uint32_t dim = 128, block_size = 16, row = kv_heads * dim;
  const auto lay = ok(ops::turbo_cache_layout(bits, block_size, kv_heads, dim), "layout");
  const uint32_t blocks_per_seq = (context + block_size - 1) / block_size;
  const uint32_t read = window != 0 ? std::min(context, window) : context;
  const uint64_t token_bytes = uint64_t{row} * 2 + (lay.v_block_stride_bytes / block_size);
  const uint64_t read_bytes = uint64_t{batch} * read * token_bytes;
  const int sets = rotation(read_bytes);
  const uint64_t blocks_per_set = uint64_t{batch} * blocks_per_seq;
  const uint64_t pool_blocks = blocks_per_set * sets;
  Buf kc(dev, pool_blocks * lay.k_block_stride_bytes), vc(dev, pool_blocks * lay.v_block_stride_bytes);
  fill.fill(kc.ptr(), kc.bytes(), Filler::kBf16);
  fill.fill(vc.ptr(), vc.bytes(), Filler::kFp8);  // random indices, finite scales
  const std::vector<int32_t> tables = shuffled_tables(gen, sets, blocks_per_set);
  const std::vector<int32_t> lens(batch, int32_t(context));
  Buf bt(dev, tables.size() * 4), sl(dev, batch * 4);
  ok(dev.copy_h2d(tables, bt.ptr()), "upload");
  ok(dev.copy_h2d(lens, sl.ptr()), "upload");
  const uint64_t q_bytes = uint64_t{batch} * q_heads * dim * 2;
  Buf q(dev, q_bytes), out(dev, q_bytes);
  fill.fill(q.ptr(), q_bytes, Filler::kBf16);
  const auto ws = ok(ops::DecodeWorkspace::create(dev, batch, q_heads, dim), "workspace");
  ok(dev.synchronize(), "sync");
  const ops::PagedDecodeAttnTurboArgs a{
      .q = q.ptr(), .k_cache = kc.ptr(), .v_cache = vc.ptr(), .out = out.ptr(),
      .block_tables = bt.ptr(), .seq_lens = sl.ptr(), .max_blocks_per_seq = blocks_per_seq,
      .num_seqs = batch, .num_q_heads = q_heads, .num_kv_heads = kv_heads, .head_dim = dim,
      .block_size = block_size, .inv_sqrt_d = 1.0f / std::sqrt(float(dim)),
      .q_stride = q_heads * dim, .v_block_stride_bytes = lay.v_block_stride_bytes,
      .v_data_section_bytes = lay.v_data_section_bytes, .sliding_window = window,
      .max_seq_len = context, .workspace = ws.ptr(), .workspace_bytes = ws.bytes(),
      .num_splits = splits};
  const auto plan = ok(ops::plan_paged_decode_turbo(dev, bits, a), "plan");
  auto op = [&](int i, Stream st) -> absl::Status {
    auto b = a;
    b.block_tables = bt.ptr() + uint64_t(i % sets) * blocks_per_set * 4;
    if (bits == 2) return ops::paged_decode_attn_bf16k_turbo2v(dev, k, b, st);
    if (bits == 3) return ops::paged_decode_attn_bf16k_turbo3v(dev, k, b, st);
    return ops::paged_decode_attn_bf16k_turbo4v(dev, k, b, st);
  };
  Row r;
  r.op = "paged_decode_attn";
  r.dtype = "turbo" + std::to_string(bits) + "v";
  r.batch = batch;
  r.context = context;
  r.q_heads = q_heads;
  r.kv_heads = kv_heads;
  r.head_dim = dim;
  r.block_size = block_size;
  r.hpc = plan.heads_per_cta;
  r.splits = plan.num_splits;
  r.window = window;
  r.bytes = double(read_bytes) + 2.0 * q_bytes;
  const double est = r.bytes / (kCeilingTBps * 1e6) + 5.0;
  r.us = time_graph(dev, stream, graph_ops(sets, est), reps, op);
  return r;
}

// The host's time per launch of vector_ops.empty_10_args (grid 1, block 32),
// issued back to back on `stream`: the median over `reps` batches of 512,
// the GPU drained between batches (not counted).
double host_launch_us(Device& dev, Stream stream, int reps) {
  const auto kernel = ok(dev.kernel("vector_ops", "empty_10_args"), "resolve empty_10_args");
  Buf scratch(dev, 4096);
  const DevicePtr p = scratch.ptr();
  constexpr int kBatch = 512;
  const auto launch = [&] {
    return sparkrt::KernelLaunch(dev, kernel)
        .grid({1})
        .block({32})
        .arg(p).arg(p).arg(p).arg(p)
        .arg(uint32_t{1}).arg(uint32_t{2}).arg(uint32_t{3}).arg(uint64_t{4})
        .arg(5.0f).arg(6.0f)
        .launch(stream);
  };
  ok(launch(), "launch empty_10_args");
  ok(dev.synchronize(stream), "synchronize");
  std::vector<double> per_launch;
  for (int r = 0; r < std::max(reps, 5); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) ok(launch(), "launch empty_10_args");
    const auto t1 = std::chrono::steady_clock::now();
    ok(dev.synchronize(stream), "synchronize");
    per_launch.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kBatch);
  }
  return median(per_launch);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      args.json = argv[++i];
    } else if (a == "--no-turbo") {
      args.turbo = false;
    } else if (a == "--backend" && i + 1 < argc) {
      args.backend = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      args.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--quick") {
      args.quick = true;
    } else if (a == "--decode-only") {
      args.decode_only = true;
    } else if (a == "--writes-only") {
      args.writes_only = true;
    } else if (a == "--decode-subset") {
      args.decode_only = true;
      args.decode_subset = true;
    } else if (Args::Shape d{}; a == "--decode-shape" && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%ux%ux%ux%u", &d.batch, &d.context, &d.q_heads,
                           &d.kv_heads) == 4 &&
               d.batch > 0 && d.context > 0 && d.kv_heads > 0 && d.q_heads % d.kv_heads == 0) {
      args.decode_only = true;
      args.decode_shapes.push_back(d);
      ++i;
    } else if (a == "--splits" && i + 1 < argc) {
      args.splits = uint32_t(std::max(0, std::atoi(argv[++i])));
    } else if (a == "--window" && i + 1 < argc) {
      args.window = uint32_t(std::max(0, std::atoi(argv[++i])));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--backend NAME] [--json out.json] [--reps N] [--quick] [--decode-only] [--writes-only] "
                   "[--decode-subset] [--decode-shape BATCHxCONTEXTxQHEADSxKVHEADS]... "
                   "[--splits N] [--window W] [--no-turbo]\n",
                   argv[0]);
      return 2;
    }
  }
  auto opened = Device::open({.backend = args.backend});
  if (!opened.ok()) {
    std::printf("SKIPPED: no usable %s device: %s\n", args.backend.c_str(),
                std::string(opened.status().ToString()).c_str());
    return opened.status().code() == absl::StatusCode::kUnavailable ? 77 : 1;
  }
  Device& dev = **opened;
  const auto k = ok(ops::KvCacheKernels::resolve(dev), "resolve kernels");
  const auto pa = ok(ops::PagedAttentionKernels::resolve(dev), "resolve kernels");
  auto tk = ops::TurboKvCacheKernels::resolve(dev);
  auto tpa = ops::TurboPagedAttentionKernels::resolve(dev);
  const bool turbo = args.turbo && tk.ok() && tpa.ok();
  if (args.turbo && !turbo)
    std::printf("TurboQuant rows left out: %s\n",
                std::string((tk.ok() ? tpa.status() : tk.status()).message()).c_str());
  const Stream stream = ok(dev.create_stream(), "stream");
  std::mt19937_64 gen(20261130);
  Filler fill(dev, gen);

  const double ceiling = copy_ceiling(dev, stream, args.reps);
  std::vector<Row> rows;
  std::vector<uint32_t> tokens = {256, 1024, 4096, 16384, 65536};
  std::vector<uint32_t> batches = {1, 8, 32, 128};
  std::vector<uint32_t> contexts = {1024, 4096, 16384, 32768};
  if (args.quick) {
    tokens = {4096};
    batches = {1, 32};
    contexts = {4096};
  }
  if (!args.decode_only) {
    for (bool fp8 : {false, true})
      for (uint32_t t : tokens)
        rows.push_back(bench_cache_write(dev, k, fill, stream, gen, fp8, t, args.reps));
    for (uint32_t bits : {4u, 3u, 2u})
      for (uint32_t t : tokens)
        if (turbo) rows.push_back(bench_turbo_write(dev, *tk, fill, stream, gen, bits, t, args.reps));
  }
  using Shape = Args::Shape;
  std::vector<Shape> shapes = args.decode_shapes;
  const Shape subset[] = {{1, 4096, 32, 8},   {1, 32768, 32, 8}, {8, 16384, 32, 8},
                          {32, 4096, 32, 8},  {128, 16384, 32, 8}, {1, 8192, 64, 8},
                          {32, 8192, 64, 8},  {32, 4096, 32, 32}};
  if (shapes.empty() && args.decode_subset) shapes.assign(std::begin(subset), std::end(subset));
  if (shapes.empty()) {
    for (uint32_t b : batches)
      for (uint32_t c : contexts) shapes.push_back({b, c, 32, 8});
    if (!args.quick) {
      for (uint32_t b : {1u, 32u}) {
        shapes.push_back({b, 8192, 64, 8});
        shapes.push_back({b, 4096, 32, 32});
      }
    }
  }
  if (args.writes_only) shapes.clear();
  for (bool fp8 : {false, true})
    for (const Shape& sh : shapes)
      rows.push_back(bench_decode(dev, pa, fill, stream, gen, fp8, sh.batch, sh.context,
                                  sh.q_heads, sh.kv_heads, args.splits, args.window, args.reps));
  for (uint32_t bits : {4u, 3u, 2u})
    for (const Shape& sh : shapes)
      if (turbo)
        rows.push_back(bench_turbo_decode(dev, *tpa, fill, stream, gen, bits, sh.batch, sh.context,
                                        sh.q_heads, sh.kv_heads, args.splits, args.window,
                                        args.reps));

  const double launch_us = host_launch_us(dev, stream, args.reps);
  const auto& props = dev.properties();
  print_device_line(props, ceiling);
  std::printf("backend %s: host cost of one launch (empty_10_args, back to back): %.3f us\n",
              args.backend.c_str(), launch_us);
  std::printf("%-20s %-5s %7s %6s %7s %4s %4s %4s %6s %10s %9s %7s %7s\n", "op", "dtype",
              "tokens", "batch", "context", "hq", "hkv", "hpc", "splits", "us", "GB/s", "ceiling",
              "window");
  for (const Row& r : rows)
    std::printf("%-20s %-5s %7u %6u %7u %4u %4u %4u %6u %10.2f %9.1f %6.1f%% %7u\n",
                r.op.c_str(), r.dtype.c_str(), r.tokens, r.batch, r.context, r.q_heads,
                r.kv_heads, r.hpc, r.splits, r.us, r.gbps(), 100.0 * r.frac(), r.window);

  if (!args.json.empty()) {
    FILE* f = open_json(args.json, props, ceiling);
    std::fprintf(f, "  \"backend\": \"%s\",\n  \"launch_host_us\": %.4f,\n", args.backend.c_str(),
                 launch_us);
    std::fprintf(f, "  \"results\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(
          f,
          "    {\"op\": \"%s\", \"dtype\": \"%s\", \"tokens\": %u, \"batch\": %u, "
          "\"context\": %u, \"num_q_heads\": %u, \"num_kv_heads\": %u, \"head_dim\": %u, "
          "\"block_size\": %u, \"hpc\": %u, \"splits\": %u, \"window\": %u, \"us\": %.3f, "
          "\"bytes\": %.0f, \"gbps\": %.1f, \"frac\": %.4f}%s\n",
          r.op.c_str(), r.dtype.c_str(), r.tokens, r.batch, r.context, r.q_heads, r.kv_heads,
          r.head_dim, r.block_size, r.hpc, r.splits, r.window, r.us, r.bytes, r.gbps(), r.frac(),
          i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  ok(dev.destroy_stream(stream), "stream");
  return 0;
}
