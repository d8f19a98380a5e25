// sparkrt.collectives.v1 of the host backends (cpu, mock), driven through the
// plugins' C tables (dlopen'ed, not linked): every collective on random data
// against a host computation written here, groups and threads, mismatches,
// timeouts, aborts, refused handles and pointers, and cliques joined by
// unique id, hostile ids and peers included.
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "sparkrt/extensions/collectives.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/extensions/mock.h"
#include "sparkrt/plugin_api.h"
#include "status_checks.h"

using absl::StatusCode;
using sparkrt::testing::contains;

namespace {

const char* const kBackends[] = {"mock", "cpu"};

std::string plugin_path(const std::string& backend) {
  return backend == "mock" ? SPARKRT_MOCK_PLUGIN : SPARKRT_CPU_PLUGIN;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

void check_error(const absl::Status& s, StatusCode code, std::initializer_list<std::string_view> parts) {
  INFO(s.ToString());
  CHECK(s.code() == code);
  for (std::string_view p : parts) {
    INFO("expected in message: ", std::string(p));
    CHECK(contains(s, p));
  }
}

class Plugin {
 public:
  explicit Plugin(const std::string& name) : backend(name) {
    handle_ = ::dlopen(plugin_path(name).c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(handle_ != nullptr, ::dlerror());
    auto entry = reinterpret_cast<SparkrtPluginEntryFn>(::dlsym(handle_, SPARKRT_PLUGIN_ENTRY_SYMBOL));
    REQUIRE((entry != nullptr));
    api = entry();
    SparkrtGetExtensionArgs get{SPARKRT_GET_EXTENSION_ARGS_SIZE, SPARKRT_COLLECTIVES_EXTENSION_NAME, nullptr};
    REQUIRE((api->get_extension(&get) == nullptr));
    coll = static_cast<const SparkrtCollectivesExtension*>(get.extension);
    REQUIRE((coll != nullptr));
    get.name = SPARKRT_MOCK_EXTENSION_NAME;
    REQUIRE((api->get_extension(&get) == nullptr));
    mock = static_cast<const SparkrtMockExtension*>(get.extension);
    get.name = SPARKRT_GRAPH_EXTENSION_NAME;
    REQUIRE((api->get_extension(&get) == nullptr));
    graph = static_cast<const SparkrtGraphExtension*>(get.extension);
  }
  ~Plugin() {
    for (SparkrtDevice* d : devices) close(d);
    ::dlclose(handle_);
  }

  absl::Status status(SparkrtError* e) const {
    if (e == nullptr) return absl::OkStatus();
    const char* msg = nullptr;
    size_t size = 0;
    api->error_message(e, &msg, &size);
    absl::Status s(static_cast<StatusCode>(api->error_code(e)), std::string(msg, size));
    api->error_destroy(e);
    return s;
  }

  absl::StatusOr<SparkrtDevice*> try_open(int index) {
    SparkrtDeviceOpenArgs a{SPARKRT_DEVICE_OPEN_ARGS_SIZE, index, nullptr};
    if (absl::Status s = status(api->device_open(&a)); !s.ok()) return s;
    devices.push_back(a.device);
    return a.device;
  }
  SparkrtDevice* open(int index) {
    auto d = try_open(index);
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    return *d;
  }
  void close(SparkrtDevice*& d) {
    if (d == nullptr) return;
    SparkrtDeviceCloseArgs a{SPARKRT_DEVICE_CLOSE_ARGS_SIZE, d};
    CHECK_OK(status(api->device_close(&a)));
    d = nullptr;
  }
  SparkrtDevicePtr alloc(SparkrtDevice* d, uint64_t bytes) {
    SparkrtMemAllocArgs a{SPARKRT_MEM_ALLOC_ARGS_SIZE, d, bytes, 0};
    REQUIRE_OK(status(api->mem_alloc(&a)));
    return a.ptr;
  }
  void put(SparkrtDevice* d, SparkrtDevicePtr dst, const std::vector<uint8_t>& bytes) {
    if (bytes.empty()) return;
    SparkrtMemcpyArgs a{};
    a.struct_size = SPARKRT_MEMCPY_ARGS_SIZE;
    a.device = d;
    a.kind = SPARKRT_COPY_H2D;
    a.dst_device = dst;
    a.src_host = bytes.data();
    a.bytes = bytes.size();
    a.blocking = 1;
    REQUIRE_OK(status(api->memcpy(&a)));
  }
  std::vector<uint8_t> get(SparkrtDevice* d, SparkrtDevicePtr src, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    if (bytes == 0) return out;
    SparkrtMemcpyArgs a{};
    a.struct_size = SPARKRT_MEMCPY_ARGS_SIZE;
    a.device = d;
    a.kind = SPARKRT_COPY_D2H;
    a.src_device = src;
    a.dst_host = out.data();
    a.bytes = bytes;
    a.blocking = 1;
    REQUIRE_OK(status(api->memcpy(&a)));
    return out;
  }

  absl::StatusOr<std::vector<SparkrtComm>> init_all(const std::vector<SparkrtDevice*>& devs) {
    std::vector<SparkrtComm> comms(devs.size());
    SparkrtCommInitAllArgs a{SPARKRT_COMM_INIT_ALL_ARGS_SIZE, int32_t(devs.size()), devs.data(),
                             comms.data()};
    if (absl::Status s = status(coll->comm_init_all(&a)); !s.ok()) return s;
    return comms;
  }
  std::vector<SparkrtComm> must_init_all(const std::vector<SparkrtDevice*>& devs) {
    auto c = init_all(devs);
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    return *c;
  }
  absl::Status comm_call(SparkrtError* (*fn)(SparkrtCommArgs*), SparkrtComm c) {
    SparkrtCommArgs a{SPARKRT_COMM_ARGS_SIZE, c};
    return status(fn(&a));
  }
  absl::Status destroy(SparkrtComm c) { return comm_call(coll->comm_destroy, c); }
  absl::Status abort(SparkrtComm c) { return comm_call(coll->comm_abort, c); }
  absl::Status comm_status(SparkrtComm c) { return comm_call(coll->comm_status, c); }

  absl::Status run(SparkrtComm comm, SparkrtCollectiveKind kind, SparkrtDataType dtype,
                   SparkrtReduceOp op, int32_t peer, SparkrtDevicePtr send, SparkrtDevicePtr recv,
                   uint64_t count, SparkrtStream stream = 0) {
    SparkrtCollectiveArgs a{SPARKRT_COLLECTIVE_ARGS_SIZE, comm, kind, dtype, op, peer, send, recv,
                            count, stream};
    return status(coll->collective(&a));
  }
  absl::Status group_start() {
    SparkrtGroupArgs a{SPARKRT_GROUP_ARGS_SIZE};
    return status(coll->group_start(&a));
  }
  absl::Status group_end() {
    SparkrtGroupArgs a{SPARKRT_GROUP_ARGS_SIZE};
    return status(coll->group_end(&a));
  }
  // `fn` issues calls between group_start and group_end; the first error wins.
  absl::Status group(const std::function<absl::Status()>& fn) {
    REQUIRE_OK(group_start());
    absl::Status s = fn();
    absl::Status e = group_end();
    return s.ok() ? e : s;
  }

  std::vector<SparkrtMockCollective> records(SparkrtDevice* d) {
    REQUIRE((mock != nullptr));
    uint64_t n = 0;
    REQUIRE_OK(status(mock->collective_count(d, &n)));
    std::vector<SparkrtMockCollective> out(n);
    for (uint64_t i = 0; i < n; ++i) {
      out[i].struct_size = SPARKRT_MOCK_COLLECTIVE_SIZE;
      REQUIRE_OK(status(mock->get_collective(d, i, &out[i])));
    }
    return out;
  }

  std::string backend;
  const SparkrtPluginApi* api = nullptr;
  const SparkrtCollectivesExtension* coll = nullptr;
  const SparkrtMockExtension* mock = nullptr;
  const SparkrtGraphExtension* graph = nullptr;
  std::vector<SparkrtDevice*> devices;

 private:
  void* handle_ = nullptr;
};

// ---- the host computation the results are checked against ------------------------

size_t elem_size(SparkrtDataType t) {
  switch (t) {
    case SPARKRT_DTYPE_U8: return 1;
    case SPARKRT_DTYPE_F16:
    case SPARKRT_DTYPE_BF16: return 2;
    default: return 4;
  }
}

// bf16 nearest to `f`, ties to even: of the two bf16 neighbours, the closer.
uint16_t to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t lo = bits & 0xffff0000u;
  const uint32_t hi = lo + 0x10000u;
  const double dlo = std::fabs(double(std::bit_cast<float>(lo)) - double(f));
  const double dhi = std::fabs(double(std::bit_cast<float>(hi)) - double(f));
  if (dlo < dhi) return uint16_t(lo >> 16);
  if (dhi < dlo) return uint16_t(hi >> 16);
  return uint16_t(((lo >> 16) & 1) == 0 ? lo >> 16 : hi >> 16);
}

float load_f(SparkrtDataType t, const uint8_t* p) {
  if (t == SPARKRT_DTYPE_F32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (t == SPARKRT_DTYPE_F16) {
    _Float16 h;
    std::memcpy(&h, p, 2);
    return float(h);
  }
  uint16_t b;
  std::memcpy(&b, p, 2);
  return std::bit_cast<float>(uint32_t(b) << 16);
}

void store_f(SparkrtDataType t, uint8_t* p, float v) {
  if (t == SPARKRT_DTYPE_F32) {
    std::memcpy(p, &v, 4);
  } else if (t == SPARKRT_DTYPE_F16) {
    const _Float16 h = static_cast<_Float16>(v);
    std::memcpy(p, &h, 2);
  } else {
    const uint16_t b = to_bf16(v);
    std::memcpy(p, &b, 2);
  }
}

// Element-wise reduction over ranks in rank order; floats accumulate in f32.
std::vector<uint8_t> reduce_ref(SparkrtDataType t, SparkrtReduceOp op,
                                const std::vector<std::vector<uint8_t>>& in) {
  const size_t es = elem_size(t);
  std::vector<uint8_t> out(in[0].size());
  for (size_t i = 0; i < out.size() / es; ++i) {
    if (t == SPARKRT_DTYPE_I32) {
      int64_t acc = 0;
      int32_t m = 0;
      for (size_t r = 0; r < in.size(); ++r) {
        int32_t v;
        std::memcpy(&v, in[r].data() + i * 4, 4);
        acc += v;
        m = r == 0 ? v : (op == SPARKRT_REDUCE_MAX ? std::max(m, v) : std::min(m, v));
      }
      const int32_t res = op == SPARKRT_REDUCE_SUM ? int32_t(uint32_t(uint64_t(acc))) : m;
      std::memcpy(out.data() + i * 4, &res, 4);
    } else if (t == SPARKRT_DTYPE_U8) {
      unsigned acc = 0, m = 0;
      for (size_t r = 0; r < in.size(); ++r) {
        const unsigned v = in[r][i];
        acc += v;
        m = r == 0 ? v : (op == SPARKRT_REDUCE_MAX ? std::max(m, v) : std::min(m, v));
      }
      out[i] = uint8_t(op == SPARKRT_REDUCE_SUM ? acc % 256 : m);
    } else {
      float acc = 0;
      for (size_t r = 0; r < in.size(); ++r) {
        const float v = load_f(t, in[r].data() + i * es);
        if (r == 0) acc = v;
        else if (op == SPARKRT_REDUCE_SUM) acc = acc + v;
        else if (op == SPARKRT_REDUCE_MAX) acc = v > acc ? v : acc;
        else acc = v < acc ? v : acc;
      }
      store_f(t, out.data() + i * es, acc);
    }
  }
  return out;
}

// Random elements, never zero; floats exactly representable in their type.
std::vector<uint8_t> random_elements(std::mt19937_64& gen, SparkrtDataType t, size_t n) {
  const size_t es = elem_size(t);
  std::vector<uint8_t> out(n * es);
  if (t == SPARKRT_DTYPE_U8 || t == SPARKRT_DTYPE_I32) return sparkrt::testing::random_bytes(gen, n * es);
  std::uniform_real_distribution<float> d(-8.f, 8.f);
  for (size_t i = 0; i < n; ++i) {
    float v = 0;
    while (v == 0 || std::fabs(v) < 1e-3f) v = d(gen);
    store_f(t, out.data() + i * es, v);
  }
  return out;
}

// A clique over the first `n` devices of a fresh plugin, with buffers.
struct Clique {
  Clique(Plugin& plugin, int n) : p(plugin) {
    for (int i = 0; i < n; ++i) devs.push_back(p.open(i));
    comms = p.must_init_all(devs);
  }
  ~Clique() {
    for (SparkrtComm c : comms) CHECK_OK(p.destroy(c));
  }
  Plugin& p;
  std::vector<SparkrtDevice*> devs;
  std::vector<SparkrtComm> comms;
};

constexpr SparkrtDataType kTypes[] = {SPARKRT_DTYPE_F32, SPARKRT_DTYPE_F16, SPARKRT_DTYPE_BF16,
                                      SPARKRT_DTYPE_I32, SPARKRT_DTYPE_U8};
constexpr SparkrtReduceOp kOps[] = {SPARKRT_REDUCE_SUM, SPARKRT_REDUCE_MAX, SPARKRT_REDUCE_MIN};
constexpr uint8_t kPoison = 0xA7;

// Runs one collective on every rank (in one group), in place or not, and
// checks every rank's output against the host computation.
void check_collective(Plugin& p, Clique& c, std::mt19937_64& gen, SparkrtCollectiveKind kind,
                      SparkrtDataType t, SparkrtReduceOp op, int root, bool in_place, uint64_t count) {
  const int n = int(c.devs.size());
  const size_t es = elem_size(t);
  const size_t one = count * es;
  const size_t send_elems = kind == SPARKRT_COLLECTIVE_REDUCE_SCATTER ? count * n : count;
  const size_t recv_bytes = kind == SPARKRT_COLLECTIVE_ALL_GATHER ? one * n : one;
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<SparkrtDevicePtr> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    inputs.push_back(random_elements(gen, t, send_elems));
    const size_t big = std::max(inputs[r].size(), recv_bytes) + 64;
    const SparkrtDevicePtr base = p.alloc(c.devs[r], big);
    p.put(c.devs[r], base, std::vector<uint8_t>(big, kPoison));
    if (!in_place) {
      send[r] = base;
      recv[r] = p.alloc(c.devs[r], recv_bytes + 64);
      p.put(c.devs[r], recv[r], std::vector<uint8_t>(recv_bytes + 64, kPoison));
    } else if (kind == SPARKRT_COLLECTIVE_ALL_GATHER) {
      recv[r] = base;
      send[r] = base + r * one;
    } else {
      send[r] = recv[r] = base;  // all-reduce, broadcast; reduce-scatter: recv = send + rank * count
      if (kind == SPARKRT_COLLECTIVE_REDUCE_SCATTER) recv[r] = base + r * one;
    }
    p.put(c.devs[r], send[r], inputs[r]);
  }
  INFO(p.backend, " kind ", int(kind), " dtype ", int(t), " op ", int(op), " ranks ", n,
       " in place ", in_place, " count ", count);
  REQUIRE_OK(p.group([&] {
    for (int r = 0; r < n; ++r)
      if (absl::Status s = p.run(c.comms[r], kind, t, op, root, send[r], recv[r], count); !s.ok())
        return s;
    return absl::OkStatus();
  }));
  std::vector<uint8_t> want_all;
  if (kind == SPARKRT_COLLECTIVE_ALL_REDUCE || kind == SPARKRT_COLLECTIVE_REDUCE_SCATTER)
    want_all = reduce_ref(t, op, inputs);
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t> want;
    switch (kind) {
      case SPARKRT_COLLECTIVE_ALL_REDUCE: want = want_all; break;
      case SPARKRT_COLLECTIVE_ALL_GATHER:
        for (auto& in : inputs) want.insert(want.end(), in.begin(), in.end());
        break;
      case SPARKRT_COLLECTIVE_REDUCE_SCATTER:
        want.assign(want_all.begin() + r * one, want_all.begin() + (r + 1) * one);
        break;
      default: want = inputs[size_t(root)]; break;
    }
    CHECK(p.get(c.devs[r], recv[r], recv_bytes) == want);
    if (!in_place) {
      // Nothing written past the result.
      auto tail = p.get(c.devs[r], recv[r] + recv_bytes, 64);
      CHECK(tail == std::vector<uint8_t>(64, kPoison));
    }
  }
}

// Stores a value outside an enumeration into an enum field, as C code may.
template <typename E>
void set_raw(E& field, int32_t v) {
  static_assert(sizeof(E) == sizeof(v));
  std::memcpy(&field, &v, sizeof v);
}

// Runs `fn(rank)` on a thread per rank; returns each rank's status.
std::vector<absl::Status> per_rank(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[r] = fn(r); });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace

