#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "sparkrt/extensions/graph.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/testing/mock.h"

using sparkrt::ArgKind;
using sparkrt::arg_kind_of;
using sparkrt::Device;
using sparkrt::DevicePtr;
using sparkrt::Dim3;
using sparkrt::KernelLaunch;

namespace {

std::unique_ptr<Device> open_mock() {
  auto dev = Device::open({.backend = "mock"});
  REQUIRE_MESSAGE(dev.ok(), dev.status().ToString());
  return *std::move(dev);
}

// Device memory for pointer arguments: the mock refuses a launch whose
// pointers lie in no live allocation, as a GPU would fault on them.
DevicePtr alloc(Device& dev, size_t bytes = 4096) {
  auto p = dev.alloc(bytes);
  REQUIRE_MESSAGE(p.ok(), p.status().ToString());
  return *p;
}

bool contains(const absl::Status& s, std::string_view text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

struct alignas(8) Axpy {
  float alpha;
  uint32_t pad;
  uint64_t n;
};

}  // namespace

TEST_CASE("launch builder: C++ types map to argument kinds exactly") {
  static_assert(arg_kind_of<DevicePtr>() == ArgKind::kPtr);
  static_assert(arg_kind_of<uint32_t>() == ArgKind::kU32);
  static_assert(arg_kind_of<int32_t>() == ArgKind::kI32);
  static_assert(arg_kind_of<uint64_t>() == ArgKind::kU64);
  static_assert(arg_kind_of<unsigned long long>() == ArgKind::kU64);
  static_assert(arg_kind_of<int64_t>() == ArgKind::kI64);
  static_assert(arg_kind_of<float>() == ArgKind::kF32);
  static_assert(arg_kind_of<double>() == ArgKind::kF64);
  static_assert(arg_kind_of<Axpy>() == ArgKind::kBytes);
  static_assert(sparkrt::div_ceil(1000u, 256u) == 4u);
  static_assert(sparkrt::div_ceil(1024u, 256u) == 4u);
  static_assert(sparkrt::div_ceil(uint64_t{0}, uint64_t{7}) == 0u);
  static_assert((DevicePtr(0x1000) + 0x20).addr == 0x1020);
  CHECK(true);
}

TEST_CASE("launch builder: packs arguments in the CUDA parameter layout") {
  auto dev = open_mock();
  auto k = dev->kernel("vector_ops", "empty_10_args");
  REQUIRE(k.ok());
  const DevicePtr buf = alloc(*dev);
  KernelLaunch l(*dev, *k);
  l.arg(buf + 0x111).arg(buf + 0x222).arg(buf + 0x333).arg(buf + 0x444)
      .arg(uint32_t{5}).arg(uint32_t{6}).arg(uint32_t{7}).arg(uint64_t{0x0807060504030201})
      .arg(1.5f).arg(-2.25f);
  REQUIRE(l.num_args() == 10);
  CHECK(l.params_size() == 64);
  uint64_t p3 = 0;
  std::memcpy(&p3, l.params() + 24, 8);
  CHECK(p3 == buf.addr + 0x444);
  uint32_t c = 0;
  std::memcpy(&c, l.params() + 40, 4);
  CHECK(c == 7);
  uint64_t d = 0;
  std::memcpy(&d, l.params() + 48, 8);  // aligned up from 44
  CHECK(d == 0x0807060504030201);
  float f = 0;
  std::memcpy(&f, l.params() + 60, 4);
  CHECK(f == -2.25f);
  // Every packed offset agrees with the PTX signature.
  for (const auto& p : k->signature().params) CHECK(p.offset + p.size <= l.params_size());
  CHECK(l.grid({1}).block({1}).launch().ok());
}

TEST_CASE("launch: the signature check names what is missing, extra or mis-sized") {
  auto dev = open_mock();
  auto add = dev->kernel("vector_ops", "vector_add_f32");
  REQUIRE(add.ok());
  const DevicePtr a = alloc(*dev), b = alloc(*dev), out = alloc(*dev);

  auto missing = KernelLaunch(*dev, *add).grid({4}).block({256}).arg(a).arg(b).arg(out).launch();
  CHECK(missing.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(missing.message() == "vector_add_f32: 4 parameters declared, 3 given (missing #3 .u32)",
                missing.message());

  auto extra = KernelLaunch(*dev, *add).grid({4}).block({256}).arg(a).arg(b).arg(out)
                   .arg(uint32_t{1}).arg(1.0f).launch();
  CHECK_MESSAGE(extra.message() == "vector_add_f32: 4 parameters declared, 5 given (extra #4 float)",
                extra.message());

  auto wide = KernelLaunch(*dev, *add).grid({4}).block({256}).arg(a).arg(b).arg(out)
                  .arg(uint64_t{1024}).launch();
  CHECK(wide.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(wide, "parameter #3 (vector_add_f32_param_3) is .u32 (4 bytes), given uint64_t (8 bytes)"),
                wide.message());

  auto narrow = KernelLaunch(*dev, *add).grid({4}).block({256}).arg(a).arg(uint32_t{1}).arg(out)
                    .arg(uint32_t{1024}).launch();
  CHECK_MESSAGE(contains(narrow, "parameter #1"), narrow.message());

  CHECK(KernelLaunch(*dev, *add).grid({4}).block({256}).arg(a).arg(b).arg(out).arg(uint32_t{1024})
            .launch().ok());
}

TEST_CASE("launch: struct arguments must match the declared alignment") {
  auto dev = open_mock();
  auto axpy = dev->kernel("vector_ops", "axpy_f32");
  REQUIRE(axpy.ok());
  const DevicePtr x = alloc(*dev), y = alloc(*dev);
  CHECK(KernelLaunch(*dev, *axpy).grid({1}).block({32}).arg(Axpy{2.f, 0, 10})
            .arg(x).arg(y).launch().ok());
  struct Packed {
    float v[4];
  };  // 16 bytes, 4-byte aligned: the pointers after it would shift
  struct Lead {
    uint32_t x;
  };
  auto shifted = KernelLaunch(*dev, *axpy).grid({1}).block({32}).arg(Lead{1}).arg(Packed{})
                     .arg(y).launch();
  CHECK_FALSE(shifted.ok());
}

TEST_CASE("launch: zero, oversized and unset dimensions and shared memory over the limit") {
  auto dev = open_mock();
  auto fill = dev->kernel("vector_ops", "fill_u32");
  REQUIRE(fill.ok());
  const auto& props = dev->properties();
  const DevicePtr out = alloc(*dev);
  auto with = [&](Dim3 grid, Dim3 block, uint32_t smem) {
    return KernelLaunch(*dev, *fill).grid(grid).block(block).shared_mem(smem)
        .arg(out).arg(uint32_t{7}).arg(uint32_t{64}).launch();
  };
  CHECK(with({1}, {64}, 0).ok());
  auto zero = with({0, 1, 1}, {64}, 0);
  CHECK(zero.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(zero, "grid (0, 1, 1) has a zero dimension"), zero.message());
  CHECK(contains(with({1}, {0, 1, 1}, 0), "block (0, 1, 1) has a zero dimension"));
  auto unset = KernelLaunch(*dev, *fill).block({64}).arg(out).arg(uint32_t{7})
                   .arg(uint32_t{64}).launch();
  CHECK_MESSAGE(contains(unset, "was .grid() called?"), unset.message());
  auto huge_grid = with({1, props.max_grid_dim.y + 1, 1}, {64}, 0);
  CHECK_MESSAGE(contains(huge_grid, "exceeds the device limit"), huge_grid.message());
  auto big_block = with({1}, {props.max_threads_per_block, 2, 1}, 0);
  CHECK_MESSAGE(contains(big_block, "threads, the device allows"), big_block.message());
  auto smem = with({1}, {64}, props.max_shared_memory_per_block_optin + 1);
  CHECK_MESSAGE(contains(smem, "bytes of dynamic shared memory requested"), smem.message());
  CHECK(with({1}, {64}, props.max_shared_memory_per_block_optin).ok());
}

TEST_CASE("launch: too many arguments is an error, not an overflow") {
  auto dev = open_mock();
  auto fill = dev->kernel("vector_ops", "fill_u32");
  REQUIRE(fill.ok());
  KernelLaunch l(*dev, *fill);
  l.grid({1}).block({1});
  for (uint32_t i = 0; i < KernelLaunch::kMaxArgs + 3; ++i) l.arg(uint32_t{i});
  CHECK(l.num_args() == KernelLaunch::kMaxArgs);
  auto s = l.launch();
  CHECK_MESSAGE(contains(s, "more than 64 arguments"), s.message());
}

TEST_CASE("launch: handles from another device or an empty handle are refused") {
  auto dev1 = open_mock();
  auto dev2 = open_mock();
  auto fill = dev1->kernel("vector_ops", "fill_u32");
  REQUIRE(fill.ok());
  auto other = KernelLaunch(*dev2, *fill).grid({1}).block({1}).arg(DevicePtr(0x10))
                   .arg(uint32_t{1}).arg(uint32_t{1}).launch();
  CHECK_MESSAGE(contains(other, "resolved on another device"), other.message());
  auto empty = KernelLaunch(*dev1, sparkrt::Kernel()).grid({1}).block({1}).launch();
  CHECK(contains(empty, "empty Kernel handle"));
  REQUIRE(dev1->close().ok());
  auto closed = KernelLaunch(*dev1, *fill).grid({1}).block({1}).arg(DevicePtr(0x10))
                    .arg(uint32_t{1}).arg(uint32_t{1}).launch();
  CHECK(closed.code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("launch: arg_bytes places a run-time struct as arg() places a C++ one") {
  auto dev = open_mock();
  auto axpy = dev->kernel("vector_ops", "axpy_f32");
  REQUIRE(axpy.ok());
  const DevicePtr x = alloc(*dev), y = alloc(*dev);
  const Axpy s{2.f, 0, 10};
  KernelLaunch typed(*dev, *axpy);
  typed.grid({1}).block({32}).arg(s).arg(x).arg(y);
  KernelLaunch runtime(*dev, *axpy);
  runtime.grid({1}).block({32}).arg_bytes(&s, sizeof s, alignof(Axpy)).arg(x).arg(y);
  REQUIRE(runtime.params_size() == typed.params_size());
  CHECK(std::memcmp(runtime.params(), typed.params(), typed.params_size()) == 0);
  CHECK(runtime.launch().ok());

  for (uint32_t bad : {0u, 3u, 256u}) {
    CAPTURE(bad);
    auto st = KernelLaunch(*dev, *axpy).grid({1}).block({32}).arg_bytes(&s, sizeof s, bad)
                  .arg(x).arg(y).launch();
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(st.message() == "axpy_f32: a struct argument is aligned to " +
                                      std::to_string(bad) +
                                      " bytes; give a power of two from 1 to 128",
                  st.message());
  }
}

TEST_CASE("launch: a checked layout launches values written into place, for its kernel only") {
  auto dev = open_mock();
  auto add = dev->kernel("vector_ops", "vector_add_f32");
  auto fill = dev->kernel("vector_ops", "fill_u32");
  REQUIRE(add.ok());
  REQUIRE(fill.ok());
  const DevicePtr a = alloc(*dev), b = alloc(*dev), out = alloc(*dev);

  // Arguments that do not fit give check_layout launch()'s error.
  KernelLaunch::CheckedLayout layout;
  auto short_list = KernelLaunch(*dev, *add).arg(a).arg(b).arg(out).check_layout(layout);
  CHECK(short_list.message() == "vector_add_f32: 4 parameters declared, 3 given (missing #3 .u32)");

  KernelLaunch packed(*dev, *add);
  packed.grid({4}).block({256}).arg(a).arg(b).arg(out).arg(uint32_t{1000});
  REQUIRE(packed.check_layout(layout).ok());
  CHECK(layout.num_args == 4);
  CHECK(layout.params_size == packed.params_size());
  CHECK(layout.offsets[3] == 24);
  CHECK(layout.sizes[3] == 4);
  CHECK(layout.kinds[3] == static_cast<uint8_t>(ArgKind::kU32));

  // Values written at the layout's offsets give the bytes arg() packs.
  KernelLaunch placed(*dev, *add);
  placed.grid({4}).block({256});
  std::byte* params = placed.use_layout(layout);
  const uint64_t ptrs[3] = {a.addr, b.addr, out.addr};
  for (int i = 0; i < 3; ++i) std::memcpy(params + layout.offsets[i], &ptrs[i], 8);
  const uint32_t n = 1000;
  std::memcpy(params + layout.offsets[3], &n, 4);
  CHECK(std::memcmp(params, packed.params(), packed.params_size()) == 0);
  CHECK(placed.launch().ok());

  // The geometry is still checked; a layout of another kernel is refused.
  KernelLaunch no_grid(*dev, *add);
  no_grid.block({256}).use_layout(layout);
  CHECK(no_grid.launch().message() ==
        "vector_add_f32: grid (0, 0, 0) has a zero dimension (was .grid() called?)");
  KernelLaunch other(*dev, *fill);
  other.grid({1}).block({32}).use_layout(layout);
  CHECK(other.launch().message() ==
        "fill_u32: the argument layout was checked for another kernel");
}

TEST_CASE("launch attributes: a cluster must have no zero dimension, divide the grid and fit") {
  auto dev = open_mock();
  auto fill = dev->kernel("vector_ops", "fill_u32");
  REQUIRE(fill.ok());
  const auto& props = dev->properties();
  REQUIRE(props.supports_clusters);
  REQUIRE(props.max_cluster_size == 8);
  const DevicePtr out = alloc(*dev, 64 * 64 * 4);
  auto with = [&](Dim3 grid, Dim3 cluster) {
    return KernelLaunch(*dev, *fill).grid(grid).block({64}).cluster(cluster)
        .arg(out).arg(uint32_t{7}).arg(uint32_t{64}).launch();
  };
  CHECK(with({8, 2, 1}, {4, 2, 1}).ok());
  CHECK(with({8, 2, 1}, {0, 0, 0}).ok());  // no cluster
  auto zero = with({8, 2, 1}, {2, 0, 1});
  CHECK(zero.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(zero, "cluster (2, 0, 1) has a zero dimension"), zero.message());
  auto uneven = with({8, 3, 1}, {2, 2, 1});
  CHECK(uneven.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(uneven, "grid (8, 3, 1) is not a multiple of cluster (2, 2, 1)"),
                uneven.message());
  auto z_uneven = with({2, 1, 3}, {1, 1, 2});
  CHECK_MESSAGE(contains(z_uneven, "is not a multiple of cluster"), z_uneven.message());
  auto big = with({16, 2, 1}, {8, 2, 1});
  CHECK(big.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(big, "cluster (8, 2, 1) has 16 blocks, the device allows 8 per cluster"),
                big.message());
  CHECK(with({16, 2, 1}, {8, 1, 1}).ok());  // exactly the limit
}

TEST_CASE("launch attributes: the mock records them as given, and nothing without them") {
  auto dev = open_mock();
  auto mock = sparkrt::testing::MockInspector::attach(*dev);
  REQUIRE_MESSAGE(mock.ok(), mock.status().ToString());
  auto fill = dev->kernel("vector_ops", "fill_u32");
  REQUIRE(fill.ok());
  const DevicePtr out = alloc(*dev, 64 * 4 * 4);
  KernelLaunch l(*dev, *fill);
  l.grid({4}).block({64}).arg(out).arg(uint32_t{7}).arg(uint32_t{256});
  REQUIRE(l.launch().ok());
  REQUIRE(l.dependent_launch().launch().ok());
  REQUIRE(l.cluster({2, 1, 1}).launch().ok());
  REQUIRE(l.dependent_launch(false).launch().ok());
  REQUIRE(l.cluster({0, 0, 0}).launch().ok());
  REQUIRE(mock->launch_count() == 5);
  const struct {
    bool dependent;
    Dim3 cluster;
  } want[] = {{false, {0, 0, 0}}, {true, {0, 0, 0}}, {true, {2, 1, 1}}, {false, {2, 1, 1}},
              {false, {0, 0, 0}}};
  for (size_t i = 0; i < 5; ++i) {
    INFO("launch ", i);
    const auto r = mock->launch(i);
    CHECK(r.dependent_launch == want[i].dependent);
    CHECK(r.cluster == want[i].cluster);
    CHECK(r.grid == Dim3{4, 1, 1});
  }
  std::ostringstream printed;
  printed << mock->launch(2);
  CHECK_MESSAGE(printed.str().find(" dependent cluster {2, 1, 1} args (") != std::string::npos,
                printed.str());
  printed.str("");
  printed << mock->launch(0);
  CHECK_MESSAGE(printed.str().find("dependent") == std::string::npos, printed.str());
  CHECK_MESSAGE(printed.str().find("cluster") == std::string::npos, printed.str());
}

TEST_CASE("launch attributes: SPARKRT_DEPENDENT_LAUNCH=0 launches everything plainly") {
  struct Unset {
    ~Unset() { ::unsetenv("SPARKRT_DEPENDENT_LAUNCH"); }
  } unset;
  ::setenv("SPARKRT_DEPENDENT_LAUNCH", "0", 1);
  auto dev = open_mock();
  CHECK_FALSE(dev->properties().supports_dependent_launch);
  auto mock = sparkrt::testing::MockInspector::attach(*dev);
  REQUIRE_MESSAGE(mock.ok(), mock.status().ToString());
  auto fill = dev->kernel("vector_ops", "fill_u32");
  REQUIRE(fill.ok());
  const DevicePtr out = alloc(*dev, 64 * 4 * 4);
  KernelLaunch l(*dev, *fill);
  l.grid({4}).block({64}).arg(out).arg(uint32_t{7}).arg(uint32_t{256}).dependent_launch();
  REQUIRE(l.launch().ok());
  REQUIRE(l.cluster({2, 1, 1}).launch().ok());  // clusters are not affected
  REQUIRE(mock->launch_count() == 2);
  CHECK_FALSE(mock->launch(0).dependent_launch);
  CHECK_FALSE(mock->launch(1).dependent_launch);
  CHECK(mock->launch(1).cluster == Dim3{2, 1, 1});

  ::setenv("SPARKRT_DEPENDENT_LAUNCH", "1", 1);
  CHECK(open_mock()->properties().supports_dependent_launch);
  for (const char* bad : {"yes", "2", " 0", "off"}) {
    CAPTURE(bad);
    ::setenv("SPARKRT_DEPENDENT_LAUNCH", bad, 1);
    auto refused = Device::open({.backend = "mock"});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(contains(refused.status(), std::string("SPARKRT_DEPENDENT_LAUNCH='") + bad + "'"),
                  refused.status().message());
  }
}

TEST_CASE("launch attributes: graph capture records them and every replay launches with them") {
  auto dev = open_mock();
  auto mock = sparkrt::testing::MockInspector::attach(*dev);
  REQUIRE_MESSAGE(mock.ok(), mock.status().ToString());
  const auto* g = dev->extension_as<SparkrtGraphExtension>(SPARKRT_GRAPH_EXTENSION_NAME);
  REQUIRE(g != nullptr);
  auto fill = dev->kernel("vector_ops", "fill_u32");
  REQUIRE(fill.ok());
  const DevicePtr out = alloc(*dev, 64 * 4 * 4);
  auto s = dev->create_stream();
  REQUIRE(s.ok());
  SparkrtDevice* native = dev->native_handle();
  SparkrtGraphCaptureArgs begin{SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, native, s->handle};
  REQUIRE(g->begin_capture(&begin) == nullptr);
  REQUIRE(KernelLaunch(*dev, *fill).grid({4}).block({64}).dependent_launch().cluster({2, 1, 1})
              .arg(out).arg(uint32_t{7}).arg(uint32_t{256}).launch(*s).ok());
  REQUIRE(KernelLaunch(*dev, *fill).grid({4}).block({64})
              .arg(out).arg(uint32_t{8}).arg(uint32_t{256}).launch(*s).ok());
  SparkrtGraphEndCaptureArgs end{SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE, native, s->handle, 0, 0};
  REQUIRE(g->end_capture(&end) == nullptr);
  REQUIRE(mock->launch_count() == 0);  // captured, not launched
  for (int replay = 0; replay < 2; ++replay) {
    SparkrtGraphLaunchArgs run{SPARKRT_GRAPH_LAUNCH_ARGS_SIZE, native, end.graph, s->handle};
    REQUIRE(g->launch(&run) == nullptr);
  }
  REQUIRE(dev->synchronize(*s).ok());
  REQUIRE(mock->launch_count() == 4);
  for (size_t i = 0; i < 4; ++i) {
    INFO("launch ", i);
    const auto r = mock->launch(i);
    const bool first = i % 2 == 0;
    CHECK(r.dependent_launch == first);
    CHECK(r.cluster == (first ? Dim3{2, 1, 1} : Dim3{0, 0, 0}));
  }
  SparkrtGraphDestroyArgs destroy{SPARKRT_GRAPH_DESTROY_ARGS_SIZE, native, end.graph};
  CHECK(g->destroy(&destroy) == nullptr);
  CHECK(dev->destroy_stream(*s).ok());
}

TEST_CASE("launch attributes: a plugin of ABI 1.3 launches without them and refuses them") {
  const std::string path = std::string(SPARKRT_TEST_PLUGIN_DIR) + "/libsparkrt_backend_oldabi.so";
  auto dev = Device::open({.backend = path});
  // The plugin refuses property and launch structs of any size but ABI 1.3's.
  REQUIRE_MESSAGE(dev.ok(), dev.status().ToString());
  const auto& props = (*dev)->properties();
  CHECK_FALSE(props.supports_dependent_launch);
  CHECK_FALSE(props.supports_clusters);
  CHECK(props.max_cluster_size == 0);
  auto fill = (*dev)->kernel("vector_ops", "fill_u32");
  REQUIRE_MESSAGE(fill.ok(), fill.status().ToString());
  auto launch = [&](bool dependent, Dim3 cluster) {
    return KernelLaunch(**dev, *fill).grid({2}).block({64}).dependent_launch(dependent)
        .cluster(cluster).arg(DevicePtr(0x1000)).arg(uint32_t{7}).arg(uint32_t{128}).launch();
  };
  auto plain = launch(false, {0, 0, 0});
  CHECK_MESSAGE(plain.ok(), plain.ToString());
  auto dependent = launch(true, {0, 0, 0});
  CHECK(dependent.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(contains(dependent, "plugin 'oldabi'"), dependent.message());
  CHECK_MESSAGE(contains(dependent, "speaks ABI 1.3"), dependent.message());
  CHECK_MESSAGE(contains(dependent, "need a plugin of ABI 1.4"), dependent.message());
  auto cluster = launch(false, {2, 1, 1});
  CHECK(cluster.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(contains(cluster, "launch attributes (cluster)"), cluster.message());
}

TEST_CASE("launch attributes: a cluster on a device without clusters is UNIMPLEMENTED") {
  auto dev = Device::open({.backend = "cpu"});
  REQUIRE_MESSAGE(dev.ok(), dev.status().ToString());
  REQUIRE_FALSE((*dev)->properties().supports_clusters);
  auto fill = (*dev)->kernel("vector_ops", "fill_u32");
  REQUIRE(fill.ok());
  const DevicePtr out = alloc(**dev, 256 * 4);
  auto clustered = KernelLaunch(**dev, *fill).grid({4}).block({64}).cluster({2, 1, 1})
                       .arg(out).arg(uint32_t{7}).arg(uint32_t{256}).launch();
  CHECK(clustered.code() == absl::StatusCode::kUnimplemented);
  CHECK_MESSAGE(contains(clustered, "does not support thread-block clusters"),
                clustered.message());
  // A dependent launch runs as a plain one where launches cannot overlap.
  REQUIRE(KernelLaunch(**dev, *fill).grid({4}).block({64}).dependent_launch()
              .arg(out).arg(uint32_t{0x5eed}).arg(uint32_t{256}).launch().ok());
  std::vector<uint32_t> back(256, 0);
  REQUIRE((*dev)->copy_d2h(out, back).ok());
  CHECK(std::all_of(back.begin(), back.end(), [](uint32_t v) { return v == 0x5eed; }));
}
