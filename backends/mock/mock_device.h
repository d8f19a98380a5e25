// The recording mock device: simulated memory (sparkrt/sdk/address_space.h), streams and
// events as validated handles, modules that know their PTX entries, launches
// recorded instead of run, counters for everything, fault injection, and an
// optional JSON-lines log (mock_log.h). One mutex per device guards all of
// it: this is a test double, so correctness and exact counts come before
// throughput.
#ifndef SPARKRT_BACKENDS_MOCK_MOCK_DEVICE_H_
#define SPARKRT_BACKENDS_MOCK_MOCK_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mock_log.h"
#include "sparkrt/extensions/mock.h"
#include "sparkrt/plugin_sdk.h"
#include "sparkrt/sdk/address_space.h"
#include "sparkrt/sdk/graph_recorder.h"
#include "sparkrt/sdk/host_collectives.h"

namespace sparkrt::mock {

class MockDevice;

// Entry names declared in PTX text (`.entry <name>`), in order of appearance.
std::vector<std::string> ptx_entries(std::string_view ptx);

// A resolved (module, entry). Owned by its module; the names point into the
// device's interned strings, so records that copy them outlive the module.
class MockKernel final : public sdk::Kernel {
 public:
  MockKernel(const MockDevice* owner, uint64_t kernel_id, const char* module_name,
             const char* entry_name, std::span<const SparkrtParamInfo> declared)
      : device(owner), id(kernel_id), module(module_name), entry(entry_name),
        params(declared.begin(), declared.end()) {
    for (uint32_t i = 0; i < params.size(); ++i)
      if (params[i].size == sizeof(uint64_t)) wide_params.push_back(i);
  }

  const MockDevice* const device;
  const uint64_t id;  // per device, 1-based, in resolution order
  const char* const module;
  const char* const entry;
  const std::vector<SparkrtParamInfo> params;  // as the runtime declared them
  std::vector<uint32_t> wide_params;           // the 8-byte ones: where pointers can be
};

class MockModule final : public sdk::Module {
 public:
  MockModule(MockDevice& device, const char* name, std::vector<std::string> entries)
      : device_(device), name_(name), entries_(std::move(entries)) {}
  // Unloading tells the device (unless the device itself is closing).
  ~MockModule() override;

  absl::StatusOr<sdk::Kernel*> get_kernel(std::string_view entry,
                                          std::span<const SparkrtParamInfo> params) override;

 private:
  friend class MockDevice;
  MockDevice& device_;
  const char* name_;  // interned
  std::vector<std::string> entries_;
  // Guarded by the device's mutex: the same (module, entry) always yields the
  // same kernel object.
  absl::flat_hash_map<std::string, std::unique_ptr<MockKernel>> kernels_;
  bool device_closing_ = false;
};

class MockDevice final : public sdk::Device,
                         public sdk::GraphCapable,
                         public sdk::HostCollectiveDevice {
 public:
  static constexpr uint64_t kTotalMemory = uint64_t{16} << 30;
  static constexpr uint64_t kAddressBase = 0x7f0000000000;
  static constexpr uint64_t kAddressSpan = uint64_t{1} << 40;  // per device

  // `serial` distinguishes devices of one process: each gets its own address
  // range, so a pointer from another mock device is caught. `index` is the
  // index it was opened at. `on_close` runs first thing in the destructor
  // (the backend's registry uses it).
  MockDevice(uint64_t serial, int index, void (*on_close)(sdk::Device*));
  ~MockDevice() override;

  // The calls are defined by responsibility, one file each (README.md).

  // ---- mock_options.cc: properties and the environment ----
  // Opens the SPARKRT_MOCK_LOG file, when set, and applies
  // SPARKRT_MOCK_PROPERTIES (README.md).
  absl::Status init_from_environment();
  absl::Status properties(SparkrtDeviceProperties& out) override;

  // ---- mock_device.cc: lifetime ----
  // Writes the log's device_close line and closes the log; an error says a
  // write of it failed (the device is destroyed either way).
  absl::Status close() override;

  // ---- mock_module.cc: modules (and, from MockModule, kernel lookups) ----
  absl::StatusOr<std::unique_ptr<sdk::Module>> load_module(
      std::string_view name, SparkrtImageFormat format, std::span<const std::byte> image) override;

  // ---- mock_memory.cc: memory and copies ----
  absl::StatusOr<SparkrtDevicePtr> alloc(uint64_t bytes) override;
  absl::Status free(SparkrtDevicePtr ptr) override;
  absl::StatusOr<void*> host_alloc(uint64_t bytes) override;
  absl::Status host_free(void* ptr) override;
  absl::Status memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes, SparkrtStream stream,
                      bool blocking) override;
  absl::Status memcpy(const SparkrtMemcpyArgs& copy) override;

