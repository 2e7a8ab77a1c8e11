#include "tools/plan/kernel_cost_measure.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "framework/kernels/adamw.h"
#include "framework/kernels/attention.h"
#include "framework/kernels/block_attention.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/gelu.h"
#include "framework/kernels/layernorm.h"
#include "framework/kernels/matmul.h"

namespace trellis {
namespace {

// A round repeats the kernel until this long has passed.
constexpr double kRoundSeconds = 2e-3;

struct Grids {
  std::vector<double> rows, sides, seq, head_dim, head_windows, ew_rows,
      ew_width;
  std::vector<double> adamw;
  int64_t call_heads = 4;  // each attention call's heads; windows the rest
  // The ring's block lengths (T/cp); empty where the block kernels have no
  // twin (CUDA).
  std::vector<double> block_seq;
};

Grids GridsFor(DeviceType device) {
  if (device == DeviceType::kCPU) {
    return {{32, 128, 512, 2048},
            {64, 256, 1024},
            {32, 64, 128, 256, 512},
            {16, 32, 64, 128},
            {8},
            {32, 256, 2048},
            {64, 256, 1024},
            {1 << 14, 1 << 18, 1 << 22},
            4,
            {16, 32, 64, 128, 256}};
  }
  // Rows and (window, head) pairs by factors of 2 to 4: a rate between
  // two points is interpolated in log space, which on a GPU's saturating
  // curve undershoots by 10-17% across a factor of 4 (an H200 at a micro
  // batch of 32 against points 16,384 and 65,536 rows apart).
  return {{1024, 2048, 4096, 8192, 16384, 32768, 65536},
          {768, 2048, 4096, 8192},
          {256, 512, 1024, 2048, 4096, 8192},
          {64, 128},
          {16, 64, 128, 256, 512, 1024},
          {1024, 4096, 8192, 16384, 32768, 65536},
          {768, 2048, 8192},
          {1 << 20, 1 << 23, 1 << 26},
          8,
          {}};
}

// Small non-zero values on the CPU (so that no kernel takes a zero fast
// path); device tensors stay zero, which costs the same there.
Tensor Filled(Shape shape, DType dtype, Device device) {
  Tensor t = Tensor::Zeros(std::move(shape), dtype, device);
  if (device.type == DeviceType::kCPU && dtype == DType::kF32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      p[i] = 0.01f * static_cast<float>(i % 13) - 0.06f;
    }
  }
  return t;
}

// Seconds per call of `run`: the faster of two rounds.
double TimeCall(const std::function<void()>& run,
                const std::function<void()>& synchronize) {
  auto seconds_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  const auto warm = std::chrono::steady_clock::now();
  run();  // warm-up
  synchronize();
  // A call much longer than a round is timed once more, not twice.
  const int rounds = seconds_since(warm) > 5 * kRoundSeconds ? 1 : 2;
  double best = 0;
  for (int round = 0; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    int calls = 0;
    double seconds = 0;
    do {
      run();
      ++calls;
      synchronize();
      seconds = seconds_since(start);
    } while (seconds < kRoundSeconds);
    const double per_call = seconds / calls;
    best = round == 0 ? per_call : std::min(best, per_call);
  }
  return best;
}

RateGrid Empty(std::vector<double> a, std::vector<double> b,
               std::vector<double> c) {
  RateGrid g;
  g.axes = {std::move(a), std::move(b), std::move(c)};
  g.rates.assign(g.size(), 0);
  return g;
}

// How many sets of operands of `bytes` each a CPU round cycles through, so
// that a call finds its operands outside the core's own caches, as a
// step's kernels do (the kernels between them evict a small layer's
// operands: a call repeated on the same operands finds them in L2 and ran
// a quarter faster than the step's on a 96-wide model, and as fast on a
// 384-wide one). On CUDA one set: its grids' operands are megabytes
// already.
int64_t OperandSets(Device device, int64_t bytes) {
  constexpr int64_t kColdBytes = int64_t{8} << 20;
  if (device.type != DeviceType::kCPU) return 1;
  return std::clamp<int64_t>((kColdBytes + bytes - 1) / bytes, 1, 64);
}

// The sets of operands `make` builds, OperandSets of them.
using Operands = std::vector<Tensor>;
std::vector<Operands> ColdSets(Device device,
                               const std::function<Operands()>& make) {
  std::vector<Operands> sets = {make()};
  int64_t bytes = 0;
  for (const Tensor& t : sets.front()) {
    bytes += t.numel() * DTypeSize(t.dtype());
  }
  while (static_cast<int64_t>(sets.size()) < OperandSets(device, bytes)) {
    sets.push_back(make());
  }
  return sets;
}

// Seconds per call of `run` (TimeCall), each call on the next of `sets`.
double TimeCold(std::vector<Operands>& sets,
                const std::function<void(Operands&)>& run,
                const std::function<void()>& sync) {
  size_t next = 0;
  return TimeCall(
      [&] {
        Operands& o = sets[next];
        next = (next + 1) % sets.size();
        run(o);
      },
      sync);
}

void MeasureGemms(Device device, DType dtype, const Grids& grids,
                  const std::function<void()>& sync, KernelCosts& c) {
  c.gemm_forward = Empty(grids.rows, grids.sides, grids.sides);
  c.gemm_backward_input = c.gemm_forward;
  c.gemm_backward_weight = c.gemm_forward;
  const Tensor none;
  for (size_t i = 0; i < grids.rows.size(); ++i) {
    for (size_t j = 0; j < grids.sides.size(); ++j) {
      for (size_t k = 0; k < grids.sides.size(); ++k) {
        const auto n = static_cast<int64_t>(grids.rows[i]);
        const auto in = static_cast<int64_t>(grids.sides[j]);
        const auto out = static_cast<int64_t>(grids.sides[k]);
        // x, w, y, dx, dw: one list for the three GEMMs.
        std::vector<Operands> sets = ColdSets(device, [&] {
          return Operands{
              Filled({n, in}, dtype, device), Filled({in, out}, dtype, device),
              Filled({n, out}, dtype, device), Filled({n, in}, dtype, device),
              Filled({in, out}, dtype, device)};
        });
        Tensor no_bias;
        const double flops = 2.0 * n * in * out;
        c.gemm_forward.at(i, j, k) =
            flops /
            TimeCold(
                sets,
                [&](Operands& o) { MatmulForward(o[0], o[1], none, o[2]); },
                sync);
        c.gemm_backward_input.at(i, j, k) =
            flops /
            TimeCold(
                sets,
                [&](Operands& o) { MatmulBackwardInput(o[2], o[1], o[3]); },
                sync);
        c.gemm_backward_weight.at(i, j, k) =
            flops / TimeCold(
                        sets,
                        [&](Operands& o) {
                          MatmulBackwardWeight(o[2], o[0], o[4], no_bias);
                        },
                        sync);
      }
    }
  }
}

void MeasureAttention(Device device, DType dtype, const Grids& grids,
                      const std::function<void()>& sync, KernelCosts& c) {
  c.attention = Empty(grids.seq, grids.head_dim, grids.head_windows);
  const int64_t h = grids.call_heads;
  for (size_t i = 0; i < grids.seq.size(); ++i) {
    for (size_t j = 0; j < grids.head_dim.size(); ++j) {
      for (size_t k = 0; k < grids.head_windows.size(); ++k) {
        const auto t = static_cast<int64_t>(grids.seq[i]);
        const auto d = static_cast<int64_t>(grids.head_dim[j]);
        const int64_t batch = static_cast<int64_t>(grids.head_windows[k]) / h;
        // qkv, out, saved, dqkv.
        auto make = [&] {
          return Operands{
              Filled({batch, t, 3 * h * d}, dtype, device),
              Filled({batch, t, h * d}, dtype, device),
              Tensor::Zeros(AttentionSavedShape(device, batch, t, h),
                            DType::kF32, device),
              Filled({batch, t, 3 * h * d}, dtype, device)};
        };
        std::vector<Operands> sets = ColdSets(device, make);
        const double seconds = TimeCold(
            sets,
            [&](Operands& o) {
              AttentionForward(o[0], h, o[1], o[2]);
              AttentionBackward(o[1], o[0], o[1], o[2], h, o[3]);
            },
            sync);
        // Forward 2·T·H·D per token (causal), backward twice that.
        c.attention.at(i, j, k) = 3.0 * 2.0 * batch * t * t * h * d / seconds;
      }
    }
  }
}

// The ring's step on one block of t queries against t keys and values, none
// masked (the keys' positions all before the queries'): the block's forward
// merged into a running output, and its backward.
void MeasureBlockAttention(Device device, DType dtype, const Grids& grids,
                           const std::function<void()>& sync, KernelCosts& c) {
  if (grids.block_seq.empty()) return;
  c.block_attention =
      Empty(grids.block_seq, grids.head_dim, grids.head_windows);
  const int64_t h = grids.call_heads;
  for (size_t i = 0; i < grids.block_seq.size(); ++i) {
    for (size_t j = 0; j < grids.head_dim.size(); ++j) {
      for (size_t k = 0; k < grids.head_windows.size(); ++k) {
        const auto t = static_cast<int64_t>(grids.block_seq[i]);
        const auto d = static_cast<int64_t>(grids.head_dim[j]);
        const int64_t batch = static_cast<int64_t>(grids.head_windows[k]) / h;
        Tensor q_pos = Tensor::Empty({t}, DType::kI32, device);
        Tensor k_pos = Tensor::Empty({t}, DType::kI32, device);
        for (int64_t p = 0; p < t; ++p) {
          k_pos.data<int32_t>()[p] = static_cast<int32_t>(p);
          q_pos.data<int32_t>()[p] = static_cast<int32_t>(t + p);
        }
        const BlockMask mask{&q_pos, &k_pos, nullptr};
        // q, kv, out, lse, block_out, block_lse, dq, dkv.
        auto make = [&] {
          const Shape rows = {batch, t, h * d}, lse = {batch, h, t};
          return Operands{Filled(rows, dtype, device),
                          Filled({batch, t, 2 * h * d}, dtype, device),
                          Filled(rows, dtype, device),
                          Filled(lse, dtype, device),
                          Filled(rows, dtype, device),
                          Filled(lse, dtype, device),
                          Filled(rows, dtype, device),
                          Filled({batch, t, 2 * h * d}, dtype, device)};
        };
        std::vector<Operands> sets = ColdSets(device, make);
        const double seconds = TimeCold(
            sets,
            [&](Operands& o) {
              BlockAttentionForward(o[0], o[1], mask, h, h, o[4], o[5]);
              AttentionMergeBlock(o[2], o[3], o[4], o[5]);
              BlockAttentionBackward(o[2], o[0], o[1], mask, o[2], o[3], h, h,
                                     o[6], o[7]);
            },
            sync);
        // Forward 4·t·t·H·D per block (none masked), backward twice that.
        c.block_attention.at(i, j, k) =
            3.0 * 4.0 * batch * t * t * h * d / seconds;
      }
    }
  }
}

// The element-wise bytes step_work.cc counts for one block on (n, width)
// rows, forward and backward (3× the forward's): 14 elements per row on
// the width and 8 on the MLP's 4·width.
void MeasureElementwise(Device device, DType dtype, const Grids& grids,
                        const std::function<void()>& sync, KernelCosts& c) {
  c.elementwise = Empty(grids.ew_rows, grids.ew_width, {1});
  const double element_bytes = dtype == DType::kBF16 ? 2 : 4;
  for (size_t i = 0; i < grids.ew_rows.size(); ++i) {
    for (size_t j = 0; j < grids.ew_width.size(); ++j) {
      const auto n = static_cast<int64_t>(grids.ew_rows[i]);
      const auto w = static_cast<int64_t>(grids.ew_width[j]);
      // x, y, dx, g, b, dg, db, mean, rstd, h, hy, dh.
      auto make = [&] {
        return Operands{Filled({n, w}, dtype, device),
                        Filled({n, w}, dtype, device),
                        Filled({n, w}, dtype, device),
                        Filled({w}, dtype, device),
                        Filled({w}, dtype, device),
                        Filled({w}, dtype, device),
                        Filled({w}, dtype, device),
                        Tensor::Zeros({n}, DType::kF32, device),
                        Tensor::Zeros({n}, DType::kF32, device),
                        Filled({n, 4 * w}, dtype, device),
                        Filled({n, 4 * w}, dtype, device),
                        Filled({n, 4 * w}, dtype, device)};
      };
      std::vector<Operands> sets = ColdSets(device, make);
      const double seconds = TimeCold(
          sets,
          [&](Operands& o) {
            for (int k = 0; k < 2; ++k) {
              LayerNormForward(o[0], o[3], o[4], o[1], o[7], o[8]);
              Add(o[0], o[1], o[2]);
              LayerNormBackwardInput(o[1], o[0], o[3], o[7], o[8], o[2]);
              LayerNormBackwardWeight(o[1], o[0], o[7], o[8], o[5], o[6]);
            }
            GeluForward(o[9], o[10]);
            GeluBackward(o[9], o[10], o[11]);
          },
          sync);
      const double bytes = 3.0 * n * element_bytes * (14.0 * w + 8.0 * 4 * w);
      c.elementwise.at(i, j, 0) = bytes / seconds;
    }
  }
}

// The optimizer: AdamW over one float32 tensor of each size, at the
// 28 bytes per element step_cost.cc counts.
void MeasureAdamW(Device device, const Grids& grids,
                  const std::function<void()>& sync, KernelCosts& c) {
  c.adamw = Empty(grids.adamw, {1}, {1});
  for (size_t i = 0; i < grids.adamw.size(); ++i) {
    const auto n = static_cast<int64_t>(grids.adamw[i]);
    Tensor p = Filled({n}, DType::kF32, device);
    Tensor g = Filled({n}, DType::kF32, device);
    Tensor m = Filled({n}, DType::kF32, device);
    Tensor v = Tensor::Zeros({n}, DType::kF32, device);
    AdamWHyper hyper;
    hyper.lr = 0;  // the weights stay as they are
    const std::vector<AdamWTensors> tensors = {{&g, &p, &m, &v, 0.1, nullptr}};
    const double seconds =
        TimeCall([&] { AdamWStepMany(hyper, tensors); }, sync);
    c.adamw.at(i, 0, 0) = 28.0 * static_cast<double>(n) / seconds;
  }
}

}  // namespace

