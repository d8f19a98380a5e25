// sparkrt::testing::MockInspector: test op wrappers without a GPU.
//
// Open the recording mock backend, run the code under test, then read what
// the device saw (kernel lookups, launches with every argument's kind and
// bytes, collectives, counters) and inject faults, through the plugin's "sparkrt.mock.v1"
// extension (sparkrt/extensions/mock.h). Nothing links the plugin.
//
//   auto dev = *sparkrt::Device::open({.backend = "mock"});
//   auto mock = *sparkrt::testing::MockInspector::attach(*dev);
//   REQUIRE(my_op(*dev, ...).ok());
//   const auto launches = mock.launches();
//   REQUIRE(launches.size() == 1);
//   CHECK(launches[0].grid == sparkrt::Dim3{4});
//   CHECK(launches[0].args[3] == MockArg::of(uint32_t{128}));
//
// The mock records instead of computing: device memory holds real bytes
// (copies and memsets work, with bounds and use-after-free checks), but a
// launch changes nothing. Records, counters and faults belong to one opened
// device; open a fresh device per test, or reset().
//
// Query methods return values and throw std::runtime_error if the extension
// refuses (which only happens when the device was closed): in a test, that is
// a failure with the message. Fault-injection setters return absl::Status.
// An inspector is valid while its Device is open.
#ifndef SPARKRT_TESTING_MOCK_H_
#define SPARKRT_TESTING_MOCK_H_

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/abi_names.h"
#include "sparkrt/device.h"
#include "sparkrt/extensions/mock.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/types.h"

namespace sparkrt::testing {

// One recorded kernel argument: how it was given and its bytes.
struct MockArg {
  ArgKind kind = ArgKind::kBytes;
  std::vector<uint8_t> bytes;

  // The argument KernelLaunch::arg(value) records, for comparisons:
  //   CHECK(launch.args[7] == MockArg::of(uint32_t{1}));
  // Structs compare byte for byte, padding included: zero-initialise them.
  template <typename T>
  static MockArg of(const T& value) {
    MockArg a;
    a.kind = arg_kind_of<T>();
    a.bytes.resize(sizeof(T));
    std::memcpy(a.bytes.data(), &value, sizeof(T));
    return a;
  }

  // The value as T when the sizes match (kinds are not checked).
  template <typename T>
    requires std::is_trivially_copyable_v<T>
  std::optional<T> as() const {
    if (bytes.size() != sizeof(T)) return std::nullopt;
    T v;
    std::memcpy(&v, bytes.data(), sizeof(T));
    return v;
  }

  bool operator==(const MockArg&) const = default;
};

struct MockLaunch {
  std::string module;
  std::string entry;
  uint64_t kernel_id = 0;  // the same id for every launch of one (module, entry)
  Dim3 grid;
  Dim3 block;
  uint32_t shared_mem = 0;
  Stream stream;
  std::vector<MockArg> args;
  uint64_t sequence = 0;  // 1-based launch number since open or reset
  bool dependent_launch = false;  // KernelLaunch::dependent_launch
  Dim3 cluster{0, 0, 0};          // KernelLaunch::cluster; {0, 0, 0}: none

  bool operator==(const MockLaunch&) const = default;
};

struct MockLookup {
  std::string module;
  std::string entry;
  absl::StatusCode code = absl::StatusCode::kOk;  // what the plugin answered
  uint64_t kernel_id = 0;                         // 0 when it failed

