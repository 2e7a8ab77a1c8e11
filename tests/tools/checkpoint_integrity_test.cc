// Checkpoint integrity: tensors written in strided slices by several
// writers carry checksums that verify under any other slicing; a flipped
// byte or a saved NaN is refused at load, naming the file and the tensor;
// files without checksums still load, finite values only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/float16.h"
#include "framework/hdf5.h"
#include "parallel/communicator.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/shard_io.h"
#include "tools/checkpoint/tensor_checksum.h"

namespace trellis {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// (1500, 1024): two checksum chunks of 2^20 elements.
const Shape kShape = {1500, 1024};

float Value(int64_t i) { return static_cast<float>(i % 9973) * 0.125f - 3.0f; }

Tensor Slice(const ShardSpec& spec, int64_t nan_at = -1) {
  Tensor t = Tensor::Empty(spec.LocalShape(), DType::kF32);
  spec.ForEachElement([&](int64_t l, int64_t g) {
    t.data<float>()[l] =
        g == nan_at ? std::numeric_limits<float>::quiet_NaN() : Value(g);
  });
  return t;
}

// Saves "w" as 4 column slices (strided in the file) and its moments,
// with a NaN at element `nan_at` of exp_avg_sq; returns the step dir.
std::string Save(const std::string& dir, DType model_dtype,
                 int64_t nan_at = -1) {
  CheckpointShards mine;
  for (int64_t part = 0; part < 4; ++part) {
    const ShardSpec spec = ShardSpec::Split(kShape, 1, 4, part);
    mine.model.push_back({"w", spec, Slice(spec)});
    mine.exp_avg.push_back({"w", spec, Slice(spec)});
    mine.exp_avg_sq.push_back({"w", spec, Slice(spec, nan_at)});
  }
  mine.optimizer_step = 3;
  SelfCommunicator world("world");
  TrainingState state;
  state.step = 3;
  SaveOptions options;
  options.model_dtype = model_dtype;
  options.log = false;
  const absl::Status s = SaveShards(dir, state, mine, world, true, options);
  EXPECT_TRUE(s.ok()) << s;
  return dir + "/" + CheckpointName(3);
}

absl::Status Load(const std::string& step, const ShardSpec& spec,
                  Tensor* model = nullptr) {
  CheckpointShards mine;
  mine.model.push_back(
      {"w", spec, Tensor::Empty(spec.LocalShape(), DType::kF32)});
  mine.exp_avg.push_back(
      {"w", spec, Tensor::Empty(spec.LocalShape(), DType::kF32)});
  mine.exp_avg_sq.push_back(
      {"w", spec, Tensor::Empty(spec.LocalShape(), DType::kF32)});
  absl::Status s = LoadShards(step, mine);
  if (model != nullptr) *model = mine.model[0].tensor;
  return s;
}

int64_t OffsetOf(const std::string& file, const std::string& path) {
  absl::StatusOr<TensorFileReader> r = TensorFileReader::Open(file);
  EXPECT_TRUE(r.ok()) << r.status();
  absl::StatusOr<TensorLocation> where = r->Locate(path);
  EXPECT_TRUE(where.ok()) << where.status();
  EXPECT_TRUE(where->checksum.has_value()) << path;
  return where->offset;
}

void FlipByte(const std::string& file, int64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  const char c = static_cast<char>(f.get() ^ 0x5a);
  f.seekp(offset);
  f.put(c);
}

TEST(TensorChecksumTest, FormatParsesBackAndGarbageIsRefused) {
  TensorChecksum c = TensorChecksum::Zero(3 << 20);
  ASSERT_EQ(c.sums.size(), 3u);
  const float x[2] = {1.5f, -2.0f};
  c.Add(reinterpret_cast<const char*>(x), DType::kF32, (1 << 20) - 1, 2);
  EXPECT_NE(c.sums[0], 0u);
  EXPECT_NE(c.sums[1], 0u);
  EXPECT_EQ(c.sums[2], 0u);
  absl::StatusOr<TensorChecksum> back = TensorChecksum::Parse(c.Format());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->chunk, c.chunk);
  EXPECT_EQ(back->sums, c.sums);
  EXPECT_FALSE(TensorChecksum::Parse("crc 12 ab").ok());
  EXPECT_FALSE(TensorChecksum::Parse("xsum64 0").ok());
  EXPECT_FALSE(TensorChecksum::Parse("xsum64 8 zz").ok());
}

