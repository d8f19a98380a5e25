// The synthetic attention layer behind `sparkrt demo`: a few sequences with
// ragged contexts over one paged KV cache, and one decode step through the
// KV-cache and paged-attention ops (sparkrt/ops/kv_cache.h,
// sparkrt/ops/paged_attention.h). With a bf16 cache:
//
//   fill_slots_from_block_table   one launch per sequence: the new token's slot
//   fused_k_norm_rope_cache_write_bf16   K: RMSNorm -> RoPE -> cache, rounded once
//   reshape_and_cache_flash_v_only       V: copied into the same slots
//   paged_decode_attn_bf16        attention of each sequence's query over its cache
//
// With a TurboQuant V cache (sparkrt/ops/turbo_kv_cache.h,
// sparkrt/ops/turbo_paged_attention.h; `bits` 2, 3 or 4):
//
//   fill_slots_from_block_table
//   hadamard_transform_bf16              V rotated per head
//   reshape_and_cache_bf16k_turbo<bits>v K raw and the rotated V quantized
//   fused_k_norm_rope_cache_write_bf16   K: replaces the raw rows in the same slots
//   paged_decode_attn_bf16k_turbo<bits>v attention over the quantized V (rotated)
//   hadamard_transform_bf16              the output rotated back
//
// The context before the step (every token but the last of each sequence) is
// written first by the same cache ops, untimed. Nothing here depends on the
// backend; the caller compares what two devices, or one device and float64,
// computed.
#ifndef SPARKRT_APPS_SPARKRT_DEMO_LAYER_H_
#define SPARKRT_APPS_SPARKRT_DEMO_LAYER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sparkrt/device.h"
#include "sparkrt/ops/kv_cache.h"
#include "sparkrt/ops/paged_attention.h"
#include "sparkrt/ops/turbo_kv_cache.h"
#include "sparkrt/ops/turbo_paged_attention.h"

namespace sparkrt::cli {

struct LayerShape {
  uint32_t num_q_heads = 16;
  uint32_t num_kv_heads = 4;
  uint32_t head_dim = 128;
  uint32_t rotary_dim = 64;  // partial rotary: the upper half passes through
  uint32_t block_size = 16;
  // The V cache: 0 bf16; 2, 3 or 4 TurboQuant with that many bits a value.
  uint32_t v_bits = 0;
  float rms_eps = 1e-6f;
  float theta = 1e6f;
  // Tokens in each sequence's cache after the step (the new token included).
  std::vector<uint32_t> context = {1, 45, 700};

  uint32_t num_seqs() const { return static_cast<uint32_t>(context.size()); }
  uint32_t kv_row() const { return num_kv_heads * head_dim; }
  uint32_t q_row() const { return num_q_heads * head_dim; }
  uint32_t max_context() const;
  uint32_t max_blocks_per_seq() const;
};

// Host inputs of the layer: random, never zero, bf16 bits.
struct LayerInputs {
  LayerShape shape;
  uint32_t num_blocks = 0;             // the pool
  std::vector<int32_t> block_tables;   // [seqs][max_blocks_per_seq], blocks shuffled
  std::vector<uint16_t> k_in;          // [seq][token][kv_heads][head_dim], pre-norm K
  std::vector<uint16_t> value;         // [seq][token][kv_heads][head_dim]
  std::vector<uint16_t> k_norm_weight; // [head_dim]
  std::vector<uint16_t> q;             // [seqs][num_q_heads][head_dim], the new tokens' queries

  // Offset in k_in / value of sequence s's token t (in kv rows).
  uint64_t token_row(uint32_t s, uint32_t t) const;
  static LayerInputs make(const LayerShape& shape, uint64_t seed);
};

// One op's share of a timed step.
struct OpTiming {
  std::string op;
  uint32_t launches = 0;  // per step
  double median_us = 0;
  uint64_t bytes = 0;     // read + written per step, by the kernels' contracts
};

struct StepResult {
  std::vector<uint16_t> out;      // [seqs][num_q_heads][head_dim]
  std::vector<uint16_t> k_cache;  // the whole pool
  std::vector<uint8_t> v_cache;   // the whole pool's bytes
  std::vector<int64_t> new_slots;  // the slot of each sequence's new token
  ops::DecodePlan plan;
  std::vector<OpTiming> timings;  // empty unless timed
};

// Called once after the last step with the device's attention output
// (bf16, `elements` of them) and the step's stream, before the results are
// read back: where a tensor-parallel rank all-gathers its heads.
using OutputHook = std::function<absl::Status(DevicePtr out, uint64_t elements, Stream stream)>;

// Writes the context, then runs the decode step `1 + timed_iterations` times
// (the first is the warm-up; steps are idempotent), timing each op with
// events on a stream of its own. Reads the results back.
absl::StatusOr<StepResult> run_decode_step(Device& dev, const LayerInputs& in,
                                           int timed_iterations,
                                           const OutputHook& on_output = nullptr);

// Rank `rank` of `ranks`'s share of `in` for a tensor-parallel step: KV heads
// [rank * kv / ranks, (rank + 1) * kv / ranks) and their query heads, the
// same sequences, block tables and pool. `ranks` must divide num_kv_heads.
LayerInputs head_slice(const LayerInputs& in, uint32_t rank, uint32_t ranks);

// The same step in float64 from the contracts (sparkrt/verify/float64.h): K
// by RMSNorm and RoPE, stored as bf16; attention as a dense softmax over each
// sequence's cache. The bf16 cache holds V as given; for a TurboQuant cache,
// V is what `v_pool` (the step's V pool) stores, decoded from its bytes, and
// the output is rotated back in float64.
struct LayerReference {
  std::vector<double> k_new;  // [seqs][kv_heads][head_dim], before rounding
  std::vector<double> out;    // [seqs][num_q_heads][head_dim]
  double max_abs_v = 0;       // over the V the attention read
};
LayerReference reference_decode_step(const LayerInputs& in, const std::vector<uint8_t>& v_pool);

// Where sequence s's token t lives in the pool: its slot.
uint64_t slot_of(const LayerInputs& in, uint32_t s, uint32_t t);
// Dim j of KV head h at `slot` of a TurboQuant V pool, decoded (rotated).
double turbo_v(const LayerShape& shape, const std::vector<uint8_t>& v_pool, uint64_t slot,
               uint32_t h, uint32_t j);
// Dim j of KV head h of sequence s's token t as the attention reads it: the
// input (bf16 cache), or decoded from the TurboQuant pool `v_pool`; and the
// largest magnitude over every cached token.
double attended_v(const LayerInputs& in, const std::vector<uint8_t>& v_pool, uint32_t s,
                  uint32_t t, uint32_t h, uint32_t j);
double max_abs_attended_v(const LayerInputs& in, const std::vector<uint8_t>& v_pool);

}  // namespace sparkrt::cli

#endif  // SPARKRT_APPS_SPARKRT_DEMO_LAYER_H_
