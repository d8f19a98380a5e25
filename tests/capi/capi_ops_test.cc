// The C API's ops against the C++ ops. On the mock, each C op records the
// same launches (entries, geometry, shared memory, stream, every argument's
// kind and bytes) as the C++ op given the same arguments on a C++ mock device,
// and refuses a bad shape with the same message; what only C can get wrong
// (struct_size, an unknown variant, cache format or bit width) is
// INVALID_ARGUMENT naming it. On cpu, a decode through the C op equals the
// C++ op bit for bit on random inputs (bf16 paged attention, fp8 MLA).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "capi_test_support.h"
#include "sparkrt/numeric.h"
#include "sparkrt/ops/kv_cache.h"
#include "sparkrt/ops/mla.h"
#include "sparkrt/ops/paged_attention.h"
#include "sparkrt/ops/turbo_kv_cache.h"
#include "sparkrt/ops/turbo_paged_attention.h"

namespace ops = sparkrt::ops;
using capitest::check_same;
using capitest::CStatus;
using capitest::describe;
using sparkrt::DevicePtr;
using sparkrt::Stream;

namespace {

// A C mock device and a C++ mock device side by side, each with an arena
// (one allocation every pointer argument points into, so the mock accepts
// the launches) and a stream of its own.
struct MockPair {
  static constexpr uint64_t kArenaBytes = uint64_t{64} << 20;
  static constexpr uint64_t kRegion = uint64_t{4} << 20;  // 16 regions

  capitest::CDevice c = capitest::open_c("mock");
  std::unique_ptr<sparkrt::Device> cpp = capitest::open_cpp("mock");
  capitest::CMock c_mock{c.get()};
  sparkrt::testing::MockInspector cpp_mock = attach(*cpp);
  SparkrtDevicePtr c_base = capitest::c_alloc(c.get(), kArenaBytes);
  uint64_t cpp_base = alloc(*cpp);
  SparkrtStream c_stream = capitest::c_stream(c.get());
  Stream cpp_stream = stream(*cpp);
  ops::KvCacheKernels kv = resolve<ops::KvCacheKernels>(*cpp);
  ops::PagedAttentionKernels pa = resolve<ops::PagedAttentionKernels>(*cpp);
  ops::TurboKvCacheKernels tkv = resolve<ops::TurboKvCacheKernels>(*cpp);
  ops::TurboPagedAttentionKernels tpa = resolve<ops::TurboPagedAttentionKernels>(*cpp);
  ops::MlaKernels mla = resolve<ops::MlaKernels>(*cpp);

  static sparkrt::testing::MockInspector attach(sparkrt::Device& d) {
    auto m = sparkrt::testing::MockInspector::attach(d);
    REQUIRE_MESSAGE(m.ok(), m.status().ToString());
    return *std::move(m);
  }
  static uint64_t alloc(sparkrt::Device& d) {
    auto p = d.alloc(kArenaBytes);
    REQUIRE_MESSAGE(p.ok(), p.status().ToString());
    return p->addr;
  }
  static Stream stream(sparkrt::Device& d) {
    auto s = d.create_stream();
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    return *s;
  }
  template <typename K>
  static K resolve(sparkrt::Device& d) {
    auto k = K::resolve(d);
    REQUIRE_MESSAGE(k.ok(), k.status().ToString());
    return *k;
  }

