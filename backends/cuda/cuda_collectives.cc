// sparkrt.collectives.v1 on CUDA: every call is NCCL's own (nccl_api.h).
//
// Communicator handles are ids in one process-wide table, counted up from 1
// and never reused, each naming {ncclComm_t, device, rank, size}. NCCL runs
// on the CUDA runtime, which uses the device's primary context: the one a
// CudaDevice retains. So each call makes that context current first, and
// afterwards drops the thread's cached context, since NCCL may have switched
// devices (cudaSetDevice) for the ranks of a group.
#include "cuda_collectives.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "cuda_device.h"
#include "nccl_api.h"
#include "sparkrt/abi_names.h"
#include "sparkrt/sdk/collectives_adapter.h"

namespace sparkrt::cuda {
namespace {

struct Communicator {
  nccl::Comm comm = nullptr;  // null once aborted
  CudaDevice* device = nullptr;
  int rank = 0;
  int size = 0;
  bool aborted = false;  // comm_abort ran: every call but comm_destroy fails
};

// The live communicators. Lookups take the lock shared; the pointer a lookup
// returns stays valid because a communicator is used by one thread at a time
// and must not be used concurrently with its own destroy (the ABI's rule).
class Registry {
 public:
  // Reserves room for `n` more entries, so that add() after a successful
  // NCCL init cannot fail on allocation and leak the communicators.
  void reserve(size_t n) {
    std::unique_lock lock(mu_);
    comms_.reserve(comms_.size() + n);
  }
  SparkrtComm add(std::unique_ptr<Communicator> c) {
    std::unique_lock lock(mu_);
    const SparkrtComm handle = next_++;
    comms_.emplace(handle, std::move(c));
    return handle;
  }
  Communicator* find(SparkrtComm handle) const {
    std::shared_lock lock(mu_);
    auto it = comms_.find(handle);
    return it == comms_.end() ? nullptr : it->second.get();
  }
  std::unique_ptr<Communicator> remove(SparkrtComm handle) {
    std::unique_lock lock(mu_);
    auto it = comms_.find(handle);
    if (it == comms_.end()) return nullptr;
    std::unique_ptr<Communicator> c = std::move(it->second);
    comms_.erase(it);
    return c;
  }
  std::vector<std::unique_ptr<Communicator>> remove_device(const CudaDevice* device) {
    std::vector<std::unique_ptr<Communicator>> out;
    std::unique_lock lock(mu_);
    for (auto it = comms_.begin(); it != comms_.end();) {
      if (it->second->device == device) {
        out.push_back(std::move(it->second));
        comms_.erase(it++);
      } else {
        ++it;
      }
    }
    return out;
  }

 private:
  mutable std::shared_mutex mu_;
  absl::flat_hash_map<SparkrtComm, std::unique_ptr<Communicator>> comms_;  // guarded by mu_
  SparkrtComm next_ = 1;                                                   // guarded by mu_
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: devices may close during exit
  return *r;
}

std::string hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

absl::Status not_our_device(const char* call, const SparkrtDevice* device) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "collectives %s: device handle %p is not an open device of the cuda plugin (null, closed, "
      "or from another backend); pass Device::native_handle() of an open cuda device",
      call, static_cast<const void*>(device)));
}

absl::StatusOr<const nccl::Library*> library_for(const char* call) {
  auto lib = nccl::load();
  if (!lib.ok())
    return absl::Status(lib.status().code(),
                        absl::StrFormat("collectives %s: %s", call, lib.status().message()));
  return *lib;
}

// Runs one NCCL call with `device`'s context current and forgets the
// thread's cached context afterwards (see the file comment).
template <typename Fn>
absl::Status on_device(CudaDevice* device, Fn&& fn) {
  if (device != nullptr) SPARKRT_RETURN_IF_ERROR(device->make_current());
  absl::Status s = fn();
  CudaDevice::forget_current_context();
  return s;
}

absl::StatusOr<Communicator*> find(SparkrtComm handle, const char* call) {
  Communicator* c = registry().find(handle);
  if (c == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collectives %s: unknown communicator handle %s: not issued by this plugin, or already "
        "destroyed (by comm_destroy, or when its device was closed)",
        call, hex(handle)));
  }
  return c;
}

