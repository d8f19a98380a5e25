// sparkrt::Communicator on the host backends: every collective on 1 to 4
// devices against a host computation on random data, driven by one thread
// in a group and by a thread per rank; the runtime's own checks; abort.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "sparkrt/communicator.h"
#include "sparkrt/device.h"
#include "sparkrt/numeric.h"
#include "sparkrt/status_macros.h"
#include "status_checks.h"

namespace {

using sparkrt::Communicator;
using sparkrt::DataType;
using sparkrt::Device;
using sparkrt::DevicePtr;
using sparkrt::ReduceOp;
using sparkrt::numeric::bf16_to_f32;
using sparkrt::numeric::f32_to_bf16;

struct Clique {
  std::vector<std::unique_ptr<Device>> owned;
  std::vector<Device*> devices;
  std::vector<std::unique_ptr<Communicator>> comms;
};

Clique open_clique(const char* backend, int n) {
  Clique c;
  for (int i = 0; i < n; ++i) {
    auto d = Device::open({.backend = backend, .device_index = i});
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    c.devices.push_back(d->get());
    c.owned.push_back(*std::move(d));
  }
  auto comms = Communicator::create_all(c.devices);
  REQUIRE_MESSAGE(comms.ok(), comms.status().ToString());
  c.comms = *std::move(comms);
  return c;
}

DevicePtr upload(Device& d, const std::vector<float>& host) {
  auto p = d.alloc(host.size() * 4);
  REQUIRE_OK(p.status());
  REQUIRE_OK(d.copy_h2d(host, *p));
  return *p;
}
DevicePtr poisoned(Device& d, size_t bytes) {
  auto p = d.alloc(bytes);
  REQUIRE_OK(p.status());
  REQUIRE_OK(d.memset(*p, 0xff, bytes));  // f32 NaN
  return *p;
}
std::vector<float> download(Device& d, DevicePtr p, size_t n) {
  std::vector<float> v(n);
  REQUIRE_OK(d.copy_d2h(p, v));
  return v;
}

std::vector<float> random_floats(std::mt19937_64& gen, size_t n) {
  std::uniform_real_distribution<float> mag(0.25f, 4.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = neg(gen) ? -mag(gen) : mag(gen);
  return v;
}

// f32 sums may round differently in another order; one part in 2^20 of the
// magnitudes summed covers any order over four ranks.
void check_close(const std::vector<float>& got, const std::vector<double>& want,
                 const std::vector<double>& magnitude, const char* what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= magnitude[i] * 0x1p-20)) {
      if (bad++ == 0) INFO(what, " element ", i, ": got ", got[i], ", expected ", want[i]);
      CHECK(std::fabs(got[i] - want[i]) <= magnitude[i] * 0x1p-20);
    }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " elements off");
}

