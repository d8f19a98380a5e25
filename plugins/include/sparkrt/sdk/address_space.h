// A checked device address space for backends whose "device memory" is host
// memory (the mock, the cpu reference backend, examples/host_plugin):
// addresses in a private range with real host storage behind every
// allocation, so copies, memsets and reference kernels move real bytes, and
// every bad access is reported with the allocation it hit (or nearly hit).
// copy() and fill() are such a backend's memcpy and memset, checks included.
//
// Addresses start at a base the backend picks per device, are 256-byte
// aligned and are never reused: each allocation is followed by a guard gap,
// and freed allocations stay behind as tombstones so a use after free names
// the allocation it used to be. Not thread-safe: the backend's device lock
// guards it.
#ifndef SPARKRT_SDK_ADDRESS_SPACE_H_
#define SPARKRT_SDK_ADDRESS_SPACE_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/plugin_api.h"

namespace sparkrt::sdk {

struct Allocation {
  struct FreeStorage {
    void operator()(std::byte* p) const { std::free(p); }
  };

  uint64_t id = 0;    // 1-based, in allocation order
  uint64_t base = 0;  // device address
  uint64_t size = 0;  // requested bytes
  bool live = true;
  // Zero-filled host storage (calloc: large allocations cost address space
  // until touched). Released when the allocation is freed.
  std::unique_ptr<std::byte, FreeStorage> data;
};

class AddressSpace {
 public:
  static constexpr uint64_t kAlignment = 256;
  // Gap after every allocation that belongs to no allocation, so pointer
  // arithmetic that runs off the end lands nowhere instead of in a neighbour.
  static constexpr uint64_t kGuardBytes = 64 * 1024;
  // Freed allocations remembered for use-after-free reports; older ones are
  // forgotten so that allocation churn does not grow without bound.
  static constexpr size_t kMaxTombstones = 65536;

  // Addresses from `base` up to `base + span`.
  AddressSpace(uint64_t base, uint64_t span) : first_(base), next_(base), end_(base + span) {}

  // A fresh allocation of `bytes` (> 0); InvalidArgument for 0,
  // ResourceExhausted when host storage or the address range runs out.
  absl::StatusOr<const Allocation*> allocate(uint64_t bytes);

  // Frees exactly the address allocate() returned. Null, interior, unknown
  // and already freed pointers are errors naming what the pointer is.
  absl::StatusOr<const Allocation*> release(uint64_t ptr);

  // Host storage for the device range [ptr, ptr + bytes), which must lie in
  // one live allocation. `what` names the operand in messages, e.g.
  // "copy_h2d destination".
  absl::StatusOr<std::byte*> resolve(uint64_t ptr, uint64_t bytes, std::string_view what);

  // Moves the bytes of `copy` at once (its kind, ranges and host pointers;
  // the stream and blocking flag are the caller's): each device range must
  // lie in one live allocation, errors name the operand ("copy_h2d
  // destination", "copy_d2d source", ...), a null host pointer is refused,
  // and D2D ranges may overlap (memmove). Zero bytes move nothing and only
  // the kind is checked.
  absl::Status copy(const SparkrtMemcpyArgs& copy);
  // Sets [dst, dst + bytes) to `value`; zero bytes check nothing.
  absl::Status fill(uint64_t dst, uint8_t value, uint64_t bytes);

  // The allocation (live or tombstone) whose [base, base + size) holds ptr.
  const Allocation* find(uint64_t ptr) const;

  // Whether a kernel may be given `ptr` as an argument: null, an address
  // inside a live allocation, or the address one past its end (CUDA code
  // passes end pointers legitimately, e.g. of an empty range; a GPU faults
  // only on a dereference, and any other pointer has nothing behind it).
  // Cheap, for every launch: the last allocation matched is remembered, and
  // a pointer into it is answered inline.
  bool valid_pointer_argument(uint64_t ptr) const {
    // Unsigned: a ptr below the base (null included) wraps to a large offset.
    if (const Allocation* a = last_argument_; a != nullptr && ptr - a->base <= a->size)
      return a->live;
    return ptr == 0 || find_pointer_argument(ptr);
  }
  // Why valid_pointer_argument(ptr) is false, naming the address and the
  // allocation it came from (freed, or nearest below) when there is one.
  std::string pointer_argument_error(uint64_t ptr) const;

  // "alloc#3+16", "alloc#3+16(freed)", "null", or "0x..." when ptr lies in
  // no known allocation. Deterministic for a deterministic program.
  std::string describe(uint64_t ptr) const;

  uint64_t live_bytes() const { return live_bytes_; }
  uint64_t live_count() const { return live_count_; }

 private:
  // Why `ptr` is in no allocation; past_end when it lies just after one.
  struct Miss {
    std::string text;
    bool past_end;
  };
  Miss not_inside(uint64_t ptr) const;
  // valid_pointer_argument's lookup when the remembered allocation misses.
  bool find_pointer_argument(uint64_t ptr) const;

  uint64_t first_;
  uint64_t next_;
  uint64_t end_;
  uint64_t next_id_ = 1;
  uint64_t live_bytes_ = 0;
  uint64_t live_count_ = 0;
  std::map<uint64_t, Allocation> by_base_;  // live allocations and tombstones
  // valid_pointer_argument's last match; reset whenever an entry is erased.
  mutable const Allocation* last_argument_ = nullptr;
  std::deque<uint64_t> tombstones_;         // bases of freed ones, oldest first
};

// "alloc#3 (base 0x7f0000010000, 4096 bytes)", with ", freed" when it is.
std::string allocation_name(const Allocation& a);

}  // namespace sparkrt::sdk

#endif  // SPARKRT_SDK_ADDRESS_SPACE_H_
