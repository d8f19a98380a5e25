#include "sparkrt/sdk/graph_recorder.h"

#include "absl/strings/str_format.h"

namespace sparkrt::sdk {

bool GraphRecorder::capturing(SparkrtStream stream) const {
  if (open_captures_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return open_.contains(stream);
}

absl::Status GraphRecorder::begin(SparkrtStream stream) {
  if (stream == 0)
    return absl::InvalidArgumentError(
        "begin_capture: the default stream (0) cannot be captured; create a stream");
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_.emplace(stream, Graph{}).second)
    return absl::FailedPreconditionError(
        absl::StrFormat("begin_capture: stream %d is already capturing", stream));
  open_captures_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<GraphRecorder::Ended> GraphRecorder::end(SparkrtStream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(stream);
  if (it == open_.end())
    return absl::FailedPreconditionError(
        absl::StrFormat("end_capture: stream %d is not capturing (call begin_capture first)", stream));
  auto graph = std::make_shared<const Graph>(std::move(it->second));
  open_.erase(it);
  open_captures_.fetch_sub(1, std::memory_order_release);
  const SparkrtGraph handle = next_graph_++;
  const uint64_t nodes = graph->size();
  graphs_.emplace(handle, std::move(graph));
  return Ended{handle, nodes};
}

absl::Status GraphRecorder::destroy(SparkrtGraph graph) {
  std::lock_guard<std::mutex> lock(mu_);
  if (graphs_.erase(graph) == 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("graph %d is unknown (never created on this device, or destroyed)", graph));
  return absl::OkStatus();
}

absl::Status GraphRecorder::replay(SparkrtGraph graph, SparkrtStream stream, Device& device) const {
  std::shared_ptr<const Graph> nodes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = graphs_.find(graph);
    if (it == graphs_.end())
      return absl::InvalidArgumentError(absl::StrFormat(
          "graph launch: graph %d is unknown (never created on this device, or destroyed)", graph));
    nodes = it->second;  // keeps the graph alive through a concurrent destroy
  }
  for (const Node& n : *nodes) {
    absl::Status s;
    switch (n.kind) {
      case Node::Kind::kLaunch:
        s = device.launch(Launch{n.kernel, n.grid, n.block, n.shared_memory_bytes, stream,
                                 n.params, n.offsets, n.sizes, n.kinds, n.flags, n.cluster});
        break;
      case Node::Kind::kMemset:
        s = device.memset(n.dst, n.value, n.bytes, stream, false);
        break;
      case Node::Kind::kCopy: {
        SparkrtMemcpyArgs copy = n.copy;
        copy.stream = stream;
        s = device.memcpy(copy);
        break;
      }
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status GraphRecorder::add(SparkrtStream stream, Node node) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(stream);
  if (it == open_.end())
    return absl::FailedPreconditionError(absl::StrFormat("stream %d is not capturing", stream));
  it->second.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status GraphRecorder::capture_launch(SparkrtStream stream, const Launch& l) {
  Node n;
  n.kind = Node::Kind::kLaunch;
  n.kernel = l.kernel;
  n.grid = l.grid;
  n.block = l.block;
  n.shared_memory_bytes = l.shared_memory_bytes;
  n.params.assign(l.params.begin(), l.params.end());
  n.offsets.assign(l.arg_offsets.begin(), l.arg_offsets.end());
  n.sizes.assign(l.arg_sizes.begin(), l.arg_sizes.end());
  n.kinds.assign(l.arg_kinds.begin(), l.arg_kinds.end());
  n.flags = l.flags;
  n.cluster = l.cluster;
  return add(stream, std::move(n));
}

absl::Status GraphRecorder::capture_memset(SparkrtStream stream, SparkrtDevicePtr dst, uint8_t value,
                                           uint64_t bytes) {
  Node n;
  n.kind = Node::Kind::kMemset;
  n.dst = dst;
  n.value = value;
  n.bytes = bytes;
  return add(stream, std::move(n));
}

absl::Status GraphRecorder::capture_copy(SparkrtStream stream, const SparkrtMemcpyArgs& copy) {
  Node n;
  n.kind = Node::Kind::kCopy;
  n.copy = copy;
  return add(stream, std::move(n));
}

namespace {

GraphCapable* capable(SparkrtDevice* d) {
  return d == nullptr ? nullptr : dynamic_cast<GraphCapable*>(reinterpret_cast<Device*>(d));
}

template <typename Args, typename Fn>
SparkrtError* graph_call(const char* call, Args* a, size_t needed, Fn&& fn) noexcept {
  return detail::guard(call, a, needed, [&]() -> absl::Status {
    GraphCapable* g = capable(a->device);
    if (g == nullptr)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: null device, or a device without recorded graphs", call));
    return fn(*g, *reinterpret_cast<Device*>(a->device));
  });
}

SparkrtError* begin_capture(SparkrtGraphCaptureArgs* a) {
  return graph_call("begin_capture", a, SPARKRT_GRAPH_CAPTURE_ARGS_SIZE,
                    [&](GraphCapable& g, Device&) -> absl::Status {
                      if (a->stream != 0) {
                        if (auto s = g.check_stream(a->stream); !s.ok()) return s;
                      }
                      return g.graphs().begin(a->stream);
                    });
}

SparkrtError* end_capture(SparkrtGraphEndCaptureArgs* a) {
  return graph_call("end_capture", a, SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE,
                    [&](GraphCapable& g, Device&) -> absl::Status {
                      auto ended = g.graphs().end(a->stream);
                      if (!ended.ok()) return ended.status();
                      a->graph = ended->graph;
                      a->num_nodes = ended->num_nodes;
                      return absl::OkStatus();
                    });
}

SparkrtError* launch_graph(SparkrtGraphLaunchArgs* a) {
  return graph_call("graph launch", a, SPARKRT_GRAPH_LAUNCH_ARGS_SIZE,
                    [&](GraphCapable& g, Device& d) -> absl::Status {
                      if (auto s = g.check_stream(a->stream); !s.ok()) return s;
                      return g.graphs().replay(a->graph, a->stream, d);
                    });
}

SparkrtError* destroy_graph(SparkrtGraphDestroyArgs* a) {
  return graph_call("graph destroy", a, SPARKRT_GRAPH_DESTROY_ARGS_SIZE,
                    [&](GraphCapable& g, Device&) { return g.graphs().destroy(a->graph); });
}

}  // namespace

const SparkrtGraphExtension* recorded_graph_extension() {
  // The SDK's error functions: they know its static out-of-memory error.
  static const SparkrtGraphExtension table = {
      SPARKRT_GRAPH_EXTENSION_SIZE, &detail::error_code, &detail::error_message,
      &detail::error_destroy,       &begin_capture,      &end_capture,
      &launch_graph,                &destroy_graph,
  };
  return &table;
}

}  // namespace sparkrt::sdk
