// Streams and events of the mock: validated handles, never reused, counted
// per stream. Work completes inside each call, so stream order holds
// trivially; events read the fake clock (one microsecond per launch, copy or
// memset).
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mock_device.h"

namespace sparkrt::mock {

std::string MockDevice::live_streams() const {
  std::vector<SparkrtStream> live;
  for (const auto& [handle, state] : streams_) {
    if (!state.destroyed) live.push_back(handle);
  }
  std::sort(live.begin(), live.end());
  std::string out = "0 (default)";
  for (SparkrtStream s : live) {
    if (s != 0) absl::StrAppend(&out, ", ", s);
  }
  return out;
}

absl::StatusOr<MockDevice::StreamState*> MockDevice::find_stream(SparkrtStream stream,
                                                                 std::string_view call) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: unknown stream %d; this device's live streams are %s (handles come from "
        "create_stream; 0 is the default stream)",
        call, stream, live_streams()));
  }
  if (it->second.destroyed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: stream %d was destroyed (handles are never reused); live streams are %s", call,
        stream, live_streams()));
  }
  return &it->second;
}

absl::StatusOr<MockDevice::EventState*> MockDevice::find_event(SparkrtEvent event,
                                                               std::string_view call) {
  auto it = events_.find(event);
  if (it == events_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: unknown event %d; this device has created %d events (handles come from "
        "create_event)",
        call, event, next_event_ - 1));
  }
  if (it->second.destroyed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: event %d was destroyed (handles are never reused)", call, event));
  }
  return &it->second;
}

absl::Status MockDevice::check_stream(SparkrtStream stream) {
  std::lock_guard lock(mu_);
  return find_stream(stream, "graph").status();
}

absl::StatusOr<SparkrtStream> MockDevice::create_stream() {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("stream_create");
  const SparkrtStream s = next_stream_++;
  streams_[s] = StreamState{};
  ++counters_.streams_created;
  if (log_.is_open()) {
    log_.begin("stream_create");
    log_.field("stream", s);
    log_.end();
  }
  return s;
}

absl::Status MockDevice::destroy_stream(SparkrtStream stream) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("stream_destroy");
  if (stream == 0) {
    return note("stream_destroy",
                absl::InvalidArgumentError(
                    "stream_destroy: stream 0 is the default stream and cannot be destroyed"));
  }
  auto s = find_stream(stream, "stream_destroy");
  if (!s.ok()) return note("stream_destroy", s.status());
  (*s)->destroyed = true;
  (*s)->counters.destroyed = 1;
  ++counters_.streams_destroyed;
  if (log_.is_open()) {
    log_.begin("stream_destroy");
    log_.field("stream", stream);
    log_.end();
  }
  return absl::OkStatus();
}

absl::Status MockDevice::synchronize(SparkrtStream stream) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("stream_synchronize");
  auto s = find_stream(stream, "stream_synchronize");
  if (!s.ok()) return note("stream_synchronize", s.status());
  ++counters_.syncs;
  ++(*s)->counters.syncs;
  if (log_.is_open()) {
    log_.begin("sync");
    log_.field("stream", stream);
    log_.end();
  }
  return absl::OkStatus();
}

absl::StatusOr<SparkrtEvent> MockDevice::create_event() {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("event_create");
  const SparkrtEvent e = next_event_++;
  events_[e] = EventState{};
  ++counters_.events_created;
  if (log_.is_open()) {
    log_.begin("event_create");
    log_.field("event", e);
    log_.end();
  }
  return e;
}

absl::Status MockDevice::destroy_event(SparkrtEvent event) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("event_destroy");
  auto e = find_event(event, "event_destroy");
  if (!e.ok()) return note("event_destroy", e.status());
  (*e)->destroyed = true;
  ++counters_.events_destroyed;
  if (log_.is_open()) {
    log_.begin("event_destroy");
    log_.field("event", event);
    log_.end();
  }
  return absl::OkStatus();
}

absl::Status MockDevice::record_event(SparkrtEvent event, SparkrtStream stream) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("event_record");
  auto e = find_event(event, "event_record");
  if (!e.ok()) return note("event_record", e.status());
  auto s = find_stream(stream, "event_record");
  if (!s.ok()) return note("event_record", s.status());
  (*e)->recorded = true;
  (*e)->tick = tick_;
  (*e)->stream = stream;
  ++counters_.events_recorded;
  ++(*s)->counters.events_recorded;
  if (log_.is_open()) {
    log_.begin("event_record");
    log_.field("event", event);
    log_.field("stream", stream);
    log_.end();
  }
  return absl::OkStatus();
}

absl::Status MockDevice::synchronize_event(SparkrtEvent event) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("event_synchronize");
  auto e = find_event(event, "event_synchronize");
  if (!e.ok()) return note("event_synchronize", e.status());
  ++counters_.event_syncs;
  if (log_.is_open()) {
    log_.begin("event_sync");
    log_.field("event", event);
    log_.end();
  }
  return absl::OkStatus();
}

absl::Status MockDevice::wait_event(SparkrtStream stream, SparkrtEvent event) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("stream_wait_event");
  auto s = find_stream(stream, "stream_wait_event");
  if (!s.ok()) return note("stream_wait_event", s.status());
  auto e = find_event(event, "stream_wait_event");
  if (!e.ok()) return note("stream_wait_event", e.status());
  ++counters_.event_waits;
  ++(*s)->counters.event_waits;
  if (log_.is_open()) {
    log_.begin("stream_wait_event");
    log_.field("stream", stream);
    log_.field("event", event);
    log_.end();
  }
  return absl::OkStatus();
}

absl::StatusOr<float> MockDevice::elapsed_ms(SparkrtEvent start, SparkrtEvent end) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("event_elapsed");
  auto a = find_event(start, "event_elapsed");
  if (!a.ok()) return note("event_elapsed", a.status());
  auto b = find_event(end, "event_elapsed");
  if (!b.ok()) return note("event_elapsed", b.status());
  for (auto [handle, state] : {std::pair{start, *a}, std::pair{end, *b}}) {
    if (!state->recorded) {
      return note("event_elapsed",
                  absl::FailedPreconditionError(absl::StrFormat(
                      "event_elapsed: event %d has not been recorded; record it on a stream "
                      "first",
                      handle)));
    }
  }
  // One fake microsecond per launch, copy or memset between the two records.
  const auto ticks = static_cast<int64_t>((*b)->tick - (*a)->tick);
  return static_cast<float>(static_cast<double>(ticks) / 1000.0);
}

}  // namespace sparkrt::mock
