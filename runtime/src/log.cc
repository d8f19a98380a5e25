#include "log.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace sparkrt::detail {

bool debug_logging() {
  static const bool enabled = [] {
    const char* v = std::getenv("SPARKRT_LOG");
    return v != nullptr && std::string_view(v) == "debug";
  }();
  return enabled;
}

void log_debug(const std::string& message) {
  if (debug_logging()) std::fprintf(stderr, "[sparkrt] %s\n", message.c_str());
}

}  // namespace sparkrt::detail
