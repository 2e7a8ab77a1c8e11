// Tensor-level CUDA kernels (cuda_kernels.h) of a mixture-of-experts layer:
// the router and the rows' way to their experts and back. Each checks
// devices and dtypes, the shapes through the checks both backends share
// (framework/kernels/{router,expert_rows}.h), then launches
// (cuda_launch.h).
#include <cstdint>

#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/cuda/cuda_launch.h"
#include "framework/cuda/tensor_checks.h"
#include "framework/kernels/expert_rows.h"
#include "framework/kernels/router.h"

namespace trellis {
namespace cuda {
namespace {

using cuda_internal::CommonDevice;
using cuda_internal::ElemOf;
using cuda_internal::RequireDType;
using kernels_internal::CheckCombineRows;
using kernels_internal::CheckCombineRowsBackward;
using kernels_internal::CheckExpertRoute;
using kernels_internal::CheckExpertRows;
using kernels_internal::CheckRouterLosses;
using kernels_internal::CheckRouterLossesBackward;
using kernels_internal::CheckRouterTopK;
using kernels_internal::CheckRouterTopKBackward;
using kernels_internal::ExpertRowDims;
using kernels_internal::RouterDims;

static_assert(cuda_launch::kMaxRouterExperts == kMaxCudaRouterExperts);

// The shared shape check's dims, within what one warp per row takes.
RouterDims OnCuda(const char* kernel, const RouterDims& d) {
  TRELLIS_CHECK(d.e <= cuda_launch::kMaxRouterExperts)
      << kernel << ": " << d.e << " experts; the CUDA router takes at most "
      << cuda_launch::kMaxRouterExperts;
  return d;
}

bool Sigmoid(const RouterSpec& spec) {
  return spec.score == RouterScore::kSigmoid;
}

}  // namespace

void RouterTopK(const Tensor& logits, const Tensor& bias,
                const RouterSpec& spec, Tensor& index, Tensor& weight) {
  const char* kernel = "RouterTopK";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&logits, &bias, &index, &weight}));
  RequireDType(kernel, logits.dtype(), {&bias, &weight});
  const RouterDims d = OnCuda(
      kernel, CheckRouterTopK(kernel, logits, bias, spec, index, weight));
  cuda_launch::RouterTopK(ElemOf(kernel, logits), logits.raw(),
                          bias.defined() ? bias.raw() : nullptr, d.n, d.e,
                          static_cast<int>(spec.top_k), Sigmoid(spec),
                          spec.normalize, index.data<int32_t>(), weight.raw());
}

void RouterTopKBackward(const Tensor& logits, const Tensor& index,
                        const Tensor& weight, const Tensor& dweight,
                        const RouterSpec& spec, Tensor& dlogits) {
  const char* kernel = "RouterTopKBackward";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&logits, &index, &weight, &dweight, &dlogits}));
  RequireDType(kernel, logits.dtype(), {&weight, &dweight, &dlogits});
  const RouterDims d =
      OnCuda(kernel, CheckRouterTopKBackward(kernel, logits, index, weight,
                                             dweight, spec, dlogits));
  cuda_launch::RouterTopKBackward(
      ElemOf(kernel, logits), logits.raw(), index.data<int32_t>(), weight.raw(),
      dweight.raw(), d.n, d.e, static_cast<int>(spec.top_k), Sigmoid(spec),
      spec.normalize, dlogits.raw());
}

void RouterLosses(const Tensor& logits, const Tensor& counts,
                  const RouterSpec& spec, Tensor& losses) {
  const char* kernel = "RouterLosses";
  CudaDeviceGuard guard(CommonDevice(kernel, {&logits, &counts, &losses}));
  RequireDType(kernel, DType::kF32, {&losses});
  const RouterDims d =
      OnCuda(kernel, CheckRouterLosses(kernel, logits, counts, spec, losses));
  cuda_launch::RouterLosses(
      ElemOf(kernel, logits), logits.raw(), counts.data<int32_t>(), d.n, d.e,
      static_cast<int>(spec.top_k), Sigmoid(spec), losses.data<float>());
}

