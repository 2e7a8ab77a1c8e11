#include "data/document_reader.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/compressed_reader.h"
#include "data/jsonl_reader.h"
#include "framework/status.h"

namespace trellis {
namespace {

constexpr size_t kReadBytes = size_t{1} << 20;  // one read of an input
constexpr size_t kKeptMessages = 5;             // of skipped lines

bool IsSpace(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' ||
         c == '\v';
}

bool IsBlank(const std::string& text, size_t from) {
  return std::all_of(text.begin() + from, text.end(), IsSpace);
}

}  // namespace

absl::StatusOr<Split> ParseSplit(const std::string& name) {
  if (name == "file") return Split::kFile;
  if (name == "line") return Split::kLine;
  if (name == "blank_line") return Split::kBlankLine;
  return absl::InvalidArgumentError(
      absl::StrCat("--split=", name, " is not one of file, line, blank_line"));
}

absl::StatusOr<BadLines> ParseBadLines(const std::string& name) {
  if (name == "fail") return BadLines::kFail;
  if (name == "skip") return BadLines::kSkip;
  return absl::InvalidArgumentError(
      absl::StrCat("--on_bad_line=", name, " is not one of fail, skip"));
}

void DocumentReader::MaybeCut(const Emit& emit) {
  size_t begin = 0;  // doc_[0, begin) is emitted; erased once at the end
  while (doc_.size() - begin >= kPieceBytes) {
    const std::string_view rest = std::string_view(doc_).substr(begin);
    auto cut_point = [&rest](size_t i) {
      return IsSpace(rest[i]) && !IsSpace(rest[i - 1]);
    };
    // The last cut point at most kPieceBytes in, else the first after it.
    size_t cut = 0;
    for (size_t i = kPieceBytes - 1; i > kPieceBytes / 2 && cut == 0; --i) {
      if (cut_point(i)) cut = i;
    }
    for (size_t i = kPieceBytes; i < rest.size() && cut == 0; ++i) {
      if (cut_point(i)) cut = i;
    }
    if (cut == 0) {
      if (rest.size() < 4 * kPieceBytes) break;  // look further for a space
      cut = kPieceBytes;  // no space at all: cut between UTF-8 characters
      while (cut > 0 &&
             (static_cast<unsigned char>(rest[cut]) & 0xC0) == 0x80) {
        --cut;
      }
    }
    emit(Piece{std::string(rest.substr(0, cut)), false});
    begin += cut;
    doc_emitted_ = true;
  }
  if (begin == 0) return;
  doc_.erase(0, begin);
  if (begin > line_start_) line_cut_ = true;
  line_start_ = begin > line_start_ ? 0 : line_start_ - begin;
}

void DocumentReader::EndDocument(const Emit& emit) {
  if (options_.split == Split::kBlankLine && !doc_.empty() &&
      doc_.back() == '\n') {
    doc_.pop_back();  // the newline after a paragraph's last line
  }
  FinishDocument(emit);
}

void DocumentReader::FinishDocument(const Emit& emit) {
  if (!doc_.empty() || doc_emitted_) emit(Piece{std::move(doc_), true});
  doc_.clear();
  doc_emitted_ = false;
  line_start_ = 0;
  line_cut_ = false;
}

// Called after a line's text (without "\n") was appended to doc_.
void DocumentReader::EndLine(const Emit& emit) {
  if (!doc_.empty() && doc_.back() == '\r' && doc_.size() > line_start_) {
    doc_.pop_back();
  }
  const bool blank = !line_cut_ && IsBlank(doc_, line_start_);
  if (blank) doc_.resize(line_start_);
  if (options_.split == Split::kLine) {
    if (!blank) EndDocument(emit);
  } else if (blank) {
    EndDocument(emit);
  } else {
    doc_.push_back('\n');
  }
  line_start_ = doc_.size();
  line_cut_ = false;
}

absl::Status DocumentReader::RunText(const std::string& file, const Emit& emit,
                                     const Consumed& consumed) {
  TRELLIS_ASSIGN_OR_RETURN(std::unique_ptr<CompressedReader> in,
                           CompressedReader::Open(file));
  std::vector<char> block(kReadBytes);
  int64_t reported = 0;
  while (true) {
    TRELLIS_ASSIGN_OR_RETURN(const size_t got,
                             in->Read(block.data(), block.size()));
    if (got == 0) break;
    for (size_t at = 0; at < got;) {
      if (options_.split == Split::kFile) {
        doc_.append(block.data() + at, got - at);
        at = got;
      } else {
        const char* newline = static_cast<const char*>(
            std::memchr(block.data() + at, '\n', got - at));
        const size_t end = newline ? newline - block.data() : got;
        doc_.append(block.data() + at, end - at);
        at = end;
        if (newline != nullptr) {
          ++at;
          EndLine(emit);
        }
      }
      MaybeCut(emit);
    }
    if (!consumed(in->compressed_read() - reported)) {
      return absl::CancelledError("cancelled");
    }
    reported = in->compressed_read();
  }
  if (options_.split != Split::kFile && doc_.size() > line_start_) {
    EndLine(emit);
  }
  EndDocument(emit);
  return absl::OkStatus();
}

absl::Status DocumentReader::RunJsonl(const std::string& file, const Emit& emit,
                                      const Consumed& consumed) {
  TRELLIS_ASSIGN_OR_RETURN(std::unique_ptr<CompressedReader> in,
                           CompressedReader::Open(file));
  JsonlReader reader(std::move(in), options_.json_key);
  int64_t reported = 0;
  while (true) {
    absl::StatusOr<bool> more = reader.Next(doc_);
    if (!more.ok()) {
      if (more.status().code() != absl::StatusCode::kInvalidArgument) {
        return more.status();
      }
      TRELLIS_RETURN_IF_ERROR(PassOver(more.status(), skipped_lines_));
      continue;
    }
    if (!*more) break;
    MaybeCut(emit);
    FinishDocument(emit);
    const int64_t read = reader.input().compressed_read();
    if (read > reported) {
      if (!consumed(read - reported)) return absl::CancelledError("cancelled");
      reported = read;
    }
  }
  doc_.clear();
  return absl::OkStatus();
}

absl::Status DocumentReader::PassOver(absl::Status bad, int64_t& count) {
  if (options_.bad_lines == BadLines::kFail) return bad;
  ++count;
  if (first_skipped_.size() < kKeptMessages) {
    first_skipped_.emplace_back(bad.message());
  }
  return absl::OkStatus();
}

absl::Status DocumentReader::EmitRowGroup(
    const parquet::RowGroupStream::Item& group, const Emit& emit) {
  const parquet::ColumnText& text = group.text;
  size_t next_null = 0, next_bad = 0;
  uint64_t nulls_before = 0;  // null rows before value v
  for (size_t v = 0; v < text.values.size(); ++v) {
    while (next_null < text.nulls.size() &&
           text.nulls[next_null].before_value <= v) {
      nulls_before += text.nulls[next_null++].count;
    }
    if (next_bad < group.invalid_utf8.size() &&
        group.invalid_utf8[next_bad].first == v) {
      const uint64_t row = v + nulls_before;
      TRELLIS_RETURN_IF_ERROR(PassOver(
          absl::InvalidArgumentError(absl::StrCat(
              group.file->path(), ": row group ", group.row_group, " row ", row,
              " (row ", group.file->first_row(group.row_group) + row,
              " of the file): not valid UTF-8 at byte ",
              group.invalid_utf8[next_bad].second + 1)),
          skipped_rows_));
      ++next_bad;
      continue;
    }
    doc_.assign(text.values[v]);
    MaybeCut(emit);
    FinishDocument(emit);
  }
  null_rows_ += static_cast<int64_t>(text.null_rows);
  return absl::OkStatus();
}

absl::Status DocumentReader::RunParquet(std::vector<std::string> files,
                                        const Emit& emit,
                                        const Consumed& consumed) {
  parquet::RowGroupStream stream(
      std::move(files), {options_.parquet_column, options_.threads, {}});
  parquet::RowGroupStream::Item group;
  while (true) {
    TRELLIS_ASSIGN_OR_RETURN(const bool more, stream.Next(group));
    if (!more) break;
    TRELLIS_RETURN_IF_ERROR(EmitRowGroup(group, emit));
    if (!consumed(group.input_bytes)) return absl::CancelledError("cancelled");
  }
  return absl::OkStatus();
}

absl::Status DocumentReader::Run(const Emit& emit, const Consumed& consumed) {
  for (size_t i = 0; i < files_.size();) {
    const std::string& file = files_[i];
    if (parquet::IsParquetPath(file)) {
      // A run of Parquet files shares one stream, which decodes ahead
      // across their boundaries.
      size_t end = i + 1;
      while (end < files_.size() && parquet::IsParquetPath(files_[end])) ++end;
      TRELLIS_RETURN_IF_ERROR(RunParquet(
          std::vector<std::string>(files_.begin() + i, files_.begin() + end),
          emit, consumed));
      i = end;
      continue;
    }
    TRELLIS_RETURN_IF_ERROR(IsJsonlPath(file) ? RunJsonl(file, emit, consumed)
                                              : RunText(file, emit, consumed));
    ++i;
  }
  return absl::OkStatus();
}

}  // namespace trellis
