// Token files of more than 2^32 tokens, end to end: the dataset, windows,
// the sampler and the batch loader address tokens past 2^32 exactly.
//
// The file is sparse: /tokens is a chunked dataset of N > 2^32 uint16
// elements whose unwritten chunks read as the fill value (0, a valid id),
// so it takes a few kilobytes on disk. A pattern is written just past 2^32
// (and nowhere below it), where any offset cut to 32 bits would read zeros.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/batch_loader.h"
#include "data/sampler.h"
#include "data/token_dataset.h"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

constexpr int64_t k4G = int64_t{1} << 32;
constexpr int64_t kTokens = k4G + (int64_t{1} << 20) + 1;
constexpr int64_t kPatternAt = k4G + 3 * 1024;  // window 2^22 + 3 at T=1024
constexpr int64_t kPatternLength = 4096;
constexpr int64_t kDocStart = k4G + 5;

int32_t PatternId(int64_t i) { return static_cast<int32_t>(1 + i % 250); }

void WriteAttribute(hid_t file, const char* name, int64_t value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr =
      H5Acreate2(file, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &value), 0);
  H5Aclose(attr);
  H5Sclose(space);
}

// Writes elements [start, start + values.size()) of a 1-D dataset.
void WriteRange(hid_t dataset, hid_t memory_type, int64_t start,
                const void* values, int64_t count) {
  const hsize_t offset = static_cast<hsize_t>(start);
  const hsize_t n = static_cast<hsize_t>(count);
  const hid_t file_space = H5Dget_space(dataset);
  ASSERT_GE(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &offset, nullptr,
                                &n, nullptr),
            0);
  const hid_t memory_space = H5Screate_simple(1, &n, nullptr);
  ASSERT_GE(H5Dwrite(dataset, memory_type, memory_space, file_space,
                     H5P_DEFAULT, values),
            0);
  H5Sclose(memory_space);
  H5Sclose(file_space);
}

void WriteSparseTokenFile(const std::string& path) {
  const hid_t file =
      H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t string_type = H5Tcopy(H5T_C_S1);
  H5Tset_size(string_type, 4);
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t name = H5Acreate2(file, "tokenizer", string_type, scalar,
                                H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Awrite(name, string_type, "byte"), 0);
  H5Aclose(name);
  H5Sclose(scalar);
  H5Tclose(string_type);
  WriteAttribute(file, "vocab_size", 257);
  WriteAttribute(file, "eot_token", 256);

  const hsize_t dims = static_cast<hsize_t>(kTokens);
  const hsize_t chunk = hsize_t{1} << 16;
  const hid_t space = H5Screate_simple(1, &dims, nullptr);
  const hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(properties, 1, &chunk);
  const uint16_t fill = 0;
  H5Pset_fill_value(properties, H5T_NATIVE_UINT16, &fill);
  const hid_t tokens = H5Dcreate2(file, "tokens", H5T_STD_U16LE, space,
                                  H5P_DEFAULT, properties, H5P_DEFAULT);
  ASSERT_GE(tokens, 0);
  std::vector<uint16_t> pattern(kPatternLength);
  for (int64_t i = 0; i < kPatternLength; ++i) {
    pattern[i] = static_cast<uint16_t>(PatternId(kPatternAt + i));
  }
  WriteRange(tokens, H5T_NATIVE_UINT16, kPatternAt, pattern.data(),
             kPatternLength);
  const uint16_t eot = 256;
  WriteRange(tokens, H5T_NATIVE_UINT16, kTokens - 1, &eot, 1);
  H5Dclose(tokens);
  H5Pclose(properties);
  H5Sclose(space);

  const uint64_t offsets[2] = {0, static_cast<uint64_t>(kDocStart)};
  const hsize_t two = 2;
  const hid_t offset_space = H5Screate_simple(1, &two, nullptr);
  const hid_t doc_offsets =
      H5Dcreate2(file, "doc_offsets", H5T_STD_U64LE, offset_space, H5P_DEFAULT,
                 H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Dwrite(doc_offsets, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL,
                     H5P_DEFAULT, offsets),
            0);
  H5Dclose(doc_offsets);
  H5Sclose(offset_space);
  ASSERT_GE(H5Fclose(file), 0);
}

class LargeTokenFileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(::testing::TempDir() + "/trellis_large_" +
                            std::to_string(::getpid()) + ".h5");
    WriteSparseTokenFile(*path_);
  }
  static void TearDownTestSuite() {
    std::remove(path_->c_str());
    delete path_;
  }
  static std::string* path_;
};
std::string* LargeTokenFileTest::path_ = nullptr;

TEST_F(LargeTokenFileTest, DatasetReadsPast4GTokens) {
  absl::StatusOr<TokenDataset> data = TokenDataset::Open(*path_);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_tokens(), kTokens);
  std::vector<int32_t> got(16);
  ASSERT_TRUE(data->ReadTokens(kPatternAt + 100, 16, got.data()).ok());
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(got[i], PatternId(kPatternAt + 100 + i)) << i;
  }
  // The same offset cut to 32 bits holds zeros.
  ASSERT_TRUE(data->ReadTokens(kPatternAt + 100 - k4G, 16, got.data()).ok());
  EXPECT_EQ(got[0], 0);
  absl::StatusOr<std::vector<int64_t>> offsets = data->ReadDocOffsets(0, 2);
  ASSERT_TRUE(offsets.ok()) << offsets.status();
  EXPECT_EQ((*offsets)[1], kDocStart);
  EXPECT_FALSE(data->ReadTokens(kTokens - 1, 2, got.data()).ok());
}

TEST_F(LargeTokenFileTest, WindowsAndSamplerAddressPast4G) {
  constexpr int64_t kSeqLen = 1024;
  absl::StatusOr<TokenWindows> windows =
      TokenWindows::Make(kTokens, kSeqLen, 0.0001);
  ASSERT_TRUE(windows.ok()) << windows.status();
  EXPECT_EQ(windows->num_windows(), (kTokens - 1) / kSeqLen);
  EXPECT_GT(windows->num_windows(), int64_t{1} << 22);
  const int64_t w = kPatternAt / kSeqLen;
  EXPECT_EQ(windows->WindowStart(w), kPatternAt);
  EXPECT_EQ(windows->WindowStart(windows->ValWindow(0)),
            windows->val_begin() * kSeqLen);
  EXPECT_GT(windows->WindowStart(windows->ValWindow(0)), k4G);

  absl::StatusOr<TrainSampler> sampler =
      TrainSampler::Make(*windows, 64, /*seed=*/3);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  // A late epoch's batch: every window is a train window.
  const int64_t late = 5 * sampler->samples_per_epoch() + 640;
  for (int64_t window : sampler->BatchAt(late)) {
    ASSERT_GE(window, 0);
    ASSERT_LT(window, windows->num_train_windows());
  }
  // The epoch visits every train window past 2^32 once.
  const std::vector<int64_t> order = sampler->EpochPermutation(5);
  int64_t order_past = 0;
  for (int64_t window : order) order_past += window * kSeqLen >= k4G;
  EXPECT_EQ(order_past, windows->num_train_windows() - k4G / kSeqLen);
  EXPECT_GT(order_past, 0);
}

TEST_F(LargeTokenFileTest, BatchLoaderReadsAWindowPast4G) {
  BatchLoader::Config config;
  config.seq_len = 1024;
  config.val_fraction = 0.0001;
  config.global_batch = 4;
  config.micro_batch = 2;
  absl::StatusOr<std::unique_ptr<BatchLoader>> loader =
      BatchLoader::Open(*path_, config);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const std::vector<int64_t> starts = {kPatternAt, kPatternAt + 1024};
  absl::StatusOr<std::vector<MicroBatch>> windows = (*loader)->Windows(starts);
  ASSERT_TRUE(windows.ok()) << windows.status();
  ASSERT_EQ(windows->size(), 1u);
  const MicroBatch& mb = (*windows)[0];
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t t = 0; t < 1024; ++t) {
      const int64_t at = kPatternAt + r * 1024 + t;
      ASSERT_EQ(mb.tokens.data<int32_t>()[r * 1024 + t], PatternId(at));
      ASSERT_EQ(mb.targets.data<int32_t>()[r * 1024 + t], PatternId(at + 1));
    }
  }
  // Training steps read windows from anywhere in the file.
  for (int step = 0; step < 3; ++step) {
    absl::StatusOr<std::vector<MicroBatch>> next = (*loader)->NextStep();
    ASSERT_TRUE(next.ok()) << next.status();
  }
  EXPECT_EQ((*loader)->samples_consumed(), 12);
}

}  // namespace
}  // namespace trellis
