// ParameterAdder: how a family declares its parameters on one tp rank:
// each with its logical name, its split (the linear layers' *Spec, so the
// layer's own check at construction agrees), its weight decay and its
// initializer, a function of (seed, logical name, logical element index)
// only: N(0, init_std) when init_std > 0, else the constant init_const.
// Replicated tensors are primary (counted by the gradient norm, stored by
// checkpoints) on tp rank 0 only.
//
// Thread safety: none; it writes the ParameterSet it is given.
#ifndef TRELLIS_TRANSFORMER_PARAMETER_ADDER_H_
#define TRELLIS_TRANSFORMER_PARAMETER_ADDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/parameter.h"
#include "transformer/chunk_options.h"

namespace trellis {

struct ParameterAdder {
  ParameterSet& params;
  TpPlace tp;
  uint64_t seed;
  Device device;
  DType dtype;

  Parameter& Add(const std::string& name, ShardSpec spec, bool decay,
                 double init_std, double init_const);
  Parameter& Replicated(const std::string& name, Shape shape, bool decay,
                        double init_std, double init_const = 0.0);
  // A column-parallel layer's weight (in, out), its columns in `groups`
  // equal blocks, and (with_bias) its bias.
  void Column(const std::string& prefix, int64_t in, int64_t out,
              int64_t groups, double init_std, bool with_bias = true);
  // A bias-less column-parallel weight whose columns are unequal blocks;
  // with `group_parts`, block g is cut into group_parts[g] pieces only,
  // each replicated over tp / group_parts[g] ranks (ShardSpec).
  void ColumnGroups(const std::string& prefix, int64_t in,
                    std::vector<int64_t> group_sizes, double init_std,
                    std::vector<int64_t> group_parts = {});
  // A row-parallel layer's weight (in, out) and (with_bias) its bias.
  void Row(const std::string& prefix, int64_t in, int64_t out, double init_std,
           bool with_bias = true);
  // The (vocab, C) table split over tp by vocabulary rows, padded in memory
  // (PaddedVocab).
  Parameter& Vocab(const std::string& name, int64_t vocab, int64_t c,
                   double init_std);
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_PARAMETER_ADDER_H_
