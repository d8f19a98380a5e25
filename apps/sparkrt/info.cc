// `sparkrt info`: what the runtime sees. Every backend found is listed with
// why it can or cannot be used, so a failed selection can be diagnosed from
// this output alone.
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "sparkrt/backends.h"
#include "sparkrt/communicator.h"
#include "sparkrt/device.h"

namespace sparkrt::cli {

std::string format_bytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%d B", bytes);
  // Whole numbers print without a fraction: "48 KiB", "1.5 GiB".
  if (value == static_cast<double>(static_cast<uint64_t>(value))) {
    return absl::StrFormat("%d %s", static_cast<uint64_t>(value), kUnits[unit]);
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

void print_properties(const Device& dev, std::ostream& out) {
  const DeviceProperties& p = dev.properties();
  const auto row = [&out](const char* key, const std::string& value) {
    out << absl::StrFormat("  %-24s %s\n", key, value);
  };
  const auto dims = [](const Dim3& d) { return absl::StrFormat("%d x %d x %d", d.x, d.y, d.z); };
  out << absl::StrFormat("device %d of backend %s (plugin %s, %s)\n", dev.index(),
                         dev.backend_name(), dev.plugin_version(), dev.plugin_path());
  row("name", p.name);
  if (!p.driver.empty()) row("driver", p.driver);
  row("architecture", p.architecture.empty() ? "(none)" : p.architecture);
  if (p.compute_capability_major != 0) {
    row("compute capability",
        absl::StrFormat("%d.%d", p.compute_capability_major, p.compute_capability_minor));
  }
  row("total memory", absl::StrFormat("%s (%d bytes)", format_bytes(p.total_memory), p.total_memory));
  row("multiprocessors", absl::StrFormat("%d", p.multiprocessor_count));
  row("warp size", absl::StrFormat("%d", p.warp_size));
  row("max threads per block", absl::StrFormat("%d", p.max_threads_per_block));
  row("max block", dims(p.max_block_dim));
  row("max grid", dims(p.max_grid_dim));
  row("shared memory per block", absl::StrFormat("%s (opt-in up to %s)",
                                                 format_bytes(p.max_shared_memory_per_block),
                                                 format_bytes(p.max_shared_memory_per_block_optin)));
  std::vector<std::string> formats;
  if (p.accepts_cubin) formats.push_back("cubin");
  if (p.accepts_ptx) formats.push_back("ptx");
  if (p.accepts_spirv) formats.push_back("spirv");
  if (p.accepts_signatures) formats.push_back("signatures");
  row("module images", formats.empty() ? "(none)" : absl::StrJoin(formats, ", "));
  if (p.emulated) row("emulated", "yes: the GPU API runs on the host CPU (auto passes it over)");
  // A missing collectives library is information here, not a failure.
  auto collectives = Communicator::library(dev);
  row("collectives", collectives.ok() ? *collectives
                                      : absl::StrFormat("unavailable: %s",
                                                        collectives.status().message()));
}

}  // namespace

absl::Status run_info(std::ostream& out) {
  out << "sparkrt " << SPARKRT_CLI_VERSION << "\n\nplugin search path:\n";
  for (const std::string& dir : plugin_search_path()) out << "  " << dir << "\n";

  out << "\nbackends:\n";
  const auto probes = probe_backends();
  if (probes.empty()) out << "  (no plugin files found in the search path)\n";
  for (const BackendProbe& probe : probes) {
    const std::string version = probe.version.empty() ? "" : " " + probe.version;
    if (probe.status.ok()) {
      out << absl::StrFormat("  %s%s: %d device%s\n", probe.name, version, probe.device_count,
                             probe.device_count == 1 ? "" : "s");
    } else {
      out << absl::StrFormat("  %s%s: unusable: %s\n", probe.name, version, probe.status.message());
    }
    out << "      " << probe.path << "\n";
  }

  const std::string backend = env_or("SPARKRT_BACKEND", "auto");
  const std::string device = env_or("SPARKRT_DEVICE", "0");
  out << absl::StrFormat("\nselected: SPARKRT_BACKEND=%s SPARKRT_DEVICE=%s\n", backend, device);
  out.flush();
  auto dev = Device::open();
  if (!dev.ok()) {
    return absl::Status(dev.status().code(),
                        absl::StrFormat("no device for SPARKRT_BACKEND=%s SPARKRT_DEVICE=%s: %s",
                                        backend, device, dev.status().message()));
  }
  print_properties(**dev, out);
  return (*dev)->close();
}

}  // namespace sparkrt::cli
