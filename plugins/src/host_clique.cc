// The hub of a host clique: matching, the staged data's arithmetic, timeouts
// and aborts. See host_clique.h.
#include "host_clique.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sparkrt/abi_names.h"

namespace sparkrt::sdk::clique {

namespace {

bool reduces(int32_t kind) {
  return kind == SPARKRT_COLLECTIVE_ALL_REDUCE || kind == SPARKRT_COLLECTIVE_REDUCE_SCATTER;
}

std::string rank_list(const std::vector<int>& ranks) {
  return ranks.empty() ? std::string("none") : absl::StrJoin(ranks, ", ");
}

}  // namespace

absl::StatusOr<Sizes> op_sizes(const OpDesc& d, int rank, int num_ranks) {
  const char* name = abi_collective_kind_name(d.kind);
  if (d.kind < SPARKRT_COLLECTIVE_ALL_REDUCE || d.kind > SPARKRT_COLLECTIVE_RECV)
    return absl::InvalidArgumentError(absl::StrFormat(
        "collective: kind %d is not a SparkrtCollectiveKind (1..6)", d.kind));
  const size_t es = sparkrt_dtype_size(d.dtype);
  if (es == 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: dtype %d is not a SparkrtDataType (u8=1, i32=2, f16=3, bf16=4, f32=5)", name,
        d.dtype));
  if (reduces(d.kind) && (d.reduce_op < SPARKRT_REDUCE_SUM || d.reduce_op > SPARKRT_REDUCE_MIN))
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: reduce op %d is not a SparkrtReduceOp (sum=1, max=2, min=3)", name, d.reduce_op));
  const bool has_peer = d.kind == SPARKRT_COLLECTIVE_BROADCAST || d.kind == SPARKRT_COLLECTIVE_SEND ||
                        d.kind == SPARKRT_COLLECTIVE_RECV;
  if (has_peer && (d.peer < 0 || d.peer >= num_ranks))
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s %d is not a rank of this clique of %d ranks (0..%d)", name,
        d.kind == SPARKRT_COLLECTIVE_BROADCAST ? "root" : "peer", d.peer, num_ranks,
        num_ranks - 1));
  uint64_t one = 0, all = 0;
  if (__builtin_mul_overflow(d.count, uint64_t{es}, &one) ||
      __builtin_mul_overflow(one, uint64_t(num_ranks), &all) ||
      all > uint64_t(std::numeric_limits<ptrdiff_t>::max()))
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: count %d of %s over %d ranks overflows the byte size of the buffers", name, d.count,
        abi_data_type_name(d.dtype), num_ranks));
  switch (d.kind) {
    case SPARKRT_COLLECTIVE_ALL_REDUCE: return Sizes{one, one};
    case SPARKRT_COLLECTIVE_ALL_GATHER: return Sizes{one, all};
    case SPARKRT_COLLECTIVE_REDUCE_SCATTER: return Sizes{all, one};
    case SPARKRT_COLLECTIVE_BROADCAST: return Sizes{rank == d.peer ? one : 0, one};
    case SPARKRT_COLLECTIVE_SEND: return Sizes{one, 0};
    default: return Sizes{0, one};  // RECV
  }
}

std::string describe(const OpDesc& d) {
  std::string s = absl::StrFormat("%s of %d %s", abi_collective_kind_name(d.kind), d.count, abi_data_type_name(d.dtype));
  if (reduces(d.kind)) absl::StrAppend(&s, " (", abi_reduce_op_name(d.reduce_op), ")");
  if (d.kind == SPARKRT_COLLECTIVE_BROADCAST) absl::StrAppend(&s, " from root ", d.peer);
  return s;
}

