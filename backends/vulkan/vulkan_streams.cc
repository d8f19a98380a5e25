// Streams and events of the Vulkan backend: work is recorded into a
// stream's open command buffer and submitted in batches that signal its
// timeline semaphore; events are timestamps in those batches.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "vulkan_device.h"
#include "vulkan_stream.h"

namespace sparkrt::vulkan {
namespace {

// Commands a batch takes before it is submitted anyway.
constexpr uint32_t kMaxBatchCommands = 64;
constexpr uint32_t kQueriesPerPool = 64;
constexpr uint64_t kWaitSliceNs = 1'000'000'000;
constexpr VkAccessFlags kWrites = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkAccessFlags kReadsWrites = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                       VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkPipelineStageFlags kWork =
    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;

}  // namespace

absl::StatusOr<std::shared_ptr<VulkanDevice::Stream>> VulkanDevice::stream_of(
    SparkrtStream stream) const {
  if (auto it = streams_.find(stream); it != streams_.end()) return it->second;
  return absl::InvalidArgumentError(absl::StrFormat(
      "vulkan: unknown stream %d (never created on this device, or destroyed)", stream));
}

absl::Status VulkanDevice::check_stream(SparkrtStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return stream_of(stream).status();
}

absl::StatusOr<SparkrtStream> VulkanDevice::create_stream() {
  auto s = std::make_shared<Stream>(vk_, device_);
  auto type = vk_struct<VkSemaphoreTypeCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO);
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = 0;
  auto info = vk_struct<VkSemaphoreCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &type);
  if (VkResult r = vk_.vkCreateSemaphore(device_, &info, nullptr, &s->timeline); r != VK_SUCCESS) {
    s->timeline = VK_NULL_HANDLE;
    return vk_error(r, "vkCreateSemaphore (a stream's timeline)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const SparkrtStream handle = next_stream_++;
  streams_.emplace(handle, std::move(s));
  return handle;
}

absl::Status VulkanDevice::destroy_stream(SparkrtStream stream) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stream == 0)
    return absl::InvalidArgumentError("vulkan: the default stream (0) cannot be destroyed");
  auto s = stream_of(stream);
  if (!s.ok()) return s.status();
  streams_.erase(stream);  // refused from now on; its work still completes
  return drain(lock, *s);
}

absl::Status VulkanDevice::synchronize(SparkrtStream stream) {
  std::unique_lock<std::mutex> lock(mu_);
  auto s = stream_of(stream);
  if (!s.ok()) return s.status();
  return drain(lock, *s);
}

absl::StatusOr<VkCommandBuffer> VulkanDevice::record(Stream& s) {
  if (s.open == VK_NULL_HANDLE) {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    if (!free_cmds_.empty()) {
      cmd = free_cmds_.back();
      free_cmds_.pop_back();
    } else {
      auto info = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
      info.commandPool = pool_;
      info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      info.commandBufferCount = 1;
      if (VkResult r = vk_.vkAllocateCommandBuffers(device_, &info, &cmd); r != VK_SUCCESS)
        return vk_error(r, "vkAllocateCommandBuffers");
    }
    auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    if (VkResult r = vk_.vkBeginCommandBuffer(cmd, &begin); r != VK_SUCCESS) {
      free_cmds_.push_back(cmd);
      return vk_error(r, "vkBeginCommandBuffer");
    }
    s.open = cmd;
    s.commands = 0;
  } else if (s.commands > 0) {
    auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    barrier.srcAccessMask = kWrites;
    barrier.dstAccessMask = kReadsWrites;
    vk_.vkCmdPipelineBarrier(s.open, kWork, kWork, 0, 1, &barrier, 0, nullptr, 0, nullptr);
  }
  return s.open;
}

