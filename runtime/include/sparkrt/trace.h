// A trace of what the runtime does, in the Chrome trace event format
// (`{"traceEvents":[...]}`), which Perfetto (ui.perfetto.dev) and
// chrome://tracing open.
//
//   if (auto st = sparkrt::trace::start("/tmp/decode.json"); !st.ok()) return st;
//   ... device calls ...
//   if (auto st = sparkrt::trace::stop(); !st.ok()) return st;  // a write failed
//
// Every runtime call made while tracing is on becomes a complete ("X") event
// on the track of the host thread that made it: device open and close, module
// loads (with where the module came from), kernel lookups, launches (grid,
// block, shared memory, stream, argument bytes), copies, memsets, stream and
// event calls, graph capture and replay, and collectives; trace::Range marks
// regions of the caller's own. What ran on each device (launches, async
// copies and memsets, graph replays) is also a span of its device time, on a
// track per stream (docs/trace.md). Setting SPARKRT_TRACE=<file> starts a
// trace at the first Device::open; it is written out when the process exits.
//
// Events go through one buffer of bounded size that is written to the file
// whenever it fills, so a long trace costs no more memory than a short one.
// A write that fails is never a silent hole: stop() reports it.
//
// When tracing is off, each traced call costs one relaxed atomic load.
#ifndef SPARKRT_TRACE_H_
#define SPARKRT_TRACE_H_

#include <atomic>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace sparkrt::trace {

struct Options {
  // Also time each stream operation on the device: two events around it,
  // read back later, a span on its stream's track. Off, the trace has host
  // spans only and costs each call less (docs/trace.md, "Cost").
  bool device_times = true;
};

// Starts writing a trace to `path` (created or truncated). Fails when the
// file cannot be opened for writing, or when a trace is already running.
absl::Status start(const std::string& path, const Options& options = {});

// Ends the trace and closes the file. Fails with the first write error the
// trace met (disk full, I/O error), or when no trace is running.
absl::Status stop();

// The file being written; empty when no trace is running.
std::string path();

namespace detail {
extern std::atomic<bool> g_enabled;
}  // namespace detail

// Whether a trace is running: the check every traced call makes first.
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

// A region of the caller's own ("decode step", "layer 7") as a span on the
// calling thread's track, category "user", from construction to destruction;
// the runtime calls made inside it nest under it. Costs one relaxed load when
// tracing is off.
//
//   { sparkrt::trace::Range step("decode step"); ... launches ... }
class Range {
 public:
  explicit Range(std::string_view name);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  std::string name_;  // empty when tracing was off at construction
  double start_us_ = 0;
};

}  // namespace sparkrt::trace

#endif  // SPARKRT_TRACE_H_
