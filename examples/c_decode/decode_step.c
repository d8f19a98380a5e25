/* decode_step: one decode step of an attention layer's KV cache, run through
 * the sparkrt C API alone (sparkrt/sparkrt_c.h, libsparkrt_c.so) as an
 * inference engine runs it for every token:
 *
 *   fill_slots_from_block_table  the cache slots of each sequence's context
 *   reshape_and_cache            the context's keys and values into the caches
 *   fill_slots_from_block_table  the slot of each sequence's new token
 *   reshape_and_cache            the new tokens' keys and values
 *   paged_decode_attn            each new token's query over its sequence
 *
 * Three sequences (1, 37 and 100 tokens after the step), 8 query heads over 2
 * KV heads (GQA), head_dim 64, bf16 caches in blocks of 16 tokens placed in a
 * shuffled pool, so the block table is not the identity.
 *
 * On a backend that computes (cpu, cuda, vulkan) the program checks the slots
 * the device wrote, the caches (bit for bit) and the attention output against
 * a float64 reference. The mock backend computes nothing: the program reads
 * the launches it recorded (sparkrt/extensions/mock.h) and checks that the
 * output still holds its poison. On every backend two deliberately wrong
 * launches must fail with the runtime's exact messages.
 *
 * Build against an installed sparkrt and run:
 *   cc -std=c11 decode_step.c $(pkg-config --cflags --libs sparkrt_c) -lm
 *   SPARKRT_BACKEND=cpu ./a.out
 * The inputs are random; the seed is printed, SPARKRT_EXAMPLE_SEED=<seed>
 * replays it. Exit code 0 when every check passes, 1 otherwise (the reason
 * on stderr).
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sparkrt/extensions/mock.h"
#include "sparkrt/sparkrt_c.h"

enum {
  kSeqs = 3,
  kQHeads = 8,
  kKvHeads = 2,
  kHeadDim = 64,
  kBlockSize = 16,
  kSpareBlocks = 5, /* pool blocks no sequence owns */
  kRow = kKvHeads * kHeadDim,
  /* One token's fused q, k, v row, as a QKV projection writes it. */
  kQkvStride = (kQHeads + 2 * kKvHeads) * kHeadDim,
  kMaxLaunches = 16
};
static const uint32_t kSeqLens[kSeqs] = {1, 37, 100}; /* after the step */

/* ---- random inputs ------------------------------------------------------ */

/* splitmix64: small, and the same stream in every language for a seed. */
static uint64_t rng_state;
static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(next_u64() >> 11) * 0x1p-53);
}

/* ---- bf16 --------------------------------------------------------------- */

