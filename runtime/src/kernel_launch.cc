// The launch path: validate against the signature and the device limits,
// then one call through the plugin table. Nothing here allocates unless a
// check fails and a message must be built.
#include "sparkrt/kernel_launch.h"

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "device_state.h"
#include "trace_span.h"

namespace sparkrt {
namespace {

const char* kind_name(uint8_t kind) {
  switch (static_cast<ArgKind>(kind)) {
    case ArgKind::kPtr: return "DevicePtr";
    case ArgKind::kU32: return "uint32_t";
    case ArgKind::kI32: return "int32_t";
    case ArgKind::kU64: return "uint64_t";
    case ArgKind::kI64: return "int64_t";
    case ArgKind::kF32: return "float";
    case ArgKind::kF64: return "double";
    case ArgKind::kBytes: return "struct";
  }
  return "?";
}

// How a type message names a kind: in PTX's terms, so it reads against the
// declared type.
const char* kind_ptx_name(uint8_t kind) {
  switch (static_cast<ArgKind>(kind)) {
    case ArgKind::kPtr: return "a device pointer";
    case ArgKind::kU32: return "u32";
    case ArgKind::kI32: return "s32";
    case ArgKind::kU64: return "u64";
    case ArgKind::kI64: return "s64";
    case ArgKind::kF32: return "f32";
    case ArgKind::kF64: return "f64";
    case ArgKind::kBytes: return "a struct";
  }
  return "?";
}

constexpr uint16_t bit(ArgKind k) { return static_cast<uint16_t>(1u << static_cast<unsigned>(k)); }

// The argument kinds a parameter takes (sizes are checked separately).
// .f32/.f64 take floats of that width; .u*/.s* integers of either signedness,
// 64-bit ones device pointers too; .b* anything of their width; arrays
// structs. C++ has no 8/16-bit argument kind (arg() refuses them), so 1- and
// 2-byte parameters take structs of their size.
uint16_t accepted_kinds(ParamType type) {
  constexpr uint16_t kInt32 = bit(ArgKind::kU32) | bit(ArgKind::kI32);
  constexpr uint16_t kInt64 = bit(ArgKind::kU64) | bit(ArgKind::kI64) | bit(ArgKind::kPtr);
  switch (type) {
    case ParamType::kU32:
    case ParamType::kS32: return kInt32;
    case ParamType::kU64:
    case ParamType::kS64: return kInt64;
    case ParamType::kF32: return bit(ArgKind::kF32);
    case ParamType::kF64: return bit(ArgKind::kF64);
    case ParamType::kB32: return kInt32 | bit(ArgKind::kF32) | bit(ArgKind::kBytes);
    case ParamType::kB64: return kInt64 | bit(ArgKind::kF64) | bit(ArgKind::kBytes);
    case ParamType::kU8:
    case ParamType::kS8:
    case ParamType::kU16:
    case ParamType::kS16:
    case ParamType::kB8:
    case ParamType::kB16:
    case ParamType::kF16:
    case ParamType::kBytes: return bit(ArgKind::kBytes);
  }
  return 0;
}

// What to pass instead, for the type message.
std::string advice(const Param& p) {
  switch (p.type) {
    case ParamType::kU32:
    case ParamType::kS32: return "pass a uint32_t or int32_t";
    case ParamType::kU64:
    case ParamType::kS64: return "pass a uint64_t, int64_t or DevicePtr";
    case ParamType::kF32: return "pass a float";
    case ParamType::kF64: return "pass a double";
    case ParamType::kB32:
    case ParamType::kB64: return "pass any 4- or 8-byte value";
    default: return absl::StrFormat("pass a trivially copyable struct of %d bytes", p.size);
  }
}

std::string dims(Dim3 d) { return absl::StrFormat("(%d, %d, %d)", d.x, d.y, d.z); }

absl::Status check_dims(const std::string& entry, const char* what, Dim3 d, Dim3 limit) {
  if (d.x == 0 || d.y == 0 || d.z == 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s %s has a zero dimension%s", entry, what, dims(d),
        d == Dim3{0, 0, 0} ? absl::StrFormat(" (was .%s() called?)", what) : ""));
  if (d.x > limit.x || d.y > limit.y || d.z > limit.z)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s %s exceeds the device limit %s", entry, what, dims(d), dims(limit)));
  return absl::OkStatus();
}

Dim3 dim3_of(const uint32_t (&v)[3]) { return Dim3{v[0], v[1], v[2]}; }

// The plugin's refusal of a launch, with what it was asked.
[[gnu::cold]] absl::Status launch_error(const detail::KernelRecord& k, detail::DeviceState& s,
                                        SparkrtError* e, const SparkrtLaunchArgs& a) {
  return s.plugin->status(
      e, absl::StrFormat("%s: launch %s.%s grid %s block %s shared %d stream %d", s.plugin->name(),
                         k.module, k.signature.entry, dims(dim3_of(a.grid)),
                         dims(dim3_of(a.block)), a.shared_memory_bytes, a.stream));
}

// A launch while tracing: its host span, and its device span when the trace
// takes device times.
[[gnu::cold]] absl::Status traced_launch(const detail::KernelRecord& k, detail::DeviceState& s,
                                         SparkrtLaunchArgs& args, double trace_start) {
  const detail::DeviceTimeline::Mark mark = s.timeline->begin(args.stream);
  SparkrtError* const e = s.api->launch(&args);
  detail::trace_launch(k.module, k.signature.entry, args, e != nullptr, trace_start);
  if (mark)
    s.timeline->end(mark, args.stream, e == nullptr, "launch", k.signature.entry,
                    absl::StrFormat(R"("module":%s,"grid":[%d,%d,%d],"block":[%d,%d,%d],"flags":%d)",
                                    detail::json_string(k.module), args.grid[0], args.grid[1],
                                    args.grid[2], args.block[0], args.block[1], args.block[2],
                                    args.flags));
  if (e != nullptr) return launch_error(k, s, e, args);
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<detail::KernelRecord> detail::make_kernel_record(const DeviceState* owner,
                                                                 std::string module,
                                                                 SparkrtImageFormat image,
                                                                 const KernelSignature& signature,
                                                                 SparkrtKernel* native) {
  auto r = std::make_unique<KernelRecord>();
  r->owner = owner;
  r->module = std::move(module);
  r->image = image;
  r->signature = signature;
  r->native = native;
  for (const Param& p : signature.params) {
    r->offsets.push_back(p.offset);
    r->sizes.push_back(p.size);
    r->accepted_kinds.push_back(accepted_kinds(p.type));
  }
  r->required_block = signature.directives.reqntid;
  if (signature.directives.maxntid.x != 0) r->max_threads = signature.directives.maxntid.volume();
  return r;
}

absl::Status KernelLaunch::signature_error(const detail::KernelRecord& k) const {
  const KernelSignature& sig = k.signature;
  const uint32_t declared = static_cast<uint32_t>(sig.params.size());
  if (num_args_ != declared) {
    std::string detail;
    if (num_args_ < declared) {
      const Param& p = sig.params[num_args_];
      detail = absl::StrFormat("missing #%d %s", num_args_, param_type_name(p.type, p.size));
    } else {
      detail = absl::StrFormat("extra #%d %s", declared, kind_name(kinds_[declared]));
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d parameters declared, %d given (%s)", sig.entry, declared, num_args_, detail));
  }
  for (uint32_t i = 0; i < num_args_; ++i) {
    const Param& p = sig.params[i];
    if (sizes_[i] != p.size)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: parameter #%d (%s) is %s (%d bytes), given %s (%d bytes)", sig.entry, i, p.name,
          param_type_name(p.type, p.size), p.size, kind_name(kinds_[i]), sizes_[i]));
    if (offsets_[i] != p.offset)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: parameter #%d (%s) is declared at offset %d (.align %d), given at %d (alignment "
          "%d); give the struct the kernel's alignment with alignas(%d)",
          sig.entry, i, p.name, p.offset, p.align, offsets_[i], aligns_[i], p.align));
  }
  for (uint32_t i = 0; i < num_args_; ++i) {
    const Param& p = sig.params[i];
    if ((k.accepted_kinds[i] >> kinds_[i] & 1) == 0)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: parameter #%d is %s, given %s (%s, for '%s'); %s", sig.entry, i,
          param_type_name(p.type, p.size), kind_ptx_name(kinds_[i]), kind_name(kinds_[i]), p.name,
          advice(p)));
  }
  return absl::InternalError(absl::StrFormat("%s: argument check failed", sig.entry));
}

