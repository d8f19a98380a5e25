// The SPIR-V reader of the plugin SDK (sparkrt/sdk/spirv_reflect.h): what it
// reads from the built vector_ops module, and that hostile bytes give an
// error, never a crash.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "sparkrt/sdk/spirv_reflect.h"
#include "sparkrt/signature.h"

namespace spirv = sparkrt::sdk::spirv;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string vector_ops_spv() { return read(std::string(SPARKRT_BUILD_KERNEL_DIR) + "/vector_ops.spv"); }

std::vector<SparkrtParamInfo> params_of(const std::string& entry) {
  auto sigs =
      sparkrt::parse_ptx_signatures(read(std::string(SPARKRT_SIGNATURE_DIR) + "/vector_ops.sig"));
  REQUIRE(sigs.ok());
  for (const auto& s : *sigs) {
    if (s.entry != entry) continue;
    std::vector<SparkrtParamInfo> out;
    for (const auto& p : s.params) out.push_back({p.offset, p.size, p.align});
    return out;
  }
  FAIL("no entry " << entry);
  return {};
}

}  // namespace

TEST_CASE("spirv reflect: the built vector_ops module has every kernel with its parameters") {
  const std::string bytes = vector_ops_spv();
  REQUIRE_FALSE(bytes.empty());
  auto m = spirv::reflect(bytes);
  REQUIRE_MESSAGE(m.ok(), m.status().ToString());
  CHECK(m->version >= 0x00010400);
  CHECK(m->workgroup_size_is_spec);
  CHECK(m->has_spec_id(0));
  CHECK_FALSE(m->has_spec_id(3));  // no kernel here takes dynamic shared memory
  for (const char* name :
       {"vector_add_f32", "fill_u32", "axpy_f32", "empty_10_args", "copy_args_u32"}) {
    INFO(name);
    const spirv::EntryPoint* e = m->find(name);
    REQUIRE(e != nullptr);
    CHECK(spirv::check_push_constants(*e, params_of(name)).ok());
  }
  const spirv::EntryPoint* add = m->find("vector_add_f32");
  REQUIRE(add->push_constants.size() == 4);
  CHECK(add->push_constants[2].name == "out_");
  CHECK(add->push_constants[3].offset == 24);
  CHECK(add->push_constants[3].size == 4);
  // The struct argument of axpy_f32 is 16 bytes, as in the CUDA layout.
  CHECK(m->find("axpy_f32")->push_constants[0].size == 16);
  CHECK_FALSE(add->argument_buffer);
  // copy_args_u32's 144 bytes come through an argument buffer: its members
  // are the parameters.
  const spirv::EntryPoint* copy = m->find("copy_args_u32");
  CHECK(copy->argument_buffer);
  REQUIRE(copy->push_constants.size() == 2);
  CHECK(copy->push_constants[1].offset == 8);
  CHECK(copy->push_constants[1].size == 136);
  CHECK(m->find("no_such_kernel") == nullptr);
}

TEST_CASE("spirv reflect: a layout that differs from the signature is named") {
  auto m = spirv::reflect(vector_ops_spv());
  REQUIRE(m.ok());
  const spirv::EntryPoint* fill = m->find("fill_u32");
  REQUIRE(fill != nullptr);
  auto params = params_of("fill_u32");
  params[1].offset += 4;
  const auto moved = spirv::check_push_constants(*fill, params);
  CHECK(moved.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(moved.message()).find("push constant #1 (value)") != std::string::npos);
  params = params_of("fill_u32");
  params.pop_back();
  CHECK(std::string(spirv::check_push_constants(*fill, params).message())
            .find("3 push constants, but its signature has 2 parameters") != std::string::npos);
}

TEST_CASE("spirv reflect: malformed modules are errors that say what is wrong") {
  const std::string good = vector_ops_spv();
  REQUIRE(good.size() > 64);
  const auto error_of = [](const std::string& bytes) {
    auto m = spirv::reflect(bytes);
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(m.status().message());
  };
  CHECK(error_of("").find("header") != std::string::npos);
  CHECK(error_of(good.substr(0, 22)).find("whole number") != std::string::npos);
  CHECK(error_of(std::string(64, 'x')).find("not SPIR-V") != std::string::npos);
  std::string swapped = good;
  for (size_t i = 0; i + 4 <= swapped.size(); i += 4) std::swap(swapped[i], swapped[i + 3]), std::swap(swapped[i + 1], swapped[i + 2]);
  CHECK(error_of(swapped).find("big-endian") != std::string::npos);
  std::string bound = good;
  const uint32_t huge = 0xffffffffu;
  std::memcpy(bound.data() + 12, &huge, 4);
  CHECK(error_of(bound).find("id bound") != std::string::npos);
  std::string zero = good;
  std::memset(zero.data() + 20, 0, 4);  // the first instruction's word count
  CHECK(error_of(zero).find("word count 0") != std::string::npos);
  std::string past = good;
  const uint32_t long_ins = (0xffffu << 16) | 17;
  std::memcpy(past.data() + 20, &long_ins, 4);
  CHECK(error_of(past).find("past the end") != std::string::npos);
}

TEST_CASE("spirv reflect: random damage never crashes and any success is well formed") {
  const std::string good = vector_ops_spv();
  std::mt19937 rng(1234);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    if (round % 5 == 0) bytes.resize(bytes.size() / 4 * 4 - 4 * (rng() % 16));
    auto m = spirv::reflect(bytes);
    if (!m.ok()) continue;
    for (const auto& entry : m->entries)
      for (const auto& member : entry.push_constants) CHECK(member.size <= (1u << 31));
  }
}
