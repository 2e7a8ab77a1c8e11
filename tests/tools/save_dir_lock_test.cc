// One run per --save_dir: a second holder is refused naming the first, and
// the lock goes with its holder.
#include "tools/checkpoint/save_dir_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"

namespace trellis {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(SaveDirLockTest, OneHolderAtATime) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/lock_", getpid());
  std::filesystem::create_directories(dir);
  absl::StatusOr<std::unique_ptr<SaveDirLock>> first =
      SaveDirLock::Acquire(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  // flock locks belong to an open file: a second open conflicts even in
  // the same process, as another run's would.
  absl::StatusOr<std::unique_ptr<SaveDirLock>> second =
      SaveDirLock::Acquire(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(),
              AllOf(HasSubstr(absl::StrCat("--save_dir=", dir)),
                    HasSubstr("in use by another run"),
                    HasSubstr(absl::StrCat("pid ", getpid())),
                    HasSubstr("another --save_dir")));
  first->reset();
  second = SaveDirLock::Acquire(dir);
  EXPECT_TRUE(second.ok()) << second.status();
  std::filesystem::remove_all(dir);
}

TEST(SaveDirLockTest, UnwritableDirectoryIsOneLine) {
  absl::StatusOr<std::unique_ptr<SaveDirLock>> lock =
      SaveDirLock::Acquire("/nonexistent/trellis/save");
  ASSERT_FALSE(lock.ok());
  EXPECT_THAT(lock.status().message(), HasSubstr("writable --save_dir"));
}

}  // namespace
}  // namespace trellis
