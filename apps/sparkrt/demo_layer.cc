#include "demo_layer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "absl/strings/str_format.h"
#include "sparkrt/contract/turbo_kv_cache.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/numeric.h"
#include "sparkrt/status_macros.h"
#include "sparkrt/trace.h"
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

LayerInputs head_slice(const LayerInputs& in, uint32_t rank, uint32_t ranks) {
  const LayerShape& full = in.shape;
  LayerInputs part = in;
  part.shape.num_kv_heads = full.num_kv_heads / ranks;
  part.shape.num_q_heads = full.num_q_heads / ranks;
  const uint64_t d = full.head_dim;
  // K and V rows: [token][kv_heads][head_dim]; q rows: [seq][q_heads][head_dim].
  const auto slice = [&](const std::vector<uint16_t>& from, uint64_t heads) {
    const uint64_t rows = from.size() / (heads * d), mine = heads / ranks;
    std::vector<uint16_t> to(rows * mine * d);
    for (uint64_t r = 0; r < rows; ++r)
      std::copy_n(from.begin() + (r * heads + rank * mine) * d, mine * d,
                  to.begin() + r * mine * d);
    return to;
  };
  part.k_in = slice(in.k_in, full.num_kv_heads);
  part.value = slice(in.value, full.num_kv_heads);
  part.q = slice(in.q, full.num_q_heads);
  return part;
}

uint64_t slot_of(const LayerInputs& in, uint32_t s, uint32_t t) {
  const LayerShape& sh = in.shape;
  const int32_t block = in.block_tables[uint64_t{s} * sh.max_blocks_per_seq() + t / sh.block_size];
  return uint64_t(block) * sh.block_size + t % sh.block_size;
}

double turbo_v(const LayerShape& sh, const std::vector<uint8_t>& v_pool, uint64_t slot,
               uint32_t h, uint32_t j) {
  namespace format = contract::turbo_kv_cache;
  const format::Layout l = format::layout(sh.v_bits, sh.block_size, sh.num_kv_heads, sh.head_dim);
  const uint64_t block = slot / sh.block_size, t = slot % sh.block_size;
  const uint8_t* b = v_pool.data() + block * l.v_block_stride_bytes;
  const uint32_t i = h * sh.head_dim + j;  // the value's index in its token
  const uint8_t* group = b + t * l.v_token_data_bytes + i / format::kGroup * format::kGroup *
                                                            sh.v_bits / 8;
  const uint8_t scale = b[l.v_data_section_bytes + t * l.v_token_scale_bytes + i / format::kGroup];
  return double(format::centroid(sh.v_bits,
                                 format::unpack_index(group, sh.v_bits, i % format::kGroup))) *
         numeric::fp8_e4m3_to_f32(scale);
}

double attended_v(const LayerInputs& in, const std::vector<uint8_t>& v_pool, uint32_t s,
                  uint32_t t, uint32_t h, uint32_t j) {
  const LayerShape& sh = in.shape;
  return sh.v_bits == 0
             ? double(bf16_to_f32(in.value[in.token_row(s, t) * sh.kv_row() + h * sh.head_dim + j]))
             : turbo_v(sh, v_pool, slot_of(in, s, t), h, j);
}

double max_abs_attended_v(const LayerInputs& in, const std::vector<uint8_t>& v_pool) {
  const LayerShape& sh = in.shape;
  double m = 0;
  for (uint32_t s = 0; s < sh.num_seqs(); ++s)
    for (uint32_t t = 0; t < sh.context[s]; ++t)
      for (uint32_t i = 0; i < sh.kv_row(); ++i)
        m = std::max(m, std::fabs(attended_v(in, v_pool, s, t, i / sh.head_dim, i % sh.head_dim)));
  return m;
}

