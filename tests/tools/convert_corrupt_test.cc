// The safetensors and llm.c readers against valid, truncated and corrupted
// files made byte by byte here: every bad input is a clear error naming the
// file (and the tensor), never a crash or a read outside the file. CI also
// runs this file under AddressSanitizer and UBSan, built from the reader
// sources alone (convert_reader_asan_tests).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/safetensors.h"
#include "tests/tools/convert_test_util.h"
#include "tools/convert/llmc.h"

namespace trellis {
namespace {

using test::Append;
using test::LlmcBytes;
using test::ReadBytes;
using test::Safetensors;
using test::Scratch;
using test::TinyHeader;
using test::WriteBytes;
using ::testing::AllOf;
using ::testing::HasSubstr;

// ------------------------------------------------------------ safetensors

// "a": F32 (2, 3) = 0.5, 1.5, ...; "b": BF16 (4) = 1, 2, 3, 4.
const char kHeader[] =
    R"({"__metadata__":{"format":"pt"},)"
    R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})";

std::string GoodData() {
  std::string data;
  for (int i = 0; i < 6; ++i) Append(data, i + 0.5f);
  for (uint16_t bits : {0x3f80, 0x4000, 0x4040, 0x4080}) Append(data, bits);
  return data;
}

std::string GoodSafetensors() { return Safetensors(kHeader, GoodData()); }

absl::Status OpenBytes(const std::string& path, const std::string& bytes) {
  WriteBytes(path, bytes);
  return SafetensorsReader::Open(path).status();
}

TEST(SafetensorsReaderTest, ReadsAHandMadeFile) {
  const std::string path = Scratch() + "/good.safetensors";
  WriteBytes(path, GoodSafetensors());
  absl::StatusOr<SafetensorsReader> r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->tensors().size(), 2u);
  EXPECT_EQ(r->metadata().at("format"), "pt");
  absl::StatusOr<Tensor> a = r->Read("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape(), (Shape{2, 3}));
  EXPECT_EQ(a->data<float>()[5], 5.5f);
  absl::StatusOr<Tensor> b = r->Read("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dtype(), DType::kBF16);
  EXPECT_EQ(static_cast<const uint16_t*>(b->raw())[3], 0x4080);
  EXPECT_EQ(r->Read("c").status().code(), absl::StatusCode::kNotFound);
}

struct BadHeader {
  const char* name;
  std::string header;
  std::string data;
  const char* expect;  // A piece of the message.
};

void PrintTo(const BadHeader& bad, std::ostream* os) { *os << bad.name; }

class SafetensorsBadHeaderTest : public ::testing::TestWithParam<BadHeader> {};

TEST_P(SafetensorsBadHeaderTest, IsAClearError) {
  const BadHeader& bad = GetParam();
  const std::string path = Scratch() + "/bad.safetensors";
  const absl::Status status =
      OpenBytes(path, Safetensors(bad.header, bad.data));
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr(path), HasSubstr(bad.expect)));
}

std::string Entry(const std::string& name, const std::string& body) {
  return absl::StrCat("{\"", name, "\":", body, "}");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SafetensorsBadHeaderTest,
    ::testing::Values(
        BadHeader{"not_json", "{\"a\": [1, 2", "", "not a JSON object"},
        BadHeader{"array", "[1, 2, 3]", "", "not a JSON object"},
        BadHeader{"empty_header", "", "", "not a JSON object"},
        BadHeader{"missing_fields", Entry("w", R"({"dtype":"F32"})"), "",
                  "needs dtype, shape and data_offsets"},
        BadHeader{"unknown_dtype",
                  Entry("w", R"({"dtype":"F33","shape":[1],)"
                             R"("data_offsets":[0,4]})"),
                  std::string(4, '\0'), "unknown dtype"},
        BadHeader{"negative_size",
                  Entry("w", R"({"dtype":"F32","shape":[-1],)"
                             R"("data_offsets":[0,4]})"),
                  std::string(4, '\0'), "bad size"},
        BadHeader{"float_size",
                  Entry("w", R"({"dtype":"F32","shape":[1.5],)"
                             R"("data_offsets":[0,4]})"),
                  std::string(4, '\0'), "bad size"},
        BadHeader{"offsets_past_the_end",
                  Entry("w", R"({"dtype":"F32","shape":[250000],)"
                             R"("data_offsets":[0,1000000]})"),
                  std::string(16, '\0'), "truncated"},
        BadHeader{"offsets_disagree_with_shape",
                  Entry("w", R"({"dtype":"F32","shape":[3],)"
                             R"("data_offsets":[0,8]})"),
                  std::string(16, '\0'), "needs 12"},
        BadHeader{"reversed_offsets",
                  Entry("w", R"({"dtype":"F32","shape":[0],)"
                             R"("data_offsets":[8,4]})"),
                  std::string(16, '\0'), "is not [begin, end]"},
        BadHeader{"offsets_not_a_pair",
                  Entry("w", R"({"dtype":"F32","shape":[1],)"
                             R"("data_offsets":[0]})"),
                  std::string(16, '\0'), "is not [begin, end]"},
        BadHeader{"overflowing_shape",
                  Entry("w", R"({"dtype":"F64","shape":[4611686018427387904,)"
                             R"(4611686018427387904],"data_offsets":[0,8]})"),
                  std::string(8, '\0'), "impossibly large"},
        BadHeader{"overlap",
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  std::string(12, '\0'), "overlap"},
        BadHeader{"metadata_not_strings", R"({"__metadata__":{"k":1}})", "",
                  "is not a string"}),
    [](const ::testing::TestParamInfo<BadHeader>& info) {
      return std::string(info.param.name);
    });

