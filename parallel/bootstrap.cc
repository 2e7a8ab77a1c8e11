#include "parallel/bootstrap.h"

// The C bindings only (Open MPI and MPICH otherwise pull in C++ ones).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "framework/status.h"
#include "parallel/mpi_communicator.h"

namespace trellis {
namespace {

// The node's name: Slurm's node name where set (several emulated nodes may
// share one host), else the hostname.
std::string Hostname() {
  const char* node = std::getenv("SLURMD_NODENAME");
  if (node != nullptr && *node != '\0') return node;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  return host;
}

// A non-negative integer from the environment, or -1.
int EnvInt(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return -1;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return (*end == '\0' && parsed >= 0) ? static_cast<int>(parsed) : -1;
}

// Splits `world` into the groups of `kind`; null where this rank is in none.
std::unique_ptr<Communicator> SplitGroup(MPI_Comm world, const Mesh& mesh,
                                         int rank, GroupKind kind) {
  const Mesh::GroupSlot slot = mesh.Slot(kind, rank);
  MPI_Comm comm = MPI_COMM_NULL;
  TRELLIS_MPI_CHECK(MPI_Comm_split(
      world, slot.color < 0 ? MPI_UNDEFINED : slot.color, slot.key, &comm));
  if (comm == MPI_COMM_NULL) return nullptr;
  auto communicator =
      std::make_unique<MpiCommunicator>(GroupKindName(kind), comm, true);
  const std::vector<int> members = mesh.Group(kind, rank);
  TRELLIS_CHECK_EQ(communicator->size(), static_cast<int>(members.size()));
  TRELLIS_CHECK_EQ(communicator->rank(), slot.key);
  return communicator;
}

// Broadcasts `text` from `root` (bytes carried as i32 elements).
std::string BroadcastText(Communicator& group, const std::string& text,
                          int root) {
  Tensor length = Tensor::Empty({1}, DType::kI64);
  length.data<int64_t>()[0] = static_cast<int64_t>(text.size());
  group.Broadcast(length, root);
  const int64_t n = length.data<int64_t>()[0];
  if (n == 0) return "";
  Tensor bytes = Tensor::Empty({n}, DType::kI32);
  int32_t* data = bytes.data<int32_t>();
  if (group.rank() == root) {
    for (int64_t i = 0; i < n; ++i)
      data[i] = static_cast<unsigned char>(text[i]);
  }
  group.Broadcast(bytes, root);
  std::string result(n, '\0');
  for (int64_t i = 0; i < n; ++i) result[i] = static_cast<char>(data[i]);
  return result;
}

// "rank 3 has "--lr=0.1" where rank 0 has "--lr=0.2"" for the first line
// that differs.
std::string FirstDifference(const std::string& reference,
                            const std::string& other, int other_rank) {
  const std::vector<std::string> a = absl::StrSplit(reference, '\n');
  const std::vector<std::string> b = absl::StrSplit(other, '\n');
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto line = [](const std::vector<std::string>& lines, size_t i) {
    return i < lines.size() ? absl::StrCat("\"", lines[i], "\"")
                            : std::string("nothing");
  };
  return absl::StrCat("rank ", other_rank, " has ", line(b, i),
                      " where rank 0 has ", line(a, i), " (line ", i + 1, ")");
}

}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  TRELLIS_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    TRELLIS_MPI_CHECK(
        MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    TRELLIS_CHECK_GE(provided, MPI_THREAD_FUNNELED) << "MPI thread support ";
    owns_mpi_ = true;
  }
  TRELLIS_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  TRELLIS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  TRELLIS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  hostname_ = Hostname();
  SetErrorContext(absl::StrCat("rank ", world_rank_, " on ", hostname_));

  MPI_Comm node = MPI_COMM_NULL;
  TRELLIS_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED,
                                        world_rank_, MPI_INFO_NULL, &node));
  int node_rank = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(node, &node_rank));
  TRELLIS_MPI_CHECK(MPI_Comm_size(node, &local_size_));
  TRELLIS_MPI_CHECK(MPI_Comm_free(&node));
  local_rank_ = EnvInt("OMPI_COMM_WORLD_LOCAL_RANK");
  if (local_rank_ < 0) local_rank_ = EnvInt("SLURM_LOCALID");
  if (local_rank_ < 0) local_rank_ = node_rank;
}

MpiRuntime::~MpiRuntime() {
  if (owns_mpi_) MPI_Finalize();
}

absl::StatusOr<ParallelContext> ParallelContext::Create(
    const MpiRuntime& runtime, const Mesh& mesh) {
  if (mesh.world() != runtime.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout ", mesh.DebugString(), " is for ", mesh.world(),
                     " ranks but MPI started ", runtime.world_size(),
                     "; launch as many ranks as dp × tp × pp"));
  }
  return Create(runtime, mesh, MPI_COMM_WORLD);
}

