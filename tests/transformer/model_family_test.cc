// The model seam: a config names its family, the family's declarations
// give the parameter count, and its rules name the flags to change.
#include "transformer/model_family.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transformer/gpt2/gpt2_family.h"
#include "transformer/llama/llama_family.h"
#include "transformer/llama/llama_parameters.h"

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
  // Only what GPT-2 reads: none of the Llama-only options.
  for (const char* llama_only : {"n_kv_heads", "ffn_hidden", "rope_theta",
                                 "rope_scaling", "rope_factor"}) {
    EXPECT_EQ(c.DebugString().find(llama_only), std::string::npos)
        << c.DebugString();
  }
  EXPECT_NE(c.DebugString().find("norm_eps="), std::string::npos);
  EXPECT_NE(c.DebugString().find("vocab_size="), std::string::npos);
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

ModelConfig SmallLlama() {
  ModelConfig c;
  c.family = ModelFamilyKind::kLlama;
  c.n_head = 8;
  c.n_kv_heads = 2;
  c.d_model = 64;
  c.ffn_hidden = 96;
  return c;
}

TEST(ModelFamilyTest, LlamaIsAFamily) {
  const ModelConfig c = SmallLlama();
  EXPECT_EQ(&FamilyOf(c), &LlamaFamily());
  ASSERT_TRUE(ParseModelFamily("llama").ok());
  EXPECT_EQ(*ParseModelFamily("llama"), ModelFamilyKind::kLlama);
  EXPECT_EQ(c.DebugString().rfind("family=llama n_layer=4 ", 0), 0u);
  EXPECT_NE(c.DebugString().find("rope_scaling=none"), std::string::npos);
  EXPECT_NE(c.DebugString().find("n_kv_heads="), std::string::npos);
  EXPECT_NE(c.DebugString().find("tie_embeddings=true"), std::string::npos);
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST(ModelFamilyTest, LlamaFfnWidthFollowsMetasRule) {
  ModelConfig c = SmallLlama();
  c.ffn_hidden = 0;
  c.d_model = 2048;
  c.ffn_dim_multiplier = 1.5;  // Llama 3.2 1B: 8192
  EXPECT_EQ(c.LlamaFfnHidden(), 8192);
  c.d_model = 4096;
  c.ffn_dim_multiplier = 1.3;
  c.ffn_multiple_of = 1024;  // Llama 3 8B: 14336
  EXPECT_EQ(c.LlamaFfnHidden(), 14336);
  c.d_model = 4096;
  c.ffn_dim_multiplier = 1.0;
  c.ffn_multiple_of = 256;  // Llama 2 7B: 11008
  EXPECT_EQ(c.LlamaFfnHidden(), 11008);
}

TEST(ModelFamilyTest, Gpt2RefusesLlamaOptionsNamingTheFlag) {
  struct Case {
    void (*set)(ModelConfig&);
    const char* flag;
  };
  for (const Case& k : {
           Case{[](ModelConfig& c) { c.n_kv_heads = 2; }, "--n_kv_heads"},
           Case{[](ModelConfig& c) { c.rope_theta = 5e5; }, "--rope_theta"},
           Case{[](ModelConfig& c) {
                  c.rope_scaling = RopeScalingType::kLlama3;
                },
                "--rope_scaling"},
           Case{[](ModelConfig& c) { c.norm_eps = 1e-6; }, "--norm_eps"},
           Case{[](ModelConfig& c) { c.tie_embeddings = false; },
                "--tie_embeddings"},
       }) {
    ModelConfig c;
    k.set(c);
    const absl::Status status = c.Validate();
    EXPECT_FALSE(status.ok()) << k.flag;
    EXPECT_NE(status.message().find(k.flag), std::string::npos) << status;
    EXPECT_EQ(status.message().find('\n'), std::string::npos);
  }
}

// Sizes from a corrupt state.json or config.json: each is refused naming
// its flag, before a shape overflows or a table of that size is built
// (found by tests/fuzz/state_json_fuzz.cc).
TEST(ModelFamilyTest, AbsurdSizesAreRefusedNamingTheFlag) {
  struct Case {
    void (*set)(ModelConfig&);
    const char* flag;
  };
  for (const Case& k : {
           Case{[](ModelConfig& c) { c.n_layer = int64_t{1} << 40; },
                "--n_layer=1099511627776"},
           Case{[](ModelConfig& c) {
                  c.d_model = int64_t{1} << 62;
                  c.n_head = 2;
                },
                "--d_model=4611686018427387904"},
           Case{[](ModelConfig& c) { c.seq_len = int64_t{1} << 50; },
                "--seq_len"},
           Case{[](ModelConfig& c) { c.vocab_size = int64_t{1} << 33; },
                "vocab_size=8589934592"},
           Case{[](ModelConfig& c) { c.ffn_hidden = int64_t{1} << 45; },
                "--ffn_hidden"},
           Case{[](ModelConfig& c) {
                  c.ffn_hidden = 0;
                  c.ffn_dim_multiplier = 1e300;
                },
                "--ffn_dim_multiplier=1e+300"},
       }) {
    ModelConfig c = SmallLlama();
    k.set(c);
    const absl::Status status = c.Validate();
    EXPECT_FALSE(status.ok()) << k.flag;
    EXPECT_NE(status.message().find(k.flag), std::string::npos) << status;
    EXPECT_EQ(status.message().find('\n'), std::string::npos);
  }
  ModelConfig c = SmallLlama();
  c.n_layer = 131072;  // the bounds themselves pass
  c.seq_len = 16777216;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST(ModelFamilyTest, LlamaRulesNameTheFlags) {
  ModelConfig c = SmallLlama();
  c.n_kv_heads = 3;
  EXPECT_NE(c.Validate().message().find("--n_kv_heads=3"), std::string::npos);
  c = SmallLlama();
  c.rope_theta = -1;
  EXPECT_NE(c.Validate().message().find("--rope_theta"), std::string::npos);
  c = SmallLlama();
  EXPECT_TRUE(FamilyOf(c).CheckTensorParallel(c, 2).ok());
  // tp above the key/value heads, a multiple of them: replicated.
  EXPECT_TRUE(FamilyOf(c).CheckTensorParallel(c, 4).ok());
  EXPECT_TRUE(FamilyOf(c).CheckTensorParallel(c, 8).ok());
  const absl::Status heads = FamilyOf(c).CheckTensorParallel(c, 3);
  EXPECT_NE(heads.message().find("--tp=3"), std::string::npos) << heads;
  EXPECT_NE(heads.message().find("--n_head=8"), std::string::npos) << heads;
  // 12 query heads split over tp 6, but 6 neither divides the 4 key/value
  // heads nor is a multiple of them.
  c.n_head = 12;
  c.n_kv_heads = 4;
  c.d_model = 96;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  EXPECT_TRUE(FamilyOf(c).CheckTensorParallel(c, 12).ok());
  const absl::Status kv = FamilyOf(c).CheckTensorParallel(c, 6);
  EXPECT_NE(kv.message().find("--tp=6"), std::string::npos) << kv;
  EXPECT_NE(kv.message().find("--n_kv_heads=4"), std::string::npos) << kv;
  EXPECT_NE(kv.message().find("multiple of 4"), std::string::npos) << kv;
  for (const absl::Status& s : {heads, kv}) {
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s;
  }
}

TEST(ModelFamilyTest, LlamaSplitsTheFusedProjectionsByHeads) {
  // qkv_proj's columns: [Q 64 | K 16 | V 16], each split over tp = 2; rank
  // 1 holds Q 32..63, K 72..79, V 88..95.
  const ModelConfig c = SmallLlama();
  ParameterSet params;
  FamilyOf(c).DeclareParameters(c, ChunkPlan{0, 1, false, false}, TpPlace{2, 1},
                                1, Device::Cpu(), DType::kF32, params);
  const Parameter* qkv =
      params.Find(LlamaLayerName(0, "self_attn.qkv_proj.weight"));
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->spec.LocalShape(), (Shape{64, 48}));
  EXPECT_EQ(qkv->spec.LogicalIndex(0), 32);
  EXPECT_EQ(qkv->spec.LogicalIndex(31), 63);
  EXPECT_EQ(qkv->spec.LogicalIndex(32), 72);
  EXPECT_EQ(qkv->spec.LogicalIndex(40), 88);
  EXPECT_EQ(qkv->spec.LogicalIndex(47), 95);
  const Parameter* gate_up =
      params.Find(LlamaLayerName(0, "mlp.gate_up_proj.weight"));
  EXPECT_EQ(gate_up->spec.LogicalIndex(48), 96 + 48);
  EXPECT_EQ(gate_up->spec.LocalShape(), (Shape{64, 96}));
  EXPECT_EQ(
      params.Find(LlamaLayerName(0, "mlp.down_proj.weight"))->spec.split_dim,
      0);
  EXPECT_EQ(params.Find(LlamaLayerName(0, "self_attn.o_proj.bias")), nullptr);
}

TEST(ModelFamilyTest, LlamaReplicatesKeyValueHeadsWhenTpExceedsThem) {
  // [Q 64 | K 16 | V 16] over tp = 8 with 2 key/value heads of 8 columns:
  // rank 5 holds Q 40..47 and head 5·2/8 = 1 of K (72..79) and V (88..95),
  // which ranks 4..7 share and rank 4 owns.
  const ModelConfig c = SmallLlama();
  ParameterSet params;
  FamilyOf(c).DeclareParameters(c, ChunkPlan{0, 1, false, false}, TpPlace{8, 5},
                                1, Device::Cpu(), DType::kF32, params);
  const Parameter* qkv =
      params.Find(LlamaLayerName(0, "self_attn.qkv_proj.weight"));
  ASSERT_NE(qkv, nullptr);
  EXPECT_TRUE(qkv->primary);
  // The replicated columns take memory (what the memory plan counts).
  EXPECT_EQ(qkv->spec.LocalShape(), (Shape{64, 24}));
  EXPECT_EQ(qkv->spec.LogicalIndex(0), 40);
  EXPECT_EQ(qkv->spec.LogicalIndex(8), 72);
  EXPECT_EQ(qkv->spec.LogicalIndex(15), 79);
  EXPECT_EQ(qkv->spec.LogicalIndex(16), 88);
  EXPECT_EQ(qkv->spec.LogicalIndex(23), 95);
  const std::vector<ShardSpec::ReplicatedPiece> pieces =
      qkv->spec.ReplicatedPieces();
  ASSERT_EQ(pieces.size(), 2u);
  for (const ShardSpec::ReplicatedPiece& r : pieces) {
    EXPECT_EQ(r.replicas, 4);
    EXPECT_EQ(r.piece, 1);
    EXPECT_FALSE(r.owned);
  }
  EXPECT_EQ(LlamaLocalKvHeads(c, 8), 1);
  EXPECT_EQ(LlamaLocalKvHeads(c, 2), 1);
  EXPECT_EQ(LlamaLocalKvHeads(c, 1), 2);
  // Initialization follows the logical index: rank 5's K columns equal
  // rank 4's (the owner's) to the bit.
  ParameterSet owner;
  FamilyOf(c).DeclareParameters(c, ChunkPlan{0, 1, false, false}, TpPlace{8, 4},
                                1, Device::Cpu(), DType::kF32, owner);
  params.Materialize(/*grads=*/false);
  owner.Materialize(/*grads=*/false);
  const Tensor& mine = qkv->value;
  const Tensor& theirs =
      owner.Find(LlamaLayerName(0, "self_attn.qkv_proj.weight"))->value;
  for (int64_t row = 0; row < 64; ++row) {
    for (int64_t col = 8; col < 24; ++col) {
      ASSERT_EQ(mine.data<float>()[row * 24 + col],
                theirs.data<float>()[row * 24 + col])
          << row << "," << col;
    }
  }
}

}  // namespace
}  // namespace trellis
