#include "mock_device.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace sparkrt::mock {
namespace {

const char* kind_name(uint8_t kind) {
  switch (kind) {
    case SPARKRT_ARG_PTR: return "ptr";
    case SPARKRT_ARG_U32: return "u32";
    case SPARKRT_ARG_I32: return "i32";
    case SPARKRT_ARG_U64: return "u64";
    case SPARKRT_ARG_I64: return "i64";
    case SPARKRT_ARG_F32: return "f32";
    case SPARKRT_ARG_F64: return "f64";
    case SPARKRT_ARG_BYTES: return "bytes";
    default: return "unknown";
  }
}

const char* copy_name(SparkrtCopyKind kind) {
  switch (kind) {
    case SPARKRT_COPY_H2D: return "h2d";
    case SPARKRT_COPY_D2H: return "d2h";
    case SPARKRT_COPY_D2D: return "d2d";
  }
  return "unknown";
}

std::string code_name(absl::StatusCode code) { return absl::StatusCodeToString(code); }

template <typename T>
T load(std::span<const std::byte> bytes) {
  T v;
  std::memcpy(&v, bytes.data(), sizeof(T));
  return v;
}

template <typename F>
void append_float(std::string& out, F v, int digits) {
  if (std::isnan(v)) {
    out.append("\"nan\"");
  } else if (std::isinf(v)) {
    out.append(v > 0 ? "\"inf\"" : "\"-inf\"");
  } else {
    absl::StrAppendFormat(&out, "%.*g", digits, static_cast<double>(v));
  }
}

}  // namespace

MockDevice::MockDevice(uint64_t serial, void (*on_close)(sdk::Device*))
    : on_close_(on_close),
      memory_(kAddressBase + (serial % 4096) * kAddressSpan, kAddressSpan) {
  streams_[0] = StreamState{};  // the default stream always exists
  // Warm the launch record storage so early launches do not allocate.
  launches_.reserve(1024);
  args_.reserve(8192);
  arg_bytes_.reserve(64 * 1024);
  lookups_.reserve(64);
}

absl::Status MockDevice::close() {
  std::lock_guard lock(mu_);
  log_close();
  return log_.close();
}

void MockDevice::log_close() {
  if (log_.is_open()) {
    log_.begin("device_close");
    log_.field("live_allocations", memory_.live_count());
    log_.field("live_bytes", memory_.live_bytes());
    log_.end();
  }
}

MockDevice::~MockDevice() {
  if (on_close_ != nullptr) on_close_(this);
  std::lock_guard lock(mu_);
  log_close();  // when close() was not called: an open that failed half way
  // The device owns modules the runtime did not unload (plugin_api.h).
  for (MockModule* m : modules_) {
    m->device_closing_ = true;
    delete m;
  }
  modules_.clear();
  for (void* p : host_allocations_) ::operator delete(p, std::align_val_t{64});
}

namespace {

// SPARKRT_MOCK_PROPERTIES: comma-separated key=value pairs that change what
// the device reports, e.g. "multiprocessor_count=48,
// max_shared_memory_per_block_optin=101376" for a GB10-like part.
absl::Status parse_properties(absl::string_view text, uint32_t& multiprocessors,
                              uint32_t& shared_optin) {
  constexpr absl::string_view kKnown = "multiprocessor_count, max_shared_memory_per_block_optin";
  std::vector<absl::string_view> seen;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    const absl::string_view key = absl::StripAsciiWhitespace(item.substr(0, eq));
    // Which of two settings was meant is a guess; refuse rather than pick.
    if (eq != absl::string_view::npos && std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SPARKRT_MOCK_PROPERTIES: key '%s' is given twice in '%s'; give each key once", key,
          text));
    }
    seen.push_back(key);
    uint32_t value = 0;
    if (eq == absl::string_view::npos ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(item.substr(eq + 1)), &value) || value == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SPARKRT_MOCK_PROPERTIES: '%s' is not key=<positive integer> (keys: %s)", item, kKnown));
    }
    if (key == "multiprocessor_count") {
      multiprocessors = value;
    } else if (key == "max_shared_memory_per_block_optin") {
      if (value < 48 * 1024) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "SPARKRT_MOCK_PROPERTIES: max_shared_memory_per_block_optin %d is below the 49152 "
            "bytes every block may use",
            value));
      }
      shared_optin = value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("SPARKRT_MOCK_PROPERTIES: unknown key '%s' (keys: %s)", key, kKnown));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MockDevice::init_from_environment() {
  if (const char* props = std::getenv("SPARKRT_MOCK_PROPERTIES"); props != nullptr) {
    std::lock_guard lock(mu_);
    absl::Status s = parse_properties(props, multiprocessor_count_, shared_memory_optin_);
    if (!s.ok()) return s;
  }
  const char* path = std::getenv("SPARKRT_MOCK_LOG");
  if (path == nullptr || path[0] == '\0') return absl::OkStatus();
  std::lock_guard lock(mu_);
  // Appending: every mock device of a process (and of several processes)
  // lands in the one file.
  absl::Status s = log_.open(path, /*append=*/true);
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("SPARKRT_MOCK_LOG: ", s.message(), " (or unset SPARKRT_MOCK_LOG)"));
  }
  log_.begin("device_open");
  log_.field("device", "sparkrt mock device");
  log_.end();
  if (!log_.status().ok()) {
    // A file that takes no line (a full disk, /dev/full) fails the open
    // rather than every call after it.
    return absl::FailedPreconditionError(absl::StrCat(
        "SPARKRT_MOCK_LOG: ", log_.status().message(), " (or unset SPARKRT_MOCK_LOG)"));
  }
  return absl::OkStatus();
}

