// trellis-preprocess: tokenizes text into one token file
// (docs/data-format.md).
//
//   trellis-preprocess --input='shards/*.jsonl.zst,extra.txt'
//       --output=corpus.h5 --tokenizer=gpt2 --split=blank_line
//
// Inputs: a comma list of files and glob patterns (input_files.h). Plain
// text, JSON Lines (--json_key names the text's key) and either of them
// compressed with gzip or zstd, and Parquet (--parquet_column names the
// text's column); what a document is in each, and how a bad JSON line or
// Parquet row is handled (--on_bad_line), is in document_reader.h.
//
// Pipeline: a reader thread cuts the inputs into batches of about 1 MB of
// text, worker threads tokenize batches, and the main thread writes them in
// input order. At most a few batches per worker are in flight, so memory
// stays bounded whatever the input size. Parquet row groups are decoded
// ahead of the reader on up to kParquetThreads threads of their own, a row
// group each.
//
// Each document is written as its tokens and the end-of-text token, after
// the tokenizer's beginning-of-sequence token when it defines one
// (Tokenizer::bos_token: Llama 3's <|begin_of_text|>).
//
// The file is written to <output>.tmp and renamed at the end, so the output
// path only ever holds a complete file: any error (a bad line under
// --on_bad_line=fail included) leaves no output.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/document_reader.h"
#include "data/input_files.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "data/tokenizer_file.h"
#include "framework/progress_bar.h"
#include "framework/status.h"
#include "tools/options/program_help.h"

ABSL_FLAG(std::string, input, "",
          "comma-separated files or glob patterns to tokenize, in order: "
          "plain text or JSON Lines (.jsonl), either optionally compressed "
          "(.gz, .zst), or Parquet (.parquet)");
ABSL_FLAG(std::string, json_key, "text",
          "the key of each JSON Lines object that holds the document's text");
ABSL_FLAG(std::string, parquet_column, "text",
          "the string column of each Parquet file that holds the documents' "
          "text, one row a document");
ABSL_FLAG(std::string, on_bad_line, "fail",
          "a JSON line that is not valid UTF-8 or JSON, or lacks a string "
          "--json_key, or a Parquet row that is not valid UTF-8: fail (stop, "
          "write nothing) or skip (count it)");
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
          "tokenizer threads (1 to 1024); Parquet row groups are decoded "
          "on up to 4 more");

