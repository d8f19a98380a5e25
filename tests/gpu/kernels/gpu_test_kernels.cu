// Kernels that exist only to test the CUDA backend: dynamic shared memory
// beyond the default limit, and a deliberate fault.
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

// Stores through `p`: given an unmapped address it faults asynchronously.
extern "C" __global__ void store_through(uint32_t* p, uint32_t value) {
  if (threadIdx.x == 0) *p = value;
}
