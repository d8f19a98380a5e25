// Host cost of building and dispatching a 10-argument launch through the
// plugin boundary to the recording mock, and the heap allocations it makes.
//
// Two variants: with the mock recording every launch (as tests use it), and
// with recording off (counters only), which isolates the runtime's share;
// each through KernelLaunch and through the C API's sparkrt_launch (compare
// them with --benchmark_enable_random_interleaving=true, which interleaves
// the repetitions).
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "sparkrt/kernel_launch.h"
#include "sparkrt/sparkrt_c.h"
#include "sparkrt/testing/mock.h"
#include "sparkrt/trace.h"

namespace {

// Every operator new in the process is counted, the plugin's included (it
// shares the global allocator).
std::atomic<uint64_t> g_allocations{0};

}  // namespace

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

namespace {

struct Fixture {
  std::unique_ptr<sparkrt::Device> dev;
  sparkrt::Kernel kernel;
  sparkrt::DevicePtr buf;
};

Fixture& fixture() {
  static Fixture f = [] {
    Fixture x;
    auto dev = sparkrt::Device::open({.backend = "mock"});
    if (!dev.ok()) {
      std::fprintf(stderr, "cannot open the mock: %s\n", dev.status().ToString().c_str());
      std::exit(1);
    }
    x.dev = *std::move(dev);
    x.kernel = *x.dev->kernel("vector_ops", "empty_10_args");
    x.buf = *x.dev->alloc(4096);
    return x;
  }();
  return f;
}

void launch_loop(benchmark::State& state) {
  Fixture& f = fixture();
  const uint64_t before = g_allocations.load();
  for (auto _ : state) {
    absl::Status s = sparkrt::KernelLaunch(*f.dev, f.kernel)
                         .grid({1})
                         .block({32})
                         .arg(f.buf)
                         .arg(f.buf + 256)
                         .arg(f.buf + 512)
                         .arg(f.buf + 768)
                         .arg(uint32_t{1})
                         .arg(uint32_t{2})
                         .arg(uint32_t{3})
                         .arg(uint64_t{4})
                         .arg(5.0f)
                         .arg(6.0f)
                         .launch();
    benchmark::DoNotOptimize(s);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  }
  const uint64_t allocs = g_allocations.load() - before;
  state.counters["allocs_per_launch"] =
      benchmark::Counter(static_cast<double>(allocs) / static_cast<double>(state.iterations()));
}

// Full recording, as tests use it. Records are kept up to the mock's cap,
// so long runs measure the steady state after the cap too.
void BM_Launch10Args_MockRecording(benchmark::State& state) {
  auto mock = sparkrt::testing::MockInspector::attach(*fixture().dev);
  if (!mock.ok()) return state.SkipWithError("not the mock");
  if (!mock->set_recording(true).ok() || !mock->reset().ok()) return state.SkipWithError("mock");
  launch_loop(state);
}
BENCHMARK(BM_Launch10Args_MockRecording);

// Counters only: the cost of the runtime plus the plugin boundary.
void BM_Launch10Args_MockCountingOnly(benchmark::State& state) {
  auto mock = sparkrt::testing::MockInspector::attach(*fixture().dev);
  if (!mock.ok()) return state.SkipWithError("not the mock");
  if (!mock->set_recording(false).ok()) return state.SkipWithError("mock");
  launch_loop(state);
  if (!mock->set_recording(true).ok()) state.SkipWithError("mock");
}
BENCHMARK(BM_Launch10Args_MockCountingOnly);

// Tracing on (to /dev/null): the host span, the two events of the device
// span on the mock and its formatting, read back every 1024 launches.
void BM_Launch10Args_MockTraced(benchmark::State& state) {
  auto mock = sparkrt::testing::MockInspector::attach(*fixture().dev);
  if (!mock.ok()) return state.SkipWithError("not the mock");
  if (!mock->set_recording(false).ok()) return state.SkipWithError("mock");
  if (!sparkrt::trace::start("/dev/null").ok()) return state.SkipWithError("trace::start");
  launch_loop(state);
  if (!sparkrt::trace::stop().ok()) state.SkipWithError("trace::stop");
  if (!mock->set_recording(true).ok()) state.SkipWithError("mock");
}
BENCHMARK(BM_Launch10Args_MockTraced);

// The C API on its own mock device, the same kernel and arguments.
struct CFixture {
  sparkrt_device* dev = nullptr;
  sparkrt_kernel* kernel = nullptr;
  SparkrtDevicePtr buf = 0;
};

CFixture& c_fixture() {
  static CFixture f = [] {
    CFixture x;
    const sparkrt_open_options options{SPARKRT_C_OPEN_OPTIONS_SIZE, "mock", 0};
    sparkrt_status* s = sparkrt_device_open(&options, &x.dev);
    if (s == nullptr) s = sparkrt_kernel_get(x.dev, "vector_ops", "empty_10_args", &x.kernel);
    if (s == nullptr) s = sparkrt_alloc(x.dev, 4096, &x.buf);
    if (s != nullptr) {
      std::fprintf(stderr, "C API setup failed: %s\n", sparkrt_status_message(s));
      std::exit(1);
    }
    return x;
  }();
  return f;
}

void c_launch_loop(benchmark::State& state) {
  CFixture& f = c_fixture();
  const sparkrt_launch_config config{SPARKRT_C_LAUNCH_CONFIG_SIZE, {1, 1, 1}, {32, 1, 1}, 0, 0, 0,
                                     {0, 0, 0}};
  const uint64_t before = g_allocations.load();
  for (auto _ : state) {
    // Built per launch, as the C++ loop builds its KernelLaunch.
    const sparkrt_arg args[] = {sparkrt_arg_ptr(f.buf),       sparkrt_arg_ptr(f.buf + 256),
                                sparkrt_arg_ptr(f.buf + 512), sparkrt_arg_ptr(f.buf + 768),
                                sparkrt_arg_u32(1),           sparkrt_arg_u32(2),
                                sparkrt_arg_u32(3),           sparkrt_arg_u64(4),
                                sparkrt_arg_f32(5.0f),        sparkrt_arg_f32(6.0f)};
    sparkrt_status* s = sparkrt_launch(f.kernel, &config, args, 10);
    benchmark::DoNotOptimize(s);
    if (s != nullptr) {
      state.SkipWithError(sparkrt_status_message(s));
      sparkrt_status_free(s);
    }
  }
  const uint64_t allocs = g_allocations.load() - before;
  state.counters["allocs_per_launch"] =
      benchmark::Counter(static_cast<double>(allocs) / static_cast<double>(state.iterations()));
}

// The mock's extension table through the C API, to switch recording.
bool c_set_recording(bool on) {
  CFixture& f = c_fixture();
  const auto* mock = static_cast<const SparkrtMockExtension*>(
      sparkrt_device_extension(f.dev, SPARKRT_MOCK_EXTENSION_NAME));
  if (mock == nullptr) return false;
  SparkrtError* e = mock->set_recording(sparkrt_device_native_handle(f.dev), on ? 1 : 0,
                                        SPARKRT_MOCK_DEFAULT_MAX_LAUNCH_RECORDS);
  if (e == nullptr && on) e = mock->reset(sparkrt_device_native_handle(f.dev));
  if (e != nullptr) mock->error_destroy(e);
  return e == nullptr;
}

void BM_CLaunch10Args_MockRecording(benchmark::State& state) {
  if (!c_set_recording(true)) return state.SkipWithError("mock");
  c_launch_loop(state);
}
BENCHMARK(BM_CLaunch10Args_MockRecording);

void BM_CLaunch10Args_MockCountingOnly(benchmark::State& state) {
  if (!c_set_recording(false)) return state.SkipWithError("mock");
  c_launch_loop(state);
  if (!c_set_recording(true)) state.SkipWithError("mock");
}
BENCHMARK(BM_CLaunch10Args_MockCountingOnly);

}  // namespace

BENCHMARK_MAIN();