TEST_CASE("host collectives: the library, and SPARKRT_HOST_DEVICES") {
  for (const char* b : kBackends) {
    Plugin p(b);
    SparkrtCollectivesLibraryArgs lib{};
    lib.struct_size = SPARKRT_COLLECTIVES_LIBRARY_ARGS_SIZE;
    REQUIRE_OK(p.status(p.coll->library(&lib)));
    CHECK(std::string(lib.name) == "sparkrt host collectives");
    CHECK(lib.version == 1);
    CHECK(p.coll->struct_size == SPARKRT_COLLECTIVES_EXTENSION_SIZE);
    SparkrtDeviceCountArgs count{SPARKRT_DEVICE_COUNT_ARGS_SIZE, 0};
    {
      ScopedEnv env("SPARKRT_HOST_DEVICES", nullptr);
      REQUIRE_OK(p.status(p.api->device_count(&count)));
      CHECK(count.count == 4);
      check_error(p.try_open(4).status(), StatusCode::kOutOfRange, {"index 4", "4 devices"});
    }
    {
      ScopedEnv env("SPARKRT_HOST_DEVICES", "2");
      REQUIRE_OK(p.status(p.api->device_count(&count)));
      CHECK(count.count == 2);
      CHECK(p.try_open(1).ok());
      check_error(p.try_open(2).status(), StatusCode::kOutOfRange, {"index 2"});
    }
    for (const char* bad : {"0", "65", "4x", "-1", " 4", "999999999999"}) {
      ScopedEnv env("SPARKRT_HOST_DEVICES", bad);
      check_error(p.status(p.api->device_count(&count)), StatusCode::kInvalidArgument,
                  {"SPARKRT_HOST_DEVICES", bad});
      check_error(p.try_open(0).status(), StatusCode::kInvalidArgument, {"SPARKRT_HOST_DEVICES"});
    }
  }
}

