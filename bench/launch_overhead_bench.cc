// Host cost of building and dispatching a 10-argument launch through the
// plugin boundary to the recording mock, and the heap allocations it makes.
//
// Two variants: with the mock recording every launch (as tests use it), and
// with recording off (counters only), which isolates the runtime's share.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "sparkrt/kernel_launch.h"
#include "sparkrt/testing/mock.h"

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

}  // namespace

BENCHMARK_MAIN();