absl::Status KernelLaunch::limits_error(const detail::KernelRecord& k,
                                        const DeviceProperties& props) const {
  const std::string& entry = k.signature.entry;
  if (auto st = check_dims(entry, "grid", grid_, props.max_grid_dim); !st.ok()) return st;
  if (auto st = check_dims(entry, "block", block_, props.max_block_dim); !st.ok()) return st;
  if (block_.volume() > props.max_threads_per_block)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: block %s has %d threads, the device allows %d per block", entry, dims(block_),
        block_.volume(), props.max_threads_per_block));
  const EntryDirectives& d = k.signature.directives;
  if (k.required_block.x != 0 && block_ != k.required_block)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: block %s, but the kernel declares .reqntid %s: launch it with exactly that block",
        entry, dims(block_), dims(d.reqntid)));
  if (block_.volume() > k.max_threads)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: block %s has %d threads, but the kernel declares .maxntid %s (at most %d threads)",
        entry, dims(block_), block_.volume(), dims(d.maxntid), k.max_threads));
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: %d bytes of dynamic shared memory requested, the device allows %d per block", entry,
      shared_mem_, props.max_shared_memory_per_block_optin));
}

absl::Status KernelLaunch::check_attributes(const detail::KernelRecord& k,
                                            const detail::DeviceState& s) const {
  const std::string& entry = k.signature.entry;
  if (s.api->abi_minor < 4)
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: launch attributes (%s) need a plugin of ABI 1.4 or later, but plugin '%s' (%s) "
        "speaks ABI %d.%d; rebuild the plugin against this sparkrt or launch without them",
        entry, (flags_ & s.launch_flags) != 0 ? "dependent launch" : "cluster", s.plugin->name(),
        s.plugin->path(), s.api->abi_major, s.api->abi_minor));
  if (cluster_ == Dim3{0, 0, 0}) return absl::OkStatus();
  if (cluster_.x == 0 || cluster_.y == 0 || cluster_.z == 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: cluster %s has a zero dimension; give at least 1 block in each, or (0, 0, 0) for "
        "no cluster",
        entry, dims(cluster_)));
  const DeviceProperties& props = s.properties;
  if (!props.supports_clusters)
    return absl::UnimplementedError(absl::StrFormat(
        "%s: cluster %s requested, but device '%s' (%s backend) does not support thread-block "
        "clusters",
        entry, dims(cluster_), props.name, s.plugin->name()));
  if (grid_.x % cluster_.x != 0 || grid_.y % cluster_.y != 0 || grid_.z % cluster_.z != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: grid %s is not a multiple of cluster %s in every dimension", entry, dims(grid_),
        dims(cluster_)));
  if (cluster_.volume() > props.max_cluster_size)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: cluster %s has %d blocks, the device allows %d per cluster", entry, dims(cluster_),
        cluster_.volume(), props.max_cluster_size));
  return absl::OkStatus();
}

