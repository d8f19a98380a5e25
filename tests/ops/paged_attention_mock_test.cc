// Contract tests of the decode-attention ops on the recording mock (132
// multiprocessors, like an H200): the one-pass launch, the heads-per-CTA
// choice, the staging memory, and when and how the op splits the KV range
// (one split-merge launch, with the workspace laid out as documented).
#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops_mock_support.h"

using namespace opstest;
using sparkrt::DevicePtr;
using sparkrt::Dim3;
using sparkrt::Stream;
using sparkrt::testing::MockArg;
using sparkrt::testing::MockLaunch;
namespace ops = sparkrt::ops;

namespace {

// A fresh mock device (ops_mock_support.h) with the paged-attention kernels resolved.
struct Fixture : MockDevice {
  explicit Fixture(const char* properties = nullptr) : MockDevice(properties) {}
  ops::PagedAttentionKernels kernels = resolve<ops::PagedAttentionKernels>(*dev);

  // A Llama-like decode: 32 query heads over 8 KV heads, head_dim 128.
  ops::PagedDecodeAttnArgs bf16_args(uint32_t num_seqs, uint32_t max_blocks) {
    return {.q = fake_ptr(),
            .k_cache = fake_ptr(),
            .v_cache = fake_ptr(),
            .out = fake_ptr(),
            .block_tables = fake_ptr(),
            .seq_lens = fake_ptr(),
            .max_blocks_per_seq = max_blocks,
            .num_seqs = num_seqs,
            .num_q_heads = 32,
            .num_kv_heads = 8,
            .head_dim = 128,
            .block_size = 16,
            .inv_sqrt_d = 0.08838834764f,
            .q_stride = 32 * 128 + 2 * 8 * 128,  // q inside a fused QKV row
            .sliding_window = 0};
  }

  // The same decode over an fp8 cache of tightly packed blocks.
  ops::PagedDecodeAttnFp8Args fp8_args(uint32_t num_seqs, uint32_t max_blocks,
                                       uint32_t head_dim = 128) {
    return {.q = fake_ptr(),
            .k_cache = fake_ptr(),
            .v_cache = fake_ptr(),
            .out = fake_ptr(),
            .block_tables = fake_ptr(),
            .seq_lens = fake_ptr(),
            .max_blocks_per_seq = max_blocks,
            .num_seqs = num_seqs,
            .num_q_heads = 32,
            .num_kv_heads = 8,
            .head_dim = head_dim,
            .block_size = 16,
            .inv_sqrt_d = 0.1f,
            .k_scale = 0.5f,
            .v_scale = 0.5f,
            .q_stride = 32 * head_dim,
            .cache_stride = uint64_t{16} * 8 * head_dim};
  }
};

// Dynamic shared memory of a bf16 head_dim 128 decode launch: 2 stages of
// 8 warps x (K + V) x 8 tokens x 256 bytes.
constexpr uint32_t kStaged = 2 * 8 * 2 * 8 * 256;

void check_common(const MockLaunch& l, const char* entry, Dim3 grid, Stream stream,
                  uint32_t shared_mem = kStaged) {
  INFO("recorded: ", l);
  CHECK(l.module == "paged_attention");
  CHECK(l.entry == entry);
  CHECK(l.grid == grid);
  CHECK(l.block == Dim3{256});
  CHECK(l.shared_mem == shared_mem);
  CHECK(l.stream == stream);
  CHECK_FALSE(l.dependent_launch);  // no cubin on the mock: plain launches
}

void check_args(const MockLaunch& l, const std::vector<MockArg>& args) {
  INFO("recorded: ", l);
  REQUIRE(l.args.size() == args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    INFO("argument #", i, ": expected ", args[i]);
    CHECK(l.args[i] == args[i]);
  }
}

std::vector<MockArg> one_pass_bf16_args(const ops::PagedDecodeAttnArgs& a) {
  return {MockArg::of(a.q),           MockArg::of(a.k_cache),
          MockArg::of(a.v_cache),     MockArg::of(a.out),
          MockArg::of(a.block_tables), MockArg::of(a.seq_lens),
          MockArg::of(a.max_blocks_per_seq), MockArg::of(a.num_q_heads),
          MockArg::of(a.num_kv_heads), MockArg::of(a.head_dim),
          MockArg::of(a.block_size),  MockArg::of(a.inv_sqrt_d),
          MockArg::of(a.q_stride),    MockArg::of(a.sliding_window)};
}

}  // namespace