  // Runs the C op (args made for the C device's arena) and the C++ op (the
  // same args made for the C++ device's arena): the same status, and the
  // same launches, or none for both when they fail. Returns the C status's
  // code.
  template <typename CArgs>
  int32_t compare(const std::function<CArgs(uint64_t base)>& make,
                  sparkrt_status* (*c_op)(sparkrt_device*, const CArgs*, SparkrtStream),
                  const std::function<absl::Status(MockPair&, const CArgs&)>& cpp_op,
                  bool expect_ok) {
    c_mock.reset();
    REQUIRE(cpp_mock.reset().ok());
    const CArgs c_args = make(c_base);
    const CArgs cpp_args = make(cpp_base);
    const CStatus s(c_op(c.get(), &c_args, c_stream));
    const absl::Status want = cpp_op(*this, cpp_args);
    check_same(s.get(), want);
    if (expect_ok) CHECK_MESSAGE(want.ok(), want.ToString());
    const auto got = capitest::portable(c_mock.launches(), c_base, Stream{c_stream});
    const auto expected = capitest::portable(cpp_mock.launches(), cpp_base, cpp_stream);
    if (expect_ok) CHECK(!expected.empty());
    capitest::check_same_launches(got, expected);
    return sparkrt_status_code(s.get());
  }
};

// The arena region `i` (MockPair::kRegion bytes each) of the device whose
// arena starts at `base`.
uint64_t at(uint64_t base, uint32_t i, uint64_t offset = 0) {
  REQUIRE(i < MockPair::kArenaBytes / MockPair::kRegion);
  return base + i * MockPair::kRegion + offset;
}

std::string message_of(const sparkrt_status* s) { return sparkrt_status_message(s); }

// ---- the C++ ops, given the C args --------------------------------------

absl::Status cpp_fill_slots(MockPair& p, const sparkrt_fill_slots_args& a) {
  return ops::fill_slots_from_block_table(*p.cpp, p.kv,
                                          {.slots = DevicePtr(a.slots),
                                           .block_table = DevicePtr(a.block_table),
                                           .start_pos = a.start_pos,
                                           .count = a.count,
                                           .block_size = a.block_size},
                                          p.cpp_stream);
}

absl::Status cpp_reshape(MockPair& p, const sparkrt_reshape_and_cache_args& a) {
  return ops::reshape_and_cache(*p.cpp, p.kv,
                                {.key = DevicePtr(a.key),
                                 .value = DevicePtr(a.value),
                                 .k_cache = DevicePtr(a.k_cache),
                                 .v_cache = DevicePtr(a.v_cache),
                                 .slot_mapping = DevicePtr(a.slot_mapping),
                                 .num_tokens = a.num_tokens,
                                 .num_kv_heads = a.num_kv_heads,
                                 .head_dim = a.head_dim,
                                 .block_size = a.block_size,
                                 .key_stride = a.key_stride,
                                 .value_stride = a.value_stride},
                                p.cpp_stream);
}

absl::Status cpp_v_only(MockPair& p, const sparkrt_reshape_and_cache_v_only_args& a) {
  return ops::reshape_and_cache_flash_v_only(*p.cpp, p.kv,
                                             {.value = DevicePtr(a.value),
                                              .v_cache = DevicePtr(a.v_cache),
                                              .slot_mapping = DevicePtr(a.slot_mapping),
                                              .num_tokens = a.num_tokens,
                                              .num_kv_heads = a.num_kv_heads,
                                              .head_dim = a.head_dim,
                                              .block_size = a.block_size,
                                              .value_stride = a.value_stride},
                                             p.cpp_stream);
}

absl::Status cpp_fp8(MockPair& p, const sparkrt_reshape_and_cache_fp8_args& a) {
  return ops::reshape_and_cache_fp8(*p.cpp, p.kv,
                                    {.key = DevicePtr(a.key),
                                     .value = DevicePtr(a.value),
                                     .k_cache = DevicePtr(a.k_cache),
                                     .v_cache = DevicePtr(a.v_cache),
                                     .slot_mapping = DevicePtr(a.slot_mapping),
                                     .num_tokens = a.num_tokens,
                                     .num_kv_heads = a.num_kv_heads,
                                     .head_dim = a.head_dim,
                                     .block_size = a.block_size,
                                     .k_scale = a.k_scale,
                                     .v_scale = a.v_scale,
                                     .key_stride = a.key_stride,
                                     .value_stride = a.value_stride,
                                     .cache_stride = a.cache_stride},
                                    p.cpp_stream);
}

absl::Status cpp_fused(MockPair& p, const sparkrt_fused_k_norm_rope_args& a) {
  switch (a.variant) {
    case SPARKRT_FUSED_K_BF16:
      return ops::fused_k_norm_rope_cache_write_bf16(*p.cpp, p.kv,
                                                     {.k_in = DevicePtr(a.k_in),
                                                      .k_norm_weight = DevicePtr(a.k_norm_weight),
                                                      .positions = DevicePtr(a.positions),
                                                      .k_cache = DevicePtr(a.k_cache),
                                                      .slot_mapping = DevicePtr(a.slot_mapping),
                                                      .num_tokens = a.num_tokens,
                                                      .num_kv_heads = a.num_kv_heads,
                                                      .head_dim = a.head_dim,
                                                      .rotary_dim = a.rotary_dim,
                                                      .block_size = a.block_size,
                                                      .rms_eps = a.rms_eps,
                                                      .theta = a.theta},
                                                     p.cpp_stream);
    case SPARKRT_FUSED_K_BF16_MROPE:
      return ops::fused_k_norm_rope_cache_write_bf16_mrope(
          *p.cpp, p.kv,
          {.k_in = DevicePtr(a.k_in),
           .k_norm_weight = DevicePtr(a.k_norm_weight),
           .pos_t = DevicePtr(a.pos_t),
           .pos_h = DevicePtr(a.pos_h),
           .pos_w = DevicePtr(a.pos_w),
           .k_cache = DevicePtr(a.k_cache),
           .slot_mapping = DevicePtr(a.slot_mapping),
           .num_tokens = a.num_tokens,
           .num_kv_heads = a.num_kv_heads,
           .head_dim = a.head_dim,
           .rotary_dim = a.rotary_dim,
           .block_size = a.block_size,
           .rms_eps = a.rms_eps,
           .theta = a.theta},
          p.cpp_stream);
    case SPARKRT_FUSED_K_FP8:
      return ops::fused_k_norm_rope_cache_write_fp8(*p.cpp, p.kv,
                                                    {.k_in = DevicePtr(a.k_in),
                                                     .k_norm_weight = DevicePtr(a.k_norm_weight),
                                                     .positions = DevicePtr(a.positions),
                                                     .k_cache = DevicePtr(a.k_cache),
                                                     .slot_mapping = DevicePtr(a.slot_mapping),
                                                     .num_tokens = a.num_tokens,
                                                     .num_kv_heads = a.num_kv_heads,
                                                     .head_dim = a.head_dim,
                                                     .rotary_dim = a.rotary_dim,
                                                     .block_size = a.block_size,
                                                     .rms_eps = a.rms_eps,
                                                     .theta = a.theta,
                                                     .inv_scale = a.inv_scale},
                                                    p.cpp_stream);
  }
  FAIL("no C++ op for variant ", a.variant);
  return absl::InternalError("unreachable");
}

ops::PagedDecodeAttnArgs bf16_args(const sparkrt_paged_decode_args& a) {
  return {.q = DevicePtr(a.q),
          .k_cache = DevicePtr(a.k_cache),
          .v_cache = DevicePtr(a.v_cache),
          .out = DevicePtr(a.out),
          .block_tables = DevicePtr(a.block_tables),
          .seq_lens = DevicePtr(a.seq_lens),
          .max_blocks_per_seq = a.max_blocks_per_seq,
          .num_seqs = a.num_seqs,
          .num_q_heads = a.num_q_heads,
          .num_kv_heads = a.num_kv_heads,
          .head_dim = a.head_dim,
          .block_size = a.block_size,
          .inv_sqrt_d = a.inv_sqrt_d,
          .q_stride = a.q_stride,
          .sliding_window = a.sliding_window,
          .max_seq_len = a.max_seq_len,
          .workspace = DevicePtr(a.workspace),
          .workspace_bytes = a.workspace_bytes,
          .num_splits = a.num_splits};
}

absl::Status cpp_decode_on(sparkrt::Device& dev, const ops::PagedAttentionKernels& k,
                           const sparkrt_paged_decode_args& a, Stream stream) {
  if (a.cache_format == SPARKRT_CACHE_BF16)
    return ops::paged_decode_attn_bf16(dev, k, bf16_args(a), stream);
  REQUIRE(a.cache_format == SPARKRT_CACHE_FP8);
  return ops::paged_decode_attn_fp8(dev, k,
                                    {.q = DevicePtr(a.q),
                                     .k_cache = DevicePtr(a.k_cache),
                                     .v_cache = DevicePtr(a.v_cache),
                                     .out = DevicePtr(a.out),
                                     .block_tables = DevicePtr(a.block_tables),
                                     .seq_lens = DevicePtr(a.seq_lens),
                                     .max_blocks_per_seq = a.max_blocks_per_seq,
                                     .num_seqs = a.num_seqs,
                                     .num_q_heads = a.num_q_heads,
                                     .num_kv_heads = a.num_kv_heads,
                                     .head_dim = a.head_dim,
                                     .block_size = a.block_size,
                                     .inv_sqrt_d = a.inv_sqrt_d,
                                     .k_scale = a.k_scale,
                                     .v_scale = a.v_scale,
                                     .q_stride = a.q_stride,
                                     .cache_stride = a.cache_stride,
                                     .sliding_window = a.sliding_window,
                                     .max_seq_len = a.max_seq_len,
                                     .workspace = DevicePtr(a.workspace),
                                     .workspace_bytes = a.workspace_bytes,
                                     .num_splits = a.num_splits},
                                    stream);
}

absl::Status cpp_decode(MockPair& p, const sparkrt_paged_decode_args& a) {
  return cpp_decode_on(*p.cpp, p.pa, a, p.cpp_stream);
}

absl::Status cpp_turbo_write(MockPair& p, const sparkrt_reshape_and_cache_turbo_args& a) {
  const ops::ReshapeAndCacheTurboArgs args{.key = DevicePtr(a.key),
                                           .value = DevicePtr(a.value),
                                           .k_cache = DevicePtr(a.k_cache),
                                           .v_cache = DevicePtr(a.v_cache),
                                           .slot_mapping = DevicePtr(a.slot_mapping),
                                           .num_tokens = a.num_tokens,
                                           .num_kv_heads = a.num_kv_heads,
                                           .head_dim = a.head_dim,
                                           .block_size = a.block_size,
                                           .key_stride = a.key_stride,
                                           .value_stride = a.value_stride,
                                           .k_block_stride_bytes = a.k_block_stride_bytes,
                                           .v_block_stride_bytes = a.v_block_stride_bytes,
                                           .v_data_section_bytes = a.v_data_section_bytes};
  switch (a.bits) {
    case 2:
      return ops::reshape_and_cache_bf16k_turbo2v(*p.cpp, p.tkv, args, p.cpp_stream);
    case 3:
      return ops::reshape_and_cache_bf16k_turbo3v(*p.cpp, p.tkv, args, p.cpp_stream);
    case 4:
      return ops::reshape_and_cache_bf16k_turbo4v(*p.cpp, p.tkv, args, p.cpp_stream);
  }
  FAIL("no C++ op for bits ", a.bits);
  return absl::InternalError("unreachable");
}

absl::Status cpp_hadamard(MockPair& p, const sparkrt_hadamard_args& a) {
  return ops::hadamard_transform_bf16(*p.cpp, p.tkv,
                                      {.in = DevicePtr(a.in),
                                       .out = DevicePtr(a.out),
                                       .num_tokens = a.num_tokens,
                                       .num_heads = a.num_heads,
                                       .head_dim = a.head_dim,
                                       .in_stride = a.in_stride,
                                       .out_stride = a.out_stride},
                                      p.cpp_stream);
}

absl::Status cpp_turbo_decode(MockPair& p, const sparkrt_paged_decode_turbo_args& a) {
  const ops::PagedDecodeAttnTurboArgs args{.q = DevicePtr(a.q),
                                           .k_cache = DevicePtr(a.k_cache),
                                           .v_cache = DevicePtr(a.v_cache),
                                           .out = DevicePtr(a.out),
                                           .block_tables = DevicePtr(a.block_tables),
                                           .seq_lens = DevicePtr(a.seq_lens),
                                           .max_blocks_per_seq = a.max_blocks_per_seq,
                                           .num_seqs = a.num_seqs,
                                           .num_q_heads = a.num_q_heads,
                                           .num_kv_heads = a.num_kv_heads,
                                           .head_dim = a.head_dim,
                                           .block_size = a.block_size,
                                           .inv_sqrt_d = a.inv_sqrt_d,
                                           .q_stride = a.q_stride,
                                           .v_block_stride_bytes = a.v_block_stride_bytes,
                                           .v_data_section_bytes = a.v_data_section_bytes,
                                           .sliding_window = a.sliding_window,
                                           .max_seq_len = a.max_seq_len,
                                           .workspace = DevicePtr(a.workspace),
                                           .workspace_bytes = a.workspace_bytes,
                                           .num_splits = a.num_splits};
  switch (a.bits) {
    case 2:
      return ops::paged_decode_attn_bf16k_turbo2v(*p.cpp, p.tpa, args, p.cpp_stream);
    case 3:
      return ops::paged_decode_attn_bf16k_turbo3v(*p.cpp, p.tpa, args, p.cpp_stream);
    case 4:
      return ops::paged_decode_attn_bf16k_turbo4v(*p.cpp, p.tpa, args, p.cpp_stream);
  }
  FAIL("no C++ op for bits ", a.bits);
  return absl::InternalError("unreachable");
}

// ---- C args of each op, in a device's arena ------------------------------

sparkrt_fill_slots_args fill_slots(uint64_t base) {
  sparkrt_fill_slots_args a{};
  a.struct_size = SPARKRT_C_FILL_SLOTS_ARGS_SIZE;
  a.slots = at(base, 0);
  a.block_table = at(base, 1);
  a.start_pos = 37;
  a.count = 600;
  a.block_size = 16;
  return a;
}

sparkrt_reshape_and_cache_args reshape(uint64_t base) {
  sparkrt_reshape_and_cache_args a{};
  a.struct_size = SPARKRT_C_RESHAPE_AND_CACHE_ARGS_SIZE;
  a.key = at(base, 0);
  a.value = at(base, 1);
  a.k_cache = at(base, 2);
  a.v_cache = at(base, 3);
  a.slot_mapping = at(base, 4);
  a.num_tokens = 33;
  a.num_kv_heads = 4;
  a.head_dim = 128;
  a.block_size = 16;
  a.key_stride = 4 * 128 + 64;
  a.value_stride = 4 * 128 + 32;
  return a;
}

sparkrt_reshape_and_cache_v_only_args v_only(uint64_t base) {
  sparkrt_reshape_and_cache_v_only_args a{};
  a.struct_size = SPARKRT_C_RESHAPE_AND_CACHE_V_ONLY_ARGS_SIZE;
  a.value = at(base, 0);
  a.v_cache = at(base, 1);
  a.slot_mapping = at(base, 2);
  a.num_tokens = 21;
  a.num_kv_heads = 2;
  a.head_dim = 64;
  a.block_size = 32;
  a.value_stride = 2 * 64 + 8;
  return a;
}

sparkrt_reshape_and_cache_fp8_args fp8(uint64_t base) {
  sparkrt_reshape_and_cache_fp8_args a{};
  a.struct_size = SPARKRT_C_RESHAPE_AND_CACHE_FP8_ARGS_SIZE;
  a.key = at(base, 0);
  a.value = at(base, 1);
  a.k_cache = at(base, 2);
  a.v_cache = at(base, 3);
  a.slot_mapping = at(base, 4);
  a.num_tokens = 19;
  a.num_kv_heads = 8;
  a.head_dim = 128;
  a.block_size = 16;
  a.k_scale = 0.0125f;
  a.v_scale = 0.0375f;
  a.key_stride = 8 * 128;
  a.value_stride = 8 * 128 + 16;
  a.cache_stride = uint64_t{16} * 8 * 128 + 64;
  return a;
}

sparkrt_fused_k_norm_rope_args fused(uint64_t base, int32_t variant) {
  sparkrt_fused_k_norm_rope_args a{};
  a.struct_size = SPARKRT_C_FUSED_K_NORM_ROPE_ARGS_SIZE;
  a.variant = variant;
  a.k_in = at(base, 0);
  a.k_norm_weight = at(base, 1);
  if (variant == SPARKRT_FUSED_K_BF16_MROPE) {
    a.pos_t = at(base, 2);
    a.pos_h = at(base, 3);
    a.pos_w = at(base, 4);
  } else {
    a.positions = at(base, 2);
  }
  a.k_cache = at(base, 5);
  a.slot_mapping = at(base, 6);
  a.num_tokens = 13;
  a.num_kv_heads = 4;
  a.head_dim = 128;
  a.rotary_dim = 64;
  a.block_size = 16;
  a.rms_eps = 1e-6f;
  a.theta = 1000000.0f;
  a.inv_scale = variant == SPARKRT_FUSED_K_FP8 ? 1.0f / 0.02f : 0.0f;
  return a;
}

struct DecodeShape {
  uint32_t seqs, q_heads, kv_heads, dim, block, max_blocks, window, max_len, splits;
  bool workspace;
};

sparkrt_paged_decode_args decode(uint64_t base, int32_t format, const DecodeShape& s) {
  sparkrt_paged_decode_args a{};
  a.struct_size = SPARKRT_C_PAGED_DECODE_ARGS_SIZE;
  a.cache_format = format;
  a.q = at(base, 0);
  a.k_cache = at(base, 1);
  a.v_cache = at(base, 2);
  a.out = at(base, 3);
  a.block_tables = at(base, 4);
  a.seq_lens = at(base, 5);
  a.max_blocks_per_seq = s.max_blocks;
  a.num_seqs = s.seqs;
  a.num_q_heads = s.q_heads;
  a.num_kv_heads = s.kv_heads;
  a.head_dim = s.dim;
  a.block_size = s.block;
  a.inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(s.dim));
  a.k_scale = format == SPARKRT_CACHE_FP8 ? 0.02f : 0.0f;
  a.v_scale = format == SPARKRT_CACHE_FP8 ? 0.03f : 0.0f;
  a.q_stride = s.q_heads * s.dim + 8;
  a.cache_stride = format == SPARKRT_CACHE_FP8 ? uint64_t{s.block} * s.kv_heads * s.dim + 64 : 0;
  a.sliding_window = s.window;
  a.max_seq_len = s.max_len;
  if (s.workspace) {
    a.workspace = at(base, 8);
    a.workspace_bytes = ops::paged_decode_workspace_bytes(s.seqs, s.q_heads, s.dim);
    REQUIRE(a.workspace_bytes <= 8 * MockPair::kRegion);
  }
  a.num_splits = s.splits;
  return a;
}

