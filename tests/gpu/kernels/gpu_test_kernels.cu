// Kernels that exist only to test the CUDA backend: dynamic shared memory
// beyond the default limit (with and without static shared memory beside it),
// and a deliberate fault.
#include <cstdint>

// Fills n_words of dynamic shared memory, then writes them out reversed, so
// every word must have gone through shared memory: out[i] = 3 * (n - 1 - i) + seed.
extern "C" __global__ void shared_reverse_u32(uint32_t* __restrict__ out, uint32_t n_words,
                                              uint32_t seed) {
  extern __shared__ uint32_t smem[];
  for (uint32_t i = threadIdx.x; i < n_words; i += blockDim.x) smem[i] = 3u * i + seed;
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < n_words; i += blockDim.x) out[i] = smem[n_words - 1 - i];
}

// shared_reverse_u32 with 4 KiB of static shared memory beside the dynamic
// part: out[i] = 3 * (n - 1 - i) + seed + 1.
extern "C" __global__ void shared_reverse_u32_static(uint32_t* __restrict__ out, uint32_t n_words,
                                                     uint32_t seed) {
  extern __shared__ uint32_t smem[];
  __shared__ uint32_t one[1024];
  for (uint32_t i = threadIdx.x; i < 1024; i += blockDim.x) one[i] = 1u;
  for (uint32_t i = threadIdx.x; i < n_words; i += blockDim.x) smem[i] = 3u * i + seed;
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < n_words; i += blockDim.x)
    out[i] = smem[n_words - 1 - i] + one[i % 1024];
}

// Stores through `p`: given an unmapped address it faults asynchronously.
extern "C" __global__ void store_through(uint32_t* p, uint32_t value) {
  if (threadIdx.x == 0) *p = value;
}
