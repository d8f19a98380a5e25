// sparkrt_collectives_bench: the bus bandwidth of sparkrt::Communicator's
// all-reduce and all-gather over the devices of one backend, one process,
// one thread a rank (tools/gpu/torch_collectives_bench.py measures the same
// through torch.distributed; tools/gpu/collectives_compare.py sets them side
// by side).
//
//   sparkrt_collectives_bench [--backend cuda] [--devices N] [--min-bytes B] [--max-bytes B]
//                             [--iters 20] [--reps 5] [--ops all_reduce,all_gather]
//                             [--json FILE]
//
// Sizes double from --min-bytes (default 1 MiB) to --max-bytes (default
// 1 GiB). Each rank runs a warm-up, then per repetition all ranks meet at a
// host barrier and each records events around --iters back-to-back
// collectives on its own stream; a repetition's time is the slowest rank's
// elapsed / iters, and the table gives the median over --reps with min-max.
//
// Bandwidth as nccl-tests defines it (GB/s = 1e9 bytes/s): algbw = bytes /
// time; all-reduce busbw = algbw * 2(n-1)/n with bytes = each rank's buffer;
// all-gather busbw = algbw * (n-1)/n with bytes = the gathered total (each
// rank sends bytes/n). With one rank nothing crosses a bus: busbw is n/a.
//
// Data: f32, random and never zero. The all-reduce (sum) runs in place, as
// torch.distributed.all_reduce does, so both benches move the same bytes the
// same way; the repeated sums grow the values (to inf), which NCCL's speed
// does not depend on. After the timings the buffers are filled again and
// one all-reduce and one all-gather of the largest size are checked against
// the host on every rank: a run that fails the check prints no bandwidth.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/status_macros.h"

// Prefixes this bench's error messages (bench_support.h).
const char sparkrt::bench::kBenchName[] = "sparkrt_collectives_bench";

namespace {

using sparkrt::Communicator;
using sparkrt::DataType;
using sparkrt::Device;
using sparkrt::DevicePtr;
using sparkrt::ReduceOp;
using sparkrt::Stream;
using namespace sparkrt::bench;

enum class Op { kAllReduce, kAllGather };
const char* op_name(Op op) { return op == Op::kAllReduce ? "all_reduce" : "all_gather"; }

constexpr int kWarmup = 5;
// The fill pattern's period: random data without a host copy of every buffer.
constexpr uint64_t kBlockElems = 1u << 20;

struct Args {
  std::string backend = "cuda";
  int devices = 0;  // 0: every device of the backend
  uint64_t min_bytes = 1ull << 20;
  uint64_t max_bytes = 1ull << 30;
  int iters = 20;
  int reps = 5;
  std::vector<Op> ops = {Op::kAllReduce, Op::kAllGather};
  std::string json;
};

// One timed configuration; `bytes` as nccl-tests counts them (see the top).
struct Case {
  Op op;
  uint64_t count;  // elements each rank sends
  uint64_t bytes;
};

struct Row {
  Case c;
  double us = 0, us_min = 0, us_max = 0;  // median, min, max of the reps
};

bool parse_bytes(const char* s, uint64_t& out) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0' || v == 0) return false;
  out = v;
  return true;
}

bool parse_ops(const std::string& s, std::vector<Op>& out) {
  out.clear();
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    const std::string name = s.substr(start, comma - start);
    if (name == "all_reduce") out.push_back(Op::kAllReduce);
    else if (name == "all_gather") out.push_back(Op::kAllGather);
    else return false;
    start = comma + 1;
  }
  return !out.empty();
}

double factor(Op op, int n) {
  return op == Op::kAllReduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
}
double gbps(uint64_t bytes, double us) { return double(bytes) / (us * 1e-6) / 1e9; }

