// What every backend must do with memory, streams and events; each rule is
// stated in sparkrt/plugin_api.h. See conformance.h for how a case of an
// optional feature is skipped.
#include "conformance_support.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace sparkrt::conformance {
namespace {

using absl::StatusCode;

TEST_CASE("device properties are complete") {
  auto dev = open_device();
  const DeviceProperties& p = dev->properties();
  INFO(backend_name(), ": ", p.name, " ", p.architecture);
  // A plugin found by name calls itself by that name.
  if (!requested_name().empty()) CHECK(dev->backend_name() == requested_name());
  CHECK(!p.name.empty());
  // The in-tree GPU backends name their API and driver (ABI 1.3).
  if (backend_name() == "cuda" || backend_name() == "vulkan") CHECK(!p.driver.empty());
  CHECK(p.total_memory > 0);
  CHECK(p.warp_size > 0);
  CHECK(p.max_threads_per_block >= 64);
  CHECK(p.max_block_dim.x >= 64);
  CHECK(p.max_grid_dim.x >= 65535);
  CHECK(p.max_shared_memory_per_block > 0);
  CHECK(p.max_shared_memory_per_block_optin >= p.max_shared_memory_per_block);
  CHECK((p.accepts_ptx || p.accepts_cubin || p.accepts_spirv || p.accepts_signatures));
  if (p.compute_capability_major > 0) {
    CHECK(p.architecture == "sm_" + std::to_string(p.compute_capability_major) +
                                std::to_string(p.compute_capability_minor));
  }
}

TEST_CASE("alloc returns distinct aligned pointers that free releases") {
  auto dev = open_device();
  std::vector<DevicePtr> ptrs;
  std::map<uint64_t, size_t> live;  // base -> bytes
  for (size_t bytes : {size_t{1}, size_t{255}, size_t{4096}, size_t{1} << 20, size_t{3} << 20}) {
    auto p = dev->alloc(bytes);
    REQUIRE_OK(p);
    CHECK(!p->is_null());
    CHECK(p->addr % 256 == 0);
    CHECK(live.emplace(p->addr, bytes).second);
    ptrs.push_back(*p);
  }
  // No two allocations overlap.
  for (auto it = live.begin(); std::next(it) != live.end(); ++it)
    CHECK_MESSAGE(it->first + it->second <= std::next(it)->first,
                  "allocation at " << it->first << " (" << it->second << " bytes) overlaps the next");
  for (DevicePtr p : ptrs) CHECK_OK(dev->free(p));
}

TEST_CASE("alloc and free reject bad input") {
  auto dev = open_device();
  CHECK_FAILS_WITH(dev->alloc(0), StatusCode::kInvalidArgument);
  // Far beyond any device's memory.
  CHECK_FAILS_WITH(dev->alloc(size_t{1} << 60), StatusCode::kResourceExhausted);

  auto p = dev->alloc(1024);
  REQUIRE_OK(p);
  CHECK_FAILS(dev->free(*p + 256));  // not the start of the allocation
  CHECK_OK(dev->free(*p));
  CHECK_FAILS(dev->free(*p));  // double free
  CHECK_FAILS(dev->free(DevicePtr(0x1000)));
  CHECK_FAILS(dev->free(DevicePtr()));
  CHECK_FAILS_WITH(dev->alloc_host(0), StatusCode::kInvalidArgument);
  int on_stack = 0;
  CHECK_FAILS(dev->free_host(&on_stack));
}

TEST_CASE("copies round-trip random data") {
  auto dev = open_device();
  std::mt19937_64 rng(seed());
  INFO("seed ", seed());
  for (size_t n : {size_t{1}, size_t{4097}, (size_t{1} << 20) + 3}) {
    INFO("bytes ", n);
    const auto src = random_bytes(n, rng);
    DeviceBuffer a(*dev, n + 512), b(*dev, n + 512);
    REQUIRE_OK(dev->memset(b.ptr, 0, n + 512));
    // Offsets exercise pointer arithmetic inside an allocation.
    REQUIRE_OK(dev->copy_h2d(src.data(), a.ptr + 256, n));
    REQUIRE_OK(dev->copy_d2d(a.ptr + 256, b.ptr + 128, n));
    std::vector<uint8_t> back(n, 0);
    REQUIRE_OK(dev->copy_d2h(b.ptr + 128, back.data(), n));
    CHECK(back == src);
    // Nothing around the copied range was written.
    std::vector<uint8_t> whole(n + 512, 1);
    REQUIRE_OK(dev->copy_d2h(b.ptr, whole.data(), n + 512));
    CHECK(std::all_of(whole.begin(), whole.begin() + 128, [](uint8_t v) { return v == 0; }));
    CHECK(std::all_of(whole.begin() + 128 + n, whole.end(), [](uint8_t v) { return v == 0; }));
  }
  // Zero bytes is a no-op, not an error.
  DeviceBuffer a(*dev, 256);
  CHECK_OK(dev->copy_h2d(nullptr, a.ptr, 0));
  CHECK_FAILS_WITH(dev->copy_h2d(nullptr, a.ptr, 16), StatusCode::kInvalidArgument);
  CHECK_FAILS_WITH(dev->copy_d2h(a.ptr, nullptr, 16), StatusCode::kInvalidArgument);
}

TEST_CASE("device copies of any alignment move exactly their bytes") {
  auto dev = open_device();
  std::mt19937_64 rng(seed());
  INFO("seed ", seed());
  constexpr size_t kRoom = 256;  // on each side of the copied range
  const size_t longest = (size_t{3} << 20) + 5;
  const auto src = random_bytes(longest + 2 * kRoom, rng);
  DeviceBuffer a(*dev, src.size()), b(*dev, src.size());
  REQUIRE_OK(dev->copy_h2d(src.data(), a.ptr, src.size()));
  std::vector<uint8_t> back(src.size());
  // Both ends at every offset within 16-byte units (word-aligned alike,
  // 16-byte aligned alike, neither), lengths within a unit, across units and
  // far beyond one grid's pass.
  for (size_t from : {size_t{0}, size_t{1}, size_t{4}, size_t{13}, size_t{16}})
    for (size_t to : {size_t{0}, size_t{3}, size_t{4}, size_t{8}, size_t{16}})
      for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{33}, size_t{1000},
                       size_t{65541}, longest}) {
        if (n == longest && (from + to) % 5 != 0) continue;  // the long ones: a few pairs
        INFO("source offset ", from, ", destination offset ", to, ", bytes ", n);
        REQUIRE_OK(dev->memset(b.ptr, 0, back.size()));
        REQUIRE_OK(dev->copy_d2d(a.ptr + kRoom + from, b.ptr + kRoom + to, n));
        REQUIRE_OK(dev->copy_d2h(b.ptr, back.data(), back.size()));
        const auto first = back.begin() + static_cast<ptrdiff_t>(kRoom + to);
        CHECK(std::equal(first, first + static_cast<ptrdiff_t>(n),
                         src.begin() + static_cast<ptrdiff_t>(kRoom + from)));
        CHECK(std::all_of(back.begin(), first, [](uint8_t v) { return v == 0; }));
        CHECK(std::all_of(first + static_cast<ptrdiff_t>(n), back.end(),
                          [](uint8_t v) { return v == 0; }));
      }
}

