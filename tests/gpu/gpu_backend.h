// The backend a GPU test executable runs against the cpu reference:
// gpu_main.cc sets it from `--backend=NAME` (cuda unless given). And what
// its test suites need beyond a device, which gpu_main.cc checks.
#ifndef SPARKRT_TESTS_GPU_GPU_BACKEND_H_
#define SPARKRT_TESTS_GPU_GPU_BACKEND_H_

#include <string>
#include <vector>

namespace sparkrt::gpu_test {

inline std::string& backend() {
  static std::string name = "cuda";
  return name;
}

// What a doctest test suite needs beyond the device main() opens (a library,
// a second GPU). main() calls `unmet` once before any case runs; a reason
// excludes the suite's cases, which doctest then counts as skipped, never as
// passed, and prints "SKIPPED: test suite NAME: reason". A run left with
// nothing to run exits 77 (CTest: skipped). Register at namespace scope:
//
//   [[maybe_unused]] const bool kTwo = gpu_test::require("two_gpus", [] { return std::string(); });
using UnmetFn = std::string (*)();
struct SuiteRequirement {
  const char* suite;
  UnmetFn unmet;
};
inline std::vector<SuiteRequirement>& suite_requirements() {
  static std::vector<SuiteRequirement> all;
  return all;
}
inline bool require(const char* suite, UnmetFn unmet) {
  suite_requirements().push_back({suite, unmet});
  return true;
}

}  // namespace sparkrt::gpu_test

#endif  // SPARKRT_TESTS_GPU_GPU_BACKEND_H_
