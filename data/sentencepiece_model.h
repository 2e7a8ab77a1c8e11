// A thin wrapper over libsentencepiece's SentencePieceProcessor that keeps
// its header out of the rest of the project: that header declares
// `absl::string_view` itself, which clashes with the Abseil the project
// uses. Only standard types cross this interface; sentencepiece_model.cc
// includes no Abseil header.
//
// Thread safety: after Load, Encode and Decode may run on many threads.
#ifndef TRELLIS_DATA_SENTENCEPIECE_MODEL_H_
#define TRELLIS_DATA_SENTENCEPIECE_MODEL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trellis {

class SentencePieceModel {
 public:
  // Null with `error` set when `path` cannot be loaded.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path,
                                                  std::string& error);
  ~SentencePieceModel();

  int piece_size() const;
  int eos_id() const;  // -1 when the model has none
  // False with `error` set when the library fails.
  bool Encode(std::string_view text, std::vector<int>& ids,
              std::string& error) const;
  bool Decode(const std::vector<int>& ids, std::string& text,
              std::string& error) const;

 private:
  struct Impl;
  explicit SentencePieceModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_SENTENCEPIECE_MODEL_H_
