// What the environment does, and that it cannot leak into tests: SPARKRT_LOG
// levels (read once per process, so each case runs a child process), and the
// test main's clearing of every SPARKRT_* variable.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "subprocess.h"
#include "test_environment.h"

using sparkrt::testing::run_process;
using Env = std::map<std::string, std::optional<std::string>>;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

sparkrt::testing::ProcessResult probe_with_log(const std::optional<std::string>& level) {
  return run_process({SPARKRT_OPEN_PROBE}, {{"SPARKRT_BACKEND", "mock"},
                                            {"SPARKRT_PLUGIN_PATH", std::nullopt},
                                            {"SPARKRT_MOCK_LOG", std::nullopt},
                                            {"SPARKRT_LOG", level}});
}

}  // namespace

TEST_CASE("SPARKRT_LOG: levels are taken in any case, and debug shows the load decisions") {
  for (const char* debug : {"debug", "DEBUG", "Debug"}) {
    CAPTURE(debug);
    auto r = probe_with_log(debug);
    CHECK(r.exit_code == 0);
    CHECK(has(r.err, "[sparkrt] opening backend 'mock'"));
    CHECK(has(r.err, "loaded: backend 'mock'"));
    CHECK_FALSE(has(r.err, "warning"));
  }
  // Quieter levels print no debug line and no warning (nothing here fails).
  for (const char* quiet : {"error", "ERROR", "warn", "Warn", "info", "INFO", ""}) {
    CAPTURE(quiet);
    auto r = probe_with_log(quiet);
    CHECK(r.exit_code == 0);
    CHECK(r.err.empty());
  }
  auto unset = probe_with_log(std::nullopt);
  CHECK(unset.exit_code == 0);
  CHECK(unset.err.empty());
}

TEST_CASE("SPARKRT_LOG: any other value prints one warning naming the accepted levels") {
  for (const char* bad : {"1", "verbose", "debug2", " debug"}) {
    CAPTURE(bad);
    auto r = probe_with_log(bad);
    CHECK(r.exit_code == 0);
    CHECK(count(r.err, "[sparkrt] warning: SPARKRT_LOG='" + std::string(bad) + "'") == 1);
    CHECK(has(r.err, "error, warn, info, debug"));
    CHECK(count(r.err, "[sparkrt]") == 1);  // and then the default level: nothing else
  }
}

// Not a check by itself: prints what a test sees, for the case below.
TEST_CASE("environment probe: the SPARKRT_* variables a test sees") {
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "SPARKRT_", 8) == 0) MESSAGE("seen: ", std::string(*e));
  MESSAGE("update_golden=", sparkrt::testing::update_golden() ? 1 : 0);
}

TEST_CASE("environment: the test main clears every SPARKRT_* variable but SPARKRT_DEVICE") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto r = run_process({self, "--test-case=environment probe*", "--set-env=SPARKRT_BACKEND=cpu",
                        "--set-env=SPARKRT_KERNEL_PATH="},
                       {{"SPARKRT_MOCK_PROPERTIES", "multiprocessor_count=48"},
                        {"SPARKRT_CUDA_MEMPOOL", "0"},
                        {"SPARKRT_BACKEND", "mock"},
                        {"SPARKRT_NOT_A_KNOWN_VARIABLE", "x"},
                        {"SPARKRT_UPDATE_GOLDEN", "1"},
                        {"SPARKRT_DEVICE", "3"}});
  INFO(r.out, r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.out, "seen: SPARKRT_DEVICE=3"));
  CHECK(has(r.out, "seen: SPARKRT_BACKEND=cpu"));  // --set-env, not the inherited mock
  CHECK(has(r.out, "seen: SPARKRT_KERNEL_PATH=\n"));
  CHECK(count(r.out, "seen: SPARKRT_") == 3);
  // SPARKRT_UPDATE_GOLDEN was read before it went.
  CHECK(has(r.out, "update_golden=1"));
  // Ignored settings are named, so a run that meant them finds out.
  CHECK(has(r.err, "ignoring"));
  for (const char* name : {"SPARKRT_MOCK_PROPERTIES", "SPARKRT_CUDA_MEMPOOL",
                           "SPARKRT_NOT_A_KNOWN_VARIABLE", "SPARKRT_BACKEND"})
    CHECK(has(r.err, name));

  auto bad = run_process({self, "--test-case=environment probe*", "--set-env=NOEQUALS"}, {});
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "'--set-env=NOEQUALS' is not --set-env=NAME=VALUE"));
}
