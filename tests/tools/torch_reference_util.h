// Runs the PyTorch reference scripts of scripts/torch_reference/ from the
// tests and reads their JSON result.
//
// The scripts run under the tests' Python (TRELLIS_PYTHON: the first of
// the python3 on PATH and /usr/bin/python3 that imports torch, or
// -DTRELLIS_TEST_PYTHON; tests/CMakeLists.txt). PyTorch is a test
// dependency, not an option: a script that reports it missing (it writes
// {"skipped": ...}) fails the test with a line naming python3-torch and
// scripts/install-deps.sh, so a comparison is never skipped in silence.
//
// Thread safety: none needed; one thread per test.
#ifndef TRELLIS_TESTS_TOOLS_TORCH_REFERENCE_UTIL_H_
#define TRELLIS_TESTS_TOOLS_TORCH_REFERENCE_UTIL_H_

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/tools/checkpoint_test_util.h"

namespace trellis::test {

// The Python 3 interpreter the tests run scripts with.
inline std::string Python() { return TRELLIS_PYTHON; }

// Runs scripts/torch_reference/<script> `args` --json=<dir>/<script>.json
// and returns the JSON object it wrote; null after a failure, which it
// reports (a missing PyTorch included).
inline nlohmann::json RunTorchReference(const std::string& script,
                                        const std::vector<std::string>& args,
                                        const std::string& dir) {
  const std::string json = absl::StrCat(dir, "/", script, ".json");
  const std::string log = absl::StrCat(dir, "/", script, ".log");
  std::filesystem::remove(json);
  // -B: no __pycache__ written into the source tree (tests run in
  // parallel, and the checkout may be read-only).
  std::vector<std::string> argv = {
      Python(), "-B",
      absl::StrCat(TRELLIS_SOURCE_DIR, "/scripts/torch_reference/", script)};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--json=" + json);
  const int rc = RunProgram(argv, log, /*seconds=*/300);
  if (rc != 0) {
    ADD_FAILURE() << script << " exited " << rc << ":\n" << ReadFile(log);
    return nullptr;
  }
  const nlohmann::json j = nlohmann::json::parse(ReadFile(json), nullptr,
                                                 /*allow_exceptions=*/false);
  if (!j.is_object()) {
    ADD_FAILURE() << script << " wrote no JSON object:\n" << ReadFile(log);
    return nullptr;
  }
  if (j.contains("skipped")) {
    ADD_FAILURE() << "the PyTorch reference cannot run under " << Python()
                  << ": " << j["skipped"].get<std::string>()
                  << "; install python3-torch (scripts/install-deps.sh) or "
                     "configure with -DTRELLIS_TEST_PYTHON=<a python3 that "
                     "imports torch>";
    return nullptr;
  }
  return j;
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TOOLS_TORCH_REFERENCE_UTIL_H_
