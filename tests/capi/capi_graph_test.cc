// Graphs through the C API: a capture of an async copy and a launch on a
// created stream, replayed twice (on cpu against a host computation, on the
// mock against its counters and records), and a backend without graphs.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "capi_test_support.h"

using capitest::CStatus;
using capitest::describe;
using capitest::open_c;

namespace {

std::vector<float> random_floats(std::mt19937_64& gen, size_t n) {
  std::uniform_real_distribution<float> v(-4.0f, 4.0f);
  std::vector<float> out(n);
  for (float& x : out) x = v(gen);
  return out;
}

}  // namespace

TEST_CASE("capi graphs: capture a copy and a launch, replay it twice, destroy it") {
  for (const char* backend : {"mock", "cpu"}) {
    const uint64_t seed = sparkrt::testing::fresh_seed();
    INFO("backend ", std::string(backend), ", seed ", seed);
    std::mt19937_64 gen(seed);
    const bool computes = std::string(backend) == "cpu";
    auto dev = open_c(backend);
    sparkrt_device_properties props{};
    props.struct_size = SPARKRT_C_DEVICE_PROPERTIES_SIZE;
    C_REQUIRE_OK(sparkrt_device_properties_get(dev.get(), &props));
    REQUIRE(props.has_graphs == 1);

    constexpr uint32_t kN = 777;
    const SparkrtStream s = capitest::c_stream(dev.get());
    void* host = nullptr;
    C_REQUIRE_OK(sparkrt_alloc_host(dev.get(), kN * 4, &host));
    const std::vector<float> x1 = random_floats(gen, kN), x2 = random_floats(gen, kN),
                             b = random_floats(gen, kN);
    std::memcpy(host, x1.data(), kN * 4);
    const SparkrtDevicePtr da = capitest::c_alloc(dev.get(), kN * 4);
    const SparkrtDevicePtr db = capitest::c_alloc(dev.get(), kN * 4);
    const SparkrtDevicePtr dout = capitest::c_alloc(dev.get(), kN * 4);
    C_REQUIRE_OK(sparkrt_copy_h2d(dev.get(), b.data(), db, kN * 4));
    C_REQUIRE_OK(sparkrt_memset(dev.get(), da, 0xff, kN * 4));
    C_REQUIRE_OK(sparkrt_memset(dev.get(), dout, 0xff, kN * 4));  // NaN
    sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
    sparkrt_launch_config cfg = capitest::config({(kN + 255) / 256}, {256}, 0, s);
    const sparkrt_arg args[] = {sparkrt_arg_ptr(da), sparkrt_arg_ptr(db), sparkrt_arg_ptr(dout),
                                sparkrt_arg_u32(kN)};

    // The default stream cannot capture.
    C_CHECK_CODE(sparkrt_graph_begin_capture(dev.get(), 0), SPARKRT_INVALID_ARGUMENT);
    // Nor can a stream that was never created.
    C_CHECK_CODE(sparkrt_graph_begin_capture(dev.get(), s + 1000), SPARKRT_INVALID_ARGUMENT);

    C_REQUIRE_OK(sparkrt_graph_begin_capture(dev.get(), s));
    C_REQUIRE_OK(sparkrt_copy_h2d_async(dev.get(), host, da, kN * 4, s));
    C_REQUIRE_OK(sparkrt_launch(add, &cfg, args, 4));
    SparkrtGraph graph = 0;
    uint64_t nodes = 0;
    C_REQUIRE_OK(sparkrt_graph_end_capture(dev.get(), s, &graph, &nodes));
    CHECK(graph != 0);
    CHECK(nodes == 2);
    // Not capturing any more: a second end fails and changes nothing.
    SparkrtGraph again = 0;
    const CStatus twice(sparkrt_graph_end_capture(dev.get(), s, &again, nullptr));
    CHECK(twice != nullptr);
    CHECK(again == 0);

    capitest::CMock* mock = nullptr;
    std::optional<capitest::CMock> mock_storage;
    if (!computes) {
      mock_storage.emplace(dev.get());
      mock = &*mock_storage;
      CHECK(mock->counters().launches == 0);  // recorded, not run
      CHECK(mock->counters().h2d_async == 0);
    }
    std::vector<float> out(kN);
    C_REQUIRE_OK(sparkrt_copy_d2h(dev.get(), dout, out.data(), kN * 4));
    uint32_t first = 0;
    std::memcpy(&first, out.data(), 4);
    CHECK(first == 0xffffffffu);  // the capture ran nothing

    C_REQUIRE_OK(sparkrt_graph_launch(dev.get(), graph, s));
    C_REQUIRE_OK(sparkrt_stream_synchronize(dev.get(), s));
    if (computes) {
      C_REQUIRE_OK(sparkrt_copy_d2h(dev.get(), dout, out.data(), kN * 4));
      size_t bad = 0;
      for (uint32_t i = 0; i < kN; ++i) bad += out[i] != x1[i] + b[i];
      CHECK_MESSAGE(bad == 0, bad, " sums wrong after the first replay");
    }
    // The replay reads the host memory again: new data, same graph, and
    // this time on the default stream.
    std::memcpy(host, x2.data(), kN * 4);
    C_REQUIRE_OK(sparkrt_graph_launch(dev.get(), graph, 0));
    C_REQUIRE_OK(sparkrt_stream_synchronize(dev.get(), 0));
    if (computes) {
      C_REQUIRE_OK(sparkrt_copy_d2h(dev.get(), dout, out.data(), kN * 4));
      size_t bad = 0;
      for (uint32_t i = 0; i < kN; ++i) bad += out[i] != x2[i] + b[i];
      CHECK_MESSAGE(bad == 0, bad, " sums wrong after the second replay");
    } else {
      const auto c = mock->counters();
      CHECK(c.launches == 2);
      CHECK(c.h2d_async == 2);
      const auto launches = mock->launches();
      REQUIRE(launches.size() == 2);
      CHECK(launches[0].stream == sparkrt::Stream{s});
      CHECK(launches[1].stream == sparkrt::Stream{0});
      for (const auto& l : launches) {
        INFO("recorded: ", l);
        CHECK(l.entry == "vector_add_f32");
        REQUIRE(l.args.size() == 4);
        CHECK(l.args[3] == sparkrt::testing::MockArg::of(kN));
      }
      std::vector<float> copied(kN);
      C_REQUIRE_OK(sparkrt_copy_d2h(dev.get(), da, copied.data(), kN * 4));
      CHECK(copied == x2);  // the mock's memory holds real bytes
    }

    C_CHECK_OK(sparkrt_graph_destroy(dev.get(), graph));
    C_CHECK_CODE(sparkrt_graph_launch(dev.get(), graph, s), SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(sparkrt_graph_destroy(dev.get(), graph), SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(sparkrt_graph_end_capture(dev.get(), s, nullptr, nullptr),
                 SPARKRT_INVALID_ARGUMENT);
    C_CHECK_OK(sparkrt_free_host(dev.get(), host));
    // A graph left alive is freed by close.
    C_REQUIRE_OK(sparkrt_graph_begin_capture(dev.get(), s));
    C_REQUIRE_OK(sparkrt_launch(add, &cfg, args, 4));
    C_REQUIRE_OK(sparkrt_graph_end_capture(dev.get(), s, &graph, nullptr));
    C_CHECK_OK(sparkrt_device_close(dev.release()));
  }
}

TEST_CASE("capi graphs: a backend without graphs or collectives says UNIMPLEMENTED") {
  auto dev = open_c(SPARKRT_EXAMPLE_HOST_PLUGIN);
  sparkrt_device_properties props{};
  props.struct_size = SPARKRT_C_DEVICE_PROPERTIES_SIZE;
  C_REQUIRE_OK(sparkrt_device_properties_get(dev.get(), &props));
  CHECK(props.has_graphs == 0);
  const SparkrtStream s = capitest::c_stream(dev.get());
  {
    const CStatus st(sparkrt_graph_begin_capture(dev.get(), s));
    CHECK_MESSAGE(sparkrt_status_code(st.get()) == SPARKRT_UNIMPLEMENTED, describe(st.get()));
    CHECK_MESSAGE(
        std::string(sparkrt_status_message(st.get())).find(props.backend) != std::string::npos,
        describe(st.get()));
  }
  SparkrtGraph graph = 0;
  C_CHECK_CODE(sparkrt_graph_end_capture(dev.get(), s, &graph, nullptr), SPARKRT_UNIMPLEMENTED);
  C_CHECK_CODE(sparkrt_graph_launch(dev.get(), 1, s), SPARKRT_UNIMPLEMENTED);
  C_CHECK_CODE(sparkrt_graph_destroy(dev.get(), 1), SPARKRT_UNIMPLEMENTED);
  // Its kernels still run.
  sparkrt_kernel* fill = capitest::c_kernel(dev.get(), "vector_ops", "fill_u32");
  const SparkrtDevicePtr out = capitest::c_alloc(dev.get(), 64 * 4);
  const sparkrt_launch_config cfg = capitest::config({1}, {64}, 0, s);
  const sparkrt_arg args[] = {sparkrt_arg_ptr(out), sparkrt_arg_u32(0xdeadbeef),
                              sparkrt_arg_u32(64)};
  C_REQUIRE_OK(sparkrt_launch(fill, &cfg, args, 3));
  C_REQUIRE_OK(sparkrt_stream_synchronize(dev.get(), s));
  std::vector<uint32_t> got(64);
  C_REQUIRE_OK(sparkrt_copy_d2h(dev.get(), out, got.data(), 64 * 4));
  CHECK(got == std::vector<uint32_t>(64, 0xdeadbeef));

  if (props.has_collectives == 0) {
    const char* lib = nullptr;
    C_CHECK_CODE(sparkrt_comm_library(dev.get(), &lib), SPARKRT_UNIMPLEMENTED);
    CHECK(lib == nullptr);
  }
}
