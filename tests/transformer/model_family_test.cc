// The model seam: a config names its family, the family's declarations
// give the parameter count, and its rules name the flags to change.
#include "transformer/model_family.h"

#include <gtest/gtest.h>

#include <string>

#include "transformer/gpt_family.h"

namespace trellis {
namespace {

ModelConfig Gpt2Small() {
  ModelConfig c;
  c.n_layer = 12;
  c.n_head = 12;
  c.d_model = 768;
  c.seq_len = 1024;
  c.vocab_size = 50257;
  return c;
}

TEST(ModelFamilyTest, Gpt2SmallHasItsPublishedParameterCount) {
  // Hugging Face's gpt2: 124,439,808 parameters, wte tied to the head.
  EXPECT_EQ(Gpt2Small().NumParameters(), 124439808);
}

TEST(ModelFamilyTest, ParameterCountIsTheSumOfTheDeclaredShapes) {
  ModelConfig c;
  c.n_layer = 3;
  c.vocab_size = 300;
  ParameterSet params;
  FamilyOf(c).DeclareParameters(c, ChunkPlan{0, c.n_layer, true, true},
                                TpPlace{}, 1, Device::Cpu(), DType::kF32,
                                params);
  int64_t declared = 0;
  for (const Parameter* p : params.all()) {
    declared += NumElements(p->spec.logical_shape);
  }
  EXPECT_EQ(c.NumParameters(), declared);
}

TEST(ModelFamilyTest, ConfigNamesItsFamily) {
  const ModelConfig c;
  EXPECT_EQ(&FamilyOf(c), &Gpt2Family());
  EXPECT_EQ(FamilyOf(c).kind(), ModelFamilyKind::kGpt2);
  EXPECT_EQ(c.DebugString().rfind("family=gpt2 n_layer=4 ", 0), 0u)
      << c.DebugString();
  EXPECT_TRUE(ParseModelFamily("gpt2").ok());
  const absl::StatusOr<ModelFamilyKind> bad = ParseModelFamily("gpt5");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--family=gpt5"), std::string::npos);
}

TEST(ModelFamilyTest, Gpt2RulesNameTheFlags) {
  ModelConfig c;
  c.d_model = 130;
  EXPECT_NE(c.Validate().message().find("--d_model=130"), std::string::npos);
  c.d_model = 128;
  EXPECT_TRUE(c.Validate().ok());
  const absl::Status tp = FamilyOf(c).CheckTensorParallel(c, 3);
  EXPECT_NE(tp.message().find("--n_head=4 is not divisible by --tp=3"),
            std::string::npos)
      << tp;
  EXPECT_TRUE(FamilyOf(c).CheckTensorParallel(c, 2).ok());
}

TEST(ModelFamilyTest, TensorParallelDeclarationsUseTheLayersSplits) {
  // c_attn is column-parallel: its weight splits along columns in three
  // groups; attn.c_proj is row-parallel: rows, bias replicated.
  ModelConfig c;
  ParameterSet params;
  FamilyOf(c).DeclareParameters(c, ChunkPlan{0, 1, false, false}, TpPlace{2, 1},
                                1, Device::Cpu(), DType::kF32, params);
  const Parameter* qkv = params.Find("h.0.attn.c_attn.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->spec.split_dim, 1);
  EXPECT_EQ(qkv->spec.groups, 3);
  EXPECT_EQ(qkv->spec.index, 1);
  const Parameter* proj = params.Find("h.0.attn.c_proj.weight");
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->spec.split_dim, 0);
  EXPECT_TRUE(params.Find("h.0.attn.c_proj.bias")->spec.replicated());
}

}  // namespace
}  // namespace trellis