  // ---- mock_streams.cc: streams and events ----
  absl::StatusOr<SparkrtStream> create_stream() override;
  absl::Status destroy_stream(SparkrtStream stream) override;
  absl::Status synchronize(SparkrtStream stream) override;
  absl::StatusOr<SparkrtEvent> create_event() override;
  absl::Status destroy_event(SparkrtEvent event) override;
  absl::Status record_event(SparkrtEvent event, SparkrtStream stream) override;
  absl::Status synchronize_event(SparkrtEvent event) override;
  absl::Status wait_event(SparkrtStream stream, SparkrtEvent event) override;
  absl::StatusOr<float> elapsed_ms(SparkrtEvent start, SparkrtEvent end) override;
  // sdk::GraphCapable: capture records calls, replays re-issue them.
  sdk::GraphRecorder& graphs() override { return graphs_; }
  absl::Status check_stream(SparkrtStream stream) override;

  // ---- mock_collectives.cc: sdk::HostCollectiveDevice, the collective records ----
  absl::Status with_collective_memory(SparkrtStream stream, std::string_view call,
                                      CollectiveMemoryFn fn) override;
  void on_collective(const sdk::HostCollectiveCall& call) override;
  uint64_t collective_count();
  absl::Status collective_record(uint64_t index, SparkrtMockCollective& out);

  // ---- mock_launch.cc: launch checks, recording and its log line ----
  absl::Status launch(const sdk::Launch& launch) override;

  // ---- mock_inspect.cc: the sparkrt.mock.v1 extension (sparkrt/extensions/mock.h) ----
  void reset();
  void counters(SparkrtMockCounters& out);
  absl::Status stream_counters(SparkrtStream stream, SparkrtMockStreamCounters& out);
  uint64_t lookup_count();
  absl::Status lookup(uint64_t index, SparkrtMockLookup& out);
  uint64_t launch_count();
  absl::Status launch_record(uint64_t index, SparkrtMockLaunch& out);
  absl::Status launch_attributes(uint64_t index, SparkrtMockLaunchAttributes& out);
  absl::Status launch_arg(uint64_t index, uint32_t arg, SparkrtMockArg& out);
  absl::Status pointer_info(SparkrtDevicePtr ptr, SparkrtMockPointerInfo& out);
  void deny_lookup(std::string module, std::string entry, absl::StatusCode code);
  void cap_memory(uint64_t bytes);
  void fail_launch(uint64_t nth, absl::StatusCode code);
  void clear_faults();
  void set_recording(bool record_launches, uint64_t max_launch_records);
  absl::Status set_log_path(std::string_view path);

 private:
  friend class MockModule;

