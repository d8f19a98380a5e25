// Sixteen threads launching and copying on one cpu device at once, each on
// its own stream and buffers: every result is exact, and the kernel that all
// threads resolved at once is one record.
#include <latch>
#include <thread>

#include "threads_support.h"

using sparkrt::DevicePtr;
using sparkrt::KernelLaunch;
using threadtest::Failures;

TEST_CASE("concurrency: 16 threads launching and copying on one cpu device get exact results") {
  constexpr uint32_t kThreads = 16;
  constexpr uint32_t kIters = 60;
  constexpr uint32_t kN = 1024;
  auto dev = threadtest::open_device("cpu");
  const uint64_t seed = threadtest::fresh_seed();
  INFO("seed ", seed);

  Failures failures;
  std::latch start(kThreads);
  std::atomic<uint64_t> checked{0};
  std::vector<const sparkrt::KernelSignature*> sigs(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      auto add = dev->kernel("vector_ops", "vector_add_f32");
      if (failures.failed(add.status(), "kernel vector_add_f32")) return;
      auto fill = dev->kernel("vector_ops", "fill_u32");
      if (failures.failed(fill.status(), "kernel fill_u32")) return;
      sigs[t] = &add->signature();
      auto s = dev->create_stream();
      if (failures.failed(s.status(), "create_stream")) return;
      auto a = dev->alloc(kN * sizeof(float));
      auto b = dev->alloc(kN * sizeof(float));
      auto out = dev->alloc(kN * sizeof(float));
      if (failures.failed(a.status(), "alloc") || failures.failed(b.status(), "alloc") ||
          failures.failed(out.status(), "alloc"))
        return;
      std::mt19937_64 gen(seed + t);
      std::uniform_real_distribution<float> value(-1000.0f, 1000.0f);
      for (uint32_t i = 0; i < kIters; ++i) {
        const std::string at = "thread " + std::to_string(t) + " iteration " + std::to_string(i);
        std::vector<float> x(kN), y(kN), sum(kN, 0.0f);
        for (uint32_t j = 0; j < kN; ++j) x[j] = value(gen), y[j] = value(gen);
        if (failures.failed(dev->copy_h2d_async(x.data(), *a, kN * sizeof(float), *s), at) ||
            failures.failed(dev->copy_h2d_async(y.data(), *b, kN * sizeof(float), *s), at) ||
            failures.failed(KernelLaunch(*dev, *add)
                                .grid({sparkrt::div_ceil(kN, 256u)})
                                .block({256})
                                .arg(*a)
                                .arg(*b)
                                .arg(*out)
                                .arg(kN)
                                .launch(*s),
                            at + " launch vector_add") ||
            failures.failed(dev->copy_d2h_async(*out, sum.data(), kN * sizeof(float), *s), at) ||
            failures.failed(dev->synchronize(*s), at))
          return;
        bool exact = true;
        for (uint32_t j = 0; j < kN; ++j) exact &= (sum[j] == x[j] + y[j]);
        if (!exact) failures.add(at + ": vector_add result is not a + b");
        if (i % 8 == 0) {
          const uint32_t tag = t * 1000 + i;
          std::vector<uint32_t> filled(kN, 0);
          if (failures.failed(KernelLaunch(*dev, *fill)
                                  .grid({sparkrt::div_ceil(kN, 256u)})
                                  .block({256})
                                  .arg(*out)
                                  .arg(tag)
                                  .arg(kN)
                                  .launch(*s),
                              at + " launch fill_u32") ||
              failures.failed(dev->synchronize(*s), at) ||
              failures.failed(dev->copy_d2h(*out, filled.data(), kN * sizeof(uint32_t)), at))
            return;
          if (filled != std::vector<uint32_t>(kN, tag)) failures.add(at + ": fill_u32 result");
        }
        ++checked;
      }
      for (DevicePtr p : {*a, *b, *out})
        if (failures.failed(dev->free(p), "free")) return;
      failures.failed(dev->destroy_stream(*s), "destroy_stream");
    });
  }
  for (auto& th : threads) th.join();
  failures.require_none();
  CHECK(checked.load() == uint64_t{kThreads} * kIters);
  for (uint32_t t = 1; t < kThreads; ++t) CHECK(sigs[t] == sigs[0]);
  CHECK_OK(dev->close());
}
