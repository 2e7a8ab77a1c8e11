// The inputs of trellis-preprocess: a comma-separated list of file names and
// glob patterns, expanded in order.
//
// Each item that holds a glob character (* ? [) is expanded with glob(3),
// its matches sorted by name; an item without one is taken as it is. A
// pattern that matches no file is an error naming it (a forgotten
// extension should not make an empty corpus).
//
// Thread safety: pure function (glob(3) reads the file system).
#ifndef TRELLIS_DATA_INPUT_FILES_H_
#define TRELLIS_DATA_INPUT_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trellis {

// The files `list` names, in order. Empty items are ignored.
absl::StatusOr<std::vector<std::string>> ExpandInputList(
    const std::string& list);

}  // namespace trellis

#endif  // TRELLIS_DATA_INPUT_FILES_H_