TEST_CASE("ops mock: PagedAttentionKernels::resolve looks each entry up once, in order") {
  auto dev = open_device("mock");
  auto mock = MockDevice::attach(*dev);
  const auto k = resolve<ops::PagedAttentionKernels>(*dev);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"paged_attention", "paged_decode_attn_bf16"},
      {"paged_attention", "paged_decode_attn_fp8"},
      {"paged_attention", "paged_decode_attn_bf16_split"},
      {"paged_attention", "paged_decode_attn_fp8_split"},
      {"paged_attention", "paged_decode_attn_combine"},
      {"paged_attention", "paged_decode_attn_bf16_split_merge"},
      {"paged_attention", "paged_decode_attn_fp8_split_merge"},
  };
  CHECK(mock.lookups() == expected);
  CHECK(mock.launch_count() == 0);
  CHECK(k.paged_decode_attn_combine.module() == "paged_attention");
  CHECK(k.paged_decode_attn_fp8_split_merge.entry() == "paged_decode_attn_fp8_split_merge");
  resolve<ops::PagedAttentionKernels>(*dev);  // from the runtime's cache
  CHECK(mock.lookups().size() == expected.size());
}

TEST_CASE("ops mock: paged_decode_attn_bf16 one pass, heads per CTA from the GQA group") {
  Fixture f;
  // Batch 64 x 8 CTAs fills 2 x 132 multiprocessors: no split, even with a
  // workspace and a long context.
  ops::PagedDecodeAttnArgs a = f.bf16_args(64, 512);
  a.workspace = f.fake_ptr();
  a.workspace_bytes = ops::paged_decode_workspace_bytes(64, 32, 128);
  REQUIRE_OK(ops::paged_decode_attn_bf16(*f.dev, f.kernels, a, f.stream));
  auto launches = f.mock.launches();
  REQUIRE(launches.size() == 1);
  check_common(launches[0], "paged_decode_attn_bf16", Dim3{32 / 4, 64}, f.stream);
  check_args(launches[0], one_pass_bf16_args(a));

  // hpc is the largest divisor of num_q_heads / num_kv_heads up to 8.
  struct Case {
    uint32_t q_heads, kv_heads, grid_x;
  };
  for (const Case c : {Case{8, 8, 8}, Case{16, 8, 8}, Case{24, 4, 4}, Case{28, 4, 4},
                       Case{64, 8, 8}, Case{12, 4, 4}, Case{64, 4, 8}, Case{96, 8, 16},
                       Case{40, 4, 8}}) {
    CAPTURE(c.q_heads);
    CAPTURE(c.kv_heads);
    REQUIRE_OK(f.mock.reset());
    ops::PagedDecodeAttnArgs b = f.bf16_args(300, 4);
    b.num_q_heads = c.q_heads;
    b.num_kv_heads = c.kv_heads;
    b.q_stride = c.q_heads * 128;
    REQUIRE_OK(ops::paged_decode_attn_bf16(*f.dev, f.kernels, b, f.stream));
    launches = f.mock.launches();
    REQUIRE(launches.size() == 1);
    check_common(launches[0], "paged_decode_attn_bf16", Dim3{c.grid_x, 300}, f.stream);
    check_args(launches[0], one_pass_bf16_args(b));
    auto plan = ops::plan_paged_decode(*f.dev, b);
    REQUIRE(plan.ok());
    CHECK(plan->heads_per_cta == c.q_heads / c.grid_x);
    CHECK(plan->num_splits == 1);
  }
}