// ---- helpers (mu_ held) ---------------------------------------------------

const char* MockDevice::intern(std::string_view s) {
  auto it = names_.find(s);
  if (it == names_.end()) it = names_.emplace(s).first;
  return it->c_str();
}

absl::Status MockDevice::log_refusal(std::string_view call) {
  return note(call, absl::Status(log_.status().code(),
                                 absl::StrFormat("%s: refused: %s (set_log_path(\"\") or a new "
                                                 "path resumes)",
                                                 call, log_.status().message())));
}

absl::Status MockDevice::note(std::string_view call, absl::Status status) {
  if (!status.ok()) {
    ++counters_.errors;
    if (log_.is_open()) {
      log_.begin("error");
      log_.field("call", call);
      log_.field("code", code_name(status.code()));
      log_.end();
    }
  }
  return status;
}

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

// ---- device ---------------------------------------------------------------

absl::Status MockDevice::properties(SparkrtDeviceProperties& out) {
  std::snprintf(out.name, sizeof(out.name), "%s", "sparkrt mock device");
  out.architecture[0] = '\0';  // no native image format: PTX only
  out.total_memory = kTotalMemory;
  out.multiprocessor_count = multiprocessor_count_;
  out.warp_size = 32;
  out.max_threads_per_block = 1024;
  out.max_block_dim[0] = 1024;
  out.max_block_dim[1] = 1024;
  out.max_block_dim[2] = 64;
  out.max_grid_dim[0] = 0x7fffffffu;
  out.max_grid_dim[1] = 65535;
  out.max_grid_dim[2] = 65535;
  out.max_shared_memory_per_block = 48 * 1024;
  out.max_shared_memory_per_block_optin = shared_memory_optin_;
  out.compute_capability_major = 0;  // not a CUDA device
  out.compute_capability_minor = 0;
  out.image_formats = 1u << SPARKRT_IMAGE_PTX;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<sdk::Module>> MockDevice::load_module(
    std::string_view name, SparkrtImageFormat format, std::span<const std::byte> image) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("module_load");
  if (format != SPARKRT_IMAGE_PTX) {
    return note("module_load", absl::InvalidArgumentError(absl::StrFormat(
                                   "module_load(%s): image format %d is not PTX; the mock "
                                   "accepts PTX images only (see image_formats)",
                                   name, static_cast<int>(format))));
  }
  if (image.empty()) {
    return note("module_load", absl::InvalidArgumentError(absl::StrFormat(
                                   "module_load(%s): empty PTX image", name)));
  }
  std::string_view ptx(reinterpret_cast<const char*>(image.data()), image.size());
  if (const size_t nul = ptx.find('\0'); nul != std::string_view::npos) ptx = ptx.substr(0, nul);
  auto module = std::make_unique<MockModule>(*this, intern(name), ptx_entries(ptx));
  modules_.insert(module.get());
  ++counters_.module_loads;
  if (log_.is_open()) {
    scratch_.clear();  // not assign("["): GCC 12 -O3 reports a false -Wrestrict
    scratch_.push_back('[');
    for (size_t i = 0; i < module->entries_.size(); ++i) {
      if (i != 0) scratch_.push_back(',');
      JsonLog::append_string(scratch_, module->entries_[i]);
    }
    scratch_.push_back(']');
    log_.begin("module_load");
    log_.field("module", name);
    log_.field("format", "ptx");
    log_.raw_field("entries", scratch_);
    log_.end();
  }
  return std::unique_ptr<sdk::Module>(std::move(module));
}

