// A small MPI program for the watchdog tests (run by
// tests/tools/mpi/watchdog_jobs_test.cc under mpirun, since a watchdog that
// fires ends the whole job): every rank issues six all-reduces (or, with
// OPERATION "barrier", six barriers) on "world", then one all-reduce on
// "other". With TRELLIS_TEST_SKIP_COLLECTIVE=R:world:S rank R
// leaves one out, so the others wait on world's last all-reduce forever;
// rank R sleeps 2 s and then waits in "other", inside a watched wait, where
// it answers the timed-out ranks' dump notice.
//
// Usage: watchdog_fault_program DUMP_DIR TIMEOUT_S [all_reduce|barrier].
// Exits 0 when every collective completed.
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "parallel/mpi_communicator.h"
#include "parallel/watchdog.h"
#include "parallel/watchdog_communicator.h"

namespace trellis {
namespace {

MPI_Comm Dup() {
  MPI_Comm comm;
  TRELLIS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return comm;
}

int Run(const char* dump_dir, double timeout_s, bool barriers) {
  MpiCommunicator world("world", Dup(), /*owned=*/true);
  MpiCommunicator other("other", Dup(), /*owned=*/true);
  WatchdogOptions options;
  options.timeout_s = timeout_s;
  options.dump_dir = dump_dir;
  const absl::Status faults = options.ReadTestFaults();
  if (!faults.ok()) {
    std::cerr << faults.message() << std::endl;
    return 2;
  }
  Watchdog watchdog(options, MPI_COMM_WORLD);
  std::vector<int> members(static_cast<size_t>(world.size()));
  std::iota(members.begin(), members.end(), 0);
  WatchdogCommunicator watched_world(world, watchdog, members);
  WatchdogCommunicator watched_other(other, watchdog, members);
  Tensor value = Tensor::Zeros({4}, DType::kF32);
  for (int i = 0; i < 6; ++i) {
    if (barriers) {
      watched_world.Barrier();
    } else {
      watched_world.AllReduce(value, ReduceOp::kSum);
    }
  }
  if (options.skip.rank == watchdog.rank()) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  watched_other.AllReduce(value, ReduceOp::kSum);
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  const std::string operation = argc == 4 ? argv[3] : "all_reduce";
  if ((argc != 3 && argc != 4) ||
      (operation != "all_reduce" && operation != "barrier")) {
    std::cerr << "usage: watchdog_fault_program DUMP_DIR TIMEOUT_S "
                 "[all_reduce|barrier]"
              << std::endl;
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  const int code =
      trellis::Run(argv[1], std::atof(argv[2]), operation == "barrier");
  MPI_Finalize();
  return code;
}
