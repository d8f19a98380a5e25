// sparkrt_decode_layer_bench: a chain of decode layers, measured two ways in
// one run.
//
//   A. graph: all layers captured into one graph twice, once with the
//      kernels' dependent launches as resolve() set them and once with them
//      off (KvCacheKernels / PagedAttentionKernels::dependent_launch = false).
//      After a warm-up the two graphs are replayed alternately, rep by rep,
//      each rep timing `n` back-to-back replays of each between two events on
//      the stream; `n` is the fewest replays that take at least 200 us (1
//      for the default shape), so the events' own cost stays out of the
//      figure. Reported: us per layer (median, min, max over reps) of each
//      variant and the ratio plain / dependent, whose spread is the least and
//      most of the per-rep ratios. Skipped, with the reason, where the backend
//      has no graphs.
//   B. trace overhead: the same chain submitted from the host every rep (no
//      graph, dependent launches as resolved), timed on the host from the
//      first submission to the stream's synchronize. Each rep runs three
//      variants in a rotating order: untraced, traced with host spans only
//      (trace::Options::device_times false) and traced with device times
//      (sparkrt::trace::start before the variant, stop after it, into a file
//      under $TMPDIR or /tmp named after the pid, removed at the end).
//      Reported: step time of each and the ratios traced / untraced over the
//      reps.
//
// One layer is the decode step of `sparkrt demo` (apps/sparkrt/demo_layer.cc):
//   fill_slots_from_block_table    the step's new token of each sequence
//                                  (one launch per sequence)
//   fused_k_norm_rope_cache_write_bf16 -> reshape_and_cache_flash_v_only
//   paged_decode_attn_bf16         with the layer's own zeroed workspace
// Shape: 32 query heads, 8 KV heads, head_dim 128 (rotary_dim 128), blocks
// of 16 tokens, bf16. Every layer has its own K/V pools holding `context`
// tokens per sequence (random, never zero), its own scattered block table,
// new K/V rows, query, norm weight, slots and output. Outputs are poisoned
// before each variant's first run and must come out finite on backends that
// compute (the mock computes nothing: its outputs go unchecked, and its
// times are its fake ticks, one microsecond per launch).
// tools/gpu/decode_layer_torch.py is the PyTorch counterpart.
//
//   sparkrt_decode_layer_bench [--backend NAME] [--layers 32] [--context 4096]
//                              [--batch 1] [--reps 15] [--seed S] [--quick]
//                              [--assume-dependent] [--json FILE]
//
// --backend defaults to SPARKRT_BACKEND, else cuda. --quick: context 256,
// 2 layers, 3 reps (for smoke runs), unless given explicitly. On the mock,
// --assume-dependent launches dependent where resolve() declined (its
// kernels come from PTX), so that a smoke run takes the two-graph path.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_support.h"
#include "sparkrt/ops/kv_cache.h"
#include "sparkrt/ops/paged_attention.h"
#include "sparkrt/trace.h"

namespace sparkrt::bench {
const char kBenchName[] = "sparkrt_decode_layer_bench";
}  // namespace sparkrt::bench

