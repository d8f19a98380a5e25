// The C API's version, errors, devices, memory, streams and events, on the
// mock and cpu backends, against the C++ API on the same backend.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "capi_test_support.h"
#include "sparkrt/communicator.h"
#include "sparkrt/device.h"
#include "sparkrt/extensions/collectives.h"
#include "sparkrt/extensions/graph.h"

using capitest::check_same;
using capitest::CStatus;
using capitest::describe;
using capitest::open_c;
using capitest::open_cpp;

namespace {

constexpr const char* kHostBackends[] = {"mock", "cpu"};

sparkrt_device_properties full_properties(const sparkrt_device* dev) {
  sparkrt_device_properties p{};
  p.struct_size = SPARKRT_C_DEVICE_PROPERTIES_SIZE;
  C_REQUIRE_OK(sparkrt_device_properties_get(dev, &p));
  return p;
}

std::string str(const char* s) {
  REQUIRE(s != nullptr);
  return s;
}

}  // namespace

TEST_CASE("capi version: the library's version is the header's") {
  const uint32_t v = sparkrt_c_api_version();
  CHECK((v >> 16) == SPARKRT_C_API_MAJOR);
  CHECK((v & 0xffffu) == SPARKRT_C_API_MINOR);
  REQUIRE(sparkrt_version_string() != nullptr);
  CHECK(std::string(sparkrt_version_string()) == SPARKRT_TEST_PROJECT_VERSION);
}

TEST_CASE("capi status: NULL is success, codes have absl's names, status_new copies") {
  CHECK(sparkrt_status_code(nullptr) == SPARKRT_OK);
  REQUIRE(sparkrt_status_message(nullptr) != nullptr);
  CHECK(std::string(sparkrt_status_message(nullptr)).empty());
  sparkrt_status_free(nullptr);  // a no-op

  for (int32_t code = 0; code <= 16; ++code) {
    INFO("code ", code);
    CHECK(std::string(sparkrt_code_name(code)) ==
          absl::StatusCodeToString(static_cast<absl::StatusCode>(code)));
  }
  CHECK(std::string(sparkrt_code_name(17)) == "UNKNOWN");
  CHECK(std::string(sparkrt_code_name(-1)) == "UNKNOWN");
  CHECK(std::string(sparkrt_code_name(1000)) == "UNKNOWN");
  CHECK(std::string(sparkrt_code_name(SPARKRT_INVALID_ARGUMENT)) == "INVALID_ARGUMENT");

  std::string text = "a message that the status must copy, longer than any inline buffer";
  sparkrt_status* s = sparkrt_status_new(SPARKRT_NOT_FOUND, text.c_str());
  REQUIRE(s != nullptr);
  text.assign(text.size(), 'x');  // the status holds its own copy
  CHECK(sparkrt_status_code(s) == SPARKRT_NOT_FOUND);
  CHECK(std::string(sparkrt_status_message(s)) ==
        "a message that the status must copy, longer than any inline buffer");
  sparkrt_status_free(s);
  for (int32_t code = 1; code <= 16; ++code) {
    const CStatus each(sparkrt_status_new(code, "m"));
    REQUIRE(each != nullptr);
    CHECK(sparkrt_status_code(each.get()) == code);
  }
}

