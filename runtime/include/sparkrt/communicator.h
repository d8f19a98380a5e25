// Communicator: one rank of a clique of devices that run collectives together
// (all-reduce, all-gather, reduce-scatter, broadcast, send/receive), through
// the backend's sparkrt.collectives.v1 extension: NCCL on cuda, a host
// implementation on cpu and mock. Semantics, counts and in-place rules are
// NCCL's; sparkrt/extensions/collectives.h states them in full.
//
// Several devices in one process:
//
//   std::vector<sparkrt::Device*> devs = {d0.get(), d1.get()};
//   auto comms = sparkrt::Communicator::create_all(devs);
//   // one thread drives both ranks, so their calls go in one group
//   auto s = sparkrt::Communicator::group(*devs[0], [&]() -> absl::Status {
//     for (auto& c : *comms)
//       SPARKRT_RETURN_IF_ERROR(c->all_reduce(x[c->rank()], x[c->rank()], n,
//                                             sparkrt::DataType::kF32,
//                                             sparkrt::ReduceOp::kSum));
//     return absl::OkStatus();
//   });
//
// One rank per process: rank 0 calls unique_id(), moves the id to the other
// processes (UniqueId::to_hex, a file, MPI), and every process calls
// create_rank(device, num_ranks, its_rank, id).
//
// Rules:
//  - A communicator is used by one thread at a time; different communicators
//    may be used from different threads at once.
//  - A thread that drives several ranks puts their calls in one group();
//    without it the first call waits for peers that never come (on the host
//    backends until SPARKRT_COLLECTIVE_TIMEOUT_S, then DEADLINE_EXCEEDED).
//  - Buffers and streams belong to the communicator's device.
//  - Destroy communicators before closing or destroying their devices; the
//    device must outlive its communicators.
//  - After abort() or a failed wait, the clique is over: every later call
//    fails; destroy() and make a new one.
#ifndef SPARKRT_COMMUNICATOR_H_
#define SPARKRT_COMMUNICATOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/device.h"
#include "sparkrt/extensions/collectives.h"
#include "sparkrt/types.h"

namespace sparkrt {

// Element types of collectives (SparkrtDataType).
enum class DataType : uint8_t { kU8 = 1, kI32 = 2, kF16 = 3, kBF16 = 4, kF32 = 5 };
enum class ReduceOp : uint8_t { kSum = 1, kMax = 2, kMin = 3 };

// Bytes of one element; 0 for a value outside the enumeration.
size_t data_type_size(DataType type);
std::string_view data_type_name(DataType type);  // "f32", "bf16", ...
std::string_view reduce_op_name(ReduceOp op);    // "sum", "max", "min"

// The opaque id of a clique that is still forming; copy it by value.
struct UniqueId {
  std::array<uint8_t, SPARKRT_UNIQUE_ID_BYTES> bytes{};

  // 256 lowercase hex digits, for a file, a command line or an environment
  // variable; from_hex accepts exactly that (whitespace around it ignored).
  std::string to_hex() const;
  static absl::StatusOr<UniqueId> from_hex(std::string_view text);
};

class Communicator {
 public:
  // The collectives library of `device`'s backend: "NCCL 2.21.5", "sparkrt
  // host collectives 1". FailedPrecondition (with what was tried) when the
  // backend has the extension but not its library; Unimplemented when the
  // backend has no collectives.
  static absl::StatusOr<std::string> library(const Device& device);

  // A communicator per device, rank i on devices[i]: open devices of one
  // backend plugin, each at most once.
  static absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> create_all(
      std::span<Device* const> devices);

  // The id of a new clique, made on `device` (the process that calls it
  // typically takes rank 0).
  static absl::StatusOr<UniqueId> unique_id(Device& device);
  // Joins the clique of `id` as `rank` of `num_ranks`; returns once every
  // rank has joined (host backends: fails after the timeout).
  static absl::StatusOr<std::unique_ptr<Communicator>> create_rank(Device& device, int num_ranks,
                                                                   int rank, const UniqueId& id);

  // Calls made inside `fn` on communicators of `device`'s backend are issued
  // together when it returns (NCCL's group start/end). The group ends even
  // when `fn` fails; the first error is returned.
  static absl::Status group(const Device& device, absl::FunctionRef<absl::Status()> fn);

  ~Communicator();  // destroy(), errors dropped
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Device& device() const { return device_; }

  // Frees the communicator; every later call fails with FailedPrecondition.
  absl::Status destroy();
  // Ends the clique at once: pending and later collectives fail on every
  // rank (host backends) or on this rank (NCCL).
  absl::Status abort();
  // An asynchronous error of the communicator; OK while it is healthy.
  absl::Status status();

  // Counts are in elements, as in NCCL (collectives.h).
  absl::Status all_reduce(DevicePtr send, DevicePtr recv, size_t count, DataType type,
                          ReduceOp op, Stream stream = {});
  // recv holds size() * count elements, rank r's at r * count.
  absl::Status all_gather(DevicePtr send, DevicePtr recv, size_t count, DataType type,
                          Stream stream = {});
  // send holds size() * count elements; recv gets block rank() of the reduction.
  absl::Status reduce_scatter(DevicePtr send, DevicePtr recv, size_t count, DataType type,
                              ReduceOp op, Stream stream = {});
  // send is read on `root` only; every rank's recv gets it.
  absl::Status broadcast(DevicePtr send, DevicePtr recv, size_t count, DataType type, int root,
                         Stream stream = {});
  absl::Status send(DevicePtr send, size_t count, DataType type, int peer, Stream stream = {});
  absl::Status recv(DevicePtr recv, size_t count, DataType type, int peer, Stream stream = {});

 private:
  Communicator(Device& device, const SparkrtCollectivesExtension* table, SparkrtComm comm,
               int rank, int size);
  absl::Status issue(std::string_view what, SparkrtCollectiveKind kind, DevicePtr send,
                     DevicePtr recv, size_t count, DataType type, ReduceOp op, int peer,
                     Stream stream, size_t send_elements, size_t recv_elements);

  Device& device_;
  const SparkrtCollectivesExtension* table_;
  SparkrtComm comm_;  // 0 once destroyed
  int rank_;
  int size_;
};

}  // namespace sparkrt

#endif  // SPARKRT_COMMUNICATOR_H_