TEST_CASE("ops mock: paged_decode_attn_bf16 splits long contexts the CTAs cannot cover") {
  Fixture f;
  // Batch 1, 8 CTAs, context 4096: one CTA per multiprocessor gives 132 / 8
  // = 16 splits, enough for the one-launch merge; 4096 / 128 = 32 by length:
  // 16 splits.
  ops::PagedDecodeAttnArgs a = f.bf16_args(1, 256);
  a.workspace = f.fake_ptr();
  a.workspace_bytes = ops::paged_decode_workspace_bytes(1, 32, 128);
  REQUIRE_OK(ops::paged_decode_attn_bf16(*f.dev, f.kernels, a, f.stream));
  const auto launches = f.mock.launches();
  REQUIRE(launches.size() == 1);
  const uint32_t n = 16;
  check_common(launches[0], "paged_decode_attn_bf16_split_merge", Dim3{8, 1, n}, f.stream);
  // The counters first (a sixteenth of the workspace, rounded down to 256
  // bytes), then the partial outputs, then the (max, sum) pairs at the next
  // 256-byte boundary.
  const uint64_t counter_bytes = a.workspace_bytes / 16 / 256 * 256;
  CHECK(ops::paged_decode_counter_bytes(a.workspace_bytes) == counter_bytes);
  CHECK(counter_bytes >= 1 * 32 * 4);
  const DevicePtr part_acc = a.workspace + counter_bytes;
  const DevicePtr part_ml = part_acc + ((uint64_t{1} * 32 * n * 128 * 4 + 255) / 256 * 256);
  check_args(launches[0],
             {MockArg::of(a.q), MockArg::of(a.k_cache), MockArg::of(a.v_cache),
              MockArg::of(a.out), MockArg::of(part_acc), MockArg::of(part_ml),
              MockArg::of(a.workspace), MockArg::of(a.block_tables),
              MockArg::of(a.seq_lens), MockArg::of(a.max_blocks_per_seq),
              MockArg::of(a.num_q_heads), MockArg::of(a.num_kv_heads), MockArg::of(a.head_dim),
              MockArg::of(a.block_size), MockArg::of(a.inv_sqrt_d), MockArg::of(a.q_stride),
              MockArg::of(a.sliding_window), MockArg::of(n)});
  auto plan = ops::plan_paged_decode(*f.dev, a);
  REQUIRE(plan.ok());
  CHECK(plan->num_splits == n);
  CHECK(plan->heads_per_cta == 4);

  SUBCASE("the host bound on seq_lens caps the splits") {
    ops::PagedDecodeAttnArgs b = a;
    b.max_seq_len = 1000;  // 1000 / 128 = 7
    auto p = ops::plan_paged_decode(*f.dev, b);
    REQUIRE(p.ok());
    CHECK(p->num_splits == 7);
  }
  SUBCASE("a sliding window caps the splits") {
    ops::PagedDecodeAttnArgs b = a;
    b.sliding_window = 512;  // 4
    auto p = ops::plan_paged_decode(*f.dev, b);
    REQUIRE(p.ok());
    CHECK(p->num_splits == 4);
  }
  SUBCASE("a short context is not split") {
    ops::PagedDecodeAttnArgs b = a;
    b.max_seq_len = 255;
    auto p = ops::plan_paged_decode(*f.dev, b);
    REQUIRE(p.ok());
    CHECK(p->num_splits == 1);
  }
  SUBCASE("a smaller workspace caps the splits, none means one pass") {
    ops::PagedDecodeAttnArgs b = a;
    b.workspace_bytes = ops::paged_decode_workspace_bytes(1, 32, 128, 5);
    auto p = ops::plan_paged_decode(*f.dev, b);
    REQUIRE(p.ok());
    CHECK(p->num_splits == 5);
    b.workspace = DevicePtr();
    p = ops::plan_paged_decode(*f.dev, b);
    REQUIRE(p.ok());
    CHECK(p->num_splits == 1);
    REQUIRE_OK(f.mock.reset());
    REQUIRE_OK(ops::paged_decode_attn_bf16(*f.dev, f.kernels, b, f.stream));
    REQUIRE(f.mock.launch_count() == 1);
    CHECK(f.mock.launch(0).entry == "paged_decode_attn_bf16");
  }
  SUBCASE("num_splits forces the geometry") {
    ops::PagedDecodeAttnArgs b = a;
    b.num_splits = 1;
    auto p = ops::plan_paged_decode(*f.dev, b);
    REQUIRE(p.ok());
    CHECK(p->num_splits == 1);
    b.num_splits = 3;
    p = ops::plan_paged_decode(*f.dev, b);
    REQUIRE(p.ok());
    CHECK(p->num_splits == 3);
    b.num_splits = ops::kMaxDecodeSplits + 1;
    CHECK(ops::plan_paged_decode(*f.dev, b).status().code() ==
          absl::StatusCode::kInvalidArgument);
    b.num_splits = 8;
    b.workspace_bytes = ops::paged_decode_workspace_bytes(1, 32, 128, 8) - 1;
    const absl::Status s = ops::paged_decode_attn_bf16(*f.dev, f.kernels, b, f.stream);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, "workspace"));
  }
}

