// Internals of the host collectives (sparkrt/sdk/host_collectives.h): the
// hub that matches and computes a clique's collectives in host memory, and
// the links a rank reaches it through (in memory, or over a Unix socket to
// the process that hosts it).
#ifndef SPARKRT_PLUGINS_SRC_HOST_CLIQUE_H_
#define SPARKRT_PLUGINS_SRC_HOST_CLIQUE_H_

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/extensions/collectives.h"

namespace sparkrt::sdk::clique {

using Clock = std::chrono::steady_clock;

inline constexpr int kMaxRanks = 64;

// What every rank of one collective must agree on. reduce_op is kept only
// for the kinds that reduce, peer for broadcast (the root) and send/recv.
struct OpDesc {
  int32_t kind = 0;
  int32_t dtype = 0;
  int32_t reduce_op = 0;
  int32_t peer = 0;
  uint64_t count = 0;
};

// Bytes rank `rank` contributes and receives; InvalidArgument for a
// descriptor that is not valid in a clique of `num_ranks` (unknown kind,
// dtype or op, a root or peer out of range, sizes that overflow).
struct Sizes {
  uint64_t send = 0;
  uint64_t recv = 0;
};
absl::StatusOr<Sizes> op_sizes(const OpDesc& d, int rank, int num_ranks);

// "all_reduce of 16 f32 (sum)", "broadcast of 8 bf16 from root 0", ...
std::string describe(const OpDesc& d);

// A completed operation: its status and, when OK, this rank's result bytes
// (shared between ranks that get the same result).
struct Result {
  absl::Status status;
  std::shared_ptr<const std::vector<std::byte>> data;
  size_t offset = 0;
  size_t size = 0;
  std::span<const std::byte> bytes() const {
    return data ? std::span<const std::byte>(data->data() + offset, size)
                : std::span<const std::byte>();
  }
};
using Completion = std::function<void(Result)>;

struct Post {
  int rank = 0;
  OpDesc desc;
  std::vector<std::byte> data;  // the staged contribution, op_sizes().send bytes
  Clock::time_point deadline;
  uint32_t timeout_s = 0;  // for messages
  Completion done;         // called exactly once, never under the hub's lock
};

// The matching and arithmetic of one clique; thread-safe. Collectives are
// matched by per-rank sequence number, sends and receives per (sender,
// receiver) pair in order. Once aborted, every pending and later post fails
// with the abort's status.
class Hub {
 public:
  // `on_abort` (optional) is told the reason once, outside the lock.
  explicit Hub(int num_ranks, std::function<void(const absl::Status&)> on_abort = {});
  ~Hub();

  int num_ranks() const { return num_ranks_; }
  // The descriptor and data size must already be valid (op_sizes).
  void post(Post p);
  // First reason wins; its code should be kAborted.
  void abort(const absl::Status& reason);
  // OK, or the abort reason.
  absl::Status status() const;
  // Fails the posts whose deadline has passed with DeadlineExceeded (naming
  // the operation and the ranks that did not arrive) and aborts the clique.
  void expire_due(Clock::time_point now);
  // Waits (until `deadline` at most) for the results already computed to be
  // handed to their completions: a host that shuts its connections down
  // first would lose replies to ranks whose collective has completed.
  void drain(Clock::time_point deadline);

 private:
  struct Slot {  // one collective sequence number
    std::vector<std::optional<Post>> posts;
    int arrived = 0;
  };
  struct Channel {  // sends from one rank to another, in order
    std::deque<Post> sends, recvs;
    uint64_t sends_posted = 0, recvs_posted = 0;  // numbers messages
    uint64_t matched = 0;
  };
  using Done = std::vector<std::pair<Completion, Result>>;

  void finish_slot(Slot& slot, uint64_t seq, Done& done);
  void match(Channel& ch, int from, int to, Done& done);
  void abort_locked(const absl::Status& reason, Done& done);
  static void run(Done& done);
  // run() for a `done` counted in delivering_ under the lock that filled it.
  void deliver(Done& done);

  const int num_ranks_;
  std::function<void(const absl::Status&)> on_abort_;
  mutable std::mutex mu_;
  std::condition_variable drained_;
  int delivering_ = 0;  // completion lists taken out of the lock, not yet run
  absl::Status aborted_;
  std::vector<uint64_t> next_seq_;       // per rank, 1-based
  std::map<uint64_t, Slot> slots_;       // pending collectives
  std::map<std::pair<int, int>, Channel> channels_;
};

// One waiter's completion.
class Ticket {
 public:
  void complete(Result r);  // the first completion wins
  // Whether it completed by `deadline`.
  bool wait_until(Clock::time_point deadline);
  Result take();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Result result_;
};

// A rank's way to its clique's hub.
class Link {
 public:
  virtual ~Link() = default;
  virtual void post(const OpDesc& d, std::vector<std::byte> data, uint32_t timeout_s,
                    std::shared_ptr<Ticket> ticket) = 0;
  // Called once a post's deadline has passed: lets the hub fail it (the
  // socket link leaves that to the hosting process).
  virtual void expire() = 0;
  // How long past the deadline a waiter still waits for the hub's answer.
  virtual Clock::duration grace() const = 0;
  virtual void abort(const absl::Status& reason) = 0;
  virtual absl::Status status() = 0;
  // The communicator is destroyed: the clique is aborted for the others and
  // every thread of the link is joined.
  virtual void leave() = 0;
};

std::shared_ptr<Link> in_process_link(std::shared_ptr<Hub> hub, int rank);

// ---- across processes (host_clique_socket.cc) ------------------------------

// The hosting side of a clique made by get_unique_id: a listener thread on an
// abstract Unix socket, a thread per connection, the hub behind them.
class Server;
// Starts a server; fills `id` with its name and secret.
absl::StatusOr<std::shared_ptr<Server>> start_server(const std::string& backend,
                                                     SparkrtUniqueId& id);
// Aborts its clique, closes every connection, joins every thread.
void stop_server(Server& server);
// Whether the server has ended on its own (the clique formed and every rank
// left, or forming failed) and only waits to be joined.
bool server_finished(const Server& server);

// Connects as `rank` of `num_ranks` to the clique of `id` and waits until
// every rank has joined.
absl::StatusOr<std::shared_ptr<Link>> join_clique(const std::string& backend,
                                                  const SparkrtUniqueId& id, int num_ranks,
                                                  int rank, uint32_t timeout_s);

// ---- element arithmetic (host_clique.cc), exposed for the hub ---------------
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);  // round to nearest even, NaN stays NaN

}  // namespace sparkrt::sdk::clique

#endif  // SPARKRT_PLUGINS_SRC_HOST_CLIQUE_H_
