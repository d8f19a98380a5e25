// sparkrt.collectives.v1 for host backends: the calls behind the C table
// (which sdk/collectives_adapter.h makes), the communicator table, groups,
// and the checked moves between device memory and the staged host buffers.
// The matching and arithmetic are host_clique.cc's, the transport across
// processes host_clique_socket.cc's.
#include "sparkrt/sdk/host_collectives.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "host_clique.h"
#include "sparkrt/abi_names.h"
#include "sparkrt/sdk/collectives_adapter.h"

namespace sparkrt::sdk {
namespace {

using clique::Clock;

struct Comm {
  SparkrtComm id = 0;
  int rank = 0;
  int num_ranks = 0;
  HostCollectiveDevice* device = nullptr;
  std::shared_ptr<clique::Link> link;
};

struct ServerEntry {
  Device* owner;
  std::shared_ptr<clique::Server> server;
};

struct State;
std::atomic<State*> g_state{nullptr};

// Everything the library keeps, per plugin library (each plugin links its
// own copy). Destroyed when the library unloads, after the Backend has
// called shutdown_host_collectives().
struct State {
  State() { g_state = this; }
  ~State() {
    shutdown();
    g_state = nullptr;
  }
  void shutdown() noexcept;

  std::mutex mu;
  std::string backend = "host";
  bool named = false;
  std::map<Device*, HostCollectiveDevice*> devices;
  std::map<SparkrtComm, std::shared_ptr<Comm>> comms;
  SparkrtComm next_comm = 1;  // never 0, never reused
  std::vector<ServerEntry> servers;
};

State& state() {
  static State s;
  return s;
}

void end_comms(std::vector<std::shared_ptr<Comm>>& comms, const absl::Status& reason) {
  for (auto& c : comms) {
    c->link->abort(reason);
    c->link->leave();
  }
  comms.clear();
}

void State::shutdown() noexcept {
  std::vector<std::shared_ptr<Comm>> ending;
  std::vector<ServerEntry> stopping;
  {
    std::lock_guard lock(mu);
    for (auto& [id, c] : comms) ending.push_back(c);
    comms.clear();
    stopping.swap(servers);
  }
  end_comms(ending, absl::AbortedError(absl::StrFormat(
                        "the clique was aborted: the %s plugin library is shutting down", backend)));
  for (auto& s : stopping) clique::stop_server(*s.server);
}

// Servers whose clique is over are joined at the next chance.
std::vector<ServerEntry> take_finished_servers_locked(State& s) {
  std::vector<ServerEntry> done;
  std::erase_if(s.servers, [&](ServerEntry& e) {
    if (!clique::server_finished(*e.server)) return false;
    done.push_back(std::move(e));
    return true;
  });
  return done;
}

// ---- arguments -----------------------------------------------------------------

absl::StatusOr<uint32_t> collective_timeout() {
  const char* v = std::getenv("SPARKRT_COLLECTIVE_TIMEOUT_S");
  if (v == nullptr || v[0] == '\0') return 300;
  uint64_t n = 0;
  bool ok = std::strlen(v) <= 6;
  for (const char* p = v; ok && *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') ok = false;
    else n = n * 10 + uint64_t(*p - '0');
  }
  if (!ok || n < 1 || n > 86400)
    return absl::InvalidArgumentError(absl::StrFormat(
        "SPARKRT_COLLECTIVE_TIMEOUT_S='%s' is not a whole number of seconds in 1..86400 (digits "
        "only); fix or unset it (default 300)",
        v));
  return uint32_t(n);
}

absl::StatusOr<HostCollectiveDevice*> find_device_locked(State& s, SparkrtDevice* handle,
                                                         const char* call, const std::string& what) {
  auto it = s.devices.find(reinterpret_cast<Device*>(handle));
  if (handle == nullptr || it == s.devices.end())
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s %p is not an open device of the %s backend (pass the native handle of a device "
        "opened from this plugin)",
        call, what, static_cast<void*>(handle), s.backend));
  return it->second;
}

absl::Status unknown_comm_locked(const State& s, SparkrtComm comm, const char* call) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: communicator %d is unknown to the %s backend (never created, or destroyed; handles "
      "are never reused)",
      call, comm, s.backend));
}

