// The flags of the model's shape and of the run's options.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "tools/options/option_flags.h"

// The option lists name their types as inside namespace trellis.
using trellis::IntList;
using trellis::ModelFamilyKind;
using trellis::RopeScalingType;

#define TRELLIS_DEFINE_OPTION_FLAG(group, type, name, value, help) \
  ABSL_FLAG(type, name, value, help);
TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_DEFINE_OPTION_FLAG)
TRELLIS_RUN_OPTIONS(TRELLIS_DEFINE_OPTION_FLAG)
#undef TRELLIS_DEFINE_OPTION_FLAG

namespace trellis {

void ReadModelAndRunFlags(TrainOptions& options) {
#define TRELLIS_READ_MODEL_FLAG(group, type, name, value, help) \
  options.model.name = absl::GetFlag(FLAGS_##name);
#define TRELLIS_READ_OPTION_FLAG(group, type, name, value, help) \
  options.name = absl::GetFlag(FLAGS_##name);
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_READ_MODEL_FLAG)
  TRELLIS_RUN_OPTIONS(TRELLIS_READ_OPTION_FLAG)
#undef TRELLIS_READ_MODEL_FLAG
#undef TRELLIS_READ_OPTION_FLAG
}

}  // namespace trellis
