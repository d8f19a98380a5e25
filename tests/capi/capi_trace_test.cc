// The trace through the C API (sparkrt_trace_start, _stop, _enabled): a
// launch made from C is in the file with its host and device spans, and the
// failures have the codes and messages of sparkrt::trace's.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "capi_test_support.h"
#include "sparkrt/trace.h"
#include "trace_events.h"

using capitest::check_same;
using capitest::CStatus;
using capitest::open_c;
using tracetest::device_spans;
using tracetest::read_trace;
using tracetest::spans;
using tracetest::TraceEvent;

namespace {

namespace fs = std::filesystem;

// A path in the temporary folder, removed (with anything under it) at scope exit.
struct TempPath {
  std::string path;
  explicit TempPath(const std::string& name)
      : path((fs::temp_directory_path() /
              ("sparkrt_capi_trace_" + std::to_string(::getpid()) + "_" + name))
                 .string()) {}
  ~TempPath() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A trace started from the environment would be running already.
void no_trace_from_environment() {
  REQUIRE(::unsetenv("SPARKRT_TRACE") == 0);
  REQUIRE(sparkrt_trace_enabled() == 0);
}

TEST_CASE("capi trace: a launch made from C has its host span and its device span") {
  no_trace_from_environment();
  TempPath file("launch.json");
  C_REQUIRE_OK(sparkrt_trace_start(file.path.c_str()));
  CHECK(sparkrt_trace_enabled() == 1);
  CHECK(sparkrt::trace::path() == file.path);

  constexpr uint32_t n = 1000;
  auto dev = open_c("mock");
  sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  const SparkrtDevicePtr buf = capitest::c_alloc(dev.get(), 3 * n * sizeof(float));
  const SparkrtStream stream = capitest::c_stream(dev.get());
  // The mock computes nothing but keeps the bytes: they come back unchanged.
  std::mt19937 rng(20261205);
  std::vector<float> in(n), out(n, -1.0f);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (float& x : in) x = dist(rng);
  C_REQUIRE_OK(sparkrt_copy_h2d(dev.get(), in.data(), buf, n * sizeof(float)));
  const sparkrt_launch_config cfg = capitest::config({(n + 255) / 256}, {256}, 0, stream);
  const sparkrt_arg args[] = {sparkrt_arg_ptr(buf), sparkrt_arg_ptr(buf + n * sizeof(float)),
                              sparkrt_arg_ptr(buf + 2 * n * sizeof(float)), sparkrt_arg_u32(n)};
  C_REQUIRE_OK(sparkrt_launch(add, &cfg, args, 4));
  C_REQUIRE_OK(sparkrt_copy_d2h_async(dev.get(), buf, out.data(), n * sizeof(float), stream));
  C_REQUIRE_OK(sparkrt_stream_synchronize(dev.get(), stream));
  CHECK(out == in);
  C_REQUIRE_OK(sparkrt_trace_stop());
  CHECK(sparkrt_trace_enabled() == 0);
  CHECK(sparkrt::trace::path().empty());
  dev.reset();  // closed after the trace: not in it

  const std::vector<TraceEvent> events = read_trace(file.path);
  INFO(read_file(file.path));
  CHECK(spans(events, "device_open").size() == 1);
  CHECK(spans(events, "device_close").empty());

  const auto host = spans(events, "vector_add_f32");
  REQUIRE(host.size() == 1);
  CHECK(host[0].cat == "launch");
  CHECK(host[0].arg("module") == "vector_ops");
  CHECK(host[0].arg("entry") == "vector_add_f32");
  CHECK(host[0].list("grid") == "4,1,1");
  CHECK(host[0].list("block") == "256,1,1");
  CHECK(host[0].arg("stream") == std::to_string(stream));
  CHECK(host[0].arg("failed") == "false");

  const auto device = device_spans(events, "vector_add_f32");
  REQUIRE(device.size() == 1);
  CHECK(device[0].pid != 1);
  CHECK(device[0].tid == stream);
  CHECK(device[0].arg("module") == "vector_ops");
  CHECK(device[0].list("grid") == "4,1,1");
  // Queued by the host before the device could run it.
  CHECK(device[0].ts >= host[0].ts);

  const auto copy = spans(events, "copy");
  REQUIRE(copy.size() == 1);
  CHECK(copy[0].arg("direction") == "h2d");
  CHECK(copy[0].arg("bytes") == std::to_string(n * sizeof(float)));
  CHECK(spans(events, "copy_async").size() == 1);
  CHECK(device_spans(events, "copy_d2h").size() == 1);
}

TEST_CASE("capi trace: a file that cannot be written is NOT_FOUND, naming it, as in C++") {
  no_trace_from_environment();
  TempPath dir("no_folder");
  const std::string missing = dir.path + "/no/such/folder/t.json";
  const CStatus c(sparkrt_trace_start(missing.c_str()));
  INFO(capitest::describe(c.get()));
  CHECK(sparkrt_status_code(c.get()) == SPARKRT_NOT_FOUND);
  CHECK(std::string(sparkrt_status_message(c.get())).find(missing) != std::string::npos);
  CHECK(sparkrt_trace_enabled() == 0);
  check_same(c.get(), sparkrt::trace::start(missing));
  CHECK(sparkrt_trace_enabled() == 0);
}

TEST_CASE("capi trace: one trace at a time, stop needs a trace, and NULL is refused") {
  no_trace_from_environment();
  C_CHECK_ERROR(sparkrt_trace_start(nullptr), SPARKRT_INVALID_ARGUMENT,
                "sparkrt_trace_start: `path` is NULL; pass a valid pointer");
  C_CHECK_ERROR(sparkrt_trace_stop(), SPARKRT_FAILED_PRECONDITION, "trace: no trace is running");
  CHECK(sparkrt_trace_enabled() == 0);

  TempPath first("first.json"), second("second.json");
  C_REQUIRE_OK(sparkrt_trace_start(first.path.c_str()));
  {
    const CStatus again(sparkrt_trace_start(second.path.c_str()));
    INFO(capitest::describe(again.get()));
    CHECK(sparkrt_status_code(again.get()) == SPARKRT_FAILED_PRECONDITION);
    // Names the trace that runs, which goes on.
    CHECK(std::string(sparkrt_status_message(again.get())).find(first.path) != std::string::npos);
  }
  C_CHECK_CODE(sparkrt_trace_start(nullptr), SPARKRT_INVALID_ARGUMENT);
  CHECK(sparkrt_trace_enabled() == 1);
  CHECK(sparkrt::trace::path() == first.path);
  CHECK_FALSE(fs::exists(second.path));
  C_REQUIRE_OK(sparkrt_trace_stop());
  CHECK(sparkrt_trace_enabled() == 0);
  C_CHECK_CODE(sparkrt_trace_stop(), SPARKRT_FAILED_PRECONDITION);
  CHECK(read_trace(first.path).size() == 1);  // the process name only

  // The one after them starts.
  C_REQUIRE_OK(sparkrt_trace_start(second.path.c_str()));
  C_REQUIRE_OK(sparkrt_trace_stop());
  CHECK(fs::exists(second.path));
}

TEST_CASE("capi trace: stop reports a write that failed") {
  no_trace_from_environment();
  C_REQUIRE_OK(sparkrt_trace_start("/dev/full"));
  {
    auto dev = open_c("mock");
    capitest::c_alloc(dev.get(), 64);
  }
  const CStatus st(sparkrt_trace_stop());
  INFO(capitest::describe(st.get()));
  CHECK(sparkrt_status_code(st.get()) == SPARKRT_RESOURCE_EXHAUSTED);
  CHECK(std::string(sparkrt_status_message(st.get())).find("/dev/full") != std::string::npos);
  CHECK(sparkrt_trace_enabled() == 0);
}

}  // namespace

TEST_CASE("capi trace: ranges nest per thread, and a pop with none open is refused") {
  no_trace_from_environment();
  TempPath file("ranges.json");
  C_REQUIRE_OK(sparkrt_trace_range_push("before the trace"));  // not recorded, still pops
  C_REQUIRE_OK(sparkrt_trace_start(file.path.c_str()));
  C_REQUIRE_OK(sparkrt_trace_range_pop());
  C_REQUIRE_OK(sparkrt_trace_range_push("decode step"));
  {
    auto dev = open_c("mock");
    C_REQUIRE_OK(sparkrt_trace_range_push("layer 0"));
    capitest::c_alloc(dev.get(), 256);
    C_REQUIRE_OK(sparkrt_trace_range_pop());
  }
  C_REQUIRE_OK(sparkrt_trace_range_pop());
  C_CHECK_ERROR(sparkrt_trace_range_pop(), SPARKRT_FAILED_PRECONDITION,
                "sparkrt_trace_range_pop: no region is open on this thread; pop only what "
                "sparkrt_trace_range_push opened");
  C_CHECK_CODE(sparkrt_trace_range_push(nullptr), SPARKRT_INVALID_ARGUMENT);
  C_REQUIRE_OK(sparkrt_trace_stop());

  const std::vector<TraceEvent> events = read_trace(file.path);
  INFO(read_file(file.path));
  CHECK(spans(events, "before the trace").empty());
  const auto outer = spans(events, "decode step");
  const auto inner = spans(events, "layer 0");
  const auto alloc = spans(events, "alloc");
  REQUIRE(outer.size() == 1);
  REQUIRE(inner.size() == 1);
  REQUIRE(alloc.size() == 1);
  CHECK(outer[0].cat == "user");
  CHECK(inner[0].ts >= outer[0].ts);
  CHECK(inner[0].ts + inner[0].dur <= outer[0].ts + outer[0].dur + 0.002);
  CHECK(alloc[0].ts >= inner[0].ts);
  CHECK(alloc[0].ts + alloc[0].dur <= inner[0].ts + inner[0].dur + 0.002);
}

TEST_CASE("capi trace: options: host spans only, and a struct too small is refused") {
  no_trace_from_environment();
  TempPath file("host_only.json");
  const sparkrt_trace_options host_only{SPARKRT_C_TRACE_OPTIONS_SIZE, 0};
  C_REQUIRE_OK(sparkrt_trace_start_with_options(file.path.c_str(), &host_only));
  {
    auto dev = open_c("mock");
    const SparkrtStream stream = capitest::c_stream(dev.get());
    const SparkrtDevicePtr buf = capitest::c_alloc(dev.get(), 256);
    C_REQUIRE_OK(sparkrt_memset_async(dev.get(), buf, 1, 256, stream));
    C_REQUIRE_OK(sparkrt_stream_synchronize(dev.get(), stream));
  }
  C_REQUIRE_OK(sparkrt_trace_stop());
  const std::vector<TraceEvent> events = read_trace(file.path);
  CHECK(spans(events, "memset_async").size() == 1);
  CHECK(device_spans(events, "memset_async").empty());

  const sparkrt_trace_options old{sizeof(size_t) - 1, 1};
  C_CHECK_CODE(sparkrt_trace_start_with_options(file.path.c_str(), &old),
               SPARKRT_INVALID_ARGUMENT);
  CHECK(sparkrt_trace_enabled() == 0);
  // NULL options: the defaults, device times included.
  C_REQUIRE_OK(sparkrt_trace_start_with_options(file.path.c_str(), nullptr));
  C_REQUIRE_OK(sparkrt_trace_stop());
}
