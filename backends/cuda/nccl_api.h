// The part of NCCL's C API this backend calls, and loading libnccl.so.2 at
// run time.
//
// NCCL is not a build dependency: it is opened with dlopen on first use
// (SPARKRT_NCCL_LIBRARY, else "libnccl.so.2" through the loader's search
// path), so the plugin builds and loads where NCCL is absent and only the
// collectives fail. The declarations below are written from NCCL's documented
// API (stable since NCCL 2.x): the opaque communicator, the 128-byte unique
// id, and the result, data type and reduction codes with NCCL's values. Only
// what is called is declared; the library found must be NCCL 2 at least at
// kMinimumVersion, the release these declarations were checked against.
#ifndef SPARKRT_BACKENDS_CUDA_NCCL_API_H_
#define SPARKRT_BACKENDS_CUDA_NCCL_API_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sparkrt::cuda::nccl {

// NCCL's ncclComm_t: an opaque pointer.
struct CommObject;
using Comm = CommObject*;

// NCCL's ncclUniqueId: 128 bytes, passed by value.
inline constexpr size_t kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};
static_assert(sizeof(UniqueId) == kUniqueIdBytes);

// NCCL's ncclResult_t (a C enum: int-sized).
enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,  // since 2.13
  kInProgress = 7,   // since 2.14, nonblocking communicators only
};

// NCCL's ncclDataType_t, the values this backend maps to.
enum DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};

// NCCL's ncclRedOp_t, the built-in operations.
enum RedOp : int {
  kSum = 0,
  kProd = 1,
  kMax = 2,
  kMin = 3,
};

// NCCL_VERSION_CODE of a release: major * 10000 + minor * 100 + patch since
// 2.9 (major * 1000 + minor * 100 + patch before).
constexpr int version_code(int major, int minor, int patch) {
  return major * 10000 + minor * 100 + patch;
}
inline constexpr int kMinimumVersion = version_code(2, 18, 0);

// Every entry point, listed once: X(field, return type, parameters). The
// exported symbol is "nccl" followed by the field name. cudaStream_t is the
// driver's CUstream (the same handle).
#define SPARKRT_NCCL_REQUIRED_FUNCTIONS(X)                                              \
  X(GetVersion, Result, (int* version))                                                 \
  X(GetErrorString, const char*, (Result result))                                       \
  X(GetUniqueId, Result, (UniqueId * id))                                               \
  X(CommInitRank, Result, (Comm * comm, int num_ranks, UniqueId id, int rank))          \
  X(CommInitAll, Result, (Comm * comms, int num_devices, const int* devices))           \
  X(CommDestroy, Result, (Comm comm))                                                   \
  X(CommAbort, Result, (Comm comm))                                                     \
  X(CommGetAsyncError, Result, (Comm comm, Result * async_error))                       \
  X(AllReduce, Result,                                                                  \
    (const void* send, void* recv, size_t count, DataType type, RedOp op, Comm comm,    \
     CUstream stream))                                                                  \
  X(AllGather, Result,                                                                  \
    (const void* send, void* recv, size_t send_count, DataType type, Comm comm,         \
     CUstream stream))                                                                  \
  X(ReduceScatter, Result,                                                              \
    (const void* send, void* recv, size_t recv_count, DataType type, RedOp op,          \
     Comm comm, CUstream stream))                                                       \
  X(Broadcast, Result,                                                                  \
    (const void* send, void* recv, size_t count, DataType type, int root, Comm comm,    \
     CUstream stream))                                                                  \
  X(Send, Result,                                                                       \
    (const void* send, size_t count, DataType type, int peer, Comm comm, CUstream stream)) \
  X(Recv, Result,                                                                       \
    (void* recv, size_t count, DataType type, int peer, Comm comm, CUstream stream))    \
  X(GroupStart, Result, ())                                                             \
  X(GroupEnd, Result, ())                                                               \
  X(GetLastError, const char*, (Comm comm))

struct Library {
#define SPARKRT_NCCL_DECLARE_FIELD(field, ret, params) ret(*field) params = nullptr;
  SPARKRT_NCCL_REQUIRED_FUNCTIONS(SPARKRT_NCCL_DECLARE_FIELD)
#undef SPARKRT_NCCL_DECLARE_FIELD
  int version = 0;   // NCCL_VERSION_CODE of the loaded library
  std::string path;  // the file loaded, as the loader resolved it
};

// Opens NCCL once per process (thread-safe) and returns the same result to
// every later call: the loaded library, or FailedPrecondition saying what was
// tried and how to fix it. The library is never closed.
absl::StatusOr<const Library*> load();

// "2.21.5" for 22105.
std::string version_string(int code);

// The status of a failed NCCL call: "<context>: <call> failed: <NCCL's text>
// (ncclResult_t N); NCCL: <its last error>", with a code the caller can act
// on (invalid argument, failed precondition for invalid usage, unavailable
// for a failed peer, internal otherwise).
[[gnu::cold, gnu::noinline]] absl::Status error(const Library& nccl, Result result,
                                                std::string_view call,
                                                std::string_view context);

inline absl::Status check(const Library& nccl, Result result, std::string_view call,
                          std::string_view context) {
  if (result == kSuccess) [[likely]]
    return absl::OkStatus();
  return error(nccl, result, call, context);
}

}  // namespace sparkrt::cuda::nccl

#endif  // SPARKRT_BACKENDS_CUDA_NCCL_API_H_
