// Early returns on absl::Status errors, for the runtime, the ops, the plugins
// (header-only, needs abseil and nothing else of sparkrt) and the tools:
//
//   SPARKRT_RETURN_IF_ERROR(dev.synchronize(stream));
//   SPARKRT_ASSIGN_OR_RETURN(auto p, dev.alloc(bytes));        // declares p
//   SPARKRT_ASSIGN_OR_RETURN(w.slots, operand(l, 4, "slots"));  // assigns
//
// The error is returned as it is: a message says what failed where it is
// built, and a caller that knows more adds it with its own check (the cuda
// backend's SPARKRT_CU names the driver call). Both macros are statements;
// ASSIGN_OR_RETURN may not be the body of an unbraced if, and two of them on
// one line collide (the temporary is named after the line).
#ifndef SPARKRT_STATUS_MACROS_H_
#define SPARKRT_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function when `expr` (an absl::Status) fails.
#define SPARKRT_RETURN_IF_ERROR(expr)                                                \
  do {                                                                               \
    if (::absl::Status sparkrt_status_ = (expr); !sparkrt_status_.ok()) [[unlikely]] \
      return sparkrt_status_;                                                        \
  } while (0)

// Evaluates `expr` (an absl::StatusOr); returns its status on error, else
// moves the value into `lhs`, a declaration or an lvalue.
#define SPARKRT_ASSIGN_OR_RETURN(lhs, expr) \
  SPARKRT_ASSIGN_OR_RETURN_IMPL_(SPARKRT_STATUS_CONCAT_(sparkrt_statusor_, __LINE__), lhs, expr)

#define SPARKRT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) [[unlikely]]                          \
    return tmp.status();                               \
  lhs = *std::move(tmp)
#define SPARKRT_STATUS_CONCAT_(a, b) SPARKRT_STATUS_CONCAT_IMPL_(a, b)
#define SPARKRT_STATUS_CONCAT_IMPL_(a, b) a##b

#endif  // SPARKRT_STATUS_MACROS_H_
