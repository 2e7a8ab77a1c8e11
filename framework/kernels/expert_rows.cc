#include "framework/kernels/expert_rows.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::CheckCombineRows;
using kernels_internal::CheckCombineRowsBackward;
using kernels_internal::CheckExpertRoute;
using kernels_internal::CheckExpertRows;
using kernels_internal::DispatchFloat;
using kernels_internal::DotLanes;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

using Dims = kernels_internal::ExpertRowDims;

template <typename T>
void DispatchCpu(const T* x, const int32_t* route, Dims d, T* x_perm) {
  for (int64_t s = 0; s < d.n * d.k; ++s) {
    std::copy_n(x + (s / d.k) * d.c, d.c, x_perm + route[s] * d.c);
  }
}

template <typename T>
void DispatchBackwardCpu(const T* dx_perm, const int32_t* route, Dims d,
                         T* dx) {
  for (int64_t t = 0; t < d.n; ++t) {
    T* out = dx + t * d.c;
    std::fill_n(out, d.c, T{0});
    for (int64_t j = 0; j < d.k; ++j) {
      const T* row = dx_perm + route[t * d.k + j] * d.c;
      for (int64_t i = 0; i < d.c; ++i) out[i] += row[i];
    }
  }
}

template <typename T>
void CombineCpu(const T* y_perm, const int32_t* route, const T* weight, Dims d,
                T* out) {
  for (int64_t t = 0; t < d.n; ++t) {
    T* o = out + t * d.c;
    std::fill_n(o, d.c, T{0});
    for (int64_t j = 0; j < d.k; ++j) {
      const T w = weight[t * d.k + j];
      const T* row = y_perm + route[t * d.k + j] * d.c;
      for (int64_t i = 0; i < d.c; ++i) o[i] += w * row[i];
    }
  }
}

template <typename T>
void CombineBackwardCpu(const T* dout, const T* y_perm, const int32_t* route,
                        const T* weight, Dims d, T* dy_perm, T* dweight) {
  for (int64_t t = 0; t < d.n; ++t) {
    const T* g = dout + t * d.c;
    for (int64_t j = 0; j < d.k; ++j) {
      const int64_t s = t * d.k + j;
      const T w = weight[s];
      T* dy = dy_perm + route[s] * d.c;
      for (int64_t i = 0; i < d.c; ++i) dy[i] = w * g[i];
      dweight[s] = DotLanes<T>(g, y_perm + route[s] * d.c, d.c);
    }
  }
}

void CheckExpertWeight(const char* kernel, const Dims& d, const Tensor& weight,
                       DType dtype) {
  TRELLIS_CHECK(weight.shape() == (Shape{d.n, d.k}) && weight.dtype() == dtype)
      << kernel << ": weight " << ShapeString(weight.shape()) << " "
      << DTypeName(weight.dtype()) << ", expected (" << d.n << ", " << d.k
      << ") " << DTypeName(dtype);
}

}  // namespace

namespace kernels_internal {

ExpertRowDims CheckExpertRows(const char* kernel, const Tensor& x,
                              const Tensor& route, const Tensor& perm) {
  TRELLIS_CHECK(x.ndim() == 2 && perm.ndim() == 2 && route.ndim() == 1 &&
                route.dtype() == DType::kI32)
      << kernel << ": rows " << ShapeString(x.shape()) << ", route "
      << ShapeString(route.shape()) << " " << DTypeName(route.dtype())
      << ", permuted rows " << ShapeString(perm.shape());
  const int64_t n = x.dim(0), c = x.dim(1);
  TRELLIS_CHECK(perm.dim(1) == c && perm.dim(0) == route.dim(0) &&
                (n == 0 ? route.dim(0) == 0 : route.dim(0) % n == 0))
      << kernel << ": " << route.dim(0) << " routed slots and permuted rows "
      << ShapeString(perm.shape()) << " for tokens " << ShapeString(x.shape());
  RequireDType(kernel, x.dtype(), {&perm});
  return ExpertRowDims{n, n == 0 ? 0 : route.dim(0) / n, c};
}

void CheckExpertRoute(const char* kernel, const Tensor& index, int64_t experts,
                      const Tensor& route, const Tensor& counts) {
  TRELLIS_CHECK(
      index.ndim() == 2 && index.dtype() == DType::kI32 &&
      route.shape() == Shape{index.numel()} && route.dtype() == DType::kI32 &&
      counts.shape() == Shape{experts} && counts.dtype() == DType::kI32)
      << kernel << ": index " << ShapeString(index.shape()) << ", route "
      << ShapeString(route.shape()) << ", counts "
      << ShapeString(counts.shape()) << " for " << experts << " experts";
}

ExpertRowDims CheckCombineRows(const char* kernel, const Tensor& y_perm,
                               const Tensor& route, const Tensor& weight,
                               const Tensor& out) {
  const ExpertRowDims d = CheckExpertRows(kernel, out, route, y_perm);
  CheckExpertWeight(kernel, d, weight, out.dtype());
  return d;
}

ExpertRowDims CheckCombineRowsBackward(const char* kernel, const Tensor& dout,
                                       const Tensor& y_perm,
                                       const Tensor& route,
                                       const Tensor& weight,
                                       const Tensor& dy_perm,
                                       const Tensor& dweight) {
  const ExpertRowDims d = CheckExpertRows(kernel, dout, route, y_perm);
  CheckExpertWeight(kernel, d, weight, dout.dtype());
  CheckExpertWeight(kernel, d, dweight, dout.dtype());
  TRELLIS_CHECK(dy_perm.shape() == y_perm.shape() &&
                dy_perm.dtype() == y_perm.dtype())
      << kernel << ": dy_perm " << ShapeString(dy_perm.shape());
  return d;
}

}  // namespace kernels_internal

