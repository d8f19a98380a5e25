#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "sparkrt/device.h"
#include "sparkrt/kernel_store.h"

namespace fs = std::filesystem;

namespace {

// Sets SPARKRT_KERNEL_PATH for one scope.
class KernelPathScope {
 public:
  explicit KernelPathScope(const std::string& value) { setenv("SPARKRT_KERNEL_PATH", value.c_str(), 1); }
  ~KernelPathScope() { unsetenv("SPARKRT_KERNEL_PATH"); }
};

fs::path temp_folder(const char* name) {
  fs::path dir = fs::temp_directory_path() / (std::string("sparkrt_") + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& file, const std::string& text) { std::ofstream(file) << text; }

}  // namespace

TEST_CASE("kernel store: built modules are embedded and listed") {
  auto path = sparkrt::kernel_search_path();
  REQUIRE_FALSE(path.empty());
  CHECK(path.back() == "embedded");
  auto modules = sparkrt::list_modules();
  CHECK(std::find(modules.begin(), modules.end(), "vector_ops") != modules.end());
  auto image = sparkrt::find_module("vector_ops", "sm_90");
  REQUIRE(image.ok());
  CHECK(image->ptx.find(".entry vector_add_f32") != std::string::npos);
  CHECK_FALSE(image->cubin.empty());  // the build makes sm_90 cubins
  CHECK(image->cubin_arch == "sm_90");
  CHECK(image->cubin.compare(0, 4, "\x7f" "ELF") == 0);
  auto no_cubin = sparkrt::find_module("vector_ops", "sm_1");
  REQUIRE(no_cubin.ok());
  CHECK(no_cubin->cubin.empty());
}

TEST_CASE("kernel store: SPARKRT_KERNEL_PATH comes first, in order") {
  fs::path a = temp_folder("kpath_a"), b = temp_folder("kpath_b");
  write(b / "vector_ops.ptx", ".entry from_b() { ret; }\n");
  write(a / "only_a.ptx", ".entry from_a() { ret; }\n");
  KernelPathScope scope(a.string() + ":" + b.string());
  auto path = sparkrt::kernel_search_path();
  REQUIRE(path.size() >= 3);
  CHECK(path[0] == a.string());
  CHECK(path[1] == b.string());
  auto overridden = sparkrt::find_module("vector_ops", "");
  REQUIRE(overridden.ok());
  CHECK(overridden->origin == b.string());
  CHECK(overridden->ptx.find("from_b") != std::string::npos);
  auto only_a = sparkrt::find_module("only_a", "");
  REQUIRE(only_a.ok());
  CHECK(only_a->origin == a.string());
  auto modules = sparkrt::list_modules();
  CHECK(std::find(modules.begin(), modules.end(), "only_a") != modules.end());
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_CASE("kernel store: a missing module names the search path and what exists") {
  auto missing = sparkrt::find_module("no_such_module", "");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  const std::string msg(missing.status().message());
  CHECK(msg.find("no_such_module.ptx") != std::string::npos);
  CHECK(msg.find("embedded") != std::string::npos);
  CHECK(msg.find("vector_ops") != std::string::npos);
  CHECK(msg.find("SPARKRT_KERNEL_PATH") != std::string::npos);
}

TEST_CASE("kernel store: module names cannot escape the kernel folders") {
  for (const char* bad : {"../etc/passwd", "/abs", "", ".hidden", "a/b", "x..y"}) {
    CAPTURE(bad);
    auto r = sparkrt::find_module(bad, "");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("device kernel lookup: missing entry lists the module's entries") {
  auto dev = sparkrt::Device::open({.backend = "mock"});
  REQUIRE(dev.ok());
  auto k = (*dev)->kernel("vector_ops", "vector_sub_f32");
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().code() == absl::StatusCode::kNotFound);
  const std::string msg(k.status().message());
  CHECK(msg.find("no entry 'vector_sub_f32'") != std::string::npos);
  CHECK(msg.find("vector_add_f32, fill_u32, axpy_f32, empty_10_args") != std::string::npos);

  auto missing = (*dev)->kernel("nope", "k");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);

  auto ok1 = (*dev)->kernel("vector_ops", "fill_u32");
  auto ok2 = (*dev)->kernel("vector_ops", "fill_u32");
  REQUIRE(ok1.ok());
  REQUIRE(ok2.ok());
  CHECK(&ok1->signature() == &ok2->signature());  // cached: one record per kernel
  CHECK(ok1->module() == "vector_ops");
  CHECK(ok1->entry() == "fill_u32");
}

TEST_CASE("device kernel lookup: malformed PTX on the path is an error naming the module") {
  fs::path dir = temp_folder("kpath_bad");
  write(dir / "broken.ptx", ".entry k(.param .u32 a .param .u32 b) { ret; }\n");
  KernelPathScope scope(dir.string());
  auto dev = sparkrt::Device::open({.backend = "mock"});
  REQUIRE(dev.ok());
  auto k = (*dev)->kernel("broken", "k");
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string msg(k.status().message());
  CHECK(msg.find("kernel module 'broken'") != std::string::npos);
  CHECK(msg.find("malformed PTX") != std::string::npos);
  CHECK(msg.find("line 1") != std::string::npos);
  fs::remove_all(dir);
}
