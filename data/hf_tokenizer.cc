#include "data/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/hf_json_util.h"
#include "data/piece_cache.h"
#include "data/sha256.h"
#include "data/utf8.h"
#include "framework/status.h"

namespace trellis {
namespace {

using nlohmann::json;

constexpr const char* kEotCandidates[] = {"<|endoftext|>", "<|end_of_text|>",
                                          "</s>", "<eos>"};

// tokenizer.json files nest a few levels (a Sequence holding a Split
// holding its pattern). A deeper file is refused before it is parsed: the
// components (and copies of their JSON) are made recursively, and a
// Sequence nested 100,000 deep overflowed the stack.
constexpr int kMaxJsonDepth = 64;

// Encoding may lengthen a text (Llama 2's normalizer makes each space 3
// bytes), and so may decoding; a file whose steps could grow one by more
// than this factor, such as Replace steps each multiplying the text, is
// refused before an encode or decode runs out of memory.
constexpr double kMaxGrowth = 64;
constexpr double kGrowthProbeBytes = 1 << 20;

absl::Status Malformed(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.json: ", path, ": ", what));
}

// The deepest nesting of arrays and objects in JSON text, brackets inside
// strings not counted (exact for valid JSON; the parser judges the rest).
int JsonDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// A token id read from JSON: an unsigned number below kMaxTokenIds, never
// truncated to 32 bits.
absl::StatusOr<uint32_t> ParseTokenId(const json& value,
                                      const std::string& path,
                                      const std::string& token) {
  if (!value.is_number_unsigned()) {
    return Malformed(path, absl::StrCat("token '", token,
                                        "' has no valid id (expected an "
                                        "unsigned integer)"));
  }
  const uint64_t id = value.get<uint64_t>();
  if (id >= HfTokenizer::kMaxTokenIds) {
    return Malformed(
        path, absl::StrCat("token '", token, "' has id ", id, ", not below ",
                           HfTokenizer::kMaxTokenIds,
                           " (the largest vocabulary trellis reads)"));
  }
  return static_cast<uint32_t>(id);
}

// InvalidArgument when a stage's steps could grow a text more than
// kMaxGrowth-fold: `grown` is what they make of kGrowthProbeBytes bytes.
absl::Status CheckGrowth(const std::string& stage, double grown) {
  const double factor = grown / kGrowthProbeBytes;
  if (factor <= kMaxGrowth) return absl::OkStatus();
  return Malformed(stage, absl::StrCat("its steps could make ", factor,
                                       " bytes of each byte of text; trellis "
                                       "accepts at most ",
                                       kMaxGrowth));
}

bool IsSpaceByte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

}  // namespace

// Leftmost-longest matching of added tokens, bucketed by first byte.
class HfTokenizer::AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens)
      : tokens_(std::move(tokens)) {
    std::sort(tokens_.begin(), tokens_.end(),
              [](const AddedToken& a, const AddedToken& b) {
                return a.content.size() > b.content.size();
              });
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const auto first = static_cast<unsigned char>(tokens_[i].content[0]);
      by_first_byte_[first].push_back(i);
    }
  }

  // Calls on_text(segment, starts_text) for the (possibly empty) text
  // between matches and on_token(id) for each match, in order.
  template <typename OnText, typename OnToken>
  void Split(std::string_view text, OnText&& on_text,
             OnToken&& on_token) const {
    size_t done = 0;  // text before `done` is handed out
    for (size_t i = 0; i < text.size(); ++i) {
      const auto& bucket = by_first_byte_[static_cast<unsigned char>(text[i])];
      const AddedToken* match = nullptr;
      for (const size_t t : bucket) {
        if (text.substr(i).starts_with(tokens_[t].content)) {
          match = &tokens_[t];
          break;
        }
      }
      if (match == nullptr) continue;
      size_t start = i, end = i + match->content.size();
      if (match->lstrip) {
        while (start > done && IsSpaceByte(text[start - 1])) --start;
      }
      if (match->rstrip) {
        while (end < text.size() && IsSpaceByte(text[end])) ++end;
      }
      if (start > done) on_text(text.substr(done, start - done), done == 0);
      on_token(match->id);
      done = end;
      i = end - 1;
    }
    if (done < text.size()) on_text(text.substr(done), done == 0);
  }

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<size_t>, 256> by_first_byte_;
};

