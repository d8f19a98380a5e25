// Memory and copies of the mock: device allocations in the checked address
// space (sparkrt/sdk/address_space.h, which also moves the bytes), host
// allocations, memsets and copies, each counted and logged.
#include <algorithm>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mock_device.h"
#include "sparkrt/abi_names.h"

namespace sparkrt::mock {

absl::StatusOr<SparkrtDevicePtr> MockDevice::alloc(uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("mem_alloc");
  const uint64_t limit = memory_cap_ != 0 ? std::min(memory_cap_, kTotalMemory) : kTotalMemory;
  const uint64_t live = memory_.live_bytes();
  if (bytes > limit || live > limit - bytes) {
    return note("mem_alloc",
                absl::ResourceExhaustedError(absl::StrFormat(
                    "mem_alloc(%d bytes): out of device memory: %d bytes live in %d "
                    "allocations, limit %d bytes (%s); free memory or raise the cap",
                    bytes, live, memory_.live_count(), limit,
                    memory_cap_ != 0 && memory_cap_ < kTotalMemory
                        ? "memory cap set by mock fault injection (cap_memory)"
                        : "the mock's total_memory")));
  }
  auto a = memory_.allocate(bytes);
  if (!a.ok()) return note("mem_alloc", a.status());
  ++counters_.allocations;
  counters_.live_allocations = memory_.live_count();
  counters_.live_bytes = memory_.live_bytes();
  counters_.peak_live_bytes = std::max(counters_.peak_live_bytes, counters_.live_bytes);
  if (log_.is_open()) {
    log_.begin("alloc");
    log_.field("alloc", absl::StrCat("alloc#", (*a)->id));
    log_.field("bytes", bytes);
    log_.end();
  }
  return (*a)->base;
}

absl::Status MockDevice::free(SparkrtDevicePtr ptr) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("mem_free");
  auto a = memory_.release(ptr);
  if (!a.ok()) return note("mem_free", a.status());
  ++counters_.frees;
  counters_.live_allocations = memory_.live_count();
  counters_.live_bytes = memory_.live_bytes();
  if (log_.is_open()) {
    log_.begin("free");
    log_.field("alloc", absl::StrCat("alloc#", (*a)->id));
    log_.end();
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> MockDevice::host_alloc(uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("host_alloc");
  if (bytes == 0) {
    return note("host_alloc", absl::InvalidArgumentError("host_alloc: 0 bytes requested"));
  }
  void* p = ::operator new(bytes, std::align_val_t{64}, std::nothrow);
  if (p == nullptr) {
    return note("host_alloc", absl::ResourceExhaustedError(absl::StrFormat(
                                  "host_alloc(%d bytes): out of host memory", bytes)));
  }
  host_allocations_.insert(p);
  ++counters_.host_allocations;
  if (log_.is_open()) {
    log_.begin("host_alloc");
    log_.field("bytes", bytes);
    log_.end();
  }
  return p;
}

absl::Status MockDevice::host_free(void* ptr) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("host_free");
  if (host_allocations_.erase(ptr) == 0) {
    return note("host_free", absl::InvalidArgumentError(absl::StrFormat(
                                 "host_free: %p was not returned by host_alloc of this device "
                                 "(or was already freed)",
                                 ptr)));
  }
  ::operator delete(ptr, std::align_val_t{64});
  ++counters_.host_frees;
  if (log_.is_open()) {
    log_.begin("host_free");
    log_.end();
  }
  return absl::OkStatus();
}

absl::Status MockDevice::memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes,
                                SparkrtStream stream, bool blocking) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("memset");
  auto s = find_stream(stream, "memset");
  if (!s.ok()) return note("memset", s.status());
  if (!blocking && graphs_.capturing(stream)) return graphs_.capture_memset(stream, dst, value, bytes);
  if (absl::Status filled = memory_.fill(dst, value, bytes); !filled.ok()) {
    return note("memset", filled);
  }
  ++tick_;
  if (blocking) {
    ++counters_.memsets_blocking;
  } else {
    ++counters_.memsets_async;
    ++(*s)->counters.memsets_async;
  }
  if (log_.is_open()) {
    log_.begin("memset");
    log_.field("dst", memory_.describe(dst));
    log_.field("value", uint64_t{value});
    log_.field("bytes", bytes);
    log_.field("stream", stream);
    log_.field("blocking", blocking);
    log_.end();
  }
  return absl::OkStatus();
}

absl::Status MockDevice::memcpy(const SparkrtMemcpyArgs& copy) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("memcpy");
  const bool blocking = copy.blocking != 0;
  const uint64_t bytes = copy.bytes;
  auto s = find_stream(copy.stream, "memcpy");
  if (!s.ok()) return note("memcpy", s.status());
  if (!blocking && graphs_.capturing(copy.stream)) return graphs_.capture_copy(copy.stream, copy);
  if (absl::Status moved = memory_.copy(copy); !moved.ok()) return note("memcpy", moved);
  // Counted by direction; copy() has accepted the kind.
  auto count = [&](uint64_t& total, uint64_t& blocking_calls, uint64_t& async_calls,
                   uint64_t& stream_async_calls) {
    total += bytes;
    if (blocking) {
      ++blocking_calls;
    } else {
      ++async_calls;
      ++stream_async_calls;
    }
  };
  SparkrtMockStreamCounters& on_stream = (*s)->counters;
  switch (copy.kind) {
    case SPARKRT_COPY_H2D:
      count(counters_.bytes_h2d, counters_.h2d_blocking, counters_.h2d_async, on_stream.h2d_async);
      break;
    case SPARKRT_COPY_D2H:
      count(counters_.bytes_d2h, counters_.d2h_blocking, counters_.d2h_async, on_stream.d2h_async);
      break;
    case SPARKRT_COPY_D2D:
      count(counters_.bytes_d2d, counters_.d2d_blocking, counters_.d2d_async, on_stream.d2d_async);
      break;
  }
  ++tick_;
  if (log_.is_open()) {
    log_.begin("copy");
    log_.field("kind", abi_copy_kind_name(copy.kind));
    if (copy.kind != SPARKRT_COPY_H2D) log_.field("src", memory_.describe(copy.src_device));
    if (copy.kind != SPARKRT_COPY_D2H) log_.field("dst", memory_.describe(copy.dst_device));
    log_.field("bytes", bytes);
    log_.field("stream", copy.stream);
    log_.field("blocking", blocking);
    log_.end();
  }
  return absl::OkStatus();
}

}  // namespace sparkrt::mock
