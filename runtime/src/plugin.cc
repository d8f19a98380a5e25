#include "plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "log.h"

namespace sparkrt::detail {
namespace {

namespace fs = std::filesystem;

// The table fields in declaration order, to reject a plugin that leaves one
// null before any of them is called.
struct NamedFn {
  const char* name;
  bool (*present)(const SparkrtPluginApi&);
};
#define SPARKRT_FN_ENTRY(f) {#f, [](const SparkrtPluginApi& a) { return a.f != nullptr; }}
const NamedFn kFunctions[] = {
    SPARKRT_FN_ENTRY(error_code),       SPARKRT_FN_ENTRY(error_message),
    SPARKRT_FN_ENTRY(error_destroy),    SPARKRT_FN_ENTRY(device_count),
    SPARKRT_FN_ENTRY(device_open),      SPARKRT_FN_ENTRY(device_close),
    SPARKRT_FN_ENTRY(device_get_properties), SPARKRT_FN_ENTRY(module_load),
    SPARKRT_FN_ENTRY(module_unload),    SPARKRT_FN_ENTRY(kernel_get),
    SPARKRT_FN_ENTRY(mem_alloc),        SPARKRT_FN_ENTRY(mem_free),
    SPARKRT_FN_ENTRY(host_alloc),       SPARKRT_FN_ENTRY(host_free),
    SPARKRT_FN_ENTRY(memset),           SPARKRT_FN_ENTRY(memcpy),
    SPARKRT_FN_ENTRY(stream_create),    SPARKRT_FN_ENTRY(stream_destroy),
    SPARKRT_FN_ENTRY(stream_synchronize), SPARKRT_FN_ENTRY(event_create),
    SPARKRT_FN_ENTRY(event_destroy),    SPARKRT_FN_ENTRY(event_record),
    SPARKRT_FN_ENTRY(event_synchronize), SPARKRT_FN_ENTRY(stream_wait_event),
    SPARKRT_FN_ENTRY(event_elapsed),    SPARKRT_FN_ENTRY(launch),
    SPARKRT_FN_ENTRY(get_extension),
};
#undef SPARKRT_FN_ENTRY

absl::Status validate(const SparkrtPluginApi* api, const std::string& path) {
  if (api == nullptr)
    return absl::InvalidArgumentError(absl::StrFormat(
        "plugin %s: %s() returned null; the plugin failed to initialise", path,
        SPARKRT_PLUGIN_ENTRY_SYMBOL));
  constexpr size_t kVersionEnd = SPARKRT_STRUCT_SIZE(SparkrtPluginApi, abi_minor);
  if (api->struct_size < kVersionEnd)
    return absl::InvalidArgumentError(absl::StrFormat(
        "plugin %s: API table is %d bytes, too short to carry a version (needs at least %d); "
        "it was not built with the sparkrt plugin SDK",
        path, api->struct_size, kVersionEnd));
  if (api->abi_major != SPARKRT_ABI_MAJOR)
    return absl::FailedPreconditionError(absl::StrFormat(
        "plugin %s: ABI version %d.%d, this runtime speaks %d.%d; major versions must match: "
        "rebuild the plugin against this sparkrt or use a matching runtime",
        path, api->abi_major, api->abi_minor, SPARKRT_ABI_MAJOR, SPARKRT_ABI_MINOR));
  if (api->struct_size < SPARKRT_PLUGIN_API_SIZE)
    return absl::FailedPreconditionError(absl::StrFormat(
        "plugin %s: API table is %d bytes (ABI %d.%d), this runtime (ABI %d.%d) needs %d; "
        "the table is truncated: rebuild the plugin against this sparkrt",
        path, api->struct_size, api->abi_major, api->abi_minor, SPARKRT_ABI_MAJOR,
        SPARKRT_ABI_MINOR, SPARKRT_PLUGIN_API_SIZE));
  if (api->name == nullptr || api->name[0] == '\0' || api->version == nullptr)
    return absl::InvalidArgumentError(
        absl::StrFormat("plugin %s: API table has no backend name or version", path));
  for (const auto& fn : kFunctions) {
    if (!fn.present(*api))
      return absl::InvalidArgumentError(absl::StrFormat(
          "plugin %s (%s): required function '%s' is null", path, api->name, fn.name));
  }
  return absl::OkStatus();
}

// Boost.DLL reports a failed dlopen as a bare errno; ask the loader itself
// for the reason (missing dependency, wrong ELF class, not an ELF file ...).
std::string dlopen_reason(const std::string& path) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) {
    dlclose(handle);
    return "unknown loader error";
  }
  const char* err = dlerror();
  return err != nullptr ? err : "unknown loader error";
}

