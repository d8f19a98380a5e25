#include "sparkrt/kernel_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

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
constexpr char kSignatureSuffix[] = ".sig";
constexpr char kPtxSuffix[] = ".ptx";

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

std::string errno_text(int err) {
  char buf[128];
  // strerror() is not thread-safe; strerror_r comes in a GNU and an XSI form.
  struct Pick {
    static const char* text(const char* gnu, const char*) { return gnu; }
    static const char* text(int xsi, const char* buf) { return xsi == 0 ? buf : "unknown error"; }
  };
  return Pick::text(strerror_r(err, buf, sizeof(buf)), buf);
}

// "a FIFO, not a regular file", for a file that is passed over.
std::string not_regular(mode_t mode) {
  const char* type = S_ISDIR(mode)    ? "a directory"
                     : S_ISFIFO(mode) ? "a FIFO"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                     : S_ISSOCK(mode) ? "a socket"
                                      : nullptr;
  return type != nullptr ? absl::StrFormat("%s, not a regular file", type) : "not a regular file";
}

// What a module file name refers to.
struct Probe {
  enum Kind { kAbsent, kRegular, kSkipped } kind;
  std::string reason;  // kSkipped: why it is not a module
};

// Classifies `path` with stat(), following links, without opening it (opening
// a device node can have effects of its own).
Probe probe(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISREG(st.st_mode)) return {Probe::kRegular, {}};
    return {Probe::kSkipped, not_regular(st.st_mode)};
  }
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) {
    struct stat lst;
    if (::lstat(path.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return {Probe::kAbsent, {}};
    std::error_code ec;
    const fs::path target = fs::read_symlink(path, ec);
    return {Probe::kSkipped, ec ? std::string("a dangling symbolic link")
                                : absl::StrFormat("a dangling symbolic link to %s", target.string())};
  }
  if (err == ELOOP) return {Probe::kSkipped, "a symbolic link loop"};
  return {Probe::kSkipped, absl::StrFormat("cannot be examined: %s", errno_text(err))};
}

// A module file read, or why there was none.
struct FileRead {
  Probe::Kind kind = Probe::kAbsent;
  std::string reason;  // kSkipped
  std::string data;    // kRegular
};

// Reads `path` if it is a regular file of at most kMaxModuleFileBytes. The
// file may change between probe() and open(): the open never blocks
// (O_NONBLOCK, for a FIFO put there meanwhile) and the opened descriptor is
// checked again. An unreadable or oversized regular file is an error.
absl::StatusOr<FileRead> read_module_file(const std::string& path) {
  FileRead result;
  Probe p = probe(path);
  result.kind = p.kind;
  result.reason = std::move(p.reason);
  if (p.kind != Probe::kRegular) return result;

  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return FileRead{};  // removed since probe()
    if (err == ELOOP) return FileRead{Probe::kSkipped, "a symbolic link loop", {}};
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s cannot be opened: %s; fix its permissions or remove it from the kernel folder", path,
        errno_text(err)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return absl::FailedPreconditionError(
        absl::StrFormat("%s cannot be examined: %s", path, errno_text(errno)));
  if (!S_ISREG(st.st_mode)) return FileRead{Probe::kSkipped, not_regular(st.st_mode), {}};
  const auto too_large = [&](uint64_t bytes, bool at_least) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is %s%d bytes, more than the %d MiB limit of a kernel module file; it is not read. "
        "Remove or rename it",
        path, at_least ? "at least " : "", bytes, kMaxModuleFileBytes >> 20));
  };
  if (static_cast<uint64_t>(st.st_size) > kMaxModuleFileBytes)
    return too_large(static_cast<uint64_t>(st.st_size), false);

  // Read to the end rather than trusting st_size: files in /proc report 0,
  // and a file may grow while it is read. The spare byte sees the end of a
  // file of the size reported without growing the buffer.
  std::string& data = result.data;
  data.resize(static_cast<size_t>(st.st_size) + 1);
  size_t got = 0;
  for (;;) {
    if (got == data.size()) {
      if (got > kMaxModuleFileBytes) return too_large(got, true);
      data.resize(std::min<size_t>(got + std::max<size_t>(got, 64 << 10), kMaxModuleFileBytes + 1));
    }
    const ssize_t n = ::read(fd, data.data() + got, data.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::FailedPreconditionError(
          absl::StrFormat("%s cannot be read: %s", path, errno_text(errno)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return result;
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
        "kernel module name '%s' is invalid: use the file stem of a .sig or .ptx file (letters, "
        "digits, '_', '-', '.')",
        module));
  const std::string sig_file = absl::StrFormat("%s%s", module, kSignatureSuffix);
  const std::string ptx_file = absl::StrFormat("%s%s", module, kPtxSuffix);
  const std::string cubin_file =
      arch.empty() ? std::string() : absl::StrFormat("%s.%s.cubin", module, arch);
  const std::string spirv_file = absl::StrFormat("%s.spv", module);
  const auto path = kernel_search_path();
  std::vector<SkippedFile> skipped;
  const auto pass_over = [&](std::string file, std::string reason) {
    detail::log_debug(absl::StrFormat("module %s: passed over %s: %s", module, file, reason));
    skipped.push_back({std::move(file), std::move(reason)});
  };
  const auto read_error = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrFormat("kernel module '%s': %s", module, s.message()));
  };
  for (const std::string& folder : path) {
    ModuleImage image{std::string(module), folder, {}, {}, {}, {}, {}, {}};
    // One file of the module in this folder: nullopt when absent or passed over.
    const auto read = [&](const std::string& file) -> absl::StatusOr<std::optional<std::string>> {
      if (folder == kEmbedded) return embedded(file);
      std::string file_path = (fs::path(folder) / file).string();
      auto r = read_module_file(file_path);
      if (!r.ok()) return read_error(r.status());
      if (r->kind == Probe::kSkipped) pass_over(std::move(file_path), std::move(r->reason));
      if (r->kind != Probe::kRegular) return std::optional<std::string>();
      return std::optional<std::string>(std::move(r->data));
    };
    auto sig = read(sig_file);
    if (!sig.ok()) return sig.status();
    auto ptx = read(ptx_file);
    if (!ptx.ok()) return ptx.status();
    if (!*sig && !*ptx) continue;
    image.signatures = *std::move(sig);
    image.ptx = *std::move(ptx);
    for (const auto& [file, text] : {std::pair{&cubin_file, &image.cubin},
                                     std::pair{&spirv_file, &image.spirv}}) {
      if (file->empty()) continue;
      auto data = read(*file);
      if (!data.ok()) return data.status();
      if (*data) *text = **std::move(data);
    }
    if (!image.cubin.empty()) image.cubin_arch = std::string(arch);
    std::vector<std::string> files;
    for (const auto& [file, present] :
         {std::pair{&sig_file, image.signatures.has_value()}, {&ptx_file, image.ptx.has_value()},
          {&cubin_file, !image.cubin.empty()}, {&spirv_file, !image.spirv.empty()}})
      if (present) files.push_back(*file);
    detail::log_debug(absl::StrFormat("module %s: found in %s (%s)", module, folder,
                                      absl::StrJoin(files, ", ")));
    image.skipped = std::move(skipped);
    return image;
  }
  std::vector<std::string> passed;
  for (const auto& f : skipped) passed.push_back(absl::StrFormat("%s (%s)", f.path, f.reason));
  return absl::NotFoundError(absl::StrFormat(
      "kernel module '%s' not found: searched %s for %s or %s%s; modules available: [%s]. Add "
      "its folder to SPARKRT_KERNEL_PATH",
      module, absl::StrJoin(path, ", "), sig_file, ptx_file,
      passed.empty() ? "" : "; passed over " + absl::StrJoin(passed, ", "),
      absl::StrJoin(list_modules(), ", ")));
}

