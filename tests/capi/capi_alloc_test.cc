// The C API's launch path allocates nothing: after a warm-up, 1000
// sparkrt_launch calls on the mock and repeated calls of each op make no
// operator new (any form) on the calling thread, nor, outside sanitizer
// builds, a malloc. Its own binary: it replaces the global allocator.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <new>

#include "capi_test_support.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CAPI_COUNT_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define CAPI_COUNT_MALLOC 0
#endif
#endif
#ifndef CAPI_COUNT_MALLOC
#define CAPI_COUNT_MALLOC 1
#endif

#if CAPI_COUNT_MALLOC
extern "C" void* __libc_malloc(size_t size);
#endif

namespace {

// Counted on the thread that sets the flag only: a backend's own threads
// are not the caller's launch path.
thread_local bool t_counting = false;
thread_local uint64_t t_allocations = 0;

void note_allocation() {
  if (t_counting) ++t_allocations;
}

void* allocate(size_t size) {
  note_allocation();
#if CAPI_COUNT_MALLOC
  return __libc_malloc(size ? size : 1);  // not through the counted malloc below
#else
  return std::malloc(size ? size : 1);
#endif
}

void* allocate_aligned(size_t size, std::align_val_t align) {
  note_allocation();
  const size_t a =
      static_cast<size_t>(align) < sizeof(void*) ? sizeof(void*) : static_cast<size_t>(align);
  void* p = nullptr;
  if (posix_memalign(&p, a, size ? size : 1) != 0) return nullptr;
  return p;
}

// Counts the allocations `fn` makes on this thread.
template <typename Fn>
uint64_t allocations_of(Fn&& fn) {
  t_allocations = 0;
  t_counting = true;
  fn();
  t_counting = false;
  return t_allocations;
}

}  // namespace