  bool operator==(const MockLookup&) const = default;
};

// One collective call on a communicator of the device, once it completed or
// failed (field meanings in sparkrt/extensions/mock.h).
using MockCollective = SparkrtMockCollective;

// Field meanings in sparkrt/extensions/mock.h.
using MockCounters = SparkrtMockCounters;
using MockStreamCounters = SparkrtMockStreamCounters;

struct MockPointerInfo {
  uint64_t alloc_id = 0;
  DevicePtr base;
  uint64_t size = 0;
  uint64_t offset = 0;
  bool live = false;
};

namespace detail {

inline void print_dim3(std::ostream& os, Dim3 d) {
  os << '{' << d.x << ", " << d.y << ", " << d.z << '}';
}

}  // namespace detail

// "u32 1", "ptr 0x7f0000000100", "f32 0.5", "bytes[8] 01 00 00 00 ...".
inline std::ostream& operator<<(std::ostream& os, const MockArg& a) {
  os << abi_arg_kind_name(static_cast<uint8_t>(a.kind));  // as the mock log spells it
  char buf[64];
  auto v4 = a.as<uint32_t>();
  auto v8 = a.as<uint64_t>();
  switch (a.kind) {
    case ArgKind::kPtr:
      if (v8) {
        std::snprintf(buf, sizeof buf, " 0x%llx", static_cast<unsigned long long>(*v8));
        return os << buf;
      }
      break;
    case ArgKind::kU32:
      if (v4) return os << ' ' << *v4;
      break;
    case ArgKind::kI32:
      if (auto v = a.as<int32_t>()) return os << ' ' << *v;
      break;
    case ArgKind::kU64:
      if (v8) return os << ' ' << *v8;
      break;
    case ArgKind::kI64:
      if (auto v = a.as<int64_t>()) return os << ' ' << *v;
      break;
    case ArgKind::kF32:
      if (auto v = a.as<float>()) {
        std::snprintf(buf, sizeof buf, " %.9g", static_cast<double>(*v));
        return os << buf;
      }
      break;
    case ArgKind::kF64:
      if (auto v = a.as<double>()) {
        std::snprintf(buf, sizeof buf, " %.17g", *v);
        return os << buf;
      }
      break;
    case ArgKind::kBytes:
      break;
  }
  os << '[' << a.bytes.size() << ']';
  for (uint8_t b : a.bytes) {
    std::snprintf(buf, sizeof buf, " %02x", b);
    os << buf;
  }
  return os;
}

// "#1 twin_contract.twin_maybe_rope_f32 grid {1, 1, 1} block {128, 1, 1}
//  shared 0 stream 1 args (ptr 0x..., u32 4, ...)".
inline std::ostream& operator<<(std::ostream& os, const MockLaunch& l) {
  os << '#' << l.sequence << ' ' << l.module << '.' << l.entry << " grid ";
  detail::print_dim3(os, l.grid);
  os << " block ";
  detail::print_dim3(os, l.block);
  os << " shared " << l.shared_mem << " stream " << l.stream.handle;
  if (l.dependent_launch) os << " dependent";
  if (l.cluster != Dim3{0, 0, 0}) {
    os << " cluster ";
    detail::print_dim3(os, l.cluster);
  }
  os << " args (";
  for (size_t i = 0; i < l.args.size(); ++i) os << (i ? ", " : "") << l.args[i];
  return os << ')';
}

inline std::ostream& operator<<(std::ostream& os, const MockLookup& l) {
  os << l.module << '.' << l.entry << " -> ";
  if (l.code == absl::StatusCode::kOk) return os << "kernel " << l.kernel_id;
  return os << absl::StatusCodeToString(l.code);
}

class MockInspector {
 public:
  // FailedPrecondition when `device` is closed or not a mock device.
  static absl::StatusOr<MockInspector> attach(Device& device) {
    // Before anything reaches the plugin: a closed device's handle is gone,
    // and may even belong to a device opened since.
    if (device.is_closed()) {
      return absl::FailedPreconditionError("MockInspector::attach: the " + device.backend_name() +
                                           " device " + std::to_string(device.index()) +
                                           " is closed; attach to an open device");
    }
    const auto* ext = device.extension_as<SparkrtMockExtension>(SPARKRT_MOCK_EXTENSION_NAME);
    if (ext == nullptr) {
      return absl::FailedPreconditionError(
          "MockInspector::attach: the '" + device.backend_name() + "' backend (" +
          device.plugin_path() + ") has no " SPARKRT_MOCK_EXTENSION_NAME
          " extension; open the device with Device::open({.backend = \"mock\"})");
    }
    if (ext->struct_size < SPARKRT_MOCK_EXTENSION_SIZE) {
      return absl::FailedPreconditionError(
          "MockInspector::attach: the mock plugin's extension table is " +
          std::to_string(ext->struct_size) + " bytes, this header needs " +
          std::to_string(SPARKRT_MOCK_EXTENSION_SIZE) + "; rebuild the plugin");
    }
    MockInspector inspector(ext, device.native_handle());
    uint64_t count = 0;
    if (absl::Status s = inspector.status(ext->lookup_count(inspector.device_, &count)); !s.ok())
      return s;
    return inspector;
  }