namespace trellis {
namespace {

constexpr size_t kBatchBytes = size_t{1} << 20;  // text per batch
// Parquet decoding outruns any tokenizer on a few threads, and each holds a
// row group; more would cost memory, not time.
constexpr int kParquetThreads = 4;

struct Batch {
  std::vector<Piece> pieces;
  size_t text_bytes = 0;
  int64_t input_bytes = 0;  // input consumed, separators included
  std::vector<uint32_t> tokens;
  std::vector<size_t> piece_ends;  // end of each piece's tokens
  bool taken = false;
  bool done = false;
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

// Runs the pipeline into `writer`; returns the first error of any stage.
absl::Status Process(DocumentReader& reader, int64_t total_bytes,
                     const Tokenizer& tokenizer, int threads,
                     TokenDatasetWriter& writer) {
  Pipeline pipeline(static_cast<size_t>(threads) * 4);
  std::thread read_thread(ReadInto, std::ref(pipeline), std::ref(reader));
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back(Tokenize, std::ref(pipeline), std::cref(tokenizer));
  }
  ProgressBar progress("preprocessing", "bytes");
  const int64_t total = std::max<int64_t>(total_bytes, 1);
  int64_t done_bytes = 0;
  absl::Status status;
  // A document's first piece gets the tokenizer's BOS, if it has one (a
  // document cut into pieces gets one BOS).
  const std::optional<uint32_t> bos = tokenizer.bos_token();
  bool starts_document = true;
  while (std::unique_ptr<Batch> batch = pipeline.Next(status)) {
    size_t begin = 0;
    for (size_t i = 0; i < batch->pieces.size() && status.ok(); ++i) {
      const size_t end = batch->piece_ends[i];
      if (bos.has_value() && starts_document) {
        status = writer.AppendTokens(std::span(&*bos, 1));
      }
      if (status.ok()) {
        status = writer.AppendTokens(
            std::span(batch->tokens).subspan(begin, end - begin));
      }
      starts_document = batch->pieces[i].ends_document;
      if (status.ok() && starts_document) status = writer.EndDocument();
      begin = end;
    }
    if (!status.ok()) break;
    done_bytes += batch->input_bytes;
    progress.Update(std::min(done_bytes, total), total);
  }
  pipeline.Cancel();
  read_thread.join();
  for (std::thread& worker : workers) worker.join();
  // Input without a document is an error the caller reports alone.
  if (status.ok() && writer.num_documents() > 0) {
    progress.Update(total, total);
  }
  return status;
}

// Checks the inputs exist; returns their total size.
absl::StatusOr<int64_t> InputBytes(const std::vector<std::string>& inputs) {
  if (inputs.empty()) {
    return absl::InvalidArgumentError("--input names no file");
  }
  int64_t total = 0;
  for (const std::string& name : inputs) {
    std::error_code error;
    if (std::filesystem::is_directory(name, error)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--input ", name,
          " is a directory; name its files (comma-separated, or a glob "
          "such as '",
          name, "/*.jsonl')"));
    }
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

// How the documents are read, from --split, --on_bad_line, --json_key,
// --parquet_column and --threads.
absl::StatusOr<DocumentReader::Options> ReaderOptionsFromFlags(int threads) {
  DocumentReader::Options read;
  TRELLIS_ASSIGN_OR_RETURN(read.split, ParseSplit(absl::GetFlag(FLAGS_split)));
  TRELLIS_ASSIGN_OR_RETURN(read.bad_lines,
                           ParseBadLines(absl::GetFlag(FLAGS_on_bad_line)));
  read.json_key = absl::GetFlag(FLAGS_json_key);
  if (read.json_key.empty()) {
    return absl::InvalidArgumentError(
        "--json_key is empty; name the key that holds the text (e.g. text)");
  }
  read.parquet_column = absl::GetFlag(FLAGS_parquet_column);
  if (read.parquet_column.empty()) {
    return absl::InvalidArgumentError(
        "--parquet_column is empty; name the column that holds the text "
        "(e.g. text)");
  }
  read.threads = std::min(threads, kParquetThreads);
  return read;
}

// The closing report on stderr: what was written, how fast, and the bad
// lines skipped.
void PrintSummary(const std::string& output, int64_t documents, int64_t tokens,
                  int64_t total_bytes, double seconds,
                  const DocumentReader& reader) {
  std::fprintf(stderr,
               "wrote %s: %lld documents, %lld tokens, %.1f MB of input in "
               "%.2f s (%.2fM tokens/s)\n",
               output.c_str(), static_cast<long long>(documents),
               static_cast<long long>(tokens), total_bytes / 1e6, seconds,
               tokens / std::max(seconds, 1e-9) / 1e6);
  if (reader.null_rows() > 0) {
    std::fprintf(stderr, "passed over %lld null Parquet rows (no document)\n",
                 static_cast<long long>(reader.null_rows()));
  }
  if (reader.skipped_lines() > 0) {
    std::fprintf(stderr, "skipped %lld bad lines (--on_bad_line=skip)\n",
                 static_cast<long long>(reader.skipped_lines()));
  }
  if (reader.skipped_rows() > 0) {
    std::fprintf(stderr,
                 "skipped %lld Parquet rows that are not valid UTF-8 "
                 "(--on_bad_line=skip)\n",
                 static_cast<long long>(reader.skipped_rows()));
  }
  if (!reader.first_skipped().empty()) {
    std::fprintf(stderr, "the first of them:\n");
    for (const std::string& line : reader.first_skipped()) {
      std::fprintf(stderr, "  %s\n", line.c_str());
    }
  }
}

// The hf or sentencepiece tokenizer's file goes with the data (and from
// there into every checkpoint trained on it).
absl::Status KeepTokenizerFile(const Tokenizer& tokenizer,
                               TokenDatasetWriter& writer) {
  TRELLIS_ASSIGN_OR_RETURN(const std::optional<TokenizerFile> kept,
                           ReadSpecTokenizerFile(absl::GetFlag(FLAGS_tokenizer),
                                                 tokenizer.source_sha256()));
  return kept.has_value() ? writer.KeepTokenizerFile(*kept) : absl::OkStatus();
}

absl::Status Run() {
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output.empty()) return absl::InvalidArgumentError("--output is required");
  TRELLIS_ASSIGN_OR_RETURN(const std::vector<std::string> inputs,
                           ExpandInputList(absl::GetFlag(FLAGS_input)));
  TRELLIS_ASSIGN_OR_RETURN(const int64_t total_bytes, InputBytes(inputs));
  TRELLIS_RETURN_IF_ERROR(CheckOutputIsNoInput(output, inputs));
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 1 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads=", threads,
                     " is outside [1, 1024]; give a positive count "
                     "(the default is one per core)"));
  }
  TRELLIS_ASSIGN_OR_RETURN(const DocumentReader::Options read,
                           ReaderOptionsFromFlags(threads));
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
  absl::Status status = KeepTokenizerFile(*tokenizer, **writer);
  if (!status.ok()) {
    writer->reset();
    std::filesystem::remove(temporary, error);
    return status;
  }
  DocumentReader reader(inputs, read);
  status = Process(reader, total_bytes, *tokenizer, threads, **writer);
  const int64_t documents = (*writer)->num_documents();
  const int64_t tokens = (*writer)->num_tokens();
  if (status.ok() && documents == 0) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "the input holds no document (every file is empty or "
        "blank with --split=",
        absl::GetFlag(FLAGS_split),
        ", every JSON or Parquet text empty or null",
        reader.skipped_lines() + reader.skipped_rows() > 0 ? " or skipped" : "",
        ")"));
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
  PrintSummary(output, documents, tokens, total_bytes, seconds, reader);
  return absl::OkStatus();
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tokenizes text into a token file for trellis-train.\n"
      "  trellis-preprocess --input=a.txt,'shards/*.jsonl.zst' "
      "--output=data.h5 --tokenizer=gpt2 [--split=file|line|blank_line] "
      "[--json_key=text] [--parquet_column=text] "
      "[--on_bad_line=fail|skip]");
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