namespace {

using namespace sparkrt;
using namespace sparkrt::bench;

constexpr uint32_t kQHeads = 32, kKvHeads = 8, kHeadDim = 128, kRotaryDim = 128, kBlock = 16;
constexpr uint32_t kKvRow = kKvHeads * kHeadDim;  // elements of one token's K (or V)
constexpr uint32_t kQRow = kQHeads * kHeadDim;
constexpr float kRmsEps = 1e-6f, kTheta = 10000.0f;
constexpr double kMinSampleUs = 200.0;  // least time one graph sample spans
constexpr uint64_t kDefaultSeed = 20261205;

struct Options {
  std::string backend;
  std::string json;
  uint32_t layers = 32, context = 4096, batch = 1;
  int reps = 15;
  uint64_t seed = kDefaultSeed;
};

struct Stat {
  double median = 0, min = 0, max = 0;
};
Stat stat_of(std::vector<double> v) {
  if (v.empty()) return {};
  return {median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

// A decimal in [lo, hi], or death naming the option.
uint64_t parse_count(const std::string& option, const char* text, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || *text == '-' || v < lo || v > hi)
    die(option + " '" + text + "' is not a whole number from " + std::to_string(lo) + " to " +
        std::to_string(hi));
  return v;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_stat(const Stat& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "{\"median\": %.4f, \"min\": %.4f, \"max\": %.4f}", s.median,
                s.min, s.max);
  return buf;
}

const char* image_format_name(SparkrtImageFormat f) {
  switch (f) {
    case SPARKRT_IMAGE_PTX: return "PTX";
    case SPARKRT_IMAGE_CUBIN: return "cubin";
    case SPARKRT_IMAGE_SPIRV: return "SPIR-V";
    case SPARKRT_IMAGE_SIGNATURES: return "signature (host backend)";
  }
  return "unknown";
}

// Why a module's kernels launch plainly, by the rule resolve() applies
// (ops/src/op_checks.h): the device property first (then neither argument is
// read), then the image of `any_kernel`, one of the module's.
std::string why_plain(const Device& dev, const char* module, const Kernel& any_kernel) {
  if (!dev.properties().supports_dependent_launch) {
    const char* env = std::getenv("SPARKRT_DEPENDENT_LAUNCH");
    if (env != nullptr && std::string(env) == "0")
      return "SPARKRT_DEPENDENT_LAUNCH=0 turns them off";
    return "device property: the device does not overlap dependent launches";
  }
  return std::string("module image format: ") + module + " was loaded from a " +
         image_format_name(any_kernel.image_format()) + " image, not a cubin";
}

// The trace file of part B, removed at exit whatever happens (die() exits).
std::string g_trace_path;
void remove_trace_file() {
  if (g_trace_path.empty()) return;
  if (trace::enabled() && trace::path() == g_trace_path) trace::stop().IgnoreError();
  std::remove(g_trace_path.c_str());
  g_trace_path.clear();
}

std::vector<uint16_t> random_bf16(std::mt19937_64& gen, uint64_t n, float lo, float hi) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = numeric::f32_to_bf16(random_magnitude(gen, lo, hi));
  return v;
}

// One layer's device memory.
struct Layer {
  std::unique_ptr<Buf> k_cache, v_cache, table, k_new, v_new, q, weight, slots, out;
  std::optional<ops::DecodeWorkspace> ws;
};

class Bench {
 public:
  Bench(Device& dev, const Options& o, Stream stream)
      : dev_(dev), o_(o), stream_(stream), bps_((o.context + kBlock - 1) / kBlock) {}

