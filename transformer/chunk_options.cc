#include "transformer/chunk_options.h"

#include "absl/strings/str_cat.h"

namespace trellis {

absl::StatusOr<Recompute> ParseRecompute(const std::string& name) {
  if (name == "none") return Recompute::kNone;
  if (name == "selective") return Recompute::kSelective;
  if (name == "full") return Recompute::kFull;
  return absl::InvalidArgumentError(
      absl::StrCat("--recompute=", name, " is not none, selective or full"));
}

DType StatsDType(DType dtype) {
  return dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

}  // namespace trellis
