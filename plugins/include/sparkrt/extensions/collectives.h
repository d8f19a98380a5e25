/* sparkrt.collectives.v1: communicators over several devices of one backend
 * and the collectives an inference engine splits a model with (all-reduce,
 * all-gather, reduce-scatter, broadcast, send/receive), each ordered on a
 * stream. The semantics are NCCL's: on cuda the calls are NCCL's own, and the
 * host backends (cpu, mock) implement the same contract over host memory.
 *
 * Fetch the table by name through get_extension (sparkrt::Communicator in
 * C++ wraps it); NULL means the backend has no collectives. A table may be
 * returned while its library is missing (cuda without libnccl.so.2): then
 * `library` and every other call fail with FAILED_PRECONDITION saying what
 * was tried.
 *
 * Communicators. A communicator is one rank of a clique of `num_ranks`
 * ranks, each on its own device:
 *  - comm_init_all: every rank in this process, devices[i] is rank i
 *    (devices of this plugin, each at most once).
 *  - get_unique_id + comm_init_rank: one rank per call, typically one per
 *    process. get_unique_id makes the id of a new clique; the application
 *    moves its bytes to every rank (a file, a socket, MPI) and each calls
 *    comm_init_rank with the same id, num_ranks and its own rank. The call
 *    returns once all ranks have joined; the host backends fail it after
 *    the timeout below, NCCL waits as long as its own bootstrap does.
 *  A communicator handle is plugin-issued and never 0; a destroyed one is
 *  refused (INVALID_ARGUMENT) by every call.
 *
 * Collectives (count in elements of `dtype`, as in NCCL):
 *   ALL_REDUCE      send, recv: count each; recv = reduce over ranks of send
 *   ALL_GATHER      send: count; recv: num_ranks * count, rank r's at r * count
 *   REDUCE_SCATTER  send: num_ranks * count; recv: count, block `rank` of the
 *                   reduction
 *   BROADCAST       send (read on rank `peer` only), recv: count; every recv
 *                   gets the root's send
 *   SEND, RECV      count elements to / from rank `peer`; a send is matched
 *                   with the peer's next receive from this rank, in order
 *  In place is allowed as in NCCL: all-reduce and broadcast with send ==
 *  recv, all-gather with send == recv + rank * count, reduce-scatter with
 *  recv == send + rank * count. Other overlaps are undefined.
 *  Every rank of a clique must issue the same collectives in the same order
 *  with the same kind, count, dtype, reduce op and root. The host backends
 *  check this and fail the mismatched call on every rank with
 *  INVALID_ARGUMENT (no data moved, the communicator stays usable); NCCL
 *  cannot, and may hang or compute garbage.
 *
 * Waiting. A collective completes when every rank has issued it. On cuda it
 * is queued on the stream and the call returns at once; on the host backends
 * the call itself waits for the peers. So one thread that drives several
 * ranks must put their calls between group_start and group_end (NCCL's rule):
 * inside a group, calls are only queued, and group_end issues them all and
 * (host backends) waits. Groups nest; they are per thread.
 *  - The host backends bound every wait by SPARKRT_COLLECTIVE_TIMEOUT_S
 *    (seconds, default 300): a rank that waits longer fails with
 *    DEADLINE_EXCEEDED naming the ranks that did not arrive, and aborts the
 *    clique, so every other waiting rank fails with ABORTED instead of
 *    waiting forever.
 *  - comm_abort ends a communicator at once: its pending and later
 *    collectives fail with ABORTED on every rank of the clique (host
 *    backends; NCCL aborts the local rank). A rank whose process exits, or
 *    whose communicator is destroyed, aborts the clique in the same way.
 *    An aborted communicator still needs comm_destroy.
 *  - comm_status reports an asynchronous error (NCCL's ncclCommGetAsyncError):
 *    OK while the communicator is healthy.
 *
 * Threads: a communicator is used by one thread at a time (NCCL's rule);
 * different communicators may be used from different threads at once.
 * Destroy every communicator of a device before closing the device.
 *
 * The host backends (cpu, mock; sparkrt/sdk/host_collectives.h) also:
 *  - compute f16 and bf16 reductions in f32, over the ranks in rank order,
 *    rounding once to nearest even; f32 sums add in rank order; max and min
 *    of floats follow fmax/fmin (a NaN operand is ignored); i32 and u8 sums
 *    wrap;
 *  - refuse a send whose receive has another count or dtype (both fail with
 *    INVALID_ARGUMENT, nothing moved);
 *  - check every range against the device's live allocations before
 *    anything is issued; inside a group, a call that fails makes group_end
 *    issue nothing of the group and return that call's error;
 *  - refuse a collective on a stream that is capturing a graph
 *    (FAILED_PRECONDITION: collectives are not recorded into graphs);
 *  - take comm_init_all devices of distinct device indices (a device index
 *    opened twice is refused);
 *  - answer comm_init_rank with INVALID_ARGUMENT for bytes that are not
 *    their unique id, UNAVAILABLE when the process that made the id has
 *    exited or closed the device it was made on, and FAILED_PRECONDITION
 *    when it is called inside a group (it waits for every rank);
 *  - abort and forget a closing device's communicators (ABORTED on the
 *    other ranks; the handles become unknown).
 *
 * Versioning: new calls are appended to the table (check struct_size); a
 * change to an existing call gets a new name ("sparkrt.collectives.v2").
 */
