// Registration of the mock backend: SPARKRT_HOST_DEVICES device indices
// (default 4), a registry of open devices (so the extension can refuse
// handles that are not live mock devices), the "sparkrt.mock.v1" extension
// table, and the host collectives between its devices.
#include <atomic>
#include <exception>
#include <new>
#include <shared_mutex>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mock_device.h"
#include "sparkrt/extensions/mock.h"
#include "sparkrt/plugin_sdk.h"
#include "sparkrt/sdk/host_collectives.h"

namespace sparkrt::mock {
namespace {

class MockBackend final : public sdk::Backend {
 public:
  // No thread of the collectives may outlive the library.
  ~MockBackend() override { sdk::shutdown_host_collectives(); }

  absl::StatusOr<int> device_count() override {
    auto n = sdk::host_device_count();
    if (!n.ok()) return absl::Status(n.status().code(), absl::StrCat("mock: ", n.status().message()));
    return n;
  }

  absl::StatusOr<std::unique_ptr<sdk::Device>> open_device(int index) override {
    auto n = device_count();
    if (!n.ok()) return n.status();
    if (index < 0 || index >= *n) {
      return absl::OutOfRangeError(absl::StrFormat(
          "mock: device index %d does not exist; the mock has %d devices, indices 0..%d "
          "(SPARKRT_HOST_DEVICES sets the count; open each as often as you like: each open is a "
          "fresh, independent device)",
          index, *n, *n - 1));
    }
    auto device = std::make_unique<MockDevice>(next_serial_++, index, &MockBackend::on_close);
    absl::Status s = device->init_from_environment();
    if (!s.ok()) return s;
    std::unique_lock lock(registry_mu_);
    live_.insert(static_cast<sdk::Device*>(device.get()));
    return std::unique_ptr<sdk::Device>(std::move(device));
  }

  const void* extension(std::string_view name) override;

  // Runs `fn(MockDevice&)` if `handle` is a live mock device. Holding the
  // registry lock shared keeps a concurrent close from freeing the device
  // under the call.
  template <typename Fn>
  absl::Status with_device(SparkrtDevice* handle, const char* call, Fn&& fn) {
    std::shared_lock lock(registry_mu_);
    auto* device = reinterpret_cast<sdk::Device*>(handle);
    if (handle == nullptr || !live_.contains(device)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sparkrt.mock.v1 %s: %p is not an open device of the mock backend (pass "
          "Device::native_handle() of a device opened with backend \"mock\")",
          call, static_cast<void*>(handle)));
    }
    return fn(*static_cast<MockDevice*>(device));
  }

  // Called first thing by ~MockDevice: waits for extension calls on the
  // device to finish, then makes its handle unknown.
  static void on_close(sdk::Device* device) {
    MockBackend& self = sdk::detail::backend<MockBackend>();
    std::unique_lock lock(self.registry_mu_);
    self.live_.erase(device);
  }

 private:
  std::atomic<uint64_t> next_serial_{0};
  std::shared_mutex registry_mu_;
  absl::flat_hash_set<sdk::Device*> live_;
};

MockBackend& backend() { return sdk::detail::backend<MockBackend>(); }

// ---- extension functions ---------------------------------------------------

template <typename Fn>
SparkrtError* ext_call(SparkrtDevice* device, const char* call, Fn&& fn) noexcept {
  try {
    return sdk::detail::to_error(backend().with_device(device, call, fn));
  } catch (const std::bad_alloc&) {
    return sdk::detail::to_error(
        absl::ResourceExhaustedError(absl::StrFormat("%s: out of host memory", call)));
  } catch (const std::exception& e) {
    return sdk::detail::to_error(absl::InternalError(absl::StrFormat("%s: %s", call, e.what())));
  }
}

template <typename T>
absl::Status check_out(const T* out, size_t needed, const char* call, const char* type) {
  if (out == nullptr) return absl::InvalidArgumentError(absl::StrFormat("%s: null %s", call, type));
  if (out->struct_size < needed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s struct_size %d is smaller than the %d bytes of sparkrt.mock.v1; set it to the "
        "header's size macro",
        call, type, out->struct_size, needed));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::StatusCode> fault_code(int32_t code, absl::StatusCode fallback,
                                            const char* call) {
  if (code == 0) return fallback;
  if (code < 1 || code > 16) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d is not an absl::StatusCode error value (1..16)", call, code));
  }
  return static_cast<absl::StatusCode>(code);
}