std::string json_str(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

// What one rank's thread reports back.
struct RankResult {
  absl::Status status;
  std::vector<std::vector<double>> ms;  // [case][rep]: elapsed of `iters` collectives
  std::string check;                    // the first mismatch, empty when the check passed
};

// Copies the rank's random block over the first `elems` elements of `dst`.
absl::Status fill(Device& dev, DevicePtr block, uint64_t block_elems, DevicePtr dst,
                  uint64_t elems, Stream stream) {
  for (uint64_t off = 0; off < elems; off += block_elems) {
    const uint64_t n = std::min(block_elems, elems - off);
    SPARKRT_RETURN_IF_ERROR(dev.copy_d2d_async(block, dst + off * 4, n * 4, stream));
  }
  return dev.synchronize(stream);
}

// Checks `got` against the host: the rank-ordered f32 sum of every rank's
// block (all-reduce), or rank q's block at q * count (all-gather). NCCL sums
// in its own order, hence the bound of n roundings of the largest partial sum.
std::string check_result(Op op, const std::vector<std::vector<float>>& blocks, uint64_t count,
                  const std::vector<float>& got) {
  const int n = int(blocks.size());
  const uint64_t period = blocks[0].size();
  constexpr float kEps = std::numeric_limits<float>::epsilon();
  uint64_t bad = 0;
  std::string first;
  for (uint64_t j = 0; j < got.size(); ++j) {
    float want = 0, bound = 0;
    if (op == Op::kAllReduce) {
      float abs_sum = 0;
      for (int r = 0; r < n; ++r) {
        want += blocks[r][j % period];
        abs_sum += std::fabs(blocks[r][j % period]);
      }
      bound = 2.0f * n * kEps * abs_sum;
    } else {
      want = blocks[j / count][(j % count) % period];
    }
    if (!(std::fabs(got[j] - want) <= bound)) {
      if (bad++ == 0)
        first = std::string(op_name(op)) + " element " + std::to_string(j) + ": got " +
                std::to_string(got[j]) + ", want " + std::to_string(want);
    }
  }
  if (bad == 0) return "";
  return first + " (" + std::to_string(bad) + " of " + std::to_string(got.size()) + " wrong)";
}

// Everything rank `r` does: warm-up and timings of every case, then the check.
void run_rank(int r, const Args& args, const std::vector<Case>& cases, Device& dev,
              Communicator& comm, const std::vector<std::vector<float>>& blocks,
              std::barrier<>& sync, RankResult& out) {
  const int n = comm.size();
  const uint64_t max_elems = args.max_bytes / 4;
  absl::Status st;
  auto step = [&](absl::Status s) {
    if (st.ok() && !s.ok()) st = std::move(s);
    return st.ok();
  };
  auto alloc = [&](uint64_t bytes) -> DevicePtr {
    auto p = dev.alloc(bytes);
    if (!step(p.status())) return DevicePtr{};
    return *p;
  };
  Stream stream{};
  if (auto s = dev.create_stream(); step(s.status())) stream = *s;
  // x: the all-reduce's buffer and the all-gather's send; y: the all-gather's receive.
  const uint64_t block_elems = blocks[r].size();
  const DevicePtr block = st.ok() ? alloc(block_elems * 4) : DevicePtr{};
  const DevicePtr x = st.ok() ? alloc(max_elems * 4) : DevicePtr{};
  const DevicePtr y = st.ok() ? alloc(max_elems * 4) : DevicePtr{};
  sparkrt::Event ev0{}, ev1{};
  if (auto e = dev.create_event(); step(e.status())) ev0 = *e;
  if (auto e = dev.create_event(); step(e.status())) ev1 = *e;
  if (st.ok()) step(dev.copy_h2d(blocks[r], block));
  if (st.ok()) step(fill(dev, block, block_elems, x, max_elems, stream));

  auto issue = [&](const Case& c) {
    return c.op == Op::kAllReduce
               ? comm.all_reduce(x, x, c.count, DataType::kF32, ReduceOp::kSum, stream)
               : comm.all_gather(x, y, c.count, DataType::kF32, stream);
  };
  out.ms.assign(cases.size(), {});
  for (size_t i = 0; i < cases.size() && st.ok(); ++i) {
    const Case& c = cases[i];
    for (int w = 0; w < kWarmup && st.ok(); ++w) step(issue(c));
    if (st.ok()) step(dev.synchronize(stream));
    for (int rep = 0; rep < args.reps && st.ok(); ++rep) {
      // Every rank starts its events together, so no rank's time holds
      // another's late start.
      sync.arrive_and_wait();
      step(dev.record_event(ev0, stream));
      for (int it = 0; it < args.iters && st.ok(); ++it) step(issue(c));
      if (st.ok()) step(dev.record_event(ev1, stream));
      if (st.ok()) step(dev.synchronize_event(ev1));
      if (st.ok()) {
        auto ms = dev.elapsed_ms(ev0, ev1);
        if (step(ms.status())) out.ms[i].push_back(*ms);
      }
    }
  }

  // The check: fresh data, one call of each op at its largest size.
  for (Op op : args.ops) {
    const Case* last = nullptr;
    for (const Case& c : cases)
      if (c.op == op) last = &c;
    if (last == nullptr || !st.ok()) continue;
    const uint64_t elems = op == Op::kAllReduce ? last->count : last->count * n;
    std::vector<float> got(elems);
    step(fill(dev, block, block_elems, x, max_elems, stream));
    if (st.ok()) step(dev.memset(y, 0xff, max_elems * 4));  // NaN until written
    if (st.ok()) sync.arrive_and_wait();
    if (st.ok()) step(issue(*last));
    if (st.ok()) step(dev.synchronize(stream));
    if (st.ok()) step(dev.copy_d2h(op == Op::kAllReduce ? x : y, got));
    if (st.ok() && out.check.empty()) out.check = check_result(op, blocks, last->count, got);
  }

  // A failed rank must not leave the others waiting at the barrier or in a
  // collective.
  if (!st.ok()) {
    comm.abort().IgnoreError();
    sync.arrive_and_drop();
  }
  if (ev0.handle) dev.destroy_event(ev0).IgnoreError();
  if (ev1.handle) dev.destroy_event(ev1).IgnoreError();
  for (DevicePtr p : {block, x, y})
    if (!p.is_null()) dev.free(p).IgnoreError();
  if (stream.handle) dev.destroy_stream(stream).IgnoreError();
  out.status = st;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--backend NAME] [--devices N] [--min-bytes B] [--max-bytes B] "
               "[--iters N] [--reps N] [--ops all_reduce,all_gather] [--json FILE]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--backend" && has) {
      args.backend = argv[++i];
    } else if (a == "--devices" && has) {
      args.devices = std::atoi(argv[++i]);
      if (args.devices < 1) return usage(argv[0]);
    } else if (a == "--min-bytes" && has) {
      if (!parse_bytes(argv[++i], args.min_bytes)) return usage(argv[0]);
    } else if (a == "--max-bytes" && has) {
      if (!parse_bytes(argv[++i], args.max_bytes)) return usage(argv[0]);
    } else if (a == "--iters" && has) {
      args.iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--reps" && has) {
      args.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--ops" && has) {
      if (!parse_ops(argv[++i], args.ops)) return usage(argv[0]);
    } else if (a == "--json" && has) {
      args.json = argv[++i];
    } else {
      return usage(argv[0]);
    }
  }
  if (args.min_bytes < 4 || args.min_bytes > args.max_bytes) {
    std::fprintf(stderr, "%s: need 4 <= --min-bytes <= --max-bytes\n", kBenchName);
    return 2;
  }

  // Devices 0..N-1 of the backend; without --devices, every one it has.
  std::vector<std::unique_ptr<Device>> owned;
  for (int i = 0; args.devices == 0 || i < args.devices; ++i) {
    auto d = Device::open({.backend = args.backend, .device_index = i});
    if (!d.ok()) {
      if (i == 0) {
        std::printf("SKIPPED: no usable %s device: %s\n", args.backend.c_str(),
                    std::string(d.status().ToString()).c_str());
        return d.status().code() == absl::StatusCode::kUnavailable ? 77 : 1;
      }
      if (args.devices == 0 && d.status().code() == absl::StatusCode::kOutOfRange) break;
      die("--devices " + std::to_string(args.devices) + ": device " + std::to_string(i) + ": " +
          std::string(d.status().ToString()));
    }
    owned.push_back(*std::move(d));
  }
  const int n = int(owned.size());
  std::vector<Device*> devs;
  for (auto& d : owned) devs.push_back(d.get());
  const std::string library = ok(Communicator::library(*devs[0]), "collectives library");

  // The cases: all-gather counts round down so that n ranks divide the total.
  std::vector<Case> cases;
  for (Op op : args.ops)
    for (uint64_t b = args.min_bytes; b <= args.max_bytes; b *= 2) {
      const uint64_t count = op == Op::kAllReduce ? b / 4 : b / 4 / n;
      if (count == 0) continue;
      cases.push_back({op, count, op == Op::kAllReduce ? count * 4 : count * 4 * n});
      if (b > args.max_bytes / 2) break;  // no overflow past the largest
    }
  if (cases.empty()) die("no size holds one element per rank");

  // Random, never-zero blocks, a different one per rank, kept for the check.
  std::mt19937_64 gen(20261203);
  const uint64_t block_elems = std::min<uint64_t>(kBlockElems, args.max_bytes / 4);
  std::vector<std::vector<float>> blocks(n, std::vector<float>(block_elems));
  for (auto& b : blocks)
    for (float& v : b) v = random_magnitude(gen, 0.25f, 2.0f);

  auto comms = ok(Communicator::create_all(devs), "create_all");
  std::barrier<> sync(n);
  std::vector<RankResult> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      run_rank(r, args, cases, *devs[r], *comms[r], blocks, sync, results[r]);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (!results[r].status.ok())
      die("rank " + std::to_string(r) + ": " + std::string(results[r].status.ToString()));
  bool passed = true;
  for (int r = 0; r < n; ++r)
    if (!results[r].check.empty()) {
      std::fprintf(stderr, "%s: check failed on rank %d: %s\n", kBenchName, r,
                   results[r].check.c_str());
      passed = false;
    }
  if (!passed) return 1;
  for (auto& c : comms) ok(c->destroy(), "destroy");

  std::vector<Row> rows;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<double> us(args.reps);
    for (int rep = 0; rep < args.reps; ++rep) {
      double slowest = 0;
      for (int r = 0; r < n; ++r) slowest = std::max(slowest, results[r].ms[i][rep]);
      us[rep] = 1000.0 * slowest / args.iters;
    }
    rows.push_back({cases[i], median(us), *std::min_element(us.begin(), us.end()),
                    *std::max_element(us.begin(), us.end())});
  }

  const auto& props = devs[0]->properties();
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::printf("%s: %d x %s (backend %s), collectives: %s, %s\n", kBenchName, n,
              props.name.c_str(), args.backend.c_str(), library.c_str(), date);
  std::printf(
      "f32; %d collectives per timing, median (min-max) of %d reps, the slowest rank's time; "
      "GB/s = 1e9 B/s\nall_reduce: sum in place, bytes = each rank's buffer, busbw = algbw * "
      "2(n-1)/n\nall_gather: bytes = the gathered total (bytes/n from each rank), busbw = algbw "
      "* (n-1)/n\n",
      args.iters, args.reps);
  std::string checked;
  for (Op op : args.ops) checked += std::string(checked.empty() ? "" : ", ") + op_name(op);
  std::printf("check: %s of the largest size, every rank, against the host: passed\n",
              checked.c_str());
  // Bandwidth of `bytes` in `us` times `f`, or n/a (null in the JSON): no bus
  // with one rank (busbw), or events that measure no time (the mock).
  auto bw = [](uint64_t bytes, double us, double f, bool json) -> std::string {
    if (f <= 0 || us <= 0) return json ? "null" : "n/a";
    char s[32];
    std::snprintf(s, sizeof s, json ? "%.3f" : "%.2f", gbps(bytes, us) * f);
    return s;
  };
  const auto range = [&](const Row& r, double f) -> std::string {
    if (f <= 0 || r.us_min <= 0) return "n/a";
    return bw(r.c.bytes, r.us_max, f, false) + "-" + bw(r.c.bytes, r.us_min, f, false);
  };
  const auto bus_factor = [&](const Row& r) { return n > 1 ? factor(r.c.op, n) : 0.0; };
  std::printf("%-10s %12s %10s %21s %10s %10s %19s\n", "op", "bytes", "us", "us min-max",
              "algbw", "busbw", "busbw min-max");
  for (const Row& r : rows) {
    char us_range[48];
    std::snprintf(us_range, sizeof us_range, "%.2f-%.2f", r.us_min, r.us_max);
    std::printf("%-10s %12llu %10.2f %21s %10s %10s %19s\n", op_name(r.c.op),
                static_cast<unsigned long long>(r.c.bytes), r.us, us_range,
                bw(r.c.bytes, r.us, 1.0, false).c_str(),
                bw(r.c.bytes, r.us, bus_factor(r), false).c_str(), range(r, bus_factor(r)).c_str());
  }

  if (!args.json.empty()) {
    FILE* f = std::fopen(args.json.c_str(), "w");
    if (f == nullptr) die("cannot write " + args.json);
    std::fprintf(f, "{\n  \"bench\": \"sparkrt_collectives_bench\",\n  \"impl\": \"sparkrt\",\n");
    std::fprintf(f, "  \"device\": %s,\n  \"date\": \"%s\",\n  \"backend\": %s,\n",
                 json_str(props.name).c_str(), date, json_str(args.backend).c_str());
    std::fprintf(f, "  \"library\": %s,\n  \"n\": %d,\n  \"iters\": %d,\n  \"reps\": %d,\n",
                 json_str(library).c_str(), n, args.iters, args.reps);
    std::fprintf(f,
                 "  \"dtype\": \"f32\",\n  \"all_reduce\": \"sum, in place; bytes = each rank's "
                 "buffer; busbw = algbw * 2(n-1)/n\",\n  \"all_gather\": \"bytes = the gathered "
                 "total; busbw = algbw * (n-1)/n\",\n  \"check\": \"passed\",\n");
    std::fprintf(f, "  \"results\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const double fb = bus_factor(r);
      std::fprintf(f,
                   "    {\"op\": \"%s\", \"bytes\": %llu, \"count\": %llu, \"time_us\": %.3f, "
                   "\"time_us_min\": %.3f, \"time_us_max\": %.3f, \"algbw_gbps\": %s, "
                   "\"algbw_gbps_min\": %s, \"algbw_gbps_max\": %s, \"busbw_gbps\": %s, "
                   "\"busbw_gbps_min\": %s, \"busbw_gbps_max\": %s}%s\n",
                   op_name(r.c.op), static_cast<unsigned long long>(r.c.bytes),
                   static_cast<unsigned long long>(r.c.count), r.us, r.us_min, r.us_max,
                   bw(r.c.bytes, r.us, 1.0, true).c_str(), bw(r.c.bytes, r.us_max, 1.0, true).c_str(),
                   bw(r.c.bytes, r.us_min, 1.0, true).c_str(), bw(r.c.bytes, r.us, fb, true).c_str(),
                   bw(r.c.bytes, r.us_max, fb, true).c_str(), bw(r.c.bytes, r.us_min, fb, true).c_str(),
                   i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  return 0;
}