void MockDevice::module_unloaded(MockModule& module) {
  std::lock_guard lock(mu_);
  modules_.erase(&module);
  if (log_.is_open()) {
    log_.begin("module_unload");
    log_.field("module", module.name_);
    log_.end();
  }
}

absl::StatusOr<sdk::Kernel*> MockDevice::resolve(MockModule& module, std::string_view entry,
                                                 std::span<const SparkrtParamInfo> params) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("kernel_get");
  ++counters_.lookups;
  const char* entry_name = intern(entry);
  LookupRecord& rec = lookups_.emplace_back(
      LookupRecord{module.name_, entry_name, absl::StatusCode::kOk, 0});
  absl::Status status;
  MockKernel* kernel = nullptr;
  const std::string_view module_name = module.name_;
  for (const Denial& d : denials_) {
    if ((d.module.empty() || d.module == module_name) && (d.entry.empty() || d.entry == entry)) {
      status = absl::Status(d.code, absl::StrFormat(
                                        "kernel_get(%s, %s): lookup denied by mock fault "
                                        "injection (deny_lookup, %s)",
                                        module_name, entry, code_name(d.code)));
      break;
    }
  }
  if (status.ok()) {
    const auto& entries = module.entries_;
    if (std::find(entries.begin(), entries.end(), entry) == entries.end()) {
      status = absl::NotFoundError(absl::StrFormat(
          "kernel_get: module '%s' has no entry '%s'; its entries are: %s", module_name, entry,
          entries.empty() ? std::string("(none)") : absl::StrJoin(entries, ", ")));
    }
  }
  if (status.ok()) {
    auto it = module.kernels_.find(std::string(entry));
    if (it == module.kernels_.end()) {
      it = module.kernels_
               .emplace(std::string(entry),
                        std::make_unique<MockKernel>(this, next_kernel_id_++, module.name_,
                                                     entry_name, params))
               .first;
    }
    kernel = it->second.get();
    rec.kernel_id = kernel->id;
  }
  rec.code = status.code();
  if (log_.is_open()) {
    log_.begin("kernel_get");
    log_.field("module", module_name);
    log_.field("entry", entry);
    log_.field("kernel", rec.kernel_id);
    log_.field("status", code_name(status.code()));
    log_.end();
  }
  if (!status.ok()) return note("kernel_get", status);
  return kernel;
}

absl::StatusOr<SparkrtDevicePtr> MockDevice::alloc(uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("mem_alloc");
  const uint64_t limit = memory_cap_ != 0 ? std::min(memory_cap_, kTotalMemory) : kTotalMemory;
  const uint64_t live = memory_.live_bytes();
  if (bytes > limit || live > limit - bytes) {
    return note("mem_alloc",
                absl::ResourceExhaustedError(absl::StrFormat(
                    "mem_alloc(%d bytes): out of device memory: %d bytes live in %d "
                    "allocations, limit %d bytes (%s); free memory or raise the cap",
                    bytes, live, memory_.live_count(), limit,
                    memory_cap_ != 0 && memory_cap_ < kTotalMemory
                        ? "memory cap set by mock fault injection (cap_memory)"
                        : "the mock's total_memory")));
  }
  auto a = memory_.allocate(bytes);
  if (!a.ok()) return note("mem_alloc", a.status());
  ++counters_.allocations;
  counters_.live_allocations = memory_.live_count();
  counters_.live_bytes = memory_.live_bytes();
  counters_.peak_live_bytes = std::max(counters_.peak_live_bytes, counters_.live_bytes);
  if (log_.is_open()) {
    log_.begin("alloc");
    log_.field("alloc", absl::StrCat("alloc#", (*a)->id));
    log_.field("bytes", bytes);
    log_.end();
  }
  return (*a)->base;
}

