// Communicator: the runtime's checks in front of sparkrt.collectives.v1.
// What the runtime can see locally (ranks, null buffers, sizes, enum values,
// closed devices) is refused here with one message shape on every backend;
// what needs the peers (matching calls across ranks) is the plugin's.
#include "sparkrt/communicator.h"

#include <cctype>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "sparkrt/abi_names.h"
#include "trace_span.h"

namespace sparkrt {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

// The extension's error as a Status; the code is trusted only within absl's
// range.
absl::Status take_error(const SparkrtCollectivesExtension& t, SparkrtError* e,
                        std::string_view context) {
  if (e == nullptr) return absl::OkStatus();
  int32_t code = t.error_code(e);
  const char* msg = nullptr;
  size_t size = 0;
  t.error_message(e, &msg, &size);
  std::string text = msg != nullptr ? std::string(msg, size) : std::string("(no message)");
  t.error_destroy(e);
  if (code <= 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated))
    code = static_cast<int32_t>(absl::StatusCode::kUnknown);
  return absl::Status(static_cast<absl::StatusCode>(code), std::string(context) + ": " + text);
}

// The table of `device`'s backend, checked for a size this runtime can call.
absl::StatusOr<const SparkrtCollectivesExtension*> table_of(const Device& device) {
  if (device.is_closed())
    return absl::FailedPreconditionError(
        absl::StrFormat("%s device %d is closed", device.backend_name(), device.index()));
  const auto* t =
      device.extension_as<SparkrtCollectivesExtension>(SPARKRT_COLLECTIVES_EXTENSION_NAME);
  if (t == nullptr)
    return absl::UnimplementedError(absl::StrFormat(
        "backend %s (%s) does not offer collectives (no %s extension)",
        device.backend_name(), device.plugin_path(), SPARKRT_COLLECTIVES_EXTENSION_NAME));
  if (t->struct_size < SPARKRT_COLLECTIVES_EXTENSION_SIZE)
    return absl::FailedPreconditionError(absl::StrFormat(
        "backend %s: its %s table is %d bytes, shorter than the %d this runtime calls; rebuild "
        "the plugin against this SDK",
        device.backend_name(), SPARKRT_COLLECTIVES_EXTENSION_NAME, t->struct_size,
        SPARKRT_COLLECTIVES_EXTENSION_SIZE));
  return t;
}

bool valid_type(DataType type) { return data_type_size(type) != 0; }
bool valid_op(ReduceOp op) {
  return op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kMin;
}

}  // namespace

// DataType is SparkrtDataType by value (the calls pass it through a cast).
static_assert(int(DataType::kU8) == SPARKRT_DTYPE_U8 && int(DataType::kI32) == SPARKRT_DTYPE_I32 &&
              int(DataType::kF16) == SPARKRT_DTYPE_F16 &&
              int(DataType::kBF16) == SPARKRT_DTYPE_BF16 &&
              int(DataType::kF32) == SPARKRT_DTYPE_F32);

size_t data_type_size(DataType type) { return sparkrt_dtype_size(static_cast<int32_t>(type)); }

std::string_view data_type_name(DataType type) {
  return abi_data_type_name(static_cast<int32_t>(type));
}

std::string_view reduce_op_name(ReduceOp op) {
  return abi_reduce_op_name(static_cast<int32_t>(op));
}

std::string UniqueId::to_hex() const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kHexDigits[b >> 4]);
    out.push_back(kHexDigits[b & 15]);
  }
  return out;
}

