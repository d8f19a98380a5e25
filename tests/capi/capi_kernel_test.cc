// Kernels and launches through the C API: lookups, the signature as C++ and
// the signature files state it, launches computed on cpu and recorded on the
// mock, and, for a table of wrong launches, the same code and the same
// message as KernelLaunch::launch with the equivalent C++ arguments.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "capi_test_support.h"
#include "sparkrt/device.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/signature.h"

using capitest::check_same;
using capitest::CStatus;
using capitest::describe;
using capitest::open_c;
using capitest::open_cpp;
using sparkrt::Dim3;
using sparkrt::testing::MockArg;

namespace {

constexpr const char* kHostBackends[] = {"mock", "cpu"};

// Test modules: this folder's capi_probe, and tests/data's mock_kinds and
// triton_style. The built-in modules are still found after them.
void use_test_kernels() {
  REQUIRE(setenv("SPARKRT_KERNEL_PATH",
                 SPARKRT_CAPI_KERNEL_DIR ":" SPARKRT_TEST_DATA_DIR "/kernels", 1) == 0);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every entry's declaration in a signature file, by entry name: the text
// from ".visible .entry name(" to the end of its empty body.
std::map<std::string, std::string> sig_file_declarations(const std::string& module) {
  const std::string text =
      read_file(std::string(SPARKRT_TEST_SIGNATURES_DIR) + "/" + module + ".sig");
  std::map<std::string, std::string> out;
  const std::string start = ".visible .entry ";
  for (size_t at = text.find(start); at != std::string::npos; at = text.find(start, at + 1)) {
    const size_t name_end = text.find('(', at);
    const size_t end = text.find("\n}\n", at);
    REQUIRE(name_end != std::string::npos);
    REQUIRE(end != std::string::npos);
    out[text.substr(at + start.size(), name_end - at - start.size())] =
        text.substr(at, end + 3 - at);
  }
  REQUIRE(!out.empty());
  return out;
}

sparkrt_kernel_info info_of(const sparkrt_kernel* k) {
  sparkrt_kernel_info info{};
  info.struct_size = SPARKRT_C_KERNEL_INFO_SIZE;
  C_REQUIRE_OK(sparkrt_kernel_info_get(k, &info));
  return info;
}

sparkrt_param_info param_of(const sparkrt_kernel* k, uint32_t i) {
  sparkrt_param_info p{};
  p.struct_size = SPARKRT_C_PARAM_INFO_SIZE;
  C_REQUIRE_OK(sparkrt_kernel_param(k, i, &p));
  return p;
}

}  // namespace

TEST_CASE("capi kernels: a lookup returns one handle per (module, entry) and device") {
  auto dev = open_c("mock");
  auto other = open_c("mock");
  sparkrt_kernel* k1 = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  sparkrt_kernel* k2 = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  CHECK(k1 == k2);
  sparkrt_kernel* fill = capitest::c_kernel(dev.get(), "vector_ops", "fill_u32");
  CHECK(fill != k1);
  sparkrt_kernel* elsewhere = capitest::c_kernel(other.get(), "vector_ops", "vector_add_f32");
  CHECK(elsewhere != k1);
  // The runtime caches the kernel: the plugin saw one lookup of the pair.
  const auto counters = capitest::CMock(dev.get()).counters();
  CHECK(counters.lookups == 2);
}

TEST_CASE("capi kernels: info and parameters equal the C++ signature and the signature files") {
  const char* modules[] = {
      "vector_ops", "kv_cache",  "paged_attention", "turbo_kv_cache", "turbo_paged_attention",
      "mla",        "mla_decode"};
  for (const char* backend : kHostBackends) {
    auto dev = open_c(backend);
    auto cpp = open_cpp(backend);
    size_t compared = 0;
    for (const char* module : modules) {
      for (const auto& [entry, declaration] : sig_file_declarations(module)) {
        INFO(std::string(backend), ": ", std::string(module), ".", entry);
        auto k = cpp->kernel(module, entry);
        sparkrt_kernel* ck = nullptr;
        const CStatus s(sparkrt_kernel_get(dev.get(), module, entry.c_str(), &ck));
        if (!k.ok()) {  // an entry the backend cannot run: the same refusal
          check_same(s.get(), k.status());
          CHECK(ck == nullptr);
          continue;
        }
        REQUIRE_MESSAGE(s == nullptr, describe(s.get()));
        ++compared;
        const sparkrt::KernelSignature& sig = k->signature();
        const sparkrt_kernel_info info = info_of(ck);
        CHECK(std::string(info.module) == module);
        CHECK(std::string(info.entry) == entry);
        CHECK(std::string(info.declaration) == declaration);
        CHECK(std::string(info.declaration) == sparkrt::format_signature_file({&sig, 1}));
        CHECK(info.num_params == sig.params.size());
        CHECK(info.params_size == sig.params_size);
        CHECK(info.reqntid[0] == sig.directives.reqntid.x);
        CHECK(info.reqntid[1] == sig.directives.reqntid.y);
        CHECK(info.reqntid[2] == sig.directives.reqntid.z);
        CHECK(info.maxntid[0] == sig.directives.maxntid.x);
        CHECK(info.maxntid[1] == sig.directives.maxntid.y);
        CHECK(info.maxntid[2] == sig.directives.maxntid.z);
        CHECK(std::string(info.unsupported) == sig.unsupported);
        for (uint32_t i = 0; i < sig.params.size(); ++i) {
          INFO("parameter #", i);
          const sparkrt::Param& want = sig.params[i];
          const sparkrt_param_info got = param_of(ck, i);
          CHECK(std::string(got.name) == want.name);
          CHECK(got.type == static_cast<int32_t>(want.type) + SPARKRT_PARAM_U8);
          CHECK(std::string(got.type_name) == sparkrt::param_type_name(want.type, want.size));
          CHECK(got.size == want.size);
          CHECK(got.align == want.align);
          CHECK(got.offset == want.offset);
        }
      }
    }
    INFO(std::string(backend));
    CHECK(compared >= 5);  // vector_ops at least
  }
}

TEST_CASE("capi kernels: the types of the PTX parameters and the .b8 arrays") {
  auto dev = open_c("mock");
  sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  const sparkrt_kernel_info info = info_of(add);
  CHECK(info.num_params == 4);
  CHECK(info.params_size == 28);
  CHECK(info.reqntid[0] == 0);
  CHECK(info.maxntid[0] == 0);
  CHECK(std::string(info.unsupported).empty());
  const sparkrt_param_info n = param_of(add, 3);
  CHECK(std::string(n.name) == "vector_add_f32_param_3");
  CHECK(n.type == SPARKRT_PARAM_U32);
  CHECK(std::string(n.type_name) == ".u32");
  CHECK(n.size == 4);
  CHECK(n.align == 4);
  CHECK(n.offset == 24);

  sparkrt_kernel* axpy = capitest::c_kernel(dev.get(), "vector_ops", "axpy_f32");
  const sparkrt_param_info blob = param_of(axpy, 0);
  CHECK(blob.type == SPARKRT_PARAM_BYTES);
  CHECK(std::string(blob.type_name) == ".b8[16]");
  CHECK(blob.size == 16);
  CHECK(blob.align == 8);
  CHECK(param_of(axpy, 1).offset == 16);

  sparkrt_kernel* reshape = capitest::c_kernel(dev.get(), "kv_cache", "reshape_and_cache");
  const sparkrt_kernel_info r = info_of(reshape);
  CHECK(r.maxntid[0] == 256);
  CHECK(r.maxntid[1] == 1);
  CHECK(r.maxntid[2] == 1);

  use_test_kernels();
  auto probe = open_c("mock");
  sparkrt_kernel* fixed = capitest::c_kernel(probe.get(), "capi_probe", "fixed_block");
  const sparkrt_kernel_info f = info_of(fixed);
  CHECK(f.reqntid[0] == 64);
  CHECK(f.reqntid[1] == 2);
  CHECK(f.reqntid[2] == 1);
  sparkrt_kernel* after = capitest::c_kernel(probe.get(), "capi_probe", "blob_after_u32");
  CHECK(param_of(after, 1).offset == 8);
  CHECK(param_of(after, 2).offset == 32);
  // An entry whose layout depends on the architecture is refused at lookup,
  // as in C++.
  auto cpp = open_cpp("mock");
  sparkrt_kernel* over = nullptr;
  const CStatus refused(sparkrt_kernel_get(probe.get(), "mock_kinds", "overaligned_probe", &over));
  check_same(refused.get(), cpp->kernel("mock_kinds", "overaligned_probe").status());
  CHECK(over == nullptr);
}

TEST_CASE("capi kernels: info for older and malformed callers, parameters out of range") {
  auto dev = open_c("mock");
  sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  const sparkrt_kernel_info full = info_of(add);
  constexpr uint8_t kCanary = 0x5a;

  {  // A caller that knows module and entry only.
    const size_t older = offsetof(sparkrt_kernel_info, entry) + sizeof(const char*);
    alignas(sparkrt_kernel_info) unsigned char buf[sizeof(sparkrt_kernel_info) + 32];
    std::memset(buf, kCanary, sizeof buf);
    std::memcpy(buf, &older, sizeof older);
    C_REQUIRE_OK(sparkrt_kernel_info_get(add, reinterpret_cast<sparkrt_kernel_info*>(buf)));
    sparkrt_kernel_info got;
    std::memcpy(&got, buf, sizeof got);
    CHECK(got.module == full.module);
    CHECK(got.entry == full.entry);
    size_t touched = 0;
    for (size_t i = older; i < sizeof buf; ++i) touched += buf[i] != kCanary;
    CHECK(touched == 0);
  }
  {
    const size_t older = offsetof(sparkrt_param_info, type_name) + sizeof(const char*);
    alignas(sparkrt_param_info) unsigned char buf[sizeof(sparkrt_param_info) + 32];
    std::memset(buf, kCanary, sizeof buf);
    std::memcpy(buf, &older, sizeof older);
    C_REQUIRE_OK(sparkrt_kernel_param(add, 2, reinterpret_cast<sparkrt_param_info*>(buf)));
    sparkrt_param_info got;
    std::memcpy(&got, buf, sizeof got);
    CHECK(std::string(got.name) == "vector_add_f32_param_2");
    CHECK(std::string(got.type_name) == ".u64");
    size_t touched = 0;
    for (size_t i = older; i < sizeof buf; ++i) touched += buf[i] != kCanary;
    CHECK(touched == 0);
  }
  for (size_t size : {size_t{0}, sizeof(size_t)}) {
    INFO("struct_size ", size);
    sparkrt_kernel_info info;
    std::memset(&info, kCanary, sizeof info);
    info.struct_size = size;
    C_CHECK_CODE(sparkrt_kernel_info_get(add, &info), SPARKRT_INVALID_ARGUMENT);
    CHECK(reinterpret_cast<const unsigned char*>(&info.module)[0] == kCanary);
    sparkrt_param_info p;
    std::memset(&p, kCanary, sizeof p);
    p.struct_size = size;
    C_CHECK_CODE(sparkrt_kernel_param(add, 0, &p), SPARKRT_INVALID_ARGUMENT);
    CHECK(reinterpret_cast<const unsigned char*>(&p.name)[0] == kCanary);
  }
  C_CHECK_CODE(sparkrt_kernel_info_get(nullptr, nullptr), SPARKRT_INVALID_ARGUMENT);
  sparkrt_kernel_info info{};
  info.struct_size = SPARKRT_C_KERNEL_INFO_SIZE;
  C_CHECK_CODE(sparkrt_kernel_info_get(nullptr, &info), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_kernel_info_get(add, nullptr), SPARKRT_INVALID_ARGUMENT);

  for (uint32_t index : {4u, 5u, 0xffffffffu}) {
    INFO("index ", index);
    sparkrt_param_info p;
    std::memset(&p, kCanary, sizeof p);
    p.struct_size = SPARKRT_C_PARAM_INFO_SIZE;
    const CStatus s(sparkrt_kernel_param(add, index, &p));
    const int32_t code = sparkrt_status_code(s.get());
    CHECK_MESSAGE((code == SPARKRT_OUT_OF_RANGE || code == SPARKRT_INVALID_ARGUMENT),
                  describe(s.get()));
    CHECK(reinterpret_cast<const unsigned char*>(&p.name)[0] == kCanary);
  }
  sparkrt_param_info p{};
  p.struct_size = SPARKRT_C_PARAM_INFO_SIZE;
  C_CHECK_CODE(sparkrt_kernel_param(nullptr, 0, &p), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_kernel_param(add, 0, nullptr), SPARKRT_INVALID_ARGUMENT);
}

TEST_CASE("capi kernels: an unknown module or entry is NOT_FOUND with C++'s message") {
  for (const char* backend : kHostBackends) {
    INFO("backend ", std::string(backend));
    auto dev = open_c(backend);
    auto cpp = open_cpp(backend);
    for (const auto& [module, entry] : {std::pair{"no_such_module", "vector_add_f32"},
                                        std::pair{"vector_ops", "no_such_entry"}}) {
      INFO(std::string(module), ".", std::string(entry));
      sparkrt_kernel* k = nullptr;
      const CStatus s(sparkrt_kernel_get(dev.get(), module, entry, &k));
      CHECK(sparkrt_status_code(s.get()) == SPARKRT_NOT_FOUND);
      check_same(s.get(), cpp->kernel(module, entry).status());
      CHECK(k == nullptr);
    }
  }
}

TEST_CASE("capi launch: vector_add_f32 and axpy_f32 on cpu against a host computation") {
  const uint64_t seed = sparkrt::testing::fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> value(-8.0f, 8.0f);
  auto dev = open_c("cpu");
  constexpr uint32_t kN = 1000;
  std::vector<float> a(kN), b(kN);
  for (float& x : a) x = value(gen);
  for (float& x : b) x = value(gen);
  const SparkrtDevicePtr da = capitest::c_alloc(dev.get(), kN * 4);
  const SparkrtDevicePtr db = capitest::c_alloc(dev.get(), kN * 4);
  const SparkrtDevicePtr dout = capitest::c_alloc(dev.get(), (kN + 1) * 4);
  C_REQUIRE_OK(sparkrt_copy_h2d(dev.get(), a.data(), da, kN * 4));
  C_REQUIRE_OK(sparkrt_copy_h2d(dev.get(), b.data(), db, kN * 4));
  C_REQUIRE_OK(sparkrt_memset(dev.get(), dout, 0xff, (kN + 1) * 4));  // NaN

  sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  const SparkrtStream stream = capitest::c_stream(dev.get());
  const sparkrt_launch_config cfg = capitest::config({(kN + 255) / 256}, {256}, 0, stream);
  const sparkrt_arg args[] = {sparkrt_arg_ptr(da), sparkrt_arg_ptr(db), sparkrt_arg_ptr(dout),
                              sparkrt_arg_u32(kN)};
  C_REQUIRE_OK(sparkrt_launch(add, &cfg, args, 4));
  C_REQUIRE_OK(sparkrt_stream_synchronize(dev.get(), stream));
  std::vector<float> out(kN + 1);
  C_REQUIRE_OK(sparkrt_copy_d2h(dev.get(), dout, out.data(), (kN + 1) * 4));
  size_t bad = 0;
  for (uint32_t i = 0; i < kN; ++i) bad += out[i] != a[i] + b[i];
  CHECK_MESSAGE(bad == 0, bad, " of ", kN, " sums wrong");
  uint32_t past = 0;
  std::memcpy(&past, &out[kN], 4);
  CHECK(past == 0xffffffffu);  // nothing written past n

  // A struct argument through sparkrt_arg_bytes: y = alpha x + y.
  struct alignas(8) Axpy {
    float alpha;
    uint32_t pad;
    uint64_t n;
  };
  const Axpy params{value(gen), 0, kN};
  sparkrt_kernel* axpy = capitest::c_kernel(dev.get(), "vector_ops", "axpy_f32");
  C_REQUIRE_OK(sparkrt_copy_h2d(dev.get(), b.data(), dout, kN * 4));
  const sparkrt_arg axpy_args[] = {sparkrt_arg_bytes(&params, sizeof params, alignof(Axpy)),
                                   sparkrt_arg_ptr(da), sparkrt_arg_ptr(dout)};
  C_REQUIRE_OK(sparkrt_launch(axpy, &cfg, axpy_args, 3));
  C_REQUIRE_OK(sparkrt_stream_synchronize(dev.get(), stream));
  C_REQUIRE_OK(sparkrt_copy_d2h(dev.get(), dout, out.data(), kN * 4));
  bad = 0;
  for (uint32_t i = 0; i < kN; ++i) bad += out[i] != params.alpha * a[i] + b[i];
  CHECK_MESSAGE(bad == 0, bad, " of ", kN, " axpy results wrong (alpha ", params.alpha, ")");

  // 136 bytes by value: every byte reaches the kernel.
  struct CopyArgs {
    uint32_t v[34];
  };
  CopyArgs copy{};
  for (uint32_t& v : copy.v) v = static_cast<uint32_t>(gen());
  sparkrt_kernel* copy_k = capitest::c_kernel(dev.get(), "vector_ops", "copy_args_u32");
  C_REQUIRE_OK(sparkrt_memset(dev.get(), dout, 0xff, 34 * 4));
  const sparkrt_launch_config one = capitest::config({1}, {34});
  const sparkrt_arg copy_args[] = {sparkrt_arg_ptr(dout),
                                   sparkrt_arg_bytes(&copy, sizeof copy, alignof(CopyArgs))};
  C_REQUIRE_OK(sparkrt_launch(copy_k, &one, copy_args, 2));
  C_REQUIRE_OK(sparkrt_stream_synchronize(dev.get(), 0));
  CopyArgs got{};
  C_REQUIRE_OK(sparkrt_copy_d2h(dev.get(), dout, &got, sizeof got));
  CHECK(std::memcmp(&got, &copy, sizeof copy) == 0);
}

TEST_CASE(
    "capi launch: the mock records the geometry, stream and every argument's kind and bytes") {
  use_test_kernels();
  auto dev = open_c("mock");
  const SparkrtDevicePtr buf = capitest::c_alloc(dev.get(), 4096);
  const SparkrtStream stream = capitest::c_stream(dev.get());
  sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  const sparkrt_launch_config cfg = capitest::config({3, 2, 1}, {128, 2, 1}, 1024, stream);
  const sparkrt_arg args[] = {sparkrt_arg_ptr(buf), sparkrt_arg_ptr(buf + 256),
                              sparkrt_arg_ptr(buf + 512), sparkrt_arg_u32(777)};
  C_REQUIRE_OK(sparkrt_launch(add, &cfg, args, 4));

  struct alignas(8) Blob16 {
    uint64_t a, b;
  };
  const Blob16 blob{0x0102030405060708u, 0x1112131415161718u};
  sparkrt_kernel* kinds = capitest::c_kernel(dev.get(), "mock_kinds", "kinds_probe");
  const sparkrt_launch_config one = capitest::config({1}, {32});
  const sparkrt_arg kind_args[] = {
      sparkrt_arg_ptr(0),          sparkrt_arg_u32(4000000000u),   sparkrt_arg_i32(-5),
      sparkrt_arg_u64(1ull << 40), sparkrt_arg_i64(-(1ll << 41)),  sparkrt_arg_f32(0.25f),
      sparkrt_arg_f64(-1.5),       sparkrt_arg_bytes(&blob, 16, 8)};
  C_REQUIRE_OK(sparkrt_launch(kinds, &one, kind_args, 8));

  const auto launches = capitest::CMock(dev.get()).launches();
  REQUIRE(launches.size() == 2);
  const auto& l = launches[0];
  INFO("recorded: ", l);
  CHECK(l.module == "vector_ops");
  CHECK(l.entry == "vector_add_f32");
  CHECK(l.grid == Dim3{3, 2, 1});
  CHECK(l.block == Dim3{128, 2, 1});
  CHECK(l.shared_mem == 1024);
  CHECK(l.stream == sparkrt::Stream{stream});
  REQUIRE(l.args.size() == 4);
  CHECK(l.args[0] == MockArg::of(sparkrt::DevicePtr(buf)));
  CHECK(l.args[1] == MockArg::of(sparkrt::DevicePtr(buf + 256)));
  CHECK(l.args[2] == MockArg::of(sparkrt::DevicePtr(buf + 512)));
  CHECK(l.args[3] == MockArg::of(uint32_t{777}));

  const auto& k = launches[1];
  INFO("recorded: ", k);
  CHECK(k.entry == "kinds_probe");
  CHECK(k.stream == sparkrt::Stream{0});
  REQUIRE(k.args.size() == 8);
  CHECK(k.args[0] == MockArg::of(sparkrt::DevicePtr(0)));
  CHECK(k.args[1] == MockArg::of(uint32_t{4000000000u}));
  CHECK(k.args[2] == MockArg::of(int32_t{-5}));
  CHECK(k.args[3] == MockArg::of(uint64_t{1} << 40));
  CHECK(k.args[4] == MockArg::of(-(int64_t{1} << 41)));
  CHECK(k.args[5] == MockArg::of(0.25f));
  CHECK(k.args[6] == MockArg::of(-1.5));
  CHECK(k.args[7] == MockArg::of(blob));

  // An entry without parameters takes no arguments array at all.
  sparkrt_kernel* none = capitest::c_kernel(dev.get(), "mock_kinds", "no_params");
  C_CHECK_OK(sparkrt_launch(none, &one, nullptr, 0));
  CHECK(capitest::CMock(dev.get()).launches().size() == 3);
}

TEST_CASE("capi launch: attributes reach the mock as the C++ launch's do, on both paths") {
  use_test_kernels();
  auto dev = open_c("mock");
  auto cpp = open_cpp("mock");
  auto cpp_mock = sparkrt::testing::MockInspector::attach(*cpp);
  REQUIRE_MESSAGE(cpp_mock.ok(), cpp_mock.status().ToString());
  // vector_add_f32 takes scalars only: its first launch is packed and cached,
  // the later ones write into the cached layout. axpy_f32 takes a struct,
  // so every launch of it is packed.
  sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  sparkrt_kernel* axpy = capitest::c_kernel(dev.get(), "vector_ops", "axpy_f32");
  auto cpp_add = cpp->kernel("vector_ops", "vector_add_f32");
  auto cpp_axpy = cpp->kernel("vector_ops", "axpy_f32");
  REQUIRE(cpp_add.ok());
  REQUIRE(cpp_axpy.ok());
  const SparkrtDevicePtr cbuf = capitest::c_alloc(dev.get(), 4096);
  auto pbuf = cpp->alloc(4096);
  REQUIRE(pbuf.ok());
  const uint64_t blob[2] = {0x3f800000, 64};

  struct Attrs {
    uint32_t flags;
    Dim3 cluster;
  };
  const Attrs attrs[] = {{0, {0, 0, 0}},
                         {SPARKRT_LAUNCH_DEPENDENT, {0, 0, 0}},
                         {0, {2, 1, 1}},
                         {SPARKRT_LAUNCH_DEPENDENT, {2, 2, 2}},
                         {0, {1, 4, 1}},
                         {SPARKRT_LAUNCH_DEPENDENT, {8, 1, 1}},
                         {0, {0, 0, 0}}};
  for (const Attrs& a : attrs) {
    for (int which = 0; which < 2; ++which) {
      sparkrt_launch_config cfg = capitest::config({8, 4, 2}, {64});
      cfg.flags = a.flags;
      cfg.cluster[0] = a.cluster.x;
      cfg.cluster[1] = a.cluster.y;
      cfg.cluster[2] = a.cluster.z;
      const std::vector<sparkrt_arg> c_args =
          which == 0 ? std::vector<sparkrt_arg>{sparkrt_arg_ptr(cbuf), sparkrt_arg_ptr(cbuf + 256),
                                                sparkrt_arg_ptr(cbuf + 512), sparkrt_arg_u32(64)}
                     : std::vector<sparkrt_arg>{sparkrt_arg_bytes(blob, 16, 8),
                                                sparkrt_arg_ptr(cbuf), sparkrt_arg_ptr(cbuf + 256)};
      const std::vector<sparkrt_arg> cpp_args =
          which == 0
              ? std::vector<sparkrt_arg>{sparkrt_arg_ptr(pbuf->addr),
                                         sparkrt_arg_ptr(pbuf->addr + 256),
                                         sparkrt_arg_ptr(pbuf->addr + 512), sparkrt_arg_u32(64)}
              : std::vector<sparkrt_arg>{sparkrt_arg_bytes(blob, 16, 8),
                                         sparkrt_arg_ptr(pbuf->addr),
                                         sparkrt_arg_ptr(pbuf->addr + 256)};
      C_REQUIRE_OK(sparkrt_launch(which == 0 ? add : axpy, &cfg, c_args.data(),
                                  static_cast<uint32_t>(c_args.size())));
      const absl::Status st =
          capitest::launch_cpp(*cpp, which == 0 ? *cpp_add : *cpp_axpy, cfg, cpp_args);
      REQUIRE_MESSAGE(st.ok(), st.ToString());
    }
  }
  const auto c_launches = capitest::CMock(dev.get()).launches();
  const auto cpp_launches = cpp_mock->launches();
  REQUIRE(c_launches.size() == 2 * std::size(attrs));
  REQUIRE(cpp_launches.size() == c_launches.size());
  for (size_t i = 0; i < c_launches.size(); ++i) {
    const Attrs& a = attrs[i / 2];
    INFO("launch ", i, "\n  C:   ", c_launches[i], "\n  C++: ", cpp_launches[i]);
    CHECK(c_launches[i].dependent_launch == (a.flags != 0));
    CHECK(c_launches[i].cluster == a.cluster);
    CHECK(cpp_launches[i].dependent_launch == c_launches[i].dependent_launch);
    CHECK(cpp_launches[i].cluster == c_launches[i].cluster);
    CHECK(cpp_launches[i].grid == c_launches[i].grid);
    CHECK(cpp_launches[i].entry == c_launches[i].entry);
  }
}

TEST_CASE("capi launch: a 1.0-size config launches without attributes whatever follows it") {
  use_test_kernels();
  auto dev = open_c("mock");
  const SparkrtDevicePtr buf = capitest::c_alloc(dev.get(), 4096);
  sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  sparkrt_kernel* axpy = capitest::c_kernel(dev.get(), "vector_ops", "axpy_f32");
  const sparkrt_arg add_args[] = {sparkrt_arg_ptr(buf), sparkrt_arg_ptr(buf + 256),
                                  sparkrt_arg_ptr(buf + 512), sparkrt_arg_u32(64)};
  const uint64_t blob[2] = {0x3f800000, 64};
  const sparkrt_arg axpy_args[] = {sparkrt_arg_bytes(blob, 16, 8), sparkrt_arg_ptr(buf),
                                   sparkrt_arg_ptr(buf + 256)};
  static_assert(SPARKRT_C_LAUNCH_CONFIG_SIZE_1_0 == offsetof(sparkrt_launch_config, flags));
  static_assert(SPARKRT_C_LAUNCH_CONFIG_SIZE_1_0 < SPARKRT_C_LAUNCH_CONFIG_SIZE);

  // An old caller's config in a buffer whose bytes past it are garbage: set,
  // they would be an unknown flag bit and a zero-dimension cluster.
  for (uint8_t canary : {uint8_t{0xa5}, uint8_t{0xff}, uint8_t{0x02}}) {
    CAPTURE(int{canary});
    alignas(sparkrt_launch_config) unsigned char bytes[sizeof(sparkrt_launch_config) + 32];
    std::memset(bytes, canary, sizeof bytes);
    const sparkrt_launch_config full = capitest::config({4}, {64});
    std::memcpy(bytes, &full, SPARKRT_C_LAUNCH_CONFIG_SIZE_1_0);
    const size_t old_size = SPARKRT_C_LAUNCH_CONFIG_SIZE_1_0;
    std::memcpy(bytes, &old_size, sizeof old_size);
    const auto* cfg = reinterpret_cast<const sparkrt_launch_config*>(bytes);
    // Packed, then (for vector_add_f32) the cached layout.
    for (int rep = 0; rep < 2; ++rep) {
      C_CHECK_OK(sparkrt_launch(add, cfg, add_args, 4));
      C_CHECK_OK(sparkrt_launch(axpy, cfg, axpy_args, 3));
    }
  }
  // A caller whose struct reaches `flags` but not `cluster` gets the flag only.
  {
    alignas(sparkrt_launch_config) unsigned char bytes[sizeof(sparkrt_launch_config)];
    std::memset(bytes, 0xa5, sizeof bytes);
    sparkrt_launch_config full = capitest::config({4}, {64});
    full.flags = SPARKRT_LAUNCH_DEPENDENT;
    const size_t to_flags = offsetof(sparkrt_launch_config, flags) + sizeof(uint32_t);
    full.struct_size = to_flags;
    std::memcpy(bytes, &full, to_flags);
    C_CHECK_OK(sparkrt_launch(add, reinterpret_cast<const sparkrt_launch_config*>(bytes), add_args,
                              4));
  }
  const auto launches = capitest::CMock(dev.get()).launches();
  REQUIRE(launches.size() == 3 * 4 + 1);
  for (size_t i = 0; i + 1 < launches.size(); ++i) {
    INFO("launch ", i, ": ", launches[i]);
    CHECK_FALSE(launches[i].dependent_launch);
    CHECK(launches[i].cluster == Dim3{0, 0, 0});
    CHECK(launches[i].grid == Dim3{4, 1, 1});
  }
  INFO("last: ", launches.back());
  CHECK(launches.back().dependent_launch);
  CHECK(launches.back().cluster == Dim3{0, 0, 0});
}

TEST_CASE("capi launch: attribute refusals, written out, on both paths, reach nothing") {
  use_test_kernels();
  for (const char* backend : kHostBackends) {
    INFO("backend ", std::string(backend));
    const bool mock = std::string(backend) == "mock";
    auto dev = open_c(backend);
    const SparkrtDevicePtr buf = capitest::c_alloc(dev.get(), 4096);
    sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
    const sparkrt_arg args[] = {sparkrt_arg_ptr(buf), sparkrt_arg_ptr(buf + 256),
                                sparkrt_arg_ptr(buf + 512), sparkrt_arg_u32(0)};
    sparkrt_device_properties props{};
    props.struct_size = SPARKRT_C_DEVICE_PROPERTIES_SIZE;
    C_REQUIRE_OK(sparkrt_device_properties_get(dev.get(), &props));
    const auto with = [](Dim3 grid, uint32_t flags, Dim3 cluster) {
      sparkrt_launch_config c = capitest::config(grid, {64});
      c.flags = flags;
      c.cluster[0] = cluster.x;
      c.cluster[1] = cluster.y;
      c.cluster[2] = cluster.z;
      return c;
    };
    const std::string no_clusters = absl::StrFormat(
        "vector_add_f32: cluster (2, 1, 1) requested, but device '%s' (cpu backend) does not "
        "support thread-block clusters",
        props.name);
    // rep 0 packs the arguments; by rep 1 a plain launch has cached the layout.
    for (int rep = 0; rep < 2; ++rep) {
      CAPTURE(rep);
      const sparkrt_launch_config unknown = with({4}, SPARKRT_LAUNCH_DEPENDENT | 0x2u, {0, 0, 0});
      C_CHECK_ERROR(sparkrt_launch(add, &unknown, args, 4), SPARKRT_INVALID_ARGUMENT,
                    "vector_add_f32: sparkrt_launch_config.flags 0x3 has unknown bits 0x2; the "
                    "only flag is SPARKRT_LAUNCH_DEPENDENT (0x1)");
      const sparkrt_launch_config zero = with({4}, 0, {2, 0, 1});
      C_CHECK_ERROR(sparkrt_launch(add, &zero, args, 4), SPARKRT_INVALID_ARGUMENT,
                    "vector_add_f32: cluster (2, 0, 1) has a zero dimension; give at least 1 "
                    "block in each, or (0, 0, 0) for no cluster");
      const sparkrt_launch_config odd = with({3}, 0, {2, 1, 1});
      const sparkrt_launch_config big = with({16}, 0, {16, 1, 1});
      if (mock) {
        C_CHECK_ERROR(sparkrt_launch(add, &odd, args, 4), SPARKRT_INVALID_ARGUMENT,
                      "vector_add_f32: grid (3, 1, 1) is not a multiple of cluster (2, 1, 1) in "
                      "every dimension");
        C_CHECK_ERROR(sparkrt_launch(add, &big, args, 4), SPARKRT_INVALID_ARGUMENT,
                      "vector_add_f32: cluster (16, 1, 1) has 16 blocks, the device allows 8 per "
                      "cluster");
      } else {
        const sparkrt_launch_config two = with({4}, SPARKRT_LAUNCH_DEPENDENT, {2, 1, 1});
        C_CHECK_ERROR(sparkrt_launch(add, &two, args, 4), SPARKRT_UNIMPLEMENTED, no_clusters);
        C_CHECK_CODE(sparkrt_launch(add, &odd, args, 4), SPARKRT_UNIMPLEMENTED);
        C_CHECK_CODE(sparkrt_launch(add, &big, args, 4), SPARKRT_UNIMPLEMENTED);
      }
      const sparkrt_launch_config plain = capitest::config({4}, {64});
      C_CHECK_OK(sparkrt_launch(add, &plain, args, 4));
    }
    C_CHECK_OK(sparkrt_stream_synchronize(dev.get(), 0));
    if (mock) CHECK(capitest::CMock(dev.get()).launches().size() == 2);
  }
}

TEST_CASE("capi launch: repeated kinds reuse the first layout, other kinds are packed and checked") {
  use_test_kernels();
  auto dev = open_c("mock");
  const SparkrtDevicePtr buf = capitest::c_alloc(dev.get(), 4096);
  sparkrt_kernel* kinds = capitest::c_kernel(dev.get(), "mock_kinds", "kinds_probe");
  sparkrt_kernel* add = capitest::c_kernel(dev.get(), "vector_ops", "vector_add_f32");
  const sparkrt_launch_config one = capitest::config({1}, {32});
  // Scalars only, so the first list that passes becomes the cached layout;
  // the second and third launches write their values into it.
  struct alignas(8) Blob16 {
    uint64_t a, b;
  };
  const Blob16 blob{1, 2};
  for (int rep = 0; rep < 3; ++rep) {
    CAPTURE(rep);
    const sparkrt_arg args[] = {sparkrt_arg_ptr(buf + 16u * rep), sparkrt_arg_u32(7u + rep),
                                sparkrt_arg_i32(-rep),        sparkrt_arg_u64(1ull << (40 + rep)),
                                sparkrt_arg_i64(-3 - rep),    sparkrt_arg_f32(0.5f * rep),
                                sparkrt_arg_f64(1.25 * rep),  sparkrt_arg_bytes(&blob, 16, 8)};
    C_REQUIRE_OK(sparkrt_launch(kinds, &one, args, 8));
    const sparkrt_arg add_args[] = {sparkrt_arg_ptr(buf), sparkrt_arg_ptr(buf + 256),
                                    sparkrt_arg_ptr(buf + 512), sparkrt_arg_u32(100u + rep)};
    C_REQUIRE_OK(sparkrt_launch(add, &one, add_args, 4));
  }
  const auto launches = capitest::CMock(dev.get()).launches();
  REQUIRE(launches.size() == 6);
  for (int rep = 0; rep < 3; ++rep) {
    CAPTURE(rep);
    const auto& k = launches[2 * rep];
    REQUIRE(k.args.size() == 8);
    CHECK(k.args[0] == MockArg::of(sparkrt::DevicePtr(buf + 16u * rep)));
    CHECK(k.args[1] == MockArg::of(uint32_t(7u + rep)));
    CHECK(k.args[2] == MockArg::of(int32_t{-rep}));
    CHECK(k.args[3] == MockArg::of(uint64_t{1} << (40 + rep)));
    CHECK(k.args[4] == MockArg::of(int64_t{-3 - rep}));
    CHECK(k.args[5] == MockArg::of(0.5f * rep));
    CHECK(k.args[6] == MockArg::of(1.25 * rep));
    CHECK(k.args[7] == MockArg::of(blob));
    const auto& a = launches[2 * rep + 1];
    REQUIRE(a.args.size() == 4);
    CHECK(a.args[2] == MockArg::of(sparkrt::DevicePtr(buf + 512)));
    CHECK(a.args[3] == MockArg::of(uint32_t(100u + rep)));
  }

  // After the cache: a list of other kinds, or of another length, is packed
  // and refused with KernelLaunch's message; bad geometry is still refused.
  const sparkrt_arg wrong_kind[] = {sparkrt_arg_ptr(buf), sparkrt_arg_ptr(buf + 256),
                                    sparkrt_arg_ptr(buf + 512), sparkrt_arg_f32(100.0f)};
  C_CHECK_ERROR(sparkrt_launch(add, &one, wrong_kind, 4), SPARKRT_INVALID_ARGUMENT,
                "vector_add_f32: parameter #3 is .u32, given f32 (float, for "
                "'vector_add_f32_param_3'); pass a uint32_t or int32_t");
  C_CHECK_ERROR(sparkrt_launch(add, &one, wrong_kind, 3), SPARKRT_INVALID_ARGUMENT,
                "vector_add_f32: 4 parameters declared, 3 given (missing #3 .u32)");
  const sparkrt_arg good[] = {sparkrt_arg_ptr(buf), sparkrt_arg_ptr(buf + 256),
                              sparkrt_arg_ptr(buf + 512), sparkrt_arg_u32(1)};
  const sparkrt_launch_config no_grid = capitest::config({0}, {32});
  C_CHECK_ERROR(sparkrt_launch(add, &no_grid, good, 4), SPARKRT_INVALID_ARGUMENT,
                "vector_add_f32: grid (0, 1, 1) has a zero dimension");
  CHECK(capitest::CMock(dev.get()).launches().size() == 6);
}

namespace {

// Device pointers for a launch: three live buffers of one device.
struct Ptrs {
  SparkrtDevicePtr a = 0, b = 0, c = 0;
};

// Limits the geometry cases are built from.
struct Limits {
  Dim3 max_block, max_grid;
  uint32_t max_threads = 0, max_shared = 0;
};

struct Launch {
  sparkrt_launch_config cfg;
  std::vector<sparkrt_arg> args;
};

struct Case {
  const char* what;
  const char* module;
  const char* entry;
  bool valid;  // a control: both launches succeed
  std::function<Launch(const Ptrs&, const Limits&)> make;
};

// Backing storage for BYTES arguments of the cases (they point into it).
alignas(64) const uint8_t kBlobBytes[4096] = {1, 2,  3,  4,  5,  6,  7,  8,
                                              9, 10, 11, 12, 13, 14, 15, 16};

sparkrt_arg bytes(uint32_t size, uint32_t align) {
  return sparkrt_arg_bytes(kBlobBytes, size, align);
}

Launch simple(Dim3 grid, Dim3 block, std::vector<sparkrt_arg> args, uint32_t shared = 0) {
  return Launch{capitest::config(grid, block, shared), std::move(args)};
}

// `l` with launch attributes: SPARKRT_LAUNCH_* flags and a cluster.
Launch with_attributes(Launch l, uint32_t flags, Dim3 cluster) {
  l.cfg.flags = flags;
  l.cfg.cluster[0] = cluster.x;
  l.cfg.cluster[1] = cluster.y;
  l.cfg.cluster[2] = cluster.z;
  return l;
}

// What sparkrt_launch says of flag bits KernelLaunch has no setter for.
absl::Status unknown_flags_error(const std::string& entry, uint32_t flags) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: sparkrt_launch_config.flags 0x%x has unknown bits 0x%x; the only flag is "
      "SPARKRT_LAUNCH_DEPENDENT (0x1)",
      entry, flags, flags & ~uint32_t{SPARKRT_LAUNCH_DEPENDENT}));
}

