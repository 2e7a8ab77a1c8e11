#include "framework/cuda/cuda_check.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "framework/status.h"

namespace trellis {
namespace internal {

void DeviceCallFailure(const char* library, const char* call, const char* file,
                       int line, const char* message) {
  std::string where = ErrorContext();
  if (where.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    where = std::string("pid ") + std::to_string(getpid()) + " on " + host;
  }
  std::cerr << library << " error: " << call << " failed at " << file << ":"
            << line << " (" << where << "): " << message << std::endl;
  std::abort();
}

}  // namespace internal
}  // namespace trellis
