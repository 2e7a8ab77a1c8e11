#include "tools/plan/pass_measure.h"

#include <time.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "framework/status.h"
#include "parallel/bootstrap.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double ThreadCpuSeconds() {
  timespec t = {};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The CPU time `fn` takes on this thread: what it costs on a core of its
// own, whatever else the machine runs.
template <typename Fn>
double Seconds(Fn fn) {
  const double start = ThreadCpuSeconds();
  fn();
  return ThreadCpuSeconds() - start;
}

Tensor Filled(int64_t rows, int64_t cols, float scale) {
  Tensor t = Tensor::Empty({rows, cols}, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    p[i] = scale * static_cast<float>(i % 29 - 14);
  }
  return t;
}

}  // namespace

PassTimes MeasurePassTimes(const TrainOptions& o, int reps) {
  TRELLIS_CHECK_GE(reps, 1);
  const ModelConfig& config = o.model;
  const ChunkPlan plan{0, std::min<int64_t>(2, config.n_layer), false, false};
  ParallelContext single = ParallelContext::Single();
  ParameterSet params;
  AddModelParameters(config, plan, TpPlace{1, 0}, o.seed, Device::Cpu(),
                     DType::kF32, params);
  // The two ways of running backward, over the same weights.
  std::unique_ptr<ModelChunk> chunks[2];
  for (int split = 0; split < 2; ++split) {
    ChunkSetup setup;
    setup.plan = plan;
    setup.tp_comm = single.groups().tp;
    setup.params = &params;
    setup.micro_batch = o.micro_batch_size;
    setup.device = Device::Cpu();
    setup.options.recompute = o.recompute;
    setup.options.defer_weight_grads = split == 1;
    chunks[split] = FamilyOf(config).NewChunk(config, setup);
    chunks[split]->AllocateWorkspace();
  }
  const int64_t n = o.micro_batch_size * config.seq_len;
  const Tensor x = Filled(n, config.d_model, 0.02f);
  const Tensor dy = Filled(n, config.d_model, 0.001f);
  Tensor y = Tensor::Empty({n, config.d_model}, DType::kF32);
  Tensor dx = Tensor::Empty({n, config.d_model}, DType::kF32);
  const Tensor none;
  std::vector<double> forward, fused, input, weight;
  for (int r = 0; r <= reps; ++r) {
    for (int split = 0; split < 2; ++split) {
      ModelChunk& c = *chunks[split];
      const double f =
          Seconds([&] { c.Forward(0, none, x, none, 1.0, &y, nullptr); });
      const double b = Seconds([&] { c.BackwardInput(0, dy, &dx); });
      const double w = Seconds([&] { c.BackwardWeight(0); });
      if (r == 0) continue;  // warm-up
      forward.push_back(f);
      if (split == 0) {
        fused.push_back(b + w);  // W does nothing after a fused backward
      } else {
        input.push_back(b);
        weight.push_back(w);
      }
    }
  }
  return {Median(forward), Median(fused), Median(input), Median(weight)};
}

}  // namespace trellis
