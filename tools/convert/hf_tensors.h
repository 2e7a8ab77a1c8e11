// A family's tensors read from and written to Hugging Face safetensors
// through its mapping table (transformer/hf_mapping.h,
// ModelFamily::HfTensors): the one engine both families' converters use.
// Values move as float32 on the way in; dtype changes between float32,
// float16 and bfloat16 are exact in the widening direction, and the
// row stacking and transposes move values without arithmetic, so
// conversions round-trip bit for bit.
//
// Thread safety: pure functions over values.
#ifndef TRELLIS_TOOLS_CONVERT_HF_TENSORS_H_
#define TRELLIS_TOOLS_CONVERT_HF_TENSORS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "framework/tensor.h"
#include "tools/convert/hf_files.h"
#include "transformer/hf_mapping.h"

namespace trellis {

// `t` in `dtype` (itself when it is already).
Tensor ConvertTo(const Tensor& t, DType dtype);

// The float32 trellis tensor of row `m`, read from its parts in `files`,
// each named `prefix` + the part's name. Sets *stored to the parts' dtype
// and adds the bytes read to *bytes. Errors name the file and the tensor;
// a NaN or infinite value is one (the element and its value named).
absl::StatusOr<Tensor> ReadHfMapped(const HfSafetensors& files,
                                    const HfTensorMapping& m,
                                    const std::string& prefix, DType* stored,
                                    int64_t* bytes);

// Part k of row `m` (its HF shape) cut out of the float32 trellis tensor
// `t`; `t` itself for an unchanged row.
Tensor HfPartOf(const HfTensorMapping& m, size_t k, const Tensor& t);

// The output tensor of part k of row `m`, named `name`, made from `t` in
// `dtype` on demand. REQUIRES: `t` outlives the output.
HfOutputTensor HfOutputPart(const HfTensorMapping& m, size_t k, const Tensor* t,
                            const std::string& name, DType dtype);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CONVERT_HF_TENSORS_H_
