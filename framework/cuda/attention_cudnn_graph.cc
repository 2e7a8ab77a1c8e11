#include "framework/cuda/attention_cudnn_graph.h"

#include <map>
#include <utility>
#include <vector>

#include "framework/cuda/attention_cudnn_layout.h"
#include "framework/status.h"

namespace trellis {
namespace cudnn_attention {
namespace {

using cudnn_internal::BackendDescriptor;

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;

// Collects tensors and operations; the first failure sticks and every later
// call does nothing, so a graph reads as a list of nodes and Finish() reports
// the first cuDNN call that refused.
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}

  // A tensor in memory (uid = its TensorId) or by value (a host scalar).
  void Real(int64_t uid, const View& v, cudnnDataType_t type) {
    AddTensor(uid, v, type, /*is_virtual=*/false, /*by_value=*/false);
  }
  void Scalar(int64_t uid) {
    AddTensor(uid, View{{1, 1, 1, 1}, {1, 1, 1, 1}, 0}, kF32, false, true);
  }
  // A virtual tensor (never stored); returns its uid.
  int64_t Virtual(const View& v, cudnnDataType_t type) {
    const int64_t uid = next_virtual_++;
    AddTensor(uid, v, type, /*is_virtual=*/true, /*by_value=*/false);
    return uid;
  }

  // y = mode(x[, b[, t]]); b and t are -1 when absent, axis -1 when unset.
  void Pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t t,
                 int64_t y, cudnnDataType_t compute = kF32, int64_t axis = -1);
  // y = a · b (batched over the first two axes).
  void Matmul(int64_t a, int64_t b, int64_t c);
  // y = op over the axes where y has extent 1.
  void Reduce(cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  // y = x with y's dims, strides and type (a view, no data moves).
  void Reshape(int64_t x, int64_t y);

  // Pointwise into a new virtual tensor shaped like `like`.
  int64_t Pw(cudnnPointwiseMode_t mode, int64_t x, int64_t b, const View& like,
             cudnnDataType_t type = kF32) {
    const int64_t y = Virtual(like, type);
    Pointwise(mode, x, b, -1, y);
    return y;
  }

  // The finalized graph; the builder gives up its descriptors to it.
  absl::StatusOr<Graph> Finish();

 private:
  void AddTensor(int64_t uid, const View& v, cudnnDataType_t type,
                 bool is_virtual, bool by_value);
  absl::Status TensorStatus(int64_t uid, const View& v, cudnnDataType_t type,
                            bool is_virtual, bool by_value);
  absl::Status PointwiseStatus(cudnnPointwiseMode_t mode, int64_t x, int64_t b,
                               int64_t t, int64_t y, cudnnDataType_t compute,
                               int64_t axis);
  absl::Status MatmulStatus(int64_t a, int64_t b, int64_t c);
  absl::Status ReduceStatus(cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  absl::Status ReshapeStatus(int64_t x, int64_t y);
  void Record(absl::Status status) {
    if (status_.ok()) status_ = std::move(status);
  }

  cudnnHandle_t handle_;
  absl::Status status_;
  std::map<int64_t, BackendDescriptor> tensors_;
  std::vector<BackendDescriptor> ops_;
  int64_t next_virtual_ = 100;
};

absl::Status GraphBuilder::TensorStatus(int64_t uid, const View& v,
                                        cudnnDataType_t type, bool is_virtual,
                                        bool by_value) {
  TRELLIS_ASSIGN_OR_RETURN(
      BackendDescriptor t,
      BackendDescriptor::Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  TRELLIS_RETURN_IF_ERROR(t.SetDataType(CUDNN_ATTR_TENSOR_DATA_TYPE, type));
  TRELLIS_RETURN_IF_ERROR(t.SetInt64s(CUDNN_ATTR_TENSOR_DIMENSIONS,
                                      {v.dims.begin(), v.dims.end()}));
  TRELLIS_RETURN_IF_ERROR(t.SetInt64s(CUDNN_ATTR_TENSOR_STRIDES,
                                      {v.strides.begin(), v.strides.end()}));
  TRELLIS_RETURN_IF_ERROR(t.SetInt64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid));
  TRELLIS_RETURN_IF_ERROR(t.SetInt64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16));
  if (is_virtual) {
    TRELLIS_RETURN_IF_ERROR(t.SetBool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, true));
  }
  if (by_value) {
    TRELLIS_RETURN_IF_ERROR(t.SetBool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true));
  }
  TRELLIS_RETURN_IF_ERROR(t.Finalize());
  tensors_.emplace(uid, std::move(t));
  return absl::OkStatus();
}

