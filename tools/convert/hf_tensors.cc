#include "tools/convert/hf_tensors.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/float16.h"
#include "framework/status.h"

namespace trellis {

Tensor ConvertTo(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::Empty(t.shape(), dtype);
  ConvertElements(t.raw(), t.dtype(), out.raw(), dtype, t.numel());
  return out;
}

namespace {

// OK when every value of float32 `t` is finite; otherwise names the tensor,
// the first bad element and its value.
absl::Status CheckFinite(const Tensor& t, const std::string& name,
                         const std::string& path) {
  const float* v = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (std::isfinite(v[i])) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensor '", name, "' ", ShapeString(t.shape()), " holds ",
        std::isnan(v[i]) ? "NaN" : (v[i] > 0 ? "+inf" : "-inf"), " at element ",
        i,
        "; trellis imports finite weights only (re-export the model from a "
        "healthy checkpoint)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> ReadHfMapped(const HfSafetensors& files,
                                    const HfTensorMapping& m,
                                    const std::string& prefix, DType* stored,
                                    int64_t* bytes) {
  std::vector<Tensor> parts;
  for (const HfPart& p : m.parts) {
    TRELLIS_ASSIGN_OR_RETURN(Tensor t, files.Read(prefix + p.name, p.shape));
    *stored = t.dtype();
    *bytes += t.nbytes();
    parts.push_back(ConvertTo(t, DType::kF32));
    TRELLIS_RETURN_IF_ERROR(
        CheckFinite(parts.back(), prefix + p.name, files.path()));
  }
  if (!m.transposed) return parts[0];
  // The parts' rows stacked, then transposed: part rows become columns.
  Tensor out = Tensor::Empty(m.shape, DType::kF32);
  const int64_t width = m.shape[1];
  float* dst = out.data<float>();
  int64_t first = 0;
  for (const Tensor& p : parts) {
    const float* src = p.data<float>();
    for (int64_t r = 0; r < p.dim(0); ++r) {
      for (int64_t c = 0; c < p.dim(1); ++c) {
        dst[c * width + first + r] = src[r * p.dim(1) + c];
      }
    }
    first += p.dim(0);
  }
  return out;
}

Tensor HfPartOf(const HfTensorMapping& m, size_t k, const Tensor& t) {
  if (!m.transposed) return t;
  int64_t first = 0;
  for (size_t i = 0; i < k; ++i) first += m.parts[i].shape[0];
  const int64_t rows = m.parts[k].shape[0], cols = m.parts[k].shape[1];
  const int64_t width = t.dim(1);
  Tensor out = Tensor::Empty({rows, cols}, DType::kF32);
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      dst[r * cols + c] = src[c * width + first + r];
    }
  }
  return out;
}

HfOutputTensor HfOutputPart(const HfTensorMapping& m, size_t k, const Tensor* t,
                            const std::string& name, DType dtype) {
  return {name, m.parts[k].shape, dtype,
          [m, k, t, dtype] { return ConvertTo(HfPartOf(m, k, *t), dtype); }};
}

}  // namespace trellis