HfTokenizer::HfTokenizer() : cache_(std::make_unique<PieceCache>()) {
  byte_ids_.fill(-1);
  fallback_ids_.fill(-1);
}
HfTokenizer::~HfTokenizer() = default;

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(
    const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hf tokenizer: ", path, " is a directory; pass --tokenizer=hf:",
        (std::filesystem::path(path) / "tokenizer.json").string()));
  }
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("hf tokenizer: ", path,
                     " not found; pass --tokenizer=hf:PATH/tokenizer.json"));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (!in) {
    return absl::UnavailableError(
        absl::StrCat("hf tokenizer: cannot read ", path));
  }
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tokenizer =
      Parse(contents.str(), path);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("hf tokenizer ", path, ": ",
                                     tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Parse(
    std::string_view json_text, const std::string& origin) {
  if (JsonDepth(json_text) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, " nests JSON deeper than ", kMaxJsonDepth,
                     " levels; a tokenizer.json nests a few"));
  }
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, " is not valid JSON (", e.what(), ")"));
  }
  if (!root.is_object() || !root.contains("model")) {
    return Malformed("(root)", "expected an object with a \"model\"");
  }
  try {
    return FromJson(root, Sha256Hex(json_text));
  } catch (const json::exception& e) {
    // A field of an unexpected JSON type that no check above caught.
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": a field has an unexpected JSON type (", e.what(), ")"));
  }
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(
    const json& root, std::string sha256) {
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->sha256_ = std::move(sha256);
  TRELLIS_ASSIGN_OR_RETURN(
      t->normalizer_,
      hf::ParseNormalizer(root.value("normalizer", json()), "normalizer"));
  TRELLIS_ASSIGN_OR_RETURN(
      t->pre_tokenizer_,
      hf::ParsePreTokenizer(root.value("pre_tokenizer", json()),
                            "pre_tokenizer"));
  TRELLIS_ASSIGN_OR_RETURN(
      t->decoder_, hf::ParseDecoder(root.value("decoder", json()), "decoder"));
  if (t->normalizer_ != nullptr) {
    TRELLIS_RETURN_IF_ERROR(CheckGrowth(
        "normalizer", t->normalizer_->MaxOutputBytes(kGrowthProbeBytes)));
  }
  if (t->decoder_ != nullptr) {
    TRELLIS_RETURN_IF_ERROR(
        CheckGrowth("decoder", t->decoder_->MaxOutputBytes(kGrowthProbeBytes)));
  }
  TRELLIS_ASSIGN_OR_RETURN(
      t->post_processor_,
      hf::ParsePostProcessor(root.value("post_processor", json()),
                             "post_processor"));
  t->byte_level_ =
      t->pre_tokenizer_ != nullptr && t->pre_tokenizer_->byte_level();
  TRELLIS_RETURN_IF_ERROR(t->ParseModel(root["model"]));
  TRELLIS_RETURN_IF_ERROR(
      t->ParseAddedTokens(root.value("added_tokens", json::array())));
  // The post-processor's ids go into encoded text: each must be a token.
  for (const auto* ids :
       {&t->post_processor_.prefix, &t->post_processor_.suffix}) {
    for (const uint32_t id : *ids) {
      if (id >= t->id_token_.size() || !t->id_known_[id]) {
        return Malformed(
            "post_processor",
            absl::StrCat("token id ", id, " is not in the vocabulary of ",
                         t->id_token_.size(), " ids"));
      }
    }
  }
  return t;
}

