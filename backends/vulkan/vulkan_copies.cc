// Copies and fills of the Vulkan backend.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>

#include "absl/strings/str_format.h"
#include "vulkan_builtins.h"
#include "vulkan_device.h"
#include "vulkan_stream.h"

namespace sparkrt::vulkan {
namespace {

constexpr uint64_t kStagingBytes = uint64_t{32} << 20;
// The largest piece an overlapping device copy moves through its scratch
// buffer.
constexpr uint64_t kScratchBytes = uint64_t{32} << 20;

}  // namespace

absl::Status VulkanDevice::fill(Stream& s, SparkrtDevicePtr dst, Range range, uint8_t value,
                                uint64_t bytes) {
  // Whole words with vkCmdFillBuffer; the bytes before and after them with
  // the built-in kernel.
  const uint64_t start = range.offset;
  const uint64_t head = std::min<uint64_t>((4 - start % 4) % 4, bytes);
  const uint64_t middle = (bytes - head) / 4 * 4;
  const uint64_t tail = bytes - head - middle;
  auto bytes_kernel = [&](uint64_t at, uint64_t count) -> absl::Status {
    if (count == 0) return absl::OkStatus();
    auto pipeline = fill_bytes_->pipeline({kFillBlock, 1, 1}, 0);
    if (!pipeline.ok()) return pipeline.status();
    auto cmd = record(s);
    if (!cmd.ok()) return cmd.status();
    const FillArgs args{dst + at, value, static_cast<uint32_t>(count)};
    vk_.vkCmdBindPipeline(*cmd, VK_PIPELINE_BIND_POINT_COMPUTE, *pipeline);
    vk_.vkCmdPushConstants(*cmd, fill_bytes_->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(args),
                           &args);
    vk_.vkCmdDispatch(*cmd, 1, 1, 1);
    return command_recorded(s);
  };
  if (auto st = bytes_kernel(0, head); !st.ok()) return st;
  if (middle > 0) {
    auto cmd = record(s);
    if (!cmd.ok()) return cmd.status();
    vk_.vkCmdFillBuffer(*cmd, range.allocation->buffer, start + head, middle,
                        0x01010101u * value);
    if (auto st = command_recorded(s); !st.ok()) return st;
  }
  return bytes_kernel(head + middle, tail);
}

absl::Status VulkanDevice::copy_kernel(Stream& s, SparkrtDevicePtr dst, SparkrtDevicePtr src,
                                       uint64_t bytes) {
  auto pipeline = copy_bytes_->pipeline({kCopyBlock, 1, 1}, 0);
  if (!pipeline.ok()) return pipeline.status();
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kCopyChunkBytes, bytes - done);
    const uint64_t to = dst + done;
    const uint32_t first = static_cast<uint32_t>(to % 16);
    const uint32_t units = static_cast<uint32_t>((first + n + 15) / 16);
    const CopyArgs args{to - first, src + done, first, static_cast<uint32_t>(first + n), units, 0};
    // A unit a thread, in one pass where the grid allows; a grid-stride
    // loop past its limit.
    const uint64_t groups = std::clamp<uint64_t>((units + kCopyBlock - 1) / kCopyBlock, 1,
                                                 props_.limits.maxComputeWorkGroupCount[0]);
    auto cmd = record(s);
    if (!cmd.ok()) return cmd.status();
    vk_.vkCmdBindPipeline(*cmd, VK_PIPELINE_BIND_POINT_COMPUTE, *pipeline);
    vk_.vkCmdPushConstants(*cmd, copy_bytes_->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(args),
                           &args);
    vk_.vkCmdDispatch(*cmd, static_cast<uint32_t>(groups), 1, 1);
    if (auto st = command_recorded(s); !st.ok()) return st;
    done += n;
  }
  return absl::OkStatus();
}