void every_collective(const char* backend, int n, bool thread_per_rank) {
  const uint64_t seed = sparkrt::testing::fresh_seed();
  INFO(backend, ", ", n, " ranks, seed ", seed, thread_per_rank ? ", a thread per rank" : ", a group");
  std::mt19937_64 gen(seed);
  Clique c = open_clique(backend, n);
  constexpr size_t kCount = 1031;  // odd: no size is a multiple of a vector width
  const int root = n - 1;

  std::vector<std::vector<float>> data(n);
  for (auto& d : data) d = random_floats(gen, kCount * n);
  struct Buffers {
    DevicePtr in, reduced, gathered, scattered, broadcast, received;
  };
  std::vector<Buffers> b(n);
  for (int r = 0; r < n; ++r) {
    Device& d = *c.devices[r];
    b[r] = {upload(d, data[r]), poisoned(d, kCount * 4), poisoned(d, kCount * n * 4),
            poisoned(d, kCount * 4), poisoned(d, kCount * 4), poisoned(d, kCount * 4)};
  }
  // Streams outlive the group: its calls are issued at the group's end.
  std::vector<sparkrt::Stream> streams(n);
  for (int r = 0; r < n; ++r) {
    auto s = c.devices[r]->create_stream();
    REQUIRE_OK(s.status());
    streams[r] = *s;
  }
  const auto rank_work = [&](int r) -> absl::Status {
    Communicator& comm = *c.comms[r];
    Device& d = *c.devices[r];
    const sparkrt::Stream* stream = &streams[r];
    SPARKRT_RETURN_IF_ERROR(comm.all_reduce(b[r].in, b[r].reduced, kCount, DataType::kF32,
                                            ReduceOp::kSum, *stream));
    SPARKRT_RETURN_IF_ERROR(comm.all_gather(b[r].in, b[r].gathered, kCount, DataType::kF32, *stream));
    SPARKRT_RETURN_IF_ERROR(comm.reduce_scatter(b[r].in, b[r].scattered, kCount, DataType::kF32,
                                                ReduceOp::kMax, *stream));
    SPARKRT_RETURN_IF_ERROR(comm.broadcast(b[r].in, b[r].broadcast, kCount, DataType::kF32, root,
                                           *stream));
    // A ring: send to the next rank, receive from the previous one.
    const auto ring = [&]() -> absl::Status {
      SPARKRT_RETURN_IF_ERROR(comm.send(b[r].in, kCount, DataType::kF32, (r + 1) % n, *stream));
      return comm.recv(b[r].received, kCount, DataType::kF32, (r + n - 1) % n, *stream);
    };
    // Send and receive of one rank go in a group, or the first waits forever.
    return Communicator::group(d, ring);
  };
  if (thread_per_rank) {
    std::vector<absl::Status> status(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { status[r] = rank_work(r); });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) CHECK_MESSAGE(status[r].ok(), "rank ", r, ": ", status[r].ToString());
  } else {
    // One thread for every rank: everything in one group, issued at its end.
    // (Nested groups: each rank's ring is a group inside this one.)
    CHECK_OK(Communicator::group(*c.devices[0], [&]() -> absl::Status {
      for (int r = 0; r < n; ++r) SPARKRT_RETURN_IF_ERROR(rank_work(r));
      return absl::OkStatus();
    }));
  }
  for (int r = 0; r < n; ++r) {
    CHECK_OK(c.devices[r]->synchronize(streams[r]));
    CHECK_OK(c.devices[r]->destroy_stream(streams[r]));
  }

  std::vector<double> sum(kCount), magnitude(kCount);
  for (size_t i = 0; i < kCount; ++i)
    for (int r = 0; r < n; ++r) {
      sum[i] += data[r][i];
      magnitude[i] += std::fabs(data[r][i]);
    }
  for (int r = 0; r < n; ++r) {
    INFO("rank ", r);
    Device& d = *c.devices[r];
    check_close(download(d, b[r].reduced, kCount), sum, magnitude, "all_reduce sum");
    std::vector<float> gathered = download(d, b[r].gathered, kCount * n);
    for (int q = 0; q < n; ++q)
      CHECK(std::equal(data[q].begin(), data[q].begin() + kCount, gathered.begin() + q * kCount));
    std::vector<float> max_block(kCount, -INFINITY);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < kCount; ++i)
        max_block[i] = std::max(max_block[i], data[q][r * kCount + i]);
    CHECK(download(d, b[r].scattered, kCount) == max_block);
    const std::vector<float> from_root(data[root].begin(), data[root].begin() + kCount);
    CHECK(download(d, b[r].broadcast, kCount) == from_root);
    const int prev = (r + n - 1) % n;
    CHECK(download(d, b[r].received, kCount) ==
          std::vector<float>(data[prev].begin(), data[prev].begin() + kCount));
  }
}

}  // namespace

TEST_CASE("collectives: every collective on cpu and mock, 1 to 4 ranks, against the host") {
  for (const char* backend : {"cpu", "mock"})
    for (int n = 1; n <= 4; ++n) {
      every_collective(backend, n, /*thread_per_rank=*/false);
      every_collective(backend, n, /*thread_per_rank=*/true);
    }
}

TEST_CASE("collectives: bf16 all-reduce rounds the f32 sum once") {
  const uint64_t seed = sparkrt::testing::fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  constexpr int n = 3;
  constexpr size_t kCount = 777;
  Clique c = open_clique("cpu", n);
  std::vector<std::vector<uint16_t>> data(n, std::vector<uint16_t>(kCount));
  std::vector<DevicePtr> in(n), out(n);
  for (int r = 0; r < n; ++r) {
    for (auto& x : data[r]) x = f32_to_bf16(random_floats(gen, 1)[0]);
    auto p = c.devices[r]->alloc(kCount * 2);
    REQUIRE_OK(p.status());
    in[r] = *p;
    REQUIRE_OK(c.devices[r]->copy_h2d(data[r], in[r]));
    out[r] = poisoned(*c.devices[r], kCount * 2);
  }
  CHECK_OK(Communicator::group(*c.devices[0], [&]() -> absl::Status {
    for (int r = 0; r < n; ++r)
      SPARKRT_RETURN_IF_ERROR(c.comms[r]->all_reduce(in[r], out[r], kCount, DataType::kBF16,
                                                     ReduceOp::kSum));
    return absl::OkStatus();
  }));
  for (int r = 0; r < n; ++r) {
    std::vector<uint16_t> got(kCount);
    REQUIRE_OK(c.devices[r]->copy_d2h(out[r], got));
    for (size_t i = 0; i < kCount; ++i) {
      // bf16 values have 8 significant bits: three of them sum exactly in f32.
      float want = 0;
      for (int q = 0; q < n; ++q) want += bf16_to_f32(data[q][i]);
      REQUIRE(got[i] == f32_to_bf16(want));
    }
  }
}