TEST_CASE("capi device: open by name on the host backends, properties equal C++'s") {
  for (const char* backend : kHostBackends) {
    INFO("backend ", std::string(backend));
    auto c = open_c(backend, 1);
    auto cpp = open_cpp(backend, 1);
    const sparkrt_device_properties p = full_properties(c.get());
    CHECK(p.struct_size == SPARKRT_C_DEVICE_PROPERTIES_SIZE);  // left as given
    const sparkrt::DeviceProperties& q = cpp->properties();
    CHECK(str(p.backend) == backend);
    CHECK(str(p.backend) == cpp->backend_name());
    CHECK(str(p.plugin_path) == cpp->plugin_path());
    CHECK(str(p.plugin_version) == cpp->plugin_version());
    CHECK(str(p.name) == q.name);
    CHECK(str(p.architecture) == q.architecture);
    CHECK(str(p.driver) == q.driver);
    CHECK(p.index == 1);
    CHECK(p.multiprocessor_count == q.multiprocessor_count);
    CHECK(p.total_memory == q.total_memory);
    CHECK(p.warp_size == q.warp_size);
    CHECK(p.max_threads_per_block == q.max_threads_per_block);
    CHECK(p.max_block_dim[0] == q.max_block_dim.x);
    CHECK(p.max_block_dim[1] == q.max_block_dim.y);
    CHECK(p.max_block_dim[2] == q.max_block_dim.z);
    CHECK(p.max_grid_dim[0] == q.max_grid_dim.x);
    CHECK(p.max_grid_dim[1] == q.max_grid_dim.y);
    CHECK(p.max_grid_dim[2] == q.max_grid_dim.z);
    CHECK(p.max_shared_memory_per_block == q.max_shared_memory_per_block);
    CHECK(p.max_shared_memory_per_block_optin == q.max_shared_memory_per_block_optin);
    CHECK(p.compute_capability_major == q.compute_capability_major);
    CHECK(p.compute_capability_minor == q.compute_capability_minor);
    CHECK(p.accepts_ptx == (q.accepts_ptx ? 1 : 0));
    CHECK(p.accepts_cubin == (q.accepts_cubin ? 1 : 0));
    CHECK(p.accepts_spirv == (q.accepts_spirv ? 1 : 0));
    CHECK(p.accepts_signatures == (q.accepts_signatures ? 1 : 0));
    CHECK(p.emulated == (q.emulated ? 1 : 0));
    CHECK(p.supports_dependent_launch == (q.supports_dependent_launch ? 1 : 0));
    CHECK(p.supports_clusters == (q.supports_clusters ? 1 : 0));
    CHECK(p.max_cluster_size == q.max_cluster_size);
    // The mock takes the attributes as a Hopper GPU does; the cpu backend
    // overlaps no launches and has no clusters.
    const bool mock = std::string(backend) == "mock";
    CHECK(p.supports_dependent_launch == (mock ? 1 : 0));
    CHECK(p.supports_clusters == (mock ? 1 : 0));
    CHECK(p.max_cluster_size == (mock ? 8u : 0u));
    // Both host backends record graphs and run host collectives.
    CHECK(p.has_graphs == 1);
    CHECK(p.has_collectives == 1);
    CHECK((cpp->extension(SPARKRT_GRAPH_EXTENSION_NAME) != nullptr) == (p.has_graphs == 1));
    CHECK((cpp->extension(SPARKRT_COLLECTIVES_EXTENSION_NAME) != nullptr) ==
          (p.has_collectives == 1));
    // The strings live as long as the device: a second call hands out the same.
    const sparkrt_device_properties again = full_properties(c.get());
    CHECK(again.backend == p.backend);
    CHECK(again.name == p.name);
    C_CHECK_OK(sparkrt_device_close(c.release()));
  }
}

namespace {

// sparkrt_device_properties_get into a canary-filled buffer whose struct_size
// is `size`: what came back, and how many bytes from `from` on were written.
struct CanaryCall {
  static constexpr uint8_t kCanary = 0xa5;
  static constexpr size_t kBuffer = sizeof(sparkrt_device_properties) + 64;
  alignas(sparkrt_device_properties) unsigned char buf[kBuffer];
  CStatus status;

  CanaryCall(sparkrt_device* dev, size_t size) {
    std::memset(buf, kCanary, sizeof buf);
    std::memcpy(buf, &size, sizeof size);
    status.reset(
        sparkrt_device_properties_get(dev, reinterpret_cast<sparkrt_device_properties*>(buf)));
  }
  sparkrt_device_properties got() const {
    sparkrt_device_properties p;
    std::memcpy(&p, buf, sizeof p);
    return p;
  }
  size_t written_from(size_t from) const {
    size_t n = 0;
    for (size_t i = from; i < sizeof buf; ++i) n += buf[i] != kCanary;
    return n;
  }
};

}  // namespace

