// The cuda plugin on machines without a usable driver: it must load, and
// device_count must say plainly why there is no device. Runs everywhere (CI
// included); with a driver present it checks the count instead.
//
//   sparkrt_cuda_plugin_load_test <plugin.so> [expect-stub]
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "sparkrt/extensions/graph.h"
#include "sparkrt/plugin_api.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <libsparkrt_backend_cuda.so> [expect-stub]\n", argv[0]);
    return 2;
  }
  const bool expect_stub = argc > 2 && std::strcmp(argv[2], "expect-stub") == 0;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  check(lib != nullptr,
        std::string("the plugin loads without libcuda: ") + (lib ? argv[1] : dlerror()));
  if (lib == nullptr) return 1;
  auto entry = reinterpret_cast<SparkrtPluginEntryFn>(dlsym(lib, SPARKRT_PLUGIN_ENTRY_SYMBOL));
  check(entry != nullptr, "it exports " SPARKRT_PLUGIN_ENTRY_SYMBOL);
  if (entry == nullptr) return 1;
  const SparkrtPluginApi* api = entry();
  check(std::strcmp(api->name, "cuda") == 0, "its name is cuda");
  check(api->abi_major == SPARKRT_ABI_MAJOR, "its ABI major matches");

  SparkrtDeviceCountArgs count{SPARKRT_DEVICE_COUNT_ARGS_SIZE, -1};
  SparkrtError* error = api->device_count(&count);
  if (error == nullptr) {
    check(!expect_stub, "device_count succeeds only with a real driver");
    check(count.count > 0,
          "a driver is present and reports " + std::to_string(count.count) + " devices");
  } else {
    const char* msg = nullptr;
    size_t size = 0;
    api->error_message(error, &msg, &size);
    const std::string message(msg, size);
    std::printf("device_count: %s\n", message.c_str());
    check(api->error_code(error) == SPARKRT_UNAVAILABLE, "the error is Unavailable");
    check(message.find("no CUDA driver: libcuda.so.1") == 0, "the message starts with the cause");
    check(message.find(expect_stub ? "stub library" : "not found") != std::string::npos,
          expect_stub ? "it names the stub library" : "it says the library was not found");
    check(message.find("SPARKRT_BACKEND") != std::string::npos, "it says what to do");
    api->error_destroy(error);
    // Opening fails the same way instead of crashing.
    SparkrtDeviceOpenArgs open{SPARKRT_DEVICE_OPEN_ARGS_SIZE, 0, nullptr};
    SparkrtError* open_error = api->device_open(&open);
    check(open_error != nullptr && api->error_code(open_error) == SPARKRT_UNAVAILABLE,
          "device_open fails with Unavailable too");
    if (open_error != nullptr) api->error_destroy(open_error);
  }
  SparkrtGetExtensionArgs ext{SPARKRT_GET_EXTENSION_ARGS_SIZE, SPARKRT_GRAPH_EXTENSION_NAME,
                              nullptr};
  check(api->get_extension(&ext) == nullptr && ext.extension != nullptr,
        "it offers " SPARKRT_GRAPH_EXTENSION_NAME);
  if (ext.extension != nullptr) {
    const auto* g = static_cast<const SparkrtGraphExtension*>(ext.extension);
    check(g->struct_size >= SPARKRT_GRAPH_EXTENSION_SIZE, "the graph table is complete");
    SparkrtGraphCaptureArgs bad{SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, nullptr, 1};
    SparkrtError* e = g->begin_capture(&bad);
    check(e != nullptr && g->error_code(e) == SPARKRT_INVALID_ARGUMENT,
          "a null device is refused by the graph table");
    if (e != nullptr) g->error_destroy(e);
  }
  std::printf("%s\n", failures == 0 ? "all checks passed" : "some checks FAILED");
  return failures == 0 ? 0 : 1;
}
