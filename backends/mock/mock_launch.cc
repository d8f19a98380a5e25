// Launches on the mock: checked (arguments against the signature declared at
// kernel_get; pointer arguments against live allocations, where a GPU would
// fault), counted, recorded into flat vectors that do not allocate once warm,
// and written to the JSON log with each argument by kind.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mock_device.h"
#include "sparkrt/abi_names.h"

namespace sparkrt::mock {
namespace {

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
                                                       absl::StatusCodeToString(fail_code_))));
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
                                     sequence,
                                     l.flags,
                                     {l.cluster[0], l.cluster[1], l.cluster[2]}});
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
  JsonLog::append_string(out, abi_arg_kind_name(kind));
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
  // Only launches with attributes carry these, so older traces read the same.
  if ((l.flags & SPARKRT_LAUNCH_DEPENDENT) != 0) log_.field("dependent", true);
  if (l.cluster != std::array<uint32_t, 3>{0, 0, 0}) {
    scratch_.clear();
    absl::StrAppend(&scratch_, "[", l.cluster[0], ",", l.cluster[1], ",", l.cluster[2], "]");
    log_.raw_field("cluster", scratch_);
  }
  log_.end();
}

}  // namespace sparkrt::mock
