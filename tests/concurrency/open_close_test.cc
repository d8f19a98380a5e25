// Devices opened and closed on some threads while others launch on a
// long-lived mock device: mock devices come and go beside it, the cpu plugin
// is loaded and unloaded as its devices do, devices of one plugin overlap in
// time, and neither the long-lived device nor any short-lived one sees
// another's work.
#include <latch>
#include <thread>

#include "sparkrt/testing/mock.h"
#include "threads_support.h"

using sparkrt::Device;
using sparkrt::DevicePtr;
using sparkrt::KernelLaunch;
using sparkrt::Stream;
using sparkrt::testing::MockInspector;
using threadtest::Failures;

namespace {

constexpr uint32_t kN = 256;

// Opens a device, runs one vector_add_f32 on it with blocking copies and
// checks it: the sums on the cpu, the exact counts on the mock.
absl::StatusOr<std::unique_ptr<Device>> open_and_use(const char* backend, uint32_t tag,
                                                     Failures& failures, const std::string& at) {
  auto dev = Device::open({.backend = backend});
  if (!dev.ok()) return dev.status();
  auto k = (*dev)->kernel("vector_ops", "vector_add_f32");
  if (!k.ok()) return k.status();
  std::vector<float> x(kN), y(kN), sum(kN, 0.0f);
  for (uint32_t j = 0; j < kN; ++j) x[j] = static_cast<float>(tag + j), y[j] = 0.25f * j;
  std::vector<DevicePtr> ptrs;
  for (int i = 0; i < 3; ++i) {
    auto p = (*dev)->alloc(kN * sizeof(float));
    if (!p.ok()) return p.status();
    ptrs.push_back(*p);
  }
  if (auto s = (*dev)->copy_h2d(x, ptrs[0]); !s.ok()) return s;
  if (auto s = (*dev)->copy_h2d(y, ptrs[1]); !s.ok()) return s;
  if (auto s = KernelLaunch(**dev, *k)
                   .grid({1})
                   .block({kN})
                   .arg(ptrs[0])
                   .arg(ptrs[1])
                   .arg(ptrs[2])
                   .arg(kN)
                   .launch();
      !s.ok())
    return s;
  if (auto s = (*dev)->synchronize(); !s.ok()) return s;
  if (auto s = (*dev)->copy_d2h(ptrs[2], sum); !s.ok()) return s;
  for (DevicePtr p : ptrs)
    if (auto s = (*dev)->free(p); !s.ok()) return s;
  if (std::string_view(backend) == "cpu") {
    for (uint32_t j = 0; j < kN; ++j)
      if (sum[j] != x[j] + y[j]) {
        failures.add(at + ": cpu vector_add result is not a + b");
        break;
      }
  } else {
    auto mock = MockInspector::attach(**dev);
    if (!mock.ok()) return mock.status();
    const auto c = mock->counters();
    if (c.launches != 1 || c.lookups != 1 || c.module_loads != 1 || c.h2d_blocking != 2 ||
        c.d2h_blocking != 1 || c.allocations != 3 || c.frees != 3 || c.syncs != 1 ||
        c.errors != 0)
      failures.add(at + ": a fresh mock device counted another device's work (launches " +
                   std::to_string(c.launches) + ", lookups " + std::to_string(c.lookups) +
                   ", allocations " + std::to_string(c.allocations) + ")");
  }
  return dev;
}

}  // namespace

