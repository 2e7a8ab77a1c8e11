#include "framework/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace trellis {

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::function<bool(std::FILE*)>& write) {
  const std::string tmp = path + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  if (out == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  }
  bool ok = write(out);
  ok = std::fflush(out) == 0 && ok;
  ok = ::fsync(::fileno(out)) == 0 && ok;
  ok = std::fclose(out) == 0 && ok;
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) {
    std::filesystem::remove(tmp, ec);
    return absl::InternalError(absl::StrCat(
        path, ": writing failed; check the disk has room and is writable"));
  }
  return absl::OkStatus();
}

absl::Status WriteTextFileAtomically(const std::string& path,
                                     const std::string& text) {
  return WriteFileAtomically(path, [&](std::FILE* out) {
    return std::fwrite(text.data(), 1, text.size(), out) == text.size();
  });
}

}  // namespace trellis
