#include "log.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace sparkrt::detail {
namespace {

LogLevel level_from_environment() {
  const char* v = std::getenv("SPARKRT_LOG");
  if (v == nullptr || *v == '\0') return LogLevel::kError;
  constexpr struct {
    const char* name;
    LogLevel level;
  } kLevels[] = {{"error", LogLevel::kError},
                 {"warn", LogLevel::kWarn},
                 {"info", LogLevel::kInfo},
                 {"debug", LogLevel::kDebug}};
  for (const auto& l : kLevels)
    if (absl::EqualsIgnoreCase(v, l.name)) return l.level;
  // Once: the level is read once per process.
  std::fprintf(stderr,
               "[sparkrt] warning: SPARKRT_LOG='%s' is not a log level; accepted (any case): "
               "error, warn, info, debug; using error\n",
               v);
  return LogLevel::kError;
}

}  // namespace

LogLevel log_level() {
  static const LogLevel level = level_from_environment();
  return level;
}

void log(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  const char* prefix = level == LogLevel::kError  ? "error: "
                       : level == LogLevel::kWarn ? "warning: "
                                                  : "";
  std::fprintf(stderr, "[sparkrt] %s%s\n", prefix, message.c_str());
}

}  // namespace sparkrt::detail
