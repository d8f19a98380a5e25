// The conformance tests' main (ctest: conformance.<backend>): runs the
// shipped `sparkrt conformance`, which sits next to this binary, with these
// arguments in a hermetic environment (test_environment.h), so that CTest
// runs exactly what a plugin author runs.
//
//   sparkrt_conformance --backend=mock [--set-env=NAME=VALUE]... [conformance options]
//
// Exit codes are the command's: 77 (CTest's SKIP_RETURN_CODE) when the
// backend's plugin loads but has no usable device here.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "test_environment.h"

int main(int argc, char** argv) {
  if (!sparkrt::testing::make_environment_hermetic(argc, argv)) return 2;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::fprintf(stderr, "%s: cannot find its own file: %s\n", argv[0], std::strerror(errno));
    return 1;
  }
  std::string cli(self, static_cast<size_t>(n));
  cli = cli.substr(0, cli.rfind('/') + 1) + SPARKRT_CLI_NAME;
  std::vector<char*> args = {cli.data(), const_cast<char*>("conformance")};
  args.insert(args.end(), argv + 1, argv + argc);
  args.push_back(nullptr);
  execv(cli.c_str(), args.data());
  std::fprintf(stderr, "%s: cannot run %s: %s\n", argv[0], cli.c_str(), std::strerror(errno));
  return 1;
}
