// Kernel signatures parsed from PTX: the declared parameter list and launch
// directives of every `.entry`, used to check each launch before it reaches a
// backend. The layout rules are ptxas's (docs/kernels.md, "Parameter layout").
#ifndef SPARKRT_SIGNATURE_H_
#define SPARKRT_SIGNATURE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sparkrt/types.h"

namespace sparkrt {

// The PTX type of a parameter, as written after `.param`. `kBytes` is an
// array (`.param .align A .b8 name[N]`: how CUDA passes a struct).
enum class ParamType : uint8_t { kU8, kS8, kU16, kS16, kU32, kS32, kU64, kS64, kB8, kB16, kB32, kB64, kF16, kF32, kF64, kBytes };

// ".u64", ".f32", ".b8[16]" ...: how PTX spells it, for messages.
std::string param_type_name(ParamType type, uint32_t size);

struct Param {
  std::string name;
  ParamType type = ParamType::kU32;
  uint32_t size = 0;    // bytes
  uint32_t align = 0;   // bytes: the larger of the type's size and a leading `.align`
  uint32_t offset = 0;  // in the packed parameter buffer
};

// An entry's performance-tuning directives (between its parameter list and
// its body). Zero means absent; missing dimensions of a given directive are 1.
struct EntryDirectives {
  Dim3 reqntid{0, 0, 0};            // .reqntid: the block must have exactly this shape
  Dim3 maxntid{0, 0, 0};            // .maxntid: at most x * y * z threads per block
  uint32_t minnctapersm = 0;        // .minnctapersm (information)
  uint32_t maxnreg = 0;             // .maxnreg (information)
  Dim3 reqnctapercluster{0, 0, 0};  // .reqnctapercluster (information)
  uint32_t maxclusterrank = 0;      // .maxclusterrank (information)
  bool explicitcluster = false;     // .explicitcluster (information)
};

struct KernelSignature {
  std::string entry;
  std::vector<Param> params;
  uint32_t params_size = 0;  // bytes, end of the last parameter
  EntryDirectives directives;
  // Why the entry parses but cannot be launched through sparkrt (a parameter
  // whose offset depends on the GPU architecture); empty when it can.
  std::string unsupported;
};

// Parses every `.entry` in a PTX module. Input is untrusted: malformed or
// hostile text yields InvalidArgument naming the line, never a crash. A module
// with no entries is valid (returns an empty list).
absl::StatusOr<std::vector<KernelSignature>> parse_ptx_signatures(std::string_view ptx);

// `signatures` as a signature file (`<module>.sig`, docs/kernels.md): their
// PTX `.entry` declarations with empty bodies, one canonical spelling (every
// array `.align A .b8 name[N]`, an `.align` on a scalar only where it is not
// the scalar's width). parse_ptx_signatures() of the text gives the same
// signatures back, so a module needs no PTX for its launches to be checked.
std::string format_signature_file(std::span<const KernelSignature> signatures);

// The first difference between two parses of one module's signatures, for a
// message ("entry fill_u32: parameter #1 is .u32 at offset 8 in a.sig but .u64
// at offset 8 in a.ptx"); empty when they agree in every entry, parameter
// (name, type, size, alignment, offset) and directive.
std::string signature_difference(std::span<const KernelSignature> a, std::string_view a_name,
                                 std::span<const KernelSignature> b, std::string_view b_name);

}  // namespace sparkrt

#endif  // SPARKRT_SIGNATURE_H_
