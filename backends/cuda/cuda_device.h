// The CUDA backend's objects: one opened device (its primary context,
// memory, streams, events, graphs) and the modules and kernels loaded on it.
//
// Ownership: a CudaDevice owns everything made through it and releases what
// is left when it is closed. A CudaModule owns its kernels; the device keeps a
// registry of live modules so that closing the device unloads the rest.
#ifndef SPARKRT_BACKENDS_CUDA_CUDA_DEVICE_H_
#define SPARKRT_BACKENDS_CUDA_CUDA_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuda_driver.h"
#include "handle_table.h"
#include "sparkrt/plugin_sdk.h"

namespace sparkrt::cuda {

// The context sparkrt last made current on this thread (see
// CudaDevice::make_current_cached).
inline thread_local CUcontext t_current_context = nullptr;

class CudaDevice;
class CudaModule;

class CudaKernel final : public sdk::Kernel {
 public:
  CudaKernel(CudaDevice* device, std::string name, CUfunction function,
             std::vector<SparkrtParamInfo> params, uint32_t static_shared_bytes,
             uint32_t max_dynamic_shared_bytes);

  const std::string& name() const { return name_; }
  CUfunction function() const { return function_; }
  CudaDevice* device() const { return device_; }
  uint32_t num_params() const { return static_cast<uint32_t>(params_.size()); }
  uint32_t params_size() const { return params_size_; }

  // Raises CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES so a launch with
  // `bytes` of dynamic shared memory is allowed. Only the first launch above
  // the current ceiling pays for the driver call.
  absl::Status reserve_dynamic_shared(uint32_t bytes) {
    if (bytes <= dynamic_shared_limit_.load(std::memory_order_acquire)) [[likely]]
      return absl::OkStatus();
    return raise_dynamic_shared(bytes);
  }

 private:
  absl::Status raise_dynamic_shared(uint32_t bytes);

  CudaDevice* device_;
  std::string name_;
  CUfunction function_;
  std::vector<SparkrtParamInfo> params_;
  uint32_t params_size_ = 0;
  uint32_t static_shared_bytes_;
  std::atomic<uint32_t> dynamic_shared_limit_;  // the attribute's current value
  std::mutex raise_mu_;                         // serialises raising it
};

class CudaModule final : public sdk::Module {
 public:
  CudaModule(CudaDevice* device, std::string name, SparkrtImageFormat format, CUmodule module);
  ~CudaModule() override;

  absl::StatusOr<sdk::Kernel*> get_kernel(std::string_view entry,
                                          std::span<const SparkrtParamInfo> params) override;

  const std::string& name() const { return name_; }

  // Unloads without unregistering; used by the device while it closes.
  void release_from_device();

 private:
  // "sm_90 cubin" or "PTX, compiled by the driver's JIT", for messages.
  std::string loaded_as() const;

  CudaDevice* device_;
  std::string name_;
  SparkrtImageFormat format_;
  CUmodule module_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<CudaKernel>> kernels_;  // guarded by mu_
  bool registered_ = true;
};

class CudaDevice final : public sdk::Device {
 public:
  struct Options {
    bool sync_launches = false;   // SPARKRT_SYNC_LAUNCHES=1
    bool use_pool = true;         // SPARKRT_CUDA_MEMPOOL != 0 and supported
    bool param_pointers = false;  // SPARKRT_CUDA_LAUNCH_PARAMS=pointers
    uint32_t shared_optin = 0;    // SPARKRT_CUDA_SHARED_MEMORY_OPTIN; 0: the device's
  };

  static absl::StatusOr<std::unique_ptr<CudaDevice>> open(int index);
  ~CudaDevice() override;

  // sdk::Device
  absl::Status properties(SparkrtDeviceProperties& out) override;
  absl::StatusOr<std::unique_ptr<sdk::Module>> load_module(
      std::string_view name, SparkrtImageFormat format, std::span<const std::byte> image) override;
  absl::StatusOr<SparkrtDevicePtr> alloc(uint64_t bytes) override;
  absl::Status free(SparkrtDevicePtr ptr) override;
  absl::StatusOr<void*> host_alloc(uint64_t bytes) override;
  absl::Status host_free(void* ptr) override;
  absl::Status memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes, SparkrtStream stream,
                      bool blocking) override;
  absl::Status memcpy(const SparkrtMemcpyArgs& copy) override;
  absl::StatusOr<SparkrtStream> create_stream() override;
  absl::Status destroy_stream(SparkrtStream stream) override;
  absl::Status synchronize(SparkrtStream stream) override;
  absl::StatusOr<SparkrtEvent> create_event() override;
  absl::Status destroy_event(SparkrtEvent event) override;
  absl::Status record_event(SparkrtEvent event, SparkrtStream stream) override;
  absl::Status synchronize_event(SparkrtEvent event) override;
  absl::Status wait_event(SparkrtStream stream, SparkrtEvent event) override;
  absl::StatusOr<float> elapsed_ms(SparkrtEvent start, SparkrtEvent end) override;
  absl::Status launch(const sdk::Launch& launch) override;

