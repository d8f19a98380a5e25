// Kernel lookups and launches on the mock: what is recorded, what fails, and
// that failures look exactly as they would on a GPU.
#include <sstream>

#include "mock_test_support.h"

using namespace mocktest;
using absl::StatusCode;
using sparkrt::DevicePtr;
using sparkrt::Dim3;
using sparkrt::KernelLaunch;
using sparkrt::Stream;
using sparkrt::testing::MockLookup;

namespace {

// A rope launch with all eight arguments; `pos` varies per call.
absl::Status launch_rope(sparkrt::Device& dev, sparkrt::Kernel k, DevicePtr q, uint32_t pos,
                         Stream stream = {}) {
  return KernelLaunch(dev, k)
      .grid({1})
      .block({128})
      .arg(q)
      .arg(q + 256)
      .arg(uint32_t{8})
      .arg(uint32_t{64})
      .arg(uint32_t{32})
      .arg(pos)
      .arg(10000.0f)
      .arg(uint32_t{1})
      .launch(stream);
}

struct alignas(8) Blob {
  uint32_t a;
  float b;
  uint64_t c;
};

}  // namespace

TEST_CASE("mock device: properties are plausible, PTX and signature images only") {
  auto dev = open_mock();
  const auto& p = dev->properties();
  CHECK(p.name == "sparkrt mock device");
  CHECK(p.architecture.empty());
  CHECK(p.accepts_ptx);
  CHECK(p.accepts_signatures);
  CHECK_FALSE(p.accepts_cubin);
  CHECK_FALSE(p.accepts_spirv);
  CHECK(p.max_threads_per_block == 1024);
  CHECK(p.max_block_dim == Dim3{1024, 1024, 64});
  CHECK(p.max_grid_dim == Dim3{2147483647u, 65535, 65535});
  CHECK(p.max_shared_memory_per_block == 48 * 1024);
  CHECK(p.max_shared_memory_per_block_optin == 227 * 1024);
  CHECK(p.warp_size == 32);
  CHECK(p.multiprocessor_count == 132);
  CHECK(dev->backend_name() == "mock");
}

TEST_CASE("mock device: SPARKRT_MOCK_PROPERTIES changes the reported SMs and shared memory") {
  ::setenv("SPARKRT_MOCK_PROPERTIES",
           " multiprocessor_count=48, max_shared_memory_per_block_optin = 101376 ", 1);
  auto dev = sparkrt::Device::open({.backend = "mock"});
  ::unsetenv("SPARKRT_MOCK_PROPERTIES");
  REQUIRE_OK(dev.status());
  CHECK((*dev)->properties().multiprocessor_count == 48);
  CHECK((*dev)->properties().max_shared_memory_per_block_optin == 101376);
  CHECK((*dev)->properties().max_shared_memory_per_block == 48 * 1024);
  auto again = open_mock();  // the variable is read at each open
  CHECK(again->properties().multiprocessor_count == 132);

  struct Bad {
    const char* text;
    std::vector<std::string_view> parts;
  };
  for (const Bad& b : {Bad{"sm_count=10", {"unknown key 'sm_count'", "multiprocessor_count"}},
                       Bad{"multiprocessor_count=0", {"'multiprocessor_count=0'"}},
                       Bad{"multiprocessor_count", {"key=<positive integer>"}},
                       Bad{"max_shared_memory_per_block_optin=4096", {"4096", "49152"}},
                       Bad{"multiprocessor_count=48,multiprocessor_count=64",
                           {"key 'multiprocessor_count' is given twice"}}}) {
    CAPTURE(b.text);
    ::setenv("SPARKRT_MOCK_PROPERTIES", b.text, 1);
    auto bad = sparkrt::Device::open({.backend = "mock"});
    ::unsetenv("SPARKRT_MOCK_PROPERTIES");
    REQUIRE_FALSE(bad.ok());
    check_error(bad.status(), StatusCode::kInvalidArgument, {"SPARKRT_MOCK_PROPERTIES"});
    for (std::string_view part : b.parts) {
      INFO("expected in message: ", std::string(part));
      CHECK(contains(bad.status(), part));
    }
  }
}

