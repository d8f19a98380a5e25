#include "demo_layer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_format.h"
#include "sparkrt/numeric.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/status_macros.h"
#include "sparkrt/verify/float64.h"
#include "sparkrt/verify/median.h"

namespace sparkrt::cli {
namespace {

using numeric::bf16_to_f32;
using numeric::f32_to_bf16;

// Device memory of one step, freed when the step ends, error or not.
class Allocations {
 public:
  explicit Allocations(Device& dev) : dev_(dev) {}
  ~Allocations() {
    for (DevicePtr p : ptrs_) dev_.free(p).IgnoreError();
  }
  Allocations(const Allocations&) = delete;
  Allocations& operator=(const Allocations&) = delete;

  absl::StatusOr<DevicePtr> alloc(uint64_t bytes) {
    auto p = dev_.alloc(std::max<uint64_t>(bytes, 1));
    if (p.ok()) ptrs_.push_back(*p);
    return p;
  }
  template <typename T>
  absl::StatusOr<DevicePtr> upload(const std::vector<T>& host) {
    auto p = alloc(host.size() * sizeof(T));
    if (!p.ok()) return p;
    if (!host.empty()) SPARKRT_RETURN_IF_ERROR(dev_.copy_h2d(host, *p));
    return p;
  }

 private:
  Device& dev_;
  std::vector<DevicePtr> ptrs_;
};

std::vector<uint16_t> random_bf16(std::mt19937_64& gen, uint64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution neg(0.5);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(neg(gen) ? -mag(gen) : mag(gen));
  return v;
}

}  // namespace

uint32_t LayerShape::max_context() const {
  return context.empty() ? 0 : *std::max_element(context.begin(), context.end());
}

uint32_t LayerShape::max_blocks_per_seq() const {
  return std::max<uint32_t>(1, (max_context() + block_size - 1) / block_size);
}

uint64_t LayerInputs::token_row(uint32_t s, uint32_t t) const {
  uint64_t row = 0;
  for (uint32_t i = 0; i < s; ++i) row += shape.context[i];
  return row + t;
}

LayerInputs LayerInputs::make(const LayerShape& shape, uint64_t seed) {
  std::mt19937_64 gen(seed);
  LayerInputs in;
  in.shape = shape;
  const uint32_t mbps = shape.max_blocks_per_seq();
  uint32_t used = 0;
  for (uint32_t c : shape.context) used += (c + shape.block_size - 1) / shape.block_size;
  in.num_blocks = used + 1;  // a spare block no sequence owns
  // Blocks in random order, so a sequence's blocks are scattered in the pool.
  std::vector<int32_t> ids(in.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), gen);
  in.block_tables.assign(uint64_t{shape.num_seqs()} * mbps, -1);
  uint32_t next = 0;
  for (uint32_t s = 0; s < shape.num_seqs(); ++s)
    for (uint32_t b = 0; b < (shape.context[s] + shape.block_size - 1) / shape.block_size; ++b)
      in.block_tables[uint64_t{s} * mbps + b] = ids[next++];

  const uint64_t tokens = std::accumulate(shape.context.begin(), shape.context.end(), uint64_t{0});
  in.k_in = random_bf16(gen, tokens * shape.kv_row(), 0.25f, 2.0f);
  in.value = random_bf16(gen, tokens * shape.kv_row(), 0.25f, 2.0f);
  in.k_norm_weight = random_bf16(gen, shape.head_dim, 0.5f, 1.5f);
  in.q = random_bf16(gen, uint64_t{shape.num_seqs()} * shape.q_row(), 0.25f, 2.0f);
  return in;
}

