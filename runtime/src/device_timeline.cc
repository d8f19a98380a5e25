#include "device_timeline.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_format.h"
#include "device_state.h"

namespace sparkrt::detail {

namespace {

// Operations waiting to be read back before the host waits for the oldest:
// deep enough for any decode step, small enough to bound the events held.
constexpr size_t kMaxPending = 1024;
// Past this distance from the anchor, an operation's end becomes the anchor:
// a float of milliseconds keeps 0.1 us steps up to about two seconds.
constexpr float kReanchorMs = 1000.f;

// Process ids of device tracks; the host's is 1.
std::atomic<int> g_next_pid{2};

std::string stream_track_name(SparkrtStream stream) {
  return stream == 0 ? "stream 0 (default)" : absl::StrFormat("stream %d", stream);
}

}  // namespace

DeviceTimeline::DeviceTimeline(DeviceState& state)
    : state_(state), pid_(g_next_pid.fetch_add(1, std::memory_order_relaxed)) {
  add_trace_source(this);
}

DeviceTimeline::~DeviceTimeline() { remove_trace_source(this); }

// ---- plugin calls ---------------------------------------------------------------

std::string DeviceTimeline::context(std::string_view call) const {
  return absl::StrFormat("%s: device times for the trace: %s", state_.plugin->name(), call);
}

absl::StatusOr<SparkrtEvent> DeviceTimeline::take_event_locked() {
  if (!free_events_.empty()) {
    const SparkrtEvent e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  SparkrtEventCreateArgs args{SPARKRT_EVENT_CREATE_ARGS_SIZE, state_.native, 0};
  if (SparkrtError* e = state_.api->event_create(&args))
    return state_.plugin->status(e, context("create_event"));
  all_events_.push_back(args.event);
  return args.event;
}

void DeviceTimeline::recycle_locked(SparkrtEvent event) {
  if (event != 0) free_events_.push_back(event);
}

absl::Status DeviceTimeline::record_locked(SparkrtEvent event, SparkrtStream stream) {
  SparkrtEventArgs args{SPARKRT_EVENT_ARGS_SIZE, state_.native, event, stream};
  if (SparkrtError* e = state_.api->event_record(&args))
    return state_.plugin->status(e, context(absl::StrFormat("record_event on stream %d", stream)));
  return absl::OkStatus();
}

absl::Status DeviceTimeline::synchronize_locked(SparkrtEvent event) {
  SparkrtEventArgs args{SPARKRT_EVENT_ARGS_SIZE, state_.native, event, 0};
  if (SparkrtError* e = state_.api->event_synchronize(&args))
    return state_.plugin->status(e, context("synchronize_event"));
  return absl::OkStatus();
}

absl::StatusOr<float> DeviceTimeline::elapsed_locked(SparkrtEvent from, SparkrtEvent to) {
  SparkrtEventElapsedArgs args{SPARKRT_EVENT_ELAPSED_ARGS_SIZE, state_.native, from, to, 0.f};
  if (SparkrtError* e = state_.api->event_elapsed(&args))
    return state_.plugin->status(e, context("elapsed_ms"));
  return args.milliseconds;
}

void DeviceTimeline::emit_locked(std::string_view json) const { trace_append(generation_, json); }

// ---- tracks -------------------------------------------------------------------------

// Names the device's process in a new trace and places the anchor: recorded
// on the default stream and waited for, so its trace time is known.
bool DeviceTimeline::activate_locked(uint64_t generation) {
  if (generation == generation_) return available_;
  // Operations of an earlier trace were written when it stopped.
  for (const Pending& p : pending_) {
    recycle_locked(p.start);
    recycle_locked(p.end);
  }
  pending_.clear();
  generation_ = generation;
  available_ = false;
  named_streams_.clear();
  emit_locked(absl::StrFormat(
      R"({"ph":"M","name":"process_name","pid":%d,"tid":0,"args":{"name":%s}})", pid_,
      json_string(absl::StrFormat("%s device %d: %s", state_.plugin->name(), state_.index,
                                  state_.properties.name))));
  emit_locked(absl::StrFormat(
      R"({"ph":"M","name":"process_sort_index","pid":%d,"tid":0,"args":{"sort_index":%d}})",
      pid_, pid_));
  if (anchor_ == 0) {
    auto e = take_event_locked();
    if (!e.ok()) {
      unavailable_locked(e.status(), 0);
      return false;
    }
    anchor_ = *e;
  }
  absl::Status st = record_locked(anchor_, 0);
  if (st.ok()) st = synchronize_locked(anchor_);
  anchor_us_ = trace_now_us();
  // A device without event timing says so here, before any work is timed.
  if (st.ok()) st = elapsed_locked(anchor_, anchor_).status();
  if (!st.ok()) {
    unavailable_locked(st, 0);
    return false;
  }
  available_ = true;
  return true;
}

// Says in the trace that device times stop here, and why.
void DeviceTimeline::unavailable_locked(const absl::Status& why, size_t dropped) {
  available_ = false;
  emit_locked(absl::StrFormat(
      R"({"ph":"i","s":"p","name":"device timing unavailable","ts":%.3f,"pid":%d,"tid":0,)"
      R"("args":{"reason":%s,"operations_without_device_time":%d}})",
      trace_now_us(), pid_, json_string(why.ToString()), dropped));
}

void DeviceTimeline::name_stream_locked(SparkrtStream stream) {
  if (std::find(named_streams_.begin(), named_streams_.end(), stream) != named_streams_.end())
    return;
  named_streams_.push_back(stream);
  emit_locked(absl::StrFormat(
      R"({"ph":"M","name":"thread_name","pid":%d,"tid":%d,"args":{"name":%s}})", pid_, stream,
      json_string(absl::StrFormat("%s %d %s", state_.plugin->name(), state_.index,
                                  stream_track_name(stream)))));
  // After the host threads (small ids) in viewers that sort by this alone.
  emit_locked(absl::StrFormat(
      R"({"ph":"M","name":"thread_sort_index","pid":%d,"tid":%d,"args":{"sort_index":%d}})",
      pid_, stream, 1000 * pid_ + static_cast<int>(std::min<SparkrtStream>(stream, 999))));
}

// ---- operations ------------------------------------------------------------------------

DeviceTimeline::Mark DeviceTimeline::begin(SparkrtStream stream) {
  if (!trace_device_times()) return {};
  const uint64_t generation = trace_generation();
  if (generation == 0) return {};
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || !activate_locked(generation)) return {};
  if (std::find(capturing_.begin(), capturing_.end(), stream) != capturing_.end()) return {};
  auto e = take_event_locked();
  if (!e.ok()) {
    unavailable_locked(e.status(), pending_.size());
    return {};
  }
  // An unknown stream is refused here as it will be by the operation itself.
  if (!record_locked(*e, stream).ok()) {
    recycle_locked(*e);
    return {};
  }
  return Mark{*e, generation};
}

void DeviceTimeline::end(const Mark& mark, SparkrtStream stream, bool queued,
                         const char* category, std::string_view name, std::string args) {
  if (!mark) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || mark.generation != generation_ || !available_ || !queued) {
    recycle_locked(mark.start);
    return;
  }
  auto e = take_event_locked();
  absl::Status st = e.ok() ? record_locked(*e, stream) : e.status();
  if (!st.ok()) {
    recycle_locked(mark.start);
    if (e.ok()) recycle_locked(*e);
    unavailable_locked(st, pending_.size() + 1);
    return;
  }
  pending_.push_back(
      Pending{stream, mark.start, *e, mark.generation, category, std::string(name), std::move(args)});
  if (pending_.size() >= kMaxPending) {
    if (st = synchronize_locked(pending_.front().end); !st.ok()) {
      unavailable_locked(st, pending_.size());
      return;
    }
    write_locked(false);
  }
}

