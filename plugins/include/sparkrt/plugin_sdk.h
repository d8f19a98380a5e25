// sparkrt plugin SDK: write a backend as a few C++ classes, export it as the
// C table of plugin_api.h with one macro.
//
//   class MyDevice : public sparkrt::sdk::Device { ... };
//   class MyBackend : public sparkrt::sdk::Backend { ... };
//   SPARKRT_DEFINE_PLUGIN(MyBackend, "mine", "0.1.0")
//
// The adapter below owns the boundary: it checks struct sizes, turns
// absl::Status into SparkrtError, catches exceptions so none crosses the C ABI,
// and converts opaque handles back into the classes. A backend only
// implements behaviour. Everything here is header-only; a plugin links abseil
// and nothing of the runtime. sdk/collectives_adapter.h does the same for the
// collectives extension's table.
//
// Lifetimes: the Backend object is created on first use of the table and lives
// until the library is unloaded. A Device lives from device_open to
// device_close; its Modules until module_unload (or device close); a Kernel is
// owned by its Module. All virtuals may be called from several threads.
#ifndef SPARKRT_PLUGIN_SDK_H_
#define SPARKRT_PLUGIN_SDK_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <new>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/plugin_api.h"

namespace sparkrt::sdk {

// Base of a backend's kernel object; the backend downcasts in launch().
class Kernel {
 public:
  virtual ~Kernel() = default;
};

class Module {
 public:
  virtual ~Module() = default;
  // Resolves `entry`; `params` is the PTX-declared signature. The returned
  // kernel is owned by the module and lives as long as it.
  virtual absl::StatusOr<Kernel*> get_kernel(std::string_view entry,
                                             std::span<const SparkrtParamInfo> params) = 0;
};

// One launch, already validated by the runtime (see SparkrtLaunchArgs).
struct Launch {
  Kernel* kernel;
  std::array<uint32_t, 3> grid;
  std::array<uint32_t, 3> block;
  uint32_t shared_memory_bytes;
  SparkrtStream stream;
  std::span<const std::byte> params;
  std::span<const uint32_t> arg_offsets;
  std::span<const uint32_t> arg_sizes;
  std::span<const uint8_t> arg_kinds;
  // Launch attributes (ABI 1.4); 0 and {0, 0, 0} when the runtime sent none.
  uint32_t flags = 0;                       // SPARKRT_LAUNCH_* bits
  std::array<uint32_t, 3> cluster{0, 0, 0};  // blocks; {0, 0, 0}: no cluster
};

class Device {
 public:
  // Destroys everything the device still owns (streams, events, memory).
  virtual ~Device() {
    for (void* p : host_allocations_) ::operator delete(p, std::align_val_t{64});
  }

  // Called by device_close before the destructor, which runs either way; an
  // error (e.g. a trace that could not be written) is device_close's result.
  virtual absl::Status close() { return absl::OkStatus(); }
  virtual absl::Status properties(SparkrtDeviceProperties& out) = 0;
  virtual absl::StatusOr<std::unique_ptr<Module>> load_module(
      std::string_view name, SparkrtImageFormat format, std::span<const std::byte> image) = 0;

  virtual absl::StatusOr<SparkrtDevicePtr> alloc(uint64_t bytes) = 0;
  virtual absl::Status free(SparkrtDevicePtr ptr) = 0;
  // Default: ordinary aligned host memory, tracked so that freeing a pointer
  // this device did not hand out is an error, and freed with the device.
  virtual absl::StatusOr<void*> host_alloc(uint64_t bytes) {
    void* p = ::operator new(bytes, std::align_val_t{64}, std::nothrow);
    if (p == nullptr) return absl::ResourceExhaustedError("host_alloc: out of host memory");
    std::lock_guard<std::mutex> lock(host_mu_);
    host_allocations_.insert(p);
    return p;
  }
  virtual absl::Status host_free(void* ptr) {
    {
      std::lock_guard<std::mutex> lock(host_mu_);
      if (host_allocations_.erase(ptr) == 0)
        return absl::InvalidArgumentError(
            "host_free: pointer was not returned by host_alloc of this device (or already freed)");
    }
    ::operator delete(ptr, std::align_val_t{64});
    return absl::OkStatus();
  }
  virtual absl::Status memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes,
                              SparkrtStream stream, bool blocking) = 0;
  // Exactly one of the device/host pointers on each side is meaningful,
  // chosen by `kind` (see SparkrtMemcpyArgs).
  virtual absl::Status memcpy(const SparkrtMemcpyArgs& copy) = 0;