sparkrt_reshape_and_cache_turbo_args turbo_write(uint64_t base, uint32_t bits) {
  auto layout = ops::turbo_cache_layout(bits, 16, 4, 128);
  REQUIRE(layout.ok());
  sparkrt_reshape_and_cache_turbo_args a{};
  a.struct_size = SPARKRT_C_RESHAPE_AND_CACHE_TURBO_ARGS_SIZE;
  a.bits = bits;
  a.key = at(base, 0);
  a.value = at(base, 1);
  a.k_cache = at(base, 2);
  a.v_cache = at(base, 3);
  a.slot_mapping = at(base, 4);
  a.num_tokens = 27;
  a.num_kv_heads = 4;
  a.head_dim = 128;
  a.block_size = 16;
  a.key_stride = 4 * 128 + 16;
  a.value_stride = 4 * 128;
  a.k_block_stride_bytes = layout->k_block_stride_bytes + 32;
  a.v_block_stride_bytes = layout->v_block_stride_bytes;
  a.v_data_section_bytes = layout->v_data_section_bytes;
  return a;
}

sparkrt_hadamard_args hadamard(uint64_t base) {
  sparkrt_hadamard_args a{};
  a.struct_size = SPARKRT_C_HADAMARD_ARGS_SIZE;
  a.in = at(base, 0);
  a.out = at(base, 1);
  a.num_tokens = 9;
  a.num_heads = 3;
  a.head_dim = 256;
  a.in_stride = 3 * 256 + 8;
  a.out_stride = 3 * 256;
  return a;
}

sparkrt_paged_decode_turbo_args turbo_decode(uint64_t base, uint32_t bits, const DecodeShape& s) {
  auto layout = ops::turbo_cache_layout(bits, s.block, s.kv_heads, s.dim);
  REQUIRE(layout.ok());
  sparkrt_paged_decode_turbo_args a{};
  a.struct_size = SPARKRT_C_PAGED_DECODE_TURBO_ARGS_SIZE;
  a.bits = bits;
  a.q = at(base, 0);
  a.k_cache = at(base, 1);
  a.v_cache = at(base, 2);
  a.out = at(base, 3);
  a.block_tables = at(base, 4);
  a.seq_lens = at(base, 5);
  a.max_blocks_per_seq = s.max_blocks;
  a.num_seqs = s.seqs;
  a.num_q_heads = s.q_heads;
  a.num_kv_heads = s.kv_heads;
  a.head_dim = s.dim;
  a.block_size = s.block;
  a.inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(s.dim));
  a.q_stride = s.q_heads * s.dim;
  a.v_block_stride_bytes = layout->v_block_stride_bytes;
  a.v_data_section_bytes = layout->v_data_section_bytes;
  a.sliding_window = s.window;
  a.max_seq_len = s.max_len;
  if (s.workspace) {
    a.workspace = at(base, 8);
    a.workspace_bytes = ops::paged_decode_workspace_bytes(s.seqs, s.q_heads, s.dim);
    REQUIRE(a.workspace_bytes <= 8 * MockPair::kRegion);
  }
  a.num_splits = s.splits;
  return a;
}

// Decode shapes that take each path: one pass, split + combine, split-merge,
// the op's own choice over a long context, a sliding window.
const DecodeShape kDecodeShapes[] = {
    {4, 32, 8, 128, 16, 64, 0, 0, 1, true},     // forced one pass
    {1, 8, 1, 128, 16, 256, 0, 4096, 0, true},  // the op chooses: few CTAs, long context
    {2, 8, 2, 64, 16, 128, 0, 0, 4, true},      // split + combine
    {2, 16, 4, 128, 32, 64, 0, 0, 16, true},    // split-merge
    {3, 12, 4, 96, 16, 40, 256, 0, 0, false},   // window, no workspace
    {2, 8, 8, 256, 16, 32, 0, 0, 1, false},     // head_dim 256, MHA
};

}  // namespace

TEST_CASE("capi ops: the kv_cache ops launch what the C++ ops launch") {
  MockPair p;
  SUBCASE("fill_slots_from_block_table") {
    p.compare<sparkrt_fill_slots_args>(fill_slots, sparkrt_fill_slots_from_block_table,
                                       cpp_fill_slots, true);
  }
  SUBCASE("reshape_and_cache") {
    p.compare<sparkrt_reshape_and_cache_args>(reshape, sparkrt_reshape_and_cache, cpp_reshape,
                                              true);
  }
  SUBCASE("reshape_and_cache_flash_v_only") {
    p.compare<sparkrt_reshape_and_cache_v_only_args>(v_only, sparkrt_reshape_and_cache_flash_v_only,
                                                     cpp_v_only, true);
  }
  SUBCASE("reshape_and_cache_fp8") {
    p.compare<sparkrt_reshape_and_cache_fp8_args>(fp8, sparkrt_reshape_and_cache_fp8, cpp_fp8,
                                                  true);
  }
  SUBCASE("fused_k_norm_rope_cache_write, every variant") {
    for (int32_t variant :
         {SPARKRT_FUSED_K_BF16, SPARKRT_FUSED_K_BF16_MROPE, SPARKRT_FUSED_K_FP8}) {
      INFO("variant ", variant);
      p.compare<sparkrt_fused_k_norm_rope_args>(
          [variant](uint64_t base) { return fused(base, variant); },
          sparkrt_fused_k_norm_rope_cache_write, cpp_fused, true);
    }
  }
}

