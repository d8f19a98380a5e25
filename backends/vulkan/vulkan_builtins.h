// The Vulkan backend's own kernels (fill_bytes.comp, copy_bytes.comp): their
// parameters, as the SPIR-V's push-constant blocks lay them out, and their
// workgroup sizes.
#ifndef SPARKRT_BACKENDS_VULKAN_VULKAN_BUILTINS_H_
#define SPARKRT_BACKENDS_VULKAN_VULKAN_BUILTINS_H_

#include <cstdint>

#include "sparkrt/plugin_api.h"

namespace sparkrt::vulkan {

constexpr uint32_t kFillBlock = 64;
constexpr SparkrtParamInfo kFillParams[] = {{0, 8, 8}, {8, 4, 4}, {12, 4, 4}};
struct FillArgs {
  uint64_t address;
  uint32_t value;
  uint32_t count;
};

constexpr uint32_t kCopyBlock = 256;
// Bytes one copy_bytes dispatch moves at most, so that `end` fits 32 bits.
constexpr uint64_t kCopyChunkBytes = uint64_t{1} << 31;
constexpr SparkrtParamInfo kCopyParams[] = {{0, 8, 8},  {8, 8, 8},  {16, 4, 4},
                                            {20, 4, 4}, {24, 4, 4}, {28, 4, 4}};
struct CopyArgs {
  uint64_t dst_units;  // the destination rounded down to 16 bytes
  uint64_t src;
  uint32_t first;  // destination % 16
  uint32_t end;    // first + bytes
  uint32_t units;  // 16-byte destination units touched
  uint32_t pad;
};

}  // namespace sparkrt::vulkan

#endif  // SPARKRT_BACKENDS_VULKAN_VULKAN_BUILTINS_H_