TEST_CASE("concurrency: devices opened and closed while other threads launch") {
  constexpr uint32_t kLaunchers = 8;
  constexpr uint32_t kChurners = 8;
  constexpr uint32_t kRounds = 20;
  constexpr uint32_t kMinIters = 100;
  threadtest::use_test_kernels();
  auto dev = threadtest::open_device("mock");
  auto inspected = MockInspector::attach(*dev);
  REQUIRE_MESSAGE(inspected.ok(), inspected.status().ToString());
  MockInspector& mock = *inspected;

  Failures failures;
  std::latch start(kLaunchers + kChurners);
  std::atomic<uint32_t> churners_left{kChurners};
  std::atomic<uint64_t> launched{0};
  std::vector<Stream> streams(kLaunchers);
  std::vector<uint64_t> per_thread(kLaunchers, 0);
  std::vector<std::thread> threads;
  // Launchers: on the long-lived device until every churner is done, and at
  // least kMinIters times.
  for (uint32_t t = 0; t < kLaunchers; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      auto rope = dev->kernel("twin_contract", "twin_maybe_rope_f32");
      if (failures.failed(rope.status(), "kernel twin_maybe_rope_f32")) return;
      auto s = dev->create_stream();
      if (failures.failed(s.status(), "create_stream")) return;
      streams[t] = *s;
      auto buf = dev->alloc(1024);
      if (failures.failed(buf.status(), "alloc")) return;
      std::vector<uint8_t> bytes(1024, static_cast<uint8_t>(t + 1)), back(1024);
      uint32_t i = 0;
      for (; i < kMinIters || churners_left.load() > 0; ++i) {
        const std::string at = "launcher " + std::to_string(t) + " iteration " + std::to_string(i);
        if (failures.failed(dev->copy_h2d_async(bytes.data(), *buf, 1024, *s), at) ||
            failures.failed(KernelLaunch(*dev, *rope)
                                .grid({t + 1})
                                .block({128})
                                .arg(*buf)
                                .arg(*buf + 512)
                                .arg(t)
                                .arg(uint32_t{64})
                                .arg(uint32_t{32})
                                .arg(i)
                                .arg(0.5f)
                                .arg(uint32_t{1})
                                .launch(*s),
                            at + " launch") ||
            failures.failed(dev->copy_d2h_async(*buf, back.data(), 1024, *s), at))
          return;
        if (back != bytes) failures.add(at + ": another thread's bytes, or none");
      }
      per_thread[t] = i;
      launched += i;
      failures.failed(dev->synchronize(*s), "synchronize");
      failures.failed(dev->free(*buf), "free");
    });
  }
  // Churners: two devices per round, of the same or different plugins,
  // overlapping; one closed explicitly, the other by its destructor.
  for (uint32_t t = 0; t < kChurners; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (uint32_t r = 0; r < kRounds; ++r) {
        const std::string at = "churner " + std::to_string(t) + " round " + std::to_string(r);
        const char* first = (t + r) % 2 ? "mock" : "cpu";
        const char* second = (t + r) % 3 ? "mock" : "cpu";
        auto a = open_and_use(first, t * 100 + r, failures, at + " " + first);
        if (failures.failed(a.status(), at + " " + first)) break;
        auto b = open_and_use(second, t * 100 + r + 50, failures, at + " " + second);
        if (failures.failed(b.status(), at + " " + second)) break;
        if (failures.failed((*a)->close(), at + " close")) break;
        // The second device still works after the first one of its plugin
        // closed.
        auto k = (*b)->kernel("vector_ops", "fill_u32");
        if (failures.failed(k.status(), at + " kernel after close")) break;
        a->reset();
        b->reset();
      }
      --churners_left;
    });
  }
  for (auto& th : threads) th.join();
  failures.require_none();

  const uint64_t n = launched.load();
  const auto c = mock.counters();
  CHECK(c.launches == n);
  CHECK(c.h2d_async == n);
  CHECK(c.d2h_async == n);
  CHECK(c.bytes_h2d == n * 1024);
  CHECK(c.lookups == 1);
  CHECK(c.module_loads == 1);
  CHECK(c.allocations == kLaunchers);
  CHECK(c.live_bytes == 0);
  CHECK(c.streams_created == kLaunchers);
  CHECK(c.errors == 0);
  for (uint32_t t = 0; t < kLaunchers; ++t) {
    CHECK(per_thread[t] >= kMinIters);
    CHECK(mock.stream_counters(streams[t]).launches == per_thread[t]);
  }
  CHECK_OK(dev->close());
}
