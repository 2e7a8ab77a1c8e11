// Reading a whole file that a user names (a config, a state.json, a cluster
// description) with one clear error whatever is wrong with the path: a
// directory or a device where a file is expected is said as such, not as a
// short read or an exception out of the stream library.
//
// Thread safety: none needed (no shared state).
#ifndef TRELLIS_FRAMEWORK_TEXT_FILE_H_
#define TRELLIS_FRAMEWORK_TEXT_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace trellis {

// The bytes of the regular file `path`, at most `max_bytes` of them.
// Errors, each naming `path`: NotFound when nothing is there;
// InvalidArgument when it is a directory or not a regular file, or larger
// than max_bytes; Unavailable when it cannot be opened or read (the
// system's reason).
absl::StatusOr<std::string> ReadTextFile(const std::string& path,
                                         int64_t max_bytes = int64_t{1} << 30);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_TEXT_FILE_H_
