// The subcommands of the `sparkrt` tool. Each writes its report to `out` and
// returns a status; main() turns a failure into a message and exit code 1.
#ifndef SPARKRT_APPS_SPARKRT_COMMANDS_H_
#define SPARKRT_APPS_SPARKRT_COMMANDS_H_

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace sparkrt::cli {

// Backends found, the folders searched, and the selected device's properties.
absl::Status run_info(std::ostream& out);

// Kernel modules, their origins and every entry's parameter signature. With
// names, only those modules (an unknown name is an error). With `load`, every
// entry is also resolved on the selected device, and a module that does not
// load there is an error.
absl::Status run_modules(std::span<const std::string_view> names, bool load, std::ostream& out);

// `sparkrt signatures FILE`: the signature file (<module>.sig) of a PTX or
// signature file, to stdout. `--check SIG FILE...`: fails, naming the first
// difference, unless every FILE (.ptx, or .spv: its push-constant layouts)
// declares what SIG does.
absl::Status run_signatures(std::span<const std::string_view> args, std::ostream& out);

// One decode step of a synthetic attention layer (fill slots, fused K path,
// V write, paged decode attention) on the device the environment selects,
// checked against float64 or the cpu backend and timed per op. v_bits 0: a
// bf16 KV cache; 2, 3 or 4: a TurboQuant V cache of that many bits a value.
// num_devices > 1: the heads split over that many devices of the backend
// (tensor parallel), the outputs all-gathered and checked against one device.
// trace_path: where --trace writes the decode step's trace; empty for none.
absl::Status run_demo(uint32_t v_bits, int num_devices, const std::string& trace_path,
                      std::ostream& out);

// The backend conformance suite against one plugin (`sparkrt conformance
// [--backend NAME|PATH] [--skip FEATURE:REASON]... [--list] [-- doctest
// options]`). Returns the exit code: 0 every case passed, 1 a case failed or
// the backend did not open, 2 bad usage, 77 the backend has no usable device.
int run_conformance(std::span<const std::string_view> args);

// "16.0 GiB", "48 KiB", "512 B".
std::string format_bytes(uint64_t bytes);

}  // namespace sparkrt::cli

#endif  // SPARKRT_APPS_SPARKRT_COMMANDS_H_
