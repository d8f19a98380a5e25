// Main of the GPU tests: `--backend=NAME` (default cuda) picks the backend
// under test (gpu_test::backend()); exits 77 (CTest: skipped) when it reports
// no usable device here, so machines without one skip visibly instead of
// failing. A test suite whose requirement (gpu_test::require) is unmet here
// is left out with the reason printed, and doctest counts its cases as
// skipped; when that leaves nothing to run, the exit is 77 as well.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_backend.h"
#include "sparkrt/device.h"
#include "../support/test_environment.h"

namespace {

// Takes the number of cases a `--count` query selects, and prints nothing.
struct CountReporter : doctest::IReporter {
  static inline unsigned selected = 0;
  explicit CountReporter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData& q) override {
    if (q.run_stats != nullptr) selected = q.run_stats->numTestCasesPassingFilters;
  }
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_REPORTER("sparkrt_count", 0, CountReporter);

void exclude(doctest::Context& context, const std::vector<std::string>& suites) {
  for (const std::string& s : suites) context.addFilter("test-suite-exclude", s.c_str());
}

// How many cases the command line selects once `excluded` is left out.
unsigned selected_cases(int argc, char** argv, const std::vector<std::string>& excluded) {
  doctest::Context count;
  count.applyCommandLine(argc, argv);
  exclude(count, excluded);
  // Flags, which setOption cannot set.
  const char* const query[] = {argv[0], "--count", "--reporters=sparkrt_count"};
  count.applyCommandLine(3, query);
  count.run();
  return CountReporter::selected;
}

}  // namespace

int main(int argc, char** argv) {
  if (!sparkrt::testing::make_environment_hermetic(argc, argv)) return 2;
  bool listing = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    constexpr char kBackend[] = "--backend=";
    if (std::strncmp(argv[i], kBackend, sizeof kBackend - 1) == 0) {
      sparkrt::gpu_test::backend() = argv[i] + sizeof kBackend - 1;
      continue;
    }
    if (std::strstr(argv[i], "-list") != nullptr || std::strstr(argv[i], "-ltc") != nullptr)
      listing = true;
    argv[kept++] = argv[i];
  }
  argc = kept;
  const std::string& backend = sparkrt::gpu_test::backend();
  // The test kernels live in the build tree; an explicit path (--set-env) wins.
  setenv("SPARKRT_KERNEL_PATH", SPARKRT_GPU_TEST_KERNEL_DIR, 0);
  if (!listing) {
    auto dev = sparkrt::Device::open({.backend = backend});
    if (!dev.ok()) {
      const std::string message(dev.status().ToString());
      if (dev.status().code() == absl::StatusCode::kUnavailable) {
        std::printf("SKIPPED: no usable %s device on this machine: %s\n", backend.c_str(),
                    message.c_str());
        return 77;
      }
      std::fprintf(stderr, "cannot open the %s backend: %s\n", backend.c_str(), message.c_str());
      return 1;
    }
    const auto& p = (*dev)->properties();
    std::printf("%s device %d: %s (%s, %u SMs, %.1f GiB), plugin %s\n", backend.c_str(),
                (*dev)->index(), p.name.c_str(), p.architecture.c_str(), p.multiprocessor_count,
                p.total_memory / double(1 << 30), (*dev)->plugin_path().c_str());
  }
  std::vector<std::string> excluded;
  if (!listing) {
    for (const auto& r : sparkrt::gpu_test::suite_requirements()) {
      const std::string why = r.unmet();
      if (why.empty()) continue;
      std::printf("SKIPPED: test suite %s: %s\n", r.suite, why.c_str());
      excluded.push_back(r.suite);
    }
    std::fflush(stdout);
    if (!excluded.empty() && selected_cases(argc, argv, excluded) == 0) {
      std::printf("SKIPPED: no selected test case can run here (reasons above)\n");
      return 77;
    }
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  exclude(context, excluded);
  return context.run();
}
