// Shared helpers of the concurrency tests.
#ifndef SPARKRT_TESTS_CONCURRENCY_THREADS_SUPPORT_H_
#define SPARKRT_TESTS_CONCURRENCY_THREADS_SUPPORT_H_

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sparkrt/sparkrt.h"
#include "status_checks.h"

namespace threadtest {

using sparkrt::testing::fresh_seed;
using sparkrt::testing::random_bytes;

// tests/data/kernels: the twin_contract module. Set before any thread starts
// (the runtime reads the variable at each module search).
inline void use_test_kernels() {
  ::setenv("SPARKRT_KERNEL_PATH", SPARKRT_TEST_DATA_DIR "/kernels", 1);
}

inline std::unique_ptr<sparkrt::Device> open_device(const char* backend) {
  auto dev = sparkrt::Device::open({.backend = backend});
  REQUIRE_MESSAGE(dev.ok(), dev.status().ToString());
  return *std::move(dev);
}

// Collects failures from worker threads (doctest's assertions are not
// thread-safe); the test reports them after joining.
class Failures {
 public:
  // True (and recorded) when `s` is an error.
  bool failed(const absl::Status& s, const std::string& what) {
    if (s.ok()) return false;
    add(what + ": " + s.ToString());
    return true;
  }
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (messages_.size() < 20) messages_.push_back(what);
    ++count_;
  }
  // Ends the test with the first messages if any thread failed.
  void require_none() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string all;
    for (const auto& m : messages_) all += m + "\n";
    REQUIRE_MESSAGE(count_ == 0, count_, " failures, the first:\n", all);
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> messages_;
  uint64_t count_ = 0;
};

}  // namespace threadtest

#endif  // SPARKRT_TESTS_CONCURRENCY_THREADS_SUPPORT_H_
