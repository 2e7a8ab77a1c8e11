// The flags of the layout and device options.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "tools/options/option_flags.h"

// The option lists name their types as inside namespace trellis.
using trellis::AttentionPath;
using trellis::DeviceTransport;
using trellis::DeviceType;
using trellis::IntList;
using trellis::kDefaultAttentionPath;
using trellis::Precision;
using trellis::Recompute;
using trellis::ScheduleKind;

#define TRELLIS_DEFINE_OPTION_FLAG(group, type, name, value, help) \
  ABSL_FLAG(type, name, value, help);
TRELLIS_PARALLEL_OPTIONS(TRELLIS_DEFINE_OPTION_FLAG)
#undef TRELLIS_DEFINE_OPTION_FLAG

namespace trellis {

void ReadParallelFlags(TrainOptions& options) {
#define TRELLIS_READ_OPTION_FLAG(group, type, name, value, help) \
  options.name = absl::GetFlag(FLAGS_##name);
  TRELLIS_PARALLEL_OPTIONS(TRELLIS_READ_OPTION_FLAG)
#undef TRELLIS_READ_OPTION_FLAG
}

}  // namespace trellis
