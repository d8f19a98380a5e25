// The sparkrt.graph.v1 extension table of the CUDA backend.
#ifndef SPARKRT_BACKENDS_CUDA_CUDA_GRAPH_H_
#define SPARKRT_BACKENDS_CUDA_CUDA_GRAPH_H_

#include "sparkrt/extensions/graph.h"

namespace sparkrt::cuda {

// The table, built once; the error helpers are the plugin table's own so
// errors from either are released the same way.
const SparkrtGraphExtension* graph_extension(SparkrtErrorCodeFn error_code,
                                             SparkrtErrorMessageFn error_message,
                                             SparkrtErrorDestroyFn error_destroy);

}  // namespace sparkrt::cuda

#endif  // SPARKRT_BACKENDS_CUDA_CUDA_GRAPH_H_
