// Shared by the op benches (sparkrt_kv_cache_bench, sparkrt_mla_bench): error
// exits, device buffers, random fill data, event and graph-replay timing, the
// copy ceiling, L2 rotation and the JSON preamble, so both report against the
// same ceiling in the same way.
#ifndef SPARKRT_BENCH_GPU_BENCH_SUPPORT_H_
#define SPARKRT_BENCH_GPU_BENCH_SUPPORT_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sparkrt/numeric.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/verify/median.h"

namespace sparkrt::bench {

// Defined by each bench: the name its error messages start with.
extern const char kBenchName[];

constexpr double kCeilingTBps = 4.24;  // H200 device-to-device copy, read + write
constexpr uint64_t kL2Bytes = 60ull << 20;
constexpr uint64_t kRotateBytes = 3 * kL2Bytes;

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", kBenchName, what.c_str());
  std::exit(1);
}
inline void ok(const absl::Status& s, const char* what) {
  if (!s.ok()) die(std::string(what) + ": " + std::string(s.ToString()));
}
template <typename T>
T ok(absl::StatusOr<T> s, const char* what) {
  if (!s.ok()) die(std::string(what) + ": " + std::string(s.status().ToString()));
  return *std::move(s);
}

using verify::median;

// Device memory freed at scope exit.
class Buf {
 public:
  Buf(Device& dev, uint64_t bytes) : dev_(&dev), bytes_(bytes) {
    ptr_ = ok(dev.alloc(bytes ? bytes : 1), "alloc");
  }
  ~Buf() { dev_->free(ptr_).IgnoreError(); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  DevicePtr ptr() const { return ptr_; }
  uint64_t bytes() const { return bytes_; }

 private:
  Device* dev_;
  uint64_t bytes_;
  DevicePtr ptr_;
};

// NVIDIA lowers the SM clock after about 3 s without work and raises it for
// Vulkan work only after about 0.2 s of sustained load (for CUDA work at
// once), so a timing that follows seconds of host-side setup would measure
// the idle clock (docs/benchmark-notes.md, "The idle clock and Vulkan").
// Every timing therefore starts after this many milliseconds of back-to-back
// calls of what it times: SPARKRT_BENCH_WARMUP_MS, default 400, 0 for none.
inline double warm_up_ms() {
  const char* v = std::getenv("SPARKRT_BENCH_WARMUP_MS");
  if (v == nullptr || *v == '\0') return 400.0;
  char* end = nullptr;
  const double ms = std::strtod(v, &end);
  if (*end != '\0' || !(ms >= 0.0 && ms <= 600000.0))
    die(std::string("SPARKRT_BENCH_WARMUP_MS='") + v +
        "' is not a number of milliseconds from 0 to 600000");
  return ms;
}

// Keeps the device busy with `submit()` (which queues one call on `stream`)
// for warm_up_ms(), synchronizing only every 2 ms or so of work so that the
// queue never runs dry.
template <typename Submit>
void warm_up(Device& dev, Stream stream, Submit submit) {
  using Clock = std::chrono::steady_clock;
  const double budget = warm_up_ms();
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  const auto start = Clock::now();
  for (int calls = 1; since(start) < budget;) {
    const auto round = Clock::now();
    for (int i = 0; i < calls; ++i) ok(submit(), "warm-up call");
    ok(dev.synchronize(stream), "warm-up sync");
    if (since(round) < 2.0 && calls < 4096) calls *= 2;
  }
}

// Captures `ops_in_graph` calls of `op(i)` and returns the median time per
// call of the replays, in microseconds. With SPARKRT_BENCH_TRACE set, every
// replay's time per call goes to stderr too (to follow drift within a run).
template <typename Op>
double time_graph(Device& dev, Stream stream, int ops_in_graph, int reps, Op op) {
  const auto* g = dev.extension_as<SparkrtGraphExtension>(SPARKRT_GRAPH_EXTENSION_NAME);
  if (g == nullptr) die("the backend has no " SPARKRT_GRAPH_EXTENSION_NAME);
  auto gcheck = [&](SparkrtError* err, const char* what) {
    if (err == nullptr) return;
    const char* msg;
    size_t n;
    g->error_message(err, &msg, &n);
    die(std::string(what) + ": " + std::string(msg, n));
  };
  // One eager call first: errors show here with a clear message.
  ok(op(0, stream), "op");
  ok(dev.synchronize(stream), "sync");
  SparkrtGraphCaptureArgs begin{SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, dev.native_handle(),
                                stream.handle};
  gcheck(g->begin_capture(&begin), "begin_capture");
  for (int i = 0; i < ops_in_graph; ++i) ok(op(i, stream), "op while capturing");
  SparkrtGraphEndCaptureArgs end{SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE, dev.native_handle(),
                                 stream.handle, 0, 0};
  gcheck(g->end_capture(&end), "end_capture");
  SparkrtGraphLaunchArgs replay{SPARKRT_GRAPH_LAUNCH_ARGS_SIZE, dev.native_handle(), end.graph,
                                stream.handle};
  warm_up(dev, stream, [&] {
    gcheck(g->launch(&replay), "graph launch");
    return absl::OkStatus();
  });
  const auto ev0 = ok(dev.create_event(), "event"), ev1 = ok(dev.create_event(), "event");
  std::vector<double> us;
  const bool trace = std::getenv("SPARKRT_BENCH_TRACE") != nullptr;
  for (int rep = 0; rep < reps + 2; ++rep) {
    ok(dev.record_event(ev0, stream), "record");
    gcheck(g->launch(&replay), "graph launch");
    ok(dev.record_event(ev1, stream), "record");
    ok(dev.synchronize_event(ev1), "event sync");
    const float ms = ok(dev.elapsed_ms(ev0, ev1), "elapsed");
    if (rep >= 2) us.push_back(1000.0 * ms / ops_in_graph);  // the first two warm up
    if (trace) std::fprintf(stderr, "replay %d %.2f\n", rep, 1000.0 * ms / ops_in_graph);
  }
  SparkrtGraphDestroyArgs destroy{SPARKRT_GRAPH_DESTROY_ARGS_SIZE, dev.native_handle(),
                                  end.graph};
  gcheck(g->destroy(&destroy), "graph destroy");
  ok(dev.destroy_event(ev0), "event");
  ok(dev.destroy_event(ev1), "event");
  return median(us);
}

// How many independent input sets keep `bytes_per_set` out of the L2.
inline int rotation(uint64_t bytes_per_set) {
  return int(std::clamp<uint64_t>((kRotateBytes + bytes_per_set - 1) / bytes_per_set, 1, 64));
}
// Ops per graph: every set at least once, and enough to dwarf the replay's
// own launch cost.
inline int graph_ops(int sets, double est_us_per_op) {
  const int want = int(std::ceil(2000.0 / std::max(est_us_per_op, 1.0)));
  const int n = std::clamp(want, 8, 256);
  return (n + sets - 1) / sets * sets;
}

// The line both benches print above their tables.
inline void print_device_line(const DeviceProperties& props, double measured_tbps) {
  std::printf("device: %s (%s, %u SMs); copy ceiling measured %.2f TB/s (fractions below use %.2f)\n",
              props.name.c_str(), props.architecture.c_str(), props.multiprocessor_count,
              measured_tbps, kCeilingTBps);
}

// Opens `path` and writes the JSON preamble (device, UTC date, ceilings); the
// caller writes its own sections and closes the object and the file.
inline FILE* open_json(const std::string& path, const DeviceProperties& props,
                       double measured_tbps) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) die("cannot write " + path);
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"date\": \"%s\",\n", props.name.c_str(), date);
  std::fprintf(f, "  \"ceiling_tbps\": %.3f,\n  \"copy_tbps_measured\": %.3f,\n", kCeilingTBps,
               measured_tbps);
  return f;
}