// vector_add_f32 (.u64, .u64, .u64, .u32) with argument `i` replaced.
std::vector<sparkrt_arg> add_args(const Ptrs& p) {
  return {sparkrt_arg_ptr(p.a), sparkrt_arg_ptr(p.b), sparkrt_arg_ptr(p.c), sparkrt_arg_u32(64)};
}
std::vector<sparkrt_arg> replaced(std::vector<sparkrt_arg> args, size_t i, sparkrt_arg with) {
  args.at(i) = with;
  return args;
}
std::vector<sparkrt_arg> appended(std::vector<sparkrt_arg> args, sparkrt_arg with) {
  args.push_back(with);
  return args;
}

std::vector<Case> wrong_launches() {
  std::vector<Case> cases;
  const auto add = [&](const char* what, bool valid, auto make) {
    cases.push_back(Case{what, "vector_ops", "vector_add_f32", valid, make});
  };
  add("control", true, [](const Ptrs& p, const Limits&) { return simple({1}, {64}, add_args(p)); });
  add("missing argument", false, [](const Ptrs& p, const Limits&) {
    auto a = add_args(p);
    a.pop_back();
    return simple({1}, {64}, a);
  });
  add("no arguments", false, [](const Ptrs&, const Limits&) { return simple({1}, {64}, {}); });
  add("extra f32", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64}, appended(add_args(p), sparkrt_arg_f32(1.0f)));
  });
  add("extra struct", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64}, appended(add_args(p), bytes(16, 8)));
  });
  add("u64 for .u32", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64}, replaced(add_args(p), 3, sparkrt_arg_u64(64)));
  });
  add("f32 for .u32", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64}, replaced(add_args(p), 3, sparkrt_arg_f32(64.0f)));
  });
  add("i32 for .u32", true, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64}, replaced(add_args(p), 3, sparkrt_arg_i32(64)));
  });
  add("ptr for .u32", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64}, replaced(add_args(p), 3, sparkrt_arg_ptr(p.a)));
  });
  add("4-byte struct for .u32", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64}, replaced(add_args(p), 3, bytes(4, 4)));
  });
  add("u32 for .u64", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64}, replaced(add_args(p), 1, sparkrt_arg_u32(1)));
  });
  add("f64 for .u64", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64}, replaced(add_args(p), 0, sparkrt_arg_f64(1.0)));
  });
  add("8-byte struct for .u64", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64}, replaced(add_args(p), 2, bytes(8, 8)));
  });
  add("zero grid x", false, [](const Ptrs& p, const Limits&) {
    return simple({0, 1, 1}, {64}, add_args(p));
  });
  add("zero grid y", false, [](const Ptrs& p, const Limits&) {
    return simple({1, 0, 1}, {64}, add_args(p));
  });
  add("zero block z", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {64, 1, 0}, add_args(p));
  });
  add("grid y over the limit", false, [](const Ptrs& p, const Limits& l) {
    return simple({1, l.max_grid.y + 1, 1}, {64}, add_args(p));
  });
  add("grid x of 4096", true, [](const Ptrs& p, const Limits& l) {
    return simple({l.max_grid.x > 4096 ? 4096 : l.max_grid.x}, {64}, add_args(p));
  });
  add("block x over the limit", false, [](const Ptrs& p, const Limits& l) {
    return simple({1}, {l.max_block.x + 1, 1, 1}, add_args(p));
  });
  add("block z over the limit", false, [](const Ptrs& p, const Limits& l) {
    return simple({1}, {1, 1, l.max_block.z + 1}, add_args(p));
  });
  add("block over the thread limit", false, [](const Ptrs& p, const Limits& l) {
    return simple({1}, {l.max_threads, 2, 1}, add_args(p));
  });
  add("shared memory at the limit", true,
      [](const Ptrs& p, const Limits& l) { return simple({1}, {64}, add_args(p), l.max_shared); });
  add("shared memory over the limit", false, [](const Ptrs& p, const Limits& l) {
    return simple({1}, {64}, add_args(p), l.max_shared + 1);
  });
  add("65 arguments", false, [](const Ptrs&, const Limits&) {
    return simple({1}, {64}, std::vector<sparkrt_arg>(65, sparkrt_arg_u32(1)));
  });
  add("64 arguments", false, [](const Ptrs&, const Limits&) {
    return simple({1}, {64}, std::vector<sparkrt_arg>(64, sparkrt_arg_u32(1)));
  });
  add("over 4096 bytes of parameters", false, [](const Ptrs&, const Limits&) {
    return simple({1}, {64}, {bytes(2048, 8), bytes(2048, 8), bytes(8, 8)});
  });
  // Launch attributes. The mock takes clusters of up to 8 blocks, the cpu
  // backend none (UNIMPLEMENTED before the grid and size checks); both take
  // a dependent launch.
  add("dependent launch", true, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({4}, {64}, add_args(p)), SPARKRT_LAUNCH_DEPENDENT, {0, 0, 0});
  });
  add("cluster dividing the grid", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({4, 2}, {64}, add_args(p)), 0, {2, 2, 1});
  });
  add("dependent launch in a cluster", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({8}, {64}, add_args(p)), SPARKRT_LAUNCH_DEPENDENT, {8, 1, 1});
  });
  add("cluster not dividing the grid", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({3, 2}, {64}, add_args(p)), 0, {2, 1, 1});
  });
  add("cluster y not dividing the grid", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({4, 3}, {64}, add_args(p)), 0, {1, 2, 1});
  });
  add("zero cluster dimension", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({4}, {64}, add_args(p)), 0, {2, 0, 1});
  });
  add("cluster of one block", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({4}, {64}, add_args(p)), 0, {1, 1, 1});
  });
  add("cluster over the device's size", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({16}, {64}, add_args(p)), 0, {16, 1, 1});
  });
  add("cluster over the size in y", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({4, 8}, {64}, add_args(p)), 0, {2, 8, 1});
  });
  add("cluster with a bad argument", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({4}, {64}, replaced(add_args(p), 3, sparkrt_arg_f32(1.0f))), 0,
                           {2, 1, 1});
  });
  add("unknown flag bit", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({4}, {64}, add_args(p)), 0x2, {0, 0, 0});
  });
  add("unknown flag bit with the dependent one", false, [](const Ptrs& p, const Limits&) {
    return with_attributes(simple({4}, {64}, add_args(p)), SPARKRT_LAUNCH_DEPENDENT | 0x80000000u,
                           {2, 1, 1});
  });

  const auto on = [&](const char* module, const char* entry, const char* what, bool valid,
                      auto make) {
    cases.push_back(Case{what, module, entry, valid, make});
  };
  // empty_10_args: .u64 x4, .u32 x3, .u64, .f32 x2.
  const auto ten = [](const Ptrs& p) {
    return std::vector<sparkrt_arg>{
        sparkrt_arg_ptr(p.a),  sparkrt_arg_ptr(p.a), sparkrt_arg_ptr(p.b), sparkrt_arg_ptr(p.c),
        sparkrt_arg_u32(1),    sparkrt_arg_u32(2),   sparkrt_arg_u32(3),   sparkrt_arg_u64(4),
        sparkrt_arg_f32(5.0f), sparkrt_arg_f32(6.0f)};
  };
  on("vector_ops", "empty_10_args", "control", true,
     [ten](const Ptrs& p, const Limits&) { return simple({1}, {32}, ten(p)); });
  on("vector_ops", "empty_10_args", "u32 for .f32", false, [ten](const Ptrs& p, const Limits&) {
    return simple({1}, {32}, replaced(ten(p), 8, sparkrt_arg_u32(5)));
  });
  on("vector_ops", "empty_10_args", "i32 for .f32", false, [ten](const Ptrs& p, const Limits&) {
    return simple({1}, {32}, replaced(ten(p), 9, sparkrt_arg_i32(5)));
  });
  on("vector_ops", "empty_10_args", "ptr for .f32", false, [ten](const Ptrs& p, const Limits&) {
    return simple({1}, {32}, replaced(ten(p), 8, sparkrt_arg_ptr(p.a)));
  });
  on("vector_ops", "empty_10_args", "f64 for .f32", false, [ten](const Ptrs& p, const Limits&) {
    return simple({1}, {32}, replaced(ten(p), 9, sparkrt_arg_f64(5.0)));
  });
  on("vector_ops", "empty_10_args", "4-byte struct for .f32", false,
     [ten](const Ptrs& p, const Limits&) {
       return simple({1}, {32}, replaced(ten(p), 9, bytes(4, 4)));
     });
  // axpy_f32: .align 8 .b8[16], .u64, .u64.
  const auto axpy = [](const Ptrs& p, sparkrt_arg first) {
    return std::vector<sparkrt_arg>{first, sparkrt_arg_ptr(p.a), sparkrt_arg_ptr(p.b)};
  };
  on("vector_ops", "axpy_f32", "control (zero n)", true, [axpy](const Ptrs& p, const Limits&) {
    static const uint64_t zero[2] = {0, 0};
    return simple({1}, {32}, axpy(p, sparkrt_arg_bytes(zero, 16, 8)));
  });
  on("vector_ops", "axpy_f32", "8-byte struct for .b8[16]", false,
     [axpy](const Ptrs& p, const Limits&) { return simple({1}, {32}, axpy(p, bytes(8, 8))); });
  on("vector_ops", "axpy_f32", "24-byte struct for .b8[16]", false,
     [axpy](const Ptrs& p, const Limits&) { return simple({1}, {32}, axpy(p, bytes(24, 8))); });
  on("vector_ops", "axpy_f32", "f64 for .b8[16]", false, [axpy](const Ptrs& p, const Limits&) {
    return simple({1}, {32}, axpy(p, sparkrt_arg_f64(2.0)));
  });
  on("vector_ops", "axpy_f32", "struct missing", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {32}, {sparkrt_arg_ptr(p.a), sparkrt_arg_ptr(p.b)});
  });
  // copy_args_u32: .u64, .align 4 .b8[136].
  on("vector_ops", "copy_args_u32", "control", true, [](const Ptrs& p, const Limits&) {
    return simple({1}, {34}, {sparkrt_arg_ptr(p.a), bytes(136, 4)});
  });
  on("vector_ops", "copy_args_u32", "16-byte struct for .b8[136]", false,
     [](const Ptrs& p, const Limits&) {
       return simple({1}, {34}, {sparkrt_arg_ptr(p.a), bytes(16, 4)});
     });
  on("vector_ops", "copy_args_u32", "struct first", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {34}, {bytes(136, 4), sparkrt_arg_ptr(p.a)});
  });
  // kv_cache.reshape_and_cache: .u64 x5, .u32 x5, .maxntid 256.
  on("kv_cache", "reshape_and_cache", "block over .maxntid", false,
     [](const Ptrs& p, const Limits&) {
       return simple(
           {1}, {512},
           {sparkrt_arg_ptr(p.a), sparkrt_arg_ptr(p.a), sparkrt_arg_ptr(p.b), sparkrt_arg_ptr(p.b),
            sparkrt_arg_ptr(p.c), sparkrt_arg_u32(1), sparkrt_arg_u32(1), sparkrt_arg_u32(1),
            sparkrt_arg_u32(1), sparkrt_arg_u32(1)});
     });
  on("kv_cache", "reshape_and_cache", "block (16, 32) over .maxntid", false,
     [](const Ptrs& p, const Limits&) {
       return simple(
           {1}, {16, 32},
           {sparkrt_arg_ptr(p.a), sparkrt_arg_ptr(p.a), sparkrt_arg_ptr(p.b), sparkrt_arg_ptr(p.b),
            sparkrt_arg_ptr(p.c), sparkrt_arg_u32(1), sparkrt_arg_u32(1), sparkrt_arg_u32(1),
            sparkrt_arg_u32(1), sparkrt_arg_u32(1)});
     });

  // The test modules (found on the mock only; elsewhere both lookups fail
  // alike and the case is passed over).
  on("capi_probe", "blob_after_u32", "control", true, [](const Ptrs& p, const Limits&) {
    return simple({1}, {32}, {sparkrt_arg_u32(3), bytes(24, 8), sparkrt_arg_ptr(p.a)});
  });
  on("capi_probe", "blob_after_u32", "struct aligned to 4 for .align 8 .b8[24]", false,
     [](const Ptrs& p, const Limits&) {
       return simple({1}, {32}, {sparkrt_arg_u32(3), bytes(24, 4), sparkrt_arg_ptr(p.a)});
     });
  on("capi_probe", "blob_after_u32", "16-byte struct for .b8[24]", false,
     [](const Ptrs& p, const Limits&) {
       return simple({1}, {32}, {sparkrt_arg_u32(3), bytes(16, 8), sparkrt_arg_ptr(p.a)});
     });
  on("capi_probe", "blob_after_u32", "u64 for .b8[24]", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {32}, {sparkrt_arg_u32(3), sparkrt_arg_u64(1), sparkrt_arg_ptr(p.a)});
  });
  for (const Dim3 block : {Dim3{128}, Dim3{64, 1, 2}, Dim3{32, 4}}) {
    on("capi_probe", "fixed_block", "block against .reqntid", false,
       [block](const Ptrs& p, const Limits&) {
         return simple({2}, block, {sparkrt_arg_ptr(p.a), sparkrt_arg_u32(1)});
       });
  }
  on("capi_probe", "fixed_block", "control", true, [](const Ptrs& p, const Limits&) {
    return simple({2}, {64, 2}, {sparkrt_arg_ptr(p.a), sparkrt_arg_u32(1)});
  });
  on("capi_probe", "bounded_block", "block over .maxntid", false, [](const Ptrs& p, const Limits&) {
    return simple({1}, {16, 16}, {sparkrt_arg_ptr(p.a), sparkrt_arg_f32(1.0f)});
  });
  on("capi_probe", "bounded_block", "control", true, [](const Ptrs& p, const Limits&) {
    return simple({1}, {8, 16}, {sparkrt_arg_ptr(p.a), sparkrt_arg_f32(1.0f)});
  });
  on("triton_style", "add_kernel", "block against .reqntid", false,
     [](const Ptrs& p, const Limits&) {
       return simple({2}, {256},
                     {sparkrt_arg_ptr(p.a), sparkrt_arg_ptr(p.b), sparkrt_arg_ptr(p.c),
                      sparkrt_arg_u32(100), sparkrt_arg_ptr(0), sparkrt_arg_ptr(0)});
     });
  on("mock_kinds", "bits_probe", "8-byte struct aligned to 4 for .b64", false,
     [](const Ptrs&, const Limits&) {
       return simple({1}, {1}, {sparkrt_arg_u32(1), bytes(8, 4)});
     });
  on("mock_kinds", "bits_probe", "control", true, [](const Ptrs&, const Limits&) {
    return simple({1}, {1}, {sparkrt_arg_f32(1.0f), sparkrt_arg_f64(2.0)});
  });

  // kinds_probe: every kind for every declared type.
  const auto probe_args = [](const Ptrs& p) {
    return std::vector<sparkrt_arg>{
        sparkrt_arg_ptr(p.a), sparkrt_arg_u32(1),    sparkrt_arg_i32(-1),   sparkrt_arg_u64(2),
        sparkrt_arg_i64(-2),  sparkrt_arg_f32(0.5f), sparkrt_arg_f64(0.25), bytes(16, 8)};
  };
  const std::function<sparkrt_arg(const Ptrs&)> kinds[] = {
      [](const Ptrs& p) { return sparkrt_arg_ptr(p.b); },
      [](const Ptrs&) { return sparkrt_arg_u32(7); },
      [](const Ptrs&) { return sparkrt_arg_i32(-7); },
      [](const Ptrs&) { return sparkrt_arg_u64(7); },
      [](const Ptrs&) { return sparkrt_arg_i64(-7); },
      [](const Ptrs&) { return sparkrt_arg_f32(7.0f); },
      [](const Ptrs&) { return sparkrt_arg_f64(7.0); },
      [](const Ptrs&) { return bytes(4, 4); },
      [](const Ptrs&) { return bytes(8, 8); },
      [](const Ptrs&) { return bytes(16, 8); },
      [](const Ptrs&) { return bytes(16, 4); },
  };
  on("mock_kinds", "kinds_probe", "control", true,
     [probe_args](const Ptrs& p, const Limits&) { return simple({1}, {32}, probe_args(p)); });
  for (size_t param = 0; param < 8; ++param) {
    for (const auto& kind : kinds) {
      // Valid or not as C++ decides; the table compares both either way.
      cases.push_back(Case{"one kind for one declared type", "mock_kinds", "kinds_probe", false,
                           [probe_args, param, kind](const Ptrs& p, const Limits&) {
                             return simple({1}, {32}, replaced(probe_args(p), param, kind(p)));
                           }});
    }
  }
  return cases;
}

}  // namespace