TEST_CASE("a device copy between overlapping ranges moves the bytes as memmove does") {
  SKIP_IF_UNSUPPORTED("overlapping-copies");
  auto dev = open_device();
  std::mt19937_64 rng(seed());
  INFO("seed ", seed());
  // Past 32 MiB: several pieces where a backend moves them through a buffer.
  const size_t size = (size_t{33} << 20) + 4099;
  auto expect = random_bytes(size, rng);
  DeviceBuffer a(*dev, size);
  REQUIRE_OK(dev->copy_h2d(expect.data(), a.ptr, size));
  auto s = dev->create_stream();
  REQUIRE_OK(s);
  struct Move {
    size_t from, to, bytes;
  };
  for (const Move m : {Move{0, 1, 4000}, Move{1, 0, 4000}, Move{0, 16, 4096}, Move{16, 0, 4096},
                       Move{100, 37, 2000}, Move{37, 100, 2000}, Move{0, 4099, size - 4099},
                       Move{4099, 0, size - 4099}, Move{7, 7, 100}}) {
    INFO("from ", m.from, " to ", m.to, ", bytes ", m.bytes);
    REQUIRE_OK(dev->copy_d2d_async(a.ptr + m.from, a.ptr + m.to, m.bytes, *s));
    std::memmove(expect.data() + m.to, expect.data() + m.from, m.bytes);
  }
  REQUIRE_OK(dev->synchronize(*s));
  std::vector<uint8_t> back(size);
  REQUIRE_OK(dev->copy_d2h(a.ptr, back.data(), size));
  CHECK(back == expect);
  CHECK_OK(dev->destroy_stream(*s));
}

