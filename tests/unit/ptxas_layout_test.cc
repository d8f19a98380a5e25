// The PTX signature parser against ground truth: ptxas. Each corpus is
// assembled with the toolkit's ptxas, and every entry's parameter offsets and
// sizes, total parameter size and launch directives are compared with what the
// cubin records in its `.nv.info.<entry>` section. Snippets ptxas rejects must
// be rejected by the parser too. The kernels the build compiled are compared
// with their own cubins. No GPU is needed.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "sparkrt/signature.h"

// ptxas comes with nvcc: a build without the CUDA toolkit checks nothing here,
// and says so.
#if !SPARKRT_HAVE_CUDA_KERNELS
TEST_CASE("ptxas layout: not checked: this build has no nvcc, so no ptxas") {
  MESSAGE("built with SPARKRT_CUDA_KERNELS=OFF: the parser is checked against ptxas where the "
          "CUDA toolkit is installed");
}
#else
namespace fs = std::filesystem;
using sparkrt::KernelSignature;
using sparkrt::parse_ptx_signatures;

namespace {

// What a cubin says about one entry's parameters and launch shape.
struct CubinEntry {
  struct Param {
    uint32_t offset = 0, size = 0;
  };
  std::map<uint32_t, Param> params;  // by ordinal
  std::optional<uint32_t> params_size;
  sparkrt::Dim3 reqntid{0, 0, 0};
  sparkrt::Dim3 maxntid{0, 0, 0};
  sparkrt::Dim3 reqnctapercluster{0, 0, 0};
};

template <typename T>
T load(const std::string& b, size_t at) {
  T v{};
  REQUIRE(at + sizeof(T) <= b.size());
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

// The `.nv.info.<entry>` attributes of an ELF64 cubin. Record layout: format
// byte, attribute byte, then either a 2-byte value (format 1-3) or a 2-byte
// size and that many bytes (format 4, EIFMT_SVAL).
std::map<std::string, CubinEntry> read_cubin(const std::string& b) {
  std::map<std::string, CubinEntry> out;
  REQUIRE(b.size() > 64);
  REQUIRE(b.compare(0, 4, "\x7f" "ELF") == 0);
  REQUIRE(b[4] == 2);  // ELFCLASS64
  const auto shoff = load<uint64_t>(b, 0x28);
  const auto shentsize = load<uint16_t>(b, 0x3a);
  const auto shnum = load<uint16_t>(b, 0x3c);
  const auto shstrndx = load<uint16_t>(b, 0x3e);
  REQUIRE(shstrndx < shnum);
  auto section = [&](uint32_t i, uint32_t& name, uint64_t& off, uint64_t& size) {
    const size_t h = shoff + size_t{i} * shentsize;
    name = load<uint32_t>(b, h);
    const auto type = load<uint32_t>(b, h + 4);
    off = load<uint64_t>(b, h + 0x18);
    size = load<uint64_t>(b, h + 0x20);
    if (type == 8) size = 0;  // SHT_NOBITS: no bytes in the file
    REQUIRE(off + size <= b.size());
  };
  uint32_t n;
  uint64_t stroff, strsize;
  section(shstrndx, n, stroff, strsize);
  for (uint32_t i = 0; i < shnum; ++i) {
    uint64_t off, size;
    section(i, n, off, size);
    REQUIRE(n < strsize);
    const std::string name(b.c_str() + stroff + n);
    const std::string prefix = ".nv.info.";
    if (name.rfind(prefix, 0) != 0) continue;
    CubinEntry& e = out[name.substr(prefix.size())];
    for (uint64_t p = off; p + 4 <= off + size;) {
      const auto format = static_cast<uint8_t>(b[p]);
      const auto attr = static_cast<uint8_t>(b[p + 1]);
      const auto value = load<uint16_t>(b, p + 2);
      const uint64_t payload = p + 4;
      p += format == 4 ? 4 + value : 4;
      REQUIRE(p <= off + size);
      auto dims = [&] {
        REQUIRE(value == 12);
        return sparkrt::Dim3{load<uint32_t>(b, payload), load<uint32_t>(b, payload + 4),
                             load<uint32_t>(b, payload + 8)};
      };
      if (format == 4 && attr == 0x17) {  // EIATTR_KPARAM_INFO
        REQUIRE(value == 12);
        const auto ordinal = load<uint16_t>(b, payload + 4);
        const auto offset = load<uint16_t>(b, payload + 6);
        const auto bits = load<uint32_t>(b, payload + 8);
        e.params[ordinal] = {offset, (bits >> 18) & 0x3fff};
      } else if (format == 3 && attr == 0x19) {  // EIATTR_CBANK_PARAM_SIZE
        e.params_size = value;
      } else if (format == 4 && attr == 0x10) {  // EIATTR_REQNTID
        e.reqntid = dims();
      } else if (format == 4 && attr == 0x05) {  // EIATTR_MAX_THREADS
        e.maxntid = dims();
      } else if (format == 4 && attr == 0x3d) {  // EIATTR_CTA_PER_CLUSTER
        e.reqnctapercluster = dims();
      }
    }
  }
  return out;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path scratch_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("sparkrt_ptxas_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// Assembles `ptx` for `arch`; the cubin's bytes, or nullopt when ptxas
// rejects it (its messages go to `log`).
std::optional<std::string> ptxas(const std::string& ptx, const std::string& arch,
                                 const std::string& stem, std::string* log = nullptr) {
  const fs::path in = scratch_dir() / (stem + ".ptx");
  const fs::path out = scratch_dir() / (stem + ".cubin");
  const fs::path err = scratch_dir() / (stem + ".log");
  std::ofstream(in, std::ios::binary) << ptx;
  fs::remove(out);
  const std::string cmd = "'" SPARKRT_PTXAS "' -arch=" + arch + " -o '" + out.string() + "' '" +
                          in.string() + "' 2>'" + err.string() + "'";
  const int rc = std::system(cmd.c_str());
  if (log != nullptr) *log = read_file(err);
  if (rc != 0) return std::nullopt;
  return read_file(out);
}

// Every entry of `sigs` agrees with the cubin: same parameter count, offsets,
// sizes, total size and launch directives.
void check_against_cubin(const std::vector<KernelSignature>& sigs, const std::string& cubin,
                         const std::string& what) {
  const auto info = read_cubin(cubin);
  for (const KernelSignature& sig : sigs) {
    CAPTURE(what);
    CAPTURE(sig.entry);
    auto it = info.find(sig.entry);
    REQUIRE_MESSAGE(it != info.end(), "no .nv.info section for the entry");
    const CubinEntry& e = it->second;
    if (!sig.unsupported.empty()) continue;  // checked by its own case
    REQUIRE(e.params.size() == sig.params.size());
    for (size_t i = 0; i < sig.params.size(); ++i) {
      CAPTURE(i);
      CAPTURE(sig.params[i].name);
      REQUIRE(e.params.count(static_cast<uint32_t>(i)) == 1);
      CHECK(sig.params[i].offset == e.params.at(static_cast<uint32_t>(i)).offset);
      CHECK(sig.params[i].size == e.params.at(static_cast<uint32_t>(i)).size);
    }
    if (!sig.params.empty()) {
      REQUIRE(e.params_size.has_value());
      CHECK(sig.params_size == *e.params_size);
    }
    CHECK(sig.directives.reqntid == e.reqntid);
    CHECK(sig.directives.maxntid == e.maxntid);
    CHECK(sig.directives.reqnctapercluster == e.reqnctapercluster);
  }
}

constexpr char kHeader[] = ".version 8.0\n.target sm_90\n.address_size 64\n";

// Parameter lists ptxas accepts, each the whole list of one entry, with the
// directives that follow it.
struct Accepted {
  const char* params;
  const char* directives;
};
constexpr Accepted kAccepted[] = {
    // Triton's pointers: `.align` after `.ptr` is the pointee's alignment.
    {".param .u32 a, .param .u64 .ptr .global .align 1 p, .param .u32 b, "
     ".param .u64 .ptr .align 16 q",
     ""},
    {".param .u8 a, .param .u64 .ptr .shared .align 4 x, .param .u8 b, .param .u64 .ptr .const y, "
     ".param .u8 c, .param .u64 .ptr .local z, .param .u8 d, .param .b64 .ptr .global w",
     ""},
    {".param .b8 a[17], .param .s64 .ptr .align 1 x, .param .u8 b, .param .f64 .ptr .global y", ""},
    {".param .b8 a[17], .param .u16 .ptr .global x, .param .b8 b[3], .param .u32 .ptr .global y",
     ""},
    {".param .b8 a[17], .param .u64 .ptr .global .align 8 x[3], .param .u8 b", ""},
    {".param .b8 a[17], .param .u64 .ptr .global.align 16 x, .param .u32 y", ""},
    // A leading `.align` aligns the parameter; the largest of several wins;
    // one below the type's size leaves it at its natural alignment.
    {".param .u8 a, .param .align 16 .b8 s[24], .param .f16 h, .param .align 16 .u32 c, "
     ".param .align 2 .u64 d, .param .b32 e[3]",
     ""},
    {".param .b8 a[17], .param .align 8 .align 4 .b8 x[3], .param .u8 b, "
     ".param .align 2 .align 8 .align 4 .b8 y[3]",
     ""},
    {".param .u8 a, .param .align 1 .u32 x, .param .u8 b, .param .align 8 .u64 .ptr .global y", ""},
    // An `.align` after the type is the pointee's, even without `.ptr`.
    {".param .b8 a[17], .param .b8 .align 8 x[3], .param .u8 b, .param .u32 .align 8 y, "
     ".param .u8 c, .param .align 4 .u32 .align 16 z",
     ""},
    // Arrays of every width, and integer literals in every base.
    {".param .u8 a, .param .b8 b[3], .param .u16 c, .param .s8 d, .param .b16 e, .param .f32 f[2], "
     ".param .b64 g[2], .param .align 8 .u32 h[3]",
     ""},
    {".param .b8 a[17], .param .u64 x[0x10], .param .u8 b, .param .u64 y[0b11], .param .u8 c, "
     ".param .align 010 .u64 z, .param .u8 d, .param .align 0x10 .u32 w[2U], .param .u8 e, "
     ".param .align 8U .u64 v",
     ""},
    {".param .s16 a, .param .s32 b, .param .s64 c, .param .b16 d, .param .b32 e, .param .b64 f, "
     ".param .f16 g, .param .f64 h, .param .u64 %r, .param .u32 $x, .param .u16 _, .param .u8 _1",
     ""},
    {".param .b8 a[4095], .param .u8 x", ""},
    // Directives.
    {".param .u32 a", ".reqntid 128, 1, 1"},
    {".param .u32 a", ".reqntid 64, 2"},
    {".param .u32 a", ".maxntid 256, 2, 1 .minnctapersm 2"},
    {".param .u32 a", ".maxntid 96"},
    {".param .u32 a", ".maxnreg 32"},
    {".param .u32 a", ".reqnctapercluster 2, 1, 1"},
    {".param .u32 a", ".reqntid 32 .reqntid 64, 2"},  // the last one counts
    {"", ".maxntid 32"},
};

// Parameter lists or directives ptxas rejects; the parser must too.
constexpr Accepted kRejected[] = {
    {".param .u64 .align 16 .ptr .global x", ""},
    {".param .u64 .ptr .global .global x", ""},
    {".param .u64 .ptr .global .align 8 .align 16 x", ""},
    {".param .u64 .ptr .align 16 .global x", ""},
    {".param .u32 .align 16 .align 4 x", ""},
    {".param .u64 .global x", ""},
    {".param .u64 .ptr .param x", ""},
    {".param .b64 .ptr .generic x", ""},
    {".param .b32 .align 8 .ptr .global x", ""},
    {".param .v2 .u32 v", ""},
    {".param .pred p", ""},
    {".param .bf16 h", ""},
    {".param .f16x2 h", ""},
    {".param .b8 x[0]", ""},
    {".param .b8 x[]", ""},
    {".param .u64 x[2][2]", ""},
    {".param .u64 x[1+1]", ""},
    {".param .align 3 .u64 x", ""},
    {".param .align 0 .u64 x", ""},
    {".param .u64 .ptr .global .align 3 x", ""},
    {".param .u64 x,", ""},
    {".param .u32 %", ""},
    {".param .u32 $", ""},
    {".param .b8 a[17], .param .u64 a", ""},
    {".param .u32 a", ".reqntid 128 .maxntid 128"},
    {".param .u32 a", ".reqntid 0"},
};

std::string entry_ptx(const Accepted& c, size_t i) {
  return "\n.visible .entry k" + std::to_string(i) + "(" + c.params + ")\n" + c.directives +
         "\n{\n\tret;\n}\n";
}

}  // namespace

TEST_CASE("ptxas layout: the parser agrees with ptxas on every accepted parameter form") {
  std::string ptx = kHeader;
  for (size_t i = 0; i < std::size(kAccepted); ++i) ptx += entry_ptx(kAccepted[i], i);
  auto sigs = parse_ptx_signatures(ptx);
  REQUIRE_MESSAGE(sigs.ok(), sigs.status().ToString());
  REQUIRE(sigs->size() == std::size(kAccepted));
  for (const auto& sig : *sigs) CHECK_MESSAGE(sig.unsupported.empty(), sig.unsupported);
  for (const char* arch : {"sm_90", "sm_120"}) {
    std::string log;
    auto cubin = ptxas(ptx, arch, std::string("accepted_") + arch, &log);
    REQUIRE_MESSAGE(cubin.has_value(), "ptxas rejected the corpus: " << log);
    check_against_cubin(*sigs, *cubin, arch);
  }
}

TEST_CASE("ptxas layout: what ptxas rejects, the parser rejects with a line") {
  for (size_t i = 0; i < std::size(kRejected); ++i) {
    const std::string ptx = kHeader + entry_ptx(kRejected[i], i);
    CAPTURE(ptx);
    std::string log;
    CHECK_MESSAGE(!ptxas(ptx, "sm_90", "rejected_" + std::to_string(i), &log).has_value(),
                  "ptxas accepts it, so the corpus entry is wrong");
    auto sigs = parse_ptx_signatures(ptx);
    REQUIRE_FALSE(sigs.ok());
    CHECK(sigs.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(sigs.status().message().find("line ") == 0);
  }
}

TEST_CASE("ptxas layout: the test modules, Triton-style signatures among them, match the cubin") {
  int files = 0;
  for (const fs::path& dir : {fs::path(SPARKRT_TEST_DATA_DIR) / "kernels",
                             fs::path(SPARKRT_GPU_TEST_DATA_DIR)}) {
    for (const auto& file : fs::directory_iterator(dir)) {
      if (file.path().extension() != ".ptx") continue;
      if (file.path().stem() == "broken_jit") continue;  // a body ptxas refuses, on purpose
      const std::string ptx = read_file(file.path());
      auto sigs = parse_ptx_signatures(ptx);
      REQUIRE_MESSAGE(sigs.ok(), file.path() << ": " << sigs.status().ToString());
      std::string log;
      auto cubin = ptxas(ptx, "sm_90a", file.path().stem().string(), &log);
      REQUIRE_MESSAGE(cubin.has_value(), file.path() << ": " << log);
      check_against_cubin(*sigs, *cubin, file.path().string());
      ++files;
    }
  }
  CHECK(files >= 4);
  // Triton's pointer after a u32 sits at 32, not 28.
  auto triton = parse_ptx_signatures(
      read_file(fs::path(SPARKRT_TEST_DATA_DIR) / "kernels/triton_style.ptx"));
  REQUIRE(triton.ok());
  CHECK((*triton)[0].params[4].offset == 32);
  CHECK((*triton)[0].params[4].align == 8);
}

TEST_CASE("ptxas layout: the project's kernels match the cubins the build made") {
  int compared = 0;
  for (const auto& file : fs::directory_iterator(SPARKRT_BUILD_KERNEL_DIR)) {
    if (file.path().extension() != ".ptx") continue;
    const std::string module = file.path().stem().string();
    auto sigs = parse_ptx_signatures(read_file(file.path()));
    REQUIRE_MESSAGE(sigs.ok(), module << ": " << sigs.status().ToString());
    for (const char* arch : {"sm_90", "sm_121"}) {
      const fs::path cubin = file.path().parent_path() / (module + "." + arch + ".cubin");
      if (!fs::exists(cubin)) continue;
      check_against_cubin(*sigs, read_file(cubin), module + " " + arch);
      ++compared;
    }
  }
  CHECK(compared >= 10);  // five modules, two architectures
}

TEST_CASE("ptxas layout: an alignment above 16 is architecture-dependent, so not launchable") {
  const std::string ptx =
      std::string(kHeader) + entry_ptx({".param .b8 a[20], .param .align 32 .b8 x[3]", ""}, 0);
  auto sigs = parse_ptx_signatures(ptx);
  REQUIRE(sigs.ok());
  REQUIRE(sigs->size() == 1);
  CHECK((*sigs)[0].unsupported.find("parameter #1 (x) has .align 32") != std::string::npos);
  // Why: ptxas puts x at different offsets for different architectures.
  auto sm90 = ptxas(ptx, "sm_90", "align32_sm90");
  auto sm120 = ptxas(ptx, "sm_120", "align32_sm120");
  REQUIRE(sm90.has_value());
  REQUIRE(sm120.has_value());
  CHECK(read_cubin(*sm90).at("k0").params.at(1).offset !=
        read_cubin(*sm120).at("k0").params.at(1).offset);
}

#endif  // SPARKRT_HAVE_CUDA_KERNELS
