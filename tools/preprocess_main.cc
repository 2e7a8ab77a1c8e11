// trellis-preprocess: tokenizes text files into one token file
// (docs/data-format.md).
//
//   trellis-preprocess --input=a.txt,b.txt --output=corpus.h5
//       --tokenizer=gpt2 --split=blank_line
//
// Documents: with --split=file each input file is one document; with line
// each non-blank line; with blank_line each run of non-blank lines (a
// paragraph), its lines joined by "\n". Blank means empty or only
// whitespace; a trailing "\r" is dropped from each line in the line modes.
//
// Pipeline: a reader thread cuts the inputs into batches of about 1 MB of
// text, worker threads tokenize batches, and the main thread writes them in
// input order. At most a few batches per worker are in flight, so memory
// stays bounded whatever the input size. A long document is cut into pieces
// just before a whitespace character that follows a non-whitespace one;
// GPT-2's pre-tokenizer never joins characters across such a point, so the
// pieces tokenize exactly as the whole would.
//
// The file is written to <output>.tmp and renamed at the end, so the output
// path only ever holds a complete file.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "framework/status.h"
#include "tools/trainer/program_help.h"

ABSL_FLAG(std::string, input, "",
          "comma-separated text files to tokenize, in order");
ABSL_FLAG(std::string, output, "", "token file to write (HDF5, e.g. data.h5)");
ABSL_FLAG(std::string, split, "file",
          "what a document is: file (a whole file), line (one non-blank "
          "line) or blank_line (lines up to a blank line)");
ABSL_FLAG(std::string, tokenizer, "byte",
          "byte, gpt2, hf:PATH/tokenizer.json (a Hugging Face BPE "
          "tokenizer) or sentencepiece:PATH.model");
ABSL_FLAG(std::string, tokenizer_dir, trellis::kDefaultGpt2AssetsDir,
          "directory with GPT-2's encoder.json and vocab.bpe (for "
          "--tokenizer=gpt2)");
ABSL_FLAG(int, threads,
          static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
          "tokenizer threads (1 to 1024)");

namespace trellis {
namespace {

enum class Split { kFile, kLine, kBlankLine };

constexpr size_t kBatchBytes = size_t{1} << 20;  // text per batch
constexpr size_t kPieceBytes = size_t{1} << 20;  // cut documents longer
constexpr size_t kReadBytes = size_t{1} << 20;   // one read() of an input

bool IsSpace(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' ||
         c == '\v';
}

bool IsBlank(const std::string& text, size_t from) {
  return std::all_of(text.begin() + from, text.end(), IsSpace);
}

// Text that tokenizes independently of its neighbours; `ends_document`
// marks a document's last piece.
struct Piece {
  std::string text;
  bool ends_document = false;
};

struct Batch {
  std::vector<Piece> pieces;
  size_t text_bytes = 0;
  int64_t input_bytes = 0;  // input consumed, separators included
  std::vector<uint32_t> tokens;
  std::vector<size_t> piece_ends;  // end of each piece's tokens
  bool taken = false;
  bool done = false;
};

// Cuts the input files into documents and documents into pieces, in order.
class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> files, Split split)
      : files_(std::move(files)), split_(split) {}

  // Calls emit(Piece&&) for each piece and consumed(bytes) as input is
  // read; stops with Cancelled when consumed returns false.
  template <typename Emit, typename Consumed>
  absl::Status Run(Emit emit, Consumed consumed);

 private:
  // Emits the front of the document buffer if it grew past kPieceBytes.
  template <typename Emit>
  void MaybeCut(Emit& emit);
  template <typename Emit>
  void EndDocument(Emit& emit);
  template <typename Emit>
  void EndLine(Emit& emit);

  std::vector<std::string> files_;
  Split split_;
  std::string doc_;           // the current document's unemitted text
  bool doc_emitted_ = false;  // part of the current document was emitted
  size_t line_start_ = 0;     // where the current line begins in doc_
  bool line_cut_ = false;     // part of the current line was emitted
};

template <typename Emit>
void DocumentReader::MaybeCut(Emit& emit) {
  if (doc_.size() < kPieceBytes) return;
  size_t cut = 0;
  for (size_t i = doc_.size() - 1; i > kPieceBytes / 2; --i) {
    if (IsSpace(doc_[i]) && !IsSpace(doc_[i - 1])) {
      cut = i;
      break;
    }
  }
  if (cut == 0) {
    if (doc_.size() < 4 * kPieceBytes) return;  // look further for a space
    cut = doc_.size() - 1;  // no space at all: cut between UTF-8 characters
    while (cut > 0 && (static_cast<unsigned char>(doc_[cut]) & 0xC0) == 0x80) {
      --cut;
    }
  }
  emit(Piece{doc_.substr(0, cut), false});
  doc_.erase(0, cut);
  doc_emitted_ = true;
  if (cut > line_start_) line_cut_ = true;
  line_start_ = cut > line_start_ ? 0 : line_start_ - cut;
}

