// The suite's runner: opens the backend once to learn which plugin file and
// device the cases test and which features they skip, then runs doctest.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "suite.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "conformance.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/extensions/mock.h"

namespace sparkrt::conformance {
namespace {

constexpr Feature kFeatures[] = {
    {"graphs", "capture and replay of stream work through " SPARKRT_GRAPH_EXTENSION_NAME,
     "the plugin does not offer " SPARKRT_GRAPH_EXTENSION_NAME},
    {"kernel-results", "kernels compute their results (vector_add_f32, fill_u32)",
     "the plugin offers " SPARKRT_MOCK_EXTENSION_NAME
     ": a recording device, whose launches are recorded, not run"},
    {"wide-parameters",
     "a kernel with 144 bytes of parameters gets every byte (copy_args_u32; past the 128 bytes "
     "of Vulkan push constants)",
     "the plugin does not run vector_ops.copy_args_u32 (UNIMPLEMENTED)"},
    {"overlapping-copies",
     "a device copy between overlapping ranges of one allocation moves the bytes as memmove "
     "does",
     nullptr},
    {"out-of-bounds", "copies and memsets that run past the end of an allocation fail", nullptr},
    {"use-after-free", "copies from and to freed memory fail", nullptr},
    {"launch-attributes",
     "dependent launches run (and a mock records them); clusters launch where the device has "
     "supports_clusters and are UNIMPLEMENTED where not",
     "the plugin speaks ABI 1.3 or older: a dependent launch is FAILED_PRECONDITION"},
};

// Gaps of the in-tree backends that cannot be detected, keyed by the name
// the plugin reports. Out-of-tree backends declare theirs with --skip.
struct KnownGap {
  const char* backend;
  const char* feature;
  const char* reason;
};
constexpr KnownGap kKnownGaps[] = {
    {"cuda", "overlapping-copies",
     "cuMemcpyDtoD leaves overlapping ranges undefined, as CUDA's documentation says"},
    {"cuda", "use-after-free",
     "freed memory stays mapped in the driver's pool, so the driver cannot tell a stale pointer "
     "from a live one"},
};

struct State {
  std::string plugin_path;  // what every case opens
  int index = 0;
  std::string name;       // as the plugin reports it
  std::string requested;  // the name asked for, "" for a path or auto
  std::map<std::string, std::string, std::less<>> skipped;  // feature -> reason
};
State g_state;

// False when the runtime refuses launch attributes for the plugin's ABI
// version: one dependent launch of fill_u32 over one element tells.
bool takes_launch_attributes(Device& dev) {
  auto fill = dev.kernel("vector_ops", "fill_u32");
  auto out = dev.alloc(256);
  if (!fill.ok() || !out.ok()) return true;  // the cases report the failure
  const absl::Status s = KernelLaunch(dev, *fill).grid({1}).block({1}).dependent_launch()
                             .arg(*out).arg(1u).arg(1u).launch();
  dev.synchronize().IgnoreError();
  dev.free(*out).IgnoreError();
  return s.code() != absl::StatusCode::kFailedPrecondition;
}

// Why each feature is skipped on `dev`. A declaration with --skip wins: it is
// the most specific.
std::map<std::string, std::string, std::less<>> decide_skips(Device& dev,
                                                             const SuiteOptions& options) {
  std::map<std::string, std::string, std::less<>> out;
  const auto detected = [&](const char* feature) {
    out[feature] = std::string(find_feature(feature)->detected) + " (detected)";
  };
  if (dev.extension(SPARKRT_GRAPH_EXTENSION_NAME) == nullptr) detected("graphs");
  if (dev.extension(SPARKRT_MOCK_EXTENSION_NAME) != nullptr) detected("kernel-results");
  if (!takes_launch_attributes(dev)) detected("launch-attributes");
  // An out-of-tree plugin may run only some kernels; the in-tree ones run all.
  constexpr std::string_view kInTree[] = {"cuda", "vulkan", "cpu", "mock"};
  if (std::find(std::begin(kInTree), std::end(kInTree), dev.backend_name()) == std::end(kInTree)) {
    auto wide = dev.kernel("vector_ops", "copy_args_u32");
    if (!wide.ok() && wide.status().code() == absl::StatusCode::kUnimplemented)
      detected("wide-parameters");
  }
  for (const KnownGap& gap : kKnownGaps) {
    if (dev.backend_name() == gap.backend) {
      out[gap.feature] = std::string(gap.reason) + " (declared for the in-tree " + gap.backend +
                         " backend)";
    }
  }
  for (const auto& [feature, reason] : options.skips) out[feature] = reason + " (--skip)";
  return out;
}

// doctest's own options that only print (list cases, help): no device needed.
bool only_prints(const std::vector<std::string>& doctest_args) {
  for (const std::string& a : doctest_args) {
    if (a.find("-list") != std::string::npos || a.find("-ltc") != std::string::npos ||
        a.find("-lts") != std::string::npos || a.find("-lr") != std::string::npos ||
        a == "-h" || a == "-?" || a.find("-help") != std::string::npos ||
        a.find("-version") != std::string::npos)
      return true;
  }
  return false;
}

int run_doctest(const std::vector<std::string>& args) {
  std::vector<const char*> argv = {"sparkrt conformance"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  doctest::Context context;
  context.applyCommandLine(static_cast<int>(argv.size()), argv.data());
  return context.run();
}

}  // namespace

std::span<const Feature> features() { return kFeatures; }

const Feature* find_feature(std::string_view name) {
  for (const Feature& f : kFeatures)
    if (name == f.name) return &f;
  return nullptr;
}

const std::string& backend_name() { return g_state.name; }
const std::string& requested_name() { return g_state.requested; }

const char* skip_reason(std::string_view feature) {
  // A misspelt name in a case would silently never skip.
  REQUIRE_MESSAGE(find_feature(feature) != nullptr, "no feature named " << std::string(feature));
  auto it = g_state.skipped.find(feature);
  return it == g_state.skipped.end() ? nullptr : it->second.c_str();
}

std::unique_ptr<Device> open_device() {
  auto dev = Device::open({.backend = g_state.plugin_path, .device_index = g_state.index});
  REQUIRE_MESSAGE(dev.ok(), "open " << g_state.plugin_path << " device " << g_state.index << ": "
                                    << std::string(dev.status().ToString()));
  return *std::move(dev);
}

int list_suite() {
  std::printf("features (--skip FEATURE:REASON declares one the backend cannot offer):\n");
  for (const Feature& f : kFeatures) {
    std::printf("  %-15s %s\n", f.name, f.checks);
    if (f.detected != nullptr) std::printf("  %-15s skipped when %s\n", "", f.detected);
  }
  std::printf("\n");
  std::fflush(stdout);
  return run_doctest({"--list-test-cases"});
}

int run_suite(const SuiteOptions& options) {
  if (only_prints(options.doctest_args)) return run_doctest(options.doctest_args);

  // What Device::open does with an empty backend, spelt out for the messages.
  std::string asked = options.backend;
  if (asked.empty()) {
    const char* env = std::getenv("SPARKRT_BACKEND");
    asked = env != nullptr && *env != '\0' ? env : "auto";
  }
  auto dev = Device::open({.backend = options.backend});
  if (!dev.ok()) {
    const std::string message(dev.status().message());
    if (dev.status().code() == absl::StatusCode::kUnavailable) {
      std::printf("SKIPPED: backend %s has no usable device on this machine: %s\n", asked.c_str(),
                  message.c_str());
      return 77;
    }
    std::fprintf(stderr, "sparkrt conformance: cannot open backend %s: %s\n", asked.c_str(),
                 message.c_str());
    return 1;
  }
  g_state.plugin_path = (*dev)->plugin_path();
  g_state.index = (*dev)->index();
  g_state.name = (*dev)->backend_name();
  const bool is_name = asked != "auto" && asked.find('/') == std::string::npos && !asked.ends_with(".so");
  g_state.requested = is_name ? asked : "";
  g_state.skipped = decide_skips(**dev, options);

  const DeviceProperties& p = (*dev)->properties();
  std::printf("conformance: backend %s %s, device %d: %s%s%s, plugin %s\n", g_state.name.c_str(),
              (*dev)->plugin_version().c_str(), g_state.index, p.name.c_str(),
              p.architecture.empty() ? "" : " ", p.architecture.c_str(), g_state.plugin_path.c_str());
  std::string checked;
  for (const Feature& f : kFeatures) {
    if (g_state.skipped.contains(f.name)) continue;
    checked += checked.empty() ? f.name : std::string(", ") + f.name;
  }
  std::printf("features checked: %s\n", checked.empty() ? "(none)" : checked.c_str());
  for (const auto& [feature, reason] : g_state.skipped)
    std::printf("feature skipped: %s: %s\n", feature.c_str(), reason.c_str());
  std::fflush(stdout);

  // The first device stays open while the cases run, so the plugin stays
  // loaded between them.
  const int rc = run_doctest(options.doctest_args);
  if (!g_state.skipped.empty()) {
    std::string names;
    for (const auto& [feature, reason] : g_state.skipped)
      names += names.empty() ? feature : ", " + feature;
    std::printf("conformance: %s: cases of %zu feature%s not checked (reasons above): %s\n",
                g_state.name.c_str(), g_state.skipped.size(),
                g_state.skipped.size() == 1 ? "" : "s", names.c_str());
  }
  return rc;
}

}  // namespace sparkrt::conformance
