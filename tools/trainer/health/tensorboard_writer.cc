#include "tools/trainer/health/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "framework/status.h"

namespace trellis {
namespace {

// Byte-at-a-time table of the reflected Castagnoli polynomial.
constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

// Protobuf wire format: wire types 0 (varint), 1 (64-bit), 2 (length-
// delimited), 5 (32-bit).
void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutKey(std::string& out, int field, int wire_type) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | wire_type);
}

template <typename T>
void PutLittleEndian(std::string& out, T value) {
  static_assert(std::endian::native == std::endian::little);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void PutBytes(std::string& out, int field, std::string_view bytes) {
  PutKey(out, field, 2);
  PutVarint(out, bytes.size());
  out.append(bytes);
}

// tensorflow.Event's fields (wall_time 1, step 2, file_version 3,
// summary 5); Summary.value 1; Summary.Value's tag 1, simple_value 2.
std::string EventHeader(double wall_time, int64_t step) {
  std::string event;
  PutKey(event, 1, 1);
  PutLittleEndian(event, wall_time);
  PutKey(event, 2, 0);
  PutVarint(event, static_cast<uint64_t>(step));
  return event;
}

double Now() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) {
    crc = kCrcTable[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  }
  return crc ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(std::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string event = EventHeader(wall_time, 0);
  PutBytes(event, 3, "brain.Event:2");
  return event;
}

std::string EncodeScalarEvent(double wall_time, int64_t step,
                              const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    PutBytes(v, 1, tag);
    PutKey(v, 2, 5);
    PutLittleEndian(v, static_cast<float>(value));
    PutBytes(summary, 1, v);
  }
  std::string event = EventHeader(wall_time, step);
  PutBytes(event, 5, summary);
  return event;
}

std::string FrameRecord(std::string_view data) {
  std::string record;
  PutLittleEndian(record, static_cast<uint64_t>(data.size()));
  PutLittleEndian(record, MaskedCrc32c(record));
  record.append(data);
  PutLittleEndian(record, MaskedCrc32c(data));
  return record;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(
    const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  const std::string path =
      absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(Now()),
                   ".", host, ".", ::getpid());
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create an event file in --tensorboard_dir=", dir,
                     ec ? absl::StrCat(" (", ec.message(), ")") : std::string(),
                     "; choose a writable directory"));
  }
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, file));
  TRELLIS_RETURN_IF_ERROR(writer->Append(EncodeFileVersionEvent(Now())));
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

absl::Status TensorBoardWriter::Write(int64_t step, const Scalars& scalars) {
  return Append(EncodeScalarEvent(Now(), step, scalars));
}

absl::Status TensorBoardWriter::Append(const std::string& event) {
  const std::string record = FrameRecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::DataLossError(
        absl::StrCat("writing TensorBoard events to ", path_, " failed"));
  }
  return absl::OkStatus();
}

}  // namespace trellis
