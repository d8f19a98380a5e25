// The sparkrt.mock.v1 extension on the device side (sparkrt/extensions/mock.h):
// the records and counters read back, reset, fault injection, and the
// recording and log switches.
#include <algorithm>
#include <cstring>
#include <iterator>

#include "absl/strings/str_format.h"
#include "mock_device.h"

namespace sparkrt::mock {

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
  collectives_.clear();
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

absl::Status MockDevice::launch_attributes(uint64_t index, SparkrtMockLaunchAttributes& out) {
  std::lock_guard lock(mu_);
  if (index >= launches_.size()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "get_launch_attributes: index %d, but %d launches are recorded", index,
        launches_.size()));
  }
  const LaunchRecord& r = launches_[index];
  out.flags = r.flags;
  std::copy(std::begin(r.cluster), std::end(r.cluster), out.cluster);
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
