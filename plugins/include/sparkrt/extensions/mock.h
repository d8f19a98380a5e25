/* sparkrt mock backend extension "sparkrt.mock.v1": inspection and fault
 * injection for the recording mock device.
 *
 * Fetch the table from the mock plugin with get_extension (or, in C++,
 * Device::extension_as<SparkrtMockExtension>(SPARKRT_MOCK_EXTENSION_NAME));
 * other plugins return NULL for this name. The table belongs to the plugin, not
 * to a device, so every function takes the SparkrtDevice* it inspects; a
 * device that is not an open mock device is refused with InvalidArgument.
 * C++ tests normally use sparkrt/testing/mock.h instead of this table.
 *
 * Conventions (as in plugin_api.h):
 *  - Functions return NULL on success or a SparkrtError the caller releases
 *    with this table's error_destroy; codes equal absl::StatusCode values.
 *  - Output structs start with struct_size, set by the caller to the matching
 *    SPARKRT_MOCK_*_SIZE; the plugin writes only the fields that fit.
 *  - The table only grows at the end (check struct_size); a change in meaning
 *    gets a new name ("sparkrt.mock.v2").
 *  - Strings handed out (module and entry names) stay valid until the device
 *    closes; copy them if you need them longer.
 *  - Every function may be called from any thread; none may race with closing
 *    the device it inspects.
 *
 * What is recorded: every kernel lookup that reaches the plugin (the runtime
 * caches resolved kernels, so a repeated Device::kernel call is not a second
 * lookup), every launch (unless recording is switched off or the record limit
 * is reached), and counters for every operation. reset() clears records,
 * counters and injected faults; live memory, streams, events and modules are
 * state, not records, and survive it (as do live_allocations and live_bytes).
 */
#ifndef SPARKRT_EXTENSIONS_MOCK_H_
#define SPARKRT_EXTENSIONS_MOCK_H_

#include <stddef.h>
#include <stdint.h>

#include "sparkrt/extensions/collectives.h"
#include "sparkrt/plugin_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPARKRT_MOCK_EXTENSION_NAME "sparkrt.mock.v1"

/* Default number of launch records kept before new launches are only counted
 * (see set_recording). */
#define SPARKRT_MOCK_DEFAULT_MAX_LAUNCH_RECORDS 65536u

/* Counters of one mock device since it was opened or last reset. "blocking"
 * and "async" refer to the call used (copy_d2h vs copy_d2h_async). Failed
 * calls are counted in `errors` only. */
typedef struct SparkrtMockCounters {
  size_t struct_size;
  uint64_t lookups;          /* kernel_get calls, failed ones included */
  uint64_t module_loads;
  uint64_t launches;         /* successful launches */
  uint64_t launches_failed;  /* launches failed by fail_launch injection */
  uint64_t launch_records_dropped; /* launches counted but not recorded */
  uint64_t syncs;            /* stream_synchronize calls, any stream */
  uint64_t event_syncs;      /* event_synchronize calls */
  uint64_t h2d_blocking;
  uint64_t h2d_async;
  uint64_t d2h_blocking;
  uint64_t d2h_async;
  uint64_t d2d_blocking;
  uint64_t d2d_async;
  uint64_t memsets_blocking;
  uint64_t memsets_async;
  uint64_t bytes_h2d;        /* payload bytes, blocking and async */
  uint64_t bytes_d2h;
  uint64_t bytes_d2d;
  uint64_t allocations;      /* successful mem_alloc calls */
  uint64_t frees;            /* successful mem_free calls */
  uint64_t live_allocations; /* state: not cleared by reset */
  uint64_t live_bytes;       /* state: requested bytes of live allocations */
  uint64_t peak_live_bytes;  /* highest live_bytes since open or reset */
  uint64_t host_allocations;
  uint64_t host_frees;
  uint64_t streams_created;
  uint64_t streams_destroyed;
  uint64_t events_created;
  uint64_t events_destroyed;
  uint64_t events_recorded;
  uint64_t event_waits;      /* stream_wait_event calls */
  uint64_t errors;           /* calls of the plugin table that returned an error */
} SparkrtMockCounters;
#define SPARKRT_MOCK_COUNTERS_SIZE SPARKRT_STRUCT_SIZE(SparkrtMockCounters, errors)

/* Work ordered on one stream (0 = the default stream). Blocking calls are
 * not stream work and are not counted here. */