// Inlined into launch(): the argument check is most of its own cost.
[[gnu::always_inline]] inline absl::Status KernelLaunch::check_args(
    const detail::KernelRecord& k) const {
  const KernelSignature& sig = k.signature;
  if (bad_align_ != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: a struct argument is aligned to %d bytes; give a power of two from 1 to 128",
        sig.entry, bad_align_ == UINT32_MAX ? 0 : bad_align_));
  if (overflow_)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: more than %d arguments or %d bytes of parameters given", sig.entry, kMaxArgs,
        kMaxParamBytes));

  // The signature check: the classic silent bug is an argument missing or of
  // the wrong width, which shifts every later argument. Fast path first; the
  // message is built only on failure.
  const uint32_t declared = static_cast<uint32_t>(k.sizes.size());
  const bool args_match =
      num_args_ == declared &&
      (declared == 0 ||  // memcmp must not see the empty vectors' null data()
       (std::memcmp(sizes_, k.sizes.data(), declared * sizeof(uint32_t)) == 0 &&
        std::memcmp(offsets_, k.offsets.data(), declared * sizeof(uint32_t)) == 0));
  uint32_t kinds_fit = 1;
  for (uint32_t i = 0; i < num_args_ && args_match; ++i)
    kinds_fit &= k.accepted_kinds[i] >> kinds_[i];
  if (!args_match || (kinds_fit & 1) == 0) return signature_error(k);
  return absl::OkStatus();
}

