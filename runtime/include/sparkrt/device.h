// Device: one opened device of a backend plugin, and everything an op wrapper
// needs from it: kernels by name, memory, copies, streams, events, launches.
//
//   auto dev = sparkrt::Device::open();          // SPARKRT_BACKEND, or auto
//   if (!dev.ok()) return dev.status();
//   auto k = (*dev)->kernel("vector_ops", "vector_add_f32");
//
// Every fallible call returns absl::Status(Or). All methods are safe to call
// from several threads; ordering between threads is the caller's business, as
// with the underlying driver.
//
// Lifetime: the Device keeps its plugin library loaded. Kernels, streams,
// events and device memory obtained from it are valid until close() (or the
// destructor, which calls it).
#ifndef SPARKRT_DEVICE_H_
#define SPARKRT_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ranges>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/plugin_api.h"
#include "sparkrt/signature.h"
#include "sparkrt/types.h"

namespace sparkrt {

namespace detail {
class DeviceState;
struct KernelRecord;
}  // namespace detail

struct DeviceProperties {
  std::string name;
  std::string architecture;  // preferred image suffix, e.g. "sm_90"; may be empty
  uint64_t total_memory = 0;
  uint32_t multiprocessor_count = 0;
  uint32_t warp_size = 0;
  uint32_t max_threads_per_block = 0;
  Dim3 max_block_dim;
  Dim3 max_grid_dim;
  uint32_t max_shared_memory_per_block = 0;
  uint32_t max_shared_memory_per_block_optin = 0;
  uint32_t compute_capability_major = 0;
  uint32_t compute_capability_minor = 0;
  // The module images the device takes (SparkrtImageFormat).
  bool accepts_ptx = false;
  bool accepts_cubin = false;
  bool accepts_spirv = false;
  bool accepts_signatures = false;  // runs no device code: takes the signature file
  // A GPU API run in software on the host (lavapipe): `auto` passes it over.
  bool emulated = false;
  // The API and driver behind the device, for people ("Vulkan 1.4.312,
  // NVIDIA 580.159.04"); empty where the plugin says none.
  std::string driver;
  // Launch attributes (KernelLaunch::dependent_launch and ::cluster). A
  // plugin of ABI 1.3 or older offers neither.
  bool supports_dependent_launch = false;  // dependent launches may overlap
  bool supports_clusters = false;
  uint32_t max_cluster_size = 0;  // blocks per cluster; 0 without clusters
};

struct OpenOptions {
  // A backend name ("cuda", "cpu", "mock"), a path to a plugin file, or
  // "auto". Empty: SPARKRT_BACKEND, else "auto". Auto never picks the mock.
  std::string backend;
  // Device index; -1: SPARKRT_DEVICE, else 0.
  int device_index = -1;
};

// A resolved kernel. Cheap to copy; valid while its Device is open.
class Kernel {
 public:
  Kernel() = default;
  explicit operator bool() const { return record_ != nullptr; }
  const std::string& module() const;
  const std::string& entry() const;
  const KernelSignature& signature() const;
  // The image its module was loaded from: SPARKRT_IMAGE_CUBIN (machine code
  // for this device), _PTX, _SPIRV or _SIGNATURES (the host backends).
  SparkrtImageFormat image_format() const;

 private:
  friend class Device;
  friend class KernelLaunch;
  explicit Kernel(const detail::KernelRecord* record) : record_(record) {}
  const detail::KernelRecord* record_ = nullptr;
};

class Device {
 public:
  static absl::StatusOr<std::unique_ptr<Device>> open(const OpenOptions& options = {});

  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Orderly shutdown: unloads modules and closes the device in the plugin.
  // Reports the first failure; the device is unusable afterwards either way.
  absl::Status close();
  // Whether close() has run; every call then fails with FailedPrecondition.
  bool is_closed() const;

  const std::string& backend_name() const;
  const std::string& plugin_path() const;
  const std::string& plugin_version() const;
  int index() const;
  const DeviceProperties& properties() const;

  // Finds `module` (see kernel_store.h for the search order), loads it once
  // on this device and resolves `entry`. Thread-safe; later calls for the
  // same pair return the cached handle.
  absl::StatusOr<Kernel> kernel(std::string_view module, std::string_view entry);

