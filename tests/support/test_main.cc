#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "test_environment.h"

// Tests are hermetic: the caller's sparkrt settings must not change what they
// see (test_environment.h).
int main(int argc, char** argv) {
  if (!sparkrt::testing::make_environment_hermetic(argc, argv)) return 2;
  return doctest::Context(argc, argv).run();
}