TEST_CASE("collectives: the runtime refuses what it can check, naming it") {
  Clique c = open_clique("cpu", 2);
  Communicator& comm = *c.comms[0];
  auto buf = c.devices[0]->alloc(4096);
  REQUIRE_OK(buf.status());
  const auto refused = [](const absl::Status& s, absl::StatusCode code, const char* text) {
    CHECK(s.code() == code);
    CHECK_MESSAGE(sparkrt::testing::contains(s, text), s.ToString());
  };
  using absl::StatusCode;
  refused(comm.all_reduce(DevicePtr(), *buf, 16, DataType::kF32, ReduceOp::kSum),
          StatusCode::kInvalidArgument, "send buffer is null");
  refused(comm.all_gather(*buf, DevicePtr(), 16, DataType::kF32), StatusCode::kInvalidArgument,
          "receive buffer is null");
  refused(comm.broadcast(*buf, *buf, 16, DataType::kF32, 2), StatusCode::kInvalidArgument,
          "root 2 is not a rank");
  refused(comm.send(*buf, 16, DataType::kF32, -1), StatusCode::kInvalidArgument, "peer -1");
  refused(comm.all_reduce(*buf, *buf, 16, static_cast<DataType>(42), ReduceOp::kSum),
          StatusCode::kInvalidArgument, "data type 42");
  refused(comm.all_reduce(*buf, *buf, 16, DataType::kF32, static_cast<ReduceOp>(9)),
          StatusCode::kInvalidArgument, "reduce op 9");
  refused(comm.all_gather(*buf, *buf, ~size_t{0} / 2, DataType::kF32),
          StatusCode::kInvalidArgument, "overflow");

  // Devices of two backends, and one device twice.
  auto mock = Device::open({.backend = "mock", .device_index = 0});
  REQUIRE_OK(mock.status());
  std::vector<Device*> mixed = {c.devices[1], mock->get()};
  refused(Communicator::create_all(mixed).status(), StatusCode::kInvalidArgument,
          "one backend");
  std::vector<Device*> twice = {c.devices[0], c.devices[0]};
  refused(Communicator::create_all(twice).status(), StatusCode::kInvalidArgument,
          "the same device");
  refused(Communicator::create_all({}).status(), StatusCode::kInvalidArgument, "no devices");
  refused(Communicator::create_rank(*c.devices[0], 2, 2, sparkrt::UniqueId{}).status(),
          StatusCode::kInvalidArgument, "rank 2 of 2");

  // A destroyed communicator refuses everything but another destroy.
  CHECK_OK(comm.destroy());
  refused(comm.all_reduce(*buf, *buf, 16, DataType::kF32, ReduceOp::kSum),
          StatusCode::kFailedPrecondition, "destroyed");
  refused(comm.abort(), StatusCode::kFailedPrecondition, "destroyed");
  CHECK_OK(comm.destroy());
}

TEST_CASE("collectives: abort wakes a rank waiting for its peers") {
  Clique c = open_clique("cpu", 2);
  auto buf = c.devices[0]->alloc(1024);
  REQUIRE_OK(buf.status());
  absl::Status waited;
  const auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    waited = c.comms[0]->all_reduce(*buf, *buf, 64, DataType::kF32, ReduceOp::kSum);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_OK(c.comms[1]->abort());
  waiter.join();
  CHECK(waited.code() == absl::StatusCode::kAborted);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  // The clique is over for both ranks.
  CHECK_FALSE(c.comms[0]->all_reduce(*buf, *buf, 64, DataType::kF32, ReduceOp::kSum).ok());
  CHECK_FALSE(c.comms[0]->status().ok());
}

TEST_CASE("collectives: unique ids round-trip through hex and hostile text is refused") {
  sparkrt::UniqueId id;
  for (size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  auto back = sparkrt::UniqueId::from_hex("  " + id.to_hex() + "\n");
  REQUIRE_OK(back.status());
  CHECK(back->bytes == id.bytes);
  CHECK(sparkrt::UniqueId::from_hex("").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(sparkrt::UniqueId::from_hex(id.to_hex().substr(1)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  std::string bad = id.to_hex();
  bad[17] = 'g';
  auto refused = sparkrt::UniqueId::from_hex(bad);
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(sparkrt::testing::contains(refused.status(), "character 17"));
}

TEST_CASE("collectives: library names the host implementation") {
  for (const char* backend : {"cpu", "mock"}) {
    auto d = Device::open({.backend = backend});
    REQUIRE_OK(d.status());
    auto lib = Communicator::library(**d);
    REQUIRE_MESSAGE(lib.ok(), lib.status().ToString());
    CHECK(lib->find("sparkrt host collectives") != std::string::npos);
  }
}