template <typename Emit>
void DocumentReader::EndDocument(Emit& emit) {
  if (split_ == Split::kBlankLine && !doc_.empty() && doc_.back() == '\n') {
    doc_.pop_back();  // the newline after a paragraph's last line
  }
  if (!doc_.empty() || doc_emitted_) emit(Piece{std::move(doc_), true});
  doc_.clear();
  doc_emitted_ = false;
  line_start_ = 0;
  line_cut_ = false;
}

// Called after a line's text (without "\n") was appended to doc_.
template <typename Emit>
void DocumentReader::EndLine(Emit& emit) {
  if (!doc_.empty() && doc_.back() == '\r' && doc_.size() > line_start_) {
    doc_.pop_back();
  }
  const bool blank = !line_cut_ && IsBlank(doc_, line_start_);
  if (blank) doc_.resize(line_start_);
  if (split_ == Split::kLine) {
    if (!blank) EndDocument(emit);
  } else if (blank) {
    EndDocument(emit);
  } else {
    doc_.push_back('\n');
  }
  line_start_ = doc_.size();
  line_cut_ = false;
}

template <typename Emit, typename Consumed>
absl::Status DocumentReader::Run(Emit emit, Consumed consumed) {
  std::vector<char> block(kReadBytes);
  for (const std::string& name : files_) {
    std::ifstream in(name, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(name, ": cannot open"));
    while (in) {
      in.read(block.data(), static_cast<std::streamsize>(block.size()));
      const size_t got = static_cast<size_t>(in.gcount());
      if (in.bad())
        return absl::DataLossError(absl::StrCat(name, ": read failed"));
      for (size_t at = 0; at < got;) {
        if (split_ == Split::kFile) {
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
      if (!consumed(static_cast<int64_t>(got))) {
        return absl::CancelledError("cancelled");
      }
    }
    if (split_ != Split::kFile && doc_.size() > line_start_) EndLine(emit);
    EndDocument(emit);
  }
  return absl::OkStatus();
}

// Draws "[####....]  45.1%  1.9/4.3 MB  12.0 MB/s  ETA 0:02" on stderr: in
// place at most 10 times a second on a terminal, else a line every 5 s.
class ProgressBar {
 public:
  explicit ProgressBar(int64_t total_bytes)
      : total_(std::max<int64_t>(total_bytes, 1)), tty_(isatty(2) == 1) {}

  void Update(int64_t done, bool final = false) {
    const auto now = std::chrono::steady_clock::now();
    const double since_draw =
        std::chrono::duration<double>(now - last_draw_).count();
    if (!final && since_draw < (tty_ ? 0.1 : 5.0)) return;
    last_draw_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double fraction =
        final ? 1.0 : std::min(1.0, static_cast<double>(done) / total_);
    const double rate = seconds > 0 ? done / seconds : 0;
    const int64_t eta =
        rate > 0 ? static_cast<int64_t>((total_ - done) / rate) : 0;
    const int filled = static_cast<int>(fraction * 30);
    const std::string line = absl::StrFormat(
        "[%s%s] %5.1f%%  %.1f/%.1f MB  %.1f MB/s  ETA %d:%02d",
        std::string(filled, '#'), std::string(30 - filled, '.'), 100 * fraction,
        done / 1e6, total_ / 1e6, rate / 1e6, eta / 60, eta % 60);
    std::fprintf(stderr, tty_ ? "\r%s%s" : "%s%s", line.c_str(),
                 tty_ && !final ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  const int64_t total_;
  const bool tty_;
  const std::chrono::steady_clock::time_point start_ =
      std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_ = start_;
};

// Batches in input order, shared by the reader, the workers and the writer.
class Pipeline {
 public:
  explicit Pipeline(size_t max_batches) : max_batches_(max_batches) {}

  // Reader: queues a batch; waits while too many are in flight. False when
  // cancelled.
  bool Push(std::unique_ptr<Batch> batch) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock,
                  [&] { return cancelled_ || queue_.size() < max_batches_; });
    if (cancelled_) return false;
    queue_.push_back(std::move(batch));
    changed_.notify_all();
    return true;
  }
  void CloseInput(absl::Status status) {
    std::lock_guard lock(mutex_);
    input_closed_ = true;
    input_status_ = std::move(status);
    changed_.notify_all();
  }
  // Worker: the oldest batch nobody took, or null when there will be none.
  Batch* Take() {
    std::unique_lock lock(mutex_);
    while (true) {
      if (cancelled_) return nullptr;
      for (auto& batch : queue_) {
        if (!batch->taken) {
          batch->taken = true;
          return batch.get();
        }
      }
      if (input_closed_) return nullptr;
      changed_.wait(lock);
    }
  }
  void Done(Batch* batch) {
    std::lock_guard lock(mutex_);
    batch->done = true;
    changed_.notify_all();
  }
  // Writer: the next batch in order once tokenized; null at the end (then
  // `status` holds the reader's result).
  std::unique_ptr<Batch> Next(absl::Status& status) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] {
      return (!queue_.empty() && queue_.front()->done) ||
             (queue_.empty() && input_closed_);
    });
    if (queue_.empty()) {
      status = input_status_;
      return nullptr;
    }
    std::unique_ptr<Batch> batch = std::move(queue_.front());
    queue_.pop_front();
    changed_.notify_all();
    return batch;
  }
  void Cancel() {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    changed_.notify_all();
  }

 private:
  const size_t max_batches_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Batch>> queue_;
  bool input_closed_ = false;
  bool cancelled_ = false;
  absl::Status input_status_;
};

