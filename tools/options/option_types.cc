#include "tools/options/option_types.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace trellis {
namespace {

// Stores a parser's value, or its message as the flag parser's error.
template <typename T>
bool Store(absl::StatusOr<T> parsed, T* out, std::string* error) {
  if (!parsed.ok()) {
    *error = std::string(parsed.status().message());
    return false;
  }
  *out = *parsed;
  return true;
}

}  // namespace

absl::StatusOr<DeviceType> ParseDeviceType(absl::string_view name) {
  if (name == "cpu") return DeviceType::kCPU;
  if (name == "cuda") return DeviceType::kCUDA;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device \"", name, "\"; choose cpu or cuda"));
}

const char* DeviceTypeName(DeviceType type) {
  return type == DeviceType::kCUDA ? "cuda" : "cpu";
}

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision \"", name, "\"; choose fp32 or bf16"));
}

const char* PrecisionName(Precision precision) {
  return precision == Precision::kBf16 ? "bf16" : "fp32";
}

const char* RecomputeName(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

const char* DeviceTransportName(DeviceTransport transport) {
  return transport == DeviceTransport::kHostStaged ? "host" : "nccl";
}

bool AbslParseFlag(absl::string_view text, DeviceType* out,
                   std::string* error) {
  return Store(ParseDeviceType(text), out, error);
}
std::string AbslUnparseFlag(DeviceType value) { return DeviceTypeName(value); }

bool AbslParseFlag(absl::string_view text, Precision* out, std::string* error) {
  return Store(ParsePrecision(text), out, error);
}
std::string AbslUnparseFlag(Precision value) { return PrecisionName(value); }

bool AbslParseFlag(absl::string_view text, Recompute* out, std::string* error) {
  return Store(ParseRecompute(std::string(text)), out, error);
}
std::string AbslUnparseFlag(Recompute value) { return RecomputeName(value); }

bool AbslParseFlag(absl::string_view text, DeviceTransport* out,
                   std::string* error) {
  return Store(ParseDeviceTransport(std::string(text)), out, error);
}
std::string AbslUnparseFlag(DeviceTransport value) {
  return DeviceTransportName(value);
}

bool AbslParseFlag(absl::string_view text, ScheduleKind* out,
                   std::string* error) {
  return Store(ParseScheduleKind(std::string(text)), out, error);
}
std::string AbslUnparseFlag(ScheduleKind value) {
  return ScheduleKindName(value);
}

bool AbslParseFlag(absl::string_view text, AttentionPath* out,
                   std::string* error) {
  return Store(ParseAttentionPath(std::string_view(text.data(), text.size())),
               out, error);
}
std::string AbslUnparseFlag(AttentionPath value) {
  return std::string(AttentionPathName(value));
}

bool AbslParseFlag(absl::string_view text, ModelFamilyKind* out,
                   std::string* error) {
  return Store(ParseModelFamily(std::string(text)), out, error);
}
std::string AbslUnparseFlag(ModelFamilyKind value) {
  return ModelFamilyName(value);
}

bool AbslParseFlag(absl::string_view text, RopeScalingType* out,
                   std::string* error) {
  return Store(ParseRopeScalingType(std::string_view(text.data(), text.size())),
               out, error);
}
std::string AbslUnparseFlag(RopeScalingType value) {
  return std::string(RopeScalingTypeName(value));
}

bool AbslParseFlag(absl::string_view text, IntList* out, std::string* error) {
  IntList values;
  if (!text.empty()) {
    for (absl::string_view item : absl::StrSplit(text, ',')) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(item, &n)) {
        *error = absl::StrCat("'", item,
                              "' is not an integer; give a comma-separated "
                              "list such as 3,5,5,3");
        return false;
      }
      values.push_back(n);
    }
  }
  *out = std::move(values);
  return true;
}

std::string AbslUnparseFlag(const IntList& value) {
  return absl::StrJoin(value, ",");
}

std::ostream& operator<<(std::ostream& out, DeviceType value) {
  return out << DeviceTypeName(value);
}
std::ostream& operator<<(std::ostream& out, Precision value) {
  return out << PrecisionName(value);
}
std::ostream& operator<<(std::ostream& out, Recompute value) {
  return out << RecomputeName(value);
}
std::ostream& operator<<(std::ostream& out, DeviceTransport value) {
  return out << DeviceTransportName(value);
}
std::ostream& operator<<(std::ostream& out, ScheduleKind value) {
  return out << ScheduleKindName(value);
}
std::ostream& operator<<(std::ostream& out, AttentionPath value) {
  return out << AttentionPathName(value);
}
std::ostream& operator<<(std::ostream& out, ModelFamilyKind value) {
  return out << ModelFamilyName(value);
}
std::ostream& operator<<(std::ostream& out, RopeScalingType value) {
  return out << RopeScalingTypeName(value);
}

}  // namespace trellis