#ifndef SPARKRT_EXTENSIONS_COLLECTIVES_H_
#define SPARKRT_EXTENSIONS_COLLECTIVES_H_

#include "sparkrt/plugin_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPARKRT_COLLECTIVES_EXTENSION_NAME "sparkrt.collectives.v1"

typedef uint64_t SparkrtComm; /* plugin-issued, never 0 */

/* The id of a clique that is not yet formed: opaque bytes, copied by value.
 * A plugin checks the bytes it is given (they may come from a file). */
#define SPARKRT_UNIQUE_ID_BYTES 128
typedef struct SparkrtUniqueId {
  uint8_t bytes[SPARKRT_UNIQUE_ID_BYTES];
} SparkrtUniqueId;

typedef enum SparkrtDataType {
  SPARKRT_DTYPE_U8 = 1,
  SPARKRT_DTYPE_I32 = 2,  /* sums wrap modulo 2^32 */
  SPARKRT_DTYPE_F16 = 3,
  SPARKRT_DTYPE_BF16 = 4,
  SPARKRT_DTYPE_F32 = 5
} SparkrtDataType;

/* Bytes of one element of `dtype`, 0 for a value outside SparkrtDataType:
 * the one definition every side of the ABI uses. It takes the raw value,
 * since a caller's dtype may lie outside the enumeration. */
static inline size_t sparkrt_dtype_size(int32_t dtype) {
  switch (dtype) {
    case SPARKRT_DTYPE_U8: return 1;
    case SPARKRT_DTYPE_F16:
    case SPARKRT_DTYPE_BF16: return 2;
    case SPARKRT_DTYPE_I32:
    case SPARKRT_DTYPE_F32: return 4;
    default: return 0;
  }
}

typedef enum SparkrtReduceOp {
  SPARKRT_REDUCE_SUM = 1,
  SPARKRT_REDUCE_MAX = 2,
  SPARKRT_REDUCE_MIN = 3
} SparkrtReduceOp;

typedef enum SparkrtCollectiveKind {
  SPARKRT_COLLECTIVE_ALL_REDUCE = 1,
  SPARKRT_COLLECTIVE_ALL_GATHER = 2,
  SPARKRT_COLLECTIVE_REDUCE_SCATTER = 3,
  SPARKRT_COLLECTIVE_BROADCAST = 4,
  SPARKRT_COLLECTIVE_SEND = 5,
  SPARKRT_COLLECTIVE_RECV = 6
} SparkrtCollectiveKind;

/* The library behind the table: "NCCL" and its version (NCCL_VERSION_CODE,
 * e.g. 22105 for 2.21.5), or the host implementation's name and version. */
