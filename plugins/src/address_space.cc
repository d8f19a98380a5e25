#include "sparkrt/sdk/address_space.h"

#include <cstring>
#include <iterator>

#include "absl/strings/str_format.h"

namespace sparkrt::sdk {
namespace {

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

std::string allocation_name(const Allocation& a) {
  return absl::StrFormat("alloc#%d (base 0x%x, %d bytes%s)", a.id, a.base, a.size,
                         a.live ? "" : ", freed");
}

absl::StatusOr<const Allocation*> AddressSpace::allocate(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("mem_alloc: 0 bytes requested; sizes must be > 0");
  const uint64_t base = next_;
  // Overflow-safe: bytes is bounded by the caller's total-memory check, but
  // guard anyway so a huge request cannot wrap the address counter.
  if (bytes > end_ - base || align_up(bytes, kAlignment) + kGuardBytes > end_ - base) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "mem_alloc(%d bytes): the simulated address space is used up (%d allocations "
        "made, addresses are never reused); close and reopen the device",
        bytes, next_id_ - 1));
  }
  std::byte* storage = static_cast<std::byte*>(std::calloc(bytes, 1));
  if (storage == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "mem_alloc(%d bytes): no host memory to back the simulated allocation", bytes));
  }
  Allocation a;
  a.id = next_id_++;
  a.base = base;
  a.size = bytes;
  a.data.reset(storage);
  next_ = base + align_up(bytes, kAlignment) + kGuardBytes;
  live_bytes_ += bytes;
  ++live_count_;
  auto [it, inserted] = by_base_.emplace(base, std::move(a));
  (void)inserted;  // bases only grow, so always inserted
  return &it->second;
}

const Allocation* AddressSpace::find(uint64_t ptr) const {
  auto it = by_base_.upper_bound(ptr);
  if (it == by_base_.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  return ptr - a.base < a.size ? &a : nullptr;
}

bool AddressSpace::find_pointer_argument(uint64_t ptr) const {
  auto it = by_base_.upper_bound(ptr);
  if (it == by_base_.begin()) return false;
  const Allocation* a = &std::prev(it)->second;
  if (ptr - a->base > a->size) return false;
  last_argument_ = a;
  return a->live;
}

std::string AddressSpace::pointer_argument_error(uint64_t ptr) const {
  auto it = by_base_.upper_bound(ptr);
  if (it != by_base_.begin()) {
    const Allocation& a = std::prev(it)->second;
    if (!a.live && ptr - a.base <= a.size) {
      return absl::StrFormat("use after free: 0x%x is alloc#%d+%d of %s", ptr, a.id, ptr - a.base,
                             allocation_name(a));
    }
  }
  return not_inside(ptr).text;
}

AddressSpace::Miss AddressSpace::not_inside(uint64_t ptr) const {
  // Name the allocation just below, which is what off-the-end arithmetic
  // usually started from.
  auto it = by_base_.upper_bound(ptr);
  if (it != by_base_.begin()) {
    const Allocation& below = std::prev(it)->second;
    const uint64_t end = below.base + below.size;
    if (ptr >= end && ptr - end < align_up(below.size, kAlignment) - below.size + kGuardBytes) {
      return {absl::StrFormat("0x%x is %d bytes past the end of %s", ptr, ptr - end,
                              allocation_name(below)),
              true};
    }
  }
  if (ptr >= first_ && ptr < next_) {
    return {absl::StrFormat(
                "0x%x is not inside any live or recently freed allocation of this device (it "
                "lies in this device's address range, so it may belong to an allocation freed long "
                "ago)",
                ptr),
            false};
  }
  return {absl::StrFormat("0x%x is not inside any allocation of this device (its allocations "
                          "lie in [0x%x, 0x%x)); was it allocated on another device, or "
                          "computed from a host pointer?",
                          ptr, first_, next_),
          false};
}

std::string AddressSpace::describe(uint64_t ptr) const {
  if (ptr == 0) return "null";
  const Allocation* a = find(ptr);
  if (a == nullptr) return absl::StrFormat("0x%x", ptr);
  return absl::StrFormat("alloc#%d+%d%s", a->id, ptr - a->base, a->live ? "" : "(freed)");
}

absl::StatusOr<const Allocation*> AddressSpace::release(uint64_t ptr) {
  if (ptr == 0) return absl::InvalidArgumentError("mem_free: null pointer; pass what mem_alloc returned");
  auto it = by_base_.find(ptr);
  if (it == by_base_.end()) {
    if (const Allocation* a = find(ptr); a != nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "mem_free: 0x%x is an interior pointer (offset %d) of %s; free the pointer mem_alloc "
          "returned",
          ptr, ptr - a->base, allocation_name(*a)));
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "mem_free: 0x%x was not returned by mem_alloc: %s", ptr, not_inside(ptr).text));
  }
  Allocation& a = it->second;
  if (!a.live) {
    return absl::FailedPreconditionError(
        absl::StrFormat("mem_free: double free of %s", allocation_name(a)));
  }
  a.live = false;
  a.data.reset();
  live_bytes_ -= a.size;
  --live_count_;
  tombstones_.push_back(a.base);
  if (tombstones_.size() > kMaxTombstones) {
    last_argument_ = nullptr;
    by_base_.erase(tombstones_.front());
    tombstones_.pop_front();
  }
  return &a;
}

