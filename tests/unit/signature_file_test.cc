// Signature files (<module>.sig): the canonical text round-trips through the
// parser, differences are named, and every in-tree module's checked-in file
// matches what it declares.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "sparkrt/signature.h"

using sparkrt::format_signature_file;
using sparkrt::parse_ptx_signatures;
using sparkrt::signature_difference;

namespace {

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr char kPtx[] = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(
  .param .u64 .ptr .global .align 16 k_param_0,
  .param .align 8 .b8 k_param_1[24],
  .param .align 16 .u32 k_param_2,
  .param .f32 k_param_3
)
.maxntid 128, 1, 1
.minnctapersm 2
{
  ld.param.u64 %rd1, [k_param_0];
  ret;
}
.entry none() .reqntid 32 { ret; }
)";

}  // namespace

TEST_CASE("signature file: the canonical text parses back to the same signatures") {
  auto sigs = parse_ptx_signatures(kPtx);
  REQUIRE(sigs.ok());
  const std::string text = format_signature_file(*sigs);
  CHECK(text.find("ld.param") == std::string::npos);  // no bodies
  CHECK(text.find(".param .align 16 .u32 k_param_2") != std::string::npos);
  CHECK(text.find(".param .u64 k_param_0") != std::string::npos);  // pointee qualifiers dropped
  auto again = parse_ptx_signatures(text);
  REQUIRE(again.ok());
  CHECK(signature_difference(*sigs, "ptx", *again, "sig").empty());
  CHECK(format_signature_file(*again) == text);
  REQUIRE(again->size() == 2);
  CHECK((*again)[0].params[2].offset == 32);
  CHECK((*again)[0].directives.minnctapersm == 2);
  CHECK((*again)[1].directives.reqntid.x == 32);
}

TEST_CASE("signature file: a difference names the entry, the parameter and both files") {
  auto a = parse_ptx_signatures(".entry k(.param .u64 p, .param .u32 n) {}");
  REQUIRE(a.ok());
  const auto differs = [&](const char* other) {
    auto b = parse_ptx_signatures(other);
    REQUIRE(b.ok());
    return signature_difference(*a, "a.sig", *b, "a.ptx");
  };
  CHECK(differs(".entry k(.param .u64 p, .param .u32 n) {}").empty());
  const std::string type = differs(".entry k(.param .u64 p, .param .u64 n) {}");
  CHECK(type.find("entry k: parameter #1") != std::string::npos);
  CHECK(type.find(".u32") != std::string::npos);
  CHECK(type.find("a.ptx") != std::string::npos);
  CHECK(differs(".entry k(.param .u64 p, .param .u32 count) {}").find("count") !=
        std::string::npos);
  CHECK(differs(".entry k(.param .u64 p) {}").find("2 parameters in a.sig but 1 in a.ptx") !=
        std::string::npos);
  CHECK(differs(".entry k(.param .u64 p, .param .u32 n) .maxntid 64 {}").find("directives") !=
        std::string::npos);
  CHECK(differs(".entry j(.param .u64 p, .param .u32 n) {}")
            .find("entry k is in a.sig but not in a.ptx") != std::string::npos);
}

TEST_CASE("signature file: each in-tree module's file declares what its PTX does") {
  // kernels/signatures/ is the source of truth without nvcc; the build also
  // checks this (sparkrt signatures --check), and this test keeps the rule
  // where the PTX exists.
  int compared = 0;
  for (const auto& f : std::filesystem::directory_iterator(SPARKRT_SIGNATURE_DIR)) {
    if (f.path().extension() != ".sig") continue;
    INFO(f.path().string());
    auto declared = parse_ptx_signatures(read(f.path()));
    REQUIRE(declared.ok());
    CHECK_FALSE(declared->empty());
    const auto ptx = std::filesystem::path(SPARKRT_BUILD_KERNEL_DIR) /
                     (f.path().stem().string() + ".ptx");
    if (!std::filesystem::exists(ptx)) continue;  // built without nvcc
    auto built = parse_ptx_signatures(read(ptx));
    REQUIRE(built.ok());
    CHECK(signature_difference(*declared, "sig", *built, "ptx") == "");
    ++compared;
  }
  CHECK(compared >= (SPARKRT_HAVE_CUDA_KERNELS ? 7 : 0));
}
