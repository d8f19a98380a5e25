// The mock plugin's C table and extension driven directly (the library is
// dlopen'ed, not linked), for the checks the runtime never lets a call reach:
// repeated resolution, entries the runtime did not vet, cubin images,
// argument lists that disagree with the declared signature, and misuse of the
// extension itself.
#include <dlfcn.h>

#include <fstream>
#include <sstream>

#include "mock_test_support.h"
#include "sparkrt/extensions/mock.h"
#include "sparkrt/plugin_api.h"

using namespace mocktest;
using absl::StatusCode;

namespace {

class Plugin {
 public:
  Plugin() {
    handle_ = ::dlopen(SPARKRT_MOCK_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(handle_ != nullptr, ::dlerror());
    auto entry = reinterpret_cast<SparkrtPluginEntryFn>(::dlsym(handle_, SPARKRT_PLUGIN_ENTRY_SYMBOL));
    REQUIRE((entry != nullptr));
    api = entry();
    REQUIRE((api != nullptr));
    SparkrtGetExtensionArgs get{SPARKRT_GET_EXTENSION_ARGS_SIZE, SPARKRT_MOCK_EXTENSION_NAME, nullptr};
    REQUIRE((api->get_extension(&get) == nullptr));
    ext = static_cast<const SparkrtMockExtension*>(get.extension);
    REQUIRE((ext != nullptr));
    SparkrtDeviceOpenArgs open{SPARKRT_DEVICE_OPEN_ARGS_SIZE, 0, nullptr};
    REQUIRE((api->device_open(&open) == nullptr));
    device = open.device;
  }
  ~Plugin() {
    if (device != nullptr) {
      SparkrtDeviceCloseArgs close{SPARKRT_DEVICE_CLOSE_ARGS_SIZE, device};
      release(api->device_close(&close));
    }
    ::dlclose(handle_);
  }

  // Converts and releases an error; OK for nullptr.
  absl::Status status(SparkrtError* e) const {
    if (e == nullptr) return absl::OkStatus();
    const char* msg = nullptr;
    size_t size = 0;
    api->error_message(e, &msg, &size);
    absl::Status s(static_cast<StatusCode>(api->error_code(e)), std::string(msg, size));
    api->error_destroy(e);
    return s;
  }
  void release(SparkrtError* e) const { status(e).IgnoreError(); }

  SparkrtModule* load(const std::string& ptx, SparkrtImageFormat format = SPARKRT_IMAGE_PTX) {
    SparkrtModuleLoadArgs a{};
    a.struct_size = SPARKRT_MODULE_LOAD_ARGS_SIZE;
    a.device = device;
    a.name = "twin_contract";
    a.format = format;
    a.image = ptx.data();
    a.image_size = ptx.size();
    last = status(api->module_load(&a));
    return a.module;
  }

  SparkrtKernel* kernel(SparkrtModule* m, const char* entry,
                        const std::vector<SparkrtParamInfo>& params) {
    SparkrtKernelGetArgs a{};
    a.struct_size = SPARKRT_KERNEL_GET_ARGS_SIZE;
    a.module = m;
    a.entry = entry;
    a.params = params.data();
    a.num_params = static_cast<uint32_t>(params.size());
    last = status(api->kernel_get(&a));
    return a.kernel;
  }

  void* handle_ = nullptr;
  const SparkrtPluginApi* api = nullptr;
  const SparkrtMockExtension* ext = nullptr;
  SparkrtDevice* device = nullptr;
  absl::Status last;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string twin_ptx() { return read_file(SPARKRT_TEST_DATA_DIR "/kernels/twin_contract.ptx"); }

// rope: u64, u64, u32 x4, f32, u32 (packed offsets as the CUDA ABI lays them).
std::vector<SparkrtParamInfo> rope_params() {
  return {{0, 8, 8}, {8, 8, 8}, {16, 4, 4}, {20, 4, 4}, {24, 4, 4}, {28, 4, 4}, {32, 4, 4}, {36, 4, 4}};
}

}  // namespace

TEST_CASE("mock ABI: the table and the extension identify themselves") {
  Plugin p;
  CHECK(std::string(p.api->name) == "mock");
  CHECK(p.api->abi_major == SPARKRT_ABI_MAJOR);
  CHECK(p.ext->struct_size == SPARKRT_MOCK_EXTENSION_SIZE);
  SparkrtGetExtensionArgs other{SPARKRT_GET_EXTENSION_ARGS_SIZE, "sparkrt.mock.v2", nullptr};
  REQUIRE((p.api->get_extension(&other) == nullptr));
  CHECK((other.extension == nullptr));
  // SPARKRT_HOST_DEVICES devices, 4 unless the environment says otherwise.
  SparkrtDeviceCountArgs count{SPARKRT_DEVICE_COUNT_ARGS_SIZE, 0};
  REQUIRE((p.api->device_count(&count) == nullptr));
  CHECK(count.count >= 1);
  if (std::getenv("SPARKRT_HOST_DEVICES") == nullptr) CHECK(count.count == 4);
  SparkrtDeviceOpenArgs open{SPARKRT_DEVICE_OPEN_ARGS_SIZE, count.count, nullptr};
  check_error(p.status(p.api->device_open(&open)), StatusCode::kOutOfRange,
              {"index " + std::to_string(count.count), "SPARKRT_HOST_DEVICES"});
}

TEST_CASE("mock ABI: resolving the same entry twice gives the same kernel handle") {
  Plugin p;
  SparkrtModule* m = p.load(twin_ptx());
  REQUIRE_OK(p.last);
  SparkrtKernel* a = p.kernel(m, kRope, rope_params());
  REQUIRE_OK(p.last);
  SparkrtKernel* b = p.kernel(m, kRope, rope_params());
  REQUIRE_OK(p.last);
  SparkrtKernel* c = p.kernel(m, kSdpa, {});
  REQUIRE_OK(p.last);
  CHECK((a == b));
  CHECK((a != c));
  uint64_t n = 0;
  REQUIRE_OK(p.status(p.ext->lookup_count(p.device, &n)));
  CHECK(n == 3);
  SparkrtMockLookup l0{}, l1{}, l2{};
  l0.struct_size = l1.struct_size = l2.struct_size = SPARKRT_MOCK_LOOKUP_SIZE;
  REQUIRE_OK(p.status(p.ext->get_lookup(p.device, 0, &l0)));
  REQUIRE_OK(p.status(p.ext->get_lookup(p.device, 1, &l1)));
  REQUIRE_OK(p.status(p.ext->get_lookup(p.device, 2, &l2)));
  CHECK(l0.kernel_id == l1.kernel_id);
  CHECK(l0.kernel_id != l2.kernel_id);
  CHECK(std::string(l2.entry) == kSdpa);
  check_error(p.status(p.ext->get_lookup(p.device, 3, &l0)), StatusCode::kOutOfRange,
              {"index 3", "3 lookups"});

  SparkrtModuleUnloadArgs unload{SPARKRT_MODULE_UNLOAD_ARGS_SIZE, m};
  REQUIRE_OK(p.status(p.api->module_unload(&unload)));
  // Names handed out by the extension outlive the module.
  REQUIRE_OK(p.status(p.ext->get_lookup(p.device, 0, &l0)));
  CHECK(std::string(l0.module) == "twin_contract");
}

TEST_CASE("mock ABI: an entry the module lacks is NotFound listing its entries") {
  Plugin p;
  SparkrtModule* m = p.load(twin_ptx());
  REQUIRE_OK(p.last);
  p.kernel(m, "twin_nope", {});
  check_error(p.last, StatusCode::kNotFound,
              {"module 'twin_contract' has no entry 'twin_nope'",
               "twin_maybe_rope_f32, twin_sdpa_gate_f32"});
}

TEST_CASE("mock ABI: only PTX and signature images load") {
  Plugin p;
  const std::string elf = "\x7f" "ELF not really";
  p.load(elf, SPARKRT_IMAGE_CUBIN);
  check_error(p.last, StatusCode::kInvalidArgument,
              {"twin_contract", "neither PTX nor signatures"});
  p.load("\x03\x02\x23\x07", SPARKRT_IMAGE_SPIRV);
  check_error(p.last, StatusCode::kInvalidArgument, {"neither PTX nor signatures"});
  // A signature file is read like PTX: its entries resolve.
  SparkrtModule* sig = p.load(".visible .entry from_sig(.param .u32 n)\n{\n}\n",
                              SPARKRT_IMAGE_SIGNATURES);
  REQUIRE_OK(p.last);
  const SparkrtParamInfo n{0, 4, 4};
  p.kernel(sig, "from_sig", {n});
  REQUIRE_OK(p.last);
  p.load("", SPARKRT_IMAGE_PTX);
  check_error(p.last, StatusCode::kInvalidArgument, {"empty PTX image"});
  // A PTX module without entries is valid and has nothing to resolve.
  SparkrtModule* m = p.load(".version 8.0\n.target sm_80\n.address_size 64\n");
  REQUIRE_OK(p.last);
  p.kernel(m, "anything", {});
  check_error(p.last, StatusCode::kNotFound, {"(none)"});
}

TEST_CASE("mock ABI: a launch that disagrees with the declared signature is refused") {
  Plugin p;
  SparkrtModule* m = p.load(twin_ptx());
  SparkrtKernel* k = p.kernel(m, kRope, rope_params());
  REQUIRE_OK(p.last);
  alignas(8) uint8_t params[40] = {};
  uint32_t offsets[8] = {0, 8, 16, 20, 24, 28, 32, 36};
  uint32_t sizes[8] = {8, 8, 4, 4, 4, 4, 4, 4};
  uint8_t kinds[8] = {SPARKRT_ARG_PTR, SPARKRT_ARG_PTR, SPARKRT_ARG_U32, SPARKRT_ARG_U32,
                      SPARKRT_ARG_U32, SPARKRT_ARG_U32, SPARKRT_ARG_F32, SPARKRT_ARG_U32};
  SparkrtLaunchArgs a{};
  a.struct_size = SPARKRT_LAUNCH_ARGS_SIZE;
  a.device = p.device;
  a.kernel = k;
  a.grid[0] = a.grid[1] = a.grid[2] = 1;
  a.block[0] = a.block[1] = a.block[2] = 1;
  a.params = params;
  a.params_size = sizeof params;
  a.arg_offsets = offsets;
  a.arg_sizes = sizes;
  a.arg_kinds = kinds;

  a.num_args = 7;
  check_error(p.status(p.api->launch(&a)), StatusCode::kInvalidArgument,
              {"twin_maybe_rope_f32", "8 parameters declared at kernel_get, 7 given"});
  a.num_args = 8;
  sizes[2] = 8;
  check_error(p.status(p.api->launch(&a)), StatusCode::kInvalidArgument,
              {"argument #2 is 8 bytes", "declares 4 bytes"});
  sizes[2] = 4;
  offsets[7] = 40;  // past the buffer
  check_error(p.status(p.api->launch(&a)), StatusCode::kInvalidArgument, {"argument #7"});
  offsets[7] = 36;
  REQUIRE_OK(p.status(p.api->launch(&a)));
  // A kernel handle of another device is refused.
  SparkrtDeviceOpenArgs open{SPARKRT_DEVICE_OPEN_ARGS_SIZE, 0, nullptr};
  REQUIRE((p.api->device_open(&open) == nullptr));
  a.device = open.device;
  check_error(p.status(p.api->launch(&a)), StatusCode::kInvalidArgument, {"another device"});
  SparkrtDeviceCloseArgs close{SPARKRT_DEVICE_CLOSE_ARGS_SIZE, open.device};
  REQUIRE_OK(p.status(p.api->device_close(&close)));
}

TEST_CASE("mock ABI: launch attributes are read only where struct_size covers them") {
  Plugin p;
  SparkrtModule* m = p.load(twin_ptx());
  SparkrtKernel* k = p.kernel(m, kRope, rope_params());
  REQUIRE_OK(p.last);
  alignas(8) uint8_t params[40] = {};
  uint32_t offsets[8] = {0, 8, 16, 20, 24, 28, 32, 36};
  uint32_t sizes[8] = {8, 8, 4, 4, 4, 4, 4, 4};
  uint8_t kinds[8] = {SPARKRT_ARG_PTR, SPARKRT_ARG_PTR, SPARKRT_ARG_U32, SPARKRT_ARG_U32,
                      SPARKRT_ARG_U32, SPARKRT_ARG_U32, SPARKRT_ARG_F32, SPARKRT_ARG_U32};
  SparkrtLaunchArgs a{};
  a.device = p.device;
  a.kernel = k;
  a.grid[0] = 4;
  a.grid[1] = a.grid[2] = 1;
  a.block[0] = a.block[1] = a.block[2] = 1;
  a.params = params;
  a.params_size = sizeof params;
  a.num_args = 8;
  a.arg_offsets = offsets;
  a.arg_sizes = sizes;
  a.arg_kinds = kinds;
  a.flags = SPARKRT_LAUNCH_DEPENDENT;
  a.cluster[0] = 2;
  a.cluster[1] = a.cluster[2] = 1;
  // A runtime of ABI 1.3 sends the shorter struct: what lies past it is not
  // read, so the launch has no attributes.
  a.struct_size = SPARKRT_LAUNCH_ARGS_SIZE_1_3;
  REQUIRE_OK(p.status(p.api->launch(&a)));
  a.struct_size = SPARKRT_LAUNCH_ARGS_SIZE;
  REQUIRE_OK(p.status(p.api->launch(&a)));
  a.struct_size = SPARKRT_LAUNCH_ARGS_SIZE_1_3 - 1;
  check_error(p.status(p.api->launch(&a)), StatusCode::kInvalidArgument, {"struct_size"});

  SparkrtMockLaunchAttributes attrs{};
  attrs.struct_size = SPARKRT_MOCK_LAUNCH_ATTRIBUTES_SIZE;
  REQUIRE_OK(p.status(p.ext->get_launch_attributes(p.device, 0, &attrs)));
  CHECK(attrs.flags == 0);
  CHECK((attrs.cluster[0] == 0 && attrs.cluster[1] == 0 && attrs.cluster[2] == 0));
  REQUIRE_OK(p.status(p.ext->get_launch_attributes(p.device, 1, &attrs)));
  CHECK(attrs.flags == SPARKRT_LAUNCH_DEPENDENT);
  CHECK((attrs.cluster[0] == 2 && attrs.cluster[1] == 1 && attrs.cluster[2] == 1));
  check_error(p.status(p.ext->get_launch_attributes(p.device, 2, &attrs)), StatusCode::kOutOfRange,
              {"index 2", "2 launches"});
  attrs.struct_size = sizeof(size_t);
  check_error(p.status(p.ext->get_launch_attributes(p.device, 0, &attrs)),
              StatusCode::kInvalidArgument, {"struct_size"});

  // The device reports what the mock records.
  SparkrtDeviceProperties props{};
  props.struct_size = SPARKRT_DEVICE_PROPERTIES_SIZE;
  SparkrtDeviceGetPropertiesArgs get{SPARKRT_DEVICE_GET_PROPERTIES_ARGS_SIZE, p.device, &props};
  REQUIRE_OK(p.status(p.api->device_get_properties(&get)));
  CHECK(props.supports_dependent_launch == 1);
  CHECK(props.supports_clusters == 1);
  CHECK(props.max_cluster_size == 8);
}

TEST_CASE("mock ABI: the extension refuses handles that are not open mock devices") {
  Plugin p;
  uint64_t n = 0;
  int not_a_device = 0;
  check_error(p.status(p.ext->lookup_count(reinterpret_cast<SparkrtDevice*>(&not_a_device), &n)),
              StatusCode::kInvalidArgument, {"lookup_count", "not an open device of the mock"});
  check_error(p.status(p.ext->reset(nullptr)), StatusCode::kInvalidArgument, {"reset"});
  // A closed device is no longer known.
  SparkrtDeviceOpenArgs open{SPARKRT_DEVICE_OPEN_ARGS_SIZE, 0, nullptr};
  REQUIRE((p.api->device_open(&open) == nullptr));
  SparkrtDeviceCloseArgs close{SPARKRT_DEVICE_CLOSE_ARGS_SIZE, open.device};
  REQUIRE_OK(p.status(p.api->device_close(&close)));
  check_error(p.status(p.ext->launch_count(open.device, &n)), StatusCode::kInvalidArgument,
              {"not an open device"});
}

TEST_CASE("mock ABI: the extension checks struct sizes, indices and fault codes") {
  Plugin p;
  SparkrtMockCounters small{};
  small.struct_size = SPARKRT_MOCK_COUNTERS_SIZE - 8;
  check_error(p.status(p.ext->get_counters(p.device, &small)), StatusCode::kInvalidArgument,
              {"struct_size"});
  check_error(p.status(p.ext->get_counters(p.device, nullptr)), StatusCode::kInvalidArgument,
              {"null"});
  SparkrtMockLaunch l{};
  l.struct_size = SPARKRT_MOCK_LAUNCH_SIZE;
  check_error(p.status(p.ext->get_launch(p.device, 0, &l)), StatusCode::kOutOfRange,
              {"index 0", "0 launches"});
  check_error(p.status(p.ext->fail_launch(p.device, 1, 99)), StatusCode::kInvalidArgument, {"99"});
  check_error(p.status(p.ext->deny_lookup(p.device, "m", "e", -1)), StatusCode::kInvalidArgument,
              {"-1"});
  SparkrtMockPointerInfo info{};
  info.struct_size = SPARKRT_MOCK_POINTER_INFO_SIZE;
  check_error(p.status(p.ext->pointer_info(p.device, 0x42, &info)), StatusCode::kNotFound, {"0x42"});
}

TEST_CASE("mock ABI: closing a device frees what it still owns") {
  // Run under ASan/LSan this shows no leak: the device owns its modules,
  // memory and host allocations until close.
  Plugin p;
  SparkrtModule* m = p.load(twin_ptx());
  REQUIRE((m != nullptr));
  p.kernel(m, kRope, rope_params());
  REQUIRE_OK(p.last);
  SparkrtMemAllocArgs alloc{SPARKRT_MEM_ALLOC_ARGS_SIZE, p.device, 1 << 20, 0};
  REQUIRE_OK(p.status(p.api->mem_alloc(&alloc)));
  SparkrtHostAllocArgs host{SPARKRT_HOST_ALLOC_ARGS_SIZE, p.device, 4096, nullptr};
  REQUIRE_OK(p.status(p.api->host_alloc(&host)));
  SparkrtMockCounters c{};
  c.struct_size = SPARKRT_MOCK_COUNTERS_SIZE;
  REQUIRE_OK(p.status(p.ext->get_counters(p.device, &c)));
  CHECK(c.live_allocations == 1);
  CHECK(c.host_allocations == 1);
}
