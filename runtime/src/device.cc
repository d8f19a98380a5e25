#include "sparkrt/device.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sparkrt/abi_names.h"
#include "device_state.h"
#include "log.h"
#include "plugin.h"
#include "sparkrt/kernel_store.h"
#include "sparkrt/trace.h"
#include "trace_span.h"

namespace sparkrt {
namespace {

using detail::DeviceState;
using detail::DeviceTimeline;
using detail::Plugin;

// Real backends in the order `auto` tries them; other non-mock plugins found
// on the search path follow, by name. A device that emulates a GPU API on the
// host (lavapipe) is passed over: the cpu backend is the host's own.
constexpr const char* kAutoOrder[] = {"cuda", "vulkan", "cpu"};
constexpr char kMock[] = "mock";

bool is_path(std::string_view backend) {
  return backend.find('/') != std::string_view::npos || backend.ends_with(".so");
}

absl::StatusOr<int> device_index_from(const OpenOptions& options) {
  if (options.device_index >= 0) return options.device_index;
  const char* env = std::getenv("SPARKRT_DEVICE");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(env, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > 1 << 20)
    return absl::InvalidArgumentError(absl::StrFormat(
        "SPARKRT_DEVICE='%s' is not a device index; set it to 0, 1, ... or unset it", env));
  return static_cast<int>(v);
}

// SPARKRT_DEPENDENT_LAUNCH=0 launches everything plainly, whatever a launch
// asks: a switch to rule dependent launches out when chasing a wrong result.
absl::StatusOr<bool> dependent_launch_allowed() {
  const char* env = std::getenv("SPARKRT_DEPENDENT_LAUNCH");
  if (env == nullptr || *env == '\0' || std::string_view(env) == "1") return true;
  if (std::string_view(env) == "0") return false;
  return absl::InvalidArgumentError(absl::StrFormat(
      "SPARKRT_DEPENDENT_LAUNCH='%s' is neither 0 (launch every kernel plainly) nor 1 (the "
      "default: dependent launches where asked); set one or unset it",
      env));
}

DeviceProperties convert(const SparkrtDeviceProperties& p) {
  DeviceProperties d;
  d.name = std::string(p.name, strnlen(p.name, sizeof(p.name)));
  d.architecture = std::string(p.architecture, strnlen(p.architecture, sizeof(p.architecture)));
  d.total_memory = p.total_memory;
  d.multiprocessor_count = p.multiprocessor_count;
  d.warp_size = p.warp_size;
  d.max_threads_per_block = p.max_threads_per_block;
  d.max_block_dim = {p.max_block_dim[0], p.max_block_dim[1], p.max_block_dim[2]};
  d.max_grid_dim = {p.max_grid_dim[0], p.max_grid_dim[1], p.max_grid_dim[2]};
  d.max_shared_memory_per_block = p.max_shared_memory_per_block;
  d.max_shared_memory_per_block_optin =
      std::max(p.max_shared_memory_per_block_optin, p.max_shared_memory_per_block);
  d.compute_capability_major = p.compute_capability_major;
  d.compute_capability_minor = p.compute_capability_minor;
  d.accepts_ptx = (p.image_formats & (1u << SPARKRT_IMAGE_PTX)) != 0;
  d.accepts_cubin = (p.image_formats & (1u << SPARKRT_IMAGE_CUBIN)) != 0;
  d.accepts_spirv = (p.image_formats & (1u << SPARKRT_IMAGE_SPIRV)) != 0;
  d.accepts_signatures = (p.image_formats & (1u << SPARKRT_IMAGE_SIGNATURES)) != 0;
  d.emulated = (p.flags & SPARKRT_DEVICE_FLAG_EMULATED) != 0;
  d.driver = std::string(p.driver, strnlen(p.driver, sizeof(p.driver)));
  if (p.struct_size >= SPARKRT_DEVICE_PROPERTIES_SIZE) {
    d.supports_dependent_launch = p.supports_dependent_launch != 0;
    d.supports_clusters = p.supports_clusters != 0;
    d.max_cluster_size = p.max_cluster_size;
  }
  return d;
}

// Opens device `index` of a loaded plugin.
absl::StatusOr<std::unique_ptr<DeviceState>> open_on(std::shared_ptr<Plugin> plugin, int index) {
  const SparkrtPluginApi& api = plugin->api();
  const std::string& name = plugin->name();
  SparkrtDeviceCountArgs count{SPARKRT_DEVICE_COUNT_ARGS_SIZE, 0};
  if (auto s = plugin->status(api.device_count(&count), name + ": device_count"); !s.ok())
    return s;
  if (count.count <= 0)
    return absl::NotFoundError(absl::StrFormat("%s: no devices (plugin %s)", name, plugin->path()));
  if (index >= count.count)
    return absl::OutOfRangeError(absl::StrFormat(
        "%s: device index %d requested, %d device(s) present (indices 0..%d); check "
        "SPARKRT_DEVICE",
        name, index, count.count, count.count - 1));

  SparkrtDeviceOpenArgs open{SPARKRT_DEVICE_OPEN_ARGS_SIZE, index, nullptr};
  if (auto s = plugin->status(api.device_open(&open), absl::StrFormat("%s: device_open(%d)", name, index));
      !s.ok())
    return s;
  auto state = std::make_unique<DeviceState>();
  state->plugin = std::move(plugin);
  state->api = &api;
  state->native = open.device;
  state->index = index;

  SparkrtDeviceProperties props{};
  // A plugin older than ABI 1.4 knows no launch attributes; its properties
  // end before them.
  props.struct_size =
      api.abi_minor >= 4 ? SPARKRT_DEVICE_PROPERTIES_SIZE : SPARKRT_DEVICE_PROPERTIES_SIZE_1_3;
  SparkrtDeviceGetPropertiesArgs get{SPARKRT_DEVICE_GET_PROPERTIES_ARGS_SIZE, open.device, &props};
  if (auto s = state->plugin->status(api.device_get_properties(&get), name + ": device_get_properties");
      !s.ok()) {
    SparkrtDeviceCloseArgs close{SPARKRT_DEVICE_CLOSE_ARGS_SIZE, open.device};
    state->plugin->status(api.device_close(&close), name + ": device_close").IgnoreError();
    return s;
  }
  state->properties = convert(props);
  detail::log_debug(absl::StrFormat("opened %s device %d: %s (%s)", name, index,
                                    state->properties.name, state->properties.architecture));
  return state;
}

absl::StatusOr<std::unique_ptr<DeviceState>> open_named(const std::string& backend, int index) {
  if (is_path(backend)) {
    detail::log_debug(absl::StrFormat("backend given as a path: %s", backend));
    auto plugin = Plugin::load(backend);
    if (!plugin.ok()) return plugin.status();
    return open_on(*std::move(plugin), index);
  }
  const auto files = detail::discover_plugins();
  for (const auto& file : files) {
    if (file.name != backend) continue;
    detail::log_debug(absl::StrFormat("backend '%s' -> %s", backend, file.path));
    auto plugin = Plugin::load(file.path);
    if (!plugin.ok()) return plugin.status();
    return open_on(*std::move(plugin), index);
  }
  std::vector<std::string> names;
  for (const auto& file : files) names.push_back(file.name);
  return absl::NotFoundError(absl::StrFormat(
      "backend '%s' not found: no %s in [%s]; backends available: [%s]. Set SPARKRT_BACKEND to "
      "one of them or to a plugin path, or add its folder to SPARKRT_PLUGIN_PATH",
      backend, detail::plugin_file_name(backend), absl::StrJoin(detail::plugin_folders(), ", "),
      absl::StrJoin(names, ", ")));
}

absl::StatusOr<std::unique_ptr<DeviceState>> open_auto(int index) {
  const auto files = detail::discover_plugins();
  std::vector<detail::PluginFile> order;
  for (const char* name : kAutoOrder) {
    for (const auto& f : files)
      if (f.name == name) order.push_back(f);
  }
  for (const auto& f : files) {
    const bool listed = std::any_of(std::begin(kAutoOrder), std::end(kAutoOrder),
                                    [&](const char* n) { return f.name == n; });
    if (!listed && f.name != kMock) order.push_back(f);
  }
  std::vector<std::string> tried;
  for (const auto& f : order) {
    detail::log_debug(absl::StrFormat("auto: trying '%s' (%s)", f.name, f.path));
    auto plugin = Plugin::load(f.path);
    absl::StatusOr<std::unique_ptr<DeviceState>> state =
        plugin.ok() ? open_on(*std::move(plugin), index) : plugin.status();
    if (state.ok() && (*state)->properties.emulated) {
      DeviceState& s = **state;
      SparkrtDeviceCloseArgs close{SPARKRT_DEVICE_CLOSE_ARGS_SIZE, s.native};
      s.plugin->status(s.api->device_close(&close), f.name + ": device_close").IgnoreError();
      state = absl::UnavailableError(absl::StrFormat(
          "device %d (%s) emulates the GPU API on the host CPU; auto passes it over (choose it "
          "with SPARKRT_BACKEND=%s)",
          index, (*state)->properties.name, f.name));
    }
    if (state.ok()) {
      detail::log_debug(absl::StrFormat("auto: selected '%s'", f.name));
      return state;
    }
    detail::log_debug(absl::StrFormat("auto: '%s' unusable: %s", f.name, state.status().message()));
    tried.push_back(absl::StrFormat("  %s (%s): %s", f.name, f.path, state.status().message()));
  }
  return absl::NotFoundError(absl::StrFormat(
      "no usable backend (SPARKRT_BACKEND unset or 'auto'); searched [%s]%s%s\nSet "
      "SPARKRT_BACKEND to a backend name or plugin path (the recording mock is never chosen "
      "automatically: SPARKRT_BACKEND=mock), or add a plugin folder to SPARKRT_PLUGIN_PATH",
      absl::StrJoin(detail::plugin_folders(), ", "), tried.empty() ? "; no real backend plugin found" : "; tried:\n",
      absl::StrJoin(tried, "\n")));
}

absl::Status closed_error(const DeviceState& s) {
  return absl::FailedPreconditionError(
      absl::StrFormat("%s device %d is closed", s.plugin->name(), s.index));
}

// Finds or adds the slot for `key`; the map's lock is held for only that.
template <typename Slot>
Slot& find_or_add(std::shared_mutex& mu, absl::flat_hash_map<std::string, std::unique_ptr<Slot>>& map,
                  std::string_view key) {
  const absl::string_view k(key.data(), key.size());
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    if (auto it = map.find(k); it != map.end()) return *it->second;
  }
  std::unique_lock<std::shared_mutex> lock(mu);
  auto& slot = map[k];
  if (slot == nullptr) {
    slot = std::make_unique<Slot>();
    if constexpr (requires { slot->name; }) slot->name = std::string(key);
  }
  return *slot;
}

// Reads, parses and loads module `m` (its LoadOnce runs this once at a time).
absl::Status load_module(DeviceState& s, detail::ModuleRecord& m) {
  detail::TraceSpan span("module", "module_load");
  if (span) span.args = "\"module\":" + detail::json_string(m.name);
  detail::BackendCall call(s);
  if (!call.entered()) return closed_error(s);
  const std::string& module = m.name;
  auto image = find_module(module, s.properties.architecture);
  if (!image.ok()) return image.status();
  auto signatures = module_signatures(*image);
  if (!signatures.ok()) return signatures.status();

  SparkrtModuleLoadArgs load{};
  load.struct_size = SPARKRT_MODULE_LOAD_ARGS_SIZE;
  load.device = s.native;
  load.name = module.c_str();
  const auto offer = [&](SparkrtImageFormat format, const std::string& bytes) {
    load.format = format;
    load.image = bytes.c_str();  // NUL-terminated, for the text formats
    load.image_size = bytes.size();
  };
  const DeviceProperties& p = s.properties;
  std::string loaded_as;
  if (!image->cubin.empty() && p.accepts_cubin) {
    offer(SPARKRT_IMAGE_CUBIN, image->cubin);
    loaded_as = image->cubin_arch + " cubin";
  } else if (image->ptx && p.accepts_ptx) {
    offer(SPARKRT_IMAGE_PTX, *image->ptx);
    loaded_as = "PTX";
  } else if (!image->spirv.empty() && p.accepts_spirv) {
    offer(SPARKRT_IMAGE_SPIRV, image->spirv);
    loaded_as = "SPIR-V";
  } else if (image->signatures && p.accepts_signatures) {
    offer(SPARKRT_IMAGE_SIGNATURES, *image->signatures);
    loaded_as = "signatures";
  } else {
    std::vector<std::string> wanted;
    if (p.accepts_cubin) wanted.push_back(absl::StrFormat("%s.%s.cubin", module, p.architecture));
    if (p.accepts_ptx) wanted.push_back(module + ".ptx");
    if (p.accepts_spirv) wanted.push_back(module + ".spv");
    if (p.accepts_signatures) wanted.push_back(module + ".sig");
    const bool for_cuda = p.accepts_cubin || p.accepts_ptx;
    return absl::FailedPreconditionError(absl::StrFormat(
        "kernel module '%s' (%s) has no image the %s device takes: it needs %s. %s", module,
        image->origin, s.plugin->name(), absl::StrJoin(wanted, " or "),
        for_cuda && !SPARKRT_HAVE_CUDA_KERNELS
            ? "This sparkrt was built without nvcc (the CUDA toolkit), so it has no PTX or "
              "cubins: rebuild it with nvcc, or add a folder holding the module's PTX to "
              "SPARKRT_KERNEL_PATH"
            : "Add a folder holding one to SPARKRT_KERNEL_PATH (the in-tree SPIR-V modules are "
              "listed in docs/kernels.md)"));
  }
  if (auto st = s.plugin->status(
          s.api->module_load(&load),
          absl::StrFormat("%s: loading kernel module '%s' (%s, %s)", s.plugin->name(), module,
                          image->origin, loaded_as));
      !st.ok())
    return st;
  detail::log_debug(absl::StrFormat("module %s loaded on %s device %d from %s (%s)", module,
                                    s.plugin->name(), s.index, image->origin, loaded_as));
  m.origin = absl::StrFormat("%s, %s", image->origin, loaded_as);
  if (span)
    span.args = absl::StrFormat(R"("module":%s,"origin":%s,"image":%s)",
                                detail::json_string(module), detail::json_string(image->origin),
                                detail::json_string(loaded_as));
  m.signatures = *std::move(signatures);
  m.image = load.format;
  m.native = load.module;
  return absl::OkStatus();
}

// Resolves entry `sig` of loaded module `m` into `slot` (its LoadOnce runs
// this once at a time).
absl::Status resolve_entry(DeviceState& s, detail::ModuleRecord& m, const KernelSignature& sig,
                           detail::EntrySlot& slot) {
  detail::BackendCall call(s);
  if (!call.entered()) return closed_error(s);
  std::vector<SparkrtParamInfo> params;
  params.reserve(sig.params.size());
  for (const auto& p : sig.params) params.push_back({p.offset, p.size, p.align});
  SparkrtKernelGetArgs get{};
  get.struct_size = SPARKRT_KERNEL_GET_ARGS_SIZE;
  get.module = m.native;
  get.entry = sig.entry.c_str();
  get.params = params.data();
  get.num_params = static_cast<uint32_t>(params.size());
  if (auto st = s.plugin->status(
          s.api->kernel_get(&get),
          absl::StrFormat("%s: resolving %s.%s", s.plugin->name(), m.name, sig.entry));
      !st.ok())
    return st;
  slot.record = detail::make_kernel_record(&s, m.name, m.image, sig, get.kernel);
  return absl::OkStatus();
}

}  // namespace