absl::Status VulkanDevice::submit(Stream& s) {
  if (s.open == VK_NULL_HANDLE) return absl::OkStatus();
  VkCommandBuffer cmd = s.open;
  s.open = VK_NULL_HANDLE;
  // What the batch wrote becomes visible to the host once it completes.
  auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = kWrites;
  barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT;
  vk_.vkCmdPipelineBarrier(cmd, kWork, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0,
                           nullptr);
  if (VkResult r = vk_.vkEndCommandBuffer(cmd); r != VK_SUCCESS) {
    free_cmds_.push_back(cmd);
    return vk_error(r, "vkEndCommandBuffer");
  }
  std::vector<VkSemaphore> wait_semaphores;
  std::vector<uint64_t> wait_values;
  std::vector<VkPipelineStageFlags> wait_stages;
  if (s.submitted > 0) {
    wait_semaphores.push_back(s.timeline);
    wait_values.push_back(s.submitted);
  }
  for (const auto& [sem, value] : s.waits) {
    wait_semaphores.push_back(sem);
    wait_values.push_back(value);
  }
  wait_stages.assign(wait_semaphores.size(), VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
  const uint64_t signal = s.submitted + 1;
  auto timeline = vk_struct<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
  timeline.waitSemaphoreValueCount = static_cast<uint32_t>(wait_values.size());
  timeline.pWaitSemaphoreValues = wait_values.data();
  timeline.signalSemaphoreValueCount = 1;
  timeline.pSignalSemaphoreValues = &signal;
  auto info = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO, &timeline);
  info.waitSemaphoreCount = static_cast<uint32_t>(wait_semaphores.size());
  info.pWaitSemaphores = wait_semaphores.data();
  info.pWaitDstStageMask = wait_stages.data();
  info.commandBufferCount = 1;
  info.pCommandBuffers = &cmd;
  info.signalSemaphoreCount = 1;
  info.pSignalSemaphores = &s.timeline;
  if (VkResult r = vk_.vkQueueSubmit(queue_, 1, &info, VK_NULL_HANDLE); r != VK_SUCCESS) {
    free_cmds_.push_back(cmd);
    s.waits.clear();
    s.wait_holds.clear();
    return vk_error(r, "vkQueueSubmit");
  }
  s.submitted = signal;
  s.in_flight.push_back({signal, cmd, std::move(s.wait_holds)});
  s.waits.clear();
  s.wait_holds.clear();
  s.commands = 0;
  return absl::OkStatus();
}

void VulkanDevice::retire(Stream& s) {
  if (s.in_flight.empty()) return;
  uint64_t done = 0;
  if (vk_.vkGetSemaphoreCounterValue(device_, s.timeline, &done) != VK_SUCCESS) return;
  while (!s.in_flight.empty() && s.in_flight.front().value <= done) {
    free_cmds_.push_back(s.in_flight.front().cmd);
    s.in_flight.pop_front();
  }
}

absl::Status VulkanDevice::command_recorded(Stream& s) {
  ++s.commands;
  retire(s);
  if (s.commands >= kMaxBatchCommands || s.in_flight.empty()) return submit(s);
  return absl::OkStatus();
}

absl::Status VulkanDevice::wait(const std::shared_ptr<Stream>& s, uint64_t value) {
  auto info = vk_struct<VkSemaphoreWaitInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO);
  info.semaphoreCount = 1;
  info.pSemaphores = &s->timeline;
  info.pValues = &value;
  for (;;) {
    const VkResult r = vk_.vkWaitSemaphores(device_, &info, kWaitSliceNs);
    if (r == VK_SUCCESS) return absl::OkStatus();
    if (r != VK_TIMEOUT) return vk_error(r, "vkWaitSemaphores (waiting for a stream)");
  }
}

absl::Status VulkanDevice::drain(std::unique_lock<std::mutex>& lock,
                                 const std::shared_ptr<Stream>& s) {
  if (auto st = submit(*s); !st.ok()) return st;
  const uint64_t value = s->submitted;
  lock.unlock();
  absl::Status st = wait(s, value);
  lock.lock();
  retire(*s);
  return st;
}

// ---- events --------------------------------------------------------------------

absl::StatusOr<uint32_t> VulkanDevice::take_query_slot() {
  if (free_queries_.empty()) {
    auto info = vk_struct<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
    info.queryType = VK_QUERY_TYPE_TIMESTAMP;
    info.queryCount = kQueriesPerPool;
    VkQueryPool pool = VK_NULL_HANDLE;
    if (VkResult r = vk_.vkCreateQueryPool(device_, &info, nullptr, &pool); r != VK_SUCCESS)
      return vk_error(r, "vkCreateQueryPool (events)");
    query_pools_.push_back(pool);
    for (uint32_t i = kQueriesPerPool; i-- > 0;) free_queries_.push_back(queries_made_ + i);
    queries_made_ += kQueriesPerPool;
  }
  const uint32_t slot = free_queries_.back();
  free_queries_.pop_back();
  return slot;
}

absl::Status VulkanDevice::check_event(SparkrtEvent event) const {
  if (events_.contains(event)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "vulkan: unknown event %d (never created on this device, or destroyed)", event));
}

absl::StatusOr<SparkrtEvent> VulkanDevice::create_event() {
  std::lock_guard<std::mutex> lock(mu_);
  auto slot = take_query_slot();
  if (!slot.ok()) return slot.status();
  const SparkrtEvent e = next_event_++;
  events_[e].query = *slot;
  return e;
}