absl::Status MockDevice::free(SparkrtDevicePtr ptr) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("mem_free");
  auto a = memory_.release(ptr);
  if (!a.ok()) return note("mem_free", a.status());
  ++counters_.frees;
  counters_.live_allocations = memory_.live_count();
  counters_.live_bytes = memory_.live_bytes();
  if (log_.is_open()) {
    log_.begin("free");
    log_.field("alloc", absl::StrCat("alloc#", (*a)->id));
    log_.end();
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> MockDevice::host_alloc(uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("host_alloc");
  if (bytes == 0) {
    return note("host_alloc", absl::InvalidArgumentError("host_alloc: 0 bytes requested"));
  }
  void* p = ::operator new(bytes, std::align_val_t{64}, std::nothrow);
  if (p == nullptr) {
    return note("host_alloc", absl::ResourceExhaustedError(absl::StrFormat(
                                  "host_alloc(%d bytes): out of host memory", bytes)));
  }
  host_allocations_.insert(p);
  ++counters_.host_allocations;
  if (log_.is_open()) {
    log_.begin("host_alloc");
    log_.field("bytes", bytes);
    log_.end();
  }
  return p;
}

absl::Status MockDevice::host_free(void* ptr) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("host_free");
  if (host_allocations_.erase(ptr) == 0) {
    return note("host_free", absl::InvalidArgumentError(absl::StrFormat(
                                 "host_free: %p was not returned by host_alloc of this device "
                                 "(or was already freed)",
                                 ptr)));
  }
  ::operator delete(ptr, std::align_val_t{64});
  ++counters_.host_frees;
  if (log_.is_open()) {
    log_.begin("host_free");
    log_.end();
  }
  return absl::OkStatus();
}

absl::Status MockDevice::memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes,
                                SparkrtStream stream, bool blocking) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("memset");
  auto s = find_stream(stream, "memset");
  if (!s.ok()) return note("memset", s.status());
  if (!blocking && graphs_.capturing(stream)) return graphs_.capture_memset(stream, dst, value, bytes);
  if (absl::Status filled = memory_.fill(dst, value, bytes); !filled.ok()) {
    return note("memset", filled);
  }
  ++tick_;
  if (blocking) {
    ++counters_.memsets_blocking;
  } else {
    ++counters_.memsets_async;
    ++(*s)->counters.memsets_async;
  }
  if (log_.is_open()) {
    log_.begin("memset");
    log_.field("dst", memory_.describe(dst));
    log_.field("value", uint64_t{value});
    log_.field("bytes", bytes);
    log_.field("stream", stream);
    log_.field("blocking", blocking);
    log_.end();
  }
  return absl::OkStatus();
}

absl::Status MockDevice::memcpy(const SparkrtMemcpyArgs& copy) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("memcpy");
  const bool blocking = copy.blocking != 0;
  const uint64_t bytes = copy.bytes;
  auto s = find_stream(copy.stream, "memcpy");
  if (!s.ok()) return note("memcpy", s.status());
  if (!blocking && graphs_.capturing(copy.stream)) return graphs_.capture_copy(copy.stream, copy);
  if (absl::Status moved = memory_.copy(copy); !moved.ok()) return note("memcpy", moved);
  // Counted by direction; copy() has accepted the kind.
  auto count = [&](uint64_t& total, uint64_t& blocking_calls, uint64_t& async_calls,
                   uint64_t& stream_async_calls) {
    total += bytes;
    if (blocking) {
      ++blocking_calls;
    } else {
      ++async_calls;
      ++stream_async_calls;
    }
  };
  SparkrtMockStreamCounters& on_stream = (*s)->counters;
  switch (copy.kind) {
    case SPARKRT_COPY_H2D:
      count(counters_.bytes_h2d, counters_.h2d_blocking, counters_.h2d_async, on_stream.h2d_async);
      break;
    case SPARKRT_COPY_D2H:
      count(counters_.bytes_d2h, counters_.d2h_blocking, counters_.d2h_async, on_stream.d2h_async);
      break;
    case SPARKRT_COPY_D2D:
      count(counters_.bytes_d2d, counters_.d2d_blocking, counters_.d2d_async, on_stream.d2d_async);
      break;
  }
  ++tick_;
  if (log_.is_open()) {
    log_.begin("copy");
    log_.field("kind", copy_name(copy.kind));
    if (copy.kind != SPARKRT_COPY_H2D) log_.field("src", memory_.describe(copy.src_device));
    if (copy.kind != SPARKRT_COPY_D2H) log_.field("dst", memory_.describe(copy.dst_device));
    log_.field("bytes", bytes);
    log_.field("stream", copy.stream);
    log_.field("blocking", blocking);
    log_.end();
  }
  return absl::OkStatus();
}

