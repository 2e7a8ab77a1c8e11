// Fuzz target of a checkpoint's state.json: ReadTrainingState (what
// --resume, trellis-eval, trellis-generate and trellis-convert read), then,
// for an accepted state, the tensor list of its model (ModelTensorShapes,
// as trellis-convert takes it), which must be bounded whatever the file
// says. (Models deeper than kListedLayers are within bounds, but listing
// their up to 2^17 layers under the sanitizers would take seconds an input:
// they are checked without the list.)
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "transformer/model_family.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = trellis::fuzz::ScratchDir();
  trellis::fuzz::WriteFile(dir + "/state.json",
                           trellis::fuzz::AsText(data, size));
  const absl::StatusOr<trellis::TrainingState> state =
      trellis::ReadTrainingState(dir);
  trellis::fuzz::Note("ReadTrainingState", state.status());
  if (!state.ok()) return 0;
  trellis::fuzz::Expect(state->model.Validate().ok(),
                        "an accepted state.json holds an invalid model");
  trellis::fuzz::Expect(state->dp >= 1 && state->tp >= 1 && state->pp >= 1,
                        "an accepted state.json holds a layout below 1");
  constexpr int64_t kListedLayers = 1024;
  if (state->model.n_layer <= kListedLayers) {
    (void)trellis::ModelTensorShapes(state->model);
  }
  return 0;
}
