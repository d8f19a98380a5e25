// Plugins that are wrong in one way each, built as separate libraries by
// defining one BROKEN_* macro. The loader must reject every one with a
// message naming the file and the cause.
#include <cstddef>

#include "sparkrt/plugin_api.h"

#if defined(BROKEN_NO_ENTRY)
// A valid shared library without the entry symbol.
extern "C" __attribute__((visibility("default"))) int sparkrt_something_else(void) { return 1; }

#elif defined(BROKEN_NULL_TABLE)
extern "C" __attribute__((visibility("default"))) const SparkrtPluginApi* sparkrt_plugin_api(void) {
  return nullptr;
}

#else
namespace {
SparkrtPluginApi make_table() {
  SparkrtPluginApi api{};
  api.struct_size = SPARKRT_PLUGIN_API_SIZE;
  api.abi_major = SPARKRT_ABI_MAJOR;
  api.abi_minor = SPARKRT_ABI_MINOR;
  api.name = "broken";
  api.version = "0";
#if defined(BROKEN_WRONG_MAJOR)
  api.abi_major = SPARKRT_ABI_MAJOR + 1;
#elif defined(BROKEN_SHORT_STRUCT)
  api.struct_size = SPARKRT_STRUCT_SIZE(SparkrtPluginApi, error_destroy);
#elif defined(BROKEN_TINY_STRUCT)
  api.struct_size = sizeof(size_t);
#elif defined(BROKEN_NULL_FUNCTION)
  // Every function left null: the first one checked is reported.
#else
#error "define one BROKEN_* macro"
#endif
  return api;
}
const SparkrtPluginApi kApi = make_table();
}  // namespace

extern "C" __attribute__((visibility("default"))) const SparkrtPluginApi* sparkrt_plugin_api(void) {
  return &kApi;
}
#endif