  // Allocates and fills every layer; positions and lengths are shared.
  void build(std::mt19937_64& gen) {
    const uint32_t b = o_.batch;
    const uint64_t blocks = uint64_t{b} * bps_ + 1;  // a spare block no sequence owns
    const uint64_t pool_bytes = blocks * kBlock * kKvRow * 2;
    // The pools' contents come from one random source, copied to fill them
    // (generating every pool on the host would take seconds at 32 layers).
    const uint64_t src_bytes = std::min<uint64_t>(pool_bytes, 16ull << 20);
    Buf src(dev_, src_bytes);
    ok(dev_.copy_h2d(random_bf16(gen, src_bytes / 2, 0.25f, 2.0f), src.ptr()), "upload");
    positions_ = std::make_unique<Buf>(dev_, uint64_t{b} * 4);
    seq_lens_ = std::make_unique<Buf>(dev_, uint64_t{b} * 4);
    ok(dev_.copy_h2d(std::vector<int32_t>(b, int32_t(o_.context - 1)), positions_->ptr()),
       "upload");
    ok(dev_.copy_h2d(std::vector<int32_t>(b, int32_t(o_.context)), seq_lens_->ptr()), "upload");
    layers_.resize(o_.layers);
    for (Layer& l : layers_) {
      l.k_cache = std::make_unique<Buf>(dev_, pool_bytes);
      l.v_cache = std::make_unique<Buf>(dev_, pool_bytes);
      for (const Buf* pool : {l.k_cache.get(), l.v_cache.get()})
        for (uint64_t off = 0; off < pool_bytes; off += src_bytes)
          ok(dev_.copy_d2d(src.ptr(), pool->ptr() + off, std::min(src_bytes, pool_bytes - off)),
             "fill pool");
      // Blocks in random order, so each sequence's blocks are scattered.
      std::vector<int32_t> ids(blocks);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), gen);
      std::vector<int32_t> table(ids.begin(), ids.begin() + uint64_t{b} * bps_);
      l.table = std::make_unique<Buf>(dev_, table.size() * 4);
      ok(dev_.copy_h2d(table, l.table->ptr()), "upload");
      const auto upload = [&](std::unique_ptr<Buf>& to, const std::vector<uint16_t>& from) {
        to = std::make_unique<Buf>(dev_, from.size() * 2);
        ok(dev_.copy_h2d(from, to->ptr()), "upload");
      };
      upload(l.k_new, random_bf16(gen, uint64_t{b} * kKvRow, 0.25f, 2.0f));
      upload(l.v_new, random_bf16(gen, uint64_t{b} * kKvRow, 0.25f, 2.0f));
      upload(l.q, random_bf16(gen, uint64_t{b} * kQRow, 0.25f, 2.0f));
      std::vector<uint16_t> w(kHeadDim);
      for (auto& x : w)
        x = numeric::f32_to_bf16(std::uniform_real_distribution<float>(0.5f, 1.5f)(gen));
      upload(l.weight, w);
      l.slots = std::make_unique<Buf>(dev_, uint64_t{b} * 8);
      l.out = std::make_unique<Buf>(dev_, uint64_t{b} * kQRow * 2);
      // Zeroed once by create(): the split counters must start at zero, and
      // every decode leaves them so.
      l.ws.emplace(ok(ops::DecodeWorkspace::create(dev_, b, kQHeads, kHeadDim), "workspace"));
    }
    ok(dev_.synchronize(), "sync");
  }

  ops::PagedDecodeAttnArgs decode_args(const Layer& l) const {
    return {.q = l.q->ptr(), .k_cache = l.k_cache->ptr(), .v_cache = l.v_cache->ptr(),
            .out = l.out->ptr(), .block_tables = l.table->ptr(), .seq_lens = seq_lens_->ptr(),
            .max_blocks_per_seq = bps_, .num_seqs = o_.batch, .num_q_heads = kQHeads,
            .num_kv_heads = kKvHeads, .head_dim = kHeadDim, .block_size = kBlock,
            .inv_sqrt_d = 1.0f / std::sqrt(float(kHeadDim)), .q_stride = kQRow,
            .sliding_window = 0, .max_seq_len = o_.context, .workspace = l.ws->ptr(),
            .workspace_bytes = l.ws->bytes()};
  }

  // Queues every layer's ops on the stream.
  absl::Status submit(const ops::KvCacheKernels& kv, const ops::PagedAttentionKernels& pa) {
    for (const Layer& l : layers_) {
      for (uint32_t s = 0; s < o_.batch; ++s) {
        if (auto st = ops::fill_slots_from_block_table(
                dev_, kv,
                {.slots = l.slots->ptr() + uint64_t{s} * 8,
                 .block_table = l.table->ptr() + uint64_t{s} * bps_ * 4,
                 .start_pos = o_.context - 1, .count = 1, .block_size = kBlock},
                stream_);
            !st.ok())
          return st;
      }
      if (auto st = ops::fused_k_norm_rope_cache_write_bf16(
              dev_, kv,
              {.k_in = l.k_new->ptr(), .k_norm_weight = l.weight->ptr(),
               .positions = positions_->ptr(), .k_cache = l.k_cache->ptr(),
               .slot_mapping = l.slots->ptr(), .num_tokens = o_.batch, .num_kv_heads = kKvHeads,
               .head_dim = kHeadDim, .rotary_dim = kRotaryDim, .block_size = kBlock,
               .rms_eps = kRmsEps, .theta = kTheta},
              stream_);
          !st.ok())
        return st;
      if (auto st = ops::reshape_and_cache_flash_v_only(
              dev_, kv,
              {.value = l.v_new->ptr(), .v_cache = l.v_cache->ptr(),
               .slot_mapping = l.slots->ptr(), .num_tokens = o_.batch, .num_kv_heads = kKvHeads,
               .head_dim = kHeadDim, .block_size = kBlock, .value_stride = kKvRow},
              stream_);
          !st.ok())
        return st;
      if (auto st = ops::paged_decode_attn_bf16(dev_, pa, decode_args(l), stream_); !st.ok())
        return st;
    }
    return absl::OkStatus();
  }

  void poison_outputs() {
    ok(dev_.synchronize(stream_), "sync");
    for (const Layer& l : layers_) ok(dev_.memset(l.out->ptr(), 0xff, l.out->bytes()), "poison");
  }

  // Every output element of every layer finite, or death naming the first
  // that is not.
  void check_outputs(const std::string& after) {
    ok(dev_.synchronize(stream_), "sync");
    std::vector<uint16_t> h(uint64_t{o_.batch} * kQRow);
    for (size_t li = 0; li < layers_.size(); ++li) {
      ok(dev_.copy_d2h(layers_[li].out->ptr(), h), "read back");
      for (size_t i = 0; i < h.size(); ++i) {
        const float v = numeric::bf16_to_f32(h[i]);
        if (std::isfinite(v)) continue;
        char bits[8];
        std::snprintf(bits, sizeof bits, "%04x", h[i]);
        die("check FAILED after " + after + ": layer " + std::to_string(li) +
            ", output element " + std::to_string(i) + " is not finite (bf16 bits 0x" + bits +
            "); seed " + std::to_string(o_.seed) + " (--seed replays it)");
      }
    }
  }

  ops::DecodePlan plan() const {
    return ok(ops::plan_paged_decode(dev_, decode_args(layers_.front())), "plan");
  }

 private:
  Device& dev_;
  const Options& o_;
  Stream stream_;
  uint32_t bps_;  // blocks per sequence
  std::vector<Layer> layers_;
  std::unique_ptr<Buf> positions_, seq_lens_;
};