TEST_CASE("host collectives: every kind, dtype and op on random data, 1 to 4 ranks") {
  const uint64_t seed = sparkrt::testing::fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  for (const char* b : kBackends) {
    Plugin p(b);
    for (int n = 1; n <= 4; ++n) {
      Clique c(p, n);
      for (SparkrtDataType t : kTypes) {
        for (bool in_place : {false, true}) {
          const uint64_t count = 1 + gen() % 37;
          for (SparkrtReduceOp op : kOps) {
            check_collective(p, c, gen, SPARKRT_COLLECTIVE_ALL_REDUCE, t, op, 0, in_place, count);
            check_collective(p, c, gen, SPARKRT_COLLECTIVE_REDUCE_SCATTER, t, op, 0, in_place, count);
          }
          check_collective(p, c, gen, SPARKRT_COLLECTIVE_ALL_GATHER, t, SPARKRT_REDUCE_SUM, 0,
                           in_place, count);
          check_collective(p, c, gen, SPARKRT_COLLECTIVE_BROADCAST, t, SPARKRT_REDUCE_SUM,
                           int(gen() % uint64_t(n)), in_place, count);
        }
      }
      // Zero elements move nothing but still match.
      check_collective(p, c, gen, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32,
                       SPARKRT_REDUCE_SUM, 0, false, 0);
    }
  }
}

