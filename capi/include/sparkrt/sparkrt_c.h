/* sparkrt C API: the runtime for any language that can call C (C, Python's
 * ctypes, Rust's extern "C", ...). Library: libsparkrt_c.so; header: C99.
 *
 *   sparkrt_device* dev = NULL;
 *   sparkrt_status* st = sparkrt_device_open(NULL, &dev);   // SPARKRT_BACKEND, else auto
 *   if (st) { fprintf(stderr, "%s\n", sparkrt_status_message(st)); sparkrt_status_free(st); }
 *   sparkrt_kernel* k = NULL;
 *   st = sparkrt_kernel_get(dev, "vector_ops", "vector_add_f32", &k);
 *   sparkrt_launch_config cfg = {SPARKRT_C_LAUNCH_CONFIG_SIZE, {blocks, 1, 1}, {256, 1, 1},
 *                                0, 0, 0, {0, 0, 0}};
 *   sparkrt_arg args[] = {sparkrt_arg_ptr(a), sparkrt_arg_ptr(b), sparkrt_arg_ptr(c),
 *                         sparkrt_arg_u32(n)};
 *   st = sparkrt_launch(k, &cfg, args, 4);
 *   ...
 *   sparkrt_device_close(dev);
 *
 * It is the C++ API (sparkrt/device.h, kernel_launch.h, communicator.h and
 * the op wrappers in sparkrt/ops/) behind plain functions: the same checks,
 * the same behaviour, the same error messages.
 *
 * Errors. Every fallible call returns a sparkrt_status*: NULL on success,
 * otherwise an error the caller owns and frees with sparkrt_status_free().
 * Its code is an absl::StatusCode value (SPARKRT_OK, SPARKRT_INVALID_ARGUMENT,
 * ... in sparkrt/plugin_api.h) and its message says what failed, where, and
 * what to do. A failed call changes nothing the caller can observe except
 * where it says otherwise, and leaves its out parameters untouched. No C++
 * exception crosses this API; NULL where a handle or an out pointer is
 * required is INVALID_ARGUMENT.
 *
 * Ownership and lifetime.
 *  - sparkrt_device_open gives a device the caller closes with
 *    sparkrt_device_close. Kernels, streams, events, graphs and device memory
 *    obtained from a device are valid until it is closed; close frees them.
 *  - Kernel handles belong to their device: never freed by the caller.
 *  - Strings returned by the API (names, paths, messages) belong to the
 *    object they came from and live as long as it does.
 *  - Communicators are destroyed with sparkrt_comm_destroy before their
 *    device is closed.
 *
 * Threads. Device, memory, stream, event, kernel, launch and op calls may be
 * made from several threads at once, as in C++; ordering between threads is
 * the caller's business. Not concurrently with sparkrt_device_close of the
 * same device. A communicator is used by one thread at a time.
 *
 * Launch path. sparkrt_launch and the op calls allocate nothing unless they
 * fail; an op's kernels are resolved on the device's first call of that op
 * family (that call may allocate) and cached.
 *
 * Versioning (as sparkrt/plugin_api.h does for plugins):
 *  - SPARKRT_C_API_MAJOR rises when a function or field is removed, retyped
 *    or reordered, or an existing call changes meaning; a caller built for
 *    another major must not use the library (sparkrt_c_api_version()).
 *  - SPARKRT_C_API_MINOR rises when a function is added or a field is
 *    appended to a struct. New fields only ever go at the end.
 *  - Every struct the caller passes begins with `struct_size`, set to the
 *    SPARKRT_C_<NAME>_SIZE macro of the header the caller was built with. The
 *    library takes a smaller struct_size (an older caller) and treats the
 *    fields it lacks as zero; a struct_size smaller than the 1.0 fields is
 *    INVALID_ARGUMENT. Structs the library fills (properties, kernel and
 *    parameter info, layouts) are filled up to the caller's struct_size,
 *    which must cover at least their first field; the bytes after it are
 *    not touched.
 *
 * Scalar types, error codes, argument kinds and collective data types are
 * those of the plugin ABI (sparkrt/plugin_api.h,
 * sparkrt/extensions/collectives.h): SparkrtDevicePtr (a 64-bit device
 * address), SparkrtStream (0: the device's default stream), SparkrtEvent,
 * SparkrtGraph, SparkrtArgKind, SparkrtDataType, SparkrtReduceOp.
 */
#ifndef SPARKRT_SPARKRT_C_H_
#define SPARKRT_SPARKRT_C_H_

#include <stddef.h>
#include <stdint.h>

#include "sparkrt/extensions/collectives.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/plugin_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPARKRT_C_API_MAJOR 1
#define SPARKRT_C_API_MINOR 1

#if defined(__GNUC__)
#define SPARKRT_C_EXPORT __attribute__((visibility("default")))
#else
#define SPARKRT_C_EXPORT
#endif

typedef struct sparkrt_status sparkrt_status; /* an error; NULL is success */
typedef struct sparkrt_device sparkrt_device; /* one opened device */
typedef struct sparkrt_kernel sparkrt_kernel; /* a resolved kernel, owned by its device */
typedef struct sparkrt_comm sparkrt_comm;     /* one rank of a communicator */

/* ---- version and errors ------------------------------------------------- */

/* (SPARKRT_C_API_MAJOR << 16) | SPARKRT_C_API_MINOR of the library. */
SPARKRT_C_EXPORT uint32_t sparkrt_c_api_version(void);
/* The library's release, e.g. "0.1.0". */
SPARKRT_C_EXPORT const char* sparkrt_version_string(void);

/* The absl::StatusCode of `status`; SPARKRT_OK (0) for NULL. */
SPARKRT_C_EXPORT int32_t sparkrt_status_code(const sparkrt_status* status);
/* NUL-terminated, valid until sparkrt_status_free; "" for NULL. */
SPARKRT_C_EXPORT const char* sparkrt_status_message(const sparkrt_status* status);
/* NULL is a no-op. */
SPARKRT_C_EXPORT void sparkrt_status_free(sparkrt_status* status);
/* "INVALID_ARGUMENT", ...: the code's name; "UNKNOWN" outside the codes. */
SPARKRT_C_EXPORT const char* sparkrt_code_name(int32_t code);

/* ---- devices ------------------------------------------------------------ */

