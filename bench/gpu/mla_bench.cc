// sparkrt_mla_bench: the MLA decode paths on a GPU backend (cuda unless
// --backend names another), through the op wrappers.
//
//   sparkrt_mla_bench [--backend cuda|vulkan] [--json out.json] [--reps 15] [--quick]
//                     [--decode-only] [--decode-shape [nvfp4:]HEADSxBATCHxCONTEXT]...
//                     [--pause-ms N] [--k3-only] [--k3-context N]... [--k3-splits N]
//
// --decode-shape times only the decode shapes given, in order (fp8, or
// NVFP4 with the nvfp4: prefix; for profiling and for comparing kernel
// builds); --pause-ms idles that long before each decode shape. --k3-only
// skips the paged decode; --k3-context times the K3 steps at the given
// cached lengths instead of 1K, 8K and 32K; --k3-splits sets the split
// count of the split-form timing alone.
//
// (a) K3 token steps. One layer of MLA attention in the expanded form:
//     64 heads, qk_nope_head_dim 128, qk_rope_head_dim 64 (RoPE on),
//     v_head_dim 128, output gate on, with 1K, 8K and 32K tokens already
//     cached. Each step is timed on the host clock from call to
//     output-on-host (the steps block), median over many consecutive tokens.
//     The device-resident step (its KV allocated for the configuration, so
//     it attends split-KV) moves the same bytes over the bus at every length
//     (q, k, v, g up, out down); the host-KV step (not at 32K) uploads the
//     whole cache every token and attends in one pass. Both attention forms
//     alone at the same length are timed with events (the split form with
//     the plan's split count, or --k3-splits), with the bytes they read (the
//     K and V rows) against the copy ceiling; "step - split" is what the
//     device-resident step costs beyond its attention, and must not grow
//     with the sequence.
// (b) mla_paged_decode_fp8 (and, for comparison, mla_paged_decode_nvfp4) at
//     4K and 8K context: one KV head, kv_cache_dim 576 (q_head_dim 576),
//     block size 64, K and V in one pool (V is the latent part of the K row),
//     with a split-KV workspace (the op decides whether to split, for both
//     formats, and the split count is reported), for batch
//     1 and batches whose batch x heads fill the GPU; 16 query heads (a
//     tensor-parallel shard of DeepSeek's 128: memory-bound) and 128
//     (compute-bound: 2 * 128 * 1088 flops per 576-byte row, so TFLOPS is
//     reported too). Timed as a graph of back-to-back ops (captured through
//     sparkrt.graph.v1, on any backend) replayed after a warm-up, median
//     replay time per op; block tables rotate over enough independent pool
//     regions that the data is at least three times the L2. Bytes = the cache rows read once (576
//     bytes a token for fp8; 288 + 36 for nvfp4) + q + out; GB/s against the
//     4.24 TB/s device-to-device copy ceiling of an H200 (the run also
//     measures its own copy ceiling and reports it).
// Inputs are random and never zero.
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
#include <thread>
#include <vector>

#include "bench_support.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/ops/mla_decode.h"
#include "sparkrt/ops/mla.h"
#include "sparkrt/sparkrt.h"

// Prefixes this bench's error messages (bench_support.h).
const char sparkrt::bench::kBenchName[] = "sparkrt_mla_bench";

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
  bool k3_only = false;    // --k3-only: the K3 steps, no paged decode shapes
  std::vector<uint32_t> k3_contexts;  // --k3-context (repeatable): these instead of 1K, 8K, 32K
  uint32_t k3_splits = 0;  // --k3-splits: the split form's count (0: the plan's)
  // Set by --decode-shape (repeatable): time only these decode shapes, in
  // order.
  struct DecodeShape {
    bool nvfp4;
    uint32_t heads, batch, context;
  };
  std::vector<DecodeShape> decode_shapes;
  // --pause-ms: idle time before each decode shape (to tell the device's
  // warming from the process's own state when a shape is timed again).
  int pause_ms = 0;
};

std::vector<float> random_f32(std::mt19937_64& gen, size_t n, float lo = 0.25f, float hi = 2.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = random_magnitude(gen, lo, hi);
  return v;
}