absl::StatusOr<std::byte*> AddressSpace::resolve(uint64_t ptr, uint64_t bytes,
                                                 std::string_view what) {
  if (ptr == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: null device pointer for a %d-byte range", what, bytes));
  }
  const Allocation* a = find(ptr);
  if (a == nullptr) {
    // Off-the-end pointers are out of range of the allocation they came from;
    // anything else is simply not device memory of this device.
    const Miss miss = not_inside(ptr);
    std::string msg =
        absl::StrFormat("%s: range [0x%x, +%d bytes): %s", what, ptr, bytes, miss.text);
    return miss.past_end ? absl::OutOfRangeError(msg) : absl::InvalidArgumentError(msg);
  }
  const uint64_t offset = ptr - a->base;
  if (!a->live) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: use after free: range alloc#%d+%d (+%d bytes) lies in %s", what, a->id, offset,
        bytes, allocation_name(*a)));
  }
  if (bytes > a->size - offset) {
    return absl::OutOfRangeError(absl::StrFormat(
        "%s: range alloc#%d+%d (+%d bytes, [0x%x, 0x%x)) runs %d bytes past the end of %s", what,
        a->id, offset, bytes, ptr, ptr + bytes, bytes - (a->size - offset), allocation_name(*a)));
  }
  return a->data.get() + offset;
}

absl::Status AddressSpace::copy(const SparkrtMemcpyArgs& copy) {
  const uint64_t bytes = copy.bytes;
  switch (copy.kind) {
    case SPARKRT_COPY_H2D: {
      if (bytes == 0) return absl::OkStatus();
      if (copy.src_host == nullptr) return absl::InvalidArgumentError("copy_h2d: null host source");
      auto dst = resolve(copy.dst_device, bytes, "copy_h2d destination");
      if (!dst.ok()) return dst.status();
      std::memcpy(*dst, copy.src_host, bytes);
      return absl::OkStatus();
    }
    case SPARKRT_COPY_D2H: {
      if (bytes == 0) return absl::OkStatus();
      if (copy.dst_host == nullptr) {
        return absl::InvalidArgumentError("copy_d2h: null host destination");
      }
      auto src = resolve(copy.src_device, bytes, "copy_d2h source");
      if (!src.ok()) return src.status();
      std::memcpy(copy.dst_host, *src, bytes);
      return absl::OkStatus();
    }
    case SPARKRT_COPY_D2D: {
      if (bytes == 0) return absl::OkStatus();
      auto src = resolve(copy.src_device, bytes, "copy_d2d source");
      if (!src.ok()) return src.status();
      auto dst = resolve(copy.dst_device, bytes, "copy_d2d destination");
      if (!dst.ok()) return dst.status();
      std::memmove(*dst, *src, bytes);  // ranges may overlap within one allocation
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("memcpy: unknown copy kind %d", static_cast<int>(copy.kind)));
}

absl::Status AddressSpace::fill(uint64_t dst, uint8_t value, uint64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  auto p = resolve(dst, bytes, "memset destination");
  if (!p.ok()) return p.status();
  std::memset(*p, value, bytes);
  return absl::OkStatus();
}

}  // namespace sparkrt::sdk
