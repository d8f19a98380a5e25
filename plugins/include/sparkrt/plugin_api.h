/* sparkrt plugin ABI: the whole contract between libsparkrt and a backend.
 *
 * A backend is a shared library that exports one C function,
 *
 *     const SparkrtPluginApi* sparkrt_plugin_api(void);
 *
 * returning a pointer to a table that lives as long as the library is loaded.
 * The runtime reads `struct_size`, `abi_major` and `abi_minor` before anything
 * else and refuses the plugin when the major version differs or the table is
 * shorter than the runtime needs.
 *
 * Versioning rules:
 *  - abi_major rises when a field or function is removed, retyped or reordered,
 *    or when the meaning of an existing call changes. Different major: refused.
 *  - abi_minor rises when a field is appended to the table or to an args
 *    struct. New fields only ever go at the end; an older peer is detected by a
 *    smaller struct_size and the new fields are treated as absent.
 *  - Optional features (mock inspection, graphs, timing, ...) are not table
 *    fields but named extensions returned by `get_extension`, each with its own
 *    versioned name ("sparkrt.mock.v1").
 *
 * Calling conventions:
 *  - Every call but the three error helpers takes one args struct whose first
 *    field is `struct_size`, set by the caller to SPARKRT_<NAME>_ARGS_SIZE.
 *    Fields marked `out` are written by the plugin. A struct_size smaller
 *    than the plugin needs is refused with INVALID_ARGUMENT.
 *  - A call returns NULL on success or a SparkrtError the caller owns and
 *    releases with `error_destroy`. Error codes equal absl::StatusCode values.
 *  - No C++ types, exceptions or allocator ownership cross this boundary.
 *  - All calls may be made from several threads at once, except that an object
 *    must not be used concurrently with its own destroy/unload/close call.
 *  - Streams are plugin-issued 64-bit handles; 0 is the device's default
 *    stream. Device pointers are 64-bit device addresses.
 *
 * Behaviour: the comments of each section below state what a backend must
 * do, and `sparkrt conformance --backend <name or plugin path>` checks every
 * rule so stated (README: "Writing a backend plugin"). A rule marked
 * [feature] belongs to an optional feature: its cases are skipped, with the
 * reason, where the plugin does not offer it (the suite detects that, or the
 * backend declares it: --skip FEATURE:REASON). What is marked (runtime) the
 * runtime checks before it calls the plugin, so a plugin need not.
 *  - Every call that takes a stream or event handle refuses one that is
 *    unknown or destroyed with INVALID_ARGUMENT (event 0 included).
 *  - The suite loads the vector_ops module (kernels/ptx/vector_ops.cu) and
 *    launches vector_add_f32 and fill_u32; a backend must resolve both.
 */
#ifndef SPARKRT_PLUGIN_API_H_
#define SPARKRT_PLUGIN_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPARKRT_ABI_MAJOR 1
#define SPARKRT_ABI_MINOR 4

/* Name of the one symbol a plugin exports. */
#define SPARKRT_PLUGIN_ENTRY_SYMBOL "sparkrt_plugin_api"

/* Size of `type` up to and including `last_field`: what a peer that knows
 * `last_field` as the final field writes into struct_size. */
#define SPARKRT_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

typedef struct SparkrtError SparkrtError;   /* opaque, plugin-owned */
typedef struct SparkrtDevice SparkrtDevice; /* opaque, one opened device */
typedef struct SparkrtModule SparkrtModule; /* opaque, a loaded module image */
typedef struct SparkrtKernel SparkrtKernel; /* opaque, owned by its module */

typedef uint64_t SparkrtDevicePtr;
typedef uint64_t SparkrtStream; /* 0 = default stream */
typedef uint64_t SparkrtEvent;

/* Error codes are absl::StatusCode values. */
enum {
  SPARKRT_OK = 0,
  SPARKRT_CANCELLED = 1,
  SPARKRT_UNKNOWN = 2,
  SPARKRT_INVALID_ARGUMENT = 3,
  SPARKRT_DEADLINE_EXCEEDED = 4,
  SPARKRT_NOT_FOUND = 5,
  SPARKRT_ALREADY_EXISTS = 6,
  SPARKRT_PERMISSION_DENIED = 7,
  SPARKRT_RESOURCE_EXHAUSTED = 8,
  SPARKRT_FAILED_PRECONDITION = 9,
  SPARKRT_ABORTED = 10,
  SPARKRT_OUT_OF_RANGE = 11,
  SPARKRT_UNIMPLEMENTED = 12,
  SPARKRT_INTERNAL = 13,
  SPARKRT_UNAVAILABLE = 14,
  SPARKRT_DATA_LOSS = 15,
  SPARKRT_UNAUTHENTICATED = 16
};