TEST_CASE("capi launch: wrong launches fail with KernelLaunch's code and message") {
  use_test_kernels();
  for (const char* backend : kHostBackends) {
    INFO("backend ", std::string(backend));
    auto dev = open_c(backend);
    auto cpp = open_cpp(backend);
    const sparkrt::DeviceProperties& props = cpp->properties();
    const Limits limits{props.max_block_dim, props.max_grid_dim, props.max_threads_per_block,
                        props.max_shared_memory_per_block_optin};
    constexpr size_t kBuf = 1 << 16;
    const Ptrs cp{capitest::c_alloc(dev.get(), kBuf), capitest::c_alloc(dev.get(), kBuf),
                  capitest::c_alloc(dev.get(), kBuf)};
    Ptrs pp;
    for (SparkrtDevicePtr* p : {&pp.a, &pp.b, &pp.c}) {
      auto a = cpp->alloc(kBuf);
      REQUIRE(a.ok());
      *p = a->addr;
    }
    // The controls read and write these buffers on cpu: give them data.
    const std::vector<uint8_t> zeros(kBuf, 0);
    for (SparkrtDevicePtr p : {cp.a, cp.b, cp.c})
      C_REQUIRE_OK(sparkrt_copy_h2d(dev.get(), zeros.data(), p, kBuf));

    size_t compared = 0, failed = 0, passed_over = 0;
    for (const Case& c : wrong_launches()) {
      const Launch cl = c.make(cp, limits);
      const Launch pl = c.make(pp, limits);
      INFO(std::string(c.module), ".", std::string(c.entry), ": ", std::string(c.what), " (",
           cl.args.size(), " arguments)");
      auto k = cpp->kernel(c.module, c.entry);
      sparkrt_kernel* ck = nullptr;
      const CStatus lookup(sparkrt_kernel_get(dev.get(), c.module, c.entry, &ck));
      if (!k.ok()) {
        check_same(lookup.get(), k.status());
        ++passed_over;
        continue;
      }
      REQUIRE_MESSAGE(lookup == nullptr, describe(lookup.get()));
      const CStatus s(sparkrt_launch(ck, &cl.cfg, cl.args.empty() ? nullptr : cl.args.data(),
                                     static_cast<uint32_t>(cl.args.size())));
      // Flag bits C++ cannot express: the C API's own refusal.
      const bool unknown_flags = (pl.cfg.flags & ~uint32_t{SPARKRT_LAUNCH_DEPENDENT}) != 0;
      const absl::Status want = unknown_flags
                                    ? unknown_flags_error(c.entry, pl.cfg.flags)
                                    : capitest::launch_cpp(*cpp, *k, pl.cfg, pl.args);
      check_same(s.get(), want);
      if (c.valid) CHECK_MESSAGE(want.ok(), want.ToString());
      ++compared;
      failed += !want.ok();
    }
    C_CHECK_OK(sparkrt_stream_synchronize(dev.get(), 0));
    INFO(compared, " launches compared (", failed, " refused), ", passed_over,
         " passed over (module not on this backend)");
    const bool mock = std::string(backend) == "mock";
    CHECK(failed >= (mock ? 100u : 30u));
    if (mock) CHECK(passed_over == 0);
  }
}

