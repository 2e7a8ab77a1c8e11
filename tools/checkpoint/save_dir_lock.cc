#include "tools/checkpoint/save_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace trellis {
namespace {

// "host H, pid P, since YYYY-MM-DD HH:MM:SS UTC".
std::string HolderLine() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  const std::time_t now = std::time(nullptr);
  std::tm utc = {};
  ::gmtime_r(&now, &utc);
  char when[32] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &utc);
  return absl::StrCat("host ", host, ", pid ", ::getpid(), ", since ", when,
                      "\n");
}

// The holder line the lock file holds, at most one short line.
std::string ReadHolder(int fd) {
  char buffer[512] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (n <= 0) return "an unknown process";
  std::string line(buffer, static_cast<size_t>(n));
  line = line.substr(0, line.find('\n'));
  return line.empty() ? "an unknown process" : line;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SaveDirLock>> SaveDirLock::Acquire(
    const std::string& save_dir) {
  const std::string path =
      (std::filesystem::path(save_dir) / kFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, " (", std::strerror(errno),
                     "); choose a writable --save_dir"));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = ReadHolder(fd);
    ::close(fd);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--save_dir=", save_dir, " is in use by another run (", holder,
          "); give this run another --save_dir, or wait for that one to end"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot lock ", path, " (", std::strerror(error),
        "); --save_dir must be on a file system that supports locks"));
  }
  // Ours now: say who holds it (best effort: the lock is what counts).
  const std::string holder = HolderLine();
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written =
        ::pwrite(fd, holder.data(), holder.size(), 0);
  }
  return std::unique_ptr<SaveDirLock>(new SaveDirLock(fd));
}

SaveDirLock::~SaveDirLock() { ::close(fd_); }

}  // namespace trellis
