// The C API's core: errors, devices, memory, streams, events, kernels,
// launches and graphs, each a thin shell over the C++ call of the same name.
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "c_api_internal.h"
#include "sparkrt/extensions/collectives.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/signature.h"

using sparkrt::ArgKind;
using sparkrt::Device;
using sparkrt::DevicePtr;
using sparkrt::Event;
using sparkrt::Graph;
using sparkrt::KernelLaunch;
using sparkrt::Stream;
using sparkrt::capi::check_in_struct;
using sparkrt::capi::dev;
using sparkrt::capi::fill_out_struct;
using sparkrt::capi::guarded;
using sparkrt::capi::to_c;

sparkrt_status sparkrt::capi::g_out_of_memory{
    static_cast<int32_t>(absl::StatusCode::kResourceExhausted),
    "out of host memory (no room even for the error)"};

namespace {

// The C++ API's handles from the C ones.
Stream stream_of(SparkrtStream s) { return Stream{s}; }
Event event_of(SparkrtEvent e) { return Event{e}; }

template <typename T>
absl::Status put(T* out, const absl::StatusOr<T>& value) {
  if (!value.ok()) return value.status();
  *out = *value;
  return absl::OkStatus();
}

sparkrt_param_type param_type_of(sparkrt::ParamType t) {
  // ParamType lists the PTX types in the header's order, from kU8.
  return static_cast<sparkrt_param_type>(static_cast<int>(t) + SPARKRT_PARAM_U8);
}

}  // namespace

extern "C" {

// ---- version and errors ----------------------------------------------------

uint32_t sparkrt_c_api_version(void) {
  return (uint32_t{SPARKRT_C_API_MAJOR} << 16) | SPARKRT_C_API_MINOR;
}

const char* sparkrt_version_string(void) { return SPARKRT_VERSION_STRING; }

int32_t sparkrt_status_code(const sparkrt_status* status) {
  return status == nullptr ? SPARKRT_OK : status->code;
}

const char* sparkrt_status_message(const sparkrt_status* status) {
  return status == nullptr ? "" : status->message.c_str();
}

void sparkrt_status_free(sparkrt_status* status) {
  if (status != &sparkrt::capi::g_out_of_memory) delete status;
}

sparkrt_status* sparkrt_status_new(int32_t code, const char* message) {
  if (code == SPARKRT_OK) return nullptr;
  if (code < 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated))
    code = static_cast<int32_t>(absl::StatusCode::kUnknown);
  return to_c(absl::Status(static_cast<absl::StatusCode>(code), message ? message : ""));
}