absl::Status VulkanDevice::copy_overlapping(std::unique_lock<std::mutex>& lock,
                                            const SparkrtMemcpyArgs& c,
                                            const std::shared_ptr<Stream>& s) {
  if (c.src_device == c.dst_device) return c.blocking ? drain(lock, s) : absl::OkStatus();
  Staging scratch;
  scratch.bytes = std::min<uint64_t>(std::min(c.bytes, kScratchBytes), max_allocation_);
  // Whole words past the last byte: copy_bytes reads source words whole.
  if (auto st = make_buffer((scratch.bytes + 15) / 16 * 16 + 16,
                            VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
                            false, scratch.buffer, scratch.memory, true);
      !st.ok())
    return st;
  auto where = vk_struct<VkBufferDeviceAddressInfo>(VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO);
  where.buffer = scratch.buffer;
  const uint64_t middle = vk_.vkGetBufferDeviceAddress(device_, &where);
  // Pieces in the order that reads every source byte before a piece
  // overwrites it: from the front when the destination lies before the
  // source, from the back otherwise.
  const bool forward = c.dst_device < c.src_device;
  absl::Status status;
  for (uint64_t done = 0; done < c.bytes && status.ok();) {
    const uint64_t n = std::min(scratch.bytes, c.bytes - done);
    const uint64_t at = forward ? done : c.bytes - done - n;
    status = copy_kernel(*s, middle, c.src_device + at, n);
    if (status.ok()) status = copy_kernel(*s, c.dst_device + at, middle, n);
    done += n;
  }
  // The scratch buffer is released once the stream is past its copies.
  status.Update(drain(lock, s));
  vk_.vkDestroyBuffer(device_, scratch.buffer, nullptr);
  vk_.vkFreeMemory(device_, scratch.memory, nullptr);
  return status;
}

absl::Status VulkanDevice::memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes,
                                  SparkrtStream stream, bool blocking) {
  std::unique_lock<std::mutex> lock(mu_);
  auto s = stream_of(stream);
  if (!s.ok()) return s.status();
  if (!blocking && graphs_.capturing(stream)) return graphs_.capture_memset(stream, dst, value, bytes);
  if (bytes == 0) return absl::OkStatus();
  auto range = resolve(dst, bytes, "memset");
  if (!range.ok()) return range.status();
  std::shared_ptr<Stream> target = blocking ? streams_.at(0) : *s;
  if (auto st = fill(*target, dst, *range, value, bytes); !st.ok()) return st;
  return blocking ? drain(lock, target) : absl::OkStatus();
}

absl::Status VulkanDevice::memcpy(const SparkrtMemcpyArgs& c) {
  std::unique_lock<std::mutex> lock(mu_);
  auto s = stream_of(c.stream);
  if (!s.ok()) return s.status();
  if (!c.blocking && graphs_.capturing(c.stream)) return graphs_.capture_copy(c.stream, c);
  if (c.bytes == 0) return absl::OkStatus();
  std::shared_ptr<Stream> target = c.blocking ? streams_.at(0) : *s;
  VkBuffer src = VK_NULL_HANDLE, dst = VK_NULL_HANDLE;
  VkBufferCopy region{0, 0, c.bytes};
  switch (c.kind) {
    case SPARKRT_COPY_D2D: {
      auto from = resolve(c.src_device, c.bytes, "memcpy source");
      if (!from.ok()) return from.status();
      auto to = resolve(c.dst_device, c.bytes, "memcpy destination");
      if (!to.ok()) return to.status();
      const bool apart = from->allocation != to->allocation ||
                         c.src_device + c.bytes <= c.dst_device ||
                         c.dst_device + c.bytes <= c.src_device;
      if (!apart) return copy_overlapping(lock, c, target);
      if (auto st = copy_kernel(*target, c.dst_device, c.src_device, c.bytes); !st.ok()) return st;
      return c.blocking ? drain(lock, target) : absl::OkStatus();
    }
    case SPARKRT_COPY_H2D: {
      auto to = resolve(c.dst_device, c.bytes, "memcpy destination");
      if (!to.ok()) return to.status();
      uint64_t offset = 0;
      const PinnedBuffer* pinned = pinned_containing(c.src_host, c.bytes, offset);
      if (pinned == nullptr) return copy_through_host(lock, c, target);
      src = pinned->buffer, region.srcOffset = offset;
      dst = to->allocation->buffer, region.dstOffset = to->offset;
      break;
    }
    case SPARKRT_COPY_D2H: {
      auto from = resolve(c.src_device, c.bytes, "memcpy source");
      if (!from.ok()) return from.status();
      uint64_t offset = 0;
      const PinnedBuffer* pinned = pinned_containing(c.dst_host, c.bytes, offset);
      if (pinned == nullptr) return copy_through_host(lock, c, target);
      src = from->allocation->buffer, region.srcOffset = from->offset;
      dst = pinned->buffer, region.dstOffset = offset;
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("vulkan: memcpy: unknown copy kind %d", static_cast<int>(c.kind)));
  }
  auto cmd = record(*target);
  if (!cmd.ok()) return cmd.status();
  vk_.vkCmdCopyBuffer(*cmd, src, dst, 1, &region);
  if (auto st = command_recorded(*target); !st.ok()) return st;
  return c.blocking ? drain(lock, target) : absl::OkStatus();
}