typedef struct sparkrt_open_options {
  size_t struct_size; /* SPARKRT_C_OPEN_OPTIONS_SIZE */
  /* "cuda", "vulkan", "cpu", "mock", a path to a plugin file, or "auto".
   * NULL or "": SPARKRT_BACKEND, else "auto". Auto never picks the mock. */
  const char* backend;
  /* Device index; -1: SPARKRT_DEVICE, else 0. */
  int32_t device_index;
} sparkrt_open_options;
#define SPARKRT_C_OPEN_OPTIONS_SIZE SPARKRT_STRUCT_SIZE(sparkrt_open_options, device_index)

/* options NULL: the environment's backend and device, as backend = NULL and
 * device_index = -1. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_device_open(const sparkrt_open_options* options,
                                                     sparkrt_device** device);
/* Closes the device (its modules, memory, streams, events and graphs) and
 * frees the handle, which is invalid afterwards even when an error is
 * returned (the first failure of the orderly shutdown). NULL is a no-op. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_device_close(sparkrt_device* device);

typedef struct sparkrt_device_properties {
  size_t struct_size; /* in: SPARKRT_C_DEVICE_PROPERTIES_SIZE */
  /* Strings live as long as the device. */
  const char* backend;        /* "cuda", "cpu", ...: the plugin's name */
  const char* plugin_path;    /* the plugin file loaded */
  const char* plugin_version;
  const char* name;           /* the device's name */
  const char* architecture;   /* preferred image suffix, e.g. "sm_90"; may be "" */
  const char* driver;         /* the API and driver behind it; may be "" */
  int32_t index;
  uint32_t multiprocessor_count;
  uint64_t total_memory;
  uint32_t warp_size;
  uint32_t max_threads_per_block;
  uint32_t max_block_dim[3];
  uint32_t max_grid_dim[3];
  uint32_t max_shared_memory_per_block;
  uint32_t max_shared_memory_per_block_optin;
  uint32_t compute_capability_major;
  uint32_t compute_capability_minor;
  /* 1 or 0: the module images the device takes; whether it emulates a GPU
   * API in software (lavapipe). */
  uint8_t accepts_ptx;
  uint8_t accepts_cubin;
  uint8_t accepts_spirv;
  uint8_t accepts_signatures;
  uint8_t emulated;
  /* 1 when the backend offers graphs (sparkrt_graph_*) and collectives
   * (sparkrt_comm_*). */
  uint8_t has_graphs;
  uint8_t has_collectives;
  /* 1 or 0 (C API 1.1): whether a dependent launch can overlap the previous
   * kernel (elsewhere it runs as a plain launch) and whether launches take a
   * thread-block cluster; the blocks a cluster may have, 0 without. */
  uint8_t supports_dependent_launch;
  uint8_t supports_clusters;
  uint32_t max_cluster_size;
} sparkrt_device_properties;
#define SPARKRT_C_DEVICE_PROPERTIES_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_device_properties, max_cluster_size)
/* What a caller built against C API 1.0 passes: without the launch attributes. */
#define SPARKRT_C_DEVICE_PROPERTIES_SIZE_1_0 \
  SPARKRT_STRUCT_SIZE(sparkrt_device_properties, has_collectives)

SPARKRT_C_EXPORT sparkrt_status* sparkrt_device_properties_get(const sparkrt_device* device,
                                                               sparkrt_device_properties* out);

/* The plugin's named extension table (e.g. SPARKRT_MOCK_EXTENSION_NAME from
 * sparkrt/extensions/mock.h), or NULL; and the plugin's device, which those
 * tables take. Both live as long as the device. */
SPARKRT_C_EXPORT const void* sparkrt_device_extension(const sparkrt_device* device,
                                                      const char* name);
SPARKRT_C_EXPORT SparkrtDevice* sparkrt_device_native_handle(const sparkrt_device* device);

/* ---- memory ------------------------------------------------------------- */

/* Device memory, at least 256-byte aligned; bytes > 0. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_alloc(sparkrt_device* device, size_t bytes,
                                               SparkrtDevicePtr* out);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_free(sparkrt_device* device, SparkrtDevicePtr ptr);
/* Host memory suited to asynchronous copies (page-locked where possible). */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_alloc_host(sparkrt_device* device, size_t bytes,
                                                    void** out);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_free_host(sparkrt_device* device, void* ptr);

SPARKRT_C_EXPORT sparkrt_status* sparkrt_memset(sparkrt_device* device, SparkrtDevicePtr dst,
                                                uint8_t value, size_t bytes);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_memset_async(sparkrt_device* device,
                                                      SparkrtDevicePtr dst, uint8_t value,
                                                      size_t bytes, SparkrtStream stream);
/* Blocking copies return when the data has arrived. The _async forms are
 * ordered on `stream`; host memory must stay valid until the stream reaches
 * them. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_copy_h2d(sparkrt_device* device, const void* src,
                                                  SparkrtDevicePtr dst, size_t bytes);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_copy_d2h(sparkrt_device* device, SparkrtDevicePtr src,
                                                  void* dst, size_t bytes);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_copy_d2d(sparkrt_device* device, SparkrtDevicePtr src,
                                                  SparkrtDevicePtr dst, size_t bytes);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_copy_h2d_async(sparkrt_device* device, const void* src,
                                                        SparkrtDevicePtr dst, size_t bytes,
                                                        SparkrtStream stream);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_copy_d2h_async(sparkrt_device* device,
                                                        SparkrtDevicePtr src, void* dst,
                                                        size_t bytes, SparkrtStream stream);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_copy_d2d_async(sparkrt_device* device,
                                                        SparkrtDevicePtr src,
                                                        SparkrtDevicePtr dst, size_t bytes,
                                                        SparkrtStream stream);

/* ---- streams and events ------------------------------------------------- */

SPARKRT_C_EXPORT sparkrt_status* sparkrt_stream_create(sparkrt_device* device,
                                                       SparkrtStream* out);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_stream_destroy(sparkrt_device* device,
                                                        SparkrtStream stream);
/* Waits for all work queued on `stream` (0: the default stream). */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_stream_synchronize(sparkrt_device* device,
                                                            SparkrtStream stream);

SPARKRT_C_EXPORT sparkrt_status* sparkrt_event_create(sparkrt_device* device, SparkrtEvent* out);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_event_destroy(sparkrt_device* device, SparkrtEvent event);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_event_record(sparkrt_device* device, SparkrtEvent event,
                                                      SparkrtStream stream);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_event_synchronize(sparkrt_device* device,
                                                           SparkrtEvent event);
/* Work queued on `stream` after this call waits for `event`. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_stream_wait_event(sparkrt_device* device,
                                                           SparkrtStream stream,
                                                           SparkrtEvent event);
/* Milliseconds between two recorded events. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_event_elapsed_ms(sparkrt_device* device,
                                                          SparkrtEvent start, SparkrtEvent end,
                                                          float* out);

/* ---- kernels ------------------------------------------------------------ */

