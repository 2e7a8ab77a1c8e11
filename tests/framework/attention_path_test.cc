// The attention path's names, and the strided views through which cuDNN
// reads trellis's packed attention buffers (attention_cudnn_layout.h): each
// view must address exactly the element the CPU kernel and the CUDA kernels
// use for (b, h, t, d).
#include "framework/kernels/attention_path.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "framework/cuda/attention_cudnn_layout.h"
#include "framework/kernels/attention.h"
#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using cudnn_attention::ElementAt;
using cudnn_attention::GroupedQkvView;
using cudnn_attention::PackedQkvView;
using cudnn_attention::QkvPart;
using cudnn_attention::RowsView;
using cudnn_attention::StatsView;
using cudnn_attention::Transposed;
using cudnn_attention::View;
using ::testing::HasSubstr;

TEST(AttentionPathTest, NamesRoundTrip) {
  for (AttentionPath path :
       {AttentionPath::kCudnn, AttentionPath::kMma, AttentionPath::kSimt}) {
    const absl::StatusOr<AttentionPath> parsed =
        ParseAttentionPath(AttentionPathName(path));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, path);
  }
  EXPECT_EQ(AttentionPathName(AttentionPath::kCudnn), "cudnn");
  EXPECT_EQ(kDefaultAttentionPath, AttentionPath::kCudnn);
}

TEST(AttentionPathTest, RefusesOtherNamesInOneLine) {
  for (const std::string name : {"", "CUDNN", "flash", "mma "}) {
    const absl::StatusOr<AttentionPath> parsed = ParseAttentionPath(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(parsed.status().message());
    EXPECT_THAT(message, HasSubstr("--attention=" + name));
    EXPECT_THAT(message, HasSubstr("cudnn, mma or simt"));
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

// Odd sizes so that no two strides coincide by accident.
constexpr int64_t B = 3, T = 5, H = 4, D = 6, C = H * D;

TEST(AttentionCudnnLayoutTest, QkvViewsAddressThePackedColumns) {
  const View q = PackedQkvView(B, T, H, D, QkvPart::kQ);
  const View k = PackedQkvView(B, T, H, D, QkvPart::kK);
  const View v = PackedQkvView(B, T, H, D, QkvPart::kV);
  const View kt = Transposed(k);
  for (const View* view : {&q, &k, &v}) {
    EXPECT_EQ(view->dims, (std::array<int64_t, 4>{B, H, T, D}));
  }
  EXPECT_EQ(kt.dims, (std::array<int64_t, 4>{B, H, D, T}));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t d = 0; d < D; ++d) {
          const int64_t row = (b * T + t) * 3 * C;
          ASSERT_EQ(ElementAt(q, b, h, t, d), row + h * D + d);
          ASSERT_EQ(ElementAt(k, b, h, t, d), row + C + h * D + d);
          ASSERT_EQ(ElementAt(v, b, h, t, d), row + 2 * C + h * D + d);
          // Kᵀ (b, h, d, t) is K (b, h, t, d).
          ASSERT_EQ(ElementAt(kt, b, h, d, t), ElementAt(k, b, h, t, d));
        }
      }
    }
  }
}

// Grouped-query qkv rows [H q | Hkv k | Hkv v] heads: K and V have Hkv
// heads, and head g of each is where the CPU kernel reads key/value head g.
TEST(AttentionCudnnLayoutTest, GroupedQkvViewsAddressTheirHeads) {
  constexpr int64_t Hkv = 2, W = (H + 2 * Hkv) * D;
  const View q = GroupedQkvView(B, T, H, Hkv, D, QkvPart::kQ);
  const View k = GroupedQkvView(B, T, H, Hkv, D, QkvPart::kK);
  const View v = GroupedQkvView(B, T, H, Hkv, D, QkvPart::kV);
  EXPECT_EQ(q.dims, (std::array<int64_t, 4>{B, H, T, D}));
  EXPECT_EQ(k.dims, (std::array<int64_t, 4>{B, Hkv, T, D}));
  EXPECT_EQ(v.dims, (std::array<int64_t, 4>{B, Hkv, T, D}));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = (b * T + t) * W;
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t h = 0; h < H; ++h) {
          ASSERT_EQ(ElementAt(q, b, h, t, d), row + h * D + d);
        }
        for (int64_t g = 0; g < Hkv; ++g) {
          ASSERT_EQ(ElementAt(k, b, g, t, d), row + H * D + g * D + d);
          ASSERT_EQ(ElementAt(v, b, g, t, d), row + (H + Hkv) * D + g * D + d);
        }
      }
    }
  }
  // With Hkv = H, the packed multi-head views.
  for (QkvPart part : {QkvPart::kQ, QkvPart::kK, QkvPart::kV}) {
    const View a = GroupedQkvView(B, T, H, H, D, part);
    const View p = PackedQkvView(B, T, H, D, part);
    EXPECT_EQ(a.dims, p.dims);
    EXPECT_EQ(a.strides, p.strides);
    EXPECT_EQ(a.offset, p.offset);
  }
}

TEST(AttentionCudnnLayoutTest, RowsAndStatsViewsMatchTheKernels) {
  const View rows = RowsView(B, T, H, D);
  const View stats = StatsView(B, T, H);
  EXPECT_EQ(stats.dims, (std::array<int64_t, 4>{B, H, T, 1}));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        // The saved log-sum-exps are (B, H, T): attention.h.
        ASSERT_EQ(ElementAt(stats, b, h, t, 0), (b * H + h) * T + t);
        for (int64_t d = 0; d < D; ++d) {
          ASSERT_EQ(ElementAt(rows, b, h, t, d), (b * T + t) * C + h * D + d);
        }
      }
    }
  }
}

// The CPU kernel has one implementation: every path gives the same bits.
TEST(AttentionPathTest, CpuIgnoresThePath) {
  const Tensor qkv = kernel_test::Random({2, 7, 3 * 8}, 5, DType::kF32);
  Tensor first = Tensor::Empty({2, 7, 8}, DType::kF32);
  Tensor saved =
      Tensor::Empty(AttentionSavedShape(Device::Cpu(), 2, 7, 2), DType::kF32);
  AttentionForward(qkv, 2, first, saved, AttentionPath::kCudnn);
  for (AttentionPath path : {AttentionPath::kMma, AttentionPath::kSimt}) {
    Tensor out = Tensor::Empty({2, 7, 8}, DType::kF32);
    AttentionForward(qkv, 2, out, saved, path);
    for (int64_t i = 0; i < out.numel(); ++i) {
      ASSERT_EQ(out.data<float>()[i], first.data<float>()[i]) << i;
    }
  }
}

}  // namespace
}  // namespace trellis