// ---- Kernel ------------------------------------------------------------------

const std::string& Kernel::module() const { return record_->module; }
const std::string& Kernel::entry() const { return record_->signature.entry; }
const KernelSignature& Kernel::signature() const { return record_->signature; }
SparkrtImageFormat Kernel::image_format() const { return record_->image; }

// ---- Device: lifetime ----------------------------------------------------------

namespace {

// SPARKRT_TRACE=<file> starts a trace at the first Device::open that sees it;
// SPARKRT_TRACE_DEVICE_TIMES=0 leaves the device tracks out. A trace asked
// for and impossible fails every open: it must not go unnoticed.
absl::Status start_trace_from_env() {
  static std::mutex mu;
  static bool started = false;
  const char* env = std::getenv("SPARKRT_TRACE");
  if (env == nullptr || *env == '\0') return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu);
  if (started) return absl::OkStatus();
  trace::Options options;
  if (const char* times = std::getenv("SPARKRT_TRACE_DEVICE_TIMES");
      times != nullptr && *times != '\0') {
    const std::string_view t(times);
    if (t != "0" && t != "1")
      return absl::InvalidArgumentError(absl::StrFormat(
          "SPARKRT_TRACE_DEVICE_TIMES='%s' is neither 0 (host spans only) nor 1 (the default: "
          "device times too); set one or unset it",
          times));
    options.device_times = t == "1";
  }
  if (auto st = trace::start(env, options); !st.ok())
    return absl::Status(st.code(), absl::StrFormat("SPARKRT_TRACE=%s: %s", env, st.message()));
  started = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> Device::open(const OpenOptions& options) {
  if (auto st = start_trace_from_env(); !st.ok()) return st;
  std::string backend = options.backend;
  if (backend.empty()) {
    const char* env = std::getenv("SPARKRT_BACKEND");
    backend = env != nullptr && *env != '\0' ? env : "auto";
  }
  auto index = device_index_from(options);
  if (!index.ok()) return index.status();
  auto dependent = dependent_launch_allowed();
  if (!dependent.ok()) return dependent.status();
  detail::TraceSpan span("device", "device_open");
  if (span)
    span.args = absl::StrFormat(R"("backend":%s,"index":%d)", detail::json_string(backend), *index);
  detail::log_debug(absl::StrFormat("opening backend '%s', device %d", backend, *index));
  auto state = backend == "auto" ? open_auto(*index) : open_named(backend, *index);
  if (!state.ok()) return state.status();
  if (!*dependent) {
    (*state)->properties.supports_dependent_launch = false;
    (*state)->launch_flags &= ~uint32_t{SPARKRT_LAUNCH_DEPENDENT};
  }
  return std::unique_ptr<Device>(new Device(*std::move(state)));
}

Device::Device(std::unique_ptr<detail::DeviceState> state) : state_(std::move(state)) {
  DeviceState& s = *state_;
  const auto* graphs = extension_as<SparkrtGraphExtension>(SPARKRT_GRAPH_EXTENSION_NAME);
  if (graphs != nullptr && graphs->struct_size >= SPARKRT_GRAPH_EXTENSION_SIZE) s.graphs = graphs;
  s.timeline = std::make_unique<detail::DeviceTimeline>(s);
}

Device::~Device() {
  if (auto s = close(); !s.ok()) {
    // No caller to return it to: say it (SPARKRT_LOG's default level).
    detail::log_error(absl::StrFormat("device destroyed without close(), and its close failed: "
                                      "%s (call close() to get this as a status)",
                                      s.message()));
  }
}

absl::Status Device::close() {
  DeviceState& s = *state_;
  if (s.closed.exchange(true)) return absl::OkStatus();
  detail::TraceSpan span("device", "device_close");
  if (span)
    span.args = absl::StrFormat(R"("backend":%s,"index":%d)",
                                detail::json_string(s.plugin->name()), s.index);
  {
    // Loads and entry resolutions already under way use the device: let them
    // finish (none starts from now on). A load that succeeds here is unloaded
    // below with the rest.
    std::unique_lock<std::mutex> lock(s.calls_mu);
    s.calls_done.wait(lock, [&] { return s.calls_in_flight == 0; });
  }
  // Device times still to be read need the device.
  s.timeline->close();
  absl::Status first;
  {
    std::unique_lock<std::shared_mutex> lock(s.modules_mu);
    // Records stay until the Device is destroyed, so stale Kernel handles
    // fail cleanly instead of dangling.
    for (auto& [name, module] : s.modules) {
      if (module->native == nullptr) continue;  // never loaded, or its load failed
      SparkrtModuleUnloadArgs args{SPARKRT_MODULE_UNLOAD_ARGS_SIZE, module->native};
      first.Update(s.plugin->status(s.api->module_unload(&args), "module_unload(" + name + ")"));
      module->native = nullptr;
    }
  }
  SparkrtDeviceCloseArgs args{SPARKRT_DEVICE_CLOSE_ARGS_SIZE, s.native};
  first.Update(s.plugin->status(s.api->device_close(&args), s.plugin->name() + ": device_close"));
  detail::log_debug(absl::StrFormat("closed %s device %d", s.plugin->name(), s.index));
  return first;
}

const std::string& Device::backend_name() const { return state_->plugin->name(); }
const std::string& Device::plugin_path() const { return state_->plugin->path(); }
const std::string& Device::plugin_version() const { return state_->plugin->version(); }
int Device::index() const { return state_->index; }
const DeviceProperties& Device::properties() const { return state_->properties; }
SparkrtDevice* Device::native_handle() const { return state_->native; }
bool Device::is_closed() const { return state_->closed; }

// ---- Device: kernels -------------------------------------------------------------

absl::StatusOr<Kernel> Device::kernel(std::string_view module, std::string_view entry) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  detail::TraceSpan span("module", "kernel_lookup");
  if (span)
    span.args = absl::StrFormat(R"("module":%s,"entry":%s)", detail::json_string(module),
                                detail::json_string(entry));
  // Each module and entry loads once, in its own slot, with no map lock held:
  // a slow load delays only the callers that need that module or entry.
  detail::ModuleRecord& m = find_or_add(s.modules_mu, s.modules, module);
  if (!m.once.ready()) {
    if (auto st = m.once.run([&] { return load_module(s, m); }); !st.ok()) return st;
  }
  {
    std::shared_lock<std::shared_mutex> lock(m.kernels_mu);
    if (auto k = m.kernels.find(absl::string_view(entry.data(), entry.size()));
        k != m.kernels.end() && k->second->once.ready())
      return Kernel(k->second->record.get());
  }