/* Finds `module` (SPARKRT_KERNEL_PATH, then the installed kernels, then the
 * ones built into the library; docs/kernels.md), loads it once on this device
 * and resolves `entry`. Later calls for the same pair return the same
 * handle. NOT_FOUND names every place searched. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_kernel_get(sparkrt_device* device, const char* module,
                                                    const char* entry, sparkrt_kernel** out);

typedef struct sparkrt_kernel_info {
  size_t struct_size; /* in: SPARKRT_C_KERNEL_INFO_SIZE */
  const char* module;
  const char* entry;
  /* The entry's PTX declaration, as a signature file spells it:
   * ".visible .entry name(\n\t.param .u64 a, ...\n)\n{\n}\n". */
  const char* declaration;
  uint32_t num_params;
  uint32_t params_size; /* bytes of the packed parameter buffer */
  uint32_t reqntid[3];  /* .reqntid; 0 0 0 when absent */
  uint32_t maxntid[3];  /* .maxntid; 0 0 0 when absent */
  /* Why the entry cannot be launched through sparkrt; "" when it can. */
  const char* unsupported;
} sparkrt_kernel_info;
#define SPARKRT_C_KERNEL_INFO_SIZE SPARKRT_STRUCT_SIZE(sparkrt_kernel_info, unsupported)

SPARKRT_C_EXPORT sparkrt_status* sparkrt_kernel_info_get(const sparkrt_kernel* kernel,
                                                         sparkrt_kernel_info* out);

/* The PTX type of a parameter. BYTES is an array (`.align A .b8 name[N]`: how
 * CUDA passes a struct). */
typedef enum sparkrt_param_type {
  SPARKRT_PARAM_U8 = 1, SPARKRT_PARAM_S8, SPARKRT_PARAM_U16, SPARKRT_PARAM_S16,
  SPARKRT_PARAM_U32, SPARKRT_PARAM_S32, SPARKRT_PARAM_U64, SPARKRT_PARAM_S64,
  SPARKRT_PARAM_B8, SPARKRT_PARAM_B16, SPARKRT_PARAM_B32, SPARKRT_PARAM_B64,
  SPARKRT_PARAM_F16, SPARKRT_PARAM_F32, SPARKRT_PARAM_F64, SPARKRT_PARAM_BYTES
} sparkrt_param_type;

typedef struct sparkrt_param_info {
  size_t struct_size; /* in: SPARKRT_C_PARAM_INFO_SIZE */
  const char* name;
  const char* type_name; /* as PTX spells it: ".u64", ".b8[16]" */
  int32_t type;          /* sparkrt_param_type */
  uint32_t size;         /* bytes */
  uint32_t align;        /* bytes */
  uint32_t offset;       /* in the packed parameter buffer */
} sparkrt_param_info;
#define SPARKRT_C_PARAM_INFO_SIZE SPARKRT_STRUCT_SIZE(sparkrt_param_info, offset)

/* Parameter `index` (< num_params) of the kernel's signature. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_kernel_param(const sparkrt_kernel* kernel,
                                                      uint32_t index, sparkrt_param_info* out);

/* ---- launches ----------------------------------------------------------- */

/* One kernel argument. `kind` is a SparkrtArgKind and says which member of
 * `value` holds it: PTR .ptr, U32 .u32, I32 .i32, U64 .u64, I64 .i64, F32
 * .f32, F64 .f64; BYTES (a struct) points .bytes at `size` bytes aligned to
 * `align` (a power of two up to 128: the struct's alignment, which decides
 * its offset). The kinds a declared type takes are KernelLaunch's
 * (sparkrt/kernel_launch.h): .f32/.f64 only F32/F64, .u32/.s32 U32 or I32,
 * .u64/.s64 U64, I64 or PTR, .b32/.b64 anything of their width, arrays and
 * 1- or 2-byte types BYTES of their size. */
typedef struct sparkrt_arg {
  int32_t kind;   /* SparkrtArgKind */
  uint32_t size;  /* BYTES only */
  uint32_t align; /* BYTES only */
  uint32_t reserved;
  union {
    SparkrtDevicePtr ptr;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    const void* bytes;
  } value;
} sparkrt_arg;

static inline sparkrt_arg sparkrt_arg_ptr(SparkrtDevicePtr v) {
  sparkrt_arg a = {SPARKRT_ARG_PTR, 8, 8, 0, {0}};
  a.value.ptr = v;
  return a;
}
static inline sparkrt_arg sparkrt_arg_u32(uint32_t v) {
  sparkrt_arg a = {SPARKRT_ARG_U32, 4, 4, 0, {0}};
  a.value.u32 = v;
  return a;
}
static inline sparkrt_arg sparkrt_arg_i32(int32_t v) {
  sparkrt_arg a = {SPARKRT_ARG_I32, 4, 4, 0, {0}};
  a.value.i32 = v;
  return a;
}
static inline sparkrt_arg sparkrt_arg_u64(uint64_t v) {
  sparkrt_arg a = {SPARKRT_ARG_U64, 8, 8, 0, {0}};
  a.value.u64 = v;
  return a;
}
static inline sparkrt_arg sparkrt_arg_i64(int64_t v) {
  sparkrt_arg a = {SPARKRT_ARG_I64, 8, 8, 0, {0}};
  a.value.i64 = v;
  return a;
}
static inline sparkrt_arg sparkrt_arg_f32(float v) {
  sparkrt_arg a = {SPARKRT_ARG_F32, 4, 4, 0, {0}};
  a.value.f32 = v;
  return a;
}
static inline sparkrt_arg sparkrt_arg_f64(double v) {
  sparkrt_arg a = {SPARKRT_ARG_F64, 8, 8, 0, {0}};
  a.value.f64 = v;
  return a;
}
/* A struct of `size` bytes at `data`, aligned to `align`; the bytes are
 * copied when the launch is made. */
static inline sparkrt_arg sparkrt_arg_bytes(const void* data, uint32_t size, uint32_t align) {
  sparkrt_arg a = {SPARKRT_ARG_BYTES, 0, 0, 0, {0}};
  a.size = size;
  a.align = align;
  a.value.bytes = data;
  return a;
}

