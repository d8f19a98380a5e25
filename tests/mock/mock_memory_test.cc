// Simulated device memory of the mock: real bytes behind fake addresses, and
// every bad access reported with the allocation it concerns.
#include <cstring>

#include "mock_test_support.h"

using namespace mocktest;
using absl::StatusCode;
using sparkrt::DevicePtr;

TEST_CASE("mock memory: H2D then D2H returns the bytes, at any offset") {
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  auto dev = open_mock();
  auto a = dev->alloc(4096);
  REQUIRE(a.ok());

  const auto in = random_bytes(gen, 4096);
  REQUIRE_OK(dev->copy_h2d(in.data(), *a, in.size()));
  std::vector<uint8_t> out(4096, 0);  // poison: random_bytes never yields 0
  REQUIRE_OK(dev->copy_d2h(*a, out.data(), out.size()));
  CHECK(out == in);

  // An offset pointer writes exactly its window.
  const auto patch = random_bytes(gen, 100);
  REQUIRE_OK(dev->copy_h2d(patch.data(), *a + 1000, patch.size()));
  std::vector<uint8_t> expect = in;
  std::memcpy(expect.data() + 1000, patch.data(), patch.size());
  std::fill(out.begin(), out.end(), 0);
  REQUIRE_OK(dev->copy_d2h(*a, out.data(), out.size()));
  CHECK(out == expect);

  // And reads exactly its window.
  std::vector<uint8_t> window(37, 0);
  REQUIRE_OK(dev->copy_d2h(*a + 4059, window.data(), window.size()));
  CHECK(std::equal(window.begin(), window.end(), expect.begin() + 4059));
}

TEST_CASE("mock memory: memset fills and D2D copies, overlapping ranges included") {
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  auto dev = open_mock();
  auto a = dev->alloc(1024);
  auto b = dev->alloc(1024);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const auto in = random_bytes(gen, 1024);
  REQUIRE_OK(dev->copy_h2d(in.data(), *a, 1024));

  REQUIRE_OK(dev->memset(*a + 17, 0x5a, 33));
  std::vector<uint8_t> expect = in;
  std::memset(expect.data() + 17, 0x5a, 33);

  REQUIRE_OK(dev->copy_d2d(*a, *b + 8, 512));
  std::vector<uint8_t> out(1024, 0);
  REQUIRE_OK(dev->copy_d2h(*b + 8, out.data(), 512));
  CHECK(std::equal(out.begin(), out.begin() + 512, expect.begin()));

  // Overlapping source and destination inside one allocation: memmove
  // semantics, as cuMemcpy guarantees nothing less useful.
  REQUIRE_OK(dev->copy_d2d(*a, *a + 100, 400));
  std::memmove(expect.data() + 100, expect.data(), 400);
  REQUIRE_OK(dev->copy_d2h(*a, out.data(), 1024));
  CHECK(out == expect);

  REQUIRE_OK(dev->memset_async(*b, 0xc3, 1024, {}));
  REQUIRE_OK(dev->copy_d2h(*b, out.data(), 1024));
  CHECK(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 0xc3; }));
}

TEST_CASE("mock memory: fresh allocations are zero, 256-byte aligned and never reuse an address") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  std::vector<DevicePtr> seen;
  for (size_t bytes : {1, 255, 256, 257, 4096, 100000}) {
    auto p = dev->alloc(bytes);
    REQUIRE(p.ok());
    CHECK(p->addr % 256 == 0);
    std::vector<uint8_t> out(bytes, 0xee);
    REQUIRE_OK(dev->copy_d2h(*p, out.data(), bytes));
    CHECK(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 0; }));
    seen.push_back(*p);
    REQUIRE_OK(dev->free(*p));
  }
  for (size_t i = 1; i < seen.size(); ++i) CHECK(seen[i].addr > seen[i - 1].addr);
  // Each freed address stays known as the allocation it was.
  auto info = mock.pointer_info(seen[2] + 10);
  REQUIRE(info.ok());
  CHECK(info->alloc_id == 3);
  CHECK(info->base == seen[2]);
  CHECK(info->size == 256);
  CHECK(info->offset == 10);
  CHECK_FALSE(info->live);
}

TEST_CASE("mock memory: two devices never hand out the same address") {
  auto d1 = open_mock();
  auto d2 = open_mock();
  auto p1 = d1->alloc(256);
  auto p2 = d2->alloc(256);
  REQUIRE(p1.ok());
  REQUIRE(p2.ok());
  CHECK(p1->addr != p2->addr);
  // A pointer of one device is not memory of the other.
  uint8_t byte = 1;
  check_error(d2->copy_h2d(&byte, *p1, 1), StatusCode::kInvalidArgument,
              {"not inside any allocation of this device", hex(p1->addr)});
  check_error(d2->free(*p1), StatusCode::kInvalidArgument, {hex(p1->addr), "not returned by mem_alloc"});
}

