// The properties parse_ptx_signatures promises for any input, checked on one
// input. Shared by the libFuzzer target and the corpus replay test.
#ifndef SPARKRT_TESTS_FUZZ_PTX_INVARIANTS_H_
#define SPARKRT_TESTS_FUZZ_PTX_INVARIANTS_H_

#include <string_view>

namespace sparkrt::fuzz {

// Parses `ptx` and checks the result:
//  - an error is InvalidArgument and its message names a line of the input
//    ("line N:", 1 <= N <= the number of lines);
//  - entry and parameter names are PTX identifiers, as ptxas has them;
//    entry names are unique, and parameter names within an entry;
//  - every parameter has size > 0, a power-of-two alignment, an offset that
//    is a multiple of it, and starts at or after the end of the one before;
//    a scalar is aligned to at least its width (as ptxas lays it out);
//    params_size is the end of the last parameter (0 without parameters);
//  - a block or cluster shape directive is absent (0, 0, 0) or has every
//    extent >= 1, and .reqntid and .maxntid do not come together;
//  - the same input parses the same way twice, and the signatures written
//    back as PTX (parameters and directives) parse to the same signatures.
// A violation is printed to stderr and aborts the process.
void check_ptx_signatures(std::string_view ptx);

}  // namespace sparkrt::fuzz

#endif  // SPARKRT_TESTS_FUZZ_PTX_INVARIANTS_H_
