// The state behind a Device: its plugin, native handle, cached properties and
// loaded modules. Shared by device.cc and kernel_launch.cc.
#ifndef SPARKRT_RUNTIME_DEVICE_STATE_H_
#define SPARKRT_RUNTIME_DEVICE_STATE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "plugin.h"
#include "sparkrt/device.h"
#include "sparkrt/signature.h"

namespace sparkrt::detail {

class DeviceState;

// A resolved kernel; its address is the Kernel handle. Owned by its module
// record, so it lives until the device closes.
struct KernelRecord {
  const DeviceState* owner;
  std::string module;
  KernelSignature signature;
  SparkrtKernel* native;
};

struct ModuleRecord {
  std::string name;
  std::string origin;  // folder or "embedded", and which image was loaded
  SparkrtModule* native = nullptr;
  std::vector<KernelSignature> signatures;
  absl::flat_hash_map<std::string, std::unique_ptr<KernelRecord>> kernels;
};

class DeviceState {
 public:
  std::shared_ptr<Plugin> plugin;
  const SparkrtPluginApi* api = nullptr;
  SparkrtDevice* native = nullptr;
  int index = 0;
  DeviceProperties properties;
  std::atomic<bool> closed{false};

  absl::Mutex mu;  // guards modules; held during a module load
  absl::flat_hash_map<std::string, std::unique_ptr<ModuleRecord>> modules ABSL_GUARDED_BY(mu);
};

}  // namespace sparkrt::detail

#endif  // SPARKRT_RUNTIME_DEVICE_STATE_H_