absl::Status VulkanDevice::destroy_event(SparkrtEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  // A timestamp still to be written keeps its slot until the stream is past it.
  Event& e = events_[event];
  if (e.stream == nullptr || e.stream->submitted >= e.value) {
    uint64_t done = 0;
    if (e.stream == nullptr ||
        (vk_.vkGetSemaphoreCounterValue(device_, e.stream->timeline, &done) == VK_SUCCESS &&
         done >= e.value))
      free_queries_.push_back(e.query);
  }
  events_.erase(event);
  return absl::OkStatus();
}

absl::Status VulkanDevice::record_event(SparkrtEvent event, SparkrtStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  auto s = stream_of(stream);
  if (!s.ok()) return s.status();
  Event& e = events_[event];
  auto cmd = record(**s);
  if (!cmd.ok()) return cmd.status();
  if (timestamp_bits_ > 0) {
    VkQueryPool pool = query_pools_[e.query / kQueriesPerPool];
    const uint32_t index = e.query % kQueriesPerPool;
    vk_.vkCmdResetQueryPool(*cmd, pool, index, 1);
    vk_.vkCmdWriteTimestamp(*cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, index);
  }
  e.stream = *s;
  e.value = (*s)->submitted + 1;  // the open batch's
  return command_recorded(**s);
}

absl::Status VulkanDevice::synchronize_event(SparkrtEvent event) {
  std::unique_lock<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  const Event e = events_[event];
  if (e.stream == nullptr) return absl::OkStatus();  // never recorded: nothing to wait for
  if (e.stream->submitted < e.value) {
    if (auto st = submit(*e.stream); !st.ok()) return st;
  }
  lock.unlock();
  return wait(e.stream, e.value);
}

absl::Status VulkanDevice::wait_event(SparkrtStream stream, SparkrtEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(event); !s.ok()) return s;
  auto s = stream_of(stream);
  if (!s.ok()) return s.status();
  const Event e = events_[event];
  if (e.stream == nullptr || e.stream == *s) return absl::OkStatus();
  if (e.stream->submitted < e.value) {
    if (auto st = submit(*e.stream); !st.ok()) return st;
  }
  // Only work queued from now on waits: what is already recorded goes first.
  if (auto st = submit(**s); !st.ok()) return st;
  (*s)->waits.emplace_back(e.stream->timeline, e.value);
  (*s)->wait_holds.push_back(e.stream);
  return absl::OkStatus();
}

absl::StatusOr<float> VulkanDevice::elapsed_ms(SparkrtEvent start, SparkrtEvent end) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = check_event(start); !s.ok()) return s;
  if (auto s = check_event(end); !s.ok()) return s;
  const Event a = events_[start], b = events_[end];
  if (a.stream == nullptr || b.stream == nullptr)
    return absl::FailedPreconditionError(absl::StrFormat(
        "vulkan: elapsed_ms(%d, %d): both events must be recorded first", start, end));
  if (timestamp_bits_ == 0)
    return absl::UnimplementedError("vulkan: this device's compute queue has no timestamps");
  uint64_t ticks[2];
  for (int i = 0; i < 2; ++i) {
    const Event& e = i == 0 ? a : b;
    uint64_t done = 0;
    if (vk_.vkGetSemaphoreCounterValue(device_, e.stream->timeline, &done) != VK_SUCCESS ||
        done < e.value)
      return absl::FailedPreconditionError(absl::StrFormat(
          "vulkan: elapsed_ms(%d, %d): event %d has not completed; synchronize it first", start,
          end, i == 0 ? start : end));
    if (VkResult r = vk_.vkGetQueryPoolResults(
            device_, query_pools_[e.query / kQueriesPerPool], e.query % kQueriesPerPool, 1,
            sizeof(uint64_t), &ticks[i], sizeof(uint64_t), VK_QUERY_RESULT_64_BIT);
        r != VK_SUCCESS)
      return vk_error(r, "vkGetQueryPoolResults (event timestamps)");
  }
  const uint64_t mask = timestamp_bits_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << timestamp_bits_) - 1;
  const uint64_t forward = (ticks[1] - ticks[0]) & mask;
  // A difference above half the range is end before start: negative.
  const double signed_ticks = forward > mask / 2 ? -static_cast<double>((mask - forward) + 1)
                                                 : static_cast<double>(forward);
  return static_cast<float>(signed_ticks * props_.limits.timestampPeriod / 1e6);
}

}  // namespace sparkrt::vulkan
