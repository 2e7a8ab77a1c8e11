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

// Fills local elements [begin, end) into `out` (out[0] is element
// `begin`): row by row, a row's logical indices being consecutive.
template <typename T>
void FillRange(const ShardSpec& spec, const RowLayout& r,
               const Initializer& value_at, int64_t begin, int64_t end,
               T* out) {
  int64_t k = begin;
  while (k < end) {
    const int64_t row = k / r.inner, i = k % r.inner;
    const int64_t n = std::min(r.inner - i, end - k);
    const int64_t o = row / r.local_split, j = row % r.local_split;
    const int64_t logical_j = spec.replicated() ? j : spec.LogicalIndex(j);
    T* to = out + (k - begin);
    if (logical_j < 0) {
      std::fill(to, to + n, T{0});
    } else {
      const int64_t first = (o * r.logical_split + logical_j) * r.inner + i;
      for (int64_t e = 0; e < n; ++e) {
        to[e] = static_cast<T>(value_at(first + e));
      }
    }
    k += n;
  }
}

// Fills local elements [first, first + count) into `out`, on several
// threads when there are many. Each element's value depends on its index
// alone, not on how the range is cut.
template <typename T>
void FillAll(const ShardSpec& spec, const Initializer& value_at, int64_t first,
             int64_t count, T* out) {
  const RowLayout r = RowsOf(spec);
  if (count <= 0 || r.inner == 0) return;
  const int64_t cores =
      std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t threads = std::clamp<int64_t>(count / kElementsPerThread, 1,
                                              std::min(cores, kMaxFillThreads));
  const int64_t per = (count + threads - 1) / threads;
  std::vector<std::thread> workers;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t begin = std::min(count, t * per);
    const int64_t end = std::min(count, begin + per);
    workers.emplace_back([&, begin, end] {
      FillRange(spec, r, value_at, first + begin, first + end, out + begin);
    });
  }
  FillRange(spec, r, value_at, first, first + std::min(count, per), out);
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
  for (ParameterDeclaration& pending : pending_) {
    Parameter& p = *pending.parameter;
    MakeTensors(p, pending.device, pending.dtype, grads);
    if (fill == ParameterFill::kInitialize) {
      InitializeParameter(p, pending.init);
    }
  }
  pending_.clear();
}

std::vector<ParameterDeclaration> ParameterSet::TakeDeclarations() {
  std::vector<ParameterDeclaration> taken = std::move(pending_);
  pending_.clear();
  return taken;
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
  const int64_t n = host.numel();
  if (host.dtype() == DType::kF32) {
    FillAll(p.spec, value_at, 0, n, host.data<float>());
  } else {
    FillAll(p.spec, value_at, 0, n, host.data<double>());
  }
  if (!weights.device().is_cpu()) weights.CopyFrom(host);
  RefreshFromMaster(p);
}

void InitializeElements(const ShardSpec& spec, const Initializer& value_at,
                        int64_t first, int64_t count, Tensor& out) {
  TRELLIS_CHECK(out.device().is_cpu() && out.numel() == count &&
                (out.dtype() == DType::kF32 || out.dtype() == DType::kF64));
  TRELLIS_CHECK(first >= 0 && first + count <= NumElements(spec.LocalShape()));
  if (out.dtype() == DType::kF32) {
    FillAll(spec, value_at, first, count, out.data<float>());
  } else {
    FillAll(spec, value_at, first, count, out.data<double>());
  }
}

}  // namespace trellis