TEST_CASE("capi launch: what only C can get wrong is INVALID_ARGUMENT naming it") {
  auto dev = open_c("mock");
  auto cpp = open_cpp("mock");
  sparkrt_kernel* axpy = capitest::c_kernel(dev.get(), "vector_ops", "axpy_f32");
  auto cpp_axpy = cpp->kernel("vector_ops", "axpy_f32");
  REQUIRE(cpp_axpy.ok());
  const SparkrtDevicePtr p = capitest::c_alloc(dev.get(), 256);
  const sparkrt_launch_config cfg = capitest::config({1}, {32});
  const uint64_t blob[2] = {0, 0};

  for (int32_t kind : {0, 9, -1, 1000}) {
    INFO("kind ", kind);
    sparkrt_arg bad = sparkrt_arg_u64(1);
    bad.kind = kind;
    const sparkrt_arg args[] = {sparkrt_arg_bytes(blob, 16, 8), bad, sparkrt_arg_ptr(p)};
    const CStatus s(sparkrt_launch(axpy, &cfg, args, 3));
    CHECK_MESSAGE(sparkrt_status_code(s.get()) == SPARKRT_INVALID_ARGUMENT, describe(s.get()));
    CHECK_MESSAGE(std::string(sparkrt_status_message(s.get())).find("kind") != std::string::npos,
                  describe(s.get()));
  }
  for (uint32_t align : {0u, 3u, 12u, 256u}) {
    INFO("align ", align);
    const sparkrt_arg args[] = {sparkrt_arg_bytes(blob, 16, align), sparkrt_arg_ptr(p),
                                sparkrt_arg_ptr(p)};
    const CStatus s(sparkrt_launch(axpy, &cfg, args, 3));
    CHECK_MESSAGE(sparkrt_status_code(s.get()) == SPARKRT_INVALID_ARGUMENT, describe(s.get()));
    // As KernelLaunch::arg_bytes, the run-time form of a struct argument.
    sparkrt::KernelLaunch l(*cpp, *cpp_axpy);
    l.grid({1})
        .block({32})
        .arg_bytes(blob, 16, align)
        .arg(sparkrt::DevicePtr(p))
        .arg(sparkrt::DevicePtr(p));
    check_same(s.get(), l.launch());
  }
  {
    const sparkrt_arg args[] = {sparkrt_arg_bytes(nullptr, 16, 8), sparkrt_arg_ptr(p),
                                sparkrt_arg_ptr(p)};
    C_CHECK_CODE(sparkrt_launch(axpy, &cfg, args, 3), SPARKRT_INVALID_ARGUMENT);
  }
  const sparkrt_arg good[] = {sparkrt_arg_bytes(blob, 16, 8), sparkrt_arg_ptr(p),
                              sparkrt_arg_ptr(p)};
  C_CHECK_OK(sparkrt_launch(axpy, &cfg, good, 3));
  C_CHECK_CODE(sparkrt_launch(nullptr, &cfg, good, 3), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_launch(axpy, nullptr, good, 3), SPARKRT_INVALID_ARGUMENT);
  C_CHECK_CODE(sparkrt_launch(axpy, &cfg, nullptr, 3), SPARKRT_INVALID_ARGUMENT);
  for (size_t size : {size_t{0}, sizeof(size_t), SPARKRT_C_LAUNCH_CONFIG_SIZE_1_0 - 1}) {
    INFO("struct_size ", size);
    sparkrt_launch_config small = cfg;
    small.struct_size = size;
    const CStatus s(sparkrt_launch(axpy, &small, good, 3));
    CHECK_MESSAGE(sparkrt_status_code(s.get()) == SPARKRT_INVALID_ARGUMENT, describe(s.get()));
    CHECK(std::string(sparkrt_status_message(s.get())).find("struct_size") != std::string::npos);
  }
  // A newer caller's larger config is taken.
  sparkrt_launch_config larger[2] = {cfg, cfg};
  larger[0].struct_size = sizeof larger;
  C_CHECK_OK(sparkrt_launch(axpy, &larger[0], good, 3));
  // Nothing of the refused launches reached the mock.
  CHECK(capitest::CMock(dev.get()).launches().size() == 2);
}
