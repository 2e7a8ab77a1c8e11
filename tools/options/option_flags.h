// The command-line flags of TrainOptions, defined from the option lists
// (TRELLIS_MODEL_CONFIG_OPTIONS, TRELLIS_RUN_OPTIONS, TRELLIS_PARALLEL_OPTIONS)
// so that each flag's name, type, default and help are stated once.
//
// Each function lives in its own translation unit with the flags it reads,
// so a program links the flags it calls for and no others: trellis-train
// reads both sets, trellis-eval only the layout and device flags.
//
// REQUIRES: absl::ParseCommandLine has run.
#ifndef TRELLIS_TOOLS_OPTIONS_OPTION_FLAGS_H_
#define TRELLIS_TOOLS_OPTIONS_OPTION_FLAGS_H_

#include "tools/options/options.h"

namespace trellis {

// Sets the model's shape and the run's options (data, batch, optimization,
// checkpoints, logging) from their flags.
void ReadModelAndRunFlags(TrainOptions& options);

// Sets the layout and device options from their flags.
void ReadParallelFlags(TrainOptions& options);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_OPTIONS_OPTION_FLAGS_H_