  // The signatures are fixed once the module is loaded.
  const KernelSignature* sig = nullptr;
  for (const auto& candidate : m.signatures)
    if (candidate.entry == entry) sig = &candidate;
  if (sig == nullptr) {
    std::vector<std::string> entries;
    for (const auto& candidate : m.signatures) entries.push_back(candidate.entry);
    return absl::NotFoundError(absl::StrFormat(
        "kernel module '%s' (%s) has no entry '%s'; its entries: [%s]", module, m.origin, entry,
        absl::StrJoin(entries, ", ")));
  }
  if (!sig->unsupported.empty())
    return absl::InvalidArgumentError(absl::StrFormat(
        "kernel module '%s' (%s): entry '%s' cannot be launched: %s", module, m.origin, entry,
        sig->unsupported));
  detail::EntrySlot& slot = find_or_add(m.kernels_mu, m.kernels, entry);
  if (auto st = slot.once.run([&] { return resolve_entry(s, m, *sig, slot); }); !st.ok())
    return st;
  return Kernel(slot.record.get());
}

// ---- Device: memory and copies -------------------------------------------------

absl::StatusOr<DevicePtr> Device::alloc(size_t bytes) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  if (bytes == 0)
    return absl::InvalidArgumentError("alloc(0 bytes): allocations must be at least one byte");
  detail::TraceSpan span("memory", "alloc");
  if (span) span.args = absl::StrFormat(R"("bytes":%d)", bytes);
  SparkrtMemAllocArgs args{SPARKRT_MEM_ALLOC_ARGS_SIZE, s.native, bytes, 0};
  if (SparkrtError* e = s.api->mem_alloc(&args))
    return s.plugin->status(e, absl::StrFormat("%s: alloc(%d bytes)", s.plugin->name(), bytes));
  return DevicePtr(args.ptr);
}

