#include "parallel/parameter.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "framework/kernels/elementwise.h"

namespace trellis {

namespace {

// Fewer elements per thread than this cost more to start a thread for
// than to compute.
constexpr int64_t kElementsPerThread = int64_t{1} << 16;
constexpr int64_t kMaxFillThreads = 16;

// A parameter's local elements as rows: [outer][split][inner] row-major
// (ShardSpec::ForEachElement's order), a row being `inner` consecutive
// local elements whose logical indices are consecutive too.
struct RowLayout {
  int64_t outer = 1, local_split = 1, logical_split = 1, inner = 1;
  int64_t rows() const { return outer * local_split; }
};

RowLayout RowsOf(const ShardSpec& spec) {
  const Shape local = spec.LocalShape();
  RowLayout r;
  if (spec.replicated()) {
    r.inner = NumElements(local);
    return r;
  }
  for (int d = 0; d < spec.split_dim; ++d) r.outer *= local[d];
  for (int d = spec.split_dim + 1; d < static_cast<int>(local.size()); ++d) {
    r.inner *= local[d];
  }
  r.local_split = local[spec.split_dim];
  r.logical_split = spec.logical_shape[spec.split_dim];
  return r;
}

// Fills rows [begin, end) of `out` (the local tensor's data).
template <typename T>
void FillRows(const ShardSpec& spec, const RowLayout& r,
              const Initializer& value_at, int64_t begin, int64_t end, T* out) {
  for (int64_t row = begin; row < end; ++row) {
    const int64_t o = row / r.local_split, j = row % r.local_split;
    const int64_t logical_j = spec.replicated() ? j : spec.LogicalIndex(j);
    T* to = out + row * r.inner;
    if (logical_j < 0) {
      std::fill(to, to + r.inner, T{0});
      continue;
    }
    const int64_t first = (o * r.logical_split + logical_j) * r.inner;
    for (int64_t i = 0; i < r.inner; ++i) {
      to[i] = static_cast<T>(value_at(first + i));
    }
  }
}

// Fills all rows of `out`, on several threads when there are many.
template <typename T>
void FillAll(const ShardSpec& spec, const Initializer& value_at, T* out) {
  const RowLayout r = RowsOf(spec);
  const int64_t rows = r.rows();
  if (rows == 0) return;
  const int64_t cores =
      std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t threads =
      std::clamp<int64_t>(rows * r.inner / kElementsPerThread, 1,
                          std::min({cores, kMaxFillThreads, rows}));
  const int64_t per = (rows + threads - 1) / threads;
  std::vector<std::thread> workers;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t begin = std::min(rows, t * per);
    const int64_t end = std::min(rows, begin + per);
    workers.emplace_back(
        [&, begin, end] { FillRows(spec, r, value_at, begin, end, out); });
  }
  FillRows(spec, r, value_at, 0, std::min(rows, per), out);
  for (std::thread& w : workers) w.join();
}

void MakeTensors(Parameter& p, Device device, DType dtype, bool grad) {
  p.value = Tensor::Zeros(p.spec.LocalShape(), dtype, device);
  if (grad)
    p.grad = Tensor::Zeros(p.spec.LocalShape(), GradDType(dtype), device);
  if (dtype == DType::kBF16) {
    p.master = Tensor::Zeros(p.spec.LocalShape(), DType::kF32, device);
  }
}

}  // namespace

Parameter& ParameterSet::Register(std::string name, ShardSpec spec,
                                  bool decay) {
  auto p = std::make_unique<Parameter>();
  p->name = std::move(name);
  p->spec = std::move(spec);
  p->decay = decay;
  Index(p.get());
  owned_.push_back(std::move(p));
  return *order_.back();
}

void ParameterSet::Index(Parameter* p) {
  const bool added = index_.emplace(p->name, p).second;
  TRELLIS_CHECK(added) << "duplicate parameter " << p->name;
  order_.push_back(p);
}

Parameter& ParameterSet::Add(std::string name, ShardSpec spec, bool decay,
                             Device device, DType dtype) {
  Parameter& p = Register(std::move(name), std::move(spec), decay);
  MakeTensors(p, device, dtype, /*grad=*/true);
  return p;
}

Parameter& ParameterSet::Declare(std::string name, ShardSpec spec, bool decay,
                                 Device device, DType dtype, Initializer init) {
  Parameter& p = Register(std::move(name), std::move(spec), decay);
  pending_.push_back({&p, device, dtype, std::move(init)});
  return p;
}

void ParameterSet::Materialize(bool grads, ParameterFill fill) {
  for (Pending& pending : pending_) {
    Parameter& p = *pending.parameter;
    MakeTensors(p, pending.device, pending.dtype, grads);
    if (fill == ParameterFill::kInitialize) {
      InitializeParameter(p, pending.init);
    }
  }
  pending_.clear();
}

void ParameterSet::AddShared(Parameter* parameter) { Index(parameter); }

Parameter* ParameterSet::Find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

Parameter& ParameterSet::Get(const std::string& name) const {
  Parameter* p = Find(name);
  TRELLIS_CHECK(p != nullptr) << "no parameter " << name;
  return *p;
}

int64_t ParameterSet::LocalElements() const {
  int64_t n = 0;
  for (const Parameter* p : order_) n += p->numel();
  return n;
}

void ParameterSet::ZeroGrads() {
  for (Parameter* p : order_) p->grad.Zero();
}

DType GradDType(DType value_dtype) {
  return value_dtype == DType::kBF16 ? DType::kF32 : value_dtype;
}

void RefreshFromMaster(Parameter& p) {
  if (p.master.defined()) Convert(p.master, p.value);
}

void InitializeParameter(Parameter& p, const Initializer& value_at) {
  Tensor& weights = p.weights();
  Tensor host = weights.device().is_cpu()
                    ? weights
                    : Tensor::Empty(weights.shape(), weights.dtype());
  TRELLIS_CHECK(host.dtype() == DType::kF32 || host.dtype() == DType::kF64);
  TRELLIS_CHECK(host.shape() == p.spec.LocalShape()) << p.name;
  if (host.dtype() == DType::kF32) {
    FillAll(p.spec, value_at, host.data<float>());
  } else {
    FillAll(p.spec, value_at, host.data<double>());
  }
  if (!weights.device().is_cpu()) weights.CopyFrom(host);
  RefreshFromMaster(p);
}

}  // namespace trellis
