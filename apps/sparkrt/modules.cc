// `sparkrt modules`: every kernel module the runtime can find, where it comes
// from (which of its files: .sig, .ptx, .spv), and each entry's parameter list
// as its signatures declare it (the list that KernelLaunch checks arguments
// against). A module that cannot be used is marked with its error and the
// listing goes on. With --load, every entry of every module listed is also
// resolved on the device the environment selects (SPARKRT_BACKEND,
// SPARKRT_DEVICE), which proves the backend takes the module's image.
#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "sparkrt/device.h"
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

// The launch directives a launch is checked against, e.g. " .reqntid 128,1,1".
std::string format_directives(const EntryDirectives& d) {
  auto dims = [](const char* name, Dim3 v) {
    return v.x == 0 ? std::string() : absl::StrFormat(" %s %d,%d,%d", name, v.x, v.y, v.z);
  };
  return dims(".reqntid", d.reqntid) + dims(".maxntid", d.maxntid);
}

void print_skipped(const std::vector<SkippedFile>& skipped, std::ostream& out) {
  for (const SkippedFile& f : skipped)
    out << absl::StrFormat("  passed over %s: %s\n", f.path, f.reason);
}

// Resolves every entry of the module on `dev`: a line saying so, or a line
// per distinct refusal, and the first refusal.
absl::Status print_load(Device& dev, const ModuleImage& image,
                        const std::vector<KernelSignature>& signatures, std::ostream& out) {
  absl::Status first;
  std::set<std::string> said;  // a module-wide error is the same for every entry
  for (const KernelSignature& sig : signatures) {
    if (auto k = dev.kernel(image.module, sig.entry); !k.ok()) {
      if (said.insert(std::string(k.status().message())).second)
        out << absl::StrFormat("  does not load on %s: %s\n", dev.backend_name(),
                               k.status().message());
      if (first.ok()) first = k.status();
    }
  }
  if (first.ok())
    out << absl::StrFormat("  loads on %s (%s): all %d entries\n", dev.backend_name(),
                           dev.properties().name, signatures.size());
  return first;
}

// Prints module `name`, or marks it with its error and returns that error.
// With a device, also loads it there.
absl::Status print_module(std::string_view name, Device* dev, std::ostream& out) {
  auto image = find_module(name, "");
  if (!image.ok()) {
    out << absl::StrFormat("\n%s: error: %s\n", name, image.status().message());
    return image.status();
  }
  auto signatures = module_signatures(*image);
  if (!signatures.ok()) {
    out << absl::StrFormat("\n%s: error: %s\n", name, signatures.status().message());
    print_skipped(image->skipped, out);
    return signatures.status();
  }
  std::vector<std::string> files;
  if (image->signatures) files.push_back(".sig");
  if (image->ptx) files.push_back(".ptx");
  if (!image->spirv.empty()) files.push_back(".spv");
  out << absl::StrFormat("\n%s (from %s: %s; %d entr%s)\n", image->module, image->origin,
                         absl::StrJoin(files, " "), signatures->size(),
                         signatures->size() == 1 ? "y" : "ies");
  for (const KernelSignature& sig : *signatures) {
    out << absl::StrFormat("  %s  [%d bytes]%s%s\n", format_signature(sig), sig.params_size,
                           format_directives(sig.directives),
                           sig.unsupported.empty() ? "" : "  cannot be launched: " + sig.unsupported);
  }
  print_skipped(image->skipped, out);
  return dev == nullptr ? absl::OkStatus() : print_load(*dev, *image, *signatures, out);
}

}  // namespace

absl::Status run_modules(std::span<const std::string_view> names, bool load, std::ostream& out) {
  out << "kernel search path:\n";
  for (const std::string& dir : kernel_search_path()) out << "  " << dir << "\n";
  std::unique_ptr<Device> dev;
  if (load) {
    auto opened = Device::open();
    if (!opened.ok())
      return absl::Status(opened.status().code(),
                          absl::StrFormat("modules --load: opening the selected device failed: %s",
                                          opened.status().message()));
    dev = *std::move(opened);
    out << absl::StrFormat("loading on: %s device %d (%s)\n", dev->backend_name(),
                           dev->index(), dev->properties().name);
  }

  if (names.empty()) {
    // Every name seen, including files passed over; broken ones are marked
    // and the listing is still a success.
    const ModuleListing listing = scan_modules();
    std::map<std::string, std::vector<SkippedFile>> not_modules;
    for (const SkippedFile& f : listing.skipped) {
      std::string stem = f.path.substr(f.path.find_last_of('/') + 1);
      stem.resize(stem.size() - 4);  // ".ptx"
      not_modules[stem].push_back(f);
    }
    std::set<std::string> all(listing.modules.begin(), listing.modules.end());
    for (const auto& [name, files] : not_modules) all.insert(name);
    if (all.empty()) out << "\n(no modules found)\n";
    std::vector<std::string> not_loaded;
    for (const std::string& name : all) {
      if (std::binary_search(listing.modules.begin(), listing.modules.end(), name)) {
        // Marked in the listing; with --load, a module that does not load
        // fails the command.
        if (!print_module(name, dev.get(), out).ok() && dev) not_loaded.push_back(name);
      } else {
        out << absl::StrFormat("\n%s: not a module\n", name);
        print_skipped(not_modules[name], out);
      }
    }
    if (!not_loaded.empty())
      return absl::FailedPreconditionError(absl::StrFormat(
          "%d module(s) do not load on %s: %s (each marked above with the reason)",
          not_loaded.size(), dev->backend_name(), absl::StrJoin(not_loaded, ", ")));
    return absl::OkStatus();
  }

  // Named modules: each is printed or marked; any that cannot be used makes
  // the command fail.
  std::vector<absl::Status> failed;
  for (std::string_view name : names) {
    if (absl::Status status = print_module(name, dev.get(), out); !status.ok())
      failed.push_back(status);
  }
  if (failed.empty()) return absl::OkStatus();
  if (failed.size() == 1) return failed[0];
  std::vector<std::string> messages;
  for (const absl::Status& s : failed) messages.emplace_back(s.message());
  return absl::Status(failed[0].code(),
                      absl::StrFormat("%d of the modules named cannot be used:\n  %s",
                                      failed.size(), absl::StrJoin(messages, "\n  ")));
}

}  // namespace sparkrt::cli
