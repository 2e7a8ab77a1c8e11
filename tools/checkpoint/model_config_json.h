// ModelConfig as JSON, for the files that record a model: checkpoints'
// training state and exported shards. Every option of the config list
// (TRELLIS_MODEL_CONFIG_OPTIONS) is written under its flag name (numbers as
// numbers, enums by name) with the vocabulary size; reading needs the keys
// every file has had (n_layer, n_head, d_model, seq_len, vocab_size) and
// takes each other key that is present, so files written before an option
// existed load with its default.
#ifndef TRELLIS_TOOLS_CHECKPOINT_MODEL_CONFIG_JSON_H_
#define TRELLIS_TOOLS_CHECKPOINT_MODEL_CONFIG_JSON_H_

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "transformer/config.h"

namespace trellis {

nlohmann::json ModelConfigToJson(const ModelConfig& config);
// DataLoss naming the key when a value has the wrong type or is no valid
// value of its option (e.g. an unknown family).
absl::StatusOr<ModelConfig> ModelConfigFromJson(const nlohmann::json& json);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CHECKPOINT_MODEL_CONFIG_JSON_H_
