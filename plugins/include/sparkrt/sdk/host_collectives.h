// sparkrt.collectives.v1 (sparkrt/extensions/collectives.h) for backends
// whose device memory is host memory behind an AddressSpace (the mock, the
// cpu reference backend): collectives that move real bytes between devices
// of one process, or of several processes on one host.
//
// A device opts in by deriving from HostCollectiveDevice, and its backend
// returns host_collectives_extension() from extension() for
// SPARKRT_COLLECTIVES_EXTENSION_NAME:
//
//   class MyDevice : public sdk::Device, public sdk::HostCollectiveDevice {
//    public:
//     MyDevice(int index) : sdk::HostCollectiveDevice(*this, index) {}
//     ~MyDevice() override { close_collectives(); }
//     absl::Status with_collective_memory(SparkrtStream stream, std::string_view call,
//                                         CollectiveMemoryFn fn) override {
//       std::lock_guard lock(mu_);
//       ... check `stream` (unknown: InvalidArgument; capturing: FailedPrecondition) ...
//       return fn(memory_);
//     }
//   };
//
// How it works. A clique of N ranks is matched by a host-side hub: every
// rank's k-th collective meets the others' k-th (kind, count, dtype, reduce
// op and root must agree, else that call fails on every rank with
// InvalidArgument and nothing moves), sends meet receives pairwise per
// (sender, receiver) in order, and a send completes only with its receive.
// A rank's contribution is copied out of its device memory when the call is
// issued (under that device's lock, ranges checked first); the last rank to
// arrive computes every rank's result in host memory (f32, f16 and bf16
// reductions accumulate in f32 in rank order and round once, to nearest
// even; i32 and u8 sums wrap), and each rank writes its own result into its
// recv buffer under its own device's lock. No call ever holds two devices'
// locks, and no thread touches another rank's device.
//
// comm_init_all puts every rank in this process and its hub in memory.
// get_unique_id starts a listener thread in the calling process that hosts
// the hub of a new clique behind a Linux abstract-namespace Unix socket; the
// id names the socket and carries a random secret. Every rank that calls
// comm_init_rank (one in the hosting process too) connects to it, and its
// collectives travel as requests to the hub. The listener lives until the
// clique is over, the device that made the id closes, or the plugin library
// is unloaded (shutdown_host_collectives), whichever comes first.
//
// Waits are bounded by SPARKRT_COLLECTIVE_TIMEOUT_S (collectives.h).
#ifndef SPARKRT_SDK_HOST_COLLECTIVES_H_
#define SPARKRT_SDK_HOST_COLLECTIVES_H_

#include <cstdint>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/extensions/collectives.h"
#include "sparkrt/plugin_sdk.h"
#include "sparkrt/sdk/address_space.h"

namespace sparkrt::sdk {

// One collective as a device's hook sees it, once it has completed or failed.
// The enum fields are the values the caller passed (possibly outside the
// enumerations, when the call failed for it).
struct HostCollectiveCall {
  SparkrtComm comm = 0;
  int32_t kind = 0;       // SparkrtCollectiveKind
  int32_t dtype = 0;      // SparkrtDataType
  int32_t reduce_op = 0;  // SparkrtReduceOp
  int32_t peer = 0;
  uint64_t count = 0;
  SparkrtStream stream = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
};

class HostCollectiveDevice {
 public:
  using CollectiveMemoryFn = absl::FunctionRef<absl::Status(AddressSpace&)>;

  // `self` is the device object this interface belongs to (the handle the
  // C table passes is a Device*); `index` its device index, which
  // comm_init_all requires to be distinct among its ranks.
  HostCollectiveDevice(Device& self, int index);
  virtual ~HostCollectiveDevice();  // calls close_collectives()
  HostCollectiveDevice(const HostCollectiveDevice&) = delete;
  HostCollectiveDevice& operator=(const HostCollectiveDevice&) = delete;

  int collective_device_index() const { return index_; }

  // Runs `fn` on the device's memory under the device's lock, once `stream`
  // has been checked: unknown or destroyed is InvalidArgument, a stream in
  // graph capture is FailedPrecondition (collectives are not recorded).
  // `call` names the collective for messages ("all_reduce").
  virtual absl::Status with_collective_memory(SparkrtStream stream, std::string_view call,
                                              CollectiveMemoryFn fn) = 0;

  // Called (without any lock of the library held) with each collective call
  // on a communicator of this device, once it has completed or failed.
  virtual void on_collective(const HostCollectiveCall& /*call*/) {}

 protected:
  // Aborts and forgets every communicator of this device (their cliques fail
  // with Aborted on every other rank) and stops the listeners of the ids it
  // made. Call it first thing in the derived destructor, while the device's
  // memory and lock still exist; idempotent, never throws.
  void close_collectives() noexcept;

 private:
  Device* self_;
  int index_;
  bool closed_ = false;
};

// The sparkrt.collectives.v1 table for devices that derive from
// HostCollectiveDevice. `backend` names the plugin in messages and in the
// unique ids it makes ("mock", "cpu"); the first call's name is kept.
const SparkrtCollectivesExtension* host_collectives_extension(const char* backend);

// Aborts every clique, stops every listener and joins every thread of the
// library. Call it from the Backend destructor so that no thread outlives
// the plugin library. Later calls of the table still work (and start
// threads again); idempotent.
void shutdown_host_collectives() noexcept;

// The number of devices a host backend offers: SPARKRT_HOST_DEVICES, digits
// only, 1..64, default 4. InvalidArgument naming the variable and its value
// otherwise.
absl::StatusOr<int> host_device_count();

}  // namespace sparkrt::sdk

#endif  // SPARKRT_SDK_HOST_COLLECTIVES_H_
