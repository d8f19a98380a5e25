// Host cliques across processes: the unique id, the hosting server (a
// listener thread on a Linux abstract-namespace Unix socket and a thread per
// connection, in front of a Hub) and the rank's socket link.
//
// Protocol (host byte order: both ends are on one machine). A rank sends
// requests (RequestHeader + body) and reads replies (ReplyHeader + message +
// result bytes). Requests carry an id the reply repeats, so replies may come
// back out of order (a send completes only when its peer receives). The
// server trusts nothing it reads: a peer that sends a bad frame, a wrong
// secret or an impossible size is answered with the reason and dropped.
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "host_clique.h"

namespace sparkrt::sdk::clique {
namespace {

constexpr char kIdMagic[8] = {'S', 'P', 'R', 'K', 'C', 'O', 'L', 'L'};
constexpr uint32_t kIdVersion = 1;
constexpr size_t kSecretBytes = 32;

struct IdLayout {
  char magic[8];
  uint32_t version;
  uint32_t pid;          // of the hosting process, for messages
  char backend[16];      // NUL-terminated
  char socket[64];       // abstract socket name, NUL-terminated
  uint8_t secret[kSecretBytes];
};
static_assert(sizeof(IdLayout) == SPARKRT_UNIQUE_ID_BYTES);

constexpr uint32_t kFrameMagic = 0x4b525053;  // "SPRK"
enum FrameType : uint32_t {
  kHello = 1,     // body HelloBody
  kPost = 2,      // body PostBody + the staged bytes
  kAbort = 3,     // body: the reason's text
  kWelcome = 11,  // the clique has formed (or: the hello's failure)
  kResult = 12,   // a post's status and result bytes
  kNotice = 13,   // the clique was aborted: code and message
};

struct RequestHeader {
  uint32_t magic;
  uint32_t type;
  uint64_t id;
  uint64_t bytes;  // of the body
};
struct HelloBody {
  uint8_t secret[kSecretBytes];
  int32_t rank;
  int32_t num_ranks;
  uint32_t timeout_s;
  uint32_t version;
};
struct PostBody {
  int32_t kind;
  int32_t dtype;
  int32_t reduce_op;
  int32_t peer;
  uint64_t count;
  uint32_t timeout_s;
  uint32_t reserved;
};
struct ReplyHeader {
  uint32_t magic;
  uint32_t type;
  uint64_t id;
  int32_t code;
  uint32_t message_bytes;
  uint64_t data_bytes;
};

constexpr uint64_t kMaxData = uint64_t{16} << 30;  // per request, far above any test
constexpr uint32_t kMaxMessage = 64 * 1024;
constexpr uint32_t kMaxAbortText = 4096;
constexpr uint32_t kMaxTimeoutS = 86400;

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);  // a closed peer is EPIPE, not SIGPIPE
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

void fill_random(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t got = ::getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      std::random_device rd;  // no getrandom: the C++ library's source
      for (; n > 0; --n) *p++ = uint8_t(rd());
      return;
    }
    p += got;
    n -= size_t(got);
  }
}

socklen_t abstract_address(const char* name, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  const size_t len = std::strlen(name);
  std::memcpy(addr.sun_path + 1, name, len);  // sun_path[0] = 0: the abstract namespace
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + len);
}

bool same_secret(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;  // constant time
  for (size_t i = 0; i < kSecretBytes; ++i) diff |= uint8_t(a[i] ^ b[i]);
  return diff == 0;
}

bool send_reply(int fd, std::mutex& mu, uint32_t type, uint64_t id, const absl::Status& status,
                std::span<const std::byte> data) {
  const absl::string_view msg = status.message().substr(0, kMaxMessage);
  ReplyHeader h{kFrameMagic, type, id, int32_t(status.code()), uint32_t(msg.size()),
                uint64_t(status.ok() ? data.size() : 0)};
  std::lock_guard lock(mu);
  if (!write_all(fd, &h, sizeof h)) return false;
  if (!msg.empty() && !write_all(fd, msg.data(), msg.size())) return false;
  return h.data_bytes == 0 || write_all(fd, data.data(), data.size());
}

}  // namespace

// ---- the hosting side ----------------------------------------------------------

