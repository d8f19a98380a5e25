// Modules and kernels of the mock: a module is the list of `.entry` names in
// its PTX; a kernel is a (module, entry) the runtime resolved.
#include <cctype>

#include "mock_device.h"

namespace sparkrt::mock {
namespace {

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool is_ident(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$' || c == '%';
}

}  // namespace

std::vector<std::string> ptx_entries(std::string_view ptx) {
  // A scan, not a parse: the runtime parses signatures; the mock only needs
  // the names, skipping comments so a commented-out entry does not count.
  constexpr std::string_view kEntry = ".entry";
  std::vector<std::string> entries;
  size_t i = 0;
  const size_t n = ptx.size();
  while (i < n) {
    if (ptx.compare(i, 2, "//") == 0) {
      const size_t eol = ptx.find('\n', i);
      i = eol == std::string_view::npos ? n : eol + 1;
    } else if (ptx.compare(i, 2, "/*") == 0) {
      const size_t close = ptx.find("*/", i + 2);
      i = close == std::string_view::npos ? n : close + 2;
    } else if (ptx.compare(i, kEntry.size(), kEntry) == 0 && (i == 0 || is_space(ptx[i - 1])) &&
               i + kEntry.size() < n && is_space(ptx[i + kEntry.size()])) {
      size_t j = i + kEntry.size();
      while (j < n && is_space(ptx[j])) ++j;
      const size_t start = j;
      while (j < n && is_ident(ptx[j])) ++j;
      if (j > start) entries.emplace_back(ptx.substr(start, j - start));
      i = j;
    } else {
      ++i;
    }
  }
  return entries;
}

MockModule::~MockModule() {
  if (!device_closing_) device_.module_unloaded(*this);
}

absl::StatusOr<sdk::Kernel*> MockModule::get_kernel(std::string_view entry,
                                                    std::span<const SparkrtParamInfo> params) {
  return device_.resolve(*this, entry, params);
}

}  // namespace sparkrt::mock