TEST_CASE("mock memory: counters follow allocations, frees, copies and live bytes") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto a = dev->alloc(1000);
  auto b = dev->alloc(3000);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  std::vector<uint8_t> host(1000, 7);
  auto s = dev->create_stream();
  REQUIRE(s.ok());
  REQUIRE_OK(dev->copy_h2d(host.data(), *a, 1000));
  REQUIRE_OK(dev->copy_h2d_async(host.data(), *b, 500, *s));
  REQUIRE_OK(dev->copy_d2h(*a, host.data(), 200));
  REQUIRE_OK(dev->copy_d2h_async(*a, host.data(), 100, *s));
  REQUIRE_OK(dev->copy_d2h_async(*a, host.data(), 100, {}));
  REQUIRE_OK(dev->copy_d2d(*a, *b, 50));
  REQUIRE_OK(dev->copy_d2d_async(*a, *b, 60, *s));
  REQUIRE_OK(dev->memset(*a, 0, 10));
  REQUIRE_OK(dev->memset_async(*a, 0, 10, *s));

  auto c = mock.counters();
  CHECK(c.allocations == 2);
  CHECK(c.live_allocations == 2);
  CHECK(c.live_bytes == 4000);
  CHECK(c.h2d_blocking == 1);
  CHECK(c.h2d_async == 1);
  CHECK(c.d2h_blocking == 1);
  CHECK(c.d2h_async == 2);
  CHECK(c.d2d_blocking == 1);
  CHECK(c.d2d_async == 1);
  CHECK(c.memsets_blocking == 1);
  CHECK(c.memsets_async == 1);
  CHECK(c.bytes_h2d == 1500);
  CHECK(c.bytes_d2h == 400);
  CHECK(c.bytes_d2d == 110);
  CHECK(c.errors == 0);

  REQUIRE_OK(dev->free(*b));
  c = mock.counters();
  CHECK(c.frees == 1);
  CHECK(c.live_allocations == 1);
  CHECK(c.live_bytes == 1000);
  CHECK(c.peak_live_bytes == 4000);

  auto host_mem = dev->alloc_host(64);
  REQUIRE(host_mem.ok());
  REQUIRE_OK(dev->free_host(*host_mem));
  c = mock.counters();
  CHECK(c.host_allocations == 1);
  CHECK(c.host_frees == 1);
}

TEST_CASE("mock memory: a copy or memset running past the allocation is OutOfRange naming it") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto a = dev->alloc(256);
  REQUIRE(a.ok());
  const std::string base = hex(a->addr);
  std::vector<uint8_t> host(512, 1);

  check_error(dev->copy_h2d(host.data(), *a, 300), StatusCode::kOutOfRange,
              {"copy_h2d destination", "alloc#1", base, "256 bytes", "runs 44 bytes past the end"});
  check_error(dev->copy_h2d(host.data(), *a + 200, 100), StatusCode::kOutOfRange,
              {"alloc#1+200", "+100 bytes", "runs 44 bytes past the end", base});
  check_error(dev->copy_d2h(*a + 1, host.data(), 256), StatusCode::kOutOfRange,
              {"copy_d2h source", "alloc#1+1", "runs 1 bytes past the end", base});
  check_error(dev->memset(*a + 128, 0, 129), StatusCode::kOutOfRange,
              {"memset destination", "alloc#1+128", base});
  auto b = dev->alloc(64);
  REQUIRE(b.ok());
  check_error(dev->copy_d2d(*b, *a + 250, 64), StatusCode::kOutOfRange,
              {"copy_d2d destination", "alloc#1+250", base});
  check_error(dev->copy_d2d(*b + 32, *a, 64), StatusCode::kOutOfRange,
              {"copy_d2d source", "alloc#2+32", hex(b->addr)});

  // A pointer computed past the end lands in the guard gap, not in a
  // neighbour, and names the allocation it ran off.
  check_error(dev->copy_h2d(host.data(), *a + 300, 4), StatusCode::kOutOfRange,
              {"44 bytes past the end of alloc#1", base});
  // Huge sizes do not wrap around.
  check_error(dev->memset(*a + 8, 0, ~uint64_t{0} - 4), StatusCode::kOutOfRange, {"alloc#1+8"});

  // Nothing was counted as done, and memory is untouched.
  auto c = mock.counters();
  CHECK(c.h2d_blocking == 0);
  CHECK(c.d2h_blocking == 0);
  CHECK(c.memsets_blocking == 0);
  CHECK(c.d2d_blocking == 0);
  CHECK(c.errors == 8);
  std::vector<uint8_t> out(256, 0xee);
  REQUIRE_OK(dev->copy_d2h(*a, out.data(), 256));
  CHECK(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 0; }));
}