absl::Status Device::free(DevicePtr ptr) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  detail::TraceSpan span("memory", "free");
  SparkrtMemFreeArgs args{SPARKRT_MEM_FREE_ARGS_SIZE, s.native, ptr.addr};
  if (SparkrtError* e = s.api->mem_free(&args))
    return s.plugin->status(e, absl::StrFormat("%s: free(0x%x)", s.plugin->name(), ptr.addr));
  return absl::OkStatus();
}

absl::StatusOr<void*> Device::alloc_host(size_t bytes) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  if (bytes == 0)
    return absl::InvalidArgumentError("alloc_host(0 bytes): allocations must be at least one byte");
  SparkrtHostAllocArgs args{SPARKRT_HOST_ALLOC_ARGS_SIZE, s.native, bytes, nullptr};
  if (SparkrtError* e = s.api->host_alloc(&args))
    return s.plugin->status(e, absl::StrFormat("%s: alloc_host(%d bytes)", s.plugin->name(), bytes));
  return args.ptr;
}

absl::Status Device::free_host(void* ptr) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  SparkrtHostFreeArgs args{SPARKRT_HOST_FREE_ARGS_SIZE, s.native, ptr};
  if (SparkrtError* e = s.api->host_free(&args))
    return s.plugin->status(e, absl::StrFormat("%s: free_host(%p)", s.plugin->name(), ptr));
  return absl::OkStatus();
}

