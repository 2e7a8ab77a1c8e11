// Helpers for the trainer's multi-rank tests: a scratch directory every rank
// sees, a token file written once and read by all, the tiny model every
// layout trains, and sub-worlds that let a world of 8 ranks run 1-, 2- and
// 4-rank layouts side by side.
//
// Everything named "collective" must be called by every rank of the world in
// the same order. Thread safety: none needed; one thread per rank.
#ifndef TRELLIS_TESTS_TOOLS_MPI_MPI_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_MPI_MPI_TEST_UTIL_H_

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "data/token_dataset.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/mesh.h"
#include "parallel/mpi_communicator.h"
#include "tests/tools/tools_test_util.h"
#include "tools/options/options.h"
#include "tools/trainer/trainer.h"

namespace trellis::mpitest {

inline int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int WorldSize() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Collective: a fresh directory made by rank 0, its path sent to all.
inline std::string SharedScratchDir(const std::string& tag) {
  char path[4096] = {0};
  if (WorldRank() == 0) {
    const std::string pattern = (std::filesystem::path(::testing::TempDir()) /
                                 absl::StrCat("trellis_", tag, "_XXXXXX"))
                                    .string();
    std::copy(pattern.begin(), pattern.end(), path);
    if (mkdtemp(path) == nullptr) path[0] = '\0';
  }
  MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

// Collective: rank 0 removes what SharedScratchDir made once all are done.
inline void RemoveSharedScratchDir(const std::string& dir) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (WorldRank() == 0 && !dir.empty()) std::filesystem::remove_all(dir);
}

using test::kByteVocab;

// Rank 0 writes a byte-vocabulary synthetic token file of about `num_tokens`
// tokens (test::WriteSyntheticTokens); every rank learns whether it worked.
inline bool WriteSharedTokenFile(const std::string& path, int64_t num_tokens) {
  int ok = 1;
  if (WorldRank() == 0) {
    ok = test::WriteSyntheticTokens(path, kByteVocab, num_tokens).ok();
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return ok != 0;
}

// A test suite whose ranks share one MPI runtime and one synthetic token
// file in a scratch directory, made in SetUpTestSuite and removed in
// TearDownTestSuite. `Suite` (the deriving fixture, CRTP) names them:
// `static constexpr const char* kScratchTag` and `static constexpr int64_t
// kTokens`, both public.
template <typename Suite>
class SharedTokenFileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    runtime_ = new MpiRuntime(nullptr, nullptr);
    dir_ = new std::string(SharedScratchDir(Suite::kScratchTag));
    data_ = new std::string(*dir_ + "/tokens.h5");
    ASSERT_TRUE(WriteSharedTokenFile(*data_, Suite::kTokens));
  }
  static void TearDownTestSuite() {
    RemoveSharedScratchDir(*dir_);
    delete data_;
    delete dir_;
    delete runtime_;
  }

  static inline MpiRuntime* runtime_ = nullptr;
  static inline std::string* dir_ = nullptr;
  static inline std::string* data_ = nullptr;
};

// The model every layout trains: 4 layers, 4 heads, 32 wide, windows of 16
// tokens; 8 windows per step in microbatches of 1, so dp 1, 2 and 4 see 8,
// 4 and 2 microbatches. A learning rate high enough that 20 steps move the
// loss, and clipping that is active.
inline TrainOptions TinyModelOptions(const std::string& data) {
  TrainOptions o;
  o.model.n_layer = 4;
  o.model.n_head = 4;
  o.model.d_model = 32;
  o.model.seq_len = 16;
  o.data = data;
  o.val_fraction = 0.02;
  o.micro_batch_size = 1;
  o.global_batch_size = 8;
  o.steps = 20;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.warmup_steps = 2;
  o.weight_decay = 0.1;
  o.grad_clip = 1.0;
  o.seed = 4242;
  o.eval_every = 0;
  o.log_every = 1000;
  return o;
}

// A (dp, tp, pp) layout and its pipeline schedule; experts split over ep
// of the dp ranks.
struct Layout {
  int dp = 1, tp = 1, pp = 1;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  int ep = 1;
  int cp = 1;
  std::string cp_comm = "ring";

  int world() const { return dp * cp * tp * pp; }
  // "dp2·tp2·pp2 1f1b", "dp1·tp1·pp2 interleaved-1f1b v2".
  std::string Name() const {
    std::string name = absl::StrCat("dp", dp, "·tp", tp, "·pp", pp);
    if (pp > 1) absl::StrAppend(&name, " ", schedule);
    if (virtual_stages > 1) absl::StrAppend(&name, " v", virtual_stages);
    if (ep > 1) absl::StrAppend(&name, " ep", ep);
    if (cp > 1) absl::StrAppend(&name, " cp", cp, " ", cp_comm);
    return name;
  }
  void ApplyTo(TrainOptions& options) const {
    options.dp = dp;
    options.tp = tp;
    options.pp = pp;
    options.schedule = ParseScheduleKind(schedule).value();
    options.virtual_stages = virtual_stages;
    options.ep = ep;
    options.cp = cp;
    options.cp_comm = cp_comm;
  }
};

// A trainer on a layout, with the communicators it uses (declared first so
// they outlive it).
struct LayoutRun {
  std::unique_ptr<ParallelContext> context;
  std::unique_ptr<Communicator> pipeline;  // replaces context's pp, or null
  std::unique_ptr<Trainer> trainer;
};

