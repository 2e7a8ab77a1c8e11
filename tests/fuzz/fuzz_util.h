// Helpers shared by the fuzz targets (tests/fuzz/*_fuzz.cc): a scratch
// directory for readers that take a path, a check that stops the run with
// a message when a property the target tests does not hold, and the
// readers' verdicts printed on request (TRELLIS_FUZZ_VERBOSE=1, to see
// what a seed exercises when the target runs it by hand).
#ifndef TRELLIS_TESTS_FUZZ_FUZZ_UTIL_H_
#define TRELLIS_TESTS_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace trellis::fuzz {

// A directory of this process's own, made on first use and removed when
// the process exits normally (a crash leaves it for a look).
inline const std::string& ScratchDir() {
  static const std::string* const dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") +
                          "/trellis-fuzz-scratch.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(ScratchDir(), ec);
    });
    return new std::string(pattern);
  }();
  return *dir;
}

// Writes `bytes` to `path`, replacing it; aborts when it cannot.
inline void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Aborts (a crash libFuzzer reports, with the input) when `ok` is false.
inline void Expect(bool ok, std::string_view what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz property failed: %.*s\n",
               static_cast<int>(what.size()), what.data());
  std::abort();
}

// Prints `what` and `status` to stderr when TRELLIS_FUZZ_VERBOSE is set.
inline void Note(std::string_view what, const absl::Status& status) {
  static const bool verbose = std::getenv("TRELLIS_FUZZ_VERBOSE") != nullptr;
  if (!verbose) return;
  std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(what.size()), what.data(),
               status.ToString().c_str());
}

}  // namespace trellis::fuzz

#endif  // TRELLIS_TESTS_FUZZ_FUZZ_UTIL_H_