  virtual absl::StatusOr<SparkrtStream> create_stream() = 0;
  virtual absl::Status destroy_stream(SparkrtStream stream) = 0;
  virtual absl::Status synchronize(SparkrtStream stream) = 0;

  virtual absl::StatusOr<SparkrtEvent> create_event() = 0;
  virtual absl::Status destroy_event(SparkrtEvent event) = 0;
  virtual absl::Status record_event(SparkrtEvent event, SparkrtStream stream) = 0;
  virtual absl::Status synchronize_event(SparkrtEvent event) = 0;
  virtual absl::Status wait_event(SparkrtStream stream, SparkrtEvent event) = 0;
  virtual absl::StatusOr<float> elapsed_ms(SparkrtEvent start, SparkrtEvent end) = 0;

  virtual absl::Status launch(const Launch& launch) = 0;

 private:
  std::mutex host_mu_;
  std::set<void*> host_allocations_;  // from the default host_alloc
};

class Backend {
 public:
  virtual ~Backend() = default;
  // An error (rather than 0) explains why there is no device, e.g. no driver.
  virtual absl::StatusOr<int> device_count() = 0;
  virtual absl::StatusOr<std::unique_ptr<Device>> open_device(int index) = 0;
  // Named extension table, or nullptr when not implemented.
  virtual const void* extension(std::string_view /*name*/) { return nullptr; }
};

namespace detail {

struct Error {
  int32_t code;
  std::string message;
};

// The error returned when an Error cannot be allocated: a null SparkrtError*
// means success in the ABI, so an out-of-memory must never become one. It is
// constant-initialized (nothing is allocated or constructed at run time), one
// per plugin, and error_destroy leaves it alone (compared by address).
struct StaticError {
  int32_t code;
  const char* message;
  size_t size;
};
inline constexpr char kOutOfMemoryMessage[] =
    "out of host memory (the plugin could not allocate the error describing the failure)";

inline SparkrtError* out_of_memory_error() noexcept {
  static constinit StaticError error{static_cast<int32_t>(absl::StatusCode::kResourceExhausted),
                                     kOutOfMemoryMessage, sizeof(kOutOfMemoryMessage) - 1};
  return reinterpret_cast<SparkrtError*>(&error);
}

// nullptr for OK; otherwise a heap Error, or out_of_memory_error() when that
// cannot be allocated.
inline SparkrtError* to_error(const absl::Status& status) noexcept {
  if (status.ok()) return nullptr;
  try {
    if (auto* e = new (std::nothrow)
            Error{static_cast<int32_t>(status.code()), std::string(status.message())})
      return reinterpret_cast<SparkrtError*>(e);
  } catch (...) {  // the message's copy
  }
  return out_of_memory_error();
}

// A call's name in the errors the adapter makes itself (null or short args,
// an exception): `prefix` then `call`, joined only when an error is made.
struct CallName {
  CallName(const char* c) : call(c) {}  // implicit: most calls have a plain name
  CallName(const char* p, const char* c) : prefix(p), call(c) {}
  std::string str() const { return std::string(prefix) + call; }
  const char* prefix = "";
  const char* call;
};

// An error built from a code and text that may itself fail to allocate.
inline SparkrtError* make_error(absl::StatusCode code, CallName call,
                                std::string_view what) noexcept {
  try {
    return to_error(absl::Status(code, call.str() + ": " + std::string(what)));
  } catch (...) {
    return out_of_memory_error();
  }
}

inline SparkrtError* short_struct(CallName call, size_t given, size_t needed) noexcept {
  try {
    return to_error(absl::InvalidArgumentError(
        call.str() + ": args struct_size " + std::to_string(given) +
        " is smaller than the " + std::to_string(needed) +
        " bytes this plugin needs; rebuild the caller against this SDK"));
  } catch (...) {
    return out_of_memory_error();
  }
}

// Runs `fn` (returning Status) with the struct size checked and exceptions
// contained. Never returns nullptr for a failure, even out of memory.
template <typename Args, typename Fn>
SparkrtError* guard(CallName call, Args* a, size_t needed, Fn&& fn) noexcept {
  if (a == nullptr) return make_error(absl::StatusCode::kInvalidArgument, call, "null args");
  if (a->struct_size < needed) return short_struct(call, a->struct_size, needed);
  try {
    return to_error(fn());
  } catch (const std::bad_alloc&) {
    return make_error(absl::StatusCode::kResourceExhausted, call, "out of host memory");
  } catch (const std::exception& ex) {
    return make_error(absl::StatusCode::kInternal, call, ex.what());
  } catch (...) {
    return make_error(absl::StatusCode::kInternal, call, "unknown exception");
  }
}

template <typename T, typename Opaque>
T* unwrap(Opaque* p) {
  return reinterpret_cast<T*>(p);
}
template <typename Opaque, typename T>
Opaque* wrap(T* p) {
  return reinterpret_cast<Opaque*>(p);
}

template <typename Backend>
Backend& backend() {
  static Backend instance;  // lives until the library is unloaded
  return instance;
}

// The error functions of the plugin's table, which the extension tables the
// SDK makes (sdk/collectives_adapter.h) share: an error from any of them is
// read and released the same way.
inline int32_t error_code(const SparkrtError* e) {
  if (e == out_of_memory_error()) return unwrap<const StaticError>(e)->code;
  return unwrap<const Error>(e)->code;
}
inline void error_message(const SparkrtError* e, const char** msg, size_t* size) {
  if (e == out_of_memory_error()) {
    *msg = unwrap<const StaticError>(e)->message;
    *size = unwrap<const StaticError>(e)->size;
    return;
  }
  const auto* err = unwrap<const Error>(e);
  *msg = err->message.data();
  *size = err->message.size();
}
// The static out-of-memory error is never freed.
inline void error_destroy(SparkrtError* e) {
  if (e == out_of_memory_error()) return;
  delete unwrap<Error>(e);
}

template <typename B>
struct Adapter {
  static int32_t error_code(const SparkrtError* e) { return detail::error_code(e); }
  static void error_message(const SparkrtError* e, const char** msg, size_t* size) {
    detail::error_message(e, msg, size);
  }
  static void error_destroy(SparkrtError* e) { detail::error_destroy(e); }

