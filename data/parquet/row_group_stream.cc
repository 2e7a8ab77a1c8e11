// Decoding row groups ahead on worker threads (row_group_stream.h).
#include "data/parquet/row_group_stream.h"

#include <algorithm>

#include "data/utf8.h"

namespace trellis::parquet {

RowGroupStream::RowGroupStream(std::vector<std::string> files, Options options)
    : files_(std::move(files)),
      options_(std::move(options)),
      window_(static_cast<size_t>(std::max(1, options_.threads)) + 1) {
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    workers_.emplace_back(&RowGroupStream::Work, this);
  }
}

RowGroupStream::~RowGroupStream() {
  {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    changed_.notify_all();
  }
  for (std::thread& worker : workers_) worker.join();
}

std::optional<RowGroupStream::Job> RowGroupStream::Claim(Slot& slot) {
  if (file_ == nullptr) {
    if (next_file_ == files_.size()) {
      exhausted_ = true;
      slots_.pop_back();  // `slot`, just added
      return std::nullopt;
    }
    absl::StatusOr<std::unique_ptr<ParquetFile>> opened = ParquetFile::Open(
        files_[next_file_++], options_.column, options_.limits);
    if (!opened.ok()) {
      slot.status = opened.status();
      slot.done = true;
      exhausted_ = true;
      return std::nullopt;
    }
    file_ = std::move(*opened);
    next_group_ = 0;
    if (file_->num_row_groups() == 0) {
      slot.item.file = std::move(file_);
      slot.item.input_bytes = slot.item.file->file_size();
      slot.done = true;
      file_ = nullptr;
      return std::nullopt;
    }
  }
  Job job{file_, next_group_++};
  if (next_group_ == file_->num_row_groups()) file_ = nullptr;
  return job;
}

void RowGroupStream::Decode(const Job& job, Slot& slot) {
  absl::StatusOr<ColumnText> text = job.file->ReadRowGroup(job.row_group);
  if (!text.ok()) {
    slot.status = text.status();
    return;
  }
  Item& item = slot.item;
  item.file = job.file;
  item.row_group = job.row_group;
  item.text = *std::move(text);
  item.input_bytes = job.file->input_bytes(job.row_group);
  for (size_t i = 0; i < item.text.values.size(); ++i) {
    const size_t bad = FirstInvalidUtf8(item.text.values[i]);
    if (bad != std::string_view::npos) item.invalid_utf8.emplace_back(i, bad);
  }
}

void RowGroupStream::Work() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] {
      return cancelled_ || exhausted_ || slots_.size() < window_;
    });
    if (cancelled_ || exhausted_) return;
    Slot& slot = *slots_.emplace_back(std::make_unique<Slot>());
    const std::optional<Job> job = Claim(slot);
    if (!job.has_value()) {
      changed_.notify_all();
      continue;
    }
    lock.unlock();
    Decode(*job, slot);
    lock.lock();
    slot.done = true;
    if (!slot.status.ok()) exhausted_ = true;
    changed_.notify_all();
  }
}

absl::StatusOr<bool> RowGroupStream::Next(Item& item) {
  std::unique_ptr<Slot> slot;
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] {
      return (!slots_.empty() && slots_.front()->done) ||
             (slots_.empty() && exhausted_);
    });
    if (slots_.empty()) return false;
    slot = std::move(slots_.front());
    slots_.pop_front();
    changed_.notify_all();
  }
  if (!slot->status.ok()) return slot->status;
  item = std::move(slot->item);
  return true;
}

}  // namespace trellis::parquet
