// The fixture of the tests that feed bad input to the real programs
// (build/bin/trellis-<program>): run one with its output captured, describe
// a run for a failure message, and expect a clean refusal — a nonzero exit
// status (never a signal) and, for trellis's own errors, exactly one stderr
// line, "trellis-<program>: error: ...", naming the flag or file at fault.
//
// Each test gets its own scratch directory and a byte-vocabulary token file
// in it. Thread safety: none needed; one thread per test.
#ifndef TRELLIS_TESTS_TOOLS_PROGRAMS_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_PROGRAMS_TEST_UTIL_H_

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/tools/tools_test_util.h"

extern char** environ;

namespace trellis::programs_test {

// How a program run ended, and what it printed.
struct ProgramResult {
  bool exited = false;  // false: killed by a signal (or never started)
  int exit_code = -1;
  int signal = 0;
  std::string out, err;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs build/bin/trellis-<program> with `args` in `dir`, stdout and stderr
// captured to files there.
inline ProgramResult RunProgram(const std::string& program,
                                const std::vector<std::string>& args,
                                const std::string& dir) {
  const std::string binary =
      absl::StrCat(TRELLIS_BINARY_DIR, "/bin/trellis-", program);
  const std::string out_path = dir + "/stdout.txt";
  const std::string err_path = dir + "/stderr.txt";
  std::vector<std::string> argv_strings = {binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = {"OPENBLAS_NUM_THREADS=1"};
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ProgramResult result;
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr,
                             argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << binary;
  if (rc != 0) return result;
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  result.exited = WIFEXITED(status);
  result.exit_code = result.exited ? WEXITSTATUS(status) : -1;
  result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

inline std::string Describe(const std::string& program,
                            const std::vector<std::string>& args,
                            const ProgramResult& r) {
  return absl::StrCat("trellis-", program, " ", absl::StrJoin(args, " "),
                      "\nexit ", r.exit_code, " signal ", r.signal,
                      "\nstderr:\n", r.err, "stdout:\n", r.out);
}

// The small model every run here trains (a fraction of a second).
inline std::vector<std::string> TinyFlags(const std::string& data) {
  return {"--n_layer=1",   "--n_head=2",           "--d_model=16",
          "--seq_len=16",  "--micro_batch_size=2", "--global_batch_size=4",
          "--steps=2",     "--warmup_steps=1",     "--eval_every=0",
          "--data=" + data};
}

// A scratch directory with a byte-vocabulary token file (`byte_data_`), and
// the runs and expectations of the tests above. Lives outside an anonymous
// namespace: the test files that share it link into one executable, and
// GoogleTest requires one fixture type per suite.
class ProgramsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    byte_data_ = dir_ + "/byte.h5";
    test::WriteTokenFile(byte_data_, test::kByteVocab, 20000);
  }

  // Expects a clean failure: a nonzero exit and one stderr line that starts
  // with "trellis-<program>: error: " and contains every one of `names`.
  void ExpectError(const std::string& program,
                   const std::vector<std::string>& args,
                   const std::vector<std::string>& names) {
    const ProgramResult r = RunProgram(program, args, dir_);
    const std::string what = Describe(program, args, r);
    EXPECT_TRUE(r.exited) << what;
    EXPECT_NE(r.exit_code, 0) << what;
    EXPECT_THAT(r.err, ::testing::StartsWith(
                           absl::StrCat("trellis-", program, ": error: ")))
        << what;
    ASSERT_FALSE(r.err.empty()) << what;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << what;
    for (const std::string& name : names) {
      EXPECT_THAT(r.err, ::testing::HasSubstr(name)) << what;
    }
  }

  // Expects a nonzero exit without a crash (absl's own flag errors).
  void ExpectRefused(const std::string& program,
                     const std::vector<std::string>& args,
                     const std::string& name) {
    const ProgramResult r = RunProgram(program, args, dir_);
    const std::string what = Describe(program, args, r);
    EXPECT_TRUE(r.exited) << what;
    EXPECT_NE(r.exit_code, 0) << what;
    EXPECT_THAT(r.err, ::testing::HasSubstr(name)) << what;
  }

  void Train(std::vector<std::string> args,
             const std::vector<std::string>& names) {
    std::vector<std::string> all = TinyFlags(byte_data_);
    all.insert(all.end(), args.begin(), args.end());
    ExpectError("train", all, names);
  }

  // Trains the tiny model with `args` added; expects success.
  ProgramResult TrainOk(const std::vector<std::string>& args) {
    std::vector<std::string> all = TinyFlags(byte_data_);
    all.insert(all.end(), args.begin(), args.end());
    const ProgramResult r = RunProgram("train", all, dir_);
    EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe("train", all, r);
    return r;
  }

  // Trains the tiny model for 2 steps into <dir>/ckpt; returns that dir.
  std::string MakeCheckpoint() {
    std::vector<std::string> args = TinyFlags(byte_data_);
    args.push_back("--save_dir=" + dir_ + "/ckpt");
    const ProgramResult r = RunProgram("train", args, dir_);
    EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe("train", args, r);
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt/step_00000002/model.h5"));
    return dir_ + "/ckpt";
  }

  // A copy of the byte token file with `damage` applied to its bytes.
  std::string Damaged(const std::string& name,
                      void (*damage)(std::string& bytes)) {
    std::string bytes = ReadFile(byte_data_);
    damage(bytes);
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return path;
  }

  std::string dir_, byte_data_;
};

}  // namespace trellis::programs_test

#endif  // TRELLIS_TESTS_TOOLS_PROGRAMS_TEST_UTIL_H_
