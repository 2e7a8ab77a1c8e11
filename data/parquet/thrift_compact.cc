// The compact protocol's decoder (thrift_compact.h).
#include "data/parquet/thrift_compact.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "framework/status.h"

namespace trellis::parquet {
namespace {

constexpr int kMaxVarintBytes = 10;

bool IsKnownType(uint8_t type) {
  return type >= static_cast<uint8_t>(ThriftType::kTrue) &&
         type <= static_cast<uint8_t>(ThriftType::kUuid);
}

int64_t ZigZag(uint64_t n) {
  return static_cast<int64_t>(n >> 1) ^ -static_cast<int64_t>(n & 1);
}

}  // namespace

absl::Status CompactReader::Error(absl::string_view what) const {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed Thrift at byte ", pos_, ": ", what));
}

absl::StatusOr<uint8_t> CompactReader::ReadByte() {
  if (pos_ >= bytes_.size()) return Error("the data ends early");
  return static_cast<uint8_t>(bytes_[pos_++]);
}

absl::StatusOr<uint64_t> CompactReader::ReadVarint() {
  uint64_t value = 0;
  for (int i = 0; i < kMaxVarintBytes; ++i) {
    TRELLIS_ASSIGN_OR_RETURN(const uint8_t byte, ReadByte());
    if (i == kMaxVarintBytes - 1 && byte > 1) {
      return Error("a varint longer than 64 bits");
    }
    value |= static_cast<uint64_t>(byte & 0x7F) << (7 * i);
    if ((byte & 0x80) == 0) return value;
  }
  return Error("a varint longer than 64 bits");
}

absl::Status CompactReader::SkipBytes(uint64_t count) {
  if (count > bytes_.size() - pos_) return Error("the data ends early");
  pos_ += static_cast<size_t>(count);
  return absl::OkStatus();
}

absl::Status CompactReader::Enter() {
  if (++depth_ > kMaxDepth) {
    return Error(absl::StrCat("nested deeper than ", kMaxDepth));
  }
  return absl::OkStatus();
}

absl::Status CompactReader::ReadStruct(ThriftType type, FieldFn field) {
  if (type != ThriftType::kStruct) {
    return Error(absl::StrCat("expected a struct, found wire type ",
                              static_cast<int>(type)));
  }
  TRELLIS_RETURN_IF_ERROR(Enter());
  int64_t last_id = 0;
  while (true) {
    TRELLIS_ASSIGN_OR_RETURN(const uint8_t header, ReadByte());
    if (header == 0) break;
    const uint8_t type = header & 0x0F;
    if (!IsKnownType(type)) {
      return Error(absl::StrCat("unknown field type ", type));
    }
    int64_t id = last_id + (header >> 4);
    if ((header >> 4) == 0) {
      TRELLIS_ASSIGN_OR_RETURN(const uint64_t raw, ReadVarint());
      id = ZigZag(raw);
    }
    if (id < std::numeric_limits<int16_t>::min() ||
        id > std::numeric_limits<int16_t>::max()) {
      return Error(absl::StrCat("field id ", id, " is out of range"));
    }
    last_id = id;
    TRELLIS_RETURN_IF_ERROR(
        field(static_cast<int16_t>(id), static_cast<ThriftType>(type)));
  }
  Leave();
  return absl::OkStatus();
}

absl::Status CompactReader::ReadList(ThriftType type, ElementFn element) {
  if (type != ThriftType::kList && type != ThriftType::kSet) {
    return Error(absl::StrCat("expected a list, found wire type ",
                              static_cast<int>(type)));
  }
  TRELLIS_ASSIGN_OR_RETURN(const uint8_t header, ReadByte());
  uint64_t size = header >> 4;
  if (size == 15) {
    TRELLIS_ASSIGN_OR_RETURN(size, ReadVarint());
  }
  const uint8_t element_type = header & 0x0F;
  if (!IsKnownType(element_type)) {
    return Error(absl::StrCat("unknown element type ", element_type));
  }
  // Every element takes at least one byte.
  if (size > bytes_.size() - pos_) {
    return Error(absl::StrCat("a list of ", size, " elements in ",
                              bytes_.size() - pos_, " bytes"));
  }
  TRELLIS_RETURN_IF_ERROR(Enter());
  for (uint64_t i = 0; i < size; ++i) {
    TRELLIS_RETURN_IF_ERROR(element(static_cast<ThriftType>(element_type)));
  }
  Leave();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CompactReader::ReadInt(ThriftType type, int64_t min,
                                               int64_t max) {
  int64_t value = 0;
  if (type == ThriftType::kI8) {
    TRELLIS_ASSIGN_OR_RETURN(const uint8_t byte, ReadByte());
    value = static_cast<int8_t>(byte);
  } else if (type == ThriftType::kI16 || type == ThriftType::kI32 ||
             type == ThriftType::kI64) {
    TRELLIS_ASSIGN_OR_RETURN(const uint64_t raw, ReadVarint());
    value = ZigZag(raw);
  } else {
    return Error(absl::StrCat("expected an integer, found wire type ",
                              static_cast<int>(type)));
  }
  if (value < min || value > max) {
    return Error(absl::StrCat("the integer ", value, " is outside [", min, ", ",
                              max, "]"));
  }
  return value;
}

absl::StatusOr<int32_t> CompactReader::ReadI32(ThriftType type) {
  TRELLIS_ASSIGN_OR_RETURN(const int64_t value,
                           ReadInt(type, std::numeric_limits<int32_t>::min(),
                                   std::numeric_limits<int32_t>::max()));
  return static_cast<int32_t>(value);
}

absl::StatusOr<bool> CompactReader::ReadBool(ThriftType type) {
  if (type == ThriftType::kTrue) return true;
  if (type == ThriftType::kFalse) return false;
  return Error(absl::StrCat("expected a bool, found wire type ",
                            static_cast<int>(type)));
}

absl::StatusOr<std::string_view> CompactReader::ReadBinary(ThriftType type) {
  if (type != ThriftType::kBinary) {
    return Error(absl::StrCat("expected a string, found wire type ",
                              static_cast<int>(type)));
  }
  TRELLIS_ASSIGN_OR_RETURN(const uint64_t size, ReadVarint());
  const size_t start = pos_;
  TRELLIS_RETURN_IF_ERROR(SkipBytes(size));
  return bytes_.substr(start, static_cast<size_t>(size));
}

absl::Status CompactReader::Skip(ThriftType type) {
  return SkipValue(type, /*element=*/false);
}

absl::Status CompactReader::SkipElement(ThriftType type) {
  return SkipValue(type, /*element=*/true);
}

absl::Status CompactReader::SkipValue(ThriftType type, bool element) {
  switch (type) {
    case ThriftType::kTrue:
    case ThriftType::kFalse:
      return element ? SkipBytes(1) : absl::OkStatus();
    case ThriftType::kI8:
      return SkipBytes(1);
    case ThriftType::kI16:
    case ThriftType::kI32:
    case ThriftType::kI64:
      return ReadVarint().status();
    case ThriftType::kDouble:
      return SkipBytes(8);
    case ThriftType::kUuid:
      return SkipBytes(16);
    case ThriftType::kBinary:
      return ReadBinary(type).status();
    case ThriftType::kList:
    case ThriftType::kSet:
      return ReadList(type, [this](ThriftType t) { return SkipElement(t); });
    case ThriftType::kMap:
      return SkipMap();
    case ThriftType::kStruct:
      return ReadStruct(type,
                        [this](int16_t, ThriftType t) { return Skip(t); });
    case ThriftType::kStop:
      break;
  }
  return Error(absl::StrCat("cannot skip wire type ", static_cast<int>(type)));
}

absl::Status CompactReader::SkipMap() {
  TRELLIS_ASSIGN_OR_RETURN(const uint64_t size, ReadVarint());
  if (size == 0) return absl::OkStatus();
  TRELLIS_ASSIGN_OR_RETURN(const uint8_t types, ReadByte());
  const uint8_t key = types >> 4, value = types & 0x0F;
  if (!IsKnownType(key) || !IsKnownType(value)) {
    return Error("a map of unknown element types");
  }
  if (size > (bytes_.size() - pos_) / 2) {
    return Error(absl::StrCat("a map of ", size, " entries in ",
                              bytes_.size() - pos_, " bytes"));
  }
  TRELLIS_RETURN_IF_ERROR(Enter());
  for (uint64_t i = 0; i < size; ++i) {
    TRELLIS_RETURN_IF_ERROR(SkipElement(static_cast<ThriftType>(key)));
    TRELLIS_RETURN_IF_ERROR(SkipElement(static_cast<ThriftType>(value)));
  }
  Leave();
  return absl::OkStatus();
}

}  // namespace trellis::parquet
