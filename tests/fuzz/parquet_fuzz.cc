// Fuzz target of the Parquet reader (trellis-preprocess's .parquet input):
// the input as a file, opened for its "text" column with small memory
// limits and decoded row group by row group; then its bytes fed to the
// footer's and page headers' parsers and to the page decoders directly.
//
// Checked: an error is one line that names the file, and a file that
// decodes holds the rows its footer says.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/parquet/encodings.h"
#include "data/parquet/metadata.h"
#include "data/parquet/parquet_file.h"
#include "tests/fuzz/fuzz_util.h"

namespace trellis {
namespace {

constexpr parquet::ReadLimits kLimits{size_t{1} << 20, 16, size_t{1} << 20};

void ExpectOneLine(const absl::Status& status, const std::string& path) {
  const std::string_view message(status.message().data(),
                                 status.message().size());
  fuzz::Expect(message.substr(0, path.size() + 2) == path + ": ",
               "an error that does not start with the file's name");
  fuzz::Expect(message.find('\n') == std::string_view::npos,
               "an error of more than one line");
}

void ReadFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<parquet::ParquetFile>> file =
      parquet::ParquetFile::Open(path, "text", kLimits);
  fuzz::Note("ParquetFile::Open", file.status());
  if (!file.ok()) {
    ExpectOneLine(file.status(), path);
    return;
  }
  for (int g = 0; g < (*file)->num_row_groups(); ++g) {
    absl::StatusOr<parquet::ColumnText> text = (*file)->ReadRowGroup(g);
    fuzz::Note("ParquetFile::ReadRowGroup", text.status());
    if (!text.ok()) {
      ExpectOneLine(text.status(), path);
      return;
    }
    fuzz::Expect(text->rows() == (*file)->num_rows(g),
                 "a row group decoded to other than its rows");
  }
}

void ParseBytes(std::string_view bytes) {
  fuzz::Note("ParseFileMetaData", parquet::ParseFileMetaData(bytes).status());
  fuzz::Note("ParsePageHeader", parquet::ParsePageHeader(bytes).status());
  std::vector<int64_t> values;
  size_t consumed = 0;
  (void)parquet::DecodeDeltaBinaryPacked(bytes, 4096, values, consumed);
  parquet::ByteArrays out(size_t{1} << 20);
  (void)parquet::DecodeDeltaByteArrays(bytes, 4096, out);
  out.Clear();
  (void)parquet::DecodeDeltaLengthByteArrays(bytes, 4096, out);
}

}  // namespace
}  // namespace trellis

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = trellis::fuzz::AsText(data, size);
  const std::string path = trellis::fuzz::ScratchDir() + "/input.parquet";
  // A new file each time: ext4 flushes a file truncated and rewritten in
  // place when it is closed, which would slow every run to the disk's pace.
  std::remove(path.c_str());
  trellis::fuzz::WriteFile(path, input);
  trellis::ReadFile(path);
  trellis::ParseBytes(input);
  return 0;
}