TEST_CASE("mock lookups: recorded in order, one distinct kernel per (module, entry)") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto rope = dev->kernel(kTwin, kRope);
  auto sdpa = dev->kernel(kTwin, kSdpa);
  auto rope_again = dev->kernel(kTwin, kRope);
  REQUIRE(rope.ok());
  REQUIRE(sdpa.ok());
  REQUIRE(rope_again.ok());

  using Pair = std::pair<std::string, std::string>;
  CHECK(mock.lookups() == std::vector<Pair>{{kTwin, kRope}, {kTwin, kSdpa}});
  const auto records = mock.lookup_records();
  REQUIRE(records.size() == 2);
  CHECK(records[0].code == StatusCode::kOk);
  CHECK(records[0].kernel_id != 0);
  CHECK(records[1].kernel_id != 0);
  CHECK(records[0].kernel_id != records[1].kernel_id);
  CHECK(mock.counters().lookups == 2);
  CHECK(mock.counters().module_loads == 1);

  auto q = dev->alloc(1024);
  REQUIRE(q.ok());
  REQUIRE_OK(launch_rope(*dev, *rope, *q, 0));
  REQUIRE_OK(launch_rope(*dev, *rope_again, *q, 1));
  const auto launches = mock.launches();
  REQUIRE(launches.size() == 2);
  CHECK(launches[0].kernel_id == records[0].kernel_id);
  CHECK(launches[1].kernel_id == records[0].kernel_id);
}

TEST_CASE("mock launches: geometry, stream and every argument's kind and bytes are recorded") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto k = dev->kernel(kKinds, "kinds_probe");
  REQUIRE(k.ok());
  auto p = dev->alloc(4096);
  auto s = dev->create_stream();
  REQUIRE(p.ok());
  REQUIRE(s.ok());
  const Blob blob{7, -2.5f, 0x1122334455667788ull};
  REQUIRE_OK(KernelLaunch(*dev, *k)
                 .grid({3, 2, 1})
                 .block({64, 4})
                 .shared_mem(4096)
                 .arg(*p + 64)
                 .arg(uint32_t{0xdeadbeef})
                 .arg(int32_t{-5})
                 .arg(uint64_t{1} << 40)
                 .arg(int64_t{-1} << 40)
                 .arg(0.25f)
                 .arg(-1e300)
                 .arg(blob)
                 .launch(*s));

  REQUIRE(mock.launch_count() == 1);
  const MockLaunch l = mock.launch(0);
  INFO(l);
  CHECK(l.module == kKinds);
  CHECK(l.entry == "kinds_probe");
  CHECK(l.grid == Dim3{3, 2, 1});
  CHECK(l.block == Dim3{64, 4, 1});
  CHECK(l.shared_mem == 4096);
  CHECK(l.stream == *s);
  CHECK(l.sequence == 1);
  REQUIRE(l.args.size() == 8);
  CHECK(l.args[0] == MockArg::of(*p + 64));
  CHECK(l.args[0].kind == sparkrt::ArgKind::kPtr);
  CHECK(l.args[1] == MockArg::of(uint32_t{0xdeadbeef}));
  CHECK(l.args[2] == MockArg::of(int32_t{-5}));
  CHECK(l.args[3] == MockArg::of(uint64_t{1} << 40));
  CHECK(l.args[4] == MockArg::of(int64_t{-1} << 40));
  CHECK(l.args[5] == MockArg::of(0.25f));
  CHECK(l.args[6] == MockArg::of(-1e300));
  CHECK(l.args[7] == MockArg::of(blob));
  CHECK(l.args[7].kind == sparkrt::ArgKind::kBytes);
  CHECK(l.args[6].as<double>() == -1e300);
  // Same bytes, different kind: not equal.
  CHECK_FALSE(l.args[1] == MockArg::of(int32_t(0xdeadbeef)));

  auto c = mock.counters();
  CHECK(c.launches == 1);
  CHECK(mock.stream_counters(*s).launches == 1);
  CHECK(mock.stream_counters({}).launches == 0);

  // Records print readably for failure messages.
  std::ostringstream os;
  os << l;
  CHECK(os.str().find("mock_kinds.kinds_probe grid {3, 2, 1} block {64, 4, 1}") != std::string::npos);
  CHECK(os.str().find("u32 3735928559") != std::string::npos);
  CHECK(os.str().find("f32 0.25") != std::string::npos);
  std::ostringstream arg;
  arg << MockArg::of(blob);
  CHECK(arg.str() == "bytes[16] 07 00 00 00 00 00 20 c0 88 77 66 55 44 33 22 11");
}

