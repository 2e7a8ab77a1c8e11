// main() for GoogleTest programs run under mpirun: initializes MPI, prints
// GoogleTest's full output on rank 0 and only failures on the other ranks
// (each line prefixed with its rank), and makes every rank's failure fail the
// run: each rank's exit code is the worst over all ranks. Where
// TRELLIS_ALL_SKIPPED_EXIT is set, a run in which every test skipped exits 77,
// which the GPU tests' ctest entries report as skipped.
// The C bindings only (Open MPI and MPICH otherwise pull in C++ ones).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

// Prints failed assertions and failed tests of a rank other than 0.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "unknown",
                 result.line_number(), result.message());
    std::fflush(stderr);
  }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_,
                 info.test_suite_name(), info.name());
    std::fflush(stderr);
  }

 private:
  int rank_;
};

// Rank 0 names the ranks whose tests failed, since its own summary covers
// only itself.
void PrintFailingRanks(int rank, int result) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> results(rank == 0 ? size : 0);
  MPI_Gather(&result, 1, MPI_INT, results.data(), 1, MPI_INT, 0,
             MPI_COMM_WORLD);
  if (rank != 0) return;
  std::string failing;
  for (int r = 0; r < size; ++r) {
    if (results[r] != 0) {
      failing += ' ';
      failing += std::to_string(r);
    }
  }
  if (!failing.empty()) {
    std::fprintf(stderr, "tests failed on ranks:%s (of %d)\n", failing.c_str(),
                 size);
  }
}

// The exit code of a run whose every test skipped.
constexpr int kAllSkipped = 77;

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();
  int worst = result;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  PrintFailingRanks(rank, result);
  // With TRELLIS_ALL_SKIPPED_EXIT set (ctest sets it for the GPU tests), a
  // run in which every test skipped on every rank (a GPU test without a GPU)
  // exits kAllSkipped, which ctest reports as skipped (SKIP_RETURN_CODE); a
  // run where some tests passed and others skipped passes.
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  const int ran = unit.successful_test_count() + unit.failed_test_count();
  int ran_anywhere = 0;
  MPI_Allreduce(&ran, &ran_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  if (worst == 0 && ran_anywhere == 0 && unit.skipped_test_count() > 0 &&
      std::getenv("TRELLIS_ALL_SKIPPED_EXIT") != nullptr) {
    return kAllSkipped;
  }
  return worst;
}
