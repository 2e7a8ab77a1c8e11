// Hand-built Parquet bytes for the Parquet reader's tests: a Thrift compact
// protocol writer, encoders of the RLE/bit-packed hybrid and
// DELTA_BINARY_PACKED, and a builder of small files of one or more columns
// whose pages are given as bytes. Independent of the reader's code; the
// encodings' own tests check the decoder against the specification's
// examples, and DuckDB-written files check both.
//
// Thread safety: plain values and pure functions.
#ifndef TRELLIS_TESTS_DATA_PARQUET_TEST_UTIL_H_
#define TRELLIS_TESTS_DATA_PARQUET_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trellis::parquet_testing {

inline void PutVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

inline uint64_t ZigZag(int64_t value) {
  return (static_cast<uint64_t>(value) << 1) ^
         static_cast<uint64_t>(value >> 63);
}

inline void PutU32(std::string& out, uint32_t value) {
  char bytes[4];
  std::memcpy(bytes, &value, 4);
  out.append(bytes, 4);
}

// The compact protocol, field by field. Types as in parquet::ThriftType.
class ThriftWriter {
 public:
  ThriftWriter& I32(int16_t id, int64_t value) { return Int(id, 5, value); }
  ThriftWriter& I64(int16_t id, int64_t value) { return Int(id, 6, value); }
  ThriftWriter& Bool(int16_t id, bool value) {
    Header(id, value ? 1 : 2);
    return *this;
  }
  ThriftWriter& Binary(int16_t id, std::string_view value) {
    Header(id, 8);
    PutBinary(value);
    return *this;
  }
  ThriftWriter& BeginStruct(int16_t id) {
    Header(id, 12);
    last_.push_back(0);
    return *this;
  }
  // Ends a struct (field or list element): its stop byte.
  ThriftWriter& End() {
    bytes.push_back(0);
    last_.pop_back();
    return *this;
  }
  // A list field of `size` elements of `type`, written next with the
  // Element* calls.
  ThriftWriter& BeginList(int16_t id, uint8_t type, size_t size) {
    Header(id, 9);
    if (size < 15) {
      bytes.push_back(static_cast<char>((size << 4) | type));
    } else {
      bytes.push_back(static_cast<char>(0xF0 | type));
      PutVarint(bytes, size);
    }
    return *this;
  }
  ThriftWriter& ElementStruct() {
    last_.push_back(0);
    return *this;
  }
  ThriftWriter& ElementBinary(std::string_view value) {
    PutBinary(value);
    return *this;
  }
  ThriftWriter& ElementI32(int64_t value) {
    PutVarint(bytes, ZigZag(value));
    return *this;
  }

  std::string bytes;

 private:
  ThriftWriter& Int(int16_t id, uint8_t type, int64_t value) {
    Header(id, type);
    PutVarint(bytes, ZigZag(value));
    return *this;
  }
  void Header(int16_t id, uint8_t type) {
    const int delta = id - last_.back();
    if (delta > 0 && delta <= 15) {
      bytes.push_back(static_cast<char>((delta << 4) | type));
    } else {
      bytes.push_back(static_cast<char>(type));
      PutVarint(bytes, ZigZag(id));
    }
    last_.back() = id;
  }
  void PutBinary(std::string_view value) {
    PutVarint(bytes, value.size());
    bytes.append(value);
  }
  std::vector<int16_t> last_ = {0};
};

// One bit-packed run of `values` (padded to a multiple of 8) at
// `bit_width`.
inline std::string BitPackedRun(const std::vector<uint32_t>& values,
                                int bit_width) {
  const size_t groups = (values.size() + 7) / 8;
  std::string out;
  PutVarint(out, (groups << 1) | 1);
  std::string packed(groups * bit_width, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    for (int b = 0; b < bit_width; ++b) {
      if ((values[i] >> b) & 1) {
        const size_t bit = i * bit_width + b;
        packed[bit / 8] = static_cast<char>(packed[bit / 8] | (1 << (bit % 8)));
      }
    }
  }
  return out + packed;
}

// An RLE run of `count` copies of `value` at `bit_width`.
inline std::string RleRun(uint32_t value, uint64_t count, int bit_width) {
  std::string out;
  PutVarint(out, count << 1);
  for (int k = 0; k < (bit_width + 7) / 8; ++k) {
    out.push_back(static_cast<char>((value >> (8 * k)) & 0xFF));
  }
  return out;
}

// DELTA_BINARY_PACKED: blocks of 128 values in 4 miniblocks of 32.
inline std::string DeltaBinaryPacked(const std::vector<int64_t>& values) {
  std::string out;
  PutVarint(out, 128);
  PutVarint(out, 4);
  PutVarint(out, values.size());
  PutVarint(out, ZigZag(values.empty() ? 0 : values[0]));
  for (size_t start = 1; start < values.size(); start += 128) {
    const size_t end = std::min(values.size(), start + 128);
    std::vector<uint64_t> deltas;
    int64_t min_delta = INT64_MAX;
    for (size_t i = start; i < end; ++i) {
      min_delta = std::min(min_delta, values[i] - values[i - 1]);
    }
    for (size_t i = start; i < end; ++i) {
      deltas.push_back(static_cast<uint64_t>(values[i] - values[i - 1]) -
                       static_cast<uint64_t>(min_delta));
    }
    deltas.resize(128, 0);
    PutVarint(out, ZigZag(min_delta));
    std::string widths, bodies;
    for (int m = 0; m < 4; ++m) {
      int width = 0;
      for (int j = 0; j < 32; ++j) {
        while (width < 64 && (deltas[m * 32 + j] >> width) != 0) ++width;
      }
      widths.push_back(static_cast<char>(width));
      if (m * 32 >= static_cast<int>(end - start)) continue;  // not needed
      std::vector<uint32_t> lows;  // widths up to 32 here
      for (int j = 0; j < 32; ++j) lows.push_back(deltas[m * 32 + j]);
      bodies += BitPackedRun(lows, width).substr(1);  // no run header
    }
    out += widths + bodies;
  }
  return out;
}