TEST_CASE("ops mock: the split count fills the multiprocessors in one wave") {
  Fixture f;
  // 132 multiprocessors; 32 query heads over 8 KV heads are 8 CTAs per
  // sequence. One CTA per multiprocessor while a bf16 split reads less than
  // 2 MB (4 MB with the one-launch merge, from 8 splits on), else two (264
  // slots). A token's K and V are 512 bytes: at batch 16 one CTA per
  // (sequence, head group) reads 1 MB at context 2048 and 2 MB at 4096; at
  // batch 8 and 16K tokens two splits would read 4 MB each.
  struct Case {
    uint32_t batch, blocks, splits;
  };
  for (const Case c : {Case{1, 256, 16}, Case{2, 256, 8}, Case{3, 256, 5}, Case{8, 256, 2},
                       Case{16, 128, 1}, Case{16, 256, 2}, Case{17, 256, 1}, Case{32, 256, 1},
                       Case{8, 1024, 4}}) {
    CAPTURE(c.batch);
    CAPTURE(c.blocks);
    ops::PagedDecodeAttnArgs a = f.bf16_args(c.batch, c.blocks);
    a.workspace = f.fake_ptr();
    a.workspace_bytes = ops::paged_decode_workspace_bytes(c.batch, 32, 128);
    auto plan = ops::plan_paged_decode(*f.dev, a);
    REQUIRE(plan.ok());
    CHECK(plan->heads_per_cta == 4);
    CHECK(plan->num_splits == c.splits);
    REQUIRE_OK(f.mock.reset());
    REQUIRE_OK(ops::paged_decode_attn_bf16(*f.dev, f.kernels, a, f.stream));
    const auto launches = f.mock.launches();
    // From 8 splits on one split-merge launch, below it split then combine.
    REQUIRE(launches.size() == (c.splits > 1 && c.splits < 8 ? 2u : 1u));
    check_common(launches[0],
                 c.splits >= 8  ? "paged_decode_attn_bf16_split_merge"
                 : c.splits > 1 ? "paged_decode_attn_bf16_split"
                                : "paged_decode_attn_bf16",
                 Dim3{8, c.batch, c.splits}, f.stream);
  }
  // GQA 8 (64 query heads over 8 KV heads): 8 heads per CTA, still 8 CTAs
  // per sequence, and one per multiprocessor even at 32K tokens (a split
  // reads 1 MB).
  for (const uint32_t blocks : {512u, 2048u}) {
    CAPTURE(blocks);
    ops::PagedDecodeAttnArgs b = f.bf16_args(1, blocks);
    b.num_q_heads = 64;
    b.q_stride = 64 * 128;
    b.workspace = f.fake_ptr();
    b.workspace_bytes = ops::paged_decode_workspace_bytes(1, 64, 128);
    auto plan = ops::plan_paged_decode(*f.dev, b);
    REQUIRE(plan.ok());
    CHECK(plan->heads_per_cta == 8);
    CHECK(plan->num_splits == 16);
  }
  // fp8: two per multiprocessor once a split of the one-per-multiprocessor
  // count would read 256 KB (1024 tokens of 256 bytes), 512 KB with the
  // merge: from 32K tokens at batch 1, 16K at batch 2, 2K at batch 8.
  struct Fp8Case {
    uint32_t batch, blocks, splits;
  };
  for (const Fp8Case c : {Fp8Case{1, 256, 16}, Fp8Case{1, 1024, 16}, Fp8Case{1, 2047, 16},
                          Fp8Case{1, 2048, 33}, Fp8Case{2, 512, 8}, Fp8Case{2, 1024, 16},
                          Fp8Case{8, 64, 2}, Fp8Case{8, 127, 2}, Fp8Case{8, 128, 4}}) {
    CAPTURE(c.batch);
    CAPTURE(c.blocks);
    ops::PagedDecodeAttnFp8Args b = f.fp8_args(c.batch, c.blocks);
    b.workspace = f.fake_ptr();
    b.workspace_bytes = ops::paged_decode_workspace_bytes(c.batch, 32, 128);
    auto plan = ops::plan_paged_decode(*f.dev, b);
    REQUIRE(plan.ok());
    CHECK(plan->num_splits == c.splits);
  }
}

