// sparkrt::trace on the mock backend: what a trace holds, one track per
// thread, write failures reported by stop(), SPARKRT_TRACE, and nothing
// recorded or allocated while tracing is off.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sparkrt/sparkrt.h"
#include "sparkrt/testing/mock.h"
#include "sparkrt/trace.h"
#include "status_checks.h"
#include "subprocess.h"
#include "trace_events.h"

namespace {

std::atomic<uint64_t> g_allocations{0};

}  // namespace

// Counts every allocation in the process (the plugin's share the allocator).
void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
// The nothrow forms too (the plugin SDK allocates its errors with them), so
// that every new in the process is paired with this file's delete.
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size ? size : 1);
}
void* operator new[](size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

namespace fs = std::filesystem;
using sparkrt::Device;
using sparkrt::KernelLaunch;
using tracetest::read_trace;
using tracetest::spans;
using tracetest::TraceEvent;

// A file name in the test's temporary folder, removed at the end of its scope.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name)
      : path((fs::temp_directory_path() /
              ("sparkrt_trace_" + std::to_string(::getpid()) + "_" + name))
                 .string()) {}
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::unique_ptr<Device> open_mock() {
  ::setenv("SPARKRT_KERNEL_PATH", SPARKRT_TEST_DATA_DIR "/kernels", 1);
  auto dev = Device::open({.backend = "mock"});
  REQUIRE_MESSAGE(dev.ok(), dev.status().ToString());
  return *std::move(dev);
}

TEST_CASE("trace: a trace on the mock holds every call made, with its arguments") {
  TempFile file("calls.json");
  REQUIRE_OK(sparkrt::trace::start(file.path));
  CHECK(sparkrt::trace::enabled());
  CHECK(sparkrt::trace::path() == file.path);
  auto dev = open_mock();
  auto k = dev->kernel("mock_kinds", "no_params");
  REQUIRE_OK(k.status());
  auto buf = dev->alloc(4096);
  REQUIRE_OK(buf.status());
  auto stream = dev->create_stream();
  REQUIRE_OK(stream.status());
  std::vector<uint8_t> host(1000, 0x5a);
  REQUIRE_OK(dev->copy_h2d(host.data(), *buf, 1000));
  REQUIRE_OK(dev->memset_async(*buf, 7, 300, *stream));
  REQUIRE_OK(KernelLaunch(*dev, *k).grid({3, 2, 1}).block({64, 4}).shared_mem(128).launch(*stream));
  REQUIRE_OK(dev->copy_d2h_async(*buf, host.data(), 640, *stream));
  REQUIRE_OK(dev->synchronize(*stream));
  REQUIRE_OK(dev->close());
  REQUIRE_OK(sparkrt::trace::stop());
  CHECK_FALSE(sparkrt::trace::enabled());
  CHECK(sparkrt::trace::path().empty());

  const std::vector<TraceEvent> events = read_trace(file.path);
  INFO(read_file(file.path));
  for (const TraceEvent& e : events) {
    CHECK(e.ts >= 0);
    CHECK(e.dur >= 0);
  }
  const auto open = spans(events, "device_open");
  REQUIRE(open.size() == 1);
  CHECK(open[0].arg("backend") == "mock");
  CHECK(open[0].arg("index") == "0");

  const auto load = spans(events, "module_load");
  REQUIRE(load.size() == 1);
  CHECK(load[0].arg("module") == "mock_kinds");
  CHECK(load[0].arg("origin") == SPARKRT_TEST_DATA_DIR "/kernels");
  CHECK(load[0].cat == "module");

  const auto lookup = spans(events, "kernel_lookup");
  REQUIRE(lookup.size() == 1);
  CHECK(lookup[0].arg("entry") == "no_params");
  // The load happened inside the lookup that needed it.
  CHECK(load[0].ts >= lookup[0].ts);
  CHECK(load[0].ts + load[0].dur <= lookup[0].ts + lookup[0].dur + 0.002);

  const auto launch = spans(events, "no_params");
  REQUIRE(launch.size() == 1);
  CHECK(launch[0].cat == "launch");
  CHECK(launch[0].arg("module") == "mock_kinds");
  CHECK(launch[0].list("grid") == "3,2,1");
  CHECK(launch[0].list("block") == "64,4,1");
  CHECK(launch[0].arg("shared_mem") == "128");
  CHECK(launch[0].arg("stream") == std::to_string(stream->handle));
  CHECK(launch[0].arg("arg_bytes") == "0");
  CHECK(launch[0].arg("failed") == "false");

  const auto copies = spans(events, "copy");
  REQUIRE(copies.size() == 1);
  CHECK(copies[0].arg("direction") == "h2d");
  CHECK(copies[0].arg("bytes") == "1000");
  CHECK(copies[0].arg("async") == "false");
  const auto async_copies = spans(events, "copy_async");
  REQUIRE(async_copies.size() == 1);
  CHECK(async_copies[0].arg("direction") == "d2h");
  CHECK(async_copies[0].arg("bytes") == "640");
  CHECK(async_copies[0].arg("stream") == std::to_string(stream->handle));
  const auto memset = spans(events, "memset_async");
  REQUIRE(memset.size() == 1);
  CHECK(memset[0].arg("bytes") == "300");
  CHECK(memset[0].arg("value") == "7");
  CHECK(spans(events, "synchronize").size() == 1);
  CHECK(spans(events, "create_stream").size() == 1);
  CHECK(spans(events, "alloc").size() == 1);
  CHECK(spans(events, "device_close").size() == 1);

  // In call order on the one thread that made them.
  std::set<uint64_t> tids;
  for (const TraceEvent& e : events)
    if (e.ph == "X" && e.pid == 1) tids.insert(e.tid);
  CHECK(tids.size() == 1);
  CHECK(copies[0].ts < memset[0].ts);
  CHECK(memset[0].ts < launch[0].ts);
  CHECK(launch[0].ts < async_copies[0].ts);
}

// The metadata event `name` ("thread_name", "process_name") of (pid, tid).
std::string track_name(const std::vector<TraceEvent>& events, const char* name, int pid,
                       uint64_t tid) {
  for (const TraceEvent& e : events)
    if (e.ph == "M" && e.name == name && e.pid == pid && e.tid == tid) return e.arg("name");
  return "";
}

TEST_CASE("trace: stream work has device spans on a track per stream, in the device's time") {
  TempFile file("device.json");
  REQUIRE_OK(sparkrt::trace::start(file.path));
  auto dev = open_mock();
  auto k = dev->kernel("mock_kinds", "no_params");
  REQUIRE_OK(k.status());
  auto buf = dev->alloc(4096);
  REQUIRE_OK(buf.status());
  auto stream = dev->create_stream();
  REQUIRE_OK(stream.status());
  std::vector<uint8_t> host(1000, 0x5a);
  REQUIRE_OK(dev->copy_h2d(host.data(), *buf, 1000));  // blocking: a host span only
  REQUIRE_OK(dev->memset_async(*buf, 7, 300, *stream));
  REQUIRE_OK(KernelLaunch(*dev, *k).grid({3, 2, 1}).block({64, 4}).launch(*stream));
  REQUIRE_OK(KernelLaunch(*dev, *k).grid({1}).block({32}).launch());
  REQUIRE_OK(dev->copy_d2h_async(*buf, host.data(), 640, *stream));
  // No synchronize: stop() reads back what is still outstanding.
  REQUIRE_OK(sparkrt::trace::stop());
  REQUIRE_OK(dev->close());

  const std::vector<TraceEvent> events = read_trace(file.path);
  INFO(read_file(file.path));
  const auto memset = tracetest::device_spans(events, "memset_async");
  const auto launches = tracetest::device_spans(events, "no_params");
  const auto copy = tracetest::device_spans(events, "copy_d2h");
  REQUIRE(memset.size() == 1);
  REQUIRE(launches.size() == 2);
  REQUIRE(copy.size() == 1);
  CHECK(tracetest::device_spans(events, "copy_h2d").empty());
  const int pid = memset[0].pid;
  CHECK(pid > 1);
  CHECK(track_name(events, "process_name", pid, 0) == "mock device 0: sparkrt mock device");
  const std::string on_stream = "mock 0 stream " + std::to_string(stream->handle);
  for (const TraceEvent* e : {&memset[0], &launches[0], &copy[0]}) {
    CAPTURE(e->name);
    CHECK(e->pid == pid);
    CHECK(e->tid == stream->handle);
    CHECK(track_name(events, "thread_name", pid, e->tid) == on_stream);
  }
  CHECK(launches[1].tid == 0);
  CHECK(track_name(events, "thread_name", pid, 0) == "mock 0 stream 0 (default)");
  CHECK(memset[0].arg("bytes") == "300");
  CHECK(launches[0].arg("module") == "mock_kinds");
  CHECK(launches[0].list("grid") == "3,2,1");
  CHECK(copy[0].arg("direction") == "d2h");
  // The mock's clock advances one microsecond per operation: each span is
  // 1 us long and follows the one queued before it.
  for (const TraceEvent* e : {&memset[0], &launches[0], &launches[1], &copy[0]}) {
    CAPTURE(e->name);
    CHECK(e->dur == doctest::Approx(1.0).epsilon(1e-6));
  }
  CHECK(launches[0].ts - memset[0].ts == doctest::Approx(1.0).epsilon(1e-3));
  CHECK(launches[1].ts - launches[0].ts == doctest::Approx(1.0).epsilon(1e-3));
  CHECK(copy[0].ts - launches[1].ts == doctest::Approx(1.0).epsilon(1e-3));
  // The host queued each operation before the device could run it.
  const auto host_memset = spans(events, "memset_async");
  REQUIRE(host_memset.size() == 1);
  CHECK(memset[0].ts >= host_memset[0].ts);
}

TEST_CASE("trace: more operations than the device track holds at once are all written") {
  TempFile file("many.json");
  auto dev = open_mock();
  auto mock = sparkrt::testing::MockInspector::attach(*dev);
  REQUIRE_OK(mock.status());
  REQUIRE_OK(mock->set_recording(false));
  auto k = dev->kernel("mock_kinds", "no_params");
  REQUIRE_OK(k.status());
  REQUIRE_OK(sparkrt::trace::start(file.path));
  constexpr int kLaunches = 3000;  // well past the outstanding operations kept
  for (int i = 0; i < kLaunches; ++i)
    REQUIRE_OK(KernelLaunch(*dev, *k).grid({1}).block({32}).launch());
  REQUIRE_OK(dev->synchronize());
  // Events are recycled: at most the outstanding operations' pairs and the anchor.
  CHECK(mock->counters().events_created <= 2 * 1024 + 1);
  REQUIRE_OK(dev->close());  // writes what the synchronize left
  REQUIRE_OK(sparkrt::trace::stop());
  const auto launches = tracetest::device_spans(read_trace(file.path), "no_params");
  REQUIRE(launches.size() == kLaunches);
  for (size_t i = 1; i < launches.size(); ++i) {
    CAPTURE(i);
    REQUIRE(launches[i].ts > launches[i - 1].ts);
  }
}

TEST_CASE("trace: graph capture and replay, with the replay's device span") {
  TempFile file("graph.json");
  auto dev = open_mock();
  REQUIRE(dev->supports_graphs());
  auto k = dev->kernel("mock_kinds", "no_params");
  REQUIRE_OK(k.status());
  auto stream = dev->create_stream();
  REQUIRE_OK(stream.status());
  REQUIRE_OK(sparkrt::trace::start(file.path));
  REQUIRE_OK(dev->begin_capture(*stream));
  for (int i = 0; i < 3; ++i)
    REQUIRE_OK(KernelLaunch(*dev, *k).grid({1}).block({32}).launch(*stream));
  auto graph = dev->end_capture(*stream);
  REQUIRE_OK(graph.status());
  CHECK(graph->num_nodes == 3);
  REQUIRE_OK(dev->launch_graph(*graph, *stream));
  REQUIRE_OK(dev->launch_graph(*graph));
  REQUIRE_OK(dev->synchronize(*stream));
  REQUIRE_OK(dev->synchronize());
  REQUIRE_OK(dev->destroy_graph(*graph));
  REQUIRE_OK(sparkrt::trace::stop());
  CHECK(dev->launch_graph(*graph).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE_OK(dev->close());

  const std::vector<TraceEvent> events = read_trace(file.path);
  INFO(read_file(file.path));
  const auto begin = spans(events, "begin_capture");
  REQUIRE(begin.size() == 1);
  CHECK(begin[0].cat == "graph");
  CHECK(begin[0].arg("stream") == std::to_string(stream->handle));
  const auto end = spans(events, "end_capture");
  REQUIRE(end.size() == 1);
  CHECK(end[0].arg("nodes") == "3");
  CHECK(end[0].arg("graph") == std::to_string(graph->handle));
  CHECK(spans(events, "no_params").size() == 3);  // the captured launches, on the host
  // Captured launches do not run, so they have no device span; each replay does.
  CHECK(tracetest::device_spans(events, "no_params").empty());
  const auto replays = spans(events, "launch_graph");
  REQUIRE(replays.size() == 2);
  CHECK(replays[0].arg("nodes") == "3");
  const auto device_replays = tracetest::device_spans(events, "graph replay");
  REQUIRE(device_replays.size() == 2);
  CHECK(device_replays[0].tid == stream->handle);
  CHECK(device_replays[1].tid == 0);
  CHECK(device_replays[0].arg("nodes") == "3");
  CHECK(spans(events, "destroy_graph").size() == 1);
}

TEST_CASE("trace: a synchronize leaves another stream's outstanding work for later, intact") {
  // Vulkan queues work in batches it submits lazily: a stream's work is
  // outstanding until something submits it, which the mock never shows.
  ::unsetenv("SPARKRT_KERNEL_PATH");
  auto opened = Device::open({.backend = "vulkan"});
  if (!opened.ok()) {
    MESSAGE("SKIPPED: no vulkan device: ", opened.status().ToString());
    return;
  }
  auto& dev = *opened;
  auto fill = dev->kernel("vector_ops", "fill_u32");
  REQUIRE_OK(fill.status());
  auto a = dev->create_stream();
  auto b = dev->create_stream();
  REQUIRE_OK(a.status());
  REQUIRE_OK(b.status());
  auto buf = dev->alloc(1 << 20);
  REQUIRE_OK(buf.status());
  TempFile file("two_streams.json");
  REQUIRE_OK(sparkrt::trace::start(file.path));
  const auto launch = [&](sparkrt::Stream s, uint32_t value) {
    return KernelLaunch(*dev, *fill).grid({1024}).block({256}).arg(*buf).arg(value)
        .arg(uint32_t{1 << 18}).launch(s);
  };
  REQUIRE_OK(launch(*b, 1));  // outstanding on b
  REQUIRE_OK(launch(*a, 2));
  REQUIRE_OK(dev->synchronize(*a));
  REQUIRE_OK(launch(*b, 3));
  REQUIRE_OK(dev->synchronize(*b));
  REQUIRE_OK(sparkrt::trace::stop());
  REQUIRE_OK(dev->close());

  const std::vector<TraceEvent> events = read_trace(file.path);
  INFO(read_file(file.path));
  const auto ran = tracetest::device_spans(events, "fill_u32");
  REQUIRE(ran.size() == 3);
  int on_b = 0;
  for (const TraceEvent& e : ran) on_b += e.tid == b->handle ? 1 : 0;
  CHECK(on_b == 2);
  for (const TraceEvent& e : events) CHECK_MESSAGE(e.ph != "i", e.name, ": ", e.arg("reason"));
}

TEST_CASE("trace: a device without event timing says so in the trace, and still runs") {
  TempFile file("untimed.json");
  const std::string path = std::string(SPARKRT_TEST_PLUGIN_DIR) + "/libsparkrt_backend_oldabi.so";
  ::setenv("SPARKRT_KERNEL_PATH", SPARKRT_TEST_DATA_DIR "/kernels", 1);
  REQUIRE_OK(sparkrt::trace::start(file.path));
  auto dev = Device::open({.backend = path});
  REQUIRE_OK(dev.status());
  auto k = (*dev)->kernel("mock_kinds", "no_params");
  REQUIRE_OK(k.status());
  for (int i = 0; i < 2; ++i)
    REQUIRE_OK(KernelLaunch(**dev, *k).grid({1}).block({32}).launch());
  REQUIRE_OK((*dev)->close());
  REQUIRE_OK(sparkrt::trace::stop());

  const std::vector<TraceEvent> events = read_trace(file.path);
  INFO(read_file(file.path));
  CHECK(spans(events, "no_params").size() == 2);
  CHECK(tracetest::device_spans(events, "no_params").empty());
  int said = 0;
  for (const TraceEvent& e : events) {
    if (e.ph != "i") continue;
    CHECK(e.name == "device timing unavailable");
    CHECK(e.pid > 1);
    CHECK(sparkrt::testing::contains(absl::UnknownError(e.arg("reason")), "oldabi"));
    ++said;
  }
  CHECK(said == 1);  // once, not per launch
}

TEST_CASE("trace: a Range marks the caller's region, and the calls inside nest under it") {
  TempFile file("range.json");
  auto dev = open_mock();
  {
    const sparkrt::trace::Range off("before the trace");  // not recorded
  }
  REQUIRE_OK(sparkrt::trace::start(file.path));
  {
    const sparkrt::trace::Range outer("decode step");
    auto buf = dev->alloc(256);
    REQUIRE_OK(buf.status());
    {
      const sparkrt::trace::Range inner("layer 0");
      REQUIRE_OK(dev->memset(*buf, 1, 256));
    }
    REQUIRE_OK(dev->free(*buf));
  }
  REQUIRE_OK(sparkrt::trace::stop());
  REQUIRE_OK(dev->close());

  const std::vector<TraceEvent> events = read_trace(file.path);
  INFO(read_file(file.path));
  CHECK(spans(events, "before the trace").empty());
  const auto outer = spans(events, "decode step");
  const auto inner = spans(events, "layer 0");
  const auto memset = spans(events, "memset");
  REQUIRE(outer.size() == 1);
  REQUIRE(inner.size() == 1);
  REQUIRE(memset.size() == 1);
  CHECK(outer[0].cat == "user");
  CHECK(inner[0].cat == "user");
  const auto within = [](const TraceEvent& in, const TraceEvent& out) {
    return in.ts >= out.ts && in.ts + in.dur <= out.ts + out.dur + 0.002 && in.tid == out.tid;
  };
  CHECK(within(inner[0], outer[0]));
  CHECK(within(memset[0], inner[0]));
  CHECK(within(spans(events, "alloc").at(0), outer[0]));
}

TEST_CASE("trace: each thread gets a track of its own, named in the metadata") {
  auto dev = open_mock();
  auto buf = dev->alloc(256);
  REQUIRE_OK(buf.status());
  TempFile file("threads.json");
  REQUIRE_OK(sparkrt::trace::start(file.path));
  // 3000 copies a thread: more than one buffer's worth, so it is flushed mid-trace.
  constexpr int kCopies = 3000;
  std::atomic<int> failures{0};
  const auto work = [&](uint8_t value) {
    std::vector<uint8_t> host(256, value);
    for (int i = 0; i < kCopies; ++i)
      if (!dev->copy_h2d(host.data(), *buf, 256).ok()) ++failures;
  };
  std::thread a(work, 1);
  std::thread b(work, 2);
  a.join();
  b.join();
  CHECK(failures == 0);
  REQUIRE_OK(sparkrt::trace::stop());
  REQUIRE_OK(dev->close());

  const std::vector<TraceEvent> events = read_trace(file.path);
  std::map<uint64_t, int> copies_per_tid;
  std::map<uint64_t, std::string> names;
  for (const TraceEvent& e : events) {
    if (e.pid != 1) continue;  // device tracks
    if (e.ph == "X" && e.name == "copy") ++copies_per_tid[e.tid];
    if (e.ph == "M" && e.name == "thread_name") names[e.tid] = e.arg("name");
  }
  REQUIRE(copies_per_tid.size() == 2);
  for (const auto& [tid, n] : copies_per_tid) {
    CAPTURE(tid);
    CHECK(n == kCopies);
    REQUIRE(names.count(tid) == 1);
    CHECK(names[tid].find(std::to_string(tid)) != std::string::npos);
  }
}

TEST_CASE("trace: start refuses a file it cannot write, naming it") {
  TempFile dir("a_directory");
  fs::create_directory(dir.path);
  const std::string missing = dir.path + "/no/such/folder/t.json";
  auto st = sparkrt::trace::start(missing);
  INFO(st.ToString());
  CHECK(st.code() == absl::StatusCode::kNotFound);
  CHECK(sparkrt::testing::contains(st, missing));
  st = sparkrt::trace::start(dir.path);
  INFO(st.ToString());
  CHECK_FALSE(st.ok());
  CHECK(sparkrt::testing::contains(st, dir.path));
  CHECK_FALSE(sparkrt::trace::enabled());
  CHECK(sparkrt::trace::stop().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("trace: a write that fails (a full disk) is reported by stop()") {
  REQUIRE_OK(sparkrt::trace::start("/dev/full"));
  auto st = sparkrt::trace::start("/dev/null");
  CHECK(st.code() == absl::StatusCode::kFailedPrecondition);  // one trace at a time
  auto dev = open_mock();
  auto buf = dev->alloc(64);
  REQUIRE_OK(buf.status());
  REQUIRE_OK(dev->close());
  st = sparkrt::trace::stop();
  INFO(st.ToString());
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK(sparkrt::testing::contains(st, "/dev/full"));
  CHECK(sparkrt::testing::contains(st, "incomplete"));
  // The next trace starts clean.
  TempFile file("after_failure.json");
  REQUIRE_OK(sparkrt::trace::start(file.path));
  REQUIRE_OK(sparkrt::trace::stop());
  CHECK(read_trace(file.path).size() == 1);  // the process name only
}

TEST_CASE("trace: off, a launch records nothing and allocates nothing") {
  auto dev = open_mock();
  auto mock = sparkrt::testing::MockInspector::attach(*dev);
  REQUIRE_OK(mock.status());
  REQUIRE_OK(mock->set_recording(false));
  auto k = dev->kernel("mock_kinds", "no_params");
  REQUIRE_OK(k.status());
  TempFile file("off.json");
  REQUIRE_OK(sparkrt::trace::start(file.path));
  const uint64_t traced_before = g_allocations.load();
  REQUIRE_OK(KernelLaunch(*dev, *k).grid({1}).block({32}).launch());
  CHECK(g_allocations.load() > traced_before);  // the counter sees the traced launch's event
  REQUIRE_OK(sparkrt::trace::stop());
  const std::string written = read_file(file.path);

  KernelLaunch launch(*dev, *k);
  launch.grid({2}).block({32});
  REQUIRE_OK(launch.launch());  // warm
  const uint64_t before = g_allocations.load();
  for (int i = 0; i < 1000; ++i) REQUIRE_OK(launch.launch());
  CHECK(g_allocations.load() - before == 0);
  REQUIRE_OK(dev->close());
  CHECK(read_file(file.path) == written);
  CHECK(spans(read_trace(file.path), "no_params").size() == 1);
}

TEST_CASE("trace: SPARKRT_TRACE traces a process from its first Device::open to its exit") {
  TempFile file("env.json");
  auto r = sparkrt::testing::run_process({SPARKRT_CLI, "info"},
                                         {{"SPARKRT_BACKEND", "mock"},
                                          {"SPARKRT_TRACE", file.path}});
  INFO(r.out, r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<TraceEvent> events = read_trace(file.path);
  const auto open = spans(events, "device_open");
  REQUIRE(open.size() >= 1);
  CHECK(open[0].arg("backend") == "mock");

  // Asked for and impossible: an error naming the variable and the path.
  const std::string bad = file.path + ".d/no/such/folder/t.json";
  r = sparkrt::testing::run_process({SPARKRT_CLI, "info"},
                                    {{"SPARKRT_BACKEND", "mock"}, {"SPARKRT_TRACE", bad}});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("SPARKRT_TRACE=" + bad) != std::string::npos);

  // A write that fails at exit is said on stderr.
  r = sparkrt::testing::run_process({SPARKRT_CLI, "info"},
                                    {{"SPARKRT_BACKEND", "mock"}, {"SPARKRT_TRACE", "/dev/full"}});
  CHECK(r.err.find("/dev/full") != std::string::npos);
}

TEST_CASE("trace: SPARKRT_TRACE_DEVICE_TIMES=0 leaves the device tracks out, and bad values fail") {
  TempFile file("env_host_only.json");
  for (const char* times : {"1", "0"}) {
    CAPTURE(times);
    auto r = sparkrt::testing::run_process(
        {SPARKRT_CLI, "demo"}, {{"SPARKRT_BACKEND", "mock"},
                                {"SPARKRT_KERNEL_PATH", ""},
                                {"SPARKRT_TRACE", file.path},
                                {"SPARKRT_TRACE_DEVICE_TIMES", times}});
    INFO(r.out, r.err);
    REQUIRE(r.exit_code == 0);
    const std::vector<TraceEvent> events = read_trace(file.path);
    CHECK_FALSE(spans(events, "paged_decode_attn_bf16_split").empty());
    const bool device_times = std::string(times) == "1";
    CHECK(tracetest::device_spans(events, "paged_decode_attn_bf16_split").empty() !=
          device_times);
  }
  auto r = sparkrt::testing::run_process({SPARKRT_CLI, "info"},
                                         {{"SPARKRT_BACKEND", "mock"},
                                          {"SPARKRT_TRACE", file.path},
                                          {"SPARKRT_TRACE_DEVICE_TIMES", "yes"}});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("SPARKRT_TRACE_DEVICE_TIMES='yes'") != std::string::npos);
}

}  // namespace