typedef struct sparkrt_launch_config {
  size_t struct_size; /* SPARKRT_C_LAUNCH_CONFIG_SIZE */
  uint32_t grid[3];   /* every dimension >= 1 */
  uint32_t block[3];
  uint32_t shared_mem_bytes; /* dynamic shared memory */
  SparkrtStream stream;
  /* Launch attributes (C API 1.1), KernelLaunch::dependent_launch and
   * KernelLaunch::cluster (sparkrt/kernel_launch.h) with their rules and
   * messages. flags: SPARKRT_LAUNCH_DEPENDENT (plugin_api.h) for a
   * programmatic dependent launch, which may start before the previous
   * kernel on the stream ends; any other bit is INVALID_ARGUMENT. cluster:
   * a thread-block cluster in blocks, {0, 0, 0} for none; otherwise every
   * dimension at least 1 and dividing the grid's, at most max_cluster_size
   * blocks in all (INVALID_ARGUMENT), on a device with supports_clusters
   * (UNIMPLEMENTED without). A plugin older than ABI 1.4 refuses either with
   * FAILED_PRECONDITION. */
  uint32_t flags;
  uint32_t cluster[3];
} sparkrt_launch_config;
#define SPARKRT_C_LAUNCH_CONFIG_SIZE SPARKRT_STRUCT_SIZE(sparkrt_launch_config, cluster)
/* What a caller built against C API 1.0 passes: without the attributes. */
#define SPARKRT_C_LAUNCH_CONFIG_SIZE_1_0 SPARKRT_STRUCT_SIZE(sparkrt_launch_config, stream)

/* Checks the arguments against the kernel's signature (count, sizes,
 * offsets, kinds) and the geometry against the device's limits and the
 * entry's .reqntid/.maxntid, and the launch attributes, exactly as
 * KernelLaunch::launch does and with its messages, then queues the kernel on
 * config->stream. Does not wait for it. At most 64 arguments and 4096 bytes
 * of parameters. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_launch(sparkrt_kernel* kernel,
                                                const sparkrt_launch_config* config,
                                                const sparkrt_arg* args, uint32_t num_args);

/* ---- graphs (sparkrt.graph.v1: cuda, cpu, mock; not every backend) ------- */

/* Work queued on `stream` (a created stream, not 0) between begin and end is
 * recorded, not run; a graph replays it with one call, the same pointers and
 * values each time (sparkrt/extensions/graph.h states the rules).
 * UNIMPLEMENTED where the backend has no graphs. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_graph_begin_capture(sparkrt_device* device,
                                                             SparkrtStream stream);
/* num_nodes (may be NULL): operations recorded. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_graph_end_capture(sparkrt_device* device,
                                                           SparkrtStream stream,
                                                           SparkrtGraph* graph,
                                                           uint64_t* num_nodes);
/* Queues one replay on `stream` (0 allowed). */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_graph_launch(sparkrt_device* device, SparkrtGraph graph,
                                                      SparkrtStream stream);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_graph_destroy(sparkrt_device* device,
                                                       SparkrtGraph graph);

/* ---- communicators (sparkrt/communicator.h) ---------------------------- */

/* The collectives library of the device's backend ("NCCL 2.21.5", "sparkrt
 * host collectives 1"); the string lives as long as the device.
 * UNIMPLEMENTED where the backend has no collectives. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_comm_library(sparkrt_device* device, const char** out);
/* One communicator per device, rank i on devices[i]: open devices of one
 * backend, each at most once. comms receives `count` handles. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_comm_create_all(sparkrt_device* const* devices,
                                                         int32_t count, sparkrt_comm** comms);
/* The id of a new clique, made on `device`; move it to the other ranks
 * (its 128 bytes, e.g. as hex) and each calls sparkrt_comm_create_rank. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_comm_unique_id(sparkrt_device* device,
                                                        SparkrtUniqueId* out);
/* Joins the clique of `id` as `rank` of `num_ranks`; returns once every rank
 * has joined (host backends: fails after SPARKRT_COLLECTIVE_TIMEOUT_S). */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_comm_create_rank(sparkrt_device* device,
                                                          int32_t num_ranks, int32_t rank,
                                                          const SparkrtUniqueId* id,
                                                          sparkrt_comm** out);
/* Frees the communicator and its handle (invalid afterwards even on error).
 * NULL is a no-op. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_comm_destroy(sparkrt_comm* comm);
/* Ends the clique at once: pending and later collectives fail. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_comm_abort(sparkrt_comm* comm);
/* An asynchronous error of the communicator; NULL while it is healthy. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_comm_status(sparkrt_comm* comm);
SPARKRT_C_EXPORT int32_t sparkrt_comm_rank(const sparkrt_comm* comm);
SPARKRT_C_EXPORT int32_t sparkrt_comm_size(const sparkrt_comm* comm);

/* Calls that `fn` makes on communicators of `device`'s backend are issued
 * together when it returns (NCCL's group start/end): a thread that drives
 * several ranks puts their calls in one group. The group ends even when `fn`
 * fails; the first error is returned. `fn` returns NULL or an error that
 * this call takes over (make one with sparkrt_status_new). */
typedef sparkrt_status* (*sparkrt_group_fn)(void* user_data);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_comm_group(sparkrt_device* device, sparkrt_group_fn fn,
                                                    void* user_data);
/* An error to return from a callback: `code` and a copy of `message`
 * (NULL: ""). SPARKRT_OK gives NULL; a code outside absl's is UNKNOWN. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_status_new(int32_t code, const char* message);

/* Counts are in elements, as in NCCL (sparkrt/extensions/collectives.h).
 * `type` is a SparkrtDataType value and `op` a SparkrtReduceOp value, passed
 * as int32_t so that any value, valid or not, crosses with a fixed width. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_all_reduce(sparkrt_comm* comm, SparkrtDevicePtr send,
                                                    SparkrtDevicePtr recv, size_t count,
                                                    int32_t type, int32_t op,
                                                    SparkrtStream stream);
/* recv holds size * count elements, rank r's at r * count. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_all_gather(sparkrt_comm* comm, SparkrtDevicePtr send,
                                                    SparkrtDevicePtr recv, size_t count,
                                                    int32_t type, SparkrtStream stream);
/* send holds size * count elements; recv gets block `rank` of the reduction. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_reduce_scatter(sparkrt_comm* comm,
                                                        SparkrtDevicePtr send,
                                                        SparkrtDevicePtr recv, size_t count,
                                                        int32_t type, int32_t op,
                                                        SparkrtStream stream);
/* send is read on `root` only; every rank's recv gets it. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_broadcast(sparkrt_comm* comm, SparkrtDevicePtr send,
                                                   SparkrtDevicePtr recv, size_t count,
                                                   int32_t type, int32_t root,
                                                   SparkrtStream stream);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_send(sparkrt_comm* comm, SparkrtDevicePtr send,
                                              size_t count, int32_t type, int32_t peer,
                                              SparkrtStream stream);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_recv(sparkrt_comm* comm, SparkrtDevicePtr recv,
                                              size_t count, int32_t type, int32_t peer,
                                              SparkrtStream stream);
/* Bytes of one element; 0 outside SparkrtDataType. */
SPARKRT_C_EXPORT size_t sparkrt_data_type_size(int32_t type);

