// A mixture of experts as a block's MLP (BlockMlp, block_parts.h):
//
//   logits = ln · router               (N, E), the router replicated over tp
//   index, weight = RouterTopK(logits, router_bias)
//                                      (N, k)  (framework/kernels/router.h)
//   out[t] = Σ_j weight[t, j] · expert_{index[t, j]}(ln[t]) + shared(ln[t])
//   expert_e(x) = down_e(silu(gate_e) · up_e), [gate_e | up_e] = x · gate_up_e
//
// router_bias (BlockTensors, transformer/expert_bias.h) moves the choice
// only; `shared` is the optional shared expert, a SwiGLU MLP of its own
// width on every row, split over tp as the experts are. Its output joins the
// combined one in the down GEMM (MatmulForwardResidual over routed_out); its
// activation is kept, not recomputed, under selective recomputation.
//
// Dropless: each token's rows go to all k of its experts (RouteByExpert,
// DispatchRows and CombineRows: framework/kernels/expert_rows.h), each
// expert one GEMM over its contiguous rows. Up runs everything to the
// experts' outputs (so that recomputing it refills them), Down combines. Each
// expert is tensor-parallel as Llama's MLP (gate_up column-parallel, down
// row-parallel), so the combined output is a partial sum over tp that the
// skeleton reduces (Down). Backward, the weights' gradient (a dot product with
// the experts' whole outputs) is summed over tp by one small all-reduce of (N,
// k); the router's rows are whole on every tp rank, so its weight gradient is
// whole there and its input gradient is added by tp rank 0 alone.
//
// The balance losses (Switch's aux loss and the router z-loss, over the
// microbatch's N tokens) join the objective as
// loss_scale · (aux_coeff · aux + z_coeff · z), loss_scale being the
// microbatch's (BlockTensors::loss_scale): their gradient enters the
// router's logits; their values are in route_losses. Under context
// parallelism (BlockTensors::cp) a microbatch's windows are split over the
// cp ranks: the expert counts are summed over cp (window_counts) so that
// the aux loss's shares f are the whole windows', and each rank's aux and
// its gradient are its 1/cp share of E·Σ f·P (P its own rows' mean), so
// that the cp ranks' averaged gradients and summed losses are the
// unsplit microbatch's; the z-loss is a mean over rows and needs nothing.
//
// Tensors (BlockTensors): logits, choice, choice_weight, route, counts,
// window_counts, route_losses, moe_in (N·k, C), fc (N·k, 2·Fe/tp), gelu (N·k,
// Fe/tp), moe_out (N·k, C) as the places say; dlogits, dchoice, dmoe_out, dfc
// and the scratch dgelu, dmoe_in. The expert counts are copied to the host
// once per forward (host_counts, and host_recv_counts under expert
// parallelism: Slot::host), and every later use (the experts' blocks, the
// exchanges' sizes, backward) reads that copy: one host wait per layer and
// microbatch, two under expert parallelism.
//
// Expert parallelism (spec.ep > 1): the rows in expert order are in blocks
// by the ep rank holding their experts; the ranks exchange the counts,
// then the rows (AllToAllRows, parallel/expert_parallel.h) into
// expert_in, run each (sender, expert) block's GEMMs into expert_out and
// send the outputs back into moe_out, where the combine finds them as
// without expert parallelism. Backward moves dmoe_out to the experts and
// their input gradients back. The rows received are at most ep · N ·
// min(k, E/ep) (every sender's tokens all routed here); the buffers hold
// that many.
//
// Thread safety: immutable after construction.
#ifndef TRELLIS_TRANSFORMER_MOE_MOE_MLP_H_
#define TRELLIS_TRANSFORMER_MOE_MOE_MLP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "framework/kernels/router.h"
#include "parallel/parameter.h"
#include "transformer/block_parts.h"

namespace trellis {

struct MoeMlpSpec {
  int64_t experts = 0;
  // Expert parallelism: this rank holds experts [ep_rank·E/ep, (ep_rank +
  // 1)·E/ep) of the ep group's ranks (BlockTensors::ep).
  int64_t ep = 1;
  int64_t ep_rank = 0;
  int64_t width = 0;  // Fe/tp: each expert's activation columns here
  // Fs/tp: the shared expert's activation columns here; 0: none.
  int64_t shared_width = 0;
  RouterSpec router;
  double aux_loss_coeff = 0.0;
  double z_loss_coeff = 0.0;
  // Whether this rank adds the router's input gradient (tp rank 0: the
  // others' would repeat it in the tp sum).
  bool router_input_grad = true;
};

// The shared expert's weights, split as an expert's (both null: none).
struct SharedExpert {
  Parameter* gate_up = nullptr;
  Parameter* down = nullptr;
};

// REQUIRES: router (C, E) replicated; gate_up and down one per expert
// this rank holds (E / ep), split as NewSwiGluMlp's
// (transformer/llama/swiglu_mlp.h); spec.shared_width set iff `shared` is.
std::shared_ptr<const BlockMlp> NewMoeMlp(const MoeMlpSpec& spec,
                                          Parameter& router,
                                          std::vector<Parameter*> gate_up,
                                          std::vector<Parameter*> down,
                                          SharedExpert shared = {});

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_MOE_MOE_MLP_H_