// A value of magnitude in [lo, hi) and random sign: never zero.
inline float random_magnitude(std::mt19937_64& gen, float lo, float hi) {
  const float m = std::uniform_real_distribution<float>(lo, hi)(gen);
  return (gen() & 1) ? -m : m;
}

// Random source bytes on the device (bf16, fp8 and nvfp4 blocks), copied
// into larger buffers to fill them.
class Filler {
 public:
  enum Kind { kBf16, kFp8, kNvfp4 };
  Filler(Device& dev, std::mt19937_64& gen)
      : dev_(dev), src_{Buf(dev, kBytes), Buf(dev, kBytes), Buf(dev, kBytes)} {
    std::vector<uint16_t> h(kBytes / 2);
    for (auto& x : h) x = sparkrt::numeric::f32_to_bf16(random_magnitude(gen, 0.25f, 2.0f));
    ok(dev.copy_h2d(h, src_[kBf16].ptr()), "upload");
    std::vector<uint8_t> f(kBytes);
    for (auto& x : f) x = sparkrt::numeric::f32_to_fp8_e4m3(random_magnitude(gen, 1.0f, 100.0f));
    ok(dev.copy_h2d(f, src_[kFp8].ptr()), "upload");
    // Any byte is two E2M1 values; a small positive scale byte among them
    // keeps the NVFP4 scale sections finite wherever they fall.
    for (auto& x : f) x = uint8_t(0x20 + gen() % 0x10);
    ok(dev.copy_h2d(f, src_[kNvfp4].ptr()), "upload");
  }
  void fill(DevicePtr dst, uint64_t bytes, Kind kind) {
    for (uint64_t off = 0; off < bytes; off += kBytes)
      ok(dev_.copy_d2d_async(src_[kind].ptr(), dst + off, std::min(kBytes, bytes - off), Stream{}),
         "fill");
  }