// Every form, so that each new pairs with a delete here.
void* operator new(size_t size) {
  if (void* p = allocate(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept { return allocate(size); }
void* operator new[](size_t size, const std::nothrow_t&) noexcept { return allocate(size); }
void* operator new(size_t size, std::align_val_t a) {
  if (void* p = allocate_aligned(size, a)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size, std::align_val_t a) { return operator new(size, a); }
void* operator new(size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_aligned(size, a);
}
void* operator new[](size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_aligned(size, a);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

#if CAPI_COUNT_MALLOC
// malloc too (C code and C++ code that bypasses operator new), forwarded to
// glibc's allocator; its free releases what this returns.
extern "C" void* malloc(size_t size) noexcept {
  note_allocation();
  return __libc_malloc(size);
}
#endif

TEST_CASE("capi alloc: the counter sees operator new and malloc") {
  const uint64_t news = allocations_of([] {
    int* volatile p = new int(3);  // volatile: the pair cannot be elided
    delete p;
  });
  CHECK(news == 1);
  const uint64_t none = allocations_of([] {});
  CHECK(none == 0);
#if CAPI_COUNT_MALLOC
  const uint64_t mallocs = allocations_of([] {
    void* volatile p = std::malloc(24);
    std::free(p);
  });
  CHECK(mallocs == 1);
#endif
}

TEST_CASE("capi alloc: 1000 launches on the mock, with and without attributes, allocate nothing") {
  auto dev = capitest::open_c("mock");
  const SparkrtDevicePtr buf = capitest::c_alloc(dev.get(), 4096);
  const SparkrtStream stream = capitest::c_stream(dev.get());
  sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  sparkrt_kernel* axpy = capitest::c_kernel(dev.get(), "vector_ops", "axpy_f32");
  const sparkrt_launch_config cfg = capitest::config({4}, {256}, 0, stream);
  // Both launch paths (vector_add_f32's cached layout, axpy_f32 packed) with
  // a dependent launch and a cluster, and with an old caller's config.
  sparkrt_launch_config attrs = cfg;
  attrs.flags = SPARKRT_LAUNCH_DEPENDENT;
  attrs.cluster[0] = 2;
  attrs.cluster[1] = 1;
  attrs.cluster[2] = 1;
  sparkrt_launch_config old_size = attrs;
  old_size.struct_size = SPARKRT_C_LAUNCH_CONFIG_SIZE_1_0;
  const sparkrt_launch_config* const configs[] = {&cfg, &attrs, &old_size};
  const sparkrt_arg args[] = {sparkrt_arg_ptr(buf), sparkrt_arg_ptr(buf + 1024),
                              sparkrt_arg_ptr(buf + 2048), sparkrt_arg_u32(256)};
  const uint64_t blob[2] = {0x3f800000, 256};
  const sparkrt_arg axpy_args[] = {sparkrt_arg_bytes(blob, 16, 8), sparkrt_arg_ptr(buf),
                                   sparkrt_arg_ptr(buf + 1024)};
  constexpr int kLaunches = 1000;
  const capitest::CMock mock(dev.get());

  int failed = 0;
  const auto run = [&] {
    for (int i = 0; i < kLaunches; ++i) {
      sparkrt_status* s = sparkrt_launch(i % 2 ? add : axpy, configs[i % 3],
                                         i % 2 ? args : axpy_args, i % 2 ? 4 : 3);
      if (s != nullptr) {
        ++failed;
        sparkrt_status_free(s);
      }
    }
  };
  run();  // warm-up: the mock's records reach their size, first-use state settles
  mock.reset();
  const uint64_t allocations = allocations_of(run);
  CHECK(failed == 0);
  CHECK_MESSAGE(allocations == 0, allocations, " allocations in ", kLaunches, " launches");
  CHECK(mock.counters().launches == kLaunches);
  // The attributes were applied, and only where the config carries them.
  // (Read from the table directly: CMock::launches' vectors trip GCC's
  // new/delete pairing check against this file's allocator.)
  const auto* ext = static_cast<const SparkrtMockExtension*>(
      sparkrt_device_extension(dev.get(), SPARKRT_MOCK_EXTENSION_NAME));
  REQUIRE(ext != nullptr);
  SparkrtDevice* const native = sparkrt_device_native_handle(dev.get());
  int with_attributes = 0, mismatched = 0;
  for (int i = 0; i < kLaunches; ++i) {
    SparkrtMockLaunchAttributes a{};
    a.struct_size = SPARKRT_MOCK_LAUNCH_ATTRIBUTES_SIZE;
    REQUIRE(ext->get_launch_attributes(native, static_cast<uint64_t>(i), &a) == nullptr);
    const bool dependent = (a.flags & SPARKRT_LAUNCH_DEPENDENT) != 0;
    const bool clustered = a.cluster[0] == 2 && a.cluster[1] == 1 && a.cluster[2] == 1;
    const bool none = a.cluster[0] == 0 && a.cluster[1] == 0 && a.cluster[2] == 0;
    mismatched += (i % 3 == 1) ? !(dependent && clustered) : (dependent || !none);
    with_attributes += dependent;
  }
  CHECK(mismatched == 0);
  CHECK(with_attributes == (kLaunches + 1) / 3);

  // A failed launch may allocate (its message); it still returns an error.
  const uint64_t refused = allocations_of(
      [&] { CHECK(capitest::CStatus(sparkrt_launch(add, &cfg, args, 3)) != nullptr); });
  CHECK(refused > 0);
}

TEST_CASE("capi alloc: op calls after the first allocate nothing") {
  auto dev = capitest::open_c("mock");
  const SparkrtDevicePtr arena = capitest::c_alloc(dev.get(), uint64_t{32} << 20);
  const SparkrtStream stream = capitest::c_stream(dev.get());
  const auto region = [&](uint32_t i) { return arena + uint64_t{i} * (1u << 20); };
  const capitest::CMock mock(dev.get());

  sparkrt_reshape_and_cache_args reshape{};
  reshape.struct_size = SPARKRT_C_RESHAPE_AND_CACHE_ARGS_SIZE;
  reshape.key = region(0);
  reshape.value = region(1);
  reshape.k_cache = region(2);
  reshape.v_cache = region(3);
  reshape.slot_mapping = region(4);
  reshape.num_tokens = 16;
  reshape.num_kv_heads = 4;
  reshape.head_dim = 128;
  reshape.block_size = 16;
  reshape.key_stride = 512;
  reshape.value_stride = 512;

  sparkrt_paged_decode_args decode{};
  decode.struct_size = SPARKRT_C_PAGED_DECODE_ARGS_SIZE;
  decode.cache_format = SPARKRT_CACHE_BF16;
  decode.q = region(0);
  decode.k_cache = region(1);
  decode.v_cache = region(2);
  decode.out = region(3);
  decode.block_tables = region(4);
  decode.seq_lens = region(5);
  decode.max_blocks_per_seq = 256;
  decode.num_seqs = 1;
  decode.num_q_heads = 8;
  decode.num_kv_heads = 1;
  decode.head_dim = 128;
  decode.block_size = 16;
  decode.inv_sqrt_d = 1.0f / std::sqrt(128.0f);
  decode.q_stride = 8 * 128;
  decode.workspace = region(8);
  decode.workspace_bytes = sparkrt_paged_decode_workspace_bytes(1, 8, 128, 0);
  REQUIRE(decode.workspace_bytes <= uint64_t{24} << 20);
  decode.num_splits = 0;  // long context, one CTA: the op splits

  sparkrt_turbo_cache_layout layout{};
  layout.struct_size = SPARKRT_C_TURBO_CACHE_LAYOUT_SIZE;
  C_REQUIRE_OK(sparkrt_turbo_cache_layout_get(3, 16, 1, 128, &layout));
  sparkrt_paged_decode_turbo_args turbo{};
  turbo.struct_size = SPARKRT_C_PAGED_DECODE_TURBO_ARGS_SIZE;
  turbo.bits = 3;
  turbo.q = region(0);
  turbo.k_cache = region(1);
  turbo.v_cache = region(2);
  turbo.out = region(3);
  turbo.block_tables = region(4);
  turbo.seq_lens = region(5);
  turbo.max_blocks_per_seq = 256;
  turbo.num_seqs = 1;
  turbo.num_q_heads = 8;
  turbo.num_kv_heads = 1;
  turbo.head_dim = 128;
  turbo.block_size = 16;
  turbo.inv_sqrt_d = decode.inv_sqrt_d;
  turbo.q_stride = 8 * 128;
  turbo.v_block_stride_bytes = layout.v_block_stride_bytes;
  turbo.v_data_section_bytes = layout.v_data_section_bytes;
  turbo.workspace = decode.workspace;
  turbo.workspace_bytes = decode.workspace_bytes;

  sparkrt_fill_slots_args fill{};
  fill.struct_size = SPARKRT_C_FILL_SLOTS_ARGS_SIZE;
  fill.slots = region(0);
  fill.block_table = region(1);
  fill.count = 300;
  fill.block_size = 16;

  sparkrt_reshape_and_cache_v_only_args v_only{};
  v_only.struct_size = SPARKRT_C_RESHAPE_AND_CACHE_V_ONLY_ARGS_SIZE;
  v_only.value = region(1);
  v_only.v_cache = region(3);
  v_only.slot_mapping = region(4);
  v_only.num_tokens = 16;
  v_only.num_kv_heads = 4;
  v_only.head_dim = 128;
  v_only.block_size = 16;
  v_only.value_stride = 512;

  sparkrt_reshape_and_cache_fp8_args fp8{};
  fp8.struct_size = SPARKRT_C_RESHAPE_AND_CACHE_FP8_ARGS_SIZE;
  fp8.key = region(0);
  fp8.value = region(1);
  fp8.k_cache = region(2);
  fp8.v_cache = region(3);
  fp8.slot_mapping = region(4);
  fp8.num_tokens = 16;
  fp8.num_kv_heads = 4;
  fp8.head_dim = 128;
  fp8.block_size = 16;
  fp8.k_scale = 0.5f;
  fp8.v_scale = 0.25f;
  fp8.key_stride = 512;
  fp8.value_stride = 512;
  fp8.cache_stride = 16 * 512;

  sparkrt_fused_k_norm_rope_args fused{};
  fused.struct_size = SPARKRT_C_FUSED_K_NORM_ROPE_ARGS_SIZE;
  fused.variant = SPARKRT_FUSED_K_BF16_MROPE;
  fused.k_in = region(0);
  fused.k_norm_weight = region(1);
  fused.pos_t = region(2);
  fused.pos_h = region(3);
  fused.pos_w = region(4);
  fused.k_cache = region(5);
  fused.slot_mapping = region(6);
  fused.num_tokens = 16;
  fused.num_kv_heads = 4;
  fused.head_dim = 128;
  fused.rotary_dim = 128;
  fused.block_size = 16;
  fused.rms_eps = 1e-6f;
  fused.theta = 10000.0f;

  C_REQUIRE_OK(sparkrt_turbo_cache_layout_get(2, 16, 4, 128, &layout));
  sparkrt_reshape_and_cache_turbo_args turbo_write{};
  turbo_write.struct_size = SPARKRT_C_RESHAPE_AND_CACHE_TURBO_ARGS_SIZE;
  turbo_write.bits = 2;
  turbo_write.key = region(0);
  turbo_write.value = region(1);
  turbo_write.k_cache = region(2);
  turbo_write.v_cache = region(3);
  turbo_write.slot_mapping = region(4);
  turbo_write.num_tokens = 16;
  turbo_write.num_kv_heads = 4;
  turbo_write.head_dim = 128;
  turbo_write.block_size = 16;
  turbo_write.key_stride = 512;
  turbo_write.value_stride = 512;
  turbo_write.k_block_stride_bytes = layout.k_block_stride_bytes;
  turbo_write.v_block_stride_bytes = layout.v_block_stride_bytes;
  turbo_write.v_data_section_bytes = layout.v_data_section_bytes;

  sparkrt_hadamard_args hadamard{};
  hadamard.struct_size = SPARKRT_C_HADAMARD_ARGS_SIZE;
  hadamard.in = region(0);
  hadamard.out = region(0);
  hadamard.num_tokens = 16;
  hadamard.num_heads = 4;
  hadamard.head_dim = 128;
  hadamard.in_stride = 512;
  hadamard.out_stride = 512;

  struct Op {
    const char* name;
    std::function<sparkrt_status*()> call;
  };
  sparkrt_device* d = dev.get();
  const Op ops[] = {
      {"fill_slots_from_block_table",
       [&] { return sparkrt_fill_slots_from_block_table(d, &fill, stream); }},
      {"reshape_and_cache", [&] { return sparkrt_reshape_and_cache(d, &reshape, stream); }},
      {"reshape_and_cache_flash_v_only",
       [&] { return sparkrt_reshape_and_cache_flash_v_only(d, &v_only, stream); }},
      {"reshape_and_cache_fp8", [&] { return sparkrt_reshape_and_cache_fp8(d, &fp8, stream); }},
      {"fused_k_norm_rope_cache_write",
       [&] { return sparkrt_fused_k_norm_rope_cache_write(d, &fused, stream); }},
      {"paged_decode_attn", [&] { return sparkrt_paged_decode_attn(d, &decode, stream); }},
      {"reshape_and_cache_turbo",
       [&] { return sparkrt_reshape_and_cache_turbo(d, &turbo_write, stream); }},
      {"hadamard_transform_bf16",
       [&] { return sparkrt_hadamard_transform_bf16(d, &hadamard, stream); }},
      {"paged_decode_attn_turbo",
       [&] { return sparkrt_paged_decode_attn_turbo(d, &turbo, stream); }},
  };
  for (const Op& op : ops) {
    INFO(std::string(op.name));
    C_REQUIRE_OK(op.call());  // resolves the op family's kernels
    mock.reset();
    int failed = 0;
    const uint64_t allocations = allocations_of([&] {
      for (int i = 0; i < 100; ++i) {
        if (sparkrt_status* s = op.call()) {
          ++failed;
          sparkrt_status_free(s);
        }
      }
    });
    CHECK(failed == 0);
    CHECK_MESSAGE(allocations == 0, allocations, " allocations in 100 calls");
    CHECK(mock.counters().launches >= 100);
  }
}