// Writes pending operations in the order queued, up to the first one not yet
// complete (or all of them, waiting, when `wait`).
void DeviceTimeline::write_locked(bool wait) {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    if (p.generation != generation_ || !available_) {
      recycle_locked(p.start);
      recycle_locked(p.end);
      pending_.pop_front();
      continue;
    }
    if (wait) {
      if (absl::Status st = synchronize_locked(p.end); !st.ok()) {
        unavailable_locked(st, pending_.size());
        continue;  // drops the rest
      }
    }
    auto from_anchor = elapsed_locked(anchor_, p.start);
    auto duration = from_anchor.ok() ? elapsed_locked(p.start, p.end) : from_anchor;
    if (!duration.ok()) {
      // Not complete yet: cuda says UNAVAILABLE, vulkan FAILED_PRECONDITION.
      const absl::Status& st = duration.status();
      if (!wait && (absl::IsUnavailable(st) || absl::IsFailedPrecondition(st))) return;
      unavailable_locked(duration.status(), pending_.size());
      continue;
    }
    const double ts = anchor_us_ + 1e3 * *from_anchor;
    const double dur = 1e3 * std::max(0.f, *duration);
    name_stream_locked(p.stream);
    emit_locked(absl::StrFormat(
        R"({"ph":"X","cat":"%s","name":%s,"ts":%.3f,"dur":%.3f,"pid":%d,"tid":%d,"args":{%s}})",
        p.category, json_string(p.name), ts, dur, pid_, p.stream, p.args));
    if (*from_anchor > kReanchorMs) {
      std::swap(anchor_, p.end);
      anchor_us_ = ts + dur;
    }
    recycle_locked(p.start);
    recycle_locked(p.end);
    pending_.pop_front();
  }
}

void DeviceTimeline::write_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.empty()) write_locked(false);
}

void DeviceTimeline::set_capturing(SparkrtStream stream, bool capturing) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase(capturing_, stream);
  if (capturing) capturing_.push_back(stream);
}

void DeviceTimeline::flush_to_trace() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_) write_locked(true);
}

void DeviceTimeline::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  write_locked(true);
  closed_ = true;
  for (const SparkrtEvent event : all_events_) {
    SparkrtEventArgs args{SPARKRT_EVENT_ARGS_SIZE, state_.native, event, 0};
    // The plugin's device_close frees what is left; nothing to report here.
    if (SparkrtError* e = state_.api->event_destroy(&args))
      state_.plugin->status(e, context("destroy_event")).IgnoreError();
  }
  all_events_.clear();
  free_events_.clear();
  anchor_ = 0;
}

}  // namespace sparkrt::detail