TEST(SafetensorsReaderTest, HeaderLengthBeyondTheFileIsTruncation) {
  const std::string path = Scratch() + "/x.safetensors";
  std::string bytes = GoodSafetensors();
  bytes[0] = static_cast<char>(0xff);
  bytes[5] = 0x01;  // ~2^40 bytes of header.
  const absl::Status status = OpenBytes(path, bytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr(path), HasSubstr("truncated")));
}

TEST(SafetensorsReaderTest, EveryTruncationIsAnError) {
  const std::string path = Scratch() + "/cut.safetensors";
  const std::string good = GoodSafetensors();
  for (size_t n = 0; n < good.size(); ++n) {
    const absl::Status status = OpenBytes(path, good.substr(0, n));
    ASSERT_FALSE(status.ok()) << n << " bytes";
    ASSERT_THAT(std::string(status.message()), HasSubstr(path)) << n;
  }
}

TEST(SafetensorsReaderTest, FlippedHeaderBytesNeverCrash) {
  const std::string path = Scratch() + "/flip.safetensors";
  const std::string good = GoodSafetensors();
  const size_t header_end = 8 + std::strlen(kHeader);
  int opened = 0, refused = 0;
  for (size_t i = 0; i < header_end; ++i) {
    for (unsigned char mask : {0x01, 0x20, 0x80, 0xff}) {
      std::string bytes = good;
      bytes[i] = static_cast<char>(bytes[i] ^ mask);
      WriteBytes(path, bytes);
      absl::StatusOr<SafetensorsReader> r = SafetensorsReader::Open(path);
      if (!r.ok()) {
        ++refused;
        ASSERT_THAT(std::string(r.status().message()), HasSubstr(path));
        continue;
      }
      ++opened;
      const uint64_t data = bytes.size() - header_end;
      for (const SafetensorsEntry& e : r->tensors()) {
        ASSERT_LE(e.end, data) << e.name;
        std::vector<char> buffer(e.nbytes());
        ASSERT_TRUE(r->ReadBytes(e, buffer.data()).ok());
        if (e.trellis_dtype) {
          ASSERT_TRUE(r->Read(e.name).ok());
        }
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(opened, 0);  // Flips inside names or values may stay valid.
}

TEST(SafetensorsWriterTest, WritesWhatTheReaderReadsBack) {
  const std::string dir = Scratch();
  WriteBytes(dir + "/in.safetensors", GoodSafetensors());
  absl::StatusOr<SafetensorsReader> in =
      SafetensorsReader::Open(dir + "/in.safetensors");
  ASSERT_TRUE(in.ok());
  SafetensorsWriter writer;
  writer.SetMetadata("format", "pt");
  ASSERT_TRUE(writer.Add("a", *in->Read("a")).ok());
  ASSERT_TRUE(writer.Add("b", *in->Read("b")).ok());
  EXPECT_FALSE(writer.Add("a", *in->Read("a")).ok());
  ASSERT_TRUE(writer.Write(dir + "/out.safetensors").ok());
  const std::string out = ReadBytes(dir + "/out.safetensors");
  uint64_t header = 0;
  std::memcpy(&header, out.data(), 8);
  EXPECT_EQ(header % 8, 0u);
  EXPECT_EQ(test::FirstDifference(out.substr(8 + header), GoodData()), -1);
  absl::StatusOr<SafetensorsReader> back =
      SafetensorsReader::Open(dir + "/out.safetensors");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->metadata().at("format"), "pt");
  EXPECT_EQ(back->Find("b")->dtype, "BF16");
}

// ------------------------------------------------------------------ llm.c

absl::Status OpenLlmc(const std::string& path, const std::string& bytes) {
  WriteBytes(path, bytes);
  return LlmcReader::Open(path).status();
}

TEST(LlmcReaderTest, ReadsAHandMadeFileAndWritesItBack) {
  const std::string dir = Scratch();
  for (int32_t version : {kLlmcVersionF32, kLlmcVersionBf16}) {
    const std::string bytes = LlmcBytes(TinyHeader(version));
    WriteBytes(dir + "/in.bin", bytes);
    absl::StatusOr<LlmcReader> r = LlmcReader::Open(dir + "/in.bin");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->header().padded_vocab_size, 8);
    EXPECT_EQ(std::string(r->tensors()[4].name), "qkvw");
    EXPECT_EQ(r->tensors()[4].shape, (Shape{2, 12, 4}));
    std::vector<Tensor> tensors;
    for (int k = 0; k < kLlmcNumTensors; ++k) {
      absl::StatusOr<Tensor> t = r->Read(k);
      ASSERT_TRUE(t.ok());
      tensors.push_back(*t);
    }
    if (version == kLlmcVersionF32) {
      EXPECT_EQ(tensors[4].data<float>()[5], 4.0f + 5.0f / 1024.0f);
    }
    ASSERT_TRUE(WriteLlmc(dir + "/out.bin", r->header(), tensors).ok());
    EXPECT_EQ(test::FirstDifference(ReadBytes(dir + "/out.bin"), bytes), -1)
        << "version " << version;
  }
}

// Sets header word `index` of a valid file to `value`.
std::string WithWord(int index, int32_t value) {
  std::string bytes = LlmcBytes(TinyHeader(kLlmcVersionF32));
  std::memcpy(bytes.data() + 4 * index, &value, 4);
  return bytes;
}

TEST(LlmcReaderTest, BadHeadersAreClearErrors) {
  const std::string path = Scratch() + "/bad.bin";
  const std::pair<std::string, const char*> cases[] = {
      {WithWord(0, 20240327), "magic number"},
      {WithWord(1, 4), "version 4"},
      {WithWord(4, 0), "field L = 0"},
      {WithWord(3, -5), "field V = -5"},
      {WithWord(5, 3), "not divisible by NH"},
      {WithWord(7, 4), "smaller than V"},
      {WithWord(6, 1 << 23), "too large"},
      {std::string(100, 'x'), "shorter than llm.c's 1024-byte header"},
  };
  for (const auto& [bytes, expect] : cases) {
    const absl::Status status = OpenLlmc(path, bytes);
    ASSERT_FALSE(status.ok()) << expect;
    EXPECT_THAT(std::string(status.message()),
                AllOf(HasSubstr(path), HasSubstr(expect)));
  }
}

TEST(LlmcReaderTest, TruncationNamesTheTensorItEndsIn) {
  const std::string path = Scratch() + "/cut.bin";
  const LlmcHeader h = TinyHeader(kLlmcVersionF32);
  const std::string good = LlmcBytes(h);
  const LlmcTensor fcw = LlmcTensors(h)[10];
  absl::Status status =
      OpenLlmc(path, good.substr(0, fcw.offset + fcw.nbytes / 2));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(
      std::string(status.message()),
      AllOf(HasSubstr(path), HasSubstr("tensor fcw"), HasSubstr("truncated")));
  status = OpenLlmc(path, good + "extra");
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr(path), HasSubstr("5 bytes follow")));
  for (size_t n = 0; n < good.size(); n += 3) {
    status = OpenLlmc(path, good.substr(0, n));
    ASSERT_FALSE(status.ok()) << n;
    ASSERT_THAT(std::string(status.message()), HasSubstr(path));
  }
}

TEST(LlmcReaderTest, FlippedHeaderBytesNeverCrash) {
  const std::string path = Scratch() + "/flip.bin";
  const std::string good = LlmcBytes(TinyHeader(kLlmcVersionBf16));
  for (size_t i = 0; i < 32; ++i) {
    for (unsigned char mask : {0x01, 0x10, 0x80, 0xff}) {
      std::string bytes = good;
      bytes[i] = static_cast<char>(bytes[i] ^ mask);
      WriteBytes(path, bytes);
      absl::StatusOr<LlmcReader> r = LlmcReader::Open(path);
      if (!r.ok()) {
        ASSERT_THAT(std::string(r.status().message()), HasSubstr(path));
        continue;
      }
      for (int k = 0; k < kLlmcNumTensors; ++k) ASSERT_TRUE(r->Read(k).ok());
    }
  }
}

}  // namespace
}  // namespace trellis