TEST_CASE("ops mock: paged_decode_attn_fp8 one pass and split") {
  Fixture f;
  const ops::PagedDecodeAttnFp8Args a{.q = f.fake_ptr(),
                                      .k_cache = f.fake_ptr(),
                                      .v_cache = f.fake_ptr(),
                                      .out = f.fake_ptr(),
                                      .block_tables = f.fake_ptr(),
                                      .seq_lens = f.fake_ptr(),
                                      .max_blocks_per_seq = 128,
                                      .num_seqs = 4,
                                      .num_q_heads = 16,
                                      .num_kv_heads = 2,
                                      .head_dim = 64,
                                      .block_size = 32,
                                      .inv_sqrt_d = 0.125f,
                                      .k_scale = 0.03f,
                                      .v_scale = 0.07f,
                                      .q_stride = 16 * 64,
                                      .cache_stride = 32 * 2 * 64 + 128,
                                      .sliding_window = 1000};
  // No workspace: one pass, grid (16 / 8, 4).
  REQUIRE_OK(ops::paged_decode_attn_fp8(*f.dev, f.kernels, a, f.stream));
  auto launches = f.mock.launches();
  REQUIRE(launches.size() == 1);
  check_common(launches[0], "paged_decode_attn_fp8", Dim3{2, 4}, f.stream, 2 * 8 * 2 * 16 * 128);
  check_args(launches[0],
             {MockArg::of(a.q), MockArg::of(a.k_cache), MockArg::of(a.v_cache), MockArg::of(a.out),
              MockArg::of(a.block_tables), MockArg::of(a.seq_lens),
              MockArg::of(a.max_blocks_per_seq), MockArg::of(a.num_q_heads),
              MockArg::of(a.num_kv_heads), MockArg::of(a.head_dim), MockArg::of(a.block_size),
              MockArg::of(a.inv_sqrt_d), MockArg::of(a.k_scale), MockArg::of(a.v_scale),
              MockArg::of(a.q_stride), MockArg::of(a.cache_stride),
              MockArg::of(a.sliding_window)});

  // With a workspace: 8 CTAs, one per multiprocessor, fit 132 / 8 = 16
  // times; the window allows 1000 / 128 = 7: 7 splits.
  REQUIRE_OK(f.mock.reset());
  ops::PagedDecodeAttnFp8Args b = a;
  b.workspace = f.fake_ptr();
  b.workspace_bytes = ops::paged_decode_workspace_bytes(4, 16, 64);
  REQUIRE_OK(ops::paged_decode_attn_fp8(*f.dev, f.kernels, b, f.stream));
  launches = f.mock.launches();
  // 7 splits (below 8): split, then combine.
  REQUIRE(launches.size() == 2);
  const uint32_t n = 7;
  const DevicePtr part_acc = b.workspace + b.workspace_bytes / 16 / 256 * 256;
  const DevicePtr part_ml = part_acc + ((uint64_t{4} * 16 * n * 64 * 4 + 255) / 256 * 256);
  check_common(launches[0], "paged_decode_attn_fp8_split", Dim3{2, 4, n}, f.stream,
               2 * 8 * 2 * 16 * 128);
  check_args(launches[0],
             {MockArg::of(b.q), MockArg::of(b.k_cache), MockArg::of(b.v_cache),
              MockArg::of(part_acc), MockArg::of(part_ml), MockArg::of(b.block_tables),
              MockArg::of(b.seq_lens), MockArg::of(b.max_blocks_per_seq),
              MockArg::of(b.num_q_heads), MockArg::of(b.num_kv_heads), MockArg::of(b.head_dim),
              MockArg::of(b.block_size), MockArg::of(b.inv_sqrt_d), MockArg::of(b.k_scale),
              MockArg::of(b.v_scale), MockArg::of(b.q_stride), MockArg::of(b.cache_stride),
              MockArg::of(b.sliding_window), MockArg::of(n)});
  check_common(launches[1], "paged_decode_attn_combine", Dim3{16, 4}, f.stream, 0);
  check_args(launches[1], {MockArg::of(part_acc), MockArg::of(part_ml), MockArg::of(b.out),
                           MockArg::of(b.num_q_heads), MockArg::of(b.head_dim), MockArg::of(n)});
}

