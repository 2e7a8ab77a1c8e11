#include "data/gpt2_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/piece_cache.h"
#include "data/utf8.h"
#include "framework/status.h"

namespace trellis {
namespace {

constexpr char kEndOfText[] = "<|endoftext|>";
constexpr char kFetchHint[] =
    "run scripts/fetch-gpt2-assets.sh or pass --tokenizer_dir";

// Unicode White_Space, which is what `\s` means in the Python `regex` module
// that GPT-2's encoder.py uses.
constexpr char kWhiteSpace[] =
    "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::string Gpt2Pattern() {
  const std::string ws = kWhiteSpace;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + ws +
         "\\p{L}\\p{N}]+|[" + ws + "]+(?![^" + ws + "])|[" + ws + "]+";
}

// GPT-2's bytes_to_unicode(): the printable Latin-1 bytes ('!'..'~',
// U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; every other byte, in
// increasing order, gets the next code point from U+0100 on.
std::array<char32_t, 256> ByteToUnicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                           (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

std::string JoinPath(const std::string& dir, const char* file) {
  if (dir.empty()) return file;
  return (std::filesystem::path(dir) / file).string();
}

absl::StatusOr<std::string> ReadAssetFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("gpt2 tokenizer: ", path, " not found; ", kFetchHint));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (!in) {
    return absl::UnavailableError(
        absl::StrCat("gpt2 tokenizer: cannot read ", path, "; ", kFetchHint));
  }
  return contents.str();
}

absl::Status Malformed(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("gpt2 tokenizer: ", path, " is malformed: ", what,
                   "; re-run scripts/fetch-gpt2-assets.sh after deleting it"));
}

}  // namespace

// GPT-2's pre-tokenization pattern, compiled once; match data per call.
class Gpt2Tokenizer::Splitter {
 public:
  static absl::StatusOr<std::unique_ptr<Splitter>> Create() {
    const std::string pattern = Gpt2Pattern();
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset,
        nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return absl::InternalError(
          absl::StrCat("gpt2 tokenizer: PCRE2 rejected the pattern at offset ",
                       offset, ": ", reinterpret_cast<const char*>(message)));
    }
    const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return std::unique_ptr<Splitter>(new Splitter(code, jit));
  }
  ~Splitter() { pcre2_code_free(code_); }
  Splitter(const Splitter&) = delete;
  Splitter& operator=(const Splitter&) = delete;

  // Calls emit(piece) for each piece of `text`, in order.
  template <typename Emit>
  void Split(std::string_view text, Emit&& emit) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create_from_pattern(code_, nullptr),
        &pcre2_match_data_free);
    TRELLIS_CHECK(data != nullptr) << "out of memory";
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
      const int rc = Match(subject, text.size(), pos, data.get());
      if (rc == PCRE2_ERROR_NOMATCH) {  // only invalid bytes are left
        emit(text.substr(pos));
        return;
      }
      TRELLIS_CHECK(rc > 0) << "PCRE2 match failed with error " << rc;
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
      const size_t start = ovector[0], end = ovector[1];
      TRELLIS_CHECK(start >= pos && end > start && end <= text.size());
      // Bytes the pattern skipped are not valid UTF-8: a piece of their own.
      if (start > pos) emit(text.substr(pos, start - pos));
      emit(text.substr(start, end - start));
      pos = end;
    }
  }

 private:
  Splitter(pcre2_code* code, bool jit) : code_(code), jit_(jit) {}

  int Match(PCRE2_SPTR subject, size_t length, size_t start,
            pcre2_match_data* data) const {
    if (jit_) {
      const int rc =
          pcre2_jit_match(code_, subject, length, start, 0, data, nullptr);
      // The interpreter keeps its backtracking state on the heap, so it
      // copes where the JIT's fixed stack runs out.
      if (rc != PCRE2_ERROR_JIT_STACKLIMIT) return rc;
    }
    return pcre2_match(code_, subject, length, start, PCRE2_NO_JIT, data,
                       nullptr);
  }

  pcre2_code* code_;
  bool jit_;
};

Gpt2Tokenizer::Gpt2Tokenizer() : cache_(std::make_unique<PieceCache>()) {}
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::Load(
    const std::string& dir) {
  std::unique_ptr<Gpt2Tokenizer> tokenizer(new Gpt2Tokenizer());
  std::unordered_map<std::string, uint32_t> token_ids;
  TRELLIS_RETURN_IF_ERROR(
      tokenizer->LoadEncoder(JoinPath(dir, "encoder.json"), token_ids));
  TRELLIS_RETURN_IF_ERROR(
      tokenizer->LoadMerges(JoinPath(dir, "vocab.bpe"), token_ids));
  TRELLIS_ASSIGN_OR_RETURN(tokenizer->splitter_, Splitter::Create());
  return tokenizer;
}