std::string describe(const Communicator& c, SparkrtComm handle) {
  return absl::StrFormat("communicator %s (rank %d of %d, cuda device %d)", hex(handle), c.rank,
                         c.size, c.device->index());
}

absl::Status aborted(const Communicator& c, SparkrtComm handle, const char* call) {
  return absl::AbortedError(absl::StrFormat(
      "collectives %s: %s was aborted (comm_abort); only comm_destroy is allowed on it, then "
      "make a new communicator",
      call, describe(c, handle)));
}

// ---- the calls (sdk/collectives_adapter.h makes the C table) ------------

struct CudaCollectives {
  // Names the calls in the adapter's own errors as the messages here do.
  static constexpr const char* kCallPrefix = "collectives ";
  static absl::Status library(SparkrtCollectivesLibraryArgs& a);
  static absl::Status get_unique_id(SparkrtUniqueIdArgs& a);
  static absl::Status comm_init_all(SparkrtCommInitAllArgs& a);
  static absl::Status comm_init_rank(SparkrtCommInitRankArgs& a);
  static absl::Status comm_destroy(SparkrtComm handle);
  static absl::Status comm_abort(SparkrtComm handle);
  static absl::Status comm_status(SparkrtComm handle);
  static absl::Status collective(const SparkrtCollectiveArgs& a);
  static absl::Status group_start();
  static absl::Status group_end();
};

absl::Status CudaCollectives::library(SparkrtCollectivesLibraryArgs& a) {
  SPARKRT_ASSIGN_OR_RETURN(const nccl::Library* lib, library_for("library"));
  std::memset(a.name, 0, sizeof(a.name));
  std::memcpy(a.name, "NCCL", 4);
  a.version = static_cast<uint32_t>(lib->version);
  return absl::OkStatus();
}

absl::Status CudaCollectives::get_unique_id(SparkrtUniqueIdArgs& a) {
  if (!CudaDevice::is_open(a.device)) return not_our_device("get_unique_id", a.device);
  SPARKRT_ASSIGN_OR_RETURN(const nccl::Library* lib, library_for("get_unique_id"));
  nccl::UniqueId id{};
  SPARKRT_RETURN_IF_ERROR(on_device(from_handle(a.device), [&] {
    return nccl::check(*lib, lib->GetUniqueId(&id), "ncclGetUniqueId", "collectives get_unique_id");
  }));
  static_assert(sizeof(a.id.bytes) == sizeof(id.internal));
  std::memcpy(a.id.bytes, id.internal, sizeof(id.internal));
  return absl::OkStatus();
}

absl::Status CudaCollectives::comm_init_all(SparkrtCommInitAllArgs& a) {
  if (a.num_devices < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collectives comm_init_all: num_devices is %d; give at least one device", a.num_devices));
  }
  if (a.devices == nullptr || a.comms == nullptr) {
    return absl::InvalidArgumentError(
        "collectives comm_init_all: null devices or comms array; both need num_devices entries");
  }
  std::vector<CudaDevice*> devices(static_cast<size_t>(a.num_devices));
  std::vector<int> ordinals(devices.size());
  absl::flat_hash_set<int> seen;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!CudaDevice::is_open(a.devices[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "collectives comm_init_all: devices[%u] (%p) is not an open device of the cuda plugin "
          "(null, closed, or from another backend)",
          i, static_cast<const void*>(a.devices[i])));
    }
    devices[i] = from_handle(a.devices[i]);
    ordinals[i] = devices[i]->index();
    if (!seen.insert(ordinals[i]).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "collectives comm_init_all: devices[%u] is cuda device %d, which an earlier entry "
          "already is; each rank needs a GPU of its own (NCCL hangs on a GPU used twice)",
          i, ordinals[i]));
    }
  }
  SPARKRT_ASSIGN_OR_RETURN(const nccl::Library* lib, library_for("comm_init_all"));

  std::vector<std::unique_ptr<Communicator>> made(devices.size());
  for (size_t i = 0; i < made.size(); ++i) {
    made[i] = std::make_unique<Communicator>();
    made[i]->device = devices[i];
    made[i]->rank = static_cast<int>(i);
    made[i]->size = a.num_devices;
  }
  registry().reserve(made.size());
  std::vector<nccl::Comm> comms(made.size(), nullptr);
  SPARKRT_RETURN_IF_ERROR(on_device(devices[0], [&] {
    return nccl::check(*lib, lib->CommInitAll(comms.data(), a.num_devices, ordinals.data()),
                       "ncclCommInitAll",
                       absl::StrFormat("collectives comm_init_all(%d devices)", a.num_devices));
  }));
  for (size_t i = 0; i < made.size(); ++i) {
    made[i]->comm = comms[i];
    a.comms[i] = registry().add(std::move(made[i]));
  }
  return absl::OkStatus();
}