struct Conn {
  explicit Conn(int f) : fd(f) {}
  ~Conn() { ::close(fd); }
  const int fd;
  std::mutex write_mu;
  std::thread thread;
  std::atomic<bool> done{false};
  // Guarded by the server's mutex.
  int rank = -1;
  bool accepted = false;
  bool closed = false;
};

class Server {
 public:
  Server(std::string backend, std::string name) : backend_(std::move(backend)), name_(std::move(name)) {}
  ~Server() { stop(); }

  absl::Status start(const uint8_t* secret);
  void stop();
  bool finished() const { return finished_.load(); }

 private:
  void listen_loop();
  void serve(Conn* conn);
  // Answers request `id` with `why` and ends the connection's reads.
  void refuse(Conn& conn, uint64_t id, const absl::Status& why);
  absl::Status hello(const std::shared_ptr<Conn>& conn, uint64_t id, const HelloBody& body);
  void closed(Conn& conn);
  void check_forming(Clock::time_point now);
  void notify_abort(const absl::Status& reason);
  void wake();

  const std::string backend_;
  const std::string name_;
  uint8_t secret_[kSecretBytes] = {};
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread listener_;
  std::atomic<bool> finished_{false};

  std::mutex mu_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::list<std::shared_ptr<Conn>> conns_;
  int num_ranks_ = 0;  // 0 until the first accepted hello
  uint32_t form_timeout_s_ = 0;
  Clock::time_point form_deadline_;
  std::vector<std::shared_ptr<Conn>> ranks_;
  std::vector<uint64_t> hello_ids_;
  int joined_ = 0;
  int left_ = 0;
  std::shared_ptr<Hub> hub_;  // once every rank has joined
  absl::Status failed_;       // forming failed
};

absl::Status Server::start(const uint8_t* secret) {
  std::memcpy(secret_, secret, kSecretBytes);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    return absl::InternalError(absl::StrCat("get_unique_id: pipe2: ", std::strerror(errno)));
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0)
    return absl::InternalError(absl::StrCat("get_unique_id: socket: ", std::strerror(errno)));
  sockaddr_un addr;
  const socklen_t len = abstract_address(name_.c_str(), addr);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(listen_fd_, kMaxRanks * 2) != 0)
    return absl::InternalError(absl::StrFormat("get_unique_id: cannot listen on abstract socket "
                                               "@%s: %s",
                                               name_, std::strerror(errno)));
  listener_ = std::thread([this] { listen_loop(); });
  return absl::OkStatus();
}

void Server::wake() {
  const char c = 0;
  while (::write(wake_[1], &c, 1) < 0 && errno == EINTR) {
  }
}

void Server::stop() {
  std::shared_ptr<Hub> hub;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = stopping_ = true;
    hub = hub_;
  }
  if (wake_[1] >= 0) wake();
  // Replies of collectives that have completed go out before the sockets close.
  if (hub) hub->drain(Clock::now() + std::chrono::seconds(5));
  if (hub)
    hub->abort(absl::AbortedError(
        "the clique was aborted: the process that hosts it closed the device that made its id "
        "(or unloaded the plugin)"));
  {
    // No connection is added once stopping_ is set; wake every reader.
    std::lock_guard lock(mu_);
    for (auto& c : conns_) ::shutdown(c->fd, SHUT_RDWR);
  }
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (listener_.joinable()) listener_.join();
  std::list<std::shared_ptr<Conn>> conns;
  {
    std::lock_guard lock(mu_);
    conns.swap(conns_);
  }
  for (auto& c : conns)
    if (c->thread.joinable()) c->thread.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int& fd : wake_)
    if (fd >= 0) ::close(fd);
  listen_fd_ = wake_[0] = wake_[1] = -1;
  finished_ = true;
}

