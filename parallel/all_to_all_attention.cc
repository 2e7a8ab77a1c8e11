#include "parallel/all_to_all_attention.h"

#include <array>
#include <cstring>
#include <utility>

#include "framework/kernels/attention.h"
#include "framework/status.h"
#include "parallel/expert_parallel.h"

namespace trellis {
namespace {

// Element rows of a tensor: `width` elements each, of `size` bytes.
struct Rows {
  char* base;
  int64_t width;
  size_t size;
  char* At(int64_t row, int64_t col) const {
    return base + (row * width + col) * size;
  }
};

Rows RowsOf(const Tensor& t) {
  return Rows{static_cast<char*>(t.raw()), t.dim(-1), DTypeSize(t.dtype())};
}

// dst[dst_row, dst_col + j] = src[src_row, src_col + j] for j < cols.
void CopyRow(const Rows& src, int64_t src_row, int64_t src_col, const Rows& dst,
             int64_t dst_row, int64_t dst_col, int64_t cols) {
  std::memcpy(dst.At(dst_row, dst_col), src.At(src_row, src_col),
              cols * src.size);
}

// The first elements of t, viewed as `shape`.
Tensor Prefix(const Tensor& t, Shape shape) {
  TRELLIS_CHECK_LE(NumElements(shape), t.numel());
  return Tensor::FromStorage(t.storage(), t.byte_offset(), std::move(shape),
                             t.dtype());
}

// The bands of one head group g of cp in a qkv row: query heads, then key,
// then value heads (attention.h's layout), and where they sit in the
// group's own row.
struct HeadBands {
  int64_t H, Hkv, D, groups;
  int64_t Hg() const { return H / groups; }
  int64_t Kg() const { return Hkv / groups; }
  int64_t GroupWidth() const { return (Hg() + 2 * Kg()) * D; }
  // {column in the whole row, column in the group's row, width}, for
  // the group's query, key and value heads.
  std::array<std::array<int64_t, 3>, 3> Of(int64_t g) const {
    return {{{g * Hg() * D, 0, Hg() * D},
             {H * D + g * Kg() * D, Hg() * D, Kg() * D},
             {(H + Hkv) * D + g * Kg() * D, (Hg() + Kg()) * D, Kg() * D}}};
  }
};

enum Scratch { kSend, kRecv, kDout, kDqkv, kGathered, kStarts };
enum Kept { kQkv, kOut };

}  // namespace

AllToAllAttention::AllToAllAttention(Communicator& cp,
                                     const ContextSplit& split)
    : ContextAttention(cp, split) {
  for (int r = 0; r < split.size(); ++r) {
    positions_.push_back(split.Positions(r));
  }
}

ContextSlots AllToAllAttention::Slots(int64_t B, int64_t H, int64_t Hkv,
                                      int64_t D) const {
  const int64_t n = split_.size(), T = split_.window(), Tl = split_.Local();
  const HeadBands bands{H, Hkv, D, n};
  const int64_t g = bands.GroupWidth(), out = bands.Hg() * D;
  return ContextSlots{
      .saved = AttentionSavedShape(Device::Cpu(), B, T, bands.Hg()),
      .kept = {{B, T, g}, {B, T, out}},
      .scratch = {{{n, B, Tl, g}},
                  {{n, B, Tl, g}},
                  {{B, T, out}},
                  {{B, T, g}},
                  {{n, B, Tl}, true},
                  {{B, T}, true}}};
}

void AllToAllAttention::Exchange(const Tensor& send, Tensor& recv) const {
  const int64_t n = split_.size();
  const int64_t rows = send.numel() / send.dim(-1) / n;
  Tensor to = send.View({n * rows, send.dim(-1)});
  Tensor from = recv.View({n * rows, recv.dim(-1)});
  const std::vector<int64_t> each(n, rows);
  AllToAllRows(cp_, to, each, from, each);
}

Tensor AllToAllAttention::WholeStarts(const Tensor& doc_start,
                                      ContextTensors& t) const {
  if (!doc_start.defined()) return Tensor();
  Tensor& gathered = t.scratch[kGathered];
  Tensor& whole = t.scratch[kStarts];
  Tensor flat = gathered.View({gathered.numel()});
  cp_.AllGather(doc_start.View({doc_start.numel()}), flat);
  const int64_t B = whole.dim(0), T = whole.dim(1), Tl = split_.Local();
  const int32_t* from = gathered.data<int32_t>();
  int32_t* to = whole.data<int32_t>();
  for (int64_t s = 0; s < split_.size(); ++s) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < Tl; ++i) {
        to[b * T + positions_[s][i]] = from[(s * B + b) * Tl + i];
      }
    }
  }
  return whole;
}