absl::StatusOr<std::shared_ptr<Comm>> find_comm(SparkrtComm comm, const char* call) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.comms.find(comm);
  if (it == s.comms.end()) return unknown_comm_locked(s, comm, call);
  return it->second;
}

SparkrtComm add_comm_locked(State& s, int rank, int num_ranks, HostCollectiveDevice* device,
                            std::shared_ptr<clique::Link> link) {
  auto c = std::make_shared<Comm>();
  c->id = s.next_comm++;
  c->rank = rank;
  c->num_ranks = num_ranks;
  c->device = device;
  c->link = std::move(link);
  s.comms.emplace(c->id, c);
  return c->id;
}

// ---- one collective --------------------------------------------------------------

// An enum field as the caller wrote it: the C side may pass any value, and
// loading one outside the enumeration as the enum type is undefined in C++.
template <typename E>
int32_t raw(const E& field) {
  static_assert(sizeof(E) == sizeof(int32_t));
  int32_t v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

struct Op {
  std::shared_ptr<Comm> comm;
  SparkrtCollectiveArgs args{};
  clique::OpDesc desc;
  clique::Sizes sizes;
  const char* name = "";
  std::vector<std::byte> staged;
  std::shared_ptr<clique::Ticket> ticket;
};

void record(const Op& op, absl::StatusCode code) {
  HostCollectiveCall call;
  call.comm = op.args.comm;
  call.kind = raw(op.args.kind);
  call.dtype = raw(op.args.dtype);
  call.reduce_op = raw(op.args.reduce_op);
  call.peer = op.args.peer;
  call.count = op.args.count;
  call.stream = op.args.stream;
  call.code = code;
  op.comm->device->on_collective(call);
}

// The arguments checked against the clique and the device's live memory,
// before anything is posted.
absl::Status check(Op& op) {
  const SparkrtCollectiveArgs& a = op.args;
  const int32_t kind = raw(a.kind);
  const bool reduces =
      kind == SPARKRT_COLLECTIVE_ALL_REDUCE || kind == SPARKRT_COLLECTIVE_REDUCE_SCATTER;
  const bool has_peer = kind == SPARKRT_COLLECTIVE_BROADCAST || kind == SPARKRT_COLLECTIVE_SEND ||
                        kind == SPARKRT_COLLECTIVE_RECV;
  op.name = abi_collective_kind_name(kind);
  op.desc = clique::OpDesc{kind, raw(a.dtype), reduces ? raw(a.reduce_op) : 0,
                           has_peer ? a.peer : 0, a.count};
  auto sizes = clique::op_sizes(op.desc, op.comm->rank, op.comm->num_ranks);
  if (!sizes.ok()) return sizes.status();
  op.sizes = *sizes;
  return op.comm->device->with_collective_memory(a.stream, op.name, [&](AddressSpace& m) {
    if (op.sizes.send != 0) {
      if (auto p = m.resolve(a.send, op.sizes.send, absl::StrCat(op.name, " send")); !p.ok())
        return p.status();
    }
    if (op.sizes.recv != 0) {
      if (auto p = m.resolve(a.recv, op.sizes.recv, absl::StrCat(op.name, " recv")); !p.ok())
        return p.status();
    }
    return absl::OkStatus();
  });
}

// Copies the contribution out of device memory (under the device's lock).
absl::Status stage(Op& op) {
  if (op.sizes.send == 0) return absl::OkStatus();
  op.staged.resize(size_t(op.sizes.send));
  return op.comm->device->with_collective_memory(op.args.stream, op.name, [&](AddressSpace& m) {
    auto p = m.resolve(op.args.send, op.sizes.send, absl::StrCat(op.name, " send"));
    if (!p.ok()) return p.status();
    std::memcpy(op.staged.data(), *p, op.staged.size());
    return absl::OkStatus();
  });
}

void post(Op& op, uint32_t timeout_s) {
  op.ticket = std::make_shared<clique::Ticket>();
  op.comm->link->post(op.desc, std::move(op.staged), timeout_s, op.ticket);
}

// Waits for the hub's answer and writes this rank's result.
absl::Status complete(Op& op, uint32_t timeout_s) {
  clique::Link& link = *op.comm->link;
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  if (!op.ticket->wait_until(deadline)) {
    link.expire();
    if (!op.ticket->wait_until(deadline + link.grace())) {
      const absl::Status why = absl::DeadlineExceededError(absl::StrFormat(
          "%s on rank %d: no answer from the clique's host within %d s; the clique is aborted",
          op.name, op.comm->rank, timeout_s));
      link.abort(absl::AbortedError(absl::StrCat("the clique was aborted: ", why.message())));
      op.ticket->complete(clique::Result{why, nullptr, 0, 0});
    }
  }
  clique::Result r = op.ticket->take();
  if (!r.status.ok())
    return absl::Status(r.status.code(), absl::StrFormat("%s on rank %d of %d: %s", op.name,
                                                         op.comm->rank, op.comm->num_ranks,
                                                         r.status.message()));
  if (r.size != op.sizes.recv)
    return absl::InternalError(absl::StrFormat("%s: the result has %d bytes, %d expected", op.name,
                                               r.size, op.sizes.recv));
  if (op.sizes.recv == 0) return absl::OkStatus();
  return op.comm->device->with_collective_memory(op.args.stream, op.name, [&](AddressSpace& m) {
    auto p = m.resolve(op.args.recv, op.sizes.recv, absl::StrCat(op.name, " recv"));
    if (!p.ok()) return p.status();
    std::memcpy(*p, r.bytes().data(), r.size);
    return absl::OkStatus();
  });
}

// ---- groups -----------------------------------------------------------------------

struct Group {
  int depth = 0;
  std::vector<Op> ops;
  absl::Status error;  // of the first call that failed inside the group
};
// A plain pointer: a thread_local with a destructor would pin the library
// (or run after it is unloaded).
thread_local Group* t_group = nullptr;

// ---- the calls ------------------------------------------------------------------

struct HostCollectives {
  static absl::Status library(SparkrtCollectivesLibraryArgs& a);
  static absl::Status get_unique_id(SparkrtUniqueIdArgs& a);
  static absl::Status comm_init_all(SparkrtCommInitAllArgs& a);
  static absl::Status comm_init_rank(SparkrtCommInitRankArgs& a);
  static absl::Status comm_destroy(SparkrtComm comm);
  static absl::Status comm_abort(SparkrtComm comm);
  static absl::Status comm_status(SparkrtComm comm);
  static absl::Status collective(const SparkrtCollectiveArgs& a);
  static absl::Status group_start();
  static absl::Status group_end();
};

absl::Status HostCollectives::library(SparkrtCollectivesLibraryArgs& a) {
  std::snprintf(a.name, sizeof a.name, "%s", "sparkrt host collectives");
  a.version = 1;
  return absl::OkStatus();
}

absl::Status HostCollectives::get_unique_id(SparkrtUniqueIdArgs& a) {
  State& s = state();
  std::vector<ServerEntry> finished;
  std::string backend;
  {
    std::lock_guard lock(s.mu);
    if (auto d = find_device_locked(s, a.device, "get_unique_id", "device"); !d.ok())
      return d.status();
    finished = take_finished_servers_locked(s);
    backend = s.backend;
  }
  for (auto& e : finished) clique::stop_server(*e.server);
  SparkrtUniqueId id{};
  auto server = clique::start_server(backend, id);
  if (!server.ok()) return server.status();
  {
    std::lock_guard lock(s.mu);
    // A device closed meanwhile (a misuse) must not leave its server behind.
    if (s.devices.contains(reinterpret_cast<Device*>(a.device))) {
      s.servers.push_back(ServerEntry{reinterpret_cast<Device*>(a.device), *server});
      a.id = id;
      return absl::OkStatus();
    }
  }
  clique::stop_server(**server);
  return absl::FailedPreconditionError("get_unique_id: the device was closed during the call");
}

absl::Status HostCollectives::comm_init_all(SparkrtCommInitAllArgs& a) {
  if (a.num_devices < 1 || a.num_devices > clique::kMaxRanks)
    return absl::InvalidArgumentError(absl::StrFormat(
        "comm_init_all: num_devices %d is out of 1..%d", a.num_devices, clique::kMaxRanks));
  if (a.devices == nullptr || a.comms == nullptr)
    return absl::InvalidArgumentError("comm_init_all: null devices or comms array");
  State& s = state();
  std::lock_guard lock(s.mu);
  std::vector<HostCollectiveDevice*> devices;
  std::map<int, int> by_index;  // device index -> position
  for (int i = 0; i < a.num_devices; ++i) {
    auto d = find_device_locked(s, a.devices[i], "comm_init_all",
                                absl::StrFormat("devices[%d]", i));
    if (!d.ok()) return d.status();
    const int index = (*d)->collective_device_index();
    if (auto [it, fresh] = by_index.emplace(index, i); !fresh)
      return absl::InvalidArgumentError(absl::StrFormat(
          "comm_init_all: devices[%d] has device index %d, as devices[%d] does; each rank "
          "needs a device of its own index (open indices 0..N-1, SPARKRT_HOST_DEVICES sets N)",
          i, index, it->second));
    devices.push_back(*d);
  }
  auto hub = std::make_shared<clique::Hub>(a.num_devices);
  for (int i = 0; i < a.num_devices; ++i)
    a.comms[i] = add_comm_locked(s, i, a.num_devices, devices[size_t(i)],
                                 clique::in_process_link(hub, i));
  return absl::OkStatus();
}

absl::Status HostCollectives::comm_init_rank(SparkrtCommInitRankArgs& a) {
  if (t_group != nullptr)
    return absl::FailedPreconditionError(
        "comm_init_rank: called between group_start and group_end; it waits for every rank "
        "to join, so call it outside a group");
  if (a.num_ranks < 1 || a.num_ranks > clique::kMaxRanks || a.rank < 0 || a.rank >= a.num_ranks)
    return absl::InvalidArgumentError(absl::StrFormat(
        "comm_init_rank: rank %d of %d ranks is impossible (1..%d ranks, 0 <= rank < "
        "num_ranks)",
        a.rank, a.num_ranks, clique::kMaxRanks));
  auto timeout = collective_timeout();
  if (!timeout.ok()) return timeout.status();
  State& s = state();
  HostCollectiveDevice* device;
  std::string backend;
  {
    std::lock_guard lock(s.mu);
    auto d = find_device_locked(s, a.device, "comm_init_rank", "device");
    if (!d.ok()) return d.status();
    device = *d;
    backend = s.backend;
  }
  auto link = clique::join_clique(backend, a.id, a.num_ranks, a.rank, *timeout);
  if (!link.ok()) return link.status();
  std::lock_guard lock(s.mu);
  a.comm = add_comm_locked(s, a.rank, a.num_ranks, device, *std::move(link));
  return absl::OkStatus();
}

absl::Status HostCollectives::comm_destroy(SparkrtComm comm) {
  std::shared_ptr<Comm> c;
  {
    State& s = state();
    std::lock_guard lock(s.mu);
    auto it = s.comms.find(comm);
    if (it == s.comms.end()) return unknown_comm_locked(s, comm, "comm_destroy");
    c = std::move(it->second);
    s.comms.erase(it);
  }
  c->link->leave();
  return absl::OkStatus();
}

absl::Status HostCollectives::comm_abort(SparkrtComm comm) {
  auto c = find_comm(comm, "comm_abort");
  if (!c.ok()) return c.status();
  (*c)->link->abort(absl::AbortedError(
      absl::StrFormat("the clique was aborted: comm_abort was called on rank %d", (*c)->rank)));
  return absl::OkStatus();
}

absl::Status HostCollectives::comm_status(SparkrtComm comm) {
  auto c = find_comm(comm, "comm_status");
  if (!c.ok()) return c.status();
  return (*c)->link->status();
}

absl::Status HostCollectives::collective(const SparkrtCollectiveArgs& a) {
  auto c = find_comm(a.comm, abi_collective_kind_name(raw(a.kind)));
  if (!c.ok()) {
    if (t_group != nullptr && t_group->error.ok()) t_group->error = c.status();
    return c.status();
  }
  Op op;
  op.comm = *c;
  op.args = a;
  op.args.struct_size = sizeof op.args;
  absl::Status s = check(op);
  auto timeout = collective_timeout();
  if (s.ok() && !timeout.ok()) s = timeout.status();
  if (!s.ok()) {
    record(op, s.code());
    if (t_group != nullptr && t_group->error.ok()) t_group->error = s;
    return s;
  }
  if (t_group != nullptr) {
    t_group->ops.push_back(std::move(op));
    return absl::OkStatus();
  }
  s = stage(op);
  if (s.ok()) {
    post(op, *timeout);
    s = complete(op, *timeout);
  }
  record(op, s.code());
  return s;
}

absl::Status HostCollectives::group_start() {
  if (t_group == nullptr) t_group = new Group;
  ++t_group->depth;
  return absl::OkStatus();
}

absl::Status HostCollectives::group_end() {
  if (t_group == nullptr)
    return absl::FailedPreconditionError("group_end: no group is open on this thread (call "
                                         "group_start first)");
  if (--t_group->depth > 0) return absl::OkStatus();
  std::unique_ptr<Group> g(t_group);
  t_group = nullptr;
  if (!g->error.ok())
    return absl::Status(g->error.code(),
                        absl::StrCat("group_end: nothing in the group was issued, because a call "
                                     "in it failed: ",
                                     g->error.message()));
  auto timeout = collective_timeout();
  if (!timeout.ok()) return timeout.status();
  // Every contribution is staged before anything is posted, so a failure
  // leaves every clique as it was.
  for (Op& op : g->ops) {
    if (absl::Status s = stage(op); !s.ok()) {
      record(op, s.code());
      return absl::Status(s.code(), absl::StrCat("group_end: nothing in the group was issued: ",
                                                 s.message()));
    }
  }
  for (Op& op : g->ops) post(op, *timeout);
  absl::Status first;
  for (Op& op : g->ops) {
    absl::Status s = complete(op, *timeout);
    record(op, s.code());
    if (first.ok()) first = s;
  }
  return first;
}

}  // namespace

