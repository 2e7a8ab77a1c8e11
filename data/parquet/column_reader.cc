// Decoding a column chunk's pages (column_reader.h).
#include "data/parquet/column_reader.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "data/parquet/decompress.h"
#include "data/parquet/metadata.h"
#include "framework/status.h"

namespace trellis::parquet {
namespace {

// Pages are decompressed into memory each decoding thread keeps, so that
// a row group's pages reuse it; past kKeptPageBytes it is freed after each
// chunk.
constexpr size_t kKeptPageBytes = size_t{64} << 20;

PageBuffer& ThreadPageBuffer() {
  thread_local PageBuffer buffer;
  return buffer;
}

class ChunkDecoder {
 public:
  ChunkDecoder(std::string_view chunk, const ColumnChunkSpec& spec,
               ColumnText& out)
      : chunk_(chunk),
        spec_(spec),
        out_(out),
        dictionary_(out.values.max_memory()),
        buffer_(ThreadPageBuffer()) {}

  absl::Status Run();

 private:
  absl::Status Page(const PageHeader& header, std::string_view payload);
  absl::Status DictionaryPage(const PageHeader& header,
                              std::string_view payload);
  absl::Status DataPageV1(const PageHeader& header, std::string_view payload);
  absl::Status DataPageV2(const PageHeader& header, std::string_view payload);
  // Reads `count` definition levels, noting the null rows; returns how
  // many values are present.
  absl::StatusOr<uint64_t> Levels(std::string_view levels, uint64_t count);
  absl::Status AddNulls(uint64_t before_value, uint64_t count);
  absl::Status Values(int32_t encoding, std::string_view data, uint64_t count);
  absl::StatusOr<std::string_view> Decompressed(std::string_view data,
                                                size_t size);
  // `status` with the page named.
  absl::Status AtPage(const absl::Status& status) const;