absl::StatusOr<StepResult> run_decode_step(Device& dev, const LayerInputs& in,
                                           int timed_iterations, const OutputHook& on_output) {
  const LayerShape& sh = in.shape;
  const uint32_t seqs = sh.num_seqs();
  const uint32_t row = sh.kv_row();
  const uint32_t mbps = sh.max_blocks_per_seq();
  const bool turbo = sh.v_bits != 0;
  auto kernels = ops::KvCacheKernels::resolve(dev);
  if (!kernels.ok()) return kernels.status();
  absl::StatusOr<ops::PagedAttentionKernels> attention;
  absl::StatusOr<ops::TurboKvCacheKernels> turbo_kernels;
  absl::StatusOr<ops::TurboPagedAttentionKernels> turbo_attention;
  ops::TurboCacheLayout layout;
  if (turbo) {
    turbo_kernels = ops::TurboKvCacheKernels::resolve(dev);
    if (!turbo_kernels.ok()) return turbo_kernels.status();
    turbo_attention = ops::TurboPagedAttentionKernels::resolve(dev);
    if (!turbo_attention.ok()) return turbo_attention.status();
    SPARKRT_ASSIGN_OR_RETURN(
        layout, ops::turbo_cache_layout(sh.v_bits, sh.block_size, sh.num_kv_heads, sh.head_dim));
  } else {
    attention = ops::PagedAttentionKernels::resolve(dev);
    if (!attention.ok()) return attention.status();
  }
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
  const uint64_t v_pool_bytes =
      turbo ? in.num_blocks * layout.v_block_stride_bytes : pool_elems * 2;
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
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_v_cache, mem.alloc(v_pool_bytes));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_out, mem.alloc(out_elems * 2));
  SPARKRT_ASSIGN_OR_RETURN(const DevicePtr d_workspace, mem.alloc(ws_bytes));
  // TurboQuant: V rotated before the write, and the decode's rotated output.
  DevicePtr d_v_rot{}, d_v_new_rot{}, d_out_rot{};
  if (turbo) {
    SPARKRT_ASSIGN_OR_RETURN(d_v_rot, mem.alloc(in.value.size() * 2));
    SPARKRT_ASSIGN_OR_RETURN(d_v_new_rot, mem.alloc(v_new.size() * 2));
    SPARKRT_ASSIGN_OR_RETURN(d_out_rot, mem.alloc(out_elems * 2));
  }
  // Poison (bf16 NaN, 0xff bytes) what the step writes, so anything left
  // unwritten shows.
  SPARKRT_RETURN_IF_ERROR(dev.memset(d_k_cache, 0xff, pool_elems * 2));
  SPARKRT_RETURN_IF_ERROR(dev.memset(d_v_cache, 0xff, v_pool_bytes));
  SPARKRT_RETURN_IF_ERROR(dev.memset(d_out, 0xff, out_elems * 2));
  // The split-KV counters must start at zero (the op leaves them so).
  SPARKRT_RETURN_IF_ERROR(dev.memset(d_workspace, 0, ws_bytes));

  const auto table_row = [&](uint32_t s) { return d_tables + uint64_t{s} * mbps * 4; };

  // The cache ops of n tokens: K rows at k_in (pre-norm), V rows at value,
  // positions, slots (filled).
  const auto write_k = [&](DevicePtr k_in, DevicePtr pos, DevicePtr slots, uint32_t n) {
    return ops::fused_k_norm_rope_cache_write_bf16(
        dev, *kernels,
        {.k_in = k_in, .k_norm_weight = d_weight, .positions = pos, .k_cache = d_k_cache,
         .slot_mapping = slots, .num_tokens = n, .num_kv_heads = sh.num_kv_heads,
         .head_dim = sh.head_dim, .rotary_dim = sh.rotary_dim, .block_size = sh.block_size,
         .rms_eps = sh.rms_eps, .theta = sh.theta},
        stream);
  };
  const auto write_v = [&](DevicePtr value, DevicePtr slots, uint32_t n) {
    return ops::reshape_and_cache_flash_v_only(
        dev, *kernels,
        {.value = value, .v_cache = d_v_cache, .slot_mapping = slots, .num_tokens = n,
         .num_kv_heads = sh.num_kv_heads, .head_dim = sh.head_dim, .block_size = sh.block_size,
         .value_stride = row},
        stream);
  };
  const auto rotate = [&](DevicePtr from, DevicePtr to, uint32_t n, uint32_t heads) {
    return ops::hadamard_transform_bf16(
        dev, *turbo_kernels,
        {.in = from, .out = to, .num_tokens = n, .num_heads = heads, .head_dim = sh.head_dim,
         .in_stride = heads * sh.head_dim, .out_stride = heads * sh.head_dim},
        stream);
  };
  // Raw K and the rotated V, quantized.
  const auto write_turbo = [&](DevicePtr k_in, DevicePtr v_rot, DevicePtr slots, uint32_t n) {
    const ops::ReshapeAndCacheTurboArgs a{
        .key = k_in, .value = v_rot, .k_cache = d_k_cache, .v_cache = d_v_cache,
        .slot_mapping = slots, .num_tokens = n, .num_kv_heads = sh.num_kv_heads,
        .head_dim = sh.head_dim, .block_size = sh.block_size, .key_stride = row,
        .value_stride = row, .k_block_stride_bytes = layout.k_block_stride_bytes,
        .v_block_stride_bytes = layout.v_block_stride_bytes,
        .v_data_section_bytes = layout.v_data_section_bytes};
    return sh.v_bits == 2   ? ops::reshape_and_cache_bf16k_turbo2v(dev, *turbo_kernels, a, stream)
           : sh.v_bits == 3 ? ops::reshape_and_cache_bf16k_turbo3v(dev, *turbo_kernels, a, stream)
                            : ops::reshape_and_cache_bf16k_turbo4v(dev, *turbo_kernels, a, stream);
  };

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
    const DevicePtr k_in = d_k_in + first * row * 2, value = d_value + first * row * 2;
    if (turbo) {
      const DevicePtr v_rot = d_v_rot + first * row * 2;
      SPARKRT_RETURN_IF_ERROR(rotate(value, v_rot, n, sh.num_kv_heads));
      SPARKRT_RETURN_IF_ERROR(write_turbo(k_in, v_rot, slots, n));
    }
    SPARKRT_RETURN_IF_ERROR(write_k(k_in, d_positions + first * 4, slots, n));
    if (!turbo) SPARKRT_RETURN_IF_ERROR(write_v(value, slots, n));
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
  const ops::PagedDecodeAttnTurboArgs turbo_attn{
      .q = d_q, .k_cache = d_k_cache, .v_cache = d_v_cache, .out = d_out_rot,
      .block_tables = d_tables, .seq_lens = d_seq_lens, .max_blocks_per_seq = mbps,
      .num_seqs = seqs, .num_q_heads = sh.num_q_heads, .num_kv_heads = sh.num_kv_heads,
      .head_dim = sh.head_dim, .block_size = sh.block_size, .inv_sqrt_d = attn.inv_sqrt_d,
      .q_stride = sh.q_row(), .v_block_stride_bytes = layout.v_block_stride_bytes,
      .v_data_section_bytes = layout.v_data_section_bytes, .sliding_window = 0,
      .max_seq_len = sh.max_context(), .workspace = d_workspace, .workspace_bytes = ws_bytes};
  StepResult result;
  auto plan = turbo ? ops::plan_paged_decode_turbo(dev, sh.v_bits, turbo_attn)
                    : ops::plan_paged_decode(dev, attn);
  if (!plan.ok()) return plan.status();
  result.plan = *plan;
  const uint32_t splits = result.plan.num_splits;

  // Bytes each op reads and writes, by its contract.
  uint64_t k_read = 0, v_read = 0, table_read = 0;
  for (uint32_t c : sh.context) {
    k_read += uint64_t{c} * row * 2;
    v_read += turbo ? uint64_t{c} * row * sh.v_bits / 8 + uint64_t{c} * row / 16
                    : uint64_t{c} * row * 2;
    table_read += (c + sh.block_size - 1) / sh.block_size * 4;
  }
  const uint64_t new_rows = uint64_t{seqs} * row * 2;  // bf16 rows of the new tokens
  uint64_t attn_bytes = out_elems * 2 * 2 + k_read + v_read + table_read + seqs * 4;
  if (splits > 1)  // partials written by the split CTAs and read by the merge
    attn_bytes += 2 * uint64_t{seqs} * sh.num_q_heads * splits * (sh.head_dim + 2) * 4;
  const std::string decode_entry =
      turbo ? absl::StrFormat("paged_decode_attn_bf16k_turbo%dv", sh.v_bits)
            : std::string("paged_decode_attn_bf16");
  const bool merge_kernel = splits > 1 && (turbo || splits < ops::kMinMergeSplits);

  // The timed step: one op after another, an event after each.
  struct StepOp {
    std::string name;
    uint32_t launches;
    uint64_t bytes;
    std::function<absl::Status()> run;
  };
  std::vector<StepOp> step;
  step.push_back({"fill_slots_from_block_table", seqs, seqs * uint64_t{8 + 4}, [&] {
                    for (uint32_t s = 0; s < seqs; ++s) {
                      SPARKRT_RETURN_IF_ERROR(ops::fill_slots_from_block_table(
                          dev, *kernels,
                          {.slots = d_new_slots + uint64_t{s} * 8, .block_table = table_row(s),
                           .start_pos = sh.context[s] - 1, .count = 1,
                           .block_size = sh.block_size},
                          stream));
                    }
                    return absl::OkStatus();
                  }});
  if (turbo) {
    step.push_back({"hadamard_transform_bf16 (V)", 1, 2 * new_rows,
                    [&] { return rotate(d_v_new, d_v_new_rot, seqs, sh.num_kv_heads); }});
    step.push_back({absl::StrFormat("reshape_and_cache_bf16k_turbo%dv", sh.v_bits), 1,
                    3 * new_rows + seqs * (uint64_t{row} * sh.v_bits / 8 + row / 16 + 8),
                    [&] { return write_turbo(d_k_new, d_v_new_rot, d_new_slots, seqs); }});
  }
  step.push_back({"fused_k_norm_rope_cache_write_bf16", 1,
                  2 * new_rows + sh.head_dim * 2 + seqs * uint64_t{4 + 8},
                  [&] { return write_k(d_k_new, d_pos_new, d_new_slots, seqs); }});
  if (!turbo) {
    step.push_back({"reshape_and_cache_flash_v_only", 1, 2 * new_rows + seqs * 8,
                    [&] { return write_v(d_v_new, d_new_slots, seqs); }});
  }
  step.push_back({decode_entry + (splits > 1 ? " (split-KV)" : ""), merge_kernel ? 2u : 1u,
                  attn_bytes, [&]() -> absl::Status {
                    if (!turbo) return ops::paged_decode_attn_bf16(dev, *attention, attn, stream);
                    const auto& k = *turbo_attention;
                    return sh.v_bits == 2
                               ? ops::paged_decode_attn_bf16k_turbo2v(dev, k, turbo_attn, stream)
                           : sh.v_bits == 3
                               ? ops::paged_decode_attn_bf16k_turbo3v(dev, k, turbo_attn, stream)
                               : ops::paged_decode_attn_bf16k_turbo4v(dev, k, turbo_attn, stream);
                  }});
  if (turbo) {
    step.push_back({"hadamard_transform_bf16 (output)", 1, 2 * out_elems * 2,
                    [&] { return rotate(d_out_rot, d_out, seqs, sh.num_q_heads); }});
  }

  std::vector<Event> events(step.size() + 1);
  struct EventGuard {
    Device& dev;
    std::vector<Event>& events;
    size_t created = 0;
    ~EventGuard() {
      for (size_t i = 0; i < created; ++i) dev.destroy_event(events[i]).IgnoreError();
    }
  } event_guard{dev, events};
  for (Event& e : events) {
    auto ev = dev.create_event();
    if (!ev.ok()) return ev.status();
    e = *ev;
    ++event_guard.created;
  }
  std::vector<std::vector<double>> us(step.size());
  for (int it = 0; it <= timed_iterations; ++it) {
    const trace::Range range(it == 0 ? "decode step (warm-up)" : "decode step");
    SPARKRT_RETURN_IF_ERROR(dev.record_event(events[0], stream));
    for (size_t op = 0; op < step.size(); ++op) {
      SPARKRT_RETURN_IF_ERROR(step[op].run());
      SPARKRT_RETURN_IF_ERROR(dev.record_event(events[op + 1], stream));
    }
    SPARKRT_RETURN_IF_ERROR(dev.synchronize(stream));
    if (it == 0) continue;  // warm-up: module loads, first-touch, caches
    for (size_t op = 0; op < step.size(); ++op) {
      auto ms = dev.elapsed_ms(events[op], events[op + 1]);
      if (!ms.ok()) return ms.status();
      us[op].push_back(*ms * 1000.0);
    }
  }
  if (timed_iterations > 0) {
    for (size_t op = 0; op < step.size(); ++op)
      result.timings.push_back(
          {step[op].name, step[op].launches, verify::median(us[op]), step[op].bytes});
  }

  if (on_output) {
    SPARKRT_RETURN_IF_ERROR(on_output(d_out, out_elems, stream));
    SPARKRT_RETURN_IF_ERROR(dev.synchronize(stream));
  }
  result.out.resize(out_elems);
  result.k_cache.resize(pool_elems);
  result.v_cache.resize(v_pool_bytes);
  result.new_slots.resize(seqs);
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(d_out, result.out));
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(d_k_cache, result.k_cache));
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(d_v_cache, result.v_cache));
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(d_new_slots, result.new_slots));
  return result;
}

LayerReference reference_decode_step(const LayerInputs& in, const std::vector<uint8_t>& v_pool) {
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
  const auto value = [&](uint32_t s, uint32_t t, uint32_t h, uint32_t j) {
    return attended_v(in, v_pool, s, t, h, j);
  };
  ref.max_abs_v = max_abs_attended_v(in, v_pool);
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
      auto o = verify::attention(
          decode(&in.q[(uint64_t{s} * sh.num_q_heads + h) * d], d), len, d, scale,
          [&](uint32_t t, uint32_t j) { return keys[uint64_t{t} * row + kvh * d + j]; },
          [&](uint32_t t, uint32_t j) { return value(s, t, kvh, j); });
      if (sh.v_bits != 0) o = verify::hadamard(o);  // back from the rotated V
      std::copy(o.begin(), o.end(), ref.out.begin() + (uint64_t{s} * sh.num_q_heads + h) * d);
    }
  }
  return ref;
}

}  // namespace sparkrt::cli