/* ---- KV-cache ops (sparkrt/ops/kv_cache.h; module kv_cache) ------------- */
/* Each op is the C++ op of the same name: the same kernels, argument order,
 * geometry, checks and messages (docs/kernels.md, docs/ops.md). Every field
 * is the C++ Args field of the same name; there are no defaults: set each
 * one (zero where the C++ comment says 0 means "none" or "choose"). An op
 * returns before its kernels finish and launches nothing when its work is
 * empty. */

/* slots[i] = block_table[(start_pos + i) / block_size] * block_size
 *            + (start_pos + i) % block_size, for i < count. */
typedef struct sparkrt_fill_slots_args {
  size_t struct_size; /* SPARKRT_C_FILL_SLOTS_ARGS_SIZE */
  SparkrtDevicePtr slots;       /* i64[count], written */
  SparkrtDevicePtr block_table; /* i32[], one sequence's row */
  uint32_t start_pos;
  uint32_t count;
  uint32_t block_size;
} sparkrt_fill_slots_args;
#define SPARKRT_C_FILL_SLOTS_ARGS_SIZE SPARKRT_STRUCT_SIZE(sparkrt_fill_slots_args, block_size)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_fill_slots_from_block_table(
    sparkrt_device* device, const sparkrt_fill_slots_args* args, SparkrtStream stream);

/* Each token's bf16 key and value rows into its slot of both caches
 * ([blocks][block_size][num_kv_heads][head_dim]); a negative slot skips the
 * token. */
typedef struct sparkrt_reshape_and_cache_args {
  size_t struct_size; /* SPARKRT_C_RESHAPE_AND_CACHE_ARGS_SIZE */
  SparkrtDevicePtr key;          /* bf16[num_tokens][key_stride] */
  SparkrtDevicePtr value;        /* bf16[num_tokens][value_stride] */
  SparkrtDevicePtr k_cache;      /* bf16 pool */
  SparkrtDevicePtr v_cache;      /* bf16 pool */
  SparkrtDevicePtr slot_mapping; /* i64[num_tokens] */
  uint32_t num_tokens;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint32_t block_size;
  uint32_t key_stride;   /* elements, >= num_kv_heads * head_dim */
  uint32_t value_stride; /* likewise */
} sparkrt_reshape_and_cache_args;
#define SPARKRT_C_RESHAPE_AND_CACHE_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_reshape_and_cache_args, value_stride)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_reshape_and_cache(
    sparkrt_device* device, const sparkrt_reshape_and_cache_args* args, SparkrtStream stream);

/* The value half of reshape_and_cache. */
typedef struct sparkrt_reshape_and_cache_v_only_args {
  size_t struct_size; /* SPARKRT_C_RESHAPE_AND_CACHE_V_ONLY_ARGS_SIZE */
  SparkrtDevicePtr value;
  SparkrtDevicePtr v_cache;
  SparkrtDevicePtr slot_mapping;
  uint32_t num_tokens;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint32_t block_size;
  uint32_t value_stride;
} sparkrt_reshape_and_cache_v_only_args;
#define SPARKRT_C_RESHAPE_AND_CACHE_V_ONLY_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_reshape_and_cache_v_only_args, value_stride)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_reshape_and_cache_flash_v_only(
    sparkrt_device* device, const sparkrt_reshape_and_cache_v_only_args* args,
    SparkrtStream stream);

/* Quantising write: k_cache = fp8_sat(key / k_scale), v_cache likewise. */
typedef struct sparkrt_reshape_and_cache_fp8_args {
  size_t struct_size; /* SPARKRT_C_RESHAPE_AND_CACHE_FP8_ARGS_SIZE */
  SparkrtDevicePtr key;
  SparkrtDevicePtr value;
  SparkrtDevicePtr k_cache; /* fp8 e4m3fn pool */
  SparkrtDevicePtr v_cache; /* fp8 e4m3fn pool */
  SparkrtDevicePtr slot_mapping;
  uint32_t num_tokens;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint32_t block_size;
  float k_scale; /* > 0 */
  float v_scale; /* > 0 */
  uint32_t key_stride;
  uint32_t value_stride;
  uint64_t cache_stride; /* elements per block */
} sparkrt_reshape_and_cache_fp8_args;
#define SPARKRT_C_RESHAPE_AND_CACHE_FP8_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_reshape_and_cache_fp8_args, cache_stride)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_reshape_and_cache_fp8(
    sparkrt_device* device, const sparkrt_reshape_and_cache_fp8_args* args,
    SparkrtStream stream);

/* Fused K path: RMSNorm -> RoPE -> cache write, rounded once. One entry point
 * for the three kernels: `variant` picks the bf16 cache with scalar
 * positions, the bf16 cache with MRoPE positions (pos_t, pos_h, pos_w), or
 * the fp8 cache (storing fp8_sat(... * inv_scale)). */
typedef enum sparkrt_fused_k_variant {
  SPARKRT_FUSED_K_BF16 = 1,
  SPARKRT_FUSED_K_BF16_MROPE = 2,
  SPARKRT_FUSED_K_FP8 = 3
} sparkrt_fused_k_variant;

typedef struct sparkrt_fused_k_norm_rope_args {
  size_t struct_size; /* SPARKRT_C_FUSED_K_NORM_ROPE_ARGS_SIZE */
  int32_t variant;    /* sparkrt_fused_k_variant */
  SparkrtDevicePtr k_in;          /* bf16[num_tokens][num_kv_heads][head_dim] */
  SparkrtDevicePtr k_norm_weight; /* bf16[head_dim] */
  SparkrtDevicePtr positions;     /* i32[num_tokens]; BF16 and FP8 */
  SparkrtDevicePtr pos_t;         /* i32[num_tokens]; BF16_MROPE */
  SparkrtDevicePtr pos_h;
  SparkrtDevicePtr pos_w;
  SparkrtDevicePtr k_cache;
  SparkrtDevicePtr slot_mapping;
  uint32_t num_tokens;
  uint32_t num_kv_heads;
  uint32_t head_dim;   /* at most the device's threads per block */
  uint32_t rotary_dim; /* even, <= head_dim */
  uint32_t block_size;
  float rms_eps;
  float theta;
  float inv_scale; /* FP8: 1 / k_scale */
} sparkrt_fused_k_norm_rope_args;
#define SPARKRT_C_FUSED_K_NORM_ROPE_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_fused_k_norm_rope_args, inv_scale)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_fused_k_norm_rope_cache_write(
    sparkrt_device* device, const sparkrt_fused_k_norm_rope_args* args, SparkrtStream stream);

