// sparkrt: inspect the runtime's backends, kernel modules and devices, and test a
// backend plugin against the conformance suite.
//
// Exit codes: 0 success, 1 a runtime error (message on stderr), 2 bad usage.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"

namespace {

constexpr std::string_view kUsage =
    "usage: sparkrt <command> [args]\n"
    "\n"
    "commands:\n"
    "  info               backends found, folders searched, the selected device\n"
    "  modules [--load] [name...]\n"
    "                     kernel modules, where each comes from, entry signatures;\n"
    "                     --load also loads every entry on the selected device and\n"
    "                     fails if one does not load there\n"
    "  signatures FILE    the signature file (<module>.sig) of a .ptx or .sig file\n"
    "  signatures --check SIG FILE...\n"
    "                     fails unless each .ptx or .spv FILE declares SIG's signatures\n"
    "  demo [--kv FORMAT] [--devices N] [--trace FILE]\n"
    "                     one decode step of a small attention layer on the selected\n"
    "                     device, checked and timed (cpu: against float64; a GPU: against\n"
    "                     the cpu backend; mock: the recorded launches); FORMAT is the KV\n"
    "                     cache: bf16 (default), or turbo4, turbo3, turbo2 (bf16 K and a\n"
    "                     TurboQuant V of 4, 3 or 2 bits a value); --devices 2 or 4 splits\n"
    "                     the heads over devices 0..N-1 of the backend (tensor parallel),\n"
    "                     all-gathers the outputs and checks them against one device;\n"
    "                     --trace writes the decode step's runtime calls to FILE as\n"
    "                     Chrome trace JSON (Perfetto, chrome://tracing)\n"
    "  conformance [--backend NAME|PATH] [--skip FEATURE:REASON]... [--list] [-- doctest options]\n"
    "                     the backend conformance suite against one plugin (default:\n"
    "                     SPARKRT_BACKEND, else auto); --skip declares a feature the backend\n"
    "                     cannot offer, --list shows the features and cases; exit code 77\n"
    "                     when the backend has no usable device here\n"
    "\n"
    "options:\n"
    "  -h, --help         show this help\n"
    "  --version          print the version\n"
    "\n"
    "environment:\n"
    "  SPARKRT_BACKEND      backend name (cuda, cpu, mock, ...), plugin file, or auto\n"
    "  SPARKRT_DEVICE       device index (default 0)\n"
    "  SPARKRT_PLUGIN_PATH  extra plugin folders, ':'-separated, searched first\n"
    "  SPARKRT_KERNEL_PATH  extra kernel module folders, ':'-separated, searched first\n"
    "  SPARKRT_LOG          error (default), warn, info or debug (each load decision)\n"
    "  SPARKRT_TRACE        write a trace of every runtime call to this file (Chrome trace\n"
    "                       JSON), from the first device opened to the process's exit\n";

constexpr std::string_view kKvFormats = "bf16, turbo4, turbo3, turbo2";

int usage_error(std::string_view message) {
  std::cerr << "sparkrt: " << message << "\n\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("no command given");

  const std::string_view command = args[0];
  const std::span<const std::string_view> rest(args.begin() + 1, args.end());
  for (std::string_view arg : args) {
    if (arg == "--") break;  // what follows belongs to the command (conformance: doctest)
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    }
  }
  if (command == "--version") {
    std::cout << "sparkrt " << SPARKRT_CLI_VERSION << "\n";
    return 0;
  }

  // The suite reports through doctest and has exit codes of its own.
  if (command == "conformance") return sparkrt::cli::run_conformance(rest);

  enum class Command { kInfo, kModules, kSignatures, kDemo } which;
  uint32_t v_bits = 0;  // demo: the V cache format
  int num_devices = 1;  // demo: devices the heads are split over
  std::string trace_path;  // demo: where the decode step's trace goes
  bool load_modules = false;  // modules: load each on the selected device
  std::vector<std::string_view> module_names;
  if (command == "info") {
    if (!rest.empty()) return usage_error("'info' takes no arguments");
    which = Command::kInfo;
  } else if (command == "demo") {
    which = Command::kDemo;
    for (size_t i = 0; i < rest.size(); ++i) {
      std::string_view format;
      if (rest[i] == "--devices" || rest[i].starts_with("--devices=")) {
        std::string_view count;
        if (rest[i] == "--devices") {
          if (i + 1 == rest.size()) return usage_error("--devices needs a count: 1, 2 or 4");
          count = rest[++i];
        } else {
          count = rest[i].substr(10);
        }
        if (count.empty() || count.size() > 2 ||
            !std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return usage_error("--devices: '" + std::string(count) + "' is not a device count (1, 2 or 4)");
        num_devices = std::stoi(std::string(count));
        if (num_devices < 1) return usage_error("--devices: the count must be at least 1");
        continue;
      }
      if (rest[i] == "--trace" || rest[i].starts_with("--trace=")) {
        if (rest[i] == "--trace") {
          if (i + 1 == rest.size()) return usage_error("--trace needs a file to write");
          trace_path = std::string(rest[++i]);
        } else {
          trace_path = std::string(rest[i].substr(8));
        }
        if (trace_path.empty()) return usage_error("--trace needs a file to write");
        continue;
      }
      if (rest[i] == "--kv") {
        if (i + 1 == rest.size()) return usage_error("--kv needs a format: " + std::string(kKvFormats));
        format = rest[++i];
      } else if (rest[i].starts_with("--kv=")) {
        format = rest[i].substr(5);
      } else {
        return usage_error("'demo': unexpected argument '" + std::string(rest[i]) + "'");
      }
      if (format == "bf16") {
        v_bits = 0;
      } else if (format == "turbo2" || format == "turbo3" || format == "turbo4") {
        v_bits = uint32_t(format.back() - '0');
      } else {
        return usage_error("--kv: unknown format '" + std::string(format) +
                           "'; the formats are " + std::string(kKvFormats));
      }
    }
  } else if (command == "modules") {
    for (std::string_view name : rest) {
      if (name == "--load") {
        load_modules = true;
      } else if (name.starts_with("-")) {
        return usage_error("unknown option '" + std::string(name) + "'");
      } else {
        module_names.push_back(name);
      }
    }
    which = Command::kModules;
  } else if (command == "signatures") {
    const bool check = !rest.empty() && rest[0] == "--check";
    if (check ? rest.size() < 3 : rest.size() != 1)
      return usage_error(check ? "'signatures --check' needs a .sig file and the files to check"
                               : "'signatures' takes one .ptx or .sig file");
    which = Command::kSignatures;
  } else if (command.starts_with("-")) {
    return usage_error("unknown option '" + std::string(command) + "'");
  } else {
    return usage_error("unknown command '" + std::string(command) + "'");
  }

  absl::Status status;
  try {
    switch (which) {
      case Command::kInfo: status = sparkrt::cli::run_info(std::cout); break;
      case Command::kModules:
        status = sparkrt::cli::run_modules(module_names, load_modules, std::cout);
        break;
      case Command::kSignatures: status = sparkrt::cli::run_signatures(rest, std::cout); break;
      case Command::kDemo:
        status = sparkrt::cli::run_demo(v_bits, num_devices, trace_path, std::cout);
        break;
    }
  } catch (const std::exception& e) {
    // The runtime reports errors as statuses; this only guards helpers that
    // throw (sparkrt/testing/mock.h).
    status = absl::InternalError(e.what());
  }
  std::cout.flush();
  if (!status.ok()) {
    std::cerr << "sparkrt " << command << ": " << status.message() << "\n";
    return 1;
  }
  return 0;
}
