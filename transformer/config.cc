#include "transformer/config.h"

#include "absl/strings/str_cat.h"

namespace trellis {

int64_t GptConfig::NumParameters() const {
  const int64_t c = d_model;
  const int64_t per_layer = 2 * 2 * c            // ln_1, ln_2
                            + c * 3 * c + 3 * c  // c_attn
                            + c * c + c          // attn.c_proj
                            + c * 4 * c + 4 * c  // c_fc
                            + 4 * c * c + c;     // mlp.c_proj
  return vocab_size * c + seq_len * c + n_layer * per_layer + 2 * c;
}

double GptConfig::TrainingFlopsPerToken() const {
  return 6.0 * static_cast<double>(NumParameters()) +
         6.0 * static_cast<double>(n_layer * d_model * seq_len);
}

absl::Status GptConfig::Validate() const {
  if (n_layer < 1 || n_head < 1 || d_model < 1 || seq_len < 1 ||
      vocab_size < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model sizes must be positive: ", DebugString(),
        "; set --n_layer, --n_head, --d_model, --seq_len to positive values"));
  }
  if (d_model % n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--d_model=", d_model, " is not divisible by --n_head=", n_head,
        "; choose d_model a multiple of n_head"));
  }
  return absl::OkStatus();
}

std::string GptConfig::DebugString() const {
  return absl::StrCat("n_layer=", n_layer, " n_head=", n_head,
                      " d_model=", d_model, " seq_len=", seq_len,
                      " vocab_size=", vocab_size);
}

int64_t PaddedVocab(int64_t vocab_size, int64_t tp) {
  auto round_up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  const int64_t wide = round_up(vocab_size, 128 * tp);
  if ((wide - vocab_size) * 100 <= vocab_size) return wide;
  return round_up(vocab_size, tp);
}

}  // namespace trellis
