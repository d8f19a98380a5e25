// The backend conformance suite: one set of behaviours every backend must
// show (stated in sparkrt/plugin_api.h), run against one plugin by
// `sparkrt conformance` (ctest: conformance.<backend>).
//
// A case for a feature the backend does not offer (suite.h: features())
// reports the reason with MESSAGE and returns: SKIP_IF_UNSUPPORTED below.
// A backend whose device is absent on this machine (no driver, no GPU) skips
// the whole suite with exit code 77, which CTest shows as "Skipped".
#ifndef SPARKRT_TESTS_CONFORMANCE_CONFORMANCE_H_
#define SPARKRT_TESTS_CONFORMANCE_CONFORMANCE_H_

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/sparkrt.h"

namespace sparkrt::conformance {

// The backend under test, as its plugin names itself ("cuda", "mine").
const std::string& backend_name();

// The name --backend gave, or "" when it gave a path or nothing (auto).
const std::string& requested_name();

// Opens a fresh device of the backend under test: the plugin file and device
// index the first open chose. Fails the case when it cannot (the first open
// succeeded before any case ran).
std::unique_ptr<Device> open_device();

// Why the cases of `feature` (a name from features()) are skipped on the
// backend under test, or nullptr when they run.
const char* skip_reason(std::string_view feature);

inline absl::Status status_of(const absl::Status& s) { return s; }
template <typename T>
absl::Status status_of(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace sparkrt::conformance

// Fails (and stops) the case with the status message when `expr` is not OK.
#define REQUIRE_OK(expr)                                                    \
  do {                                                                      \
    const ::absl::Status _st = ::sparkrt::conformance::status_of(expr);     \
    REQUIRE_MESSAGE(_st.ok(), #expr " -> " << std::string(_st.ToString())); \
  } while (0)
#define CHECK_OK(expr)                                                    \
  do {                                                                    \
    const ::absl::Status _st = ::sparkrt::conformance::status_of(expr);   \
    CHECK_MESSAGE(_st.ok(), #expr " -> " << std::string(_st.ToString())); \
  } while (0)
// Requires `expr` to fail with status code `want`.
#define CHECK_FAILS_WITH(expr, want)                                                  \
  do {                                                                                \
    const ::absl::Status _st = ::sparkrt::conformance::status_of(expr);               \
    CHECK_MESSAGE(_st.code() == (want), #expr " -> " << std::string(_st.ToString())); \
  } while (0)
#define CHECK_FAILS(expr)                                               \
  do {                                                                  \
    const ::absl::Status _st = ::sparkrt::conformance::status_of(expr); \
    CHECK_MESSAGE(!_st.ok(), #expr " unexpectedly succeeded");          \
  } while (0)

// Returns from the case, visibly, when `feature` is skipped on the backend.
#define SKIP_IF_UNSUPPORTED(feature)                                                             \
  do {                                                                                           \
    if (const char* _why = ::sparkrt::conformance::skip_reason(feature)) {                       \
      MESSAGE("SKIPPED on " << ::sparkrt::conformance::backend_name() << ": " << feature << ": " \
                            << std::string(_why));                                               \
      return;                                                                                    \
    }                                                                                            \
  } while (0)

#endif  // SPARKRT_TESTS_CONFORMANCE_CONFORMANCE_H_
