// The state behind a Device: its plugin, native handle, cached properties and
// loaded modules. Shared by device.cc and kernel_launch.cc.
#ifndef SPARKRT_RUNTIME_DEVICE_STATE_H_
#define SPARKRT_RUNTIME_DEVICE_STATE_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
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
  // The signature's offsets and sizes laid out like KernelLaunch's, so the
  // launch check is two memcmp calls.
  std::vector<uint32_t> offsets;
  std::vector<uint32_t> sizes;
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

  std::mutex mu;  // guards modules; held during a module load
  absl::flat_hash_map<std::string, std::unique_ptr<ModuleRecord>> modules;
};

}  // namespace sparkrt::detail

#endif  // SPARKRT_RUNTIME_DEVICE_STATE_H_
