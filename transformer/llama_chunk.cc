#include "transformer/llama_chunk.h"

#include <memory>
#include <utility>
#include <vector>

#include "transformer/llama_block.h"
#include "transformer/llama_parameters.h"

namespace trellis {
namespace {

ChunkEnds LlamaEnds(const ModelConfig& config, const ChunkPlan& plan,
                    const ParameterSet& params) {
  auto find = [&](const char* name) {
    Parameter* p = params.Find(name);
    TRELLIS_CHECK(p != nullptr) << name;
    return p;
  };
  ChunkEnds ends;
  if (plan.has_embedding) ends.embedding = find(kLlamaEmbedding);
  if (plan.has_head) {
    ends.norm_weight = find(kLlamaNorm);
    ends.norm_eps = config.norm_eps;
    ends.head = find(config.tie_embeddings ? kLlamaEmbedding : kLlamaHead);
  }
  return ends;
}

std::vector<std::unique_ptr<DecoderBlock>> LlamaBlocks(
    const ModelConfig& config, const ChunkPlan& plan, TpPlace tp,
    const ParameterSet& params, const BlockOptions& options) {
  std::vector<std::unique_ptr<DecoderBlock>> blocks;
  for (int64_t l = 0; l < plan.num_layers; ++l) {
    blocks.push_back(std::make_unique<LlamaBlock>(config, plan.first_layer + l,
                                                  tp, params, options));
  }
  return blocks;
}

}  // namespace

LlamaChunk::LlamaChunk(const ModelConfig& config, const ChunkPlan& plan,
                       TpPlace tp, Communicator& tp_comm,
                       const ParameterSet& params, int64_t micro_batch,
                       Device device, DType dtype, BlockOptions options)
    : DecoderChunk(config, plan, tp, tp_comm, LlamaEnds(config, plan, params),
                   LlamaBlocks(config, plan, tp, params, options), micro_batch,
                   device, dtype, options) {}

}  // namespace trellis