absl::Status CudaCollectives::comm_init_rank(SparkrtCommInitRankArgs& a) {
  if (!CudaDevice::is_open(a.device)) return not_our_device("comm_init_rank", a.device);
  if (a.num_ranks < 1 || a.rank < 0 || a.rank >= a.num_ranks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collectives comm_init_rank: rank %d of %d ranks; num_ranks must be >= 1 and "
        "0 <= rank < num_ranks",
        a.rank, a.num_ranks));
  }
  if (std::all_of(std::begin(a.id.bytes), std::end(a.id.bytes),
                  [](uint8_t b) { return b == 0; })) {
    return absl::InvalidArgumentError(
        "collectives comm_init_rank: the unique id is all zero bytes, not one get_unique_id "
        "made; call get_unique_id on one rank and give its bytes to every rank");
  }
  SPARKRT_ASSIGN_OR_RETURN(const nccl::Library* lib, library_for("comm_init_rank"));
  CudaDevice* device = from_handle(a.device);
  auto made = std::make_unique<Communicator>();
  made->device = device;
  made->rank = a.rank;
  made->size = a.num_ranks;
  registry().reserve(1);
  nccl::UniqueId id{};
  std::memcpy(id.internal, a.id.bytes, sizeof(id.internal));
  nccl::Comm comm = nullptr;
  SPARKRT_RETURN_IF_ERROR(on_device(device, [&] {
    return nccl::check(*lib, lib->CommInitRank(&comm, a.num_ranks, id, a.rank),
                       "ncclCommInitRank",
                       absl::StrFormat("collectives comm_init_rank(rank %d of %d, cuda device %d)",
                                       a.rank, a.num_ranks, device->index()));
  }));
  made->comm = comm;
  a.comm = registry().add(std::move(made));
  return absl::OkStatus();
}

absl::Status CudaCollectives::comm_destroy(SparkrtComm handle) {
  SPARKRT_RETURN_IF_ERROR(find(handle, "comm_destroy").status());
  std::unique_ptr<Communicator> c = registry().remove(handle);
  if (c == nullptr || c->aborted) return absl::OkStatus();  // abort already freed it
  SPARKRT_ASSIGN_OR_RETURN(const nccl::Library* lib, library_for("comm_destroy"));
  return on_device(c->device, [&] {
    return nccl::check(*lib, lib->CommDestroy(c->comm), "ncclCommDestroy",
                       "collectives comm_destroy(" + describe(*c, handle) + ")");
  });
}

absl::Status CudaCollectives::comm_abort(SparkrtComm handle) {
  SPARKRT_ASSIGN_OR_RETURN(Communicator * c, find(handle, "comm_abort"));
  if (c->aborted) return absl::OkStatus();
  SPARKRT_ASSIGN_OR_RETURN(const nccl::Library* lib, library_for("comm_abort"));
  // ncclCommAbort frees the communicator whatever it returns; the handle
  // stays, refusing calls, until comm_destroy.
  nccl::Comm comm = std::exchange(c->comm, nullptr);
  c->aborted = true;
  return on_device(c->device, [&] {
    return nccl::check(*lib, lib->CommAbort(comm), "ncclCommAbort",
                       "collectives comm_abort(" + describe(*c, handle) + ")");
  });
}

absl::Status CudaCollectives::comm_status(SparkrtComm handle) {
  SPARKRT_ASSIGN_OR_RETURN(Communicator * c, find(handle, "comm_status"));
  if (c->aborted) return aborted(*c, handle, "comm_status");
  SPARKRT_ASSIGN_OR_RETURN(const nccl::Library* lib, library_for("comm_status"));
  const std::string what = "collectives comm_status(" + describe(*c, handle) + ")";
  nccl::Result async = nccl::kSuccess;
  SPARKRT_RETURN_IF_ERROR(on_device(c->device, [&] {
    return nccl::check(*lib, lib->CommGetAsyncError(c->comm, &async), "ncclCommGetAsyncError",
                       what);
  }));
  if (async == nccl::kSuccess) return absl::OkStatus();
  return nccl::error(*lib, async, "an asynchronous NCCL operation", what);
}