// Collective over the world: every rank's `losses` become world rank
// `root`'s, which must hold `steps` values (a shorter curve fails the test
// there and is shared as NaNs, so every comparison with it fails too).
inline void ShareLosses(std::vector<double>& losses, int steps, int root) {
  std::vector<double> curve(static_cast<size_t>(steps), std::nan(""));
  if (WorldRank() == root) {
    EXPECT_EQ(losses.size(), curve.size()) << "the curve to share";
    std::copy_n(losses.begin(), std::min(losses.size(), curve.size()),
                curve.begin());
  }
  MPI_Bcast(curve.data(), steps, MPI_DOUBLE, root, MPI_COMM_WORLD);
  losses = std::move(curve);
}

// `o` as the tiny mixture of experts of the layout tests: a Llama with 2
// key/value heads and untied embeddings, one dense layer, then MoE layers
// of 4 experts of width 32, 2 per token, with both balance losses.
inline TrainOptions TinyMoe(TrainOptions o) {
  o.model.family = ModelFamilyKind("moe");
  o.model.n_kv_heads = 2;
  o.model.ffn_hidden = 64;
  o.model.rope_theta = 500.0;
  o.model.tie_embeddings = false;
  o.model.experts = 4;
  o.model.experts_per_token = 2;
  o.model.moe_ffn_hidden = 32;
  o.model.moe_first_dense = 1;
  o.model.moe_aux_loss_coeff = 0.01;
  o.model.moe_z_loss_coeff = 0.001;
  return o;
}

// Collective over `comm`, whose size must be layout.world(): builds the
// layout's groups from `comm` and a trainer for `options` laid out so. With
// `pipeline_p2p` kRendezvous the trainer's pp group is a duplicate of the
// context's in MpiP2P::kRendezvous mode (NCCL's transfer semantics on the
// CPU; the layout's own pp group stays eager).
inline absl::StatusOr<LayoutRun> StartLayout(
    const MpiRuntime& runtime, const Layout& layout, TrainOptions options,
    MPI_Comm comm, MpiP2P pipeline_p2p = MpiP2P::kEager) {
  absl::StatusOr<Mesh> mesh =
      Mesh::Create(layout.world(), layout.dp * layout.cp, layout.tp, layout.pp);
  if (!mesh.ok()) return mesh.status();
  mesh = mesh->WithExpertParallel(layout.ep);
  if (!mesh.ok()) return mesh.status();
  mesh = mesh->WithContextParallel(layout.cp);
  if (!mesh.ok()) return mesh.status();
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(runtime, *mesh, comm);
  if (!context.ok()) return context.status();
  LayoutRun run;
  run.context = std::make_unique<ParallelContext>(*std::move(context));
  ProcessGroups groups = run.context->groups();
  if (pipeline_p2p != MpiP2P::kEager) {
    auto* pp = dynamic_cast<MpiCommunicator*>(groups.pp);
    if (pp == nullptr) return absl::InternalError("the pp group is not MPI's");
    MPI_Comm dup;
    if (MPI_Comm_dup(pp->comm(), &dup) != MPI_SUCCESS) {
      return absl::InternalError("MPI_Comm_dup of the pp group failed");
    }
    run.pipeline = std::make_unique<MpiCommunicator>("pp", dup, /*owned=*/true,
                                                     pipeline_p2p);
    groups.pp = run.pipeline.get();
  }
  layout.ApplyTo(options);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(options, groups, run.context->coord());
  if (!trainer.ok()) return trainer.status();
  run.trainer = *std::move(trainer);
  return run;
}

// A communicator over world ranks [first, first + size), or none for ranks
// outside. Collective over the world (every rank constructs one, with
// ranges that do not overlap).
class SubWorld {
 public:
  // `ranges`: (first, size) of each sub-world; this rank joins the one that
  // holds it, if any.
  explicit SubWorld(const std::vector<std::pair<int, int>>& ranges) {
    const int rank = WorldRank();
    int color = MPI_UNDEFINED;
    for (size_t i = 0; i < ranges.size(); ++i) {
      if (rank >= ranges[i].first &&
          rank < ranges[i].first + ranges[i].second) {
        color = static_cast<int>(i);
        index_ = color;
      }
    }
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &comm_);
  }
  ~SubWorld() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  SubWorld(const SubWorld&) = delete;
  SubWorld& operator=(const SubWorld&) = delete;

  bool member() const { return comm_ != MPI_COMM_NULL; }
  // Which range this rank joined (-1: none).
  int index() const { return index_; }
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int index_ = -1;
};

// Packs jobs of the given rank counts into rounds of at most `world` ranks
// (first fit, largest first). Returns, per round, the job indices.
inline std::vector<std::vector<int>> PackRounds(const std::vector<int>& sizes,
                                                int world) {
  std::vector<int> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return sizes[a] > sizes[b]; });
  std::vector<std::vector<int>> rounds;
  std::vector<int> used;
  for (int job : order) {
    size_t r = 0;
    while (r < rounds.size() && used[r] + sizes[job] > world) ++r;
    if (r == rounds.size()) {
      rounds.emplace_back();
      used.push_back(0);
    }
    rounds[r].push_back(job);
    used[r] += sizes[job];
  }
  return rounds;
}

// Collective: runs job i on a sub-world of sizes[i] ranks, as many jobs side
// by side as the world holds. `run(i, comm)` is called on the members of
// job i's sub-world, with its communicator.
inline void RunSideBySide(const std::vector<int>& sizes,
                          const std::function<void(int, MPI_Comm)>& run) {
  for (const std::vector<int>& round : PackRounds(sizes, WorldSize())) {
    std::vector<std::pair<int, int>> ranges;
    int first = 0;
    for (int job : round) {
      ranges.emplace_back(first, sizes[job]);
      first += sizes[job];
    }
    SubWorld sub(ranges);
    if (sub.member()) run(round[sub.index()], sub.comm());
  }
}

}  // namespace trellis::mpitest

#endif  // TRELLIS_TESTS_TOOLS_MPI_MPI_TEST_UTIL_H_