  struct StreamState {
    SparkrtMockStreamCounters counters{};
    bool destroyed = false;
  };
  struct EventState {
    bool destroyed = false;
    bool recorded = false;
    uint64_t tick = 0;  // fake clock value when recorded
    SparkrtStream stream = 0;
  };
  struct Denial {
    std::string module;  // empty: any
    std::string entry;   // empty: any
    absl::StatusCode code;
  };
  struct LookupRecord {
    const char* module;
    const char* entry;
    absl::StatusCode code;
    uint64_t kernel_id;
  };
  // Launch records are three flat vectors grown geometrically, so recording
  // costs no allocation per launch once they are warm (see README.md).
  struct LaunchRecord {
    const char* module;
    const char* entry;
    uint64_t kernel_id;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_memory_bytes;
    SparkrtStream stream;
    uint64_t first_arg;  // index into args_
    uint32_t num_args;
    uint64_t sequence;
    uint32_t flags;
    uint32_t cluster[3];
  };
  struct ArgRecord {
    uint64_t offset;  // into arg_bytes_
    uint32_t size;
    uint8_t kind;
  };

  // mock_module.cc; called by modules, with mu_ not held.
  absl::StatusOr<sdk::Kernel*> resolve(MockModule& module, std::string_view entry,
                                       std::span<const SparkrtParamInfo> params);
  void module_unloaded(MockModule& module);

  // The rest expect mu_ held.
  // mock_device.cc: used by every part.
  const char* intern(std::string_view s);
  // Counts and logs a failed call; returns `status` unchanged.
  absl::Status note(std::string_view call, absl::Status status);
  // Once a log write has failed, every device call is refused with that
  // failure until set_log_path closes or replaces the log, or the device
  // closes: a trace with a hole must not pass for a whole one.
  absl::Status log_refusal(std::string_view call);
  void log_close();
  // mock_streams.cc
  absl::StatusOr<StreamState*> find_stream(SparkrtStream stream, std::string_view call);
  absl::StatusOr<EventState*> find_event(SparkrtEvent event, std::string_view call);
  std::string live_streams() const;
  // mock_launch.cc
  void log_launch(const sdk::Launch& launch, const MockKernel& kernel);
  void append_arg_json(std::string& out, uint8_t kind, std::span<const std::byte> bytes) const;

  void (*on_close_)(sdk::Device*);
  std::mutex mu_;
  sdk::AddressSpace memory_;
  sdk::GraphRecorder graphs_;
  absl::flat_hash_set<void*> host_allocations_;
  absl::flat_hash_map<SparkrtStream, StreamState> streams_;
  absl::flat_hash_map<SparkrtEvent, EventState> events_;
  SparkrtStream next_stream_ = 1;
  SparkrtEvent next_event_ = 1;
  uint64_t next_kernel_id_ = 1;
  uint64_t tick_ = 0;  // fake clock: +1 (one microsecond) per launch, copy or memset
  std::set<std::string, std::less<>> names_;  // interned; node-based, so pointers stay valid
  std::set<MockModule*> modules_;             // loaded, not yet unloaded

  SparkrtMockCounters counters_{};
  std::vector<LookupRecord> lookups_;
  bool record_launches_ = true;
  uint64_t max_launch_records_ = SPARKRT_MOCK_DEFAULT_MAX_LAUNCH_RECORDS;
  std::vector<LaunchRecord> launches_;
  std::vector<ArgRecord> args_;
  std::vector<std::byte> arg_bytes_;
  std::vector<SparkrtMockCollective> collectives_;

  // The properties a test may change (SPARKRT_MOCK_PROPERTIES); by default
  // an H200's, so op geometry chosen on the mock is the one a GPU gets.
  uint32_t multiprocessor_count_ = 132;
  uint32_t shared_memory_optin_ = 227 * 1024;

  std::vector<Denial> denials_;
  uint64_t memory_cap_ = 0;  // 0: none
  uint64_t fail_countdown_ = 0;
  absl::StatusCode fail_code_ = absl::StatusCode::kInternal;
  uint64_t fail_armed_at_ = 0;  // counters_.launches when fail_launch was called

  JsonLog log_;
  std::string scratch_;  // reused buffer for log fields
};

}  // namespace sparkrt::mock

#endif  // SPARKRT_BACKENDS_MOCK_MOCK_DEVICE_H_
