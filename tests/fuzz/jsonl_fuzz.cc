// Fuzz target of the JSON Lines reader (trellis-preprocess's .jsonl input):
// JsonlText on the whole input as one line, then the input as a file read
// through CompressedReader::Open and JsonlReader, with a small line limit,
// to its end, going on after each bad line as the reader allows.
//
// The input's first byte, modulo 3, picks the file name: .jsonl, .jsonl.gz
// or .jsonl.zst ('0', '1', '2'; the decompressors are fuzzed too); the rest
// is the file.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/compressed_reader.h"
#include "data/jsonl_reader.h"
#include "tests/fuzz/fuzz_util.h"

namespace trellis {
namespace {

constexpr size_t kMaxLineBytes = 4096;
constexpr const char* kNames[] = {"input.jsonl", "input.jsonl.gz",
                                  "input.jsonl.zst"};

void ReadToEnd(const std::string& path) {
  absl::StatusOr<std::unique_ptr<CompressedReader>> input =
      CompressedReader::Open(path);
  fuzz::Expect(input.ok(), "the input file does not open");
  JsonlReader reader(*std::move(input), "text", kMaxLineBytes);
  std::string text;
  int64_t last_line = 0;
  while (true) {
    const absl::StatusOr<bool> more = reader.Next(text);
    fuzz::Note("JsonlReader::Next", more.status());
    if (more.ok() && !*more) return;
    if (!more.ok() && !absl::IsInvalidArgument(more.status())) return;
    fuzz::Expect(reader.line_number() > last_line,
                 "the reader did not move to a new line");
    last_line = reader.line_number();
    if (more.ok()) {
      fuzz::Expect(text.size() <= kMaxLineBytes,
                   "a document is longer than its line");
    }
  }
}

}  // namespace
}  // namespace trellis

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = trellis::fuzz::AsText(data, size);
  (void)trellis::JsonlText(input, "text");
  if (input.empty()) return 0;
  const char* name = trellis::kNames[static_cast<unsigned char>(input[0]) % 3];
  const std::string path = trellis::fuzz::ScratchDir() + "/" + name;
  trellis::fuzz::WriteFile(path, input.substr(1));
  trellis::ReadToEnd(path);
  return 0;
}
