// How runtime calls record themselves into the trace (sparkrt/trace.h).
#ifndef SPARKRT_RUNTIME_TRACE_SPAN_H_
#define SPARKRT_RUNTIME_TRACE_SPAN_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "sparkrt/plugin_api.h"
#include "sparkrt/trace.h"

namespace sparkrt::detail {

// Microseconds since the trace started.
double trace_now_us();

// Appends a complete event on the calling thread's track. `args_json` is the
// inside of the event's "args" object: `"key":value` pairs, comma-separated.
// Dropped when the trace stopped since `start_us` was taken.
void trace_span(const char* category, std::string_view name, double start_us,
                std::string_view args_json);

// The span of a launch of `module`.`entry` begun at `start_us`, with what the
// plugin was given. Out of line: the launch path only tests trace::enabled().
[[gnu::cold]] void trace_launch(const std::string& module, const std::string& entry,
                                const SparkrtLaunchArgs& args, bool failed, double start_us);

// The running trace's number (each start() takes a new one); 0 when none is.
uint64_t trace_generation();

// Whether the running trace times stream operations on the device.
bool trace_device_times();

// Appends one event, formatted by the caller, to trace `generation`; dropped
// when that trace has ended.
void trace_append(uint64_t generation, std::string_view event_json);

// Something that holds events the trace cannot write yet (device work still
// in flight). stop() calls flush_to_trace() on every registered source, with
// tracing already off, and writes the trace's end only after them.
class TraceSource {
 public:
  virtual void flush_to_trace() = 0;

 protected:
  ~TraceSource() = default;
};
void add_trace_source(TraceSource* source);
void remove_trace_source(TraceSource* source);  // waits for a flush under way

// `text` as a JSON string literal, quotes included.
std::string json_string(std::string_view text);

// Records one call from its construction to its destruction. Inactive (and
// free) when tracing was off at construction; set `args` only when active.
class TraceSpan {
 public:
  TraceSpan(const char* category, std::string_view name)
      : on_(trace::enabled()), category_(category), name_(name) {
    if (on_) start_us_ = trace_now_us();
  }
  ~TraceSpan() {
    if (on_) trace_span(category_, name_, start_us_, args);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  explicit operator bool() const { return on_; }

  std::string args;

 private:
  bool on_;
  const char* category_;
  std::string_view name_;  // outlives the span
  double start_us_ = 0;
};

}  // namespace sparkrt::detail

#endif  // SPARKRT_RUNTIME_TRACE_SPAN_H_