SparkrtError* ext_reset(SparkrtDevice* d) {
  return ext_call(d, "reset", [](MockDevice& m) {
    m.reset();
    return absl::OkStatus();
  });
}

SparkrtError* ext_get_counters(SparkrtDevice* d, SparkrtMockCounters* out) {
  return ext_call(d, "get_counters", [&](MockDevice& m) {
    absl::Status s = check_out(out, SPARKRT_MOCK_COUNTERS_SIZE, "get_counters", "SparkrtMockCounters");
    if (s.ok()) m.counters(*out);
    return s;
  });
}

SparkrtError* ext_get_stream_counters(SparkrtDevice* d, SparkrtStream stream,
                                      SparkrtMockStreamCounters* out) {
  return ext_call(d, "get_stream_counters", [&](MockDevice& m) {
    absl::Status s = check_out(out, SPARKRT_MOCK_STREAM_COUNTERS_SIZE, "get_stream_counters",
                               "SparkrtMockStreamCounters");
    return s.ok() ? m.stream_counters(stream, *out) : s;
  });
}

SparkrtError* ext_lookup_count(SparkrtDevice* d, uint64_t* count) {
  return ext_call(d, "lookup_count", [&](MockDevice& m) {
    if (count == nullptr) return absl::InvalidArgumentError("lookup_count: null count");
    *count = m.lookup_count();
    return absl::OkStatus();
  });
}

SparkrtError* ext_get_lookup(SparkrtDevice* d, uint64_t index, SparkrtMockLookup* out) {
  return ext_call(d, "get_lookup", [&](MockDevice& m) {
    absl::Status s = check_out(out, SPARKRT_MOCK_LOOKUP_SIZE, "get_lookup", "SparkrtMockLookup");
    return s.ok() ? m.lookup(index, *out) : s;
  });
}

SparkrtError* ext_launch_count(SparkrtDevice* d, uint64_t* count) {
  return ext_call(d, "launch_count", [&](MockDevice& m) {
    if (count == nullptr) return absl::InvalidArgumentError("launch_count: null count");
    *count = m.launch_count();
    return absl::OkStatus();
  });
}

SparkrtError* ext_get_launch(SparkrtDevice* d, uint64_t index, SparkrtMockLaunch* out) {
  return ext_call(d, "get_launch", [&](MockDevice& m) {
    absl::Status s = check_out(out, SPARKRT_MOCK_LAUNCH_SIZE, "get_launch", "SparkrtMockLaunch");
    return s.ok() ? m.launch_record(index, *out) : s;
  });
}

SparkrtError* ext_get_launch_attributes(SparkrtDevice* d, uint64_t index,
                                        SparkrtMockLaunchAttributes* out) {
  return ext_call(d, "get_launch_attributes", [&](MockDevice& m) {
    absl::Status s = check_out(out, SPARKRT_MOCK_LAUNCH_ATTRIBUTES_SIZE, "get_launch_attributes",
                               "SparkrtMockLaunchAttributes");
    return s.ok() ? m.launch_attributes(index, *out) : s;
  });
}

SparkrtError* ext_get_launch_arg(SparkrtDevice* d, uint64_t index, uint32_t arg,
                                 SparkrtMockArg* out) {
  return ext_call(d, "get_launch_arg", [&](MockDevice& m) {
    absl::Status s = check_out(out, SPARKRT_MOCK_ARG_SIZE, "get_launch_arg", "SparkrtMockArg");
    return s.ok() ? m.launch_arg(index, arg, *out) : s;
  });
}

SparkrtError* ext_pointer_info(SparkrtDevice* d, SparkrtDevicePtr ptr,
                               SparkrtMockPointerInfo* out) {
  return ext_call(d, "pointer_info", [&](MockDevice& m) {
    absl::Status s =
        check_out(out, SPARKRT_MOCK_POINTER_INFO_SIZE, "pointer_info", "SparkrtMockPointerInfo");
    return s.ok() ? m.pointer_info(ptr, *out) : s;
  });
}

