#include "data/input_files.h"

#include <glob.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trellis {

absl::StatusOr<std::vector<std::string>> ExpandInputList(
    const std::string& list) {
  std::vector<std::string> files;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    const std::string pattern(item);
    if (pattern.find_first_of("*?[") == std::string::npos) {
      files.push_back(pattern);
      continue;
    }
    glob_t matches{};
    const int rc = glob(pattern.c_str(), GLOB_ERR, nullptr, &matches);
    if (rc == 0) {
      for (size_t i = 0; i < matches.gl_pathc; ++i) {
        files.emplace_back(matches.gl_pathv[i]);
      }
    }
    globfree(&matches);
    if (rc == GLOB_NOMATCH) {
      return absl::NotFoundError(absl::StrCat(
          "--input pattern ", pattern,
          " matches no file; check the directory and the extension"));
    }
    if (rc != 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "--input pattern ", pattern, ": cannot read a directory it names"));
    }
  }
  return files;
}

}  // namespace trellis
