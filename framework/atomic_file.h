// Writing a file so that readers see either the old file or the whole new
// one: the bytes go to "<path>.tmp", are flushed and fsynced, and the
// temporary file is renamed over `path`. On any failure the temporary file
// is removed and `path` is untouched.
#ifndef TRELLIS_FRAMEWORK_ATOMIC_FILE_H_
#define TRELLIS_FRAMEWORK_ATOMIC_FILE_H_

#include <cstdio>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace trellis {

// `write` puts the file's bytes into the open stream and returns whether
// every write succeeded.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::function<bool(std::FILE*)>& write);

// `text` as the whole file `path`, written as above.
absl::Status WriteTextFileAtomically(const std::string& path,
                                     const std::string& text);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_ATOMIC_FILE_H_