// Fills id_bytes_, id_known_, byte_ids_ and eot_token_; `token_ids` gets the
// file's own (byte-to-unicode encoded) token strings for LoadMerges.
absl::Status Gpt2Tokenizer::LoadEncoder(
    const std::string& path,
    std::unordered_map<std::string, uint32_t>& token_ids) {
  TRELLIS_ASSIGN_OR_RETURN(const std::string text, ReadAssetFile(path));
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Malformed(path, absl::StrCat("not valid JSON (", e.what(), ")"));
  }
  if (!json.is_object() || json.empty()) {
    return Malformed(path, "expected a JSON object of token -> id");
  }
  constexpr uint64_t kMaxId = 1u << 24;
  std::array<int, 0x144> unicode_to_byte;  // GPT-2 maps bytes below U+0144
  unicode_to_byte.fill(-1);
  const std::array<char32_t, 256> byte_to_unicode = ByteToUnicode();
  for (int b = 0; b < 256; ++b) unicode_to_byte[byte_to_unicode[b]] = b;

  for (const auto& [token, value] : json.items()) {
    if (!value.is_number_unsigned() || value.get<uint64_t>() >= kMaxId) {
      return Malformed(path, absl::StrCat("token '", token,
                                          "' has an id that is not an "
                                          "integer in [0, 2^24)"));
    }
    const auto id = value.get<uint32_t>();
    std::string bytes;
    for (size_t pos = 0; pos < token.size();) {
      char32_t c;
      if (!NextUtf8(token, pos, c) || c >= unicode_to_byte.size() ||
          unicode_to_byte[c] < 0) {
        return Malformed(path, absl::StrCat("token '", token, "' (id ", id,
                                            ") has a character outside "
                                            "GPT-2's byte alphabet"));
      }
      bytes.push_back(static_cast<char>(unicode_to_byte[c]));
    }
    if (id >= id_bytes_.size()) {
      id_bytes_.resize(id + 1);
      id_known_.resize(id + 1, false);
    }
    if (id_known_[id]) {
      return Malformed(path, absl::StrCat("id ", id, " is used twice"));
    }
    id_known_[id] = true;
    id_bytes_[id] = std::move(bytes);
    token_ids.emplace(token, id);
  }
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    AppendUtf8(byte_to_unicode[b], symbol);
    const auto it = token_ids.find(symbol);
    if (it == token_ids.end()) {
      return Malformed(path, absl::StrFormat("no token for byte 0x%02x", b));
    }
    byte_ids_[b] = it->second;
  }
  const auto eot = token_ids.find(kEndOfText);
  if (eot == token_ids.end()) {
    return Malformed(path, absl::StrCat("no ", kEndOfText, " token"));
  }
  eot_token_ = eot->second;
  return absl::OkStatus();
}

// Each line after the "#version" comment is "left right"; the line's index
// among the merges is its rank (lower merges first).
absl::Status Gpt2Tokenizer::LoadMerges(
    const std::string& path,
    const std::unordered_map<std::string, uint32_t>& token_ids) {
  TRELLIS_ASSIGN_OR_RETURN(const std::string text, ReadAssetFile(path));
  std::string_view rest = text;
  for (size_t line_number = 1; !rest.empty(); ++line_number) {
    const size_t newline = std::min(rest.find('\n'), rest.size());
    std::string_view line = rest.substr(0, newline);
    rest.remove_prefix(std::min(newline + 1, rest.size()));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) {
      continue;
    }
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 ||
        space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      return Malformed(path, absl::StrCat("line ", line_number,
                                          " is not two symbols separated by "
                                          "one space: '",
                                          std::string(line), "'"));
    }
    const std::string left(line.substr(0, space));
    const std::string right(line.substr(space + 1));
    const auto left_id = token_ids.find(left);
    const auto right_id = token_ids.find(right);
    const auto merged_id = token_ids.find(left + right);
    for (const auto& [it, symbol] : {std::pair{left_id, left},
                                     {right_id, right},
                                     {merged_id, left + right}}) {
      if (it == token_ids.end()) {
        return Malformed(path, absl::StrCat("line ", line_number, ": '", symbol,
                                            "' is not in encoder.json"));
      }
    }
    // As in encoder.py's dict(zip(merges, ranks)), a repeated pair keeps
    // its last rank.
    merges_.Add(left_id->second, right_id->second, merged_id->second);
  }
  if (merges_.empty()) return Malformed(path, "no merges");
  return absl::OkStatus();
}

std::vector<std::string_view> Gpt2Tokenizer::Split(
    std::string_view text) const {
  std::vector<std::string_view> pieces;
  splitter_->Split(text,
                   [&](std::string_view piece) { pieces.push_back(piece); });
  return pieces;
}

void Gpt2Tokenizer::Encode(std::string_view text,
                           std::vector<uint32_t>& out) const {
  splitter_->Split(text,
                   [&](std::string_view piece) { EncodePiece(piece, out); });
}

void Gpt2Tokenizer::EncodePiece(std::string_view piece,
                                std::vector<uint32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > PieceCache::kMaxPieceBytes) {
    Bpe(piece, out);
    return;
  }
  if (cache_->Find(piece, out)) return;
  const size_t start = out.size();
  Bpe(piece, out);
  cache_->Insert(piece, std::span<const uint32_t>(out).subspan(start));
}

void Gpt2Tokenizer::Bpe(std::string_view piece,
                        std::vector<uint32_t>& out) const {
  std::vector<uint32_t> symbols(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    symbols[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  }
  merges_.Apply(symbols, out);
}

absl::StatusOr<std::string> Gpt2Tokenizer::Decode(
    std::span<const uint32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    if (id >= id_bytes_.size() || !id_known_[id]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gpt2 tokenizer: token id ", id, " (at position ", i,
          ") is not in the vocabulary of ", id_bytes_.size(), " ids"));
    }
    text.append(id_bytes_[id]);
  }
  return text;
}

}  // namespace trellis
