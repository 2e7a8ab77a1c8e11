#include "parallel/parameter.h"

namespace trellis {

Parameter& ParameterSet::Add(std::string name, ShardSpec spec, bool decay,
                             Device device, DType dtype) {
  TRELLIS_CHECK(Find(name) == nullptr) << "duplicate parameter " << name;
  auto p = std::make_unique<Parameter>();
  p->name = std::move(name);
  p->spec = std::move(spec);
  p->value = Tensor::Zeros(p->spec.LocalShape(), dtype, device);
  p->grad = Tensor::Zeros(p->spec.LocalShape(), dtype, device);
  p->decay = decay;
  order_.push_back(p.get());
  owned_.push_back(std::move(p));
  return *order_.back();
}

void ParameterSet::AddShared(Parameter* parameter) {
  TRELLIS_CHECK(Find(parameter->name) == nullptr)
      << "duplicate parameter " << parameter->name;
  order_.push_back(parameter);
}

Parameter* ParameterSet::Find(const std::string& name) const {
  for (Parameter* p : order_) {
    if (p->name == name) return p;
  }
  return nullptr;
}

int64_t ParameterSet::LocalElements() const {
  int64_t n = 0;
  for (const Parameter* p : order_) n += p->numel();
  return n;
}

void ParameterSet::ZeroGrads() {
  for (Parameter* p : order_) p->grad.Zero();
}

void InitializeParameter(Parameter& p,
                         const std::function<double(int64_t)>& value_at) {
  Tensor host = p.value.device().is_cpu()
                    ? p.value
                    : Tensor::Empty(p.value.shape(), p.value.dtype());
  TRELLIS_CHECK(host.dtype() == DType::kF32 || host.dtype() == DType::kF64);
  p.spec.ForEachElement([&](int64_t local, int64_t logical) {
    const double v = logical < 0 ? 0.0 : value_at(logical);
    if (host.dtype() == DType::kF32) {
      host.data<float>()[local] = static_cast<float>(v);
    } else {
      host.data<double>()[local] = v;
    }
  });
  if (!p.value.device().is_cpu()) p.value.CopyFrom(host);
}

}  // namespace trellis
