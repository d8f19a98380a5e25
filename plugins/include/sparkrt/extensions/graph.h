/* sparkrt.graph.v1: record the work queued on a stream once, replay it many
 * times with one call. On CUDA this is stream capture into a CUDA graph; a
 * backend without graphs may record the calls and replay them itself.
 *
 * In C++, use sparkrt::Device's begin_capture, end_capture, launch_graph and
 * destroy_graph, which call this table (and which the runtime's trace sees);
 * in C, sparkrt_graph_* (sparkrt/sparkrt_c.h). Directly: fetch the table by
 * name through get_extension (sparkrt::Device::extension_as); NULL means the
 * backend has no graphs.
 *
 *   const SparkrtGraphExtension* g = dev->extension_as<SparkrtGraphExtension>(
 *       SPARKRT_GRAPH_EXTENSION_NAME);
 *   SparkrtGraphCaptureArgs begin = {SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, dev->native_handle(), s};
 *   g->begin_capture(&begin);
 *   ... launches, async copies and memsets on stream s ...
 *   SparkrtGraphEndCaptureArgs end = {SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE, dev->native_handle(), s};
 *   g->end_capture(&end);            // end.graph: the replayable handle
 *   SparkrtGraphLaunchArgs run = {SPARKRT_GRAPH_LAUNCH_ARGS_SIZE, dev->native_handle(), end.graph, s};
 *   g->launch(&run);                 // as often as needed, on any stream
 *
 * Rules:
 *  - Capture works on a created stream, not on the default stream (0).
 *  - Between begin_capture and end_capture, work queued on the stream is
 *    recorded, not run. Blocking calls (blocking copies, synchronize, alloc
 *    and free) on the capturing thread are not permitted while it captures and
 *    make end_capture fail; queue async work only.
 *  - A graph replays the recorded arguments: the same pointers, sizes and
 *    values each time. Change the data behind the pointers, not the pointers.
 *  - A graph lives until destroy or until its device is closed.
 *  - Refused with INVALID_ARGUMENT: begin_capture on stream 0 or on an unknown
 *    stream, launch or destroy of an unknown or destroyed graph, and args
 *    whose struct_size is too small. end_capture on a stream that is not
 *    capturing fails.
 *  - Errors use the same convention as plugin_api.h; the table carries the
 *    error helpers so a user of the extension needs nothing else.
 *
 * Versioning: new calls are appended to the table (check struct_size); a
 * change to an existing call gets a new name ("sparkrt.graph.v2").
 */
#ifndef SPARKRT_EXTENSIONS_GRAPH_H_
#define SPARKRT_EXTENSIONS_GRAPH_H_

#include "sparkrt/plugin_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPARKRT_GRAPH_EXTENSION_NAME "sparkrt.graph.v1"

typedef uint64_t SparkrtGraph; /* plugin-issued, never 0 */

typedef struct SparkrtGraphCaptureArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtStream stream; /* not 0 */
} SparkrtGraphCaptureArgs;
#define SPARKRT_GRAPH_CAPTURE_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtGraphCaptureArgs, stream)

typedef struct SparkrtGraphEndCaptureArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtStream stream;
  SparkrtGraph graph;  /* out */
  uint64_t num_nodes;  /* out: operations recorded */
} SparkrtGraphEndCaptureArgs;
#define SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE \
  SPARKRT_STRUCT_SIZE(SparkrtGraphEndCaptureArgs, num_nodes)

/* Queues one replay of `graph` on `stream` (0 allowed). */
typedef struct SparkrtGraphLaunchArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtGraph graph;
  SparkrtStream stream;
} SparkrtGraphLaunchArgs;
#define SPARKRT_GRAPH_LAUNCH_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtGraphLaunchArgs, stream)

/* Frees the graph; replays already queued still complete. */
typedef struct SparkrtGraphDestroyArgs {
  size_t struct_size;
  SparkrtDevice* device;
  SparkrtGraph graph;
} SparkrtGraphDestroyArgs;
#define SPARKRT_GRAPH_DESTROY_ARGS_SIZE SPARKRT_STRUCT_SIZE(SparkrtGraphDestroyArgs, graph)

typedef struct SparkrtGraphExtension {
  size_t struct_size; /* SPARKRT_GRAPH_EXTENSION_SIZE of the plugin's header */

  SparkrtErrorCodeFn error_code;
  SparkrtErrorMessageFn error_message;
  SparkrtErrorDestroyFn error_destroy;

  SparkrtError* (*begin_capture)(SparkrtGraphCaptureArgs* args);
  SparkrtError* (*end_capture)(SparkrtGraphEndCaptureArgs* args);
  SparkrtError* (*launch)(SparkrtGraphLaunchArgs* args);
  SparkrtError* (*destroy)(SparkrtGraphDestroyArgs* args);
} SparkrtGraphExtension;
#define SPARKRT_GRAPH_EXTENSION_SIZE SPARKRT_STRUCT_SIZE(SparkrtGraphExtension, destroy)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPARKRT_EXTENSIONS_GRAPH_H_ */
