#include "parallel/parameter.h"

#include "framework/kernels/elementwise.h"

namespace trellis {

namespace {

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

void ParameterSet::Materialize(bool grads) {
  for (Pending& pending : pending_) {
    Parameter& p = *pending.parameter;
    MakeTensors(p, pending.device, pending.dtype, grads);
    InitializeParameter(p, pending.init);
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
  p.spec.ForEachElement([&](int64_t local, int64_t logical) {
    const double v = logical < 0 ? 0.0 : value_at(logical);
    if (host.dtype() == DType::kF32) {
      host.data<float>()[local] = static_cast<float>(v);
    } else {
      host.data<double>()[local] = v;
    }
  });
  if (!weights.device().is_cpu()) weights.CopyFrom(host);
  RefreshFromMaster(p);
}

}  // namespace trellis
