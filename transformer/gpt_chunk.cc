#include "transformer/gpt_chunk.h"

#include <memory>
#include <utility>
#include <vector>

#include "transformer/block.h"

namespace trellis {
namespace {

ChunkEnds GptEnds(const ChunkPlan& plan, const ParameterSet& params) {
  auto find = [&](const char* name) {
    Parameter* p = params.Find(name);
    TRELLIS_CHECK(p != nullptr) << name;
    return p;
  };
  ChunkEnds ends;
  if (plan.has_embedding) {
    ends.embedding = find("wte");
    ends.positions = find("wpe");
  }
  if (plan.has_head) {
    ends.norm_weight = find("ln_f.weight");
    ends.norm_bias = find("ln_f.bias");
    ends.head = find("wte");
  }
  return ends;
}

std::vector<std::unique_ptr<DecoderBlock>> GptBlocks(
    const ModelConfig& config, const ChunkPlan& plan, TpPlace tp,
    const ParameterSet& params, const BlockOptions& options) {
  std::vector<std::unique_ptr<DecoderBlock>> blocks;
  for (int64_t l = 0; l < plan.num_layers; ++l) {
    blocks.push_back(std::make_unique<Block>(config, plan.first_layer + l, tp,
                                             params, options));
  }
  return blocks;
}

}  // namespace

GptChunk::GptChunk(const ModelConfig& config, const ChunkPlan& plan, TpPlace tp,
                   Communicator& tp_comm, const ParameterSet& params,
                   int64_t micro_batch, Device device, DType dtype,
                   BlockOptions options)
    : DecoderChunk(config, plan, tp, tp_comm, GptEnds(plan, params),
                   GptBlocks(config, plan, tp, params, options), micro_batch,
                   device, dtype, options) {}

}  // namespace trellis
