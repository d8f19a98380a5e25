#include "sparkrt/kernel_store.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "embedded_kernels.h"
#include "log.h"
#include "plugin.h"

namespace sparkrt {
namespace {

namespace fs = std::filesystem;
constexpr char kEmbedded[] = "embedded";

// <prefix>/share/sparkrt/kernels, with <prefix> found from where libsparkrt
// lives (<prefix>/<libdir>), so installs are relocatable.
std::string installed_kernel_folder() {
  std::string lib = detail::runtime_library_folder();
  if (lib.empty()) return {};
  fs::path prefix(lib);
  for (const auto& part : fs::path(SPARKRT_LIB_SUBDIR)) {
    if (!part.empty() && part != ".") prefix = prefix.parent_path();
  }
  return (prefix / SPARKRT_KERNEL_SUBDIR).string();
}

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream data;
  data << in.rdbuf();
  return std::move(data).str();
}

std::optional<std::string> embedded(const std::string& file) {
  for (const auto* img = detail::embedded_images(); img->file != nullptr; ++img) {
    if (file == img->file) return std::string(img->begin, img->end);
  }
  return std::nullopt;
}

bool valid_module_name(std::string_view name) {
  if (name.empty() || name.size() > 200) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  }) && name.find("..") == std::string_view::npos && name.front() != '.';
}

}  // namespace

std::vector<std::string> kernel_search_path() {
  std::vector<std::string> path;
  if (const char* env = std::getenv("SPARKRT_KERNEL_PATH")) {
    for (absl::string_view part : absl::StrSplit(env, ':', absl::SkipEmpty()))
      path.emplace_back(part.data(), part.size());
  }
  if (std::string installed = installed_kernel_folder(); !installed.empty())
    path.push_back(installed);
  path.push_back(kEmbedded);
  return path;
}

absl::StatusOr<ModuleImage> find_module(std::string_view module, std::string_view arch) {
  if (!valid_module_name(module))
    return absl::InvalidArgumentError(absl::StrFormat(
        "kernel module name '%s' is invalid: use the file stem of a .ptx file (letters, digits, "
        "'_', '-', '.')",
        module));
  const std::string ptx_file = absl::StrFormat("%s.ptx", module);
  const std::string cubin_file =
      arch.empty() ? std::string() : absl::StrFormat("%s.%s.cubin", module, arch);
  const auto path = kernel_search_path();
  for (const std::string& folder : path) {
    ModuleImage image{std::string(module), folder, {}, {}, {}};
    if (folder == kEmbedded) {
      auto ptx = embedded(ptx_file);
      if (!ptx) continue;
      image.ptx = std::move(*ptx);
      if (!cubin_file.empty()) {
        if (auto cubin = embedded(cubin_file)) image.cubin = std::move(*cubin);
      }
    } else {
      auto ptx = read_file(fs::path(folder) / ptx_file);
      if (!ptx) continue;
      image.ptx = std::move(*ptx);
      if (!cubin_file.empty()) {
        if (auto cubin = read_file(fs::path(folder) / cubin_file)) image.cubin = std::move(*cubin);
      }
    }
    if (!image.cubin.empty()) image.cubin_arch = std::string(arch);
    detail::log_debug(absl::StrFormat("module %s: found in %s%s", module, folder,
                                      image.cubin.empty() ? "" : " (with " + cubin_file + ")"));
    return image;
  }
  return absl::NotFoundError(absl::StrFormat(
      "kernel module '%s' not found: searched %s for %s; modules available: [%s]. Add its folder "
      "to SPARKRT_KERNEL_PATH",
      module, absl::StrJoin(path, ", "), ptx_file, absl::StrJoin(list_modules(), ", ")));
}

std::vector<std::string> list_modules() {
  std::set<std::string> names;
  for (const std::string& folder : kernel_search_path()) {
    if (folder == kEmbedded) {
      for (const auto* img = detail::embedded_images(); img->file != nullptr; ++img) {
        fs::path file(img->file);
        if (file.extension() == ".ptx") names.insert(file.stem().string());
      }
      continue;
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      if (entry.path().extension() == ".ptx") names.insert(entry.path().stem().string());
    }
  }
  return {names.begin(), names.end()};
}

}  // namespace sparkrt