void Server::listen_loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    const int n = ::poll(fds, 2, 100);  // also the tick of the deadlines below
    if (n < 0 && errno != EINTR) break;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    if (fds[1].revents & POLLIN) {
      char buf[64];
      while (::read(wake_[0], buf, sizeof buf) > 0) {
      }
    }
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        // A peer that stops reading must not stall the clique's other ranks.
        timeval tv{30, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        auto conn = std::make_shared<Conn>(fd);
        std::lock_guard lock(mu_);
        if (stopping_) return;  // conn closes with its last reference
        conns_.push_back(conn);
        conn->thread = std::thread([this, c = conn.get()] { serve(c); });
      }
    }
    const auto now = Clock::now();
    check_forming(now);
    std::shared_ptr<Hub> hub;
    std::list<std::shared_ptr<Conn>> done;
    {
      std::lock_guard lock(mu_);
      hub = hub_;
      for (auto it = conns_.begin(); it != conns_.end();) {
        if ((*it)->done.load()) {
          done.push_back(std::move(*it));
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (hub) hub->expire_due(now);
    for (auto& c : done) c->thread.join();
    if (finished_.load()) return;
  }
}

void Server::refuse(Conn& conn, uint64_t id, const absl::Status& why) {
  send_reply(conn.fd, conn.write_mu, kResult, id,
             absl::Status(why.code(), absl::StrCat("the clique's host refused this connection: ",
                                                   why.message())),
             {});
  ::shutdown(conn.fd, SHUT_RDWR);
}

void Server::serve(Conn* conn) {
  std::shared_ptr<Conn> self;
  {
    std::lock_guard lock(mu_);
    for (auto& c : conns_)
      if (c.get() == conn) self = c;
  }
  for (;;) {
    RequestHeader h;
    if (!self || !read_all(conn->fd, &h, sizeof h)) break;
    if (h.magic != kFrameMagic) {
      refuse(*conn, h.id, absl::InvalidArgumentError("not a sparkrt collectives frame"));
      break;
    }
    bool accepted;
    int rank, num_ranks;
    std::shared_ptr<Hub> hub;
    {
      std::lock_guard lock(mu_);
      accepted = conn->accepted;
      rank = conn->rank;
      num_ranks = num_ranks_;
      hub = hub_;
    }
    if (h.type == kHello) {
      if (accepted || h.bytes != sizeof(HelloBody)) {
        refuse(*conn, h.id, absl::InvalidArgumentError(absl::StrFormat(
                                "malformed hello (%d bytes; a second hello?)", h.bytes)));
        break;
      }
      HelloBody body;
      if (!read_all(conn->fd, &body, sizeof body)) break;
      if (absl::Status s = hello(self, h.id, body); !s.ok()) {
        refuse(*conn, h.id, s);
        break;
      }
      continue;
    }
    if (!accepted || !hub) {
      refuse(*conn, h.id, absl::FailedPreconditionError(
                              "a request before the hello was accepted and the clique formed"));
      break;
    }
    if (h.type == kAbort) {
      if (h.bytes > kMaxAbortText) {
        refuse(*conn, h.id, absl::InvalidArgumentError("abort reason too long"));
        break;
      }
      std::string text(h.bytes, '\0');
      if (!read_all(conn->fd, text.data(), text.size())) break;
      hub->abort(absl::AbortedError(text));
      continue;
    }
    if (h.type != kPost || h.bytes < sizeof(PostBody) || h.bytes - sizeof(PostBody) > kMaxData) {
      refuse(*conn, h.id, absl::InvalidArgumentError(absl::StrFormat(
                              "unknown or oversized request (type %d, %d bytes)", h.type, h.bytes)));
      break;
    }
    PostBody body;
    if (!read_all(conn->fd, &body, sizeof body)) break;
    const OpDesc desc{body.kind, body.dtype, body.reduce_op, body.peer, body.count};
    auto sizes = op_sizes(desc, rank, num_ranks);
    if (!sizes.ok() || sizes->send != h.bytes - sizeof(PostBody) || body.timeout_s == 0 ||
        body.timeout_s > kMaxTimeoutS) {
      refuse(*conn, h.id, sizes.ok() ? absl::InvalidArgumentError(absl::StrFormat(
                                           "%s: %d data bytes or timeout %d s is wrong",
                                           describe(desc), h.bytes - sizeof(PostBody),
                                           body.timeout_s))
                                     : sizes.status());
      break;
    }
    Post p;
    p.rank = rank;
    p.desc = desc;
    try {
      p.data.resize(size_t(sizes->send));
    } catch (const std::bad_alloc&) {
      refuse(*conn, h.id, absl::ResourceExhaustedError("no host memory for the request"));
      break;
    }
    if (!p.data.empty() && !read_all(conn->fd, p.data.data(), p.data.size())) break;
    p.deadline = Clock::now() + std::chrono::seconds(body.timeout_s);
    p.timeout_s = body.timeout_s;
    p.done = [self, id = h.id](Result r) {
      send_reply(self->fd, self->write_mu, kResult, id, r.status, r.bytes());
    };
    hub->post(std::move(p));
  }
  closed(*conn);
  conn->done = true;
  wake();
}

absl::Status Server::hello(const std::shared_ptr<Conn>& conn, uint64_t id, const HelloBody& b) {
  ucred cred{};
  socklen_t cred_len = sizeof cred;
  if (::getsockopt(conn->fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0 &&
      cred.uid != ::getuid())
    return absl::PermissionDeniedError(absl::StrFormat(
        "the peer runs as user %d, the clique's host as user %d", cred.uid, ::getuid()));
  if (!same_secret(b.secret, secret_))
    return absl::PermissionDeniedError(
        "wrong secret: the id does not belong to this clique (pass the bytes get_unique_id "
        "returned, unchanged)");
  if (b.version != kIdVersion)
    return absl::InvalidArgumentError(absl::StrFormat(
        "protocol version %d, this host speaks %d; build every rank from one sparkrt", b.version,
        kIdVersion));
  if (b.num_ranks < 1 || b.num_ranks > kMaxRanks || b.rank < 0 || b.rank >= b.num_ranks)
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d of %d ranks is impossible (1..%d ranks, 0 <= rank < num_ranks)", b.rank,
        b.num_ranks, kMaxRanks));
  if (b.timeout_s == 0 || b.timeout_s > kMaxTimeoutS)
    return absl::InvalidArgumentError(absl::StrFormat("timeout %d s is out of 1..%d", b.timeout_s,
                                                      kMaxTimeoutS));
  std::vector<std::pair<std::shared_ptr<Conn>, uint64_t>> welcome;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return absl::UnavailableError("the clique's host is shutting down");
    if (!failed_.ok()) return failed_;
    if (hub_) return absl::FailedPreconditionError("the clique is complete: every rank has joined");
    if (num_ranks_ != 0 && b.num_ranks != num_ranks_)
      return absl::InvalidArgumentError(absl::StrFormat(
          "rank %d says the clique has %d ranks, but the ranks that joined first said %d; every "
          "rank must pass the same num_ranks",
          b.rank, b.num_ranks, num_ranks_));
    if (num_ranks_ == 0) {
      num_ranks_ = b.num_ranks;
      ranks_.resize(size_t(num_ranks_));
      hello_ids_.resize(size_t(num_ranks_));
      form_timeout_s_ = b.timeout_s;
      form_deadline_ = Clock::now() + std::chrono::seconds(b.timeout_s);
    }
    if (ranks_[size_t(b.rank)])
      return absl::AlreadyExistsError(absl::StrFormat(
          "rank %d has already joined this clique; each rank joins once", b.rank));
    ranks_[size_t(b.rank)] = conn;
    hello_ids_[size_t(b.rank)] = id;
    conn->rank = b.rank;
    conn->accepted = true;
    if (++joined_ == num_ranks_) {
      hub_ = std::make_shared<Hub>(num_ranks_, [this](const absl::Status& r) { notify_abort(r); });
      for (int r = 0; r < num_ranks_; ++r) welcome.emplace_back(ranks_[size_t(r)], hello_ids_[size_t(r)]);
    }
  }
  for (auto& [c, hid] : welcome) send_reply(c->fd, c->write_mu, kWelcome, hid, absl::OkStatus(), {});
  return absl::OkStatus();
}