absl::StatusOr<ParallelContext> ParallelContext::Create(
    const MpiRuntime& runtime, const Mesh& mesh, MPI_Comm base) {
  (void)runtime;  // Proof that MPI is initialized.
  int base_rank = 0, base_size = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(base, &base_rank));
  TRELLIS_MPI_CHECK(MPI_Comm_size(base, &base_size));
  if (mesh.world() != base_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout ", mesh.DebugString(), " is for ", mesh.world(),
                     " ranks but its communicator has ", base_size,
                     "; run it on as many ranks as dp × tp × pp"));
  }
  ParallelContext context(mesh, base_rank);
  MPI_Comm world = MPI_COMM_NULL;
  TRELLIS_MPI_CHECK(MPI_Comm_dup(base, &world));
  context.groups_.world = context.Own(
      std::make_unique<MpiCommunicator>("world", world, /*owned=*/true));
  const int rank = context.rank_;
  context.groups_.tp =
      context.Own(SplitGroup(world, mesh, rank, GroupKind::kTp));
  context.groups_.dp =
      context.Own(SplitGroup(world, mesh, rank, GroupKind::kDp));
  context.groups_.pp =
      context.Own(SplitGroup(world, mesh, rank, GroupKind::kPp));
  context.groups_.embed =
      context.Own(SplitGroup(world, mesh, rank, GroupKind::kEmbed));
  context.groups_.ep =
      context.Own(SplitGroup(world, mesh, rank, GroupKind::kEp));
  context.groups_.expert_dp =
      context.Own(SplitGroup(world, mesh, rank, GroupKind::kExpertDp));
  context.groups_.cp =
      context.Own(SplitGroup(world, mesh, rank, GroupKind::kCp));
  return context;
}

ParallelContext ParallelContext::Single() {
  ParallelContext context(Mesh::Single(), 0);
  ProcessGroups& g = context.groups_;
  g.world = context.Own(std::make_unique<SelfCommunicator>("world"));
  g.tp = context.Own(std::make_unique<SelfCommunicator>("tp"));
  g.dp = context.Own(std::make_unique<SelfCommunicator>("dp"));
  g.pp = context.Own(std::make_unique<SelfCommunicator>("pp"));
  g.embed = context.Own(std::make_unique<SelfCommunicator>("embed"));
  g.ep = context.Own(std::make_unique<SelfCommunicator>("ep"));
  g.expert_dp = context.Own(std::make_unique<SelfCommunicator>("expert-dp"));
  g.cp = context.Own(std::make_unique<SelfCommunicator>("cp"));
  return context;
}

Communicator* ParallelContext::Own(std::unique_ptr<Communicator> comm) {
  if (comm == nullptr) return nullptr;
  owned_.push_back(std::move(comm));
  return owned_.back().get();
}

std::vector<const Communicator*> ParallelContext::communicators() const {
  std::vector<const Communicator*> all;
  for (const auto& comm : owned_) all.push_back(comm.get());
  return all;
}

uint64_t StableHash(const std::string& text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

absl::Status CheckConfigsAgree(Communicator& group, const std::string& config,
                               const std::string& what) {
  // max(h) and max(~h) = ~min(h) in one all-reduce: equal iff all agree.
  const int64_t hash = static_cast<int64_t>(StableHash(config));
  Tensor extremes = Tensor::Empty({2}, DType::kI64);
  extremes.data<int64_t>()[0] = hash;
  extremes.data<int64_t>()[1] = ~hash;
  group.AllReduce(extremes, ReduceOp::kMax);
  if (extremes.data<int64_t>()[0] == ~extremes.data<int64_t>()[1]) {
    return absl::OkStatus();
  }
  // Every rank takes this branch: find who differs from rank 0.
  Tensor mine = Tensor::Empty({1}, DType::kI64);
  mine.data<int64_t>()[0] = hash;
  Tensor all = Tensor::Empty({group.size()}, DType::kI64);
  group.AllGather(mine, all);
  const int64_t* hashes = all.data<int64_t>();
  int first_other = -1, differing = 0;
  for (int r = 1; r < group.size(); ++r) {
    if (hashes[r] == hashes[0]) continue;
    ++differing;
    if (first_other < 0) first_other = r;
  }
  const std::string reference = BroadcastText(group, config, 0);
  const std::string other = BroadcastText(group, config, first_other);
  return absl::InvalidArgumentError(absl::StrCat(
      "ranks disagree on ", what, ": ",
      FirstDifference(reference, other, first_other), "; ", differing, " of ",
      group.size(), " ranks differ from rank 0"));
}

}  // namespace trellis