void GraphBuilder::AddTensor(int64_t uid, const View& v, cudnnDataType_t type,
                             bool is_virtual, bool by_value) {
  if (status_.ok()) Record(TensorStatus(uid, v, type, is_virtual, by_value));
}

absl::Status GraphBuilder::PointwiseStatus(cudnnPointwiseMode_t mode, int64_t x,
                                           int64_t b, int64_t t, int64_t y,
                                           cudnnDataType_t compute,
                                           int64_t axis) {
  TRELLIS_ASSIGN_OR_RETURN(
      BackendDescriptor pw,
      BackendDescriptor::Create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
  TRELLIS_RETURN_IF_ERROR(
      pw.Set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  TRELLIS_RETURN_IF_ERROR(
      pw.SetDataType(CUDNN_ATTR_POINTWISE_MATH_PREC, compute));
  if (axis >= 0) {
    TRELLIS_RETURN_IF_ERROR(pw.SetInt64(CUDNN_ATTR_POINTWISE_AXIS, axis));
  }
  TRELLIS_RETURN_IF_ERROR(pw.Finalize());
  TRELLIS_ASSIGN_OR_RETURN(
      BackendDescriptor op,
      BackendDescriptor::Create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensors_.at(x)));
  if (b >= 0) {
    TRELLIS_RETURN_IF_ERROR(
        op.SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensors_.at(b)));
  }
  if (t >= 0) {
    TRELLIS_RETURN_IF_ERROR(
        op.SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensors_.at(t)));
  }
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensors_.at(y)));
  const float one = 1.f;
  TRELLIS_RETURN_IF_ERROR(
      op.Set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one));
  TRELLIS_RETURN_IF_ERROR(
      op.Set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one));
  TRELLIS_RETURN_IF_ERROR(op.Finalize());
  ops_.push_back(std::move(op));
  return absl::OkStatus();
}

void GraphBuilder::Pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b,
                             int64_t t, int64_t y, cudnnDataType_t compute,
                             int64_t axis) {
  if (status_.ok()) Record(PointwiseStatus(mode, x, b, t, y, compute, axis));
}

absl::Status GraphBuilder::MatmulStatus(int64_t a, int64_t b, int64_t c) {
  TRELLIS_ASSIGN_OR_RETURN(
      BackendDescriptor mm,
      BackendDescriptor::Create(CUDNN_BACKEND_MATMUL_DESCRIPTOR));
  TRELLIS_RETURN_IF_ERROR(mm.SetDataType(CUDNN_ATTR_MATMUL_COMP_TYPE, kF32));
  TRELLIS_RETURN_IF_ERROR(mm.Finalize());
  TRELLIS_ASSIGN_OR_RETURN(
      BackendDescriptor op,
      BackendDescriptor::Create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensors_.at(a)));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensors_.at(b)));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensors_.at(c)));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm));
  TRELLIS_RETURN_IF_ERROR(op.Finalize());
  ops_.push_back(std::move(op));
  return absl::OkStatus();
}

void GraphBuilder::Matmul(int64_t a, int64_t b, int64_t c) {
  if (status_.ok()) Record(MatmulStatus(a, b, c));
}

absl::Status GraphBuilder::ReduceStatus(cudnnReduceTensorOp_t op_type,
                                        int64_t x, int64_t y) {
  TRELLIS_ASSIGN_OR_RETURN(
      BackendDescriptor red,
      BackendDescriptor::Create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
  TRELLIS_RETURN_IF_ERROR(red.Set(CUDNN_ATTR_REDUCTION_OPERATOR,
                                  CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
                                  &op_type));
  TRELLIS_RETURN_IF_ERROR(
      red.SetDataType(CUDNN_ATTR_REDUCTION_COMP_TYPE, kF32));
  TRELLIS_RETURN_IF_ERROR(red.Finalize());
  TRELLIS_ASSIGN_OR_RETURN(
      BackendDescriptor op,
      BackendDescriptor::Create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensors_.at(x)));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensors_.at(y)));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red));
  TRELLIS_RETURN_IF_ERROR(op.Finalize());
  ops_.push_back(std::move(op));
  return absl::OkStatus();
}

void GraphBuilder::Reduce(cudnnReduceTensorOp_t op, int64_t x, int64_t y) {
  if (status_.ok()) Record(ReduceStatus(op, x, y));
}

