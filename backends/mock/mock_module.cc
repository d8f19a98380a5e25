// Modules and kernels of the mock: a module is the list of `.entry` names in
// its PTX; a kernel is a (module, entry) the runtime resolved, once, unless a
// denial (deny_lookup) refuses it. Every lookup is recorded.
#include <algorithm>
#include <cctype>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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

absl::StatusOr<std::unique_ptr<sdk::Module>> MockDevice::load_module(
    std::string_view name, SparkrtImageFormat format, std::span<const std::byte> image) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("module_load");
  // A signature file is PTX declarations without bodies: the same scan.
  if (format != SPARKRT_IMAGE_PTX && format != SPARKRT_IMAGE_SIGNATURES) {
    return note("module_load", absl::InvalidArgumentError(absl::StrFormat(
                                   "module_load(%s): image format %d is neither PTX nor "
                                   "signatures, the images the mock accepts (see image_formats)",
                                   name, static_cast<int>(format))));
  }
  if (image.empty()) {
    return note("module_load", absl::InvalidArgumentError(absl::StrFormat(
                                   "module_load(%s): empty PTX image", name)));
  }
  std::string_view ptx(reinterpret_cast<const char*>(image.data()), image.size());
  if (const size_t nul = ptx.find('\0'); nul != std::string_view::npos) ptx = ptx.substr(0, nul);
  auto module = std::make_unique<MockModule>(*this, intern(name), ptx_entries(ptx));
  modules_.insert(module.get());
  ++counters_.module_loads;
  if (log_.is_open()) {
    scratch_.clear();  // not assign("["): GCC 12 -O3 reports a false -Wrestrict
    scratch_.push_back('[');
    for (size_t i = 0; i < module->entries_.size(); ++i) {
      if (i != 0) scratch_.push_back(',');
      JsonLog::append_string(scratch_, module->entries_[i]);
    }
    scratch_.push_back(']');
    log_.begin("module_load");
    log_.field("module", name);
    log_.field("format", "ptx");
    log_.raw_field("entries", scratch_);
    log_.end();
  }
  return std::unique_ptr<sdk::Module>(std::move(module));
}

void MockDevice::module_unloaded(MockModule& module) {
  std::lock_guard lock(mu_);
  modules_.erase(&module);
  if (log_.is_open()) {
    log_.begin("module_unload");
    log_.field("module", module.name_);
    log_.end();
  }
}

absl::StatusOr<sdk::Kernel*> MockDevice::resolve(MockModule& module, std::string_view entry,
                                                 std::span<const SparkrtParamInfo> params) {
  std::lock_guard lock(mu_);
  if (!log_.status().ok()) return log_refusal("kernel_get");
  ++counters_.lookups;
  const char* entry_name = intern(entry);
  LookupRecord& rec = lookups_.emplace_back(
      LookupRecord{module.name_, entry_name, absl::StatusCode::kOk, 0});
  absl::Status status;
  MockKernel* kernel = nullptr;
  const std::string_view module_name = module.name_;
  for (const Denial& d : denials_) {
    if ((d.module.empty() || d.module == module_name) && (d.entry.empty() || d.entry == entry)) {
      status = absl::Status(d.code, absl::StrFormat(
                                        "kernel_get(%s, %s): lookup denied by mock fault "
                                        "injection (deny_lookup, %s)",
                                        module_name, entry, absl::StatusCodeToString(d.code)));
      break;
    }
  }
  if (status.ok()) {
    const auto& entries = module.entries_;
    if (std::find(entries.begin(), entries.end(), entry) == entries.end()) {
      status = absl::NotFoundError(absl::StrFormat(
          "kernel_get: module '%s' has no entry '%s'; its entries are: %s", module_name, entry,
          entries.empty() ? std::string("(none)") : absl::StrJoin(entries, ", ")));
    }
  }
  if (status.ok()) {
    auto it = module.kernels_.find(std::string(entry));
    if (it == module.kernels_.end()) {
      it = module.kernels_
               .emplace(std::string(entry),
                        std::make_unique<MockKernel>(this, next_kernel_id_++, module.name_,
                                                     entry_name, params))
               .first;
    }
    kernel = it->second.get();
    rec.kernel_id = kernel->id;
  }
  rec.code = status.code();
  if (log_.is_open()) {
    log_.begin("kernel_get");
    log_.field("module", module_name);
    log_.field("entry", entry);
    log_.field("kernel", rec.kernel_id);
    log_.field("status", absl::StatusCodeToString(status.code()));
    log_.end();
  }
  if (!status.ok()) return note("kernel_get", status);
  return kernel;
}

}  // namespace sparkrt::mock