void ReadInto(Pipeline& pipeline, DocumentReader& reader) {
  auto batch = std::make_unique<Batch>();
  bool open = true;
  absl::Status status = reader.Run(
      [&](Piece&& piece) {
        if (!open) return;
        batch->text_bytes += piece.text.size();
        batch->pieces.push_back(std::move(piece));
        if (batch->text_bytes >= kBatchBytes) {
          open = pipeline.Push(std::move(batch));
          batch = std::make_unique<Batch>();
        }
      },
      [&](int64_t bytes) {
        batch->input_bytes += bytes;
        return open;
      });
  if (open && (!batch->pieces.empty() || batch->input_bytes > 0)) {
    pipeline.Push(std::move(batch));
  }
  pipeline.CloseInput(std::move(status));
}

void Tokenize(Pipeline& pipeline, const Tokenizer& tokenizer) {
  while (Batch* batch = pipeline.Take()) {
    for (const Piece& piece : batch->pieces) {
      tokenizer.Encode(piece.text, batch->tokens);
      batch->piece_ends.push_back(batch->tokens.size());
    }
    pipeline.Done(batch);
  }
}

struct Totals {
  int64_t documents = 0;
  int64_t tokens = 0;
};

// Runs the pipeline into `writer`; returns the first error of any stage.
absl::Status Process(const std::vector<std::string>& inputs, Split split,
                     int64_t total_bytes, const Tokenizer& tokenizer,
                     int threads, TokenDatasetWriter& writer) {
  Pipeline pipeline(static_cast<size_t>(threads) * 4);
  DocumentReader reader(inputs, split);
  std::thread read_thread(ReadInto, std::ref(pipeline), std::ref(reader));
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back(Tokenize, std::ref(pipeline), std::cref(tokenizer));
  }
  ProgressBar progress(total_bytes);
  int64_t done_bytes = 0;
  absl::Status status;
  while (std::unique_ptr<Batch> batch = pipeline.Next(status)) {
    size_t begin = 0;
    for (size_t i = 0; i < batch->pieces.size() && status.ok(); ++i) {
      const size_t end = batch->piece_ends[i];
      status = writer.AppendTokens(
          std::span(batch->tokens).subspan(begin, end - begin));
      if (status.ok() && batch->pieces[i].ends_document) {
        status = writer.EndDocument();
      }
      begin = end;
    }
    if (!status.ok()) break;
    done_bytes += batch->input_bytes;
    progress.Update(done_bytes);
  }
  pipeline.Cancel();
  read_thread.join();
  for (std::thread& worker : workers) worker.join();
  // Input without a document is an error the caller reports alone.
  if (status.ok() && writer.num_documents() > 0) {
    progress.Update(done_bytes, /*final=*/true);
  }
  return status;
}

absl::StatusOr<Split> ParseSplit(const std::string& name) {
  if (name == "file") return Split::kFile;
  if (name == "line") return Split::kLine;
  if (name == "blank_line") return Split::kBlankLine;
  return absl::InvalidArgumentError(
      absl::StrCat("--split=", name, " is not one of file, line, blank_line"));
}

