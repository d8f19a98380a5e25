// Contract tests of the turbo decode ops on the recording mock (132
// multiprocessors, like an H200): the lookups, the one-pass launch with the
// heads per CTA from the GQA group, when the op splits and how (the split
// entry over grid.z, then the bf16 decode's combine, with the workspace laid
// out as paged_attention.h says), and the shapes refused before any launch.
#include <string>
#include <utility>
#include <vector>

#include "ops_mock_support.h"
#include "sparkrt/ops/turbo_kv_cache.h"
#include "sparkrt/ops/turbo_paged_attention.h"

using namespace opstest;
using sparkrt::Dim3;
using sparkrt::testing::MockArg;
namespace ops = sparkrt::ops;

namespace {

struct Fixture : MockDevice {
  ops::TurboPagedAttentionKernels kernels = resolve<ops::TurboPagedAttentionKernels>(*dev);

  ops::PagedDecodeAttnTurboArgs args(uint32_t bits, uint32_t num_seqs, uint32_t max_blocks) {
    auto lay = ops::turbo_cache_layout(bits, 16, 8, 128);
    REQUIRE_OK(lay.status());
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
            .q_stride = 32 * 128,
            .v_block_stride_bytes = lay->v_block_stride_bytes,
            .v_data_section_bytes = lay->v_data_section_bytes,
            .sliding_window = u32(0, 1) * 1000};
  }
};

using DecodeOp = absl::Status (*)(sparkrt::Device&, const ops::TurboPagedAttentionKernels&,
                                  const ops::PagedDecodeAttnTurboArgs&, sparkrt::Stream);
struct Variant {
  uint32_t bits;
  DecodeOp op;
  std::string entry;
};
const Variant kVariants[] = {
    {2, ops::paged_decode_attn_bf16k_turbo2v, "paged_decode_attn_bf16k_turbo2v"},
    {3, ops::paged_decode_attn_bf16k_turbo3v, "paged_decode_attn_bf16k_turbo3v"},
    {4, ops::paged_decode_attn_bf16k_turbo4v, "paged_decode_attn_bf16k_turbo4v"},
};

std::vector<MockArg> decode_args(const ops::PagedDecodeAttnTurboArgs& a,
                                 std::vector<MockArg> outputs) {
  std::vector<MockArg> v = {MockArg::of(a.q), MockArg::of(a.k_cache), MockArg::of(a.v_cache)};
  v.insert(v.end(), outputs.begin(), outputs.end());
  for (MockArg m : {MockArg::of(a.block_tables), MockArg::of(a.seq_lens),
                    MockArg::of(a.max_blocks_per_seq), MockArg::of(a.num_q_heads),
                    MockArg::of(a.num_kv_heads), MockArg::of(a.head_dim),
                    MockArg::of(a.block_size), MockArg::of(a.inv_sqrt_d), MockArg::of(a.q_stride),
                    MockArg::of(a.v_block_stride_bytes), MockArg::of(a.v_data_section_bytes),
                    MockArg::of(a.sliding_window)})
    v.push_back(m);
  return v;
}

}  // namespace

TEST_CASE("ops mock: TurboPagedAttentionKernels::resolve looks each entry up once, in order") {
  Fixture f;
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"turbo_paged_attention", "paged_decode_attn_bf16k_turbo2v"},
      {"turbo_paged_attention", "paged_decode_attn_bf16k_turbo3v"},
      {"turbo_paged_attention", "paged_decode_attn_bf16k_turbo4v"},
      {"turbo_paged_attention", "paged_decode_attn_bf16k_turbo2v_split"},
      {"turbo_paged_attention", "paged_decode_attn_bf16k_turbo3v_split"},
      {"turbo_paged_attention", "paged_decode_attn_bf16k_turbo4v_split"},
      {"paged_attention", "paged_decode_attn_combine"},
  };
  CHECK(f.mock.lookups() == expected);
}

TEST_CASE("ops mock: turbo decode, one pass: heads per CTA from the GQA group, no split") {
  for (const Variant& v : kVariants) {
    CAPTURE(v.bits);
    Fixture f;
    // Batch 64 fills the device: 64 sequences x 8 head groups = 512 CTAs.
    ops::PagedDecodeAttnTurboArgs a = f.args(v.bits, 64, 256);
    auto ws = ops::DecodeWorkspace::create(*f.dev, 64, 32, 128);
    REQUIRE_OK(ws.status());
    a.workspace = ws->ptr();
    a.workspace_bytes = ws->bytes();
    REQUIRE_OK(v.op(*f.dev, f.kernels, a, f.stream));
    check_launch(f.only_launch(), "turbo_paged_attention", v.entry.c_str(), Dim3{8, 64, 1},
                 Dim3{256}, f.stream, decode_args(a, {MockArg::of(a.out)}));
    // GQA 6 (24 query heads over 4 KV heads): hpc 6.
    a.num_q_heads = 24;
    a.num_kv_heads = 4;
    a.q_stride = 24 * 128;
    auto lay = ops::turbo_cache_layout(v.bits, 16, 4, 128);
    REQUIRE_OK(lay.status());
    a.v_block_stride_bytes = lay->v_block_stride_bytes;
    a.v_data_section_bytes = lay->v_data_section_bytes;
    auto plan = ops::plan_paged_decode_turbo(*f.dev, v.bits, a);
    REQUIRE_OK(plan.status());
    CHECK(plan->heads_per_cta == 6);
    // MHA: one head per CTA.
    a.num_kv_heads = 24;
    lay = ops::turbo_cache_layout(v.bits, 16, 24, 128);
    REQUIRE_OK(lay.status());
    a.v_block_stride_bytes = lay->v_block_stride_bytes;
    a.v_data_section_bytes = lay->v_data_section_bytes;
    plan = ops::plan_paged_decode_turbo(*f.dev, v.bits, a);
    REQUIRE_OK(plan.status());
    CHECK(plan->heads_per_cta == 1);
  }
}

