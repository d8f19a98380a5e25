// What the small kernels of module mla share on SPIR-V (mla_batched_gemv,
// the q rope copies, mla_cache_assemble, mla_decode_combine; contracts in
// docs/kernels.md, "Module mla"): the module's memory model, a workgroup
// barrier in it, 8- and 16-byte views of device memory and bf16 pairs as
// f32.
//
// spirv-link refuses entries of different memory models, so every entry of
// the module uses the Vulkan memory model (as paged_attention's do). glslang
// chooses it for a barrier that names availability and visibility
// (mla_barrier); the copies, which have no barrier, ask for it with the
// pragma (which would also mark every shared access non-private: they have
// none).
#ifndef SPARKRT_MLA_SMALL_GLSL_
#define SPARKRT_MLA_SMALL_GLSL_

#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : require

#include "sparkrt/contract/mla.glsl"

#ifdef MLA_COPY_KERNEL
#pragma use_vulkan_memory_model
#endif

// barrier(), with the availability and visibility of the workgroup's shared
// memory written out, as the Vulkan memory model states them.
void mla_barrier() {
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsShared,
                 gl_SemanticsAcquireRelease | gl_SemanticsMakeAvailable | gl_SemanticsMakeVisible);
}

// Eight bf16 (or four f32) in one 16-byte access; four bf16 in 8 bytes.
layout(buffer_reference, scalar, buffer_reference_align = 16) buffer U32x4Ptr { uvec4 v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 16) buffer F32x4Ptr { vec4 v[]; };
layout(buffer_reference, scalar, buffer_reference_align = 8) buffer U32x2Ptr { uvec2 v[]; };

// The two bf16 of a 32-bit word (the lower address in the low half), exact.
float bf16_lo(uint w) { return uintBitsToFloat(w << 16); }
float bf16_hi(uint w) { return uintBitsToFloat(w & 0xffff0000u); }

// The number of invocations of the workgroup (the launch's block).
uint mla_block_threads() { return gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z; }

// The invocation's index among all of the launch's, and their number: the
// copies take any grid (their ops launch one workgroup).
uint64_t mla_global_index() {
  const uvec3 g = gl_NumWorkGroups, b = gl_WorkGroupID;
  return (uint64_t(b.z) * g.y * g.x + uint64_t(b.y) * g.x + b.x) * mla_block_threads() +
         gl_LocalInvocationIndex;
}
uint64_t mla_global_threads() {
  const uvec3 g = gl_NumWorkGroups;
  return uint64_t(g.x) * g.y * g.z * mla_block_threads();
}

#ifdef MLA_COPY_KERNEL
// The rope copies: for h < rows, i < n, v = src[h * src_stride + src_off + i]
// goes to dst[h * dst_stride + dst_off + i] and, where dst2 is not 0, to
// dst2[h * n + i] (bf16, exact). Units of 8 values move in 16-byte accesses
// where every row and base allows, spread over all the invocations, each
// issuing its loads (up to kCopyUnroll) before its stores.
const uint kCopyUnroll = 4;

void mla_copy_rows(uint64_t src, uint src_stride, uint src_off, uint64_t dst, uint dst_stride,
                   uint dst_off, uint64_t dst2, uint rows, uint n) {
  const uint64_t first = mla_global_index(), step = mla_global_threads();
  const bool wide = (src_stride | src_off | dst_stride | dst_off | n) % 8u == 0u &&
                    ((src | dst | dst2) & 15ul) == 0ul;
  const uint per_row = wide ? n / 8u : n;  // units of a row
  const uint64_t total = uint64_t(rows) * per_row;
  for (uint64_t e0 = first; e0 < total; e0 += kCopyUnroll * step) {
    uvec4 v[kCopyUnroll];
    [[unroll]] for (uint j = 0u; j < kCopyUnroll; ++j) {
      const uint64_t e = e0 + j * step;
      v[j] = uvec4(0u);
      if (e < total) {
        const uint h = uint(e / per_row), u = uint(e % per_row);
        const uint64_t at = uint64_t(h) * src_stride + src_off;
        if (wide)
          v[j] = U32x4Ptr(src + 2ul * at).v[u];
        else
          v[j].x = uint(U16Ptr(src + 2ul * at).v[u]);
      }
    }
    [[unroll]] for (uint j = 0u; j < kCopyUnroll; ++j) {
      const uint64_t e = e0 + j * step;
      if (e < total) {
        const uint h = uint(e / per_row), u = uint(e % per_row);
        const uint64_t at = uint64_t(h) * dst_stride + dst_off;
        if (wide) {
          U32x4Ptr(dst + 2ul * at).v[u] = v[j];
          if (dst2 != 0ul) U32x4Ptr(dst2 + 16ul * e).v[0] = v[j];
        } else {
          U16Ptr(dst + 2ul * at).v[u] = uint16_t(v[j].x);
          if (dst2 != 0ul) U16Ptr(dst2 + 2ul * e).v[0] = uint16_t(v[j].x);
        }
      }
    }
  }
}
#endif

#endif  // SPARKRT_MLA_SMALL_GLSL_