// NCCL's code for a dtype (one of the enumeration: checked first).
nccl::DataType nccl_type(SparkrtDataType t) {
  switch (t) {
    case SPARKRT_DTYPE_U8: return nccl::kUint8;
    case SPARKRT_DTYPE_I32: return nccl::kInt32;
    case SPARKRT_DTYPE_F16: return nccl::kFloat16;
    case SPARKRT_DTYPE_BF16: return nccl::kBfloat16;
    case SPARKRT_DTYPE_F32: return nccl::kFloat32;
  }
  return nccl::kUint8;
}

absl::Status CudaCollectives::collective(const SparkrtCollectiveArgs& a) {
  SPARKRT_ASSIGN_OR_RETURN(Communicator * c, find(a.comm, "collective"));
  const char* kind = abi_collective_kind_name(a.kind);
  if (a.kind < SPARKRT_COLLECTIVE_ALL_REDUCE || a.kind > SPARKRT_COLLECTIVE_RECV) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collectives collective: kind %d is not a SparkrtCollectiveKind (1..6)",
        static_cast<int>(a.kind)));
  }
  if (c->aborted) return aborted(*c, a.comm, kind);
  const size_t type_size = sparkrt_dtype_size(a.dtype);
  if (type_size == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collectives %s: dtype %d is not a SparkrtDataType (u8, i32, f16, bf16, f32)", kind,
        static_cast<int>(a.dtype)));
  }
  const bool reduces =
      a.kind == SPARKRT_COLLECTIVE_ALL_REDUCE || a.kind == SPARKRT_COLLECTIVE_REDUCE_SCATTER;
  nccl::RedOp op = nccl::kSum;
  if (reduces) {
    switch (a.reduce_op) {
      case SPARKRT_REDUCE_SUM: op = nccl::kSum; break;
      case SPARKRT_REDUCE_MAX: op = nccl::kMax; break;
      case SPARKRT_REDUCE_MIN: op = nccl::kMin; break;
      default:
        return absl::InvalidArgumentError(absl::StrFormat(
            "collectives %s: reduce_op %d is not a SparkrtReduceOp (sum 1, max 2, min 3)", kind,
            static_cast<int>(a.reduce_op)));
    }
  }
  const bool has_peer = a.kind == SPARKRT_COLLECTIVE_BROADCAST ||
                        a.kind == SPARKRT_COLLECTIVE_SEND || a.kind == SPARKRT_COLLECTIVE_RECV;
  if (has_peer && (a.peer < 0 || a.peer >= c->size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collectives %s on %s: %s %d is not a rank of the communicator (0..%d)", kind,
        describe(*c, a.comm), a.kind == SPARKRT_COLLECTIVE_BROADCAST ? "root" : "peer", a.peer,
        c->size - 1));
  }
  auto stream = c->device->stream(a.stream, kind);
  if (!stream.ok()) return stream.status();
  SPARKRT_ASSIGN_OR_RETURN(const nccl::Library* lib, library_for(kind));

  // Every rank issues the same count, so a count of 0 is skipped on all of
  // them alike: nothing to move, nothing for NCCL to match.
  if (a.count == 0) return absl::OkStatus();
  const uint64_t ranks = static_cast<uint64_t>(c->size);
  const char* type_name = abi_data_type_name(a.dtype);
  if (a.count > UINT64_MAX / (type_size * ranks)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collectives %s: count %u of %s over %d ranks overflows a 64-bit byte count", kind,
        a.count, type_name, c->size));
  }
  const uint64_t one = a.count * type_size;
  uint64_t send_bytes = one, recv_bytes = one;
  bool reads_send = true, writes_recv = true;
  switch (a.kind) {
    case SPARKRT_COLLECTIVE_ALL_GATHER: recv_bytes = one * ranks; break;
    case SPARKRT_COLLECTIVE_REDUCE_SCATTER: send_bytes = one * ranks; break;
    case SPARKRT_COLLECTIVE_BROADCAST: reads_send = a.peer == c->rank; break;
    case SPARKRT_COLLECTIVE_SEND: writes_recv = false; break;
    case SPARKRT_COLLECTIVE_RECV: reads_send = false; break;
    default: break;
  }
  const auto context = [&] {
    return absl::StrFormat("collectives %s(%u x %s, send %s, recv %s, stream %s) on %s", kind,
                           a.count, type_name, hex(a.send), hex(a.recv), hex(a.stream),
                           describe(*c, a.comm));
  };
  // NCCL would fault asynchronously on a bad pointer; refuse it here.
  const auto check_buffer = [&](SparkrtDevicePtr p, uint64_t bytes, const char* role) {
    if (p == 0)
      return absl::InvalidArgumentError(absl::StrFormat("%s: null %s buffer", context(), role));
    absl::Status s = c->device->check_device_range(p, bytes, role);
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrFormat("%s: %s", context(), s.message()));
  };
  if (reads_send) SPARKRT_RETURN_IF_ERROR(check_buffer(a.send, send_bytes, "send"));
  if (writes_recv) SPARKRT_RETURN_IF_ERROR(check_buffer(a.recv, recv_bytes, "recv"));

  const void* send = reinterpret_cast<const void*>(static_cast<uintptr_t>(a.send));
  void* recv = reinterpret_cast<void*>(static_cast<uintptr_t>(a.recv));
  const size_t n = static_cast<size_t>(a.count);
  const nccl::DataType type = nccl_type(a.dtype);
  return on_device(c->device, [&]() -> absl::Status {
    nccl::Result r = nccl::kSuccess;
    const char* call = "";
    switch (a.kind) {
      case SPARKRT_COLLECTIVE_ALL_REDUCE:
        call = "ncclAllReduce";
        r = lib->AllReduce(send, recv, n, type, op, c->comm, *stream);
        break;
      case SPARKRT_COLLECTIVE_ALL_GATHER:
        call = "ncclAllGather";
        r = lib->AllGather(send, recv, n, type, c->comm, *stream);
        break;
      case SPARKRT_COLLECTIVE_REDUCE_SCATTER:
        call = "ncclReduceScatter";
        r = lib->ReduceScatter(send, recv, n, type, op, c->comm, *stream);
        break;
      case SPARKRT_COLLECTIVE_BROADCAST:
        call = "ncclBroadcast";
        r = lib->Broadcast(send, recv, n, type, a.peer, c->comm, *stream);
        break;
      case SPARKRT_COLLECTIVE_SEND:
        call = "ncclSend";
        r = lib->Send(send, n, type, a.peer, c->comm, *stream);
        break;
      case SPARKRT_COLLECTIVE_RECV:
        call = "ncclRecv";
        r = lib->Recv(recv, n, type, a.peer, c->comm, *stream);
        break;
    }
    if (r == nccl::kSuccess) [[likely]]
      return absl::OkStatus();
    return nccl::error(*lib, r, call, context());
  });
}

