// sparkrt_copy_bench: device-to-device copies through sparkrt on any backend,
// read + write bytes per second, four ways per size:
//   single  one copy between two events (what the op benches' ceiling uses)
//   batch   `--batch` copies back to back between two events
//   offset  one copy, the source 1 byte and the destination 3 bytes off
//           16-byte alignment (16 bytes fewer)
//   graph   `--batch` copies captured in a graph, the replays timed
// Each size is timed after the warm-up of bench_support.h; the median over
// `--reps` is reported with the range. --idle-ms leaves the device idle that
// long after opening it, and SPARKRT_BENCH_WARMUP_MS=0 drops the warm-up: the
// two together show what an idle-clocked GPU copies (docs/benchmark-notes.md).
// tools/gpu/run_vulkan_suite.sh runs it on cuda and vulkan, beside
// vkprobe's best compute copy where the probe is carried.
//
//   sparkrt_copy_bench [--backend NAME] [--sizes 64M,1G,...] [--reps 15]
//                      [--batch 8] [--idle-ms MS] [--json out.json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.h"

namespace sparkrt::bench {
const char kBenchName[] = "sparkrt_copy_bench";
}  // namespace sparkrt::bench

namespace {

using namespace sparkrt;
using namespace sparkrt::bench;

struct Row {
  uint64_t bytes;
  const char* how;
  double median_us, min_us, max_us;
};

// "64M", "1G", "4096": bytes, or 0 for a malformed size.
uint64_t parse_size(const std::string& s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return 0;
  const std::string unit(end);
  const uint64_t scale = unit.empty() ? 1 : unit == "K" ? 1ull << 10 : unit == "M" ? 1ull << 20
                       : unit == "G" ? 1ull << 30 : 0;
  return v * scale;
}

// Median, least and most of `op`'s times (microseconds per copy).
template <typename Timer>
Row measure(uint64_t bytes, const char* how, int reps, Timer timer) {
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) us.push_back(timer());
  return {bytes, how, median(us), *std::min_element(us.begin(), us.end()),
          *std::max_element(us.begin(), us.end())};
}

double tbps(uint64_t bytes, double us) { return 2.0 * double(bytes) / (us * 1e-6) / 1e12; }

}  // namespace