// ── (a) K3 token steps ──────────────────────────────────────────────────────

struct StepRow {
  std::string path;  // "device" or "host"
  uint32_t context = 0, tokens_timed = 0, splits = 0;
  double step_us = 0;                  // median step
  double one_pass_us = 0, split_us = 0;  // the attention forms alone
  double attention_bytes = 0;          // the K and V rows they read
  double bus_bytes = 0;                // host<->device bytes per token
  // What the step costs beyond the attention it runs.
  double host_side_us() const { return step_us - (path == "device" ? split_us : one_pass_us); }
  double split_frac() const { return attention_bytes / split_us / 1e6 / kCeilingTBps; }
};

ops::MlaConfig k3_config() {
  return {.heads = 64, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64, .v_head_dim = 128,
          .mla_use_nope = false, .mla_use_output_gate = true};
}

void bench_k3(Device& dev, const ops::MlaDecodeKernels& k, Stream stream, std::mt19937_64& gen,
              uint32_t context, int device_tokens, int host_tokens, int reps, uint32_t k3_splits,
              std::vector<StepRow>& rows) {
  const ops::MlaConfig cfg = k3_config();
  ok(cfg.validate(), "config");
  const size_t kr = cfg.qk_row(), vr = cfg.v_row();
  const int warm = 3;
  // The first `context` rows, the same on both paths.
  const auto k_all = random_f32(gen, size_t{context} * kr);
  const auto v_all = random_f32(gen, size_t{context} * vr);
  ops::MlaHostKv host(cfg);
  for (uint32_t t = 0; t < context; ++t)
    ok(host.append(std::span<const float>(k_all).subspan(size_t{t} * kr, kr),
                   std::span<const float>(v_all).subspan(size_t{t} * vr, vr)),
       "host append");
  auto kv = ok(ops::MlaDeviceKv::alloc(dev, size_t{context} + warm + device_tokens, cfg),
               "MlaDeviceKv::alloc");
  {
    Buf k_dev(dev, k_all.size() * 4);
    ok(dev.copy_h2d(k_all, k_dev.ptr()), "upload");
    for (uint32_t t = 0; t < context; ++t)
      ok(kv.append(k_dev.ptr() + uint64_t{t} * kr * 4,
                   std::span<const float>(v_all).subspan(size_t{t} * vr, vr), stream),
         "device append");
    ok(dev.synchronize(stream), "sync");
  }

  // Fresh inputs per token, made before the timing.
  const int n = warm + std::max(device_tokens, host_tokens);
  std::vector<std::vector<float>> q(n), kk(n), v(n), g(n);
  for (int i = 0; i < n; ++i) {
    q[i] = random_f32(gen, kr, 0.05f, 0.3f);
    kk[i] = random_f32(gen, kr);
    v[i] = random_f32(gen, vr);
    g[i] = random_f32(gen, vr);
  }
  auto inputs = [&](int i, size_t pos) {
    return ops::MlaTokenInputs{.q = q[i], .k = kk[i], .v = v[i], .g = g[i], .pos = uint32_t(pos)};
  };
  using clock = std::chrono::steady_clock;
  auto run = [&](bool on_device, int tokens) {
    std::vector<double> us;
    for (int i = 0; i < warm + tokens; ++i) {
      const auto t0 = clock::now();
      if (on_device)
        ok(ops::mla_decode_token_on_device(dev, k, cfg, inputs(i, kv.seq_len()), kv, stream)
               .status(),
           "device step");
      else
        ok(ops::mla_decode_token(dev, k, cfg, inputs(i, host.seq_len()), host, stream)
               .status(),
           "host step");
      const auto t1 = clock::now();
      if (i >= warm) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    return median(us);
  };
  // Both attention forms alone over `context` rows of the device cache.
  const ops::K3MlaSdpaGateArgs attn{
      .q = kv.scratch_q(), .k = kv.k(), .v = kv.v(), .g = kv.scratch_g(),
      .out = kv.scratch_out(), .seq_len = context, .heads = cfg.heads, .dq = cfg.qk_head_dim(),
      .dv = cfg.v_head_dim, .use_gate = true};
  const double one_pass_us = time_events(
      dev, stream, reps, [&](Stream st) { return ops::k3_mla_sdpa_gate(dev, k, attn, st); });
  const uint32_t splits =
      k3_splits ? k3_splits
                : ops::k3_mla_plan_splits(dev.properties(), cfg.heads, cfg.qk_head_dim(), context);
  const double split_us = time_events(dev, stream, reps, [&](Stream st) {
    return ops::k3_mla_sdpa_gate_split(dev, kv.split_kernels(), attn, kv.workspace(), splits, st);
  });

  const StepRow common{.path = "",
                       .context = context,
                       .tokens_timed = 0,
                       .splits = splits,
                       .step_us = 0,
                       .one_pass_us = one_pass_us,
                       .split_us = split_us,
                       .attention_bytes = 4.0 * context * (kr + vr),
                       .bus_bytes = 0};
  StepRow d = common;
  d.path = "device";
  d.tokens_timed = uint32_t(device_tokens);
  d.step_us = run(true, device_tokens);
  d.bus_bytes = 4.0 * (2 * kr + 3 * vr);  // q, k, v, g up; out down
  rows.push_back(d);
  if (host_tokens == 0) return;
  StepRow h = common;
  h.path = "host";
  h.tokens_timed = uint32_t(host_tokens);
  h.step_us = run(false, host_tokens);
  // q, k up, k down, the cache (about `context` rows) and g up, out down.
  h.bus_bytes = 4.0 * (3 * kr + (context + 1.0 + host_tokens / 2.0) * (kr + vr) + 2 * vr);
  rows.push_back(h);
}

// ── (b) paged decode over the compressed cache ──────────────────────────────

struct DecodeRow {
  std::string dtype;
  uint32_t batch = 0, context = 0, q_heads = 0, block_size = 0, splits = 1;
  double us = 0, bytes = 0;
  double copy_tbps = 0;  // the copy rate measured right after this shape
  double gbps() const { return bytes / us / 1e3; }
  // Both products: 2 * (576 + 512) multiply-adds per head and token.
  double tflops() const { return 2.0 * batch * q_heads * context * (576.0 + 512.0) / us / 1e6; }
  double frac() const { return gbps() / (kCeilingTBps * 1e3); }
};

// Copies timed after each decode shape (1 GiB each, about 0.5 ms on an H200).
constexpr int kCopyAfterReps = 10;

DecodeRow bench_decode(Device& dev, const ops::MlaKernels& k, Filler& fill, Stream stream,
                       std::mt19937_64& gen, bool nvfp4, uint32_t q_heads, uint32_t batch,
                       uint32_t context, int reps) {
  const uint32_t dim = sparkrt::contract::mla::kCacheDim, dv = sparkrt::contract::mla::kLatentDim,
                 block_size = 64;
  const uint32_t blocks_per_seq = (context + block_size - 1) / block_size;
  const auto layout = ops::mla_nvfp4_block_layout(block_size, 1, dim);
  const uint64_t block_bytes =
      nvfp4 ? layout.block_stride_bytes : uint64_t{block_size} * dim;  // fp8: unpadded
  const uint64_t blocks_per_set = uint64_t{batch} * blocks_per_seq;
  const int sets = rotation(blocks_per_set * block_bytes);
  const uint64_t pool_blocks = blocks_per_set * sets;
  Buf pool(dev, pool_blocks * block_bytes);
  fill.fill(pool.ptr(), pool.bytes(), nvfp4 ? Filler::kNvfp4 : Filler::kFp8);
  // One block table per set, over that set's blocks in random order.
  std::vector<int32_t> tables(pool_blocks);
  for (int s = 0; s < sets; ++s) {
    std::vector<int32_t> ids(blocks_per_set);
    for (uint64_t i = 0; i < blocks_per_set; ++i) ids[i] = int32_t(s * blocks_per_set + i);
    std::shuffle(ids.begin(), ids.end(), gen);
    std::copy(ids.begin(), ids.end(), tables.begin() + s * blocks_per_set);
  }
  Buf bt(dev, tables.size() * 4);
  ok(dev.copy_h2d(tables, bt.ptr()), "upload");
  std::vector<int32_t> lens(batch, int32_t(context));
  Buf sl(dev, batch * 4);
  ok(dev.copy_h2d(lens, sl.ptr()), "upload");
  const uint64_t q_bytes = uint64_t{batch} * q_heads * dim * 2;
  const uint64_t o_bytes = uint64_t{batch} * q_heads * dv * 2;
  Buf q(dev, q_bytes), out(dev, o_bytes);
  fill.fill(q.ptr(), q_bytes, Filler::kBf16);
  Buf ws(dev, ops::mla_decode_workspace_bytes(batch, q_heads, dim));
  ok(dev.synchronize(), "sync");
  const float inv_sqrt_d = 1.0f / std::sqrt(192.0f);  // DeepSeek: 1/sqrt(nope + rope)

  const auto fp8_args = [&](DevicePtr table) {
    return ops::MlaPagedDecodeFp8Args{
        .q = q.ptr(), .k_cache = pool.ptr(), .v_cache = pool.ptr(), .o = out.ptr(),
        .block_tables = table, .seq_lens = sl.ptr(), .max_blocks_per_seq = blocks_per_seq,
        .num_q_heads = q_heads, .num_kv_heads = 1, .q_head_dim = dim, .kv_cache_dim = dim,
        .block_size = block_size, .inv_sqrt_d = inv_sqrt_d, .k_scale = 0.02f, .v_scale = 0.02f,
        .cache_stride = block_bytes, .num_seqs = batch, .workspace = ws.ptr(),
        .workspace_bytes = ws.bytes()};
  };
  const auto nvfp4_args = [&](DevicePtr table) {
    return ops::MlaPagedDecodeNvfp4Args{
        .q = q.ptr(), .k_cache = pool.ptr(), .v_cache = pool.ptr(), .o = out.ptr(),
        .block_tables = table, .seq_lens = sl.ptr(), .max_blocks_per_seq = blocks_per_seq,
        .num_q_heads = q_heads, .num_kv_heads = 1, .q_head_dim = dim, .kv_cache_dim = dim,
        .block_size = block_size, .inv_sqrt_d = inv_sqrt_d,
        .block_stride_bytes = layout.block_stride_bytes,
        .data_section_bytes = layout.data_section_bytes, .num_seqs = batch,
        .workspace = ws.ptr(), .workspace_bytes = ws.bytes()};
  };
  auto op = [&](int i, Stream st) -> absl::Status {
    const DevicePtr table = bt.ptr() + uint64_t(i % sets) * blocks_per_set * 4;
    if (nvfp4) return ops::mla_paged_decode_nvfp4(dev, k, nvfp4_args(table), st);
    return ops::mla_paged_decode_fp8(dev, k, fp8_args(table), st);
  };
  DecodeRow r;
  r.dtype = nvfp4 ? "nvfp4" : "fp8";
  r.batch = batch;
  r.context = context;
  r.q_heads = q_heads;
  r.block_size = block_size;
  r.splits =
      nvfp4 ? ok(ops::plan_mla_paged_decode_nvfp4(dev, nvfp4_args(bt.ptr())), "plan").num_splits
            : ok(ops::plan_mla_paged_decode_fp8(dev, fp8_args(bt.ptr())), "plan").num_splits;
  // Rows read once (K and V share them), q read, out written.
  const double row_bytes = nvfp4 ? dim / 2.0 + dim / 16.0 : double(dim);
  r.bytes = double(batch) * context * row_bytes + double(q_bytes) + double(o_bytes);
  const double est = r.bytes / (kCeilingTBps * 1e6) + 5.0;
  r.us = time_graph(dev, stream, graph_ops(sets, est), reps, op);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      args.json = argv[++i];
    } else if (a == "--backend" && i + 1 < argc) {
      args.backend = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      args.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--quick") {
      args.quick = true;
    } else if (a == "--pause-ms" && i + 1 < argc) {
      args.pause_ms = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--decode-only") {
      args.decode_only = true;
    } else if (a == "--k3-only") {
      args.k3_only = true;
    } else if (a == "--k3-context" && i + 1 < argc) {
      args.k3_contexts.push_back(static_cast<uint32_t>(std::max(1, std::atoi(argv[++i]))));
    } else if (a == "--k3-splits" && i + 1 < argc) {
      args.k3_splits = static_cast<uint32_t>(
          std::clamp(std::atoi(argv[++i]), 0, int(sparkrt::contract::mla_decode::kMaxSplits)));
    } else if (Args::DecodeShape d{};
               a == "--decode-shape" && i + 1 < argc &&
               std::sscanf(argv[i + 1] + ((d.nvfp4 = std::strncmp(argv[i + 1], "nvfp4:", 6) == 0)
                                              ? 6
                                              : 0),
                           "%ux%ux%u", &d.heads, &d.batch, &d.context) == 3) {
      args.decode_shapes.push_back(d);
      args.decode_only = true;
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--backend NAME] [--json out.json] [--reps N] [--quick] [--decode-only] "
                   "[--decode-shape [nvfp4:]HEADSxBATCHxCONTEXT]... [--pause-ms N] [--k3-only] "
                   "[--k3-context N]... [--k3-splits N]\n",
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
  const auto mk = ok(ops::MlaKernels::resolve(dev), "resolve mla kernels");
  const auto k3 = ok(ops::MlaDecodeKernels::resolve(dev), "resolve mla_decode kernels");
  const Stream stream = ok(dev.create_stream(), "stream");
  std::mt19937_64 gen(20261130);

  const double ceiling = copy_ceiling(dev, stream, args.reps);

  std::vector<StepRow> steps;
  if (args.k3_contexts.empty()) args.k3_contexts = {1024, 8192, 32768};
  for (uint32_t context : args.k3_contexts) {
    if (args.decode_only || (args.quick && context > 1024)) break;
    const int device_tokens = args.quick ? 20 : 200;
    const int host_tokens = args.quick ? 5 : context > 8192 ? 0 : context > 1024 ? 15 : 40;
    bench_k3(dev, k3, stream, gen, context, device_tokens, host_tokens, args.reps, args.k3_splits,
             steps);
  }

  std::vector<DecodeRow> decode;
  if (!args.k3_only) {
    Filler fill(dev, gen);
    struct Shape {
      bool nvfp4;
      uint32_t q_heads;
      std::vector<uint32_t> batches, contexts;
    };
    std::vector<Shape> shapes = {{false, 16, {1, 32, 64, 128}, {4096, 8192}},
                                 {false, 128, {1, 32, 64}, {4096, 8192}},
                                 {true, 16, {1, 32, 128}, {4096}}};
    if (args.quick)
      shapes = {{false, 16, {1, 32, 128}, {4096}},
                {false, 128, {1, 32}, {4096}},
                {true, 16, {32}, {4096}}};
    if (!args.decode_shapes.empty()) {
      shapes.clear();
      for (const Args::DecodeShape& d : args.decode_shapes)
        shapes.push_back({d.nvfp4, d.heads, {d.batch}, {d.context}});
    }
    for (const Shape& s : shapes)
      for (uint32_t b : s.batches)
        for (uint32_t c : s.contexts) {
          if (args.pause_ms > 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(args.pause_ms));
          decode.push_back(
              bench_decode(dev, mk, fill, stream, gen, s.nvfp4, s.q_heads, b, c, args.reps));
          // The copy in the state the shape left the device in (a rested
          // device copies faster than one under sustained load).
          decode.back().copy_tbps = copy_ceiling(dev, stream, kCopyAfterReps);
        }
  }

  const auto& props = dev.properties();
  const ops::MlaConfig cfg = k3_config();
  print_device_line(props, ceiling);
  std::printf("backend %s\n", args.backend.c_str());
  std::printf("\nK3 token step: heads %u, nope %u, rope %u, v %u, RoPE on, gate on "
              "(per-token medians; host side = step - the attention it runs: split on the "
              "device path, one pass on the host path)\n",
              cfg.heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim);
  std::printf("%-7s %7s %6s %10s %11s %9s %7s %9s %12s %14s\n", "path", "context", "tokens",
              "step us", "1-pass us", "split us", "splits", "ceiling", "host-side us",
              "bus MB/token");
  for (const StepRow& r : steps)
    std::printf("%-7s %7u %6u %10.1f %11.1f %9.1f %7u %8.1f%% %12.1f %14.3f\n", r.path.c_str(),
                r.context, r.tokens_timed, r.step_us, r.one_pass_us, r.split_us, r.splits,
                100.0 * r.split_frac(), r.host_side_us(), r.bus_bytes / 1e6);
  std::printf(
      "\nmla_paged_decode: q_head_dim = kv_cache_dim = 576, 1 KV head, one pool for K and V\n");
  std::printf("%-6s %6s %7s %4s %6s %6s %10s %9s %8s %7s %9s %8s\n", "dtype", "batch", "context",
              "hq", "block", "splits", "us", "GB/s", "ceiling", "TFLOPS", "copy TB/s", "vs copy");
  for (const DecodeRow& r : decode)
    std::printf("%-6s %6u %7u %4u %6u %6u %10.2f %9.1f %7.1f%% %7.1f %9.2f %7.1f%%\n",
                r.dtype.c_str(), r.batch, r.context, r.q_heads, r.block_size, r.splits, r.us,
                r.gbps(), 100.0 * r.frac(), r.tflops(), r.copy_tbps,
                100.0 * r.gbps() / (r.copy_tbps * 1e3));

  if (!args.json.empty()) {
    FILE* f = open_json(args.json, props, ceiling);
    std::fprintf(f, "  \"backend\": \"%s\",\n", args.backend.c_str());
    std::fprintf(f,
                 "  \"k3_config\": {\"heads\": %u, \"qk_nope_head_dim\": %u, "
                 "\"qk_rope_head_dim\": %u, \"v_head_dim\": %u, \"mla_use_nope\": %s, "
                 "\"mla_use_output_gate\": %s},\n  \"k3_steps\": [\n",
                 cfg.heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim,
                 cfg.mla_use_nope ? "true" : "false", cfg.mla_use_output_gate ? "true" : "false");
    for (size_t i = 0; i < steps.size(); ++i) {
      const StepRow& r = steps[i];
      std::fprintf(f,
                   "    {\"path\": \"%s\", \"context\": %u, \"tokens_timed\": %u, "
                   "\"step_us\": %.3f, \"one_pass_us\": %.3f, \"split_us\": %.3f, "
                   "\"splits\": %u, \"split_frac\": %.4f, \"host_side_us\": %.3f, "
                   "\"bus_bytes_per_token\": %.0f}%s\n",
                   r.path.c_str(), r.context, r.tokens_timed, r.step_us, r.one_pass_us,
                   r.split_us, r.splits, r.split_frac(), r.host_side_us(), r.bus_bytes,
                   i + 1 < steps.size() ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"decode\": [\n");
    for (size_t i = 0; i < decode.size(); ++i) {
      const DecodeRow& r = decode[i];
      std::fprintf(f,
                   "    {\"op\": \"mla_paged_decode_%s\", \"batch\": %u, \"context\": %u, "
                   "\"num_q_heads\": %u, \"num_kv_heads\": 1, \"q_head_dim\": 576, "
                   "\"kv_cache_dim\": 576, \"block_size\": %u, \"splits\": %u, \"us\": %.3f, "
                   "\"bytes\": %.0f, \"gbps\": %.1f, \"frac\": %.4f, \"tflops\": %.2f, "
                   "\"copy_after_tbps\": %.3f}%s\n",
                   r.dtype.c_str(), r.batch, r.context, r.q_heads, r.block_size, r.splits, r.us,
                   r.bytes, r.gbps(), r.frac(), r.tflops(), r.copy_tbps,
                   i + 1 < decode.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  ok(dev.destroy_stream(stream), "stream");
  return 0;
}
