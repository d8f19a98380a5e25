// References for kernels/ptx/vector_ops.cu (contracts in docs/kernels.md).
#include <algorithm>
#include <cstdint>

#include "reference.h"

SPARKRT_REFERENCE_KERNEL(vector_ops, vector_add_f32) {
  const uint32_t n = launch.value<uint32_t>(3);
  SPARKRT_ASSIGN_OR_RETURN(auto a, launch.span<const float>(0, n));
  SPARKRT_ASSIGN_OR_RETURN(auto b, launch.span<const float>(1, n));
  SPARKRT_ASSIGN_OR_RETURN(auto out, launch.span<float>(2, n));
  for (uint32_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(vector_ops, fill_u32) {
  const uint32_t value = launch.value<uint32_t>(1);
  const uint32_t n = launch.value<uint32_t>(2);
  SPARKRT_ASSIGN_OR_RETURN(auto out, launch.span<uint32_t>(0, n));
  for (uint32_t i = 0; i < n; ++i) out[i] = value;
  return absl::OkStatus();
}

namespace {
struct AxpyParams {
  float alpha;
  uint32_t pad;
  uint64_t n;
};
}  // namespace

SPARKRT_REFERENCE_KERNEL(vector_ops, axpy_f32) {
  const auto p = launch.value<AxpyParams>(0);
  SPARKRT_ASSIGN_OR_RETURN(auto x, launch.span<const float>(1, p.n));
  SPARKRT_ASSIGN_OR_RETURN(auto y, launch.span<float>(2, p.n));
  for (uint64_t i = 0; i < p.n; ++i) y[i] = p.alpha * x[i] + y[i];
  return absl::OkStatus();
}

SPARKRT_REFERENCE_KERNEL(vector_ops, empty_10_args) { return absl::OkStatus(); }

namespace {
struct CopyArgs {
  uint32_t v[34];
};
}  // namespace

SPARKRT_REFERENCE_KERNEL(vector_ops, copy_args_u32) {
  const auto args = launch.value<CopyArgs>(1);
  const uint32_t n = std::min<uint32_t>(34, launch.block()[0]);
  SPARKRT_ASSIGN_OR_RETURN(auto out, launch.span<uint32_t>(0, n));
  for (uint32_t i = 0; i < n; ++i) out[i] = args.v[i];
  return absl::OkStatus();
}
