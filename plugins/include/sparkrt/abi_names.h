// Names of the ABI's enumerations (plugin_api.h) as logs, traces and
// messages print them: one spelling for the mock's JSON log, its printed
// records and any plugin's messages.
//
//   abi_arg_kind_name(SPARKRT_ARG_U32)   "u32"
//   abi_copy_kind_name(SPARKRT_COPY_H2D) "h2d"
//   abi_data_type_name(SPARKRT_DTYPE_BF16) "bf16"
//
// A value outside the enumeration (a peer's newer kind, a corrupt record) is
// "unknown", never undefined behaviour.
#ifndef SPARKRT_ABI_NAMES_H_
#define SPARKRT_ABI_NAMES_H_

#include <cstdint>

#include "sparkrt/extensions/collectives.h"
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

// sparkrt.collectives.v1's enumerations (sparkrt/extensions/collectives.h),
// taken as int32_t: a caller's value may lie outside them.
inline const char* abi_collective_kind_name(int32_t kind) {
  switch (kind) {
    case SPARKRT_COLLECTIVE_ALL_REDUCE: return "all_reduce";
    case SPARKRT_COLLECTIVE_ALL_GATHER: return "all_gather";
    case SPARKRT_COLLECTIVE_REDUCE_SCATTER: return "reduce_scatter";
    case SPARKRT_COLLECTIVE_BROADCAST: return "broadcast";
    case SPARKRT_COLLECTIVE_SEND: return "send";
    case SPARKRT_COLLECTIVE_RECV: return "recv";
    default: return "unknown";
  }
}

inline const char* abi_data_type_name(int32_t dtype) {
  switch (dtype) {
    case SPARKRT_DTYPE_U8: return "u8";
    case SPARKRT_DTYPE_I32: return "i32";
    case SPARKRT_DTYPE_F16: return "f16";
    case SPARKRT_DTYPE_BF16: return "bf16";
    case SPARKRT_DTYPE_F32: return "f32";
    default: return "unknown";
  }
}

inline const char* abi_reduce_op_name(int32_t op) {
  switch (op) {
    case SPARKRT_REDUCE_SUM: return "sum";
    case SPARKRT_REDUCE_MAX: return "max";
    case SPARKRT_REDUCE_MIN: return "min";
    default: return "unknown";
  }
}

}  // namespace sparkrt

#endif  // SPARKRT_ABI_NAMES_H_
