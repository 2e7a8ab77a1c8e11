// The Parquet page encodings' decoders on bytes worked out by hand from the
// specification's examples (Encodings.md), on bytes from the tests'
// independent encoder, and on malformed and hostile input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/parquet/encodings.h"
#include "tests/data/parquet_test_util.h"

namespace trellis::parquet {
namespace {

using namespace std::string_literals;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Strings(const ByteArrays& arrays) {
  std::vector<std::string> out;
  for (size_t i = 0; i < arrays.size(); ++i) out.emplace_back(arrays[i]);
  return out;
}

// (value, count) pairs of a whole hybrid stream.
std::vector<std::pair<uint32_t, uint64_t>> Runs(std::string_view data,
                                                int width) {
  RleDecoder decoder(data, width);
  std::vector<std::pair<uint32_t, uint64_t>> runs;
  uint32_t value = 0;
  uint64_t count = 0;
  while (true) {
    absl::StatusOr<bool> more = decoder.Next(value, count);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) return runs;
    runs.emplace_back(value, count);
  }
}

TEST(ParquetEncodingsTest, RleHybridMatchesTheSpecExample) {
  // 0..7 bit-packed at width 3 (Encodings.md): 10001000 11000110 11111010,
  // after the run header (1 group of 8: (1 << 1) | 1), then an RLE run of
  // five 4s.
  const std::string data = "\x03\x88\xC6\xFA\x0A\x04";
  EXPECT_THAT(
      Runs(data, 3),
      ElementsAre(std::pair{0u, 1u}, std::pair{1u, 1u}, std::pair{2u, 1u},
                  std::pair{3u, 1u}, std::pair{4u, 1u}, std::pair{5u, 1u},
                  std::pair{6u, 1u}, std::pair{7u, 1u}, std::pair{4u, 5u}));
  // A last bit-packed run cut short yields the values its bytes hold.
  EXPECT_EQ(Runs("\x05\x88\xC6\xFA", 3).size(), 8u);
  // A run whose value is cut off is an error.
  RleDecoder cut("\x0A", 3);
  uint32_t value = 0;
  uint64_t count = 0;
  EXPECT_FALSE(cut.Next(value, count).ok());
}

TEST(ParquetEncodingsTest, DeltaBinaryPackedMatchesTheSpecExamples) {
  // Example 1: 1..5: block 8, 1 miniblock, 5 values, first 1; min delta 1,
  // bit width 0.
  std::vector<int64_t> values;
  size_t consumed = 0;
  const std::string one = "\x08\x01\x05\x02\x02\x00"s;
  ASSERT_TRUE(DecodeDeltaBinaryPacked(one, 5, values, consumed).ok());
  EXPECT_THAT(values, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_EQ(consumed, one.size());
  // Example 2: 7 5 3 1 2 3 4 5: min delta -2, relative deltas 0 0 0 3 3 3 3
  // (and a padding 0) on 2 bits, LSB first: 0xC0 0x3F.
  values.clear();
  const std::string two = std::string("\x08\x01\x08\x0E\x03\x02\xC0\x3F", 8);
  ASSERT_TRUE(DecodeDeltaBinaryPacked(two, 8, values, consumed).ok());
  EXPECT_THAT(values, ElementsAre(7, 5, 3, 1, 2, 3, 4, 5));
  EXPECT_EQ(consumed, two.size());
  // Round trip through the tests' encoder: several blocks, wide deltas.
  std::vector<int64_t> many;
  for (int i = 0; i < 1000; ++i) many.push_back((i * 7919) % 4099 - 2000);
  values.clear();
  const std::string encoded = parquet_testing::DeltaBinaryPacked(many);
  ASSERT_TRUE(
      DecodeDeltaBinaryPacked(encoded, many.size(), values, consumed).ok());
  EXPECT_EQ(values, many);
  EXPECT_EQ(consumed, encoded.size());
}

TEST(ParquetEncodingsTest, DeltaBinaryPackedRefusesBadHeadersAndCounts) {
  std::vector<int64_t> values;
  size_t consumed = 0;
  const auto error = [&](const std::string& data, size_t max) {
    values.clear();
    return std::string(
        DecodeDeltaBinaryPacked(data, max, values, consumed).message());
  };
  EXPECT_THAT(error("\x08\x01", 5), HasSubstr("header ends early"));
  EXPECT_THAT(error("\x00\x01\x05\x02"s, 5), HasSubstr("blocks of 0 values"));
  EXPECT_THAT(error("\x08\x03\x05\x02", 5), HasSubstr("in 3 miniblocks"));
  EXPECT_THAT(error("\x08\x01\x05\x02\x02\x00"s, 4), HasSubstr("holds 5"));
  EXPECT_THAT(error("\x08\x01\x08\x0E\x03\x02\xC0", 8),
              HasSubstr("miniblock ends early"));
  EXPECT_THAT(error("\x08\x01\x08\x0E\x03\x41", 8), HasSubstr("bit width"));
}

TEST(ParquetEncodingsTest, ByteArrayEncodingsMatchTheSpecExamples) {
  // PLAIN: a 4-byte length before each value.
  ByteArrays plain;
  ASSERT_TRUE(DecodePlainByteArrays(
                  parquet_testing::PlainByteArrays({"ab", "", "cde"}), 3, plain)
                  .ok());
  EXPECT_THAT(Strings(plain), ElementsAre("ab", "", "cde"));
  // DELTA_LENGTH_BYTE_ARRAY: lengths 5 5 6 6 (block 128 in 4 miniblocks;
  // first 5; min delta 0; widths 1 0 0 0; deltas 0 1 0 on one bit), then
  // the bytes.
  const std::string lengths =
      "\x80\x01\x04\x04\x0A\x00\x01\x00\x00\x00\x02\x00\x00\x00"s;
  ByteArrays dlba;
  ASSERT_TRUE(
      DecodeDeltaLengthByteArrays(lengths + "HelloWorldFoobarABCDEF", 4, dlba)
          .ok());
  EXPECT_THAT(Strings(dlba), ElementsAre("Hello", "World", "Foobar", "ABCDEF"));
  // DELTA_BYTE_ARRAY: prefixes 0 2 0 3 (min delta -2; 4 0 5 on 3 bits),
  // suffix lengths 4 2 6 5 (min delta -2; 0 6 1 on 3 bits), suffixes.
  const std::string prefixes = "\x08\x01\x04\x00\x03\x03\x44\x01\x00"s;
  const std::string suffixes = "\x08\x01\x04\x08\x03\x03\x70\x00\x00"s;
  ByteArrays dba;
  ASSERT_TRUE(
      DecodeDeltaByteArrays(prefixes + suffixes + "axislebabbleyhood", 4, dba)
          .ok());
  EXPECT_THAT(Strings(dba), ElementsAre("axis", "axle", "babble", "babyhood"));
}

TEST(ParquetEncodingsTest, ByteArrayEncodingsRefuseMalformedPages) {
  ByteArrays out;
  EXPECT_THAT(DecodePlainByteArrays("\x05\x00\x00\x00"
                                    "abc"s,
                                    1, out)
                  .ToString(),
              HasSubstr("passes the end"));
  EXPECT_THAT(DecodePlainByteArrays("", 1, out).ToString(),
              HasSubstr("ends at value 0"));
  const std::string lengths = parquet_testing::DeltaBinaryPacked({3, 3});
  EXPECT_THAT(DecodeDeltaLengthByteArrays(lengths + "abcd", 2, out).ToString(),
              HasSubstr("passes the end"));
  EXPECT_THAT(
      DecodeDeltaLengthByteArrays(lengths + "abcdef", 3, out).ToString(),
      HasSubstr("2 lengths for 3 values"));
  // A prefix longer than the value before it.
  const std::string bad = parquet_testing::DeltaBinaryPacked({0, 5}) +
                          parquet_testing::DeltaBinaryPacked({2, 1}) + "abc";
  EXPECT_THAT(DecodeDeltaByteArrays(bad, 2, out).ToString(),
              HasSubstr("takes 5 bytes of a value of 2"));
}

TEST(ParquetEncodingsTest, DictionaryIndicesMixRunsAndCheckBounds) {
  ByteArrays dictionary;
  for (const char* entry : {"a", "bb", "ccc"}) {
    ASSERT_TRUE(dictionary.Append(entry).ok());
  }
  // Width 2: an RLE run of three 1s, then 2 and 0 bit-packed.
  ByteArrays out;
  ASSERT_TRUE(
      DecodeDictionaryIndices("\x02\x06\x01\x03\x02\x00"s, 5, dictionary, out)
          .ok());
  EXPECT_THAT(Strings(out), ElementsAre("bb", "bb", "bb", "ccc", "a"));
  EXPECT_THAT(
      DecodeDictionaryIndices("\x02\x02\x03", 1, dictionary, out).ToString(),
      HasSubstr("index 3 past the dictionary's 3 entries"));
  EXPECT_THAT(DecodeDictionaryIndices("\x21", 1, dictionary, out).ToString(),
              HasSubstr("bit width of 33"));
  EXPECT_THAT(
      DecodeDictionaryIndices("\x02\x02\x01", 2, dictionary, out).ToString(),
      HasSubstr("indices end at value 1 of 2"));
}

TEST(ParquetEncodingsTest, TheBudgetStopsPagesThatExpand) {
  ByteArrays dictionary;
  ASSERT_TRUE(dictionary.Append(std::string(1000, 'x')).ok());
  // One RLE run of 2^30 copies of a 1000-byte entry: a few bytes that
  // would decode to a terabyte.
  std::string run = "\x00"s;
  parquet_testing::PutVarint(run, uint64_t{1} << 31);
  ByteArrays out(size_t{1} << 20);
  const absl::Status status =
      DecodeDictionaryIndices(run, size_t{1} << 30, dictionary, out);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_LE(out.memory(), size_t{1} << 20);
  // Each value repeating the one before in full (prefix = its length).
  std::vector<int64_t> prefixes = {0}, suffixes = {1000};
  for (int i = 1; i < 5000; ++i) {
    prefixes.push_back(1000);
    suffixes.push_back(0);
  }
  const std::string page = parquet_testing::DeltaBinaryPacked(prefixes) +
                           parquet_testing::DeltaBinaryPacked(suffixes) +
                           std::string(1000, 'y');
  ByteArrays small(size_t{1} << 20);
  EXPECT_TRUE(
      absl::IsResourceExhausted(DecodeDeltaByteArrays(page, 5000, small)));
  ByteArrays large;
  ASSERT_TRUE(DecodeDeltaByteArrays(page, 5000, large).ok());
  EXPECT_EQ(large.size(), 5000u);
  EXPECT_EQ(large[4999], std::string(1000, 'y'));
}

}  // namespace
}  // namespace trellis::parquet