void Server::notify_abort(const absl::Status& reason) {
  std::vector<std::shared_ptr<Conn>> conns;
  {
    std::lock_guard lock(mu_);
    for (auto& c : ranks_)
      if (c && !c->closed) conns.push_back(c);
  }
  for (auto& c : conns) send_reply(c->fd, c->write_mu, kNotice, 0, reason, {});
}

void Server::check_forming(Clock::time_point now) {
  std::vector<std::pair<std::shared_ptr<Conn>, uint64_t>> waiting;
  absl::Status why;
  {
    std::lock_guard lock(mu_);
    if (hub_ || !failed_.ok() || num_ranks_ == 0 || now < form_deadline_) return;
    std::vector<int> missing, present;
    for (int r = 0; r < num_ranks_; ++r) (ranks_[size_t(r)] ? present : missing).push_back(r);
    failed_ = why = absl::DeadlineExceededError(absl::StrFormat(
        "comm_init_rank: the clique of %d ranks did not form within %d s: ranks %s did not join "
        "(ranks %s did); SPARKRT_COLLECTIVE_TIMEOUT_S sets the limit",
        num_ranks_, form_timeout_s_, absl::StrJoin(missing, ", "), absl::StrJoin(present, ", ")));
    for (int r = 0; r < num_ranks_; ++r)
      if (ranks_[size_t(r)]) waiting.emplace_back(ranks_[size_t(r)], hello_ids_[size_t(r)]);
  }
  for (auto& [c, id] : waiting) send_reply(c->fd, c->write_mu, kWelcome, id, why, {});
}

