#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

// Tests are hermetic: the caller's sparkrt settings must not change what they
// see. Tests that need a variable set it themselves (or run a child process).
// SPARKRT_DEVICE stays, to pick the GPU that GPU tests use.
int main(int argc, char** argv) {
  for (const char* var : {"SPARKRT_BACKEND", "SPARKRT_PLUGIN_PATH", "SPARKRT_KERNEL_PATH",
                          "SPARKRT_LOG", "SPARKRT_MOCK_LOG", "SPARKRT_SYNC_LAUNCHES"})
    unsetenv(var);
  return doctest::Context(argc, argv).run();
}