const char* sparkrt_code_name(int32_t code) {
  switch (code) {
    case SPARKRT_OK: return "OK";
    case SPARKRT_CANCELLED: return "CANCELLED";
    case SPARKRT_UNKNOWN: return "UNKNOWN";
    case SPARKRT_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case SPARKRT_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case SPARKRT_NOT_FOUND: return "NOT_FOUND";
    case SPARKRT_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case SPARKRT_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case SPARKRT_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case SPARKRT_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case SPARKRT_ABORTED: return "ABORTED";
    case SPARKRT_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case SPARKRT_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case SPARKRT_INTERNAL: return "INTERNAL";
    case SPARKRT_UNAVAILABLE: return "UNAVAILABLE";
    case SPARKRT_DATA_LOSS: return "DATA_LOSS";
    case SPARKRT_UNAUTHENTICATED: return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

// ---- devices ---------------------------------------------------------------

sparkrt_status* sparkrt_device_open(const sparkrt_open_options* options, sparkrt_device** device) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    sparkrt::OpenOptions o;
    if (options != nullptr) {
      if (auto s = check_in_struct(fn, "sparkrt_open_options", options->struct_size,
                                   SPARKRT_C_OPEN_OPTIONS_SIZE);
          !s.ok())
        return s;
      if (options->backend != nullptr) o.backend = options->backend;
      o.device_index = options->device_index;
    }
    auto d = Device::open(o);
    if (!d.ok()) return d.status();
    auto handle = std::make_unique<sparkrt_device>();
    handle->device = *std::move(d);
    handle->ops.reset(sparkrt::capi::new_op_kernels());
    *device = handle.release();
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_device_close(sparkrt_device* device) {
  if (device == nullptr) return nullptr;
  sparkrt_status* st = guarded(__func__, [&] { return device->device->close(); });
  delete device;
  return st;
}

sparkrt_status* sparkrt_device_properties_get(const sparkrt_device* device,
                                              sparkrt_device_properties* out) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&](const char* fn) {
    const Device& d = *device->device;
    const sparkrt::DeviceProperties& p = d.properties();
    sparkrt_device_properties full{};
    full.backend = d.backend_name().c_str();
    full.plugin_path = d.plugin_path().c_str();
    full.plugin_version = d.plugin_version().c_str();
    full.name = p.name.c_str();
    full.architecture = p.architecture.c_str();
    full.driver = p.driver.c_str();
    full.index = d.index();
    full.multiprocessor_count = p.multiprocessor_count;
    full.total_memory = p.total_memory;
    full.warp_size = p.warp_size;
    full.max_threads_per_block = p.max_threads_per_block;
    full.max_block_dim[0] = p.max_block_dim.x;
    full.max_block_dim[1] = p.max_block_dim.y;
    full.max_block_dim[2] = p.max_block_dim.z;
    full.max_grid_dim[0] = p.max_grid_dim.x;
    full.max_grid_dim[1] = p.max_grid_dim.y;
    full.max_grid_dim[2] = p.max_grid_dim.z;
    full.max_shared_memory_per_block = p.max_shared_memory_per_block;
    full.max_shared_memory_per_block_optin = p.max_shared_memory_per_block_optin;
    full.compute_capability_major = p.compute_capability_major;
    full.compute_capability_minor = p.compute_capability_minor;
    full.accepts_ptx = p.accepts_ptx;
    full.accepts_cubin = p.accepts_cubin;
    full.accepts_spirv = p.accepts_spirv;
    full.accepts_signatures = p.accepts_signatures;
    full.emulated = p.emulated;
    full.has_graphs = d.supports_graphs();
    full.has_collectives = d.extension(SPARKRT_COLLECTIVES_EXTENSION_NAME) != nullptr;
    full.supports_dependent_launch = p.supports_dependent_launch;
    full.supports_clusters = p.supports_clusters;
    full.max_cluster_size = p.max_cluster_size;
    return fill_out_struct(fn, "sparkrt_device_properties", out, full,
                           SPARKRT_STRUCT_SIZE(sparkrt_device_properties, backend));
  });
}

const void* sparkrt_device_extension(const sparkrt_device* device, const char* name) {
  if (device == nullptr || name == nullptr) return nullptr;
  return device->device->extension(name);
}

SparkrtDevice* sparkrt_device_native_handle(const sparkrt_device* device) {
  return device == nullptr ? nullptr : device->device->native_handle();
}

// ---- memory ----------------------------------------------------------------

sparkrt_status* sparkrt_alloc(sparkrt_device* device, size_t bytes, SparkrtDevicePtr* out) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&]() -> absl::Status {
    auto p = dev(device).alloc(bytes);
    if (!p.ok()) return p.status();
    *out = p->addr;
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_free(sparkrt_device* device, SparkrtDevicePtr ptr) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] { return dev(device).free(DevicePtr(ptr)); });
}

sparkrt_status* sparkrt_alloc_host(sparkrt_device* device, size_t bytes, void** out) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&] { return put(out, dev(device).alloc_host(bytes)); });
}

sparkrt_status* sparkrt_free_host(sparkrt_device* device, void* ptr) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] { return dev(device).free_host(ptr); });
}

sparkrt_status* sparkrt_memset(sparkrt_device* device, SparkrtDevicePtr dst, uint8_t value,
                               size_t bytes) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] { return dev(device).memset(DevicePtr(dst), value, bytes); });
}

sparkrt_status* sparkrt_memset_async(sparkrt_device* device, SparkrtDevicePtr dst, uint8_t value,
                                     size_t bytes, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] {
    return dev(device).memset_async(DevicePtr(dst), value, bytes, stream_of(stream));
  });
}

sparkrt_status* sparkrt_copy_h2d(sparkrt_device* device, const void* src, SparkrtDevicePtr dst,
                                 size_t bytes) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] { return dev(device).copy_h2d(src, DevicePtr(dst), bytes); });
}

sparkrt_status* sparkrt_copy_d2h(sparkrt_device* device, SparkrtDevicePtr src, void* dst,
                                 size_t bytes) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] { return dev(device).copy_d2h(DevicePtr(src), dst, bytes); });
}

sparkrt_status* sparkrt_copy_d2d(sparkrt_device* device, SparkrtDevicePtr src,
                                 SparkrtDevicePtr dst, size_t bytes) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__,
                 [&] { return dev(device).copy_d2d(DevicePtr(src), DevicePtr(dst), bytes); });
}

