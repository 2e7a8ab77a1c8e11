// DocumentReader: cuts input files into documents and documents into pieces
// that tokenize independently, in input order (trellis-preprocess's reader).
//
// Plain text (any name not ending in .jsonl[.gz|.zst]; .gz and .zst are
// decompressed): with Split::kFile each file is one document; with kLine
// each non-blank line; with kBlankLine each run of non-blank lines (a
// paragraph), its lines joined by "\n". Blank means empty or only
// whitespace; a trailing "\r" is dropped from each line in the line modes.
//
// JSON Lines (.jsonl, .jsonl.gz, .jsonl.zst; jsonl_reader.h): each line's
// string under `json_key` is one document whatever the split; an empty
// string is no document (as an empty file is none). A bad line stops the
// read with its "<path>:<line>: <what>" error under BadLines::kFail, and is
// counted and passed over under kSkip.
//
// Parquet (.parquet; parquet/parquet_file.h): each row's string in the
// column `parquet_column` is one document whatever the split, in file
// order, row group by row group; an empty string is no document, a null
// row none either (it is counted). A row that is not valid UTF-8 is a bad
// line as above ("<path>: row group <g> row <r> ...: not valid UTF-8").
// Consecutive Parquet inputs are decoded `threads` row groups at a time
// (parquet/row_group_stream.h); the documents come in the same order
// whatever the count.
//
// Pieces: a long document is cut into pieces of about kPieceBytes just
// before a whitespace character that follows a non-whitespace one; GPT-2's
// pre-tokenizer never joins characters across such a point, so the pieces
// tokenize exactly as the whole would. A document without such a point is
// cut between UTF-8 characters once it passes 4 * kPieceBytes.
//
// Thread safety: none; Run() on one thread at a time (it starts and ends
// Parquet's decoding threads itself).
#ifndef TRELLIS_DATA_DOCUMENT_READER_H_
#define TRELLIS_DATA_DOCUMENT_READER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/parquet/row_group_stream.h"

namespace trellis {

enum class Split { kFile, kLine, kBlankLine };
enum class BadLines { kFail, kSkip };

absl::StatusOr<Split> ParseSplit(const std::string& name);
absl::StatusOr<BadLines> ParseBadLines(const std::string& name);

// Text that tokenizes independently of its neighbours; `ends_document`
// marks a document's last piece.
struct Piece {
  std::string text;
  bool ends_document = false;
};

class DocumentReader {
 public:
  static constexpr size_t kPieceBytes = size_t{1} << 20;

  struct Options {
    Split split = Split::kFile;
    std::string json_key = "text";
    BadLines bad_lines = BadLines::kFail;
    std::string parquet_column = "text";
    int threads = 1;  // Parquet row groups decoded at once
  };
  DocumentReader(std::vector<std::string> files, Options options)
      : files_(std::move(files)), options_(std::move(options)) {}

  using Emit = std::function<void(Piece&&)>;
  // Bytes taken from the files on disk since the last call; false cancels.
  using Consumed = std::function<bool(int64_t)>;

  // Calls emit for each piece and consumed as input is read; stops with
  // Cancelled when consumed returns false, with the first error otherwise.
  absl::Status Run(const Emit& emit, const Consumed& consumed);

  // Bad lines (JSON Lines) and rows (Parquet) passed over (BadLines::kSkip),
  // and the first few of their messages.
  int64_t skipped_lines() const { return skipped_lines_; }
  int64_t skipped_rows() const { return skipped_rows_; }
  // Parquet rows whose value is null.
  int64_t null_rows() const { return null_rows_; }
  const std::vector<std::string>& first_skipped() const {
    return first_skipped_;
  }

 private:
  absl::Status RunText(const std::string& file, const Emit& emit,
                       const Consumed& consumed);
  absl::Status RunJsonl(const std::string& file, const Emit& emit,
                        const Consumed& consumed);
  // Parquet files, in order.
  absl::Status RunParquet(std::vector<std::string> files, const Emit& emit,
                          const Consumed& consumed);
  // The documents of one decoded row group.
  absl::Status EmitRowGroup(const parquet::RowGroupStream::Item& group,
                            const Emit& emit);
  // Counts a bad line or row under kSkip; its error otherwise.
  absl::Status PassOver(absl::Status bad, int64_t& count);
  // Emits the front of the document buffer while it is past kPieceBytes.
  void MaybeCut(const Emit& emit);
  // Ends the document: a paragraph loses its last "\n", then
  // FinishDocument.
  void EndDocument(const Emit& emit);
  // Emits the document's last piece (none for an empty, uncut document).
  void FinishDocument(const Emit& emit);
  void EndLine(const Emit& emit);

  std::vector<std::string> files_;
  Options options_;
  std::string doc_;           // the current document's unemitted text
  bool doc_emitted_ = false;  // part of the current document was emitted
  size_t line_start_ = 0;     // where the current line begins in doc_
  bool line_cut_ = false;     // part of the current line was emitted
  int64_t skipped_lines_ = 0;
  int64_t skipped_rows_ = 0;
  int64_t null_rows_ = 0;
  std::vector<std::string> first_skipped_;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_DOCUMENT_READER_H_
