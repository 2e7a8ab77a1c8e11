#include "transformer/moe/moe_hf.h"

#include <string>

#include "transformer/llama/llama_hf.h"
#include "transformer/llama/llama_parameters.h"
#include "transformer/moe/moe_parameters.h"

namespace trellis {

std::vector<HfTensorMapping> MoeHfTensors(const ModelConfig& c) {
  auto mlp = [&](int64_t layer, std::vector<HfTensorMapping>& rows) {
    if (!IsMoeLayer(c, layer)) {
      AddLlamaHfMlp(c, layer, "mlp.", c.LlamaFfnHidden(), rows);
      return;
    }
    const std::string router = RouterName(layer);
    rows.push_back({router,
                    {c.d_model, c.experts},
                    {{router, {c.experts, c.d_model}}},
                    true});
    for (int64_t e = 0; e < c.experts; ++e) {
      AddLlamaHfMlp(c, layer, ExpertPrefix(e), MoeFfnHidden(c), rows);
    }
  };
  return LlamaHfTensors(c, mlp);
}

}  // namespace trellis