TEST_CASE("ops mock: decode staging memory by head_dim, dtype and alignment") {
  Fixture f;
  // The mock has the H200's 227 KB per block (228 KB per multiprocessor):
  // two CTAs leave each 99 KB for staging besides 16 KB of static shared
  // memory. Two stages of 8 warps x (K + V) x TT tokens x rows padded to 128
  // bytes (TT = 16 up to head_dim 64, else 8), or none.
  struct Case {
    bool fp8;
    uint32_t dim;
    uint64_t stride_pad;  // bytes added to the fp8 block stride
    uint32_t shared_mem;
  };
  for (const Case c : {
           Case{false, 64, 0, 2 * 8 * 2 * 16 * 128},
           Case{false, 128, 0, 2 * 8 * 2 * 8 * 256},
           Case{false, 96, 0, 2 * 8 * 2 * 8 * 256},  // 192-byte rows padded to 256
           Case{false, 256, 0, 0},                   // 128 KB: registers
           Case{true, 128, 0, 2 * 8 * 2 * 8 * 128},
           Case{true, 256, 16, 2 * 8 * 2 * 8 * 256},
           Case{true, 64, 0, 2 * 8 * 2 * 16 * 128},
           Case{true, 72, 0, 0},   // 72-byte rows: no 16-byte copies
           Case{true, 128, 8, 0},  // a block stride of 8 mod 16 bytes
       }) {
    CAPTURE(c.fp8);
    CAPTURE(c.dim);
    CAPTURE(c.stride_pad);
    REQUIRE_OK(f.mock.reset());
    if (!c.fp8) {
      ops::PagedDecodeAttnArgs a = f.bf16_args(64, 16);
      a.head_dim = c.dim;
      a.q_stride = 32 * c.dim;
      auto plan = ops::plan_paged_decode(*f.dev, a);
      REQUIRE(plan.ok());
      CHECK(plan->shared_mem == c.shared_mem);
      REQUIRE_OK(ops::paged_decode_attn_bf16(*f.dev, f.kernels, a, f.stream));
    } else {
      ops::PagedDecodeAttnFp8Args b = f.fp8_args(64, 16, c.dim);
      b.cache_stride += c.stride_pad;
      auto plan = ops::plan_paged_decode(*f.dev, b);
      REQUIRE(plan.ok());
      CHECK(plan->shared_mem == c.shared_mem);
      REQUIRE_OK(ops::paged_decode_attn_fp8(*f.dev, f.kernels, b, f.stream));
    }
    const auto launches = f.mock.launches();
    REQUIRE(launches.size() == 1);
    check_common(launches[0], c.fp8 ? "paged_decode_attn_fp8" : "paged_decode_attn_bf16",
                 Dim3{8, 64}, f.stream, c.shared_mem);
  }
}

