#include "framework/kernels/attention_path.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trellis {

std::string_view AttentionPathName(AttentionPath path) {
  switch (path) {
    case AttentionPath::kCudnn:
      return "cudnn";
    case AttentionPath::kMma:
      return "mma";
    case AttentionPath::kSimt:
      return "simt";
  }
  return "unknown";
}

absl::StatusOr<AttentionPath> ParseAttentionPath(std::string_view name) {
  for (AttentionPath path :
       {AttentionPath::kCudnn, AttentionPath::kMma, AttentionPath::kSimt}) {
    if (name == AttentionPathName(path)) return path;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--attention=", std::string(name),
                   " is not an attention path; use cudnn, mma or simt"));
}

}  // namespace trellis