int main(int argc, char** argv) {
  std::string backend, json;
  std::vector<uint64_t> sizes = {64ull << 20, 256ull << 20, 1ull << 30, 2ull << 30};
  int reps = 15, batch = 8, idle_ms = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--backend" && has_value) {
      backend = argv[++i];
    } else if (a == "--json" && has_value) {
      json = argv[++i];
    } else if (a == "--reps" && has_value) {
      reps = std::max(3, std::atoi(argv[++i]));
    } else if (a == "--batch" && has_value) {
      batch = std::clamp(std::atoi(argv[++i]), 1, 256);
    } else if (a == "--idle-ms" && has_value) {
      idle_ms = std::clamp(std::atoi(argv[++i]), 0, 600000);
    } else if (a == "--sizes" && has_value) {
      sizes.clear();
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const uint64_t n = parse_size(list.substr(at, comma - at));
        if (n < 64) die("--sizes: '" + list + "' is not a list of sizes of at least 64 bytes");
        sizes.push_back(n);
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--backend NAME] [--sizes 64M,1G,...] [--reps N] [--batch N] "
                   "[--idle-ms MS] [--json out.json]\n",
                   argv[0]);
      return 2;
    }
  }
  auto opened = Device::open({.backend = backend});
  if (!opened.ok()) {
    std::printf("SKIPPED: no usable %s device: %s\n", backend.empty() ? "auto" : backend.c_str(),
                std::string(opened.status().ToString()).c_str());
    return opened.status().code() == absl::StatusCode::kUnavailable ? 77 : 1;
  }
  Device& dev = **opened;
  const DeviceProperties& props = dev.properties();
  const Stream stream = ok(dev.create_stream(), "stream");
  std::printf("device: %s, backend %s; %d reps, batches of %d\n", props.name.c_str(),
              dev.backend_name().c_str(), reps, batch);

  if (idle_ms > 0) {
    std::printf("idle for %d ms first\n", idle_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
  }
  std::vector<Row> rows;
  for (const uint64_t bytes : sizes) {
    Buf a(dev, bytes), b(dev, bytes);
    ok(dev.memset(a.ptr(), 0x3c, bytes), "memset");
    ok(dev.memset(b.ptr(), 0xc3, bytes), "memset");
    // One call first: the pipeline or module is made outside the timings.
    ok(dev.copy_d2d(a.ptr(), b.ptr(), bytes), "copy");
    const auto ev0 = ok(dev.create_event(), "event"), ev1 = ok(dev.create_event(), "event");
    // `copies` copies between two events; `shift` moves the source 1 byte
    // and the destination 3 off 16-byte alignment (16 bytes fewer).
    const auto timed = [&](int copies, bool shift) {
      const uint64_t n = shift ? bytes - 16 : bytes;
      const auto copy = [&](int i) {
        return i % 2 ? dev.copy_d2d_async(b.ptr() + (shift ? 3 : 0), a.ptr() + (shift ? 1 : 0), n, stream)
                     : dev.copy_d2d_async(a.ptr() + (shift ? 1 : 0), b.ptr() + (shift ? 3 : 0), n, stream);
      };
      ok(dev.record_event(ev0, stream), "record");
      for (int i = 0; i < copies; ++i) ok(copy(i), "copy");
      ok(dev.record_event(ev1, stream), "record");
      ok(dev.synchronize_event(ev1), "event sync");
      return 1000.0 * ok(dev.elapsed_ms(ev0, ev1), "elapsed") / copies;
    };
    warm_up(dev, stream, [&] { return dev.copy_d2d_async(a.ptr(), b.ptr(), bytes, stream); });
    rows.push_back(measure(bytes, "single", reps, [&] { return timed(1, false); }));
    rows.push_back(measure(bytes, "batch", reps, [&] { return timed(batch, false); }));
    rows.push_back(measure(bytes - 16, "offset", reps, [&] { return timed(1, true); }));
    ok(dev.destroy_event(ev0), "event");
    ok(dev.destroy_event(ev1), "event");
    const double graph_us = time_graph(dev, stream, batch, reps, [&](int i, Stream st) {
      return i % 2 ? dev.copy_d2d_async(b.ptr(), a.ptr(), bytes, st)
                   : dev.copy_d2d_async(a.ptr(), b.ptr(), bytes, st);
    });
    rows.push_back({bytes, "graph", graph_us, graph_us, graph_us});
    // The copies must have copied: b, filled with 0xc3, holds a's 0x3c.
    std::vector<uint8_t> probe(4096);
    ok(dev.copy_d2h(b.ptr(), probe), "read back");
    if (std::any_of(probe.begin(), probe.end(), [](uint8_t x) { return x != 0x3c; }))
      die("the copies did not copy: the destination does not hold the source's bytes");
  }

  std::printf("%10s  %-6s  %10s  %9s  %s\n", "bytes", "how", "us/copy", "TB/s", "TB/s range");
  for (const Row& r : rows)
    std::printf("%10llu  %-6s  %10.1f  %9.3f  %.3f-%.3f\n", (unsigned long long)r.bytes, r.how,
                r.median_us, tbps(r.bytes, r.median_us), tbps(r.bytes, r.max_us),
                tbps(r.bytes, r.min_us));
  if (!json.empty()) {
    FILE* f = open_json(json, props, 0.0);
    std::fprintf(f, "  \"backend\": \"%s\",\n  \"copies\": [\n", dev.backend_name().c_str());
    for (size_t i = 0; i < rows.size(); ++i)
      std::fprintf(f,
                   "    {\"bytes\": %llu, \"how\": \"%s\", \"us\": %.3f, \"tbps\": %.4f, "
                   "\"tbps_min\": %.4f, \"tbps_max\": %.4f}%s\n",
                   (unsigned long long)rows[i].bytes, rows[i].how, rows[i].median_us,
                   tbps(rows[i].bytes, rows[i].median_us), tbps(rows[i].bytes, rows[i].max_us),
                   tbps(rows[i].bytes, rows[i].min_us), i + 1 < rows.size() ? "," : "");
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  return 0;
}
