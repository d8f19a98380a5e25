// mla_q_rope_writeback (kernels/ptx/mla.cu; contract in docs/kernels.md,
// "Module mla"): for h < nq, i < rope, q_absorbed_buf[h * mla_cache_dim +
// kv_lora + i] = q_rope_direct[h * rope + i], exact; nothing else is
// written. Grid 1, block 256 (any grid works: the copy spreads over every
// invocation).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"
#define MLA_COPY_KERNEL
#include "mla_small.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr q_rope_direct;
  U16Ptr q_absorbed_buf;
  uint nq;
  uint rope;
  uint kv_lora;
  uint mla_cache_dim;
} p;

void main() {
  // Outside the contract (a rope part past its row): nothing is written.
  if (uint64_t(p.kv_lora) + p.rope > p.mla_cache_dim) return;
  mla_copy_rows(uint64_t(p.q_rope_direct), p.rope, 0u, uint64_t(p.q_absorbed_buf), p.mla_cache_dim,
                p.kv_lora, 0ul, p.nq, p.rope);
}
