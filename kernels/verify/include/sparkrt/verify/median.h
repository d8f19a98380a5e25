// The median of a set of timings, as the demo's table and the benchmarks
// report them: robust against the odd slow run that a mean would absorb.
#ifndef SPARKRT_VERIFY_MEDIAN_H_
#define SPARKRT_VERIFY_MEDIAN_H_

#include <algorithm>
#include <vector>

namespace sparkrt::verify {

// The middle value, or the mean of the two middle ones; 0 for no values.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace sparkrt::verify

#endif  // SPARKRT_VERIFY_MEDIAN_H_