  // sparkrt.graph.v1 (cuda_graph.cc)
  absl::Status begin_capture(SparkrtStream stream);
  absl::StatusOr<std::pair<uint64_t, uint64_t>> end_capture(SparkrtStream stream);
  absl::Status launch_graph(uint64_t graph, SparkrtStream stream);
  absl::Status destroy_graph(uint64_t graph);

  // Makes the device's primary context current on the calling thread,
  // asking the driver what is current first.
  absl::Status make_current() {
    CUcontext current = nullptr;
    if (driver().CtxGetCurrent(&current) != CUDA_SUCCESS || current != context_)
      SPARKRT_RETURN_IF_ERROR(SPARKRT_CU(CtxSetCurrent, context_));
    t_current_context = context_;
    return absl::OkStatus();
  }
  // The launch path's version: trusts what sparkrt last made current on this
  // thread and skips the driver call. Code outside sparkrt that switches the
  // thread's context makes this stale; launch() then gets a context error
  // from the driver, calls make_current() and retries once.
  absl::Status make_current_cached() {
    if (t_current_context == context_) [[likely]]
      return absl::OkStatus();
    return make_current();
  }
  static void forget_current_context() { t_current_context = nullptr; }

  // The CUstream behind a handle (0 -> the default stream), or an
  // InvalidArgument naming `call`.
  absl::StatusOr<CUstream> stream(SparkrtStream handle, std::string_view call) const {
    if (handle == 0) return CUstream{nullptr};
    if (CUstream s = streams_.lookup(handle); s != nullptr) [[likely]]
      return s;
    return unknown_handle("stream", handle, call);
  }

  // check_range, for extension calls that take device pointers.
  absl::Status check_device_range(SparkrtDevicePtr ptr, uint64_t bytes, const char* role) const {
    return check_range(ptr, bytes, role);
  }

  // Whether `handle` is a CudaDevice of this plugin that is still open:
  // extension calls that take device handles refuse any other (a device of
  // another backend would otherwise be misread as this one).
  static bool is_open(const SparkrtDevice* handle);

  CUdevice cu_device() const { return device_; }
  int index() const { return index_; }
  const Options& options() const { return options_; }
  const std::string& name() const { return name_; }
  int driver_version() const { return driver_version_; }
  uint32_t shared_memory_optin() const { return props_.max_shared_memory_per_block_optin; }
  const char* architecture() const { return props_.architecture; }

  // Called by CudaModule's destructor.
  void unregister_module(CudaModule* module);

 private:
  CudaDevice(int index, CUdevice device, CUcontext context, Options options);
  absl::Status query_properties();
  absl::Status enqueue_copy(const SparkrtMemcpyArgs& copy, CUstream stream);
  // OK when [ptr, ptr + bytes) lies inside one live allocation of this
  // device, or inside device memory the driver knows of (allocated outside
  // sparkrt). `role` names the pointer in messages ("destination").
  absl::Status check_range(SparkrtDevicePtr ptr, uint64_t bytes, const char* role) const;
  [[gnu::cold]] static absl::Status unknown_handle(std::string_view what, uint64_t handle,
                                                   std::string_view call);
  [[gnu::cold]] absl::Status launch_failed(CUresult result, const sdk::Launch& launch,
                                           std::string_view call) const;
  // One cuLaunchKernel with the launch's parameters, in the configured mode.
  CUresult submit(const CudaKernel& kernel, const sdk::Launch& launch, CUstream stream) const;
  CUresult submit_with_attributes(const CudaKernel& kernel, const sdk::Launch& launch,
                                  CUstream stream) const;
  [[gnu::cold]] absl::Status launch_faulted(CUresult result, const sdk::Launch& launch) const;
  [[gnu::cold]] absl::Status check_launch_shape(const class CudaKernel& kernel,
                                                const sdk::Launch& launch) const;

  const int index_;
  const CUdevice device_;
  const CUcontext context_;  // the retained primary context
  const Options options_;
  int driver_version_ = 0;
  std::string name_;
  SparkrtDeviceProperties props_{};
  CUmemoryPool pool_ = nullptr;  // null: plain cuMemAlloc

  HandleTable<CUstream> streams_;
  HandleTable<CUevent> events_;
  HandleTable<CUgraphExec> graphs_;

  // Live device allocations, base -> size: frees are checked against it and
  // copies and memsets must stay inside one of them (see check_range).
  mutable std::shared_mutex alloc_mu_;
  std::map<SparkrtDevicePtr, uint64_t> allocations_;  // guarded by alloc_mu_

  std::mutex mu_;
  absl::flat_hash_set<void*> host_allocations_;  // guarded by mu_
  absl::flat_hash_set<CudaModule*> modules_;     // guarded by mu_
};

// The device behind an opaque handle made by this plugin.
inline CudaDevice* from_handle(SparkrtDevice* device) {
  return static_cast<CudaDevice*>(reinterpret_cast<sdk::Device*>(device));
}

}  // namespace sparkrt::cuda

#endif  // SPARKRT_BACKENDS_CUDA_CUDA_DEVICE_H_