/* How one kernel argument was given, so recording and reference backends can
 * interpret the packed bytes. */
typedef enum SparkrtArgKind {
  SPARKRT_ARG_PTR = 1,   /* device pointer, 8 bytes */
  SPARKRT_ARG_U32 = 2,
  SPARKRT_ARG_I32 = 3,
  SPARKRT_ARG_U64 = 4,
  SPARKRT_ARG_I64 = 5,
  SPARKRT_ARG_F32 = 6,
  SPARKRT_ARG_F64 = 7,
  SPARKRT_ARG_BYTES = 8  /* trivially copyable struct */
} SparkrtArgKind;

/* The runtime offers a module in the first of these that the device accepts
 * and the module has: cubin, PTX, SPIR-V, signatures. */
typedef enum SparkrtImageFormat {
  SPARKRT_IMAGE_PTX = 1,   /* NUL-terminated PTX text */
  SPARKRT_IMAGE_CUBIN = 2, /* ELF for the device's architecture */
  SPARKRT_IMAGE_SPIRV = 3, /* SPIR-V module, one entry point per kernel (ABI 1.1) */
  /* The module's signature file (NUL-terminated text: the PTX .entry
   * declarations with empty bodies), for devices that run no device code of
   * their own, such as a recording or a reference backend (ABI 1.1). */
  SPARKRT_IMAGE_SIGNATURES = 4
} SparkrtImageFormat;

typedef enum SparkrtCopyKind {
  SPARKRT_COPY_H2D = 1,
  SPARKRT_COPY_D2H = 2,
  SPARKRT_COPY_D2D = 3
} SparkrtCopyKind;

/* ---- errors (plain calls: they never change) ---------------------------- */

typedef int32_t (*SparkrtErrorCodeFn)(const SparkrtError* error);
/* The message stays valid until error_destroy; not NUL-terminated. */
typedef void (*SparkrtErrorMessageFn)(const SparkrtError* error,
                                      const char** message, size_t* size);
typedef void (*SparkrtErrorDestroyFn)(SparkrtError* error);

/* ---- devices ------------------------------------------------------------ */

typedef struct SparkrtDeviceCountArgs {
  size_t struct_size;
  int32_t count; /* out; an error explains why there are none (no driver) */
} SparkrtDeviceCountArgs;
#define SPARKRT_DEVICE_COUNT_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtDeviceCountArgs, count)

typedef struct SparkrtDeviceOpenArgs {
  size_t struct_size;
  int32_t index;
  SparkrtDevice* device; /* out */
} SparkrtDeviceOpenArgs;
#define SPARKRT_DEVICE_OPEN_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtDeviceOpenArgs, device)

/* Destroys every stream, event, module and allocation the device still owns;
 * the same index can then be opened again. (runtime) A closed device's calls
 * fail with FAILED_PRECONDITION. */
typedef struct SparkrtDeviceCloseArgs {
  size_t struct_size;
  SparkrtDevice* device;
} SparkrtDeviceCloseArgs;
#define SPARKRT_DEVICE_CLOSE_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtDeviceCloseArgs, device)

/* The launch limits the runtime checks against. Required: a name, and the
 * minimums noted below. */
