#include "transformer/parameter_adder.h"

#include <utility>

#include "framework/rng.h"
#include "parallel/tensor_parallel.h"
#include "transformer/config.h"

namespace trellis {

Parameter& ParameterAdder::Add(const std::string& name, ShardSpec spec,
                               bool decay, double init_std, double init_const) {
  const uint64_t key = StreamKey(seed, HashName(name));
  Parameter& p = params.Declare(
      name, std::move(spec), decay, device, dtype, [=](int64_t i) {
        return init_std > 0 ? init_std * NormalAtKey(key, i) : init_const;
      });
  // Replicated tensors count once in the gradient norm: on tp rank 0.
  p.primary = !p.spec.replicated() || tp.rank == 0;
  return p;
}

Parameter& ParameterAdder::Replicated(const std::string& name, Shape shape,
                                      bool decay, double init_std,
                                      double init_const) {
  return Add(name, ShardSpec::Replicated(std::move(shape)), decay, init_std,
             init_const);
}

void ParameterAdder::Column(const std::string& prefix, int64_t in, int64_t out,
                            int64_t groups, double init_std, bool with_bias) {
  Add(prefix + ".weight",
      ColumnParallelLinear::WeightSpec(in, out, tp.size, tp.rank, groups),
      /*decay=*/true, init_std, 0.0);
  if (!with_bias) return;
  Add(prefix + ".bias",
      ColumnParallelLinear::BiasSpec(out, tp.size, tp.rank, groups),
      /*decay=*/false, 0, 0.0);
}

void ParameterAdder::ColumnGroups(const std::string& prefix, int64_t in,
                                  std::vector<int64_t> group_sizes,
                                  double init_std,
                                  std::vector<int64_t> group_parts) {
  Add(prefix + ".weight",
      ColumnParallelLinear::WeightSpec(
          in, tp.size, tp.rank, std::move(group_sizes), std::move(group_parts)),
      /*decay=*/true, init_std, 0.0);
}

void ParameterAdder::Row(const std::string& prefix, int64_t in, int64_t out,
                         double init_std, bool with_bias) {
  Add(prefix + ".weight",
      RowParallelLinear::WeightSpec(in, out, tp.size, tp.rank),
      /*decay=*/true, init_std, 0.0);
  if (!with_bias) return;
  Add(prefix + ".bias", RowParallelLinear::BiasSpec(out), /*decay=*/false, 0,
      0.0);
}

Parameter& ParameterAdder::Vocab(const std::string& name, int64_t vocab,
                                 int64_t c, double init_std) {
  return Add(name,
             ShardSpec::Split({vocab, c}, 0, tp.size, tp.rank, 1,
                              PaddedVocab(vocab, tp.size)),
             /*decay=*/true, init_std, 0);
}

}  // namespace trellis
