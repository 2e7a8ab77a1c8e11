#include "parallel/replicas.h"

#include <algorithm>

#include "framework/device_memory.h"
#include "framework/kernels/elementwise.h"

namespace trellis {
namespace {

// A parameter's gradient as rows (the dimensions before split_dim) of
// `row` elements, and its replicated pieces as column ranges of them.
struct Layout {
  int64_t rows = 1;
  int64_t row = 1;    // Local elements per row.
  int64_t inner = 1;  // Elements per index of split_dim.
};

Layout LayoutOf(const Parameter& p) {
  const Shape local = p.spec.LocalShape();
  Layout l;
  for (int d = 0; d < p.spec.split_dim; ++d) l.rows *= local[d];
  for (int d = p.spec.split_dim + 1; d < static_cast<int>(local.size()); ++d) {
    l.inner *= local[d];
  }
  l.row = local[p.spec.split_dim] * l.inner;
  return l;
}

char* Bytes(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.raw()) + element * DTypeSize(t.dtype());
}

// Calls visit(first_row, rows, column, width) for the parts of columns
// [col, col + width) of each row that lie in flat range [begin, end): a
// partial first and last row and the whole rows between them.
template <typename Visit>
void ForEachColumnRange(int64_t row, int64_t col, int64_t width, int64_t begin,
                        int64_t end, Visit&& visit) {
  if (begin >= end) return;
  const int64_t r0 = begin / row, r1 = (end - 1) / row;
  auto clip = [&](int64_t r) {
    const int64_t lo = std::max(r * row + col, begin);
    const int64_t hi = std::min(r * row + col + width, end);
    if (lo < hi) visit(r, 1, lo - r * row, hi - lo);
  };
  clip(r0);
  if (r1 > r0 + 1) visit(r0 + 1, r1 - r0 - 1, col, width);
  if (r1 > r0) clip(r1);
}

}  // namespace

void SumReplicatedGradients(Communicator& tp,
                            const std::vector<Parameter*>& params) {
  if (tp.size() == 1) return;
  // Offsets of each parameter's blocks in one buffer of whole blocks.
  struct Slot {
    Parameter* param;
    ShardSpec::ReplicatedPiece piece;
    int64_t offset;
  };
  std::vector<Slot> slots;
  int64_t total = 0;
  for (Parameter* p : params) {
    if (!p->spec.has_replicated_pieces()) continue;
    const Layout l = LayoutOf(*p);
    for (const ShardSpec::ReplicatedPiece& r : p->spec.ReplicatedPieces()) {
      slots.push_back({p, r, total});
      total += l.rows * r.block_size * l.inner;
    }
  }
  if (slots.empty()) return;
  const Tensor& first = slots.front().param->grad;
  Tensor buffer = Tensor::Zeros({total}, first.dtype(), first.device());
  const size_t elem = DTypeSize(first.dtype());
  for (const Slot& s : slots) {
    const Tensor& g = s.param->grad;
    TRELLIS_CHECK(g.dtype() == first.dtype() && g.device() == first.device())
        << s.param->name << ": replicated gradients of mixed dtype or device";
    const Layout l = LayoutOf(*s.param);
    const ShardSpec::ReplicatedPiece& r = s.piece;
    DeviceCopyRows(Bytes(buffer, s.offset + r.piece * r.length * l.inner),
                   r.block_size * l.inner * elem,
                   Bytes(g, r.local_start * l.inner), l.row * elem,
                   r.length * l.inner * elem, l.rows, g.device());
  }
  tp.AllReduce(buffer, ReduceOp::kSum);
  for (const Slot& s : slots) {
    const Tensor& g = s.param->grad;
    const Layout l = LayoutOf(*s.param);
    const ShardSpec::ReplicatedPiece& r = s.piece;
    DeviceCopyRows(Bytes(g, r.local_start * l.inner), l.row * elem,
                   Bytes(buffer, s.offset + r.piece * r.length * l.inner),
                   r.block_size * l.inner * elem, r.length * l.inner * elem,
                   l.rows, g.device());
  }
}

double UnownedGradSquares(const std::vector<GradRange>& ranges) {
  // Sizes first, then one gather and one reduction.
  struct Part {
    const Tensor* grad;
    int64_t first_row, rows, column, width;
    int64_t row;
  };
  std::vector<Part> parts;
  int64_t total = 0;
  for (const GradRange& range : ranges) {
    const Parameter& p = *range.param;
    if (!p.spec.has_replicated_pieces()) continue;
    const Layout l = LayoutOf(p);
    for (const ShardSpec::ReplicatedPiece& r : p.spec.ReplicatedPieces()) {
      if (r.owned) continue;
      ForEachColumnRange(
          l.row, r.local_start * l.inner, r.length * l.inner, range.begin,
          range.end,
          [&](int64_t first_row, int64_t rows, int64_t column, int64_t width) {
            parts.push_back({&p.grad, first_row, rows, column, width, l.row});
            total += rows * width;
          });
    }
  }
  if (parts.empty()) return 0.0;
  const Tensor& first = *parts.front().grad;
  Tensor gathered = Tensor::Empty({total}, first.dtype(), first.device());
  const size_t elem = DTypeSize(first.dtype());
  int64_t at = 0;
  for (const Part& part : parts) {
    TRELLIS_CHECK(part.grad->dtype() == first.dtype() &&
                  part.grad->device() == first.device())
        << "replicated gradients of mixed dtype or device";
    DeviceCopyRows(Bytes(gathered, at), part.width * elem,
                   Bytes(*part.grad, part.first_row * part.row + part.column),
                   part.row * elem, part.width * elem, part.rows,
                   first.device());
    at += part.rows * part.width;
  }
  return SumOfSquares(gathered);
}

}  // namespace trellis
