// The launch check beyond sizes: each argument's kind against its declared
// PTX type, and the block against the entry's .reqntid / .maxntid. Runs on the
// mock, where nothing but the runtime's check stands between a wrong launch
// and a "successful" one.
#include <doctest/doctest.h>

#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "sparkrt/kernel_launch.h"

using sparkrt::Device;
using sparkrt::DevicePtr;
using sparkrt::Dim3;
using sparkrt::KernelLaunch;

namespace {

std::unique_ptr<Device> open_mock_with_test_kernels() {
  setenv("SPARKRT_KERNEL_PATH", SPARKRT_TEST_DATA_DIR "/kernels", 1);
  auto dev = Device::open({.backend = "mock"});
  REQUIRE_MESSAGE(dev.ok(), dev.status().ToString());
  return *std::move(dev);
}

bool contains(const absl::Status& s, std::string_view text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

struct alignas(8) Blob16 {
  uint64_t a, b;
};
struct alignas(8) Blob8 {
  uint64_t a;
};
struct alignas(4) Blob4 {
  uint32_t a;
};

// One value of each argument kind, by name, pushed onto a launch.
enum class Kind { kPtr, kU32, kI32, kU64, kI64, kF32, kF64, kBlob4, kBlob8, kBlob16 };
constexpr Kind kKinds[] = {Kind::kPtr, Kind::kU32,   Kind::kI32,   Kind::kU64,  Kind::kI64,
                           Kind::kF32, Kind::kF64,   Kind::kBlob4, Kind::kBlob8, Kind::kBlob16};
const char* name(Kind k) {
  constexpr const char* kNames[] = {"DevicePtr", "uint32_t", "int32_t", "uint64_t", "int64_t",
                                    "float",     "double",   "Blob4",   "Blob8",    "Blob16"};
  return kNames[static_cast<int>(k)];
}
size_t size_of(Kind k) {
  constexpr size_t kSizes[] = {8, 4, 4, 8, 8, 4, 8, 4, 8, 16};
  return kSizes[static_cast<int>(k)];
}
void push(KernelLaunch& l, Kind k, DevicePtr ptr) {
  switch (k) {
    case Kind::kPtr: l.arg(ptr); break;
    case Kind::kU32: l.arg(uint32_t{3}); break;
    case Kind::kI32: l.arg(int32_t{-3}); break;
    case Kind::kU64: l.arg(uint64_t{3}); break;
    case Kind::kI64: l.arg(int64_t{-3}); break;
    case Kind::kF32: l.arg(1.5f); break;
    case Kind::kF64: l.arg(1.5); break;
    case Kind::kBlob4: l.arg(Blob4{7}); break;
    case Kind::kBlob8: l.arg(Blob8{7}); break;
    case Kind::kBlob16: l.arg(Blob16{7, 8}); break;
  }
}

}  // namespace

TEST_CASE("launch types: every argument kind against every declared type class") {
  // kinds_probe(.u64, .u32, .s32, .u64, .s64, .f32, .f64, .b8[16]) and
  // bits_probe(.b32, .b64): each position in turn gets every kind of its
  // size, the others their exact kind.
  auto dev = open_mock_with_test_kernels();
  auto buf = dev->alloc(256);
  REQUIRE(buf.ok());
  struct Entry {
    const char* entry;
    std::vector<Kind> exact;
    // The kinds each position accepts, beyond its exact one.
    std::vector<std::vector<Kind>> also;
  };
  const Entry entries[] = {
      {"kinds_probe",
       {Kind::kPtr, Kind::kU32, Kind::kI32, Kind::kU64, Kind::kI64, Kind::kF32, Kind::kF64,
        Kind::kBlob16},
       {{Kind::kU64, Kind::kI64},  // .u64: 64-bit integers and pointers
        {Kind::kI32},              // .u32: either signedness
        {Kind::kU32},              // .s32
        {Kind::kPtr, Kind::kI64},  // .u64
        {Kind::kPtr, Kind::kU64},  // .s64
        {},                        // .f32: floats only
        {},                        // .f64
        {}}},                      // .b8[16]: structs only
      {"bits_probe",
       {Kind::kU32, Kind::kU64},
       {{Kind::kI32, Kind::kF32, Kind::kBlob4},  // .b32: anything of its width
        {Kind::kPtr, Kind::kI64, Kind::kF64, Kind::kBlob8}}},
  };
  int accepted = 0, refused = 0;
  for (const Entry& e : entries) {
    auto k = dev->kernel("mock_kinds", e.entry);
    REQUIRE_MESSAGE(k.ok(), k.status().ToString());
    for (size_t pos = 0; pos < e.exact.size(); ++pos) {
      for (Kind given : kKinds) {
        if (size_of(given) != size_of(e.exact[pos])) continue;  // the size check's business
        KernelLaunch l(*dev, *k);
        l.grid({1}).block({32});
        for (size_t i = 0; i < e.exact.size(); ++i) push(l, i == pos ? given : e.exact[i], *buf);
        const bool ok = given == e.exact[pos] ||
                        std::find(e.also[pos].begin(), e.also[pos].end(), given) !=
                            e.also[pos].end();
        const absl::Status s = l.launch();
        CAPTURE(e.entry);
        CAPTURE(pos);
        CAPTURE(name(given));
        CHECK_MESSAGE(s.ok() == ok, s.ToString());
        if (ok) {
          ++accepted;
        } else {
          ++refused;
          CHECK(s.code() == absl::StatusCode::kInvalidArgument);
          CHECK(contains(s, absl::StrFormat("%s: parameter #%d is ", e.entry, pos)));
        }
      }
    }
  }
  CHECK(accepted == 25);
  CHECK(refused == 17);
  CHECK(dev->free(*buf).ok());
}

TEST_CASE("launch types: a swapped float and count fail with both types named") {
  auto dev = open_mock_with_test_kernels();
  auto k = dev->kernel("vector_ops", "empty_10_args");  // ..., .u64, .f32, .f32
  REQUIRE(k.ok());
  auto add = dev->kernel("vector_ops", "vector_add_f32");  // .u64 x3, .u32
  REQUIRE(add.ok());
  auto buf = dev->alloc(64);
  REQUIRE(buf.ok());
  const DevicePtr p = *buf;
  const absl::Status f = KernelLaunch(*dev, *add).grid({1}).block({32}).arg(p).arg(p).arg(p)
                             .arg(2.0f).launch();
  CHECK(f.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(f, "vector_add_f32: parameter #3 is .u32, given f32 (float, for "
                            "'vector_add_f32_param_3'); pass a uint32_t or int32_t"),
                f.message());
  const absl::Status u = KernelLaunch(*dev, *k).grid({1}).block({32}).arg(p).arg(p).arg(p).arg(p)
                             .arg(1u).arg(2u).arg(3u).arg(uint64_t{4}).arg(5u).arg(6.0f).launch();
  CHECK_MESSAGE(contains(u, "empty_10_args: parameter #8 is .f32, given u32"), u.message());
  CHECK(contains(u, "pass a float"));
  CHECK(KernelLaunch(*dev, *k).grid({1}).block({32}).arg(p).arg(p).arg(p).arg(p).arg(1u).arg(2u)
            .arg(3u).arg(uint64_t{4}).arg(5.0f).arg(6.0f).launch().ok());
  CHECK(dev->free(*buf).ok());
}

TEST_CASE("launch directives: .reqntid and .maxntid are enforced before the backend") {
  auto dev = open_mock_with_test_kernels();
  auto buf = dev->alloc(1024);
  REQUIRE(buf.ok());
  const DevicePtr p = *buf;
  // Triton's pointers follow a u32 at offset 32, and the entry says .reqntid.
  auto add = dev->kernel("triton_style", "add_kernel");
  REQUIRE_MESSAGE(add.ok(), add.status().ToString());
  CHECK(add->signature().params[4].offset == 32);
  auto launch_add = [&](Dim3 block) {
    return KernelLaunch(*dev, *add).grid({2}).block(block).arg(p).arg(p).arg(p).arg(100u)
        .arg(DevicePtr{}).arg(DevicePtr{}).launch();
  };
  CHECK(launch_add({128}).ok());
  for (Dim3 bad : {Dim3{256}, Dim3{64, 2}, Dim3{128, 1, 2}}) {
    const absl::Status s = launch_add(bad);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(contains(s, absl::StrFormat("add_kernel: block (%d, %d, %d), but the kernel "
                                              "declares .reqntid (128, 1, 1)",
                                              bad.x, bad.y, bad.z)),
                  s.message());
  }

  // .maxntid bounds the thread count, whatever the shape.
  auto rows = dev->kernel("triton_style", "scale_rows");
  REQUIRE(rows.ok());
  auto launch_rows = [&](Dim3 block) {
    return KernelLaunch(*dev, *rows).grid({2}).block(block).arg(p).arg(8u).arg(p).arg(0.5f)
        .arg(8u).arg(DevicePtr{}).arg(DevicePtr{}).launch();
  };
  CHECK(launch_rows({256}).ok());
  CHECK(launch_rows({16, 16}).ok());
  CHECK(launch_rows({32, 2, 2}).ok());
  const absl::Status s = launch_rows({512});
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(s, "scale_rows: block (512, 1, 1) has 512 threads, but the kernel "
                            "declares .maxntid (256, 1, 1) (at most 256 threads)"),
                s.message());
  CHECK(dev->free(*buf).ok());
}

TEST_CASE("launch directives: an entry with an architecture-dependent layout is refused at lookup") {
  auto dev = open_mock_with_test_kernels();
  auto k = dev->kernel("mock_kinds", "overaligned_probe");
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(k.status(), "entry 'overaligned_probe' cannot be launched"),
                k.status().message());
  CHECK(contains(k.status(), ".align 32"));
  // The module's other entries are unaffected.
  CHECK(dev->kernel("mock_kinds", "kinds_probe").ok());
}