struct GraphPart {
  std::string skipped;        // why part A did not run; empty when it ran
  std::string dependent_why;  // why the dependent variant is missing or partial
  bool forced = false;         // --assume-dependent on the mock
  int replays_per_sample = 0;
  std::optional<Stat> dependent;  // us per layer
  Stat plain;
  std::optional<Stat> ratio;  // plain / dependent, per rep
};

struct TracePart {
  std::string skipped;
  Stat untraced, host_only, traced;  // us per step; traced: with device times
  std::optional<Stat> host_ratio, ratio;  // host_only / untraced, traced / untraced, per rep
  uint64_t trace_bytes = 0;   // the file of a step traced with device times
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool quick = false, assume_dependent = false;
  std::optional<uint32_t> layers, context;
  std::optional<int> reps;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--backend" && has_value) {
      o.backend = argv[++i];
    } else if (a == "--json" && has_value) {
      o.json = argv[++i];
    } else if (a == "--layers" && has_value) {
      layers = uint32_t(parse_count(a, argv[++i], 1, 4096));
    } else if (a == "--context" && has_value) {
      context = uint32_t(parse_count(a, argv[++i], 1, 1u << 20));
    } else if (a == "--batch" && has_value) {
      o.batch = uint32_t(parse_count(a, argv[++i], 1, 4096));
    } else if (a == "--reps" && has_value) {
      reps = int(parse_count(a, argv[++i], 1, 100000));
    } else if (a == "--seed" && has_value) {
      o.seed = parse_count(a, argv[++i], 0, UINT64_MAX);
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--assume-dependent") {
      assume_dependent = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--backend NAME] [--layers N] [--context C] [--batch B] [--reps R] "
                   "[--seed S] [--quick] [--assume-dependent] [--json FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  o.layers = layers.value_or(quick ? 2 : 32);
  o.context = context.value_or(quick ? 256 : 4096);
  o.reps = reps.value_or(quick ? 3 : 15);
  if (o.backend.empty()) {
    const char* env = std::getenv("SPARKRT_BACKEND");
    o.backend = env != nullptr && *env != '\0' ? env : "cuda";
  }

  auto opened = Device::open({.backend = o.backend});
  if (!opened.ok()) {
    std::printf("SKIPPED: no usable %s device: %s\n", o.backend.c_str(),
                std::string(opened.status().ToString()).c_str());
    return opened.status().code() == absl::StatusCode::kUnavailable ? 77 : 1;
  }
  Device& dev = **opened;
  const DeviceProperties& props = dev.properties();
  const bool computes = dev.backend_name() != "mock";
  auto kv = ok(ops::KvCacheKernels::resolve(dev), "resolve kv_cache");
  auto pa = ok(ops::PagedAttentionKernels::resolve(dev), "resolve paged_attention");
  ops::KvCacheKernels kv_plain = kv;
  ops::PagedAttentionKernels pa_plain = pa;
  kv_plain.dependent_launch = false;
  pa_plain.dependent_launch = false;
  const Stream stream = ok(dev.create_stream(), "stream");

  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::printf("sparkrt_decode_layer_bench: seed %llu\n", (unsigned long long)o.seed);
  std::fflush(stdout);

  std::mt19937_64 gen(o.seed);
  Bench bench(dev, o, stream);
  bench.build(gen);
  const ops::DecodePlan plan = bench.plan();
  const auto check = [&](const std::string& what) {
    if (computes) bench.check_outputs(what);
  };
  const auto ev0 = ok(dev.create_event(), "event"), ev1 = ok(dev.create_event(), "event");

  // ---- A: the graph, dependent against plain ----
  GraphPart ga;
  if (!props.supports_dependent_launch) {
    ga.dependent_why = why_plain(dev, "", Kernel());
  } else {
    if (!kv.dependent_launch)
      ga.dependent_why = why_plain(dev, "kv_cache", kv.fill_slots_from_block_table);
    if (!pa.dependent_launch)
      ga.dependent_why += (ga.dependent_why.empty() ? "" : "; ") +
                          why_plain(dev, "paged_attention", pa.paged_decode_attn_bf16);
  }
  if (assume_dependent && (!kv.dependent_launch || !pa.dependent_launch)) {
    // Kernels without the wait at their start would race when launched
    // dependent on a device that computes; the mock only records.
    if (computes) die("--assume-dependent is for the mock backend only");
    kv.dependent_launch = pa.dependent_launch = ga.forced = true;
  }
  const bool any_dependent = kv.dependent_launch || pa.dependent_launch;
  if (!dev.supports_graphs()) {
    ga.skipped = "the " + dev.backend_name() + " backend has no graphs (Device::supports_graphs)";
  } else {
    const auto capture = [&](const ops::KvCacheKernels& k, const ops::PagedAttentionKernels& p) {
      ok(dev.begin_capture(stream), "begin_capture");
      ok(bench.submit(k, p), "layer op while capturing");
      return ok(dev.end_capture(stream), "end_capture");
    };
    std::optional<Graph> g_dep;
    if (any_dependent) g_dep = capture(kv, pa);
    const Graph g_plain = capture(kv_plain, pa_plain);
    // Each graph's first replay, on poisoned outputs, must compute them all.
    if (g_dep) {
      bench.poison_outputs();
      ok(dev.launch_graph(*g_dep, stream), "graph launch");
      check("the graph with dependent launches");
    }
    bench.poison_outputs();
    ok(dev.launch_graph(g_plain, stream), "graph launch");
    check("the graph of plain launches");

    int turn = 0;
    warm_up(dev, stream, [&] {
      return dev.launch_graph(g_dep && (turn++ % 2) ? *g_dep : g_plain, stream);
    });
    // us per replay of `n` replays back to back between two events.
    const auto timed = [&](const Graph& g, int n) {
      ok(dev.record_event(ev0, stream), "record");
      for (int i = 0; i < n; ++i) ok(dev.launch_graph(g, stream), "graph launch");
      ok(dev.record_event(ev1, stream), "record");
      ok(dev.synchronize_event(ev1), "event sync");
      return 1000.0 * ok(dev.elapsed_ms(ev0, ev1), "elapsed") / n;
    };
    std::vector<double> one;
    for (int i = 0; i < 3; ++i) one.push_back(timed(g_dep ? *g_dep : g_plain, 1));
    const double est = std::max(median(one), 1e-3);
    ga.replays_per_sample = std::clamp(int(std::ceil(kMinSampleUs / est)), 1, 64);
    std::vector<double> dep_us, plain_us, ratios;
    for (int rep = 0; rep < o.reps; ++rep) {
      double d = 0, p = 0;
      if (g_dep && rep % 2 == 0) d = timed(*g_dep, ga.replays_per_sample) / o.layers;
      p = timed(g_plain, ga.replays_per_sample) / o.layers;
      if (g_dep && rep % 2 == 1) d = timed(*g_dep, ga.replays_per_sample) / o.layers;
      plain_us.push_back(p);
      if (g_dep) {
        dep_us.push_back(d);
        if (d > 0) ratios.push_back(p / d);
      }
    }
    ga.plain = stat_of(plain_us);
    if (g_dep) ga.dependent = stat_of(dep_us);
    if (!ratios.empty()) ga.ratio = stat_of(ratios);
    check("the timed graph replays");
    if (g_dep) ok(dev.destroy_graph(*g_dep), "destroy graph");
    ok(dev.destroy_graph(g_plain), "destroy graph");
  }

  // ---- B: a host-submitted step, untraced against traced ----
  TracePart tb;
  if (trace::enabled()) {
    tb.skipped = "a trace is already running (" + trace::path() +
                 ", SPARKRT_TRACE?): the traced reps need their own";
  } else {
    const char* tmp = std::getenv("TMPDIR");
    g_trace_path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                   "/sparkrt_decode_layer_bench." + std::to_string(getpid()) + ".trace.json";
    std::atexit(remove_trace_file);
    bench.poison_outputs();
    ok(bench.submit(kv, pa), "layer op");
    check("the host-submitted step");
    warm_up(dev, stream, [&] { return bench.submit(kv, pa); });
    using Clock = std::chrono::steady_clock;
    // Variant 0 untraced, 1 host spans only, 2 with device times.
    const auto step_us = [&](int variant) {
      if (variant > 0)
        ok(trace::start(g_trace_path, {.device_times = variant == 2}), "trace::start");
      const auto t0 = Clock::now();
      ok(bench.submit(kv, pa), "layer op");
      ok(dev.synchronize(stream), "sync");
      const auto t1 = Clock::now();
      if (variant > 0) ok(trace::stop(), "trace::stop");
      if (variant == 2) {
        std::error_code ec;
        tb.trace_bytes = std::filesystem::file_size(g_trace_path, ec);
        if (ec) die("trace file " + g_trace_path + ": " + ec.message());
      }
      return std::chrono::duration<double, std::micro>(t1 - t0).count();
    };
    std::vector<double> us[3], host_ratios, ratios;
    for (int rep = 0; rep < o.reps; ++rep) {
      double t[3];
      for (int i = 0; i < 3; ++i) {
        const int variant = (rep + i) % 3;
        t[variant] = step_us(variant);
      }
      for (int v = 0; v < 3; ++v) us[v].push_back(t[v]);
      if (t[0] > 0) {
        host_ratios.push_back(t[1] / t[0]);
        ratios.push_back(t[2] / t[0]);
      }
    }
    tb.untraced = stat_of(us[0]);
    tb.host_only = stat_of(us[1]);
    tb.traced = stat_of(us[2]);
    if (!ratios.empty()) {
      tb.host_ratio = stat_of(host_ratios);
      tb.ratio = stat_of(ratios);
    }
    check("the host-submitted steps");
    remove_trace_file();
  }
  ok(dev.destroy_event(ev0), "event");
  ok(dev.destroy_event(ev1), "event");

  // ---- the report ----
  const uint32_t launches = o.batch + 2 + (plan.num_splits > 1 &&
                                           plan.num_splits < ops::kMinMergeSplits ? 2 : 1);
  std::printf("device: %s (%s, %u SMs), backend %s, %s\n", props.name.c_str(),
              props.architecture.empty() ? "no architecture" : props.architecture.c_str(),
              props.multiprocessor_count, dev.backend_name().c_str(), date);
  std::printf("shape: %u layers, batch %u, context %u, %u q heads / %u kv heads, head_dim %u, "
              "rotary_dim %u, block_size %u, bf16; decode hpc %u, splits %u; %u launches per "
              "layer; %d reps\n",
              o.layers, o.batch, o.context, kQHeads, kKvHeads, kHeadDim, kRotaryDim, kBlock,
              plan.heads_per_cta, plan.num_splits, launches, o.reps);
  std::printf("outputs: %s\n", computes ? "finite in every layer after every variant (checked)"
                                        : "not checked: the mock backend computes nothing (its "
                                          "times are fake ticks, one microsecond per launch)");
  if (ga.forced)
    std::printf("dependent launches: forced on by --assume-dependent (resolve() declined: %s)\n",
                ga.dependent_why.c_str());
  else if (!any_dependent)
    std::printf("dependent launches: not available on this device (%s)\n",
                ga.dependent_why.c_str());
  else if (!ga.dependent_why.empty())
    std::printf("dependent launches: kv_cache %s, paged_attention %s (%s)\n",
                kv.dependent_launch ? "on" : "off", pa.dependent_launch ? "on" : "off",
                ga.dependent_why.c_str());
  else
    std::printf("dependent launches: on for kv_cache and paged_attention\n");

  std::printf("\nA. graph of all %u layers\n", o.layers);
  if (!ga.skipped.empty()) {
    std::printf("   skipped: %s\n", ga.skipped.c_str());
  } else {
    std::printf("   %d replay(s) per timed sample, variants alternating rep by rep\n",
                ga.replays_per_sample);
    std::printf("   %-10s %12s %12s %12s\n", "variant", "us/layer", "min", "max");
    if (ga.dependent)
      std::printf("   %-10s %12.3f %12.3f %12.3f\n", "dependent", ga.dependent->median,
                  ga.dependent->min, ga.dependent->max);
    std::printf("   %-10s %12.3f %12.3f %12.3f\n", "plain", ga.plain.median, ga.plain.min,
                ga.plain.max);
    if (ga.ratio)
      std::printf("   plain / dependent: %.3f (per-rep range %.3f - %.3f)\n", ga.ratio->median,
                  ga.ratio->min, ga.ratio->max);
    else
      std::printf("   plain / dependent: n/a (only the plain graph was measured)\n");
  }
  std::printf("\nB. host-submitted step of %u layers (no graph), trace overhead\n", o.layers);
  if (!tb.skipped.empty()) {
    std::printf("   skipped: %s\n", tb.skipped.c_str());
  } else {
    std::printf("   %-10s %12s %12s %12s %12s\n", "variant", "us/step", "min", "max", "us/layer");
    std::printf("   %-10s %12.2f %12.2f %12.2f %12.3f\n", "untraced", tb.untraced.median,
                tb.untraced.min, tb.untraced.max, tb.untraced.median / o.layers);
    std::printf("   %-10s %12.2f %12.2f %12.2f %12.3f\n", "host spans", tb.host_only.median,
                tb.host_only.min, tb.host_only.max, tb.host_only.median / o.layers);
    std::printf("   %-10s %12.2f %12.2f %12.2f %12.3f\n", "+ device", tb.traced.median,
                tb.traced.min, tb.traced.max, tb.traced.median / o.layers);
    if (tb.ratio) {
      std::printf("   host spans / untraced: %.3f (per-rep range %.3f - %.3f)\n",
                  tb.host_ratio->median, tb.host_ratio->min, tb.host_ratio->max);
      std::printf("   with device times / untraced: %.3f (per-rep range %.3f - %.3f)\n",
                  tb.ratio->median, tb.ratio->min, tb.ratio->max);
    }
    std::printf("   trace of one step: %llu bytes\n", (unsigned long long)tb.trace_bytes);
  }

  if (!o.json.empty()) {
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (f == nullptr) die("cannot write " + o.json);
    std::fprintf(f, "{\n  \"bench\": \"sparkrt_decode_layer_bench\",\n");
    std::fprintf(f, "  \"device\": %s,\n  \"architecture\": %s,\n  \"backend\": %s,\n",
                 json_string(props.name).c_str(), json_string(props.architecture).c_str(),
                 json_string(dev.backend_name()).c_str());
    std::fprintf(f, "  \"date\": \"%s\",\n  \"seed\": %llu,\n  \"reps\": %d,\n", date,
                 (unsigned long long)o.seed, o.reps);
    std::fprintf(f,
                 "  \"shape\": {\"layers\": %u, \"batch\": %u, \"context\": %u, "
                 "\"num_q_heads\": %u, \"num_kv_heads\": %u, \"head_dim\": %u, "
                 "\"rotary_dim\": %u, \"block_size\": %u, \"dtype\": \"bf16\"},\n",
                 o.layers, o.batch, o.context, kQHeads, kKvHeads, kHeadDim, kRotaryDim, kBlock);
    std::fprintf(f, "  \"decode_plan\": {\"heads_per_cta\": %u, \"num_splits\": %u},\n",
                 plan.heads_per_cta, plan.num_splits);
    std::fprintf(f, "  \"launches_per_layer\": %u,\n  \"outputs_checked\": %s,\n", launches,
                 computes ? "true" : "false");
    std::fprintf(f,
                 "  \"dependent_launch\": {\"kv_cache\": %s, \"paged_attention\": %s, "
                 "\"why_not\": %s, \"forced\": %s},\n",
                 kv.dependent_launch ? "true" : "false", pa.dependent_launch ? "true" : "false",
                 json_string(ga.dependent_why).c_str(), ga.forced ? "true" : "false");
    if (!ga.skipped.empty()) {
      std::fprintf(f, "  \"graph\": {\"skipped\": %s},\n", json_string(ga.skipped).c_str());
    } else {
      std::fprintf(f,
                   "  \"graph\": {\"replays_per_sample\": %d, \"us_per_layer\": {\"dependent\": "
                   "%s, \"plain\": %s}, \"ratio_plain_over_dependent\": %s},\n",
                   ga.replays_per_sample, ga.dependent ? json_stat(*ga.dependent).c_str() : "null",
                   json_stat(ga.plain).c_str(), ga.ratio ? json_stat(*ga.ratio).c_str() : "null");
    }
    if (!tb.skipped.empty()) {
      std::fprintf(f, "  \"trace_overhead\": {\"skipped\": %s}\n", json_string(tb.skipped).c_str());
    } else {
      std::fprintf(f,
                   "  \"trace_overhead\": {\"us_per_step\": {\"untraced\": %s, \"host_spans\": "
                   "%s, \"with_device_times\": %s}, \"ratio_host_spans_over_untraced\": %s, "
                   "\"ratio_traced_over_untraced\": %s, \"trace_bytes_per_step\": %llu}\n",
                   json_stat(tb.untraced).c_str(), json_stat(tb.host_only).c_str(),
                   json_stat(tb.traced).c_str(),
                   tb.host_ratio ? json_stat(*tb.host_ratio).c_str() : "null",
                   tb.ratio ? json_stat(*tb.ratio).c_str() : "null",
                   (unsigned long long)tb.trace_bytes);
    }
    std::fprintf(f, "}\n");
    if (std::fclose(f) != 0) die("cannot write " + o.json);
  }
  ok(dev.destroy_stream(stream), "stream");
  return 0;
}
