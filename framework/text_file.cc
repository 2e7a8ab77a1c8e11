#include "framework/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace trellis {
namespace {

std::string Reason(int error) { return std::strerror(error); }

}  // namespace

absl::StatusOr<std::string> ReadTextFile(const std::string& path,
                                         int64_t max_bytes) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open: ", Reason(error)));
  }
  if (S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory, not a file"));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a regular file"));
  }
  if (info.st_size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", info.st_size, " bytes, more than the ",
                     max_bytes, " such a file may hold"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open: ", Reason(errno)));
  }
  std::string text(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : 0;
      ::close(fd);
      if (n == 0) {  // Shrank while read: what is there is the file.
        text.resize(done);
        return text;
      }
      return absl::UnavailableError(
          absl::StrCat(path, ": cannot read: ", Reason(error)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return text;
}

}  // namespace trellis
