// The trace writer: events are formatted into one mutex-guarded buffer,
// written to the file whenever it passes kFlushBytes, and at stop() and
// process exit. The first write error is kept and reported by stop().
#include "sparkrt/trace.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <ratio>
#include <type_traits>
#include <vector>

#include "absl/strings/str_format.h"
#include "trace_span.h"

namespace sparkrt {
namespace trace::detail {
std::atomic<bool> g_enabled{false};
}  // namespace trace::detail

namespace {

constexpr size_t kFlushBytes = 256 << 10;
static_assert(std::is_same_v<std::chrono::steady_clock::period, std::nano>,
              "trace times are kept in steady_clock ticks, taken to be nanoseconds");

// A small id per thread, stable for the process: its track in every trace.
std::atomic<int> g_next_tid{1};

struct ThreadTrack {
  int tid = 0;
  uint64_t named_in = 0;  // the trace whose metadata names this thread
};
thread_local ThreadTrack t_track;

class Tracer {
 public:
  absl::Status start(const std::string& path, const trace::Options& options) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ >= 0)
      return absl::FailedPreconditionError(
          absl::StrFormat("trace: already writing %s; stop() it first", path_));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int err = errno;
      return absl::Status(absl::ErrnoToStatusCode(err),
                          absl::StrFormat("trace: cannot write %s: %s", path, std::strerror(err)));
    }
    fd_ = fd;
    path_ = path;
    device_times_.store(options.device_times, std::memory_order_relaxed);
    error_ = absl::OkStatus();
    first_event_ = true;
    ++generation_;
    epoch_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                    std::memory_order_relaxed);
    buffer_ = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
    append_event(
        R"({"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"sparkrt"}})");
    trace::detail::g_enabled.store(true, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  absl::Status stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fd_ < 0 || stopping_) return absl::FailedPreconditionError("trace: no trace is running");
      stopping_ = true;
      trace::detail::g_enabled.store(false, std::memory_order_relaxed);
    }
    // Device work still in flight is waited for and written before the end.
    {
      std::lock_guard<std::mutex> lock(sources_mu_);
      for (detail::TraceSource* source : sources_) source->flush_to_trace();
    }
    std::lock_guard<std::mutex> lock(mu_);
    buffer_ += "\n]}\n";
    write_buffer();
    if (::close(fd_) != 0 && error_.ok()) error_ = write_error(errno);
    fd_ = -1;
    stopping_ = false;
    absl::Status result = error_;
    path_.clear();
    buffer_.clear();
    buffer_.shrink_to_fit();
    return result;
  }

  void add_source(detail::TraceSource* source) {
    std::lock_guard<std::mutex> lock(sources_mu_);
    sources_.push_back(source);
  }
  void remove_source(detail::TraceSource* source) {
    std::lock_guard<std::mutex> lock(sources_mu_);
    std::erase(sources_, source);
  }

  bool device_times() const { return device_times_.load(std::memory_order_relaxed); }

  uint64_t generation() {
    std::lock_guard<std::mutex> lock(mu_);
    return fd_ >= 0 ? generation_ : 0;
  }

  // Appends `json` if the trace `generation` is still being written.
  void append(uint64_t generation, std::string_view json) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ >= 0 && generation == generation_) append_event(json);
  }

  std::string path() {
    std::lock_guard<std::mutex> lock(mu_);
    return path_;
  }

  double now_us() const {
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    return static_cast<double>(now - epoch_ns_.load(std::memory_order_relaxed)) * 1e-3;
  }

  void span(const char* category, std::string_view name, double start_us,
            std::string_view args_json) {
    const double end_us = now_us();
    ThreadTrack& track = t_track;
    if (track.tid == 0) track.tid = g_next_tid.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ < 0) return;
    if (track.named_in != generation_) {
      track.named_in = generation_;
      append_event(absl::StrFormat(
          R"({"ph":"M","name":"thread_name","pid":1,"tid":%d,"args":{"name":%s}})", track.tid,
          detail::json_string(thread_name(track.tid))));
      append_event(absl::StrFormat(
          R"({"ph":"M","name":"thread_sort_index","pid":1,"tid":%d,"args":{"sort_index":%d}})",
          track.tid, track.tid));
    }
    // A span begun before this trace started has a start time of another epoch.
    const double start = start_us < 0 || start_us > end_us ? end_us : start_us;
    append_event(absl::StrFormat(
        R"({"ph":"X","cat":"%s","name":%s,"ts":%.3f,"dur":%.3f,"pid":1,"tid":%d,"args":{%s}})",
        category, detail::json_string(name), start, end_us - start, track.tid, args_json));
  }

 private:
  static std::string thread_name(int tid) {
    char os_name[16] = {};
    pthread_getname_np(pthread_self(), os_name, sizeof os_name);
    const bool main_thread = ::gettid() == ::getpid();
    return absl::StrFormat("%s %d (%s)", main_thread ? "main thread" : "thread", tid, os_name);
  }

  absl::Status write_error(int err) const {
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrFormat("trace: writing %s failed: %s; the trace is incomplete",
                                        path_, std::strerror(err)));
  }

  void append_event(std::string_view json) {
    if (!first_event_) buffer_ += ",\n";
    first_event_ = false;
    buffer_ += json;
    if (buffer_.size() >= kFlushBytes) write_buffer();
  }

  // After a failure the rest of the trace is dropped: the error says so.
  void write_buffer() {
    size_t done = 0;
    while (error_.ok() && done < buffer_.size()) {
      const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        error_ = write_error(errno);
      } else {
        done += static_cast<size_t>(n);
      }
    }
    buffer_.clear();
  }

  std::mutex mu_;
  int fd_ = -1;
  std::string path_;
  std::string buffer_;
  bool first_event_ = true;
  bool stopping_ = false;  // stop() is flushing the sources
  uint64_t generation_ = 0;  // counts start()s: 0 is never a trace
  absl::Status error_;
  // steady_clock ticks (nanoseconds) at start(); atomic: threads read it
  // without the mutex, as soon as they see the trace enabled.
  std::atomic<int64_t> epoch_ns_{0};
  std::atomic<bool> device_times_{true};
  // Taken before mu_, never after: a source's flush appends under mu_.
  std::mutex sources_mu_;
  std::vector<detail::TraceSource*> sources_;
};