TEST_CASE("async copies through pinned host memory round-trip on a stream") {
  auto dev = open_device();
  std::mt19937_64 rng(seed());
  INFO("seed ", seed());
  const size_t n = (size_t{4} << 20) + 17;
  HostBuffer in(*dev, n), out(*dev, n);
  const auto src = random_bytes(n, rng);
  std::memcpy(in.ptr, src.data(), n);
  std::memset(out.ptr, 0, n);
  auto s = dev->create_stream();
  REQUIRE_OK(s);
  DeviceBuffer a(*dev, n), b(*dev, n);
  REQUIRE_OK(dev->copy_h2d_async(in.ptr, a.ptr, n, *s));
  REQUIRE_OK(dev->copy_d2d_async(a.ptr, b.ptr, n, *s));
  REQUIRE_OK(dev->copy_d2h_async(b.ptr, out.ptr, n, *s));
  REQUIRE_OK(dev->synchronize(*s));
  CHECK(std::memcmp(out.ptr, src.data(), n) == 0);
  CHECK_OK(dev->destroy_stream(*s));
}

TEST_CASE("memset fills exactly the requested range") {
  auto dev = open_device();
  const size_t n = 1 << 16;
  DeviceBuffer a(*dev, n);
  REQUIRE_OK(dev->memset(a.ptr, 0x11, n));
  REQUIRE_OK(dev->memset(a.ptr + 1000, 0xA5, 3000));
  auto s = dev->create_stream();
  REQUIRE_OK(s);
  REQUIRE_OK(dev->memset_async(a.ptr + 8000, 0x5A, 7, *s));
  REQUIRE_OK(dev->synchronize(*s));
  std::vector<uint8_t> back(n, 0);
  REQUIRE_OK(dev->copy_d2h(a.ptr, back.data(), n));
  for (size_t i = 0; i < n; ++i) {
    const uint8_t want = (i >= 1000 && i < 4000) ? 0xA5 : (i >= 8000 && i < 8007) ? 0x5A : 0x11;
    if (back[i] != want) {
      FAIL_CHECK("byte " << i << " is " << int(back[i]) << ", expected " << int(want));
      break;
    }
  }
  CHECK_OK(dev->memset(a.ptr, 0, 0));
  CHECK_OK(dev->destroy_stream(*s));
}