void Server::closed(Conn& conn) {
  std::shared_ptr<Hub> hub;
  absl::Status reason;
  std::vector<std::pair<std::shared_ptr<Conn>, uint64_t>> waiting;
  absl::Status failed;
  {
    std::lock_guard lock(mu_);
    conn.closed = true;
    if (!conn.accepted) return;
    ++left_;
    if (hub_) {
      hub = hub_;
      reason = absl::AbortedError(absl::StrFormat(
          "the clique was aborted: the connection of rank %d closed (its communicator was "
          "destroyed or its process exited)",
          conn.rank));
    } else if (failed_.ok()) {
      failed_ = absl::AbortedError(absl::StrFormat(
          "comm_init_rank: rank %d left before the clique formed (its process exited or it "
          "gave up)",
          conn.rank));
      for (int r = 0; r < num_ranks_; ++r)
        if (ranks_[size_t(r)] && !ranks_[size_t(r)]->closed)
          waiting.emplace_back(ranks_[size_t(r)], hello_ids_[size_t(r)]);
    }
    if (left_ == joined_ && (hub_ || !failed_.ok())) finished_ = true;
    failed = failed_;
  }
  for (auto& [c, id] : waiting) send_reply(c->fd, c->write_mu, kWelcome, id, failed, {});
  if (hub) hub->abort(reason);
}

absl::StatusOr<std::shared_ptr<Server>> start_server(const std::string& backend,
                                                     SparkrtUniqueId& id) {
  IdLayout layout{};
  std::memcpy(layout.magic, kIdMagic, sizeof kIdMagic);
  layout.version = kIdVersion;
  layout.pid = uint32_t(::getpid());
  std::snprintf(layout.backend, sizeof layout.backend, "%s", backend.c_str());
  uint8_t token[8];
  fill_random(token, sizeof token);
  fill_random(layout.secret, sizeof layout.secret);
  std::string name = absl::StrFormat("sparkrt-%s-%d-", layout.backend, layout.pid);
  for (uint8_t b : token) absl::StrAppendFormat(&name, "%02x", b);
  std::snprintf(layout.socket, sizeof layout.socket, "%s", name.c_str());
  auto server = std::make_shared<Server>(backend, layout.socket);
  if (absl::Status s = server->start(layout.secret); !s.ok()) return s;
  std::memcpy(id.bytes, &layout, sizeof layout);
  return server;
}

void stop_server(Server& server) { server.stop(); }
bool server_finished(const Server& server) { return server.finished(); }

// ---- the rank's side ------------------------------------------------------------

namespace {

class SocketLink final : public Link {
 public:
  SocketLink(int fd, int rank, int num_ranks, uint32_t host_pid)
      : fd_(fd), rank_(rank), num_ranks_(num_ranks), host_pid_(host_pid) {}
  ~SocketLink() override { leave(); }

  void start() { reader_ = std::thread([this] { read_loop(); }); }

