#include "tools/checkpoint/model_config_json.h"

#include <string>
#include <type_traits>

#include "absl/flags/marshalling.h"
#include "absl/strings/str_cat.h"
#include "framework/status.h"
#include "tools/options/option_types.h"

namespace trellis {
namespace {

template <typename T>
void Put(nlohmann::json& json, const char* key, const T& value) {
  if constexpr (std::is_arithmetic_v<T>) {
    json[key] = value;
  } else {
    json[key] = absl::UnparseFlag(value);
  }
}

template <typename T>
absl::Status Take(const nlohmann::json& json, const char* key, T& value) {
  if (!json.contains(key)) return absl::OkStatus();
  const nlohmann::json& v = json.at(key);
  std::string error;
  if constexpr (std::is_same_v<T, bool>) {
    if (v.is_boolean()) {
      value = v.get<bool>();
      return absl::OkStatus();
    }
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_integer()) {
      value = v.get<T>();
      return absl::OkStatus();
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (v.is_number()) {
      value = v.get<T>();
      return absl::OkStatus();
    }
  } else {
    if (v.is_string() &&
        absl::ParseFlag(v.get<std::string>(), &value, &error)) {
      return absl::OkStatus();
    }
  }
  return absl::DataLossError(absl::StrCat("the model's \"", key, "\" is ",
                                          v.dump(), ", not a valid value",
                                          error.empty() ? "" : ": ", error));
}

}  // namespace

nlohmann::json ModelConfigToJson(const ModelConfig& config) {
  nlohmann::json json = nlohmann::json::object();
#define TRELLIS_MODEL_JSON_PUT(group, type, name, value, help) \
  Put(json, #name, config.name);
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_MODEL_JSON_PUT)
#undef TRELLIS_MODEL_JSON_PUT
  Put(json, "vocab_size", config.vocab_size);
  return json;
}

absl::StatusOr<ModelConfig> ModelConfigFromJson(const nlohmann::json& json) {
  if (!json.is_object()) {
    return absl::DataLossError(
        absl::StrCat("the model config is ", json.dump(), ", not an object"));
  }
  // Every file has recorded these since the first format.
  for (const char* key :
       {"n_layer", "n_head", "d_model", "seq_len", "vocab_size"}) {
    if (!json.contains(key)) {
      return absl::DataLossError(
          absl::StrCat("the model config lacks \"", key, "\""));
    }
  }
  ModelConfig config;
#define TRELLIS_MODEL_JSON_TAKE(group, type, name, value, help) \
  TRELLIS_RETURN_IF_ERROR(Take(json, #name, config.name));
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_MODEL_JSON_TAKE)
#undef TRELLIS_MODEL_JSON_TAKE
  TRELLIS_RETURN_IF_ERROR(Take(json, "vocab_size", config.vocab_size));
  return config;
}

}  // namespace trellis
