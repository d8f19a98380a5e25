// SPARKRT_LOG=debug: load decisions printed to stderr as they are made.
#ifndef SPARKRT_RUNTIME_LOG_H_
#define SPARKRT_RUNTIME_LOG_H_

#include <string>

namespace sparkrt::detail {

bool debug_logging();  // SPARKRT_LOG=debug, read once
void log_debug(const std::string& message);

}  // namespace sparkrt::detail

#endif  // SPARKRT_RUNTIME_LOG_H_