// Checks the inputs exist; returns their total size.
absl::StatusOr<int64_t> InputBytes(const std::vector<std::string>& inputs) {
  if (inputs.empty()) {
    return absl::InvalidArgumentError("--input names no file");
  }
  int64_t total = 0;
  for (const std::string& name : inputs) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(name, error)) {
      return absl::NotFoundError(
          absl::StrCat("--input ", name, ": no such file"));
    }
    total += static_cast<int64_t>(std::filesystem::file_size(name, error));
  }
  return total;
}

// Refuses an output (or its temporary) that is one of the inputs: the
// rename at the end would replace the input with its own tokens.
absl::Status CheckOutputIsNoInput(const std::string& output,
                                  const std::vector<std::string>& inputs) {
  for (const std::string& target : {output, output + ".tmp"}) {
    for (const std::string& input : inputs) {
      std::error_code error;
      if (std::filesystem::equivalent(target, input, error)) {
        const std::string what =
            target == output ? absl::StrCat("--output ", output)
                             : absl::StrCat("--output's temporary ", target);
        return absl::InvalidArgumentError(absl::StrCat(
            what, " is the input ", input,
            ", which writing it would destroy; choose another --output"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Run() {
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output.empty()) return absl::InvalidArgumentError("--output is required");
  std::vector<std::string> inputs;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_input), ',', absl::SkipEmpty())) {
    inputs.emplace_back(name);
  }
  TRELLIS_ASSIGN_OR_RETURN(const int64_t total_bytes, InputBytes(inputs));
  TRELLIS_ASSIGN_OR_RETURN(const Split split,
                           ParseSplit(absl::GetFlag(FLAGS_split)));
  TRELLIS_RETURN_IF_ERROR(CheckOutputIsNoInput(output, inputs));
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 1 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads=", threads,
                     " is outside [1, 1024]; give a positive count "
                     "(the default is one per core)"));
  }
  TRELLIS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                           MakeTokenizer(absl::GetFlag(FLAGS_tokenizer),
                                         absl::GetFlag(FLAGS_tokenizer_dir)));

  const std::filesystem::path parent =
      std::filesystem::absolute(output).parent_path();
  std::error_code error;
  if (!std::filesystem::is_directory(parent, error)) {
    return absl::NotFoundError(absl::StrCat(
        "cannot write --output ", output, ": no directory ", parent.string()));
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string temporary = output + ".tmp";
  absl::StatusOr<std::unique_ptr<TokenDatasetWriter>> writer =
      TokenDatasetWriter::Create(temporary,
                                 {tokenizer->name(), tokenizer->vocab_size(),
                                  static_cast<int64_t>(tokenizer->eot_token()),
                                  tokenizer->source_sha256()});
  if (!writer.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot write --output ", output, ": ", writer.status().message()));
  }
  absl::Status status =
      Process(inputs, split, total_bytes, *tokenizer, threads, **writer);
  const int64_t documents = (*writer)->num_documents();
  const int64_t tokens = (*writer)->num_tokens();
  if (status.ok() && documents == 0) {
    status = absl::InvalidArgumentError(
        absl::StrCat("the input holds no document (every file is empty or "
                     "blank with --split=",
                     absl::GetFlag(FLAGS_split), ")"));
  }
  if (status.ok()) status = (*writer)->Finish();
  writer->reset();
  if (status.ok()) {
    std::filesystem::rename(temporary, output, error);
    if (error) {
      status = absl::PermissionDeniedError(absl::StrCat(
          "cannot rename ", temporary, " to ", output, ": ", error.message()));
    }
  }
  if (!status.ok()) {
    std::filesystem::remove(temporary, error);
    return status;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::fprintf(stderr,
               "wrote %s: %lld documents, %lld tokens, %.1f MB of text in "
               "%.2f s (%.2fM tokens/s)\n",
               output.c_str(), static_cast<long long>(documents),
               static_cast<long long>(tokens), total_bytes / 1e6, seconds,
               tokens / std::max(seconds, 1e-9) / 1e6);
  return absl::OkStatus();
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tokenizes text into a token file for trellis-train.\n"
      "  trellis-preprocess --input=a.txt,b.txt --output=data.h5 "
      "--tokenizer=gpt2 [--split=file|line|blank_line]");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr,
                 "trellis-preprocess: error: unexpected argument '%s' (files "
                 "go in --input=a.txt,b.txt)\n",
                 rest[1]);
    return 1;
  }
  const absl::Status status = trellis::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "trellis-preprocess: error: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
