// Loading backend plugins: finding the file, opening it with Boost.DLL,
// validating the API table, and converting plugin errors to absl::Status.
#ifndef SPARKRT_RUNTIME_PLUGIN_H_
#define SPARKRT_RUNTIME_PLUGIN_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/dll/shared_library.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sparkrt/plugin_api.h"

namespace sparkrt::detail {

// A loaded plugin library. Shared by every Device opened from it; the
// library is unloaded when the last owner lets go.
class Plugin {
 public:
  // Loads and validates the plugin at `path`. Identical paths share one load.
  static absl::StatusOr<std::shared_ptr<Plugin>> load(const std::string& path);

  const SparkrtPluginApi& api() const { return *api_; }
  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }

  // Converts (and releases) a plugin error; OK for nullptr. `context`
  // prefixes the message, e.g. "mock: mem_alloc(1024 bytes)".
  absl::Status status(SparkrtError* error, std::string_view context) const;

  Plugin(boost::dll::shared_library library, const SparkrtPluginApi* api, std::string path);

 private:
  boost::dll::shared_library library_;
  const SparkrtPluginApi* api_;
  std::string path_;
  std::string name_;
  std::string version_;
};

// libsparkrt_backend_<name>.so
std::string plugin_file_name(std::string_view backend);

// The folders searched for plugins, in order.
std::vector<std::string> plugin_folders();

struct PluginFile {
  std::string name;  // backend name from the file name
  std::string path;
};
// Every libsparkrt_backend_<name>.so in plugin_folders(); the first file of
// each name wins. Sorted by name.
std::vector<PluginFile> discover_plugins();

// The folder libsparkrt.so was loaded from.
std::string runtime_library_folder();

}  // namespace sparkrt::detail

#endif  // SPARKRT_RUNTIME_PLUGIN_H_
