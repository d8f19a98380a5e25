// mla_batched_gemv (kernels/ptx/mla.cu; contract in docs/kernels.md, "Module
// mla"): output[h * output_stride + n] = sum_i weight[h][n][i] *
// input[h * input_stride + i], bf16 in, f32 sums, one rounding to bf16.
// Grid (ceil(n_out / 8), num_heads), block 256.
//
// The weights are read once and are nearly all the bytes: a workgroup's 8
// outputs take 32 threads each, which read their row in 16-byte units
// (8 bf16, up to 4 units a thread in flight at once) with the matching
// units of the head's input (from cache: 8 rows share them). The 32
// partial sums of a row meet in shared memory, with no subgroup operation.
// Rows or inputs that are not 16-byte aligned (k, input_stride or a base
// not a multiple of 8 elements) take 2-byte loads.
#version 460
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "sparkrt.glsl"
#include "sparkrt_numeric.glsl"
#include "mla_small.glsl"

layout(push_constant, scalar) uniform Params {
  U16Ptr input_;
  U16Ptr weight;
  U16Ptr output_;
  uint n_out;
  uint k;
  uint input_stride;
  uint output_stride;
} p;

const uint kThreads = mla_kThreads;
const uint kRows = mla_kGemvOutputsPerCta;  // outputs of a workgroup
const uint kLanes = kThreads / kRows;       // threads of an output
const uint kUnroll = 4;                     // 16-byte units of a thread in flight

shared vec4 partial_s[kThreads / 4];

float dot8(uvec4 w, uvec4 x) {
  float s = 0.0;
  [[unroll]] for (uint j = 0u; j < 4u; ++j)
    s += bf16_lo(w[j]) * bf16_lo(x[j]) + bf16_hi(w[j]) * bf16_hi(x[j]);
  return s;
}

void main() {
  // Outside the contract (another block, strides below the row lengths):
  // nothing is written. Uniform over the workgroup, before any barrier.
  if (mla_block_threads() != kThreads || p.k > p.input_stride || p.n_out > p.output_stride)
    return;
  const uint tid = gl_LocalInvocationIndex;
  const uint r = tid / kLanes, lane = tid % kLanes;
  const uint head = blockIdx.y;
  const uint n = blockIdx.x * kRows + r;
  const bool on = n < p.n_out;
  const uint64_t x = uint64_t(p.input_) + 2ul * (uint64_t(head) * p.input_stride);
  const uint64_t w = uint64_t(p.weight) + 2ul * ((uint64_t(head) * p.n_out + (on ? n : 0u)) * p.k);

  float acc = 0.0;
  if (on) {
    if (p.k % 8u == 0u && p.input_stride % 8u == 0u &&
        ((uint64_t(p.input_) | uint64_t(p.weight)) & 15ul) == 0ul) {
      const uint units = p.k / 8u;
      U32x4Ptr wv = U32x4Ptr(w), xv = U32x4Ptr(x);
      for (uint u0 = lane; u0 < units; u0 += kUnroll * kLanes) {
        uvec4 wu[kUnroll], xu[kUnroll];
        // Every load of the batch is issued before the first is used.
        [[unroll]] for (uint j = 0u; j < kUnroll; ++j) {
          const uint u = u0 + j * kLanes;
          wu[j] = uvec4(0u);
          xu[j] = uvec4(0u);
          if (u < units) {
            wu[j] = wv.v[u];
            xu[j] = xv.v[u];
          }
        }
        [[unroll]] for (uint j = 0u; j < kUnroll; ++j) acc += dot8(wu[j], xu[j]);
      }
    } else {
      // A 64-bit index: no wrap-around for any k.
      for (uint64_t i = lane; i < p.k; i += kLanes) {
        const uint wi = uint(U16Ptr(w + 2ul * i).v[0]), xi = uint(U16Ptr(x + 2ul * i).v[0]);
        acc += bf16_to_f32(wi) * bf16_to_f32(xi);
      }
    }
  }
  partial_s[tid / 4u][tid % 4u] = acc;
  mla_barrier();
  if (on && lane == 0u) {
    vec4 s = vec4(0.0);
    [[unroll]] for (uint j = 0u; j < kLanes / 4u; ++j) s += partial_s[r * (kLanes / 4u) + j];
    const float dot = (s.x + s.y) + (s.z + s.w);
    U16Ptr(uint64_t(p.output_) + 2ul * (uint64_t(head) * p.output_stride + n)).v[0] =
        uint16_t(f32_to_bf16(dot));
  }
}
