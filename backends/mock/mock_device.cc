// The mock device's lifetime (open, close, the modules it still owns) and the
// helpers every part of it uses: interned names and the error note that
// counts and logs a failed call. The calls themselves are defined by
// responsibility: mock_options.cc (properties and the environment),
// mock_module.cc, mock_memory.cc, mock_streams.cc, mock_launch.cc and
// mock_inspect.cc (the sparkrt.mock.v1 extension).
#include "mock_device.h"

#include <new>

#include "absl/strings/str_format.h"

namespace sparkrt::mock {

MockDevice::MockDevice(uint64_t serial, int index, void (*on_close)(sdk::Device*))
    : sdk::HostCollectiveDevice(*this, index),
      on_close_(on_close),
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
  // Its cliques end while its memory and lock still exist.
  close_collectives();
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
      log_.field("code", absl::StatusCodeToString(status.code()));
      log_.end();
    }
  }
  return status;
}

}  // namespace sparkrt::mock
