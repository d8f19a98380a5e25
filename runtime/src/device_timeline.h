// The device side of a trace (sparkrt/trace.h): how long each launch, async
// copy, async memset and graph replay ran on the device, as spans on a track
// per stream of a process per device.
//
// Each timed operation is bracketed by two events recorded on its stream;
// nothing waits for them when they are queued, so the stream runs as it would
// untraced. They are read back later: after a synchronize that has completed
// them, when too many are outstanding (the host then waits for the oldest),
// at close() and at trace::stop(). Event times are placed on the trace's clock
// through an anchor event, recorded and waited for once per trace when the
// device is first timed, then moved forward along the timed operations so
// that float milliseconds never have to span more than about a second.
//
// Every device has one; what its times mean is its events' business: a GPU's
// clock, the host clock around the cpu backend's work (which runs inside the
// call that queues it), the mock's fake clock (one microsecond per
// operation). A device without event timing says so in the trace, once,
// with the reason, and is not asked again until the next trace.
#ifndef SPARKRT_RUNTIME_DEVICE_TIMELINE_H_
#define SPARKRT_RUNTIME_DEVICE_TIMELINE_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/plugin_api.h"
#include "trace_span.h"

namespace sparkrt::detail {

class DeviceState;

class DeviceTimeline final : public TraceSource {
 public:
  explicit DeviceTimeline(DeviceState& state);
  ~DeviceTimeline();
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;

  // An operation about to be queued on a stream: its start event, or none
  // (tracing off, timing unavailable, the stream capturing a graph).
  struct Mark {
    SparkrtEvent start = 0;
    uint64_t generation = 0;
    explicit operator bool() const { return start != 0; }
  };
  Mark begin(SparkrtStream stream);
  // After the operation: `queued` false when the plugin refused it. `args` is
  // the inside of the span's "args" object.
  void end(const Mark& mark, SparkrtStream stream, bool queued, const char* category,
           std::string_view name, std::string args);

  // After a synchronize: writes the operations that have completed.
  void write_completed();
  // Graph capture: nothing on a capturing stream is timed (its events would be
  // captured, not recorded).
  void set_capturing(SparkrtStream stream, bool capturing);
  // Waits for and writes every operation, frees the events; the device's
  // close() calls it before the plugin closes the device.
  void close();

  void flush_to_trace() override;

 private:
  struct Pending {
    SparkrtStream stream;
    SparkrtEvent start;
    SparkrtEvent end;
    uint64_t generation;
    const char* category;
    std::string name;
    std::string args;
  };

  bool activate_locked(uint64_t generation);
  void unavailable_locked(const absl::Status& why, size_t dropped);
  void write_locked(bool wait);
  void name_stream_locked(SparkrtStream stream);
  absl::StatusOr<SparkrtEvent> take_event_locked();
  void recycle_locked(SparkrtEvent event);
  absl::Status record_locked(SparkrtEvent event, SparkrtStream stream);
  absl::Status synchronize_locked(SparkrtEvent event);
  absl::StatusOr<float> elapsed_locked(SparkrtEvent from, SparkrtEvent to);
  void emit_locked(std::string_view json) const;
  std::string context(std::string_view call) const;

  DeviceState& state_;
  const int pid_;  // the device's process in every trace
  std::mutex mu_;
  bool closed_ = false;
  uint64_t generation_ = 0;  // the trace the anchor and names belong to
  bool available_ = false;   // in generation_
  SparkrtEvent anchor_ = 0;
  double anchor_us_ = 0;  // trace time of anchor_
  std::vector<SparkrtStream> named_streams_;
  std::vector<SparkrtStream> capturing_;
  std::vector<SparkrtEvent> free_events_;
  std::vector<SparkrtEvent> all_events_;
  std::deque<Pending> pending_;
};

}  // namespace sparkrt::detail

#endif  // SPARKRT_RUNTIME_DEVICE_TIMELINE_H_