typedef struct SparkrtDeviceProperties {
  size_t struct_size;
  char name[256];         /* "NVIDIA H200", "sparkrt mock device"; not empty */
  char architecture[32];  /* image suffix the device prefers: "sm_90"; "" if none */
  uint64_t total_memory;  /* bytes, > 0 */
  uint32_t multiprocessor_count;
  uint32_t warp_size;             /* > 0 */
  uint32_t max_threads_per_block; /* >= 64 */
  uint32_t max_block_dim[3];      /* x >= 64 */
  uint32_t max_grid_dim[3];       /* x >= 65535 */
  uint32_t max_shared_memory_per_block;       /* without opt-in; > 0 */
  uint32_t max_shared_memory_per_block_optin; /* ceiling for dynamic shared memory; >= the above */
  uint32_t compute_capability_major;          /* 0 where not applicable; else */
  uint32_t compute_capability_minor;          /* architecture is "sm_<major><minor>" */
  uint32_t image_formats; /* bit (1 << SparkrtImageFormat) per accepted format; one at least */
  uint32_t flags;         /* SPARKRT_DEVICE_FLAG_* (ABI 1.2) */
  char driver[128];       /* the API and driver behind the device, for people: "Vulkan 1.4.312,
                             NVIDIA 580.159.04"; "" where there is none (ABI 1.3) */
  /* Launch attributes (ABI 1.4): written only where the caller's
   * struct_size covers them; the runtime asks a plugin of ABI 1.3 for
   * SPARKRT_DEVICE_PROPERTIES_SIZE_1_3 and takes the attributes as absent. */
  uint8_t supports_dependent_launch; /* 1: SPARKRT_LAUNCH_DEPENDENT can overlap launches */
  uint8_t supports_clusters;         /* 1: launches take a thread-block cluster */
  uint8_t reserved[2];               /* 0 */
  uint32_t max_cluster_size;         /* blocks per cluster; 0 where supports_clusters is 0 */
} SparkrtDeviceProperties;
#define SPARKRT_DEVICE_PROPERTIES_SIZE \
  SPARKRT_STRUCT_SIZE(SparkrtDeviceProperties, max_cluster_size)
/* What a caller built against ABI 1.3 passes: without the launch attributes. */
#define SPARKRT_DEVICE_PROPERTIES_SIZE_1_3 SPARKRT_STRUCT_SIZE(SparkrtDeviceProperties, driver)
/* What a caller built against ABI 1.2 passes: without `driver`. */
#define SPARKRT_DEVICE_PROPERTIES_SIZE_1_2 SPARKRT_STRUCT_SIZE(SparkrtDeviceProperties, flags)
/* What a caller built against ABI 1.0 or 1.1 passes: without `flags`. */
#define SPARKRT_DEVICE_PROPERTIES_SIZE_1_0 \
  SPARKRT_STRUCT_SIZE(SparkrtDeviceProperties, image_formats)

/* A GPU API implemented in software on the host CPU (Mesa's lavapipe under
 * the vulkan backend): `auto` passes such a device over. The cpu backend is
 * not emulated: it is the host's own backend. */
#define SPARKRT_DEVICE_FLAG_EMULATED (1u << 0)

typedef struct SparkrtDeviceGetPropertiesArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtDeviceProperties* properties; /* out; caller sets its struct_size */
} SparkrtDeviceGetPropertiesArgs;
#define SPARKRT_DEVICE_GET_PROPERTIES_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(SparkrtDeviceGetPropertiesArgs, properties)

/* ---- modules and kernels ------------------------------------------------ */

typedef struct SparkrtModuleLoadArgs {
  size_t struct_size;
  SparkrtDevice* device;
  const char* name; /* module name, for messages */
  SparkrtImageFormat format;
  const void* image;
  size_t image_size; /* bytes, without the trailing NUL of text formats */
  SparkrtModule* module; /* out */
} SparkrtModuleLoadArgs;
#define SPARKRT_MODULE_LOAD_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtModuleLoadArgs, module)

typedef struct SparkrtModuleUnloadArgs {
  size_t struct_size;
  SparkrtModule* module;
} SparkrtModuleUnloadArgs;
#define SPARKRT_MODULE_UNLOAD_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtModuleUnloadArgs, module)

/* One parameter of a kernel as its signature declares it. */
typedef struct SparkrtParamInfo {
  uint32_t offset; /* bytes into the packed parameter buffer */
  uint32_t size;
  uint32_t align;
} SparkrtParamInfo;

/* The runtime parses the module's signatures (its .sig or PTX) and passes the
 * entry's, so that backends without a native loader (mock, cpu) know the
 * layout and backends with one can cross-check it. (runtime) An entry or
 * module that the signatures do not have is NOT_FOUND without reaching the
 * plugin. */
typedef struct SparkrtKernelGetArgs {
  size_t struct_size;
  SparkrtModule* module;
  const char* entry;
  const SparkrtParamInfo* params;
  uint32_t num_params;
  SparkrtKernel* kernel; /* out; owned by the module */
} SparkrtKernelGetArgs;
#define SPARKRT_KERNEL_GET_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtKernelGetArgs, kernel)