TEST_CASE("capi ops: the kv_cache ops refuse bad shapes with C++'s messages") {
  MockPair p;
  const auto refused = [](int32_t code) { CHECK(code == SPARKRT_INVALID_ARGUMENT); };
  refused(p.compare<sparkrt_fill_slots_args>(
      [](uint64_t b) {
        auto a = fill_slots(b);
        a.block_size = 0;
        return a;
      },
      sparkrt_fill_slots_from_block_table, cpp_fill_slots, false));
  refused(p.compare<sparkrt_reshape_and_cache_args>(
      [](uint64_t b) {
        auto a = reshape(b);
        a.head_dim = 0;
        return a;
      },
      sparkrt_reshape_and_cache, cpp_reshape, false));
  refused(p.compare<sparkrt_reshape_and_cache_args>(
      [](uint64_t b) {
        auto a = reshape(b);
        a.key_stride = a.num_kv_heads * a.head_dim - 1;  // shorter than a row
        return a;
      },
      sparkrt_reshape_and_cache, cpp_reshape, false));
  refused(p.compare<sparkrt_reshape_and_cache_v_only_args>(
      [](uint64_t b) {
        auto a = v_only(b);
        a.head_dim = 0;
        return a;
      },
      sparkrt_reshape_and_cache_flash_v_only, cpp_v_only, false));
  refused(p.compare<sparkrt_reshape_and_cache_fp8_args>(
      [](uint64_t b) {
        auto a = fp8(b);
        a.head_dim = 0;
        return a;
      },
      sparkrt_reshape_and_cache_fp8, cpp_fp8, false));
  refused(p.compare<sparkrt_reshape_and_cache_fp8_args>(
      [](uint64_t b) {
        auto a = fp8(b);
        a.k_scale = 0.0f;
        return a;
      },
      sparkrt_reshape_and_cache_fp8, cpp_fp8, false));
  for (int32_t variant : {SPARKRT_FUSED_K_BF16, SPARKRT_FUSED_K_BF16_MROPE, SPARKRT_FUSED_K_FP8}) {
    INFO("variant ", variant);
    refused(p.compare<sparkrt_fused_k_norm_rope_args>(
        [variant](uint64_t b) {
          auto a = fused(b, variant);
          a.head_dim = 0;
          return a;
        },
        sparkrt_fused_k_norm_rope_cache_write, cpp_fused, false));
    refused(p.compare<sparkrt_fused_k_norm_rope_args>(
        [variant](uint64_t b) {
          auto a = fused(b, variant);
          a.rotary_dim = 63;  // odd
          return a;
        },
        sparkrt_fused_k_norm_rope_cache_write, cpp_fused, false));
  }
  // Empty work launches nothing, in C as in C++.
  CHECK(p.compare<sparkrt_reshape_and_cache_args>(
            [](uint64_t b) {
              auto a = reshape(b);
              a.num_tokens = 0;
              return a;
            },
            sparkrt_reshape_and_cache, cpp_reshape, false) == SPARKRT_OK);
  CHECK(p.c_mock.launches().empty());
}

TEST_CASE("capi ops: paged decode attention launches what the C++ op launches, every path") {
  MockPair p;
  for (int32_t format : {SPARKRT_CACHE_BF16, SPARKRT_CACHE_FP8}) {
    std::set<std::string> entries;  // every path taken, as the C++ op took it
    for (const DecodeShape& s : kDecodeShapes) {
      INFO("format ", format, ", ", s.seqs, " seqs, ", s.q_heads, "/", s.kv_heads, " heads, dim ",
           s.dim, ", block ", s.block, ", splits ", s.splits);
      p.compare<sparkrt_paged_decode_args>(
          [format, s](uint64_t base) { return decode(base, format, s); }, sparkrt_paged_decode_attn,
          cpp_decode, true);
      for (const auto& l : p.cpp_mock.launches()) entries.insert(l.entry);
    }
    const std::string type = format == SPARKRT_CACHE_BF16 ? "bf16" : "fp8";
    CHECK(entries == std::set<std::string>{"paged_decode_attn_" + type,
                                           "paged_decode_attn_" + type + "_split",
                                           "paged_decode_attn_combine",
                                           "paged_decode_attn_" + type + "_split_merge"});
    // Bad shapes: the C++ op's messages.
    for (const auto& bad : std::vector<std::function<void(sparkrt_paged_decode_args&)>>{
             [](sparkrt_paged_decode_args& a) { a.head_dim = 0; },
             [](sparkrt_paged_decode_args& a) { a.num_q_heads = 7; },  // not a multiple of KV
             [](sparkrt_paged_decode_args& a) { a.num_splits = 200; },
         }) {
      CHECK(p.compare<sparkrt_paged_decode_args>(
                [format, bad](uint64_t base) {
                  auto a = decode(base, format, kDecodeShapes[0]);
                  bad(a);
                  return a;
                },
                sparkrt_paged_decode_attn, cpp_decode, false) == SPARKRT_INVALID_ARGUMENT);
    }
  }
  for (uint32_t seqs : {1u, 4u, 64u}) {
    for (uint32_t heads : {8u, 32u}) {
      for (uint32_t dim : {64u, 128u, 256u}) {
        for (uint32_t splits : {0u, 2u, 64u}) {
          CHECK(sparkrt_paged_decode_workspace_bytes(seqs, heads, dim, splits) ==
                (splits == 0 ? ops::paged_decode_workspace_bytes(seqs, heads, dim)
                             : ops::paged_decode_workspace_bytes(seqs, heads, dim, splits)));
        }
      }
    }
  }
}

TEST_CASE("capi ops: TurboQuant layouts, writes, Hadamard and decode launch what C++ launches") {
  MockPair p;
  for (uint32_t bits : {2u, 3u, 4u}) {
    INFO("bits ", bits);
    for (uint32_t dim : {64u, 128u, 256u}) {
      auto want = ops::turbo_cache_layout(bits, 16, 8, dim);
      REQUIRE(want.ok());
      sparkrt_turbo_cache_layout got{};
      got.struct_size = SPARKRT_C_TURBO_CACHE_LAYOUT_SIZE;
      C_REQUIRE_OK(sparkrt_turbo_cache_layout_get(bits, 16, 8, dim, &got));
      CHECK(got.k_block_stride_bytes == want->k_block_stride_bytes);
      CHECK(got.v_data_section_bytes == want->v_data_section_bytes);
      CHECK(got.v_block_stride_bytes == want->v_block_stride_bytes);
    }
    p.compare<sparkrt_reshape_and_cache_turbo_args>(
        [bits](uint64_t base) { return turbo_write(base, bits); }, sparkrt_reshape_and_cache_turbo,
        cpp_turbo_write, true);
    CHECK(p.compare<sparkrt_reshape_and_cache_turbo_args>(
              [bits](uint64_t base) {
                auto a = turbo_write(base, bits);
                a.head_dim = 0;
                return a;
              },
              sparkrt_reshape_and_cache_turbo, cpp_turbo_write, false) == SPARKRT_INVALID_ARGUMENT);
    std::set<std::string> entries;
    for (const DecodeShape& s : kDecodeShapes) {
      if (s.dim % 64 != 0 || s.dim > 256) continue;  // 64, 128 or 256 only
      INFO(s.seqs, " seqs, ", s.q_heads, "/", s.kv_heads, " heads, dim ", s.dim, ", splits ",
           s.splits);
      p.compare<sparkrt_paged_decode_turbo_args>(
          [bits, s](uint64_t base) { return turbo_decode(base, bits, s); },
          sparkrt_paged_decode_attn_turbo, cpp_turbo_decode, true);
      for (const auto& l : p.cpp_mock.launches()) entries.insert(l.entry);
    }
    const std::string v = "paged_decode_attn_bf16k_turbo" + std::to_string(bits) + "v";
    CHECK(entries == std::set<std::string>{v, v + "_split", "paged_decode_attn_combine"});
    CHECK(p.compare<sparkrt_paged_decode_turbo_args>(
              [bits](uint64_t base) {
                auto a = turbo_decode(base, bits, kDecodeShapes[0]);
                a.head_dim = 96;
                return a;
              },
              sparkrt_paged_decode_attn_turbo, cpp_turbo_decode,
              false) == SPARKRT_INVALID_ARGUMENT);
  }
  p.compare<sparkrt_hadamard_args>(hadamard, sparkrt_hadamard_transform_bf16, cpp_hadamard, true);
  CHECK(p.compare<sparkrt_hadamard_args>(
            [](uint64_t base) {
              auto a = hadamard(base);
              a.head_dim = 0;
              return a;
            },
            sparkrt_hadamard_transform_bf16, cpp_hadamard, false) == SPARKRT_INVALID_ARGUMENT);
  CHECK(p.compare<sparkrt_hadamard_args>(
            [](uint64_t base) {
              auto a = hadamard(base);
              a.head_dim = 96;  // not a power of two
              return a;
            },
            sparkrt_hadamard_transform_bf16, cpp_hadamard, false) == SPARKRT_INVALID_ARGUMENT);

  // A layout the format cannot hold: C++'s message; nothing written.
  for (uint32_t bits : {0u, 1u, 5u, 8u}) {
    INFO("bits ", bits);
    sparkrt_turbo_cache_layout got{};
    got.struct_size = SPARKRT_C_TURBO_CACHE_LAYOUT_SIZE;
    got.k_block_stride_bytes = 12345;
    const CStatus s(sparkrt_turbo_cache_layout_get(bits, 16, 8, 128, &got));
    check_same(s.get(), ops::turbo_cache_layout(bits, 16, 8, 128).status());
    CHECK(got.k_block_stride_bytes == 12345);
  }
  {
    sparkrt_turbo_cache_layout got{};
    got.struct_size = SPARKRT_C_TURBO_CACHE_LAYOUT_SIZE;
    const CStatus s(sparkrt_turbo_cache_layout_get(4, 16, 8, 100, &got));
    check_same(s.get(), ops::turbo_cache_layout(4, 16, 8, 100).status());
    C_CHECK_CODE(sparkrt_turbo_cache_layout_get(4, 16, 8, 128, nullptr), SPARKRT_INVALID_ARGUMENT);
    got.struct_size = 0;
    C_CHECK_CODE(sparkrt_turbo_cache_layout_get(4, 16, 8, 128, &got), SPARKRT_INVALID_ARGUMENT);
  }
}