namespace {

// The start of the device span of stream-ordered work while tracing (`span`).
DeviceTimeline::Mark time_on_device(DeviceState& s, bool traced, Stream stream) {
  return traced ? s.timeline->begin(stream.handle) : DeviceTimeline::Mark{};
}

absl::Status do_memset(DeviceState& s, DevicePtr dst, uint8_t value, size_t bytes, Stream stream,
                       bool blocking) {
  if (s.closed) return closed_error(s);
  detail::TraceSpan span("copy", blocking ? "memset" : "memset_async");
  if (span)
    span.args = absl::StrFormat(R"("bytes":%d,"value":%d,"async":%s,"stream":%d)", bytes, value,
                                blocking ? "false" : "true", stream.handle);
  SparkrtMemsetArgs args{SPARKRT_MEMSET_ARGS_SIZE, s.native, dst.addr, value, bytes,
                         stream.handle, blocking ? 1 : 0};
  const DeviceTimeline::Mark mark = time_on_device(s, span && !blocking, stream);
  SparkrtError* const e = s.api->memset(&args);
  if (mark)
    s.timeline->end(mark, stream.handle, e == nullptr, "copy", "memset_async",
                    absl::StrFormat(R"("bytes":%d,"value":%d)", bytes, value));
  if (e != nullptr)
    return s.plugin->status(e, absl::StrFormat("%s: memset%s(0x%x, %d bytes)", s.plugin->name(),
                                                blocking ? "" : "_async", dst.addr, bytes));
  return absl::OkStatus();
}

absl::Status do_copy(DeviceState& s, SparkrtCopyKind kind, DevicePtr dst_dev, DevicePtr src_dev,
                     void* dst_host, const void* src_host, size_t bytes, Stream stream,
                     bool blocking) {
  if (s.closed) return closed_error(s);
  if ((kind == SPARKRT_COPY_H2D && src_host == nullptr && bytes > 0) ||
      (kind == SPARKRT_COPY_D2H && dst_host == nullptr && bytes > 0))
    return absl::InvalidArgumentError("copy: null host pointer");
  detail::TraceSpan span("copy", blocking ? "copy" : "copy_async");
  if (span)
    span.args = absl::StrFormat(R"("bytes":%d,"direction":"%s","async":%s,"stream":%d)", bytes,
                                abi_copy_kind_name(kind), blocking ? "false" : "true",
                                stream.handle);
  SparkrtMemcpyArgs args{SPARKRT_MEMCPY_ARGS_SIZE, s.native, kind, dst_dev.addr, src_dev.addr,
                         dst_host, src_host, bytes, stream.handle, blocking ? 1 : 0};
  const DeviceTimeline::Mark mark = time_on_device(s, span && !blocking, stream);
  SparkrtError* const e = s.api->memcpy(&args);
  if (mark)
    s.timeline->end(mark, stream.handle, e == nullptr, "copy",
                    absl::StrFormat("copy_%s", abi_copy_kind_name(kind)),
                    absl::StrFormat(R"("bytes":%d,"direction":"%s")", bytes,
                                    abi_copy_kind_name(kind)));
  if (e != nullptr) {
    return s.plugin->status(
        e, absl::StrFormat("%s: copy_%s%s(%d bytes, stream %d)", s.plugin->name(),
                           abi_copy_kind_name(kind), blocking ? "" : "_async", bytes,
                           stream.handle));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Device::memset(DevicePtr dst, uint8_t value, size_t bytes) {
  return do_memset(*state_, dst, value, bytes, Stream{}, true);
}
absl::Status Device::memset_async(DevicePtr dst, uint8_t value, size_t bytes, Stream stream) {
  return do_memset(*state_, dst, value, bytes, stream, false);
}
absl::Status Device::copy_h2d(const void* src, DevicePtr dst, size_t bytes) {
  return do_copy(*state_, SPARKRT_COPY_H2D, dst, {}, nullptr, src, bytes, {}, true);
}
absl::Status Device::copy_d2h(DevicePtr src, void* dst, size_t bytes) {
  return do_copy(*state_, SPARKRT_COPY_D2H, {}, src, dst, nullptr, bytes, {}, true);
}
absl::Status Device::copy_d2d(DevicePtr src, DevicePtr dst, size_t bytes) {
  return do_copy(*state_, SPARKRT_COPY_D2D, dst, src, nullptr, nullptr, bytes, {}, true);
}
absl::Status Device::copy_h2d_async(const void* src, DevicePtr dst, size_t bytes, Stream stream) {
  return do_copy(*state_, SPARKRT_COPY_H2D, dst, {}, nullptr, src, bytes, stream, false);
}
absl::Status Device::copy_d2h_async(DevicePtr src, void* dst, size_t bytes, Stream stream) {
  return do_copy(*state_, SPARKRT_COPY_D2H, {}, src, dst, nullptr, bytes, stream, false);
}
absl::Status Device::copy_d2d_async(DevicePtr src, DevicePtr dst, size_t bytes, Stream stream) {
  return do_copy(*state_, SPARKRT_COPY_D2D, dst, src, nullptr, nullptr, bytes, stream, false);
}

// ---- Device: streams and events ----------------------------------------------

absl::StatusOr<Stream> Device::create_stream() {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  detail::TraceSpan span("stream", "create_stream");
  SparkrtStreamCreateArgs args{SPARKRT_STREAM_CREATE_ARGS_SIZE, s.native, 0};
  if (SparkrtError* e = s.api->stream_create(&args))
    return s.plugin->status(e, s.plugin->name() + ": create_stream");
  return Stream{args.stream};
}

absl::Status Device::destroy_stream(Stream stream) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  detail::TraceSpan span("stream", "destroy_stream");
  if (span) span.args = absl::StrFormat(R"("stream":%d)", stream.handle);
  SparkrtStreamArgs args{SPARKRT_STREAM_ARGS_SIZE, s.native, stream.handle};
  if (SparkrtError* e = s.api->stream_destroy(&args))
    return s.plugin->status(e, absl::StrFormat("%s: destroy_stream(%d)", s.plugin->name(), stream.handle));
  return absl::OkStatus();
}

absl::Status Device::synchronize(Stream stream) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  detail::TraceSpan span("stream", "synchronize");
  if (span) span.args = absl::StrFormat(R"("stream":%d)", stream.handle);
  SparkrtStreamArgs args{SPARKRT_STREAM_ARGS_SIZE, s.native, stream.handle};
  if (SparkrtError* e = s.api->stream_synchronize(&args))
    return s.plugin->status(e, absl::StrFormat("%s: synchronize(stream %d)", s.plugin->name(), stream.handle));
  if (span) s.timeline->write_completed();
  return absl::OkStatus();
}

absl::StatusOr<Event> Device::create_event() {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  detail::TraceSpan span("event", "create_event");
  SparkrtEventCreateArgs args{SPARKRT_EVENT_CREATE_ARGS_SIZE, s.native, 0};
  if (SparkrtError* e = s.api->event_create(&args))
    return s.plugin->status(e, s.plugin->name() + ": create_event");
  return Event{args.event};
}

namespace {
absl::Status event_call(DeviceState& s, SparkrtEventFn fn, const char* what, Event event,
                        Stream stream) {
  if (s.closed) return closed_error(s);
  detail::TraceSpan span("event", what);
  if (span)
    span.args = absl::StrFormat(R"("event":%d,"stream":%d)", event.handle, stream.handle);
  SparkrtEventArgs args{SPARKRT_EVENT_ARGS_SIZE, s.native, event.handle, stream.handle};
  if (SparkrtError* e = fn(&args))
    return s.plugin->status(e, absl::StrFormat("%s: %s(event %d, stream %d)", s.plugin->name(),
                                                what, event.handle, stream.handle));
  return absl::OkStatus();
}
}  // namespace

absl::Status Device::destroy_event(Event event) {
  return event_call(*state_, state_->api->event_destroy, "destroy_event", event, {});
}
absl::Status Device::record_event(Event event, Stream stream) {
  return event_call(*state_, state_->api->event_record, "record_event", event, stream);
}
absl::Status Device::synchronize_event(Event event) {
  absl::Status st = event_call(*state_, state_->api->event_synchronize, "synchronize_event", event, {});
  if (st.ok() && trace::enabled()) state_->timeline->write_completed();
  return st;
}
absl::Status Device::wait_event(Stream stream, Event event) {
  return event_call(*state_, state_->api->stream_wait_event, "wait_event", event, stream);
}

absl::StatusOr<float> Device::elapsed_ms(Event start, Event end) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  detail::TraceSpan span("event", "elapsed_ms");
  SparkrtEventElapsedArgs args{SPARKRT_EVENT_ELAPSED_ARGS_SIZE, s.native, start.handle, end.handle, 0.f};
  if (SparkrtError* e = s.api->event_elapsed(&args))
    return s.plugin->status(e, absl::StrFormat("%s: elapsed_ms(event %d, event %d)", s.plugin->name(),
                                                start.handle, end.handle));
  return args.milliseconds;
}