TEST_CASE("capi device: properties for an older, a newer and a malformed caller") {
  auto dev = open_c("mock");
  const sparkrt_device_properties full = full_properties(dev.get());

  SUBCASE("an older caller: fields up to struct_size written, the bytes after it untouched") {
    // A caller that knows the fields up to `index` only.
    const size_t older = offsetof(sparkrt_device_properties, index) + sizeof(int32_t);
    const CanaryCall call(dev.get(), older);
    REQUIRE_MESSAGE(call.status == nullptr, describe(call.status.get()));
    const sparkrt_device_properties got = call.got();
    CHECK(got.struct_size == older);
    CHECK(got.backend == full.backend);
    CHECK(got.plugin_path == full.plugin_path);
    CHECK(got.name == full.name);
    CHECK(got.driver == full.driver);
    CHECK(got.index == full.index);
    CHECK(call.written_from(older) == 0);
  }
  SUBCASE("a 1.0 caller: everything up to has_collectives, not the launch attributes") {
    static_assert(SPARKRT_C_DEVICE_PROPERTIES_SIZE_1_0 <=
                  offsetof(sparkrt_device_properties, supports_dependent_launch));
    REQUIRE(full.supports_clusters == 1);  // so a written byte would differ from the canary
    REQUIRE(full.max_cluster_size == 8);
    const size_t old_size = SPARKRT_C_DEVICE_PROPERTIES_SIZE_1_0;
    const CanaryCall call(dev.get(), old_size);
    REQUIRE_MESSAGE(call.status == nullptr, describe(call.status.get()));
    const sparkrt_device_properties got = call.got();
    CHECK(got.struct_size == old_size);
    CHECK(got.name == full.name);
    CHECK(got.max_shared_memory_per_block_optin == full.max_shared_memory_per_block_optin);
    CHECK(got.emulated == full.emulated);
    CHECK(got.has_graphs == full.has_graphs);
    CHECK(got.has_collectives == full.has_collectives);
    CHECK(call.written_from(old_size) == 0);
  }
  SUBCASE("a caller that stops inside the attributes: filled up to its size") {
    const size_t partial = offsetof(sparkrt_device_properties, supports_clusters) + 1;
    const CanaryCall call(dev.get(), partial);
    REQUIRE_MESSAGE(call.status == nullptr, describe(call.status.get()));
    CHECK(call.buf[offsetof(sparkrt_device_properties, supports_dependent_launch)] ==
          full.supports_dependent_launch);
    CHECK(call.buf[offsetof(sparkrt_device_properties, supports_clusters)] ==
          full.supports_clusters);
    CHECK(call.written_from(partial) == 0);
  }
  SUBCASE("a newer caller: every field written, nothing past the library's struct") {
    const CanaryCall call(dev.get(), CanaryCall::kBuffer);
    REQUIRE_MESSAGE(call.status == nullptr, describe(call.status.get()));
    const sparkrt_device_properties got = call.got();
    CHECK(got.struct_size == CanaryCall::kBuffer);
    CHECK(got.backend == full.backend);
    CHECK(got.max_grid_dim[2] == full.max_grid_dim[2]);
    CHECK(got.has_graphs == full.has_graphs);
    CHECK(got.has_collectives == full.has_collectives);
    CHECK(got.supports_dependent_launch == full.supports_dependent_launch);
    CHECK(got.supports_clusters == full.supports_clusters);
    CHECK(got.max_cluster_size == full.max_cluster_size);
    CHECK(call.written_from(sizeof(sparkrt_device_properties)) == 0);
  }
  SUBCASE("a struct_size that does not reach the first field: INVALID_ARGUMENT, nothing written") {
    for (size_t size : {size_t{0}, sizeof(size_t), sizeof(size_t) + 4}) {
      INFO("struct_size ", size);
      const CanaryCall call(dev.get(), size);
      CHECK_MESSAGE(sparkrt_status_code(call.status.get()) == SPARKRT_INVALID_ARGUMENT,
                    describe(call.status.get()));
      CHECK(std::string(sparkrt_status_message(call.status.get())).find("struct_size") !=
            std::string::npos);
      CHECK(call.written_from(sizeof(size_t)) == 0);
    }
  }
}

TEST_CASE("capi device: auto opens what C++ auto opens, never the mock") {
  sparkrt_open_options o{};
  o.struct_size = SPARKRT_C_OPEN_OPTIONS_SIZE;
  o.backend = "auto";
  o.device_index = 0;
  sparkrt_device* dev = nullptr;
  const CStatus s(sparkrt_device_open(&o, &dev));
  auto cpp = sparkrt::Device::open({.backend = "auto", .device_index = 0});
  if (!cpp.ok()) {
    check_same(s.get(), cpp.status());
    CHECK(dev == nullptr);
    return;
  }
  REQUIRE_MESSAGE(s == nullptr, describe(s.get()));
  capitest::CDevice owned(dev);
  const sparkrt_device_properties p = full_properties(dev);
  CHECK(str(p.backend) != "mock");
  CHECK(str(p.backend) == (*cpp)->backend_name());
  CHECK(str(p.plugin_path) == (*cpp)->plugin_path());
}