/* ---- memory ------------------------------------------------------------- */

/* Device pointers given to memset, memcpy and kernels may point anywhere
 * inside a live allocation (its base plus an offset). A range that touches an
 * address in no allocation (0x1000, say) fails. [out-of-bounds] So does a
 * range that starts inside an allocation and runs past its end;
 * [use-after-free] and one inside a freed allocation. */

/* More than the device can provide (the suite asks for 2^60 bytes) fails with
 * RESOURCE_EXHAUSTED. */
typedef struct SparkrtMemAllocArgs {
  size_t struct_size;
  SparkrtDevice* device;
  uint64_t bytes; /* > 0 (runtime: 0 is INVALID_ARGUMENT) */
  SparkrtDevicePtr ptr; /* out; not 0, aligned to at least 256 bytes, apart from
                           every live allocation */
} SparkrtMemAllocArgs;
#define SPARKRT_MEM_ALLOC_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtMemAllocArgs, ptr)

typedef struct SparkrtMemFreeArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtDevicePtr ptr; /* exactly what mem_alloc returned; anything else (0, an
                           address inside an allocation, one never allocated or
                           already freed) fails */
} SparkrtMemFreeArgs;
#define SPARKRT_MEM_FREE_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtMemFreeArgs, ptr)

/* Page-locked host memory for fast asynchronous copies. Backends without
 * such a notion return ordinary host memory. bytes > 0 (runtime); host_free
 * of a pointer host_alloc did not return fails. */
typedef struct SparkrtHostAllocArgs {
  size_t struct_size;
  SparkrtDevice* device;
  uint64_t bytes;
  void* ptr; /* out */
} SparkrtHostAllocArgs;
#define SPARKRT_HOST_ALLOC_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtHostAllocArgs, ptr)

typedef struct SparkrtHostFreeArgs {
  size_t struct_size;
  SparkrtDevice* device;
  void* ptr;
} SparkrtHostFreeArgs;
#define SPARKRT_HOST_FREE_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtHostFreeArgs, ptr)

/* memset and memcpy write exactly `bytes` bytes and nothing around them;
 * bytes == 0 succeeds and does nothing (host pointers may then be null;
 * (runtime) a null host pointer with bytes > 0 is INVALID_ARGUMENT).
 * blocking != 0: returns when done, after all work queued before it on the
 * default stream (a blocking copy reads what a default-stream launch wrote).
 * Otherwise ordered on `stream`, which must be 0 or a live stream; host
 * memory must stay valid until the stream reaches the operation. A D2D copy
 * between overlapping ranges of one allocation moves the bytes as memmove
 * does, where the backend offers it (conformance feature
 * "overlapping-copies"; cuda does not: CUDA leaves such copies undefined). */
typedef struct SparkrtMemsetArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtDevicePtr dst;
  uint8_t value;
  uint64_t bytes;
  SparkrtStream stream;
  int32_t blocking;
} SparkrtMemsetArgs;
#define SPARKRT_MEMSET_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtMemsetArgs, blocking)

typedef struct SparkrtMemcpyArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtCopyKind kind;
  SparkrtDevicePtr dst_device; /* D2D, H2D */
  SparkrtDevicePtr src_device; /* D2D, D2H */
  void* dst_host;              /* D2H */
  const void* src_host;        /* H2D */
  uint64_t bytes;
  SparkrtStream stream;
  int32_t blocking;
} SparkrtMemcpyArgs;
#define SPARKRT_MEMCPY_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtMemcpyArgs, blocking)

/* ---- streams and events ------------------------------------------------- */

/* Work queued on one stream (async memset and memcpy, launches) runs in the
 * order queued; stream_synchronize returns when all of it is done. Stream 0
 * always exists and cannot be destroyed (INVALID_ARGUMENT). A destroyed
 * stream's or event's handle stays refused after new ones are created, so
 * do not hand the same value out again at once. */

typedef struct SparkrtStreamCreateArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtStream stream; /* out, never 0 */
} SparkrtStreamCreateArgs;
#define SPARKRT_STREAM_CREATE_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtStreamCreateArgs, stream)

/* Used by stream_destroy and stream_synchronize. */
typedef struct SparkrtStreamArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtStream stream;
} SparkrtStreamArgs;
#define SPARKRT_STREAM_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtStreamArgs, stream)

