// The C API's trace calls: sparkrt::trace (sparkrt/trace.h) as it is.
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "c_api_internal.h"
#include "sparkrt/status_macros.h"
#include "sparkrt/trace.h"

using sparkrt::capi::guarded;

namespace {
// The calling thread's open regions, innermost last.
thread_local std::vector<std::unique_ptr<sparkrt::trace::Range>> t_ranges;
}  // namespace

extern "C" {

sparkrt_status* sparkrt_trace_start(const char* path) {
  SPARKRT_C_REQUIRE(path);  // named as this call
  return sparkrt_trace_start_with_options(path, nullptr);
}

sparkrt_status* sparkrt_trace_start_with_options(const char* path,
                                                 const sparkrt_trace_options* options) {
  SPARKRT_C_REQUIRE(path);
  return guarded(__func__, [&] {
    sparkrt::trace::Options o;
    if (options != nullptr) {
      SPARKRT_RETURN_IF_ERROR(sparkrt::capi::check_in_struct(
          "sparkrt_trace_start_with_options", "sparkrt_trace_options", options->struct_size,
          SPARKRT_C_TRACE_OPTIONS_SIZE));
      o.device_times = options->device_times != 0;
    }
    return sparkrt::trace::start(path, o);
  });
}

sparkrt_status* sparkrt_trace_stop(void) {
  return guarded(__func__, [] { return sparkrt::trace::stop(); });
}

int sparkrt_trace_enabled(void) { return sparkrt::trace::enabled() ? 1 : 0; }

sparkrt_status* sparkrt_trace_range_push(const char* name) {
  SPARKRT_C_REQUIRE(name);
  return guarded(__func__, [&] {
    t_ranges.push_back(std::make_unique<sparkrt::trace::Range>(name));
    return absl::OkStatus();
  });
}

sparkrt_status* sparkrt_trace_range_pop(void) {
  return guarded(__func__, [] {
    if (t_ranges.empty())
      return absl::FailedPreconditionError(
          "sparkrt_trace_range_pop: no region is open on this thread; pop only what "
          "sparkrt_trace_range_push opened");
    t_ranges.pop_back();
    return absl::OkStatus();
  });
}

}  // extern "C"