TEST_CASE("host collectives: f16 and bf16 sums accumulate in f32 and round once") {
  Plugin p("cpu");
  Clique c(p, 3);
  // 1 + 2^-11 + 2^-11: rounding after each add would lose both halves (ties
  // to even); one rounding of the f32 sum keeps them (1 + 2^-10).
  const _Float16 parts[3] = {_Float16(1.0f), _Float16(0.00048828125f), _Float16(0.00048828125f)};
  std::vector<SparkrtDevicePtr> buf;
  for (int r = 0; r < 3; ++r) {
    buf.push_back(p.alloc(c.devs[r], 2));
    std::vector<uint8_t> bytes(2);
    std::memcpy(bytes.data(), &parts[r], 2);
    p.put(c.devs[r], buf[r], bytes);
  }
  REQUIRE_OK(p.group([&] {
    for (int r = 0; r < 3; ++r)
      if (auto s = p.run(c.comms[r], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F16,
                         SPARKRT_REDUCE_SUM, 0, buf[r], buf[r], 1);
          !s.ok())
        return s;
    return absl::OkStatus();
  }));
  _Float16 got;
  auto bytes = p.get(c.devs[1], buf[1], 2);
  std::memcpy(&got, bytes.data(), 2);
  CHECK(float(got) == 1.0f + 0.0009765625f);
}

TEST_CASE("host collectives: send and receive in a ring, grouped and on a thread per rank") {
  const uint64_t seed = sparkrt::testing::fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  for (const char* b : kBackends) {
    Plugin p(b);
    Clique c(p, 4);
    for (bool threads : {false, true}) {
      std::vector<std::vector<uint8_t>> data;
      std::vector<SparkrtDevicePtr> send, recv;
      const uint64_t count = 1 + gen() % 100;
      for (int r = 0; r < 4; ++r) {
        data.push_back(random_elements(gen, SPARKRT_DTYPE_I32, count));
        send.push_back(p.alloc(c.devs[r], count * 4));
        recv.push_back(p.alloc(c.devs[r], count * 4));
        p.put(c.devs[r], send[r], data[r]);
        p.put(c.devs[r], recv[r], std::vector<uint8_t>(count * 4, kPoison));
      }
      auto rank_ops = [&](int r) -> absl::Status {
        // Even ranks send first, odd ones receive first, so the thread
        // version cannot deadlock (a send waits for its receive).
        auto do_send = [&] {
          return p.run(c.comms[r], SPARKRT_COLLECTIVE_SEND, SPARKRT_DTYPE_I32, SPARKRT_REDUCE_SUM,
                       (r + 1) % 4, send[r], 0, count);
        };
        auto do_recv = [&] {
          return p.run(c.comms[r], SPARKRT_COLLECTIVE_RECV, SPARKRT_DTYPE_I32, SPARKRT_REDUCE_SUM,
                       (r + 3) % 4, 0, recv[r], count);
        };
        absl::Status s = r % 2 == 0 ? do_send() : do_recv();
        if (!s.ok()) return s;
        return r % 2 == 0 ? do_recv() : do_send();
      };
      if (threads) {
        for (auto& s : per_rank(4, rank_ops)) CHECK_OK(s);
      } else {
        REQUIRE_OK(p.group([&] {
          for (int r = 0; r < 4; ++r)
            if (auto s = rank_ops(r); !s.ok()) return s;
          return absl::OkStatus();
        }));
      }
      for (int r = 0; r < 4; ++r) CHECK(p.get(c.devs[r], recv[r], count * 4) == data[(r + 3) % 4]);
    }
    // A send and its receive must agree.
    const SparkrtDevicePtr a = p.alloc(c.devs[0], 64), z = p.alloc(c.devs[1], 64);
    absl::Status st = p.group([&] {
      auto s = p.run(c.comms[0], SPARKRT_COLLECTIVE_SEND, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 1, a, 0, 8);
      if (s.ok()) s = p.run(c.comms[1], SPARKRT_COLLECTIVE_RECV, SPARKRT_DTYPE_I32, SPARKRT_REDUCE_SUM, 0, 0, z, 8);
      return s;
    });
    check_error(st, StatusCode::kInvalidArgument, {"rank 0 sends 8 f32", "rank 1 receives 8 i32"});
  }
}

TEST_CASE("host collectives: a thread per rank without a group") {
  for (const char* b : kBackends) {
    Plugin p(b);
    Clique c(p, 4);
    std::vector<SparkrtDevicePtr> buf;
    for (int r = 0; r < 4; ++r) {
      buf.push_back(p.alloc(c.devs[r], 16 * 4));
      std::vector<uint8_t> v(16 * 4);
      for (int i = 0; i < 16; ++i) {
        const float f = float(r + 1) * float(i + 1);
        std::memcpy(v.data() + i * 4, &f, 4);
      }
      p.put(c.devs[r], buf[r], v);
    }
    auto st = per_rank(4, [&](int r) {
      for (int k = 0; k < 3; ++k) {  // several in a row, in order
        if (auto s = p.run(c.comms[r], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32,
                           k == 1 ? SPARKRT_REDUCE_MAX : SPARKRT_REDUCE_SUM, 0, buf[r], buf[r], 16);
            !s.ok())
          return s;
      }
      return absl::OkStatus();
    });
    for (auto& s : st) CHECK_OK(s);
    // sum: 10 (i+1); max: the same; sum again: 40 (i+1).
    for (int r = 0; r < 4; ++r) {
      auto v = p.get(c.devs[r], buf[r], 64);
      for (int i = 0; i < 16; ++i) {
        float f;
        std::memcpy(&f, v.data() + i * 4, 4);
        CHECK(f == 40.0f * float(i + 1));
      }
    }
  }
}