  std::string_view chunk_;
  const ColumnChunkSpec& spec_;
  ColumnText& out_;
  ByteArrays dictionary_;
  bool has_dictionary_ = false;
  PageBuffer& buffer_;  // a decompressed page
  int64_t page_offset_ = 0;
};

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

absl::Status ChunkDecoder::AtPage(const absl::Status& status) const {
  if (status.ok()) return status;
  return absl::Status(
      status.code(),
      absl::StrCat("the page at byte ", page_offset_, ": ", status.message()));
}

absl::Status ChunkDecoder::Run() {
  size_t pos = 0;
  while (pos < chunk_.size() && out_.rows() < spec_.rows) {
    page_offset_ = spec_.file_offset + static_cast<int64_t>(pos);
    absl::StatusOr<PageHeader> header = ParsePageHeader(chunk_.substr(pos));
    if (!header.ok()) {
      return AtPage(Bad(
          absl::StrCat("a bad page header (", header.status().message(), ")")));
    }
    const size_t start = pos + header->header_size;
    const size_t size = static_cast<size_t>(header->compressed_page_size);
    if (size > chunk_.size() - start) {
      return AtPage(Bad(absl::StrCat(
          "its ", size, " bytes pass the end of its column chunk (",
          chunk_.size() - start, " bytes left)")));
    }
    TRELLIS_RETURN_IF_ERROR(AtPage(Page(*header, chunk_.substr(start, size))));
    pos = start + size;
    if (out_.rows() > spec_.rows) {
      return AtPage(
          Bad(absl::StrCat("the pages hold ", out_.rows(),
                           " rows, more than the row group's ", spec_.rows)));
    }
  }
  if (out_.rows() < spec_.rows) {
    return Bad(absl::StrCat("the column chunk at byte ", spec_.file_offset,
                            " holds ", out_.rows(), " rows of its row group's ",
                            spec_.rows, " (truncated?)"));
  }
  return absl::OkStatus();
}

absl::Status ChunkDecoder::Page(const PageHeader& header,
                                std::string_view payload) {
  if (header.type >= 0 && header.type < 32) {
    out_.page_types |= uint32_t{1} << header.type;
  }
  switch (static_cast<PageType>(header.type)) {
    case PageType::kDictionaryPage:
      if (!header.dictionary.has_value()) {
        return Bad("a dictionary page without its header");
      }
      return DictionaryPage(header, payload);
    case PageType::kDataPage:
      if (!header.data.has_value()) {
        return Bad("a data page without its header");
      }
      return DataPageV1(header, payload);
    case PageType::kDataPageV2:
      if (!header.data_v2.has_value()) {
        return Bad("a data page v2 without its header");
      }
      return DataPageV2(header, payload);
    default:
      return absl::OkStatus();  // an index page, or one of a later kind
  }
}

absl::StatusOr<std::string_view> ChunkDecoder::Decompressed(
    std::string_view data, size_t size) {
  if (!out_.values.Fits(1, size)) return out_.values.OverBudget();
  return Decompress(spec_.codec, data, size, buffer_);
}

absl::Status ChunkDecoder::DictionaryPage(const PageHeader& header,
                                          std::string_view payload) {
  if (has_dictionary_) return Bad("a second dictionary page");
  if (out_.rows() > 0) return Bad("a dictionary page after data pages");
  const DictionaryPageHeader& page = *header.dictionary;
  if (page.encoding != static_cast<int32_t>(Encoding::kPlain) &&
      page.encoding != static_cast<int32_t>(Encoding::kPlainDictionary)) {
    return absl::UnimplementedError(
        absl::StrCat("a dictionary in ", EncodingName(page.encoding),
                     " encoding (only PLAIN is defined)"));
  }
  TRELLIS_ASSIGN_OR_RETURN(
      const std::string_view data,
      Decompressed(payload,
                   static_cast<size_t>(header.uncompressed_page_size)));
  TRELLIS_RETURN_IF_ERROR(DecodePlainByteArrays(
      data, static_cast<size_t>(page.num_values), dictionary_));
  has_dictionary_ = true;
  return absl::OkStatus();
}

absl::Status ChunkDecoder::DataPageV1(const PageHeader& header,
                                      std::string_view payload) {
  const DataPageHeader& page = *header.data;
  TRELLIS_ASSIGN_OR_RETURN(
      std::string_view data,
      Decompressed(payload,
                   static_cast<size_t>(header.uncompressed_page_size)));
  uint64_t count = static_cast<uint64_t>(page.num_values);
  if (spec_.nullable) {
    if (page.definition_level_encoding !=
        static_cast<int32_t>(Encoding::kRle)) {
      return absl::UnimplementedError(absl::StrCat(
          "definition levels in ", EncodingName(page.definition_level_encoding),
          " encoding (only RLE is supported)"));
    }
    uint32_t length = 0;
    if (data.size() < 4) return Bad("its definition levels are cut off");
    std::memcpy(&length, data.data(), 4);
    if (length > data.size() - 4) {
      return Bad(absl::StrCat("its ", length,
                              " bytes of definition levels pass its end"));
    }
    TRELLIS_ASSIGN_OR_RETURN(count, Levels(data.substr(4, length), count));
    data.remove_prefix(4 + length);
  }
  return Values(page.encoding, data, count);
}

absl::Status ChunkDecoder::DataPageV2(const PageHeader& header,
                                      std::string_view payload) {
  const DataPageHeader& page = *header.data_v2;
  const uint64_t repetition =
      static_cast<uint64_t>(page.repetition_levels_byte_length);
  const uint64_t definition =
      static_cast<uint64_t>(page.definition_levels_byte_length);
  const uint64_t levels = repetition + definition;
  if (levels > payload.size() ||
      levels > static_cast<uint64_t>(header.uncompressed_page_size)) {
    return Bad(absl::StrCat("its ", levels, " bytes of levels pass its end"));
  }
  if (page.num_nulls > page.num_values) {
    return Bad(absl::StrCat("it declares ", page.num_nulls, " nulls in ",
                            page.num_values, " values"));
  }
  uint64_t count = static_cast<uint64_t>(page.num_values);
  if (spec_.nullable) {
    TRELLIS_ASSIGN_OR_RETURN(
        count, Levels(payload.substr(repetition, definition), count));
    const uint64_t nulls = static_cast<uint64_t>(page.num_values) - count;
    if (nulls != static_cast<uint64_t>(page.num_nulls)) {
      return Bad(absl::StrCat("it declares ", page.num_nulls,
                              " nulls, its definition levels hold ", nulls));
    }
  } else if (page.num_nulls != 0) {
    return Bad("nulls in a column that is not nullable");
  }
  std::string_view data = payload.substr(levels);
  if (page.is_compressed) {
    const size_t size =
        static_cast<size_t>(header.uncompressed_page_size) - levels;
    TRELLIS_ASSIGN_OR_RETURN(data, Decompressed(data, size));
  }
  return Values(page.encoding, data, count);
}

absl::StatusOr<uint64_t> ChunkDecoder::Levels(std::string_view levels,
                                              uint64_t count) {
  RleDecoder decoder(levels, /*bit_width=*/1);
  const uint64_t base = out_.values.size();
  uint64_t present = 0;
  for (uint64_t done = 0; done < count;) {
    uint32_t level = 0;
    uint64_t run = 0;
    TRELLIS_ASSIGN_OR_RETURN(const bool more, decoder.Next(level, run));
    if (!more) {
      return Bad(absl::StrCat("its definition levels end at value ", done,
                              " of ", count));
    }
    if (level > 1) {
      return Bad(
          absl::StrCat("a definition level of ", level, " in a flat column"));
    }
    run = std::min(run, count - done);
    if (level == 1) {
      present += run;
    } else {
      TRELLIS_RETURN_IF_ERROR(AddNulls(base + present, run));
    }
    done += run;
  }
  return present;
}

absl::Status ChunkDecoder::AddNulls(uint64_t before_value, uint64_t count) {
  out_.null_rows += count;
  if (!out_.nulls.empty() && out_.nulls.back().before_value == before_value) {
    out_.nulls.back().count += count;
    return absl::OkStatus();
  }
  TRELLIS_RETURN_IF_ERROR(out_.values.Charge(sizeof(ColumnText::NullRun)));
  out_.nulls.push_back({before_value, count});
  return absl::OkStatus();
}

absl::Status ChunkDecoder::Values(int32_t encoding, std::string_view data,
                                  uint64_t count) {
  const size_t n = static_cast<size_t>(count);
  ++out_.data_pages;
  if (encoding >= 0 && encoding < 32) out_.encodings |= uint32_t{1} << encoding;
  switch (static_cast<Encoding>(encoding)) {
    case Encoding::kPlain:
      return DecodePlainByteArrays(data, n, out_.values);
    case Encoding::kPlainDictionary:
    case Encoding::kRleDictionary:
      if (!has_dictionary_) {
        return Bad(
            "dictionary indices, but the column chunk has no "
            "dictionary page");
      }
      return DecodeDictionaryIndices(data, n, dictionary_, out_.values);
    case Encoding::kDeltaLengthByteArray:
      return DecodeDeltaLengthByteArrays(data, n, out_.values);
    case Encoding::kDeltaByteArray:
      return DecodeDeltaByteArrays(data, n, out_.values);
    default:
      return absl::UnimplementedError(
          absl::StrCat("values in ", EncodingName(encoding),
                       " encoding, which a string column does not use"));
  }
}

}  // namespace

absl::Status DecodeColumnChunk(std::string_view chunk,
                               const ColumnChunkSpec& spec, ColumnText& out) {
  const absl::Status status = ChunkDecoder(chunk, spec, out).Run();
  ThreadPageBuffer().Shrink(kKeptPageBytes);
  return status;
}

}  // namespace trellis::parquet