  // Sends a request; `ticket` gets its reply, whose result has `reply_bytes`.
  void request(uint32_t type, const void* body, size_t body_bytes, std::span<const std::byte> data,
               uint64_t reply_bytes, std::shared_ptr<Ticket> ticket) {
    uint64_t id;
    {
      std::lock_guard lock(mu_);
      if (!aborted_.ok()) {
        ticket->complete(Result{aborted_, nullptr, 0, 0});
        return;
      }
      id = next_id_++;
      pending_[id] = Pending{ticket, reply_bytes};
    }
    const RequestHeader h{kFrameMagic, type, id, body_bytes + data.size()};
    bool ok;
    {
      std::lock_guard lock(write_mu_);
      ok = write_all(fd_, &h, sizeof h) && write_all(fd_, body, body_bytes) &&
           (data.empty() || write_all(fd_, data.data(), data.size()));
    }
    if (!ok) lost();
  }

  void post(const OpDesc& d, std::vector<std::byte> data, uint32_t timeout_s,
            std::shared_ptr<Ticket> ticket) override {
    const PostBody body{d.kind, d.dtype, d.reduce_op, d.peer, d.count, timeout_s, 0};
    auto sizes = op_sizes(d, rank_, num_ranks_);
    request(kPost, &body, sizeof body, data, sizes.ok() ? sizes->recv : 0, std::move(ticket));
  }
  void expire() override {}  // the hosting process times posts out
  Clock::duration grace() const override { return std::chrono::seconds(10); }

  void abort(const absl::Status& reason) override {
    std::map<uint64_t, Pending> pending;
    {
      std::lock_guard lock(mu_);
      if (!aborted_.ok()) return;
      aborted_ = reason;
      pending.swap(pending_);
    }
    for (auto& [id, p] : pending) p.ticket->complete(Result{reason, nullptr, 0, 0});
    const std::string text(reason.message().substr(0, kMaxAbortText));
    const RequestHeader h{kFrameMagic, kAbort, 0, text.size()};
    std::lock_guard lock(write_mu_);
    if (write_all(fd_, &h, sizeof h)) write_all(fd_, text.data(), text.size());
  }

  absl::Status status() override {
    std::lock_guard lock(mu_);
    return aborted_;
  }

  void leave() override {
    std::lock_guard lock(leave_mu_);
    if (fd_ < 0) return;
    ::shutdown(fd_, SHUT_RDWR);  // wakes the reader; the host sees the rank leave
    if (reader_.joinable()) reader_.join();
    ::close(fd_);
    fd_ = -1;
  }

 private:
  struct Pending {
    std::shared_ptr<Ticket> ticket;
    uint64_t reply_bytes = 0;
  };

  void read_loop() {
    for (;;) {
      ReplyHeader h;
      if (!read_all(fd_, &h, sizeof h)) break;
      if (h.magic != kFrameMagic || h.message_bytes > kMaxMessage || h.data_bytes > kMaxData) break;
      std::string msg(h.message_bytes, '\0');
      if (!read_all(fd_, msg.data(), msg.size())) break;
      const absl::StatusCode code =
          h.code >= 0 && h.code <= 16 ? absl::StatusCode(h.code) : absl::StatusCode::kUnknown;
      if (h.type == kNotice) {
        std::lock_guard lock(mu_);
        if (aborted_.ok() && code != absl::StatusCode::kOk) aborted_ = absl::Status(code, msg);
        continue;
      }
      if (h.type != kResult && h.type != kWelcome) break;
      Pending p;
      {
        std::lock_guard lock(mu_);
        auto it = pending_.find(h.id);
        if (it == pending_.end()) break;  // a reply to nothing: the stream is not trustworthy
        p = std::move(it->second);
        pending_.erase(it);
      }
      Result r{absl::Status(code, msg), nullptr, 0, 0};
      if (code == absl::StatusCode::kOk) {
        if (h.data_bytes != p.reply_bytes) {
          p.ticket->complete(Result{absl::InternalError("the clique's host sent a result of the "
                                                        "wrong size"),
                                    nullptr, 0, 0});
          break;
        }
        auto buf = std::make_shared<std::vector<std::byte>>(size_t(h.data_bytes));
        if (!buf->empty() && !read_all(fd_, buf->data(), buf->size())) {
          p.ticket->complete(Result{lost_status(), nullptr, 0, 0});
          break;
        }
        r = Result{absl::OkStatus(), buf, 0, buf->size()};
      } else if (h.data_bytes != 0) {
        break;
      }
      p.ticket->complete(std::move(r));
    }
    lost();
  }

