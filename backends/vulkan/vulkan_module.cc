// Modules and kernels of the Vulkan backend: a module is one VkShaderModule
// with a compute entry point per kernel; a kernel is a pipeline layout whose
// push-constant range holds the parameters (or the address of an argument
// buffer holding them), and a pipeline per launch shape.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "vulkan_device.h"

namespace sparkrt::vulkan {

namespace spirv = sdk::spirv;

VulkanKernel::VulkanKernel(VulkanDevice& device, std::string qualified_name, VkShaderModule shader,
                           const spirv::EntryPoint& entry, bool block_from_spec,
                           bool has_shared_spec, VkPipelineLayout pipeline_layout,
                           uint32_t push_bytes, uint32_t argument_bytes)
    : qualified(std::move(qualified_name)),
      layout(pipeline_layout),
      push_constant_bytes(push_bytes),
      argument_buffer_bytes(argument_bytes),
      device_(device),
      shader_(shader),
      entry_name_(entry.name),
      local_size_(entry.local_size),
      block_from_spec_(block_from_spec),
      has_shared_spec_(has_shared_spec) {}

VulkanKernel::~VulkanKernel() {
  for (auto& [key, pipeline] : pipelines_) device_.vk().vkDestroyPipeline(device_.handle(), pipeline, nullptr);
  device_.vk().vkDestroyPipelineLayout(device_.handle(), layout, nullptr);
}

absl::StatusOr<VkPipeline> VulkanKernel::pipeline(const std::array<uint32_t, 3>& block,
                                                  uint32_t shared_bytes) {
  if (!block_from_spec_ && block != local_size_)
    return absl::InvalidArgumentError(absl::StrFormat(
        "vulkan: kernel %s has a fixed workgroup size of %dx%dx%d (LocalSize); launch it with "
        "that block, or size it with specialization constants 0-2 (local_size_x_id = 0, ...)",
        qualified, local_size_[0], local_size_[1], local_size_[2]));
  if (shared_bytes > 0 && !has_shared_spec_)
    return absl::InvalidArgumentError(absl::StrFormat(
        "vulkan: kernel %s declares no dynamic shared memory (specialization constant %d), but "
        "the launch asks for %d bytes",
        qualified, spirv::kSharedBytesSpecId, shared_bytes));
  const PipelineKey key{block[0], block[1], block[2], shared_bytes};
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;

  const std::array<VkSpecializationMapEntry, 4> entries{{
      {spirv::kBlockDimSpecId[0], 0, 4},
      {spirv::kBlockDimSpecId[1], 4, 4},
      {spirv::kBlockDimSpecId[2], 8, 4},
      {spirv::kSharedBytesSpecId, 12, 4},
  }};
  VkSpecializationInfo spec{static_cast<uint32_t>(entries.size()), entries.data(), sizeof(key),
                            key.data()};
  auto info = vk_struct<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = shader_;
  info.stage.pName = entry_name_.c_str();
  info.stage.pSpecializationInfo = &spec;
  info.layout = layout;
  VkPipeline pipeline = VK_NULL_HANDLE;
  if (VkResult r = device_.vk().vkCreateComputePipelines(device_.handle(), VK_NULL_HANDLE, 1, &info,
                                                          nullptr, &pipeline);
      r != VK_SUCCESS)
    return vk_error(r, absl::StrFormat("creating the pipeline of %s for block %dx%dx%d with %d "
                                       "bytes of shared memory",
                                       qualified, block[0], block[1], block[2], shared_bytes));
  pipelines_.emplace(key, pipeline);
  return pipeline;
}

VulkanModule::VulkanModule(VulkanDevice& device, std::string name, VkShaderModule shader,
                           spirv::Module reflection)
    : device_(device), name_(std::move(name)), shader_(shader), reflection_(std::move(reflection)) {}

VulkanModule::~VulkanModule() {
  kernels_.clear();  // their pipelines use the shader module
  device_.vk().vkDestroyShaderModule(device_.handle(), shader_, nullptr);
}

absl::StatusOr<sdk::Kernel*> VulkanModule::get_kernel(std::string_view entry,
                                                      std::span<const SparkrtParamInfo> params) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key(entry);
  if (auto it = kernels_.find(key); it != kernels_.end()) return it->second.get();
  const spirv::EntryPoint* point = reflection_.find(entry);
  if (point == nullptr)
    return absl::NotFoundError(absl::StrFormat(
        "vulkan: kernel %s.%s has no SPIR-V version: the module's SPIR-V has the entry points "
        "[%s] (kernels/spirv/%s/ in the source tree); run it on another backend until one is "
        "written",
        name_, entry, reflection_.entry_names(), name_));
  if (auto st = spirv::check_push_constants(*point, params); !st.ok())
    return absl::FailedPreconditionError(absl::StrFormat(
        "vulkan: module %s: the SPIR-V does not take the parameters its signature declares: %s",
        name_, st.message()));
  uint32_t bytes = 0;
  for (const auto& p : params) bytes = std::max(bytes, p.offset + p.size);
  const uint32_t argument_bytes = point->argument_buffer ? bytes : 0;
  // Push constants are whole words: the parameters, or the argument
  // buffer's address.
  bytes = point->argument_buffer ? sizeof(uint64_t) : (bytes + 3) / 4 * 4;
  const uint32_t limit = device_.push_constant_limit();
  if (bytes > limit)
    return absl::FailedPreconditionError(absl::StrFormat(
        "vulkan: kernel %s.%s takes %d bytes of parameters as push constants, more than the %d "
        "bytes this device offers; declare them as an argument buffer "
        "(SPARKRT_ARGUMENT_BUFFER in sparkrt.glsl, docs/kernels.md \"SPIR-V modules\")",
        name_, entry, bytes, limit));
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, bytes};
  auto info = vk_struct<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  info.pushConstantRangeCount = bytes > 0 ? 1 : 0;
  info.pPushConstantRanges = &range;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  if (VkResult r = device_.vk().vkCreatePipelineLayout(device_.handle(), &info, nullptr, &layout);
      r != VK_SUCCESS)
    return vk_error(r, "vkCreatePipelineLayout");
  auto kernel = std::make_unique<VulkanKernel>(
      device_, absl::StrFormat("%s.%s", name_, entry), shader_, *point,
      reflection_.workgroup_size_is_spec, reflection_.has_spec_id(spirv::kSharedBytesSpecId),
      layout, bytes, argument_bytes);
  sdk::Kernel* handle = kernel.get();
  kernels_.emplace(key, std::move(kernel));
  return handle;
}

}  // namespace sparkrt::vulkan
