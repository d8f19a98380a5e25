// Value types shared by the whole runtime API: device pointers, streams,
// events, launch dimensions.
#ifndef SPARKRT_TYPES_H_
#define SPARKRT_TYPES_H_

#include <compare>
#include <cstdint>
#include <type_traits>

namespace sparkrt {

// A device address. Byte-offset arithmetic only; the runtime never
// dereferences it. Null (0) is a valid value to pass as an optional kernel
// argument.
struct DevicePtr {
  uint64_t addr = 0;

  constexpr DevicePtr() = default;
  constexpr explicit DevicePtr(uint64_t a) : addr(a) {}

  constexpr DevicePtr operator+(uint64_t bytes) const { return DevicePtr(addr + bytes); }
  constexpr DevicePtr& operator+=(uint64_t bytes) {
    addr += bytes;
    return *this;
  }
  constexpr bool is_null() const { return addr == 0; }
  constexpr auto operator<=>(const DevicePtr&) const = default;
};

// A stream handle issued by the device. The default-constructed value is the
// device's default stream.
struct Stream {
  uint64_t handle = 0;
  constexpr auto operator<=>(const Stream&) const = default;
};

struct Event {
  uint64_t handle = 0;
  constexpr auto operator<=>(const Event&) const = default;
};

// A captured graph (Device::end_capture): its handle and how many operations
// it replays.
struct Graph {
  uint64_t handle = 0;
  uint64_t num_nodes = 0;
  constexpr auto operator<=>(const Graph&) const = default;
};

// Grid or block extent. Brace-initialises from {x}, {x, y} or {x, y, z}.
struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  constexpr uint64_t volume() const { return uint64_t{x} * y * z; }
  constexpr bool operator==(const Dim3&) const = default;
};

// ceil(a / b) for unsigned integers; b must be non-zero.
template <typename T>
  requires std::is_unsigned_v<T>
constexpr T div_ceil(T a, T b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

// a rounded up to a multiple of b, for unsigned integers; b must be non-zero.
template <typename T>
  requires std::is_unsigned_v<T>
constexpr T round_up(T a, T b) {
  return div_ceil(a, b) * b;
}

}  // namespace sparkrt

#endif  // SPARKRT_TYPES_H_