absl::Status CudaCollectives::group_start() {
  SPARKRT_ASSIGN_OR_RETURN(const nccl::Library* lib, library_for("group_start"));
  return on_device(nullptr, [&] {
    return nccl::check(*lib, lib->GroupStart(), "ncclGroupStart", "collectives group_start");
  });
}

absl::Status CudaCollectives::group_end() {
  SPARKRT_ASSIGN_OR_RETURN(const nccl::Library* lib, library_for("group_end"));
  // NCCL issues the group's calls here, switching to each rank's device.
  return on_device(nullptr, [&] {
    return nccl::check(*lib, lib->GroupEnd(), "ncclGroupEnd", "collectives group_end");
  });
}

}  // namespace

void release_communicators(const CudaDevice* device) noexcept {
  try {
    std::vector<std::unique_ptr<Communicator>> left = registry().remove_device(device);
    if (left.empty()) return;
    auto lib = nccl::load();
    if (!lib.ok()) return;  // none could have been made
    // Abort rather than destroy: it does not wait for peers that may be gone.
    for (const auto& c : left) {
      if (c->aborted) continue;
      (void)on_device(c->device, [&] {
        (void)(*lib)->CommAbort(c->comm);
        return absl::OkStatus();
      });
    }
  } catch (...) {  // out of memory while collecting: nothing more can be done
  }
}

const SparkrtCollectivesExtension* collectives_extension() {
  return sdk::collectives_extension<CudaCollectives>();
}

}  // namespace sparkrt::cuda