/* ---- paged decode attention (sparkrt/ops/paged_attention.h) ------------- */

/* One query token per sequence, GQA, optional sliding window, over a bf16
 * cache (cache_format BF16) or an fp8 one (FP8: K = fp8 * k_scale, V = fp8 *
 * v_scale, blocks cache_stride elements apart). The op picks one pass or
 * split-KV as the C++ op does; split-KV needs a workspace of
 * sparkrt_paged_decode_workspace_bytes, zeroed once after allocation. */
typedef enum sparkrt_cache_format {
  SPARKRT_CACHE_BF16 = 1,
  SPARKRT_CACHE_FP8 = 2,
  SPARKRT_CACHE_NVFP4 = 3 /* sparkrt_mla_paged_decode only */
} sparkrt_cache_format;

typedef struct sparkrt_paged_decode_args {
  size_t struct_size;   /* SPARKRT_C_PAGED_DECODE_ARGS_SIZE */
  int32_t cache_format; /* sparkrt_cache_format */
  SparkrtDevicePtr q;            /* bf16[num_seqs][q_stride] */
  SparkrtDevicePtr k_cache;      /* 16-byte aligned */
  SparkrtDevicePtr v_cache;      /* 16-byte aligned */
  SparkrtDevicePtr out;          /* bf16[num_seqs][num_q_heads][head_dim], written */
  SparkrtDevicePtr block_tables; /* i32[num_seqs][max_blocks_per_seq] */
  SparkrtDevicePtr seq_lens;     /* i32[num_seqs] */
  uint32_t max_blocks_per_seq;
  uint32_t num_seqs;
  uint32_t num_q_heads;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint32_t block_size;
  float inv_sqrt_d;
  float k_scale;         /* FP8 */
  float v_scale;         /* FP8 */
  uint32_t q_stride;
  uint64_t cache_stride; /* FP8: elements per block */
  uint32_t sliding_window; /* 0: whole context */
  uint32_t max_seq_len;    /* a host bound on seq_lens; 0: from the block table */
  SparkrtDevicePtr workspace; /* 0: never split */
  uint64_t workspace_bytes;
  uint32_t num_splits; /* 0: the op chooses; 1: never; n: exactly n */
} sparkrt_paged_decode_args;
#define SPARKRT_C_PAGED_DECODE_ARGS_SIZE SPARKRT_STRUCT_SIZE(sparkrt_paged_decode_args, num_splits)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_paged_decode_attn(sparkrt_device* device,
                                                           const sparkrt_paged_decode_args* args,
                                                           SparkrtStream stream);

/* Workspace bytes for up to `max_splits` splits (0: the op's largest). */
SPARKRT_C_EXPORT uint64_t sparkrt_paged_decode_workspace_bytes(uint32_t num_seqs,
                                                               uint32_t num_q_heads,
                                                               uint32_t head_dim,
                                                               uint32_t max_splits);

/* ---- TurboQuant V caches (sparkrt/ops/turbo_kv_cache.h,
 *      turbo_paged_attention.h); `bits` is 2, 3 or 4 ------------------------ */

typedef struct sparkrt_turbo_cache_layout {
  size_t struct_size; /* in: SPARKRT_C_TURBO_CACHE_LAYOUT_SIZE */
  uint64_t k_block_stride_bytes;
  uint64_t v_data_section_bytes;
  uint64_t v_block_stride_bytes;
} sparkrt_turbo_cache_layout;
#define SPARKRT_C_TURBO_CACHE_LAYOUT_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_turbo_cache_layout, v_block_stride_bytes)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_turbo_cache_layout_get(uint32_t bits,
                                                                uint32_t block_size,
                                                                uint32_t num_kv_heads,
                                                                uint32_t head_dim,
                                                                sparkrt_turbo_cache_layout* out);

/* K raw, V (already rotated) quantized, into each token's slot. */
typedef struct sparkrt_reshape_and_cache_turbo_args {
  size_t struct_size; /* SPARKRT_C_RESHAPE_AND_CACHE_TURBO_ARGS_SIZE */
  uint32_t bits;
  SparkrtDevicePtr key;
  SparkrtDevicePtr value;
  SparkrtDevicePtr k_cache;
  SparkrtDevicePtr v_cache;
  SparkrtDevicePtr slot_mapping;
  uint32_t num_tokens;
  uint32_t num_kv_heads;
  uint32_t head_dim; /* a multiple of 16 */
  uint32_t block_size;
  uint32_t key_stride;
  uint32_t value_stride;
  uint64_t k_block_stride_bytes;
  uint64_t v_block_stride_bytes;
  uint64_t v_data_section_bytes;
} sparkrt_reshape_and_cache_turbo_args;
#define SPARKRT_C_RESHAPE_AND_CACHE_TURBO_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_reshape_and_cache_turbo_args, v_data_section_bytes)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_reshape_and_cache_turbo(
    sparkrt_device* device, const sparkrt_reshape_and_cache_turbo_args* args,
    SparkrtStream stream);

/* out = H x / sqrt(head_dim) per (token, head) row: its own inverse. */
typedef struct sparkrt_hadamard_args {
  size_t struct_size; /* SPARKRT_C_HADAMARD_ARGS_SIZE */
  SparkrtDevicePtr in;
  SparkrtDevicePtr out;
  uint32_t num_tokens;
  uint32_t num_heads;
  uint32_t head_dim; /* a power of two in [64, 512] */
  uint32_t in_stride;
  uint32_t out_stride;
} sparkrt_hadamard_args;
#define SPARKRT_C_HADAMARD_ARGS_SIZE SPARKRT_STRUCT_SIZE(sparkrt_hadamard_args, out_stride)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_hadamard_transform_bf16(
    sparkrt_device* device, const sparkrt_hadamard_args* args, SparkrtStream stream);

/* Decode attention over a bf16 K cache and a TurboQuant V cache; the output
 * is rotated (apply the Hadamard transform to read it). */