TEST_CASE("ops mock: decode on a GB10-like device (48 SMs, 99 KB per block)") {
  Fixture f(kGb10Properties);
  // Two CTAs per multiprocessor leave each (99 + 1) / 2 - 1 - 16 = 33 KB for
  // staging: 32 KB for fp8 head_dim 128, too little for bf16's 64 KB.
  ops::PagedDecodeAttnArgs a = f.bf16_args(1, 256);  // context 4096
  a.workspace = f.fake_ptr();
  a.workspace_bytes = ops::paged_decode_workspace_bytes(1, 32, 128);
  auto plan = ops::plan_paged_decode(*f.dev, a);
  REQUIRE_OK(plan.status());
  CHECK(plan->shared_mem == 0);
  // 8 CTAs fill 2 x 48 slots 12 times: 12 splits, one split-merge launch.
  CHECK(plan->num_splits == 12);
  REQUIRE_OK(ops::paged_decode_attn_bf16(*f.dev, f.kernels, a, f.stream));
  auto launches = f.mock.launches();
  REQUIRE(launches.size() == 1);
  check_common(launches[0], "paged_decode_attn_bf16_split_merge", Dim3{8, 1, 12}, f.stream, 0);

  REQUIRE_OK(f.mock.reset());
  const ops::PagedDecodeAttnFp8Args b = f.fp8_args(64, 256);
  plan = ops::plan_paged_decode(*f.dev, b);
  REQUIRE_OK(plan.status());
  CHECK(plan->shared_mem == 2 * 8 * 2 * 8 * 128);
  CHECK(plan->num_splits == 1);
  REQUIRE_OK(ops::paged_decode_attn_fp8(*f.dev, f.kernels, b, f.stream));
  launches = f.mock.launches();
  REQUIRE(launches.size() == 1);
  check_common(launches[0], "paged_decode_attn_fp8", Dim3{8, 64}, f.stream, 2 * 8 * 2 * 8 * 128);
}

// The workspace size is the smallest that holds the counters and partials:
// one byte less holds fewer splits; a workspace sized for many sequences
// serves fewer, and its counter region covers every shape that can split in it.
TEST_CASE("ops mock: decode workspace bytes are minimal and cover smaller calls") {
  for (uint32_t seqs : {1u, 3u, 8u, 64u})
    for (uint32_t heads : {8u, 32u})
      for (uint32_t dim : {8u, 64u, 128u, 256u})
        for (uint32_t splits : {2u, 5u, 64u}) {
          CAPTURE(seqs);
          CAPTURE(heads);
          CAPTURE(dim);
          CAPTURE(splits);
          const uint64_t w = ops::paged_decode_workspace_bytes(seqs, heads, dim, splits);
          const uint64_t c = ops::paged_decode_counter_bytes(w);
          CHECK(c % 256 == 0);
          CHECK(c >= uint64_t{seqs} * heads * 4);
          const uint64_t partials = (uint64_t{seqs} * heads * splits * dim * 4 + 255) / 256 * 256 +
                                    uint64_t{seqs} * heads * splits * 8;
          CHECK(w - c >= partials);
          const uint64_t c1 = ops::paged_decode_counter_bytes(w - 1);
          CHECK((c1 < uint64_t{seqs} * heads * 4 || w - 1 - c1 < partials));
        }
}