inline std::string PlainByteArrays(const std::vector<std::string>& values) {
  std::string out;
  for (const std::string& v : values) {
    PutU32(out, static_cast<uint32_t>(v.size()));
    out += v;
  }
  return out;
}

struct Page {
  enum Kind { kDictionary, kV1, kV2 } kind = kV1;
  int32_t num_values = 0;
  int32_t num_nulls = 0;  // v2
  int32_t encoding = 0;
  int32_t level_encoding = 3;  // v1: RLE
  std::string levels;          // v1: with its 4-byte length; v2: without
  std::string values;
};

struct Column {
  std::string name = "text";
  std::optional<int32_t> type = 6;            // BYTE_ARRAY
  std::optional<int32_t> repetition = 1;      // OPTIONAL
  int32_t num_children = 0;                   // > 0: a group
  std::optional<int32_t> converted_type = 0;  // UTF8
};

// A file whose schema is `columns` (in depth-first order under the root,
// which has `top_level` children) and whose row groups each hold, for the
// leaf `leaf`, the pages of `groups[g]` (other leaves get empty chunks),
// with the rows each group says.
struct File {
  std::vector<Column> columns = {Column{}};
  int top_level = 1;
  size_t leaf = 0, leaves = 1;
  int32_t codec = 0;
  std::vector<std::vector<Page>> groups;
  std::vector<int64_t> rows;
};

inline std::string PageBytes(const Page& page) {
  ThriftWriter h;
  const std::string body = page.levels + page.values;
  h.I32(1, page.kind == Page::kDictionary ? 2
           : page.kind == Page::kV1       ? 0
                                          : 3)
      .I32(2, static_cast<int32_t>(body.size()))
      .I32(3, static_cast<int32_t>(body.size()));
  if (page.kind == Page::kDictionary) {
    h.BeginStruct(7).I32(1, page.num_values).I32(2, page.encoding).End();
  } else if (page.kind == Page::kV1) {
    h.BeginStruct(5)
        .I32(1, page.num_values)
        .I32(2, page.encoding)
        .I32(3, page.level_encoding)
        .I32(4, 3)
        .End();
  } else {
    h.BeginStruct(8)
        .I32(1, page.num_values)
        .I32(2, page.num_nulls)
        .I32(3, page.num_values)
        .I32(4, page.encoding)
        .I32(5, static_cast<int32_t>(page.levels.size()))
        .I32(6, 0)
        .Bool(7, false)
        .End();
  }
  h.bytes.push_back(0);
  return h.bytes + body;
}

inline void SchemaElement(ThriftWriter& w, const Column& c) {
  w.ElementStruct();
  if (c.type.has_value()) w.I32(1, *c.type);
  if (c.repetition.has_value()) w.I32(3, *c.repetition);
  w.Binary(4, c.name);
  if (c.num_children > 0) w.I32(5, c.num_children);
  if (c.converted_type.has_value()) w.I32(6, *c.converted_type);
  w.End();
}

inline std::string BuildFile(const File& file) {
  std::string out = "PAR1";
  ThriftWriter meta;
  meta.I32(1, 1).BeginList(2, 12, file.columns.size() + 1);
  meta.ElementStruct().Binary(4, "schema").I32(5, file.top_level).End();
  for (const Column& c : file.columns) SchemaElement(meta, c);
  int64_t total_rows = 0;
  for (int64_t r : file.rows) total_rows += r;
  meta.I64(3, total_rows).BeginList(4, 12, file.groups.size());
  for (size_t g = 0; g < file.groups.size(); ++g) {
    const int64_t start = static_cast<int64_t>(out.size());
    for (const Page& page : file.groups[g]) out += PageBytes(page);
    const int64_t size = static_cast<int64_t>(out.size()) - start;
    meta.ElementStruct().BeginList(1, 12, file.leaves);
    for (size_t leaf = 0; leaf < file.leaves; ++leaf) {
      const bool ours = leaf == file.leaf;
      meta.ElementStruct().I64(2, start).BeginStruct(3);
      meta.I32(1, ours ? 6 : 1).BeginList(2, 5, 1).ElementI32(0);
      meta.BeginList(3, 8, 1)
          .ElementBinary(ours ? file.columns[file.leaf].name : "other")
          .I32(4, file.codec)
          .I64(5, file.rows[g])
          .I64(6, ours ? size : 0)
          .I64(7, ours ? size : 0)
          .I64(9, start)
          .End()
          .End();
    }
    meta.I64(2, 0).I64(3, file.rows[g]).End();
  }
  meta.bytes.push_back(0);
  out += meta.bytes;
  PutU32(out, static_cast<uint32_t>(meta.bytes.size()));
  return out + "PAR1";
}

}  // namespace trellis::parquet_testing

#endif  // TRELLIS_TESTS_DATA_PARQUET_TEST_UTIL_H_
