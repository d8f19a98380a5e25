// Sixteen threads launching, copying, allocating and recording events on one
// mock device at once: every operation is counted exactly, every launch
// record is intact, each thread's launches keep their order on its stream,
// and two modules resolved by all threads at once load once each.
#include <latch>
#include <map>
#include <thread>

#include "sparkrt/testing/mock.h"
#include "threads_support.h"

using sparkrt::DevicePtr;
using sparkrt::Event;
using sparkrt::Kernel;
using sparkrt::KernelLaunch;
using sparkrt::Stream;
using sparkrt::testing::MockArg;
using sparkrt::testing::MockInspector;
using threadtest::Failures;

namespace {

// How many of 0 .. n-1 are multiples of k.
constexpr uint64_t multiples(uint64_t n, uint64_t k) { return (n + k - 1) / k; }

}  // namespace

TEST_CASE("concurrency: 16 threads launching and copying on one mock device give exact counts") {
  constexpr uint32_t kThreads = 16;
  constexpr uint32_t kIters = 200;
  constexpr size_t kBytes = 1024;
  threadtest::use_test_kernels();
  auto dev = threadtest::open_device("mock");
  auto inspected = MockInspector::attach(*dev);
  REQUIRE_MESSAGE(inspected.ok(), inspected.status().ToString());
  MockInspector& mock = *inspected;
  const uint64_t seed = threadtest::fresh_seed();
  INFO("seed ", seed);

  Failures failures;
  std::latch start(kThreads);
  std::vector<Stream> streams(kThreads);
  std::vector<DevicePtr> bufs(kThreads);
  std::vector<const sparkrt::KernelSignature*> rope_sigs(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      // All threads resolve both modules at once: each module must load
      // once and each entry resolve once.
      auto rope = dev->kernel("twin_contract", "twin_maybe_rope_f32");
      if (failures.failed(rope.status(), "kernel twin_maybe_rope_f32")) return;
      auto add = dev->kernel("vector_ops", "vector_add_f32");
      if (failures.failed(add.status(), "kernel vector_add_f32")) return;
      rope_sigs[t] = &rope->signature();
      auto s = dev->create_stream();
      if (failures.failed(s.status(), "create_stream")) return;
      streams[t] = *s;
      auto ev = dev->create_event();
      if (failures.failed(ev.status(), "create_event")) return;
      auto buf = dev->alloc(kBytes);
      auto buf2 = dev->alloc(kBytes);
      if (failures.failed(buf.status(), "alloc") || failures.failed(buf2.status(), "alloc")) return;
      bufs[t] = *buf;
      std::mt19937_64 gen(seed + t);
      for (uint32_t i = 0; i < kIters; ++i) {
        const std::string at = "thread " + std::to_string(t) + " iteration " + std::to_string(i);
        const auto in = threadtest::random_bytes(gen, kBytes);
        std::vector<uint8_t> out(kBytes, 0);
        if (failures.failed(dev->copy_h2d_async(in.data(), *buf, kBytes, *s), at + " h2d_async") ||
            failures.failed(KernelLaunch(*dev, *rope)
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
                                .launch(*s),
                            at + " launch rope") ||
            failures.failed(dev->copy_d2d_async(*buf, *buf2, kBytes, *s), at + " d2d_async") ||
            failures.failed(dev->copy_d2h_async(*buf2, out.data(), kBytes, *s), at + " d2h_async"))
          return;
        if (out != in) failures.add(at + ": another thread's bytes, or none");
        if (i % 4 == 0) {
          std::vector<uint8_t> zeros(kBytes, 1);
          if (failures.failed(dev->memset_async(*buf2, 0, kBytes, *s), at + " memset_async") ||
              failures.failed(dev->synchronize(*s), at + " synchronize") ||
              failures.failed(dev->copy_d2h(*buf2, zeros.data(), kBytes), at + " d2h") ||
              failures.failed(dev->copy_h2d(in.data(), *buf2, kBytes), at + " h2d"))
            return;
          if (zeros != std::vector<uint8_t>(kBytes, 0)) failures.add(at + ": memset lost");
        }
        if (i % 10 == 0) {
          auto tmp = dev->alloc(64 + i);
          if (failures.failed(tmp.status(), at + " alloc") ||
              failures.failed(dev->free(*tmp), at + " free"))
            return;
        }
        if (i % 25 == 0) {
          if (failures.failed(dev->record_event(*ev, *s), at + " record_event") ||
              failures.failed(dev->wait_event(*s, *ev), at + " wait_event") ||
              failures.failed(KernelLaunch(*dev, *add)
                                  .grid({1})
                                  .block({64})
                                  .arg(*buf)
                                  .arg(*buf + 256)
                                  .arg(*buf2)
                                  .arg(uint32_t{64})
                                  .launch(*s),
                              at + " launch vector_add"))
            return;
        }
      }
      if (failures.failed(dev->synchronize(*s), "synchronize") ||
          failures.failed(dev->destroy_event(*ev), "destroy_event") ||
          failures.failed(dev->free(*buf), "free") || failures.failed(dev->free(*buf2), "free"))
        return;
    });
  }
  for (auto& th : threads) th.join();
  failures.require_none();

  // One record behind every thread's handle.
  for (uint32_t t = 1; t < kThreads; ++t) CHECK(rope_sigs[t] == rope_sigs[0]);

  constexpr uint64_t T = kThreads;
  constexpr uint64_t kRope = T * kIters;
  constexpr uint64_t kAdd = T * multiples(kIters, 25);
  constexpr uint64_t kBlocking = T * multiples(kIters, 4);
  const auto c = mock.counters();
  CHECK(c.launches == kRope + kAdd);
  CHECK(c.launches_failed == 0);
  CHECK(c.launch_records_dropped == 0);
  CHECK(c.h2d_async == kRope);
  CHECK(c.d2h_async == kRope);
  CHECK(c.d2d_async == kRope);
  CHECK(c.memsets_async == kBlocking);
  CHECK(c.h2d_blocking == kBlocking);
  CHECK(c.d2h_blocking == kBlocking);
  CHECK(c.d2d_blocking == 0);
  CHECK(c.bytes_h2d == (kRope + kBlocking) * kBytes);
  CHECK(c.bytes_d2h == (kRope + kBlocking) * kBytes);
  CHECK(c.bytes_d2d == kRope * kBytes);
  CHECK(c.syncs == kBlocking + T);
  CHECK(c.allocations == T * (2 + multiples(kIters, 10)));
  CHECK(c.frees == c.allocations);
  CHECK(c.live_allocations == 0);
  CHECK(c.live_bytes == 0);
  CHECK(c.streams_created == T);
  CHECK(c.events_created == T);
  CHECK(c.events_destroyed == T);
  CHECK(c.events_recorded == kAdd);
  CHECK(c.event_waits == kAdd);
  CHECK(c.errors == 0);
  CHECK(c.lookups == 2);
  CHECK(c.module_loads == 2);

  // Each thread's launches are all there, on its stream, in its order, with
  // its own arguments; sequence numbers are 1..N, each once.
  const auto launches = mock.launches();
  REQUIRE(launches.size() == kRope + kAdd);
  std::map<uint64_t, std::vector<uint32_t>> rope_order;
  std::map<uint64_t, uint64_t> adds;
  std::vector<bool> seen(launches.size() + 1, false);
  for (const auto& l : launches) {
    REQUIRE(l.sequence >= 1);
    REQUIRE(l.sequence <= launches.size());
    CHECK_FALSE(seen[l.sequence]);
    seen[l.sequence] = true;
    if (l.entry == "vector_add_f32") {
      ++adds[l.stream.handle];
      continue;
    }
    REQUIRE(l.entry == "twin_maybe_rope_f32");
    REQUIRE(l.args.size() == 8);
    const uint32_t t = *l.args[2].as<uint32_t>();
    const uint32_t i = *l.args[5].as<uint32_t>();
    REQUIRE(t < kThreads);
    rope_order[l.stream.handle].push_back(i);
    REQUIRE(l.stream == streams[t]);
    REQUIRE(l.grid.x == t + 1);
    REQUIRE(l.args[0] == MockArg::of(bufs[t]));
    REQUIRE(l.args[1] == MockArg::of(bufs[t] + 512));
    REQUIRE(l.args[6] == MockArg::of(static_cast<float>(i) * 0.5f));
  }
  for (uint32_t t = 0; t < kThreads; ++t) {
    const auto& order = rope_order[streams[t].handle];
    REQUIRE(order.size() == kIters);
    for (uint32_t i = 0; i < kIters; ++i) REQUIRE(order[i] == i);
    CHECK(adds[streams[t].handle] == multiples(kIters, 25));
    const auto sc = mock.stream_counters(streams[t]);
    CHECK(sc.launches == kIters + multiples(kIters, 25));
    CHECK(sc.h2d_async == kIters);
    CHECK(sc.d2h_async == kIters);
    CHECK(sc.d2d_async == kIters);
    CHECK(sc.memsets_async == multiples(kIters, 4));
    CHECK(sc.syncs == multiples(kIters, 4) + 1);
    CHECK(sc.events_recorded == multiples(kIters, 25));
    CHECK(sc.event_waits == multiples(kIters, 25));
  }
  for (Stream s : streams) CHECK_OK(dev->destroy_stream(s));
  CHECK(mock.counters().streams_destroyed == T);
  CHECK_OK(dev->close());
}
