// Shared code of the C API tests: owned C statuses and devices, checks that a C
// status equals an absl::Status (code and message), the mock's records of a
// device opened through the C API (read through its sparkrt.mock.v1 table),
// and the C++ launch equivalent to a C one.
#ifndef SPARKRT_TESTS_CAPI_CAPI_TEST_SUPPORT_H_
#define SPARKRT_TESTS_CAPI_CAPI_TEST_SUPPORT_H_

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "sparkrt/extensions/mock.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/sparkrt_c.h"
#include "sparkrt/testing/mock.h"
#include "status_checks.h"

namespace capitest {

using sparkrt::testing::MockArg;
using sparkrt::testing::MockLaunch;

struct StatusFree {
  void operator()(sparkrt_status* s) const { sparkrt_status_free(s); }
};
// A status returned by the C API, freed at scope exit; null is success.
using CStatus = std::unique_ptr<sparkrt_status, StatusFree>;

// "INVALID_ARGUMENT: message", or "OK".
inline std::string describe(const sparkrt_status* s) {
  if (s == nullptr) return "OK";
  return std::string(sparkrt_code_name(sparkrt_status_code(s))) + ": " + sparkrt_status_message(s);
}

}  // namespace capitest

#define C_REQUIRE_OK(expr)                                          \
  do {                                                              \
    const capitest::CStatus _cs(expr);                              \
    REQUIRE_MESSAGE(_cs == nullptr, capitest::describe(_cs.get())); \
  } while (0)
#define C_CHECK_OK(expr)                                          \
  do {                                                            \
    const capitest::CStatus _cs(expr);                            \
    CHECK_MESSAGE(_cs == nullptr, capitest::describe(_cs.get())); \
  } while (0)
// The call fails with `code` (a SPARKRT_* value).
#define C_CHECK_CODE(expr, code)                                                            \
  do {                                                                                      \
    const capitest::CStatus _cs(expr);                                                      \
    CHECK_MESSAGE(sparkrt_status_code(_cs.get()) == (code), capitest::describe(_cs.get())); \
  } while (0)

// The call fails with `code` and exactly `message`.
#define C_CHECK_ERROR(expr, code, message)                                                  \
  do {                                                                                      \
    const capitest::CStatus _cs(expr);                                                      \
    CHECK_MESSAGE(sparkrt_status_code(_cs.get()) == (code), capitest::describe(_cs.get())); \
    CHECK(std::string(sparkrt_status_message(_cs.get())) == std::string(message));         \
  } while (0)

