// sparkrt.collectives.v1 on cuda, through real NCCL, spoken through the C
// table (Device::extension_as). NCCL is found as the backend finds it:
// SPARKRT_NCCL_LIBRARY (given with --set-env) or the loader's search path.
// The cases that need NCCL are test suite "nccl" (one GPU: single-rank
// communicators) and "nccl_multi_gpu" (two GPUs or more). Where NCCL does
// not load, or fewer than two GPUs are visible, gpu_main.cc leaves the suite
// out with the reason printed (doctest counts its cases as skipped; a run
// with nothing left exits 77), unless SPARKRT_NCCL_LIBRARY was given: then a
// missing NCCL fails the cases.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gpu_backend.h"
#include "sparkrt/extensions/collectives.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/status_macros.h"
#include "status_checks.h"
#include "subprocess.h"

namespace sparkrt {
namespace {

using sparkrt::testing::contains;
using sparkrt::testing::fresh_seed;

// ---- element formats ----------------------------------------------------

double f16_to_double(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(man, -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(1024 + man, exp - 25);
  return sign ? -v : v;
}
double bf16_to_double(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

// Element type under test: its size, how to draw one and read one back.
struct Type {
  SparkrtDataType dtype;
  const char* name;
  size_t size;
  double epsilon;  // unit roundoff, for sums over ranks
};
constexpr Type kF32{SPARKRT_DTYPE_F32, "f32", 4, 0x1p-24};
constexpr Type kF16{SPARKRT_DTYPE_F16, "f16", 2, 0x1p-11};
constexpr Type kBF16{SPARKRT_DTYPE_BF16, "bf16", 2, 0x1p-8};
constexpr Type kTypes[] = {kF32, kF16, kBF16};

// Random elements with magnitudes in [0.25, 4) and a random sign, drawn as
// bits so every value is exact in its format.
std::vector<uint8_t> random_elements(std::mt19937_64& gen, const Type& t, size_t n) {
  std::vector<uint8_t> out(n * t.size);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = gen();
    if (t.dtype == SPARKRT_DTYPE_F32) {
      const uint32_t bits = (uint32_t(r & 1) << 31) | (uint32_t(125 + (r >> 1) % 4) << 23) |
                            uint32_t((r >> 8) & 0x7fffff);
      std::memcpy(&out[i * 4], &bits, 4);
    } else {
      const uint16_t bits = t.dtype == SPARKRT_DTYPE_F16
                                ? uint16_t((r & 1) << 15 | (13 + (r >> 1) % 4) << 10 |
                                           ((r >> 8) & 0x3ff))
                                : uint16_t((r & 1) << 15 | (125 + (r >> 1) % 4) << 7 |
                                           ((r >> 8) & 0x7f));
      std::memcpy(&out[i * 2], &bits, 2);
    }
  }
  return out;
}

double element(const Type& t, const std::vector<uint8_t>& v, size_t i) {
  if (t.dtype == SPARKRT_DTYPE_F32) {
    float f;
    std::memcpy(&f, &v[i * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &v[i * 2], 2);
  return t.dtype == SPARKRT_DTYPE_F16 ? f16_to_double(h) : bf16_to_double(h);
}

// ---- the table ------------------------------------------------------------

// The table's error as a Status, released.
absl::Status take_status(const SparkrtCollectivesExtension& t, SparkrtError* e) {
  if (e == nullptr) return absl::OkStatus();
  const char* msg = nullptr;
  size_t size = 0;
  t.error_message(e, &msg, &size);
  absl::Status s(static_cast<absl::StatusCode>(t.error_code(e)), std::string(msg, size));
  t.error_destroy(e);
  return s;
}

class Collectives {
 public:
  explicit Collectives(const Device& dev)
      : t_(dev.extension_as<SparkrtCollectivesExtension>(SPARKRT_COLLECTIVES_EXTENSION_NAME)) {
    REQUIRE_MESSAGE(t_ != nullptr, "the cuda plugin offers no " SPARKRT_COLLECTIVES_EXTENSION_NAME);
    REQUIRE(t_->struct_size >= SPARKRT_COLLECTIVES_EXTENSION_SIZE);
  }

  const SparkrtCollectivesExtension& t() const { return *t_; }

  absl::Status status(SparkrtError* e) const { return take_status(*t_, e); }

  absl::StatusOr<SparkrtCollectivesLibraryArgs> library() const {
    SparkrtCollectivesLibraryArgs a{};
    a.struct_size = SPARKRT_COLLECTIVES_LIBRARY_ARGS_SIZE;
    if (auto s = status(t_->library(&a)); !s.ok()) return s;
    return a;
  }

  absl::StatusOr<std::vector<SparkrtComm>> init_all(const std::vector<Device*>& devs) const {
    std::vector<SparkrtDevice*> handles;
    for (Device* d : devs) handles.push_back(d->native_handle());
    std::vector<SparkrtComm> comms(devs.size());
    SparkrtCommInitAllArgs a{SPARKRT_COMM_INIT_ALL_ARGS_SIZE, int32_t(devs.size()),
                             handles.data(), comms.data()};
    if (auto s = status(t_->comm_init_all(&a)); !s.ok()) return s;
    return comms;
  }

  absl::Status comm_call(SparkrtError* (*fn)(SparkrtCommArgs*), SparkrtComm c) const {
    SparkrtCommArgs a{SPARKRT_COMM_ARGS_SIZE, c};
    return status(fn(&a));
  }
  absl::Status destroy(SparkrtComm c) const { return comm_call(t_->comm_destroy, c); }
  absl::Status abort(SparkrtComm c) const { return comm_call(t_->comm_abort, c); }
  absl::Status comm_status(SparkrtComm c) const { return comm_call(t_->comm_status, c); }

  absl::Status run(SparkrtComm comm, SparkrtCollectiveKind kind, SparkrtDataType dtype,
                   SparkrtReduceOp op, int32_t peer, DevicePtr send, DevicePtr recv,
                   uint64_t count, Stream stream) const {
    SparkrtCollectiveArgs a{SPARKRT_COLLECTIVE_ARGS_SIZE, comm, kind, dtype, op, peer,
                            send.addr, recv.addr, count, stream.handle};
    return status(t_->collective(&a));
  }
  absl::Status group_start() const {
    SparkrtGroupArgs a{SPARKRT_GROUP_ARGS_SIZE};
    return status(t_->group_start(&a));
  }
  absl::Status group_end() const {
    SparkrtGroupArgs a{SPARKRT_GROUP_ARGS_SIZE};
    return status(t_->group_end(&a));
  }

 private:
  const SparkrtCollectivesExtension* t_;
};

std::unique_ptr<Device> open_device(int index = -1) {
  auto d = Device::open({.backend = gpu_test::backend(), .device_index = index});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  return *std::move(d);
}

// NCCL loads: the suites that need it run only where it does (below), or
// where the run named it with SPARKRT_NCCL_LIBRARY, which makes a missing
// one a failure.
void require_nccl(const Collectives& c) {
  auto lib = c.library();
  if (lib.ok()) return;
  const std::string why = lib.status().ToString();
  if (const char* env = std::getenv("SPARKRT_NCCL_LIBRARY"); env != nullptr) {
    FAIL("SPARKRT_NCCL_LIBRARY=" << env << " was given but NCCL does not load: " << why);
  }
  FAIL("NCCL does not load: " << why);
}

// ---- what the suites need (gpu_main.cc asks before any case runs) ----------

// Why NCCL cannot be used here, or "" when it loads. Anything unexpected is
// not a reason to skip: the cases then run and fail saying what it was.
std::string nccl_unmet() {
  if (std::getenv("SPARKRT_NCCL_LIBRARY") != nullptr) return {};  // named: must load
  auto dev = Device::open({.backend = gpu_test::backend()});
  if (!dev.ok()) return {};
  const auto* t =
      (*dev)->extension_as<SparkrtCollectivesExtension>(SPARKRT_COLLECTIVES_EXTENSION_NAME);
  if (t == nullptr || t->struct_size < SPARKRT_COLLECTIVES_EXTENSION_SIZE) return {};
  SparkrtCollectivesLibraryArgs a{};
  a.struct_size = SPARKRT_COLLECTIVES_LIBRARY_ARGS_SIZE;
  const absl::Status s = take_status(*t, t->library(&a));
  if (s.code() != absl::StatusCode::kFailedPrecondition) return {};
  return "NCCL is not on the loader path (run with "
         "--set-env=SPARKRT_NCCL_LIBRARY=/path/to/libnccl.so.2): " +
         s.ToString();
}

std::string two_gpus_unmet() {
  if (std::string why = nccl_unmet(); !why.empty()) return why;
  auto second = Device::open({.backend = gpu_test::backend(), .device_index = 1});
  if (second.ok() || second.status().code() != absl::StatusCode::kOutOfRange) return {};
  return "needs two cuda devices or more, this machine has 1";
}

[[maybe_unused]] const bool kNcclSuite = gpu_test::require("nccl", nccl_unmet);
[[maybe_unused]] const bool kMultiGpuSuite = gpu_test::require("nccl_multi_gpu", two_gpus_unmet);

// The visible cuda devices, opened, up to `max`.
std::vector<std::unique_ptr<Device>> open_devices(int max) {
  std::vector<std::unique_ptr<Device>> devs;
  for (int i = 0; i < max; ++i) {
    auto d = Device::open({.backend = gpu_test::backend(), .device_index = i});
    if (!d.ok()) {
      CHECK_MESSAGE(d.status().code() == absl::StatusCode::kOutOfRange, d.status().ToString());
      break;
    }
    devs.push_back(*std::move(d));
  }
  return devs;
}

std::vector<uint8_t> read(Device& dev, DevicePtr p, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  REQUIRE_OK(dev.copy_d2h(p, h.data(), bytes));
  return h;
}

// ---- what a test sees without NCCL --------------------------------------

// Not a check by itself: prints what the table answers, for the cases that
// run this in a child process with SPARKRT_NCCL_LIBRARY set.
TEST_CASE("collectives probe: what library and comm_init_all answer") {
  auto dev = open_device();
  Collectives c(*dev);
  auto lib = c.library();
  MESSAGE("library: ", lib.ok() ? std::string(lib->name) + " " + std::to_string(lib->version)
                                : lib.status().ToString());
  auto comms = c.init_all({dev.get()});
  MESSAGE("comm_init_all: ", comms.status().ToString());
  if (comms.ok()) CHECK_OK(c.destroy((*comms)[0]));
}

TEST_CASE("collectives: a missing or unusable NCCL is FailedPrecondition saying what was tried") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto probe = [&](const std::string& value) {
    auto r = sparkrt::testing::run_process(
        {self, "--test-case=collectives probe*", "--set-env=SPARKRT_NCCL_LIBRARY=" + value}, {});
    INFO("SPARKRT_NCCL_LIBRARY=", value, "\n", r.out, r.err);
    REQUIRE(r.exit_code == 0);
    // Both calls fail the same way: the load is once per process.
    CHECK(r.out.find("library: FAILED_PRECONDITION") != std::string::npos);
    CHECK(r.out.find("comm_init_all: FAILED_PRECONDITION") != std::string::npos);
    return r.out;
  };
  SUBCASE("a path that does not exist") {
    const std::string out = probe("/nonexistent/libnccl.so.2");
    CHECK(out.find("SPARKRT_NCCL_LIBRARY=\"/nonexistent/libnccl.so.2\": no such file") !=
          std::string::npos);
    CHECK(out.find("pip install nvidia-nccl-cu12") != std::string::npos);
  }
  SUBCASE("set but empty") {
    CHECK(probe("").find("SPARKRT_NCCL_LIBRARY is set but empty") != std::string::npos);
  }
  SUBCASE("a folder") {
    CHECK(probe("/").find("is not a regular file") != std::string::npos);
  }
  SUBCASE("a library that is not NCCL: the cuda plugin itself") {
    CHECK(probe(open_device()->plugin_path()).find("is not NCCL: it has no ncclGetVersion") !=
          std::string::npos);
  }
  SUBCASE("a file that is no library") {
    const std::string out = probe("/proc/self/cmdline");
    CHECK(out.find("NCCL not found: tried /proc/self/cmdline (from SPARKRT_NCCL_LIBRARY)") !=
          std::string::npos);
  }
}

TEST_CASE("collectives: library reports NCCL and its version" * doctest::test_suite("nccl")) {
  auto dev = open_device();
  Collectives c(*dev);
  require_nccl(c);
  auto lib = c.library();
  REQUIRE_OK(lib.status());
  CHECK(std::string(lib->name) == "NCCL");
  CHECK(lib->version >= 21800);
  CHECK(lib->version / 10000 == 2);
  MESSAGE("NCCL ", lib->version / 10000, ".", lib->version / 100 % 100, ".", lib->version % 100,
          " (version code ", lib->version, ")");
}

// ---- one rank -------------------------------------------------------------

TEST_CASE("collectives: one rank, every kind, f32 f16 bf16, on a created stream" *
          doctest::test_suite("nccl")) {
  auto dev = open_device();
  Collectives c(*dev);
  require_nccl(c);
  auto comms = c.init_all({dev.get()});
  REQUIRE_OK(comms.status());
  const SparkrtComm comm = (*comms)[0];
  CHECK(comm != 0);
  CHECK_OK(c.comm_status(comm));
  auto stream = dev->create_stream();
  REQUIRE_OK(stream.status());
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);

  struct Case {
    SparkrtCollectiveKind kind;
    SparkrtReduceOp op;
    const char* name;
  };
  const Case cases[] = {
      {SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_REDUCE_SUM, "all_reduce sum"},
      {SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_REDUCE_MAX, "all_reduce max"},
      {SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_REDUCE_MIN, "all_reduce min"},
      {SPARKRT_COLLECTIVE_ALL_GATHER, SPARKRT_REDUCE_SUM, "all_gather"},
      {SPARKRT_COLLECTIVE_REDUCE_SCATTER, SPARKRT_REDUCE_SUM, "reduce_scatter sum"},
      {SPARKRT_COLLECTIVE_REDUCE_SCATTER, SPARKRT_REDUCE_MAX, "reduce_scatter max"},
      {SPARKRT_COLLECTIVE_BROADCAST, SPARKRT_REDUCE_SUM, "broadcast"},
      {SPARKRT_COLLECTIVE_SEND, SPARKRT_REDUCE_SUM, "send/recv to itself"},
  };
  // SUBCASE: doctest runs the body once per subcase, each with a fresh
  // communicator and stream.
  SUBCASE("every kind") for (const Type& t : kTypes) {
    for (uint64_t count : {uint64_t{1}, uint64_t{1000}, uint64_t{(1 << 20) + 3}}) {
      for (const Case& k : cases) {
        CAPTURE(t.name);
        CAPTURE(count);
        CAPTURE(k.name);
        const size_t bytes = count * t.size;
        const auto host = random_elements(gen, t, count);
        auto send = dev->alloc(bytes);
        auto recv = dev->alloc(bytes);
        REQUIRE_OK(send.status());
        REQUIRE_OK(recv.status());
        REQUIRE_OK(dev->copy_h2d(host.data(), *send, bytes));
        REQUIRE_OK(dev->memset(*recv, 0xff, bytes));  // NaN in every float format
        if (k.kind == SPARKRT_COLLECTIVE_SEND) {
          // One rank sends to itself: both halves in one group, or the send
          // would wait for a receive that is never posted.
          REQUIRE_OK(c.group_start());
          CHECK_OK(c.run(comm, SPARKRT_COLLECTIVE_SEND, t.dtype, k.op, 0, *send, {}, count,
                         *stream));
          CHECK_OK(c.run(comm, SPARKRT_COLLECTIVE_RECV, t.dtype, k.op, 0, {}, *recv, count,
                         *stream));
          REQUIRE_OK(c.group_end());
        } else {
          CHECK_OK(c.run(comm, k.kind, t.dtype, k.op, 0, *send, *recv, count, *stream));
        }
        REQUIRE_OK(dev->synchronize(*stream));
        // One rank: every kind's result is its own input, bit for bit.
        const auto got = read(*dev, *recv, bytes);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < count; ++i) {
          if (std::memcmp(&got[i * t.size], &host[i * t.size], t.size) != 0 && bad++ == 0)
            first = i;
        }
        CHECK_MESSAGE(bad == 0, bad << " of " << count << " differ; first at " << first
                                    << ": got " << element(t, got, first) << " want "
                                    << element(t, host, first));
        CHECK_OK(dev->free(*send));
        CHECK_OK(dev->free(*recv));
      }
    }
  }

  SUBCASE("in place, and count 0") {
    const auto host = random_elements(gen, kF32, 4096);
    auto buf = dev->alloc(host.size());
    REQUIRE_OK(buf.status());
    REQUIRE_OK(dev->copy_h2d(host.data(), *buf, host.size()));
    CHECK_OK(c.run(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0,
                   *buf, *buf, 4096, *stream));
    CHECK_OK(c.run(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0,
                   {}, {}, 0, *stream));
    REQUIRE_OK(dev->synchronize(*stream));
    CHECK(read(*dev, *buf, host.size()) == host);
    CHECK_OK(dev->free(*buf));
  }

  SUBCASE("i32 and u8 sums, on the default stream") {
    std::vector<int32_t> ints(777);
    for (auto& v : ints) v = int32_t(gen());
    auto buf = dev->alloc(ints.size() * 4);
    auto out = dev->alloc(ints.size() * 4);
    REQUIRE_OK(buf.status());
    REQUIRE_OK(out.status());
    REQUIRE_OK(dev->copy_h2d(ints, *buf));
    CHECK_OK(c.run(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_I32, SPARKRT_REDUCE_SUM, 0,
                   *buf, *out, ints.size(), {}));
    CHECK_OK(c.run(comm, SPARKRT_COLLECTIVE_BROADCAST, SPARKRT_DTYPE_U8, SPARKRT_REDUCE_SUM, 0,
                   *buf, *out, ints.size() * 4, {}));
    REQUIRE_OK(dev->synchronize());
    std::vector<int32_t> got(ints.size());
    REQUIRE_OK(dev->copy_d2h(*out, got));
    CHECK(got == ints);
    CHECK_OK(dev->free(*buf));
    CHECK_OK(dev->free(*out));
  }

  SUBCASE("captured into a graph and replayed") {
    const auto* g = dev->extension_as<SparkrtGraphExtension>(SPARKRT_GRAPH_EXTENSION_NAME);
    REQUIRE(g != nullptr);
    const auto host = random_elements(gen, kBF16, 5000);
    auto send = dev->alloc(host.size());
    auto recv = dev->alloc(host.size());
    REQUIRE_OK(send.status());
    REQUIRE_OK(recv.status());
    REQUIRE_OK(dev->copy_h2d(host.data(), *send, host.size()));
    // Outside the capture first: NCCL connects a communicator's peers at its
    // first collective, which is no work for a capture.
    CHECK_OK(c.run(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_BF16, SPARKRT_REDUCE_MAX,
                   0, *send, *recv, 5000, *stream));
    REQUIRE_OK(dev->synchronize(*stream));
    REQUIRE_OK(dev->memset(*recv, 0xff, host.size()));
    SparkrtGraphCaptureArgs begin{SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, dev->native_handle(),
                                  stream->handle};
    REQUIRE_OK(c.status(g->begin_capture(&begin)));
    CHECK_OK(c.run(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_BF16, SPARKRT_REDUCE_MAX,
                   0, *send, *recv, 5000, *stream));
    SparkrtGraphEndCaptureArgs end{SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE, dev->native_handle(),
                                   stream->handle, 0, 0};
    REQUIRE_OK(c.status(g->end_capture(&end)));
    CHECK(read(*dev, *recv, host.size()) != host);  // captured, not run
    SparkrtGraphLaunchArgs launch{SPARKRT_GRAPH_LAUNCH_ARGS_SIZE, dev->native_handle(), end.graph,
                                  stream->handle};
    REQUIRE_OK(c.status(g->launch(&launch)));
    REQUIRE_OK(dev->synchronize(*stream));
    CHECK(read(*dev, *recv, host.size()) == host);
    SparkrtGraphDestroyArgs destroy{SPARKRT_GRAPH_DESTROY_ARGS_SIZE, dev->native_handle(),
                                    end.graph};
    CHECK_OK(c.status(g->destroy(&destroy)));
    CHECK_OK(dev->free(*send));
    CHECK_OK(dev->free(*recv));
  }

  CHECK_OK(c.comm_status(comm));
  CHECK_OK(dev->destroy_stream(*stream));
  CHECK_OK(c.destroy(comm));
}

TEST_CASE("collectives: bad arguments are refused before NCCL sees them" *
          doctest::test_suite("nccl")) {
  auto dev = open_device();
  Collectives c(*dev);
  require_nccl(c);
  auto comms = c.init_all({dev.get()});
  REQUIRE_OK(comms.status());
  const SparkrtComm comm = (*comms)[0];
  auto buf = dev->alloc(1024);
  REQUIRE_OK(buf.status());
  auto refused = [&](const absl::Status& s, absl::StatusCode code, const char* text) {
    CHECK_MESSAGE(s.code() == code, s.ToString());
    CHECK_MESSAGE(contains(s, text), s.ToString());
  };
  const auto ar = [&](SparkrtComm cm, SparkrtCollectiveKind kind, SparkrtDataType dt,
                      SparkrtReduceOp op, int32_t peer, DevicePtr send, DevicePtr recv,
                      uint64_t n, Stream s = {}) {
    return c.run(cm, kind, dt, op, peer, send, recv, n, s);
  };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  refused(ar(0, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0, *buf,
             *buf, 16),
          kInvalid, "unknown communicator handle 0x0");
  refused(ar(comm, SparkrtCollectiveKind(9), SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0, *buf, *buf,
             16),
          kInvalid, "kind 9 is not a SparkrtCollectiveKind");
  refused(ar(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SparkrtDataType(0), SPARKRT_REDUCE_SUM, 0, *buf,
             *buf, 16),
          kInvalid, "dtype 0 is not a SparkrtDataType");
  refused(ar(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SparkrtReduceOp(7), 0, *buf,
             *buf, 16),
          kInvalid, "reduce_op 7 is not a SparkrtReduceOp");
  refused(ar(comm, SPARKRT_COLLECTIVE_BROADCAST, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 1, *buf,
             *buf, 16),
          kInvalid, "root 1 is not a rank of the communicator (0..0)");
  refused(ar(comm, SPARKRT_COLLECTIVE_SEND, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, -1, *buf, {},
             16),
          kInvalid, "peer -1 is not a rank");
  refused(ar(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0, *buf,
             *buf, 16, Stream{0x12345}),
          kInvalid, "unknown stream handle 0x12345");
  refused(ar(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0, {},
             *buf, 16),
          kInvalid, "null send buffer");
  refused(ar(comm, SPARKRT_COLLECTIVE_ALL_GATHER, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0, *buf,
             *buf, 257),
          absl::StatusCode::kOutOfRange, "runs 4 bytes past the end of its allocation");
  refused(ar(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0,
             DevicePtr{0x1000}, *buf, 16),
          kInvalid, "is not device memory of this device");
  refused(ar(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0, *buf,
             *buf, uint64_t{1} << 62),
          kInvalid, "overflows");
  {
    SparkrtDevice* none = nullptr;
    SparkrtComm out = 0;
    SparkrtCommInitAllArgs a{SPARKRT_COMM_INIT_ALL_ARGS_SIZE, 1, &none, &out};
    refused(c.status(c.t().comm_init_all(&a)), kInvalid, "not an open device of the cuda plugin");
    SparkrtDevice* twice[] = {dev->native_handle(), dev->native_handle()};
    SparkrtComm two[2] = {};
    SparkrtCommInitAllArgs b{SPARKRT_COMM_INIT_ALL_ARGS_SIZE, 2, twice, two};
    refused(c.status(c.t().comm_init_all(&b)), kInvalid, "which an earlier entry already is");
    SparkrtCommInitAllArgs z{SPARKRT_COMM_INIT_ALL_ARGS_SIZE, 0, twice, two};
    refused(c.status(c.t().comm_init_all(&z)), kInvalid, "num_devices is 0");
    SparkrtCommInitRankArgs r{};
    r.struct_size = SPARKRT_COMM_INIT_RANK_ARGS_SIZE;
    r.device = dev->native_handle();
    r.num_ranks = 2;
    r.rank = 2;
    refused(c.status(c.t().comm_init_rank(&r)), kInvalid, "rank 2 of 2 ranks");
    r.rank = 0;
    refused(c.status(c.t().comm_init_rank(&r)), kInvalid, "all zero bytes");
    SparkrtCommArgs small{sizeof(size_t), comm};
    refused(c.status(c.t().comm_status(&small)), kInvalid, "struct_size");
  }

  SUBCASE("abort, then every call but destroy is ABORTED; a destroyed handle is unknown") {
    CHECK_OK(c.abort(comm));
    refused(ar(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0,
               *buf, *buf, 16),
            absl::StatusCode::kAborted, "was aborted");
    refused(c.comm_status(comm), absl::StatusCode::kAborted, "was aborted");
    CHECK_OK(c.destroy(comm));
    refused(c.destroy(comm), kInvalid, "unknown communicator handle");
    refused(c.comm_status(comm), kInvalid, "already destroyed");
    auto again = c.init_all({dev.get()});
    REQUIRE_OK(again.status());
    CHECK((*again)[0] != comm);  // handles are never reused
    CHECK_OK(c.destroy((*again)[0]));
  }
  SUBCASE("destroy") { CHECK_OK(c.destroy(comm)); }
  CHECK_OK(dev->free(*buf));
}

TEST_CASE("collectives: closing a device ends its communicators" * doctest::test_suite("nccl")) {
  auto dev = open_device();
  Collectives c(*dev);
  require_nccl(c);
  auto comms = c.init_all({dev.get()});
  REQUIRE_OK(comms.status());
  CHECK_OK(dev->close());
  const absl::Status s = c.destroy((*comms)[0]);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(s, "when its device was closed"), s.ToString());
}

// ---- several GPUs ----------------------------------------------------------

// Checks each rank's result against the host's, for `n` ranks whose inputs
// are `in[r]`: the reduction within the format's rounding of a sum over n
// terms (max and min exactly).
void check_reduced(const Type& t, SparkrtReduceOp op, const std::vector<std::vector<uint8_t>>& in,
                   const std::vector<uint8_t>& got, size_t offset, size_t count,
                   const std::string& what) {
  size_t bad = 0, first = 0;
  double first_got = 0, first_want = 0;
  for (size_t i = 0; i < count; ++i) {
    double want = element(t, in[0], offset + i), mag = std::fabs(want);
    for (size_t r = 1; r < in.size(); ++r) {
      const double v = element(t, in[r], offset + i);
      mag += std::fabs(v);
      want = op == SPARKRT_REDUCE_SUM ? want + v
             : op == SPARKRT_REDUCE_MAX ? std::max(want, v)
                                        : std::min(want, v);
    }
    const double bound = op == SPARKRT_REDUCE_SUM ? 2.0 * double(in.size()) * t.epsilon * mag : 0;
    const double g = element(t, got, i);
    if (!(std::fabs(g - want) <= bound) && bad++ == 0) {
      first = i;
      first_got = g;
      first_want = want;
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << count << " wrong; first at " << first
                               << ": got " << first_got << " want " << first_want);
}

TEST_CASE("collectives: several GPUs, comm_init_all, one thread, one group a step" *
          doctest::test_suite("nccl_multi_gpu")) {
  auto devs = open_devices(8);
  REQUIRE_MESSAGE(devs.size() >= 2, "needs two cuda devices, found ", devs.size());
  Collectives c(*devs[0]);
  require_nccl(c);
  const int n = int(devs.size());
  std::vector<Device*> raw;
  for (auto& d : devs) raw.push_back(d.get());
  auto comms = c.init_all(raw);
  REQUIRE_OK(comms.status());
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed, ", ", n, " ranks");
  std::mt19937_64 gen(seed);
  const uint64_t count = 100003;

  for (const Type& t : kTypes) {
    CAPTURE(t.name);
    std::vector<std::vector<uint8_t>> in(n);
    std::vector<DevicePtr> send(n), recv(n);
    std::vector<Stream> streams(n);
    for (int r = 0; r < n; ++r) {
      in[r] = random_elements(gen, t, count * n);  // enough for reduce_scatter
      send[r] = *devs[r]->alloc(in[r].size());
      recv[r] = *devs[r]->alloc(in[r].size());
      streams[r] = *devs[r]->create_stream();
      REQUIRE_OK(devs[r]->copy_h2d(in[r].data(), send[r], in[r].size()));
    }
    // Runs `kind` on every rank in one group, then waits for every stream.
    const auto step = [&](SparkrtCollectiveKind kind, SparkrtReduceOp op, int peer_shift) {
      for (int r = 0; r < n; ++r) REQUIRE_OK(devs[r]->memset(recv[r], 0xff, in[r].size()));
      REQUIRE_OK(c.group_start());
      for (int r = 0; r < n; ++r) {
        if (kind == SPARKRT_COLLECTIVE_SEND) {  // a ring: send right, receive from the left
          CHECK_OK(c.run((*comms)[r], SPARKRT_COLLECTIVE_SEND, t.dtype, op, (r + peer_shift) % n,
                         send[r], {}, count, streams[r]));
          CHECK_OK(c.run((*comms)[r], SPARKRT_COLLECTIVE_RECV, t.dtype, op,
                         (r + n - peer_shift) % n, {}, recv[r], count, streams[r]));
        } else {
          CHECK_OK(c.run((*comms)[r], kind, t.dtype, op, peer_shift, send[r], recv[r], count,
                         streams[r]));
        }
      }
      REQUIRE_OK(c.group_end());
      for (int r = 0; r < n; ++r) REQUIRE_OK(devs[r]->synchronize(streams[r]));
    };
    for (SparkrtReduceOp op : {SPARKRT_REDUCE_SUM, SPARKRT_REDUCE_MAX, SPARKRT_REDUCE_MIN}) {
      step(SPARKRT_COLLECTIVE_ALL_REDUCE, op, 0);
      for (int r = 0; r < n; ++r)
        check_reduced(t, op, in, read(*devs[r], recv[r], count * t.size), 0, count,
                      "all_reduce on rank " + std::to_string(r));
      step(SPARKRT_COLLECTIVE_REDUCE_SCATTER, op, 0);
      for (int r = 0; r < n; ++r)
        check_reduced(t, op, in, read(*devs[r], recv[r], count * t.size), r * count, count,
                      "reduce_scatter on rank " + std::to_string(r));
    }
    step(SPARKRT_COLLECTIVE_ALL_GATHER, SPARKRT_REDUCE_SUM, 0);
    for (int r = 0; r < n; ++r) {
      const auto got = read(*devs[r], recv[r], count * n * t.size);
      for (int q = 0; q < n; ++q)
        CHECK_MESSAGE(std::memcmp(&got[q * count * t.size], in[q].data(), count * t.size) == 0,
                      "all_gather on rank " << r << ": block " << q);
    }
    step(SPARKRT_COLLECTIVE_BROADCAST, SPARKRT_REDUCE_SUM, n - 1);
    for (int r = 0; r < n; ++r)
      CHECK_MESSAGE(read(*devs[r], recv[r], count * t.size) ==
                        std::vector<uint8_t>(in[n - 1].begin(), in[n - 1].begin() + count * t.size),
                    "broadcast from rank " << n - 1 << " on rank " << r);
    step(SPARKRT_COLLECTIVE_SEND, SPARKRT_REDUCE_SUM, 1);
    for (int r = 0; r < n; ++r) {
      const int from = (r + n - 1) % n;
      CHECK_MESSAGE(read(*devs[r], recv[r], count * t.size) ==
                        std::vector<uint8_t>(in[from].begin(), in[from].begin() + count * t.size),
                    "rank " << r << " received from rank " << from);
    }
    for (int r = 0; r < n; ++r) {
      CHECK_OK(devs[r]->free(send[r]));
      CHECK_OK(devs[r]->free(recv[r]));
      CHECK_OK(devs[r]->destroy_stream(streams[r]));
    }
  }
  for (SparkrtComm cm : *comms) {
    CHECK_OK(c.comm_status(cm));
    CHECK_OK(c.destroy(cm));
  }
}

TEST_CASE("collectives: several GPUs, get_unique_id and comm_init_rank, a thread a rank" *
          doctest::test_suite("nccl_multi_gpu")) {
  auto devs = open_devices(8);
  REQUIRE_MESSAGE(devs.size() >= 2, "needs two cuda devices, found ", devs.size());
  Collectives c(*devs[0]);
  require_nccl(c);
  const int n = int(devs.size());
  SparkrtUniqueIdArgs id{};
  id.struct_size = SPARKRT_UNIQUE_ID_ARGS_SIZE;
  id.device = devs[0]->native_handle();
  REQUIRE_OK(c.status(c.t().get_unique_id(&id)));
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed, ", ", n, " ranks");
  const uint64_t count = 65536;
  std::vector<std::vector<uint8_t>> in(n), out(n);
  std::vector<absl::Status> result(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    std::mt19937_64 gen(seed + r);
    in[r] = random_elements(gen, kF32, count);
  }
  // Each thread drives its own rank, so no group is needed: the calls wait
  // for their peers on the GPU (and the init on the host).
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r]() {
      result[r] = [&]() -> absl::Status {
        Device& d = *devs[r];
        SparkrtCommInitRankArgs a{};
        a.struct_size = SPARKRT_COMM_INIT_RANK_ARGS_SIZE;
        a.device = d.native_handle();
        a.num_ranks = n;
        a.rank = r;
        a.id = id.id;
        SPARKRT_RETURN_IF_ERROR(c.status(c.t().comm_init_rank(&a)));
        SPARKRT_ASSIGN_OR_RETURN(DevicePtr buf, d.alloc(count * 4));
        SPARKRT_ASSIGN_OR_RETURN(Stream s, d.create_stream());
        SPARKRT_RETURN_IF_ERROR(d.copy_h2d(in[r].data(), buf, count * 4));
        SPARKRT_RETURN_IF_ERROR(c.run(a.comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32,
                                      SPARKRT_REDUCE_SUM, 0, buf, buf, count, s));
        SPARKRT_RETURN_IF_ERROR(d.synchronize(s));
        out[r].resize(count * 4);
        SPARKRT_RETURN_IF_ERROR(d.copy_d2h(buf, out[r].data(), count * 4));
        SPARKRT_RETURN_IF_ERROR(d.destroy_stream(s));
        SPARKRT_RETURN_IF_ERROR(d.free(buf));
        return c.destroy(a.comm);
      }();
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < n; ++r) {
    CHECK_MESSAGE(result[r].ok(), "rank ", r, ": ", result[r].ToString());
    if (result[r].ok())
      check_reduced(kF32, SPARKRT_REDUCE_SUM, in, out[r], 0, count,
                    "all_reduce in place on rank " + std::to_string(r));
  }
}

}  // namespace
}  // namespace sparkrt
