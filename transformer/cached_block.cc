#include "transformer/cached_block.h"

#include <tuple>
#include <utility>
#include <vector>

#include "framework/kernels/cached_attention.h"
#include "framework/kernels/elementwise.h"
#include "transformer/chunk_options.h"

namespace trellis {

CachedBlock::CachedBlock(const ModelConfig& config, BlockParts parts)
    : d_model_(config.d_model),
      parts_(std::move(parts)),
      qkv_proj_(
          ColumnLayer(parts_.attention.qkv_weight, parts_.attention.qkv_bias)),
      out_proj_(
          RowLayer(parts_.attention.out_weight, parts_.attention.out_bias)) {}

int64_t CachedBlock::kv_width() const {
  return parts_.attention.kv_heads * parts_.attention.head_dim;
}

DecodeScratch CachedBlock::NewScratch(int64_t rows, int64_t capacity,
                                      DType dtype, Device device) const {
  const AttentionParts& at = parts_.attention;
  const int64_t c = d_model_;
  const DType stats = StatsDType(dtype);
  DecodeScratch s;
  BlockTensors& t = s.t;
  t.ln1 = Tensor::Empty({rows, c}, dtype, device);
  if (parts_.norm1->has_mean() || parts_.norm2->has_mean()) {
    t.mean1 = Tensor::Empty({rows}, stats, device);
  }
  t.rstd1 = Tensor::Empty({rows}, stats, device);
  t.qkv = Tensor::Empty({rows, (at.heads + 2 * at.kv_heads) * at.head_dim},
                        dtype, device);
  t.att = Tensor::Empty({rows, at.heads * at.head_dim}, dtype, device);
  t.x2 = Tensor::Empty({rows, c}, dtype, device);
  // The MLP's own tensors as training lays them out for `rows` rows.
  const SlotPlaces here{SlotPlace::kWorkspace, SlotPlace::kWorkspace,
                        SlotPlace::kUnused};
  for (const Slot& slot : parts_.mlp->Slots(rows, dtype, here)) {
    if (slot.place == SlotPlace::kWorkspace) {
      t.*slot.member =
          Tensor::Empty(slot.shape, slot.dtype, SlotDevice(slot, device));
    }
  }
  if (parts_.qk_norm != nullptr) {
    for (const Slot& slot : parts_.qk_norm->Slots(rows, dtype, here)) {
      if (slot.place == SlotPlace::kWorkspace) {
        t.*slot.member = Tensor::Empty(slot.shape, slot.dtype, device);
      }
    }
  }
  if (parts_.positions != nullptr) {
    for (const Slot& slot : parts_.positions->Slots(capacity, dtype, device)) {
      t.*slot.member = Tensor::Empty(slot.shape, slot.dtype, device);
    }
    parts_.positions->FillTables(capacity, t);
  }
  s.y = Tensor::Empty({rows, c}, dtype, device);
  return s;
}

bool CachedBlock::SharesScratch(const CachedBlock& other) const {
  auto mlp = [](const CachedBlock& b) {
    std::vector<std::tuple<Tensor BlockTensors::*, Shape, DType>> slots;
    const SlotPlaces here{SlotPlace::kWorkspace, SlotPlace::kWorkspace,
                          SlotPlace::kUnused};
    for (const Slot& s : b.parts_.mlp->Slots(1, DType::kF32, here)) {
      slots.emplace_back(s.member, s.shape, s.dtype);
    }
    return slots;
  };
  return mlp(*this) == mlp(other);
}

int64_t CachedBlock::RoutedExperts() const {
  return parts_.mlp->RoutedExperts();
}

void CachedBlock::Forward(Communicator& tp, int64_t start, Tensor& x,
                          Tensor& keys, Tensor& values,
                          DecodeScratch& s) const {
  const AttentionParts& at = parts_.attention;
  const int64_t n = x.dim(0);
  auto rows = [n](const Tensor& t) {
    return t.defined() ? t.Narrow(0, n) : Tensor();
  };
  Tensor ln = rows(s.t.ln1), mean = rows(s.t.mean1), rstd = rows(s.t.rstd1),
         qkv = rows(s.t.qkv), att = rows(s.t.att), x2 = rows(s.t.x2),
         y = rows(s.y);
  parts_.norm1->Forward(x, ln, mean, rstd);
  qkv_proj_.Forward(ln, qkv);
  if (parts_.qk_norm != nullptr) {
    BlockTensors norm;
    norm.qk_in = rows(s.t.qk_in);
    norm.qk_rstd = rows(s.t.qk_rstd);
    parts_.qk_norm->Forward(qkv, norm);
  }
  if (parts_.positions != nullptr) {
    // The tokens' positions start at `start`.
    Tensor rotated = qkv.View({1, n, qkv.dim(1)});
    parts_.positions->Forward(rotated, start, s.t);
  }
  CachedAttentionForward(qkv, at.heads, at.kv_heads, start, keys, values, att);
  out_proj_.Forward(tp, att, x2);
  parts_.norm2->AddForward(x2, x, x2, ln, mean, rstd);
  // The MLP reads the second norm's output and uses its scratch's first
  // rows.
  BlockTensors mlp = s.t;
  mlp.ln2 = ln;
  if (router_bias_ != nullptr) mlp.router_bias = *router_bias_;
  parts_.mlp->Up(mlp);
  if (const RowParallelLinear* down = parts_.mlp->down()) {
    down->Forward(tp, rows(s.t.gelu), y);
  } else {
    parts_.mlp->Down(mlp, y);
    ReduceFromTp::Forward(tp, y);
  }
  Add(y, x2, x);
}

}  // namespace trellis
