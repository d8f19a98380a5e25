// One Vulkan device (README.md): memory as buffers with device addresses,
// streams as timeline semaphores with batched command buffers, events as
// timestamps, kernels as compute pipelines from SPIR-V.
#ifndef SPARKRT_BACKENDS_VULKAN_VULKAN_DEVICE_H_
#define SPARKRT_BACKENDS_VULKAN_VULKAN_DEVICE_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "sparkrt/plugin_sdk.h"
#include "sparkrt/sdk/graph_recorder.h"
#include "sparkrt/sdk/spirv_reflect.h"
#include "vulkan_api.h"

namespace sparkrt::vulkan {

class VulkanDevice;

// A pipeline per launch shape: block x, y, z and dynamic shared memory bytes.
using PipelineKey = std::array<uint32_t, 4>;

class VulkanKernel final : public sdk::Kernel {
 public:
  VulkanKernel(VulkanDevice& device, std::string qualified_name, VkShaderModule shader,
               const sdk::spirv::EntryPoint& entry, bool block_from_spec, bool has_shared_spec,
               VkPipelineLayout layout, uint32_t push_constant_bytes,
               uint32_t argument_buffer_bytes);
  ~VulkanKernel() override;

  // The pipeline for this launch shape, created on first use.
  absl::StatusOr<VkPipeline> pipeline(const std::array<uint32_t, 3>& block, uint32_t shared_bytes);

  const std::string qualified;  // "module.entry"
  const VkPipelineLayout layout;
  const uint32_t push_constant_bytes;  // the push-constant range, a multiple of 4
  // The parameter block's size where it is passed in an argument buffer
  // (the push constants then hold its address); 0 otherwise.
  const uint32_t argument_buffer_bytes;

 private:
  VulkanDevice& device_;
  VkShaderModule shader_;
  std::string entry_name_;
  std::array<uint32_t, 3> local_size_;
  bool block_from_spec_;
  bool has_shared_spec_;
  std::mutex mu_;
  std::map<PipelineKey, VkPipeline> pipelines_;
};

class VulkanModule final : public sdk::Module {
 public:
  VulkanModule(VulkanDevice& device, std::string name, VkShaderModule shader,
               sdk::spirv::Module reflection);
  ~VulkanModule() override;
  absl::StatusOr<sdk::Kernel*> get_kernel(std::string_view entry,
                                          std::span<const SparkrtParamInfo> params) override;

 private:
  VulkanDevice& device_;
  std::string name_;
  VkShaderModule shader_;
  sdk::spirv::Module reflection_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<VulkanKernel>> kernels_;
};

class VulkanDevice final : public sdk::Device, public sdk::GraphCapable {
 public:
  // Opens physical device `index` of `instance` (which outlives the device).
  static absl::StatusOr<std::unique_ptr<VulkanDevice>> open(const Instance& instance, int index);
  ~VulkanDevice() override;

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

  sdk::GraphRecorder& graphs() override { return graphs_; }
  absl::Status check_stream(SparkrtStream stream) override;

  const DeviceFunctions& vk() const { return vk_; }
  VkDevice handle() const { return device_; }
  uint32_t push_constant_limit() const { return props_.limits.maxPushConstantsSize; }
  // SPARKRT_VULKAN_PIPELINE_STATS=1 and the device offers the statistics:
  // every pipeline is created capturing them, and they are written to stderr.
  bool pipeline_statistics() const { return pipeline_statistics_; }

 private:
  struct Allocation {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    // A buffer larger than one allocation may be: sparse, bound to these.
    std::vector<VkDeviceMemory> chunks;
    uint64_t bytes = 0;         // what was asked for
    uint64_t offset = 0;        // of the returned address within the buffer
    std::byte* mapped = nullptr;  // the returned address's bytes, where host-visible
  };
  // A resolved device range: the allocation's buffer and the offset in it.
  struct Range {
    const Allocation* allocation;
    uint64_t offset;
  };
  struct Stream;
  struct Event {
    uint32_t query = 0;  // timestamp slot
    std::shared_ptr<Stream> stream;  // recorded on; null until recorded
    uint64_t value = 0;              // the stream's timeline value that completes it
  };
  struct PinnedBuffer {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    uint64_t bytes = 0;
  };
  struct Staging {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    std::byte* mapped = nullptr;
    uint64_t bytes = 0;
  };

  VulkanDevice(const Instance& instance, VkPhysicalDevice physical);
  absl::Status init(int index);