TEST_CASE("capi device: a bad name, a bad index and a missing plugin fail as in C++") {
  for (const char* backend : {"no_such_backend", "/no/such/plugin.so"}) {
    INFO("backend ", std::string(backend));
    sparkrt_open_options o{};
    o.struct_size = SPARKRT_C_OPEN_OPTIONS_SIZE;
    o.backend = backend;
    o.device_index = 0;
    sparkrt_device* dev =
        reinterpret_cast<sparkrt_device*>(uintptr_t{0x1});  // untouched on failure
    const CStatus s(sparkrt_device_open(&o, &dev));
    REQUIRE(s != nullptr);
    const int32_t code = sparkrt_status_code(s.get());
    CHECK_MESSAGE((code == SPARKRT_NOT_FOUND || code == SPARKRT_INVALID_ARGUMENT),
                  describe(s.get()));
    CHECK_MESSAGE(std::string(sparkrt_status_message(s.get())).find(backend) != std::string::npos,
                  describe(s.get()));
    CHECK(dev == reinterpret_cast<sparkrt_device*>(uintptr_t{0x1}));
    check_same(s.get(), sparkrt::Device::open({.backend = backend, .device_index = 0}).status());
  }
  sparkrt_open_options o{};
  o.struct_size = SPARKRT_C_OPEN_OPTIONS_SIZE;
  o.backend = "mock";
  o.device_index = 999;
  sparkrt_device* dev = nullptr;
  const CStatus s(sparkrt_device_open(&o, &dev));
  REQUIRE(s != nullptr);
  CHECK(dev == nullptr);
  check_same(s.get(), sparkrt::Device::open({.backend = "mock", .device_index = 999}).status());
}

TEST_CASE("capi device: a path to the mock's plugin file opens the mock") {
  std::string path;
  {
    auto mock = open_c("mock");
    path = str(full_properties(mock.get()).plugin_path);
  }
  CHECK(path.find("libsparkrt_backend_mock") != std::string::npos);
  auto by_path = open_c(path.c_str());
  const sparkrt_device_properties p = full_properties(by_path.get());
  CHECK(str(p.backend) == "mock");
  CHECK(str(p.plugin_path) == path);
  CHECK(sparkrt_device_extension(by_path.get(), SPARKRT_MOCK_EXTENSION_NAME) != nullptr);
}

TEST_CASE(
    "capi device: NULL options and an empty backend follow SPARKRT_BACKEND and SPARKRT_DEVICE") {
  REQUIRE(setenv("SPARKRT_BACKEND", "mock", 1) == 0);
  REQUIRE(setenv("SPARKRT_DEVICE", "2", 1) == 0);
  sparkrt_device* dev = nullptr;
  const CStatus s(sparkrt_device_open(nullptr, &dev));
  REQUIRE_MESSAGE(s == nullptr, describe(s.get()));
  capitest::CDevice owned(dev);
  const sparkrt_device_properties p = full_properties(dev);
  CHECK(str(p.backend) == "mock");
  CHECK(p.index == 2);

  sparkrt_open_options o{};
  o.struct_size = SPARKRT_C_OPEN_OPTIONS_SIZE;
  o.backend = "";
  o.device_index = -1;
  sparkrt_device* dev2 = nullptr;
  const CStatus s2(sparkrt_device_open(&o, &dev2));
  REQUIRE_MESSAGE(s2 == nullptr, describe(s2.get()));
  capitest::CDevice owned2(dev2);
  CHECK(str(full_properties(dev2).backend) == "mock");
  CHECK(full_properties(dev2).index == 2);

  o.backend = nullptr;
  o.device_index = 1;  // an explicit index wins over SPARKRT_DEVICE
  sparkrt_device* dev3 = nullptr;
  const CStatus s3(sparkrt_device_open(&o, &dev3));
  REQUIRE_MESSAGE(s3 == nullptr, describe(s3.get()));
  capitest::CDevice owned3(dev3);
  CHECK(str(full_properties(dev3).backend) == "mock");
  CHECK(full_properties(dev3).index == 1);
  unsetenv("SPARKRT_BACKEND");
  unsetenv("SPARKRT_DEVICE");
}