sparkrt_status* sparkrt_copy_h2d_async(sparkrt_device* device, const void* src,
                                       SparkrtDevicePtr dst, size_t bytes, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] {
    return dev(device).copy_h2d_async(src, DevicePtr(dst), bytes, stream_of(stream));
  });
}

sparkrt_status* sparkrt_copy_d2h_async(sparkrt_device* device, SparkrtDevicePtr src, void* dst,
                                       size_t bytes, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] {
    return dev(device).copy_d2h_async(DevicePtr(src), dst, bytes, stream_of(stream));
  });
}

sparkrt_status* sparkrt_copy_d2d_async(sparkrt_device* device, SparkrtDevicePtr src,
                                       SparkrtDevicePtr dst, size_t bytes, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] {
    return dev(device).copy_d2d_async(DevicePtr(src), DevicePtr(dst), bytes, stream_of(stream));
  });
}

// ---- streams and events ----------------------------------------------------

sparkrt_status* sparkrt_stream_create(sparkrt_device* device, SparkrtStream* out) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&]() -> absl::Status {
    auto s = dev(device).create_stream();
    if (!s.ok()) return s.status();
    *out = s->handle;
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_stream_destroy(sparkrt_device* device, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] { return dev(device).destroy_stream(stream_of(stream)); });
}

sparkrt_status* sparkrt_stream_synchronize(sparkrt_device* device, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] { return dev(device).synchronize(stream_of(stream)); });
}

sparkrt_status* sparkrt_event_create(sparkrt_device* device, SparkrtEvent* out) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&]() -> absl::Status {
    auto e = dev(device).create_event();
    if (!e.ok()) return e.status();
    *out = e->handle;
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_event_destroy(sparkrt_device* device, SparkrtEvent event) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] { return dev(device).destroy_event(event_of(event)); });
}

sparkrt_status* sparkrt_event_record(sparkrt_device* device, SparkrtEvent event,
                                     SparkrtStream stream) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__,
                 [&] { return dev(device).record_event(event_of(event), stream_of(stream)); });
}

sparkrt_status* sparkrt_event_synchronize(sparkrt_device* device, SparkrtEvent event) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&] { return dev(device).synchronize_event(event_of(event)); });
}

sparkrt_status* sparkrt_stream_wait_event(sparkrt_device* device, SparkrtStream stream,
                                          SparkrtEvent event) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__,
                 [&] { return dev(device).wait_event(stream_of(stream), event_of(event)); });
}

sparkrt_status* sparkrt_event_elapsed_ms(sparkrt_device* device, SparkrtEvent start,
                                         SparkrtEvent end, float* out) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&] {
    return put(out, dev(device).elapsed_ms(event_of(start), event_of(end)));
  });
}

// ---- kernels ---------------------------------------------------------------

sparkrt_status* sparkrt_kernel_get(sparkrt_device* device, const char* module, const char* entry,
                                   sparkrt_kernel** out) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(module);
  SPARKRT_C_REQUIRE(entry);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&]() -> absl::Status {
    std::pair<std::string, std::string> key(module, entry);
    {
      std::lock_guard<std::mutex> lock(device->mu);
      if (auto it = device->kernels.find(key); it != device->kernels.end()) {
        *out = it->second.get();
        return absl::OkStatus();
      }
    }
    // Resolved without the lock: a module load may take a while, and the
    // runtime makes concurrent lookups of one pair agree on one handle.
    auto k = dev(device).kernel(module, entry);
    if (!k.ok()) return k.status();
    auto handle = std::make_unique<sparkrt_kernel>();
    handle->device = device->device.get();
    handle->kernel = *k;
    const sparkrt::KernelSignature& sig = k->signature();
    handle->declaration = sparkrt::format_signature_file({&sig, 1});
    for (const sparkrt::Param& p : sig.params)
      handle->type_names.push_back(sparkrt::param_type_name(p.type, p.size));
    std::lock_guard<std::mutex> lock(device->mu);
    auto [it, inserted] = device->kernels.try_emplace(std::move(key), std::move(handle));
    *out = it->second.get();
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_kernel_info_get(const sparkrt_kernel* kernel, sparkrt_kernel_info* out) {
  SPARKRT_C_REQUIRE(kernel);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&](const char* fn) {
    const sparkrt::KernelSignature& sig = kernel->kernel.signature();
    const sparkrt::EntryDirectives& d = sig.directives;
    sparkrt_kernel_info full{};
    full.module = kernel->kernel.module().c_str();
    full.entry = kernel->kernel.entry().c_str();
    full.declaration = kernel->declaration.c_str();
    full.num_params = static_cast<uint32_t>(sig.params.size());
    full.params_size = sig.params_size;
    full.reqntid[0] = d.reqntid.x;
    full.reqntid[1] = d.reqntid.y;
    full.reqntid[2] = d.reqntid.z;
    full.maxntid[0] = d.maxntid.x;
    full.maxntid[1] = d.maxntid.y;
    full.maxntid[2] = d.maxntid.z;
    full.unsupported = sig.unsupported.c_str();
    return fill_out_struct(fn, "sparkrt_kernel_info", out, full,
                           SPARKRT_STRUCT_SIZE(sparkrt_kernel_info, module));
  });
}

