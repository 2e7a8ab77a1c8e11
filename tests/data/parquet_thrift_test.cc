// The Thrift compact protocol decoder under Parquet's footer: each wire
// type, field ids in both forms, unknown fields skipped whatever their
// type, and hostile input (truncation, huge counts, deep nesting) refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/parquet/thrift_compact.h"
#include "tests/data/parquet_test_util.h"

namespace trellis::parquet {
namespace {

using namespace std::string_literals;

using parquet_testing::ThriftWriter;
using ::testing::HasSubstr;

TEST(ThriftCompactTest, ReadsFieldsOfEachKindAndSkipsUnknownOnes) {
  ThriftWriter w;
  w.I32(1, -5).I64(2, int64_t{1} << 40).Binary(3, "text").Bool(4, true);
  w.BeginStruct(5).I32(1, 7).BeginList(2, 8, 2).ElementBinary("a");
  w.ElementBinary("b").End();
  w.I32(300, 9);  // long form: a delta over 15
  w.bytes.push_back(0);
  CompactReader r(w.bytes);
  std::vector<int16_t> ids;
  int64_t a = 0, b = 0, far = 0;
  std::string text;
  bool flag = false;
  const absl::Status status = r.ReadStruct(
      ThriftType::kStruct, [&](int16_t id, ThriftType t) -> absl::Status {
        ids.push_back(id);
        if (id == 1) return r.ReadI32(t).status();
        if (id == 2) {
          a = *r.ReadInt(t, 0, INT64_MAX);
          return absl::OkStatus();
        }
        if (id == 3) {
          text = std::string(*r.ReadBinary(t));
          return absl::OkStatus();
        }
        if (id == 4) {
          flag = *r.ReadBool(t);
          return absl::OkStatus();
        }
        if (id == 300) {
          far = *r.ReadI32(t);
          return absl::OkStatus();
        }
        b = 1;
        return r.Skip(t);  // the struct, its list included
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(ids, ::testing::ElementsAre(1, 2, 3, 4, 5, 300));
  EXPECT_EQ(a, int64_t{1} << 40);
  EXPECT_EQ(text, "text");
  EXPECT_TRUE(flag);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(far, 9);
  EXPECT_EQ(r.position(), w.bytes.size());
}

TEST(ThriftCompactTest, SkipsEveryWireType) {
  // A struct of one field of each type, all unknown to the caller.
  std::string s;
  s += '\x11';                             // 1: true
  s += '\x12';                             // 2: false
  s += "\x13\x7F";                         // 3: i8
  s += "\x14\x03";                         // 4: i16
  s += "\x16\xFF\x01";                     // 5: i64 (two bytes)
  s += "\x17"s + std::string(8, '\x01');   // 6: double
  s += "\x18\x02hi";                       // 7: binary
  s += "\x19\x21\x01";                     // 8: list of 2 bools
  s += '\x01';                             //    (second element)
  s += "\x1B\x02\x53\x02\x01\x04\x03";     // 9: map i32 -> i8, 2
  s += "\x1A\x15\x02";                     // 10: set of 1 i32
  s += "\x1C\x15\x06\x00"s;                // 11: struct {1: i32}
  s += "\x1D"s + std::string(16, '\x00');  // 12: uuid
  s += '\x00';
  CompactReader r(s);
  const absl::Status status = r.ReadStruct(
      ThriftType::kStruct, [&](int16_t, ThriftType t) { return r.Skip(t); });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(r.position(), s.size());
}

TEST(ThriftCompactTest, RefusesTruncationAtEveryByte) {
  ThriftWriter w;
  w.I32(1, 123456).Binary(2, "some text").BeginStruct(3).I64(1, -9).End();
  w.BeginList(4, 5, 20);
  for (int i = 0; i < 20; ++i) w.ElementI32(i * 1000);
  w.bytes.push_back(0);
  for (size_t cut = 0; cut < w.bytes.size(); ++cut) {
    CompactReader r(std::string_view(w.bytes).substr(0, cut));
    const absl::Status status = r.ReadStruct(
        ThriftType::kStruct, [&](int16_t, ThriftType t) { return r.Skip(t); });
    EXPECT_FALSE(status.ok()) << "cut at " << cut;
    EXPECT_THAT(status.ToString(), HasSubstr("malformed Thrift"));
  }
}

TEST(ThriftCompactTest, RefusesHostileCountsNestingAndTypes) {
  const auto skip_all = [](std::string bytes) {
    CompactReader r(bytes);
    return r.ReadStruct(ThriftType::kStruct,
                        [&](int16_t, ThriftType t) { return r.Skip(t); });
  };
  // A list claiming 2^31 elements in a few bytes.
  EXPECT_THAT(skip_all("\x19\xF5\xFF\xFF\xFF\xFF\x07\x00"s).ToString(),
              HasSubstr("a list of 2147483647 elements"));
  // A map of 2^20 entries.
  EXPECT_THAT(skip_all("\x1B\x80\x80\x40\x55\x00"s).ToString(),
              HasSubstr("a map of"));
  // Structs nested past the limit.
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += '\x1C';
  EXPECT_THAT(skip_all(deep).ToString(), HasSubstr("nested deeper than"));
  // An unknown wire type, and a varint over 64 bits.
  EXPECT_THAT(skip_all("\x1E\x00"s).ToString(),
              HasSubstr("unknown field type"));
  EXPECT_THAT(skip_all("\x15"s + std::string(10, '\xFF') + "\x01").ToString(),
              HasSubstr("longer than 64 bits"));
  // Reading a field as the wrong type.
  const std::string binary = "\x18\x01x\x00"s;
  CompactReader r(binary);
  const absl::Status status = r.ReadStruct(
      ThriftType::kStruct,
      [&](int16_t, ThriftType t) { return r.ReadI32(t).status(); });
  EXPECT_THAT(status.ToString(), HasSubstr("expected an integer"));
  // An integer out of its range.
  ThriftWriter w;
  w.I64(1, int64_t{1} << 40);
  w.bytes.push_back(0);
  CompactReader big(w.bytes);
  EXPECT_THAT(big.ReadStruct(ThriftType::kStruct,
                             [&](int16_t, ThriftType t) {
                               return big.ReadI32(t).status();
                             })
                  .ToString(),
              HasSubstr("outside"));
}

}  // namespace
}  // namespace trellis::parquet