absl::Status HfTokenizer::ParseModel(const json& model) {
  const std::string type = model.is_object() ? model.value("type", "") : "";
  if (type != "BPE") return hf::Unsupported("model", type, "model");
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0)) {
    return hf::Unsupported("BPE option", "dropout", "model.dropout");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() &&
        !model[key].get<std::string>().empty()) {
      return hf::Unsupported("BPE option", key, absl::StrCat("model.", key));
    }
  }
  TRELLIS_ASSIGN_OR_RETURN(
      byte_fallback_,
      hf::internal::Field<bool>(model, "byte_fallback", "model", false));
  TRELLIS_ASSIGN_OR_RETURN(
      fuse_unk_, hf::internal::Field<bool>(model, "fuse_unk", "model", false));
  TRELLIS_ASSIGN_OR_RETURN(
      ignore_merges_,
      hf::internal::Field<bool>(model, "ignore_merges", "model", false));
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return Malformed("model.vocab", "expected an object of token -> id");
  }
  const std::vector<char32_t>& alphabet = hf::ByteLevelAlphabet();
  std::vector<int> byte_of(0x144, -1);
  for (int b = 0; b < 256; ++b) byte_of[alphabet[b]] = b;
  for (const auto& [token, value] : model["vocab"].items()) {
    TRELLIS_ASSIGN_OR_RETURN(const uint32_t id,
                             ParseTokenId(value, "model.vocab", token));
    if (id >= id_token_.size()) {
      id_token_.resize(id + 1);
      id_known_.resize(id + 1, false);
    }
    id_token_[id] = token;
    id_known_[id] = true;
    std::string model_space = token;
    if (byte_level_) {
      std::string bytes;
      for (size_t pos = 0; pos < token.size();) {
        char32_t c;
        if (!NextUtf8(token, pos, c) || c >= byte_of.size() || byte_of[c] < 0) {
          bytes.clear();  // outside the byte alphabet: never produced
          break;
        }
        bytes.push_back(static_cast<char>(byte_of[c]));
      }
      model_space = std::move(bytes);
      if (model_space.size() == 1) {
        byte_ids_[static_cast<unsigned char>(model_space[0])] = id;
      }
    }
    if (!model_space.empty()) vocab_.insert_or_assign(model_space, id);
    const int fallback = hf::FallbackByte(token);
    if (fallback >= 0) fallback_ids_[fallback] = id;
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"].get<std::string>();
    const auto it = model["vocab"].find(unk);
    if (it == model["vocab"].end()) {
      return Malformed("model.unk_token",
                       absl::StrCat("'", unk, "' is not in the vocab"));
    }
    unk_id_ = it->get<uint32_t>();
  }
  return ParseMerges(model.value("merges", json::array()));
}

absl::Status HfTokenizer::ParseMerges(const json& merges) {
  if (!merges.is_array()) {
    return Malformed("model.merges", "expected an array");
  }
  std::unordered_map<std::string, uint32_t> ids;
  for (size_t id = 0; id < id_token_.size(); ++id) {
    if (id_known_[id]) ids.emplace(id_token_[id], static_cast<uint32_t>(id));
  }
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string path = absl::StrCat("model.merges[", i, "]");
    std::string left, right;
    if (merges[i].is_string()) {
      const std::string line = merges[i].get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos ||
          line.find(' ', space + 1) != std::string::npos) {
        return Malformed(path, "expected two tokens separated by one space");
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merges[i].is_array() && merges[i].size() == 2 &&
               merges[i][0].is_string() && merges[i][1].is_string()) {
      left = merges[i][0].get<std::string>();
      right = merges[i][1].get<std::string>();
    } else {
      return Malformed(path, "expected \"left right\" or [left, right]");
    }
    const auto l = ids.find(left), r = ids.find(right),
               m = ids.find(left + right);
    if (l == ids.end() || r == ids.end() || m == ids.end()) {
      return Malformed(
          path, absl::StrCat("'", left, "', '", right, "' or '", left + right,
                             "' is not in the vocab"));
    }
    merges_.Add(l->second, r->second, m->second);
  }
  return absl::OkStatus();
}

