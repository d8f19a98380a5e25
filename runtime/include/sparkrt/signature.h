// Kernel signatures parsed from PTX: the declared parameter list of every
// `.entry`, used to check each launch before it reaches a backend.
#ifndef SPARKRT_SIGNATURE_H_
#define SPARKRT_SIGNATURE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace sparkrt {

// The PTX type of a parameter, as written after `.param`. `kBytes` is an
// aggregate (`.param .align A .b8 name[N]`).
enum class ParamType : uint8_t { kU8, kS8, kU16, kS16, kU32, kS32, kU64, kS64, kB8, kB16, kB32, kB64, kF16, kF32, kF64, kBytes };

// ".u64", ".f32", ".b8[16]" ...: how PTX spells it, for messages.
std::string param_type_name(ParamType type, uint32_t size);

struct Param {
  std::string name;
  ParamType type = ParamType::kU32;
  uint32_t size = 0;    // bytes
  uint32_t align = 0;   // bytes
  uint32_t offset = 0;  // in the packed parameter buffer
};

struct KernelSignature {
  std::string entry;
  std::vector<Param> params;
  uint32_t params_size = 0;  // bytes, end of the last parameter
};

// Parses every `.entry` in a PTX module. Input is untrusted: malformed or
// hostile text yields InvalidArgument naming the line, never a crash. A module
// with no entries is valid (returns an empty list).
absl::StatusOr<std::vector<KernelSignature>> parse_ptx_signatures(std::string_view ptx);

}  // namespace sparkrt

#endif  // SPARKRT_SIGNATURE_H_