absl::StatusOr<UniqueId> UniqueId::from_hex(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  UniqueId id;
  if (t.size() != id.bytes.size() * 2)
    return absl::InvalidArgumentError(absl::StrFormat(
        "unique id: %d characters, expected %d hex digits (what UniqueId::to_hex writes)",
        t.size(), id.bytes.size() * 2));
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < id.bytes.size(); ++i) {
    const int hi = digit(t[2 * i]), lo = digit(t[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return absl::InvalidArgumentError(absl::StrFormat(
          "unique id: character %d is not a hex digit (what UniqueId::to_hex writes)",
          hi < 0 ? 2 * i : 2 * i + 1));
    id.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return id;
}

absl::StatusOr<std::string> Communicator::library(const Device& device) {
  auto t = table_of(device);
  if (!t.ok()) return t.status();
  SparkrtCollectivesLibraryArgs args{};
  args.struct_size = SPARKRT_COLLECTIVES_LIBRARY_ARGS_SIZE;
  if (auto s = take_error(**t, (*t)->library(&args), device.backend_name() + ": collectives");
      !s.ok())
    return s;
  args.name[sizeof(args.name) - 1] = '\0';
  const uint32_t v = args.version;
  if (std::string_view(args.name) == "NCCL")  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch
    return absl::StrFormat("NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  return absl::StrFormat("%s %d", args.name, v);
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> Communicator::create_all(
    std::span<Device* const> devices) {
  if (devices.empty())
    return absl::InvalidArgumentError("Communicator::create_all: no devices; pass one at least");
  if (devices.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return absl::InvalidArgumentError("Communicator::create_all: too many devices");
  std::vector<SparkrtDevice*> native;
  for (size_t i = 0; i < devices.size(); ++i) {
    Device* d = devices[i];
    if (d == nullptr)
      return absl::InvalidArgumentError(
          absl::StrFormat("Communicator::create_all: devices[%d] is null", i));
    if (d->plugin_path() != devices[0]->plugin_path())
      return absl::InvalidArgumentError(absl::StrFormat(
          "Communicator::create_all: devices[%d] is a %s device (%s), devices[0] a %s device "
          "(%s); a communicator spans devices of one backend",
          i, d->backend_name(), d->plugin_path(), devices[0]->backend_name(),
          devices[0]->plugin_path()));
    for (size_t j = 0; j < i; ++j)
      if (devices[j] == d)
        return absl::InvalidArgumentError(absl::StrFormat(
            "Communicator::create_all: devices[%d] and devices[%d] are the same device; each "
            "rank needs its own",
            j, i));
    native.push_back(d->native_handle());
  }
  auto t = table_of(*devices[0]);
  if (!t.ok()) return t.status();
  for (Device* d : devices)
    if (d->is_closed())
      return absl::FailedPreconditionError(absl::StrFormat(
          "Communicator::create_all: %s device %d is closed", d->backend_name(), d->index()));
  std::vector<SparkrtComm> comms(devices.size(), 0);
  SparkrtCommInitAllArgs args{SPARKRT_COMM_INIT_ALL_ARGS_SIZE,
                              static_cast<int32_t>(devices.size()), native.data(), comms.data()};
  if (auto s = take_error(**t, (*t)->comm_init_all(&args),
                          absl::StrFormat("%s: Communicator::create_all(%d devices)",
                                          devices[0]->backend_name(), devices.size()));
      !s.ok())
    return s;
  std::vector<std::unique_ptr<Communicator>> out;
  const int n = static_cast<int>(devices.size());
  for (int i = 0; i < n; ++i)
    out.push_back(std::unique_ptr<Communicator>(new Communicator(*devices[i], *t, comms[i], i, n)));
  return out;
}

absl::StatusOr<UniqueId> Communicator::unique_id(Device& device) {
  auto t = table_of(device);
  if (!t.ok()) return t.status();
  SparkrtUniqueIdArgs args{};
  args.struct_size = SPARKRT_UNIQUE_ID_ARGS_SIZE;
  args.device = device.native_handle();
  if (auto s = take_error(**t, (*t)->get_unique_id(&args),
                          device.backend_name() + ": Communicator::unique_id");
      !s.ok())
    return s;
  UniqueId id;
  std::memcpy(id.bytes.data(), args.id.bytes, id.bytes.size());
  return id;
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::create_rank(Device& device,
                                                                        int num_ranks, int rank,
                                                                        const UniqueId& id) {
  if (num_ranks < 1 || rank < 0 || rank >= num_ranks)
    return absl::InvalidArgumentError(absl::StrFormat(
        "Communicator::create_rank: rank %d of %d ranks; need num_ranks >= 1 and 0 <= rank < "
        "num_ranks",
        rank, num_ranks));
  auto t = table_of(device);
  if (!t.ok()) return t.status();
  SparkrtCommInitRankArgs args{};
  args.struct_size = SPARKRT_COMM_INIT_RANK_ARGS_SIZE;
  args.device = device.native_handle();
  args.num_ranks = num_ranks;
  args.rank = rank;
  std::memcpy(args.id.bytes, id.bytes.data(), id.bytes.size());
  if (auto s = take_error(**t, (*t)->comm_init_rank(&args),
                          absl::StrFormat("%s: Communicator::create_rank(rank %d of %d)",
                                          device.backend_name(), rank, num_ranks));
      !s.ok())
    return s;
  return std::unique_ptr<Communicator>(new Communicator(device, *t, args.comm, rank, num_ranks));
}

absl::Status Communicator::group(const Device& device, absl::FunctionRef<absl::Status()> fn) {
  auto t = table_of(device);
  if (!t.ok()) return t.status();
  SparkrtGroupArgs args{SPARKRT_GROUP_ARGS_SIZE};
  const std::string context = device.backend_name() + ": Communicator::group";
  if (auto s = take_error(**t, (*t)->group_start(&args), context); !s.ok()) return s;
  absl::Status body = fn();
  absl::Status end = take_error(**t, (*t)->group_end(&args), context);
  return body.ok() ? end : body;
}

Communicator::Communicator(Device& device, const SparkrtCollectivesExtension* table,
                           SparkrtComm comm, int rank, int size)
    : device_(device), table_(table), comm_(comm), rank_(rank), size_(size) {}

Communicator::~Communicator() { destroy().IgnoreError(); }

absl::Status Communicator::destroy() {
  if (comm_ == 0) return absl::OkStatus();
  SparkrtCommArgs args{SPARKRT_COMM_ARGS_SIZE, std::exchange(comm_, 0)};
  return take_error(*table_, table_->comm_destroy(&args),
                    absl::StrFormat("%s: Communicator::destroy(rank %d of %d)",
                                    device_.backend_name(), rank_, size_));
}

absl::Status Communicator::abort() {
  if (comm_ == 0)
    return absl::FailedPreconditionError("Communicator::abort: the communicator is destroyed");
  SparkrtCommArgs args{SPARKRT_COMM_ARGS_SIZE, comm_};
  return take_error(*table_, table_->comm_abort(&args),
                    absl::StrFormat("%s: Communicator::abort(rank %d of %d)",
                                    device_.backend_name(), rank_, size_));
}

absl::Status Communicator::status() {
  if (comm_ == 0)
    return absl::FailedPreconditionError("Communicator::status: the communicator is destroyed");
  SparkrtCommArgs args{SPARKRT_COMM_ARGS_SIZE, comm_};
  return take_error(*table_, table_->comm_status(&args),
                    absl::StrFormat("%s: communicator rank %d of %d", device_.backend_name(),
                                    rank_, size_));
}

absl::Status Communicator::issue(std::string_view what, SparkrtCollectiveKind kind,
                                 DevicePtr send, DevicePtr recv, size_t count, DataType type,
                                 ReduceOp op, int peer, Stream stream, size_t send_elements,
                                 size_t recv_elements) {
  detail::TraceSpan span("collective", what);
  if (span)
    span.args = absl::StrFormat(
        R"("rank":%d,"size":%d,"count":%d,"dtype":"%s","peer":%d,"stream":%d)", rank_, size_,
        count, data_type_name(type), peer, stream.handle);
  const std::string context =
      absl::StrFormat("%s: %s(rank %d of %d, %d x %s)", device_.backend_name(), what, rank_,
                      size_, count, data_type_name(type));
  if (comm_ == 0)
    return absl::FailedPreconditionError(context + ": the communicator is destroyed");
  if (device_.is_closed())
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: %s device %d is closed", context, device_.backend_name(),
                        device_.index()));
  if (!valid_type(type))
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: data type %d is not a sparkrt::DataType", context, static_cast<int>(type)));
  const bool reduces =
      kind == SPARKRT_COLLECTIVE_ALL_REDUCE || kind == SPARKRT_COLLECTIVE_REDUCE_SCATTER;
  if (reduces && !valid_op(op))
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: reduce op %d is not a sparkrt::ReduceOp", context, static_cast<int>(op)));
  const bool has_peer = kind == SPARKRT_COLLECTIVE_BROADCAST || kind == SPARKRT_COLLECTIVE_SEND ||
                        kind == SPARKRT_COLLECTIVE_RECV;
  if (has_peer && (peer < 0 || peer >= size_))
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s %d is not a rank of this communicator (0..%d)", context,
        kind == SPARKRT_COLLECTIVE_BROADCAST ? "root" : "peer", peer, size_ - 1));
  // Element counts times the element size must fit the 64-bit address space.
  const size_t elem = data_type_size(type);
  const size_t limit = std::numeric_limits<uint64_t>::max() / elem;
  if (send_elements > limit || recv_elements > limit ||
      (size_ > 1 && count > limit / static_cast<size_t>(size_)))
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d elements overflow a 64-bit byte count", context, count));
  if (send_elements > 0 && send.is_null())
    return absl::InvalidArgumentError(context + ": the send buffer is null");
  if (recv_elements > 0 && recv.is_null())
    return absl::InvalidArgumentError(context + ": the receive buffer is null");
  SparkrtCollectiveArgs args{};
  args.struct_size = SPARKRT_COLLECTIVE_ARGS_SIZE;
  args.comm = comm_;
  args.kind = kind;
  args.dtype = static_cast<SparkrtDataType>(type);
  args.reduce_op = static_cast<SparkrtReduceOp>(reduces ? op : ReduceOp::kSum);
  args.peer = has_peer ? peer : 0;
  args.send = send.addr;
  args.recv = recv.addr;
  args.count = count;
  args.stream = stream.handle;
  return take_error(*table_, table_->collective(&args), context);
}

absl::Status Communicator::all_reduce(DevicePtr send, DevicePtr recv, size_t count, DataType type,
                                      ReduceOp op, Stream stream) {
  return issue("all_reduce", SPARKRT_COLLECTIVE_ALL_REDUCE, send, recv, count, type, op, 0,
               stream, count, count);
}

absl::Status Communicator::all_gather(DevicePtr send, DevicePtr recv, size_t count, DataType type,
                                      Stream stream) {
  return issue("all_gather", SPARKRT_COLLECTIVE_ALL_GATHER, send, recv, count, type,
               ReduceOp::kSum, 0, stream, count, count * static_cast<size_t>(size_));
}

absl::Status Communicator::reduce_scatter(DevicePtr send, DevicePtr recv, size_t count,
                                          DataType type, ReduceOp op, Stream stream) {
  return issue("reduce_scatter", SPARKRT_COLLECTIVE_REDUCE_SCATTER, send, recv, count, type, op,
               0, stream, count * static_cast<size_t>(size_), count);
}

absl::Status Communicator::broadcast(DevicePtr send, DevicePtr recv, size_t count, DataType type,
                                     int root, Stream stream) {
  return issue("broadcast", SPARKRT_COLLECTIVE_BROADCAST, send, recv, count, type,
               ReduceOp::kSum, root, stream, rank_ == root ? count : 0, count);
}

absl::Status Communicator::send(DevicePtr send, size_t count, DataType type, int peer,
                                Stream stream) {
  return issue("send", SPARKRT_COLLECTIVE_SEND, send, DevicePtr(), count, type, ReduceOp::kSum,
               peer, stream, count, 0);
}

absl::Status Communicator::recv(DevicePtr recv, size_t count, DataType type, int peer,
                                Stream stream) {
  return issue("recv", SPARKRT_COLLECTIVE_RECV, DevicePtr(), recv, count, type, ReduceOp::kSum,
               peer, stream, 0, count);
}

}  // namespace sparkrt
