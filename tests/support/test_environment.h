// Hermetic test processes. Every test main calls make_environment_hermetic()
// first thing: it removes every SPARKRT_* variable from the environment, so
// the caller's settings (a backend, a kernel path, mock properties, a cuda
// option) cannot change what the tests see, and then sets the ones a test
// registration asks for on the command line:
//
//   sparkrt_gpu_tests --set-env=SPARKRT_SYNC_LAUNCHES=1 --test-suite=fault
//
// A registration says what it runs under in its command, never through an
// inherited variable. Kept: SPARKRT_DEVICE (it picks the GPU that GPU tests
// use). SPARKRT_UPDATE_GOLDEN is read before it goes (update_golden()).
// Tests that need a variable set it themselves, or run a child process.
#ifndef SPARKRT_TESTS_SUPPORT_TEST_ENVIRONMENT_H_
#define SPARKRT_TESTS_SUPPORT_TEST_ENVIRONMENT_H_

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace sparkrt::testing {

namespace detail {
inline bool& update_golden_flag() {
  static bool flag = false;
  return flag;
}
}  // namespace detail

// Whether the process started with SPARKRT_UPDATE_GOLDEN=1: golden tests then
// rewrite their files and fail, so a run in update mode never passes.
inline bool update_golden() { return detail::update_golden_flag(); }

// Clears the environment as above and applies (and removes from argv) each
// --set-env=NAME=VALUE. False, with the reason on stderr, for a malformed one.
inline bool make_environment_hermetic(int& argc, char** argv) {
  const char* golden = std::getenv("SPARKRT_UPDATE_GOLDEN");
  detail::update_golden_flag() = golden != nullptr && std::strcmp(golden, "1") == 0;

  constexpr char kPrefix[] = "SPARKRT_";
  std::vector<std::string> names;  // collected first: unsetenv changes environ
  std::string ignored;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr || std::strncmp(*e, kPrefix, sizeof kPrefix - 1) != 0) continue;
    std::string name(*e, static_cast<size_t>(eq - *e));
    if (name == "SPARKRT_DEVICE") continue;
    if (eq[1] != '\0' && name != "SPARKRT_UPDATE_GOLDEN")
      ignored += (ignored.empty() ? "" : ", ") + name;
    names.push_back(std::move(name));
  }
  for (const std::string& name : names) unsetenv(name.c_str());
  if (!ignored.empty()) {
    std::fprintf(stderr,
                 "test main: ignoring %s from the environment (tests are hermetic; "
                 "--set-env=NAME=VALUE sets a variable for this run)\n",
                 ignored.c_str());
  }

  constexpr char kOption[] = "--set-env=";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], kOption, sizeof kOption - 1) != 0) {
      argv[kept++] = argv[i];
      continue;
    }
    const char* setting = argv[i] + sizeof kOption - 1;
    const char* eq = std::strchr(setting, '=');
    if (eq == nullptr || eq == setting) {
      std::fprintf(stderr, "%s: '%s' is not --set-env=NAME=VALUE\n", argv[0], argv[i]);
      return false;
    }
    setenv(std::string(setting, static_cast<size_t>(eq - setting)).c_str(), eq + 1, 1);
  }
  argc = kept;
  argv[argc] = nullptr;
  return true;
}

}  // namespace sparkrt::testing

#endif  // SPARKRT_TESTS_SUPPORT_TEST_ENVIRONMENT_H_