// ---- element arithmetic -----------------------------------------------------

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | uint32_t(112 - e) << 23 | ((mant & 0x3ff) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00 | ((abs >> 13) & 0x3ff));  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in f16: shift the full mantissa, round to nearest even.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t e = abs >> 23;
    const uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) - 1 ... yields 13..24
    const uint32_t q = mant >> (shift);
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = q;
    if (rem > half || (rem == half && (q & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfff + ((r >> 13) & 1);
  return uint16_t(sign | (r >> 13));
}

float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

namespace {

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

float combine_f(int32_t op, float a, float b) {
  switch (op) {
    case SPARKRT_REDUCE_MAX: return std::fmax(a, b);
    case SPARKRT_REDUCE_MIN: return std::fmin(a, b);
    default: return a + b;
  }
}

// out[i] = in[0][i] op in[1][i] op ... in rank order, `n` elements.
void reduce(int32_t dtype, int32_t op, const std::vector<const std::byte*>& in, size_t n,
            std::byte* out) {
  switch (dtype) {
    case SPARKRT_DTYPE_F32:
    case SPARKRT_DTYPE_F16:
    case SPARKRT_DTYPE_BF16: {
      const size_t es = sparkrt_dtype_size(dtype);
      auto get = [&](const std::byte* p) {
        if (dtype == SPARKRT_DTYPE_F32) return load<float>(p);
        const uint16_t h = load<uint16_t>(p);
        return dtype == SPARKRT_DTYPE_F16 ? half_to_float(h) : bf16_to_float(h);
      };
      for (size_t i = 0; i < n; ++i) {
        float acc = get(in[0] + i * es);
        for (size_t r = 1; r < in.size(); ++r) acc = combine_f(op, acc, get(in[r] + i * es));
        if (dtype == SPARKRT_DTYPE_F32) store(out + i * es, acc);
        else if (dtype == SPARKRT_DTYPE_F16) store(out + i * es, float_to_half(acc));
        else store(out + i * es, float_to_bf16(acc));
      }
      return;
    }
    case SPARKRT_DTYPE_I32:
      for (size_t i = 0; i < n; ++i) {
        int32_t acc = load<int32_t>(in[0] + i * 4);
        for (size_t r = 1; r < in.size(); ++r) {
          const int32_t v = load<int32_t>(in[r] + i * 4);
          if (op == SPARKRT_REDUCE_MAX) acc = std::max(acc, v);
          else if (op == SPARKRT_REDUCE_MIN) acc = std::min(acc, v);
          else acc = int32_t(uint32_t(acc) + uint32_t(v));  // wraps
        }
        store(out + i * 4, acc);
      }
      return;
    default:  // U8
      for (size_t i = 0; i < n; ++i) {
        uint8_t acc = load<uint8_t>(in[0] + i);
        for (size_t r = 1; r < in.size(); ++r) {
          const uint8_t v = load<uint8_t>(in[r] + i);
          if (op == SPARKRT_REDUCE_MAX) acc = std::max(acc, v);
          else if (op == SPARKRT_REDUCE_MIN) acc = std::min(acc, v);
          else acc = uint8_t(acc + v);
        }
        store(out + i, acc);
      }
      return;
  }
}

}  // namespace

// ---- the hub ------------------------------------------------------------------

Hub::Hub(int num_ranks, std::function<void(const absl::Status&)> on_abort)
    : num_ranks_(num_ranks), on_abort_(std::move(on_abort)), next_seq_(size_t(num_ranks), 1) {}

Hub::~Hub() {
  // Nobody waits any more; fail what is left so no completion is lost.
  Done done;
  {
    std::lock_guard lock(mu_);
    abort_locked(absl::AbortedError("the clique was shut down"), done);
  }
  run(done);
}

void Hub::run(Done& done) {
  for (auto& [fn, result] : done) fn(std::move(result));
  done.clear();
}

void Hub::deliver(Done& done) {
  if (done.empty()) return;
  run(done);
  {
    std::lock_guard lock(mu_);
    --delivering_;
  }
  drained_.notify_all();
}

void Hub::drain(Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  drained_.wait_until(lock, deadline, [&] { return delivering_ == 0; });
}

absl::Status Hub::status() const {
  std::lock_guard lock(mu_);
  return aborted_;
}

void Hub::post(Post p) {
  Done done;
  {
    std::lock_guard lock(mu_);
    if (!aborted_.ok()) {
      done.emplace_back(std::move(p.done), Result{aborted_, nullptr, 0, 0});
    } else if (p.desc.kind == SPARKRT_COLLECTIVE_SEND || p.desc.kind == SPARKRT_COLLECTIVE_RECV) {
      const bool send = p.desc.kind == SPARKRT_COLLECTIVE_SEND;
      const int from = send ? p.rank : p.desc.peer;
      const int to = send ? p.desc.peer : p.rank;
      Channel& ch = channels_[{from, to}];
      if (send) {
        ++ch.sends_posted;
        ch.sends.push_back(std::move(p));
      } else {
        ++ch.recvs_posted;
        ch.recvs.push_back(std::move(p));
      }
      match(ch, from, to, done);
    } else {
      const uint64_t seq = next_seq_[size_t(p.rank)]++;
      Slot& slot = slots_[seq];
      if (slot.posts.empty()) slot.posts.resize(size_t(num_ranks_));
      const int rank = p.rank;
      slot.posts[size_t(rank)] = std::move(p);
      if (++slot.arrived == num_ranks_) {
        finish_slot(slot, seq, done);
        slots_.erase(seq);
      }
    }
    if (!done.empty()) ++delivering_;
  }
  deliver(done);
}

void Hub::finish_slot(Slot& slot, uint64_t seq, Done& done) {
  const OpDesc& d0 = slot.posts[0]->desc;
  // Every rank must have issued the same collective.
  for (int r = 1; r < num_ranks_; ++r) {
    const OpDesc& d = slot.posts[size_t(r)]->desc;
    const bool same = d.kind == d0.kind && d.dtype == d0.dtype && d.count == d0.count &&
                      (!reduces(d.kind) || d.reduce_op == d0.reduce_op) &&
                      (d.kind != SPARKRT_COLLECTIVE_BROADCAST || d.peer == d0.peer);
    if (!same) {
      const absl::Status mismatch = absl::InvalidArgumentError(absl::StrFormat(
          "collective #%d of the clique does not match across ranks: rank 0 issued %s, rank %d "
          "issued %s; every rank must issue the same collectives in the same order with the "
          "same kind, count, dtype, reduce op and root (nothing was moved; the communicators "
          "stay usable)",
          seq, describe(d0), r, describe(d)));
      for (auto& p : slot.posts) done.emplace_back(std::move(p->done), Result{mismatch, nullptr, 0, 0});
      return;
    }
  }
  const size_t n = size_t(num_ranks_);
  const size_t es = sparkrt_dtype_size(d0.dtype);
  const size_t one = size_t(d0.count) * es;
  auto buffer = std::make_shared<std::vector<std::byte>>();
  std::vector<const std::byte*> in;
  for (auto& p : slot.posts) in.push_back(p->data.data());
  std::vector<Result> results(n);
  switch (d0.kind) {
    case SPARKRT_COLLECTIVE_ALL_REDUCE:
      buffer->resize(one);
      if (one != 0) reduce(d0.dtype, d0.reduce_op, in, size_t(d0.count), buffer->data());
      for (auto& r : results) r = Result{absl::OkStatus(), buffer, 0, one};
      break;
    case SPARKRT_COLLECTIVE_ALL_GATHER:
      buffer->resize(one * n);
      for (size_t r = 0; r < n && one != 0; ++r) std::memcpy(buffer->data() + r * one, in[r], one);
      for (auto& r : results) r = Result{absl::OkStatus(), buffer, 0, one * n};
      break;
    case SPARKRT_COLLECTIVE_REDUCE_SCATTER:
      buffer->resize(one * n);
      if (one != 0) reduce(d0.dtype, d0.reduce_op, in, size_t(d0.count) * n, buffer->data());
      for (size_t r = 0; r < n; ++r) results[r] = Result{absl::OkStatus(), buffer, r * one, one};
      break;
    default: {  // BROADCAST
      auto& root = slot.posts[size_t(d0.peer)]->data;
      buffer->swap(root);
      for (auto& r : results) r = Result{absl::OkStatus(), buffer, 0, one};
      break;
    }
  }
  for (size_t r = 0; r < n; ++r) done.emplace_back(std::move(slot.posts[r]->done), std::move(results[r]));
}

void Hub::match(Channel& ch, int from, int to, Done& done) {
  while (!ch.sends.empty() && !ch.recvs.empty()) {
    Post s = std::move(ch.sends.front());
    Post r = std::move(ch.recvs.front());
    ch.sends.pop_front();
    ch.recvs.pop_front();
    const uint64_t number = ++ch.matched;
    if (s.desc.count != r.desc.count || s.desc.dtype != r.desc.dtype) {
      const absl::Status mismatch = absl::InvalidArgumentError(absl::StrFormat(
          "message #%d from rank %d to rank %d does not match: rank %d sends %d %s, rank %d "
          "receives %d %s; a send and its receive must have the same count and dtype (nothing "
          "was moved; the communicators stay usable)",
          number, from, to, from, s.desc.count, abi_data_type_name(s.desc.dtype), to, r.desc.count,
          abi_data_type_name(r.desc.dtype)));
      done.emplace_back(std::move(s.done), Result{mismatch, nullptr, 0, 0});
      done.emplace_back(std::move(r.done), Result{mismatch, nullptr, 0, 0});
      continue;
    }
    auto buffer = std::make_shared<std::vector<std::byte>>(std::move(s.data));
    const size_t size = buffer->size();
    done.emplace_back(std::move(s.done), Result{absl::OkStatus(), nullptr, 0, 0});
    done.emplace_back(std::move(r.done), Result{absl::OkStatus(), std::move(buffer), 0, size});
  }
}

void Hub::abort(const absl::Status& reason) {
  Done done;
  bool first = false;
  {
    std::lock_guard lock(mu_);
    first = aborted_.ok();
    abort_locked(reason, done);
    if (!done.empty()) ++delivering_;
  }
  deliver(done);
  if (first && on_abort_) on_abort_(reason);
}

void Hub::abort_locked(const absl::Status& reason, Done& done) {
  if (aborted_.ok()) aborted_ = reason;
  for (auto& [seq, slot] : slots_)
    for (auto& p : slot.posts)
      if (p && p->done) done.emplace_back(std::move(p->done), Result{aborted_, nullptr, 0, 0});
  slots_.clear();
  for (auto& [key, ch] : channels_) {
    for (auto* q : {&ch.sends, &ch.recvs})
      for (auto& p : *q)
        if (p.done) done.emplace_back(std::move(p.done), Result{aborted_, nullptr, 0, 0});
    ch.sends.clear();
    ch.recvs.clear();
  }
}

void Hub::expire_due(Clock::time_point now) {
  Done done;
  absl::Status reason;
  {
    std::lock_guard lock(mu_);
    if (!aborted_.ok()) return;
    std::vector<std::pair<Post*, std::string>> expired;
    for (auto& [seq, slot] : slots_) {
      std::vector<int> missing, arrived;
      for (int r = 0; r < num_ranks_; ++r) (slot.posts[size_t(r)] ? arrived : missing).push_back(r);
      for (auto& p : slot.posts) {
        if (!p || p->deadline > now) continue;
        expired.emplace_back(
            &*p, absl::StrFormat("%s (collective #%d of the clique) on rank %d waited %d s for "
                                 "ranks %s, which did not issue it (ranks %s did); "
                                 "SPARKRT_COLLECTIVE_TIMEOUT_S sets the limit",
                                 describe(p->desc), seq, p->rank, p->timeout_s,
                                 rank_list(missing), rank_list(arrived)));
      }
    }
    for (auto& [key, ch] : channels_) {
      const auto [from, to] = key;
      for (auto& p : ch.sends) {
        if (p.deadline > now) continue;
        expired.emplace_back(&p, absl::StrFormat(
                                     "send of %d %s from rank %d to rank %d waited %d s for rank "
                                     "%d, which did not post the matching recv; "
                                     "SPARKRT_COLLECTIVE_TIMEOUT_S sets the limit",
                                     p.desc.count, abi_data_type_name(p.desc.dtype), from, to,
                                     p.timeout_s, to));
      }
      for (auto& p : ch.recvs) {
        if (p.deadline > now) continue;
        expired.emplace_back(&p, absl::StrFormat(
                                     "recv of %d %s on rank %d from rank %d waited %d s for rank "
                                     "%d, which did not post the matching send; "
                                     "SPARKRT_COLLECTIVE_TIMEOUT_S sets the limit",
                                     p.desc.count, abi_data_type_name(p.desc.dtype), to, from,
                                     p.timeout_s, from));
      }
    }
    if (expired.empty()) return;
    // The post that waited longest fails as timed out (its completion is
    // taken, so abort_locked skips it); every other one fails as aborted.
    auto first = std::min_element(expired.begin(), expired.end(), [](const auto& a, const auto& b) {
      return a.first->deadline < b.first->deadline;
    });
    done.emplace_back(std::exchange(first->first->done, nullptr),
                      Result{absl::DeadlineExceededError(first->second + "; the clique is aborted"),
                             nullptr, 0, 0});
    reason = absl::AbortedError("the clique was aborted: " + first->second);
    abort_locked(reason, done);
    ++delivering_;  // holds the timed-out post at least
  }
  deliver(done);
  if (on_abort_) on_abort_(reason);
}

// ---- tickets and the in-process link -------------------------------------------

void Ticket::complete(Result r) {
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    result_ = std::move(r);
  }
  cv_.notify_all();
}

bool Ticket::wait_until(Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return done_; });
}