  static Device* dev(SparkrtDevice* d) { return unwrap<Device>(d); }
  static absl::Status null_device() { return absl::InvalidArgumentError("null device handle"); }

  static SparkrtError* device_count(SparkrtDeviceCountArgs* a) {
    return guard("device_count", a, SPARKRT_DEVICE_COUNT_ARGS_SIZE, [&] {
      auto n = backend<B>().device_count();
      if (!n.ok()) return n.status();
      a->count = *n;
      return absl::OkStatus();
    });
  }
  static SparkrtError* device_open(SparkrtDeviceOpenArgs* a) {
    return guard("device_open", a, SPARKRT_DEVICE_OPEN_ARGS_SIZE, [&] {
      auto d = backend<B>().open_device(a->index);
      if (!d.ok()) return d.status();
      a->device = wrap<SparkrtDevice>(d->release());
      return absl::OkStatus();
    });
  }
  static SparkrtError* device_close(SparkrtDeviceCloseArgs* a) {
    return guard("device_close", a, SPARKRT_DEVICE_CLOSE_ARGS_SIZE, [&] {
      std::unique_ptr<Device> d(dev(a->device));
      return d != nullptr ? d->close() : absl::OkStatus();
    });
  }
  static SparkrtError* device_get_properties(SparkrtDeviceGetPropertiesArgs* a) {
    return guard("device_get_properties", a, SPARKRT_DEVICE_GET_PROPERTIES_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      if (a->properties == nullptr ||
          a->properties->struct_size < SPARKRT_DEVICE_PROPERTIES_SIZE_1_0)
        return absl::InvalidArgumentError("device_get_properties: properties struct too small");
      // Filled whole, handed over as far as the caller's struct reaches.
      SparkrtDeviceProperties full{};
      full.struct_size = sizeof(full);
      if (auto s = dev(a->device)->properties(full); !s.ok()) return s;
      const size_t given = a->properties->struct_size;
      std::memcpy(a->properties, &full, std::min(given, sizeof(full)));
      a->properties->struct_size = given;
      return absl::OkStatus();
    });
  }
  static SparkrtError* module_load(SparkrtModuleLoadArgs* a) {
    return guard("module_load", a, SPARKRT_MODULE_LOAD_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      auto m = dev(a->device)->load_module(
          a->name ? std::string_view(a->name) : std::string_view(), a->format,
          std::span<const std::byte>(static_cast<const std::byte*>(a->image), a->image_size));
      if (!m.ok()) return m.status();
      a->module = wrap<SparkrtModule>(m->release());
      return absl::OkStatus();
    });
  }
  static SparkrtError* module_unload(SparkrtModuleUnloadArgs* a) {
    return guard("module_unload", a, SPARKRT_MODULE_UNLOAD_ARGS_SIZE, [&] {
      delete unwrap<Module>(a->module);
      return absl::OkStatus();
    });
  }
  static SparkrtError* kernel_get(SparkrtKernelGetArgs* a) {
    return guard("kernel_get", a, SPARKRT_KERNEL_GET_ARGS_SIZE, [&] {
      if (a->module == nullptr || a->entry == nullptr)
        return absl::InvalidArgumentError("kernel_get: null module or entry");
      auto k = unwrap<Module>(a->module)->get_kernel(
          a->entry, std::span<const SparkrtParamInfo>(a->params, a->num_params));
      if (!k.ok()) return k.status();
      a->kernel = wrap<SparkrtKernel>(*k);
      return absl::OkStatus();
    });
  }
  static SparkrtError* mem_alloc(SparkrtMemAllocArgs* a) {
    return guard("mem_alloc", a, SPARKRT_MEM_ALLOC_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      auto p = dev(a->device)->alloc(a->bytes);
      if (!p.ok()) return p.status();
      a->ptr = *p;
      return absl::OkStatus();
    });
  }
  static SparkrtError* mem_free(SparkrtMemFreeArgs* a) {
    return guard("mem_free", a, SPARKRT_MEM_FREE_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      return dev(a->device)->free(a->ptr);
    });
  }
  static SparkrtError* host_alloc(SparkrtHostAllocArgs* a) {
    return guard("host_alloc", a, SPARKRT_HOST_ALLOC_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      auto p = dev(a->device)->host_alloc(a->bytes);
      if (!p.ok()) return p.status();
      a->ptr = *p;
      return absl::OkStatus();
    });
  }
  static SparkrtError* host_free(SparkrtHostFreeArgs* a) {
    return guard("host_free", a, SPARKRT_HOST_FREE_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      return dev(a->device)->host_free(a->ptr);
    });
  }
  static SparkrtError* memset(SparkrtMemsetArgs* a) {
    return guard("memset", a, SPARKRT_MEMSET_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      return dev(a->device)->memset(a->dst, a->value, a->bytes, a->stream, a->blocking != 0);
    });
  }
  static SparkrtError* memcpy(SparkrtMemcpyArgs* a) {
    return guard("memcpy", a, SPARKRT_MEMCPY_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      return dev(a->device)->memcpy(*a);
    });
  }
  static SparkrtError* stream_create(SparkrtStreamCreateArgs* a) {
    return guard("stream_create", a, SPARKRT_STREAM_CREATE_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      auto s = dev(a->device)->create_stream();
      if (!s.ok()) return s.status();
      a->stream = *s;
      return absl::OkStatus();
    });
  }
  static SparkrtError* stream_destroy(SparkrtStreamArgs* a) {
    return guard("stream_destroy", a, SPARKRT_STREAM_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      return dev(a->device)->destroy_stream(a->stream);
    });
  }
  static SparkrtError* stream_synchronize(SparkrtStreamArgs* a) {
    return guard("stream_synchronize", a, SPARKRT_STREAM_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      return dev(a->device)->synchronize(a->stream);
    });
  }
  static SparkrtError* event_create(SparkrtEventCreateArgs* a) {
    return guard("event_create", a, SPARKRT_EVENT_CREATE_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      auto e = dev(a->device)->create_event();
      if (!e.ok()) return e.status();
      a->event = *e;
      return absl::OkStatus();
    });
  }
  static SparkrtError* event_destroy(SparkrtEventArgs* a) {
    return guard("event_destroy", a, SPARKRT_EVENT_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      return dev(a->device)->destroy_event(a->event);
    });
  }
  static SparkrtError* event_record(SparkrtEventArgs* a) {
    return guard("event_record", a, SPARKRT_EVENT_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      return dev(a->device)->record_event(a->event, a->stream);
    });
  }
  static SparkrtError* event_synchronize(SparkrtEventArgs* a) {
    return guard("event_synchronize", a, SPARKRT_EVENT_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      return dev(a->device)->synchronize_event(a->event);
    });
  }
  static SparkrtError* stream_wait_event(SparkrtEventArgs* a) {
    return guard("stream_wait_event", a, SPARKRT_EVENT_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      return dev(a->device)->wait_event(a->stream, a->event);
    });
  }
  static SparkrtError* event_elapsed(SparkrtEventElapsedArgs* a) {
    return guard("event_elapsed", a, SPARKRT_EVENT_ELAPSED_ARGS_SIZE, [&] {
      if (a->device == nullptr) return null_device();
      auto ms = dev(a->device)->elapsed_ms(a->start, a->end);
      if (!ms.ok()) return ms.status();
      a->milliseconds = *ms;
      return absl::OkStatus();
    });
  }
  static SparkrtError* launch(SparkrtLaunchArgs* a) {
    // A runtime of ABI 1.3 sends no launch attributes.
    return guard("launch", a, SPARKRT_LAUNCH_ARGS_SIZE_1_3, [&] {
      if (a->device == nullptr) return null_device();
      if (a->kernel == nullptr) return absl::InvalidArgumentError("launch: null kernel handle");
      Launch l{
          unwrap<Kernel>(a->kernel),
          {a->grid[0], a->grid[1], a->grid[2]},
          {a->block[0], a->block[1], a->block[2]},
          a->shared_memory_bytes,
          a->stream,
          {static_cast<const std::byte*>(a->params), a->params_size},
          {a->arg_offsets, a->num_args},
          {a->arg_sizes, a->num_args},
          {a->arg_kinds, a->num_args},
      };
      if (a->struct_size >= SPARKRT_LAUNCH_ARGS_SIZE) {
        l.flags = a->flags;
        l.cluster = {a->cluster[0], a->cluster[1], a->cluster[2]};
      }
      return dev(a->device)->launch(l);
    });
  }
  static SparkrtError* get_extension(SparkrtGetExtensionArgs* a) {
    return guard("get_extension", a, SPARKRT_GET_EXTENSION_ARGS_SIZE, [&] {
      a->extension = a->name ? backend<B>().extension(a->name) : nullptr;
      return absl::OkStatus();
    });
  }
};