void RouterLossesBackward(const Tensor& logits, const Tensor& counts,
                          const RouterSpec& spec, double aux_scale,
                          double z_scale, Tensor& dlogits) {
  const char* kernel = "RouterLossesBackward";
  CudaDeviceGuard guard(CommonDevice(kernel, {&logits, &counts, &dlogits}));
  RequireDType(kernel, logits.dtype(), {&dlogits});
  const RouterDims d = OnCuda(
      kernel, CheckRouterLossesBackward(kernel, logits, counts, spec, dlogits));
  if (aux_scale == 0 && z_scale == 0) return;
  cuda_launch::RouterLossesBackward(ElemOf(kernel, logits), logits.raw(),
                                    counts.data<int32_t>(), d.n, d.e,
                                    static_cast<int>(spec.top_k), Sigmoid(spec),
                                    static_cast<float>(aux_scale),
                                    static_cast<float>(z_scale), dlogits.raw());
}

void RouteByExpert(const Tensor& index, int64_t experts, Tensor& route,
                   Tensor& counts) {
  const char* kernel = "RouteByExpert";
  CudaDeviceGuard guard(CommonDevice(kernel, {&index, &route, &counts}));
  CheckExpertRoute(kernel, index, experts, route, counts);
  cuda_launch::RouteByExpert(index.data<int32_t>(), index.numel(), experts,
                             route.data<int32_t>(), counts.data<int32_t>());
}

void DispatchRows(const Tensor& x, const Tensor& route, Tensor& x_perm) {
  const char* kernel = "DispatchRows";
  CudaDeviceGuard guard(CommonDevice(kernel, {&x, &route, &x_perm}));
  const ExpertRowDims d = CheckExpertRows(kernel, x, route, x_perm);
  cuda_launch::DispatchRows(ElemOf(kernel, x), x.raw(), route.data<int32_t>(),
                            d.n, d.k, d.c, x_perm.raw());
}

void DispatchRowsBackward(const Tensor& dx_perm, const Tensor& route,
                          Tensor& dx) {
  const char* kernel = "DispatchRowsBackward";
  CudaDeviceGuard guard(CommonDevice(kernel, {&dx_perm, &route, &dx}));
  const ExpertRowDims d = CheckExpertRows(kernel, dx, route, dx_perm);
  cuda_launch::GatherRowSums(ElemOf(kernel, dx), dx_perm.raw(),
                             route.data<int32_t>(), nullptr, d.n, d.k, d.c,
                             dx.raw());
}

void CombineRows(const Tensor& y_perm, const Tensor& route,
                 const Tensor& weight, Tensor& out) {
  const char* kernel = "CombineRows";
  CudaDeviceGuard guard(CommonDevice(kernel, {&y_perm, &route, &weight, &out}));
  const ExpertRowDims d = CheckCombineRows(kernel, y_perm, route, weight, out);
  cuda_launch::GatherRowSums(ElemOf(kernel, out), y_perm.raw(),
                             route.data<int32_t>(), weight.raw(), d.n, d.k, d.c,
                             out.raw());
}

void CombineRowsBackward(const Tensor& dout, const Tensor& y_perm,
                         const Tensor& route, const Tensor& weight,
                         Tensor& dy_perm, Tensor& dweight) {
  const char* kernel = "CombineRowsBackward";
  CudaDeviceGuard guard(CommonDevice(
      kernel, {&dout, &y_perm, &route, &weight, &dy_perm, &dweight}));
  const ExpertRowDims d = CheckCombineRowsBackward(kernel, dout, y_perm, route,
                                                   weight, dy_perm, dweight);
  cuda_launch::CombineRowsBackward(
      ElemOf(kernel, dout), dout.raw(), y_perm.raw(), route.data<int32_t>(),
      weight.raw(), d.n, d.k, d.c, dy_perm.raw(), dweight.raw());
}

}  // namespace cuda
}  // namespace trellis
