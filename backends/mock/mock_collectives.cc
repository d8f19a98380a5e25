// Collectives on the mock (sparkrt/sdk/host_collectives.h moves the bytes):
// the device's side of them, checked like a copy, and the records and log
// lines of each collective call.
#include "absl/strings/str_format.h"
#include "mock_device.h"
#include "sparkrt/abi_names.h"

namespace sparkrt::mock {

absl::Status MockDevice::with_collective_memory(SparkrtStream stream, std::string_view call,
                                                CollectiveMemoryFn fn) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal(call);
  auto s = find_stream(stream, call);
  if (!s.ok()) return s.status();
  if (graphs_.capturing(stream)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s on stream %d, which is capturing a graph: the mock does not record collectives "
        "into graphs; issue them outside the capture",
        call, stream));
  }
  return fn(memory_);
}

void MockDevice::on_collective(const sdk::HostCollectiveCall& c) {
  std::lock_guard lock(mu_);
  SparkrtMockCollective r{};
  r.struct_size = SPARKRT_MOCK_COLLECTIVE_SIZE;
  r.comm = c.comm;
  r.kind = c.kind;
  r.dtype = c.dtype;
  r.reduce_op = c.reduce_op;
  r.peer = c.peer;
  r.count = c.count;
  r.stream = c.stream;
  r.sequence = collectives_.size() + 1;
  r.code = static_cast<int32_t>(c.code);
  collectives_.push_back(r);
  if (log_.is_open()) {
    log_.begin("collective");
    log_.field("comm", uint64_t{c.comm});
    log_.field("kind", abi_collective_kind_name(c.kind));
    log_.field("dtype", abi_data_type_name(c.dtype));
    if (c.kind == SPARKRT_COLLECTIVE_ALL_REDUCE || c.kind == SPARKRT_COLLECTIVE_REDUCE_SCATTER)
      log_.field("reduce", abi_reduce_op_name(c.reduce_op));
    if (c.kind == SPARKRT_COLLECTIVE_BROADCAST || c.kind == SPARKRT_COLLECTIVE_SEND ||
        c.kind == SPARKRT_COLLECTIVE_RECV)
      log_.field("peer", uint64_t(uint32_t(c.peer)));
    log_.field("count", c.count);
    log_.field("stream", c.stream);
    log_.field("code", absl::StatusCodeToString(c.code));
    log_.end();
  }
}

uint64_t MockDevice::collective_count() {
  std::lock_guard lock(mu_);
  return collectives_.size();
}

absl::Status MockDevice::collective_record(uint64_t index, SparkrtMockCollective& out) {
  std::lock_guard lock(mu_);
  if (index >= collectives_.size()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "get_collective: index %d, but %d collectives are recorded", index, collectives_.size()));
  }
  const size_t size = out.struct_size;
  out = collectives_[index];
  out.struct_size = size;
  return absl::OkStatus();
}

}  // namespace sparkrt::mock