TEST_CASE("host collectives: mismatched calls fail on every rank and the clique goes on") {
  for (const char* b : kBackends) {
    Plugin p(b);
    Clique c(p, 4);
    std::vector<SparkrtDevicePtr> buf;
    for (int r = 0; r < 4; ++r) buf.push_back(p.alloc(c.devs[r], 1024));
    struct Case {
      const char* what;
      std::function<SparkrtCollectiveArgs(int)> args;
      std::vector<std::string_view> parts;
    };
    auto base = [&](int r) {
      return SparkrtCollectiveArgs{SPARKRT_COLLECTIVE_ARGS_SIZE, c.comms[r], SPARKRT_COLLECTIVE_ALL_REDUCE,
                                   SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0, buf[r], buf[r], 16, 0};
    };
    const std::vector<Case> cases = {
        {"count", [&](int r) { auto a = base(r); if (r == 2) a.count = 8; return a; },
         {"rank 0 issued all_reduce of 16 f32 (sum)", "rank 2 issued all_reduce of 8 f32 (sum)"}},
        {"dtype", [&](int r) { auto a = base(r); if (r == 3) a.dtype = SPARKRT_DTYPE_I32; return a; },
         {"rank 3 issued all_reduce of 16 i32"}},
        {"op", [&](int r) { auto a = base(r); if (r == 1) a.reduce_op = SPARKRT_REDUCE_MAX; return a; },
         {"rank 1 issued all_reduce of 16 f32 (max)"}},
        {"root", [&](int r) { auto a = base(r); a.kind = SPARKRT_COLLECTIVE_BROADCAST; a.peer = r == 1 ? 2 : 0; return a; },
         {"from root 0", "rank 1 issued broadcast of 16 f32 from root 2"}},
        {"kind", [&](int r) { auto a = base(r); if (r == 2) a.kind = SPARKRT_COLLECTIVE_ALL_GATHER; a.count = 4; return a; },
         {"rank 2 issued all_gather of 4 f32"}},
    };
    for (const Case& k : cases) {
      INFO(b, ": ", k.what);
      auto st = per_rank(4, [&](int r) {
        SparkrtCollectiveArgs a = k.args(r);
        return p.status(p.coll->collective(&a));
      });
      for (auto& s : st) {
        check_error(s, StatusCode::kInvalidArgument, {"does not match"});
        for (auto part : k.parts) CHECK(contains(s, part));
      }
      for (SparkrtComm comm : c.comms) CHECK_OK(p.comm_status(comm));
      // The communicators are still usable.
      auto again = per_rank(4, [&](int r) {
        SparkrtCollectiveArgs a = base(r);
        return p.status(p.coll->collective(&a));
      });
      for (auto& s : again) CHECK_OK(s);
    }
    if (p.mock != nullptr) {
      auto rec = p.records(c.devs[2]);
      REQUIRE(rec.size() == 10);
      CHECK(rec[0].code == int32_t(StatusCode::kInvalidArgument));
      CHECK(rec[0].count == 8);
      CHECK(rec[1].code == 0);
      CHECK(rec[1].kind == SPARKRT_COLLECTIVE_ALL_REDUCE);
      CHECK(rec[1].comm == c.comms[2]);
      CHECK(rec[1].sequence == 2);
      CHECK(rec[8].kind == SPARKRT_COLLECTIVE_ALL_GATHER);
    }
  }
}