TEST_CASE("mock launches: a kernel without parameters launches with none") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto k = dev->kernel(kKinds, "no_params");
  REQUIRE(k.ok());
  REQUIRE_OK(KernelLaunch(*dev, *k).grid({1}).block({1}).launch());
  REQUIRE(mock.launch_count() == 1);
  CHECK(mock.launch(0).args.empty());
}

TEST_CASE("mock lookups: a commented-out entry is not an entry") {
  use_test_kernels();
  auto dev = open_mock();
  auto k = dev->kernel(kKinds, "commented_out_entry");
  check_error(k.status(), StatusCode::kNotFound, {"commented_out_entry", "kinds_probe", "no_params"});
}

TEST_CASE("mock lookups: a wrong entry name or module fails as on a GPU") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto k = dev->kernel(kTwin, "twin_maybe_rope_f16");
  REQUIRE_FALSE(k.ok());
  check_error(k.status(), StatusCode::kNotFound, {"twin_maybe_rope_f16", kRope, kSdpa});
  auto m = dev->kernel("no_such_module", kRope);
  REQUIRE_FALSE(m.ok());
  check_error(m.status(), StatusCode::kNotFound, {"no_such_module"});
  // The runtime found the mistake from the PTX before asking the backend.
  CHECK(mock.lookups().empty());
}

TEST_CASE("mock lookups: deny_lookup fails the lookup with the chosen code, recorded") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  REQUIRE_OK(mock.deny_lookup(kTwin, kSdpa));
  auto sdpa = dev->kernel(kTwin, kSdpa);
  REQUIRE_FALSE(sdpa.ok());
  check_error(sdpa.status(), StatusCode::kNotFound,
              {kTwin, kSdpa, "denied by mock fault injection"});
  CHECK(dev->kernel(kTwin, kRope).ok());

  REQUIRE_OK(mock.deny_lookup(kKinds, "", StatusCode::kPermissionDenied));
  auto probe = dev->kernel(kKinds, "kinds_probe");
  check_error(probe.status(), StatusCode::kPermissionDenied, {"kinds_probe", "deny_lookup"});

  const auto records = mock.lookup_records();
  REQUIRE(records.size() == 3);
  CHECK(records[0] == MockLookup{kTwin, kSdpa, StatusCode::kNotFound, 0});
  CHECK(records[1].code == StatusCode::kOk);
  CHECK(records[2] == MockLookup{kKinds, "kinds_probe", StatusCode::kPermissionDenied, 0});
  CHECK(mock.counters().errors == 2);

  // Faults persist until cleared; a failed lookup is not cached.
  CHECK_FALSE(dev->kernel(kTwin, kSdpa).ok());
  REQUIRE_OK(mock.clear_faults());
  CHECK(dev->kernel(kTwin, kSdpa).ok());
  CHECK(dev->kernel(kKinds, "kinds_probe").ok());
}

TEST_CASE("mock launches: a wrong argument count fails as on a GPU and records nothing") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto rope = dev->kernel(kTwin, kRope);
  REQUIRE(rope.ok());
  auto q = dev->alloc(1024);
  REQUIRE(q.ok());
  auto seven = KernelLaunch(*dev, *rope)
                   .grid({1})
                   .block({128})
                   .arg(*q)
                   .arg(*q + 256)
                   .arg(uint32_t{8})
                   .arg(uint32_t{64})
                   .arg(uint32_t{32})
                   .arg(uint32_t{0})
                   .arg(10000.0f)
                   .launch();
  check_error(seven, StatusCode::kInvalidArgument,
              {"twin_maybe_rope_f32: 8 parameters declared, 7 given (missing #7 .u32)"});
  // A 64-bit value where the kernel declares .u32 shifts everything after it.
  auto wide = KernelLaunch(*dev, *rope)
                  .grid({1})
                  .block({128})
                  .arg(*q)
                  .arg(*q + 256)
                  .arg(uint64_t{8})
                  .arg(uint32_t{64})
                  .arg(uint32_t{32})
                  .arg(uint32_t{0})
                  .arg(10000.0f)
                  .arg(uint32_t{1})
                  .launch();
  check_error(wide, StatusCode::kInvalidArgument, {"twin_maybe_rope_f32", "parameter #2"});
  // Launch limits come from the mock's properties.
  auto none = dev->kernel(kKinds, "no_params");
  REQUIRE(none.ok());
  check_error(KernelLaunch(*dev, *none).grid({1}).block({1025}).launch(),
              StatusCode::kInvalidArgument, {"no_params", "1024"});
  check_error(KernelLaunch(*dev, *none).grid({1, 65536}).block({1}).launch(),
              StatusCode::kInvalidArgument, {"no_params", "65535"});
  check_error(KernelLaunch(*dev, *none).grid({1}).block({1}).shared_mem(228 * 1024).launch(),
              StatusCode::kInvalidArgument, {"no_params", "232448"});
  CHECK(mock.launch_count() == 0);
  CHECK(mock.counters().launches == 0);
}