// ---- streams and events ---------------------------------------------------

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

// ---- launch ---------------------------------------------------------------

absl::Status MockDevice::launch(const sdk::Launch& l) {
  const auto* kernel = static_cast<const MockKernel*>(l.kernel);
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("launch");
  if (kernel->device != this) {
    return note("launch", absl::InvalidArgumentError(absl::StrFormat(
                              "launch(%s): the kernel was resolved on another device",
                              kernel->entry)));
  }
  auto s = find_stream(l.stream, "launch");
  if (!s.ok()) return note("launch", s.status());
  // The runtime checks arguments against the PTX signature before calling; a
  // mismatch here means a caller bypassed or broke that check.
  const size_t n = l.arg_sizes.size();
  if (n != kernel->params.size()) {
    return note("launch", absl::InvalidArgumentError(absl::StrFormat(
                              "launch(%s): %d parameters declared at kernel_get, %d given "
                              "(the caller skipped the signature check)",
                              kernel->entry, kernel->params.size(), n)));
  }
  for (size_t i = 0; i < n; ++i) {
    if (l.arg_sizes[i] != kernel->params[i].size || l.arg_offsets[i] > l.params.size() ||
        l.arg_sizes[i] > l.params.size() - l.arg_offsets[i]) {
      return note("launch", absl::InvalidArgumentError(absl::StrFormat(
                                "launch(%s): argument #%d is %d bytes at offset %d of a %d-byte "
                                "buffer; the kernel declares %d bytes",
                                kernel->entry, i, l.arg_sizes[i], l.arg_offsets[i],
                                l.params.size(), kernel->params[i].size)));
    }
  }
  // What a GPU would fault on once the kernel dereferenced it (or, for freed
  // memory, silently read): refused here, naming it. Only 8-byte parameters
  // can hold a pointer, and their sizes and offsets were checked above.
  const std::byte* params = l.params.data();
  for (const uint32_t i : kernel->wide_params) {
    if (l.arg_kinds[i] != SPARKRT_ARG_PTR) continue;
    uint64_t ptr;
    std::memcpy(&ptr, params + l.arg_offsets[i], sizeof ptr);
    if (!memory_.valid_pointer_argument(ptr)) {
      return note("launch", absl::InvalidArgumentError(absl::StrFormat(
                                "launch(%s, module %s): pointer argument #%d points into no live "
                                "allocation: %s (a kernel may be given null, an address inside a "
                                "live allocation, or one past its end)",
                                kernel->entry, kernel->module, i,
                                memory_.pointer_argument_error(ptr))));
    }
  }
  if (graphs_.capturing(l.stream)) return graphs_.capture_launch(l.stream, l);
  if (fail_countdown_ != 0 && --fail_countdown_ == 0) {
    ++counters_.launches_failed;
    return note("launch", absl::Status(fail_code_,
                                       absl::StrFormat("launch(%s, module %s): failed by mock "
                                                       "fault injection (fail_launch: launch %d "
                                                       "after arming, %s)",
                                                       kernel->entry, kernel->module,
                                                       counters_.launches - fail_armed_at_ + 1,
                                                       code_name(fail_code_))));
  }
  ++tick_;
  const uint64_t sequence = ++counters_.launches;
  ++(*s)->counters.launches;
  if (record_launches_ && launches_.size() < max_launch_records_) {
    launches_.push_back(LaunchRecord{kernel->module,
                                     kernel->entry,
                                     kernel->id,
                                     {l.grid[0], l.grid[1], l.grid[2]},
                                     {l.block[0], l.block[1], l.block[2]},
                                     l.shared_memory_bytes,
                                     l.stream,
                                     args_.size(),
                                     static_cast<uint32_t>(n),
                                     sequence});
    for (size_t i = 0; i < n; ++i) {
      args_.push_back(ArgRecord{arg_bytes_.size(), l.arg_sizes[i], l.arg_kinds[i]});
      const std::byte* p = l.params.data() + l.arg_offsets[i];
      arg_bytes_.insert(arg_bytes_.end(), p, p + l.arg_sizes[i]);
    }
  } else {
    ++counters_.launch_records_dropped;
  }
  if (log_.is_open()) log_launch(l, *kernel);
  return absl::OkStatus();
}

