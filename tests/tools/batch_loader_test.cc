// BatchLoader: document masks (doc_start, loss weights normalized over the
// global batch) and the background read of the next step, which must give
// the batches, counts and resumes of reading each step in turn.
#include "data/batch_loader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

constexpr int64_t kSeq = 16;

// Documents of 1 to 12 tokens, so most windows cross a boundary.
std::string WriteShortDocuments(const std::string& dir) {
  const std::string path = dir + "/short.h5";
  auto writer = TokenDatasetWriter::Create(path, test::kByteVocab);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (uint32_t d = 0; d < 400; ++d) {
    std::vector<uint32_t> doc(1 + (d * 7) % 12);
    for (size_t i = 0; i < doc.size(); ++i) doc[i] = 97 + (d + i) % 26;
    EXPECT_TRUE((*writer)->AppendDocument(doc).ok());
  }
  EXPECT_TRUE((*writer)->Finish().ok());
  return path;
}

BatchLoader::Config MaskConfig(int dp, int dp_rank) {
  BatchLoader::Config c;
  c.seq_len = kSeq;
  c.val_fraction = 0.05;
  c.global_batch = 8;
  c.micro_batch = 2;
  c.seed = 7;
  c.dp = dp;
  c.dp_rank = dp_rank;
  c.document_mask = true;
  c.eod_mask_loss = true;
  return c;
}

std::unique_ptr<BatchLoader> Open(const std::string& data,
                                  const BatchLoader::Config& config) {
  absl::StatusOr<std::unique_ptr<BatchLoader>> loader =
      BatchLoader::Open(data, config);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return loader.ok() ? *std::move(loader) : nullptr;
}

TEST(BatchLoaderTest, DocumentStartsAndLossWeights) {
  const std::string data = WriteShortDocuments(test::ScratchDir());
  const int32_t eot = static_cast<int32_t>(test::kByteVocab.eot_token);
  for (int step = 0; step < 3; ++step) {
    double weight_sum = 0;
    int64_t eots = 0;
    for (int rank = 0; rank < 2; ++rank) {
      std::unique_ptr<BatchLoader> loader = Open(data, MaskConfig(2, rank));
      ASSERT_NE(loader, nullptr);
      absl::StatusOr<std::vector<MicroBatch>> batch;
      for (int s = 0; s <= step; ++s) batch = loader->NextStep();
      ASSERT_TRUE(batch.ok()) << batch.status();
      for (const MicroBatch& mb : *batch) {
        ASSERT_TRUE(mb.doc_start.defined() && mb.loss_weight.defined());
        for (int64_t r = 0; r < mb.tokens.dim(0); ++r) {
          const int32_t* tok = mb.tokens.data<int32_t>() + r * kSeq;
          const int32_t* start = mb.doc_start.data<int32_t>() + r * kSeq;
          const float* w = mb.loss_weight.data<float>() + r * kSeq;
          int32_t expect = 0;
          for (int64_t t = 0; t < kSeq; ++t) {
            if (t > 0 && tok[t - 1] == eot) expect = static_cast<int32_t>(t);
            EXPECT_EQ(start[t], expect) << "row " << r << " token " << t;
            EXPECT_EQ(w[t] == 0.0f, tok[t] == eot) << "token " << t;
            eots += tok[t] == eot;
            weight_sum += w[t];
          }
        }
      }
    }
    ASSERT_GT(eots, 0);
    // Over both ranks the weights add up to G·T: the mean over counted
    // tokens of the whole global batch, however it is split.
    EXPECT_NEAR(weight_sum, 8.0 * kSeq, 1e-3) << "step " << step;
  }
}

bool SameTokens(const std::vector<MicroBatch>& a,
                const std::vector<MicroBatch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].tokens.shape() != b[i].tokens.shape() ||
        std::memcmp(a[i].tokens.raw(), b[i].tokens.raw(),
                    a[i].tokens.nbytes()) != 0 ||
        std::memcmp(a[i].loss_weight.raw(), b[i].loss_weight.raw(),
                    a[i].loss_weight.nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

// Reading ahead gives the batches of reading each step in turn, counts only
// the batches returned, and resumes exactly, for one file and a blend.
TEST(BatchLoaderTest, PrefetchKeepsOrderCountsAndResume) {
  const std::string dir = test::ScratchDir();
  const std::string one = WriteShortDocuments(dir);
  const std::string other = dir + "/other.h5";
  test::WriteTokenFile(other, test::kByteVocab, 5000);
  for (const std::string& data :
       {one, absl::StrCat("0.3:", one, ",0.7:", other)}) {
    SCOPED_TRACE(data);
    BatchLoader::Config ahead = MaskConfig(1, 0), inline_reads = ahead;
    inline_reads.prefetch = false;
    std::unique_ptr<BatchLoader> a = Open(data, ahead);
    std::unique_ptr<BatchLoader> b = Open(data, inline_reads);
    ASSERT_TRUE(a && b);
    std::vector<std::vector<MicroBatch>> steps;
    std::vector<int64_t> sources_after_two;
    for (int s = 0; s < 5; ++s) {
      absl::StatusOr<std::vector<MicroBatch>> x = a->NextStep();
      absl::StatusOr<std::vector<MicroBatch>> y = b->NextStep();
      ASSERT_TRUE(x.ok() && y.ok());
      EXPECT_TRUE(SameTokens(*x, *y)) << "step " << s;
      EXPECT_EQ(a->samples_consumed(), 8 * (s + 1));
      EXPECT_EQ(a->source_samples(), b->source_samples());
      if (s == 1) sources_after_two = a->source_samples();
      steps.push_back(*std::move(x));
    }
    // Resume after two steps: the third step comes again.
    ASSERT_TRUE(a->Restore(16, sources_after_two).ok());
    EXPECT_EQ(a->samples_consumed(), 16);
    absl::StatusOr<std::vector<MicroBatch>> again = a->NextStep();
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(SameTokens(*again, steps[2]));
    EXPECT_FALSE(SameTokens(*again, steps[3]));
  }
}

}  // namespace
}  // namespace trellis