TEST_CASE("ops mock: DecodeWorkspace is allocated at the right size, zeroed, and freed once") {
  MockDevice m;
  const uint64_t bytes = ops::paged_decode_workspace_bytes(3, 32, 128);
  DevicePtr first;
  {
    const uint64_t memsets = m.mock.counters().memsets_blocking;
    auto ws = ops::DecodeWorkspace::create(*m.dev, 3, 32, 128);
    REQUIRE_OK(ws.status());
    CHECK(ws->bytes() == bytes);
    CHECK(m.mock.counters().memsets_blocking == memsets + 1);  // fresh memory is not assumed zero
    first = ws->ptr();
    auto info = m.mock.pointer_info(first);
    REQUIRE_OK(info.status());
    CHECK(info->live);
    CHECK(info->size >= bytes);
    std::vector<uint8_t> host(bytes, 0xab);
    REQUIRE_OK(m.dev->copy_d2h(first, host));
    CHECK(std::count(host.begin(), host.end(), uint8_t{0}) == int64_t(bytes));

    // Moving hands over the allocation; the moved-from object frees nothing.
    ops::DecodeWorkspace moved = std::move(*ws);
    CHECK(moved.ptr() == first);
    CHECK(ws->ptr().is_null());
    CHECK(ws->bytes() == 0);
    auto other = ops::DecodeWorkspace::create(*m.dev, 1, 8, 64, 2);
    REQUIRE_OK(other.status());
    const DevicePtr second = other->ptr();
    moved = std::move(*other);  // frees the first, keeps the second
    CHECK_FALSE(m.mock.pointer_info(first)->live);
    CHECK(m.mock.pointer_info(second)->live);
    CHECK(moved.bytes() == ops::paged_decode_workspace_bytes(1, 8, 64, 2));
  }
  CHECK(m.mock.counters().live_allocations == 0);

  SUBCASE("no memory: the allocation's error, nothing left behind") {
    REQUIRE_OK(m.mock.cap_memory(bytes / 2));
    auto ws = ops::DecodeWorkspace::create(*m.dev, 3, 32, 128);
    CHECK(ws.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(m.mock.counters().live_allocations == 0);
  }
}

TEST_CASE("ops mock: decode with no sequences launches nothing, bad shapes are refused") {
  Fixture f;
  ops::PagedDecodeAttnArgs a = f.bf16_args(0, 8);
  REQUIRE_OK(ops::paged_decode_attn_bf16(*f.dev, f.kernels, a, f.stream));
  ops::PagedDecodeAttnFp8Args empty_fp8{};
  REQUIRE_OK(ops::paged_decode_attn_fp8(*f.dev, f.kernels, empty_fp8, f.stream));
  CHECK(f.mock.launch_count() == 0);

  const auto refused = [&](ops::PagedDecodeAttnArgs b, const char* what) {
    CAPTURE(what);
    const absl::Status s = ops::paged_decode_attn_bf16(*f.dev, f.kernels, b, f.stream);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, what));
  };
  ops::PagedDecodeAttnArgs b = f.bf16_args(2, 8);
  b.num_q_heads = 30;  // not a multiple of 8 KV heads
  refused(b, "num_q_heads");
  b = f.bf16_args(2, 8);
  b.head_dim = 100;
  b.q_stride = 32 * 100;
  refused(b, "head_dim");
  b = f.bf16_args(2, 8);
  b.head_dim = 512;
  b.q_stride = 32 * 512;
  refused(b, "head_dim");
  b = f.bf16_args(2, 8);
  b.q_stride = 32 * 128 - 8;
  refused(b, "q_stride");
  b = f.bf16_args(2, 0);
  refused(b, "max_blocks_per_seq");
  b = f.bf16_args(2, 8);
  b.k_cache = b.k_cache + 8;  // rows are read 16 bytes at a time
  refused(b, "aligned");

  ops::PagedDecodeAttnFp8Args c{.q = f.fake_ptr(),
                                .k_cache = f.fake_ptr(),
                                .v_cache = f.fake_ptr(),
                                .out = f.fake_ptr(),
                                .block_tables = f.fake_ptr(),
                                .seq_lens = f.fake_ptr(),
                                .max_blocks_per_seq = 8,
                                .num_seqs = 2,
                                .num_q_heads = 8,
                                .num_kv_heads = 8,
                                .head_dim = 64,
                                .block_size = 16,
                                .inv_sqrt_d = 0.125f,
                                .q_stride = 8 * 64,
                                .cache_stride = 16 * 8 * 64 + 4,
                                .sliding_window = 0};
  absl::Status s = ops::paged_decode_attn_fp8(*f.dev, f.kernels, c, f.stream);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(contains(s, "cache_stride"));
  c.cache_stride += 4;
  c.v_scale = -1.0f;
  s = ops::paged_decode_attn_fp8(*f.dev, f.kernels, c, f.stream);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(contains(s, "v_scale"));
  CHECK(f.mock.launch_count() == 0);
}

TEST_CASE("ops mock: decode launches are dependent in every geometry when set") {
  Fixture f;
  CHECK_FALSE(f.kernels.dependent_launch);  // the mock loads no cubin
  f.kernels.dependent_launch = true;
  ops::PagedDecodeAttnArgs a = f.bf16_args(1, 256);
  a.workspace = f.fake_ptr();
  a.workspace_bytes = ops::paged_decode_workspace_bytes(1, 32, 128);
  // One pass, split then combine, and the one-launch split-merge.
  for (const uint32_t splits : {1u, 3u, 16u}) {
    CAPTURE(splits);
    REQUIRE_OK(f.mock.reset());
    a.num_splits = splits;
    REQUIRE_OK(ops::paged_decode_attn_bf16(*f.dev, f.kernels, a, f.stream));
    const auto launches = f.mock.launches();
    REQUIRE(launches.size() == (splits == 3 ? 2u : 1u));
    for (const auto& l : launches) {
      INFO("recorded: ", l);
      CHECK(l.dependent_launch);
    }
  }
}
