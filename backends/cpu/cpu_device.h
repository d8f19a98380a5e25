// The cpu reference device: host memory behind a checked address space, and
// launches executed by the kernels' C++ reference implementations
// (kernels/reference/). Every operation completes before it returns, so
// stream order holds trivially; events record the host clock.
#ifndef SPARKRT_BACKENDS_CPU_CPU_DEVICE_H_
#define SPARKRT_BACKENDS_CPU_CPU_DEVICE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "reference/reference.h"
#include "sparkrt/plugin_sdk.h"
#include "sparkrt/sdk/address_space.h"
#include "sparkrt/sdk/graph_recorder.h"
#include "sparkrt/sdk/host_collectives.h"

namespace sparkrt::cpu {

class CpuKernel final : public sdk::Kernel {
 public:
  CpuKernel(std::string module_name, std::string entry_name, reference::KernelFn reference)
      : module(std::move(module_name)),
        entry(std::move(entry_name)),
        qualified(module + "." + entry),
        fn(reference) {}
  const std::string module;
  const std::string entry;
  const std::string qualified;  // "module.entry", for messages
  const reference::KernelFn fn;
};

class CpuModule final : public sdk::Module {
 public:
  explicit CpuModule(std::string name) : name_(std::move(name)) {}
  absl::StatusOr<sdk::Kernel*> get_kernel(std::string_view entry,
                                          std::span<const SparkrtParamInfo> params) override;

 private:
  std::string name_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<CpuKernel>> kernels_;
};

class CpuDevice final : public sdk::Device,
                        public sdk::GraphCapable,
                        public sdk::HostCollectiveDevice {
 public:
  // `serial` gives each device of a process its own address range, so a
  // pointer from another device is caught; `index` is the index it was
  // opened at (SPARKRT_HOST_DEVICES of them).
  CpuDevice(uint64_t serial, int index);
  ~CpuDevice() override { close_collectives(); }

  absl::Status properties(SparkrtDeviceProperties& out) override;
  absl::StatusOr<std::unique_ptr<sdk::Module>> load_module(
      std::string_view name, SparkrtImageFormat format, std::span<const std::byte> image) override;

  absl::StatusOr<SparkrtDevicePtr> alloc(uint64_t bytes) override;
  absl::Status free(SparkrtDevicePtr ptr) override;
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

  sdk::GraphRecorder& graphs() override { return graphs_; }
  absl::Status check_stream(SparkrtStream stream) override;

  // sdk::HostCollectiveDevice: collectives move bytes between devices' memory.
  absl::Status with_collective_memory(SparkrtStream stream, std::string_view call,
                                      CollectiveMemoryFn fn) override;

 private:
  using Clock = std::chrono::steady_clock;

  absl::Status check_stream_locked(SparkrtStream stream) const;  // requires mu_
  absl::Status check_event(SparkrtEvent event) const;     // requires mu_

  // One lock for memory, handles and execution: a reference runs with its
  // buffers pinned against a concurrent free.
  std::mutex mu_;
  sdk::AddressSpace memory_;
  sdk::GraphRecorder graphs_;
  absl::flat_hash_set<SparkrtStream> streams_;
  SparkrtStream next_stream_ = 1;
  absl::flat_hash_map<SparkrtEvent, std::optional<Clock::time_point>> events_;
  SparkrtEvent next_event_ = 1;
};

}  // namespace sparkrt::cpu

#endif  // SPARKRT_BACKENDS_CPU_CPU_DEVICE_H_