  // (module, entry) of every lookup that reached the plugin, in order,
  // failed ones included. The runtime caches resolved kernels, so asking
  // Device::kernel twice for one pair is one lookup.
  std::vector<std::pair<std::string, std::string>> lookups() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (auto& l : lookup_records()) out.emplace_back(std::move(l.module), std::move(l.entry));
    return out;
  }

  std::vector<MockLookup> lookup_records() const {
    uint64_t n = 0;
    must(ext_->lookup_count(device_, &n));
    std::vector<MockLookup> out;
    out.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      SparkrtMockLookup r{};
      r.struct_size = SPARKRT_MOCK_LOOKUP_SIZE;
      must(ext_->get_lookup(device_, i, &r));
      out.push_back(MockLookup{r.module, r.entry, static_cast<absl::StatusCode>(r.code),
                               r.kernel_id});
    }
    return out;
  }

  size_t launch_count() const {
    uint64_t n = 0;
    must(ext_->launch_count(device_, &n));
    return n;
  }

  MockLaunch launch(size_t index) const {
    SparkrtMockLaunch r{};
    r.struct_size = SPARKRT_MOCK_LAUNCH_SIZE;
    must(ext_->get_launch(device_, index, &r));
    MockLaunch l;
    l.module = r.module;
    l.entry = r.entry;
    l.kernel_id = r.kernel_id;
    l.grid = {r.grid[0], r.grid[1], r.grid[2]};
    l.block = {r.block[0], r.block[1], r.block[2]};
    l.shared_mem = r.shared_memory_bytes;
    l.stream = Stream{r.stream};
    l.sequence = r.sequence;
    SparkrtMockLaunchAttributes attrs{};
    attrs.struct_size = SPARKRT_MOCK_LAUNCH_ATTRIBUTES_SIZE;
    must(ext_->get_launch_attributes(device_, index, &attrs));
    l.dependent_launch = (attrs.flags & SPARKRT_LAUNCH_DEPENDENT) != 0;
    l.cluster = {attrs.cluster[0], attrs.cluster[1], attrs.cluster[2]};
    l.args.reserve(r.num_args);
    for (uint32_t i = 0; i < r.num_args; ++i) {
      uint8_t buf[KernelLaunch::kMaxParamBytes];
      SparkrtMockArg a{};
      a.struct_size = SPARKRT_MOCK_ARG_SIZE;
      a.bytes = buf;
      a.capacity = sizeof buf;
      must(ext_->get_launch_arg(device_, index, i, &a));
      const uint32_t n = a.size < a.capacity ? a.size : a.capacity;
      l.args.push_back(MockArg{static_cast<ArgKind>(a.kind), std::vector<uint8_t>(buf, buf + n)});
    }
    return l;
  }

  // Every recorded launch, in submission order.
  std::vector<MockLaunch> launches() const {
    const size_t n = launch_count();
    std::vector<MockLaunch> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.push_back(launch(i));
    return out;
  }

  // Every collective call recorded, in completion order.
  std::vector<MockCollective> collectives() const {
    uint64_t n = 0;
    must(ext_->collective_count(device_, &n));
    std::vector<MockCollective> out(n);
    for (uint64_t i = 0; i < n; ++i) {
      out[i].struct_size = SPARKRT_MOCK_COLLECTIVE_SIZE;
      must(ext_->get_collective(device_, i, &out[i]));
    }
    return out;
  }

  MockCounters counters() const {
    MockCounters c{};
    c.struct_size = SPARKRT_MOCK_COUNTERS_SIZE;
    must(ext_->get_counters(device_, &c));
    return c;
  }

  // Work ordered on `stream`; throws for a stream never created.
  MockStreamCounters stream_counters(Stream stream) const {
    MockStreamCounters c{};
    c.struct_size = SPARKRT_MOCK_STREAM_COUNTERS_SIZE;
    must(ext_->get_stream_counters(device_, stream.handle, &c));
    return c;
  }

  // The allocation `ptr` lies in (live or freed); NotFound if none.
  absl::StatusOr<MockPointerInfo> pointer_info(DevicePtr ptr) const {
    SparkrtMockPointerInfo r{};
    r.struct_size = SPARKRT_MOCK_POINTER_INFO_SIZE;
    if (absl::Status s = status(ext_->pointer_info(device_, ptr.addr, &r)); !s.ok()) return s;
    return MockPointerInfo{r.alloc_id, DevicePtr(r.base), r.size, r.offset, r.live != 0};
  }

  // Clears records, counters and faults; memory, streams and modules stay.
  absl::Status reset() { return status(ext_->reset(device_)); }

  // Lookups of (module, entry) fail with `code`; "" matches any name.
  absl::Status deny_lookup(const std::string& module, const std::string& entry,
                           absl::StatusCode code = absl::StatusCode::kNotFound) {
    return status(ext_->deny_lookup(device_, module.c_str(), entry.c_str(),
                                    static_cast<int32_t>(code)));
  }
  // Allocations fail with ResourceExhausted beyond `bytes` live; 0 uncaps.
  absl::Status cap_memory(uint64_t bytes) { return status(ext_->cap_memory(device_, bytes)); }
  // The nth launch from now (1 = next) fails with `code`; 0 disarms.
  absl::Status fail_launch(uint64_t nth, absl::StatusCode code = absl::StatusCode::kInternal) {
    return status(ext_->fail_launch(device_, nth, static_cast<int32_t>(code)));
  }
  absl::Status clear_faults() { return status(ext_->clear_faults(device_)); }
  // Launch records on/off and their limit; counters are always kept.
  absl::Status set_recording(bool record_launches,
                             uint64_t max_records = SPARKRT_MOCK_DEFAULT_MAX_LAUNCH_RECORDS) {
    return status(ext_->set_recording(device_, record_launches ? 1 : 0, max_records));
  }
  // JSON-lines log of every event to `path` (truncated); "" stops it.
  absl::Status set_log_path(const std::string& path) {
    return status(ext_->set_log_path(device_, path.c_str()));
  }

  const SparkrtMockExtension& extension() const { return *ext_; }
  SparkrtDevice* native_device() const { return device_; }

 private:
  MockInspector(const SparkrtMockExtension* ext, SparkrtDevice* device)
      : ext_(ext), device_(device) {}

  absl::Status status(SparkrtError* e) const {
    if (e == nullptr) return absl::OkStatus();
    const char* msg = nullptr;
    size_t size = 0;
    ext_->error_message(e, &msg, &size);
    absl::Status s(static_cast<absl::StatusCode>(ext_->error_code(e)), std::string(msg, size));
    ext_->error_destroy(e);
    return s;
  }

  void must(SparkrtError* e) const {
    if (absl::Status s = status(e); !s.ok()) throw std::runtime_error(s.ToString());
  }

  const SparkrtMockExtension* ext_;
  SparkrtDevice* device_;
};

}  // namespace sparkrt::testing

#endif  // SPARKRT_TESTING_MOCK_H_
