// Third-party PTX end to end: kernels compiled by Triton, loaded by name
// through SPARKRT_KERNEL_PATH and launched with KernelLaunch, must write
// exactly what Triton's own launch of the same PTX wrote on the same inputs.
//
// tools/gpu/triton_export.py compiles the kernels, runs them through Triton
// and writes each module's PTX, a manifest (geometry and arguments), the
// inputs and Triton's outputs. By hand:
//
//   build/bin/sparkrt_triton_interop_test                        # runs the export
//   build/bin/sparkrt_triton_interop_test --triton-export=<dir>   # an earlier one
//
// Exit code 77 (CTest: skipped) without a CUDA device or without Triton.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "sparkrt/sparkrt.h"
#include "test_environment.h"

namespace fs = std::filesystem;
using sparkrt::Device;
using sparkrt::DevicePtr;
using sparkrt::KernelLaunch;

namespace {

fs::path g_export;  // the folder the export wrote

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t number(const std::string& text) { return std::stoull(text, nullptr, 0); }

// One module's manifest, launched and checked.
void check_module(Device& dev, const std::string& module) {
  CAPTURE(module);
  std::ifstream manifest(g_export / (module + ".manifest"));
  REQUIRE(manifest.good());
  std::string entry;
  sparkrt::Dim3 grid, block;
  uint32_t shared = 0;
  std::map<std::string, DevicePtr> buffers;
  struct Output {
    std::string name, expect_file, init;
  };
  std::vector<Output> outputs;
  std::vector<std::vector<std::string>> args;
  for (std::string line; std::getline(manifest, line);) {
    std::istringstream in(line);
    std::vector<std::string> f;
    for (std::string w; in >> w;) f.push_back(w);
    if (f.empty()) continue;
    if (f[0] == "entry") {
      entry = f.at(1);
    } else if (f[0] == "grid" || f[0] == "block") {
      sparkrt::Dim3& d = f[0] == "grid" ? grid : block;
      d = {static_cast<uint32_t>(number(f.at(1))), static_cast<uint32_t>(number(f.at(2))),
           static_cast<uint32_t>(number(f.at(3)))};
    } else if (f[0] == "shared") {
      shared = static_cast<uint32_t>(number(f.at(1)));
    } else if (f[0] == "input") {
      const std::string data = read_file(g_export / f.at(2));
      REQUIRE(!data.empty());
      auto p = dev.alloc(data.size());
      REQUIRE(p.ok());
      REQUIRE(dev.copy_h2d(data.data(), *p, data.size()).ok());
      buffers[f.at(1)] = *p;
    } else if (f[0] == "output") {
      // Poisoned with what Triton's launch started from, so the bytes a
      // kernel leaves alone compare equal too.
      const std::string init = read_file(g_export / f.at(2));
      REQUIRE(!init.empty());
      auto p = dev.alloc(init.size());
      REQUIRE(p.ok());
      REQUIRE(dev.copy_h2d(init.data(), *p, init.size()).ok());
      buffers[f.at(1)] = *p;
      outputs.push_back({f.at(1), f.at(3), init});
    } else if (f[0] == "arg") {
      args.push_back(f);
    } else {
      FAIL("unknown manifest line: " << line);
    }
  }

  auto k = dev.kernel(module, entry);
  REQUIRE_MESSAGE(k.ok(), std::string(k.status().ToString()));
  MESSAGE(module << "." << entry << ": " << k->signature().params.size() << " parameters, "
                 << k->signature().params_size << " bytes");
  KernelLaunch launch(dev, *k);
  launch.grid(grid).block(block).shared_mem(shared);
  for (const auto& a : args) {
    const std::string& kind = a.at(1);
    if (kind == "ptr") {
      REQUIRE(buffers.count(a.at(2)) == 1);
      launch.arg(buffers[a.at(2)]);
    } else if (kind == "null") {
      launch.arg(DevicePtr{});
    } else if (kind == "u32") {
      launch.arg(static_cast<uint32_t>(number(a.at(2))));
    } else if (kind == "s32") {
      launch.arg(static_cast<int32_t>(std::stoll(a.at(2))));
    } else if (kind == "u64") {
      launch.arg(static_cast<uint64_t>(number(a.at(2))));
    } else if (kind == "s64") {
      launch.arg(static_cast<int64_t>(std::stoll(a.at(2))));
    } else if (kind == "f32") {
      const auto bits = static_cast<uint32_t>(number(a.at(2)));
      float v;
      std::memcpy(&v, &bits, 4);
      launch.arg(v);
    } else {
      FAIL("unknown argument kind " << kind);
    }
  }
  const absl::Status s = launch.launch();
  REQUIRE_MESSAGE(s.ok(), std::string(s.ToString()));
  REQUIRE(dev.synchronize().ok());

  for (const Output& o : outputs) {
    CAPTURE(o.name);
    const std::string expect = read_file(g_export / o.expect_file);
    const size_t bytes = o.init.size();
    REQUIRE(expect.size() == bytes);
    size_t written = 0;  // by Triton's launch: the comparison below means something
    for (size_t i = 0; i < bytes; ++i) written += expect[i] != o.init[i];
    CHECK(written > bytes / 2);
    std::string got(bytes, '\0');
    REQUIRE(dev.copy_d2h(buffers[o.name], got.data(), bytes).ok());
    size_t differ = 0, first = bytes;
    for (size_t i = 0; i < bytes; ++i) {
      if (got[i] != expect[i]) {
        ++differ;
        if (first == bytes) first = i;
      }
    }
    CHECK_MESSAGE(differ == 0, differ << " of " << bytes << " bytes differ from Triton's, "
                                      << "the first at byte " << first);
    MESSAGE(o.name << ": " << bytes << " bytes equal to Triton's (" << written
                   << " written by the kernel)");
  }
  for (auto& [name, p] : buffers) CHECK(dev.free(p).ok());
}

}  // namespace

