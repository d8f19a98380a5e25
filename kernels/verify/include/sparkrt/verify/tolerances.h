// The error bounds of docs/kernels.md ("Tolerances" and "The reference
// against float64" of each module), written once for every check that
// applies them: the GPU tests and `sparkrt demo` on a GPU (a GPU against the
// cpu reference), the cpu tests and `sparkrt demo` on cpu (the reference
// against float64, verify/float64.h). A change of a bound is a change of the
// contract: edit the table in docs/kernels.md with it.
//
// Most bounds read `rel * abs(ref) + abs * scale`, where the scale is what
// the table names (the head's largest value, max abs(V), ...):
//
//   const Bound& b = verify::gpu_vs_reference::kPagedDecodeAttn;
//   ok = std::fabs(gpu - ref) <= b(ref, max_abs_v);
#ifndef SPARKRT_VERIFY_TOLERANCES_H_
#define SPARKRT_VERIFY_TOLERANCES_H_

#include <cmath>

namespace sparkrt::verify {

struct Bound {
  double rel;           // times abs(ref)
  double abs;           // times `scale`
  const char* formula;  // as printed beside a comparison

  double operator()(double ref, double scale) const { return rel * std::fabs(ref) + abs * scale; }
};

// A GPU against the cpu reference: both compute in f32, so they differ only
// in the order of f32 operations and in the libm functions.
namespace gpu_vs_reference {
// fused_k_norm_rope_cache_write_bf16 and _bf16_mrope; scale: max abs(ref) over the head.
inline constexpr Bound kKNormRopeBf16{0x1p-7, 0x1p-9, "2^-7 |ref| + 2^-9 max |head|"};
// fused_k_norm_rope_cache_write_fp8, decoded (one E4M3 step); scale as above.
inline constexpr Bound kKNormRopeFp8{0x1p-3, 0x1p-9, "2^-3 |ref| + 2^-9 max |head|"};
// paged_decode_attn_{bf16,fp8} and mla_paged_decode_{fp8,nvfp4}; scale: max abs(V).
inline constexpr Bound kPagedDecodeAttn{0x1p-7, 0x1p-10, "2^-7 |ref| + 2^-10 max |V|"};
// The TurboQuant decode (paged_decode_attn_bf16k_turbo{2,3,4}v) followed by
// hadamard_transform_bf16 on its output (sparkrt demo): the rotation spreads
// each dim's error over the head, so the scale is the head's L2 norm of ref
// plus max abs(V) (sqrt(256) * 2^-10 max |V| from the decode's bound).
inline constexpr Bound kRotatedDecodeAttn{0x1p-7, 0x1p-6,
                                          "2^-7 |ref| + 2^-6 (||head||_2 + max |V|)"};
// Split partials at the reference's max: the sums l relative to l_ref, and
// part_acc with scale l_ref * max abs(V).
inline constexpr double kSplitSumRel = 2e-3;
inline constexpr Bound kSplitAcc{0x1p-10, 0x1p-9, "2^-10 |ref| + 2^-9 l_ref max |V|"};
// mla_batched_gemv; scale: sum_i abs(weight_i * input_i).
inline constexpr Bound kMlaBatchedGemv{0x1p-7, 0x1p-14, "2^-7 |ref| + 2^-14 sum |w x|"};
// k3_mla_maybe_rope_f32's rope part; scale: abs(a) + abs(b) of the pair it came from.
inline constexpr Bound kK3Rope{0, 0x1p-21, "2^-21 (|a| + |b|)"};
// k3_mla_sdpa_gate_f32; scale: max abs(v).
inline constexpr Bound kK3SdpaGate{0x1p-16, 0x1p-14, "2^-16 |ref| + 2^-14 max |v|"};
}  // namespace gpu_vs_reference

// The reference (any implementation of the contract) against float64 from
// the contract, on random non-zero inputs.
namespace reference_vs_float64 {
// reshape_and_cache_fp8: the nearest E4M3 value of x / scale, within half
// its spacing (ulp_e4m3(exact) / 2) plus this much of abs(exact) (the f32
// division can move a tie).
inline constexpr double kFp8DivisionRel = 0x1p-20;
// fused_k_norm_rope_cache_write_bf16 and _bf16_mrope; scale: max abs(exact)
// over the head (the f32 RoPE angle is off by up to ~1e-3 rad near 4096).
inline constexpr Bound kKNormRopeBf16{0x1p-8, 1e-3, "2^-8 |ref| + 10^-3 max |head|"};
// fused_k_norm_rope_cache_write_fp8, where not saturated: within
// ulp_e4m3 / 2 + kKNormRopeFp8Abs * inv_scale * max abs(exact).
inline constexpr double kKNormRopeFp8Abs = 1e-3;
// paged_decode_attn_{bf16,fp8}; scale: max abs(V).
inline constexpr Bound kPagedDecodeAttn{0x1p-8, 1e-4, "2^-8 |ref| + 10^-4 max |V|"};
// The TurboQuant decode followed by the rotation of its output, as above;
// scale: the head's L2 norm of exact plus max abs(V).
inline constexpr Bound kRotatedDecodeAttn{0x1p-8, 0x1p-8,
                                          "2^-8 |ref| + 2^-8 (||head||_2 + max |V|)"};
// The TurboQuant V round trip (rotate, write, decode the stored values,
// rotate back): the mean square error per mean square of the input V, at
// most 1.25 times the Lloyd-Max optimum for Gaussian data, by bits - 2.
inline constexpr double kTurboRoundTripRelMse[3] = {1.25 * 0.1175, 1.25 * 0.03454,
                                                    1.25 * 0.009497};
// Split partials at the exact max: abs(m - exact) <= kSplitMaxAbs; sums
// within kSplitSumRel * l; part_acc with scale l * max abs(V).
inline constexpr double kSplitMaxAbs = 1e-3;
inline constexpr double kSplitSumRel = 1e-3;
inline constexpr Bound kSplitAcc{0x1p-8, 1e-4, "2^-8 |ref| + 10^-4 l max |V|"};
// mla_batched_gemv; scale: sum_i abs(weight_i * input_i).
inline constexpr Bound kMlaBatchedGemv{0x1p-8, 0x1p-16, "2^-8 |ref| + 2^-16 sum |w x|"};
// mla_paged_decode_{fp8,nvfp4}; scale: max abs(V).
inline constexpr Bound kMlaPagedDecode{0x1p-8, 0x1p-12, "2^-8 |ref| + 2^-12 max |V|"};
// k3_mla_maybe_rope_f32's rope part; scale: abs(a) + abs(b) of its pair.
inline constexpr Bound kK3Rope{0, 0x1p-21, "2^-21 (|a| + |b|)"};
// k3_mla_sdpa_gate_f32; scale: max abs(v).
inline constexpr Bound kK3SdpaGate{0x1p-16, 0x1p-15, "2^-16 |ref| + 2^-15 max |v|"};
}  // namespace reference_vs_float64

}  // namespace sparkrt::verify

#endif  // SPARKRT_VERIFY_TOLERANCES_H_
