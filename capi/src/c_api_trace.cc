// The C API's trace calls: sparkrt::trace (sparkrt/trace.h) as it is.
#include "absl/status/status.h"
#include "c_api_internal.h"
#include "sparkrt/trace.h"

using sparkrt::capi::guarded;

extern "C" {

sparkrt_status* sparkrt_trace_start(const char* path) {
  SPARKRT_C_REQUIRE(path);
  return guarded(__func__, [&] { return sparkrt::trace::start(path); });
}

sparkrt_status* sparkrt_trace_stop(void) {
  return guarded(__func__, [] { return sparkrt::trace::stop(); });
}

int sparkrt_trace_enabled(void) { return sparkrt::trace::enabled() ? 1 : 0; }

}  // extern "C"
