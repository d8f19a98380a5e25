#include "sparkrt/backends.h"

#include "plugin.h"

namespace sparkrt {

std::vector<std::string> plugin_search_path() { return detail::plugin_folders(); }

std::vector<BackendProbe> probe_backends() {
  std::vector<BackendProbe> probes;
  for (const auto& file : detail::discover_plugins()) {
    BackendProbe probe{file.name, file.path, {}, absl::OkStatus(), 0};
    auto plugin = detail::Plugin::load(file.path);
    if (!plugin.ok()) {
      probe.status = plugin.status();
    } else {
      probe.version = (*plugin)->version();
      SparkrtDeviceCountArgs count{SPARKRT_DEVICE_COUNT_ARGS_SIZE, 0};
      probe.status = (*plugin)->status((*plugin)->api().device_count(&count), file.name + ": device_count");
      if (probe.status.ok()) probe.device_count = count.count;
    }
    probes.push_back(std::move(probe));
  }
  return probes;
}

}  // namespace sparkrt
