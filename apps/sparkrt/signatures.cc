// `sparkrt signatures`: writes a module's signature file (<module>.sig, the
// `.entry` declarations of its PTX) and checks that a module's images declare
// the same signatures. The build runs `--check` on every in-tree module, so
// kernels/signatures/ cannot drift from kernels/ptx/ or kernels/spirv/.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/strings/str_format.h"
#include "commands.h"
#include "sparkrt/kernel_store.h"
#include "sparkrt/sdk/spirv_reflect.h"
#include "sparkrt/signature.h"

namespace sparkrt::cli {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> read_file(std::string_view path) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::is_regular_file(p, ec))
    return absl::NotFoundError(absl::StrFormat("%s is not a regular file", path));
  const auto size = fs::file_size(p, ec);
  if (ec || size > kMaxModuleFileBytes)
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: %s", path, ec ? ec.message() : absl::StrFormat("larger than %d MiB",
                                                             kMaxModuleFileBytes >> 20)));
  std::ifstream in(p, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::FailedPreconditionError(absl::StrFormat("%s cannot be read", path));
  return data;
}

absl::StatusOr<std::vector<KernelSignature>> read_signatures(std::string_view path) {
  auto text = read_file(path);
  if (!text.ok()) return text.status();
  auto sigs = parse_ptx_signatures(*text);
  if (!sigs.ok())
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, sigs.status().message()));
  return sigs;
}

// Every entry of `sig` is an entry point of the SPIR-V module whose push
// constants have its layout.
absl::Status check_spirv(const std::vector<KernelSignature>& sigs, std::string_view sig_path,
                         std::string_view spv_path) {
  auto bytes = read_file(spv_path);
  if (!bytes.ok()) return bytes.status();
  auto module = sdk::spirv::reflect(*bytes);
  if (!module.ok())
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", spv_path, module.status().message()));
  for (const KernelSignature& sig : sigs) {
    std::vector<SparkrtParamInfo> params;
    for (const Param& p : sig.params) params.push_back({p.offset, p.size, p.align});
    const sdk::spirv::EntryPoint* entry = module->find(sig.entry);
    if (entry == nullptr)
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s declares entry %s, which %s does not have (its entry points: %s)", sig_path,
          sig.entry, spv_path, module->entry_names()));
    if (auto st = sdk::spirv::check_push_constants(*entry, params); !st.ok())
      return absl::FailedPreconditionError(
          absl::StrFormat("%s and %s disagree: %s", sig_path, spv_path, st.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status run_signatures(std::span<const std::string_view> args, std::ostream& out) {
  if (args[0] != "--check") {
    auto sigs = read_signatures(args[0]);
    if (!sigs.ok()) return sigs.status();
    out << absl::StrFormat(
        "// The kernel signatures of %s (docs/kernels.md, \"Signature files\"),\n"
        "// written by `sparkrt signatures`.\n",
        fs::path(args[0]).filename().string());
    out << format_signature_file(*sigs);
    return absl::OkStatus();
  }
  const std::string_view sig_path = args[1];
  auto declared = read_signatures(sig_path);
  if (!declared.ok()) return declared.status();
  for (std::string_view path : args.subspan(2)) {
    if (path.ends_with(".spv")) {
      if (auto st = check_spirv(*declared, sig_path, path); !st.ok()) return st;
      continue;
    }
    auto other = read_signatures(path);
    if (!other.ok()) return other.status();
    if (std::string diff = signature_difference(*declared, sig_path, *other, path); !diff.empty())
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s and %s disagree: %s. Regenerate it with `sparkrt signatures %s > %s`", sig_path,
          path, diff, path, sig_path));
  }
  return absl::OkStatus();
}

}  // namespace sparkrt::cli
