#include "framework/status.h"

#include <iostream>
#include <mutex>

namespace trellis {
namespace {

std::string& MutableContext() {
  static std::string* context = new std::string();
  return *context;
}

}  // namespace

const std::string& ErrorContext() { return MutableContext(); }

void SetErrorContext(std::string context) {
  MutableContext() = std::move(context);
}

namespace internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << "internal error: check failed: " << condition << " at " << file
          << ":" << line;
  if (!ErrorContext().empty()) stream_ << " (" << ErrorContext() << ")";
  stream_ << ": ";
}

CheckFailure::~CheckFailure() {
  std::cerr << stream_.str() << std::endl;
  std::abort();
}

}  // namespace internal
}  // namespace trellis