TEST_CASE("host collectives: a rank that never arrives times the others out, then aborts them") {
  ScopedEnv env("SPARKRT_COLLECTIVE_TIMEOUT_S", "1");
  for (const char* b : kBackends) {
    Plugin p(b);
    Clique c(p, 4);
    std::vector<SparkrtDevicePtr> buf;
    for (int r = 0; r < 4; ++r) buf.push_back(p.alloc(c.devs[r], 64));
    const auto start = std::chrono::steady_clock::now();
    auto st = per_rank(3, [&](int r) {
      return p.run(c.comms[r], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32,
                   SPARKRT_REDUCE_SUM, 0, buf[r], buf[r], 16);
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(secs < 4.0);
    int deadline = 0, aborted = 0;
    for (auto& s : st) {
      INFO(s.ToString());
      if (s.code() == StatusCode::kDeadlineExceeded) {
        ++deadline;
        CHECK(contains(s, "collective #1"));
        CHECK(contains(s, "ranks 3, which did not issue it"));
        CHECK(contains(s, "SPARKRT_COLLECTIVE_TIMEOUT_S"));
      } else if (s.code() == StatusCode::kAborted) {
        ++aborted;
        CHECK(contains(s, "ranks 3"));
      }
    }
    CHECK(deadline == 1);
    CHECK(aborted == 2);
    for (SparkrtComm comm : c.comms) check_error(p.comm_status(comm), StatusCode::kAborted, {"aborted"});
    // Later calls fail at once, the late rank's too.
    check_error(p.run(c.comms[3], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32,
                      SPARKRT_REDUCE_SUM, 0, buf[3], buf[3], 16),
                StatusCode::kAborted, {"aborted"});
  }
}

TEST_CASE("host collectives: SPARKRT_COLLECTIVE_TIMEOUT_S is checked") {
  Plugin p("mock");
  Clique c(p, 1);
  const SparkrtDevicePtr buf = p.alloc(c.devs[0], 64);
  for (const char* bad : {"0", "86401", "1.5", "abc", "-3"}) {
    ScopedEnv env("SPARKRT_COLLECTIVE_TIMEOUT_S", bad);
    check_error(p.run(c.comms[0], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32,
                      SPARKRT_REDUCE_SUM, 0, buf, buf, 4),
                StatusCode::kInvalidArgument, {"SPARKRT_COLLECTIVE_TIMEOUT_S", bad});
  }
  ScopedEnv env("SPARKRT_COLLECTIVE_TIMEOUT_S", "86400");
  CHECK_OK(p.run(c.comms[0], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM,
                 0, buf, buf, 4));
}

TEST_CASE("host collectives: comm_abort wakes a waiting rank, destroyed handles are refused") {
  for (const char* b : kBackends) {
    Plugin p(b);
    std::vector<SparkrtComm> old;
    {
      Clique c(p, 2);
      const SparkrtDevicePtr buf = p.alloc(c.devs[0], 64);
      absl::Status waited;
      const auto start = std::chrono::steady_clock::now();
      std::thread t([&] {
        waited = p.run(c.comms[0], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32,
                       SPARKRT_REDUCE_SUM, 0, buf, buf, 4);
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      CHECK_OK(p.abort(c.comms[1]));
      t.join();
      CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
      check_error(waited, StatusCode::kAborted, {"comm_abort was called on rank 1"});
      check_error(p.comm_status(c.comms[0]), StatusCode::kAborted, {"comm_abort"});
      old = c.comms;
    }
    for (SparkrtComm comm : old) {
      check_error(p.destroy(comm), StatusCode::kInvalidArgument, {"unknown", "destroyed"});
      check_error(p.comm_status(comm), StatusCode::kInvalidArgument, {"unknown"});
      check_error(p.run(comm, SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM,
                        0, 0, 0, 0),
                  StatusCode::kInvalidArgument, {"unknown"});
    }
    check_error(p.comm_status(0), StatusCode::kInvalidArgument, {"communicator 0"});
    // Handles are never reused.
    Clique again(p, 2);
    for (SparkrtComm comm : again.comms) CHECK(comm > old.back());
  }
}

TEST_CASE("host collectives: bad pointers, sizes and arguments are refused with nothing moved") {
  for (const char* b : kBackends) {
    Plugin p(b);
    Clique c(p, 2);
    const SparkrtDevicePtr a = p.alloc(c.devs[0], 64), r0 = p.alloc(c.devs[0], 64);
    const SparkrtDevicePtr bsend = p.alloc(c.devs[1], 64), small = p.alloc(c.devs[1], 32);
    p.put(c.devs[0], a, std::vector<uint8_t>(64, 3));
    p.put(c.devs[0], r0, std::vector<uint8_t>(64, kPoison));
    p.put(c.devs[1], bsend, std::vector<uint8_t>(64, 5));
    p.put(c.devs[1], small, std::vector<uint8_t>(32, kPoison));
    // Rank 1's recv is too small: its call fails, group_end issues nothing.
    absl::Status call1;
    absl::Status st = p.group([&] {
      CHECK_OK(p.run(c.comms[0], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_U8, SPARKRT_REDUCE_SUM, 0, a, r0, 64));
      call1 = p.run(c.comms[1], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_U8, SPARKRT_REDUCE_SUM, 0, bsend, small, 64);
      return absl::OkStatus();
    });
    check_error(call1, StatusCode::kOutOfRange, {"all_reduce recv", "past the end"});
    check_error(st, StatusCode::kOutOfRange, {"group_end: nothing in the group was issued"});
    CHECK(p.get(c.devs[0], r0, 64) == std::vector<uint8_t>(64, kPoison));
    CHECK(p.get(c.devs[1], small, 32) == std::vector<uint8_t>(32, kPoison));
    // A pointer of another device, a null one, a wrong enum, a peer out of range.
    auto one = [&](SparkrtCollectiveArgs args) { return p.status(p.coll->collective(&args)); };
    SparkrtCollectiveArgs args{SPARKRT_COLLECTIVE_ARGS_SIZE, c.comms[0], SPARKRT_COLLECTIVE_ALL_REDUCE,
                               SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0, bsend, r0, 4, 0};
    check_error(one(args), StatusCode::kInvalidArgument, {"all_reduce send", "not inside any allocation"});
    args.send = 0;
    check_error(one(args), StatusCode::kInvalidArgument, {"all_reduce send", "null"});
    args.send = a;
    args.count = UINT64_MAX / 2;
    check_error(one(args), StatusCode::kInvalidArgument, {"overflows"});
    args.count = 4;
    set_raw(args.dtype, 9);  // C callers can pass anything
    check_error(one(args), StatusCode::kInvalidArgument, {"dtype 9"});
    args.dtype = SPARKRT_DTYPE_F32;
    set_raw(args.reduce_op, 0);
    check_error(one(args), StatusCode::kInvalidArgument, {"reduce op 0"});
    args.reduce_op = SPARKRT_REDUCE_SUM;
    set_raw(args.kind, 7);
    check_error(one(args), StatusCode::kInvalidArgument, {"kind 7"});
    args.kind = SPARKRT_COLLECTIVE_SEND;
    args.peer = 2;
    check_error(one(args), StatusCode::kInvalidArgument, {"peer 2", "2 ranks"});
    args.kind = SPARKRT_COLLECTIVE_ALL_REDUCE;
    args.stream = 77;
    check_error(one(args), StatusCode::kInvalidArgument, {"stream 77"});
    args.stream = 0;
    args.struct_size = 8;
    check_error(one(args), StatusCode::kInvalidArgument, {"struct_size"});
    // Group misuse.
    check_error(p.group_end(), StatusCode::kFailedPrecondition, {"group_start first"});
    // The clique is untouched by all of it.
    CHECK_OK(p.group([&] {
      auto s = p.run(c.comms[0], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_U8, SPARKRT_REDUCE_SUM, 0, a, r0, 32);
      if (s.ok()) s = p.run(c.comms[1], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_U8, SPARKRT_REDUCE_SUM, 0, bsend, small, 32);
      return s;
    }));
    CHECK(p.get(c.devs[1], small, 32) == std::vector<uint8_t>(32, 8));
  }
}

TEST_CASE("host collectives: comm_init_all refuses what is not a distinct device of the plugin") {
  Plugin mock("mock");
  Plugin cpu("cpu");
  SparkrtDevice* m0 = mock.open(0);
  SparkrtDevice* m1 = mock.open(1);
  SparkrtDevice* m0b = mock.open(0);  // a fresh device, but of index 0 again
  SparkrtDevice* c0 = cpu.open(0);
  check_error(mock.init_all({m0, c0}).status(), StatusCode::kInvalidArgument,
              {"devices[1]", "not an open device of the mock backend"});
  int not_a_device = 0;
  check_error(mock.init_all({reinterpret_cast<SparkrtDevice*>(&not_a_device)}).status(),
              StatusCode::kInvalidArgument, {"devices[0]"});
  check_error(mock.init_all({m0, m1, m0b}).status(), StatusCode::kInvalidArgument,
              {"devices[2] has device index 0, as devices[0] does"});
  check_error(mock.init_all({}).status(), StatusCode::kInvalidArgument, {"num_devices 0"});
  check_error(cpu.init_all({c0, m1}).status(), StatusCode::kInvalidArgument,
              {"devices[1]", "cpu backend"});
  SparkrtUniqueIdArgs id{SPARKRT_UNIQUE_ID_ARGS_SIZE, c0, {}};
  check_error(mock.status(mock.coll->get_unique_id(&id)), StatusCode::kInvalidArgument,
              {"not an open device of the mock backend"});
}

TEST_CASE("host collectives: closing a device aborts its cliques and forgets its communicators") {
  for (const char* b : kBackends) {
    Plugin p(b);
    SparkrtDevice* d0 = p.open(0);
    SparkrtDevice* d1 = p.open(1);
    auto comms = p.must_init_all({d0, d1});
    p.close(p.devices[1]);
    check_error(p.comm_status(comms[1]), StatusCode::kInvalidArgument, {"unknown"});
    check_error(p.comm_status(comms[0]), StatusCode::kAborted, {"device index 1) was closed"});
    CHECK_OK(p.destroy(comms[0]));
    (void)d1;
  }
}

TEST_CASE("host collectives: graph capture refuses collectives") {
  for (const char* b : kBackends) {
    Plugin p(b);
    Clique c(p, 1);
    SparkrtStreamCreateArgs sc{SPARKRT_STREAM_CREATE_ARGS_SIZE, c.devs[0], 0};
    REQUIRE_OK(p.status(p.api->stream_create(&sc)));
    SparkrtGraphCaptureArgs begin{SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, c.devs[0], sc.stream};
    REQUIRE_OK(p.status(p.graph->begin_capture(&begin)));
    const SparkrtDevicePtr buf = p.alloc(c.devs[0], 64);
    check_error(p.run(c.comms[0], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32,
                      SPARKRT_REDUCE_SUM, 0, buf, buf, 4, sc.stream),
                StatusCode::kFailedPrecondition, {"capturing a graph"});
    SparkrtGraphEndCaptureArgs end{SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE, c.devs[0], sc.stream, 0, 0};
    REQUIRE_OK(p.status(p.graph->end_capture(&end)));
    CHECK_OK(p.run(c.comms[0], SPARKRT_COLLECTIVE_ALL_REDUCE, SPARKRT_DTYPE_F32,
                   SPARKRT_REDUCE_SUM, 0, buf, buf, 4, sc.stream));
  }
}

TEST_CASE("host collectives: the mock records every collective") {
  Plugin p("mock");
  Clique c(p, 2);
  const SparkrtDevicePtr a = p.alloc(c.devs[0], 64), b = p.alloc(c.devs[1], 64);
  char log_path[] = "/tmp/sparkrt_collectives_logXXXXXX";
  const int log_fd = ::mkstemp(log_path);
  REQUIRE(log_fd >= 0);
  ::close(log_fd);
  REQUIRE_OK(p.status(p.mock->set_log_path(c.devs[1], log_path)));
  REQUIRE_OK(p.group([&] {
    auto s = p.run(c.comms[0], SPARKRT_COLLECTIVE_BROADCAST, SPARKRT_DTYPE_BF16, SPARKRT_REDUCE_SUM, 1, a, a, 8);
    if (s.ok()) s = p.run(c.comms[1], SPARKRT_COLLECTIVE_BROADCAST, SPARKRT_DTYPE_BF16, SPARKRT_REDUCE_SUM, 1, b, b, 8);
    if (s.ok()) s = p.run(c.comms[0], SPARKRT_COLLECTIVE_SEND, SPARKRT_DTYPE_U8, SPARKRT_REDUCE_SUM, 1, a, 0, 3);
    if (s.ok()) s = p.run(c.comms[1], SPARKRT_COLLECTIVE_RECV, SPARKRT_DTYPE_U8, SPARKRT_REDUCE_SUM, 0, 0, b, 3);
    return s;
  }));
  auto r0 = p.records(c.devs[0]);
  auto r1 = p.records(c.devs[1]);
  REQUIRE(r0.size() == 2);
  REQUIRE(r1.size() == 2);
  CHECK(r0[0].kind == SPARKRT_COLLECTIVE_BROADCAST);
  CHECK(r0[0].dtype == SPARKRT_DTYPE_BF16);
  CHECK(r0[0].peer == 1);
  CHECK(r0[0].count == 8);
  CHECK(r0[0].comm == c.comms[0]);
  CHECK(r0[0].sequence == 1);
  CHECK(r0[0].code == 0);
  CHECK(r0[1].kind == SPARKRT_COLLECTIVE_SEND);
  CHECK(r1[1].kind == SPARKRT_COLLECTIVE_RECV);
  CHECK(r1[1].peer == 0);
  CHECK(r1[1].sequence == 2);
  REQUIRE_OK(p.status(p.mock->set_log_path(c.devs[1], "")));
  std::string log;
  {
    std::FILE* f = std::fopen(log_path, "r");
    REQUIRE((f != nullptr));
    char chunk[4096];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) log.append(chunk, got);
    std::fclose(f);
    ::unlink(log_path);
  }
  INFO(log);
  CHECK(contains(absl::UnknownError(log), "\"op\":\"collective\",\"comm\":"));
  CHECK(contains(absl::UnknownError(log), "\"kind\":\"broadcast\",\"dtype\":\"bf16\",\"peer\":1,\"count\":8"));
  CHECK(contains(absl::UnknownError(log), "\"kind\":\"recv\",\"dtype\":\"u8\",\"peer\":0,\"count\":3,\"stream\":0,\"code\":\"OK\""));
  REQUIRE_OK(p.status(p.mock->reset(c.devs[0])));
  CHECK(p.records(c.devs[0]).empty());
  SparkrtMockCollective out{};
  out.struct_size = SPARKRT_MOCK_COLLECTIVE_SIZE;
  check_error(p.status(p.mock->get_collective(c.devs[0], 0, &out)), StatusCode::kOutOfRange,
              {"0 collectives"});
}

namespace {

SparkrtUniqueId make_id(Plugin& p, SparkrtDevice* d) {
  SparkrtUniqueIdArgs a{SPARKRT_UNIQUE_ID_ARGS_SIZE, d, {}};
  REQUIRE_OK(p.status(p.coll->get_unique_id(&a)));
  return a.id;
}

absl::StatusOr<SparkrtComm> init_rank(Plugin& p, SparkrtDevice* d, int n, int rank,
                                      const SparkrtUniqueId& id) {
  SparkrtCommInitRankArgs a{};
  a.struct_size = SPARKRT_COMM_INIT_RANK_ARGS_SIZE;
  a.device = d;
  a.num_ranks = n;
  a.rank = rank;
  a.id = id;
  if (absl::Status s = p.status(p.coll->comm_init_rank(&a)); !s.ok()) return s;
  return a.comm;
}

// A raw connection to the clique's socket, as a hostile peer would make.
int connect_raw(const SparkrtUniqueId& id) {
  const char* name = reinterpret_cast<const char*>(id.bytes) + 32;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name, std::strlen(name));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr),
                    socklen_t(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(name))) == 0);
  return fd;
}