void AllToAllAttention::Forward(const Tensor& qkv, const Tensor& doc_start,
                                int64_t n_head, int64_t n_kv_head, Tensor& out,
                                Tensor& saved, ContextTensors& t) const {
  const int64_t n = split_.size(), B = qkv.dim(0), Tl = split_.Local();
  const int64_t T = split_.window();
  const HeadBands bands{n_head, n_kv_head,
                        qkv.dim(2) / (n_head + 2 * n_kv_head), n};
  const int64_t gw = bands.GroupWidth();
  // Sequence split -> head split: send head group g of every token to g.
  const Rows src = RowsOf(qkv), send = RowsOf(t.scratch[kSend]);
  for (int64_t g = 0; g < n; ++g) {
    for (int64_t r = 0; r < B * Tl; ++r) {
      for (const auto& [whole_col, group_col, cols] : bands.Of(g)) {
        CopyRow(src, r, whole_col, send, g * B * Tl + r, group_col, cols);
      }
    }
  }
  Exchange(t.scratch[kSend], t.scratch[kRecv]);
  // From rank s: its tokens, laid out at their window positions.
  Tensor& whole = t.kept[kQkv];
  const Rows recv = RowsOf(t.scratch[kRecv]), dst = RowsOf(whole);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < Tl; ++i) {
        CopyRow(recv, (s * B + b) * Tl + i, 0, dst, b * T + positions_[s][i], 0,
                gw);
      }
    }
  }
  const Tensor starts = WholeStarts(doc_start, t);
  Tensor& att = t.kept[kOut];
  AttentionForward(whole, starts, bands.Hg(), bands.Kg(), att, saved);
  // Head split -> sequence split: each rank's tokens' outputs go back.
  const int64_t ow = bands.Hg() * bands.D;
  Tensor back = Prefix(t.scratch[kSend], {n, B, Tl, ow});
  Tensor got = Prefix(t.scratch[kRecv], {n, B, Tl, ow});
  const Rows a = RowsOf(att), b_rows = RowsOf(back);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < Tl; ++i) {
        CopyRow(a, b * T + positions_[s][i], 0, b_rows, (s * B + b) * Tl + i, 0,
                ow);
      }
    }
  }
  Exchange(back, got);
  const Rows g_rows = RowsOf(got), o = RowsOf(out);
  for (int64_t g = 0; g < n; ++g) {
    for (int64_t r = 0; r < B * Tl; ++r) {
      CopyRow(g_rows, g * B * Tl + r, 0, o, r, g * ow, ow);
    }
  }
}

void AllToAllAttention::Backward(const Tensor& dout, const Tensor& qkv,
                                 const Tensor& doc_start,
                                 const Tensor& /*out: kept whole*/,
                                 const Tensor& saved, int64_t n_head,
                                 int64_t n_kv_head, Tensor& dqkv,
                                 ContextTensors& t) const {
  const int64_t n = split_.size(), B = qkv.dim(0), Tl = split_.Local();
  const int64_t T = split_.window();
  const HeadBands bands{n_head, n_kv_head,
                        qkv.dim(2) / (n_head + 2 * n_kv_head), n};
  const int64_t gw = bands.GroupWidth(), ow = bands.Hg() * bands.D;
  // dout's head group g of every token to g, laid out in window order.
  Tensor send = Prefix(t.scratch[kSend], {n, B, Tl, ow});
  Tensor recv = Prefix(t.scratch[kRecv], {n, B, Tl, ow});
  const Rows d = RowsOf(dout), s_rows = RowsOf(send);
  for (int64_t g = 0; g < n; ++g) {
    for (int64_t r = 0; r < B * Tl; ++r) {
      CopyRow(d, r, g * ow, s_rows, g * B * Tl + r, 0, ow);
    }
  }
  Exchange(send, recv);
  Tensor& whole_dout = t.scratch[kDout];
  const Rows r_rows = RowsOf(recv), wd = RowsOf(whole_dout);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < Tl; ++i) {
        CopyRow(r_rows, (s * B + b) * Tl + i, 0, wd, b * T + positions_[s][i],
                0, ow);
      }
    }
  }
  const Tensor starts = WholeStarts(doc_start, t);
  Tensor& whole_dqkv = t.scratch[kDqkv];
  AttentionBackward(whole_dout, t.kept[kQkv], starts, t.kept[kOut], saved,
                    bands.Hg(), bands.Kg(), whole_dqkv, kDefaultAttentionPath,
                    GradWrite::kWrite);
  // Each rank's tokens' gradients back, for every head group.
  const Rows wq = RowsOf(whole_dqkv), back = RowsOf(t.scratch[kSend]);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < Tl; ++i) {
        CopyRow(wq, b * T + positions_[s][i], 0, back, (s * B + b) * Tl + i, 0,
                gw);
      }
    }
  }
  Exchange(t.scratch[kSend], t.scratch[kRecv]);
  const Rows got = RowsOf(t.scratch[kRecv]), dst = RowsOf(dqkv);
  for (int64_t g = 0; g < n; ++g) {
    for (int64_t r = 0; r < B * Tl; ++r) {
      for (const auto& [whole_col, group_col, cols] : bands.Of(g)) {
        CopyRow(got, g * B * Tl + r, group_col, dst, r, whole_col, cols);
      }
    }
  }
}

}  // namespace trellis
