// mla_cache_assemble (kernels/ptx/mla.cu; contract in docs/kernels.md,
// "Module mla"): one token's cache rows, k_cache[0, mla_cache_dim) =
// [kv_latent | k_rope | 0...] and v_cache[0, mla_cache_dim) =
// [kv_latent | 0...], exact. Grid 1, block max(mla_cache_dim, 256): a value
// per invocation, all loads at once (any geometry works: the row spreads
// over every invocation).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"
#define MLA_COPY_KERNEL
#include "mla_small.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr kv_latent;
  U16Ptr k_rope;
  U16Ptr k_cache;
  U16Ptr v_cache;
  uint kv_lora;
  uint rope;
  uint mla_cache_dim;
} p;

void main() {
  // Outside the contract (the rope part past the row): nothing is written.
  if (uint64_t(p.kv_lora) + p.rope > p.mla_cache_dim) return;
  const uint64_t step = mla_global_threads();
  for (uint64_t i = mla_global_index(); i < p.mla_cache_dim; i += step) {
    const uint d = uint(i);
    uint k = 0u, v = 0u;  // bf16 +0
    if (d < p.kv_lora) {
      k = v = uint(p.kv_latent.v[d]);
    } else if (d - p.kv_lora < p.rope) {
      k = uint(p.k_rope.v[d - p.kv_lora]);
    }
    p.k_cache.v[d] = uint16_t(k);
    p.v_cache.v[d] = uint16_t(v);
  }
}
