// Helpers of the tests that run trellis's programs as a user would: start
// them (under mpirun for several ranks) with output to a log file, wait with
// a time limit, and find the process of one MPI rank.
//
// Programs are the build's (TRELLIS_BINARY_DIR/bin/trellis-<name>); mpirun
// runs on loopback only. Thread safety: none needed; one thread per test.
#ifndef TRELLIS_TESTS_TOOLS_CHECKPOINT_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_CHECKPOINT_TEST_UTIL_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace trellis::test {

inline std::string Program(const std::string& name) {
  return absl::StrCat(TRELLIS_BINARY_DIR, "/bin/trellis-", name);
}

// mpirun for `ranks` ranks on loopback, oversubscribed; `export_env` names
// environment variables to pass to the ranks.
inline std::vector<std::string> Mpirun(
    int ranks, const std::vector<std::string>& export_env = {}) {
  std::vector<std::string> argv = {"mpirun",
                                   "--oversubscribe",
                                   "--allow-run-as-root",
                                   "--mca",
                                   "btl",
                                   "self,tcp",
                                   "--mca",
                                   "btl_tcp_if_include",
                                   "lo",
                                   "--mca",
                                   "oob_tcp_if_include",
                                   "lo",
                                   "-np",
                                   absl::StrCat(ranks)};
  for (const std::string& name : export_env) {
    argv.push_back("-x");
    argv.push_back(name);
  }
  return argv;
}

// Starts `argv` (found on PATH) in its own process group, stdout and stderr
// appended to `log`. Returns the pid, or -1.
inline pid_t StartProgram(const std::vector<std::string>& argv,
                          const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc =
      posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return rc == 0 ? pid : -1;
}

// Waits up to `seconds` for `pid`; on timeout kills its process group.
// Returns the exit code, 128 + signal when killed by one, or -1 on timeout.
inline int WaitProgram(pid_t pid, int seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

inline int RunProgram(const std::vector<std::string>& argv,
                      const std::string& log, int seconds = 120) {
  const pid_t pid = StartProgram(argv, log);
  return pid < 0 ? -2 : WaitProgram(pid, seconds);
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The pid of the child of `parent` whose environment has
// OMPI_COMM_WORLD_RANK=<rank>, or -1.
inline pid_t FindRank(pid_t parent, int rank) {
  const std::string want = absl::StrCat("OMPI_COMM_WORLD_RANK=", rank);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string pid, comm, state;
    long ppid = 0;
    if (!(stat >> pid >> comm >> state >> ppid) || ppid != parent) continue;
    const std::string env = ReadFile((entry.path() / "environ").string());
    size_t at = 0;
    while (at < env.size()) {
      const size_t end = env.find('\0', at);
      if (env.compare(at, end - at, want) == 0) return std::stoi(name);
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  return -1;
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TOOLS_CHECKPOINT_TEST_UTIL_H_