Result Ticket::take() {
  std::lock_guard lock(mu_);
  return std::move(result_);
}

namespace {

class InProcessLink final : public Link {
 public:
  InProcessLink(std::shared_ptr<Hub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}

  void post(const OpDesc& d, std::vector<std::byte> data, uint32_t timeout_s,
            std::shared_ptr<Ticket> ticket) override {
    Post p;
    p.rank = rank_;
    p.desc = d;
    p.data = std::move(data);
    p.deadline = Clock::now() + std::chrono::seconds(timeout_s);
    p.timeout_s = timeout_s;
    p.done = [ticket = std::move(ticket)](Result r) { ticket->complete(std::move(r)); };
    hub_->post(std::move(p));
  }
  void expire() override { hub_->expire_due(Clock::now()); }
  Clock::duration grace() const override { return std::chrono::seconds(1); }
  void abort(const absl::Status& reason) override { hub_->abort(reason); }
  absl::Status status() override { return hub_->status(); }
  void leave() override {
    if (hub_->num_ranks() > 1)
      hub_->abort(absl::AbortedError(absl::StrFormat(
          "the clique was aborted: rank %d destroyed its communicator", rank_)));
  }

 private:
  std::shared_ptr<Hub> hub_;
  int rank_;
};

}  // namespace

std::shared_ptr<Link> in_process_link(std::shared_ptr<Hub> hub, int rank) {
  return std::make_shared<InProcessLink>(std::move(hub), rank);
}

}  // namespace sparkrt::sdk::clique