void RouteByExpert(const Tensor& index, int64_t experts, Tensor& route,
                   Tensor& counts) {
  const char* kernel = "RouteByExpert";
  TRELLIS_CUDA_DISPATCH(cuda::RouteByExpert(index, experts, route, counts),
                        &index, &route, &counts);
  RequireCpu(kernel, {&index, &route, &counts});
  CheckExpertRoute(kernel, index, experts, route, counts);
  const int32_t* idx = index.data<int32_t>();
  int32_t* count = counts.data<int32_t>();
  std::fill_n(count, experts, 0);
  const int64_t slots = index.numel();
  for (int64_t s = 0; s < slots; ++s) {
    TRELLIS_CHECK(idx[s] >= 0 && idx[s] < experts)
        << kernel << ": expert " << idx[s] << " of " << experts;
    ++count[idx[s]];
  }
  std::vector<int64_t> next(experts, 0);
  for (int64_t e = 1; e < experts; ++e) next[e] = next[e - 1] + count[e - 1];
  int32_t* r = route.data<int32_t>();
  for (int64_t s = 0; s < slots; ++s) {
    r[s] = static_cast<int32_t>(next[idx[s]]++);
  }
}

std::vector<int64_t> ExpertCounts(const Tensor& counts) {
  const Tensor host =
      counts.device().is_cpu() ? counts : counts.To(Device::Cpu());
  const int32_t* c = host.data<int32_t>();
  return std::vector<int64_t>(c, c + host.numel());
}

void DispatchRows(const Tensor& x, const Tensor& route, Tensor& x_perm) {
  const char* kernel = "DispatchRows";
  TRELLIS_CUDA_DISPATCH(cuda::DispatchRows(x, route, x_perm), &x, &route,
                        &x_perm);
  RequireCpu(kernel, {&x, &route, &x_perm});
  const Dims d = CheckExpertRows(kernel, x, route, x_perm);
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    DispatchCpu(x.data<T>(), route.data<int32_t>(), d, x_perm.data<T>());
  });
}

void DispatchRowsBackward(const Tensor& dx_perm, const Tensor& route,
                          Tensor& dx) {
  const char* kernel = "DispatchRowsBackward";
  TRELLIS_CUDA_DISPATCH(cuda::DispatchRowsBackward(dx_perm, route, dx),
                        &dx_perm, &route, &dx);
  RequireCpu(kernel, {&dx_perm, &route, &dx});
  const Dims d = CheckExpertRows(kernel, dx, route, dx_perm);
  DispatchFloat(kernel, dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    DispatchBackwardCpu(dx_perm.data<T>(), route.data<int32_t>(), d,
                        dx.data<T>());
  });
}

void CombineRows(const Tensor& y_perm, const Tensor& route,
                 const Tensor& weight, Tensor& out) {
  const char* kernel = "CombineRows";
  TRELLIS_CUDA_DISPATCH(cuda::CombineRows(y_perm, route, weight, out), &y_perm,
                        &route, &weight, &out);
  RequireCpu(kernel, {&y_perm, &route, &weight, &out});
  const Dims d = CheckCombineRows(kernel, y_perm, route, weight, out);
  DispatchFloat(kernel, out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    CombineCpu(y_perm.data<T>(), route.data<int32_t>(), weight.data<T>(), d,
               out.data<T>());
  });
}

void CombineRowsBackward(const Tensor& dout, const Tensor& y_perm,
                         const Tensor& route, const Tensor& weight,
                         Tensor& dy_perm, Tensor& dweight) {
  const char* kernel = "CombineRowsBackward";
  TRELLIS_CUDA_DISPATCH(
      cuda::CombineRowsBackward(dout, y_perm, route, weight, dy_perm, dweight),
      &dout, &y_perm, &route, &weight, &dy_perm, &dweight);
  RequireCpu(kernel, {&dout, &y_perm, &route, &weight, &dy_perm, &dweight});
  const Dims d = CheckCombineRowsBackward(kernel, dout, y_perm, route, weight,
                                          dy_perm, dweight);
  DispatchFloat(kernel, dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    CombineBackwardCpu(dout.data<T>(), y_perm.data<T>(), route.data<int32_t>(),
                       weight.data<T>(), d, dy_perm.data<T>(),
                       dweight.data<T>());
  });
}

}  // namespace trellis