typedef struct sparkrt_paged_decode_turbo_args {
  size_t struct_size; /* SPARKRT_C_PAGED_DECODE_TURBO_ARGS_SIZE */
  uint32_t bits;
  SparkrtDevicePtr q;
  SparkrtDevicePtr k_cache;
  SparkrtDevicePtr v_cache;
  SparkrtDevicePtr out;
  SparkrtDevicePtr block_tables;
  SparkrtDevicePtr seq_lens;
  uint32_t max_blocks_per_seq;
  uint32_t num_seqs;
  uint32_t num_q_heads;
  uint32_t num_kv_heads;
  uint32_t head_dim; /* 64, 128 or 256 */
  uint32_t block_size;
  float inv_sqrt_d;
  uint32_t q_stride;
  uint64_t v_block_stride_bytes;
  uint64_t v_data_section_bytes;
  uint32_t sliding_window;
  uint32_t max_seq_len;
  SparkrtDevicePtr workspace;
  uint64_t workspace_bytes;
  uint32_t num_splits;
} sparkrt_paged_decode_turbo_args;
#define SPARKRT_C_PAGED_DECODE_TURBO_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_paged_decode_turbo_args, num_splits)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_paged_decode_attn_turbo(
    sparkrt_device* device, const sparkrt_paged_decode_turbo_args* args, SparkrtStream stream);

/* ---- MLA (sparkrt/ops/mla.h) -------------------------------------------- */
/* Multi-head latent attention (module mla). The cache holds one KV head of
 * kv_cache_dim values per token, 576 for the MLA row: 512 latent values,
 * then 64 rope values; K is the whole row, V its latent part. Queries are
 * absorbed (mla_batched_gemv for the nope part, mla_q_rope_scatter, RoPE,
 * mla_q_rope_writeback for the rope part) so that decode reads one
 * q_head_dim-wide row per head. bf16 values are 16-bit words. */

/* output[h * output_stride + n] = sum_k weight[h][n][k] * input[h * input_stride + k]
 * for h < num_heads, n < n_out; f32 accumulation. */
typedef struct sparkrt_mla_batched_gemv_args {
  size_t struct_size; /* SPARKRT_C_MLA_BATCHED_GEMV_ARGS_SIZE */
  SparkrtDevicePtr input;  /* bf16, head h at h * input_stride */
  SparkrtDevicePtr weight; /* bf16[num_heads][n_out][k] */
  SparkrtDevicePtr output; /* bf16, head h at h * output_stride, written */
  uint32_t n_out;
  uint32_t k;
  uint32_t num_heads;
  uint32_t input_stride;  /* elements between heads, >= k */
  uint32_t output_stride; /* elements between heads, >= n_out */
} sparkrt_mla_batched_gemv_args;
#define SPARKRT_C_MLA_BATCHED_GEMV_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_mla_batched_gemv_args, output_stride)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_mla_batched_gemv(
    sparkrt_device* device, const sparkrt_mla_batched_gemv_args* args, SparkrtStream stream);

/* Copies each head's rope part q_full[h][nope, nope + rope) to
 * q_absorbed_buf[h][kv_lora, kv_lora + rope) and to q_rope_contiguous[h]. */
typedef struct sparkrt_mla_q_rope_scatter_args {
  size_t struct_size; /* SPARKRT_C_MLA_Q_ROPE_SCATTER_ARGS_SIZE */
  SparkrtDevicePtr q_full;            /* bf16[nq][hd] */
  SparkrtDevicePtr q_absorbed_buf;    /* bf16[nq][mla_cache_dim], rope parts written */
  SparkrtDevicePtr q_rope_contiguous; /* bf16[nq][rope], written */
  uint32_t nq;
  uint32_t hd; /* >= nope + rope */
  uint32_t nope;
  uint32_t rope;
  uint32_t kv_lora;       /* where the rope part starts in an absorbed row */
  uint32_t mla_cache_dim; /* >= kv_lora + rope */
} sparkrt_mla_q_rope_scatter_args;
#define SPARKRT_C_MLA_Q_ROPE_SCATTER_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_mla_q_rope_scatter_args, mla_cache_dim)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_mla_q_rope_scatter(
    sparkrt_device* device, const sparkrt_mla_q_rope_scatter_args* args, SparkrtStream stream);

/* q_absorbed_buf[h][kv_lora, kv_lora + rope) = q_rope_direct[h][0, rope). */
typedef struct sparkrt_mla_q_rope_writeback_args {
  size_t struct_size; /* SPARKRT_C_MLA_Q_ROPE_WRITEBACK_ARGS_SIZE */
  SparkrtDevicePtr q_rope_direct;  /* bf16[nq][rope] */
  SparkrtDevicePtr q_absorbed_buf; /* bf16[nq][mla_cache_dim], rope parts written */
  uint32_t nq;
  uint32_t rope;
  uint32_t kv_lora;
  uint32_t mla_cache_dim; /* >= kv_lora + rope */
} sparkrt_mla_q_rope_writeback_args;
#define SPARKRT_C_MLA_Q_ROPE_WRITEBACK_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_mla_q_rope_writeback_args, mla_cache_dim)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_mla_q_rope_writeback(
    sparkrt_device* device, const sparkrt_mla_q_rope_writeback_args* args, SparkrtStream stream);

/* One token's bf16 cache rows: k_cache = [kv_latent | k_rope | zeros],
 * v_cache = [kv_latent | zeros], mla_cache_dim values each. */
typedef struct sparkrt_mla_cache_assemble_args {
  size_t struct_size; /* SPARKRT_C_MLA_CACHE_ASSEMBLE_ARGS_SIZE */
  SparkrtDevicePtr kv_latent; /* bf16[kv_lora] */
  SparkrtDevicePtr k_rope;    /* bf16[rope], already rotated */
  SparkrtDevicePtr k_cache;   /* bf16[mla_cache_dim], written */
  SparkrtDevicePtr v_cache;   /* bf16[mla_cache_dim], written */
  uint32_t kv_lora;
  uint32_t rope;
  uint32_t mla_cache_dim; /* >= kv_lora + rope, <= the device's threads per block */
} sparkrt_mla_cache_assemble_args;
#define SPARKRT_C_MLA_CACHE_ASSEMBLE_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_mla_cache_assemble_args, mla_cache_dim)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_mla_cache_assemble(
    sparkrt_device* device, const sparkrt_mla_cache_assemble_args* args, SparkrtStream stream);

