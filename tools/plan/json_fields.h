// Lenient typed reads of the planner's JSON files (kernel cost tables,
// trellis-bench summaries): a field's value when it is there with the
// expected type, else the fallback, so that a malformed file reaches its
// reader's one-line error instead of nlohmann's type_error. A `j` that is
// not an object has no fields.
//
// Thread safety: pure functions.
#ifndef TRELLIS_TOOLS_PLAN_JSON_FIELDS_H_
#define TRELLIS_TOOLS_PLAN_JSON_FIELDS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace trellis {

inline const nlohmann::json* FieldOf(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

inline std::string StringOr(const nlohmann::json& j, const char* key,
                            std::string fallback = "") {
  const nlohmann::json* f = FieldOf(j, key);
  return f != nullptr && f->is_string() ? f->get<std::string>() : fallback;
}

inline double NumberOr(const nlohmann::json& j, const char* key,
                       double fallback = 0) {
  const nlohmann::json* f = FieldOf(j, key);
  return f != nullptr && f->is_number() ? f->get<double>() : fallback;
}

inline int64_t IntegerOr(const nlohmann::json& j, const char* key,
                         int64_t fallback = 0) {
  const nlohmann::json* f = FieldOf(j, key);
  return f != nullptr && f->is_number_integer() ? f->get<int64_t>() : fallback;
}

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_JSON_FIELDS_H_