HostCollectiveDevice::HostCollectiveDevice(Device& self, int index) : self_(&self), index_(index) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.devices[self_] = this;
}

HostCollectiveDevice::~HostCollectiveDevice() { close_collectives(); }

void HostCollectiveDevice::close_collectives() noexcept {
  if (closed_) return;
  closed_ = true;
  State* s = g_state.load();
  if (s == nullptr) return;
  std::vector<std::shared_ptr<Comm>> ending;
  std::vector<ServerEntry> stopping;
  {
    std::lock_guard lock(s->mu);
    s->devices.erase(self_);
    for (auto it = s->comms.begin(); it != s->comms.end();) {
      if (it->second->device == this) {
        ending.push_back(std::move(it->second));
        it = s->comms.erase(it);
      } else {
        ++it;
      }
    }
    stopping = take_finished_servers_locked(*s);
    std::erase_if(s->servers, [&](ServerEntry& e) {
      if (e.owner != self_) return false;
      stopping.push_back(std::move(e));
      return true;
    });
  }
  for (auto& c : ending) {
    c->link->abort(absl::AbortedError(absl::StrFormat(
        "the clique was aborted: the device of rank %d (device index %d) was closed", c->rank,
        index_)));
    c->link->leave();
  }
  for (auto& e : stopping) clique::stop_server(*e.server);
}

const SparkrtCollectivesExtension* host_collectives_extension(const char* backend) {
  {
    State& s = state();
    std::lock_guard lock(s.mu);
    if (!s.named && backend != nullptr) {
      s.backend = backend;
      s.named = true;
    }
  }
  return collectives_extension<HostCollectives>();
}

void shutdown_host_collectives() noexcept {
  if (State* s = g_state.load()) s->shutdown();
}

absl::StatusOr<int> host_device_count() {
  const char* v = std::getenv("SPARKRT_HOST_DEVICES");
  if (v == nullptr || v[0] == '\0') return 4;
  int n = 0;
  bool ok = std::strlen(v) <= 2;
  for (const char* p = v; ok && *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') ok = false;
    else n = n * 10 + (*p - '0');
  }
  if (!ok || n < 1 || n > clique::kMaxRanks)
    return absl::InvalidArgumentError(absl::StrFormat(
        "SPARKRT_HOST_DEVICES='%s' is not a device count in 1..%d (digits only); fix or unset it "
        "(default 4)",
        v, clique::kMaxRanks));
  return n;
}

}  // namespace sparkrt::sdk
