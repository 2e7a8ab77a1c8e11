// Tensor-level CUDA kernels (cuda_kernels.h): fill and convert, elementwise,
// GELU, AdamW and the embeddings. Each checks devices, dtypes and shapes,
// makes the tensors' device current and calls its launcher (cuda_launch.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/cuda/cuda_launch.h"
#include "framework/cuda/tensor_checks.h"

namespace trellis {
namespace cuda {
namespace {

using cuda_internal::CommonDevice;
using cuda_internal::ElemOf;
using cuda_internal::RequireDType;
using cuda_launch::Elem;

template <typename T>
uint64_t Bits(T value) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}

// The bytes of one element of `dtype` holding `value`.
uint64_t Pattern(DType dtype, double value) {
  switch (dtype) {
    case DType::kF32:
      return Bits(static_cast<float>(value));
    case DType::kF64:
      return Bits(value);
    case DType::kBF16:
      return Bits(__float2bfloat16_rn(static_cast<float>(value)));
    case DType::kF16:
      return Bits(__float2half_rn(static_cast<float>(value)));
    case DType::kI32:
      return Bits(static_cast<int32_t>(value));
    case DType::kI64:
      return Bits(static_cast<int64_t>(value));
    case DType::kU16:
      return Bits(static_cast<uint16_t>(value));
    case DType::kU32:
      return Bits(static_cast<uint32_t>(value));
  }
  return 0;
}

void CheckSameShape(const char* kernel, const Tensor& a, const Tensor& b) {
  TRELLIS_CHECK(a.shape() == b.shape())
      << kernel << ": " << ShapeString(a.shape()) << " vs "
      << ShapeString(b.shape());
}

// Checks bias (M) against the last dimension of out (..., M).
void CheckBias(const char* kernel, const Tensor& bias, const Tensor& out) {
  TRELLIS_CHECK(bias.ndim() == 1 && out.ndim() >= 1 &&
                out.dim(-1) == bias.dim(0))
      << kernel << ": " << ShapeString(out.shape()) << " vs bias "
      << ShapeString(bias.shape());
}

// ids (N) int32 and rows (..., C) of N·C elements, for a (V, C) table.
void CheckEmbedding(const char* kernel, const Tensor& ids, const Tensor& table,
                    const Tensor& rows) {
  TRELLIS_CHECK(ids.dtype() == DType::kI32)
      << kernel << ": ids are " << DTypeName(ids.dtype()) << ", not int32";
  TRELLIS_CHECK(table.ndim() == 2 && rows.ndim() >= 1 &&
                rows.dim(-1) == table.dim(1) &&
                rows.numel() == ids.numel() * table.dim(1))
      << kernel << ": ids " << ShapeString(ids.shape()) << ", table "
      << ShapeString(table.shape()) << ", rows " << ShapeString(rows.shape());
}

void CheckPosition(const char* kernel, const Tensor& wpe, const Tensor& x) {
  TRELLIS_CHECK(wpe.ndim() == 2 && x.ndim() == 3 && x.dim(2) == wpe.dim(1) &&
                x.dim(1) <= wpe.dim(0))
      << kernel << ": wpe " << ShapeString(wpe.shape()) << ", x "
      << ShapeString(x.shape());
}

}  // namespace

void Fill(Tensor& t, double value) {
  CudaDeviceGuard guard(CommonDevice("Fill", {&t}));
  cuda_launch::Fill(t.raw(), t.numel(), static_cast<int>(DTypeSize(t.dtype())),
                    Pattern(t.dtype(), value));
}

void Convert(const Tensor& src, Tensor& dst) {
  const char* kernel = "Convert";
  CudaDeviceGuard guard(CommonDevice(kernel, {&src, &dst}));
  TRELLIS_CHECK_EQ(src.numel(), dst.numel()) << kernel;
  cuda_launch::Convert(ElemOf(kernel, src), src.raw(), ElemOf(kernel, dst),
                       dst.raw(), src.numel());
}

void Add(const Tensor& a, const Tensor& b, Tensor& out) {
  CudaDeviceGuard guard(CommonDevice("Add", {&a, &b, &out}));
  RequireDType("Add", a.dtype(), {&b, &out});
  CheckSameShape("Add", a, b);
  CheckSameShape("Add", a, out);
  cuda_launch::Add(ElemOf("Add", a), a.raw(), b.raw(), out.raw(), a.numel());
}

void Axpy(double alpha, const Tensor& x, Tensor& y) {
  CudaDeviceGuard guard(CommonDevice("Axpy", {&x, &y}));
  RequireDType("Axpy", x.dtype(), {&y});
  CheckSameShape("Axpy", x, y);
  cuda_launch::Axpy(ElemOf("Axpy", x), static_cast<float>(alpha), x.raw(),
                    y.raw(), x.numel());
}

void Scale(Tensor& x, double s) {
  CudaDeviceGuard guard(CommonDevice("Scale", {&x}));
  cuda_launch::Scale(ElemOf("Scale", x), static_cast<float>(s), x.raw(),
                     x.numel());
}

void ScaleRows(const Tensor& w, Tensor& x) {
  CudaDeviceGuard guard(CommonDevice("ScaleRows", {&w, &x}));
  const int64_t n = w.numel();
  TRELLIS_CHECK(w.dtype() == DType::kF32 && w.ndim() == 1 && x.ndim() >= 1 &&
                x.dim(0) == n)
      << "ScaleRows: w " << ShapeString(w.shape()) << ", x "
      << ShapeString(x.shape());
  cuda_launch::ScaleRows(ElemOf("ScaleRows", x), w.data<float>(), x.raw(), n,
                         n == 0 ? 0 : x.numel() / n);
}

void AddBias(const Tensor& bias, Tensor& out) {
  CudaDeviceGuard guard(CommonDevice("AddBias", {&bias, &out}));
  RequireDType("AddBias", out.dtype(), {&bias});
  CheckBias("AddBias", bias, out);
  const int64_t M = bias.dim(0);
  cuda_launch::AddBias(ElemOf("AddBias", out), bias.raw(), out.raw(),
                       M == 0 ? 0 : out.numel() / M, M);
}

void BiasBackward(const Tensor& dout, Tensor& dbias) {
  CudaDeviceGuard guard(CommonDevice("BiasBackward", {&dout, &dbias}));
  CheckBias("BiasBackward", dbias, dout);
  const int64_t M = dbias.dim(0);
  cuda_launch::ColumnSums(ElemOf("BiasBackward", dout), dout.raw(),
                          M == 0 ? 0 : dout.numel() / M, M,
                          ElemOf("BiasBackward", dbias), dbias.raw());
}

double SumOfSquares(const Tensor& x) {
  CudaDeviceGuard guard(CommonDevice("SumOfSquares", {&x}));
  double sum = 0, squares = 0;
  cuda_launch::SumAndSumOfSquares(ElemOf("SumOfSquares", x), x.raw(), x.numel(),
                                  &sum, &squares);
  return squares;
}

double SumOfSquares(const std::vector<const Tensor*>& xs) {
  const char* kernel = "SumOfSquares";
  std::vector<cuda_launch::Elem> types;
  std::vector<const void*> data;
  std::vector<int64_t> sizes;
  int device = -1;
  for (const Tensor* x : xs) {
    const int d = CommonDevice(kernel, {x});
    TRELLIS_CHECK(device < 0 || d == device)
        << kernel << ": tensors on cuda:" << device << " and cuda:" << d;
    device = d;
    types.push_back(ElemOf(kernel, *x));
    data.push_back(x->raw());
    sizes.push_back(x->numel());
  }
  if (xs.empty()) return 0.0;
  CudaDeviceGuard guard(device);
  return cuda_launch::SumOfSquaresMany(types.data(), data.data(), sizes.data(),
                                       static_cast<int>(xs.size()));
}

double Sum(const Tensor& x) {
  CudaDeviceGuard guard(CommonDevice("Sum", {&x}));
  double sum = 0, squares = 0;
  cuda_launch::SumAndSumOfSquares(ElemOf("Sum", x), x.raw(), x.numel(), &sum,
                                  &squares);
  return sum;
}

void GeluForward(const Tensor& x, Tensor& out) {
  CudaDeviceGuard guard(CommonDevice("GeluForward", {&x, &out}));
  RequireDType("GeluForward", x.dtype(), {&out});
  CheckSameShape("GeluForward", x, out);
  cuda_launch::GeluForward(ElemOf("GeluForward", x), x.raw(), out.raw(),
                           x.numel());
}

void GeluBackward(const Tensor& x, const Tensor& dout, Tensor& dx) {
  CudaDeviceGuard guard(CommonDevice("GeluBackward", {&x, &dout, &dx}));
  RequireDType("GeluBackward", x.dtype(), {&dout, &dx});
  CheckSameShape("GeluBackward", x, dout);
  CheckSameShape("GeluBackward", x, dx);
  cuda_launch::GeluBackward(ElemOf("GeluBackward", x), x.raw(), dout.raw(),
                            dx.raw(), x.numel());
}

void GeluBackwardWrite(const Tensor& x, const Tensor& dout, Tensor& dx) {
  const char* kernel = "GeluBackwardWrite";
  CudaDeviceGuard guard(CommonDevice(kernel, {&x, &dout, &dx}));
  RequireDType(kernel, x.dtype(), {&dout, &dx});
  CheckSameShape(kernel, x, dout);
  CheckSameShape(kernel, x, dx);
  TRELLIS_CHECK(x.numel() == 0 || x.raw() != dx.raw())
      << kernel << ": dx would overwrite x";
  cuda_launch::GeluBackward(ElemOf(kernel, x), x.raw(), dout.raw(), dx.raw(),
                            x.numel(), /*accumulate=*/false);
}

static_assert(kAdamWTensorsPerLaunch == cuda_launch::kAdamWSlices);
static_assert(kColumnSumJobs == cuda_launch::kColumnJobs);

void ColumnSumsMany(const std::vector<ColumnSumJob>& jobs) {
  const char* kernel = "ColumnSumsMany";
  TRELLIS_CHECK_LE(jobs.size(), static_cast<size_t>(kColumnSumJobs))
      << kernel << ": more jobs than one launch takes";
  std::vector<const Tensor*> all;
  std::vector<cuda_launch::ColumnJob> launch;
  int64_t rows = -1;
  for (const ColumnSumJob& job : jobs) {
    TRELLIS_CHECK(job.dout != nullptr && job.db != nullptr)
        << kernel << ": a job lacks dout or db";
    const Tensor& dout = *job.dout;
    const int64_t cols = job.db->numel();
    TRELLIS_CHECK(job.db->ndim() == 1 && dout.ndim() >= 1 &&
                  dout.dim(-1) == cols)
        << kernel << ": dout " << ShapeString(dout.shape()) << ", db "
        << ShapeString(job.db->shape());
    const int64_t n = cuda_internal::Rows(dout);
    TRELLIS_CHECK(rows < 0 || rows == n)
        << kernel << ": jobs of " << rows << " and " << n << " rows";
    rows = n;
    cuda_launch::ColumnJob j{dout.raw(),
                             nullptr,
                             nullptr,
                             nullptr,
                             nullptr,
                             job.db->raw(),
                             cols,
                             ElemOf(kernel, dout),
                             ElemOf(kernel, *job.db)};
    all.insert(all.end(), {&dout, job.db});
    if (job.x != nullptr) {
      TRELLIS_CHECK(job.mean && job.rstd && job.dw)
          << kernel << ": a LayerNorm job lacks mean, rstd or dw";
      TRELLIS_CHECK(job.x->shape() == dout.shape() &&
                    job.dw->shape() == job.db->shape() &&
                    job.mean->numel() == n && job.rstd->numel() == n)
          << kernel << ": x " << ShapeString(job.x->shape()) << ", dout "
          << ShapeString(dout.shape()) << ", dw "
          << ShapeString(job.dw->shape());
      RequireDType(kernel, dout.dtype(), {job.x});
      RequireDType(kernel, DType::kF32, {job.mean, job.rstd});
      RequireDType(kernel, job.db->dtype(), {job.dw});
      j.x = job.x->raw();
      j.mean = job.mean->data<float>();
      j.rstd = job.rstd->data<float>();
      j.dw = job.dw->raw();
      all.insert(all.end(), {job.x, job.mean, job.rstd, job.dw});
    }
    launch.push_back(j);
  }
  if (launch.empty()) return;
  int device = -1;
  for (const Tensor* t : all) {
    const int d = CommonDevice(kernel, {t});
    TRELLIS_CHECK(device < 0 || d == device)
        << kernel << ": tensors on cuda:" << device << " and cuda:" << d;
    device = d;
  }
  CudaDeviceGuard guard(device);
  cuda_launch::ColumnSumsMany(launch.data(), static_cast<int>(launch.size()),
                              rows);
}

namespace {

// The step's scalars, folded in double on the host.
cuda_launch::AdamWScalars FoldAdamW(const AdamWHyper& h) {
  const double step = static_cast<double>(h.step);
  return cuda_launch::AdamWScalars{
      static_cast<float>(h.lr),
      static_cast<float>(h.beta1),
      static_cast<float>(h.beta2),
      static_cast<float>(1.0 - h.beta1),
      static_cast<float>(1.0 - h.beta2),
      static_cast<float>(1.0 / (1.0 - std::pow(h.beta1, step))),
      static_cast<float>(1.0 / (1.0 - std::pow(h.beta2, step))),
      static_cast<float>(h.eps),
      static_cast<float>(h.weight_decay),
      static_cast<float>(h.grad_scale)};
}

// Whether `p` fits the multi-tensor kernel: float32 grad, param and moments
// of one shape on `device`, and a float32 or bfloat16 refresh copy of the
// same element count there.
bool FitsAdamWMany(const AdamWTensors& p, int device) {
  const auto on = [device](const Tensor& t) {
    return t.device().is_cuda() && t.device().index == device;
  };
  for (const Tensor* t :
       {p.grad, static_cast<const Tensor*>(p.param),
        static_cast<const Tensor*>(p.m), static_cast<const Tensor*>(p.v)}) {
    if (t->dtype() != DType::kF32 || !on(*t) ||
        t->shape() != p.param->shape()) {
      return false;
    }
  }
  if (p.refresh == nullptr) return true;
  return on(*p.refresh) && p.refresh->numel() == p.param->numel() &&
         (p.refresh->dtype() == DType::kF32 ||
          p.refresh->dtype() == DType::kBF16);
}

}  // namespace

void AdamWStepMany(const AdamWHyper& h,
                   const std::vector<AdamWTensors>& params) {
  const char* kernel = "AdamWStepMany";
  TRELLIS_CHECK_GE(h.step, 1) << kernel << " steps count from 1";
  const int device = params.front().param->device().index;
  bool fits = true;
  for (const AdamWTensors& p : params) {
    TRELLIS_CHECK(p.grad && p.param && p.m && p.v)
        << kernel << ": an entry lacks a tensor";
    fits = fits && FitsAdamWMany(p, device);
  }
  if (!fits) {
    // Mixed dtypes or devices: one step per parameter.
    for (const AdamWTensors& p : params) {
      AdamWHyper one = h;
      one.weight_decay = p.weight_decay;
      cuda::AdamWStep(one, *p.grad, *p.param, *p.m, *p.v);
      if (p.refresh != nullptr) cuda::Convert(*p.param, *p.refresh);
    }
    return;
  }
  CudaDeviceGuard guard(device);
  const cuda_launch::AdamWScalars s = FoldAdamW(h);
  std::vector<cuda_launch::AdamWSlice> slices;
  slices.reserve(params.size());
  for (const AdamWTensors& p : params) {
    const bool refresh = p.refresh != nullptr && p.refresh->numel() > 0;
    slices.push_back(cuda_launch::AdamWSlice{
        p.grad->data<float>(), p.param->data<float>(), p.m->data<float>(),
        p.v->data<float>(), refresh ? p.refresh->raw() : nullptr,
        p.param->numel(), static_cast<float>(p.weight_decay),
        refresh ? ElemOf(kernel, *p.refresh) : cuda_launch::Elem::kF32});
  }
  for (size_t i = 0; i < slices.size(); i += cuda_launch::kAdamWSlices) {
    const int count = static_cast<int>(
        std::min<size_t>(cuda_launch::kAdamWSlices, slices.size() - i));
    cuda_launch::AdamWMany(s, slices.data() + i, count);
  }
}

void AdamWStep(const AdamWHyper& h, const Tensor& grad, Tensor& param,
               Tensor& m, Tensor& v) {
  const char* kernel = "AdamWStep";
  CudaDeviceGuard guard(CommonDevice(kernel, {&grad, &param, &m, &v}));
  RequireDType(kernel, DType::kF32, {&m, &v});
  TRELLIS_CHECK(grad.shape() == param.shape() && m.shape() == param.shape() &&
                v.shape() == param.shape())
      << kernel << ": param " << ShapeString(param.shape()) << ", grad "
      << ShapeString(grad.shape()) << ", m " << ShapeString(m.shape()) << ", v "
      << ShapeString(v.shape());
  TRELLIS_CHECK_GE(h.step, 1) << kernel << " steps count from 1";
  const cuda_launch::AdamWScalars s = FoldAdamW(h);
  cuda_launch::AdamW(s, ElemOf(kernel, grad), grad.raw(), ElemOf(kernel, param),
                     param.raw(), m.data<float>(), v.data<float>(),
                     param.numel());
}

void EmbeddingForward(const Tensor& ids, const Tensor& table,
                      int64_t vocab_start, Tensor& out) {
  const char* kernel = "EmbeddingForward";
  CudaDeviceGuard guard(CommonDevice(kernel, {&ids, &table, &out}));
  RequireDType(kernel, table.dtype(), {&out});
  CheckEmbedding(kernel, ids, table, out);
  cuda_launch::EmbeddingForward(ElemOf(kernel, table), ids.data<int32_t>(),
                                ids.numel(), table.raw(), table.dim(0),
                                table.dim(1), vocab_start, out.raw());
}

void EmbeddingBackwardWeight(const Tensor& ids, const Tensor& dout,
                             int64_t vocab_start, Tensor& dtable) {
  const char* kernel = "EmbeddingBackwardWeight";
  CudaDeviceGuard guard(CommonDevice(kernel, {&ids, &dout, &dtable}));
  CheckEmbedding(kernel, ids, dtable, dout);
  cuda_launch::EmbeddingBackward(ElemOf(kernel, dout), ids.data<int32_t>(),
                                 ids.numel(), dout.raw(), dtable.dim(1),
                                 vocab_start, ElemOf(kernel, dtable),
                                 dtable.raw(), dtable.dim(0));
}

void AddPositionEmbedding(const Tensor& wpe, Tensor& x) {
  const char* kernel = "AddPositionEmbedding";
  CudaDeviceGuard guard(CommonDevice(kernel, {&wpe, &x}));
  RequireDType(kernel, wpe.dtype(), {&x});
  CheckPosition(kernel, wpe, x);
  cuda_launch::AddPositionEmbedding(ElemOf(kernel, x), wpe.raw(), x.raw(),
                                    x.dim(0), x.dim(1), x.dim(2));
}

void PositionEmbeddingBackwardWeight(const Tensor& dout, Tensor& dwpe) {
  const char* kernel = "PositionEmbeddingBackwardWeight";
  CudaDeviceGuard guard(CommonDevice(kernel, {&dout, &dwpe}));
  CheckPosition(kernel, dwpe, dout);
  cuda_launch::PositionEmbeddingBackward(ElemOf(kernel, dout), dout.raw(),
                                         dout.dim(0), dout.dim(1), dout.dim(2),
                                         ElemOf(kernel, dwpe), dwpe.raw());
}

}  // namespace cuda
}  // namespace trellis
