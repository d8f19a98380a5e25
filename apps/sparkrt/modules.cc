// `sparkrt modules`: every kernel module the runtime can find, where it comes
// from, and each entry's parameter list as the PTX declares it (the list that
// KernelLaunch checks arguments against).
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "commands.h"
#include "sparkrt/kernel_store.h"
#include "sparkrt/signature.h"

namespace sparkrt::cli {
namespace {

std::string format_signature(const KernelSignature& sig) {
  std::string text = sig.entry + "(";
  for (size_t i = 0; i < sig.params.size(); ++i) {
    if (i != 0) text += ", ";
    text += param_type_name(sig.params[i].type, sig.params[i].size);
  }
  return text + ")";
}

absl::Status print_module(std::string_view name, std::ostream& out) {
  auto image = find_module(name, "");
  if (!image.ok()) return image.status();
  auto signatures = parse_ptx_signatures(image->ptx);
  if (!signatures.ok()) {
    return absl::Status(signatures.status().code(),
                        absl::StrFormat("module %s from %s: %s", name, image->origin,
                                        signatures.status().message()));
  }
  out << absl::StrFormat("\n%s (from %s, %d entr%s)\n", image->module, image->origin,
                         signatures->size(), signatures->size() == 1 ? "y" : "ies");
  for (const KernelSignature& sig : *signatures) {
    out << absl::StrFormat("  %s  [%d bytes]\n", format_signature(sig), sig.params_size);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status run_modules(std::span<const std::string_view> names, std::ostream& out) {
  out << "kernel search path:\n";
  for (const std::string& dir : kernel_search_path()) out << "  " << dir << "\n";

  std::vector<std::string> selected(names.begin(), names.end());
  if (selected.empty()) selected = list_modules();
  if (selected.empty()) out << "\n(no modules found)\n";
  for (const std::string& name : selected) {
    if (absl::Status status = print_module(name, out); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace sparkrt::cli