namespace capitest {

// The C status has the code and the message of the C++ one.
inline void check_same(const sparkrt_status* c, const absl::Status& cpp) {
  INFO("C:   ", describe(c));
  INFO("C++: ", cpp.ToString());
  CHECK(sparkrt_status_code(c) == static_cast<int32_t>(cpp.code()));
  CHECK(std::string(sparkrt_status_message(c)) == std::string(cpp.message()));
}

struct DeviceClose {
  void operator()(sparkrt_device* d) const { sparkrt_status_free(sparkrt_device_close(d)); }
};
// A device opened through the C API, closed at scope exit.
using CDevice = std::unique_ptr<sparkrt_device, DeviceClose>;

inline CDevice open_c(const char* backend, int32_t index = 0) {
  sparkrt_open_options o{};
  o.struct_size = SPARKRT_C_OPEN_OPTIONS_SIZE;
  o.backend = backend;
  o.device_index = index;
  sparkrt_device* d = nullptr;
  const CStatus s(sparkrt_device_open(&o, &d));
  REQUIRE_MESSAGE(s == nullptr, "opening ", std::string(backend), ": ", describe(s.get()));
  REQUIRE(d != nullptr);
  return CDevice(d);
}

inline std::unique_ptr<sparkrt::Device> open_cpp(const std::string& backend, int index = 0) {
  auto d = sparkrt::Device::open({.backend = backend, .device_index = index});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  return *std::move(d);
}

inline sparkrt_kernel* c_kernel(sparkrt_device* dev, const char* module, const char* entry) {
  sparkrt_kernel* k = nullptr;
  C_REQUIRE_OK(sparkrt_kernel_get(dev, module, entry, &k));
  REQUIRE(k != nullptr);
  return k;
}

inline SparkrtDevicePtr c_alloc(sparkrt_device* dev, size_t bytes) {
  SparkrtDevicePtr p = 0;
  C_REQUIRE_OK(sparkrt_alloc(dev, bytes, &p));
  REQUIRE(p != 0);
  return p;
}

inline SparkrtStream c_stream(sparkrt_device* dev) {
  SparkrtStream s = 0;
  C_REQUIRE_OK(sparkrt_stream_create(dev, &s));
  REQUIRE(s != 0);
  return s;
}

// A launch config of the current size, without launch attributes.
inline sparkrt_launch_config config(sparkrt::Dim3 grid, sparkrt::Dim3 block, uint32_t shared = 0,
                                    SparkrtStream stream = 0) {
  sparkrt_launch_config c{};
  c.struct_size = SPARKRT_C_LAUNCH_CONFIG_SIZE;
  c.grid[0] = grid.x;
  c.grid[1] = grid.y;
  c.grid[2] = grid.z;
  c.block[0] = block.x;
  c.block[1] = block.y;
  c.block[2] = block.z;
  c.shared_mem_bytes = shared;
  c.stream = stream;
  return c;
}

// A struct of `Size` bytes aligned to `Align`: the C++ argument that a BYTES
// C argument of that size and alignment stands for.
template <uint32_t Size, uint32_t Align>
struct alignas(Align) Blob {
  uint8_t bytes[Size];
};

template <uint32_t Size, uint32_t Align>
bool push_blob_if(sparkrt::KernelLaunch& l, const sparkrt_arg& a) {
  static_assert(Size % Align == 0 && sizeof(Blob<Size, Align>) == Size);
  if (a.size != Size || a.align != Align) return false;
  Blob<Size, Align> b;
  std::memcpy(b.bytes, a.value.bytes, Size);
  l.arg(b);
  return true;
}

// Pushes onto `l` the C++ argument equal to `a`: the same kind, bytes,
// size and alignment.
inline void push_cpp(sparkrt::KernelLaunch& l, const sparkrt_arg& a) {
  switch (a.kind) {
    case SPARKRT_ARG_PTR:
      l.arg(sparkrt::DevicePtr(a.value.ptr));
      return;
    case SPARKRT_ARG_U32:
      l.arg(a.value.u32);
      return;
    case SPARKRT_ARG_I32:
      l.arg(a.value.i32);
      return;
    case SPARKRT_ARG_U64:
      l.arg(a.value.u64);
      return;
    case SPARKRT_ARG_I64:
      l.arg(a.value.i64);
      return;
    case SPARKRT_ARG_F32:
      l.arg(a.value.f32);
      return;
    case SPARKRT_ARG_F64:
      l.arg(a.value.f64);
      return;
    case SPARKRT_ARG_BYTES: {
      const bool pushed =
          push_blob_if<1, 1>(l, a) || push_blob_if<2, 2>(l, a) || push_blob_if<4, 4>(l, a) ||
          push_blob_if<8, 4>(l, a) || push_blob_if<8, 8>(l, a) || push_blob_if<12, 4>(l, a) ||
          push_blob_if<16, 4>(l, a) || push_blob_if<16, 8>(l, a) || push_blob_if<16, 16>(l, a) ||
          push_blob_if<24, 4>(l, a) || push_blob_if<24, 8>(l, a) || push_blob_if<32, 32>(l, a) ||
          push_blob_if<136, 4>(l, a) || push_blob_if<136, 8>(l, a) || push_blob_if<2048, 8>(l, a);
      REQUIRE_MESSAGE(pushed, "no C++ struct of ", a.size, " bytes aligned to ", a.align,
                      " in push_cpp; add one");
      return;
    }
  }
  FAIL("push_cpp: argument kind ", a.kind, " has no C++ equivalent");
}

// The status of the C++ launch equivalent to sparkrt_launch(cfg, args).
inline absl::Status launch_cpp(sparkrt::Device& dev, sparkrt::Kernel k,
                               const sparkrt_launch_config& cfg,
                               const std::vector<sparkrt_arg>& args) {
  sparkrt::KernelLaunch l(dev, k);
  l.grid({cfg.grid[0], cfg.grid[1], cfg.grid[2]})
      .block({cfg.block[0], cfg.block[1], cfg.block[2]})
      .shared_mem(cfg.shared_mem_bytes);
  // Attributes as far as the config's struct_size reaches (a 1.0 config has none).
  if (cfg.struct_size >= SPARKRT_C_LAUNCH_CONFIG_SIZE) {
    REQUIRE_MESSAGE((cfg.flags & ~uint32_t{SPARKRT_LAUNCH_DEPENDENT}) == 0,
                    "launch_cpp: flags 0x", std::hex, cfg.flags, " have no C++ equivalent");
    l.dependent_launch((cfg.flags & SPARKRT_LAUNCH_DEPENDENT) != 0)
        .cluster({cfg.cluster[0], cfg.cluster[1], cfg.cluster[2]});
  }
  for (const sparkrt_arg& a : args) push_cpp(l, a);
  return l.launch(sparkrt::Stream{cfg.stream});
}

// The records of a mock device opened through the C API, read through the
// plugin's sparkrt.mock.v1 table as sparkrt::testing::MockInspector reads
// those of a C++ device.
class CMock {
 public:
  explicit CMock(const sparkrt_device* dev)
      : ext_(static_cast<const SparkrtMockExtension*>(
            sparkrt_device_extension(dev, SPARKRT_MOCK_EXTENSION_NAME))),
        device_(sparkrt_device_native_handle(dev)) {
    REQUIRE_MESSAGE(ext_ != nullptr, "no " SPARKRT_MOCK_EXTENSION_NAME " on this device");
    REQUIRE(ext_->struct_size >= SPARKRT_MOCK_EXTENSION_SIZE);
    REQUIRE(device_ != nullptr);
  }