sparkrt_status* sparkrt_kernel_param(const sparkrt_kernel* kernel, uint32_t index,
                                     sparkrt_param_info* out) {
  SPARKRT_C_REQUIRE(kernel);
  SPARKRT_C_REQUIRE(out);
  return guarded(__func__, [&](const char* fn) -> absl::Status {
    const sparkrt::KernelSignature& sig = kernel->kernel.signature();
    if (index >= sig.params.size())
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: %s has %d parameters, #%d asked for", fn, sig.entry, sig.params.size(),
          index));
    const sparkrt::Param& p = sig.params[index];
    sparkrt_param_info full{};
    full.name = p.name.c_str();
    full.type_name = kernel->type_names[index].c_str();
    full.type = param_type_of(p.type);
    full.size = p.size;
    full.align = p.align;
    full.offset = p.offset;
    return fill_out_struct(fn, "sparkrt_param_info", out, full,
                           SPARKRT_STRUCT_SIZE(sparkrt_param_info, name));
  });
}

// ---- launches ----------------------------------------------------------

}  // extern "C"

namespace {

constexpr uint32_t kKnownLaunchFlags = SPARKRT_LAUNCH_DEPENDENT;

// The config's geometry and attributes onto `l`. A caller's struct_size that
// stops short of an attribute leaves it off (an older caller has none).
absl::Status configure(KernelLaunch& l, const sparkrt_kernel* kernel,
                       const sparkrt_launch_config* config) {
  l.grid({config->grid[0], config->grid[1], config->grid[2]})
      .block({config->block[0], config->block[1], config->block[2]})
      .shared_mem(config->shared_mem_bytes);
  const size_t size = config->struct_size;
  if (size >= SPARKRT_STRUCT_SIZE(sparkrt_launch_config, flags)) {
    const uint32_t flags = config->flags;
    if ((flags & ~kKnownLaunchFlags) != 0)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: sparkrt_launch_config.flags 0x%x has unknown bits 0x%x; the only flag is "
          "SPARKRT_LAUNCH_DEPENDENT (0x%x)",
          kernel->kernel.entry(), flags, flags & ~kKnownLaunchFlags, kKnownLaunchFlags));
    if ((flags & SPARKRT_LAUNCH_DEPENDENT) != 0) l.dependent_launch();
  }
  if (size >= SPARKRT_C_LAUNCH_CONFIG_SIZE)
    l.cluster({config->cluster[0], config->cluster[1], config->cluster[2]});
  return absl::OkStatus();
}

