// The backend conformance suite as a library: `sparkrt conformance` parses
// its command line into SuiteOptions and calls run_suite(). The cases are in
// conformance_memory_test.cc and conformance_launch_test.cc; what they check
// is stated in sparkrt/plugin_api.h.
#ifndef SPARKRT_TESTS_CONFORMANCE_SUITE_H_
#define SPARKRT_TESTS_CONFORMANCE_SUITE_H_

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sparkrt::conformance {

// A behaviour some backends cannot offer. Its cases are skipped, each with a
// visible reason, when the plugin does not offer it (detected at run time) or
// when the backend declares it cannot (--skip, or kKnownGaps in suite.cc for
// the in-tree backends).
struct Feature {
  const char* name;      // what --skip takes: "graphs"
  const char* checks;    // what its cases check
  const char* detected;  // how its absence is detected; nullptr: only declared
};
std::span<const Feature> features();

// The feature called `name`, or nullptr.
const Feature* find_feature(std::string_view name);

struct SuiteOptions {
  // A backend name, a path to a plugin file, or "auto"; empty means
  // SPARKRT_BACKEND, else auto (as for Device::open).
  std::string backend;
  // Declared gaps: (feature name, reason). Names must come from features().
  std::vector<std::pair<std::string, std::string>> skips;
  // Passed on to doctest: a case filter, --success, a reporter, ...
  std::vector<std::string> doctest_args;
};

// Opens the backend, prints what is tested and what is skipped and why, then
// runs every case. Returns the process exit code: 0 every case passed, 1 a
// case failed or the backend could not be opened, 77 the plugin loaded but
// has no usable device here (no driver, no GPU).
int run_suite(const SuiteOptions& options);

// Prints the features and the names of the cases; opens no device.
int list_suite();

}  // namespace sparkrt::conformance

#endif  // SPARKRT_TESTS_CONFORMANCE_SUITE_H_
