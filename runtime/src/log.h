// Messages to stderr, by level, chosen with SPARKRT_LOG (case-insensitive):
//   error  failures no call can return (a device destroyed without close()
//          whose close failed); the default
//   warn   and problems the runtime worked around
//   info   and one line per notable event
//   debug  and every plugin and module load decision, as it is made
// Each level prints its own messages and those of the levels above it.
#ifndef SPARKRT_RUNTIME_LOG_H_
#define SPARKRT_RUNTIME_LOG_H_

#include <string>

namespace sparkrt::detail {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// SPARKRT_LOG, read once. Unset or empty: kError. Any other value that is
// not a level prints one warning naming the accepted values, then kError.
LogLevel log_level();
inline bool log_enabled(LogLevel level) { return level <= log_level(); }

// "[sparkrt] error: ...", "[sparkrt] warning: ...", "[sparkrt] ..." (info
// and debug), one line each, when the level is enabled.
void log(LogLevel level, const std::string& message);
inline void log_error(const std::string& message) { log(LogLevel::kError, message); }
inline void log_warn(const std::string& message) { log(LogLevel::kWarn, message); }
inline void log_info(const std::string& message) { log(LogLevel::kInfo, message); }
inline void log_debug(const std::string& message) { log(LogLevel::kDebug, message); }

}  // namespace sparkrt::detail

#endif  // SPARKRT_RUNTIME_LOG_H_