  absl::Status lost_status() const {
    return absl::UnavailableError(absl::StrFormat(
        "the connection to the clique's host (process %d) was lost: the process that made the "
        "id has exited or closed its device",
        host_pid_));
  }

  // The connection is gone: everything pending fails, and so does every
  // later call.
  void lost() {
    std::map<uint64_t, Pending> pending;
    absl::Status why;
    {
      std::lock_guard lock(mu_);
      if (aborted_.ok())
        aborted_ = absl::Status(joined_ ? absl::StatusCode::kAborted : absl::StatusCode::kUnavailable,
                                std::string(lost_status().message()));
      why = aborted_;
      pending.swap(pending_);
    }
    for (auto& [id, p] : pending) p.ticket->complete(Result{why, nullptr, 0, 0});
  }

 public:
  void set_joined() {
    std::lock_guard lock(mu_);
    joined_ = true;
  }

 private:
  int fd_;
  const int rank_;
  const int num_ranks_;
  const uint32_t host_pid_;
  std::thread reader_;
  std::mutex leave_mu_;
  std::mutex write_mu_;
  std::mutex mu_;
  absl::Status aborted_;
  bool joined_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Pending> pending_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Link>> join_clique(const std::string& backend,
                                                  const SparkrtUniqueId& id, int num_ranks,
                                                  int rank, uint32_t timeout_s) {
  IdLayout layout;
  std::memcpy(&layout, id.bytes, sizeof layout);
  const std::string not_ours = absl::StrFormat(
      "comm_init_rank: the id is not a sparkrt %s unique id", backend);
  if (std::memcmp(layout.magic, kIdMagic, sizeof kIdMagic) != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        not_ours, " (its magic bytes are wrong; pass the bytes get_unique_id returned)"));
  if (layout.version != kIdVersion)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s of this version (it is version %d, this plugin reads %d)", not_ours, layout.version,
        kIdVersion));
  const void* backend_end = std::memchr(layout.backend, 0, sizeof layout.backend);
  const void* socket_end = std::memchr(layout.socket, 0, sizeof layout.socket);
  if (backend_end == nullptr || socket_end == nullptr || layout.socket[0] == '\0' ||
      std::strncmp(layout.socket, "sparkrt-", 8) != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        not_ours, " (its names are not NUL-terminated or empty: the bytes are damaged)"));
  if (backend != layout.backend)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s (it was made by the '%s' backend; every rank must use the backend that made it)",
        not_ours, layout.backend));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("comm_init_rank: socket: ", std::strerror(errno)));
  sockaddr_un addr;
  const socklen_t len = abstract_address(layout.socket, addr);
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrFormat(
        "comm_init_rank: nothing listens for the id's clique (@%s: %s): the process that made the "
        "id (pid %d) has exited or closed its device, or its clique is over; make a new id with "
        "get_unique_id",
        layout.socket, std::strerror(err), layout.pid));
  }
  auto link = std::make_shared<SocketLink>(fd, rank, num_ranks, layout.pid);
  link->start();
  HelloBody hello{};
  std::memcpy(hello.secret, layout.secret, kSecretBytes);
  hello.rank = rank;
  hello.num_ranks = num_ranks;
  hello.timeout_s = timeout_s;
  hello.version = kIdVersion;
  auto ticket = std::make_shared<Ticket>();
  link->request(kHello, &hello, sizeof hello, {}, 0, ticket);
  if (!ticket->wait_until(Clock::now() + std::chrono::seconds(timeout_s) + link->grace())) {
    link->leave();
    return absl::DeadlineExceededError(absl::StrFormat(
        "comm_init_rank: the clique's host (process %d) did not answer within %d s",
        layout.pid, timeout_s));
  }
  Result r = ticket->take();
  if (!r.status.ok()) {
    link->leave();
    if (absl::StartsWith(r.status.message(), "comm_init_rank")) return r.status;
    return absl::Status(r.status.code(), absl::StrCat("comm_init_rank: ", r.status.message()));
  }
  link->set_joined();
  return std::shared_ptr<Link>(std::move(link));
}

}  // namespace sparkrt::sdk::clique
