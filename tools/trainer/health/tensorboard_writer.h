// TensorBoardWriter: scalar summaries in TensorBoard's event file format,
// written without TensorFlow or a protobuf library.
//
// A file is a sequence of TFRecords: uint64 length (little-endian), the
// masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data.
// Each record's data is a serialized tensorflow.Event; the first carries
// file_version "brain.Event:2", the others wall_time, step and a Summary of
// (tag, simple_value) pairs. The messages are few and flat, so they are
// encoded here by hand in the protobuf wire format (field numbers in
// tests/tools/tensorboard_event.proto, which the test reads them back with).
//
// Each run (and each resumed run) writes its own file,
// events.out.tfevents.<unix seconds>.<hostname>.<pid>, into the directory;
// TensorBoard merges the files of a directory. Only rank 0 writes.
//
// Thread safety: none; one thread writes.
#ifndef TRELLIS_TOOLS_TRAINER_HEALTH_TENSORBOARD_WRITER_H_
#define TRELLIS_TOOLS_TRAINER_HEALTH_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace trellis {

// CRC-32C (Castagnoli) of `data`, and TFRecord's masked form of it.
uint32_t Crc32c(std::string_view data);
uint32_t MaskedCrc32c(std::string_view data);

using Scalars = std::vector<std::pair<std::string, double>>;

// One serialized Event: the file-version header, or scalars at a step
// (values are stored as float, as simple_value is).
std::string EncodeFileVersionEvent(double wall_time);
std::string EncodeScalarEvent(double wall_time, int64_t step,
                              const Scalars& scalars);
// `data` framed as one TFRecord.
std::string FrameRecord(std::string_view data);

class TensorBoardWriter {
 public:
  // Makes `dir` if needed and a new event file in it, starting with the
  // file-version record. FailedPrecondition names the directory.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(
      const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one Event of `scalars` at `step`, stamped with the time now,
  // and flushes it (a run that dies keeps what it logged).
  absl::Status Write(int64_t step, const Scalars& scalars);

  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::FILE* file)
      : path_(std::move(path)), file_(file) {}
  absl::Status Append(const std::string& event);

  std::string path_;
  std::FILE* file_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_HEALTH_TENSORBOARD_WRITER_H_
