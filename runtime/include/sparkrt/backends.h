// Backend plugin discovery, for tools and diagnostics (`sparkrt info`).
// Device::open does the same search; this exposes what it sees.
//
// Plugin files are named libsparkrt_backend_<name>.so. Search order:
//   1. each folder of SPARKRT_PLUGIN_PATH (':'-separated);
//   2. the plugin folder next to libsparkrt.so (<libdir>/sparkrt/plugins): the
//      installed plugins, or those of an uninstalled build, whose tree has the
//      same layout.
#ifndef SPARKRT_BACKENDS_H_
#define SPARKRT_BACKENDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace sparkrt {

struct BackendProbe {
  std::string name;     // from the file name
  std::string path;     // the file probed
  std::string version;  // the plugin's version, when it loaded
  absl::Status status;  // why it cannot be used, or OK
  int device_count = 0;
};

// Folders searched for plugins, in order.
std::vector<std::string> plugin_search_path();

// Loads every plugin file found (first of each name wins) and asks it for its
// devices. Never fails as a whole: each probe carries its own status.
std::vector<BackendProbe> probe_backends();

}  // namespace sparkrt

#endif  // SPARKRT_BACKENDS_H_
