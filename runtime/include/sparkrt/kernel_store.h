// Kernel modules by name. A module `m` is a folder's `m.sig` (a signature
// file: the `.entry` declarations of its PTX, docs/kernels.md) and/or `m.ptx`,
// which give the entries' signatures, plus the device images beside them:
// `m.ptx` itself, `m.<arch>.cubin` and `m.spv` (SPIR-V). Where both `m.sig` and
// `m.ptx` are present they must declare the same signatures.
//
// Search order for a module, first hit wins:
//   1. each folder of SPARKRT_KERNEL_PATH (':'-separated), in order;
//   2. the kernel folder installed with the runtime (<prefix>/share/sparkrt/kernels);
//   3. the images embedded in libsparkrt at build time.
//
// Only regular files (after following symbolic links) are modules. Anything
// else with a module's name (a FIFO, a device node, a directory, a dangling
// link, a link loop) is passed over with its reason, and the search goes on.
// A regular file that cannot be read, or is larger than kMaxModuleFileBytes,
// is an error: it shadows the folders after it, so nothing else is used.
#ifndef SPARKRT_KERNEL_STORE_H_
#define SPARKRT_KERNEL_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sparkrt/signature.h"

namespace sparkrt {

// Largest module file read (PTX or cubin); real modules are a few MiB at most.
inline constexpr uint64_t kMaxModuleFileBytes = uint64_t{256} << 20;

// A file named like a module that is not one, and why (e.g. "a FIFO, not a
// regular file").
struct SkippedFile {
  std::string path;
  std::string reason;
};

struct ModuleImage {
  std::string module;
  std::string origin;     // the folder it came from, or "embedded"
  std::optional<std::string> signatures;  // the text of m.sig
  std::optional<std::string> ptx;         // PTX text
  std::string cubin;      // cubin for the requested architecture; empty if none
  std::string cubin_arch; // e.g. "sm_90" when cubin is set
  std::string spirv;      // SPIR-V module (m.spv); empty if none
  std::vector<SkippedFile> skipped;  // passed over on the way, in search order
};

// The entries' signatures of a found module: from m.sig where present (checked
// to agree with m.ptx when that is present too), else from m.ptx.
// InvalidArgument names the file and line of malformed text;
// FailedPrecondition names the first difference between the two files.
absl::StatusOr<std::vector<KernelSignature>> module_signatures(const ModuleImage& image);

// Where modules are looked for, in order ("embedded" last).
std::vector<std::string> kernel_search_path();

// Finds `module`; `arch` (may be empty) selects a cubin when one exists.
// NotFound names every place searched, the files passed over and why, and the
// modules that do exist. Never blocks on a FIFO or reads a device.
absl::StatusOr<ModuleImage> find_module(std::string_view module, std::string_view arch);

struct ModuleListing {
  std::vector<std::string> modules;  // names with a regular file, sorted, unique
  std::vector<SkippedFile> skipped;  // `<m>.sig`, `<m>.ptx` names that are not modules, in search order
};

// Every `<m>.sig` and `<m>.ptx` visible through the search path (without
// reading any).
ModuleListing scan_modules();

// scan_modules().modules.
std::vector<std::string> list_modules();

}  // namespace sparkrt

#endif  // SPARKRT_KERNEL_STORE_H_