// Reads one reply; returns its code and message ("" and -1 when closed).
std::pair<int32_t, std::string> read_reply(int fd) {
  uint8_t h[32];
  size_t got = 0;
  while (got < sizeof h) {
    const ssize_t r = ::recv(fd, h + got, sizeof h - got, 0);
    if (r <= 0) return {-1, ""};
    got += size_t(r);
  }
  int32_t code;
  uint32_t len;
  std::memcpy(&code, h + 16, 4);
  std::memcpy(&len, h + 20, 4);
  std::string msg(len, '\0');
  got = 0;
  while (got < len) {
    const ssize_t r = ::recv(fd, msg.data() + got, len - got, 0);
    if (r <= 0) break;
    got += size_t(r);
  }
  return {code, msg};
}

}  // namespace

TEST_CASE("host collectives: a clique joined by unique id from two threads") {
  for (const char* b : kBackends) {
    Plugin p(b);
    SparkrtDevice* d0 = p.open(0);
    SparkrtDevice* d1 = p.open(1);
    const SparkrtUniqueId id = make_id(p, d0);
    // A hostile peer first: wrong secret, then a garbage frame. Each is
    // refused; the clique still forms afterwards.
    {
      const int fd = connect_raw(id);
      uint8_t frame[24 + 48] = {};
      const uint32_t magic = 0x4b525053, type = 1;
      const uint64_t rid = 1, bytes = 48;
      std::memcpy(frame, &magic, 4);
      std::memcpy(frame + 4, &type, 4);
      std::memcpy(frame + 8, &rid, 8);
      std::memcpy(frame + 16, &bytes, 8);
      REQUIRE(::send(fd, frame, sizeof frame, MSG_NOSIGNAL) == ssize_t(sizeof frame));
      auto [code, msg] = read_reply(fd);
      CHECK(code == int32_t(StatusCode::kPermissionDenied));
      CHECK(msg.find("wrong secret") != std::string::npos);
      ::close(fd);
      const int fd2 = connect_raw(id);
      const uint8_t junk[24] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0xff, 0xff, 0xff, 0xff,
                                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
      REQUIRE(::send(fd2, junk, sizeof junk, MSG_NOSIGNAL) == ssize_t(sizeof junk));
      auto [code2, msg2] = read_reply(fd2);
      CHECK(code2 == int32_t(StatusCode::kInvalidArgument));
      CHECK(msg2.find("not a sparkrt collectives frame") != std::string::npos);
      ::close(fd2);
    }
    std::vector<SparkrtComm> comms(2);
    std::vector<SparkrtDevice*> devs = {d0, d1};
    std::vector<SparkrtDevicePtr> buf = {p.alloc(d0, 256), p.alloc(d1, 256)};
    std::vector<SparkrtDevicePtr> out = {p.alloc(d0, 512), p.alloc(d1, 512)};
    std::mt19937_64 gen(7);
    std::vector<std::vector<uint8_t>> data = {random_elements(gen, SPARKRT_DTYPE_F32, 64),
                                              random_elements(gen, SPARKRT_DTYPE_F32, 64)};
    for (int r = 0; r < 2; ++r) p.put(devs[r], buf[r], data[r]);
    auto st = per_rank(2, [&](int r) -> absl::Status {
      auto c = init_rank(p, devs[r], 2, r, id);
      if (!c.ok()) return c.status();
      comms[r] = *c;
      auto s = p.run(*c, SPARKRT_COLLECTIVE_ALL_GATHER, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0,
                     buf[r], out[r], 64);
      if (!s.ok()) return s;
      // Out of order on purpose: rank 1 receives before it sends.
      if (r == 0) {
        s = p.run(*c, SPARKRT_COLLECTIVE_SEND, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 1, buf[0], 0, 64);
        if (s.ok()) s = p.run(*c, SPARKRT_COLLECTIVE_RECV, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 1, 0, buf[0], 64);
      } else {
        s = p.run(*c, SPARKRT_COLLECTIVE_RECV, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0, 0, out[1], 64);
        if (s.ok()) s = p.run(*c, SPARKRT_COLLECTIVE_SEND, SPARKRT_DTYPE_F32, SPARKRT_REDUCE_SUM, 0, buf[1], 0, 64);
      }
      return s;
    });
    for (auto& s : st) REQUIRE_OK(s);
    std::vector<uint8_t> gathered = data[0];
    gathered.insert(gathered.end(), data[1].begin(), data[1].end());
    CHECK(p.get(d0, out[0], 512) == gathered);
    CHECK(p.get(d1, out[1], 256) == data[0]);
    CHECK(p.get(d0, buf[0], 256) == data[1]);
    // A rank too many, a rank taken twice.
    check_error(init_rank(p, d1, 2, 1, id).status(), StatusCode::kFailedPrecondition,
                {"every rank has joined"});
    // Destroying a rank ends the clique for the other.
    CHECK_OK(p.destroy(comms[1]));
    const auto start = std::chrono::steady_clock::now();
    absl::Status s;
    while ((s = p.comm_status(comms[0])).ok() &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(3))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    check_error(s, StatusCode::kAborted, {"rank 1"});
    CHECK_OK(p.destroy(comms[0]));
  }
}