  // Device memory, at least 256-byte aligned. bytes must be > 0.
  absl::StatusOr<DevicePtr> alloc(size_t bytes);
  absl::Status free(DevicePtr ptr);
  // Host memory suited to asynchronous copies (page-locked where possible).
  absl::StatusOr<void*> alloc_host(size_t bytes);
  absl::Status free_host(void* ptr);

  absl::Status memset(DevicePtr dst, uint8_t value, size_t bytes);
  absl::Status memset_async(DevicePtr dst, uint8_t value, size_t bytes, Stream stream);

  // Blocking copies return when the data has arrived. The _async forms are
  // ordered on `stream`; host memory must stay valid until the stream reaches
  // them.
  absl::Status copy_h2d(const void* src, DevicePtr dst, size_t bytes);
  absl::Status copy_d2h(DevicePtr src, void* dst, size_t bytes);
  absl::Status copy_d2d(DevicePtr src, DevicePtr dst, size_t bytes);
  absl::Status copy_h2d_async(const void* src, DevicePtr dst, size_t bytes, Stream stream);
  absl::Status copy_d2h_async(DevicePtr src, void* dst, size_t bytes, Stream stream);
  absl::Status copy_d2d_async(DevicePtr src, DevicePtr dst, size_t bytes, Stream stream);

  // Whole-range conveniences over contiguous containers of trivially
  // copyable elements: copy_h2d(std::vector<float>{...}, ptr).
  template <std::ranges::contiguous_range R>
    requires std::is_trivially_copyable_v<std::ranges::range_value_t<R>>
  absl::Status copy_h2d(const R& src, DevicePtr dst) {
    return copy_h2d(std::ranges::data(src), dst,
                    std::ranges::size(src) * sizeof(std::ranges::range_value_t<R>));
  }
  template <std::ranges::contiguous_range R>
    requires std::is_trivially_copyable_v<std::ranges::range_value_t<R>>
  absl::Status copy_d2h(DevicePtr src, R& dst) {
    return copy_d2h(src, std::ranges::data(dst),
                    std::ranges::size(dst) * sizeof(std::ranges::range_value_t<R>));
  }

  absl::StatusOr<Stream> create_stream();
  absl::Status destroy_stream(Stream stream);
  // Waits for all work queued on `stream` (default: the default stream).
  absl::Status synchronize(Stream stream = {});

  absl::StatusOr<Event> create_event();
  absl::Status destroy_event(Event event);
  absl::Status record_event(Event event, Stream stream = {});
  absl::Status synchronize_event(Event event);
  // Work queued on `stream` after this call waits for `event`.
  absl::Status wait_event(Stream stream, Event event);
  absl::StatusOr<float> elapsed_ms(Event start, Event end);

  // Graphs: the work queued on a created stream between begin_capture and
  // end_capture is recorded, not run; launch_graph replays it with one call,
  // the same pointers and values each time. sparkrt/extensions/graph.h states
  // the rules (no blocking calls while capturing, stream 0 cannot capture).
  // UNIMPLEMENTED where the backend has no graphs (supports_graphs()).
  bool supports_graphs() const;
  absl::Status begin_capture(Stream stream);
  absl::StatusOr<Graph> end_capture(Stream stream);
  absl::Status launch_graph(const Graph& graph, Stream stream = {});
  absl::Status destroy_graph(const Graph& graph);

  // The plugin's named extension table (plugin_api.h), or nullptr.
  const void* extension(std::string_view name) const;
  template <typename Table>
  const Table* extension_as(std::string_view name) const {
    return static_cast<const Table*>(extension(name));
  }

  // The plugin's opaque device, for extension tables that take it.
  SparkrtDevice* native_handle() const;

 private:
  // KernelLaunch::launch reads the plugin table and limits from the state
  // directly, so a launch costs no call beyond the plugin's.
  friend class KernelLaunch;
  detail::DeviceState& state() const { return *state_; }

  explicit Device(std::unique_ptr<detail::DeviceState> state);
  std::unique_ptr<detail::DeviceState> state_;
};

}  // namespace sparkrt

#endif  // SPARKRT_DEVICE_H_
