// launch_vector_add: open the device the environment selects, launch
// vector_add_f32 from the kernels installed with sparkrt, and check it.
//
// On a computing backend (cuda, cpu) the result must equal a + b. The mock
// backend records launches instead of running them, so there the program
// checks through sparkrt/testing/mock.h that exactly this launch was recorded.
//
// Exit code 0 when the check passes, 1 otherwise (with the reason on stderr).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "sparkrt/sparkrt.h"
#include "sparkrt/testing/mock.h"

namespace {

using sparkrt::DevicePtr;

int fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "launch_vector_add: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  // SPARKRT_BACKEND and SPARKRT_DEVICE choose the device; unset means the
  // first real backend with a device.
  auto dev = sparkrt::Device::open();
  if (!dev.ok()) return fail("opening a device", dev.status());
  std::printf("device: %s (%s backend)\n", (*dev)->properties().name.c_str(),
              (*dev)->backend_name().c_str());

  auto kernel = (*dev)->kernel("vector_ops", "vector_add_f32");
  if (!kernel.ok()) return fail("finding vector_ops/vector_add_f32", kernel.status());

  const uint32_t n = 3000;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(0.25f, 4.0f);
  std::vector<float> a(n), b(n), out(n, std::nanf(""));
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = dist(rng);
    b[i] = -dist(rng);
  }

  const size_t bytes = n * sizeof(float);
  DevicePtr da, db, dout;
  for (DevicePtr* p : {&da, &db, &dout}) {
    auto ptr = (*dev)->alloc(bytes);
    if (!ptr.ok()) return fail("allocating device memory", ptr.status());
    *p = *ptr;
  }
  if (auto s = (*dev)->copy_h2d(a, da); !s.ok()) return fail("copying a", s);
  if (auto s = (*dev)->copy_h2d(b, db); !s.ok()) return fail("copying b", s);
  // Poison the output: elements the kernel does not write read back as NaN.
  if (auto s = (*dev)->memset(dout, 0xFF, bytes); !s.ok()) return fail("poisoning out", s);

  const uint32_t block = 256;
  const sparkrt::Dim3 grid{sparkrt::div_ceil(n, block)};
  absl::Status launched = sparkrt::KernelLaunch(**dev, *kernel)
                              .grid(grid)
                              .block({block})
                              .arg(da)
                              .arg(db)
                              .arg(dout)
                              .arg(n)
                              .launch();
  if (!launched.ok()) return fail("launching vector_add_f32", launched);
  if (auto s = (*dev)->synchronize(); !s.ok()) return fail("synchronizing", s);

  if ((*dev)->backend_name() == "mock") {
    auto mock = sparkrt::testing::MockInspector::attach(**dev);
    if (!mock.ok()) return fail("attaching to the mock", mock.status());
    const auto launches = mock->launches();
    const std::vector<sparkrt::testing::MockArg> expected = {
        sparkrt::testing::MockArg::of(da), sparkrt::testing::MockArg::of(db),
        sparkrt::testing::MockArg::of(dout), sparkrt::testing::MockArg::of(n)};
    if (launches.size() != 1 || launches[0].module != "vector_ops" ||
        launches[0].entry != "vector_add_f32" || launches[0].grid != grid ||
        launches[0].block != sparkrt::Dim3{block} || launches[0].args != expected) {
      std::fprintf(stderr, "launch_vector_add: the mock recorded %zu launches, not this one\n",
                   launches.size());
      return 1;
    }
    std::printf("mock recorded the launch: grid %u, block %u, n = %u\n", grid.x, block, n);
  } else {
    if (auto s = (*dev)->copy_d2h(dout, out); !s.ok()) return fail("copying the result", s);
    for (uint32_t i = 0; i < n; ++i) {
      if (!(out[i] == a[i] + b[i])) {
        std::fprintf(stderr, "launch_vector_add: out[%u] = %g, expected %g + %g = %g\n", i,
                     out[i], a[i], b[i], a[i] + b[i]);
        return 1;
      }
    }
    std::printf("all %u elements equal a + b\n", n);
  }

  for (DevicePtr p : {da, db, dout}) {
    if (auto s = (*dev)->free(p); !s.ok()) return fail("freeing device memory", s);
  }
  if (auto s = (*dev)->close(); !s.ok()) return fail("closing the device", s);
  return 0;
}