// ---- Device: graphs ------------------------------------------------------------------

namespace {

absl::Status no_graphs(const DeviceState& s, const char* what) {
  return absl::UnimplementedError(absl::StrFormat(
      "%s: %s: this backend offers no graphs (%s); queue the work directly", s.plugin->name(),
      what, SPARKRT_GRAPH_EXTENSION_NAME));
}

// The extension carries its own error helpers (extensions/graph.h).
absl::Status graph_status(const DeviceState& s, SparkrtError* e, const std::string& context) {
  if (e == nullptr) return absl::OkStatus();
  const SparkrtGraphExtension& g = *s.graphs;
  int32_t code = g.error_code(e);
  const char* msg = nullptr;
  size_t size = 0;
  g.error_message(e, &msg, &size);
  std::string message = absl::StrFormat("%s: %s: %s", s.plugin->name(), context,
                                        std::string_view(msg, msg != nullptr ? size : 0));
  g.error_destroy(e);
  if (code <= 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated))
    code = static_cast<int32_t>(absl::StatusCode::kUnknown);
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

}  // namespace

bool Device::supports_graphs() const { return state_->graphs != nullptr; }

absl::Status Device::begin_capture(Stream stream) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  if (s.graphs == nullptr) return no_graphs(s, "begin_capture");
  detail::TraceSpan span("graph", "begin_capture");
  if (span) span.args = absl::StrFormat(R"("stream":%d)", stream.handle);
  // Device times are not taken on a capturing stream: their events would be
  // captured into the graph.
  s.timeline->set_capturing(stream.handle, true);
  SparkrtGraphCaptureArgs args{SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, s.native, stream.handle};
  absl::Status st = graph_status(s, s.graphs->begin_capture(&args),
                                 absl::StrFormat("begin_capture on stream %d", stream.handle));
  if (!st.ok()) s.timeline->set_capturing(stream.handle, false);
  return st;
}