SparkrtError* ext_deny_lookup(SparkrtDevice* d, const char* module, const char* entry,
                              int32_t code) {
  return ext_call(d, "deny_lookup", [&](MockDevice& m) {
    auto c = fault_code(code, absl::StatusCode::kNotFound, "deny_lookup");
    if (!c.ok()) return c.status();
    m.deny_lookup(module ? module : "", entry ? entry : "", *c);
    return absl::OkStatus();
  });
}

SparkrtError* ext_cap_memory(SparkrtDevice* d, uint64_t bytes) {
  return ext_call(d, "cap_memory", [&](MockDevice& m) {
    m.cap_memory(bytes);
    return absl::OkStatus();
  });
}

SparkrtError* ext_fail_launch(SparkrtDevice* d, uint64_t nth, int32_t code) {
  return ext_call(d, "fail_launch", [&](MockDevice& m) {
    auto c = fault_code(code, absl::StatusCode::kInternal, "fail_launch");
    if (!c.ok()) return c.status();
    m.fail_launch(nth, *c);
    return absl::OkStatus();
  });
}

SparkrtError* ext_clear_faults(SparkrtDevice* d) {
  return ext_call(d, "clear_faults", [](MockDevice& m) {
    m.clear_faults();
    return absl::OkStatus();
  });
}

SparkrtError* ext_set_recording(SparkrtDevice* d, int32_t record_launches,
                                uint64_t max_launch_records) {
  return ext_call(d, "set_recording", [&](MockDevice& m) {
    m.set_recording(record_launches != 0, max_launch_records);
    return absl::OkStatus();
  });
}

SparkrtError* ext_collective_count(SparkrtDevice* d, uint64_t* count) {
  return ext_call(d, "collective_count", [&](MockDevice& m) {
    if (count == nullptr) return absl::InvalidArgumentError("collective_count: null count");
    *count = m.collective_count();
    return absl::OkStatus();
  });
}

SparkrtError* ext_get_collective(SparkrtDevice* d, uint64_t index, SparkrtMockCollective* out) {
  return ext_call(d, "get_collective", [&](MockDevice& m) {
    absl::Status s = check_out(out, SPARKRT_MOCK_COLLECTIVE_SIZE, "get_collective",
                               "SparkrtMockCollective");
    return s.ok() ? m.collective_record(index, *out) : s;
  });
}

SparkrtError* ext_set_log_path(SparkrtDevice* d, const char* path) {
  return ext_call(d, "set_log_path", [&](MockDevice& m) {
    return m.set_log_path(path ? std::string_view(path) : std::string_view());
  });
}

using Adapter = sdk::detail::Adapter<MockBackend>;

const SparkrtMockExtension kExtension = {
    SPARKRT_MOCK_EXTENSION_SIZE,
    &Adapter::error_code,
    &Adapter::error_message,
    &Adapter::error_destroy,
    &ext_reset,
    &ext_get_counters,
    &ext_get_stream_counters,
    &ext_lookup_count,
    &ext_get_lookup,
    &ext_launch_count,
    &ext_get_launch,
    &ext_get_launch_arg,
    &ext_pointer_info,
    &ext_deny_lookup,
    &ext_cap_memory,
    &ext_fail_launch,
    &ext_clear_faults,
    &ext_set_recording,
    &ext_set_log_path,
    &ext_collective_count,
    &ext_get_collective,
    &ext_get_launch_attributes,
};

const void* MockBackend::extension(std::string_view name) {
  if (name == SPARKRT_MOCK_EXTENSION_NAME) return &kExtension;
  if (name == SPARKRT_GRAPH_EXTENSION_NAME) return sdk::recorded_graph_extension();
  if (name == SPARKRT_COLLECTIVES_EXTENSION_NAME) return sdk::host_collectives_extension("mock");
  return nullptr;
}

}  // namespace
}  // namespace sparkrt::mock

SPARKRT_DEFINE_PLUGIN(sparkrt::mock::MockBackend, "mock", SPARKRT_VERSION)
