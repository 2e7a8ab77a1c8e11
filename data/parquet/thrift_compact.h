// CompactReader: a bounded decoder of Thrift's compact protocol, the
// encoding of a Parquet file's footer and page headers.
//
// Every read checks the bytes left and fails with InvalidArgument rather
// than reading past the end; structs and containers nest at most
// kMaxDepth deep; a field the caller does not know is skipped whatever its
// type. Errors say what was being read and at which byte offset, without a
// file name (the caller adds it).
//
// Use: ReadStruct(ThriftType::kStruct, ...) on the top-level struct;
// ReadStruct calls `field` once per field with its id and wire type;
// the callback reads the value with the Read* function of the type it
// expects (which fails on another wire type) or passes it to Skip.
//
// Thread safety: none; one object from one thread at a time.
#ifndef TRELLIS_DATA_PARQUET_THRIFT_COMPACT_H_
#define TRELLIS_DATA_PARQUET_THRIFT_COMPACT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trellis::parquet {

// Wire types of the compact protocol (fields; list elements use the same
// numbers, with a bool element as one byte).
enum class ThriftType : uint8_t {
  kStop = 0,
  kTrue = 1,
  kFalse = 2,
  kI8 = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kDouble = 7,
  kBinary = 8,
  kList = 9,
  kSet = 10,
  kMap = 11,
  kStruct = 12,
  kUuid = 13,
};

class CompactReader {
 public:
  static constexpr int kMaxDepth = 32;

  explicit CompactReader(std::string_view bytes) : bytes_(bytes) {}

  // Bytes consumed so far.
  size_t position() const { return pos_; }

  using FieldFn = absl::FunctionRef<absl::Status(int16_t id, ThriftType type)>;
  // Reads a struct value (`type` must be kStruct): its fields, each handed
  // to `field`, through its stop byte.
  absl::Status ReadStruct(ThriftType type, FieldFn field);

  // Reads a list (or set) value: `element` is called once per element with
  // the elements' type. The count is checked against the bytes left.
  using ElementFn = absl::FunctionRef<absl::Status(ThriftType type)>;
  absl::Status ReadList(ThriftType type, ElementFn element);

  // An integer value of wire type i8, i16, i32 or i64 that must fit in
  // [min, max].
  absl::StatusOr<int64_t> ReadInt(ThriftType type, int64_t min, int64_t max);
  absl::StatusOr<int32_t> ReadI32(ThriftType type);
  // A field's bool (the value is in its type).
  absl::StatusOr<bool> ReadBool(ThriftType type);
  // A binary or string value; a view into the input.
  absl::StatusOr<std::string_view> ReadBinary(ThriftType type);

  // Skips a field value of `type` (a bool field has no bytes).
  absl::Status Skip(ThriftType type);

 private:
  absl::Status Error(absl::string_view what) const;
  absl::StatusOr<uint64_t> ReadVarint();
  absl::StatusOr<uint8_t> ReadByte();
  absl::Status SkipBytes(uint64_t count);
  // Skips a list element (a bool element is one byte).
  absl::Status SkipElement(ThriftType type);
  absl::Status SkipValue(ThriftType type, bool element);
  absl::Status SkipMap();
  absl::Status Enter();
  void Leave() { --depth_; }

  std::string_view bytes_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace trellis::parquet

#endif  // TRELLIS_DATA_PARQUET_THRIFT_COMPACT_H_