absl::StatusOr<Graph> Device::end_capture(Stream stream) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  if (s.graphs == nullptr) return no_graphs(s, "end_capture");
  detail::TraceSpan span("graph", "end_capture");
  SparkrtGraphEndCaptureArgs args{};
  args.struct_size = SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE;
  args.device = s.native;
  args.stream = stream.handle;
  absl::Status st = graph_status(s, s.graphs->end_capture(&args),
                                 absl::StrFormat("end_capture on stream %d", stream.handle));
  // A failed end also ends the capture (the stream records no more).
  s.timeline->set_capturing(stream.handle, false);
  if (span)
    span.args = absl::StrFormat(R"("stream":%d,"graph":%d,"nodes":%d,"failed":%s)", stream.handle,
                                args.graph, args.num_nodes, st.ok() ? "false" : "true");
  if (!st.ok()) return st;
  return Graph{args.graph, args.num_nodes};
}

absl::Status Device::launch_graph(const Graph& graph, Stream stream) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  if (s.graphs == nullptr) return no_graphs(s, "launch_graph");
  detail::TraceSpan span("graph", "launch_graph");
  if (span)
    span.args = absl::StrFormat(R"("graph":%d,"nodes":%d,"stream":%d)", graph.handle,
                                graph.num_nodes, stream.handle);
  const DeviceTimeline::Mark mark = time_on_device(s, static_cast<bool>(span), stream);
  SparkrtGraphLaunchArgs args{SPARKRT_GRAPH_LAUNCH_ARGS_SIZE, s.native, graph.handle,
                              stream.handle};
  SparkrtError* const e = s.graphs->launch(&args);
  if (mark)
    s.timeline->end(mark, stream.handle, e == nullptr, "graph", "graph replay",
                    absl::StrFormat(R"("graph":%d,"nodes":%d)", graph.handle, graph.num_nodes));
  return graph_status(s, e,
                      absl::StrFormat("launch_graph(graph %d, stream %d)", graph.handle,
                                      stream.handle));
}

absl::Status Device::destroy_graph(const Graph& graph) {
  DeviceState& s = *state_;
  if (s.closed) return closed_error(s);
  if (s.graphs == nullptr) return no_graphs(s, "destroy_graph");
  detail::TraceSpan span("graph", "destroy_graph");
  if (span) span.args = absl::StrFormat(R"("graph":%d)", graph.handle);
  SparkrtGraphDestroyArgs args{SPARKRT_GRAPH_DESTROY_ARGS_SIZE, s.native, graph.handle};
  return graph_status(s, s.graphs->destroy(&args),
                      absl::StrFormat("destroy_graph(graph %d)", graph.handle));
}

const void* Device::extension(std::string_view name) const {
  const DeviceState& s = *state_;
  const std::string n(name);
  SparkrtGetExtensionArgs args{SPARKRT_GET_EXTENSION_ARGS_SIZE, n.c_str(), nullptr};
  if (SparkrtError* e = s.api->get_extension(&args)) {
    s.plugin->status(e, "get_extension").IgnoreError();
    return nullptr;
  }
  return args.extension;
}

}  // namespace sparkrt
