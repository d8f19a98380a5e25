// `sparkrt demo`: one kernel launch end to end on the device the environment
// selects: look the kernel up by name, copy inputs, launch, check.
//
// A computing backend (cuda, cpu) must produce a + b exactly. The mock records
// instead of computing, so on the mock the demo reads back what was recorded
// (sparkrt/testing/mock.h) and checks it is the launch that was made.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "commands.h"
#include "sparkrt/device.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/testing/mock.h"

namespace sparkrt::cli {
namespace {

// Not a multiple of the block size, so the kernel's bounds check matters.
constexpr uint32_t kCount = 1000;
constexpr uint32_t kBlock = 256;

#define SPARKRT_CLI_RETURN_IF_ERROR(expr)              \
  do {                                                 \
    if (absl::Status s_ = (expr); !s_.ok()) return s_; \
  } while (0)

absl::Status check_sum(const std::vector<float>& a, const std::vector<float>& b,
                       const std::vector<float>& out, std::ostream& os) {
  uint32_t wrong = 0;
  uint32_t first = 0;
  for (uint32_t i = 0; i < kCount; ++i) {
    // One IEEE addition: the device must match the host bit for bit.
    if (!(out[i] == a[i] + b[i]) && wrong++ == 0) first = i;
  }
  if (wrong != 0) {
    return absl::InternalError(absl::StrFormat(
        "vector_add_f32 computed %d of %d elements wrongly; first at [%d]: %g + %g gave %g", wrong,
        kCount, first, a[first], b[first], out[first]));
  }
  os << absl::StrFormat("result: all %d elements equal a + b\n", kCount);
  return absl::OkStatus();
}

// The mock must have recorded exactly the one launch that passed the
// signature check, with the arguments as given.
absl::Status check_recorded(Device& dev, Kernel kernel, const DevicePtr (&buffers)[3],
                            std::ostream& os) {
  auto mock = testing::MockInspector::attach(dev);
  if (!mock.ok()) return mock.status();
  const std::vector<testing::MockLaunch> launches = mock->launches();
  os << "recorded by the mock:\n";
  for (const testing::MockLaunch& launch : launches) os << "  " << launch << "\n";
  const std::vector<testing::MockArg> expected = {
      testing::MockArg::of(buffers[0]), testing::MockArg::of(buffers[1]),
      testing::MockArg::of(buffers[2]), testing::MockArg::of(kCount)};
  if (launches.size() != 1 || launches[0].entry != kernel.entry() ||
      launches[0].grid != Dim3{div_ceil(kCount, kBlock)} || launches[0].block != Dim3{kBlock} ||
      launches[0].args != expected) {
    return absl::InternalError(absl::StrFormat(
        "the mock recorded %d launches; expected one vector_add_f32 launch with the arguments "
        "given", launches.size()));
  }
  const testing::MockCounters counters = mock->counters();
  os << absl::StrFormat(
      "counters: lookups %d, launches %d, H2D copies %d (%d bytes), memsets %d, syncs %d, live "
      "allocations %d (%d bytes)\n",
      counters.lookups, counters.launches, counters.h2d_blocking, counters.bytes_h2d,
      counters.memsets_blocking, counters.syncs, counters.live_allocations, counters.live_bytes);
  return absl::OkStatus();
}

}  // namespace

absl::Status run_demo(std::ostream& out) {
  auto opened = Device::open();
  if (!opened.ok()) return opened.status();
  Device& dev = **opened;
  const bool computes = dev.backend_name() != "mock";
  out << absl::StrFormat("device: %s (backend %s %s)\n", dev.properties().name,
                         dev.backend_name(), dev.plugin_version());

  auto kernel = dev.kernel("vector_ops", "vector_add_f32");
  if (!kernel.ok()) return kernel.status();
  out << absl::StrFormat("kernel: vector_ops/vector_add_f32, %d parameters\n",
                         kernel->signature().params.size());

  // Random non-zero inputs; the output starts as NaN so untouched elements show.
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(0.5f, 2.0f);
  std::vector<float> a(kCount), b(kCount), result(kCount, std::nanf(""));
  for (uint32_t i = 0; i < kCount; ++i) {
    a[i] = (i % 2 == 0 ? 1.0f : -1.0f) * dist(rng);
    b[i] = dist(rng);
  }
  const size_t bytes = kCount * sizeof(float);
  DevicePtr buffers[3];
  for (DevicePtr& buffer : buffers) {
    auto ptr = dev.alloc(bytes);
    if (!ptr.ok()) return ptr.status();
    buffer = *ptr;
  }
  const auto [da, db, dout] = buffers;
  SPARKRT_CLI_RETURN_IF_ERROR(dev.copy_h2d(a, da));
  SPARKRT_CLI_RETURN_IF_ERROR(dev.copy_h2d(b, db));
  SPARKRT_CLI_RETURN_IF_ERROR(dev.memset(dout, 0xFF, bytes));

  const Dim3 grid{div_ceil(kCount, kBlock)};
  SPARKRT_CLI_RETURN_IF_ERROR(
      KernelLaunch(dev, *kernel).grid(grid).block({kBlock}).arg(da).arg(db).arg(dout).arg(kCount).launch());
  SPARKRT_CLI_RETURN_IF_ERROR(dev.synchronize());
  out << absl::StrFormat("launch: grid (%d), block (%d), args (a, b, out, n=%d): ok\n", grid.x,
                         kBlock, kCount);

  // The same launch without `n` never reaches the backend: the runtime checks
  // every launch against the kernel's PTX signature.
  const absl::Status refused =
      KernelLaunch(dev, *kernel).grid(grid).block({kBlock}).arg(da).arg(db).arg(dout).launch();
  if (refused.ok()) {
    return absl::InternalError("a launch with a missing argument was accepted");
  }
  out << "launch without n: refused: " << refused.message() << "\n";

  if (computes) {
    SPARKRT_CLI_RETURN_IF_ERROR(dev.copy_d2h(dout, result));
    SPARKRT_CLI_RETURN_IF_ERROR(check_sum(a, b, result, out));
  } else {
    out << "result: not computed (the mock backend records launches instead of running them)\n";
    SPARKRT_CLI_RETURN_IF_ERROR(check_recorded(dev, *kernel, buffers, out));
  }
  for (DevicePtr buffer : buffers) SPARKRT_CLI_RETURN_IF_ERROR(dev.free(buffer));
  return dev.close();
}

}  // namespace sparkrt::cli
