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

// A rectangle of a range's replicated elements: `rows` rows of `width`
// elements from column `column` of a gradient row of `row` elements,
// starting at row `first_row`; `data` holds the range, whose element 0 is
// the parameter's flat element `base`.
struct Part {
  const Tensor* data;
  int64_t base;
  int64_t first_row, rows, column, width, row;
  int64_t piece = 0, pieces = 1;  // The piece's place in its block.
  int64_t slot = 0;               // Where its block starts in a buffer.
};

// Calls visit(part) for the rectangles of the replicated pieces (those
// `pick` accepts) that lie in each range, in order.
template <typename Pick, typename Visit>
void ForEachReplicatedPart(const std::vector<GradRange>& ranges, Pick&& pick,
                           Visit&& visit) {
  for (const GradRange& range : ranges) {
    const Parameter& p = *range.param;
    if (!p.spec.has_replicated_pieces()) continue;
    const bool own = range.grad.defined();
    const Tensor* data = own ? &range.grad : &p.grad;
    const int64_t base = own ? range.begin : 0;
    const Layout l = LayoutOf(p);
    for (const ShardSpec::ReplicatedPiece& r : p.spec.ReplicatedPieces()) {
      if (!pick(r)) continue;
      ForEachColumnRange(
          l.row, r.local_start * l.inner, r.length * l.inner, range.begin,
          range.end,
          [&](int64_t first_row, int64_t rows, int64_t column, int64_t width) {
            visit(Part{data, base, first_row, rows, column, width, l.row,
                       r.piece, r.block_size / r.length});
          });
    }
  }
}

char* PartStart(const Part& part) {
  return Bytes(*part.data, part.first_row * part.row + part.column - part.base);
}

}  // namespace

void SumReplicatedGradients(Communicator& tp,
                            const std::vector<Parameter*>& params) {
  std::vector<GradRange> ranges;
  for (Parameter* p : params) {
    if (p->spec.has_replicated_pieces()) ranges.push_back({p, 0, p->numel()});
  }
  SumReplicatedGradients(tp, ranges);
}

void SumReplicatedGradients(Communicator& tp,
                            const std::vector<GradRange>& ranges) {
  if (tp.size() == 1) return;
  // Each rectangle gets a slot of its block's width (pieces × its width);
  // a rank writes its piece at the piece's place there, the others' stay
  // zero. The slots follow the ranges, the same on every rank.
  std::vector<Part> parts;
  int64_t total = 0;
  ForEachReplicatedPart(
      ranges, [](const ShardSpec::ReplicatedPiece&) { return true; },
      [&](Part part) {
        part.slot = total;
        total += part.rows * part.pieces * part.width;
        parts.push_back(part);
      });
  if (parts.empty()) return;
  const Tensor& first = *parts.front().data;
  Tensor buffer = Tensor::Zeros({total}, first.dtype(), first.device());
  const size_t elem = DTypeSize(first.dtype());
  for (const Part& part : parts) {
    TRELLIS_CHECK(part.data->dtype() == first.dtype() &&
                  part.data->device() == first.device())
        << "replicated gradients of mixed dtype or device";
    DeviceCopyRows(Bytes(buffer, part.slot + part.piece * part.width),
                   part.pieces * part.width * elem, PartStart(part),
                   part.row * elem, part.width * elem, part.rows,
                   first.device());
  }
  tp.AllReduce(buffer, ReduceOp::kSum);
  for (const Part& part : parts) {
    DeviceCopyRows(PartStart(part), part.row * elem,
                   Bytes(buffer, part.slot + part.piece * part.width),
                   part.pieces * part.width * elem, part.width * elem,
                   part.rows, first.device());
  }
}

double UnownedGradSquares(const std::vector<GradRange>& ranges) {
  // Sizes first, then one gather and one reduction.
  std::vector<Part> parts;
  int64_t total = 0;
  ForEachReplicatedPart(
      ranges, [](const ShardSpec::ReplicatedPiece& r) { return !r.owned; },
      [&](const Part& part) {
        parts.push_back(part);
        total += part.rows * part.width;
      });
  if (parts.empty()) return 0.0;
  const Tensor& first = *parts.front().data;
  Tensor gathered = Tensor::Empty({total}, first.dtype(), first.device());
  const size_t elem = DTypeSize(first.dtype());
  int64_t at = 0;
  for (const Part& part : parts) {
    TRELLIS_CHECK(part.data->dtype() == first.dtype() &&
                  part.data->device() == first.device())
        << "replicated gradients of mixed dtype or device";
    DeviceCopyRows(Bytes(gathered, at), part.width * elem, PartStart(part),
                   part.row * elem, part.width * elem, part.rows,
                   first.device());
    at += part.rows * part.width;
  }
  return SumOfSquares(gathered);
}

}  // namespace trellis