  std::vector<MockLaunch> launches() const {
    uint64_t n = 0;
    must(ext_->launch_count(device_, &n));
    std::vector<MockLaunch> out;
    for (uint64_t i = 0; i < n; ++i) {
      SparkrtMockLaunch r{};
      r.struct_size = SPARKRT_MOCK_LAUNCH_SIZE;
      must(ext_->get_launch(device_, i, &r));
      MockLaunch l;
      l.module = r.module;
      l.entry = r.entry;
      l.kernel_id = r.kernel_id;
      l.grid = {r.grid[0], r.grid[1], r.grid[2]};
      l.block = {r.block[0], r.block[1], r.block[2]};
      l.shared_mem = r.shared_memory_bytes;
      l.stream = sparkrt::Stream{r.stream};
      l.sequence = r.sequence;
      SparkrtMockLaunchAttributes attrs{};
      attrs.struct_size = SPARKRT_MOCK_LAUNCH_ATTRIBUTES_SIZE;
      must(ext_->get_launch_attributes(device_, i, &attrs));
      l.dependent_launch = (attrs.flags & SPARKRT_LAUNCH_DEPENDENT) != 0;
      l.cluster = {attrs.cluster[0], attrs.cluster[1], attrs.cluster[2]};
      for (uint32_t a = 0; a < r.num_args; ++a) {
        std::vector<uint8_t> buf(sparkrt::KernelLaunch::kMaxParamBytes);
        SparkrtMockArg arg{};
        arg.struct_size = SPARKRT_MOCK_ARG_SIZE;
        arg.bytes = buf.data();
        arg.capacity = static_cast<uint32_t>(buf.size());
        must(ext_->get_launch_arg(device_, i, a, &arg));
        buf.resize(arg.size < arg.capacity ? arg.size : arg.capacity);
        l.args.push_back(MockArg{static_cast<sparkrt::ArgKind>(arg.kind), std::move(buf)});
      }
      out.push_back(std::move(l));
    }
    return out;
  }

  SparkrtMockCounters counters() const {
    SparkrtMockCounters c{};
    c.struct_size = SPARKRT_MOCK_COUNTERS_SIZE;
    must(ext_->get_counters(device_, &c));
    return c;
  }

  void reset() const { must(ext_->reset(device_)); }

 private:
  void must(SparkrtError* e) const {
    if (e == nullptr) return;
    const char* msg = nullptr;
    size_t size = 0;
    ext_->error_message(e, &msg, &size);
    const std::string text(msg, size);
    ext_->error_destroy(e);
    FAIL("mock extension: ", text);
  }

  const SparkrtMockExtension* ext_;
  SparkrtDevice* device_;
};

// A launch as two devices can agree on: pointer arguments relative to a base
// address of their own device (an arena both sides carve the same way), the
// stream as whether it is the one the caller passed.
struct PortableLaunch {
  std::string module, entry;
  sparkrt::Dim3 grid, block;
  uint32_t shared_mem = 0;
  bool on_given_stream = false;
  std::vector<MockArg> args;
  bool operator==(const PortableLaunch&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const PortableLaunch& l) {
  os << l.module << '.' << l.entry << " grid {" << l.grid.x << ", " << l.grid.y << ", " << l.grid.z
     << "} block {" << l.block.x << ", " << l.block.y << ", " << l.block.z << "} shared "
     << l.shared_mem << (l.on_given_stream ? " on the stream" : " elsewhere") << " args (";
  for (size_t i = 0; i < l.args.size(); ++i) os << (i ? ", " : "") << l.args[i];
  return os << ')';
}

inline std::vector<PortableLaunch> portable(const std::vector<MockLaunch>& launches, uint64_t base,
                                            sparkrt::Stream stream) {
  std::vector<PortableLaunch> out;
  for (const MockLaunch& l : launches) {
    PortableLaunch p{l.module, l.entry, l.grid, l.block, l.shared_mem, l.stream == stream, l.args};
    for (MockArg& a : p.args) {
      if (a.kind != sparkrt::ArgKind::kPtr) continue;
      auto v = a.as<uint64_t>();
      REQUIRE(v.has_value());
      if (*v == 0) continue;  // null stays null
      REQUIRE_MESSAGE(*v >= base, "pointer 0x", std::hex, *v, " below the arena");
      const uint64_t rel = *v - base;
      std::memcpy(a.bytes.data(), &rel, sizeof rel);
    }
    out.push_back(std::move(p));
  }
  return out;
}

inline void check_same_launches(const std::vector<PortableLaunch>& c,
                                const std::vector<PortableLaunch>& cpp) {
  CHECK(c.size() == cpp.size());
  for (size_t i = 0; i < c.size() && i < cpp.size(); ++i) {
    INFO("launch ", i, "\n  C:   ", c[i], "\n  C++: ", cpp[i]);
    CHECK(c[i] == cpp[i]);
  }
}

}  // namespace capitest

#endif  // SPARKRT_TESTS_CAPI_CAPI_TEST_SUPPORT_H_
