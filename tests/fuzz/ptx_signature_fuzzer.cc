// libFuzzer target for the PTX signature parser: every input must satisfy
// the properties checked by check_ptx_signatures (ptx_invariants.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ptx_invariants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sparkrt::fuzz::check_ptx_signatures(
      std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
