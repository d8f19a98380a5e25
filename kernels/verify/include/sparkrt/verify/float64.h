// The kernels' arithmetic in float64, written from the contracts in
// docs/kernels.md, as the oracle the checks compare with: the demo's and the
// cpu tests' float64 side. It is independent of the reference kernels on
// purpose: on the cpu backend those are the kernels under test, so a check
// against them would check nothing.
//
// Per head (or per query), over values already decoded to double, so one
// formula serves every storage format, layout and caller:
//
//   auto y = sparkrt::verify::k_norm_rope(x, weight, eps, rotary_dim, theta,
//                                         [&](uint32_t) { return double(pos); });
//   auto o = sparkrt::verify::attention(q, len, dv, 1 / std::sqrt(double(d)),
//                                       [&](uint32_t t, uint32_t j) { return key(t, j); },
//                                       [&](uint32_t t, uint32_t j) { return value(t, j); });
#ifndef SPARKRT_VERIFY_FLOAT64_H_
#define SPARKRT_VERIFY_FLOAT64_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace sparkrt::verify {

// RMSNorm of one head: x[j] * weight[j] / sqrt(mean(x^2) + eps).
inline std::vector<double> rms_norm(std::span<const double> x, std::span<const double> weight,
                                    double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t j = 0; j < x.size(); ++j) y[j] = x[j] * weight[j] * r;
  return y;
}

// Rotate-half (NeoX) RoPE in place on x[0, rotary_dim): pair (i, i + rotary_dim/2)
// turns by position(i) * theta^(-2i / rotary_dim). `position` maps a pair to
// its position, so MRoPE (pair i at pos[i % 3]) is the same formula.
template <typename Position>  // double(uint32_t pair)
void rope_rotate_half(std::span<double> x, uint32_t rotary_dim, double theta, Position position) {
  const uint32_t half = rotary_dim / 2;
  for (uint32_t i = 0; i < half; ++i) {
    const double angle = position(i) * std::pow(theta, -2.0 * i / rotary_dim);
    const double lo = x[i], hi = x[i + half];
    x[i] = lo * std::cos(angle) - hi * std::sin(angle);
    x[i + half] = hi * std::cos(angle) + lo * std::sin(angle);
  }
}

// The fused K path of one head (fused_k_norm_rope_cache_write_*), before
// the store rounds it: RMSNorm over the head, then RoPE on its first
// rotary_dim dims.
template <typename Position>
std::vector<double> k_norm_rope(std::span<const double> x, std::span<const double> weight,
                                double eps, uint32_t rotary_dim, double theta, Position position) {
  std::vector<double> y = rms_norm(x, weight, eps);
  rope_rotate_half(std::span<double>(y), rotary_dim, theta, position);
  return y;
}

// Softmax attention of one query over n tokens:
//   out[j] = sum_t e^(s_t - M) value(t, j) / (sum_t e^(s_t - M) + e^(sink - M)),
// s_t = scale * (q . key(t, .)), M the largest logit (the sink's included);
// no sink term without one. Zeros when nothing is attended (n = 0, no sink):
// the kernels write zeros there.
template <typename Key, typename Value>  // double(uint32_t token, uint32_t dim)
std::vector<double> attention(std::span<const double> q, uint32_t n, uint32_t dv, double scale,
                              Key key, Value value, std::optional<double> sink = std::nullopt) {
  std::vector<double> p(n);
  double m = sink.value_or(-INFINITY);
  for (uint32_t t = 0; t < n; ++t) {
    double dot = 0;
    for (uint32_t j = 0; j < q.size(); ++j) dot += q[j] * key(t, j);
    p[t] = dot * scale;
    m = std::max(m, p[t]);
  }
  double sum = sink ? std::exp(*sink - m) : 0.0;
  for (double& x : p) sum += (x = std::exp(x - m));
  std::vector<double> out(dv, 0.0);
  if (!(sum > 0)) return out;
  for (uint32_t j = 0; j < dv; ++j) {
    double o = 0;
    for (uint32_t t = 0; t < n; ++t) o += p[t] * value(t, j);
    out[j] = o / sum;
  }
  return out;
}

// The normalized Walsh-Hadamard transform: y_i = sum_j (-1)^popcount(i & j)
// x_j / sqrt(n) for a power-of-two n. Its own inverse.
inline std::vector<double> hadamard(std::span<const double> x) {
  const size_t n = x.size();
  std::vector<double> y(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double acc = 0;
    for (size_t j = 0; j < n; ++j) acc += (std::popcount(i & j) % 2 ? -x[j] : x[j]);
    y[i] = acc / std::sqrt(double(n));
  }
  return y;
}

}  // namespace sparkrt::verify

#endif  // SPARKRT_VERIFY_FLOAT64_H_
