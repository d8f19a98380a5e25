// What every backend must do with kernels, launches and graphs, from several
// threads and at close; each rule is stated in sparkrt/plugin_api.h. See
// conformance.h for how a case of an optional feature is skipped.
#include "conformance_support.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sparkrt/extensions/mock.h"

namespace sparkrt::conformance {
namespace {

using absl::StatusCode;

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

TEST_CASE("a kernel with 144 bytes of parameters gets every byte, launch after launch") {
  SKIP_IF_UNSUPPORTED("kernel-results");
  SKIP_IF_UNSUPPORTED("wide-parameters");
  auto dev = open_device();
  std::mt19937_64 rng(seed());
  INFO("seed ", seed());
  auto k = dev->kernel("vector_ops", "copy_args_u32");
  REQUIRE_OK(k);
  struct CopyArgs {
    uint32_t v[34];
  };
  // More launches queued than a backend's argument store may hold at once
  // (the vulkan ring: 4096 copies), each into its own output: every launch
  // must read its own parameters.
  constexpr uint32_t kLaunches = 5000;
  DeviceBuffer out(*dev, kLaunches * 34 * 4);
  REQUIRE_OK(dev->memset(out.ptr, 0xFF, kLaunches * 34 * 4));
  std::vector<CopyArgs> sent(kLaunches);
  for (uint32_t i = 0; i < kLaunches; ++i) {
    for (uint32_t& v : sent[i].v) v = static_cast<uint32_t>(rng());
    REQUIRE_OK(KernelLaunch(*dev, *k)
                   .grid({1})
                   .block({64})
                   .arg(out.ptr + uint64_t{i} * 34 * 4)
                   .arg(sent[i])
                   .launch());
  }
  std::vector<uint32_t> back(kLaunches * 34);
  REQUIRE_OK(dev->copy_d2h(out.ptr, back));
  size_t wrong = 0;
  for (uint32_t i = 0; i < kLaunches; ++i)
    for (uint32_t j = 0; j < 34; ++j)
      if (back[i * 34 + j] != sent[i].v[j] && wrong++ < 5)
        FAIL_CHECK("launch " << i << ": out[" << j << "] = " << back[i * 34 + j] << ", sent "
                             << sent[i].v[j]);
  CHECK(wrong == 0);
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

// The recorded attributes of the mock's launch `index`, or nullopt on a
// backend that records none.
struct RecordedAttributes {
  uint32_t flags;
  Dim3 cluster;
};
std::optional<RecordedAttributes> recorded_attributes(Device& dev, uint64_t index) {
  const auto* mock = dev.extension_as<SparkrtMockExtension>(SPARKRT_MOCK_EXTENSION_NAME);
  if (mock == nullptr) return std::nullopt;
  REQUIRE(mock->struct_size >= SPARKRT_MOCK_EXTENSION_SIZE);
  SparkrtMockLaunchAttributes a{};
  a.struct_size = SPARKRT_MOCK_LAUNCH_ATTRIBUTES_SIZE;
  if (SparkrtError* e = mock->get_launch_attributes(dev.native_handle(), index, &a)) {
    mock->error_destroy(e);
    FAIL_CHECK("mock get_launch_attributes(" << index << ") failed");
    return std::nullopt;
  }
  return RecordedAttributes{a.flags, {a.cluster[0], a.cluster[1], a.cluster[2]}};
}

uint64_t recorded_launches(Device& dev) {
  const auto* mock = dev.extension_as<SparkrtMockExtension>(SPARKRT_MOCK_EXTENSION_NAME);
  uint64_t n = 0;
  if (mock != nullptr) {
    if (SparkrtError* e = mock->launch_count(dev.native_handle(), &n)) mock->error_destroy(e);
  }
  return n;
}

TEST_CASE("a dependent launch computes what a plain one does") {
  SKIP_IF_UNSUPPORTED("launch-attributes");
  auto dev = open_device();
  std::mt19937_64 rng(seed());
  INFO("seed ", seed());
  auto k = dev->kernel("vector_ops", "vector_add_f32");
  REQUIRE_OK(k);
  const uint32_t n = 40'009;
  const auto a = random_floats(n, rng);
  const auto b = random_floats(n, rng);
  DeviceBuffer da(*dev, n * 4), db(*dev, n * 4), plain(*dev, n * 4), dependent(*dev, n * 4);
  REQUIRE_OK(dev->copy_h2d(a, da.ptr));
  REQUIRE_OK(dev->copy_h2d(b, db.ptr));
  REQUIRE_OK(dev->memset(plain.ptr, 0xFF, n * 4));  // NaN poison
  REQUIRE_OK(dev->memset(dependent.ptr, 0xFF, n * 4));
  auto s = dev->create_stream();
  REQUIRE_OK(s);
  const uint64_t before = recorded_launches(*dev);
  // vector_add_f32 has no griddepcontrol.wait, so the dependent launch reads
  // nothing the plain one writes: it may overlap it.
  REQUIRE_OK(launch_vector_add(*dev, *k, da.ptr, db.ptr, plain.ptr, n, *s));
  REQUIRE_OK(KernelLaunch(*dev, *k).grid({div_ceil(n, 256u)}).block({256}).dependent_launch()
                 .arg(da.ptr).arg(db.ptr).arg(dependent.ptr).arg(n).launch(*s));
  REQUIRE_OK(dev->synchronize(*s));
  if (auto plain_rec = recorded_attributes(*dev, before)) {
    auto dep_rec = recorded_attributes(*dev, before + 1);
    REQUIRE(dep_rec.has_value());
    CHECK(plain_rec->flags == 0);
    CHECK(dep_rec->flags == SPARKRT_LAUNCH_DEPENDENT);
    CHECK(dep_rec->cluster == Dim3{0, 0, 0});
  }
  if (skip_reason("kernel-results") == nullptr) {
    std::vector<float> got_plain(n), got_dependent(n);
    REQUIRE_OK(dev->copy_d2h(plain.ptr, got_plain));
    REQUIRE_OK(dev->copy_d2h(dependent.ptr, got_dependent));
    size_t wrong = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const float want = a[i] + b[i];
      wrong += std::memcmp(&got_plain[i], &want, 4) != 0;
      wrong += std::memcmp(&got_dependent[i], &want, 4) != 0;
    }
    CHECK_MESSAGE(wrong == 0, wrong << " wrong sums");
  }
  CHECK_OK(dev->destroy_stream(*s));
}

TEST_CASE("launch attribute properties are consistent") {
  auto dev = open_device();
  const DeviceProperties& p = dev->properties();
  INFO("supports_clusters ", p.supports_clusters, ", max_cluster_size ", p.max_cluster_size);
  if (p.supports_clusters)
    CHECK(p.max_cluster_size >= 1);
  else
    CHECK(p.max_cluster_size == 0);
}

TEST_CASE("clusters launch where the device supports them and are UNIMPLEMENTED where not") {
  SKIP_IF_UNSUPPORTED("launch-attributes");
  auto dev = open_device();
  const DeviceProperties& p = dev->properties();
  auto k = dev->kernel("vector_ops", "fill_u32");
  REQUIRE_OK(k);
  constexpr uint32_t kBlocks = 8, kThreads = 64, kCount = kBlocks * kThreads;
  DeviceBuffer out(*dev, kCount * 4);
  REQUIRE_OK(dev->memset(out.ptr, 0xFF, kCount * 4));
  auto fill = [&](Dim3 cluster) {
    return KernelLaunch(*dev, *k).grid({kBlocks}).block({kThreads}).cluster(cluster)
        .arg(out.ptr).arg(0x5eed0001u).arg(kCount).launch();
  };
  if (!p.supports_clusters) {
    CHECK_FAILS_WITH(fill({2, 1, 1}), StatusCode::kUnimplemented);
    return;
  }
  REQUIRE(p.max_cluster_size >= 2);
  const uint64_t before = recorded_launches(*dev);
  REQUIRE_OK(fill({2, 1, 1}));
  REQUIRE_OK(dev->synchronize());
  if (auto rec = recorded_attributes(*dev, before)) {
    CHECK(rec->cluster == Dim3{2, 1, 1});
    CHECK(rec->flags == 0);
  }
  if (skip_reason("kernel-results") == nullptr) {
    std::vector<uint32_t> back(kCount);
    REQUIRE_OK(dev->copy_d2h(out.ptr, back));
    CHECK(std::all_of(back.begin(), back.end(), [](uint32_t v) { return v == 0x5eed0001u; }));
  }
  // (runtime) Clusters that do not fit are refused before the plugin.
  CHECK_FAILS_WITH(fill({3, 1, 1}), StatusCode::kInvalidArgument);  // 8 blocks % 3
  CHECK_FAILS_WITH(fill({0, 1, 1}), StatusCode::kInvalidArgument);
  if (p.max_cluster_size < kBlocks)
    CHECK_FAILS_WITH(fill({kBlocks, 1, 1}), StatusCode::kInvalidArgument);
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
