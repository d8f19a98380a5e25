// Modules and kernels of the Vulkan backend: a module is one VkShaderModule
// with a compute entry point per kernel; a kernel is a pipeline layout whose
// push-constant range holds the parameters (or the address of an argument
// buffer holding them), and a pipeline per launch shape.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vulkan_device.h"

namespace sparkrt::vulkan {

namespace spirv = sdk::spirv;

namespace {

// The driver's text of a fixed-size Vulkan string field.
std::string text(const char (&field)[VK_MAX_DESCRIPTION_SIZE]) {
  return std::string(field, strnlen(field, VK_MAX_DESCRIPTION_SIZE));
}

// "name=value, ..." for the statistics of one executable of `pipeline`.
std::string executable_statistics(const DeviceFunctions& vk, VkDevice device,
                                  VkPipeline pipeline, uint32_t executable) {
  auto info = vk_struct<VkPipelineExecutableInfoKHR>(VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR);
  info.pipeline = pipeline;
  info.executableIndex = executable;
  uint32_t n = 0;
  VkResult r = vk.vkGetPipelineExecutableStatisticsKHR(device, &info, &n, nullptr);
  std::vector<VkPipelineExecutableStatisticKHR> stats(
      n, vk_struct<VkPipelineExecutableStatisticKHR>(VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR));
  if (r == VK_SUCCESS) r = vk.vkGetPipelineExecutableStatisticsKHR(device, &info, &n, stats.data());
  if (r != VK_SUCCESS)
    return absl::StrFormat("no statistics (vkGetPipelineExecutableStatisticsKHR: %s)",
                           result_name(r));
  if (n == 0) return "no statistics";
  std::string out;
  for (uint32_t i = 0; i < n; ++i) {
    const VkPipelineExecutableStatisticKHR& s = stats[i];
    absl::StrAppend(&out, i == 0 ? "" : ", ", text(s.name), "=");
    switch (s.format) {
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
        absl::StrAppend(&out, s.value.b32 ? "true" : "false");
        break;
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
        absl::StrAppend(&out, s.value.i64);
        break;
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
        absl::StrAppend(&out, s.value.u64);
        break;
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR:
        absl::StrAppendFormat(&out, "%g", s.value.f64);
        break;
      default:
        absl::StrAppendFormat(&out, "(format %d)", static_cast<int>(s.format));
        break;
    }
  }
  return out;
}

// Writes one line to stderr with every statistic the driver gives for
// `pipeline` (created with VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR):
//   sparkrt vulkan pipeline vector_ops.vector_add_f32 block 256x1x1: name=value, ...
// " shared N" follows the block where the launch asks for dynamic shared
// memory; a pipeline of several executables (not seen for compute) names each
// before its statistics, separated by "; ". A failed query is reported on the
// line, never returned: the pipeline is usable regardless.
void report_statistics(const DeviceFunctions& vk, VkDevice device, VkPipeline pipeline,
                       const std::string& qualified, const PipelineKey& key) {
  std::string line = absl::StrFormat("sparkrt vulkan pipeline %s block %dx%dx%d", qualified,
                                     key[0], key[1], key[2]);
  if (key[3] > 0) absl::StrAppendFormat(&line, " shared %d", key[3]);
  line += ": ";
  auto info = vk_struct<VkPipelineInfoKHR>(VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR);
  info.pipeline = pipeline;
  uint32_t n = 0;
  VkResult r = vk.vkGetPipelineExecutablePropertiesKHR(device, &info, &n, nullptr);
  std::vector<VkPipelineExecutablePropertiesKHR> executables(
      n, vk_struct<VkPipelineExecutablePropertiesKHR>(VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR));
  if (r == VK_SUCCESS) r = vk.vkGetPipelineExecutablePropertiesKHR(device, &info, &n, executables.data());
  if (r != VK_SUCCESS) {
    absl::StrAppendFormat(&line, "no statistics (vkGetPipelineExecutablePropertiesKHR: %s)",
                          result_name(r));
  } else if (n == 0) {
    line += "no executables";
  } else {
    for (uint32_t i = 0; i < n; ++i) {
      if (i > 0) line += "; ";
      if (n > 1) absl::StrAppend(&line, text(executables[i].name), ": ");
      line += executable_statistics(vk, device, pipeline, i);
    }
  }
  // One call, so that lines of pipelines made on several threads stay whole.
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

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
  if (device_.pipeline_statistics()) info.flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  VkPipeline pipeline = VK_NULL_HANDLE;
  if (VkResult r = device_.vk().vkCreateComputePipelines(device_.handle(), VK_NULL_HANDLE, 1, &info,
                                                          nullptr, &pipeline);
      r != VK_SUCCESS)
    return vk_error(r, absl::StrFormat("creating the pipeline of %s for block %dx%dx%d with %d "
                                       "bytes of shared memory",
                                       qualified, block[0], block[1], block[2], shared_bytes));
  pipelines_.emplace(key, pipeline);
  if (device_.pipeline_statistics())
    report_statistics(device_.vk(), device_.handle(), pipeline, qualified, key);
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