absl::Status VulkanDevice::copy_through_host(std::unique_lock<std::mutex>& lock,
                                             const SparkrtMemcpyArgs& c,
                                             const std::shared_ptr<Stream>& s) {
  // After the stream's earlier work (and, for a blocking copy, the default
  // stream's: then `s` is it), through mapped memory or the staging buffer.
  if (auto st = drain(lock, s); !st.ok()) return st;
  const bool to_device = c.kind == SPARKRT_COPY_H2D;
  const SparkrtDevicePtr device_ptr = to_device ? c.dst_device : c.src_device;
  lock.unlock();
  std::lock_guard<std::mutex> staging_lock(staging_mu_);
  lock.lock();
  for (uint64_t done = 0; done < c.bytes;) {
    auto range = resolve(device_ptr + done, c.bytes - done, "memcpy");
    if (!range.ok()) return range.status();
    if (range->allocation->mapped != nullptr) {
      std::byte* mapped = range->allocation->mapped + (range->offset - range->allocation->offset);
      if (to_device) {
        std::memcpy(mapped, static_cast<const std::byte*>(c.src_host) + done, c.bytes - done);
      } else {
        std::memcpy(static_cast<std::byte*>(c.dst_host) + done, mapped, c.bytes - done);
      }
      return absl::OkStatus();
    }
    if (staging_.buffer == VK_NULL_HANDLE) {
      staging_.bytes = std::min(kStagingBytes, max_allocation_);
      if (auto st = make_mapped_buffer(
              staging_.bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
              false, "staging", staging_.buffer, staging_.memory, staging_.mapped);
          !st.ok())
        return st;
    }
    const uint64_t n = std::min(staging_.bytes, c.bytes - done);
    if (to_device) std::memcpy(staging_.mapped, static_cast<const std::byte*>(c.src_host) + done, n);
    auto cmd = record(*s);
    if (!cmd.ok()) return cmd.status();
    const VkBufferCopy region{to_device ? 0 : range->offset, to_device ? range->offset : 0, n};
    vk_.vkCmdCopyBuffer(*cmd, to_device ? staging_.buffer : range->allocation->buffer,
                        to_device ? range->allocation->buffer : staging_.buffer, 1, &region);
    if (auto st = command_recorded(*s); !st.ok()) return st;
    if (auto st = drain(lock, s); !st.ok()) return st;
    if (!to_device) std::memcpy(static_cast<std::byte*>(c.dst_host) + done, staging_.mapped, n);
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace sparkrt::vulkan