// Never destroyed: threads and static destructors may still record while the
// process exits. g_exit_flush writes the trace out before that.
Tracer& tracer() {
  static Tracer* const t = new Tracer;
  return *t;
}

struct ExitFlush {
  ~ExitFlush() {
    if (tracer().path().empty()) return;
    if (auto st = tracer().stop(); !st.ok()) {
      std::fprintf(stderr, "sparkrt: %s\n", std::string(st.message()).c_str());
    }
  }
} g_exit_flush;

}  // namespace

namespace trace {

Range::Range(std::string_view name) {
  if (!enabled()) return;
  name_ = name.empty() ? std::string("(unnamed range)") : std::string(name);
  start_us_ = sparkrt::detail::trace_now_us();
}

Range::~Range() {
  if (!name_.empty()) sparkrt::detail::trace_span("user", name_, start_us_, "");
}

absl::Status start(const std::string& path, const Options& options) {
  return tracer().start(path, options);
}
absl::Status stop() { return tracer().stop(); }
std::string path() { return tracer().path(); }
}  // namespace trace

namespace detail {

double trace_now_us() { return tracer().now_us(); }

void trace_span(const char* category, std::string_view name, double start_us,
                std::string_view args_json) {
  tracer().span(category, name, start_us, args_json);
}

uint64_t trace_generation() { return tracer().generation(); }

bool trace_device_times() { return tracer().device_times(); }

void trace_append(uint64_t generation, std::string_view event_json) {
  tracer().append(generation, event_json);
}

void add_trace_source(TraceSource* source) { tracer().add_source(source); }
void remove_trace_source(TraceSource* source) { tracer().remove_source(source); }

void trace_launch(const std::string& module, const std::string& entry,
                  const SparkrtLaunchArgs& args, bool failed, double start_us) {
  trace_span("launch", entry, start_us,
             absl::StrFormat(
                 R"("module":%s,"entry":%s,"grid":[%d,%d,%d],"block":[%d,%d,%d],)"
                 R"("shared_mem":%d,"stream":%d,"arg_bytes":%d,"cluster":[%d,%d,%d],)"
                 R"("flags":%d,"failed":%s)",
                 json_string(module), json_string(entry), args.grid[0], args.grid[1],
                 args.grid[2], args.block[0], args.block[1], args.block[2],
                 args.shared_memory_bytes, args.stream, args.params_size, args.cluster[0],
                 args.cluster[1], args.cluster[2], args.flags, failed ? "true" : "false"));
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace detail
}  // namespace sparkrt
