// The sparkrt.collectives.v1 extension table of the CUDA backend, over NCCL
// (nccl_api.h), and the communicators it issues.
#ifndef SPARKRT_BACKENDS_CUDA_CUDA_COLLECTIVES_H_
#define SPARKRT_BACKENDS_CUDA_CUDA_COLLECTIVES_H_

#include "sparkrt/extensions/collectives.h"

namespace sparkrt::cuda {

class CudaDevice;

// The table, built once and returned whether or not NCCL can be loaded (its
// calls then fail with FailedPrecondition). Its error functions are the SDK's,
// as the plugin table's are, so errors from either are released the same way.
const SparkrtCollectivesExtension* collectives_extension();

// Aborts every communicator still open on `device` and retires its handle.
// Called while the device closes, before its memory and streams go, so no
// communicator outlives the context it runs in. Never fails.
void release_communicators(const CudaDevice* device) noexcept;

}  // namespace sparkrt::cuda

#endif  // SPARKRT_BACKENDS_CUDA_CUDA_COLLECTIVES_H_
