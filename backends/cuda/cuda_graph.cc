// sparkrt.graph.v1 on CUDA: stream capture into a CUDA graph, instantiated
// once at end_capture and replayed with cuGraphLaunch.
#include "cuda_graph.h"

#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "cuda_device.h"

namespace sparkrt::cuda {

absl::Status CudaDevice::begin_capture(SparkrtStream handle) {
  if (handle == 0) {
    return absl::InvalidArgumentError(
        "graph begin_capture: the default stream (0) cannot be captured; create a stream");
  }
  auto s = stream(handle, "graph begin_capture");
  if (!s.ok()) return s.status();
  SPARKRT_RETURN_IF_ERROR(make_current());
  // THREAD_LOCAL: only the capturing thread is barred from unsafe calls
  // (blocking copies, synchronize, alloc); other threads keep working.
  return check(driver().StreamBeginCapture(*s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
               "cuStreamBeginCapture", absl::StrFormat("graph begin_capture(stream 0x%x)", handle));
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> CudaDevice::end_capture(SparkrtStream handle) {
  auto s = stream(handle, "graph end_capture");
  if (!s.ok()) return s.status();
  SPARKRT_RETURN_IF_ERROR(make_current());
  const CudaDriver& d = driver();
  const std::string what = absl::StrFormat("graph end_capture(stream 0x%x)", handle);
  CUgraph graph = nullptr;
  if (CUresult r = d.StreamEndCapture(*s, &graph); r != CUDA_SUCCESS) {
    absl::Status st = driver_error(r, "cuStreamEndCapture", what);
    if (r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED || r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT ||
        r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
      return absl::Status(
          st.code(), absl::StrFormat("%s; a call that is not allowed while capturing (a blocking "
                                     "copy, synchronize, alloc/free, or use of the default "
                                     "stream) broke the capture: queue only async work on the "
                                     "captured stream",
                                     st.message()));
    }
    return st;
  }
  size_t nodes = 0;
  CUgraphExec exec = nullptr;
  absl::Status st = check(d.GraphGetNodes(graph, nullptr, &nodes), "cuGraphGetNodes", what);
  if (st.ok()) st = check(d.GraphInstantiate(&exec, graph, 0), "cuGraphInstantiate", what);
  // The executable graph is independent of the graph it was made from.
  (void)d.GraphDestroy(graph);
  if (!st.ok()) return st;
  auto h = graphs_.insert(exec);
  if (!h) {
    (void)d.GraphExecDestroy(exec);
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: %u graphs already exist on this device; destroy unused ones", what,
                        HandleTable<CUgraphExec>::kCapacity));
  }
  return std::make_pair(*h, uint64_t{nodes});
}

absl::Status CudaDevice::launch_graph(uint64_t graph, SparkrtStream stream_handle) {
  CUgraphExec exec = graphs_.lookup(graph);
  if (exec == nullptr) [[unlikely]]
    return unknown_handle("graph", graph, "graph launch");
  CUstream s = nullptr;
  if (stream_handle != 0) {
    s = streams_.lookup(stream_handle);
    if (s == nullptr) [[unlikely]]
      return unknown_handle("stream", stream_handle, "graph launch");
  }
  SPARKRT_RETURN_IF_ERROR(make_current_cached());
  CUresult r = driver().GraphLaunch(exec, s);
  if (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_INVALID_HANDLE) [[unlikely]] {
    forget_current_context();  // someone else switched contexts: see launch()
    SPARKRT_RETURN_IF_ERROR(make_current());
    r = driver().GraphLaunch(exec, s);
  }
  if (r != CUDA_SUCCESS) [[unlikely]]
    return driver_error(r, "cuGraphLaunch",
                        absl::StrFormat("graph launch(0x%x, stream 0x%x)", graph, stream_handle));
  return absl::OkStatus();
}

absl::Status CudaDevice::destroy_graph(uint64_t graph) {
  CUgraphExec exec = graphs_.remove(graph);
  if (exec == nullptr) return unknown_handle("graph", graph, "graph destroy");
  SPARKRT_RETURN_IF_ERROR(make_current());
  return SPARKRT_CU(GraphExecDestroy, exec);
}

namespace {

using sdk::detail::guard;

SparkrtError* begin_capture(SparkrtGraphCaptureArgs* a) {
  return guard("graph begin_capture", a, SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, [&] {
    if (a->device == nullptr) return absl::InvalidArgumentError("null device handle");
    return from_handle(a->device)->begin_capture(a->stream);
  });
}

SparkrtError* end_capture(SparkrtGraphEndCaptureArgs* a) {
  return guard("graph end_capture", a, SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE, [&] {
    if (a->device == nullptr) return absl::InvalidArgumentError("null device handle");
    auto r = from_handle(a->device)->end_capture(a->stream);
    if (!r.ok()) return r.status();
    a->graph = r->first;
    a->num_nodes = r->second;
    return absl::OkStatus();
  });
}

SparkrtError* launch(SparkrtGraphLaunchArgs* a) {
  return guard("graph launch", a, SPARKRT_GRAPH_LAUNCH_ARGS_SIZE, [&] {
    if (a->device == nullptr) return absl::InvalidArgumentError("null device handle");
    return from_handle(a->device)->launch_graph(a->graph, a->stream);
  });
}

SparkrtError* destroy(SparkrtGraphDestroyArgs* a) {
  return guard("graph destroy", a, SPARKRT_GRAPH_DESTROY_ARGS_SIZE, [&] {
    if (a->device == nullptr) return absl::InvalidArgumentError("null device handle");
    return from_handle(a->device)->destroy_graph(a->graph);
  });
}

}  // namespace

const SparkrtGraphExtension* graph_extension(SparkrtErrorCodeFn error_code,
                                             SparkrtErrorMessageFn error_message,
                                             SparkrtErrorDestroyFn error_destroy) {
  static const SparkrtGraphExtension table = {
      SPARKRT_GRAPH_EXTENSION_SIZE,
      error_code,
      error_message,
      error_destroy,
      &begin_capture,
      &end_capture,
      &launch,
      &destroy,
  };
  return &table;
}

}  // namespace sparkrt::cuda
