// The CUDA driver entry points this backend uses, listed once.
//
// The plugin is compiled against cuda.h only and opens libcuda.so.1 at run
// time, so it loads on machines without a driver. Each entry is
//
//   X(field, symbol)
//
// `field` names the member of CudaDriver (called as driver().field(...)) and,
// prefixed with "cu", the call in error messages; `symbol` is the exact
// exported symbol, which is also the cuda.h declaration the pointer type is
// taken from. The header maps several API names to versioned symbols
// (cuMemAlloc -> cuMemAlloc_v2); the table spells the versioned one so dlsym
// returns the ABI the header describes.
#ifndef SPARKRT_BACKENDS_CUDA_DRIVER_API_H_
#define SPARKRT_BACKENDS_CUDA_DRIVER_API_H_

#include <cuda.h>

// Resolved first, so that later failures can be described.
#define SPARKRT_CUDA_ERROR_FUNCTIONS(X) \
  X(GetErrorName, cuGetErrorName)       \
  X(GetErrorString, cuGetErrorString)

// A driver without one of these is refused as too old (CUDA 11.4+ has all).
#define SPARKRT_CUDA_REQUIRED_FUNCTIONS(X)                     \
  X(Init, cuInit)                                              \
  X(DriverGetVersion, cuDriverGetVersion)                      \
  X(DeviceGetCount, cuDeviceGetCount)                          \
  X(DeviceGet, cuDeviceGet)                                    \
  X(DeviceGetName, cuDeviceGetName)                            \
  X(DeviceGetAttribute, cuDeviceGetAttribute)                  \
  X(DeviceTotalMem, cuDeviceTotalMem_v2)                       \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)          \
  X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2)     \
  X(CtxGetCurrent, cuCtxGetCurrent)                            \
  X(CtxSetCurrent, cuCtxSetCurrent)                            \
  X(CtxSynchronize, cuCtxSynchronize)                          \
  X(ModuleLoadDataEx, cuModuleLoadDataEx)                      \
  X(ModuleUnload, cuModuleUnload)                              \
  X(ModuleGetFunction, cuModuleGetFunction)                    \
  X(FuncGetAttribute, cuFuncGetAttribute)                      \
  X(FuncSetAttribute, cuFuncSetAttribute)                      \
  X(LaunchKernel, cuLaunchKernel)                              \
  X(MemAlloc, cuMemAlloc_v2)                                   \
  X(MemFree, cuMemFree_v2)                                     \
  X(MemHostAlloc, cuMemHostAlloc)                              \
  X(MemFreeHost, cuMemFreeHost)                                \
  X(MemsetD8Async, cuMemsetD8Async)                            \
  X(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2)                     \
  X(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2)                     \
  X(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2)                     \
  X(PointerGetAttribute, cuPointerGetAttribute)                \
  X(StreamCreate, cuStreamCreate)                              \
  X(StreamDestroy, cuStreamDestroy_v2)                         \
  X(StreamSynchronize, cuStreamSynchronize)                    \
  X(StreamWaitEvent, cuStreamWaitEvent)                        \
  X(StreamIsCapturing, cuStreamIsCapturing)                    \
  X(StreamBeginCapture, cuStreamBeginCapture_v2)               \
  X(StreamEndCapture, cuStreamEndCapture)                      \
  X(EventCreate, cuEventCreate)                                \
  X(EventDestroy, cuEventDestroy_v2)                           \
  X(EventRecord, cuEventRecord)                                \
  X(EventSynchronize, cuEventSynchronize)                      \
  /* the unversioned symbol: every driver has it, same signature */ \
  X(EventElapsedTime, cuEventElapsedTime)                      \
  X(GraphInstantiate, cuGraphInstantiateWithFlags)             \
  X(GraphGetNodes, cuGraphGetNodes)                            \
  X(GraphLaunch, cuGraphLaunch)                                \
  X(GraphExecDestroy, cuGraphExecDestroy)                      \
  X(GraphDestroy, cuGraphDestroy)

// Used when present; null otherwise.
#define SPARKRT_CUDA_OPTIONAL_FUNCTIONS(X)                     \
  /* CUDA 12.4+: the signature cross-check at kernel lookup */ \
  X(FuncGetParamInfo, cuFuncGetParamInfo)                      \
  /* CUDA 11.2+: the stream-ordered allocator */               \
  X(MemPoolCreate, cuMemPoolCreate)                            \
  X(MemPoolDestroy, cuMemPoolDestroy)                          \
  X(MemPoolSetAttribute, cuMemPoolSetAttribute)                \
  X(MemAllocFromPoolAsync, cuMemAllocFromPoolAsync)            \
  X(MemFreeAsync, cuMemFreeAsync)                              \
  /* CUDA 12.0+: launch attributes (dependent launch, clusters) */ \
  X(LaunchKernelEx, cuLaunchKernelEx)

#define SPARKRT_CUDA_ALL_FUNCTIONS(X) \
  SPARKRT_CUDA_ERROR_FUNCTIONS(X)     \
  SPARKRT_CUDA_REQUIRED_FUNCTIONS(X)  \
  SPARKRT_CUDA_OPTIONAL_FUNCTIONS(X)

namespace sparkrt::cuda {

// One pointer per entry point, typed from its cuda.h declaration.
struct CudaDriver {
#define SPARKRT_CUDA_DECLARE_FIELD(field, symbol) decltype(&::symbol) field = nullptr;
  SPARKRT_CUDA_ALL_FUNCTIONS(SPARKRT_CUDA_DECLARE_FIELD)
#undef SPARKRT_CUDA_DECLARE_FIELD
};

}  // namespace sparkrt::cuda

#endif  // SPARKRT_BACKENDS_CUDA_DRIVER_API_H_