absl::Status HfTokenizer::ParseAddedTokens(const json& added) {
  if (!added.is_array()) return Malformed("added_tokens", "expected an array");
  std::vector<AddedToken> raw, normalized;
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string path = absl::StrCat("added_tokens[", i, "]");
    const json& a = added[i];
    if (!a.is_object() || !a.contains("id") || !a.contains("content") ||
        !a["content"].is_string() || a["content"].get<std::string>().empty()) {
      return Malformed(path, "expected an object with an id and a content");
    }
    TRELLIS_ASSIGN_OR_RETURN(
        const uint32_t id,
        ParseTokenId(a["id"], path + ".id", a["content"].get<std::string>()));
    if (a.value("single_word", false)) {
      return hf::Unsupported("added token option", "single_word",
                             path + ".single_word");
    }
    AddedToken token{a["content"].get<std::string>(), id,
                     a.value("lstrip", false), a.value("rstrip", false),
                     a.value("normalized", !a.value("special", false))};
    if (token.id >= id_token_.size()) {
      id_token_.resize(token.id + 1);
      id_known_.resize(token.id + 1, false);
    }
    id_token_[token.id] = token.content;
    id_known_[token.id] = true;
    if (token.normalized && normalizer_ != nullptr) {
      normalizer_->Apply(token.content);
      // An empty token would match everywhere without moving on: encoding
      // a NUL byte spun forever.
      if (token.content.empty()) {
        return Malformed(path, "content is empty after the normalizer");
      }
      normalized.push_back(std::move(token));
    } else {
      raw.push_back(std::move(token));
    }
  }
  vocab_size_ = static_cast<int64_t>(id_token_.size());
  if (vocab_size_ == 0) return Malformed("model.vocab", "is empty");
  TRELLIS_RETURN_IF_ERROR(FindEot(added));
  // The end-of-text token is never matched in text (see the header).
  for (auto* list : {&raw, &normalized}) {
    std::erase_if(*list,
                  [&](const AddedToken& t) { return t.id == eot_token_; });
  }
  raw_added_ = std::make_unique<AddedTokenMatcher>(std::move(raw));
  normalized_added_ =
      std::make_unique<AddedTokenMatcher>(std::move(normalized));
  return absl::OkStatus();
}

absl::Status HfTokenizer::FindEot(const json& added) {
  for (const char* candidate : kEotCandidates) {
    for (const json& a : added) {
      if (a.value("content", "") == candidate) {
        eot_token_ = a["id"].get<uint32_t>();
        return absl::OkStatus();
      }
    }
  }
  for (const char* candidate : kEotCandidates) {
    for (size_t id = 0; id < id_token_.size(); ++id) {
      if (id_known_[id] && id_token_[id] == candidate) {
        eot_token_ = static_cast<uint32_t>(id);
        return absl::OkStatus();
      }
    }
  }
  return Malformed("added_tokens",
                   "no end-of-text token (<|endoftext|>, <|end_of_text|>, "
                   "</s> or <eos>); add one to added_tokens");
}

void HfTokenizer::Encode(std::string_view text,
                         std::vector<uint32_t>& out) const {
  raw_added_->Split(
      text,
      [&](std::string_view segment, bool first) {
        EncodeSegment(segment, first, out);
      },
      [&](uint32_t id) { out.push_back(id); });
}

void HfTokenizer::EncodeWithSpecialTokens(std::string_view text,
                                          std::vector<uint32_t>& out) const {
  out.insert(out.end(), post_processor_.prefix.begin(),
             post_processor_.prefix.end());
  Encode(text, out);
  out.insert(out.end(), post_processor_.suffix.begin(),
             post_processor_.suffix.end());
}