typedef struct SparkrtEventCreateArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtEvent event; /* out, never 0 */
} SparkrtEventCreateArgs;
#define SPARKRT_EVENT_CREATE_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtEventCreateArgs, event)

/* Used by event_destroy, event_record (on `stream`), event_synchronize and
 * stream_wait_event (`stream` waits for `event`). A recorded event completes
 * when the work queued on its stream before the record has; work queued on a
 * waiting stream after stream_wait_event starts only then, across streams;
 * event_synchronize returns once it has. */
typedef struct SparkrtEventArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtEvent event;
  SparkrtStream stream;
} SparkrtEventArgs;
#define SPARKRT_EVENT_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtEventArgs, stream)

/* Milliseconds from `start` to `end`, both recorded and complete: finite, and
 * >= 0 when `end` was recorded after `start`. An event never recorded fails
 * (FAILED_PRECONDITION). */
typedef struct SparkrtEventElapsedArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtEvent start;
  SparkrtEvent end;
  float milliseconds; /* out */
} SparkrtEventElapsedArgs;
#define SPARKRT_EVENT_ELAPSED_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtEventElapsedArgs, milliseconds)

/* ---- launch --------------------------------------------------------------- */

/* Launch attributes (ABI 1.4): `flags` and `cluster` follow the 1.3 fields.
 * A plugin reads them only when struct_size covers them
 * (>= SPARKRT_LAUNCH_ARGS_SIZE; an older runtime passes
 * SPARKRT_LAUNCH_ARGS_SIZE_1_3, which means no attributes). The runtime
 * passes them only to a plugin whose abi_minor is 4 or more; to an older one
 * it passes the 1.3 size and (runtime) refuses a launch that asks for an
 * attribute with FAILED_PRECONDITION, naming the plugin's ABI version.
 * [launch-attributes] A dependent launch computes what a plain one does (a
 * plugin that cannot overlap launches runs it as one). A device with
 * supports_clusters launches a cluster; one without refuses a launch with a
 * cluster with UNIMPLEMENTED, and reports max_cluster_size 0. (runtime) A
 * cluster with a zero dimension, a grid that is not a multiple of it in every
 * dimension, or more than max_cluster_size blocks is INVALID_ARGUMENT; a
 * cluster on a device without supports_clusters is UNIMPLEMENTED. Graph
 * capture records the attributes with the launch and replays them. */

/* The runtime has already checked the arguments against the kernel's
 * signature and the launch limits; `params` holds them packed in the CUDA
 * parameter layout (arg i at arg_offsets[i], natural alignment). (runtime)
 * A zero or oversized grid or block dimension, more threads per block than
 * max_threads_per_block, a block the kernel's .reqntid or .maxntid forbids,
 * shared memory above the opt-in ceiling, and a missing, extra, mis-sized or
 * mistyped argument are INVALID_ARGUMENT. A launch on the default stream or
 * on any live stream succeeds; [kernel-results] kernels compute what their
 * source says (vector_add_f32 bit for bit) and write nothing beyond it. */
typedef struct SparkrtLaunchArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtKernel* kernel;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_memory_bytes;
  SparkrtStream stream;
  const void* params;
  uint32_t params_size;
  uint32_t num_args;
  const uint32_t* arg_offsets;
  const uint32_t* arg_sizes;
  const uint8_t* arg_kinds; /* SparkrtArgKind values */
  /* Launch attributes (ABI 1.4). */
  uint32_t flags;      /* SPARKRT_LAUNCH_* bits */
  uint32_t cluster[3]; /* thread-block cluster in blocks; 0 0 0: none */
} SparkrtLaunchArgs;
#define SPARKRT_LAUNCH_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtLaunchArgs, cluster)
/* What a runtime built against ABI 1.3 passes, and what this runtime passes
 * to a plugin of ABI 1.3: without the launch attributes. */
#define SPARKRT_LAUNCH_ARGS_SIZE_1_3 SPARKRT_STRUCT_SIZE(SparkrtLaunchArgs, arg_kinds)

/* The launch may start before the previous kernel on its stream has finished
 * (CUDA's programmatic dependent launch): the kernel itself waits, with
 * griddepcontrol.wait, before it reads what that kernel wrote. A backend
 * that cannot overlap launches runs it as a plain launch, which is always
 * correct. */
#define SPARKRT_LAUNCH_DEPENDENT (1u << 0)

/* ---- extensions ------------------------------------------------------------ */

