// sparkrt.graph.v1 for backends that execute on the host (the mock, the cpu
// reference backend): stream work queued during a capture is recorded
// instead of run, and a replay issues the recorded calls again, through the
// device's own methods, on the replay stream.
//
// A device opts in by deriving from GraphCapable and, at the top of each of
// its stream-ordered operations (launch, async memset and copies):
//
//   if (graphs().capturing(stream)) return graphs().capture_launch(stream, launch);
//
// and by returning recorded_graph_extension() from its backend's extension()
// for SPARKRT_GRAPH_EXTENSION_NAME. Like a CUDA graph, a replay reuses the
// recorded arguments (pointers and values); host memory of a recorded H2D
// copy is read again at each replay.
#ifndef SPARKRT_SDK_GRAPH_RECORDER_H_
#define SPARKRT_SDK_GRAPH_RECORDER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/plugin_sdk.h"

namespace sparkrt::sdk {

class GraphRecorder {
 public:
  // Cheap when nothing captures (one atomic load), since launches ask it.
  bool capturing(SparkrtStream stream) const;

  absl::Status begin(SparkrtStream stream);
  struct Ended {
    SparkrtGraph graph;
    uint64_t num_nodes;
  };
  absl::StatusOr<Ended> end(SparkrtStream stream);
  absl::Status destroy(SparkrtGraph graph);
  // Issues the graph's calls on `stream` through `device`.
  absl::Status replay(SparkrtGraph graph, SparkrtStream stream, Device& device) const;

  absl::Status capture_launch(SparkrtStream stream, const Launch& launch);
  absl::Status capture_memset(SparkrtStream stream, SparkrtDevicePtr dst, uint8_t value,
                              uint64_t bytes);
  absl::Status capture_copy(SparkrtStream stream, const SparkrtMemcpyArgs& copy);

 private:
  struct Node {
    enum class Kind { kLaunch, kMemset, kCopy } kind = Kind::kLaunch;
    // kLaunch
    Kernel* kernel = nullptr;
    std::array<uint32_t, 3> grid{}, block{};
    uint32_t shared_memory_bytes = 0;
    std::vector<std::byte> params;
    std::vector<uint32_t> offsets, sizes;
    std::vector<uint8_t> kinds;
    uint32_t flags = 0;
    std::array<uint32_t, 3> cluster{};
    // kMemset
    SparkrtDevicePtr dst = 0;
    uint8_t value = 0;
    uint64_t bytes = 0;
    // kCopy
    SparkrtMemcpyArgs copy{};
  };
  using Graph = std::vector<Node>;

  absl::Status add(SparkrtStream stream, Node node);

  mutable std::mutex mu_;
  std::atomic<int> open_captures_{0};
  std::map<SparkrtStream, Graph> open_;
  std::map<SparkrtGraph, std::shared_ptr<const Graph>> graphs_;
  SparkrtGraph next_graph_ = 1;
};

// Implemented by devices that record graphs.
class GraphCapable {
 public:
  virtual ~GraphCapable() = default;
  virtual GraphRecorder& graphs() = 0;
  // OK when `stream` is a live stream of this device.
  virtual absl::Status check_stream(SparkrtStream stream) = 0;
};

// The sparkrt.graph.v1 table for devices that derive from GraphCapable.
const SparkrtGraphExtension* recorded_graph_extension();

}  // namespace sparkrt::sdk

#endif  // SPARKRT_SDK_GRAPH_RECORDER_H_