void MockDevice::append_arg_json(std::string& out, uint8_t kind,
                                 std::span<const std::byte> bytes) const {
  out.push_back('{');
  JsonLog::append_string(out, kind_name(kind));
  out.push_back(':');
  const size_t n = bytes.size();
  if (kind == SPARKRT_ARG_PTR && n == 8) {
    JsonLog::append_string(out, memory_.describe(load<uint64_t>(bytes)));
  } else if (kind == SPARKRT_ARG_U32 && n == 4) {
    absl::StrAppend(&out, load<uint32_t>(bytes));
  } else if (kind == SPARKRT_ARG_I32 && n == 4) {
    absl::StrAppend(&out, load<int32_t>(bytes));
  } else if (kind == SPARKRT_ARG_U64 && n == 8) {
    absl::StrAppend(&out, load<uint64_t>(bytes));
  } else if (kind == SPARKRT_ARG_I64 && n == 8) {
    absl::StrAppend(&out, load<int64_t>(bytes));
  } else if (kind == SPARKRT_ARG_F32 && n == 4) {
    append_float(out, load<float>(bytes), 9);
  } else if (kind == SPARKRT_ARG_F64 && n == 8) {
    append_float(out, load<double>(bytes), 17);
  } else {
    out.push_back('"');
    for (std::byte b : bytes) absl::StrAppendFormat(&out, "%02x", static_cast<unsigned>(b));
    out.push_back('"');
  }
  out.push_back('}');
}

void MockDevice::log_launch(const sdk::Launch& l, const MockKernel& kernel) {
  log_.begin("launch");
  log_.field("n", counters_.launches);
  log_.field("module", kernel.module);
  log_.field("entry", kernel.entry);
  log_.field("kernel", kernel.id);
  scratch_.clear();
  absl::StrAppend(&scratch_, "[", l.grid[0], ",", l.grid[1], ",", l.grid[2], "]");
  log_.raw_field("grid", scratch_);
  scratch_.clear();
  absl::StrAppend(&scratch_, "[", l.block[0], ",", l.block[1], ",", l.block[2], "]");
  log_.raw_field("block", scratch_);
  log_.field("shared_mem", uint64_t{l.shared_memory_bytes});
  log_.field("stream", l.stream);
  scratch_.clear();  // not assign("["): GCC 12 -O3 reports a false -Wrestrict
  scratch_.push_back('[');
  for (size_t i = 0; i < l.arg_sizes.size(); ++i) {
    if (i != 0) scratch_.push_back(',');
    append_arg_json(scratch_, l.arg_kinds[i], l.params.subspan(l.arg_offsets[i], l.arg_sizes[i]));
  }
  scratch_.push_back(']');
  log_.raw_field("args", scratch_);
  log_.end();
}

// ---- extension ------------------------------------------------------------

void MockDevice::reset() {
  std::lock_guard lock(mu_);
  counters_ = SparkrtMockCounters{};
  counters_.live_allocations = memory_.live_count();
  counters_.live_bytes = memory_.live_bytes();
  counters_.peak_live_bytes = counters_.live_bytes;
  for (auto& [handle, state] : streams_) {
    state.counters = SparkrtMockStreamCounters{};
    state.counters.destroyed = state.destroyed ? 1 : 0;
  }
  lookups_.clear();
  launches_.clear();  // clear() keeps capacity: no re-warming needed
  args_.clear();
  arg_bytes_.clear();
  denials_.clear();
  memory_cap_ = 0;
  fail_countdown_ = 0;
  if (log_.is_open()) {
    log_.begin("reset");
    log_.end();
  }
}

void MockDevice::counters(SparkrtMockCounters& out) {
  std::lock_guard lock(mu_);
  const size_t size = out.struct_size;
  out = counters_;
  out.struct_size = size;
}

absl::Status MockDevice::stream_counters(SparkrtStream stream, SparkrtMockStreamCounters& out) {
  std::lock_guard lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    return absl::NotFoundError(absl::StrFormat(
        "get_stream_counters: stream %d was never created on this device; streams: %s", stream,
        live_streams()));
  }
  const size_t size = out.struct_size;
  out = it->second.counters;
  out.struct_size = size;
  return absl::OkStatus();
}

