// Names of the ABI's enumerations (plugin_api.h) as logs, traces and
// messages print them: one spelling for the mock's JSON log, its printed
// records and any plugin's messages.
//
//   abi_arg_kind_name(SPARKRT_ARG_U32)   "u32"
//   abi_copy_kind_name(SPARKRT_COPY_H2D) "h2d"
//
// A value outside the enumeration (a peer's newer kind, a corrupt record) is
// "unknown", never undefined behaviour.
#ifndef SPARKRT_ABI_NAMES_H_
#define SPARKRT_ABI_NAMES_H_

#include <cstdint>

#include "sparkrt/plugin_api.h"

namespace sparkrt {

inline const char* abi_arg_kind_name(uint8_t kind) {
  switch (kind) {
    case SPARKRT_ARG_PTR: return "ptr";
    case SPARKRT_ARG_U32: return "u32";
    case SPARKRT_ARG_I32: return "i32";
    case SPARKRT_ARG_U64: return "u64";
    case SPARKRT_ARG_I64: return "i64";
    case SPARKRT_ARG_F32: return "f32";
    case SPARKRT_ARG_F64: return "f64";
    case SPARKRT_ARG_BYTES: return "bytes";
    default: return "unknown";
  }
}

inline const char* abi_copy_kind_name(SparkrtCopyKind kind) {
  switch (kind) {
    case SPARKRT_COPY_H2D: return "h2d";
    case SPARKRT_COPY_D2H: return "d2h";
    case SPARKRT_COPY_D2D: return "d2d";
  }
  return "unknown";
}

}  // namespace sparkrt

#endif  // SPARKRT_ABI_NAMES_H_