KernelCosts MeasureKernelCosts(Device device, DType dtype,
                               const std::function<void()>& synchronize,
                               double peak_flops, double memory_bandwidth,
                               const std::string& source) {
  KernelCosts c;
  c.device = device.type == DeviceType::kCPU ? "cpu" : "cuda";
  c.dtype = dtype == DType::kBF16 ? "bf16" : "f32";
  c.source = source;
  c.peak_flops = peak_flops;
  c.memory_bandwidth = memory_bandwidth;
  const Grids grids = GridsFor(device.type);
  MeasureGemms(device, dtype, grids, synchronize, c);
  MeasureAttention(device, dtype, grids, synchronize, c);
  MeasureBlockAttention(device, dtype, grids, synchronize, c);
  MeasureElementwise(device, dtype, grids, synchronize, c);
  MeasureAdamW(device, grids, synchronize, c);
  // The roofline bounds what was not measured, never what was.
  for (const RateGrid* g :
       {&c.gemm_forward, &c.gemm_backward_input, &c.gemm_backward_weight,
        &c.attention, &c.block_attention}) {
    for (double r : g->rates) c.peak_flops = std::max(c.peak_flops, r);
  }
  for (double r : c.elementwise.rates) {
    c.memory_bandwidth = std::max(c.memory_bandwidth, r);
  }
  return c;
}

}  // namespace trellis
