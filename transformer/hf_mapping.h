// How a family's parameters map to a Hugging Face state dict: one row of
// the table per trellis tensor (ModelFamily::HfTensors), naming the HF
// tensors it is made of. A converter reads and writes any family through
// its table alone (tools/convert/hf_tensors.h).
//
// A row with one part and `transposed` false is that HF tensor unchanged
// (names may differ: GPT-2's "wte" is HF's "wte.weight"). Otherwise the
// parts' rows are stacked (HF nn.Linear weights are (out, in)) and the
// result transposed into trellis's (in, out) layout: e.g. Llama's
// qkv_proj.weight (C, (H + 2·Hkv)·D) = [q_proj; k_proj; v_proj]ᵀ.
//
// Thread safety: plain values.
#ifndef TRELLIS_TRANSFORMER_HF_MAPPING_H_
#define TRELLIS_TRANSFORMER_HF_MAPPING_H_

#include <string>
#include <vector>

#include "framework/tensor.h"

namespace trellis {

struct HfPart {
  std::string name;  // HF's name, without any file-wide prefix
  Shape shape;       // HF's shape
};

struct HfTensorMapping {
  std::string logical;  // trellis's logical name
  Shape shape;          // trellis's global shape
  std::vector<HfPart> parts;
  bool transposed = false;
};

// The row of a tensor HF stores unchanged under `hf_name`.
inline HfTensorMapping HfSame(const std::string& logical, Shape shape,
                              const std::string& hf_name) {
  return HfTensorMapping{logical, shape, {{hf_name, shape}}, false};
}

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_HF_MAPPING_H_