TEST_CASE("capi ops: what only C can get wrong is INVALID_ARGUMENT naming the field") {
  MockPair p;
  sparkrt_device* dev = p.c.get();
  const uint64_t base = p.c_base;
  const auto refused = [&](sparkrt_status* raw, const char* field) {
    const CStatus s(raw);
    CHECK_MESSAGE(sparkrt_status_code(s.get()) == SPARKRT_INVALID_ARGUMENT, describe(s.get()));
    CHECK_MESSAGE(message_of(s.get()).find(field) != std::string::npos, "expected '",
                  std::string(field), "' in: ", describe(s.get()));
  };

  // struct_size 0 and one byte short of the 1.0 fields, for every op.
  for (const size_t shortfall : {size_t{0}, size_t{1}}) {
    INFO("shortfall ", shortfall);
    auto f = fill_slots(base);
    f.struct_size = shortfall ? f.struct_size - 1 : 0;
    refused(sparkrt_fill_slots_from_block_table(dev, &f, 0), "struct_size");
    auto r = reshape(base);
    r.struct_size = shortfall ? r.struct_size - 1 : 0;
    refused(sparkrt_reshape_and_cache(dev, &r, 0), "struct_size");
    auto v = v_only(base);
    v.struct_size = shortfall ? v.struct_size - 1 : 0;
    refused(sparkrt_reshape_and_cache_flash_v_only(dev, &v, 0), "struct_size");
    auto e = fp8(base);
    e.struct_size = shortfall ? e.struct_size - 1 : 0;
    refused(sparkrt_reshape_and_cache_fp8(dev, &e, 0), "struct_size");
    auto k = fused(base, SPARKRT_FUSED_K_BF16);
    k.struct_size = shortfall ? k.struct_size - 1 : 0;
    refused(sparkrt_fused_k_norm_rope_cache_write(dev, &k, 0), "struct_size");
    auto d = decode(base, SPARKRT_CACHE_BF16, kDecodeShapes[0]);
    d.struct_size = shortfall ? d.struct_size - 1 : 0;
    refused(sparkrt_paged_decode_attn(dev, &d, 0), "struct_size");
    auto t = turbo_write(base, 4);
    t.struct_size = shortfall ? t.struct_size - 1 : 0;
    refused(sparkrt_reshape_and_cache_turbo(dev, &t, 0), "struct_size");
    auto h = hadamard(base);
    h.struct_size = shortfall ? h.struct_size - 1 : 0;
    refused(sparkrt_hadamard_transform_bf16(dev, &h, 0), "struct_size");
    auto td = turbo_decode(base, 4, kDecodeShapes[0]);
    td.struct_size = shortfall ? td.struct_size - 1 : 0;
    refused(sparkrt_paged_decode_attn_turbo(dev, &td, 0), "struct_size");
  }
  for (int32_t variant : {0, 4, -1, 100}) {
    INFO("variant ", variant);
    auto k = fused(base, SPARKRT_FUSED_K_BF16);
    k.variant = variant;
    refused(sparkrt_fused_k_norm_rope_cache_write(dev, &k, 0), "variant");
  }
  for (int32_t format : {0, 3, -1}) {
    INFO("cache_format ", format);
    auto d = decode(base, SPARKRT_CACHE_BF16, kDecodeShapes[0]);
    d.cache_format = format;
    refused(sparkrt_paged_decode_attn(dev, &d, 0), "cache_format");
  }
  for (uint32_t bits : {0u, 1u, 5u, 8u, 0xffffffffu}) {
    INFO("bits ", bits);
    auto t = turbo_write(base, 4);
    t.bits = bits;
    refused(sparkrt_reshape_and_cache_turbo(dev, &t, 0), "bits");
    auto td = turbo_decode(base, 4, kDecodeShapes[0]);
    td.bits = bits;
    refused(sparkrt_paged_decode_attn_turbo(dev, &td, 0), "bits");
  }
  // NULL device or args.
  auto r = reshape(base);
  C_CHECK_CODE(sparkrt_reshape_and_cache(nullptr, &r, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_reshape_and_cache(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_fill_slots_from_block_table(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_reshape_and_cache_flash_v_only(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_reshape_and_cache_fp8(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_fused_k_norm_rope_cache_write(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_paged_decode_attn(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_reshape_and_cache_turbo(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_hadamard_transform_bf16(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_paged_decode_attn_turbo(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  // None of it reached the mock; a newer caller's larger struct is taken.
  CHECK(p.c_mock.launches().empty());
  struct {
    sparkrt_reshape_and_cache_args args;
    uint64_t newer_field;
  } newer{reshape(base), 0x5555};
  newer.args.struct_size = sizeof newer;
  C_CHECK_OK(sparkrt_reshape_and_cache(dev, &newer.args, p.c_stream));
  CHECK(p.c_mock.launches().size() == 1);
}

namespace {

using sparkrt::numeric::bf16_bits;

std::vector<bf16_bits> random_bf16(std::mt19937_64& gen, size_t n) {
  std::uniform_real_distribution<float> mag(0.25f, 2.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<bf16_bits> v(n);
  for (auto& x : v) x = sparkrt::numeric::f32_to_bf16(neg(gen) ? -mag(gen) : mag(gen));
  return v;
}

// One decode problem uploaded to a device: ragged sequences over blocks
// scattered through the pool.
struct HostDecode {
  uint32_t seqs = 3, q_heads = 8, kv_heads = 2, dim = 64, block = 16;
  std::vector<int32_t> lens, tables;
  uint32_t max_blocks = 0, pool_blocks = 0;
  std::vector<bf16_bits> q, k, v;

  explicit HostDecode(std::mt19937_64& gen) {
    std::uniform_int_distribution<int32_t> len(1, 300);
    for (uint32_t s = 0; s < seqs; ++s) lens.push_back(len(gen));
    const int32_t longest = *std::max_element(lens.begin(), lens.end());
    max_blocks = static_cast<uint32_t>((longest + block - 1) / block);
    pool_blocks = seqs * max_blocks;
    std::vector<int32_t> ids(pool_blocks);
    for (uint32_t i = 0; i < pool_blocks; ++i) ids[i] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), gen);
    tables = ids;  // [seqs][max_blocks]: every entry a distinct block
    q = random_bf16(gen, uint64_t{seqs} * q_stride());
    k = random_bf16(gen, uint64_t{pool_blocks} * block * kv_heads * dim);
    v = random_bf16(gen, k.size());
  }
  uint32_t q_stride() const { return q_heads * dim + 8; }
  size_t out_elems() const { return size_t{seqs} * q_heads * dim; }
};

// The buffers of a HostDecode on one device (C or C++), as decode args.
sparkrt_paged_decode_args upload_decode(const HostDecode& h, uint32_t splits,
                                        const std::function<uint64_t(const void*, size_t)>& put,
                                        const std::function<uint64_t(size_t)>& poisoned) {
  sparkrt_paged_decode_args a{};
  a.struct_size = SPARKRT_C_PAGED_DECODE_ARGS_SIZE;
  a.cache_format = SPARKRT_CACHE_BF16;
  a.q = put(h.q.data(), h.q.size() * 2);
  a.k_cache = put(h.k.data(), h.k.size() * 2);
  a.v_cache = put(h.v.data(), h.v.size() * 2);
  a.out = poisoned(h.out_elems() * 2);
  a.block_tables = put(h.tables.data(), h.tables.size() * 4);
  a.seq_lens = put(h.lens.data(), h.lens.size() * 4);
  a.max_blocks_per_seq = h.max_blocks;
  a.num_seqs = h.seqs;
  a.num_q_heads = h.q_heads;
  a.num_kv_heads = h.kv_heads;
  a.head_dim = h.dim;
  a.block_size = h.block;
  a.inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(h.dim));
  a.q_stride = h.q_stride();
  a.num_splits = splits;
  return a;
}

}  // namespace

TEST_CASE("capi ops: a bf16 decode on cpu through C equals the C++ op bit for bit") {
  const uint64_t seed = sparkrt::testing::fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  const HostDecode h(gen);
  auto c = capitest::open_c("cpu");
  auto cpp = capitest::open_cpp("cpu");
  auto kernels = ops::PagedAttentionKernels::resolve(*cpp);
  REQUIRE(kernels.ok());

  for (uint32_t splits : {0u, 1u, 3u, 9u}) {
    INFO("num_splits ", splits);
    sparkrt_paged_decode_args ca = upload_decode(
        h, splits,
        [&](const void* data, size_t bytes) {
          const SparkrtDevicePtr p = capitest::c_alloc(c.get(), bytes);
          C_REQUIRE_OK(sparkrt_copy_h2d(c.get(), data, p, bytes));
          return p;
        },
        [&](size_t bytes) {
          const SparkrtDevicePtr p = capitest::c_alloc(c.get(), bytes);
          C_REQUIRE_OK(sparkrt_memset(c.get(), p, 0xff, bytes));
          return p;
        });
    sparkrt_paged_decode_args pa = upload_decode(
        h, splits,
        [&](const void* data, size_t bytes) {
          auto p = cpp->alloc(bytes);
          REQUIRE(p.ok());
          REQUIRE(cpp->copy_h2d(data, *p, bytes).ok());
          return p->addr;
        },
        [&](size_t bytes) {
          auto p = cpp->alloc(bytes);
          REQUIRE(p.ok());
          REQUIRE(cpp->memset(*p, 0xff, bytes).ok());
          return p->addr;
        });
    if (splits != 1) {  // a zeroed workspace, as the op requires
      const uint64_t ws = ops::paged_decode_workspace_bytes(h.seqs, h.q_heads, h.dim);
      ca.workspace = capitest::c_alloc(c.get(), ws);
      C_REQUIRE_OK(sparkrt_memset(c.get(), ca.workspace, 0, ws));
      ca.workspace_bytes = ws;
      auto p = cpp->alloc(ws);
      REQUIRE(p.ok());
      REQUIRE(cpp->memset(*p, 0, ws).ok());
      pa.workspace = p->addr;
      pa.workspace_bytes = ws;
    }
    C_REQUIRE_OK(sparkrt_paged_decode_attn(c.get(), &ca, 0));
    REQUIRE_OK(cpp_decode_on(*cpp, *kernels, pa, Stream{}));
    C_REQUIRE_OK(sparkrt_stream_synchronize(c.get(), 0));
    REQUIRE(cpp->synchronize().ok());
    std::vector<bf16_bits> got(h.out_elems()), want(h.out_elems());
    C_REQUIRE_OK(sparkrt_copy_d2h(c.get(), ca.out, got.data(), got.size() * 2));
    REQUIRE(cpp->copy_d2h(DevicePtr(pa.out), want).ok());
    size_t nan = 0, differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      nan += std::isnan(sparkrt::numeric::bf16_to_f32(got[i]));
      differ += got[i] != want[i];
    }
    CHECK_MESSAGE(nan == 0, nan, " outputs not written");
    CHECK_MESSAGE(differ == 0, differ, " of ", got.size(), " outputs differ from C++'s");
  }
}

// ---- MLA -----------------------------------------------------------------

namespace {

absl::Status cpp_mla_gemv(MockPair& p, const sparkrt_mla_batched_gemv_args& a) {
  return ops::mla_batched_gemv(*p.cpp, p.mla,
                               {.input = DevicePtr(a.input),
                                .weight = DevicePtr(a.weight),
                                .output = DevicePtr(a.output),
                                .n_out = a.n_out,
                                .k = a.k,
                                .num_heads = a.num_heads,
                                .input_stride = a.input_stride,
                                .output_stride = a.output_stride},
                               p.cpp_stream);
}

absl::Status cpp_mla_scatter(MockPair& p, const sparkrt_mla_q_rope_scatter_args& a) {
  return ops::mla_q_rope_scatter(*p.cpp, p.mla,
                                 {.q_full = DevicePtr(a.q_full),
                                  .q_absorbed_buf = DevicePtr(a.q_absorbed_buf),
                                  .q_rope_contiguous = DevicePtr(a.q_rope_contiguous),
                                  .nq = a.nq,
                                  .hd = a.hd,
                                  .nope = a.nope,
                                  .rope = a.rope,
                                  .kv_lora = a.kv_lora,
                                  .mla_cache_dim = a.mla_cache_dim},
                                 p.cpp_stream);
}

absl::Status cpp_mla_writeback(MockPair& p, const sparkrt_mla_q_rope_writeback_args& a) {
  return ops::mla_q_rope_writeback(*p.cpp, p.mla,
                                   {.q_rope_direct = DevicePtr(a.q_rope_direct),
                                    .q_absorbed_buf = DevicePtr(a.q_absorbed_buf),
                                    .nq = a.nq,
                                    .rope = a.rope,
                                    .kv_lora = a.kv_lora,
                                    .mla_cache_dim = a.mla_cache_dim},
                                   p.cpp_stream);
}

absl::Status cpp_mla_assemble(MockPair& p, const sparkrt_mla_cache_assemble_args& a) {
  return ops::mla_cache_assemble(*p.cpp, p.mla,
                                 {.kv_latent = DevicePtr(a.kv_latent),
                                  .k_rope = DevicePtr(a.k_rope),
                                  .k_cache = DevicePtr(a.k_cache),
                                  .v_cache = DevicePtr(a.v_cache),
                                  .kv_lora = a.kv_lora,
                                  .rope = a.rope,
                                  .mla_cache_dim = a.mla_cache_dim},
                                 p.cpp_stream);
}

ops::MlaPagedDecodeFp8Args mla_fp8_args(const sparkrt_mla_paged_decode_args& a) {
  return {.q = DevicePtr(a.q),
          .k_cache = DevicePtr(a.k_cache),
          .v_cache = DevicePtr(a.v_cache),
          .o = DevicePtr(a.o),
          .block_tables = DevicePtr(a.block_tables),
          .seq_lens = DevicePtr(a.seq_lens),
          .max_blocks_per_seq = a.max_blocks_per_seq,
          .num_q_heads = a.num_q_heads,
          .num_kv_heads = a.num_kv_heads,
          .q_head_dim = a.q_head_dim,
          .kv_cache_dim = a.kv_cache_dim,
          .block_size = a.block_size,
          .inv_sqrt_d = a.inv_sqrt_d,
          .k_scale = a.k_scale,
          .v_scale = a.v_scale,
          .cache_stride = a.cache_stride,
          .num_seqs = a.num_seqs,
          .sliding_window = a.sliding_window,
          .sinks = DevicePtr(a.sinks),
          .comp_pool = DevicePtr(a.comp_pool),
          .comp_block_count = a.comp_block_count,
          .workspace = DevicePtr(a.workspace),
          .workspace_bytes = a.workspace_bytes,
          .num_splits = a.num_splits};
}

ops::MlaPagedDecodeNvfp4Args mla_nvfp4_args(const sparkrt_mla_paged_decode_args& a) {
  return {.q = DevicePtr(a.q),
          .k_cache = DevicePtr(a.k_cache),
          .v_cache = DevicePtr(a.v_cache),
          .o = DevicePtr(a.o),
          .block_tables = DevicePtr(a.block_tables),
          .seq_lens = DevicePtr(a.seq_lens),
          .max_blocks_per_seq = a.max_blocks_per_seq,
          .num_q_heads = a.num_q_heads,
          .num_kv_heads = a.num_kv_heads,
          .q_head_dim = a.q_head_dim,
          .kv_cache_dim = a.kv_cache_dim,
          .block_size = a.block_size,
          .inv_sqrt_d = a.inv_sqrt_d,
          .block_stride_bytes = a.block_stride_bytes,
          .data_section_bytes = a.data_section_bytes,
          .num_seqs = a.num_seqs,
          .workspace = DevicePtr(a.workspace),
          .workspace_bytes = a.workspace_bytes,
          .num_splits = a.num_splits};
}

absl::Status cpp_mla_decode_on(sparkrt::Device& dev, const ops::MlaKernels& k,
                               const sparkrt_mla_paged_decode_args& a, Stream stream) {
  if (a.cache_format == SPARKRT_CACHE_FP8)
    return ops::mla_paged_decode_fp8(dev, k, mla_fp8_args(a), stream);
  REQUIRE(a.cache_format == SPARKRT_CACHE_NVFP4);
  return ops::mla_paged_decode_nvfp4(dev, k, mla_nvfp4_args(a), stream);
}

absl::Status cpp_mla_decode(MockPair& p, const sparkrt_mla_paged_decode_args& a) {
  return cpp_mla_decode_on(*p.cpp, p.mla, a, p.cpp_stream);
}

// The geometry the C++ plan gives: "per head", "tiled" or "split".
std::string mla_path(const sparkrt::Device& dev, const sparkrt_mla_paged_decode_args& a) {
  const auto plan = a.cache_format == SPARKRT_CACHE_FP8
                        ? ops::plan_mla_paged_decode_fp8(dev, mla_fp8_args(a))
                        : ops::plan_mla_paged_decode_nvfp4(dev, mla_nvfp4_args(a));
  REQUIRE_MESSAGE(plan.ok(), plan.status().ToString());
  if (!plan->tiled) return "per head";
  return plan->num_splits > 1 ? "split" : "tiled";
}

sparkrt_mla_batched_gemv_args mla_gemv(uint64_t base) {
  sparkrt_mla_batched_gemv_args a{};
  a.struct_size = SPARKRT_C_MLA_BATCHED_GEMV_ARGS_SIZE;
  a.input = at(base, 0);
  a.weight = at(base, 1);
  a.output = at(base, 2);
  a.n_out = 512;
  a.k = 128;
  a.num_heads = 16;
  a.input_stride = 192;
  a.output_stride = 576;
  return a;
}

sparkrt_mla_q_rope_scatter_args mla_scatter(uint64_t base) {
  sparkrt_mla_q_rope_scatter_args a{};
  a.struct_size = SPARKRT_C_MLA_Q_ROPE_SCATTER_ARGS_SIZE;
  a.q_full = at(base, 0);
  a.q_absorbed_buf = at(base, 1);
  a.q_rope_contiguous = at(base, 2);
  a.nq = 16;
  a.hd = 192;
  a.nope = 128;
  a.rope = 64;
  a.kv_lora = 512;
  a.mla_cache_dim = 576;
  return a;
}

sparkrt_mla_q_rope_writeback_args mla_writeback(uint64_t base) {
  sparkrt_mla_q_rope_writeback_args a{};
  a.struct_size = SPARKRT_C_MLA_Q_ROPE_WRITEBACK_ARGS_SIZE;
  a.q_rope_direct = at(base, 0);
  a.q_absorbed_buf = at(base, 1);
  a.nq = 16;
  a.rope = 64;
  a.kv_lora = 512;
  a.mla_cache_dim = 576;
  return a;
}

sparkrt_mla_cache_assemble_args mla_assemble(uint64_t base) {
  sparkrt_mla_cache_assemble_args a{};
  a.struct_size = SPARKRT_C_MLA_CACHE_ASSEMBLE_ARGS_SIZE;
  a.kv_latent = at(base, 0);
  a.k_rope = at(base, 1);
  a.k_cache = at(base, 2);
  a.v_cache = at(base, 3);
  a.kv_lora = 512;
  a.rope = 64;
  a.mla_cache_dim = 576;
  return a;
}

struct MlaShape {
  uint32_t seqs, q_heads, kv_heads, q_head_dim, block, max_blocks, splits;
  bool workspace, v_is_k;
  const char* path;  // what the C++ plan takes on the default mock
};

// Decode shapes that take each path on the default (H200-like) mock.
const MlaShape kMlaShapes[] = {
    {12, 32, 1, 576, 64, 40, 0, false, false, "tiled"},  // enough CTAs, no workspace
    {9, 32, 2, 576, 64, 40, 1, true, true, "tiled"},     // GQA, V is K, a single pass asked for
    {2, 16, 1, 568, 64, 40, 0, true, false, "per head"},  // q_head_dim not a multiple of 16
    {1, 16, 1, 576, 64, 64, 0, true, true, "split"},      // the op's choice: one CTA, 64 tiles
    {2, 16, 1, 576, 64, 64, 5, true, false, "split"},     // forced
};

sparkrt_mla_paged_decode_args mla_decode(uint64_t base, int32_t format, const MlaShape& s) {
  sparkrt_mla_paged_decode_args a{};
  a.struct_size = SPARKRT_C_MLA_PAGED_DECODE_ARGS_SIZE;
  a.cache_format = format;
  a.q = at(base, 0);
  a.k_cache = at(base, 1);
  a.v_cache = s.v_is_k ? a.k_cache : at(base, 2);
  a.o = at(base, 3);
  a.block_tables = at(base, 4);
  a.seq_lens = at(base, 5);
  a.max_blocks_per_seq = s.max_blocks;
  a.num_q_heads = s.q_heads;
  a.num_kv_heads = s.kv_heads;
  a.q_head_dim = s.q_head_dim;
  a.kv_cache_dim = 576;
  a.block_size = s.block;
  a.inv_sqrt_d = 1.0f / std::sqrt(192.0f);
  if (format == SPARKRT_CACHE_FP8) {
    a.k_scale = 0.02f;
    a.v_scale = 0.03f;
    a.cache_stride = uint64_t{s.block} * s.kv_heads * 576 + 64;
    a.sliding_window = s.splits == 0 && s.seqs == 1 ? 0 : 2048;
    a.sinks = at(base, 6);
    a.comp_pool = s.workspace ? uint64_t{0} : at(base, 7);
    a.comp_block_count = s.workspace ? 0 : 3;
  } else {
    const auto layout = ops::mla_nvfp4_block_layout(s.block, s.kv_heads, 576);
    a.block_stride_bytes = layout.block_stride_bytes + 32;
    a.data_section_bytes = layout.data_section_bytes;
  }
  a.num_seqs = s.seqs;
  if (s.workspace) {
    a.workspace = at(base, 8);
    a.workspace_bytes = ops::mla_decode_workspace_bytes(s.seqs, s.q_heads, 576, 8);
    REQUIRE(a.workspace_bytes <= 8 * MockPair::kRegion);
  }
  a.num_splits = s.splits;
  return a;
}

}  // namespace

TEST_CASE("capi ops: the mla gemv, rope and cache-assembly ops launch what C++ launches") {
  MockPair p;
  p.compare<sparkrt_mla_batched_gemv_args>(mla_gemv, sparkrt_mla_batched_gemv, cpp_mla_gemv, true);
  p.compare<sparkrt_mla_q_rope_scatter_args>(mla_scatter, sparkrt_mla_q_rope_scatter,
                                             cpp_mla_scatter, true);
  p.compare<sparkrt_mla_q_rope_writeback_args>(mla_writeback, sparkrt_mla_q_rope_writeback,
                                               cpp_mla_writeback, true);
  p.compare<sparkrt_mla_cache_assemble_args>(mla_assemble, sparkrt_mla_cache_assemble,
                                             cpp_mla_assemble, true);

  // Bad shapes: the C++ op's messages, nothing launched.
  const auto refused = [](int32_t code) { CHECK(code == SPARKRT_INVALID_ARGUMENT); };
  refused(p.compare<sparkrt_mla_batched_gemv_args>(
      [](uint64_t b) {
        auto a = mla_gemv(b);
        a.input_stride = a.k - 1;
        return a;
      },
      sparkrt_mla_batched_gemv, cpp_mla_gemv, false));
  refused(p.compare<sparkrt_mla_q_rope_scatter_args>(
      [](uint64_t b) {
        auto a = mla_scatter(b);
        a.hd = a.nope + a.rope - 1;
        return a;
      },
      sparkrt_mla_q_rope_scatter, cpp_mla_scatter, false));
  refused(p.compare<sparkrt_mla_q_rope_writeback_args>(
      [](uint64_t b) {
        auto a = mla_writeback(b);
        a.kv_lora = a.mla_cache_dim - a.rope + 1;
        return a;
      },
      sparkrt_mla_q_rope_writeback, cpp_mla_writeback, false));
  refused(p.compare<sparkrt_mla_cache_assemble_args>(
      [](uint64_t b) {
        auto a = mla_assemble(b);
        a.mla_cache_dim = 4096;  // beyond a block of threads
        return a;
      },
      sparkrt_mla_cache_assemble, cpp_mla_assemble, false));
  // Empty work launches nothing, in C as in C++.
  CHECK(p.compare<sparkrt_mla_batched_gemv_args>(
            [](uint64_t b) {
              auto a = mla_gemv(b);
              a.num_heads = 0;
              return a;
            },
            sparkrt_mla_batched_gemv, cpp_mla_gemv, false) == SPARKRT_OK);
  CHECK(p.c_mock.launches().empty());
}

TEST_CASE("capi ops: mla paged decode launches what the C++ op launches, every path and format") {
  MockPair p;
  for (int32_t format : {SPARKRT_CACHE_FP8, SPARKRT_CACHE_NVFP4}) {
    std::set<std::string> paths, entries;
    for (const MlaShape& s : kMlaShapes) {
      INFO("format ", format, ", ", s.seqs, " seqs, ", s.q_heads, "/", s.kv_heads,
           " heads, q_head_dim ", s.q_head_dim, ", splits ", s.splits, ", expected ", s.path);
      p.compare<sparkrt_mla_paged_decode_args>(
          [format, s](uint64_t base) { return mla_decode(base, format, s); },
          sparkrt_mla_paged_decode, cpp_mla_decode, true);
      const std::string path = mla_path(*p.cpp, mla_decode(p.cpp_base, format, s));
      CHECK(path == s.path);
      paths.insert(path);
      for (const auto& l : p.cpp_mock.launches()) entries.insert(l.entry);
    }
    CHECK(paths == std::set<std::string>{"per head", "tiled", "split"});
    const std::string type = format == SPARKRT_CACHE_FP8 ? "fp8" : "nvfp4";
    CHECK(entries == std::set<std::string>{"mla_paged_decode_" + type,
                                           "mla_paged_decode_" + type + "_split",
                                           "mla_decode_combine"});
    // Bad shapes: the C++ op's messages.
    for (const auto& bad : std::vector<std::function<void(sparkrt_mla_paged_decode_args&)>>{
             [](sparkrt_mla_paged_decode_args& a) { a.num_q_heads = 33; },  // not a multiple of KV
             [](sparkrt_mla_paged_decode_args& a) { a.kv_cache_dim = 64; },
             [](sparkrt_mla_paged_decode_args& a) { a.q_head_dim = 600; },
             [](sparkrt_mla_paged_decode_args& a) { a.num_splits = 65; },
             [](sparkrt_mla_paged_decode_args& a) {
               a.k_scale = 0.0f;           // FP8 refuses it
               a.data_section_bytes = 1;  // NVFP4 refuses it
             },
         }) {
      CHECK(p.compare<sparkrt_mla_paged_decode_args>(
                [format, bad](uint64_t base) {
                  auto a = mla_decode(base, format, kMlaShapes[1]);
                  bad(a);
                  return a;
                },
                sparkrt_mla_paged_decode, cpp_mla_decode, false) == SPARKRT_INVALID_ARGUMENT);
    }
    // No sequences: nothing launched.
    CHECK(p.compare<sparkrt_mla_paged_decode_args>(
              [format](uint64_t base) {
                auto a = mla_decode(base, format, kMlaShapes[0]);
                a.num_seqs = 0;
                return a;
              },
              sparkrt_mla_paged_decode, cpp_mla_decode, false) == SPARKRT_OK);
    CHECK(p.c_mock.launches().empty());
  }

  for (uint32_t seqs : {1u, 4u, 64u}) {
    for (uint32_t heads : {16u, 128u}) {
      for (uint32_t dim : {512u, 576u}) {
        for (uint32_t splits : {0u, 2u, 64u}) {
          CHECK(sparkrt_mla_decode_workspace_bytes(seqs, heads, dim, splits) ==
                (splits == 0 ? ops::mla_decode_workspace_bytes(seqs, heads, dim)
                             : ops::mla_decode_workspace_bytes(seqs, heads, dim, splits)));
        }
      }
    }
  }
  for (uint32_t block : {1u, 16u, 64u, 100u}) {
    for (uint32_t kv_heads : {1u, 3u}) {
      for (uint32_t dim : {80u, 576u}) {
        const ops::MlaNvfp4BlockLayout want = ops::mla_nvfp4_block_layout(block, kv_heads, dim);
        sparkrt_mla_nvfp4_block_layout got{};
        got.struct_size = SPARKRT_C_MLA_NVFP4_BLOCK_LAYOUT_SIZE;
        C_REQUIRE_OK(sparkrt_mla_nvfp4_block_layout_get(block, kv_heads, dim, &got));
        CHECK(got.data_section_bytes == want.data_section_bytes);
        CHECK(got.block_stride_bytes == want.block_stride_bytes);
      }
    }
  }
  // An older caller's struct is filled up to its struct_size, no further.
  sparkrt_mla_nvfp4_block_layout older{};
  older.struct_size = SPARKRT_STRUCT_SIZE(sparkrt_mla_nvfp4_block_layout, data_section_bytes);
  older.block_stride_bytes = 12345;
  C_REQUIRE_OK(sparkrt_mla_nvfp4_block_layout_get(64, 1, 576, &older));
  CHECK(older.data_section_bytes == ops::mla_nvfp4_block_layout(64, 1, 576).data_section_bytes);
  CHECK(older.block_stride_bytes == 12345);
}

TEST_CASE("capi ops: mla: what only C can get wrong is INVALID_ARGUMENT naming the field") {
  MockPair p;
  sparkrt_device* dev = p.c.get();
  const uint64_t base = p.c_base;
  const auto refused = [&](sparkrt_status* raw, const char* field) {
    const CStatus s(raw);
    CHECK_MESSAGE(sparkrt_status_code(s.get()) == SPARKRT_INVALID_ARGUMENT, describe(s.get()));
    CHECK_MESSAGE(message_of(s.get()).find(field) != std::string::npos, "expected '",
                  std::string(field), "' in: ", describe(s.get()));
  };
  for (const size_t shortfall : {size_t{0}, size_t{1}}) {
    INFO("shortfall ", shortfall);
    auto g = mla_gemv(base);
    g.struct_size = shortfall ? g.struct_size - 1 : 0;
    refused(sparkrt_mla_batched_gemv(dev, &g, 0), "struct_size");
    auto sc = mla_scatter(base);
    sc.struct_size = shortfall ? sc.struct_size - 1 : 0;
    refused(sparkrt_mla_q_rope_scatter(dev, &sc, 0), "struct_size");
    auto w = mla_writeback(base);
    w.struct_size = shortfall ? w.struct_size - 1 : 0;
    refused(sparkrt_mla_q_rope_writeback(dev, &w, 0), "struct_size");
    auto as = mla_assemble(base);
    as.struct_size = shortfall ? as.struct_size - 1 : 0;
    refused(sparkrt_mla_cache_assemble(dev, &as, 0), "struct_size");
    for (int32_t format : {SPARKRT_CACHE_FP8, SPARKRT_CACHE_NVFP4}) {
      auto d = mla_decode(base, format, kMlaShapes[0]);
      d.struct_size = shortfall ? d.struct_size - 1 : 0;
      refused(sparkrt_mla_paged_decode(dev, &d, 0), "struct_size");
    }
  }
  // BF16 is a format of sparkrt_paged_decode_attn, not of the MLA decode.
  for (int32_t format : {0, int32_t{SPARKRT_CACHE_BF16}, 4, -1}) {
    INFO("cache_format ", format);
    auto d = mla_decode(base, SPARKRT_CACHE_FP8, kMlaShapes[0]);
    d.cache_format = format;
    refused(sparkrt_mla_paged_decode(dev, &d, 0), "cache_format");
  }
  {
    sparkrt_mla_nvfp4_block_layout got{};
    got.struct_size = 0;
    got.data_section_bytes = 777;
    refused(sparkrt_mla_nvfp4_block_layout_get(64, 1, 576, &got), "struct_size");
    CHECK(got.data_section_bytes == 777);
    C_CHECK_CODE(sparkrt_mla_nvfp4_block_layout_get(64, 1, 576, nullptr),
                 SPARKRT_INVALID_ARGUMENT);
  }
  C_CHECK_CODE(sparkrt_mla_batched_gemv(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_mla_q_rope_scatter(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_mla_q_rope_writeback(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_mla_cache_assemble(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_mla_paged_decode(dev, nullptr, 0), SPARKRT_INVALID_ARGUMENT);
  auto g = mla_gemv(base);
  C_CHECK_CODE(sparkrt_mla_batched_gemv(nullptr, &g, 0), SPARKRT_INVALID_ARGUMENT);
  CHECK(p.c_mock.launches().empty());
}

namespace {

// One fp8 MLA decode problem: ragged sequences over shuffled blocks of the
// MLA row, sinks, a window and compressed rows, every input random.
struct HostMlaDecode {
  uint32_t seqs = 3, q_heads = 16, block = 64, comp = 3, window = 150;
  static constexpr uint32_t kDim = 576, kDv = 512;
  std::vector<int32_t> lens, tables;
  uint32_t max_blocks = 0, pool_blocks = 0;
  std::vector<bf16_bits> q;
  std::vector<uint8_t> k, v, comp_rows;
  std::vector<float> sinks;

  explicit HostMlaDecode(std::mt19937_64& gen) {
    std::uniform_int_distribution<int32_t> len(1, 400);
    for (uint32_t s = 0; s < seqs; ++s) lens.push_back(len(gen));
    const int32_t longest = *std::max_element(lens.begin(), lens.end());
    max_blocks = static_cast<uint32_t>((longest + block - 1) / block);
    pool_blocks = seqs * max_blocks;
    std::vector<int32_t> ids(pool_blocks);
    for (uint32_t i = 0; i < pool_blocks; ++i) ids[i] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), gen);
    tables = ids;
    q = random_bf16(gen, uint64_t{seqs} * q_heads * kDim);
    k = random_fp8(gen, uint64_t{pool_blocks} * cache_stride(), k_scale());
    v = random_fp8(gen, k.size(), v_scale());
    comp_rows = random_fp8(gen, uint64_t{seqs} * comp * kDim, k_scale());
    std::uniform_real_distribution<float> sink(-1.0f, 3.0f);
    for (uint32_t h = 0; h < q_heads; ++h) sinks.push_back(sink(gen));
  }
  // Values of magnitude 0.25 to 2 once scaled.
  static std::vector<uint8_t> random_fp8(std::mt19937_64& gen, size_t n, float scale) {
    std::vector<uint8_t> out;
    out.reserve(n);
    for (bf16_bits b : random_bf16(gen, n))
      out.push_back(sparkrt::numeric::f32_to_fp8_e4m3(sparkrt::numeric::bf16_to_f32(b) / scale));
    return out;
  }
  static float k_scale() { return 0.02f; }
  static float v_scale() { return 0.03f; }
  uint64_t cache_stride() const { return uint64_t{block} * kDim + 64; }
  size_t out_elems() const { return size_t{seqs} * q_heads * kDv; }
};

sparkrt_mla_paged_decode_args upload_mla(const HostMlaDecode& h, uint32_t splits,
                                         const std::function<uint64_t(const void*, size_t)>& put,
                                         const std::function<uint64_t(size_t)>& poisoned) {
  sparkrt_mla_paged_decode_args a{};
  a.struct_size = SPARKRT_C_MLA_PAGED_DECODE_ARGS_SIZE;
  a.cache_format = SPARKRT_CACHE_FP8;
  a.q = put(h.q.data(), h.q.size() * 2);
  a.k_cache = put(h.k.data(), h.k.size());
  a.v_cache = put(h.v.data(), h.v.size());
  a.o = poisoned(h.out_elems() * 2);
  a.block_tables = put(h.tables.data(), h.tables.size() * 4);
  a.seq_lens = put(h.lens.data(), h.lens.size() * 4);
  a.max_blocks_per_seq = h.max_blocks;
  a.num_q_heads = h.q_heads;
  a.num_kv_heads = 1;
  a.q_head_dim = HostMlaDecode::kDim;
  a.kv_cache_dim = HostMlaDecode::kDim;
  a.block_size = h.block;
  a.inv_sqrt_d = 1.0f / std::sqrt(192.0f);
  a.k_scale = HostMlaDecode::k_scale();
  a.v_scale = HostMlaDecode::v_scale();
  a.cache_stride = h.cache_stride();
  a.num_seqs = h.seqs;
  a.sliding_window = h.window;
  a.sinks = put(h.sinks.data(), h.sinks.size() * 4);
  a.comp_pool = put(h.comp_rows.data(), h.comp_rows.size());
  a.comp_block_count = h.comp;
  a.num_splits = splits;
  return a;
}

}  // namespace

TEST_CASE("capi ops: mla: an fp8 decode on cpu through C equals the C++ op bit for bit") {
  const uint64_t seed = sparkrt::testing::fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  const HostMlaDecode h(gen);
  auto c = capitest::open_c("cpu");
  auto cpp = capitest::open_cpp("cpu");
  auto kernels = ops::MlaKernels::resolve(*cpp);
  REQUIRE(kernels.ok());

  for (uint32_t splits : {1u, 0u, 3u}) {
    INFO("num_splits ", splits);
    sparkrt_mla_paged_decode_args ca = upload_mla(
        h, splits,
        [&](const void* data, size_t bytes) {
          const SparkrtDevicePtr p = capitest::c_alloc(c.get(), bytes);
          C_REQUIRE_OK(sparkrt_copy_h2d(c.get(), data, p, bytes));
          return p;
        },
        [&](size_t bytes) {
          const SparkrtDevicePtr p = capitest::c_alloc(c.get(), bytes);
          C_REQUIRE_OK(sparkrt_memset(c.get(), p, 0xff, bytes));
          return p;
        });
    sparkrt_mla_paged_decode_args pa = upload_mla(
        h, splits,
        [&](const void* data, size_t bytes) {
          auto p = cpp->alloc(bytes);
          REQUIRE(p.ok());
          REQUIRE(cpp->copy_h2d(data, *p, bytes).ok());
          return p->addr;
        },
        [&](size_t bytes) {
          auto p = cpp->alloc(bytes);
          REQUIRE(p.ok());
          REQUIRE(cpp->memset(*p, 0xff, bytes).ok());
          return p->addr;
        });
    if (splits != 1) {
      const uint64_t ws =
          sparkrt_mla_decode_workspace_bytes(h.seqs, h.q_heads, HostMlaDecode::kDim, 0);
      ca.workspace = capitest::c_alloc(c.get(), ws);
      ca.workspace_bytes = ws;
      auto p = cpp->alloc(ws);
      REQUIRE(p.ok());
      pa.workspace = p->addr;
      pa.workspace_bytes = ws;
    }
    C_REQUIRE_OK(sparkrt_mla_paged_decode(c.get(), &ca, 0));
    REQUIRE_OK(cpp_mla_decode_on(*cpp, *kernels, pa, Stream{}));
    C_REQUIRE_OK(sparkrt_stream_synchronize(c.get(), 0));
    REQUIRE(cpp->synchronize().ok());
    std::vector<bf16_bits> got(h.out_elems()), want(h.out_elems());
    C_REQUIRE_OK(sparkrt_copy_d2h(c.get(), ca.o, got.data(), got.size() * 2));
    REQUIRE(cpp->copy_d2h(DevicePtr(pa.o), want).ok());
    size_t nan = 0, differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      nan += std::isnan(sparkrt::numeric::bf16_to_f32(got[i]));
      differ += got[i] != want[i];
    }
    CHECK_MESSAGE(nan == 0, nan, " outputs not written");
    CHECK_MESSAGE(differ == 0, differ, " of ", got.size(), " outputs differ from C++'s");
  }
}
