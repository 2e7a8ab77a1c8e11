// Bootstrap: MPI start-up, the communicators of a mesh, and the check that
// every rank runs the same configuration.
//
//   MpiRuntime runtime(&argc, &argv);               // MPI_Init_thread
//   TRELLIS_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create(runtime.world_size(),
//                                                    dp, tp, pp));
//   TRELLIS_ASSIGN_OR_RETURN(ParallelContext context,
//                            ParallelContext::Create(runtime, mesh));
//   TRELLIS_RETURN_IF_ERROR(CheckConfigsAgree(*context.groups().world,
//                                             flags_text));
//   Train(context.groups(), ...);                    // no globals
//
// A ParallelContext owns one communicator per group this rank belongs to,
// split from the world with MPI_Comm_split; ProcessGroups is the plain value
// of pointers into it that model and trainer code is handed. Single-process
// programs and unit tests use ParallelContext::Single(), which needs no MPI.
//
// Invariants: ProcessGroups pointers stay valid while their ParallelContext
// lives (moving the context keeps them valid); every group's rank order is
// the mesh's (Mesh::Group). There is no global communicator state.
//
// Thread safety: construct and destroy on the thread that drives MPI; see
// Communicator for the rest.
#ifndef TRELLIS_PARALLEL_BOOTSTRAP_H_
#define TRELLIS_PARALLEL_BOOTSTRAP_H_

// The C bindings only (Open MPI and MPICH otherwise pull in C++ ones).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "parallel/communicator.h"
#include "parallel/mesh.h"

namespace trellis {

// Owns MPI's lifetime: MPI_Init_thread (MPI_THREAD_FUNNELED) on construction
// and MPI_Finalize on destruction. When MPI is already initialized (a test
// main did it) it attaches and leaves finalizing to its owner. Sets the
// process's error context to "rank R on HOST".
// REQUIRES: at most one MpiRuntime at a time.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // The rank among the processes on this node: OMPI_COMM_WORLD_LOCAL_RANK,
  // else SLURM_LOCALID, else the rank in MPI_COMM_TYPE_SHARED.
  int local_rank() const { return local_rank_; }
  // The processes on this node (MPI_COMM_TYPE_SHARED).
  int local_size() const { return local_size_; }
  const std::string& hostname() const { return hostname_; }

 private:
  bool owns_mpi_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string hostname_;
};

// The groups of one rank. `embed` (first and last pipeline stage of this
// rank's (d, t); this rank alone when pp == 1) is null on middle stages.
struct ProcessGroups {
  Communicator* world = nullptr;
  Communicator* tp = nullptr;
  Communicator* dp = nullptr;
  Communicator* pp = nullptr;
  Communicator* embed = nullptr;
  // Expert parallelism (Mesh::WithExpertParallel): the ranks that exchange
  // tokens for their experts, and those holding the same experts (dp
  // itself, and a group of one, without it).
  Communicator* ep = nullptr;
  Communicator* expert_dp = nullptr;
  // Context parallelism (Mesh::WithContextParallel): the ranks that split
  // each window (a group of one without it).
  Communicator* cp = nullptr;
};

class ParallelContext {
 public:
  // Splits the world into this rank's groups. Collective over the world.
  // Fails (InvalidArgument) when the mesh's world is not MPI's.
  static absl::StatusOr<ParallelContext> Create(const MpiRuntime& runtime,
                                                const Mesh& mesh);
  // The same over the ranks of `base` instead of the whole world (e.g. a
  // test that runs a 2-rank layout on some of its ranks): mesh rank r is
  // rank r of `base`, and `groups().world` spans `base`. Collective over
  // `base`; ranks outside it do not call. Fails (InvalidArgument) when the
  // mesh's world is not `base`'s size. REQUIRES: `base` is a valid
  // intra-communicator; it is duplicated, so the caller may free it.
  static absl::StatusOr<ParallelContext> Create(const MpiRuntime& runtime,
                                                const Mesh& mesh,
                                                MPI_Comm base);
  // One process, no MPI: every group is a SelfCommunicator.
  static ParallelContext Single();

  ParallelContext(ParallelContext&&) = default;
  ParallelContext& operator=(ParallelContext&&) = default;

  const Mesh& mesh() const { return mesh_; }
  int rank() const { return rank_; }  // in the world
  MeshCoord coord() const { return mesh_.Coord(rank_); }
  const ProcessGroups& groups() const { return groups_; }
  // Every owned communicator (world, tp, dp, pp and, where present, embed),
  // e.g. to log their CommStats.
  std::vector<const Communicator*> communicators() const;

 private:
  ParallelContext(Mesh mesh, int rank) : mesh_(std::move(mesh)), rank_(rank) {}
  Communicator* Own(std::unique_ptr<Communicator> communicator);

  Mesh mesh_;
  int rank_;
  std::vector<std::unique_ptr<Communicator>> owned_;
  ProcessGroups groups_;
};

// A 64-bit FNV-1a hash: the same on every machine and build.
uint64_t StableHash(const std::string& text);

// Checks that every rank of `group` passed the same `config` (e.g. the
// flags as text, one per line). Collective over the group; every rank
// returns the same result, so none hangs. On a mismatch returns
// InvalidArgument naming the first differing line, e.g. "ranks disagree on
// flags: rank 3 has "--lr=0.1" where rank 0 has "--lr=0.2" (line 4); 1 of 8
// ranks differ from rank 0". `what` names the config in the message.
absl::Status CheckConfigsAgree(Communicator& group, const std::string& config,
                               const std::string& what = "flags");

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_BOOTSTRAP_H_