typedef struct SparkrtCollectivesLibraryArgs {
  size_t struct_size;
  char name[64];    /* out, NUL-terminated */
  uint32_t version; /* out */
} SparkrtCollectivesLibraryArgs;
#define SPARKRT_COLLECTIVES_LIBRARY_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(SparkrtCollectivesLibraryArgs, version)

typedef struct SparkrtUniqueIdArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtUniqueId id; /* out */
} SparkrtUniqueIdArgs;
#define SPARKRT_UNIQUE_ID_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtUniqueIdArgs, id)

typedef struct SparkrtCommInitAllArgs {
  size_t struct_size;
  int32_t num_devices;          /* >= 1 */
  SparkrtDevice* const* devices; /* num_devices distinct devices of this plugin */
  SparkrtComm* comms;           /* out: num_devices handles, comms[i] is rank i */
} SparkrtCommInitAllArgs;
#define SPARKRT_COMM_INIT_ALL_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtCommInitAllArgs, comms)

typedef struct SparkrtCommInitRankArgs {
  size_t struct_size;
  SparkrtDevice* device;
  int32_t num_ranks; /* >= 1, the same on every rank */
  int32_t rank;      /* 0 <= rank < num_ranks, each taken once */
  SparkrtUniqueId id;
  SparkrtComm comm; /* out */
} SparkrtCommInitRankArgs;
#define SPARKRT_COMM_INIT_RANK_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtCommInitRankArgs, comm)

/* Used by comm_destroy, comm_abort and comm_status. */
typedef struct SparkrtCommArgs {
  size_t struct_size;
  SparkrtComm comm;
} SparkrtCommArgs;
#define SPARKRT_COMM_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtCommArgs, comm)

typedef struct SparkrtCollectiveArgs {
  size_t struct_size;
  SparkrtComm comm;
  SparkrtCollectiveKind kind;
  SparkrtDataType dtype;
  SparkrtReduceOp reduce_op; /* ALL_REDUCE, REDUCE_SCATTER; ignored otherwise */
  int32_t peer;              /* BROADCAST: the root; SEND, RECV: the other rank */
  SparkrtDevicePtr send;     /* not read by RECV (may be 0) */
  SparkrtDevicePtr recv;     /* not written by SEND (may be 0) */
  uint64_t count;            /* elements; 0 moves nothing but still matches */
  SparkrtStream stream;      /* of the communicator's device; 0 allowed */
} SparkrtCollectiveArgs;
#define SPARKRT_COLLECTIVE_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtCollectiveArgs, stream)

/* Used by group_start and group_end. */
typedef struct SparkrtGroupArgs {
  size_t struct_size;
} SparkrtGroupArgs;
#define SPARKRT_GROUP_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtGroupArgs, struct_size)

typedef struct SparkrtCollectivesExtension {
  size_t struct_size; /* SPARKRT_COLLECTIVES_EXTENSION_SIZE of the plugin's header */

  SparkrtErrorCodeFn error_code;
  SparkrtErrorMessageFn error_message;
  SparkrtErrorDestroyFn error_destroy;

  SparkrtError* (*library)(SparkrtCollectivesLibraryArgs* args);
  SparkrtError* (*get_unique_id)(SparkrtUniqueIdArgs* args);
  SparkrtError* (*comm_init_all)(SparkrtCommInitAllArgs* args);
  SparkrtError* (*comm_init_rank)(SparkrtCommInitRankArgs* args);
  SparkrtError* (*comm_destroy)(SparkrtCommArgs* args);
  SparkrtError* (*comm_abort)(SparkrtCommArgs* args);
  SparkrtError* (*comm_status)(SparkrtCommArgs* args);
  SparkrtError* (*collective)(SparkrtCollectiveArgs* args);
  SparkrtError* (*group_start)(SparkrtGroupArgs* args);
  SparkrtError* (*group_end)(SparkrtGroupArgs* args);
} SparkrtCollectivesExtension;
#define SPARKRT_COLLECTIVES_EXTENSION_SIZE \
  SPARKRT_STRUCT_SIZE(SparkrtCollectivesExtension, group_end)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPARKRT_EXTENSIONS_COLLECTIVES_H_ */
