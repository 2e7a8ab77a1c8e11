// llm.c's GPT-2 checkpoint format (gpt2_124M.bin, gpt2_124M_bf16.bin):
//
//   256 int32 little-endian header words:
//     [0] magic 20240326   [1] version: 3 = float32, 5 = bfloat16
//     [2] maxT (context)   [3] V (vocabulary)   [4] L (layers)
//     [5] NH (heads)       [6] C (channels)     [7] Vp (padded vocabulary)
//     the rest zero
//   then the 16 parameter tensors back to back, in this order:
//     wte (Vp, C)  wpe (maxT, C)  ln1w (L, C)  ln1b (L, C)
//     qkvw (L, 3C, C)  qkvb (L, 3C)  attprojw (L, C, C)  attprojb (L, C)
//     ln2w (L, C)  ln2b (L, C)  fcw (L, 4C, C)  fcb (L, 4C)
//     fcprojw (L, C, 4C)  fcprojb (L, C)  lnfw (C)  lnfb (C)
//   Linear weights are (out, in), the transpose of Hugging Face's Conv1D
//   (in, out); rows [V, Vp) of wte are padding (zero).
//
// LlmcReader validates the header (magic, version, positive sizes that fit
// in memory, C divisible by NH, V ≤ Vp) and the file size (exactly the
// header plus the parameters) before anything else is read; errors name the
// file and, for a truncated file, the tensor it ends in. WriteLlmc writes
// the same layout (to <path>.tmp, then renamed).
//
// Thread safety: a reader may be used from several threads at once.
#ifndef TRELLIS_TOOLS_CONVERT_LLMC_H_
#define TRELLIS_TOOLS_CONVERT_LLMC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/tensor.h"

namespace trellis {

inline constexpr int32_t kLlmcMagic = 20240326;
inline constexpr int32_t kLlmcVersionF32 = 3;
inline constexpr int32_t kLlmcVersionBf16 = 5;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;
inline constexpr int kLlmcNumTensors = 16;

struct LlmcHeader {
  int32_t version = kLlmcVersionF32;
  int64_t max_seq_len = 0;        // maxT
  int64_t vocab_size = 0;         // V
  int64_t n_layer = 0;            // L
  int64_t n_head = 0;             // NH
  int64_t channels = 0;           // C
  int64_t padded_vocab_size = 0;  // Vp

  DType dtype() const {
    return version == kLlmcVersionBf16 ? DType::kBF16 : DType::kF32;
  }
};

// One parameter tensor of the file.
struct LlmcTensor {
  const char* name;  // "wte", "qkvw", ...
  Shape shape;
  int64_t offset = 0;  // Byte offset in the file.
  int64_t nbytes = 0;
};

// The 16 tensors of a header, in file order, with their offsets.
// REQUIRES: the header is valid (ValidateLlmcHeader).
std::vector<LlmcTensor> LlmcTensors(const LlmcHeader& header);

// InvalidArgument naming `file` and the bad field.
absl::Status ValidateLlmcHeader(const LlmcHeader& header,
                                const std::string& file);

class LlmcReader {
 public:
  static absl::StatusOr<LlmcReader> Open(const std::string& path);
  LlmcReader(LlmcReader&& other) noexcept;
  LlmcReader& operator=(LlmcReader&& other) noexcept;
  ~LlmcReader();

  const std::string& path() const { return path_; }
  const LlmcHeader& header() const { return header_; }
  const std::vector<LlmcTensor>& tensors() const { return tensors_; }
  // Tensor `index` (file order) as a new CPU tensor of header().dtype().
  absl::StatusOr<Tensor> Read(int index) const;

 private:
  LlmcReader() = default;
  std::string path_;
  int fd_ = -1;
  LlmcHeader header_;
  std::vector<LlmcTensor> tensors_;
};

// Writes `tensors` (the 16 of LlmcTensors(header), in order, CPU, of
// header.dtype() and the listed shapes).
absl::Status WriteLlmc(const std::string& path, const LlmcHeader& header,
                       const std::vector<Tensor>& tensors);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CONVERT_LLMC_H_
