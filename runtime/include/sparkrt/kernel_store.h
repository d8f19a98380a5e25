// Kernel modules by name. A module `m` is the file `m.ptx` (always present,
// the source of the signatures) plus optional `m.<arch>.cubin` images.
//
// Search order for a module, first hit wins:
//   1. each folder of SPARKRT_KERNEL_PATH (':'-separated), in order;
//   2. the kernel folder installed with the runtime (<prefix>/share/sparkrt/kernels);
//   3. the images embedded in libsparkrt at build time.
#ifndef SPARKRT_KERNEL_STORE_H_
#define SPARKRT_KERNEL_STORE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace sparkrt {

struct ModuleImage {
  std::string module;
  std::string origin;     // the folder it came from, or "embedded"
  std::string ptx;        // PTX text
  std::string cubin;      // cubin for the requested architecture; empty if none
  std::string cubin_arch; // e.g. "sm_90" when cubin is set
};

// Where modules are looked for, in order ("embedded" last).
std::vector<std::string> kernel_search_path();

// Finds `module`; `arch` (may be empty) selects a cubin when one exists.
// NotFound names every place searched and the modules that do exist.
absl::StatusOr<ModuleImage> find_module(std::string_view module, std::string_view arch);

// Every module name visible through the search path, sorted, unique.
std::vector<std::string> list_modules();

}  // namespace sparkrt

#endif  // SPARKRT_KERNEL_STORE_H_