  // All of these require mu_.
  absl::StatusOr<Range> resolve(SparkrtDevicePtr ptr, uint64_t bytes, const char* what) const;
  const PinnedBuffer* pinned_containing(const void* host, uint64_t bytes, uint64_t& offset) const;
  absl::StatusOr<std::shared_ptr<Stream>> stream_of(SparkrtStream stream) const;
  absl::Status check_event(SparkrtEvent event) const;
  // The open command buffer of `s`, begun, with a barrier after any command
  // already in it, so that each command sees what the ones before wrote.
  absl::StatusOr<VkCommandBuffer> record(Stream& s);
  // Ends and submits the open batch of `s`, if any.
  absl::Status submit(Stream& s);
  // After a command: submits when the stream's queue has run dry (so the GPU
  // never idles behind the host) or the batch is full.
  absl::Status command_recorded(Stream& s);
  // Frees the command buffers of batches the GPU has finished.
  void retire(Stream& s);
  absl::Status fill(Stream& s, SparkrtDevicePtr dst, Range range, uint8_t value, uint64_t bytes);
  // Records copy_bytes from src to dst: any alignment, the ranges apart.
  absl::Status copy_kernel(Stream& s, SparkrtDevicePtr dst, SparkrtDevicePtr src, uint64_t bytes);
  // A device copy between overlapping ranges (memmove): through a scratch
  // buffer, done when it returns (mu_ released while waiting).
  absl::Status copy_overlapping(std::unique_lock<std::mutex>& lock, const SparkrtMemcpyArgs& c,
                                const std::shared_ptr<Stream>& s);
  // The device address of `bytes` in the argument ring of `s`, for its open
  // batch, holding a copy of `params`. When the ring is full it waits, with
  // mu_ released, for the oldest batch using it.
  absl::StatusOr<uint64_t> copy_arguments(std::unique_lock<std::mutex>& lock,
                                          const std::shared_ptr<Stream>& s,
                                          std::span<const std::byte> params);

  // Submits every stream's work and waits for all of it; returns with mu_
  // released (the caller's memory is no longer in the maps).
  absl::Status wait_all(std::unique_lock<std::mutex>& lock);
  // Waits, without mu_, until `s` reaches `value`.
  absl::Status wait(const std::shared_ptr<Stream>& s, uint64_t value);
  // Submits what `stream` holds and waits for all of it (mu_ held on entry
  // and on return, released while waiting).
  absl::Status drain(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Stream>& s);
  // A copy with host memory that is not pinned: done now, through the
  // mapped memory or the staging buffer, after the stream's earlier work.
  absl::Status copy_through_host(std::unique_lock<std::mutex>& lock, const SparkrtMemcpyArgs& c,
                                 const std::shared_ptr<Stream>& s);

  absl::StatusOr<uint32_t> memory_type(uint32_t type_bits, bool host) const;
  // A buffer of `size` bytes over several memory allocations of at most
  // max_allocation_ each, bound with vkQueueBindSparse.
  absl::Status make_sparse_buffer(uint64_t size, VkBufferUsageFlags usage, Allocation& a);
  void release(const Allocation& a);
  absl::Status make_buffer(uint64_t bytes, VkBufferUsageFlags usage, bool host, VkBuffer& buffer,
                           VkDeviceMemory& memory, bool device_address,
                           VkMemoryPropertyFlags* flags = nullptr);
  // A host-visible, coherent buffer, mapped (the staging buffer, the
  // argument rings); on failure nothing is left and the handles are null.
  absl::Status make_mapped_buffer(uint64_t bytes, VkBufferUsageFlags usage, bool device_address,
                                  const char* what, VkBuffer& buffer, VkDeviceMemory& memory,
                                  std::byte*& mapped);
  absl::StatusOr<uint32_t> take_query_slot();

  const Instance& instance_;
  VkPhysicalDevice physical_;
  VkPhysicalDeviceProperties props_{};
  VkPhysicalDeviceMemoryProperties memory_props_{};
  std::string driver_;  // "Vulkan 1.4.312, NVIDIA 580.159.04"
  uint32_t subgroup_size_ = 0;
  uint32_t multiprocessors_ = 1;
  uint32_t queue_family_ = 0;
  uint32_t timestamp_bits_ = 0;
  VkDevice device_ = VK_NULL_HANDLE;
  DeviceFunctions vk_{};
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::vector<VkCommandBuffer> free_cmds_;  // begun anew when taken (requires mu_)
  std::vector<VkQueryPool> query_pools_;
  std::vector<uint32_t> free_queries_;
  uint32_t queries_made_ = 0;
  uint64_t max_allocation_ = 0;  // one allocation's limit (SPARKRT_VULKAN_MAX_ALLOCATION may lower it)
  bool sparse_ = false;          // sparse binding: buffers beyond max_allocation_
  bool pipeline_statistics_ = false;  // pipeline_statistics()
  uint64_t device_heap_bytes_ = 0;  // the largest device-local heap
  // The backend's own kernels (fill_bytes.comp, copy_bytes.comp).
  std::unique_ptr<VulkanModule> builtin_fill_, builtin_copy_;
  VulkanKernel* fill_bytes_ = nullptr;
  VulkanKernel* copy_bytes_ = nullptr;

  mutable std::mutex mu_;
  std::map<uint64_t, Allocation> allocations_;  // by returned address
  std::map<uintptr_t, PinnedBuffer> pinned_;    // by host address
  absl::flat_hash_map<SparkrtStream, std::shared_ptr<Stream>> streams_;
  SparkrtStream next_stream_ = 1;
  absl::flat_hash_map<SparkrtEvent, Event> events_;
  SparkrtEvent next_event_ = 1;
  std::mutex staging_mu_;  // taken before mu_
  Staging staging_;
  sdk::GraphRecorder graphs_;
};

}  // namespace sparkrt::vulkan

#endif  // SPARKRT_BACKENDS_VULKAN_VULKAN_DEVICE_H_
