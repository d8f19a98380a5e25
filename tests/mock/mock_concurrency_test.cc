// Eight threads launching and copying on one mock device at once: every
// operation is counted exactly, every record is intact, and each thread's
// launches keep their order.
#include <atomic>
#include <map>
#include <thread>

#include "mock_test_support.h"

using namespace mocktest;
using sparkrt::DevicePtr;
using sparkrt::KernelLaunch;
using sparkrt::Stream;

TEST_CASE("mock concurrency: 8 threads launching and copying give exact final counts") {
  constexpr uint32_t kThreads = 8;
  constexpr uint32_t kIters = 250;
  constexpr size_t kBytes = 1024;
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);

  std::atomic<int> failures{0};
  std::vector<Stream> streams(kThreads);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto fail = [&](const absl::Status& s) {
        if (!s.ok()) ++failures;
        return !s.ok();
      };
      // Every thread resolves the kernels too: the runtime must load the
      // module once and resolve each entry once.
      auto rope = dev->kernel(kTwin, kRope);
      if (fail(rope.status())) return;
      auto s = dev->create_stream();
      if (fail(s.status())) return;
      streams[t] = *s;
      auto buf = dev->alloc(kBytes);
      if (fail(buf.status())) return;
      std::mt19937_64 gen(seed + t);
      for (uint32_t i = 0; i < kIters; ++i) {
        const auto in = random_bytes(gen, kBytes);
        std::vector<uint8_t> out(kBytes, 0);
        if (fail(dev->copy_h2d_async(in.data(), *buf, kBytes, *s))) return;
        if (fail(KernelLaunch(*dev, *rope)
                     .grid({t + 1})
                     .block({128})
                     .arg(*buf)
                     .arg(*buf + 512)
                     .arg(t)
                     .arg(uint32_t{64})
                     .arg(uint32_t{32})
                     .arg(i)
                     .arg(static_cast<float>(i) * 0.5f)
                     .arg(uint32_t{1})
                     .launch(*s)))
          return;
        if (fail(dev->copy_d2h_async(*buf, out.data(), kBytes, *s))) return;
        if (out != in) ++failures;  // another thread's bytes, or none
        if (i % 10 == 0) {
          auto tmp = dev->alloc(64 + i);
          if (fail(tmp.status())) return;
          if (fail(dev->free(*tmp))) return;
        }
      }
      if (fail(dev->synchronize(*s))) return;
      if (fail(dev->free(*buf))) return;
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(failures.load() == 0);

  constexpr uint64_t kTotal = uint64_t{kThreads} * kIters;
  const auto c = mock.counters();
  CHECK(c.launches == kTotal);
  CHECK(c.h2d_async == kTotal);
  CHECK(c.d2h_async == kTotal);
  CHECK(c.bytes_h2d == kTotal * kBytes);
  CHECK(c.syncs == kThreads);
  CHECK(c.allocations == kThreads * (1 + kIters / 10));
  CHECK(c.frees == c.allocations);
  CHECK(c.live_bytes == 0);
  CHECK(c.streams_created == kThreads);
  CHECK(c.errors == 0);
  CHECK(c.lookups == 1);
  CHECK(c.module_loads == 1);

  // Each thread's launches are all there, on its stream, in its order.
  const auto launches = mock.launches();
  REQUIRE(launches.size() == kTotal);
  std::map<uint64_t, std::vector<uint32_t>> by_stream;
  std::vector<bool> seen(kTotal + 1, false);
  for (const auto& l : launches) {
    by_stream[l.stream.handle].push_back(*l.args[5].as<uint32_t>());
    REQUIRE(l.sequence >= 1);
    REQUIRE(l.sequence <= kTotal);
    CHECK_FALSE(seen[l.sequence]);
    seen[l.sequence] = true;
  }
  for (uint32_t t = 0; t < kThreads; ++t) {
    const auto& order = by_stream[streams[t].handle];
    REQUIRE(order.size() == kIters);
    for (uint32_t i = 0; i < kIters; ++i) REQUIRE(order[i] == i);
    CHECK(mock.stream_counters(streams[t]).launches == kIters);
    CHECK(mock.stream_counters(streams[t]).d2h_async == kIters);
  }
  // Records are intact: a launch's grid, thread argument and theta agree.
  for (const auto& l : launches) {
    const uint32_t t = *l.args[2].as<uint32_t>();
    REQUIRE(l.grid.x == t + 1);
    REQUIRE(l.args[6] == MockArg::of(static_cast<float>(*l.args[5].as<uint32_t>()) * 0.5f));
  }
}