/* Round to nearest, ties to even; NaN stays NaN. */
static uint16_t bf16_from_float(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static double bf16_to_double(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint16_t random_bf16(double lo, double hi) {
  return bf16_from_float((float)uniform(lo, hi));
}

/* ---- errors ------------------------------------------------------------- */

static int failures;

static void check_failed(const char* what) {
  fprintf(stderr, "decode_step: check failed: %s\n", what);
  ++failures;
}

/* Reports a failed call (and frees its status); 1 when it failed. */
static int failed(sparkrt_status* st, const char* call) {
  if (st == NULL) return 0;
  fprintf(stderr, "decode_step: %s failed: %s: %s\n", call,
          sparkrt_code_name(sparkrt_status_code(st)), sparkrt_status_message(st));
  sparkrt_status_free(st);
  ++failures;
  return 1;
}
#define CALL(expr)                   \
  do {                               \
    if (failed((expr), #expr)) goto done; \
  } while (0)

/* ---- the mock's launch records ------------------------------------------ */

static int mock_failed(const SparkrtMockExtension* mock, SparkrtError* e, const char* call) {
  const char* msg = "";
  size_t size = 0;
  if (e == NULL) return 0;
  mock->error_message(e, &msg, &size);
  fprintf(stderr, "decode_step: mock %s failed: %.*s\n", call, (int)size, msg);
  mock->error_destroy(e);
  ++failures;
  return 1;
}

/* The recorded launches as "module.entry", printed; -1 on error. */
static int mock_launches(const SparkrtMockExtension* mock, SparkrtDevice* native,
                         char names[kMaxLaunches][96], int print) {
  uint64_t count = 0;
  if (mock_failed(mock, mock->launch_count(native, &count), "launch_count")) return -1;
  if (count > kMaxLaunches) {
    fprintf(stderr, "decode_step: the mock recorded %" PRIu64 " launches, more than the step makes\n",
            count);
    ++failures;
    return -1;
  }
  for (uint64_t i = 0; i < count; ++i) {
    SparkrtMockLaunch l;
    memset(&l, 0, sizeof l);
    l.struct_size = SPARKRT_MOCK_LAUNCH_SIZE;
    if (mock_failed(mock, mock->get_launch(native, i, &l), "get_launch")) return -1;
    snprintf(names[i], sizeof names[i], "%s.%s", l.module, l.entry);
    if (print)
      printf("  %" PRIu64 ". %-45s grid {%u, %u, %u} block {%u, %u, %u} shared %u\n",
             l.sequence, names[i], l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
             l.block[2], l.shared_memory_bytes);
  }
  return (int)count;
}

/* ---- wrong launches ----------------------------------------------------- */

/* A launch that must fail with INVALID_ARGUMENT and exactly `expected`. */
static void expect_refused(sparkrt_kernel* k, const sparkrt_arg* args, uint32_t n,
                           const char* what, const char* expected) {
  sparkrt_launch_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.struct_size = SPARKRT_C_LAUNCH_CONFIG_SIZE;
  cfg.grid[0] = cfg.grid[1] = cfg.grid[2] = 1;
  cfg.block[0] = 64;
  cfg.block[1] = cfg.block[2] = 1;
  sparkrt_status* st = sparkrt_launch(k, &cfg, args, n);
  const int32_t code = sparkrt_status_code(st);
  const char* msg = sparkrt_status_message(st);
  printf("%s: %s: %s\n", what, sparkrt_code_name(code), st ? msg : "(accepted)");
  if (code != SPARKRT_INVALID_ARGUMENT || strcmp(msg, expected) != 0) {
    fprintf(stderr, "decode_step: %s: expected INVALID_ARGUMENT: %s\n", what, expected);
    check_failed("a wrong launch was not refused with the runtime's message");
  }
  sparkrt_status_free(st);
}

/* ---- the step ----------------------------------------------------------- */

int main(void) {
  uint64_t seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
  const char* seed_env = getenv("SPARKRT_EXAMPLE_SEED");
  if (seed_env != NULL && seed_env[0] != '\0') {
    char* end = NULL;
    seed = strtoull(seed_env, &end, 10);
    if (seed_env[0] < '0' || seed_env[0] > '9' || *end != '\0') {
      fprintf(stderr, "decode_step: SPARKRT_EXAMPLE_SEED='%s' is not a number\n", seed_env);
      return 1;
    }
  }
  rng_state = seed;
  printf("seed %" PRIu64 " (replay: SPARKRT_EXAMPLE_SEED=%" PRIu64 ")\n", seed, seed);

  const uint32_t version = sparkrt_c_api_version();
  printf("sparkrt %s, C API %u.%u (built against %d.%d)\n", sparkrt_version_string(),
         version >> 16, version & 0xFFFFu, SPARKRT_C_API_MAJOR, SPARKRT_C_API_MINOR);
  if (version >> 16 != SPARKRT_C_API_MAJOR) {
    fprintf(stderr, "decode_step: the library's C API major differs from this header's\n");
    return 1;
  }

  /* Host data; every pointer is freed at `done`. */
  uint32_t ctx_lens[kSeqs], ctx_first[kSeqs], blocks_of[kSeqs];
  uint32_t ctx_tokens = 0, used_blocks = 0, max_blocks = 0, max_len = 0;
  for (int s = 0; s < kSeqs; ++s) {
    ctx_lens[s] = kSeqLens[s] - 1;
    ctx_first[s] = ctx_tokens;
    ctx_tokens += ctx_lens[s];
    blocks_of[s] = (kSeqLens[s] + kBlockSize - 1) / kBlockSize;
    used_blocks += blocks_of[s];
    if (blocks_of[s] > max_blocks) max_blocks = blocks_of[s];
    if (kSeqLens[s] > max_len) max_len = kSeqLens[s];
  }
  const uint32_t pool_blocks = used_blocks + kSpareBlocks;
  const size_t cache_elems = (size_t)pool_blocks * kBlockSize * kRow;
  const size_t out_elems = (size_t)kSeqs * kQHeads * kHeadDim;

  int32_t* perm = malloc(pool_blocks * sizeof *perm);
  int32_t* table = malloc((size_t)kSeqs * max_blocks * sizeof *table);
  uint16_t* keys[kSeqs] = {NULL};   /* [len][kRow] per sequence, the new token last */
  uint16_t* values[kSeqs] = {NULL};
  uint16_t* ctx_key = malloc(((size_t)ctx_tokens * kRow + 1) * sizeof *ctx_key);
  uint16_t* ctx_value = malloc(((size_t)ctx_tokens * kRow + 1) * sizeof *ctx_value);
  uint16_t* qkv = malloc((size_t)kSeqs * kQkvStride * sizeof *qkv);
  uint16_t* out = malloc(out_elems * sizeof *out);
  uint16_t* k_back = malloc(cache_elems * sizeof *k_back);
  uint16_t* v_back = malloc(cache_elems * sizeof *v_back);
  int64_t* ctx_slots_back = malloc(((size_t)ctx_tokens + 1) * sizeof *ctx_slots_back);
  int64_t step_slots_back[kSeqs];
  unsigned char* slot_written = calloc((size_t)pool_blocks * kBlockSize, 1);
  int ok_alloc = perm && table && ctx_key && ctx_value && qkv && out && k_back && v_back &&
                 ctx_slots_back && slot_written;
  for (int s = 0; s < kSeqs; ++s) {
    keys[s] = malloc((size_t)kSeqLens[s] * kRow * sizeof *keys[s]);
    values[s] = malloc((size_t)kSeqLens[s] * kRow * sizeof *values[s]);
    ok_alloc = ok_alloc && keys[s] && values[s];
  }

  sparkrt_device* dev = NULL;
  if (!ok_alloc) {
    fprintf(stderr, "decode_step: out of host memory\n");
    ++failures;
    goto done;
  }

  /* The pool's blocks in a random order, never the identity. */
  for (uint32_t i = 0; i < pool_blocks; ++i) perm[i] = (int32_t)i;
  for (uint32_t i = pool_blocks - 1; i > 0; --i) {
    const uint32_t j = (uint32_t)(next_u64() % (i + 1));
    const int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int identity = 1;
  for (uint32_t i = 0; i < used_blocks; ++i) identity = identity && perm[i] == (int32_t)i;
  if (identity) {
    perm[0] = 1;
    perm[1] = 0;
  }
  /* Rows padded with -1 past each sequence's blocks, as engines leave them. */
  for (uint32_t i = 0, next = 0; i < (uint32_t)kSeqs * max_blocks; ++i) {
    const uint32_t s = i / max_blocks, b = i % max_blocks;
    table[i] = b < blocks_of[s] ? perm[next++] : -1;
  }
  for (int s = 0; s < kSeqs; ++s) {
    for (size_t i = 0; i < (size_t)kSeqLens[s] * kRow; i += kRow) {
      for (int e = 0; e < kRow; ++e) keys[s][i + e] = random_bf16(-1.0, 1.0);
      for (int e = 0; e < kRow; ++e) values[s][i + e] = random_bf16(-1.0, 1.0);
    }
  }
  for (int s = 0; s < kSeqs; ++s) {
    uint16_t* row = qkv + (size_t)s * kQkvStride;
    for (int e = 0; e < kQHeads * kHeadDim; ++e) row[e] = random_bf16(-2.0, 2.0);
    memcpy(row + kQHeads * kHeadDim, keys[s] + (size_t)ctx_lens[s] * kRow, kRow * 2);
    memcpy(row + kQHeads * kHeadDim + kRow, values[s] + (size_t)ctx_lens[s] * kRow, kRow * 2);
    memcpy(ctx_key + (size_t)ctx_first[s] * kRow, keys[s], (size_t)ctx_lens[s] * kRow * 2);
    memcpy(ctx_value + (size_t)ctx_first[s] * kRow, values[s], (size_t)ctx_lens[s] * kRow * 2);
  }
  printf("decode step: %d sequences of", kSeqs);
  for (int s = 0; s < kSeqs; ++s) printf(" %u", kSeqLens[s]);
  printf(" tokens, %d query heads, %d KV heads, head_dim %d, block_size %d\n", kQHeads, kKvHeads,
         kHeadDim, kBlockSize);
  for (int s = 0; s < kSeqs; ++s) {
    printf("  block table of sequence %d:", s);
    for (uint32_t b = 0; b < max_blocks; ++b) printf(" %d", table[(size_t)s * max_blocks + b]);
    printf("\n");
  }

  /* ---- device --------------------------------------------------------- */
  CALL(sparkrt_device_open(NULL, &dev)); /* SPARKRT_BACKEND, else auto */
  sparkrt_device_properties props;
  memset(&props, 0, sizeof props);
  props.struct_size = SPARKRT_C_DEVICE_PROPERTIES_SIZE;
  CALL(sparkrt_device_properties_get(dev, &props));
  const int mock = strcmp(props.backend, "mock") == 0;
  printf("device: %s %d: %s (%s)\n", props.backend, props.index, props.name, props.plugin_path);

  const size_t cache_bytes = cache_elems * 2;
  SparkrtDevicePtr k_cache, v_cache, d_table, d_lens, d_ctx_key, d_ctx_value, d_ctx_slots, d_qkv,
      d_step_slots, d_out, d_ws = 0;
  CALL(sparkrt_alloc(dev, cache_bytes, &k_cache));
  CALL(sparkrt_alloc(dev, cache_bytes, &v_cache));
  CALL(sparkrt_alloc(dev, (size_t)kSeqs * max_blocks * 4, &d_table));
  CALL(sparkrt_alloc(dev, kSeqs * 4, &d_lens));
  CALL(sparkrt_alloc(dev, ((size_t)ctx_tokens * kRow + 1) * 2, &d_ctx_key));
  CALL(sparkrt_alloc(dev, ((size_t)ctx_tokens * kRow + 1) * 2, &d_ctx_value));
  CALL(sparkrt_alloc(dev, ((size_t)ctx_tokens + 1) * 8, &d_ctx_slots));
  CALL(sparkrt_alloc(dev, (size_t)kSeqs * kQkvStride * 2, &d_qkv));
  CALL(sparkrt_alloc(dev, kSeqs * 8, &d_step_slots));
  CALL(sparkrt_alloc(dev, out_elems * 2, &d_out));
  /* Split-KV's workspace: zeroed once, then good for every step. */
  const uint64_t ws_bytes = sparkrt_paged_decode_workspace_bytes(kSeqs, kQHeads, kHeadDim, 0);
  if (ws_bytes > 0) {
    CALL(sparkrt_alloc(dev, ws_bytes, &d_ws));
    CALL(sparkrt_memset(dev, d_ws, 0, ws_bytes));
  }

  int32_t lens[kSeqs];
  for (int s = 0; s < kSeqs; ++s) lens[s] = (int32_t)kSeqLens[s];
  /* Zeroed caches: a token read from outside its sequence shifts the softmax. */
  CALL(sparkrt_memset(dev, k_cache, 0, cache_bytes));
  CALL(sparkrt_memset(dev, v_cache, 0, cache_bytes));
  /* Poison: 0xFFFF is a bf16 NaN, an all-ones slot is -1 (skip the token). */
  CALL(sparkrt_memset(dev, d_out, 0xFF, out_elems * 2));
  CALL(sparkrt_memset(dev, d_ctx_slots, 0xFF, ((size_t)ctx_tokens + 1) * 8));
  CALL(sparkrt_memset(dev, d_step_slots, 0xFF, kSeqs * 8));
  CALL(sparkrt_copy_h2d(dev, table, d_table, (size_t)kSeqs * max_blocks * 4));
  CALL(sparkrt_copy_h2d(dev, lens, d_lens, sizeof lens));
  CALL(sparkrt_copy_h2d(dev, ctx_key, d_ctx_key, (size_t)ctx_tokens * kRow * 2));
  CALL(sparkrt_copy_h2d(dev, ctx_value, d_ctx_value, (size_t)ctx_tokens * kRow * 2));
  CALL(sparkrt_copy_h2d(dev, qkv, d_qkv, (size_t)kSeqs * kQkvStride * 2));

  /* The context (every token but the last of each sequence). */
  for (int s = 0; s < kSeqs; ++s) {
    const sparkrt_fill_slots_args fill = {
        .struct_size = SPARKRT_C_FILL_SLOTS_ARGS_SIZE,
        .slots = d_ctx_slots + (SparkrtDevicePtr)ctx_first[s] * 8,
        .block_table = d_table + (SparkrtDevicePtr)s * max_blocks * 4,
        .start_pos = 0,
        .count = ctx_lens[s],
        .block_size = kBlockSize};
    CALL(sparkrt_fill_slots_from_block_table(dev, &fill, 0));
  }
  const sparkrt_reshape_and_cache_args ctx_write = {
      .struct_size = SPARKRT_C_RESHAPE_AND_CACHE_ARGS_SIZE,
      .key = d_ctx_key,
      .value = d_ctx_value,
      .k_cache = k_cache,
      .v_cache = v_cache,
      .slot_mapping = d_ctx_slots,
      .num_tokens = ctx_tokens,
      .num_kv_heads = kKvHeads,
      .head_dim = kHeadDim,
      .block_size = kBlockSize,
      .key_stride = kRow,
      .value_stride = kRow};
  CALL(sparkrt_reshape_and_cache(dev, &ctx_write, 0));

  /* The step: each sequence's new token. */
  for (int s = 0; s < kSeqs; ++s) {
    const sparkrt_fill_slots_args fill = {
        .struct_size = SPARKRT_C_FILL_SLOTS_ARGS_SIZE,
        .slots = d_step_slots + (SparkrtDevicePtr)s * 8,
        .block_table = d_table + (SparkrtDevicePtr)s * max_blocks * 4,
        .start_pos = ctx_lens[s],
        .count = 1,
        .block_size = kBlockSize};
    CALL(sparkrt_fill_slots_from_block_table(dev, &fill, 0));
  }
  const sparkrt_reshape_and_cache_args step_write = {
      .struct_size = SPARKRT_C_RESHAPE_AND_CACHE_ARGS_SIZE,
      .key = d_qkv + kQHeads * kHeadDim * 2,
      .value = d_qkv + (kQHeads + kKvHeads) * kHeadDim * 2,
      .k_cache = k_cache,
      .v_cache = v_cache,
      .slot_mapping = d_step_slots,
      .num_tokens = kSeqs,
      .num_kv_heads = kKvHeads,
      .head_dim = kHeadDim,
      .block_size = kBlockSize,
      .key_stride = kQkvStride,
      .value_stride = kQkvStride};
  CALL(sparkrt_reshape_and_cache(dev, &step_write, 0));
  const float inv_sqrt_d = (float)(1.0 / sqrt((double)kHeadDim));
  const sparkrt_paged_decode_args attn = {
      .struct_size = SPARKRT_C_PAGED_DECODE_ARGS_SIZE,
      .cache_format = SPARKRT_CACHE_BF16,
      .q = d_qkv,
      .k_cache = k_cache,
      .v_cache = v_cache,
      .out = d_out,
      .block_tables = d_table,
      .seq_lens = d_lens,
      .max_blocks_per_seq = max_blocks,
      .num_seqs = kSeqs,
      .num_q_heads = kQHeads,
      .num_kv_heads = kKvHeads,
      .head_dim = kHeadDim,
      .block_size = kBlockSize,
      .inv_sqrt_d = inv_sqrt_d,
      .k_scale = 0.0f,
      .v_scale = 0.0f,
      .q_stride = kQkvStride,
      .cache_stride = 0,
      .sliding_window = 0,
      .max_seq_len = max_len,
      .workspace = d_ws,
      .workspace_bytes = ws_bytes,
      .num_splits = 0};
  CALL(sparkrt_paged_decode_attn(dev, &attn, 0));
  CALL(sparkrt_stream_synchronize(dev, 0));

  CALL(sparkrt_copy_d2h(dev, d_out, out, out_elems * 2));
  CALL(sparkrt_copy_d2h(dev, d_ctx_slots, ctx_slots_back, (size_t)ctx_tokens * 8));
  CALL(sparkrt_copy_d2h(dev, d_step_slots, step_slots_back, sizeof step_slots_back));
  CALL(sparkrt_copy_d2h(dev, k_cache, k_back, cache_bytes));
  CALL(sparkrt_copy_d2h(dev, v_cache, v_back, cache_bytes));

  const SparkrtMockExtension* mock_ext = NULL;
  SparkrtDevice* native = NULL;
  int launches_after_step = 0;
  if (mock) {
    /* Recorded, not computed: the launches, in order, and the poison intact. */
    mock_ext = (const SparkrtMockExtension*)sparkrt_device_extension(dev,
                                                                      SPARKRT_MOCK_EXTENSION_NAME);
    native = sparkrt_device_native_handle(dev);
    if (mock_ext == NULL || native == NULL ||
        mock_ext->struct_size < SPARKRT_STRUCT_SIZE(SparkrtMockExtension, get_launch)) {
      check_failed("the mock offers no " SPARKRT_MOCK_EXTENSION_NAME " table with launch records");
      goto done;
    }
    char names[kMaxLaunches][96];
    printf("mock: recorded, not computed; the launches of the step:\n");
    const int n = mock_launches(mock_ext, native, names, 1);
    if (n < 0) goto done;
    launches_after_step = n;
    const char* expected[kMaxLaunches];
    int e = 0;
    for (int s = 0; s < kSeqs; ++s)
      if (ctx_lens[s] > 0) expected[e++] = "kv_cache.fill_slots_from_block_table";
    expected[e++] = "kv_cache.reshape_and_cache";
    for (int s = 0; s < kSeqs; ++s) expected[e++] = "kv_cache.fill_slots_from_block_table";
    expected[e++] = "kv_cache.reshape_and_cache";
    int match = n > e;
    for (int i = 0; match && i < e; ++i) match = strcmp(names[i], expected[i]) == 0;
    /* The op decides on one pass or split-KV; each is a whole launch sequence. */
    static const char* const kDecode[3][2] = {
        {"paged_attention.paged_decode_attn_bf16", NULL},
        {"paged_attention.paged_decode_attn_bf16_split",
         "paged_attention.paged_decode_attn_combine"},
        {"paged_attention.paged_decode_attn_bf16_split_merge", NULL}};
    int tail_ok = 0;
    for (int v = 0; match && !tail_ok && v < 3; ++v) {
      const int len = kDecode[v][1] ? 2 : 1;
      tail_ok = n == e + len && strcmp(names[e], kDecode[v][0]) == 0 &&
                (len == 1 || strcmp(names[e + 1], kDecode[v][1]) == 0);
    }
    if (!match || !tail_ok) {
      fprintf(stderr, "decode_step: expected, in order:");
      for (int i = 0; i < e; ++i) fprintf(stderr, " %s", expected[i]);
      fprintf(stderr, " and then paged_decode_attn_bf16, or _bf16_split + _combine, or "
                      "_bf16_split_merge\n");
      check_failed("the mock did not record the step's launches");
    }
    size_t poisoned = 0;
    for (size_t i = 0; i < out_elems; ++i) poisoned += out[i] == 0xFFFF;
    printf("mock: output still poisoned: %zu of %zu values\n", poisoned, out_elems);
    if (poisoned != out_elems) check_failed("the mock wrote the attention output");
  } else {
    /* The slots the device computed, against the block table. */
    size_t slot_errors = 0;
    for (int s = 0; s < kSeqs; ++s) {
      for (uint32_t pos = 0; pos < kSeqLens[s]; ++pos) {
        const int64_t want = (int64_t)table[(size_t)s * max_blocks + pos / kBlockSize] *
                                 kBlockSize + pos % kBlockSize;
        const int64_t got =
            pos < ctx_lens[s] ? ctx_slots_back[ctx_first[s] + pos] : step_slots_back[s];
        if (got != want && slot_errors++ < 5)
          fprintf(stderr, "decode_step: sequence %d token %u: slot %" PRId64 ", expected %" PRId64
                          "\n", s, pos, got, want);
        if (got == want) slot_written[want] = 1;
      }
    }
    printf("slot mapping: %u slots, %zu wrong\n", ctx_tokens + kSeqs, slot_errors);
    if (slot_errors) check_failed("fill_slots_from_block_table wrote wrong slots");

    /* The caches: each token's rows in its slot bit for bit, zeros elsewhere. */
    size_t cache_errors = 0;
    for (int s = 0; s < kSeqs && slot_errors == 0; ++s) {
      for (uint32_t pos = 0; pos < kSeqLens[s]; ++pos) {
        const size_t slot =
            (size_t)table[(size_t)s * max_blocks + pos / kBlockSize] * kBlockSize +
            pos % kBlockSize;
        cache_errors += memcmp(k_back + slot * kRow, keys[s] + (size_t)pos * kRow, kRow * 2) != 0;
        cache_errors +=
            memcmp(v_back + slot * kRow, values[s] + (size_t)pos * kRow, kRow * 2) != 0;
      }
    }
    for (size_t slot = 0; slot < (size_t)pool_blocks * kBlockSize && slot_errors == 0; ++slot) {
      if (slot_written[slot]) continue;
      for (int e = 0; e < kRow; ++e)
        cache_errors += (k_back[slot * kRow + e] | v_back[slot * kRow + e]) != 0;
    }
    printf("caches: %u token rows, %zu differences\n", ctx_tokens + kSeqs, cache_errors);
    if (cache_errors) check_failed("reshape_and_cache wrote wrong cache contents");

    /* Attention against float64 over the same bf16 inputs. The output is
     * rounded once to bf16 (half an ulp: at most 2^-8 of the value); the
     * absolute term, 2^-8 max |V|, covers the f32 arithmetic (10^-4 max |V|
     * by the contract, docs/kernels.md) and keeps the largest error the cpu
     * backend makes here under a quarter of the bound. */
    double max_v = 0.0;
    for (int s = 0; s < kSeqs; ++s)
      for (size_t i = 0; i < (size_t)kSeqLens[s] * kRow; ++i)
        max_v = fmax(max_v, fabs(bf16_to_double(values[s][i])));
    const double abs_term = 0x1p-8 * max_v;
    double max_err = 0.0, max_ratio = 0.0, err_ref = 0.0;
    size_t bad = 0;
    double* scores = malloc(max_len * sizeof *scores);
    if (scores == NULL) {
      check_failed("out of host memory");
      goto done;
    }
    for (int s = 0; s < kSeqs; ++s) {
      for (int h = 0; h < kQHeads; ++h) {
        const int kvh = h / (kQHeads / kKvHeads);
        const uint16_t* q = qkv + (size_t)s * kQkvStride + (size_t)h * kHeadDim;
        double m = -INFINITY, l = 0.0;
        for (uint32_t t = 0; t < kSeqLens[s]; ++t) {
          const uint16_t* k = keys[s] + (size_t)t * kRow + (size_t)kvh * kHeadDim;
          double dot = 0.0;
          for (int d = 0; d < kHeadDim; ++d) dot += bf16_to_double(q[d]) * bf16_to_double(k[d]);
          scores[t] = dot * inv_sqrt_d;
          m = fmax(m, scores[t]);
        }
        for (uint32_t t = 0; t < kSeqLens[s]; ++t) l += (scores[t] = exp(scores[t] - m));
        for (int d = 0; d < kHeadDim; ++d) {
          double ref = 0.0;
          for (uint32_t t = 0; t < kSeqLens[s]; ++t)
            ref += scores[t] * bf16_to_double(values[s][(size_t)t * kRow + kvh * kHeadDim + d]);
          ref /= l;
          const double got = bf16_to_double(out[((size_t)s * kQHeads + h) * kHeadDim + d]);
          const double err = fabs(got - ref);
          const double bound = 0x1p-8 * fabs(ref) + abs_term;
          if (!(err <= bound) && bad++ < 5)
            fprintf(stderr, "decode_step: out[%d][%d][%d] = %.6g, expected %.6g (bound %.3g)\n",
                    s, h, d, got, ref, bound);
          if (!(err <= max_err)) {
            max_err = err;
            err_ref = ref;
          }
          if (!(err / bound <= max_ratio)) max_ratio = err / bound;
        }
      }
    }
    free(scores);
    printf("attention: max |err| %.3g (at %.4g), bound 2^-8 |ref| + 2^-8 max |V| (%.3g); "
           "largest |err| / bound %.3f\n",
           max_err, err_ref, abs_term, max_ratio);
    if (bad) check_failed("the attention output is off the float64 reference");
  }

  /* Two launches the runtime must refuse before anything reaches the device. */
  sparkrt_kernel* vadd = NULL;
  CALL(sparkrt_kernel_get(dev, "vector_ops", "vector_add_f32", &vadd));
  const sparkrt_arg wrong_type[4] = {sparkrt_arg_ptr(d_out), sparkrt_arg_ptr(d_out),
                                     sparkrt_arg_ptr(d_out), sparkrt_arg_f32(4.0f)};
  expect_refused(vadd, wrong_type, 4, "launch with a float for a .u32",
                 "vector_add_f32: parameter #3 is .u32, given f32 (float, for "
                 "'vector_add_f32_param_3'); pass a uint32_t or int32_t");
  expect_refused(vadd, wrong_type, 3, "launch with an argument missing",
                 "vector_add_f32: 4 parameters declared, 3 given (missing #3 .u32)");
  if (mock) {
    char names[kMaxLaunches][96];
    const int n = mock_launches(mock_ext, native, names, 0);
    if (n >= 0 && n != launches_after_step)
      check_failed("a refused launch reached the mock");
  }

done:
  if (dev != NULL) failed(sparkrt_device_close(dev), "sparkrt_device_close(dev)");
  free(perm);
  free(table);
  for (int s = 0; s < kSeqs; ++s) {
    free(keys[s]);
    free(values[s]);
  }
  free(ctx_key);
  free(ctx_value);
  free(qkv);
  free(out);
  free(k_back);
  free(v_back);
  free(ctx_slots_back);
  free(slot_written);
  if (failures) {
    fprintf(stderr, "decode_step: FAILED (%d problem%s; seed %" PRIu64 ")\n", failures,
            failures == 1 ? "" : "s", seed);
    return 1;
  }
  printf("check: passed\n");
  return 0;
}