TEST_CASE("work queued on one stream runs in order") {
  auto dev = open_device();
  std::mt19937_64 rng(seed());
  INFO("seed ", seed());
  const size_t n = size_t{8} << 20;
  HostBuffer in(*dev, n), out(*dev, n);
  const auto src = random_bytes(n, rng);
  std::memcpy(in.ptr, src.data(), n);
  std::memset(out.ptr, 0, n);
  DeviceBuffer x(*dev, n), y(*dev, n);
  REQUIRE_OK(dev->memset(y.ptr, 0, n));
  auto s = dev->create_stream();
  REQUIRE_OK(s);
  // Each step reads what the previous one wrote; any reordering shows.
  REQUIRE_OK(dev->copy_h2d_async(in.ptr, x.ptr, n, *s));
  REQUIRE_OK(dev->memset_async(x.ptr + n / 2, 0xEE, 4096, *s));
  REQUIRE_OK(dev->copy_d2d_async(x.ptr, y.ptr, n, *s));
  REQUIRE_OK(dev->copy_d2h_async(y.ptr, out.ptr, n, *s));
  REQUIRE_OK(dev->synchronize(*s));
  std::vector<uint8_t> want = src;
  std::fill(want.begin() + n / 2, want.begin() + n / 2 + 4096, 0xEE);
  CHECK(std::memcmp(out.ptr, want.data(), n) == 0);
  CHECK_OK(dev->destroy_stream(*s));
}

TEST_CASE("events order work across streams and measure elapsed time") {
  auto dev = open_device();
  const size_t n = size_t{64} << 20;
  DeviceBuffer big(*dev, n), small(*dev, 1 << 20);
  REQUIRE_OK(dev->memset(big.ptr, 0, n));
  REQUIRE_OK(dev->memset(small.ptr, 0, 1 << 20));
  auto s1 = dev->create_stream();
  auto s2 = dev->create_stream();
  REQUIRE_OK(s1);
  REQUIRE_OK(s2);
  auto start = dev->create_event();
  auto done = dev->create_event();
  REQUIRE_OK(start);
  REQUIRE_OK(done);
  CHECK(start->handle != done->handle);

  REQUIRE_OK(dev->record_event(*start, *s1));
  for (int i = 0; i < 4; ++i) REQUIRE_OK(dev->memset_async(big.ptr, 0xC3, n, *s1));
  REQUIRE_OK(dev->record_event(*done, *s1));
  // s2 copies the first MiB only after s1's memsets, through the event.
  REQUIRE_OK(dev->wait_event(*s2, *done));
  REQUIRE_OK(dev->copy_d2d_async(big.ptr, small.ptr, 1 << 20, *s2));
  std::vector<uint8_t> back(1 << 20, 0);
  REQUIRE_OK(dev->synchronize(*s2));
  REQUIRE_OK(dev->copy_d2h(small.ptr, back.data(), back.size()));
  CHECK(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0xC3; }));

  REQUIRE_OK(dev->synchronize_event(*done));
  auto ms = dev->elapsed_ms(*start, *done);
  REQUIRE_OK(ms);
  CHECK(std::isfinite(*ms));
  CHECK(*ms >= 0.f);
  CHECK(*ms < 60'000.f);

  auto never = dev->create_event();
  REQUIRE_OK(never);
  CHECK_FAILS_WITH(dev->elapsed_ms(*start, *never), StatusCode::kFailedPrecondition);
  for (Event e : {*start, *done, *never}) CHECK_OK(dev->destroy_event(e));
  CHECK_OK(dev->destroy_stream(*s1));
  CHECK_OK(dev->destroy_stream(*s2));
}

