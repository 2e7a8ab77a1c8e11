// The tie between a checkpoint's files: its state.json records, for
// model.h5 and optimizer.h5, a digest of what each holds (the sha256 of
// every tensor's name and stored checksums, tensor_checksum.h, in name
// order), so that files of different saves in one directory (two runs
// writing one --save_dir, a file copied in by hand) are refused when the
// checkpoint is loaded rather than trained on as one checkpoint. The
// digest reads only the files' metadata; the tensors' bytes are verified
// against the same checksums as they are read (shard_io.h).
//
// Checkpoints written before the tie record no digests and load as before.
// A checkpoint loaded in parts (one tensor at a time by trellis-convert,
// group by group under ZeRO) checks each file once per process: a file
// found tied is remembered by its and its state.json's device, inode, size
// and modification time, so a file replaced since is checked again.
//
// Thread safety: thread-safe (the memory of checked files has a lock).
#ifndef TRELLIS_TOOLS_CHECKPOINT_FILE_TIE_H_
#define TRELLIS_TOOLS_CHECKPOINT_FILE_TIE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/hdf5.h"
#include "tools/checkpoint/checkpoint.h"

namespace trellis {

// "sha256:<hex>" over the tensors of `file`, datasets in groups included.
absl::StatusOr<std::string> TensorFileDigest(const hdf5::File& file);

// Sets state.files to the digests of the tensor files in `dir`.
absl::Status RecordFileDigests(const std::string& dir, TrainingState& state);

// DataLoss naming both files when `file` (`name` in checkpoint `dir`) is
// not the one `dir`'s state.json was saved with; OK when the state records
// no digest for it.
absl::Status CheckFileTie(const std::string& dir, const std::string& name,
                          const hdf5::File& file);

// How many files CheckFileTie has digested in this process (for tests).
int64_t FileTieDigests();

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CHECKPOINT_FILE_TIE_H_
