// HandleTable: plugin-issued 64-bit handles for driver objects (streams,
// events, graphs) that the launch path can look up without a lock.
//
// A handle is (generation << 32) | (slot + 1). Slots live in fixed chunks
// that are allocated on demand and never move or shrink, so a reader needs
// two acquire loads and no lock. Removing an entry bumps the slot's
// generation, so a stale handle never names the object that reuses its slot.
// Insert and remove take a mutex: they are rare next to lookups.
//
// As plugin_api.h states, an object must not be used concurrently with its
// own destroy call; the table only guarantees that a stale or foreign handle
// is refused rather than misread.
#ifndef SPARKRT_BACKENDS_CUDA_HANDLE_TABLE_H_
#define SPARKRT_BACKENDS_CUDA_HANDLE_TABLE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <vector>

namespace sparkrt::cuda {

template <typename T>
requires std::is_pointer_v<T>
class HandleTable {
 public:
  static constexpr uint32_t kChunkSize = 1024;
  static constexpr uint32_t kMaxChunks = 64;
  static constexpr uint32_t kCapacity = kChunkSize * kMaxChunks;

  HandleTable() = default;
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;
  ~HandleTable() {
    for (auto& c : chunks_) delete[] c.load(std::memory_order_relaxed);
  }

  // A new handle for `value`, or nullopt when all kCapacity slots are taken.
  std::optional<uint64_t> insert(T value) {
    std::lock_guard<std::mutex> lock(mu_);
    uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      if (next_ == kCapacity) return std::nullopt;
      index = next_++;
      auto& chunk = chunks_[index / kChunkSize];
      if (chunk.load(std::memory_order_relaxed) == nullptr)
        chunk.store(new Slot[kChunkSize], std::memory_order_release);
    }
    Slot& s = slot(index);
    const uint64_t handle = (uint64_t{s.generation} << 32) | (index + 1);
    s.value.store(value, std::memory_order_relaxed);
    s.handle.store(handle, std::memory_order_release);  // publishes value
    return handle;
  }

  // The value of a live handle; nullptr for 0, stale, or foreign handles.
  T lookup(uint64_t handle) const {
    const uint32_t low = static_cast<uint32_t>(handle);
    if (low == 0 || low > kCapacity) return nullptr;
    const uint32_t index = low - 1;
    const Slot* chunk = chunks_[index / kChunkSize].load(std::memory_order_acquire);
    if (chunk == nullptr) return nullptr;
    const Slot& s = chunk[index % kChunkSize];
    if (s.handle.load(std::memory_order_acquire) != handle) return nullptr;
    return s.value.load(std::memory_order_relaxed);
  }

  // Unregisters `handle` and returns its value for the caller to destroy;
  // nullptr when the handle is not live.
  T remove(uint64_t handle) {
    std::lock_guard<std::mutex> lock(mu_);
    T value = lookup(handle);
    if (value == nullptr) return nullptr;
    const uint32_t index = static_cast<uint32_t>(handle) - 1;
    Slot& s = slot(index);
    s.handle.store(0, std::memory_order_release);
    s.value.store(nullptr, std::memory_order_relaxed);
    ++s.generation;
    free_.push_back(index);
    return value;
  }

  // Removes every live entry, handing each value to `destroy`.
  template <typename F>
  void drain(F&& destroy) {
    std::vector<T> values;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (uint32_t i = 0; i < next_; ++i) {
        Slot& s = slot(i);
        const uint64_t h = s.handle.load(std::memory_order_relaxed);
        if (h == 0) continue;
        values.push_back(s.value.load(std::memory_order_relaxed));
        s.handle.store(0, std::memory_order_release);
        s.value.store(nullptr, std::memory_order_relaxed);
        ++s.generation;
        free_.push_back(i);
      }
    }
    for (T v : values) destroy(v);
  }

 private:
  struct Slot {
    std::atomic<uint64_t> handle{0};
    std::atomic<T> value{nullptr};
    uint32_t generation = 1;  // guarded by mu_
  };

  Slot& slot(uint32_t index) {
    return chunks_[index / kChunkSize].load(std::memory_order_relaxed)[index % kChunkSize];
  }

  std::array<std::atomic<Slot*>, kMaxChunks> chunks_{};
  std::mutex mu_;
  std::vector<uint32_t> free_;  // guarded by mu_
  uint32_t next_ = 0;           // guarded by mu_: slots ever used
};

}  // namespace sparkrt::cuda

#endif  // SPARKRT_BACKENDS_CUDA_HANDLE_TABLE_H_