// Packs each argument through KernelLaunch, as C++ does, then launches; the
// first list of scalars that passes the check becomes the kernel's cached
// layout.
sparkrt_status* launch_packed(sparkrt_kernel* kernel, const sparkrt_launch_config* config,
                              const sparkrt_arg* args, uint32_t num_args) {
  KernelLaunch l(*kernel->device, kernel->kernel);
  if (absl::Status s = configure(l, kernel, config); !s.ok()) return to_c(s);
  bool scalars_only = true;
  for (uint32_t i = 0; i < num_args; ++i) {
    const sparkrt_arg& a = args[i];
    switch (a.kind) {
      case SPARKRT_ARG_PTR: l.arg(DevicePtr(a.value.ptr)); break;
      case SPARKRT_ARG_U32: l.arg(a.value.u32); break;
      case SPARKRT_ARG_I32: l.arg(a.value.i32); break;
      case SPARKRT_ARG_U64: l.arg(a.value.u64); break;
      case SPARKRT_ARG_I64: l.arg(a.value.i64); break;
      case SPARKRT_ARG_F32: l.arg(a.value.f32); break;
      case SPARKRT_ARG_F64: l.arg(a.value.f64); break;
      case SPARKRT_ARG_BYTES:
        if (a.value.bytes == nullptr && a.size != 0)
          return to_c(absl::InvalidArgumentError(absl::StrFormat(
              "%s: argument #%d is a struct of %d bytes at NULL; point value.bytes at it",
              kernel->kernel.entry(), i, a.size)));
        l.arg_bytes(a.value.bytes, a.size, a.align);
        scalars_only = false;
        break;
      default:
        return to_c(absl::InvalidArgumentError(absl::StrFormat(
            "%s: argument #%d has kind %d, not a SparkrtArgKind (1 to 8)", kernel->kernel.entry(),
            i, a.kind)));
    }
  }
  int empty = 0;
  if (scalars_only && kernel->layout_state.load(std::memory_order_relaxed) == 0 &&
      kernel->layout_state.compare_exchange_strong(empty, 1, std::memory_order_acquire)) {
    const bool fits = l.check_layout(kernel->layout).ok();
    kernel->layout_state.store(fits ? 2 : 0, std::memory_order_release);
  }
  return to_c(l.launch(Stream{config->stream}));
}

}  // namespace

extern "C" {

sparkrt_status* sparkrt_launch(sparkrt_kernel* kernel, const sparkrt_launch_config* config,
                               const sparkrt_arg* args, uint32_t num_args) {
  SPARKRT_C_REQUIRE(kernel);
  SPARKRT_C_REQUIRE(config);
  if (num_args != 0) SPARKRT_C_REQUIRE(args);
  if (config->struct_size < SPARKRT_C_LAUNCH_CONFIG_SIZE_1_0)
    return to_c(check_in_struct(__func__, "sparkrt_launch_config", config->struct_size,
                                SPARKRT_C_LAUNCH_CONFIG_SIZE_1_0));
  try {
    const KernelLaunch::CheckedLayout& layout = kernel->layout;
    if (kernel->layout_state.load(std::memory_order_acquire) != 2 || num_args != layout.num_args)
      return launch_packed(kernel, config, args, num_args);
    // The same kinds as the cached layout: each value straight into place.
    KernelLaunch l(*kernel->device, kernel->kernel);
    if (absl::Status s = configure(l, kernel, config); !s.ok()) return to_c(s);
    std::byte* params = l.use_layout(layout);
    // A scalar is 4 or 8 bytes, little-endian at the start of the union.
    // Eight bytes are copied either way: a 4-byte scalar's other four land on
    // padding or on the next argument's place, written after it (offsets
    // rise), and a layout of at most 64 scalars ends far inside the buffer.
    static_assert(KernelLaunch::kMaxArgs * 8 + 8 <= KernelLaunch::kMaxParamBytes);
    for (uint32_t i = 0; i < num_args; ++i) {
      if (args[i].kind != layout.kinds[i]) return launch_packed(kernel, config, args, num_args);
      std::memcpy(params + layout.offsets[i], &args[i].value, 8);
    }
    return to_c(l.launch(Stream{config->stream}));
  } catch (...) {
    return to_c(absl::InternalError("sparkrt_launch: unexpected exception"));
  }
}

// ---- graphs ----------------------------------------------------------------

sparkrt_status* sparkrt_graph_begin_capture(sparkrt_device* device, SparkrtStream stream) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&](const char*) { return dev(device).begin_capture(Stream{stream}); });
}

sparkrt_status* sparkrt_graph_end_capture(sparkrt_device* device, SparkrtStream stream,
                                          SparkrtGraph* graph, uint64_t* num_nodes) {
  SPARKRT_C_REQUIRE(device);
  SPARKRT_C_REQUIRE(graph);
  return guarded(__func__, [&](const char*) -> absl::Status {
    auto g = dev(device).end_capture(Stream{stream});
    if (!g.ok()) return g.status();
    *graph = g->handle;
    if (num_nodes != nullptr) *num_nodes = g->num_nodes;
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_graph_launch(sparkrt_device* device, SparkrtGraph graph,
                                     SparkrtStream stream) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&](const char*) {
    return dev(device).launch_graph(Graph{graph, 0}, Stream{stream});
  });
}

sparkrt_status* sparkrt_graph_destroy(sparkrt_device* device, SparkrtGraph graph) {
  SPARKRT_C_REQUIRE(device);
  return guarded(__func__, [&](const char*) { return dev(device).destroy_graph(Graph{graph, 0}); });
}

}  // extern "C"
