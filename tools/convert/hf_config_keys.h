// Reading keys of a Hugging Face config.json: a key's value or a fallback,
// and the one-line refusal naming the key and its value that the
// architectures' readers (llama_tensors, moe_tensors, qwen3_tensors) share.
//
// Thread safety: pure functions over values.
#ifndef TRELLIS_TOOLS_CONVERT_HF_CONFIG_KEYS_H_
#define TRELLIS_TOOLS_CONVERT_HF_CONFIG_KEYS_H_

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trellis::hf_config {

// The value of `key`, or `fallback` when absent or null.
inline nlohmann::json Get(const nlohmann::json& j, const char* key,
                          nlohmann::json fallback) {
  return j.contains(key) && !j.at(key).is_null() ? j.at(key) : fallback;
}

// "<path>: <key> <value> <why>".
inline absl::Status Refuse(const std::string& path, const std::string& key,
                           const nlohmann::json& value,
                           const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", key, " ", value.dump(), " ", why));
}

}  // namespace trellis::hf_config

#endif  // TRELLIS_TOOLS_CONVERT_HF_CONFIG_KEYS_H_