TEST_CASE("capi device: close(NULL) is a no-op, NULL arguments are INVALID_ARGUMENT") {
  CHECK(sparkrt_device_close(nullptr) == nullptr);
  sparkrt_open_options o{};
  o.struct_size = SPARKRT_C_OPEN_OPTIONS_SIZE;
  o.backend = "mock";
  o.device_index = 0;
  C_CHECK_CODE(sparkrt_device_open(&o, nullptr), SPARKRT_INVALID_ARGUMENT);
  sparkrt_open_options small = o;
  small.struct_size = 0;
  sparkrt_device* none = nullptr;
  C_CHECK_CODE(sparkrt_device_open(&small, &none), SPARKRT_INVALID_ARGUMENT);
  CHECK(none == nullptr);
  // Refusals name the entry point and the struct (not the lambda inside).
  {
    sparkrt_status* st = sparkrt_device_open(&small, &none);
    CHECK(std::string(sparkrt_status_message(st)) ==
          "sparkrt_device_open: sparkrt_open_options.struct_size is 0, at least " +
              std::to_string(SPARKRT_C_OPEN_OPTIONS_SIZE) +
              " expected; set it to the header's size macro");
    sparkrt_status_free(st);
  }

  auto dev = open_c("mock");
  sparkrt_device_properties p{};
  p.struct_size = SPARKRT_C_DEVICE_PROPERTIES_SIZE;
  C_CHECK_CODE(sparkrt_device_properties_get(nullptr, &p), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_device_properties_get(dev.get(), nullptr), SPARKRT_INVALID_ARGUMENT);
  CHECK(sparkrt_device_extension(nullptr, SPARKRT_MOCK_EXTENSION_NAME) == nullptr);
  CHECK(sparkrt_device_extension(dev.get(), nullptr) == nullptr);
  CHECK(sparkrt_device_extension(dev.get(), "no.such.extension") == nullptr);
  CHECK(sparkrt_device_native_handle(nullptr) == nullptr);
  CHECK(sparkrt_device_native_handle(dev.get()) != nullptr);

  SparkrtDevicePtr ptr = 0;
  C_CHECK_CODE(sparkrt_alloc(nullptr, 16, &ptr), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_alloc(dev.get(), 16, nullptr), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_free(nullptr, 0x1000), SPARKRT_INVALID_ARGUMENT);
  void* host = nullptr;
  C_CHECK_CODE(sparkrt_alloc_host(nullptr, 16, &host), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_alloc_host(dev.get(), 16, nullptr), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_memset(nullptr, 0, 0, 16), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_copy_h2d(nullptr, &ptr, 0, 8), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_copy_d2h(nullptr, 0, &ptr, 8), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_copy_d2d(nullptr, 0, 0, 8), SPARKRT_INVALID_ARGUMENT);
  SparkrtStream stream = 0;
  C_CHECK_CODE(sparkrt_stream_create(nullptr, &stream), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_stream_create(dev.get(), nullptr), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_stream_synchronize(nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  SparkrtEvent event = 0;
  C_CHECK_CODE(sparkrt_event_create(nullptr, &event), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_event_create(dev.get(), nullptr), SPARKRT_INVALID_ARGUMENT);
  float ms = 0;
  C_CHECK_CODE(sparkrt_event_elapsed_ms(dev.get(), 1, 2, nullptr), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_event_elapsed_ms(nullptr, 1, 2, &ms), SPARKRT_INVALID_ARGUMENT);
  sparkrt_kernel* k = nullptr;
  C_CHECK_CODE(sparkrt_kernel_get(nullptr, "vector_ops", "vector_add_f32", &k),
               SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_kernel_get(dev.get(), nullptr, "vector_add_f32", &k),
               SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_kernel_get(dev.get(), "vector_ops", nullptr, &k), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_kernel_get(dev.get(), "vector_ops", "vector_add_f32", nullptr),
               SPARKRT_INVALID_ARGUMENT);
  CHECK(k == nullptr);
  C_CHECK_CODE(sparkrt_graph_begin_capture(nullptr, 1), SPARKRT_INVALID_ARGUMENT);
  const char* lib = nullptr;
  C_CHECK_CODE(sparkrt_comm_library(nullptr, &lib), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_comm_library(dev.get(), nullptr), SPARKRT_INVALID_ARGUMENT);
}

TEST_CASE("capi memory: alloc, copies round trip, memset, alloc(0) refused, host memory") {
  for (const char* backend : kHostBackends) {
    const uint64_t seed = sparkrt::testing::fresh_seed();
    INFO("backend ", std::string(backend), ", seed ", seed);
    std::mt19937_64 gen(seed);
    auto dev = open_c(backend);
    auto cpp = open_cpp(backend);

    SparkrtDevicePtr zero = 0x1234;
    const CStatus refused(sparkrt_alloc(dev.get(), 0, &zero));
    check_same(refused.get(), cpp->alloc(0).status());
    CHECK(sparkrt_status_code(refused.get()) == SPARKRT_INVALID_ARGUMENT);
    CHECK(zero == 0x1234);  // out parameter untouched on failure

    constexpr size_t kBytes = 4099;  // not a multiple of any vector width
    const SparkrtDevicePtr a = capitest::c_alloc(dev.get(), kBytes);
    const SparkrtDevicePtr b = capitest::c_alloc(dev.get(), kBytes);
    CHECK(a % 256 == 0);
    CHECK(b % 256 == 0);
    CHECK(a != b);
    const std::vector<uint8_t> data = sparkrt::testing::random_bytes(gen, kBytes);
    C_REQUIRE_OK(sparkrt_copy_h2d(dev.get(), data.data(), a, kBytes));
    C_REQUIRE_OK(sparkrt_copy_d2d(dev.get(), a, b, kBytes));
    std::vector<uint8_t> back(kBytes, 0);
    C_REQUIRE_OK(sparkrt_copy_d2h(dev.get(), b, back.data(), kBytes));
    CHECK(back == data);

    // memset of a middle range; the bytes around it keep the data.
    const uint8_t value = static_cast<uint8_t>(1 + gen() % 255);
    C_REQUIRE_OK(sparkrt_memset(dev.get(), b + 100, value, 1000));
    C_REQUIRE_OK(sparkrt_copy_d2h(dev.get(), b, back.data(), kBytes));
    std::vector<uint8_t> want = data;
    std::memset(want.data() + 100, value, 1000);
    CHECK(back == want);

    // An out-of-bounds copy fails as it does in C++ (the message names the
    // device's own addresses, so only the codes compare).
    const CStatus oob(sparkrt_copy_h2d(dev.get(), data.data(), a + 4096, 64));
    auto cpp_a = cpp->alloc(kBytes);
    REQUIRE(cpp_a.ok());
    const absl::Status cpp_oob = cpp->copy_h2d(data.data(), *cpp_a + 4096, 64);
    CHECK_FALSE(cpp_oob.ok());
    CHECK_MESSAGE(sparkrt_status_code(oob.get()) == static_cast<int32_t>(cpp_oob.code()),
                  describe(oob.get()), " vs ", cpp_oob.ToString());

    void* host = nullptr;
    C_REQUIRE_OK(sparkrt_alloc_host(dev.get(), kBytes, &host));
    REQUIRE(host != nullptr);
    std::memcpy(host, data.data(), kBytes);  // writable host memory
    C_CHECK_OK(sparkrt_free_host(dev.get(), host));

    C_CHECK_OK(sparkrt_free(dev.get(), a));
    C_CHECK_OK(sparkrt_free(dev.get(), b));
    C_CHECK_OK(sparkrt_device_close(dev.release()));
  }
}

TEST_CASE("capi memory: use after free and double free on the mock fail as in C++") {
  auto dev = open_c("mock");
  auto cpp = open_cpp("mock");
  const SparkrtDevicePtr p = capitest::c_alloc(dev.get(), 512);
  auto q = cpp->alloc(512);
  REQUIRE(q.ok());
  C_REQUIRE_OK(sparkrt_free(dev.get(), p));
  REQUIRE(cpp->free(*q).ok());
  uint8_t byte = 7;
  const CStatus use(sparkrt_copy_h2d(dev.get(), &byte, p, 1));
  const absl::Status cpp_use = cpp->copy_h2d(&byte, *q, 1);
  REQUIRE(use != nullptr);
  CHECK_FALSE(cpp_use.ok());
  CHECK(sparkrt_status_code(use.get()) == static_cast<int32_t>(cpp_use.code()));
  CHECK_MESSAGE(std::string(sparkrt_status_message(use.get())).find("freed") != std::string::npos,
                describe(use.get()));
  const CStatus twice(sparkrt_free(dev.get(), p));
  const absl::Status cpp_twice = cpp->free(*q);
  REQUIRE(twice != nullptr);
  CHECK(sparkrt_status_code(twice.get()) == static_cast<int32_t>(cpp_twice.code()));
  const CStatus memset_freed(sparkrt_memset(dev.get(), p, 0, 1));
  CHECK(memset_freed != nullptr);
}

TEST_CASE("capi streams: async copies and memsets on a created stream, events, elapsed time") {
  for (const char* backend : kHostBackends) {
    const uint64_t seed = sparkrt::testing::fresh_seed();
    INFO("backend ", std::string(backend), ", seed ", seed);
    std::mt19937_64 gen(seed);
    auto dev = open_c(backend);
    const SparkrtStream s = capitest::c_stream(dev.get());
    const SparkrtStream t = capitest::c_stream(dev.get());
    CHECK(s != t);
    SparkrtEvent start = 0, done = 0;
    C_REQUIRE_OK(sparkrt_event_create(dev.get(), &start));
    C_REQUIRE_OK(sparkrt_event_create(dev.get(), &done));
    CHECK(start != done);

    constexpr size_t kBytes = 1 << 16;
    void* host_in = nullptr;
    void* host_out = nullptr;
    C_REQUIRE_OK(sparkrt_alloc_host(dev.get(), kBytes, &host_in));
    C_REQUIRE_OK(sparkrt_alloc_host(dev.get(), kBytes, &host_out));
    const std::vector<uint8_t> data = sparkrt::testing::random_bytes(gen, kBytes);
    std::memcpy(host_in, data.data(), kBytes);
    std::memset(host_out, 0, kBytes);
    const SparkrtDevicePtr a = capitest::c_alloc(dev.get(), kBytes);
    const SparkrtDevicePtr b = capitest::c_alloc(dev.get(), kBytes);

    C_REQUIRE_OK(sparkrt_event_record(dev.get(), start, s));
    C_REQUIRE_OK(sparkrt_copy_h2d_async(dev.get(), host_in, a, kBytes, s));
    C_REQUIRE_OK(sparkrt_copy_d2d_async(dev.get(), a, b, kBytes, s));
    C_REQUIRE_OK(sparkrt_memset_async(dev.get(), b, 0x3c, 256, s));
    C_REQUIRE_OK(sparkrt_event_record(dev.get(), done, s));
    // The second stream reads b only after the first stream's work.
    C_REQUIRE_OK(sparkrt_stream_wait_event(dev.get(), t, done));
    C_REQUIRE_OK(sparkrt_copy_d2h_async(dev.get(), b, host_out, kBytes, t));
    C_REQUIRE_OK(sparkrt_stream_synchronize(dev.get(), t));
    C_REQUIRE_OK(sparkrt_event_synchronize(dev.get(), done));
    std::vector<uint8_t> want = data;
    std::memset(want.data(), 0x3c, 256);
    CHECK(std::memcmp(host_out, want.data(), kBytes) == 0);

    float ms = -1.0f;
    C_REQUIRE_OK(sparkrt_event_elapsed_ms(dev.get(), start, done, &ms));
    CHECK(ms >= 0.0f);

    C_CHECK_OK(sparkrt_stream_synchronize(dev.get(), 0));
    C_CHECK_OK(sparkrt_event_destroy(dev.get(), start));
    C_CHECK_OK(sparkrt_event_destroy(dev.get(), done));
    C_CHECK_OK(sparkrt_stream_destroy(dev.get(), s));
    C_CHECK_OK(sparkrt_stream_destroy(dev.get(), t));
    // A destroyed stream is refused as in C++.
    const CStatus gone(sparkrt_stream_synchronize(dev.get(), s));
    CHECK(gone != nullptr);
    C_CHECK_OK(sparkrt_free_host(dev.get(), host_in));
    C_CHECK_OK(sparkrt_free_host(dev.get(), host_out));
    // Device memory, streams and events left are freed by close.
    C_CHECK_OK(sparkrt_device_close(dev.release()));
  }
}
