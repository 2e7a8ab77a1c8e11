// JsonlReader: documents from a JSON Lines file, one per line, the string
// under one key of each line's object ({"text": "..."} by default).
//
// The input is any CompressedReader, so .jsonl, .jsonl.gz and .jsonl.zst
// read alike. Lines end with "\n"; a "\r" before it is dropped. A line that
// is empty or only whitespace is no document and no error. Every other line
// must be valid UTF-8, hold one JSON object, and have the key with a string
// value; a line that breaks any of these is a bad line: Next() returns
// InvalidArgument "<path>:<line>: <what is wrong>" and the reader stays at
// the next line, so a caller may count the bad line and go on.
//
// Thread safety: none; use one object from one thread at a time.
#ifndef TRELLIS_DATA_JSONL_READER_H_
#define TRELLIS_DATA_JSONL_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/compressed_reader.h"

namespace trellis {

// Whether a file name names JSON Lines: it ends in .jsonl, optionally
// followed by .gz or .zst.
bool IsJsonlPath(const std::string& path);

// The string under `key` in the JSON object `line`, or InvalidArgument
// saying what is wrong (without path or line number).
absl::StatusOr<std::string> JsonlText(std::string_view line,
                                      const std::string& key);

class JsonlReader {
 public:
  // A line longer than max_line_bytes is refused as soon as it is (its
  // rest is skipped by the next call), so a file without newlines is never
  // held whole.
  static constexpr size_t kMaxLineBytes = size_t{256} << 20;
  JsonlReader(std::unique_ptr<CompressedReader> input, std::string key,
              size_t max_line_bytes = kMaxLineBytes);

  // The next document's text into `text`: true, or false at the end of the
  // file. A bad line: InvalidArgument naming path and line (go on by calling
  // Next again). A read failure: DataLoss (do not go on).
  absl::StatusOr<bool> Next(std::string& text);

  // The number of the line Next() last returned or refused (1-based).
  int64_t line_number() const { return line_number_; }
  const CompressedReader& input() const { return *input_; }

 private:
  // The next line without its "\n" into line_; false at the end. A line
  // over max_line_bytes_ sets overlong_ and leaves its rest to skip.
  absl::StatusOr<bool> NextLine();
  // Consumes input through the next "\n"; false at the end.
  absl::StatusOr<bool> SkipRestOfLine();

  std::unique_ptr<CompressedReader> input_;
  std::string key_;
  std::vector<char> block_;
  size_t block_pos_ = 0, block_end_ = 0;
  bool at_end_ = false;
  std::string line_;
  int64_t line_number_ = 0;
  size_t max_line_bytes_;
  bool overlong_ = false, skip_rest_ = false;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_JSONL_READER_H_
