// RowGroupStream: one string column of a list of Parquet files, row group
// by row group in file order, decoded ahead on worker threads.
//
// Each worker takes the next row group in order (opening the next file
// when the last one's groups are all taken), decodes it
// (ParquetFile::ReadRowGroup) and checks each value's UTF-8; Next() hands
// the groups out in order, whichever thread finished first, so what a
// caller sees does not depend on the number of threads. At most threads + 1
// groups are decoded and not yet taken, which bounds memory to a few row
// groups. The first error in file order ends the stream; decoding stops
// after it.
//
// Thread safety: Next() from one thread at a time; the workers are
// internal.
#ifndef TRELLIS_DATA_PARQUET_ROW_GROUP_STREAM_H_
#define TRELLIS_DATA_PARQUET_ROW_GROUP_STREAM_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/parquet/parquet_file.h"

namespace trellis::parquet {

class RowGroupStream {
 public:
  struct Options {
    std::string column = "text";
    int threads = 1;
    ReadLimits limits;
  };
  struct Item {
    std::shared_ptr<const ParquetFile> file;
    int row_group = -1;  // -1 for a file without row groups
    ColumnText text;
    // Values that are not valid UTF-8: the value's index and the offset of
    // its first bad byte, in order.
    std::vector<std::pair<size_t, size_t>> invalid_utf8;
    int64_t input_bytes = 0;  // of the file, for progress
  };

  RowGroupStream(std::vector<std::string> files, Options options);
  ~RowGroupStream();
  RowGroupStream(const RowGroupStream&) = delete;
  RowGroupStream& operator=(const RowGroupStream&) = delete;

  // The next row group into `item`: true, or false after the last one. An
  // error ends the stream.
  absl::StatusOr<bool> Next(Item& item);

 private:
  struct Slot {
    Item item;
    absl::Status status;
    bool done = false;
  };
  struct Job {
    std::shared_ptr<const ParquetFile> file;
    int row_group = 0;
  };

  void Work();
  // Under the lock: the next row group to decode into `slot`, or none when
  // `slot` was filled at once (an empty file, an error) or there is no
  // more work (then the slot is gone).
  std::optional<Job> Claim(Slot& slot);
  static void Decode(const Job& job, Slot& slot);

  const std::vector<std::string> files_;
  const Options options_;
  const size_t window_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Slot>> slots_;  // in order
  size_t next_file_ = 0;
  std::shared_ptr<const ParquetFile> file_;  // whose groups are being taken
  int next_group_ = 0;
  bool exhausted_ = false;  // no more work: the end, or an error
  bool cancelled_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace trellis::parquet

#endif  // TRELLIS_DATA_PARQUET_ROW_GROUP_STREAM_H_
