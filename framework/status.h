// Status helpers and check macros.
//
// Two kinds of failure exist in trellis:
//  - what a user can cause (bad flags, files, data, layouts) travels up the
//    stack as an absl::Status and ends as a one-line error and a nonzero exit;
//  - a broken invariant (a bug in trellis) aborts at once through
//    TRELLIS_CHECK, naming the condition and file:line.
#ifndef TRELLIS_FRAMEWORK_STATUS_H_
#define TRELLIS_FRAMEWORK_STATUS_H_

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace trellis {
namespace internal {

// Collects a message with operator<< and aborts when destroyed.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

// Lets `TRELLIS_CHECK(c) << ...` stay a single expression.
struct Voidify {
  void operator&(const CheckFailure&) {}
};

}  // namespace internal

// Returns the process-wide rank label used in error messages ("rank 3 on
// host x"). Set once at start by the bootstrap; empty on a single process.
const std::string& ErrorContext();
void SetErrorContext(std::string context);

}  // namespace trellis

#define TRELLIS_CHECK(condition)         \
  (condition)                            \
      ? (void)0                          \
      : ::trellis::internal::Voidify() & \
            ::trellis::internal::CheckFailure(__FILE__, __LINE__, #condition)

#define TRELLIS_CHECK_EQ(a, b) \
  TRELLIS_CHECK((a) == (b)) << (a) << " vs " << (b) << " "
#define TRELLIS_CHECK_LE(a, b) \
  TRELLIS_CHECK((a) <= (b)) << (a) << " vs " << (b) << " "
#define TRELLIS_CHECK_LT(a, b) \
  TRELLIS_CHECK((a) < (b)) << (a) << " vs " << (b) << " "
#define TRELLIS_CHECK_GE(a, b) \
  TRELLIS_CHECK((a) >= (b)) << (a) << " vs " << (b) << " "
#define TRELLIS_CHECK_GT(a, b) \
  TRELLIS_CHECK((a) > (b)) << (a) << " vs " << (b) << " "

#define TRELLIS_STATUS_CONCAT_INNER(a, b) a##b
#define TRELLIS_STATUS_CONCAT(a, b) TRELLIS_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` is not OK.
#define TRELLIS_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status _trellis_status = (expr);           \
    if (!_trellis_status.ok()) return _trellis_status; \
  } while (0)

// `TRELLIS_ASSIGN_OR_RETURN(auto x, MakeX());`
#define TRELLIS_ASSIGN_OR_RETURN(lhs, expr)                                    \
  TRELLIS_ASSIGN_OR_RETURN_IMPL(TRELLIS_STATUS_CONCAT(_trellis_or_, __LINE__), \
                                lhs, expr)
#define TRELLIS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

#endif  // TRELLIS_FRAMEWORK_STATUS_H_