TEST(CheckpointIntegrityTest, StridedSlicesVerifyAndRoundTripUnderAnyCut) {
  for (DType stored : {DType::kF32, DType::kBF16}) {
    const std::string step = Save(test::ScratchDir(), stored);
    std::vector<ShardSpec> cuts = {ShardSpec::Replicated(kShape)};
    for (int64_t p = 0; p < 3; ++p)
      cuts.push_back(ShardSpec::Split(kShape, 0, 3, p));
    for (int64_t p = 0; p < 2; ++p)
      cuts.push_back(ShardSpec::Split(kShape, 1, 2, p));
    for (const ShardSpec& cut : cuts) {
      Tensor got;
      const absl::Status s = Load(step, cut, &got);
      ASSERT_TRUE(s.ok()) << s << " " << cut.DebugString();
      cut.ForEachElement([&](int64_t l, int64_t g) {
        float want = Value(g);
        if (stored == DType::kBF16) want = Bf16ToFloat(FloatToBf16(want));
        ASSERT_EQ(got.data<float>()[l], want) << "element " << g;
      });
    }
  }
}

TEST(CheckpointIntegrityTest, AFlippedByteIsRefusedNamingTheTensor) {
  const std::string step = Save(test::ScratchDir(), DType::kF32);
  const std::string model = step + "/model.h5";
  // Element 1200 * 1024 + 5 lies in the second chunk (rows 1024 onward).
  const int64_t element = 1200 * 1024 + 5;
  FlipByte(model, OffsetOf(model, "w") + 4 * element + 1);
  const absl::Status whole = Load(step, ShardSpec::Replicated(kShape));
  EXPECT_EQ(whole.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(whole.message()),
              AllOf(HasSubstr(model), HasSubstr("tensor w"),
                    HasSubstr("checksum mismatch")));
  // A column slice touches every chunk; the first of 3 row slices (rows
  // [0, 500)) touches only the first chunk, which is intact.
  EXPECT_EQ(Load(step, ShardSpec::Split(kShape, 1, 2, 0)).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Load(step, ShardSpec::Split(kShape, 0, 3, 2)).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Load(step, ShardSpec::Split(kShape, 0, 3, 0)).ok());
}

TEST(CheckpointIntegrityTest, AFlippedMomentByteIsRefusedNamingTheTensor) {
  const std::string step = Save(test::ScratchDir(), DType::kBF16);
  const std::string opt = step + "/optimizer.h5";
  FlipByte(opt, OffsetOf(opt, "exp_avg_sq/w") + 4 * 77);
  const absl::Status s = Load(step, ShardSpec::Split(kShape, 1, 4, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(opt), HasSubstr("tensor exp_avg_sq/w")));
}

TEST(CheckpointIntegrityTest, ASavedNanIsRefusedNamingTheTensor) {
  const int64_t element = 700 * 1024 + 3;
  const std::string step = Save(test::ScratchDir(), DType::kF32, element);
  const absl::Status s = Load(step, ShardSpec::Split(kShape, 0, 2, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("tensor exp_avg_sq/w"), HasSubstr("nan"),
                    HasSubstr(absl::StrCat("element ", element))));
  // A slice without the NaN loads.
  EXPECT_TRUE(Load(step, ShardSpec::Split(kShape, 0, 3, 0)).ok());
}

// A file written without checksums (as before they existed) reads, and a
// NaN in it is still refused.
TEST(CheckpointIntegrityTest, FilesWithoutChecksumsLoadFiniteValuesOnly) {
  const std::string path = test::ScratchDir() + "/old.h5";
  const Shape shape = {6, 4};
  {
    absl::StatusOr<hdf5::File> f = hdf5::File::Create(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(DefineTensor(*f, "good", shape, DType::kF32).ok());
    ASSERT_TRUE(DefineTensor(*f, "bad", shape, DType::kF16).ok());
    ASSERT_TRUE(f->Close().ok());
  }
  absl::StatusOr<TensorFileReader> r = TensorFileReader::Open(path);
  ASSERT_TRUE(r.ok());
  absl::StatusOr<TensorFileWriter> w = TensorFileWriter::Open(path);
  ASSERT_TRUE(w.ok());
  const ShardSpec whole = ShardSpec::Replicated(shape);
  Tensor values = Slice(whole, /*nan_at=*/9);
  ASSERT_TRUE(w->WriteShard(*r->Locate("bad"), whole, values).ok());
  ASSERT_TRUE(w->WriteShard(*r->Locate("good"), whole, Slice(whole)).ok());
  ASSERT_TRUE(w->Close().ok());
  absl::StatusOr<TensorLocation> good = r->Locate("good");
  ASSERT_TRUE(good.ok());
  EXPECT_FALSE(good->checksum.has_value());
  Tensor got = Tensor::Empty(shape, DType::kF32);
  ASSERT_TRUE(r->ReadShard(*good, whole, got).ok());
  EXPECT_EQ(got.data<float>()[23], Value(23));
  const absl::Status s = r->ReadShard(*r->Locate("bad"), whole, got);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("tensor bad"), HasSubstr("element 9")));
}

}  // namespace
}  // namespace trellis