TEST_CASE("ops mock: turbo decode splits a long context of few CTAs, then combines") {
  for (const Variant& v : kVariants) {
    CAPTURE(v.bits);
    Fixture f;
    ops::PagedDecodeAttnTurboArgs a = f.args(v.bits, 1, 2048);  // 32K tokens, 8 CTAs
    a.sliding_window = 0;
    auto ws = ops::DecodeWorkspace::create(*f.dev, 1, 32, 128);
    REQUIRE_OK(ws.status());
    a.workspace = ws->ptr();
    a.workspace_bytes = ws->bytes();
    auto plan = ops::plan_paged_decode_turbo(*f.dev, v.bits, a);
    REQUIRE_OK(plan.status());
    // 2 * 132 SMs / 8 CTAs = 33 splits, within the 256 tokens a split needs at least.
    CHECK(plan->num_splits == 33);
    REQUIRE_OK(v.op(*f.dev, f.kernels, a, f.stream));
    const auto launches = f.mock.launches();
    REQUIRE(launches.size() == 2);
    const ops::DecodePartials parts =
        ops::paged_decode_partials(a.workspace, a.workspace_bytes, 1, 32, 128, 33);
    std::vector<MockArg> split = decode_args(a, {MockArg::of(parts.acc), MockArg::of(parts.ml)});
    split.push_back(MockArg::of(uint32_t{33}));
    check_launch(launches[0], "turbo_paged_attention", (v.entry + "_split").c_str(),
                 Dim3{8, 1, 33}, Dim3{256}, f.stream, split);
    check_launch(launches[1], "paged_attention", "paged_decode_attn_combine", Dim3{32, 1},
                 Dim3{256}, f.stream,
                 {MockArg::of(parts.acc), MockArg::of(parts.ml), MockArg::of(a.out),
                  MockArg::of(a.num_q_heads), MockArg::of(a.head_dim),
                  MockArg::of(uint32_t{33})});
    // No workspace: never split; num_splits 1: never; 5: exactly 5.
    ops::PagedDecodeAttnTurboArgs none = a;
    none.workspace = {};
    none.workspace_bytes = 0;
    plan = ops::plan_paged_decode_turbo(*f.dev, v.bits, none);
    REQUIRE_OK(plan.status());
    CHECK(plan->num_splits == 1);
    ops::PagedDecodeAttnTurboArgs forced = a;
    forced.num_splits = 1;
    CHECK(ops::plan_paged_decode_turbo(*f.dev, v.bits, forced)->num_splits == 1);
    forced.num_splits = 5;
    CHECK(ops::plan_paged_decode_turbo(*f.dev, v.bits, forced)->num_splits == 5);
    forced.num_splits = 65;
    const auto too_many = ops::plan_paged_decode_turbo(*f.dev, v.bits, forced);
    CHECK(too_many.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(too_many.status(), "workspace"));
  }
}

TEST_CASE("ops mock: turbo decode refuses what the kernels cannot run, launching nothing") {
  Fixture f;
  const ops::PagedDecodeAttnTurboArgs a = f.args(4, 4, 64);
  struct Bad {
    const char* what;
    void (*edit)(ops::PagedDecodeAttnTurboArgs&);
  };
  const Bad bad[] = {
      {"head_dim", [](ops::PagedDecodeAttnTurboArgs& b) { b.head_dim = 96; b.q_stride = 32 * 96; }},
      {"num_q_heads", [](ops::PagedDecodeAttnTurboArgs& b) { b.num_q_heads = 30; }},
      {"q_stride", [](ops::PagedDecodeAttnTurboArgs& b) { b.q_stride = 100; }},
      {"16-byte aligned", [](ops::PagedDecodeAttnTurboArgs& b) { b.k_cache = b.k_cache + 8; }},
      {"v_block_stride_bytes", [](ops::PagedDecodeAttnTurboArgs& b) { b.v_block_stride_bytes -= 1; }},
      {"v_data_section_bytes", [](ops::PagedDecodeAttnTurboArgs& b) { b.v_data_section_bytes = 7; }},
      {"multiples of 4", [](ops::PagedDecodeAttnTurboArgs& b) { b.v_cache = b.v_cache + 2; }},
      {"multiples of 4", [](ops::PagedDecodeAttnTurboArgs& b) { b.v_block_stride_bytes += 2; }},
      {"max_blocks_per_seq", [](ops::PagedDecodeAttnTurboArgs& b) { b.max_blocks_per_seq = 0; }},
      {"workspace", [](ops::PagedDecodeAttnTurboArgs& b) { b.num_splits = 4; }},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.what);
    ops::PagedDecodeAttnTurboArgs x = a;
    b.edit(x);
    const absl::Status s = ops::paged_decode_attn_bf16k_turbo4v(*f.dev, f.kernels, x, f.stream);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(s, b.what));
  }
  ops::PagedDecodeAttnTurboArgs empty = a;
  empty.num_seqs = 0;
  REQUIRE_OK(ops::paged_decode_attn_bf16k_turbo4v(*f.dev, f.kernels, empty, f.stream));
  CHECK(f.mock.launch_count() == 0);
  CHECK(ops::plan_paged_decode_turbo(*f.dev, 5, a).status().code() ==
        absl::StatusCode::kInvalidArgument);
}
