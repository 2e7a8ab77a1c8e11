// DecoderChunk's ends: the embedding (tokens and, for a family with a
// learned table, positions, at the window positions this rank holds) and
// the head (the final norm, the LM head and its loss, chunk by chunk), with
// their backward passes.
#include <algorithm>

#include "framework/kernels/cross_entropy.h"
#include "framework/kernels/embedding.h"
#include "framework/kernels/matmul.h"
#include "transformer/decoder_chunk.h"
#include "transformer/decoder_chunk_state.h"

namespace trellis {

template <typename Fn>
void DecoderChunk::ForEachPositionRun(int64_t first, int64_t count,
                                      Fn add) const {
  const int64_t t = config_.seq_len;
  // Consecutive positions: a whole window, or one of the split's chunks.
  const int64_t piece = context_ != nullptr ? t / 2 : t;
  for (int64_t row = 0; row < count;) {
    const int64_t i = (first + row) % t;
    const int64_t pos = context_ != nullptr ? context_->split().Mine()[i] : i;
    const int64_t run = std::min(piece - i % piece, count - row);
    add(row, pos, run);
    row += run;
  }
}

void DecoderChunk::Embed(State& s) {
  if (!rows_.on()) {
    VocabParallelEmbeddingForward(tp_comm_, s.ids, *ends_.embedding, s.x0);
  } else {
    VocabParallelEmbeddingToSequence(tp_comm_, s.ids, *ends_.embedding,
                                     full_rows_, s.x0);
  }
  if (ends_.positions == nullptr) return;
  if (!rows_.on() && context_ == nullptr) {
    Tensor x = s.x0.View({micro_batch_, config_.seq_len, config_.d_model});
    AddPositionEmbedding(ends_.positions->value, x);
    return;
  }
  // This rank's rows may start inside a window and span several (sequence
  // parallel), or hold two pieces of each (context parallel): each run of
  // consecutive positions gets its own.
  ForEachPositionRun(
      rows_.First(FullRows()), rows(),
      [&](int64_t row, int64_t pos, int64_t run) {
        Tensor x = s.x0.Narrow(row, run).View({1, run, config_.d_model});
        AddPositionEmbedding(ends_.positions->value.Narrow(pos, run), x);
      });
}

void DecoderChunk::HeadForward(State& s, const Tensor& x, double loss_scale) {
  TRELLIS_CHECK_GE(loss_scale, 0.0);
  // The norm on this rank's rows; under sequence parallelism a gather
  // gives the head every row.
  Tensor lnf_mine = rows_.Mine(head_lnf_);
  ends_.norm->Forward(x, lnf_mine, s.meanf, s.rstdf);
  rows_.GatherInput(tp_comm_, head_lnf_);
  s.has_dlnf = loss_scale > 0;
  // d(ln_f) of every row: reduce-scattered into s.dlnf below when sequence
  // parallel.
  Tensor dlnf_all = rows_.on() ? full_rows_ : s.dlnf;
  if (s.has_dlnf) dlnf_all.Zero();
  // d(mean loss)/d(loss of a row) = 1/N.
  const int64_t n = FullRows();
  const double scale = loss_scale / static_cast<double>(n);
  const int64_t chunk = HeadChunkRows();
  Tensor no_bias;
  // The head weight's share is added here; its group's `after` follows in
  // BackwardInput or BackwardWeight.
  if (s.has_dlnf && writes_.before) writes_.before({ends_.head});
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t r = std::min(chunk, n - start);
    const Tensor lnf = head_lnf_.Narrow(start, r);
    const Tensor targets = s.targets.Narrow(start, r);
    Tensor logits = head_logits_.Narrow(0, r);
    MatmulForward(lnf, ends_.head->value, Tensor(), logits,
                  WeightLayout::kOutIn);
    const Tensor weights =
        s.weighted ? s.loss_weight.Narrow(start, r) : Tensor();
    Tensor losses = s.losses.Narrow(start, r);
    if (tp_comm_.size() == 1) {
      // The whole vocabulary here: loss and logit gradients (over the
      // logits), each row weighed, in one fused pass.
      Tensor dlogits = s.has_dlnf ? logits : Tensor();
      CrossEntropyFused(logits, targets, vocab_.valid, weights, scale, losses,
                        dlogits);
    } else {
      // Statistics in the shared buffers; losses straight into the state.
      VocabParallelLossState loss{head_row_max_.Narrow(0, r),
                                  head_sums_.Narrow(0, 2 * r).View({2, r}),
                                  losses};
      VocabParallelCrossEntropyForward(tp_comm_, logits, targets, vocab_, loss);
      if (s.weighted) ScaleRows(weights, loss.losses);
      if (s.has_dlnf) {
        VocabParallelCrossEntropyBackward(logits, targets, vocab_, loss, scale,
                                          logits);
        // Each row's gradient weighs as its loss does.
        if (s.weighted) ScaleRows(weights, logits);
      }
    }
    if (!s.has_dlnf) continue;
    // This rank's vocabulary rows' share of d(ln_f); summed over tp below.
    Tensor dlnf = dlnf_all.Narrow(start, r);
    MatmulBackwardInput(logits, ends_.head->value, dlnf, WeightLayout::kOutIn);
    MatmulBackwardWeight(logits, lnf, ends_.head->grad, no_bias,
                         WeightLayout::kOutIn);
  }
  if (!s.has_dlnf) return;
  if (rows_.on()) {
    ScatterToSequence::Forward(tp_comm_, full_rows_, s.dlnf);
  } else {
    CopyToTp::Backward(tp_comm_, s.dlnf);
  }
}

void DecoderChunk::HeadBackwardInput(State& s, const Tensor& x, Tensor& dx) {
  TRELLIS_CHECK(s.has_dlnf)
      << "the last chunk's BackwardInput needs a Forward with a loss scale";
  dx.Zero();
  ends_.norm->BackwardInput(s.dlnf, x, s.meanf, s.rstdf, dx);
}

void DecoderChunk::HeadBackwardWeight(const State& s, const Tensor& x) {
  // The head weight's share was added in Forward.
  ends_.norm->BackwardWeight(s.dlnf, x, s.meanf, s.rstdf);
}

void DecoderChunk::EmbeddingBackwardWeight(const State& s) {
  VocabParallelEmbeddingBackwardWeight(s.ids, s.dx0, *ends_.embedding);
  if (ends_.positions == nullptr) return;
  if (context_ == nullptr) {
    PositionEmbeddingBackwardWeight(
        s.dx0.View({micro_batch_, config_.seq_len, config_.d_model}),
        ends_.positions->grad);
    return;
  }
  ForEachPositionRun(0, FullRows(), [&](int64_t row, int64_t pos, int64_t run) {
    Tensor grad = ends_.positions->grad.Narrow(pos, run);
    PositionEmbeddingBackwardWeight(
        s.dx0.Narrow(row, run).View({1, run, config_.d_model}), grad);
  });
}

}  // namespace trellis