template <typename B>
const SparkrtPluginApi* make_api(const char* name, const char* version) {
  using A = Adapter<B>;
  static const SparkrtPluginApi api = {
      SPARKRT_PLUGIN_API_SIZE, SPARKRT_ABI_MAJOR, SPARKRT_ABI_MINOR, name, version,
      &A::error_code, &A::error_message, &A::error_destroy,
      &A::device_count, &A::device_open, &A::device_close, &A::device_get_properties,
      &A::module_load, &A::module_unload, &A::kernel_get,
      &A::mem_alloc, &A::mem_free, &A::host_alloc, &A::host_free, &A::memset, &A::memcpy,
      &A::stream_create, &A::stream_destroy, &A::stream_synchronize,
      &A::event_create, &A::event_destroy, &A::event_record, &A::event_synchronize,
      &A::stream_wait_event, &A::event_elapsed,
      &A::launch, &A::get_extension,
  };
  return &api;
}

}  // namespace detail
}  // namespace sparkrt::sdk

// Exports the plugin's entry symbol for backend class `BackendClass`.
#define SPARKRT_DEFINE_PLUGIN(BackendClass, name, version)                         \
  extern "C" __attribute__((visibility("default"))) const SparkrtPluginApi*        \
  sparkrt_plugin_api(void) {                                                       \
    return ::sparkrt::sdk::detail::make_api<BackendClass>(name, version);          \
  }

#endif  // SPARKRT_PLUGIN_SDK_H_
