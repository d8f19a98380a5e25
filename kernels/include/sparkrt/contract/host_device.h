// Function markers of the contract headers, whose functions compile for the
// host and, under nvcc, for the device too.
#ifndef SPARKRT_CONTRACT_HOST_DEVICE_H_
#define SPARKRT_CONTRACT_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define SPARKRT_HOST_DEVICE __host__ __device__
#else
#define SPARKRT_HOST_DEVICE
#endif
// Full unrolling on the device, where loops over a contract's small tables
// must fold into constants (the host compiler decides for itself).
#if defined(__CUDA_ARCH__)
#define SPARKRT_UNROLL _Pragma("unroll")
#else
#define SPARKRT_UNROLL
#endif

#endif  // SPARKRT_CONTRACT_HOST_DEVICE_H_