void HfTokenizer::EncodeSegment(std::string_view segment, bool first,
                                std::vector<uint32_t>& out) const {
  if (normalizer_ == nullptr) return EncodeNormalized(segment, first, out);
  std::string normalized(segment);
  normalizer_->Apply(normalized);
  normalized_added_->Split(
      normalized,
      [&](std::string_view part, bool part_first) {
        EncodeNormalized(part, first && part_first, out);
      },
      [&](uint32_t id) { out.push_back(id); });
}

void HfTokenizer::EncodeNormalized(std::string_view text, bool first,
                                   std::vector<uint32_t>& out) const {
  if (pre_tokenizer_ == nullptr) return EncodePiece(text, out);
  pre_tokenizer_->Split(
      text, first, [&](std::string_view piece) { EncodePiece(piece, out); });
}

void HfTokenizer::EncodePiece(std::string_view piece,
                              std::vector<uint32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() > PieceCache::kMaxPieceBytes) return Bpe(piece, out);
  if (cache_->Find(piece, out)) return;
  const size_t start = out.size();
  Bpe(piece, out);
  cache_->Insert(piece, std::span<const uint32_t>(out).subspan(start));
}

void HfTokenizer::Bpe(std::string_view piece,
                      std::vector<uint32_t>& out) const {
  if (ignore_merges_) {
    const auto it = vocab_.find(std::string(piece));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<uint32_t> symbols;
  bool last_was_unk = false;
  const auto unknown = [&](std::string_view bytes) {
    if (byte_fallback_ && std::all_of(bytes.begin(), bytes.end(), [&](char b) {
          return fallback_ids_[static_cast<unsigned char>(b)] >= 0;
        })) {
      for (char b : bytes) {
        symbols.push_back(fallback_ids_[static_cast<unsigned char>(b)]);
      }
      last_was_unk = false;
      return;
    }
    if (!unk_id_.has_value()) return;  // dropped, as Hugging Face does
    if (!(fuse_unk_ && last_was_unk)) symbols.push_back(*unk_id_);
    last_was_unk = true;
  };
  if (byte_level_) {
    for (char b : piece) {
      const int64_t id = byte_ids_[static_cast<unsigned char>(b)];
      if (id < 0) {
        unknown(std::string_view(&b, 1));
        continue;
      }
      symbols.push_back(static_cast<uint32_t>(id));
      last_was_unk = false;
    }
  } else {
    std::string character;
    for (size_t pos = 0; pos < piece.size();) {
      const size_t start = pos;
      char32_t c;
      NextUtf8(piece, pos, c);
      character.assign(piece.substr(start, pos - start));
      const auto it = vocab_.find(character);
      if (it == vocab_.end()) {
        unknown(character);
        continue;
      }
      symbols.push_back(it->second);
      last_was_unk = false;
    }
  }
  merges_.Apply(symbols, out);
}

absl::StatusOr<std::string> HfTokenizer::Decode(
    std::span<const uint32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    if (id >= id_token_.size() || !id_known_[id]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf tokenizer: token id ", id, " (at position ", i,
          ") is not in the vocabulary of ", id_token_.size(), " ids"));
    }
    tokens.push_back(id_token_[id]);
  }
  std::string text;
  if (decoder_ == nullptr) {  // Hugging Face joins the tokens with spaces
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
    return text;
  }
  decoder_->Apply(tokens);
  for (const std::string& token : tokens) text += token;
  return text;
}

std::optional<uint32_t> HfTokenizer::bos_token() const {
  const std::vector<uint32_t>& prefix = post_processor_.prefix;
  if (prefix.size() != 1 || prefix[0] == eot_token_) return std::nullopt;
  return prefix[0];
}

std::optional<uint32_t> HfTokenizer::TokenId(std::string_view token) const {
  for (size_t id = 0; id < id_token_.size(); ++id) {
    if (id_known_[id] && id_token_[id] == token) {
      return static_cast<uint32_t>(id);
    }
  }
  return std::nullopt;
}

}  // namespace trellis