TEST_CASE("Triton's vector add (pointers after a u32) matches Triton bit for bit") {
  auto dev = Device::open({.backend = "cuda"});
  REQUIRE(dev.ok());
  check_module(**dev, "triton_add");
}

TEST_CASE("Triton's row softmax (an f32 among u32s) matches Triton bit for bit") {
  auto dev = Device::open({.backend = "cuda"});
  REQUIRE(dev.ok());
  check_module(**dev, "triton_softmax");
}

TEST_CASE("Triton's bf16 matmul (tl.dot, shared memory) matches Triton bit for bit") {
  auto dev = Device::open({.backend = "cuda"});
  REQUIRE(dev.ok());
  check_module(**dev, "triton_matmul");
}

int main(int argc, char** argv) {
  if (!sparkrt::testing::make_environment_hermetic(argc, argv)) return 2;
  constexpr char kExportOption[] = "--triton-export=";
  bool listing = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], kExportOption, sizeof kExportOption - 1) == 0) {
      g_export = argv[i] + sizeof kExportOption - 1;
      continue;
    }
    if (std::strstr(argv[i], "-list") != nullptr || std::strstr(argv[i], "-ltc") != nullptr)
      listing = true;
    argv[kept++] = argv[i];
  }
  argc = kept;
  if (!listing) {
    auto dev = Device::open({.backend = "cuda"});
    if (!dev.ok()) {
      if (dev.status().code() == absl::StatusCode::kUnavailable) {
        std::printf("SKIPPED: no usable CUDA device on this machine: %s\n",
                    std::string(dev.status().message()).c_str());
        return 77;
      }
      std::fprintf(stderr, "cannot open the cuda backend: %s\n",
                   std::string(dev.status().ToString()).c_str());
      return 1;
    }
    if (g_export.empty()) {
      if (std::system("python3 -c 'import torch, triton' >/dev/null 2>&1") != 0) {
        std::printf("SKIPPED: python3 with torch and triton is not installed here\n");
        return 77;
      }
      g_export = fs::temp_directory_path() / ("sparkrt_triton_" + std::to_string(getpid()));
      const std::string cmd = "python3 '" SPARKRT_SOURCE_DIR "/tools/gpu/triton_export.py' --out '" +
                              g_export.string() + "'";
      std::printf("%s\n", cmd.c_str());
      std::fflush(stdout);
      if (std::system(cmd.c_str()) != 0) {
        std::fprintf(stderr, "the Triton export failed: %s\n", cmd.c_str());
        return 1;
      }
    }
    setenv("SPARKRT_KERNEL_PATH", g_export.c_str(), 1);
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