 private:
  static constexpr uint64_t kBytes = 64ull << 20;
  Device& dev_;
  Buf src_[3];
};

// Median time of `op` launched eagerly, in microseconds, with events. With
// SPARKRT_BENCH_TRACE set, every call's time goes to stderr too.
template <typename Op>
double time_events(Device& dev, Stream stream, int reps, Op op) {
  warm_up(dev, stream, [&] { return op(stream); });
  const auto ev0 = ok(dev.create_event(), "event"), ev1 = ok(dev.create_event(), "event");
  std::vector<double> us;
  const bool trace = std::getenv("SPARKRT_BENCH_TRACE") != nullptr;
  for (int rep = 0; rep < reps + 3; ++rep) {
    ok(dev.record_event(ev0, stream), "record");
    ok(op(stream), "op");
    ok(dev.record_event(ev1, stream), "record");
    ok(dev.synchronize_event(ev1), "event sync");
    const float ms = ok(dev.elapsed_ms(ev0, ev1), "elapsed");
    if (rep >= 3) us.push_back(1000.0 * ms);
    if (trace) std::fprintf(stderr, "call %d %.2f\n", rep, 1000.0 * ms);
  }
  ok(dev.destroy_event(ev0), "event");
  ok(dev.destroy_event(ev1), "event");
  return median(us);
}

// The device-to-device copy rate (read + write bytes), in TB/s.
inline double copy_ceiling(Device& dev, Stream stream, int reps) {
  const uint64_t bytes = 1ull << 30;
  Buf a(dev, bytes), b(dev, bytes);
  ok(dev.memset(a.ptr(), 0x3c, bytes), "memset");
  const double us = time_events(dev, stream, reps, [&](Stream st) {
    return dev.copy_d2d_async(a.ptr(), b.ptr(), bytes, st);
  });
  return 2.0 * bytes / (us * 1e-6) / 1e12;
}

}  // namespace sparkrt::bench

#endif  // SPARKRT_BENCH_GPU_BENCH_SUPPORT_H_