TEST_CASE("unknown and destroyed streams and events are rejected") {
  auto dev = open_device();
  DeviceBuffer a(*dev, 4096);
  std::vector<uint8_t> host(4096, 1);
  auto k = dev->kernel("vector_ops", "fill_u32");
  REQUIRE_OK(k);

  auto s = dev->create_stream();
  REQUIRE_OK(s);
  const Stream stale = *s;
  REQUIRE_OK(dev->destroy_stream(*s));
  // A new stream may reuse the slot; the old handle must still be refused.
  auto s2 = dev->create_stream();
  REQUIRE_OK(s2);
  CHECK(s2->handle != stale.handle);

  for (Stream bad : {stale, Stream{0x7777'0000'1234ull}}) {
    INFO("stream handle ", bad.handle);
    CHECK_FAILS_WITH(dev->synchronize(bad), StatusCode::kInvalidArgument);
    CHECK_FAILS_WITH(dev->destroy_stream(bad), StatusCode::kInvalidArgument);
    CHECK_FAILS_WITH(dev->memset_async(a.ptr, 0, 16, bad), StatusCode::kInvalidArgument);
    CHECK_FAILS_WITH(dev->copy_h2d_async(host.data(), a.ptr, 16, bad),
                     StatusCode::kInvalidArgument);
    CHECK_FAILS_WITH(dev->copy_d2h_async(a.ptr, host.data(), 16, bad),
                     StatusCode::kInvalidArgument);
    CHECK_FAILS_WITH(dev->copy_d2d_async(a.ptr, a.ptr + 2048, 16, bad),
                     StatusCode::kInvalidArgument);
    CHECK_FAILS_WITH(
        KernelLaunch(*dev, *k).grid({1}).block({32}).arg(a.ptr).arg(7u).arg(32u).launch(bad),
        StatusCode::kInvalidArgument);
  }
  CHECK_FAILS_WITH(dev->destroy_stream(Stream{}), StatusCode::kInvalidArgument);

  auto e = dev->create_event();
  REQUIRE_OK(e);
  REQUIRE_OK(dev->destroy_event(*e));
  auto e2 = dev->create_event();
  REQUIRE_OK(e2);
  CHECK(e2->handle != e->handle);
  for (Event bad : {*e, Event{0}, Event{0x5555'0000'0042ull}}) {
    INFO("event handle ", bad.handle);
    CHECK_FAILS_WITH(dev->record_event(bad, *s2), StatusCode::kInvalidArgument);
    CHECK_FAILS_WITH(dev->synchronize_event(bad), StatusCode::kInvalidArgument);
    CHECK_FAILS_WITH(dev->wait_event(*s2, bad), StatusCode::kInvalidArgument);
    CHECK_FAILS_WITH(dev->destroy_event(bad), StatusCode::kInvalidArgument);
    CHECK_FAILS_WITH(dev->elapsed_ms(bad, bad), StatusCode::kInvalidArgument);
  }
  CHECK_OK(dev->destroy_event(*e2));
  CHECK_OK(dev->destroy_stream(*s2));
}

TEST_CASE("copies to unmapped addresses fail") {
  auto dev = open_device();
  std::vector<uint8_t> host(4096, 3);
  DeviceBuffer a(*dev, 4096);
  const DevicePtr unmapped(0x1000);
  CHECK_FAILS(dev->copy_h2d(host.data(), unmapped, host.size()));
  CHECK_FAILS(dev->copy_d2h(unmapped, host.data(), host.size()));
  CHECK_FAILS(dev->copy_d2d(unmapped, a.ptr, 4096));
  CHECK_FAILS(dev->memset(unmapped, 0, 4096));
}

TEST_CASE("copies past the end of an allocation fail") {
  SKIP_IF_UNSUPPORTED("out-of-bounds");
  auto dev = open_device();
  std::vector<uint8_t> host(8192, 3);
  DeviceBuffer a(*dev, 4096);
  CHECK_FAILS(dev->copy_h2d(host.data(), a.ptr, 8192));
  CHECK_FAILS(dev->copy_d2h(a.ptr + 4000, host.data(), 200));
  CHECK_FAILS(dev->memset(a.ptr + 4095, 0, 2));
}

TEST_CASE("use of freed memory fails") {
  SKIP_IF_UNSUPPORTED("use-after-free");
  auto dev = open_device();
  std::vector<uint8_t> host(256, 3);
  auto p = dev->alloc(256);
  REQUIRE_OK(p);
  REQUIRE_OK(dev->free(*p));
  CHECK_FAILS(dev->copy_h2d(host.data(), *p, 256));
  CHECK_FAILS(dev->copy_d2h(*p, host.data(), 256));
}

}  // namespace
}  // namespace sparkrt::conformance