absl::StatusOr<StepResult> run_decode_step(Device& dev, const LayerInputs& in,
                                           int timed_iterations) {
  const LayerShape& sh = in.shape;
  const uint32_t seqs = sh.num_seqs();
  const uint32_t row = sh.kv_row();
  const uint32_t mbps = sh.max_blocks_per_seq();
  auto kernels = ops::KvCacheKernels::resolve(dev);
  if (!kernels.ok()) return kernels.status();
  auto attention = ops::PagedAttentionKernels::resolve(dev);
  if (!attention.ok()) return attention.status();
  auto stream_or = dev.create_stream();
  if (!stream_or.ok()) return stream_or.status();
  const Stream stream = *stream_or;
  struct StreamGuard {
    Device& dev;
    Stream stream;
    ~StreamGuard() { dev.destroy_stream(stream).IgnoreError(); }
  } stream_guard{dev, stream};
  Allocations mem(dev);

  // Per-token positions (a token's index in its sequence) for the context,
  // and the inputs of the step's new tokens, gathered contiguously.
  const uint64_t tokens = in.k_in.size() / row;
  std::vector<int32_t> positions(tokens);
  std::vector<uint16_t> k_new(uint64_t{seqs} * row), v_new(uint64_t{seqs} * row);
  std::vector<int32_t> pos_new(seqs), seq_lens(seqs);
  for (uint32_t s = 0; s < seqs; ++s) {
    const uint32_t last = sh.context[s] - 1;
    for (uint32_t t = 0; t <= last; ++t) positions[in.token_row(s, t)] = static_cast<int32_t>(t);
    std::copy_n(in.k_in.begin() + in.token_row(s, last) * row, row, k_new.begin() + s * row);
    std::copy_n(in.value.begin() + in.token_row(s, last) * row, row, v_new.begin() + s * row);
    pos_new[s] = static_cast<int32_t>(last);
    seq_lens[s] = static_cast<int32_t>(sh.context[s]);
  }

  const uint64_t pool_elems = uint64_t{in.num_blocks} * sh.block_size * row;
  const uint64_t out_elems = uint64_t{seqs} * sh.q_row();
  const uint64_t ws_bytes = ops::paged_decode_workspace_bytes(seqs, sh.num_q_heads, sh.head_dim);
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_tables, mem.upload(in.block_tables));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_k_in, mem.upload(in.k_in));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_value, mem.upload(in.value));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_weight, mem.upload(in.k_norm_weight));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_positions, mem.upload(positions));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_k_new, mem.upload(k_new));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_v_new, mem.upload(v_new));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_pos_new, mem.upload(pos_new));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_seq_lens, mem.upload(seq_lens));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_q, mem.upload(in.q));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_ctx_slots, mem.alloc(tokens * sizeof(int64_t)));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_new_slots, mem.alloc(seqs * sizeof(int64_t)));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_k_cache, mem.alloc(pool_elems * 2));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_v_cache, mem.alloc(pool_elems * 2));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_out, mem.alloc(out_elems * 2));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_workspace, mem.alloc(ws_bytes));
  // Poison (bf16 NaN) what the step writes, so anything left unwritten shows.
  SPARKRT_RETURN_IF_ERROR(dev.memset(d_k_cache, 0xff, pool_elems * 2));
  SPARKRT_RETURN_IF_ERROR(dev.memset(d_v_cache, 0xff, pool_elems * 2));
  SPARKRT_RETURN_IF_ERROR(dev.memset(d_out, 0xff, out_elems * 2));
  // The split-KV counters must start at zero (the op leaves them so).
  SPARKRT_RETURN_IF_ERROR(dev.memset(d_workspace, 0, ws_bytes));

  const auto table_row = [&](uint32_t s) { return d_tables + uint64_t{s} * mbps * 4; };

  // The context: every token but the last of each sequence, per sequence.
  for (uint32_t s = 0; s < seqs; ++s) {
    const uint32_t n = sh.context[s] - 1;
    const uint64_t first = in.token_row(s, 0);
    const DevicePtr slots = d_ctx_slots + first * 8;
    SPARKRT_RETURN_IF_ERROR(ops::fill_slots_from_block_table(
        dev, *kernels,
        {.slots = slots, .block_table = table_row(s), .start_pos = 0, .count = n,
         .block_size = sh.block_size},
        stream));
    SPARKRT_RETURN_IF_ERROR(ops::fused_k_norm_rope_cache_write_bf16(
        dev, *kernels,
        {.k_in = d_k_in + first * row * 2, .k_norm_weight = d_weight,
         .positions = d_positions + first * 4, .k_cache = d_k_cache, .slot_mapping = slots,
         .num_tokens = n, .num_kv_heads = sh.num_kv_heads, .head_dim = sh.head_dim,
         .rotary_dim = sh.rotary_dim, .block_size = sh.block_size, .rms_eps = sh.rms_eps,
         .theta = sh.theta},
        stream));
    SPARKRT_RETURN_IF_ERROR(ops::reshape_and_cache_flash_v_only(
        dev, *kernels,
        {.value = d_value + first * row * 2, .v_cache = d_v_cache, .slot_mapping = slots,
         .num_tokens = n, .num_kv_heads = sh.num_kv_heads, .head_dim = sh.head_dim,
         .block_size = sh.block_size, .value_stride = row},
        stream));
  }

  const ops::PagedDecodeAttnArgs attn{.q = d_q,
                                      .k_cache = d_k_cache,
                                      .v_cache = d_v_cache,
                                      .out = d_out,
                                      .block_tables = d_tables,
                                      .seq_lens = d_seq_lens,
                                      .max_blocks_per_seq = mbps,
                                      .num_seqs = seqs,
                                      .num_q_heads = sh.num_q_heads,
                                      .num_kv_heads = sh.num_kv_heads,
                                      .head_dim = sh.head_dim,
                                      .block_size = sh.block_size,
                                      .inv_sqrt_d = 1.0f / std::sqrt(float(sh.head_dim)),
                                      .q_stride = sh.q_row(),
                                      .sliding_window = 0,
                                      .max_seq_len = sh.max_context(),
                                      .workspace = d_workspace,
                                      .workspace_bytes = ws_bytes};
  StepResult result;
  auto plan = ops::plan_paged_decode(dev, attn);
  if (!plan.ok()) return plan.status();
  result.plan = *plan;

  // The step, with an event before and after each op.
  constexpr int kOps = 4;
  Event events[kOps + 1];
  for (Event& e : events) {
    auto ev = dev.create_event();
    if (!ev.ok()) return ev.status();
    e = *ev;
  }
  struct EventGuard {
    Device& dev;
    Event* events;
    ~EventGuard() {
      for (int i = 0; i <= kOps; ++i) dev.destroy_event(events[i]).IgnoreError();
    }
  } event_guard{dev, events};
  std::vector<double> us[kOps];
  for (int it = 0; it <= timed_iterations; ++it) {
    SPARKRT_RETURN_IF_ERROR(dev.record_event(events[0], stream));
    for (uint32_t s = 0; s < seqs; ++s) {
      SPARKRT_RETURN_IF_ERROR(ops::fill_slots_from_block_table(
          dev, *kernels,
          {.slots = d_new_slots + uint64_t{s} * 8, .block_table = table_row(s),
           .start_pos = sh.context[s] - 1, .count = 1, .block_size = sh.block_size},
          stream));
    }
    SPARKRT_RETURN_IF_ERROR(dev.record_event(events[1], stream));
    SPARKRT_RETURN_IF_ERROR(ops::fused_k_norm_rope_cache_write_bf16(
        dev, *kernels,
        {.k_in = d_k_new, .k_norm_weight = d_weight, .positions = d_pos_new,
         .k_cache = d_k_cache, .slot_mapping = d_new_slots, .num_tokens = seqs,
         .num_kv_heads = sh.num_kv_heads, .head_dim = sh.head_dim, .rotary_dim = sh.rotary_dim,
         .block_size = sh.block_size, .rms_eps = sh.rms_eps, .theta = sh.theta},
        stream));
    SPARKRT_RETURN_IF_ERROR(dev.record_event(events[2], stream));
    SPARKRT_RETURN_IF_ERROR(ops::reshape_and_cache_flash_v_only(
        dev, *kernels,
        {.value = d_v_new, .v_cache = d_v_cache, .slot_mapping = d_new_slots,
         .num_tokens = seqs, .num_kv_heads = sh.num_kv_heads, .head_dim = sh.head_dim,
         .block_size = sh.block_size, .value_stride = row},
        stream));
    SPARKRT_RETURN_IF_ERROR(dev.record_event(events[3], stream));
    SPARKRT_RETURN_IF_ERROR(ops::paged_decode_attn_bf16(dev, *attention, attn, stream));
    SPARKRT_RETURN_IF_ERROR(dev.record_event(events[4], stream));
    SPARKRT_RETURN_IF_ERROR(dev.synchronize(stream));
    if (it == 0) continue;  // warm-up: module loads, first-touch, caches
    for (int op = 0; op < kOps; ++op) {
      auto ms = dev.elapsed_ms(events[op], events[op + 1]);
      if (!ms.ok()) return ms.status();
      us[op].push_back(*ms * 1000.0);
    }
  }

  if (timed_iterations > 0) {
    // Bytes each op reads and writes, by its contract.
    uint64_t kv_read = 0, table_read = 0;
    for (uint32_t c : sh.context) {
      kv_read += uint64_t{c} * row * 2 * 2;
      table_read += (c + sh.block_size - 1) / sh.block_size * 4;
    }
    const uint64_t new_rows = uint64_t{seqs} * row * 2;
    uint64_t attn_bytes = out_elems * 2 * 2 + kv_read + table_read + seqs * 4;
    if (result.plan.num_splits > 1) {
      // Partials written by the split CTAs and read by the merging ones.
      attn_bytes += 2 * uint64_t{seqs} * sh.num_q_heads * result.plan.num_splits *
                    (sh.head_dim + 2) * 4;
    }
    const std::string decode_name = result.plan.num_splits > 1
                                        ? "paged_decode_attn_bf16 (split-KV)"
                                        : "paged_decode_attn_bf16";
    result.timings = {
        {"fill_slots_from_block_table", seqs, verify::median(us[0]), seqs * uint64_t{8 + 4}},
        {"fused_k_norm_rope_cache_write_bf16", 1, verify::median(us[1]),
         2 * new_rows + sh.head_dim * 2 + seqs * uint64_t{4 + 8}},
        {"reshape_and_cache_flash_v_only", 1, verify::median(us[2]), 2 * new_rows + seqs * 8},
        {decode_name,
         result.plan.num_splits > 1 && result.plan.num_splits < ops::kMinMergeSplits ? 2u : 1u,
         verify::median(us[3]), attn_bytes},
    };
  }

  result.out.resize(out_elems);
  result.k_cache.resize(pool_elems);
  result.v_cache.resize(pool_elems);
  result.new_slots.resize(seqs);
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(d_out, result.out));
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(d_k_cache, result.k_cache));
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(d_v_cache, result.v_cache));
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(d_new_slots, result.new_slots));
  return result;
}

