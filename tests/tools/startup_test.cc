// Start-up of trellis-train with a very deep model: it must reach the memory
// check in seconds (registration is linear in the layers) and end promptly,
// with one line and a nonzero exit, on a stop signal sent meanwhile.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/tools/tools_test_util.h"

extern char** environ;

namespace trellis {
namespace {

using ::testing::HasSubstr;

// Whether process `pid` has a handler for `signal` (its SigCgt mask).
bool Catches(pid_t pid, int signal) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    uint64_t mask = 0;
    if (line.rfind("SigCgt:", 0) == 0 &&
        absl::SimpleHexAtoi(line.substr(line.find_first_not_of(" \t", 7)),
                            &mask)) {
      return (mask >> (signal - 1)) & 1;
    }
  }
  return false;
}

struct Outcome {
  int status = 0;
  double seconds = 0;
  std::string err;
};

// Starts trellis-train with `args`, stdout to /dev/null and stderr to
// `err_path`; its pid, or -1.
pid_t SpawnTrain(const std::vector<std::string>& args,
                 const std::string& err_path) {
  const std::string binary =
      absl::StrCat(TRELLIS_BINARY_DIR, "/bin/trellis-train");
  std::vector<std::string> strings = {binary};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                   O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr,
                             argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << binary;
  return rc == 0 ? pid : -1;
}

// Runs trellis-train with `args` in `dir`; sends `signal` `signal_after`
// its handler is installed (none when signal is 0).
Outcome RunTrain(const std::vector<std::string>& args, const std::string& dir,
                 int signal, std::chrono::milliseconds signal_after) {
  const std::string err_path = dir + "/stderr.txt";
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = SpawnTrain(args, err_path);
  Outcome outcome;
  if (pid < 0) return outcome;
  if (signal != 0) {
    // Only once the program handles the signal (first thing in main).
    for (int i = 0; i < 600 && !Catches(pid, signal); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::this_thread::sleep_for(signal_after);
    kill(pid, signal);
  }
  EXPECT_EQ(waitpid(pid, &outcome.status, 0), pid);
  outcome.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::ifstream in(err_path);
  outcome.err.assign(std::istreambuf_iterator<char>(in), {});
  return outcome;
}

// 100,000 layers of width 32: about 1.2e9 parameters, far over 1 GiB.
std::vector<std::string> DeepFlags(const std::string& data) {
  return {"--data=" + data,        "--n_layer=100000", "--n_head=2",
          "--d_model=32",          "--seq_len=32",     "--micro_batch_size=2",
          "--global_batch_size=4", "--eval_every=0",   "--memory_budget_gb=1"};
}

class StartupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    data_ = dir_ + "/byte.h5";
    test::WriteTokenFile(data_, test::kByteVocab, 20000);
  }
  std::string dir_, data_;
};

// Generous bounds for a loaded machine: the quadratic registration took
// minutes for a tenth of these layers.
constexpr double kPromptSeconds = 60;

TEST_F(StartupTest, HundredThousandLayersReachTheMemoryCheck) {
  const Outcome r = RunTrain(DeepFlags(data_), dir_, 0, {});
  ASSERT_TRUE(WIFEXITED(r.status)) << r.err;
  EXPECT_NE(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("trellis-train: error: the run needs"));
  EXPECT_THAT(r.err, HasSubstr("but 1.00 GiB is available"));
  EXPECT_LT(r.seconds, kPromptSeconds);
}

TEST_F(StartupTest, StopSignalDuringStartupEndsTheRun) {
  const Outcome r =
      RunTrain(DeepFlags(data_), dir_, SIGTERM, std::chrono::milliseconds(200));
  ASSERT_TRUE(WIFEXITED(r.status)) << "killed by a signal: " << r.err;
  EXPECT_NE(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("stopped during start-up"));
  EXPECT_THAT(r.err, HasSubstr("(SIGTERM)"));
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_LT(r.seconds, kPromptSeconds);
}

// A stop signal that arrives before the flags are read (MPI_Init and the
// flag file come first) ends the run as one during start-up does; it used
// to kill it silently, the handler being installed after both. The flags
// come from a FIFO, so the program waits inside flag parsing until the
// signal has been sent.
TEST_F(StartupTest, StopSignalBeforeTheFlagsAreReadEndsTheRun) {
  const std::string fifo = dir_ + "/flags.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string err_path = dir_ + "/stderr.txt";
  const pid_t pid = SpawnTrain({"--flagfile=" + fifo}, err_path);
  ASSERT_GT(pid, 0);
  // The flag file is opened once MPI is up; only then is the signal sent.
  int status = 0;
  int fd = -1;
  for (int i = 0; i < 1200 && fd < 0; ++i) {
    fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // ENXIO: no reader yet
    if (fd < 0) {
      ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "ended early";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ASSERT_GE(fd, 0) << "trellis-train never read its flag file";
  kill(pid, SIGUSR1);
  std::string flags;
  for (const std::string& flag : DeepFlags(data_)) flags += flag + "\n";
  // The program may be gone already (killed by the signal): no SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  EXPECT_EQ(write(fd, flags.data(), flags.size()),
            static_cast<ssize_t>(flags.size()));
  close(fd);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::ifstream in(err_path);
  const std::string err(std::istreambuf_iterator<char>(in), {});
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_NE(WEXITSTATUS(status), 0) << err;
  EXPECT_THAT(err, HasSubstr("stopped during start-up"));
  EXPECT_THAT(err, HasSubstr("(SIGUSR1)"));
  EXPECT_EQ(err.find('\n'), err.size() - 1) << "not one line: " << err;
}

}  // namespace
}  // namespace trellis
