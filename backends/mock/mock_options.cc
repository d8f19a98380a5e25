// What a mock device reports, and what the environment changes at each open:
// SPARKRT_MOCK_PROPERTIES (the properties) and SPARKRT_MOCK_LOG (the trace).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "mock_device.h"

namespace sparkrt::mock {
namespace {

// SPARKRT_MOCK_PROPERTIES: comma-separated key=value pairs that change what
// the device reports, e.g. "multiprocessor_count=48,
// max_shared_memory_per_block_optin=101376" for a GB10-like part.
absl::Status parse_properties(absl::string_view text, uint32_t& multiprocessors,
                              uint32_t& shared_optin) {
  constexpr absl::string_view kKnown = "multiprocessor_count, max_shared_memory_per_block_optin";
  std::vector<absl::string_view> seen;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    const absl::string_view key = absl::StripAsciiWhitespace(item.substr(0, eq));
    // Which of two settings was meant is a guess; refuse rather than pick.
    if (eq != absl::string_view::npos && std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SPARKRT_MOCK_PROPERTIES: key '%s' is given twice in '%s'; give each key once", key,
          text));
    }
    seen.push_back(key);
    uint32_t value = 0;
    if (eq == absl::string_view::npos ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(item.substr(eq + 1)), &value) || value == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SPARKRT_MOCK_PROPERTIES: '%s' is not key=<positive integer> (keys: %s)", item, kKnown));
    }
    if (key == "multiprocessor_count") {
      multiprocessors = value;
    } else if (key == "max_shared_memory_per_block_optin") {
      if (value < 48 * 1024) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "SPARKRT_MOCK_PROPERTIES: max_shared_memory_per_block_optin %d is below the 49152 "
            "bytes every block may use",
            value));
      }
      shared_optin = value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("SPARKRT_MOCK_PROPERTIES: unknown key '%s' (keys: %s)", key, kKnown));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MockDevice::init_from_environment() {
  if (const char* props = std::getenv("SPARKRT_MOCK_PROPERTIES"); props != nullptr) {
    std::lock_guard lock(mu_);
    absl::Status s = parse_properties(props, multiprocessor_count_, shared_memory_optin_);
    if (!s.ok()) return s;
  }
  const char* path = std::getenv("SPARKRT_MOCK_LOG");
  if (path == nullptr || path[0] == '\0') return absl::OkStatus();
  std::lock_guard lock(mu_);
  // Appending: every mock device of a process (and of several processes)
  // lands in the one file.
  absl::Status s = log_.open(path, /*append=*/true);
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("SPARKRT_MOCK_LOG: ", s.message(), " (or unset SPARKRT_MOCK_LOG)"));
  }
  log_.begin("device_open");
  log_.field("device", "sparkrt mock device");
  log_.end();
  if (!log_.status().ok()) {
    // A file that takes no line (a full disk, /dev/full) fails the open
    // rather than every call after it.
    return absl::FailedPreconditionError(absl::StrCat(
        "SPARKRT_MOCK_LOG: ", log_.status().message(), " (or unset SPARKRT_MOCK_LOG)"));
  }
  return absl::OkStatus();
}

absl::Status MockDevice::properties(SparkrtDeviceProperties& out) {
  std::snprintf(out.name, sizeof(out.name), "%s", "sparkrt mock device");
  out.architecture[0] = '\0';  // no native image format: PTX only
  out.total_memory = kTotalMemory;
  out.multiprocessor_count = multiprocessor_count_;
  out.warp_size = 32;
  out.max_threads_per_block = 1024;
  out.max_block_dim[0] = 1024;
  out.max_block_dim[1] = 1024;
  out.max_block_dim[2] = 64;
  out.max_grid_dim[0] = 0x7fffffffu;
  out.max_grid_dim[1] = 65535;
  out.max_grid_dim[2] = 65535;
  out.max_shared_memory_per_block = 48 * 1024;
  out.max_shared_memory_per_block_optin = shared_memory_optin_;
  out.compute_capability_major = 0;  // not a CUDA device
  out.compute_capability_minor = 0;
  out.image_formats = (1u << SPARKRT_IMAGE_PTX) | (1u << SPARKRT_IMAGE_SIGNATURES);
  // Records launch attributes as a Hopper GPU takes them (8: CUDA's portable
  // cluster size).
  out.supports_dependent_launch = 1;
  out.supports_clusters = 1;
  out.max_cluster_size = 8;
  return absl::OkStatus();
}

}  // namespace sparkrt::mock
