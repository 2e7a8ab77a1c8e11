// Counts the device launches of one transformer block's backward (B then
// W), for the CPU test that pins the modeled count and the GPU test that
// checks the real one against it.
#ifndef TRELLIS_TESTS_TRANSFORMER_BLOCK_LAUNCH_UTIL_H_
#define TRELLIS_TESTS_TRANSFORMER_BLOCK_LAUNCH_UTIL_H_

#include <cstdint>

#include "framework/kernels/elementwise.h"
#include "framework/launch_count.h"
#include "framework/rng.h"
#include "parallel/communicator.h"
#include "transformer/decoder_block.h"
#include "transformer/gpt2/gpt2_parameters.h"
#include "transformer/model_family.h"

namespace trellis {
namespace block_launch {

// GPT-2 small's block (12 heads of 64, d_model 768) on short sequences.
inline ModelConfig Gpt2BlockConfig() {
  ModelConfig c;
  c.n_layer = 1;
  c.n_head = 12;
  c.d_model = 768;
  c.seq_len = 64;
  c.vocab_size = 512;
  return c;
}

// Launches of block 0's BackwardInput then BackwardWeight under `options`
// (tp = 1), after one untimed forward and backward so that one-time setup
// (cuBLASLt plans, scratch counters) is not counted.
inline int64_t CountBlockBackward(Device device, DType dtype,
                                  BlockOptions options, int64_t batch = 2) {
  const ModelConfig config = Gpt2BlockConfig();
  ParameterSet params;
  AddModelParameters(config, ChunkPlan{0, 1, true, true}, TpPlace{}, 7, device,
                     dtype, params);
  const DecoderBlock block(config, 0, TpPlace{}, params, options);
  SelfCommunicator tp("tp");
  DecoderBlock::State state = block.NewState(batch, dtype, device);
  DecoderBlock::Workspace work = block.NewWorkspace(batch, dtype, device);
  const Shape shape{batch * config.seq_len, config.d_model};
  Tensor x = Tensor::Empty(shape, dtype, device);
  Tensor dy = Tensor::Empty(shape, dtype, device);
  Tensor dx = Tensor::Empty(shape, dtype, device);
  x.Fill(0.5);
  dy.Fill(0.25);
  int64_t count = 0;
  for (int pass = 0; pass < 2; ++pass) {
    block.Forward(tp, x, state, work);
    LaunchCounter counter;
    block.BackwardInput(tp, x, dy, state, work, dx);
    block.BackwardWeight(tp, x, state, work);
    count = counter.count();
  }
  return count;
}

}  // namespace block_launch
}  // namespace trellis

#endif  // TRELLIS_TESTS_TRANSFORMER_BLOCK_LAUNCH_UTIL_H_