absl::Status GraphBuilder::ReshapeStatus(int64_t x, int64_t y) {
  TRELLIS_ASSIGN_OR_RETURN(
      BackendDescriptor op,
      BackendDescriptor::Create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensors_.at(x)));
  TRELLIS_RETURN_IF_ERROR(
      op.SetDescriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensors_.at(y)));
  TRELLIS_RETURN_IF_ERROR(op.Finalize());
  ops_.push_back(std::move(op));
  return absl::OkStatus();
}

void GraphBuilder::Reshape(int64_t x, int64_t y) {
  if (status_.ok()) Record(ReshapeStatus(x, y));
}

absl::StatusOr<Graph> GraphBuilder::Finish() {
  TRELLIS_RETURN_IF_ERROR(status_);
  Graph result;
  TRELLIS_ASSIGN_OR_RETURN(
      result.graph,
      BackendDescriptor::Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const BackendDescriptor& op : ops_) ops.push_back(op.get());
  TRELLIS_RETURN_IF_ERROR(
      result.graph.SetHandle(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle_));
  TRELLIS_RETURN_IF_ERROR(
      result.graph.SetDescriptors(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops));
  TRELLIS_RETURN_IF_ERROR(result.graph.Finalize());
  for (auto& [uid, tensor] : tensors_)
    result.parts.push_back(std::move(tensor));
  for (BackendDescriptor& op : ops_) result.parts.push_back(std::move(op));
  tensors_.clear();
  ops_.clear();
  return result;
}

// Part p of the (grouped-query) packed qkv or dqkv.
View QkvView(const GraphShape& s, QkvPart part) {
  return GroupedQkvView(s.B, s.T, s.H, s.KvHeads(), s.D, part);
}

// out (the K or V part of dqkv) = a·b: one matmul into `out` for multi-head
// attention; for grouped-query attention a matmul into a virtual
// per-query-head (B, H, T, D) tensor of the io type, then its sum over each
// group of heads into `out`.
void KeyValueGradient(GraphBuilder& g, const GraphShape& s, int64_t a,
                      int64_t b, int64_t out, QkvPart part) {
  g.Real(out, QkvView(s, part), s.io);
  if (s.KvHeads() == s.H) {
    g.Matmul(a, b, out);
    return;
  }
  const int64_t full = g.Virtual(DenseView(s.B, s.H, s.T, s.D), s.io);
  g.Matmul(a, b, full);
  g.Reduce(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

// The causal mask on scores s (shaped like `scores`): column > row becomes
// kMaskValue. Returns the masked scores.
int64_t CausalMask(GraphBuilder& g, int64_t s, const View& scores) {
  const int64_t row = g.Virtual(scores, CUDNN_DATA_INT32);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s, -1, -1, row, kF32, /*axis=*/2);
  const int64_t col = g.Virtual(scores, CUDNN_DATA_INT32);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s, -1, -1, col, kF32, /*axis=*/3);
  const int64_t keep = g.Virtual(scores, CUDNN_DATA_BOOLEAN);
  g.Pointwise(CUDNN_POINTWISE_CMP_GE, row, col, -1, keep, CUDNN_DATA_BOOLEAN);
  const int64_t masked = g.Virtual(scores, kF32);
  g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, kMaskValue, keep, masked);
  return masked;
}

// The inputs both passes read: Q, Kᵀ, the scalars; returns the scaled
// scores S = scale · Q·Kᵀ, (B, H, T, T), virtual.
int64_t ScaledScores(GraphBuilder& g, const GraphShape& s) {
  g.Real(kQ, QkvView(s, QkvPart::kQ), s.io);
  g.Real(kKt, Transposed(QkvView(s, QkvPart::kK)), s.io);
  g.Scalar(kScale);
  g.Scalar(kMaskValue);
  const View scores = DenseView(s.B, s.H, s.T, s.T);
  const int64_t qk = g.Virtual(scores, kF32);
  g.Matmul(kQ, kKt, qk);
  return g.Pw(CUDNN_POINTWISE_MUL, qk, kScale, scores);
}

}  // namespace