/* Returns the extension's table in `extension`, or NULL when the plugin does
 * not implement it (not an error). Tables live as long as the library.
 * [graphs] A plugin that offers sparkrt.graph.v1 follows
 * sparkrt/extensions/graph.h. [kernel-results] One that offers
 * sparkrt.mock.v1 is a recording device: its launches are not run. */
typedef struct SparkrtGetExtensionArgs {
  size_t struct_size;
  const char* name;
  const void* extension; /* out */
} SparkrtGetExtensionArgs;
#define SPARKRT_GET_EXTENSION_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtGetExtensionArgs, extension)

/* ---- the table ------------------------------------------------------------- */

#define SPARKRT_FN(name, args) typedef SparkrtError* (*Sparkrt##name##Fn)(args* a)
SPARKRT_FN(DeviceCount, SparkrtDeviceCountArgs);
SPARKRT_FN(DeviceOpen, SparkrtDeviceOpenArgs);
SPARKRT_FN(DeviceClose, SparkrtDeviceCloseArgs);
SPARKRT_FN(DeviceGetProperties, SparkrtDeviceGetPropertiesArgs);
SPARKRT_FN(ModuleLoad, SparkrtModuleLoadArgs);
SPARKRT_FN(ModuleUnload, SparkrtModuleUnloadArgs);
SPARKRT_FN(KernelGet, SparkrtKernelGetArgs);
SPARKRT_FN(MemAlloc, SparkrtMemAllocArgs);
SPARKRT_FN(MemFree, SparkrtMemFreeArgs);
SPARKRT_FN(HostAlloc, SparkrtHostAllocArgs);
SPARKRT_FN(HostFree, SparkrtHostFreeArgs);
SPARKRT_FN(Memset, SparkrtMemsetArgs);
SPARKRT_FN(Memcpy, SparkrtMemcpyArgs);
SPARKRT_FN(StreamCreate, SparkrtStreamCreateArgs);
SPARKRT_FN(Stream, SparkrtStreamArgs);
SPARKRT_FN(EventCreate, SparkrtEventCreateArgs);
SPARKRT_FN(Event, SparkrtEventArgs);
SPARKRT_FN(EventElapsed, SparkrtEventElapsedArgs);
SPARKRT_FN(Launch, SparkrtLaunchArgs);
SPARKRT_FN(GetExtension, SparkrtGetExtensionArgs);
#undef SPARKRT_FN

typedef struct SparkrtPluginApi {
  size_t struct_size; /* SPARKRT_PLUGIN_API_SIZE of the plugin's header */
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* name;    /* backend name: "mock", "cuda", "cpu"; the <name> of its
                          file, libsparkrt_backend_<name>.so */
  const char* version; /* the plugin's own version string */

  SparkrtErrorCodeFn error_code;
  SparkrtErrorMessageFn error_message;
  SparkrtErrorDestroyFn error_destroy;

  SparkrtDeviceCountFn device_count;
  SparkrtDeviceOpenFn device_open;
  SparkrtDeviceCloseFn device_close;
  SparkrtDeviceGetPropertiesFn device_get_properties;

  SparkrtModuleLoadFn module_load;
  SparkrtModuleUnloadFn module_unload;
  SparkrtKernelGetFn kernel_get;

  SparkrtMemAllocFn mem_alloc;
  SparkrtMemFreeFn mem_free;
  SparkrtHostAllocFn host_alloc;
  SparkrtHostFreeFn host_free;
  SparkrtMemsetFn memset;
  SparkrtMemcpyFn memcpy;

  SparkrtStreamCreateFn stream_create;
  SparkrtStreamFn stream_destroy;
  SparkrtStreamFn stream_synchronize;
  SparkrtEventCreateFn event_create;
  SparkrtEventFn event_destroy;
  SparkrtEventFn event_record;
  SparkrtEventFn event_synchronize;
  SparkrtEventFn stream_wait_event;
  SparkrtEventElapsedFn event_elapsed;

  SparkrtLaunchFn launch;
  SparkrtGetExtensionFn get_extension;
} SparkrtPluginApi;
#define SPARKRT_PLUGIN_API_SIZE SPARKRT_STRUCT_SIZE(SparkrtPluginApi, get_extension)

typedef const SparkrtPluginApi* (*SparkrtPluginEntryFn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPARKRT_PLUGIN_API_H_ */