/* Paged decode over the compressed cache, one query token per sequence:
 * o[s][h] = softmax(inv_sqrt_d * q[s][h] . K_t[0, q_head_dim)) V_t, with
 * V_t = K_t[0, kv_cache_dim - 64), rounded once to bf16. cache_format
 * (sparkrt_cache_format) is FP8 or NVFP4, and says which fields are read:
 *  - FP8 (mla_paged_decode_fp8): K = fp8 e4m3fn * k_scale, V = fp8 * v_scale,
 *    blocks cache_stride bytes apart; sliding_window, sinks, comp_pool and
 *    comp_block_count as the C++ comments say. block_stride_bytes and
 *    data_section_bytes are not read.
 *  - NVFP4 (mla_paged_decode_nvfp4): blocks block_stride_bytes apart, E2M1
 *    values in the first data_section_bytes, then one E4M3 scale per 16
 *    values (sparkrt_mla_nvfp4_block_layout_get). k_scale, v_scale,
 *    cache_stride, sliding_window, sinks, comp_pool and comp_block_count are
 *    not read.
 * The op picks the per-head, tiled or split-KV geometry as the C++ op does;
 * split-KV needs a workspace of sparkrt_mla_decode_workspace_bytes. */
typedef struct sparkrt_mla_paged_decode_args {
  size_t struct_size;   /* SPARKRT_C_MLA_PAGED_DECODE_ARGS_SIZE */
  int32_t cache_format; /* sparkrt_cache_format: FP8 or NVFP4 */
  SparkrtDevicePtr q;            /* bf16[num_seqs][num_q_heads][q_head_dim] */
  SparkrtDevicePtr k_cache;
  SparkrtDevicePtr v_cache;      /* may equal k_cache */
  SparkrtDevicePtr o;            /* bf16[num_seqs][num_q_heads][kv_cache_dim - 64], written */
  SparkrtDevicePtr block_tables; /* i32[num_seqs][max_blocks_per_seq] */
  SparkrtDevicePtr seq_lens;     /* i32[num_seqs] */
  uint32_t max_blocks_per_seq;
  uint32_t num_q_heads;
  uint32_t num_kv_heads;
  uint32_t q_head_dim;   /* <= kv_cache_dim; 576 for the MLA row */
  uint32_t kv_cache_dim; /* in (64, 1024]; 576 for the MLA row */
  uint32_t block_size;
  float inv_sqrt_d;
  float k_scale;                /* FP8, > 0 */
  float v_scale;                /* FP8, > 0 */
  uint64_t cache_stride;        /* FP8: bytes per block */
  uint64_t block_stride_bytes;  /* NVFP4 */
  uint64_t data_section_bytes;  /* NVFP4 */
  uint32_t num_seqs;
  uint32_t sliding_window;      /* FP8; 0: the whole context */
  SparkrtDevicePtr sinks;       /* FP8: f32[num_q_heads], or 0 */
  SparkrtDevicePtr comp_pool;   /* FP8: compressed rows, or 0 */
  uint32_t comp_block_count;    /* FP8; 0 without comp_pool */
  SparkrtDevicePtr workspace;   /* 16-byte aligned; 0: never split */
  uint64_t workspace_bytes;
  uint32_t num_splits; /* 0: the op chooses; 1: never; n: exactly n */
} sparkrt_mla_paged_decode_args;
#define SPARKRT_C_MLA_PAGED_DECODE_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_mla_paged_decode_args, num_splits)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_mla_paged_decode(
    sparkrt_device* device, const sparkrt_mla_paged_decode_args* args, SparkrtStream stream);

/* Workspace bytes for up to `max_splits` splits (0: the op's largest). */
SPARKRT_C_EXPORT uint64_t sparkrt_mla_decode_workspace_bytes(uint32_t num_seqs,
                                                             uint32_t num_q_heads,
                                                             uint32_t kv_cache_dim,
                                                             uint32_t max_splits);

/* The bytes of one NVFP4 cache block of block_size tokens, the scales packed
 * right after the data, both sections 16-byte aligned. */
typedef struct sparkrt_mla_nvfp4_block_layout {
  size_t struct_size; /* in: SPARKRT_C_MLA_NVFP4_BLOCK_LAYOUT_SIZE */
  uint64_t data_section_bytes;
  uint64_t block_stride_bytes;
} sparkrt_mla_nvfp4_block_layout;
#define SPARKRT_C_MLA_NVFP4_BLOCK_LAYOUT_SIZE \
  SPARKRT_STRUCT_SIZE(sparkrt_mla_nvfp4_block_layout, block_stride_bytes)
SPARKRT_C_EXPORT sparkrt_status* sparkrt_mla_nvfp4_block_layout_get(
    uint32_t block_size, uint32_t num_kv_heads, uint32_t kv_cache_dim,
    sparkrt_mla_nvfp4_block_layout* out);

/* ---- trace (sparkrt/trace.h; C API 1.1) --------------------------------- */

/* A trace of the runtime's calls, in the Chrome trace event format that
 * Perfetto opens; what it records is docs/trace.md's. One trace runs at a
 * time, for the whole process. SPARKRT_TRACE=<file> traces without any of
 * these calls: from the first device open to the process's exit. */

/* Starts writing a trace to `path` (created or truncated). Fails, naming the
 * path, when it cannot be opened for writing (a missing folder: NOT_FOUND);
 * FAILED_PRECONDITION while a trace is already running. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_trace_start(const char* path);
typedef struct sparkrt_trace_options {
  size_t struct_size; /* SPARKRT_C_TRACE_OPTIONS_SIZE */
  /* 1 (sparkrt_trace_start's choice): each stream operation's device time too,
   * on a track per stream; 0: host spans only, which costs each call less. */
  uint8_t device_times;
} sparkrt_trace_options;
#define SPARKRT_C_TRACE_OPTIONS_SIZE SPARKRT_STRUCT_SIZE(sparkrt_trace_options, device_times)
/* sparkrt_trace_start with options (NULL: the defaults). */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_trace_start_with_options(
    const char* path, const sparkrt_trace_options* options);
/* Ends the trace and closes its file; the error is the first write failure
 * the trace met (the file is then incomplete). FAILED_PRECONDITION when no
 * trace is running. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_trace_stop(void);
/* 1 while a trace is running (sparkrt_trace_start or SPARKRT_TRACE), else 0. */
SPARKRT_C_EXPORT int sparkrt_trace_enabled(void);
/* A region of the caller's own ("decode step") on the calling thread's track
 * (sparkrt::trace::Range): push opens it, pop closes the thread's innermost
 * open one; runtime calls in between nest under it. Regions opened while no
 * trace runs are not recorded but still pop. pop with none open on the
 * thread is FAILED_PRECONDITION. */
SPARKRT_C_EXPORT sparkrt_status* sparkrt_trace_range_push(const char* name);
SPARKRT_C_EXPORT sparkrt_status* sparkrt_trace_range_pop(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPARKRT_SPARKRT_C_H_ */
