// The TensorBoard writer's encodings against values worked out by hand:
// CRC-32C's check value, TFRecord framing, and the protobuf bytes of a
// file-version event and of a scalar event. (The end-to-end reading with
// protobuf's own parser is tests/tools/mpi/tensorboard_events_test.py.)
#include "tools/trainer/health/tensorboard_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

template <typename T>
std::string Raw(T value) {
  std::string s(sizeof(T), '\0');
  std::memcpy(s.data(), &value, sizeof(T));
  return s;
}

TEST(TensorBoardWriterTest, Crc32cCheckValueAndMask) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  const uint32_t crc = Crc32c("abc");
  EXPECT_EQ(MaskedCrc32c("abc"),
            static_cast<uint32_t>(((crc >> 15) | (crc << 17)) + 0xA282EAD8u));
}

TEST(TensorBoardWriterTest, RecordFraming) {
  const std::string record = FrameRecord("hello");
  ASSERT_EQ(record.size(), 8u + 4 + 5 + 4);
  EXPECT_EQ(record.substr(0, 8), Raw<uint64_t>(5));
  EXPECT_EQ(record.substr(8, 4), Raw(MaskedCrc32c(Raw<uint64_t>(5))));
  EXPECT_EQ(record.substr(12, 5), "hello");
  EXPECT_EQ(record.substr(17, 4), Raw(MaskedCrc32c("hello")));
}

TEST(TensorBoardWriterTest, FileVersionEventBytes) {
  // wall_time (field 1, 64-bit), step 0 (field 2, varint), file_version
  // (field 3, length-delimited).
  const std::string want = Bytes({0x09}) + Raw(1.5) + Bytes({0x10, 0x00}) +
                           Bytes({0x1A, 13}) + "brain.Event:2";
  EXPECT_EQ(EncodeFileVersionEvent(1.5), want);
}

TEST(TensorBoardWriterTest, ScalarEventBytes) {
  // step 300 is the varint AC 02; each value: tag (1), simple_value (2,
  // 32-bit float), inside Summary.value (1), inside Event.summary (5).
  const std::string value_a =
      Bytes({0x0A, 1}) + "a" + Bytes({0x15}) + Raw(0.25f);
  const std::string value_bc =
      Bytes({0x0A, 2}) + "bc" + Bytes({0x15}) + Raw(-3.0f);
  const std::string summary =
      Bytes({0x0A, static_cast<int>(value_a.size())}) + value_a +
      Bytes({0x0A, static_cast<int>(value_bc.size())}) + value_bc;
  const std::string want =
      Bytes({0x09}) + Raw(2.0) + Bytes({0x10, 0xAC, 0x02}) +
      Bytes({0x2A, static_cast<int>(summary.size())}) + summary;
  EXPECT_EQ(EncodeScalarEvent(2.0, 300, {{"a", 0.25}, {"bc", -3.0}}), want);
}

TEST(TensorBoardWriterTest, WritesTheHeaderThenOneRecordPerCall) {
  const std::string dir = test::ScratchDir() + "/tb/nested";
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer =
      TensorBoardWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Write(7, {{"x", 1.0}}).ok());
  std::ifstream in((*writer)->path(), std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  // Two records: lengths read from the framing add up to the file.
  uint64_t first = 0, second = 0;
  ASSERT_GE(bytes.size(), 12u);
  std::memcpy(&first, bytes.data(), 8);
  ASSERT_GE(bytes.size(), 16 + first + 12);
  std::memcpy(&second, bytes.data() + 16 + first, 8);
  EXPECT_EQ(bytes.size(), 16 + first + 16 + second);
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  EXPECT_NE(std::filesystem::path((*writer)->path())
                .filename()
                .string()
                .find("events.out.tfevents."),
            std::string::npos);
}

TEST(TensorBoardWriterTest, AnUnwritableDirectoryIsRefusedByName) {
  const std::string file = test::ScratchDir() + "/plain_file";
  std::ofstream(file) << "x";
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer =
      TensorBoardWriter::Open(file + "/tb");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("--tensorboard_dir="),
            std::string::npos);
}

}  // namespace
}  // namespace trellis