absl::Status KernelLaunch::check_layout(CheckedLayout& out) const {
  if (!kernel_)
    return absl::InvalidArgumentError("launch: empty Kernel handle; resolve it with Device::kernel");
  const detail::KernelRecord& k = *kernel_.record_;
  if (auto st = check_args(k); !st.ok()) return st;
  out.kernel = &k;
  out.num_args = num_args_;
  out.params_size = params_size_;
  std::memcpy(out.offsets, offsets_, num_args_ * sizeof(uint32_t));
  std::memcpy(out.sizes, sizes_, num_args_ * sizeof(uint32_t));
  std::memcpy(out.kinds, kinds_, num_args_);
  return absl::OkStatus();
}

absl::Status KernelLaunch::launch(Stream stream) const {
  // Tracing off costs this one relaxed load and its branches.
  const bool traced = trace::enabled();
  const double trace_start = traced ? detail::trace_now_us() : 0;
  if (!kernel_)
    return absl::InvalidArgumentError("launch: empty Kernel handle; resolve it with Device::kernel");
  const detail::KernelRecord& k = *kernel_.record_;
  detail::DeviceState& s = device_->state();
  const KernelSignature& sig = k.signature;
  if (k.owner != &s)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: kernel was resolved on another device; resolve it on this one", sig.entry));
  if (s.closed)
    return absl::FailedPreconditionError(absl::StrFormat("%s: device is closed", sig.entry));
  if (layout_ != nullptr) {
    if (layout_->kernel != &k)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: the argument layout was checked for another kernel", sig.entry));
  } else if (auto st = check_args(k); !st.ok()) {
    return st;
  }

  const DeviceProperties& props = s.properties;
  // (d - 1) < limit is 1 <= d <= limit in one unsigned comparison.
  const bool dims_ok = grid_.x - 1 < props.max_grid_dim.x && grid_.y - 1 < props.max_grid_dim.y &&
                       grid_.z - 1 < props.max_grid_dim.z && block_.x - 1 < props.max_block_dim.x &&
                       block_.y - 1 < props.max_block_dim.y && block_.z - 1 < props.max_block_dim.z &&
                       block_.volume() <= props.max_threads_per_block &&
                       shared_mem_ <= props.max_shared_memory_per_block_optin &&
                       (k.required_block.x == 0 || block_ == k.required_block) &&
                       block_.volume() <= k.max_threads;
  if (!dims_ok) return limits_error(k, props);
  const uint32_t flags = flags_ & s.launch_flags;
  if ((flags | cluster_.x | cluster_.y | cluster_.z) != 0) {
    if (auto st = check_attributes(k, s); !st.ok()) return st;
  }

  SparkrtLaunchArgs args;
  // A plugin older than ABI 1.4 gets the struct it knows (check_attributes
  // refused any attribute it would not see).
  args.struct_size =
      s.api->abi_minor >= 4 ? SPARKRT_LAUNCH_ARGS_SIZE : SPARKRT_LAUNCH_ARGS_SIZE_1_3;
  args.device = s.native;
  args.kernel = k.native;
  args.grid[0] = grid_.x;
  args.grid[1] = grid_.y;
  args.grid[2] = grid_.z;
  args.block[0] = block_.x;
  args.block[1] = block_.y;
  args.block[2] = block_.z;
  args.shared_memory_bytes = shared_mem_;
  args.stream = stream.handle;
  args.params = params_;
  if (layout_ == nullptr) {
    args.params_size = params_size_;
    args.num_args = num_args_;
    args.arg_offsets = offsets_;
    args.arg_sizes = sizes_;
    args.arg_kinds = kinds_;
  } else {
    args.params_size = layout_->params_size;
    args.num_args = layout_->num_args;
    args.arg_offsets = layout_->offsets;
    args.arg_sizes = layout_->sizes;
    args.arg_kinds = layout_->kinds;
  }
  args.flags = flags;
  args.cluster[0] = cluster_.x;
  args.cluster[1] = cluster_.y;
  args.cluster[2] = cluster_.z;
  if (traced) [[unlikely]]
    return traced_launch(k, s, args, trace_start);
  if (SparkrtError* e = s.api->launch(&args)) return launch_error(k, s, e, args);
  return absl::OkStatus();
}

}  // namespace sparkrt