uint64_t MockDevice::lookup_count() {
  std::lock_guard lock(mu_);
  return lookups_.size();
}

absl::Status MockDevice::lookup(uint64_t index, SparkrtMockLookup& out) {
  std::lock_guard lock(mu_);
  if (index >= lookups_.size()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "get_lookup: index %d, but %d lookups are recorded", index, lookups_.size()));
  }
  const LookupRecord& r = lookups_[index];
  out.module = r.module;
  out.entry = r.entry;
  out.code = static_cast<int32_t>(r.code);
  out.kernel_id = r.kernel_id;
  return absl::OkStatus();
}

uint64_t MockDevice::launch_count() {
  std::lock_guard lock(mu_);
  return launches_.size();
}

absl::Status MockDevice::launch_record(uint64_t index, SparkrtMockLaunch& out) {
  std::lock_guard lock(mu_);
  if (index >= launches_.size()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "get_launch: index %d, but %d launches are recorded", index, launches_.size()));
  }
  const LaunchRecord& r = launches_[index];
  out.module = r.module;
  out.entry = r.entry;
  out.kernel_id = r.kernel_id;
  std::copy(std::begin(r.grid), std::end(r.grid), out.grid);
  std::copy(std::begin(r.block), std::end(r.block), out.block);
  out.shared_memory_bytes = r.shared_memory_bytes;
  out.stream = r.stream;
  out.num_args = r.num_args;
  out.sequence = r.sequence;
  return absl::OkStatus();
}

absl::Status MockDevice::launch_arg(uint64_t index, uint32_t arg, SparkrtMockArg& out) {
  std::lock_guard lock(mu_);
  if (index >= launches_.size()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "get_launch_arg: launch index %d, but %d launches are recorded", index,
        launches_.size()));
  }
  const LaunchRecord& r = launches_[index];
  if (arg >= r.num_args) {
    return absl::OutOfRangeError(absl::StrFormat(
        "get_launch_arg: argument %d of launch %d (%s), which has %d arguments", arg, index,
        r.entry, r.num_args));
  }
  const ArgRecord& a = args_[r.first_arg + arg];
  out.kind = a.kind;
  out.size = a.size;
  if (out.bytes != nullptr && out.capacity != 0) {
    std::memcpy(out.bytes, arg_bytes_.data() + a.offset, std::min(a.size, out.capacity));
  }
  return absl::OkStatus();
}

absl::Status MockDevice::pointer_info(SparkrtDevicePtr ptr, SparkrtMockPointerInfo& out) {
  std::lock_guard lock(mu_);
  const sdk::Allocation* a = memory_.find(ptr);
  if (a == nullptr) {
    return absl::NotFoundError(absl::StrFormat(
        "pointer_info: 0x%x is not inside any live or remembered allocation", ptr));
  }
  out.alloc_id = a->id;
  out.base = a->base;
  out.size = a->size;
  out.offset = ptr - a->base;
  out.live = a->live ? 1 : 0;
  return absl::OkStatus();
}

void MockDevice::deny_lookup(std::string module, std::string entry, absl::StatusCode code) {
  std::lock_guard lock(mu_);
  denials_.push_back(Denial{std::move(module), std::move(entry), code});
}

void MockDevice::cap_memory(uint64_t bytes) {
  std::lock_guard lock(mu_);
  memory_cap_ = bytes;
}

void MockDevice::fail_launch(uint64_t nth, absl::StatusCode code) {
  std::lock_guard lock(mu_);
  fail_countdown_ = nth;
  fail_code_ = code;
  fail_armed_at_ = counters_.launches;
}

void MockDevice::clear_faults() {
  std::lock_guard lock(mu_);
  denials_.clear();
  memory_cap_ = 0;
  fail_countdown_ = 0;
}

void MockDevice::set_recording(bool record_launches, uint64_t max_launch_records) {
  std::lock_guard lock(mu_);
  record_launches_ = record_launches;
  max_launch_records_ = max_launch_records;
}

absl::Status MockDevice::set_log_path(std::string_view path) {
  std::lock_guard lock(mu_);
  // A write failure of the file being left is reported here if no call has
  // reported it yet; the switch happens either way.
  absl::Status previous = log_.close();
  if (!path.empty()) {
    if (absl::Status s = log_.open(std::string(path), /*append=*/false); !s.ok()) return s;
  }
  return previous;
}

}  // namespace sparkrt::mock