typedef struct SparkrtMockStreamCounters {
  size_t struct_size;
  uint64_t launches;
  uint64_t h2d_async;
  uint64_t d2h_async;
  uint64_t d2d_async;
  uint64_t memsets_async;
  uint64_t syncs;
  uint64_t events_recorded;
  uint64_t event_waits;
  int32_t destroyed; /* 1 once stream_destroy succeeded */
} SparkrtMockStreamCounters;
#define SPARKRT_MOCK_STREAM_COUNTERS_SIZE \
  SPARKRT_STRUCT_SIZE(SparkrtMockStreamCounters, destroyed)

/* One kernel lookup (kernel_get), in call order. */
typedef struct SparkrtMockLookup {
  size_t struct_size;
  const char* module; /* out */
  const char* entry;  /* out */
  int32_t code;       /* out: 0 resolved, else the absl::StatusCode returned */
  uint64_t kernel_id; /* out: per-device id of the resolved kernel, 0 if failed */
} SparkrtMockLookup;
#define SPARKRT_MOCK_LOOKUP_SIZE SPARKRT_STRUCT_SIZE(SparkrtMockLookup, kernel_id)

/* One recorded launch, in submission order. */
typedef struct SparkrtMockLaunch {
  size_t struct_size;
  const char* module;  /* out */
  const char* entry;   /* out */
  uint64_t kernel_id;  /* out: same id as the lookup that resolved it */
  uint32_t grid[3];    /* out */
  uint32_t block[3];   /* out */
  uint32_t shared_memory_bytes; /* out */
  SparkrtStream stream;         /* out */
  uint32_t num_args;            /* out */
  uint64_t sequence;   /* out: 1-based launch number since open or reset */
} SparkrtMockLaunch;
#define SPARKRT_MOCK_LAUNCH_SIZE SPARKRT_STRUCT_SIZE(SparkrtMockLaunch, sequence)

/* The launch attributes (plugin ABI 1.4) of a recorded launch, as given:
 * 0 and 0 0 0 for a launch without them. */
typedef struct SparkrtMockLaunchAttributes {
  size_t struct_size;
  uint32_t flags;      /* out: SPARKRT_LAUNCH_* bits */
  uint32_t cluster[3]; /* out: blocks; 0 0 0 for no cluster */
} SparkrtMockLaunchAttributes;
#define SPARKRT_MOCK_LAUNCH_ATTRIBUTES_SIZE \
  SPARKRT_STRUCT_SIZE(SparkrtMockLaunchAttributes, cluster)

/* One argument of a recorded launch. The caller supplies the byte buffer;
 * min(size, capacity) bytes are copied. Arguments are at most 4096 bytes. */
typedef struct SparkrtMockArg {
  size_t struct_size;
  uint8_t kind;      /* out: SparkrtArgKind */
  uint32_t size;     /* out: bytes of the argument */
  uint8_t* bytes;    /* in: destination buffer (may be NULL if capacity is 0) */
  uint32_t capacity; /* in: bytes available at `bytes` */
} SparkrtMockArg;
#define SPARKRT_MOCK_ARG_SIZE SPARKRT_STRUCT_SIZE(SparkrtMockArg, capacity)

/* The allocation a device address falls in (live or freed). NotFound when it
 * falls in none. */
typedef struct SparkrtMockPointerInfo {
  size_t struct_size;
  uint64_t alloc_id;      /* out: 1-based, in allocation order */
  SparkrtDevicePtr base;  /* out */
  uint64_t size;          /* out: requested bytes */
  uint64_t offset;        /* out: ptr - base */
  int32_t live;           /* out: 0 once freed */
} SparkrtMockPointerInfo;
#define SPARKRT_MOCK_POINTER_INFO_SIZE SPARKRT_STRUCT_SIZE(SparkrtMockPointerInfo, live)

/* One collective call on a communicator of the device (sparkrt.collectives.v1),
 * recorded once it completed or failed, in completion order. Calls queued in
 * a group are recorded at group_end. */
typedef struct SparkrtMockCollective {
  size_t struct_size;
  SparkrtComm comm;      /* out */
  int32_t kind;          /* out: SparkrtCollectiveKind */
  int32_t dtype;         /* out: SparkrtDataType */
  int32_t reduce_op;     /* out: as given (meaningful for all-reduce, reduce-scatter) */
  int32_t peer;          /* out: root (broadcast) or peer (send, recv), as given */
  uint64_t count;        /* out: elements */
  SparkrtStream stream;  /* out */
  uint64_t sequence;     /* out: 1-based collective record number since open or reset */
  int32_t code;          /* out: 0 completed, else the absl::StatusCode it failed with */
} SparkrtMockCollective;
#define SPARKRT_MOCK_COLLECTIVE_SIZE SPARKRT_STRUCT_SIZE(SparkrtMockCollective, code)