absl::StatusOr<Graph> BuildForwardGraph(cudnnHandle_t handle,
                                        const GraphShape& s) {
  GraphBuilder g(handle);
  const View scores = DenseView(s.B, s.H, s.T, s.T);
  const View rows = DenseView(s.B, s.H, s.T, 1);
  const int64_t masked = CausalMask(g, ScaledScores(g, s), scores);
  g.Real(kV, QkvView(s, QkvPart::kV), s.io);
  const int64_t max = g.Virtual(rows, kF32);
  g.Reduce(CUDNN_REDUCE_TENSOR_MAX, masked, max);
  const int64_t shifted = g.Pw(CUDNN_POINTWISE_SUB, masked, max, scores);
  const int64_t exp = g.Pw(CUDNN_POINTWISE_EXP, shifted, -1, scores);
  const int64_t sum = g.Virtual(rows, kF32);
  g.Reduce(CUDNN_REDUCE_TENSOR_ADD, exp, sum);
  const int64_t log_sum = g.Pw(CUDNN_POINTWISE_LOG, sum, -1, rows);
  g.Real(kStats, StatsView(s.B, s.T, s.H), kF32);
  g.Pointwise(CUDNN_POINTWISE_ADD, max, log_sum, -1, kStats);
  // P goes into the second product in the io type.
  const int64_t p = g.Pw(CUDNN_POINTWISE_DIV, exp, sum, scores, s.io);
  g.Real(kO, RowsView(s.B, s.T, s.H, s.D), s.io);
  g.Matmul(p, kV, kO);
  return g.Finish();
}

absl::StatusOr<Graph> BuildBackwardGraph(cudnnHandle_t handle,
                                         const GraphShape& s) {
  GraphBuilder g(handle);
  const View scores = DenseView(s.B, s.H, s.T, s.T);
  const View scores_t = Transposed(scores);
  const View rows = DenseView(s.B, s.H, s.T, 1);
  const View heads = DenseView(s.B, s.H, s.T, s.D);
  const View out = RowsView(s.B, s.T, s.H, s.D);
  g.Real(kO, out, s.io);
  g.Real(kDO, out, s.io);
  g.Real(kStats, StatsView(s.B, s.T, s.H), kF32);
  g.Scalar(kOne);

  // Di = rowsum(dO ⊙ O), stored for the engine. The product is virtual
  // (never stored): its strides only name an element order, row-major over
  // tokens as in out.
  const View products{
      {s.B, s.H, s.T, s.D}, {s.H * s.T * s.D, s.T * s.D, s.H * s.D, 1}, 0};
  const int64_t d_o_o = g.Pw(CUDNN_POINTWISE_MUL, kDO, kO, products);
  const int64_t di = g.Virtual(rows, kF32);
  g.Reduce(CUDNN_REDUCE_TENSOR_ADD, d_o_o, di);
  g.Real(kSoftmaxSum, rows, kF32);
  g.Pointwise(CUDNN_POINTWISE_MUL, di, kOne, -1, kSoftmaxSum);

  // P = exp(mask(S - stats)); dV = Pᵀ·dO.
  const int64_t shifted =
      g.Pw(CUDNN_POINTWISE_SUB, ScaledScores(g, s), kStats, scores);
  const int64_t p =
      g.Pw(CUDNN_POINTWISE_EXP, CausalMask(g, shifted, scores), -1, scores);
  const int64_t p_t = g.Virtual(scores_t, s.io);
  g.Reshape(p, p_t);
  KeyValueGradient(g, s, p_t, kDO, kDV, QkvPart::kV);

  // dS = P ⊙ (dO·Vᵀ - Di) · scale; dK = dSᵀ·Q. Backward reads V only
  // transposed, (B, H, D, T).
  g.Real(kV, Transposed(QkvView(s, QkvPart::kV)), s.io);
  const int64_t dp = g.Virtual(scores, kF32);
  g.Matmul(kDO, kV, dp);
  const int64_t dp_di = g.Pw(CUDNN_POINTWISE_SUB, dp, kSoftmaxSum, scores);
  const int64_t ds_unscaled = g.Pw(CUDNN_POINTWISE_MUL, dp_di, p, scores);
  const int64_t ds = g.Pw(CUDNN_POINTWISE_MUL, ds_unscaled, kScale, scores);
  const int64_t ds_t = g.Virtual(scores_t, s.io);
  g.Reshape(ds, ds_t);
  KeyValueGradient(g, s, ds_t, kQ, kDK, QkvPart::kK);

  // dQ = dS·K in float32, then to the io type.
  const int64_t k = g.Virtual(QkvView(s, QkvPart::kK), s.io);
  g.Reshape(kKt, k);
  g.Real(kDqAccum, heads, kF32);
  g.Matmul(ds, k, kDqAccum);
  g.Real(kDQ, QkvView(s, QkvPart::kQ), s.io);
  g.Pointwise(CUDNN_POINTWISE_IDENTITY, kDqAccum, -1, -1, kDQ);
  return g.Finish();
}

}  // namespace cudnn_attention
}  // namespace trellis