TEST_CASE("mock memory: null and unknown pointers are InvalidArgument") {
  auto dev = open_mock();
  std::vector<uint8_t> host(16, 1);
  check_error(dev->copy_h2d(host.data(), DevicePtr{}, 16), StatusCode::kInvalidArgument,
              {"null device pointer"});
  check_error(dev->copy_d2h(DevicePtr(0x1234), host.data(), 16), StatusCode::kInvalidArgument,
              {"0x1234", "not inside any allocation"});
  check_error(dev->memset(DevicePtr(0x1234), 0, 16), StatusCode::kInvalidArgument, {"0x1234"});
}

TEST_CASE("mock memory: use after free is FailedPrecondition naming the freed allocation") {
  auto dev = open_mock();
  auto keep = dev->alloc(128);
  auto a = dev->alloc(512);
  REQUIRE(keep.ok());
  REQUIRE(a.ok());
  REQUIRE_OK(dev->free(*a));
  const std::string base = hex(a->addr);
  std::vector<uint8_t> host(64, 1);
  check_error(dev->copy_h2d(host.data(), *a + 16, 64), StatusCode::kFailedPrecondition,
              {"use after free", "alloc#2+16", base, "512 bytes", "freed"});
  check_error(dev->copy_d2h(*a, host.data(), 64), StatusCode::kFailedPrecondition,
              {"use after free", "alloc#2", base});
  check_error(dev->memset(*a, 0, 1), StatusCode::kFailedPrecondition, {"use after free", "alloc#2"});
  check_error(dev->copy_d2d(*a, *keep, 8), StatusCode::kFailedPrecondition,
              {"copy_d2d source", "use after free", "alloc#2"});
}

TEST_CASE("mock memory: double, interior, unknown and null frees are errors naming the pointer") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto a = dev->alloc(1024);
  REQUIRE(a.ok());
  const std::string base = hex(a->addr);
  check_error(dev->free(*a + 16), StatusCode::kInvalidArgument,
              {"interior pointer (offset 16)", "alloc#1", base, "1024 bytes"});
  REQUIRE_OK(dev->free(*a));
  check_error(dev->free(*a), StatusCode::kFailedPrecondition,
              {"double free of alloc#1", base, "1024 bytes", "freed"});
  check_error(dev->free(DevicePtr(0xdead0000)), StatusCode::kInvalidArgument,
              {"0xdead0000", "not returned by mem_alloc"});
  check_error(dev->free(DevicePtr{}), StatusCode::kInvalidArgument, {"null pointer"});
  check_error(dev->free_host(&mock), StatusCode::kInvalidArgument, {"not returned by host_alloc"});
  auto c = mock.counters();
  CHECK(c.frees == 1);
  CHECK(c.live_bytes == 0);
  CHECK(c.errors == 5);
}

TEST_CASE("mock memory: cap_memory makes allocation beyond the cap ResourceExhausted") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  REQUIRE_OK(mock.cap_memory(1 << 20));
  auto a = dev->alloc(512 * 1024);
  REQUIRE(a.ok());
  auto b = dev->alloc(768 * 1024);
  REQUIRE_FALSE(b.ok());
  check_error(b.status(), StatusCode::kResourceExhausted,
              {"786432", "524288 bytes live in 1 allocations", "limit 1048576", "cap_memory"});
  // Exactly up to the cap is fine.
  auto c = dev->alloc(512 * 1024);
  CHECK(c.ok());
  CHECK_FALSE(dev->alloc(1).ok());
  // Freeing makes room; lifting the cap removes the limit.
  REQUIRE_OK(dev->free(*a));
  CHECK(dev->alloc(1000).ok());
  REQUIRE_OK(mock.cap_memory(0));
  CHECK(dev->alloc(4 << 20).ok());
}

TEST_CASE("mock memory: more than the device's 16 GiB is ResourceExhausted, not a host allocation") {
  auto dev = open_mock();
  CHECK(dev->properties().total_memory == uint64_t{16} << 30);
  auto big = dev->alloc((uint64_t{16} << 30) + 1);
  REQUIRE_FALSE(big.ok());
  check_error(big.status(), StatusCode::kResourceExhausted, {"total_memory", "17179869184"});
}
