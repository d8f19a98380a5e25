// The state behind a Device: its plugin, native handle, cached properties and
// loaded modules. Shared by device.cc and kernel_launch.cc.
#ifndef SPARKRT_RUNTIME_DEVICE_STATE_H_
#define SPARKRT_RUNTIME_DEVICE_STATE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "device_timeline.h"
#include "plugin.h"
#include "sparkrt/device.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/signature.h"

namespace sparkrt::detail {

class DeviceState;

// A resolved kernel; its address is the Kernel handle. Owned by its module
// record, so it lives until the device closes.
struct KernelRecord {
  const DeviceState* owner;
  std::string module;
  SparkrtImageFormat image;  // what its module was loaded from
  KernelSignature signature;
  SparkrtKernel* native;
  // The signature laid out like KernelLaunch's arrays, so the launch check is
  // two memcmp calls and one pass over the argument kinds.
  std::vector<uint32_t> offsets;
  std::vector<uint32_t> sizes;
  std::vector<uint16_t> accepted_kinds;  // per parameter, bit k set: ArgKind k fits
  // From the entry's directives.
  Dim3 required_block{0, 0, 0};       // .reqntid; 0 when absent
  uint64_t max_threads = UINT64_MAX;  // .maxntid x * y * z
};

// Builds the record of a resolved entry (kernel_launch.cc: the launch check
// owns the layout it compares against).
std::unique_ptr<KernelRecord> make_kernel_record(const DeviceState* owner, std::string module,
                                                 SparkrtImageFormat image,
                                                 const KernelSignature& signature,
                                                 SparkrtKernel* native);

// Runs a load at most once at a time and keeps its success. The first caller
// runs it with no lock held; callers arriving meanwhile wait for that attempt
// and share its result. A failure is not kept: the next caller tries again
// (the file may have been fixed since). Once loaded, ready() is one atomic
// load, so cached lookups never wait for anything a load holds.
class LoadOnce {
 public:
  bool ready() const { return ready_.load(std::memory_order_acquire); }

  template <typename Load>
  absl::Status run(Load&& load) {
    std::unique_lock<std::mutex> lock(mu_);
    if (ready()) return absl::OkStatus();
    if (loading_) {
      const uint64_t attempt = finished_;
      done_.wait(lock, [&] { return finished_ != attempt; });
      return ready() ? absl::OkStatus() : last_error_;
    }
    loading_ = true;
    lock.unlock();
    // Waiters must be woken even if `load` throws (out of memory).
    struct Finish {
      LoadOnce& self;
      absl::Status status = absl::InternalError("load interrupted by an exception");
      ~Finish() {
        std::lock_guard<std::mutex> relock(self.mu_);
        self.loading_ = false;
        ++self.finished_;
        if (status.ok()) {
          self.ready_.store(true, std::memory_order_release);
        } else {
          self.last_error_ = status;
        }
        self.done_.notify_all();
      }
    } finish{*this};
    finish.status = load();
    return finish.status;
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  bool loading_ = false;
  uint64_t finished_ = 0;  // attempts completed
  absl::Status last_error_;
  std::atomic<bool> ready_{false};
};

// An entry of a module; `record` is set by the load before it is ready.
struct EntrySlot {
  LoadOnce once;
  std::unique_ptr<KernelRecord> record;
};

// A module, present in DeviceState::modules from the first lookup on. The
// fields after `once` are written by its load and read only once ready().
struct ModuleRecord {
  std::string name;
  LoadOnce once;
  std::string origin;  // folder or "embedded", and which image was loaded
  SparkrtImageFormat image = SPARKRT_IMAGE_PTX;
  SparkrtModule* native = nullptr;  // null again once the device is closed
  std::vector<KernelSignature> signatures;
  // Guards the map only: held to find or add a slot, never during a backend call.
  std::shared_mutex kernels_mu;
  absl::flat_hash_map<std::string, std::unique_ptr<EntrySlot>> kernels;
};

class DeviceState {
 public:
  std::shared_ptr<Plugin> plugin;
  const SparkrtPluginApi* api = nullptr;
  SparkrtDevice* native = nullptr;
  int index = 0;
  DeviceProperties properties;
  std::atomic<bool> closed{false};
  // The launch flags passed on to the plugin (SPARKRT_DEPENDENT_LAUNCH=0
  // clears SPARKRT_LAUNCH_DEPENDENT).
  uint32_t launch_flags = ~uint32_t{0};
  // sparkrt.graph.v1, or null where the plugin has no graphs.
  const SparkrtGraphExtension* graphs = nullptr;
  // Device times in traces; made with the Device.
  std::unique_ptr<DeviceTimeline> timeline;

  // Guards the map only: held to find or add a module's slot, never while a
  // module is read, parsed or loaded. Slots live until the state is destroyed,
  // so Kernel handles stay valid (and fail cleanly once closed).
  std::shared_mutex modules_mu;
  absl::flat_hash_map<std::string, std::unique_ptr<ModuleRecord>> modules;

  // Module loads and entry resolutions in progress: close() waits for them
  // before it unloads modules and closes the device under them.
  std::mutex calls_mu;
  std::condition_variable calls_done;
  int calls_in_flight = 0;
};

// Counts one module load or entry resolution for DeviceState::calls_in_flight
// for its scope; refused (entered() false) once the device is closed.
class BackendCall {
 public:
  explicit BackendCall(DeviceState& s) : s_(s) {
    std::lock_guard<std::mutex> lock(s_.calls_mu);
    entered_ = !s_.closed;
    if (entered_) ++s_.calls_in_flight;
  }
  ~BackendCall() {
    if (!entered_) return;
    std::lock_guard<std::mutex> lock(s_.calls_mu);
    if (--s_.calls_in_flight == 0) s_.calls_done.notify_all();
  }
  BackendCall(const BackendCall&) = delete;
  BackendCall& operator=(const BackendCall&) = delete;
  bool entered() const { return entered_; }

 private:
  DeviceState& s_;
  bool entered_ = false;
};

}  // namespace sparkrt::detail

#endif  // SPARKRT_RUNTIME_DEVICE_STATE_H_
