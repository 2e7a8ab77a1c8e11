// The raw I/O under checkpoints: DirectWriter puts every byte where it
// belongs whatever the alignment (O_DIRECT middles, buffered ends), and
// tensor files written in slices of several megabytes, converted to bf16
// and f16 on the way, read back exactly under other slicings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "framework/float16.h"
#include "framework/hdf5.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/direct_writer.h"
#include "tools/checkpoint/shard_io.h"

namespace trellis {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Byte i of a range is a function of its position in the file.
char ByteAt(int64_t file_offset) {
  return static_cast<char>((file_offset * 7 + file_offset / 4099) & 0xff);
}

TEST(DirectWriterTest, WritesEveryRangeWhereItBelongs) {
  const std::string path = test::ScratchDir() + "/file.bin";
  const int64_t size = int64_t{40} << 20;
  {
    std::ofstream out(path, std::ios::binary);
    out.seekp(size - 1);
    out.put('\0');
  }
  // Small and large ranges, aligned and not, spanning several chunks.
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, 100},
      {100, 3 << 20},
      {(3 << 20) + 100, 4093},
      {(3 << 20) + 4193, (17 << 20) + 5},
      {(20 << 20) + 4193, 4096},
      {int64_t{24} << 20, int64_t{16} << 20}};
  absl::StatusOr<DirectWriter> w = DirectWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const auto& [offset, bytes] : ranges) {
    const absl::Status s = w->Write(
        offset, bytes, [offset = offset](char* dst, int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) dst[i - b] = ByteAt(offset + i);
        });
    ASSERT_TRUE(s.ok()) << s;
  }
  ASSERT_TRUE(w->Close().ok());
  const std::string got = ReadAll(path);
  ASSERT_EQ(static_cast<int64_t>(got.size()), size);
  std::vector<bool> covered(size, false);
  for (const auto& [offset, bytes] : ranges) {
    for (int64_t i = offset; i < offset + bytes; ++i) covered[i] = true;
  }
  for (int64_t i = 0; i < size; ++i) {
    ASSERT_EQ(got[i], covered[i] ? ByteAt(i) : '\0') << "byte " << i;
  }
}

// Element i of the logical tensor.
float Value(int64_t i) { return static_cast<float>(i % 100003) * 0.25f - 7.0f; }

TEST(TensorFileTest, LargeSlicesRoundTripThroughEveryStoredType) {
  const std::string dir = test::ScratchDir();
  // (1500, 1024) float32 is 6 MB: large enough for the O_DIRECT path. A
  // small dataset first puts the large one at an unaligned offset.
  const Shape shape = {1500, 1024};
  for (DType stored : {DType::kF32, DType::kBF16, DType::kF16}) {
    const std::string path = dir + "/t_" + DTypeName(stored) + ".h5";
    std::vector<TensorLocation> where;
    {
      absl::StatusOr<hdf5::File> f = hdf5::File::Create(path);
      ASSERT_TRUE(f.ok());
      ASSERT_TRUE(DefineTensor(*f, "small", {3}, stored).ok());
      absl::StatusOr<TensorLocation> big =
          DefineTensor(*f, "exp_avg/big", shape, stored);
      ASSERT_TRUE(big.ok()) << big.status();
      where.push_back(*big);
      ASSERT_TRUE(f->Close().ok());
    }
    // Written as 2 row slices, read as 4 column and 3 row slices.
    absl::StatusOr<TensorFileWriter> writer = TensorFileWriter::Open(path);
    ASSERT_TRUE(writer.ok());
    for (int64_t part = 0; part < 2; ++part) {
      const ShardSpec spec = ShardSpec::Split(shape, 0, 2, part);
      Tensor local = Tensor::Empty(spec.LocalShape(), DType::kF32);
      spec.ForEachElement(
          [&](int64_t l, int64_t g) { local.data<float>()[l] = Value(g); });
      ASSERT_TRUE(writer->WriteShard(where[0], spec, local).ok());
    }
    ASSERT_TRUE(writer->Close().ok());
    absl::StatusOr<TensorFileReader> reader = TensorFileReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status();
    absl::StatusOr<TensorLocation> found = reader->Locate("exp_avg/big");
    ASSERT_TRUE(found.ok());
    EXPECT_EQ(found->dtype, stored);
    EXPECT_EQ(found->offset, where[0].offset);
    std::vector<ShardSpec> reads;
    for (int64_t part = 0; part < 4; ++part) {
      reads.push_back(ShardSpec::Split(shape, 1, 4, part));
    }
    for (int64_t part = 0; part < 3; ++part) {
      reads.push_back(ShardSpec::Split(shape, 0, 3, part));
    }
    for (const ShardSpec& cut : reads) {
      Tensor local = Tensor::Empty(cut.LocalShape(), DType::kF64);
      ASSERT_TRUE(reader->ReadShard(*found, cut, local).ok());
      cut.ForEachElement([&](int64_t l, int64_t g) {
        float want = Value(g);
        if (stored == DType::kBF16) want = Bf16ToFloat(FloatToBf16(want));
        if (stored == DType::kF16) want = HalfToFloat(FloatToHalf(want));
        ASSERT_EQ(local.data<double>()[l], want)
            << DTypeName(stored) << " element " << g << " of "
            << cut.DebugString();
      });
    }
  }
}

}  // namespace
}  // namespace trellis
