// Communicators through the C API on the host backends (mock and cpu, which
// both run the host collectives): a clique made at once and one joined by a
// unique id from two threads, collectives against a host computation on
// random data, groups driven by a C callback, and C++'s refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_support.h"
#include "sparkrt/communicator.h"

using capitest::check_same;
using capitest::CStatus;
using capitest::describe;
using capitest::open_c;
using capitest::open_cpp;

namespace {

constexpr const char* kHostBackends[] = {"mock", "cpu"};
constexpr size_t kCount = 1031;  // odd: no multiple of a vector width

// Two devices of one backend (indices 0 and 1) with a communicator each;
// the communicators are destroyed before their devices are closed.
struct Clique {
  std::vector<capitest::CDevice> devs;
  std::vector<sparkrt_comm*> comms;
  std::vector<SparkrtStream> streams;

  Clique(const char* backend, int n) {
    for (int i = 0; i < n; ++i) devs.push_back(open_c(backend, i));
    std::vector<sparkrt_device*> raw;
    for (auto& d : devs) raw.push_back(d.get());
    comms.assign(n, nullptr);
    C_REQUIRE_OK(sparkrt_comm_create_all(raw.data(), n, comms.data()));
    for (int i = 0; i < n; ++i) {
      REQUIRE(comms[i] != nullptr);
      streams.push_back(capitest::c_stream(devs[i].get()));
    }
  }
  ~Clique() {
    for (sparkrt_comm* c : comms) CHECK_MESSAGE(sparkrt_comm_destroy(c) == nullptr, "comm_destroy");
  }
  Clique(const Clique&) = delete;
  Clique& operator=(const Clique&) = delete;
};

std::vector<float> random_floats(std::mt19937_64& gen, size_t n) {
  std::uniform_real_distribution<float> mag(0.25f, 4.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = neg(gen) ? -mag(gen) : mag(gen);
  return v;
}

SparkrtDevicePtr upload(sparkrt_device* dev, const std::vector<float>& host) {
  const SparkrtDevicePtr p = capitest::c_alloc(dev, host.size() * 4);
  C_REQUIRE_OK(sparkrt_copy_h2d(dev, host.data(), p, host.size() * 4));
  return p;
}
SparkrtDevicePtr poisoned(sparkrt_device* dev, size_t floats) {
  const SparkrtDevicePtr p = capitest::c_alloc(dev, floats * 4);
  C_REQUIRE_OK(sparkrt_memset(dev, p, 0xff, floats * 4));  // NaN
  return p;
}
std::vector<float> download(sparkrt_device* dev, SparkrtDevicePtr p, size_t floats) {
  std::vector<float> v(floats);
  C_REQUIRE_OK(sparkrt_copy_d2h(dev, p, v.data(), floats * 4));
  return v;
}

// What the group callback issues: every rank's part of each collective.
struct Work {
  Clique* clique;
  std::vector<SparkrtDevicePtr> in, in2x, reduced, gathered, scattered, broadcast, received;
};

sparkrt_status* issue_all(void* user_data) {
  auto& w = *static_cast<Work*>(user_data);
  for (size_t r = 0; r < w.clique->comms.size(); ++r) {
    sparkrt_comm* c = w.clique->comms[r];
    const SparkrtStream s = w.clique->streams[r];
    if (sparkrt_status* e = sparkrt_all_reduce(c, w.in[r], w.reduced[r], kCount, SPARKRT_DTYPE_F32,
                                               SPARKRT_REDUCE_SUM, s))
      return e;
    if (sparkrt_status* e =
            sparkrt_all_gather(c, w.in[r], w.gathered[r], kCount, SPARKRT_DTYPE_F32, s))
      return e;
    if (sparkrt_status* e = sparkrt_reduce_scatter(c, w.in2x[r], w.scattered[r], kCount,
                                                   SPARKRT_DTYPE_F32, SPARKRT_REDUCE_MAX, s))
      return e;
    if (sparkrt_status* e =
            sparkrt_broadcast(c, w.in[r], w.broadcast[r], kCount, SPARKRT_DTYPE_F32, 1, s))
      return e;
    // Rank 0 sends its input to rank 1.
    sparkrt_status* e = r == 0 ? sparkrt_send(c, w.in[r], kCount, SPARKRT_DTYPE_F32, 1, s)
                               : sparkrt_recv(c, w.received[r], kCount, SPARKRT_DTYPE_F32, 0, s);
    if (e != nullptr) return e;
  }
  return nullptr;
}

sparkrt_status* give_up(void* user_data) {
  ++*static_cast<int*>(user_data);
  return sparkrt_status_new(SPARKRT_ABORTED, "the callback gave up before issuing anything");
}

}  // namespace

TEST_CASE("capi comm: the library is C++'s, on both host backends") {
  for (const char* backend : kHostBackends) {
    INFO("backend ", std::string(backend));
    auto dev = open_c(backend);
    auto cpp = open_cpp(backend);
    const char* lib = nullptr;
    C_REQUIRE_OK(sparkrt_comm_library(dev.get(), &lib));
    REQUIRE(lib != nullptr);
    auto want = sparkrt::Communicator::library(*cpp);
    REQUIRE(want.ok());
    CHECK(std::string(lib) == *want);
    const char* again = nullptr;
    C_REQUIRE_OK(sparkrt_comm_library(dev.get(), &again));
    CHECK(again == lib);  // lives as long as the device
  }
}

TEST_CASE("capi comm: every collective over two devices in one group, against the host") {
  for (const char* backend : kHostBackends) {
    const uint64_t seed = sparkrt::testing::fresh_seed();
    INFO("backend ", std::string(backend), ", seed ", seed);
    std::mt19937_64 gen(seed);
    Clique c(backend, 2);
    for (int r = 0; r < 2; ++r) {
      CHECK(sparkrt_comm_rank(c.comms[r]) == r);
      CHECK(sparkrt_comm_size(c.comms[r]) == 2);
      C_CHECK_OK(sparkrt_comm_status(c.comms[r]));
    }
    std::vector<std::vector<float>> data(2), data2x(2);
    Work w{&c, {}, {}, {}, {}, {}, {}, {}};
    for (int r = 0; r < 2; ++r) {
      sparkrt_device* d = c.devs[r].get();
      data[r] = random_floats(gen, kCount);
      data2x[r] = random_floats(gen, 2 * kCount);
      w.in.push_back(upload(d, data[r]));
      w.in2x.push_back(upload(d, data2x[r]));
      w.reduced.push_back(poisoned(d, kCount));
      w.gathered.push_back(poisoned(d, 2 * kCount));
      w.scattered.push_back(poisoned(d, kCount));
      w.broadcast.push_back(poisoned(d, kCount));
      w.received.push_back(poisoned(d, kCount));
    }
    C_REQUIRE_OK(sparkrt_comm_group(c.devs[0].get(), &issue_all, &w));
    for (int r = 0; r < 2; ++r)
      C_REQUIRE_OK(sparkrt_stream_synchronize(c.devs[r].get(), c.streams[r]));

    for (int r = 0; r < 2; ++r) {
      INFO("rank ", r);
      sparkrt_device* d = c.devs[r].get();
      const auto reduced = download(d, w.reduced[r], kCount);
      const auto gathered = download(d, w.gathered[r], 2 * kCount);
      const auto scattered = download(d, w.scattered[r], kCount);
      const auto broadcast = download(d, w.broadcast[r], kCount);
      size_t bad_sum = 0, bad_gather = 0, bad_scatter = 0;
      for (size_t i = 0; i < kCount; ++i) {
        // One f32 addition of two values: exact in either order.
        bad_sum += reduced[i] != data[0][i] + data[1][i];
        bad_gather += gathered[i] != data[0][i] || gathered[kCount + i] != data[1][i];
        const size_t at = r * kCount + i;
        bad_scatter += scattered[i] != std::max(data2x[0][at], data2x[1][at]);
      }
      CHECK_MESSAGE(bad_sum == 0, bad_sum, " all-reduce sums wrong");
      CHECK_MESSAGE(bad_gather == 0, bad_gather, " all-gather elements wrong");
      CHECK_MESSAGE(bad_scatter == 0, bad_scatter, " reduce-scatter maxima wrong");
      CHECK(broadcast == data[1]);
    }
    CHECK(download(c.devs[1].get(), w.received[1], kCount) == data[0]);
  }
}

TEST_CASE("capi comm: a group callback's error comes back as it was made") {
  for (const char* backend : kHostBackends) {
    INFO("backend ", std::string(backend));
    Clique c(backend, 2);
    int calls = 0;
    const CStatus s(sparkrt_comm_group(c.devs[0].get(), &give_up, &calls));
    CHECK(calls == 1);
    CHECK(sparkrt_status_code(s.get()) == SPARKRT_ABORTED);
    CHECK(std::string(sparkrt_status_message(s.get())) ==
          "the callback gave up before issuing anything");
    // The group ended: the communicators still work.
    const std::vector<float> one(kCount, 1.0f);
    Work w{&c, {}, {}, {}, {}, {}, {}, {}};
    for (int r = 0; r < 2; ++r) {
      sparkrt_device* d = c.devs[r].get();
      w.in.push_back(upload(d, one));
      w.in2x.push_back(upload(d, std::vector<float>(2 * kCount, 1.0f)));
      w.reduced.push_back(poisoned(d, kCount));
      w.gathered.push_back(poisoned(d, 2 * kCount));
      w.scattered.push_back(poisoned(d, kCount));
      w.broadcast.push_back(poisoned(d, kCount));
      w.received.push_back(poisoned(d, kCount));
    }
    C_REQUIRE_OK(sparkrt_comm_group(c.devs[0].get(), &issue_all, &w));
    for (int r = 0; r < 2; ++r)
      C_REQUIRE_OK(sparkrt_stream_synchronize(c.devs[r].get(), c.streams[r]));
    CHECK(download(c.devs[1].get(), w.reduced[1], kCount) == std::vector<float>(kCount, 2.0f));
    C_CHECK_CODE(sparkrt_comm_group(c.devs[0].get(), nullptr, nullptr), SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(sparkrt_comm_group(nullptr, &give_up, &calls), SPARKRT_INVALID_ARGUMENT);
    CHECK(calls == 1);
  }
}

TEST_CASE("capi comm: two ranks joined by a unique id, a thread each") {
  for (const char* backend : kHostBackends) {
    const uint64_t seed = sparkrt::testing::fresh_seed();
    INFO("backend ", std::string(backend), ", seed ", seed);
    std::mt19937_64 gen(seed);
    auto d0 = open_c(backend, 0);
    auto d1 = open_c(backend, 1);
    sparkrt_device* devs[2] = {d0.get(), d1.get()};
    SparkrtUniqueId id;
    std::memset(&id, 0, sizeof id);
    C_REQUIRE_OK(sparkrt_comm_unique_id(d0.get(), &id));
    size_t nonzero = 0;
    for (uint8_t b : id.bytes) nonzero += b != 0;
    CHECK(nonzero > 0);

    const std::vector<float> data[2] = {random_floats(gen, kCount), random_floats(gen, kCount)};
    SparkrtDevicePtr in[2], out[2];
    for (int r = 0; r < 2; ++r) {
      in[r] = upload(devs[r], data[r]);
      out[r] = poisoned(devs[r], kCount);
    }
    // Each thread joins, reduces and leaves; REQUIRE stays on this thread.
    std::string errors[2];
    const auto rank = [&](int r) {
      sparkrt_comm* comm = nullptr;
      CStatus s(sparkrt_comm_create_rank(devs[r], 2, r, &id, &comm));
      if (s == nullptr)
        s.reset(sparkrt_all_reduce(comm, in[r], out[r], kCount, SPARKRT_DTYPE_F32,
                                   SPARKRT_REDUCE_SUM, 0));
      if (s == nullptr) s.reset(sparkrt_stream_synchronize(devs[r], 0));
      if (s == nullptr && (sparkrt_comm_rank(comm) != r || sparkrt_comm_size(comm) != 2))
        s.reset(sparkrt_status_new(SPARKRT_INTERNAL, "rank or size wrong"));
      if (CStatus d{sparkrt_comm_destroy(comm)}; s == nullptr && d != nullptr) s = std::move(d);
      if (s != nullptr) errors[r] = describe(s.get());
    };
    std::thread t0(rank, 0), t1(rank, 1);
    t0.join();
    t1.join();
    CHECK_MESSAGE(errors[0].empty(), errors[0]);
    CHECK_MESSAGE(errors[1].empty(), errors[1]);
    for (int r = 0; r < 2; ++r) {
      const auto got = download(devs[r], out[r], kCount);
      size_t bad = 0;
      for (size_t i = 0; i < kCount; ++i) bad += got[i] != data[0][i] + data[1][i];
      CHECK_MESSAGE(bad == 0, "rank ", r, ": ", bad, " sums wrong");
    }
  }
}

TEST_CASE("capi comm: one device, and C++'s refusals with C++'s messages") {
  for (const char* backend : kHostBackends) {
    INFO("backend ", std::string(backend));
    {  // A clique of one: all-reduce copies.
      Clique one(backend, 1);
      const std::vector<float> v = {1.5f, -2.0f, 3.25f};
      const SparkrtDevicePtr in = upload(one.devs[0].get(), v);
      const SparkrtDevicePtr out = poisoned(one.devs[0].get(), 3);
      C_REQUIRE_OK(
          sparkrt_all_reduce(one.comms[0], in, out, 3, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0));
      C_REQUIRE_OK(sparkrt_stream_synchronize(one.devs[0].get(), 0));
      CHECK(download(one.devs[0].get(), out, 3) == v);
    }

    Clique c(backend, 2);
    auto p0 = open_cpp(backend, 0);
    auto p1 = open_cpp(backend, 1);
    std::vector<sparkrt::Device*> cpp_devs = {p0.get(), p1.get()};
    auto cpp = sparkrt::Communicator::create_all(cpp_devs);
    REQUIRE(cpp.ok());
    sparkrt::Communicator& rank0 = *(*cpp)[0];
    const SparkrtDevicePtr buf = capitest::c_alloc(c.devs[0].get(), kCount * 8);
    auto cpp_buf = p0->alloc(kCount * 8);
    REQUIRE(cpp_buf.ok());

    // Every refusal below happens before the call reaches the other rank.
    check_same(CStatus(sparkrt_all_reduce(c.comms[0], buf, buf, kCount,
                                          static_cast<SparkrtDataType>(99), SPARKRT_REDUCE_SUM, 0))
                   .get(),
               rank0.all_reduce(*cpp_buf, *cpp_buf, kCount, static_cast<sparkrt::DataType>(99),
                                sparkrt::ReduceOp::kSum));
    check_same(CStatus(sparkrt_all_gather(c.comms[0], buf, buf, kCount,
                                          static_cast<SparkrtDataType>(0), 0))
                   .get(),
               rank0.all_gather(*cpp_buf, *cpp_buf, kCount, static_cast<sparkrt::DataType>(0)));
    check_same(CStatus(sparkrt_all_reduce(c.comms[0], buf, buf, kCount, SPARKRT_DTYPE_F32,
                                          static_cast<SparkrtReduceOp>(7), 0))
                   .get(),
               rank0.all_reduce(*cpp_buf, *cpp_buf, kCount, sparkrt::DataType::kF32,
                                static_cast<sparkrt::ReduceOp>(7)));
    check_same(
        CStatus(sparkrt_broadcast(c.comms[0], buf, buf, kCount, SPARKRT_DTYPE_F32, 2, 0)).get(),
        rank0.broadcast(*cpp_buf, *cpp_buf, kCount, sparkrt::DataType::kF32, 2));
    check_same(CStatus(sparkrt_send(c.comms[0], buf, kCount, SPARKRT_DTYPE_F32, -1, 0)).get(),
               rank0.send(*cpp_buf, kCount, sparkrt::DataType::kF32, -1));
    check_same(CStatus(sparkrt_all_reduce(c.comms[0], 0, buf, kCount, SPARKRT_DTYPE_F32,
                                          SPARKRT_REDUCE_SUM, 0))
                   .get(),
               rank0.all_reduce(sparkrt::DevicePtr(), *cpp_buf, kCount, sparkrt::DataType::kF32,
                                sparkrt::ReduceOp::kSum));
    // A type past 255 is refused, not taken for the type it wraps onto.
    for (int64_t type : {261, 256 + SPARKRT_DTYPE_U8, -251}) {
      INFO("type ", type);
      C_CHECK_CODE(sparkrt_all_reduce(c.comms[0], buf, buf, kCount,
                                      static_cast<SparkrtDataType>(type), SPARKRT_REDUCE_SUM, 0),
                   SPARKRT_INVALID_ARGUMENT);
    }
    C_CHECK_CODE(sparkrt_all_reduce(c.comms[0], buf, buf, kCount, SPARKRT_DTYPE_F32,
                                    static_cast<SparkrtReduceOp>(256 + SPARKRT_REDUCE_SUM), 0),
                 SPARKRT_INVALID_ARGUMENT);

    // NULL handles.
    C_CHECK_CODE(sparkrt_all_reduce(nullptr, buf, buf, 1, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0),
                 SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(sparkrt_all_gather(nullptr, buf, buf, 1, SPARKRT_DTYPE_F32, 0),
                 SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(
        sparkrt_reduce_scatter(nullptr, buf, buf, 1, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0),
        SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(sparkrt_broadcast(nullptr, buf, buf, 1, SPARKRT_DTYPE_F32, 0, 0),
                 SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(sparkrt_send(nullptr, buf, 1, SPARKRT_DTYPE_F32, 1, 0), SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(sparkrt_recv(nullptr, buf, 1, SPARKRT_DTYPE_F32, 1, 0), SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(sparkrt_comm_abort(nullptr), SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(sparkrt_comm_status(nullptr), SPARKRT_INVALID_ARGUMENT);
    CHECK(sparkrt_comm_destroy(nullptr) == nullptr);
    SparkrtUniqueId id;
    C_CHECK_CODE(sparkrt_comm_unique_id(nullptr, &id), SPARKRT_INVALID_ARGUMENT);
    C_CHECK_CODE(sparkrt_comm_unique_id(c.devs[0].get(), nullptr), SPARKRT_INVALID_ARGUMENT);
    sparkrt_comm* none = nullptr;
    C_CHECK_CODE(sparkrt_comm_create_rank(c.devs[0].get(), 2, 0, nullptr, &none),
                 SPARKRT_INVALID_ARGUMENT);
    CHECK(none == nullptr);
  }
}

TEST_CASE("capi comm: create_all refuses what C++ refuses") {
  auto m0 = open_c("mock", 0);
  auto m1 = open_c("mock", 1);
  auto cpu = open_c("cpu", 0);
  auto p_m0 = open_cpp("mock", 0);
  auto p_cpu = open_cpp("cpu", 0);
  sparkrt_comm* comms[2] = {nullptr, nullptr};

  sparkrt_device* twice[2] = {m0.get(), m0.get()};
  std::vector<sparkrt::Device*> cpp_twice = {p_m0.get(), p_m0.get()};
  check_same(CStatus(sparkrt_comm_create_all(twice, 2, comms)).get(),
             sparkrt::Communicator::create_all(cpp_twice).status());
  sparkrt_device* mixed[2] = {m1.get(), cpu.get()};
  auto p_m1 = open_cpp("mock", 1);
  std::vector<sparkrt::Device*> cpp_mixed = {p_m1.get(), p_cpu.get()};
  const CStatus mixed_status(sparkrt_comm_create_all(mixed, 2, comms));
  const absl::Status cpp_mixed_status = sparkrt::Communicator::create_all(cpp_mixed).status();
  CHECK_FALSE(cpp_mixed_status.ok());
  check_same(mixed_status.get(), cpp_mixed_status);
  CHECK(comms[0] == nullptr);
  CHECK(comms[1] == nullptr);

  sparkrt_device* ok[1] = {m0.get()};
  C_CHECK_CODE(sparkrt_comm_create_all(ok, 0, comms), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_comm_create_all(ok, -1, comms), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_comm_create_all(nullptr, 1, comms), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_comm_create_all(ok, 1, nullptr), SPARKRT_INVALID_ARGUMENT);
  sparkrt_device* with_null[2] = {m0.get(), nullptr};
  C_CHECK_CODE(sparkrt_comm_create_all(with_null, 2, comms), SPARKRT_INVALID_ARGUMENT);
  CHECK(comms[0] == nullptr);
}

TEST_CASE("capi comm: element sizes of every data type, 0 outside them") {
  CHECK(sparkrt_data_type_size(SPARKRT_DTYPE_U8) == 1);
  CHECK(sparkrt_data_type_size(SPARKRT_DTYPE_I32) == 4);
  CHECK(sparkrt_data_type_size(SPARKRT_DTYPE_F16) == 2);
  CHECK(sparkrt_data_type_size(SPARKRT_DTYPE_BF16) == 2);
  CHECK(sparkrt_data_type_size(SPARKRT_DTYPE_F32) == 4);
  for (int t = SPARKRT_DTYPE_U8; t <= SPARKRT_DTYPE_F32; ++t)
    CHECK(sparkrt_data_type_size(static_cast<SparkrtDataType>(t)) ==
          sparkrt::data_type_size(static_cast<sparkrt::DataType>(t)));
  for (int64_t t : {0, 6, 99, 255, 256 + SPARKRT_DTYPE_F32, -1}) {
    INFO("type ", t);
    CHECK(sparkrt_data_type_size(static_cast<SparkrtDataType>(t)) == 0);
  }
}