TEST_CASE("mock launches: a pointer argument into no live allocation is refused, naming it") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto rope = dev->kernel(kTwin, kRope);
  REQUIRE(rope.ok());
  auto freed = dev->alloc(1024);
  auto q = dev->alloc(1024);
  REQUIRE(freed.ok());
  REQUIRE(q.ok());
  REQUIRE_OK(dev->free(*freed));
  auto launch = [&](DevicePtr a, DevicePtr b) {
    return KernelLaunch(*dev, *rope)
        .grid({1})
        .block({128})
        .arg(a)
        .arg(b)
        .arg(uint32_t{8})
        .arg(uint32_t{64})
        .arg(uint32_t{32})
        .arg(uint32_t{0})
        .arg(10000.0f)
        .arg(uint32_t{1})
        .launch();
  };
  // Allowed: inside a live allocation, one past its end (an end pointer, as
  // of an empty range), and null (an absent optional argument).
  REQUIRE_OK(launch(*q, *q + 1023));
  REQUIRE_OK(launch(*q + 1024, *q));
  REQUIRE_OK(launch(DevicePtr{}, *q + 512));

  check_error(launch(*freed, *q), StatusCode::kInvalidArgument,
              {"launch(twin_maybe_rope_f32, module twin_contract): pointer argument #0",
               "use after free", hex(freed->addr), "alloc#1", "freed"});
  check_error(launch(*q, *freed + 1024), StatusCode::kInvalidArgument,
              {"pointer argument #1", "use after free", "alloc#1+1024"});
  check_error(launch(*q, *q + 1040), StatusCode::kInvalidArgument,
              {"pointer argument #1", hex(q->addr + 1040), "16 bytes past the end of alloc#2",
               "1024 bytes"});
  check_error(launch(DevicePtr{0x1000}, *q), StatusCode::kInvalidArgument,
              {"pointer argument #0", "0x1000", "another device"});
  auto other = open_mock();
  auto foreign = other->alloc(256);
  REQUIRE(foreign.ok());
  check_error(launch(*q, *foreign), StatusCode::kInvalidArgument,
              {"pointer argument #1", hex(foreign->addr), "another device"});

  // A refused launch is an error, not a launch.
  CHECK(mock.launch_count() == 3);
  CHECK(mock.counters().launches == 3);
  CHECK(mock.counters().errors == 5);
  // Only pointers are checked: an integer is not an address, whatever its value.
  auto kinds = dev->kernel(kKinds, "kinds_probe");
  REQUIRE(kinds.ok());
  REQUIRE_OK(KernelLaunch(*dev, *kinds)
                 .grid({1})
                 .block({1})
                 .arg(*q)
                 .arg(uint32_t{1})
                 .arg(int32_t{2})
                 .arg(freed->addr)
                 .arg(int64_t{3})
                 .arg(4.0f)
                 .arg(5.0)
                 .arg(Blob{})
                 .launch());
}

TEST_CASE("mock launches: fail_launch fails exactly the nth launch from now with the chosen code") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto rope = dev->kernel(kTwin, kRope);
  auto q = dev->alloc(1024);
  REQUIRE(rope.ok());
  REQUIRE(q.ok());
  REQUIRE_OK(launch_rope(*dev, *rope, *q, 100));
  REQUIRE_OK(mock.fail_launch(3, StatusCode::kUnavailable));
  CHECK_OK(launch_rope(*dev, *rope, *q, 0));
  CHECK_OK(launch_rope(*dev, *rope, *q, 1));
  auto third = launch_rope(*dev, *rope, *q, 2);
  check_error(third, StatusCode::kUnavailable,
              {kRope, kTwin, "fail_launch", "launch 3 after arming"});
  CHECK_OK(launch_rope(*dev, *rope, *q, 3));
  REQUIRE_OK(mock.fail_launch(1));
  check_error(launch_rope(*dev, *rope, *q, 4), StatusCode::kInternal, {"fail_launch"});
  CHECK_OK(launch_rope(*dev, *rope, *q, 5));

  const auto launches = mock.launches();
  std::vector<uint32_t> positions;
  for (const auto& l : launches) positions.push_back(*l.args[5].as<uint32_t>());
  CHECK(positions == std::vector<uint32_t>{100, 0, 1, 3, 5});
  auto c = mock.counters();
  CHECK(c.launches == 5);
  CHECK(c.launches_failed == 2);
  CHECK(launches.back().sequence == 5);
}

