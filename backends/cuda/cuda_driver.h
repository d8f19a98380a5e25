// Loading libcuda.so.1 and turning CUresult codes into absl::Status.
#ifndef SPARKRT_BACKENDS_CUDA_CUDA_DRIVER_H_
#define SPARKRT_BACKENDS_CUDA_CUDA_DRIVER_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver_api.h"
#include "sparkrt/status_macros.h"  // SPARKRT_RETURN_IF_ERROR, with SPARKRT_CU above

namespace sparkrt::cuda {

// Opens libcuda.so.1, resolves every entry point and calls cuInit(0), once
// per process; later calls return the same result. Unavailable when there is
// no driver or no device, FailedPrecondition when the driver is too old. The
// library is never closed: the driver does not support being unloaded.
absl::StatusOr<const CudaDriver*> load_driver();

// The entry points; filled by load_driver().
extern CudaDriver g_cuda_driver;

// The loaded driver. Only valid after load_driver() succeeded, which every
// device has done before it exists.
inline const CudaDriver& driver() { return g_cuda_driver; }

// "CUDA_ERROR_OUT_OF_MEMORY: out of memory", or the number when the driver
// does not know the code.
std::string describe(CUresult result);

// The absl code a caller acts on: out of memory -> ResourceExhausted, bad
// handles and values -> InvalidArgument, not ready -> Unavailable, ...
absl::StatusCode status_code(CUresult result);

// "<call> failed: CUDA_ERROR_...: <text>", prefixed with `context` when it is
// not empty. Kept out of line: only error paths build messages.
[[gnu::cold, gnu::noinline]] absl::Status driver_error(CUresult result, std::string_view call,
                                                       std::string_view context = {});

inline absl::Status check(CUresult result, std::string_view call, std::string_view context = {}) {
  if (result == CUDA_SUCCESS) [[likely]]
    return absl::OkStatus();
  return driver_error(result, call, context);
}

}  // namespace sparkrt::cuda

// Calls driver().fn(args...) and returns its status: cu(MemAlloc, &p, n).
#define SPARKRT_CU(fn, ...) \
  ::sparkrt::cuda::check(::sparkrt::cuda::driver().fn(__VA_ARGS__), "cu" #fn)

#endif  // SPARKRT_BACKENDS_CUDA_CUDA_DRIVER_H_
