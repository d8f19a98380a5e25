// What every backend must do; each rule is stated in sparkrt/plugin_api.h.
// See conformance.h for how a case of an optional feature is skipped.
#include "conformance.h"

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

#include "sparkrt/extensions/graph.h"

namespace sparkrt::conformance {
namespace {

using absl::StatusCode;

// A fresh seed per run, printed with every failure so it can be replayed.
uint64_t seed() {
  static const uint64_t s = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) | rd();
  }();
  return s;
}

std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() % 255 + 1);  // never 0
  return v;
}

std::vector<float> random_floats(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> mag(0.5f, 100.f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1) ? mag(rng) : -mag(rng);
  return v;
}

// Allocation freed when the scope ends, so a failing case does not leak.
struct DeviceBuffer {
  Device* dev;
  DevicePtr ptr;
  DeviceBuffer(Device& d, size_t bytes) : dev(&d) {
    auto p = d.alloc(bytes);
    REQUIRE_OK(p);
    ptr = *p;
  }
  ~DeviceBuffer() {
    if (!ptr.is_null()) dev->free(ptr).IgnoreError();
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct HostBuffer {
  Device* dev;
  uint8_t* ptr = nullptr;
  size_t size;
  HostBuffer(Device& d, size_t bytes) : dev(&d), size(bytes) {
    auto p = d.alloc_host(bytes);
    REQUIRE_OK(p);
    ptr = static_cast<uint8_t*>(*p);
  }
  ~HostBuffer() {
    if (ptr != nullptr) dev->free_host(ptr).IgnoreError();
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
};

absl::Status graph_status(const SparkrtGraphExtension* g, SparkrtError* e) {
  if (e == nullptr) return absl::OkStatus();
  const char* msg = nullptr;
  size_t size = 0;
  g->error_message(e, &msg, &size);
  absl::Status s(static_cast<StatusCode>(g->error_code(e)), std::string(msg, size));
  g->error_destroy(e);
  return s;
}

// Submits vector_add_f32 over n elements.
absl::Status launch_vector_add(Device& dev, Kernel k, DevicePtr a, DevicePtr b, DevicePtr out,
                               uint32_t n, Stream stream = {}) {
  return KernelLaunch(dev, k)
      .grid({div_ceil(n, 256u)})
      .block({256})
      .arg(a)
      .arg(b)
      .arg(out)
      .arg(n)
      .launch(stream);
}

TEST_CASE("device properties are complete") {
  auto dev = open_device();
  const DeviceProperties& p = dev->properties();
  INFO(backend_name(), ": ", p.name, " ", p.architecture);
  // A plugin found by name calls itself by that name.
  if (!requested_name().empty()) CHECK(dev->backend_name() == requested_name());
  CHECK(!p.name.empty());
  CHECK(p.total_memory > 0);
  CHECK(p.warp_size > 0);
  CHECK(p.max_threads_per_block >= 64);
  CHECK(p.max_block_dim.x >= 64);
  CHECK(p.max_grid_dim.x >= 65535);
  CHECK(p.max_shared_memory_per_block > 0);
  CHECK(p.max_shared_memory_per_block_optin >= p.max_shared_memory_per_block);
  CHECK((p.accepts_ptx || p.accepts_cubin));
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

TEST_CASE("launches are accepted on the default and on created streams") {
  auto dev = open_device();
  auto k = dev->kernel("vector_ops", "fill_u32");
  REQUIRE_OK(k);
  DeviceBuffer out(*dev, 4096 * 4);
  auto s = dev->create_stream();
  REQUIRE_OK(s);
  for (Stream st : {Stream{}, *s}) {
    CHECK_OK(
        KernelLaunch(*dev, *k).grid({16}).block({256}).arg(out.ptr).arg(9u).arg(4096u).launch(st));
  }
  CHECK_OK(dev->synchronize(*s));
  CHECK_OK(dev->synchronize());
  if (skip_reason("kernel-results") == nullptr) {
    std::vector<uint32_t> back(4096, 0);
    REQUIRE_OK(dev->copy_d2h(out.ptr, back));
    CHECK(std::all_of(back.begin(), back.end(), [](uint32_t v) { return v == 9; }));
  }
  CHECK_OK(dev->destroy_stream(*s));
}

TEST_CASE("vector_add_f32 computes the right sums") {
  SKIP_IF_UNSUPPORTED("kernel-results");
  auto dev = open_device();
  std::mt19937_64 rng(seed());
  INFO("seed ", seed());
  auto k = dev->kernel("vector_ops", "vector_add_f32");
  REQUIRE_OK(k);
  for (uint32_t n : {1u, 255u, 256u, 100'003u}) {
    INFO("n ", n);
    const auto a = random_floats(n, rng);
    const auto b = random_floats(n, rng);
    DeviceBuffer da(*dev, n * 4), db(*dev, n * 4), dout(*dev, n * 4 + 256);
    REQUIRE_OK(dev->copy_h2d(a, da.ptr));
    REQUIRE_OK(dev->copy_h2d(b, db.ptr));
    REQUIRE_OK(dev->memset(dout.ptr, 0xFF, n * 4 + 256));  // NaN poison, and a guard tail
    REQUIRE_OK(launch_vector_add(*dev, *k, da.ptr, db.ptr, dout.ptr, n));
    std::vector<float> out(n);
    std::vector<uint8_t> tail(256);
    REQUIRE_OK(dev->copy_d2h(dout.ptr, out));
    REQUIRE_OK(dev->copy_d2h(dout.ptr + n * 4, tail));
    size_t wrong = 0;
    for (uint32_t i = 0; i < n; ++i) {
      // a + b in float is exact IEEE on both sides: compare bits.
      const float want = a[i] + b[i];
      if (std::memcmp(&out[i], &want, 4) != 0 && wrong++ < 5)
        FAIL_CHECK("out[" << i << "] = " << out[i] << ", expected " << want);
    }
    CHECK(wrong == 0);
    CHECK(std::all_of(tail.begin(), tail.end(), [](uint8_t t) { return t == 0xFF; }));
  }
}

TEST_CASE("launch rejects bad geometry and shared memory") {
  auto dev = open_device();
  auto k = dev->kernel("vector_ops", "fill_u32");
  REQUIRE_OK(k);
  DeviceBuffer out(*dev, 4096);
  const DeviceProperties& p = dev->properties();
  auto fill = [&](Dim3 grid, Dim3 block, uint32_t shared) {
    return KernelLaunch(*dev, *k)
        .grid(grid)
        .block(block)
        .shared_mem(shared)
        .arg(out.ptr)
        .arg(1u)
        .arg(16u)
        .launch();
  };
  CHECK_OK(fill({1}, {32}, 0));
  CHECK_FAILS_WITH(fill({0}, {32}, 0), StatusCode::kInvalidArgument);
  CHECK_FAILS_WITH(fill({1}, {0}, 0), StatusCode::kInvalidArgument);
  CHECK_FAILS_WITH(fill({1, 0, 1}, {32}, 0), StatusCode::kInvalidArgument);
  CHECK_FAILS_WITH(fill({1}, {p.max_threads_per_block + 1}, 0), StatusCode::kInvalidArgument);
  CHECK_FAILS_WITH(fill({1}, {32, 32, 2}, 0), StatusCode::kInvalidArgument);  // 2048 threads
  CHECK_FAILS_WITH(fill({1, p.max_grid_dim.y + 1, 1}, {32}, 0), StatusCode::kInvalidArgument);
  CHECK_FAILS_WITH(fill({1}, {32}, p.max_shared_memory_per_block_optin + 1),
                   StatusCode::kInvalidArgument);
  CHECK_OK(dev->synchronize());
}

TEST_CASE("launch rejects wrong arguments and unknown kernels") {
  auto dev = open_device();
  auto k = dev->kernel("vector_ops", "vector_add_f32");
  REQUIRE_OK(k);
  DeviceBuffer buf(*dev, 4096);
  // One argument missing.
  CHECK_FAILS_WITH(
      KernelLaunch(*dev, *k).grid({1}).block({32}).arg(buf.ptr).arg(buf.ptr).arg(buf.ptr).launch(),
      StatusCode::kInvalidArgument);
  // One too many.
  CHECK_FAILS_WITH(KernelLaunch(*dev, *k)
                       .grid({1})
                       .block({32})
                       .arg(buf.ptr)
                       .arg(buf.ptr)
                       .arg(buf.ptr)
                       .arg(16u)
                       .arg(1u)
                       .launch(),
                   StatusCode::kInvalidArgument);
  // n is .u32: a 64-bit value is the wrong size.
  CHECK_FAILS_WITH(KernelLaunch(*dev, *k)
                       .grid({1})
                       .block({32})
                       .arg(buf.ptr)
                       .arg(buf.ptr)
                       .arg(buf.ptr)
                       .arg(uint64_t{16})
                       .launch(),
                   StatusCode::kInvalidArgument);
  // A float where a pointer is declared.
  CHECK_FAILS_WITH(KernelLaunch(*dev, *k)
                       .grid({1})
                       .block({32})
                       .arg(1.f)
                       .arg(buf.ptr)
                       .arg(buf.ptr)
                       .arg(16u)
                       .launch(),
                   StatusCode::kInvalidArgument);
  CHECK_FAILS_WITH(KernelLaunch(*dev, Kernel()).grid({1}).block({32}).launch(),
                   StatusCode::kInvalidArgument);
  CHECK_FAILS_WITH(dev->kernel("vector_ops", "no_such_entry"), StatusCode::kNotFound);
  CHECK_FAILS_WITH(dev->kernel("no_such_module", "vector_add_f32"), StatusCode::kNotFound);
}

TEST_CASE("graphs capture and replay stream work") {
  SKIP_IF_UNSUPPORTED("graphs");
  auto dev = open_device();
  const auto* g = dev->extension_as<SparkrtGraphExtension>(SPARKRT_GRAPH_EXTENSION_NAME);
  REQUIRE(g != nullptr);
  REQUIRE(g->struct_size >= SPARKRT_GRAPH_EXTENSION_SIZE);
  SparkrtDevice* native = dev->native_handle();
  std::mt19937_64 rng(seed());
  INFO("seed ", seed());

  const uint32_t n = 4099;
  auto k = dev->kernel("vector_ops", "vector_add_f32");
  REQUIRE_OK(k);
  DeviceBuffer a(*dev, n * 4), b(*dev, n * 4), out(*dev, n * 4);
  auto s = dev->create_stream();
  REQUIRE_OK(s);

  // Capture: poison out, then out = a + b.
  SparkrtGraphCaptureArgs begin{SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, native, s->handle};
  REQUIRE_OK(graph_status(g, g->begin_capture(&begin)));
  REQUIRE_OK(dev->memset_async(out.ptr, 0xFF, n * 4, *s));
  REQUIRE_OK(launch_vector_add(*dev, *k, a.ptr, b.ptr, out.ptr, n, *s));
  SparkrtGraphEndCaptureArgs end{SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE, native, s->handle, 0, 0};
  REQUIRE_OK(graph_status(g, g->end_capture(&end)));
  CHECK(end.graph != 0);
  CHECK(end.num_nodes == 2);

  const bool results = skip_reason("kernel-results") == nullptr;
  for (int replay = 0; replay < 3; ++replay) {
    // New data behind the same pointers: the replay must see it.
    const auto ha = random_floats(n, rng);
    const auto hb = random_floats(n, rng);
    REQUIRE_OK(dev->copy_h2d(ha, a.ptr));
    REQUIRE_OK(dev->copy_h2d(hb, b.ptr));
    SparkrtGraphLaunchArgs run{SPARKRT_GRAPH_LAUNCH_ARGS_SIZE, native, end.graph, s->handle};
    REQUIRE_OK(graph_status(g, g->launch(&run)));
    REQUIRE_OK(dev->synchronize(*s));
    if (!results) continue;
    std::vector<float> got(n);
    REQUIRE_OK(dev->copy_d2h(out.ptr, got));
    size_t wrong = 0;
    for (uint32_t i = 0; i < n; ++i) wrong += got[i] != ha[i] + hb[i];
    CHECK_MESSAGE(wrong == 0, "replay " << replay << ": " << wrong << " wrong sums");
  }
  if (!results) {
    MESSAGE("replay results not checked on " << backend_name() << ": "
                                             << std::string(skip_reason("kernel-results")));
  }

  // Replay on the default stream too.
  SparkrtGraphLaunchArgs run0{SPARKRT_GRAPH_LAUNCH_ARGS_SIZE, native, end.graph, 0};
  CHECK_OK(graph_status(g, g->launch(&run0)));
  CHECK_OK(dev->synchronize());

  SparkrtGraphDestroyArgs destroy{SPARKRT_GRAPH_DESTROY_ARGS_SIZE, native, end.graph};
  CHECK_OK(graph_status(g, g->destroy(&destroy)));
  // Bad input.
  CHECK_FAILS_WITH(graph_status(g, g->destroy(&destroy)), StatusCode::kInvalidArgument);
  SparkrtGraphLaunchArgs stale{SPARKRT_GRAPH_LAUNCH_ARGS_SIZE, native, end.graph, s->handle};
  CHECK_FAILS_WITH(graph_status(g, g->launch(&stale)), StatusCode::kInvalidArgument);
  SparkrtGraphCaptureArgs on_default{SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, native, 0};
  CHECK_FAILS_WITH(graph_status(g, g->begin_capture(&on_default)), StatusCode::kInvalidArgument);
  SparkrtGraphCaptureArgs unknown{SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, native, 0x4242'0000'0001ull};
  CHECK_FAILS_WITH(graph_status(g, g->begin_capture(&unknown)), StatusCode::kInvalidArgument);
  SparkrtGraphCaptureArgs short_args{sizeof(size_t), native, s->handle};
  CHECK_FAILS_WITH(graph_status(g, g->begin_capture(&short_args)), StatusCode::kInvalidArgument);
  SparkrtGraphEndCaptureArgs not_capturing{SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE, native, s->handle,
                                           0, 0};
  CHECK_FAILS(graph_status(g, g->end_capture(&not_capturing)));
  CHECK_OK(dev->destroy_stream(*s));
}

TEST_CASE("threads share one device safely") {
  auto dev = open_device();
  auto k = dev->kernel("vector_ops", "vector_add_f32");
  REQUIRE_OK(k);
  const bool results = skip_reason("kernel-results") == nullptr;
  constexpr int kThreads = 4;
  constexpr int kRounds = 20;
  std::atomic<int> failures{0};
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed() + t);
      auto fail = [&](const std::string& what) {
        if (errors[t].empty()) errors[t] = what;
        ++failures;
      };
      auto s = dev->create_stream();
      if (!s.ok()) return fail(std::string(s.status().ToString()));
      const uint32_t n = 1000 + 37 * t;
      for (int r = 0; r < kRounds; ++r) {
        const auto a = random_floats(n, rng), b = random_floats(n, rng);
        auto da = dev->alloc(n * 4), db = dev->alloc(n * 4), dout = dev->alloc(n * 4);
        if (!da.ok() || !db.ok() || !dout.ok()) return fail("alloc failed");
        absl::Status st = dev->copy_h2d(a, *da);
        if (st.ok()) st = dev->copy_h2d(b, *db);
        if (st.ok()) st = launch_vector_add(*dev, *k, *da, *db, *dout, n, *s);
        std::vector<float> out(n, 0.f);
        if (st.ok()) st = dev->synchronize(*s);
        if (st.ok()) st = dev->copy_d2h(*dout, out);
        if (!st.ok()) return fail(std::string(st.ToString()));
        if (results) {
          for (uint32_t i = 0; i < n; ++i)
            if (out[i] != a[i] + b[i]) return fail("wrong sum at " + std::to_string(i));
        }
        for (DevicePtr p : {*da, *db, *dout})
          if (auto f = dev->free(p); !f.ok()) return fail(std::string(f.ToString()));
      }
      if (auto d = dev->destroy_stream(*s); !d.ok()) fail(std::string(d.ToString()));
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    CHECK_MESSAGE(errors[t].empty(), "thread " << t << ": " << errors[t]);
  CHECK(failures.load() == 0);
}

TEST_CASE("closing a device releases what it still owns") {
  auto dev = open_device();
  // Left for close() to clean up: memory, host memory, streams, events, modules.
  REQUIRE_OK(dev->alloc(1 << 20));
  REQUIRE_OK(dev->alloc_host(1 << 16));
  REQUIRE_OK(dev->create_stream());
  REQUIRE_OK(dev->create_event());
  REQUIRE_OK(dev->kernel("vector_ops", "fill_u32"));
  CHECK_OK(dev->close());
  CHECK_FAILS_WITH(dev->alloc(16), StatusCode::kFailedPrecondition);
  // A new device works after the old one is gone.
  auto again = open_device();
  CHECK_OK(again->alloc(16));
}

}  // namespace
}  // namespace sparkrt::conformance
