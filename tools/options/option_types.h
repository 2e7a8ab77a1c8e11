// The typed values of trainer options: each enum-like option is parsed once,
// where its flag is read (AbslParseFlag, so a bad value is refused by the
// flag parser with the accepted names), and the trainer only ever sees the
// enum. AbslUnparseFlag gives the name back, so options print and store as
// the flags that reproduce them.
//
// The names of model families, schedules, recompute modes, GPU transports
// and attention paths are their own layers' (ParseModelFamily,
// ParseRopeScalingType, ParseScheduleKind, ParseRecompute,
// ParseDeviceTransport, ParseAttentionPath); the device and precision names are
// defined here.
#ifndef TRELLIS_TOOLS_OPTIONS_OPTION_TYPES_H_
#define TRELLIS_TOOLS_OPTIONS_OPTION_TYPES_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "framework/kernels/attention_path.h"
#include "framework/tensor.h"
#include "parallel/device_groups.h"
#include "parallel/schedule.h"
#include "transformer/chunk_options.h"
#include "transformer/config.h"

namespace trellis {

// The arithmetic of a run: float32 throughout, or (CUDA) bfloat16 weights,
// activations and GEMM inputs with float32 masters, gradients and moments.
enum class Precision { kFp32, kBf16 };

// A comma-separated list of integers ("3,5,5,3"; "" is empty).
struct IntList : std::vector<int64_t> {
  using std::vector<int64_t>::vector;
};

// "cpu", "cuda".
absl::StatusOr<DeviceType> ParseDeviceType(absl::string_view name);
const char* DeviceTypeName(DeviceType type);
// "fp32", "bf16".
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);
const char* PrecisionName(Precision precision);
const char* RecomputeName(Recompute recompute);
const char* DeviceTransportName(DeviceTransport transport);

// Flag marshalling (found by argument-dependent lookup).
bool AbslParseFlag(absl::string_view text, DeviceType* out, std::string* error);
std::string AbslUnparseFlag(DeviceType value);
bool AbslParseFlag(absl::string_view text, Precision* out, std::string* error);
std::string AbslUnparseFlag(Precision value);
bool AbslParseFlag(absl::string_view text, Recompute* out, std::string* error);
std::string AbslUnparseFlag(Recompute value);
bool AbslParseFlag(absl::string_view text, DeviceTransport* out,
                   std::string* error);
std::string AbslUnparseFlag(DeviceTransport value);
bool AbslParseFlag(absl::string_view text, ScheduleKind* out,
                   std::string* error);
std::string AbslUnparseFlag(ScheduleKind value);
bool AbslParseFlag(absl::string_view text, AttentionPath* out,
                   std::string* error);
std::string AbslUnparseFlag(AttentionPath value);
bool AbslParseFlag(absl::string_view text, ModelFamilyKind* out,
                   std::string* error);
std::string AbslUnparseFlag(ModelFamilyKind value);
bool AbslParseFlag(absl::string_view text, RopeScalingType* out,
                   std::string* error);
std::string AbslUnparseFlag(RopeScalingType value);
bool AbslParseFlag(absl::string_view text, IntList* out, std::string* error);
std::string AbslUnparseFlag(const IntList& value);

// The names, for logs and test messages.
std::ostream& operator<<(std::ostream& out, DeviceType value);
std::ostream& operator<<(std::ostream& out, Precision value);
std::ostream& operator<<(std::ostream& out, Recompute value);
std::ostream& operator<<(std::ostream& out, DeviceTransport value);
std::ostream& operator<<(std::ostream& out, ScheduleKind value);
std::ostream& operator<<(std::ostream& out, AttentionPath value);
std::ostream& operator<<(std::ostream& out, ModelFamilyKind value);
std::ostream& operator<<(std::ostream& out, RopeScalingType value);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_OPTIONS_OPTION_TYPES_H_
