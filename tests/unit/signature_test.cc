#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "sparkrt/signature.h"

using sparkrt::ParamType;
using sparkrt::parse_ptx_signatures;

namespace {

// The module's PTX as the build made it or, built without nvcc, its
// signature file (the same .entry declarations, empty bodies).
std::string read_built_ptx(const std::string& module) {
  std::ifstream in(SPARKRT_HAVE_CUDA_KERNELS
                       ? std::string(SPARKRT_BUILD_KERNEL_DIR) + "/" + module + ".ptx"
                       : std::string(SPARKRT_SIGNATURE_DIR) + "/" + module + ".sig");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("signature: every entry of the built vector_ops module") {
  const std::string ptx = read_built_ptx("vector_ops");
  REQUIRE_FALSE(ptx.empty());
  auto sigs = parse_ptx_signatures(ptx);
  REQUIRE(sigs.ok());
  REQUIRE(sigs->size() == 5);

  const auto& add = (*sigs)[0];
  CHECK(add.entry == "vector_add_f32");
  REQUIRE(add.params.size() == 4);
  CHECK(add.params[0].type == ParamType::kU64);
  CHECK(add.params[2].offset == 16);
  CHECK(add.params[3].type == ParamType::kU32);
  CHECK(add.params[3].offset == 24);
  CHECK(add.params_size == 28);

  const auto& axpy = (*sigs)[2];
  CHECK(axpy.entry == "axpy_f32");
  REQUIRE(axpy.params.size() == 3);
  CHECK(axpy.params[0].type == ParamType::kBytes);
  CHECK(axpy.params[0].size == 16);
  CHECK(axpy.params[0].align == 8);
  CHECK(axpy.params[1].offset == 16);

  const auto& empty = (*sigs)[3];
  CHECK(empty.entry == "empty_10_args");
  CHECK(empty.params.size() == 10);
  CHECK(empty.params[8].type == ParamType::kF32);
  // 4 pointers, 3 u32 (44), u64 aligned to 48, two f32.
  CHECK(empty.params[7].offset == 48);
  CHECK(empty.params_size == 64);

  // A pointer and a 136-byte struct: 144 bytes, past 128 of push constants.
  const auto& copy = (*sigs)[4];
  CHECK(copy.entry == "copy_args_u32");
  REQUIRE(copy.params.size() == 2);
  CHECK(copy.params[1].size == 136);
  CHECK(copy.params[1].align == 4);
  CHECK(copy.params_size == 144);
}

TEST_CASE("signature: qualifiers, comments, arrays and parameterless entries") {
  const char* ptx = R"(
// leading comment with .entry fake(.param .u32 x)
.version 8.0
.target sm_80
.visible .func helper(.param .u32 a) { ret; }
/* block comment
   .entry also_fake() */
.visible .entry k_all(
    .param .u64 .ptr .global .align 16 k_all_param_0,
    .param .s32 k_all_param_1,
    .param .align 4 .b8 k_all_param_2[12],
    .param .f64 k_all_param_3,
    .param .u16 k_all_param_4
)
.maxntid 256, 1, 1
{
  ret;
}
.entry k_none()
{ ret; }
.weak .entry k_noparen
{ ret; }
)";
  auto sigs = parse_ptx_signatures(ptx);
  REQUIRE_MESSAGE(sigs.ok(), sigs.status().ToString());
  REQUIRE(sigs->size() == 3);
  const auto& k = (*sigs)[0];
  CHECK(k.entry == "k_all");
  REQUIRE(k.params.size() == 5);
  // `.align` after `.ptr` is the alignment of the memory pointed to; the
  // parameter keeps its type's.
  CHECK(k.params[0].align == 8);
  CHECK(k.directives.maxntid == sparkrt::Dim3{256, 1, 1});
  CHECK(k.directives.reqntid == sparkrt::Dim3{0, 0, 0});
  CHECK(k.params[1].type == ParamType::kS32);
  CHECK(k.params[1].offset == 8);
  CHECK(k.params[2].size == 12);
  CHECK(k.params[2].offset == 12);
  CHECK(k.params[3].offset == 24);
  CHECK(k.params[4].offset == 32);
  CHECK(k.params_size == 34);
  CHECK(k.params[2].name == "k_all_param_2");
  CHECK((*sigs)[1].entry == "k_none");
  CHECK((*sigs)[1].params.empty());
  CHECK((*sigs)[2].entry == "k_noparen");
  CHECK(sparkrt::param_type_name(ParamType::kBytes, 12) == ".b8[12]");
  CHECK(sparkrt::param_type_name(ParamType::kU64, 8) == ".u64");
}

TEST_CASE("signature: a module without entries is valid and empty") {
  auto sigs = parse_ptx_signatures(".version 8.0\n.target sm_80\n.address_size 64\n");
  REQUIRE(sigs.ok());
  CHECK(sigs->empty());
}

TEST_CASE("signature: malformed PTX is rejected with the line and the cause") {
  struct Case {
    const char* ptx;
    const char* expect;
  };
  const Case cases[] = {
      {".entry k(\n.param .u32 a,\n", "input ends"},
      {".entry k(.param .u32 a .param .u32 b)", "expected ',' or ')'"},
      {".entry k(.param a)", "has no type"},
      {".entry k(.param .u32 .u64 a)", "two types"},
      {".entry k(.param .align 3 .b8 a[4])", "bad alignment"},
      {".entry k(.param .align 99999999999 .b8 a[4])", "bad alignment"},
      {".entry k(.param .b8 a[0])", "bad array length"},
      {".entry k(.param .b8 a[4294967295])", "bad array length"},
      {".entry k(.param .b8 a[4)", "expected ']'"},
      {".entry (.param .u32 a)", "expected an entry name"},
      {".entry", "input ends"},
      {".entry k(.param .u32 a) {}\n.entry k() {}", "declared twice"},
      {"/* never closed\n.entry k()", "unterminated /* comment"},
      {".entry k(.u32 a)", "expected '.param'"},
      {".entry k(.param .u32 a, @)", "expected '.param'"},
      // A non-ASCII byte ends a name: the entry is refused, not cut short.
      {".entry k\xc3\xa9(.param .u32 a) {}", "found '\\xc3'"},
      {".entry k(.param .u32 x\xc3\xa9) {}", "found '\\xc3'"},
      {".entry k(.param .u32 a) @ {}", "expected a directive or '{'"},
      {".entry k(.param .u32 a) .reqntid {}", "expected a positive extent"},
      {".entry k(.param .u32 a) .reqntid 1, 2, 3, 4 {}", "expected a directive or '{'"},
      {".entry k(.param .u32 a) .maxnreg 0 {}", "must be at least 1"},
      {".entry k(.param .u32 a) .maxntid 99999999999 {}", "expected a positive extent"},
      {".entry k(.param .u32 a) .pragma \"nounroll\" {}", "expected ';'"},
      {".entry k(.param .u32 a, .param .u32 a) {}", "used twice"},
      {".entry k(.param .u32 a)", "input ends"},
      // Lone _, $ and % are not names (ptxas takes a lone _ as a parameter's).
      {".entry _(.param .u32 a) {}", "expected an entry name"},
      {".entry $(.param .u32 a) {}", "expected an entry name"},
      {".entry k(.param .u32 %) {}", "expected the parameter name"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.ptx);
    auto sigs = parse_ptx_signatures(c.ptx);
    REQUIRE_FALSE(sigs.ok());
    CHECK(sigs.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(sigs.status().message().find(c.expect) != std::string_view::npos,
                  sigs.status().message());
    CHECK(sigs.status().message().find("line ") == 0);
  }
}

TEST_CASE("signature: launch directives are read, unknown ones skipped") {
  const char* ptx = R"(
.entry a(.param .u32 x) .reqntid 128 .minnctapersm 2 .maxnreg 64 { ret; }
.entry b(.param .u32 x)
.maxntid 16, 0x10, 2
.pragma "nounroll";
.reqnctapercluster 2, 2 .explicitcluster .maxclusterrank 8
.someday_directive 3, 4
{ ret; }
.entry c .maxntid 32 { ret; }
)";
  auto sigs = parse_ptx_signatures(ptx);
  REQUIRE_MESSAGE(sigs.ok(), sigs.status().ToString());
  REQUIRE(sigs->size() == 3);
  const auto& a = (*sigs)[0].directives;
  CHECK(a.reqntid == sparkrt::Dim3{128, 1, 1});
  CHECK(a.maxntid == sparkrt::Dim3{0, 0, 0});
  CHECK(a.minnctapersm == 2);
  CHECK(a.maxnreg == 64);
  const auto& b = (*sigs)[1].directives;
  CHECK(b.maxntid == sparkrt::Dim3{16, 16, 2});
  CHECK(b.reqnctapercluster == sparkrt::Dim3{2, 2, 1});
  CHECK(b.explicitcluster);
  CHECK(b.maxclusterrank == 8);
  CHECK((*sigs)[2].params.empty());
  CHECK((*sigs)[2].directives.maxntid == sparkrt::Dim3{32, 1, 1});
}

TEST_CASE("signature: integer literals in every PTX base") {
  auto sigs = parse_ptx_signatures(
      ".entry k(.param .u8 a, .param .align 0x8 .b8 b[0b11], .param .align 010 .b8 c[0X2], "
      ".param .b8 d[7U]) {}");
  REQUIRE_MESSAGE(sigs.ok(), sigs.status().ToString());
  const auto& p = (*sigs)[0].params;
  CHECK(p[1].offset == 8);
  CHECK(p[1].size == 3);
  CHECK(p[2].offset == 16);
  CHECK(p[2].size == 2);
  CHECK(p[3].size == 7);
  CHECK_FALSE(parse_ptx_signatures(".entry k(.param .b8 a[0x]) {}").ok());
  CHECK_FALSE(parse_ptx_signatures(".entry k(.param .b8 a[09]) {}").ok());
  CHECK_FALSE(parse_ptx_signatures(".entry k(.param .b8 a[0b2]) {}").ok());
}

TEST_CASE("signature: the entry limit names the line where it is passed") {
  std::string ptx;
  for (int i = 0; i <= 100000; ++i) ptx += ".entry k" + std::to_string(i) + " {}\n";
  auto sigs = parse_ptx_signatures(ptx);
  REQUIRE_FALSE(sigs.ok());
  CHECK_MESSAGE(sigs.status().message().find("line 100001: more than 100000 entries") == 0,
                sigs.status().message());
}

TEST_CASE("signature: huge parameter lists are bounded, not trusted") {
  std::string ptx = ".entry big(";
  for (int i = 0; i < 300; ++i) ptx += (i ? ", " : "") + std::string(".param .b8 p") + std::to_string(i) + "[4096]";
  ptx += ")";
  auto sigs = parse_ptx_signatures(ptx);
  REQUIRE_FALSE(sigs.ok());
  CHECK(sigs.status().message().find("parameters exceed") != std::string_view::npos);
}

TEST_CASE("signature: random corruption of the built PTX never crashes") {
  const std::string ptx = read_built_ptx("vector_ops");
  REQUIRE_FALSE(ptx.empty());
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string mutated = ptx;
    std::uniform_int_distribution<size_t> pos(0, mutated.size() - 1);
    switch (round % 4) {
      case 0: mutated.resize(pos(rng)); break;                        // truncate
      case 1: mutated[pos(rng)] = static_cast<char>(rng() & 0xff); break;  // flip a byte
      case 2: mutated.erase(pos(rng), 1 + rng() % 16); break;         // drop a run
      case 3: mutated.insert(pos(rng), "(,[]/*\""); break;           // inject syntax
    }
    auto sigs = parse_ptx_signatures(mutated);
    if (!sigs.ok()) {
      ++rejected;
      CHECK(sigs.status().code() == absl::StatusCode::kInvalidArgument);
    } else {
      for (const auto& s : *sigs) CHECK(s.params_size <= (1u << 20));
    }
  }
  CHECK(rejected > 0);  // the mutations do reach the parser's error paths
}