absl::StatusOr<std::vector<KernelSignature>> module_signatures(const ModuleImage& image) {
  const auto parse = [&](const std::string& text, const char* suffix)
      -> absl::StatusOr<std::vector<KernelSignature>> {
    auto sigs = parse_ptx_signatures(text);
    if (!sigs.ok())
      return absl::InvalidArgumentError(absl::StrFormat(
          "kernel module '%s' (%s): malformed %s in %s%s: %s", image.module, image.origin,
          suffix == kPtxSuffix ? "PTX" : "signature file", image.module, suffix,
          sigs.status().message()));
    return sigs;
  };
  if (!image.signatures && !image.ptx)
    return absl::InvalidArgumentError(absl::StrFormat(
        "kernel module '%s' (%s) has neither %s%s nor %s%s", image.module, image.origin,
        image.module, kSignatureSuffix, image.module, kPtxSuffix));
  if (!image.signatures) return parse(*image.ptx, kPtxSuffix);
  auto declared = parse(*image.signatures, kSignatureSuffix);
  if (!declared.ok() || !image.ptx) return declared;
  auto from_ptx = parse(*image.ptx, kPtxSuffix);
  if (!from_ptx.ok()) return from_ptx.status();
  const std::string sig_name = image.module + kSignatureSuffix;
  const std::string ptx_name = image.module + kPtxSuffix;
  if (std::string diff = signature_difference(*declared, sig_name, *from_ptx, ptx_name);
      !diff.empty())
    return absl::FailedPreconditionError(absl::StrFormat(
        "kernel module '%s' (%s): %s and %s disagree: %s. Regenerate the signature file with "
        "`sparkrt signatures %s > %s`",
        image.module, image.origin, sig_name, ptx_name, diff, ptx_name, sig_name));
  return declared;
}

ModuleListing scan_modules() {
  std::set<std::string> names;
  std::vector<SkippedFile> skipped;
  const auto is_signature_source = [](const fs::path& file) {
    return file.extension() == kSignatureSuffix || file.extension() == kPtxSuffix;
  };
  for (const std::string& folder : kernel_search_path()) {
    if (folder == kEmbedded) {
      for (const auto* img = detail::embedded_images(); img->file != nullptr; ++img) {
        fs::path file(img->file);
        if (is_signature_source(file)) names.insert(file.stem().string());
      }
      continue;
    }
    std::vector<fs::path> files;
    std::error_code ec;
    for (auto it = fs::directory_iterator(folder, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      const fs::path& file = it->path();
      if (is_signature_source(file) && valid_module_name(file.stem().string()))
        files.push_back(file);
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      Probe p = probe(file.string());
      if (p.kind == Probe::kRegular) names.insert(file.stem().string());
      if (p.kind == Probe::kSkipped) skipped.push_back({file.string(), std::move(p.reason)});
    }
  }
  // A name passed over as one file but present as the other is a module.
  std::erase_if(skipped, [&](const SkippedFile& f) {
    return names.contains(fs::path(f.path).stem().string());
  });
  return {{names.begin(), names.end()}, std::move(skipped)};
}

std::vector<std::string> list_modules() { return scan_modules().modules; }

}  // namespace sparkrt
