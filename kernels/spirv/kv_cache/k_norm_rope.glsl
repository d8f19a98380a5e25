// The fused K path of kernel module kv_cache (kernels/ptx/kv_cache.cu,
// norm_rope): RMSNorm then rotate-half RoPE of one head row in f32, per
// docs/kernels.md ("Conventions for the KV-cache and attention kernels").
// Block: one invocation per element, blockDim.x == head_dim; every
// invocation of the workgroup must call it (it has barriers).
#ifndef SPARKRT_K_NORM_ROPE_GLSL_
#define SPARKRT_K_NORM_ROPE_GLSL_

#include "sparkrt_math.glsl"
#include "sparkrt_numeric.glsl"

shared float k_norm_rope_partial[gl_WorkGroupSize.x];
shared float k_norm_rope_y[gl_WorkGroupSize.x];

// Element threadIdx.x of the normed, rotated row `k_row`. Rotary pair i
// takes its position from pos[i % 3]: MRoPE passes (t, h, w), the scalar
// variant its one position three times, so the two agree bit for bit.
float k_norm_rope(U16Ptr k_row, U16Ptr weight, uint head_dim, uint rotary_dim, float rms_eps,
                  float theta, ivec3 pos) {
  const uint d = threadIdx.x;
  const float x = bf16_to_f32(uint(k_row.v[d]));

  // Sum of squares: a tree over the workgroup, the same order in every
  // invocation. Unfused squares: the sum does not depend on the compiler.
  precise const float square = x * x;
  k_norm_rope_partial[d] = square;
  barrier();
  uint stride = 1u;
  while (stride < blockDim.x) stride <<= 1;
  for (stride >>= 1; stride > 0u; stride >>= 1) {
    if (d < stride && d + stride < blockDim.x)
      k_norm_rope_partial[d] += k_norm_rope_partial[d + stride];
    barrier();
  }
  // The built-in sqrt (a few ulp in Vulkan) is far inside the contract's
  // tolerance, as is the tree's order against the reference's sequential sum.
  const float denom = sqrt(ieee_div(k_norm_rope_partial[0], float(head_dim)) + rms_eps);
  const float yd = ieee_div(x * bf16_to_f32(uint(weight.v[d])), denom);
  k_norm_rope_y[d] = yd;
  barrier();
  if (d >= rotary_dim) return yd;

  const uint half_dim = rotary_dim / 2u;
  const uint i = d < half_dim ? d : d - half_dim;
  const float inv_freq = accurate_pow(theta, ieee_div(-float(2u * i), float(rotary_dim)));
  precise const float angle = float(pos[i % 3u]) * inv_freq;
  const vec2 sc = accurate_sincos(angle);
  // Two rounded products and a rounded sum, as the reference computes them.
  precise const float r = d < half_dim ? yd * sc.y - k_norm_rope_y[d + half_dim] * sc.x
                                       : yd * sc.y + k_norm_rope_y[d - half_dim] * sc.x;
  return r;
}

#endif  // SPARKRT_K_NORM_ROPE_GLSL_