absl::StatusOr<std::shared_ptr<Plugin>> load_uncached(const std::string& path) {
  std::error_code fs_ec;
  if (!fs::exists(path, fs_ec))
    return absl::NotFoundError(absl::StrFormat("plugin %s: no such file", path));
  if (!fs::is_regular_file(path, fs_ec))
    return absl::InvalidArgumentError(absl::StrFormat("plugin %s: not a regular file", path));

  boost::dll::shared_library library;
  boost::dll::fs::error_code ec;
  library.load(fs::path(path), ec,
               boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  if (ec || !library.is_loaded())
    return absl::InvalidArgumentError(absl::StrFormat(
        "plugin %s: cannot be loaded as a shared library: %s", path, dlopen_reason(path)));
  if (!library.has(SPARKRT_PLUGIN_ENTRY_SYMBOL))
    return absl::InvalidArgumentError(absl::StrFormat(
        "plugin %s: no '%s' symbol; this library is not a sparkrt plugin (plugins export it "
        "with SPARKRT_DEFINE_PLUGIN)",
        path, SPARKRT_PLUGIN_ENTRY_SYMBOL));
  auto& entry = library.get<const SparkrtPluginApi*()>(SPARKRT_PLUGIN_ENTRY_SYMBOL);
  const SparkrtPluginApi* api = entry();
  if (absl::Status s = validate(api, path); !s.ok()) return s;
  return std::make_shared<Plugin>(std::move(library), api, path);
}

}  // namespace

Plugin::Plugin(boost::dll::shared_library library, const SparkrtPluginApi* api, std::string path)
    : library_(std::move(library)),
      api_(api),
      path_(std::move(path)),
      name_(api->name),
      version_(api->version) {}

absl::StatusOr<std::shared_ptr<Plugin>> Plugin::load(const std::string& path) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(fs::path(path), ec);
  const std::string key = ec ? path : canonical.string();

  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<Plugin>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(key); it != loaded.end()) {
    if (auto plugin = it->second.lock()) return plugin;
  }
  auto plugin = load_uncached(key);
  if (!plugin.ok()) {
    log_debug(absl::StrFormat("plugin %s rejected: %s", key, plugin.status().message()));
    return plugin.status();
  }
  log_debug(absl::StrFormat("plugin %s loaded: backend '%s' version %s, ABI %d.%d", key,
                            (*plugin)->name(), (*plugin)->version(), (*plugin)->api().abi_major,
                            (*plugin)->api().abi_minor));
  loaded[key] = *plugin;
  return plugin;
}

absl::Status Plugin::status(SparkrtError* error, std::string_view context) const {
  if (error == nullptr) return absl::OkStatus();
  int32_t code = api_->error_code(error);
  const char* msg = nullptr;
  size_t size = 0;
  api_->error_message(error, &msg, &size);
  std::string message = absl::StrFormat("%s: %s", context, std::string_view(msg, msg ? size : 0));
  api_->error_destroy(error);
  if (code <= 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated))
    code = static_cast<int32_t>(absl::StatusCode::kUnknown);
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

std::string plugin_file_name(std::string_view backend) {
  return absl::StrFormat("libsparkrt_backend_%s.so", backend);
}

std::string runtime_library_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&runtime_library_folder), &info) == 0 ||
      info.dli_fname == nullptr)
    return {};
  std::error_code ec;
  fs::path lib = fs::weakly_canonical(fs::path(info.dli_fname), ec);
  return (ec ? fs::path(info.dli_fname) : lib).parent_path().string();
}

std::vector<std::string> plugin_folders() {
  std::vector<std::string> folders;
  if (const char* env = std::getenv("SPARKRT_PLUGIN_PATH")) {
    for (absl::string_view part : absl::StrSplit(env, ':', absl::SkipEmpty()))
      folders.emplace_back(part.data(), part.size());
  }
  // Installed layout <prefix>/<libdir>/sparkrt/plugins; the build tree mirrors
  // it, so this also finds the plugins of an uninstalled build.
  const std::string lib = runtime_library_folder();
  if (!lib.empty()) folders.push_back(lib + "/sparkrt/plugins");
  return folders;
}

std::vector<PluginFile> discover_plugins() {
  constexpr std::string_view kPrefix = "libsparkrt_backend_";
  constexpr std::string_view kSuffix = ".so";
  std::map<std::string, std::string> found;
  for (const std::string& folder : plugin_folders()) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      const std::string file = entry.path().filename().string();
      if (file.size() <= kPrefix.size() + kSuffix.size() || !file.starts_with(kPrefix) ||
          !file.ends_with(kSuffix))
        continue;
      std::string name = file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size());
      found.emplace(std::move(name), entry.path().string());  // first folder wins
    }
  }
  std::vector<PluginFile> out;
  for (auto& [name, path] : found) out.push_back({name, path});
  return out;
}

}  // namespace sparkrt::detail
