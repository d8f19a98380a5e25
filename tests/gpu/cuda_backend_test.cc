// CUDA-specific behaviour the conformance suite cannot express: JIT logs,
// the signature cross-check, launches the runtime would have refused, large
// dynamic shared memory, and faults reported at their launch.
#include <cuda.h>
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sparkrt/plugin_api.h"
#include "sparkrt/sparkrt.h"

namespace sparkrt {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The cuda plugin's C table, loaded directly: these tests speak the ABI to
// reach checks the runtime would normally make first.
class Plugin {
 public:
  Plugin() {
    library_ = dlopen(SPARKRT_CUDA_PLUGIN_FILE, RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(library_ != nullptr, "dlopen " SPARKRT_CUDA_PLUGIN_FILE ": " << dlerror());
    auto entry =
        reinterpret_cast<SparkrtPluginEntryFn>(dlsym(library_, SPARKRT_PLUGIN_ENTRY_SYMBOL));
    REQUIRE((entry != nullptr));
    api_ = entry();
    SparkrtDeviceOpenArgs open{SPARKRT_DEVICE_OPEN_ARGS_SIZE, 0, nullptr};
    REQUIRE_OK_C(api_->device_open(&open));
    device_ = open.device;
  }
  ~Plugin() {
    SparkrtDeviceCloseArgs close{SPARKRT_DEVICE_CLOSE_ARGS_SIZE, device_};
    status(api_->device_close(&close)).IgnoreError();
    // The library stays loaded: libcuda does not support being unloaded.
  }

  const SparkrtPluginApi& api() const { return *api_; }
  SparkrtDevice* device() const { return device_; }

  absl::Status status(SparkrtError* e) const {
    if (e == nullptr) return absl::OkStatus();
    const char* msg = nullptr;
    size_t size = 0;
    api_->error_message(e, &msg, &size);
    absl::Status s(static_cast<absl::StatusCode>(api_->error_code(e)), std::string(msg, size));
    api_->error_destroy(e);
    return s;
  }

  absl::StatusOr<SparkrtModule*> load(const std::string& name, SparkrtImageFormat format,
                                      const std::string& image) {
    SparkrtModuleLoadArgs a{};
    a.struct_size = SPARKRT_MODULE_LOAD_ARGS_SIZE;
    a.device = device_;
    a.name = name.c_str();
    a.format = format;
    a.image = image.data();
    a.image_size = image.size();
    if (auto s = status(api_->module_load(&a)); !s.ok()) return s;
    return a.module;
  }

  absl::StatusOr<SparkrtKernel*> kernel(SparkrtModule* m, const char* entry,
                                        const std::vector<SparkrtParamInfo>& params) {
    SparkrtKernelGetArgs a{};
    a.struct_size = SPARKRT_KERNEL_GET_ARGS_SIZE;
    a.module = m;
    a.entry = entry;
    a.params = params.data();
    a.num_params = static_cast<uint32_t>(params.size());
    if (auto s = status(api_->kernel_get(&a)); !s.ok()) return s;
    return a.kernel;
  }

  void unload(SparkrtModule* m) {
    SparkrtModuleUnloadArgs a{SPARKRT_MODULE_UNLOAD_ARGS_SIZE, m};
    CHECK(status(api_->module_unload(&a)).ok());
  }

 private:
  // REQUIRE on a C error, inside the constructor.
  void REQUIRE_OK_C(SparkrtError* e) {
    const absl::Status s = status(e);
    REQUIRE_MESSAGE(s.ok(), std::string(s.ToString()));
  }

  void* library_ = nullptr;
  const SparkrtPluginApi* api_ = nullptr;
  SparkrtDevice* device_ = nullptr;
};

// vector_add_f32(const float*, const float*, float*, u32) as the PTX declares it.
const std::vector<SparkrtParamInfo> kVectorAddParams = {
    {0, 8, 8}, {8, 8, 8}, {16, 8, 8}, {24, 4, 4}};

bool contains(const absl::Status& s, std::string_view what) {
  return std::string(s.message()).find(what) != std::string::npos;
}

TEST_CASE("the device reports its architecture and limits") {
  auto dev = Device::open({.backend = "cuda"});
  REQUIRE(dev.ok());
  const DeviceProperties& p = (*dev)->properties();
  CHECK(p.compute_capability_major >= 7);
  CHECK(p.architecture == "sm_" + std::to_string(p.compute_capability_major) +
                              std::to_string(p.compute_capability_minor));
  CHECK(p.warp_size == 32);
  CHECK(p.max_threads_per_block == 1024);
  CHECK(p.max_shared_memory_per_block == 48 * 1024);
  CHECK(p.max_shared_memory_per_block_optin > 48 * 1024);
  CHECK(p.accepts_ptx);
  CHECK(p.accepts_cubin);
  auto far = Device::open({.backend = "cuda", .device_index = 4096});
  CHECK(far.status().code() == absl::StatusCode::kOutOfRange);
}

TEST_CASE("a PTX module that does not compile reports the JIT log") {
  Plugin plugin;
  const std::string ptx = read_file(SPARKRT_GPU_TEST_DATA_DIR "/broken_jit.ptx");
  REQUIRE(!ptx.empty());
  auto m = plugin.load("broken_jit", SPARKRT_IMAGE_PTX, ptx);
  REQUIRE(!m.ok());
  MESSAGE(std::string(m.status().message()));
  CHECK(m.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(contains(m.status(), "cuModuleLoadDataEx"));
  CHECK(contains(m.status(), "JIT log"));
  CHECK(contains(m.status(), "undefined_register"));  // the log names the culprit
}

TEST_CASE("images that are not PTX or a cubin are refused before the driver sees them") {
  Plugin plugin;
  CHECK(plugin.load("junk", SPARKRT_IMAGE_CUBIN, std::string(256, 'x')).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(plugin.load("empty", SPARKRT_IMAGE_PTX, "").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(plugin.load("fmt", static_cast<SparkrtImageFormat>(9), "abc").status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the PTX signature is cross-checked with the driver") {
  Plugin plugin;
  auto image = find_module("vector_ops", "");
  REQUIRE(image.ok());
  auto m = plugin.load("vector_ops", SPARKRT_IMAGE_PTX, *image->ptx);
  REQUIRE_MESSAGE(m.ok(), std::string(m.status().ToString()));
  CHECK(plugin.kernel(*m, "vector_add_f32", kVectorAddParams).ok());

  auto wrong_size = kVectorAddParams;
  wrong_size[3].size = 8;
  auto k = plugin.kernel(*m, "vector_add_f32", wrong_size);
  REQUIRE(!k.ok());
  MESSAGE(std::string(k.status().message()));
  CHECK(k.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(contains(k.status(), "parameter #3"));
  // The message says what was loaded and guesses no cause.
  CHECK(contains(k.status(), "loaded PTX, compiled by the driver's JIT"));
  CHECK_FALSE(contains(k.status(), "cubin"));

  auto missing = kVectorAddParams;
  missing.pop_back();
  k = plugin.kernel(*m, "vector_add_f32", missing);
  REQUIRE(!k.ok());
  MESSAGE(std::string(k.status().message()));
  CHECK(contains(k.status(), "declares 3 parameters"));
  CHECK(contains(k.status(), "the loaded PTX, compiled by the driver's JIT has 4"));

  k = plugin.kernel(*m, "no_such_kernel", {});
  CHECK(k.status().code() == absl::StatusCode::kNotFound);
  plugin.unload(*m);
}

TEST_CASE("the cubin for this architecture loads and agrees with the PTX signature") {
  auto dev = Device::open({.backend = "cuda"});
  REQUIRE(dev.ok());
  const std::string arch = (*dev)->properties().architecture;
  auto image = find_module("vector_ops", arch);
  REQUIRE(image.ok());
  if (image->cubin.empty()) {
    MESSAGE("SKIPPED: no vector_ops cubin for " << arch << " in this build");
    return;
  }
  Plugin plugin;
  auto m = plugin.load("vector_ops", SPARKRT_IMAGE_CUBIN, image->cubin);
  REQUIRE_MESSAGE(m.ok(), std::string(m.status().ToString()));
  CHECK(plugin.kernel(*m, "vector_add_f32", kVectorAddParams).ok());
  auto wrong_offset = kVectorAddParams;
  wrong_offset[3].offset = 32;
  auto k = plugin.kernel(*m, "vector_add_f32", wrong_offset);
  REQUIRE(!k.ok());
  MESSAGE(std::string(k.status().message()));
  CHECK(contains(k.status(), "at offset 24, size 4 in the loaded " + arch + " cubin"));
  CHECK_FALSE(contains(k.status(), "JIT"));
  plugin.unload(*m);
}

TEST_CASE("launches the runtime would refuse fail in the plugin with kernel and geometry") {
  Plugin plugin;
  auto image = find_module("vector_ops", "");
  REQUIRE(image.ok());
  auto m = plugin.load("vector_ops", SPARKRT_IMAGE_PTX, *image->ptx);
  REQUIRE(m.ok());
  auto k = plugin.kernel(*m, "vector_add_f32", kVectorAddParams);
  REQUIRE(k.ok());

  alignas(16) uint8_t params[28] = {};  // null pointers, n = 0: a no-op if it ran
  const uint32_t offsets[] = {0, 8, 16, 24}, sizes[] = {8, 8, 8, 4};
  const uint8_t kinds[] = {SPARKRT_ARG_PTR, SPARKRT_ARG_PTR, SPARKRT_ARG_PTR, SPARKRT_ARG_U32};
  auto launch = [&](uint32_t gx, uint32_t bx, uint32_t shared, uint32_t params_size,
                    uint32_t num_args, SparkrtStream stream) {
    SparkrtLaunchArgs a{};
    a.struct_size = SPARKRT_LAUNCH_ARGS_SIZE;
    a.device = plugin.device();
    a.kernel = *k;
    a.grid[0] = gx;
    a.grid[1] = a.grid[2] = 1;
    a.block[0] = bx;
    a.block[1] = a.block[2] = 1;
    a.shared_memory_bytes = shared;
    a.stream = stream;
    a.params = params;
    a.params_size = params_size;
    a.num_args = num_args;
    a.arg_offsets = offsets;
    a.arg_sizes = sizes;
    a.arg_kinds = kinds;
    return plugin.status(plugin.api().launch(&a));
  };
  CHECK(launch(1, 32, 0, 28, 4, 0).ok());

  absl::Status s = launch(0, 32, 0, 28, 4, 0);
  MESSAGE(std::string(s.message()));
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(contains(s, "vector_ops.vector_add_f32"));
  CHECK(contains(s, "grid (0,1,1)"));
  CHECK(contains(s, "cuLaunchKernel"));

  s = launch(1, 4096, 0, 28, 4, 0);
  MESSAGE(std::string(s.message()));
  CHECK(!s.ok());
  CHECK(contains(s, "block (4096,1,1)"));

  s = launch(1, 32, 0, 24, 4, 0);  // short parameter buffer
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(contains(s, "24 bytes"));
  s = launch(1, 32, 0, 28, 3, 0);  // argument count
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  s = launch(1, 32, 0, 28, 4, 0xdead'0000'0001ull);  // unknown stream
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(contains(s, "unknown stream"));
  s = launch(1, 32, 1u << 30, 28, 4, 0);  // 1 GiB of shared memory
  MESSAGE(std::string(s.message()));
  CHECK(!s.ok());
  CHECK(contains(s, "vector_ops.vector_add_f32"));

  SparkrtDeviceCloseArgs close_null{SPARKRT_DEVICE_CLOSE_ARGS_SIZE, nullptr};
  CHECK(plugin.status(plugin.api().device_close(&close_null)).ok());  // no-op, no crash
  plugin.unload(*m);
}

// Launches a shared_reverse_u32 kernel with `bytes` of dynamic shared memory
// and checks every word came back through it: out[i] = 3 (n - 1 - i) + seed
// + `add`, over an output poisoned first.
void check_shared_reverse(Device& d, const sparkrt::Kernel& k, uint32_t bytes, uint32_t seed,
                          uint32_t add) {
  const uint32_t words = bytes / 4;
  auto out = d.alloc(bytes);
  REQUIRE(out.ok());
  REQUIRE(d.memset(*out, 0xFF, bytes).ok());
  const absl::Status s = KernelLaunch(d, k)
                             .grid({1})
                             .block({256})
                             .shared_mem(bytes)
                             .arg(*out)
                             .arg(words)
                             .arg(seed)
                             .launch();
  REQUIRE_MESSAGE(s.ok(), std::string(s.ToString()));
  std::vector<uint32_t> got(words);
  REQUIRE(d.copy_d2h(*out, got).ok());
  uint32_t wrong = 0;
  for (uint32_t i = 0; i < words; ++i) wrong += got[i] != 3u * (words - 1 - i) + seed + add;
  CHECK(wrong == 0);
  CHECK(d.free(*out).ok());
}

TEST_CASE("dynamic shared memory above 48 KiB works without manual opt-in") {
  auto dev = Device::open({.backend = "cuda"});
  REQUIRE(dev.ok());
  Device& d = **dev;
  auto k = d.kernel("gpu_test_kernels", "shared_reverse_u32");
  REQUIRE_MESSAGE(k.ok(), std::string(k.status().ToString()));
  const uint32_t optin = d.properties().max_shared_memory_per_block_optin;
  std::mt19937 rng(std::random_device{}());
  // Rising sizes: each beyond the last raises the kernel's limit once;
  // a smaller one afterwards needs nothing new.
  for (uint32_t bytes : {16u * 1024, 64u * 1024, 100u * 1024, optin, 80u * 1024}) {
    INFO("shared bytes ", bytes);
    check_shared_reverse(d, *k, bytes, rng() % 1000 + 1, 0);
  }
  // Over the device's ceiling: refused before the driver.
  auto out = d.alloc(1024);
  REQUIRE(out.ok());
  const absl::Status s = KernelLaunch(d, *k)
                             .grid({1})
                             .block({256})
                             .shared_mem(optin + 4)
                             .arg(*out)
                             .arg(1u)
                             .arg(1u)
                             .launch();
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(d.free(*out).ok());
}

TEST_CASE("static and dynamic shared memory above 48 KiB together work without manual opt-in") {
  // 4 KiB static: the kernel's default dynamic ceiling is 44 KiB, so these
  // need the opt-in although none is above 48 KiB.
  auto dev = Device::open({.backend = "cuda"});
  REQUIRE(dev.ok());
  Device& d = **dev;
  auto k = d.kernel("gpu_test_kernels", "shared_reverse_u32_static");
  REQUIRE_MESSAGE(k.ok(), std::string(k.status().ToString()));
  std::mt19937 rng(std::random_device{}());
  for (uint32_t bytes : {46u * 1024, 48u * 1024}) {
    INFO("dynamic shared bytes ", bytes);
    check_shared_reverse(d, *k, bytes, rng() % 1000 + 1, 1);  // + the static part's 1
  }
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

TEST_CASE("SPARKRT_CUDA_SHARED_MEMORY_OPTIN lowers the shared memory limit; bad values fail") {
  constexpr const char* kVar = "SPARKRT_CUDA_SHARED_MEMORY_OPTIN";
  uint32_t device_optin = 0;
  {
    auto dev = Device::open({.backend = "cuda"});
    REQUIRE(dev.ok());
    device_optin = (*dev)->properties().max_shared_memory_per_block_optin;
  }
  constexpr uint32_t kGb10 = 101376;
  REQUIRE(device_optin >= kGb10);
  {
    ScopedEnv env(kVar, std::to_string(kGb10));
    auto dev = Device::open({.backend = "cuda"});
    REQUIRE_MESSAGE(dev.ok(), std::string(dev.status().ToString()));
    Device& d = **dev;
    CHECK(d.properties().max_shared_memory_per_block_optin == kGb10);
    auto k = d.kernel("gpu_test_kernels", "shared_reverse_u32");
    REQUIRE(k.ok());
    // The same with 4 KiB of static shared memory.
    auto with_static = d.kernel("gpu_test_kernels", "shared_reverse_u32_static");
    REQUIRE(with_static.ok());
    auto out = d.alloc(kGb10);
    REQUIRE(out.ok());
    auto launch = [&](const sparkrt::Kernel& kernel, uint32_t bytes) {
      return KernelLaunch(d, kernel)
          .grid({1})
          .block({256})
          .shared_mem(bytes)
          .arg(*out)
          .arg(bytes / 4)
          .arg(7u)
          .launch();
    };
    CHECK(launch(*k, kGb10).ok());
    CHECK(launch(*k, kGb10 + 16).code() == absl::StatusCode::kInvalidArgument);
    // The lowered limit covers static shared memory too, as a GB10's would.
    const uint32_t room = kGb10 - 4096;
    CHECK(launch(*with_static, room).ok());
    const absl::Status over = launch(*with_static, room + 16);
    CHECK(over.code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(over, "4096 B static"));
    CHECK(contains(over, "at most " + std::to_string(room) + " B"));
    std::vector<uint32_t> got(room / 4);
    REQUIRE(d.copy_d2h(*out, got).ok());
    uint32_t wrong = 0;
    for (uint32_t i = 0; i < got.size(); ++i) wrong += got[i] != 3u * (room / 4 - 1 - i) + 8u;
    CHECK(wrong == 0);
    CHECK(d.synchronize().ok());
    CHECK(d.free(*out).ok());
  }
  for (const std::string& bad :
       {std::string("lots"), std::string("4096"), std::to_string(uint64_t{device_optin} + 1)}) {
    INFO(kVar << "=" << bad);
    ScopedEnv env(kVar, bad);
    auto dev = Device::open({.backend = "cuda"});
    CHECK(dev.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(contains(dev.status(), kVar));
  }
}

TEST_CASE("launches survive other code switching the thread's CUDA context") {
  // What another library sharing the thread might do.
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(libcuda != nullptr);
  auto set_current =
      reinterpret_cast<decltype(&::cuCtxSetCurrent)>(dlsym(libcuda, "cuCtxSetCurrent"));
  auto get_current =
      reinterpret_cast<decltype(&::cuCtxGetCurrent)>(dlsym(libcuda, "cuCtxGetCurrent"));
  auto ctx_create = reinterpret_cast<decltype(&::cuCtxCreate_v4)>(dlsym(libcuda, "cuCtxCreate_v4"));
  auto ctx_destroy =
      reinterpret_cast<decltype(&::cuCtxDestroy_v2)>(dlsym(libcuda, "cuCtxDestroy_v2"));
  auto device_get = reinterpret_cast<decltype(&::cuDeviceGet)>(dlsym(libcuda, "cuDeviceGet"));
  REQUIRE((set_current && get_current && ctx_create && ctx_destroy && device_get));

  auto dev = Device::open({.backend = "cuda"});
  REQUIRE(dev.ok());
  Device& d = **dev;
  auto k = d.kernel("vector_ops", "fill_u32");
  REQUIRE(k.ok());
  auto out = d.alloc(1024 * 4);
  REQUIRE(out.ok());
  auto s = d.create_stream();
  REQUIRE(s.ok());
  auto fill_and_check = [&](uint32_t value, Stream stream) {
    const absl::Status st =
        KernelLaunch(d, *k).grid({4}).block({256}).arg(*out).arg(value).arg(1024u).launch(stream);
    REQUIRE_MESSAGE(st.ok(), std::string(st.ToString()));
    REQUIRE(d.synchronize(stream).ok());
    std::vector<uint32_t> got(1024);
    REQUIRE(d.copy_d2h(*out, got).ok());
    CHECK(std::count(got.begin(), got.end(), value) == 1024);
  };
  fill_and_check(11, {});  // sparkrt's context is current and remembered
  CUcontext primary = nullptr;
  REQUIRE(get_current(&primary) == CUDA_SUCCESS);

  REQUIRE(set_current(nullptr) == CUDA_SUCCESS);
  fill_and_check(12, {});
  fill_and_check(13, *s);

  CUdevice cudev;
  REQUIRE(device_get(&cudev, d.index()) == CUDA_SUCCESS);
  CUcontext other = nullptr;
  if (const CUresult r = ctx_create(&other, nullptr, 0, cudev); r != CUDA_SUCCESS) {
    MESSAGE("cuCtxCreate_v4 failed (" << int(r) << "): the second-context part did not run");
  } else {  // `other` is now current
    fill_and_check(14, {});
    REQUIRE(set_current(other) == CUDA_SUCCESS);
    fill_and_check(15, *s);
    CUcontext after = nullptr;
    REQUIRE(get_current(&after) == CUDA_SUCCESS);
    CHECK(after == primary);
    REQUIRE(ctx_destroy(other) == CUDA_SUCCESS);
  }
  fill_and_check(16, *s);
  CHECK(d.destroy_stream(*s).ok());
  CHECK(d.free(*out).ok());
}

// Run alone, with SPARKRT_SYNC_LAUNCHES=1 (ctest gpu.sync_launch_fault): the
// fault leaves the process's CUDA context unusable.
TEST_CASE("SPARKRT_SYNC_LAUNCHES reports an asynchronous fault at its launch" *
          doctest::test_suite("fault") * doctest::skip()) {
  const char* sync = std::getenv("SPARKRT_SYNC_LAUNCHES");
  REQUIRE_MESSAGE((sync != nullptr && std::string(sync) == "1"),
                  "run with SPARKRT_SYNC_LAUNCHES=1");
  auto dev = Device::open({.backend = "cuda"});
  REQUIRE(dev.ok());
  auto k = (*dev)->kernel("gpu_test_kernels", "store_through");
  REQUIRE(k.ok());
  const absl::Status s =
      KernelLaunch(**dev, *k).grid({3}).block({64}).arg(DevicePtr(0x10)).arg(7u).launch();
  MESSAGE(std::string(s.message()));
  REQUIRE(!s.ok());
  CHECK(contains(s, "store_through"));
  CHECK(contains(s, "grid (3,1,1)"));
  CHECK(contains(s, "block (64,1,1)"));
  CHECK(contains(s, "SPARKRT_SYNC_LAUNCHES"));
  CHECK(contains(s, "CUDA_ERROR_ILLEGAL_ADDRESS"));
}

TEST_CASE("the driver and KernelLaunch agree on .reqntid and .maxntid") {
  const std::string ptx = read_file(SPARKRT_GPU_TEST_DATA_DIR "/directives.ptx");
  REQUIRE(!ptx.empty());
  struct Case {
    const char* entry;
    Dim3 block;
    bool allowed;
  };
  const Case cases[] = {
      {"reqntid_probe", {64, 2, 1}, true},   {"reqntid_probe", {128, 1, 1}, false},
      {"reqntid_probe", {64, 1, 1}, false},  {"maxntid_probe", {128, 1, 1}, true},
      {"maxntid_probe", {64, 2, 1}, true},   {"maxntid_probe", {32, 2, 2}, true},
      {"maxntid_probe", {129, 1, 1}, false}, {"maxntid_probe", {64, 4, 1}, false},
  };

  // The driver's verdict, through the plugin's table (no runtime check).
  Plugin plugin;
  auto m = plugin.load("directives", SPARKRT_IMAGE_PTX, ptx);
  REQUIRE_MESSAGE(m.ok(), std::string(m.status().ToString()));
  alignas(8) uint8_t params[8] = {};
  const uint32_t offsets[] = {0}, sizes[] = {8};
  const uint8_t kinds[] = {SPARKRT_ARG_PTR};
  for (const Case& c : cases) {
    CAPTURE(c.entry);
    CAPTURE(c.block.x);
    CAPTURE(c.block.y);
    CAPTURE(c.block.z);
    auto k = plugin.kernel(*m, c.entry, {{0, 8, 8}});
    REQUIRE(k.ok());
    SparkrtLaunchArgs a{};
    a.struct_size = SPARKRT_LAUNCH_ARGS_SIZE;
    a.device = plugin.device();
    a.kernel = *k;
    a.grid[0] = a.grid[1] = a.grid[2] = 1;
    a.block[0] = c.block.x;
    a.block[1] = c.block.y;
    a.block[2] = c.block.z;
    a.params = params;
    a.params_size = 8;
    a.num_args = 1;
    a.arg_offsets = offsets;
    a.arg_sizes = sizes;
    a.arg_kinds = kinds;
    const absl::Status s = plugin.status(plugin.api().launch(&a));
    if (!s.ok()) MESSAGE("driver: " << std::string(s.message()));
    CHECK(s.ok() == c.allowed);
  }
  plugin.unload(*m);

  // The runtime's verdict, before the driver sees the launch.
  setenv("SPARKRT_KERNEL_PATH", SPARKRT_GPU_TEST_DATA_DIR, 1);
  auto dev = Device::open({.backend = "cuda"});
  REQUIRE(dev.ok());
  for (const Case& c : cases) {
    CAPTURE(c.entry);
    auto k = (*dev)->kernel("directives", c.entry);
    REQUIRE_MESSAGE(k.ok(), std::string(k.status().ToString()));
    const absl::Status s = KernelLaunch(**dev, *k).grid({1}).block(c.block).arg(DevicePtr{}).launch();
    CHECK_MESSAGE(s.ok() == c.allowed, std::string(s.ToString()));
    if (!c.allowed) {
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK(contains(s, c.entry[0] == 'r' ? ".reqntid (64, 2, 1)" : ".maxntid (128, 1, 1)"));
    }
  }
  unsetenv("SPARKRT_KERNEL_PATH");
  CHECK((*dev)->synchronize().ok());
}

}  // namespace
}  // namespace sparkrt
