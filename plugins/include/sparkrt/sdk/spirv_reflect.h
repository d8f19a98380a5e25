// What a backend that runs SPIR-V needs to know about a module before it
// builds pipelines: its compute entry points, each one's push-constant block
// (the kernel's parameters, laid out as the signature says) and the
// specialization constants it declares. A reader of untrusted bytes: every
// count, id and length is checked, and an error names the word it is about.
//
// The sparkrt SPIR-V kernel convention (docs/kernels.md, "SPIR-V modules"):
//  - one GLCompute entry point per kernel, named like the kernel;
//  - the parameters are the members of one push-constant block, at the
//    offsets of the signature (scalar layout; pointers are 64-bit
//    PhysicalStorageBuffer addresses); or, for a kernel whose parameters
//    exceed the device's push constants, the members of an argument buffer:
//    the push-constant block is then one member named `sparkrt_args`, the
//    address of a struct laid out as the signature says;
//  - specialization constants 0, 1, 2 are the block's x, y, z extents
//    (local_size_x_id = 0, ...), and 3, where declared, the launch's dynamic
//    shared memory in bytes.
#ifndef SPARKRT_SDK_SPIRV_REFLECT_H_
#define SPARKRT_SDK_SPIRV_REFLECT_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/plugin_api.h"

namespace sparkrt::sdk::spirv {

// Specialization constant ids of the convention.
inline constexpr uint32_t kBlockDimSpecId[3] = {0, 1, 2};
inline constexpr uint32_t kSharedBytesSpecId = 3;

// One member of a push-constant block.
struct Member {
  std::string name;  // from OpMemberName; may be empty
  uint32_t offset = 0;
  uint32_t size = 0;  // bytes, in scalar layout
};

inline constexpr char kArgumentBufferMember[] = "sparkrt_args";

struct EntryPoint {
  std::string name;
  // The parameters in declaration order (empty when it has none): the
  // push-constant block's members, or the argument buffer's.
  std::vector<Member> push_constants;
  // The parameters are in an argument buffer whose 8-byte address is the
  // whole push-constant block.
  bool argument_buffer = false;
  // The literal LocalSize execution mode; the block shape when the module
  // does not size the workgroup through specialization constants 0-2.
  std::array<uint32_t, 3> local_size{1, 1, 1};
};

struct Module {
  uint32_t version = 0;  // 0x00010500 for SPIR-V 1.5
  std::vector<EntryPoint> entries;
  std::vector<uint32_t> spec_ids;       // every SpecId the module declares, sorted
  bool workgroup_size_is_spec = false;  // a WorkgroupSize built from spec constants

  const EntryPoint* find(std::string_view name) const;
  bool has_spec_id(uint32_t id) const;
  std::string entry_names() const;  // "a, b, c", for messages
};

// Reads a SPIR-V module (little-endian words). InvalidArgument for anything
// that is not well-formed SPIR-V as far as this reader looks.
absl::StatusOr<Module> reflect(std::string_view bytes);

// OK when `entry`'s parameters (push constants or argument buffer) are
// `params` (offset and size of each, in order); otherwise
// FailedPrecondition naming the first difference.
absl::Status check_push_constants(const EntryPoint& entry, std::span<const SparkrtParamInfo> params);

}  // namespace sparkrt::sdk::spirv

#endif  // SPARKRT_SDK_SPIRV_REFLECT_H_