TEST_CASE("host collectives: hostile and stale unique ids, and forming failures") {
  ScopedEnv env("SPARKRT_COLLECTIVE_TIMEOUT_S", "1");
  Plugin p("mock");
  SparkrtDevice* d0 = p.open(0);
  SparkrtDevice* d1 = p.open(1);
  SparkrtUniqueId zeros{};
  check_error(init_rank(p, d0, 2, 0, zeros).status(), StatusCode::kInvalidArgument,
              {"not a sparkrt mock unique id"});
  SparkrtUniqueId id = make_id(p, d0);
  SparkrtUniqueId bad = id;
  bad.bytes[0] ^= 1;
  check_error(init_rank(p, d0, 2, 0, bad).status(), StatusCode::kInvalidArgument,
              {"not a sparkrt mock unique id", "magic"});
  bad = id;
  std::memset(bad.bytes + 32, 'A', 64);  // the socket name, unterminated
  check_error(init_rank(p, d0, 2, 0, bad).status(), StatusCode::kInvalidArgument,
              {"not a sparkrt mock unique id"});
  bad = id;
  std::memcpy(bad.bytes + 16, "cpu", 4);
  check_error(init_rank(p, d0, 2, 0, bad).status(), StatusCode::kInvalidArgument,
              {"made by the 'cpu' backend"});
  check_error(init_rank(p, d0, 2, 2, id).status(), StatusCode::kInvalidArgument, {"rank 2 of 2"});
  // Inside a group.
  REQUIRE_OK(p.group_start());
  check_error(init_rank(p, d0, 2, 0, id).status(), StatusCode::kFailedPrecondition, {"group"});
  REQUIRE_OK(p.group_end());
  // One rank alone times out, naming the missing one.
  const auto start = std::chrono::steady_clock::now();
  check_error(init_rank(p, d1, 2, 1, id).status(), StatusCode::kDeadlineExceeded,
              {"did not form within 1 s", "ranks 0 did not join"});
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));
  // Disagreeing num_ranks, duplicate ranks.
  SparkrtUniqueId id2 = make_id(p, d0);
  absl::Status first;
  std::thread t([&] { first = init_rank(p, d0, 3, 0, id2).status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  check_error(init_rank(p, d1, 2, 1, id2).status(), StatusCode::kInvalidArgument,
              {"2 ranks", "said 3"});
  check_error(init_rank(p, d1, 3, 0, id2).status(), StatusCode::kAlreadyExists,
              {"rank 0 has already joined"});
  t.join();
  check_error(first, StatusCode::kDeadlineExceeded, {"ranks 1, 2 did not join"});
  // A stale id: its device is closed.
  SparkrtUniqueId stale = make_id(p, d0);
  p.close(p.devices[0]);
  check_error(init_rank(p, d1, 2, 1, stale).status(), StatusCode::kUnavailable,
              {"has exited or closed its device"});
}