typedef struct SparkrtMockExtension {
  size_t struct_size; /* SPARKRT_MOCK_EXTENSION_SIZE of the plugin's header */

  /* Same semantics as the plugin table's error helpers. */
  SparkrtErrorCodeFn error_code;
  SparkrtErrorMessageFn error_message;
  SparkrtErrorDestroyFn error_destroy;

  /* Clears records, counters (but the live_* state) and injected faults. */
  SparkrtError* (*reset)(SparkrtDevice* device);

  SparkrtError* (*get_counters)(SparkrtDevice* device, SparkrtMockCounters* out);
  /* NotFound for a stream that was never created; a destroyed stream's
   * counters stay readable. */
  SparkrtError* (*get_stream_counters)(SparkrtDevice* device, SparkrtStream stream,
                                       SparkrtMockStreamCounters* out);

  SparkrtError* (*lookup_count)(SparkrtDevice* device, uint64_t* count);
  /* OutOfRange for index >= lookup_count. */
  SparkrtError* (*get_lookup)(SparkrtDevice* device, uint64_t index, SparkrtMockLookup* out);

  /* Number of launch records (not counting dropped ones). */
  SparkrtError* (*launch_count)(SparkrtDevice* device, uint64_t* count);
  SparkrtError* (*get_launch)(SparkrtDevice* device, uint64_t index, SparkrtMockLaunch* out);
  SparkrtError* (*get_launch_arg)(SparkrtDevice* device, uint64_t launch_index,
                                  uint32_t arg_index, SparkrtMockArg* out);

  SparkrtError* (*pointer_info)(SparkrtDevice* device, SparkrtDevicePtr ptr,
                                SparkrtMockPointerInfo* out);

  /* Fault injection. Faults stay armed until cleared, reset or (fail_launch)
   * fired. */
  /* Lookups matching (module, entry) fail with `code` (0: NotFound). NULL or
   * "" for either matches any name. */
  SparkrtError* (*deny_lookup)(SparkrtDevice* device, const char* module, const char* entry,
                               int32_t code);
  /* mem_alloc fails with ResourceExhausted when live bytes would exceed
   * `bytes`. 0 removes the cap (total_memory still applies). */
  SparkrtError* (*cap_memory)(SparkrtDevice* device, uint64_t bytes);
  /* The nth launch from now (1 = the next one) fails with `code` (0:
   * Internal) and is not recorded. nth = 0 disarms. */
  SparkrtError* (*fail_launch)(SparkrtDevice* device, uint64_t nth, int32_t code);
  /* Disarms every injected fault. */
  SparkrtError* (*clear_faults)(SparkrtDevice* device);

  /* Launch recording: on by default, up to
   * SPARKRT_MOCK_DEFAULT_MAX_LAUNCH_RECORDS records; launches beyond the
   * limit (or while off) are counted, not recorded. Counters are always on. */
  SparkrtError* (*set_recording)(SparkrtDevice* device, int32_t record_launches,
                                 uint64_t max_launch_records);

  /* JSON-lines log of every recorded event to `path` (truncated). NULL or ""
   * closes the log. The environment variable SPARKRT_MOCK_LOG=<path> opens
   * one (appending) for every device at open. */
  SparkrtError* (*set_log_path)(SparkrtDevice* device, const char* path);

  /* Collective records (see SparkrtMockCollective); cleared by reset. */
  SparkrtError* (*collective_count)(SparkrtDevice* device, uint64_t* count);
  /* OutOfRange for index >= collective_count. */
  SparkrtError* (*get_collective)(SparkrtDevice* device, uint64_t index,
                                  SparkrtMockCollective* out);

  /* The launch attributes of launch record `index` (OutOfRange past
   * launch_count). Present where struct_size covers it. */
  SparkrtError* (*get_launch_attributes)(SparkrtDevice* device, uint64_t index,
                                         SparkrtMockLaunchAttributes* out);
} SparkrtMockExtension;
#define SPARKRT_MOCK_EXTENSION_SIZE \
  SPARKRT_STRUCT_SIZE(SparkrtMockExtension, get_launch_attributes)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPARKRT_EXTENSIONS_MOCK_H_ */