LayerReference reference_decode_step(const LayerInputs& in) {
  const LayerShape& sh = in.shape;
  const uint32_t d = sh.head_dim, hkv = sh.num_kv_heads, row = sh.kv_row();
  const auto decode = [](const uint16_t* bits, uint32_t n) {
    std::vector<double> x(n);
    for (uint32_t j = 0; j < n; ++j) x[j] = bf16_to_f32(bits[j]);
    return x;
  };
  const std::vector<double> weight = decode(in.k_norm_weight.data(), d);

  LayerReference ref;
  ref.k_new.resize(uint64_t{sh.num_seqs()} * row);
  ref.out.resize(uint64_t{sh.num_seqs()} * sh.q_row());
  for (uint16_t v : in.value)
    ref.max_abs_v = std::max(ref.max_abs_v, double(std::fabs(bf16_to_f32(v))));
  const uint32_t group = sh.num_q_heads / hkv;
  const double scale = 1.0 / std::sqrt(double(d));
  for (uint32_t s = 0; s < sh.num_seqs(); ++s) {
    const uint32_t len = sh.context[s];
    // The cache as the contract stores it: K rounded once to bf16.
    std::vector<double> keys(uint64_t{len} * row);
    for (uint32_t t = 0; t < len; ++t) {
      for (uint32_t h = 0; h < hkv; ++h) {
        const auto y = verify::k_norm_rope(decode(&in.k_in[in.token_row(s, t) * row + h * d], d),
                                           weight, sh.rms_eps, sh.rotary_dim, sh.theta,
                                           [&](uint32_t) { return double(t); });
        for (uint32_t j = 0; j < d; ++j) {
          keys[uint64_t{t} * row + h * d + j] = bf16_to_f32(f32_to_bf16(static_cast<float>(y[j])));
          if (t == len - 1) ref.k_new[uint64_t{s} * row + h * d + j] = y[j];
        }
      }
    }
    for (uint32_t h = 0; h < sh.num_q_heads; ++h) {
      const uint32_t kvh = h / group;
      const auto o = verify::attention(
          decode(&in.q[(uint64_t{s} * sh.num_q_heads + h) * d], d), len, d, scale,
          [&](uint32_t t, uint32_t j) { return keys[uint64_t{t} * row + kvh * d + j]; },
          [&](uint32_t t, uint32_t j) {
            return double(bf16_to_f32(in.value[in.token_row(s, t) * row + kvh * d + j]));
          });
      std::copy(o.begin(), o.end(), ref.out.begin() + (uint64_t{s} * sh.num_q_heads + h) * d);
    }
  }
  return ref;
}

}  // namespace sparkrt::cli
