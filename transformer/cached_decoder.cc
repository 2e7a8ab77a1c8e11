#include "transformer/cached_decoder.h"

#include <utility>

#include "framework/kernels/elementwise.h"
#include "framework/kernels/embedding.h"
#include "framework/kernels/matmul.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

int64_t KvWidth(const std::vector<CachedBlock>& blocks) {
  TRELLIS_CHECK(!blocks.empty()) << "a decoder needs at least one block";
  return blocks.front().kv_width();
}

std::vector<CachedBlock> FamilyBlocks(const ModelConfig& config,
                                      const DecoderSetup& setup) {
  const ModelFamily& family = FamilyOf(config);
  std::vector<CachedBlock> blocks;
  for (int64_t l = 0; l < config.n_layer; ++l) {
    blocks.emplace_back(
        config, family.NewBlockParts(config, l, setup.tp, *setup.params));
  }
  return blocks;
}

}  // namespace

CachedDecoder::CachedDecoder(const ModelConfig& config,
                             const DecoderSetup& setup)
    : CachedDecoder(
          config, setup,
          FamilyOf(config).Ends(
              config, ChunkPlan{0, config.n_layer, true, true}, *setup.params),
          FamilyBlocks(config, setup)) {}

CachedDecoder::CachedDecoder(const ModelConfig& config,
                             const DecoderSetup& setup, ChunkEnds ends,
                             std::vector<CachedBlock> blocks)
    : config_(config),
      tp_(setup.tp),
      tp_comm_(*setup.tp_comm),
      device_(setup.device),
      dtype_(setup.dtype),
      ends_(std::move(ends)),
      blocks_(std::move(blocks)),
      cache_(config.n_layer, config.seq_len, KvWidth(blocks_), setup.dtype,
             setup.device) {
  TRELLIS_CHECK_EQ(tp_comm_.size(), tp_.size);
  TRELLIS_CHECK_EQ(static_cast<int64_t>(blocks_.size()), config.n_layer);
  TRELLIS_CHECK(ends_.embedding != nullptr && ends_.head != nullptr &&
                ends_.norm != nullptr);
  vocab_ = VocabShard::For(ends_.head->spec);
  const int64_t cap = config.seq_len, c = config.d_model;
  // Blocks of one class share a scratch: the first of them makes it.
  for (size_t l = 0; l < blocks_.size(); ++l) {
    size_t first = 0;
    while (!blocks_[first].SharesScratch(blocks_[l])) ++first;
    if (first == l) {
      scratch_of_.push_back(scratches_.size());
      scratches_.push_back(blocks_[l].NewScratch(cap, cap, dtype_, device_));
    } else {
      scratch_of_.push_back(scratch_of_[first]);
    }
  }
  router_bias_.resize(blocks_.size());
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const int64_t experts = blocks_[l].RoutedExperts();
    if (experts > 0 && config.moe_bias_update_rate > 0) {
      router_bias_[l] = Tensor::Zeros({experts}, dtype_, device_);
      blocks_[l].set_router_bias(&router_bias_[l]);
    }
  }
  ids_ = Tensor::Empty({cap}, DType::kI32, device_);
  x_ = Tensor::Empty({cap, c}, dtype_, device_);
  lnf_ = Tensor::Empty({1, c}, dtype_, device_);
  const DType stats = StatsDType(dtype_);
  mean_ = Tensor::Empty({1}, stats, device_);
  rstd_ = Tensor::Empty({1}, stats, device_);
  logits_ = Tensor::Empty({1, vocab_.rows}, dtype_, device_);
  gathered_ = Tensor::Empty({tp_.size * vocab_.rows}, dtype_, device_);
  if (dtype_ != DType::kF32) {
    logits_f32_ = Tensor::Empty({tp_.size * vocab_.rows}, DType::kF32, device_);
  }
}

std::vector<float> CachedDecoder::Forward(std::span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t start = cache_.length();
  TRELLIS_CHECK(n > 0 && n <= cache_.free())
      << n << " new tokens with " << cache_.free() << " of the context's "
      << cache_.capacity() << " left";
  const int64_t c = config_.d_model;
  Tensor host_ids = Tensor::Empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) {
    TRELLIS_CHECK(tokens[i] >= 0 && tokens[i] < config_.vocab_size)
        << "token " << tokens[i] << " outside the vocabulary of "
        << config_.vocab_size;
    host_ids.data<int32_t>()[i] = tokens[i];
  }
  Tensor ids = ids_.Narrow(0, n);
  ids.CopyFrom(host_ids);
  Tensor x = x_.Narrow(0, n);
  VocabParallelEmbeddingForward(tp_comm_, ids, *ends_.embedding, x);
  if (ends_.positions != nullptr) {
    Tensor rows = x.View({1, n, c});
    AddPositionEmbedding(ends_.positions->value.Narrow(start, n), rows);
  }
  for (size_t l = 0; l < blocks_.size(); ++l) {
    blocks_[l].Forward(tp_comm_, start, x, cache_.keys(l), cache_.values(l),
                       scratches_[scratch_of_[l]]);
  }
  cache_.Advance(n);
  return Logits(x.Narrow(n - 1, 1));
}

std::vector<float> CachedDecoder::Logits(const Tensor& last) {
  ends_.norm->Forward(last, lnf_, mean_, rstd_);
  MatmulForward(lnf_, ends_.head->value, Tensor(), logits_,
                WeightLayout::kOutIn);
  // Rank t holds vocabulary rows [t·Vl, (t+1)·Vl): in rank order the
  // gathered rows are the padded vocabulary in order.
  if (tp_.size > 1) {
    tp_comm_.AllGather(logits_.View({vocab_.rows}), gathered_);
  } else {
    gathered_.CopyFrom(logits_.View({vocab_.rows}));
  }
  const Tensor* f32 = &gathered_;
  if (dtype_ != DType::kF32) {
    Convert(gathered_, logits_f32_);
    f32 = &logits_f32_;
  }
  const Tensor host = f32->Narrow(0, config_.vocab_size).To(Device::Cpu());
  const float* p = host.data<float>();
  return std::vector<float>(p, p + config_.vocab_size);
}

void CachedDecoder::SetExpertBias(const ExpertBias& bias) {
  for (size_t l = 0; l < blocks_.size(); ++l) {
    if (router_bias_[l].defined()) {
      CopyExpertBiasRow(bias.Row(static_cast<int64_t>(l)), router_bias_[l]);
    }
  }
}

}  // namespace trellis