TEST_CASE("mock launches: recording can be switched off or limited, counters stay exact") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto rope = dev->kernel(kTwin, kRope);
  auto q = dev->alloc(1024);
  REQUIRE(rope.ok());
  REQUIRE(q.ok());
  REQUIRE_OK(mock.set_recording(false));
  for (uint32_t i = 0; i < 10; ++i) REQUIRE_OK(launch_rope(*dev, *rope, *q, i));
  CHECK(mock.launch_count() == 0);
  CHECK(mock.counters().launches == 10);
  CHECK(mock.counters().launch_records_dropped == 10);

  REQUIRE_OK(mock.set_recording(true, 3));
  for (uint32_t i = 10; i < 15; ++i) REQUIRE_OK(launch_rope(*dev, *rope, *q, i));
  const auto launches = mock.launches();
  REQUIRE(launches.size() == 3);
  CHECK(*launches[0].args[5].as<uint32_t>() == 10);
  CHECK(launches[0].sequence == 11);
  CHECK(*launches[2].args[5].as<uint32_t>() == 12);
  CHECK(mock.counters().launches == 15);
  CHECK(mock.counters().launch_records_dropped == 12);
}

TEST_CASE("mock reset: clears records, counters and faults, keeps memory, streams and kernels") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto rope = dev->kernel(kTwin, kRope);
  auto q = dev->alloc(1024);
  auto s = dev->create_stream();
  REQUIRE(rope.ok());
  REQUIRE(q.ok());
  REQUIRE(s.ok());
  REQUIRE_OK(launch_rope(*dev, *rope, *q, 0, *s));
  REQUIRE_OK(mock.cap_memory(2000));
  REQUIRE_OK(mock.fail_launch(1));
  REQUIRE_OK(mock.deny_lookup(kTwin, ""));
  CHECK_FALSE(dev->alloc(1024).ok());

  REQUIRE_OK(mock.reset());
  CHECK(mock.lookups().empty());
  CHECK(mock.launch_count() == 0);
  auto c = mock.counters();
  CHECK(c.launches == 0);
  CHECK(c.allocations == 0);
  CHECK(c.errors == 0);
  CHECK(c.live_allocations == 1);
  CHECK(c.live_bytes == 1024);
  CHECK(mock.stream_counters(*s).launches == 0);

  // Faults are gone, the kernel and the stream still work, memory is intact.
  CHECK(dev->alloc(1024).ok());
  REQUIRE_OK(launch_rope(*dev, *rope, *q, 1, *s));
  CHECK(dev->kernel(kTwin, kSdpa).ok());
  REQUIRE(mock.launch_count() == 1);
  CHECK(mock.launch(0).sequence == 1);
  CHECK(mock.stream_counters(*s).launches == 1);
}

TEST_CASE("mock inspector: attach refuses a closed device, saying so") {
  auto dev = open_mock();
  REQUIRE_OK(dev->close());
  // Another device opened since may even sit at the closed one's address.
  auto other = open_mock();
  auto mock = MockInspector::attach(*dev);
  REQUIRE_FALSE(mock.ok());
  check_error(mock.status(), StatusCode::kFailedPrecondition, {"mock device 0 is closed"});
}

TEST_CASE("mock inspector: attach refuses a device of another backend") {
  auto dev = sparkrt::Device::open(
      {.backend = std::string(SPARKRT_TEST_PLUGIN_DIR) + "/libsparkrt_backend_fakegpu.so"});
  REQUIRE_MESSAGE(dev.ok(), dev.status().ToString());
  auto mock = MockInspector::attach(**dev);
  REQUIRE_FALSE(mock.ok());
  check_error(mock.status(), StatusCode::kFailedPrecondition,
              {"fakegpu", "sparkrt.mock.v1", "backend = \"mock\""});
}
