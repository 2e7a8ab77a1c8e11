// Checkpoints outlive layouts: a run saved under dp2·tp2·pp2 and resumed
// under tp4·pp2, pp4 and one rank continues the uninterrupted run's loss
// curve to 1e-4 relative (model and AdamW moments are read back as slices of
// whole tensors in the new layout); resumed under dp2·tp2·pp2 again it
// repeats the curve bit for bit. Also: the checkpoint holds each logical
// tensor whole, as one process would have written it.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/trainer/trainer.h"
#include "transformer/gpt2/gpt2_parameters.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

using mpitest::Layout;

constexpr int kSaveStep = 4;
constexpr int kSteps = 8;

class CheckpointResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    runtime_ = new MpiRuntime(nullptr, nullptr);
    dir_ = new std::string(mpitest::SharedScratchDir("checkpoint_resume"));
    ASSERT_TRUE(mpitest::WriteSharedTokenFile(*dir_ + "/tokens.h5", 12000));
  }
  static void TearDownTestSuite() {
    mpitest::RemoveSharedScratchDir(*dir_);
    delete dir_;
    delete runtime_;
  }
  static TrainOptions Options(const std::string& data = *dir_ + "/tokens.h5") {
    TrainOptions o = mpitest::TinyModelOptions(data);
    o.steps = kSteps;
    return o;
  }
  static void ExpectResumesUnderAnyLayout(const std::string& data,
                                          const std::string& run);
  static void ExpectShardedCheckpointsResume(int level);

  static MpiRuntime* runtime_;
  static std::string* dir_;
};

MpiRuntime* CheckpointResumeTest::runtime_ = nullptr;
std::string* CheckpointResumeTest::dir_ = nullptr;

// An uninterrupted run on dp2·tp2·pp2 saves at step 4; resumed from there
// under other layouts it follows the same loss curve (bit for bit on its
// own layout).
void CheckpointResumeTest::ExpectResumesUnderAnyLayout(const std::string& data,
                                                       const std::string& run) {
  TrainOptions o = Options(data);
  o.save_dir = *dir_ + "/" + run;
  o.save_every = kSaveStep;
  std::vector<double> full;
  {
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, Layout{2, 2, 2}, o, MPI_COMM_WORLD);
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_TRUE(run->trainer->Run().ok());
    full = run->trainer->losses();
  }
  ASSERT_EQ(full.size(), static_cast<size_t>(kSteps));
  const std::string checkpoint = o.save_dir + "/" + CheckpointName(kSaveStep);

  // The last splits each window over cp 2 (world dp·cp·tp·pp = 4).
  Layout context{1, 2, 1};
  context.cp = 2;
  const std::vector<Layout> layouts = {Layout{1, 4, 2}, Layout{1, 1, 4},
                                       Layout{1, 1, 1}, Layout{2, 2, 2},
                                       context};
  std::vector<int> sizes;
  for (const Layout& l : layouts) sizes.push_back(l.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const Layout& layout = layouts[job];
    TrainOptions r = Options(data);
    r.resume = checkpoint;
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, layout, r, comm);
    ASSERT_TRUE(run.ok()) << layout.Name() << ": " << run.status();
    ASSERT_EQ(run->trainer->step(), kSaveStep) << layout.Name();
    ASSERT_TRUE(run->trainer->Run().ok()) << layout.Name();
    const std::vector<double>& resumed = run->trainer->losses();
    ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps - kSaveStep));
    for (int i = 0; i < kSteps - kSaveStep; ++i) {
      const double want = full[kSaveStep + i];
      if (layout.dp == 2 && layout.tp == 2 && layout.pp == 2) {
        EXPECT_EQ(resumed[i], want)
            << layout.Name() << " step " << kSaveStep + i + 1;
      } else {
        EXPECT_NEAR(resumed[i], want, 1e-4 * std::abs(want))
            << layout.Name() << " step " << kSaveStep + i + 1;
      }
    }
  });
}

// A run under context parallelism (dp2·cp2·tp2) saves the same
// layout-free checkpoint: resumed on one rank, under dp 2 and under cp 4 it
// follows the same loss curve.
TEST_F(CheckpointResumeTest, ContextParallelCheckpointsResumeWithoutCp) {
  TrainOptions o = Options();
  o.save_dir = *dir_ + "/context";
  o.save_every = kSaveStep;
  Layout source{2, 2, 1};
  source.cp = 2;
  std::vector<double> full;
  {
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, source, o, MPI_COMM_WORLD);
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_TRUE(run->trainer->Run().ok());
    full = run->trainer->losses();
  }
  ASSERT_EQ(full.size(), static_cast<size_t>(kSteps));
  Layout four{1, 1, 1};
  four.cp = 4;
  const std::vector<Layout> layouts = {Layout{1, 1, 1}, Layout{2, 1, 1}, four};
  std::vector<int> sizes;
  for (const Layout& l : layouts) sizes.push_back(l.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const Layout& layout = layouts[job];
    TrainOptions r = Options();
    r.resume = o.save_dir + "/" + CheckpointName(kSaveStep);
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, layout, r, comm);
    ASSERT_TRUE(run.ok()) << layout.Name() << ": " << run.status();
    ASSERT_TRUE(run->trainer->Run().ok()) << layout.Name();
    const std::vector<double>& resumed = run->trainer->losses();
    ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps - kSaveStep));
    for (int i = 0; i < kSteps - kSaveStep; ++i) {
      const double want = full[kSaveStep + i];
      EXPECT_NEAR(resumed[i], want, 1e-4 * std::abs(want))
          << layout.Name() << " step " << kSaveStep + i + 1;
    }
  });
}

TEST_F(CheckpointResumeTest, ResumesUnderAnyLayoutOnTheSameLossCurve) {
  ExpectResumesUnderAnyLayout(*dir_ + "/tokens.h5", "run");
}

// A blend's per-source data state resumes under any layout too.
TEST_F(CheckpointResumeTest, BlendResumesUnderAnyLayoutOnTheSameLossCurve) {
  ASSERT_TRUE(mpitest::WriteSharedTokenFile(*dir_ + "/tokens_b.h5", 7000));
  ExpectResumesUnderAnyLayout(
      absl::StrCat("0.3:", *dir_, "/tokens.h5,0.7:", *dir_, "/tokens_b.h5"),
      "blend_run");
}

// Every stored tensor of `file` ("/model.h5" or "/optimizer.h5") of
// checkpoints `a` and `b` of `model`: the weights bit for bit, the moments
// to float rounding relative to each tensor's scale (layouts sum gradients
// in different orders).
void ExpectSameTensors(const std::string& a, const std::string& b,
                       const char* file, const ModelConfig& model) {
  ParameterSet params;
  AddModelParameters(model, ChunkPlan{0, model.n_layer, true, true}, TpPlace{},
                     0, Device::Cpu(), DType::kF32, params);
  {
    absl::StatusOr<hdf5::File> fa = hdf5::File::Open(a + file);
    absl::StatusOr<hdf5::File> fb = hdf5::File::Open(b + file);
    ASSERT_TRUE(fa.ok() && fb.ok()) << a << " " << b << " " << file;
    const bool weights = std::string(file) == "/model.h5";
    for (const Parameter* p : params.all()) {
      const std::vector<std::string> paths =
          weights ? std::vector<std::string>{p->name}
                  : std::vector<std::string>{"exp_avg/" + p->name,
                                             "exp_avg_sq/" + p->name};
      for (const std::string& path : paths) {
        const Tensor x = *fa->OpenDataset(path)->ReadAll(DType::kF32);
        const Tensor y = *fb->OpenDataset(path)->ReadAll(DType::kF32);
        ASSERT_EQ(x.shape(), p->spec.logical_shape) << path;
        float scale = 0;
        for (int64_t i = 0; i < y.numel(); ++i) {
          scale = std::max(scale, std::abs(y.data<float>()[i]));
        }
        for (int64_t i = 0; i < x.numel(); ++i) {
          const float u = x.data<float>()[i], v = y.data<float>()[i];
          if (weights) {
            ASSERT_EQ(u, v) << a << file << " " << path << "[" << i << "]";
          } else {
            ASSERT_NEAR(u, v, 1e-4 * scale)
                << a << file << " " << path << "[" << i << "]";
          }
        }
      }
    }
  }
}

// One process saves the initial model (step 0) and the moments after one
// step (step 1) under `save_dir`.
void SaveSingle(const TrainOptions& o, const std::string& save_dir) {
  TrainOptions single = o;
  single.save_dir = save_dir;
  ParallelContext context = ParallelContext::Single();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(single, context.groups(), context.coord());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Save().ok());
  ASSERT_TRUE((*trainer)->Run().ok());
}

TEST_F(CheckpointResumeTest, StoresWholeTensorsAsOneProcessWould) {
  TrainOptions o = Options();
  o.steps = 1;
  o.save_dir = *dir_ + "/sharded";
  {
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, Layout{2, 2, 2}, o, MPI_COMM_WORLD);
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_TRUE(run->trainer->Save().ok());
    ASSERT_TRUE(run->trainer->Run().ok());
  }
  if (mpitest::WorldRank() == 0) {
    const std::string single = *dir_ + "/single";
    SaveSingle(o, single);
    // The initial weights are layout-free bit for bit; after one AdamW step
    // the weights are not (m/√v is ±1 for any gradient, so rounding flips
    // the sign of tiny ones), but the moments are to rounding.
    ExpectSameTensors(o.save_dir + "/" + CheckpointName(0),
                      single + "/" + CheckpointName(0), "/model.h5", o.model);
    ExpectSameTensors(o.save_dir + "/" + CheckpointName(1),
                      single + "/" + CheckpointName(1), "/optimizer.h5",
                      o.model);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// ZeRO-1 checkpoints are layout-free too: a run under dp2 --zero=1 saves
// whole moments that resume under --zero=0 in other layouts (dp1·tp2·pp2,
// dp2·tp2·pp2) and under --zero=1 again (dp4, dp2·pp2); and a --zero=0
// checkpoint resumes under --zero=1. Every resumed run follows its source's
// loss curve (to 1e-6 relative for the same layout, 1e-4 for another), and
// the --zero=1 checkpoint stores the moments a --zero=0 run stores.
TEST_F(CheckpointResumeTest, ZeroOneCheckpointsResumeUnderEveryLevel) {
  auto train = [&](Layout layout, int zero, const std::string& save_dir,
                   const std::string& resume, MPI_Comm comm) {
    TrainOptions o = Options();
    o.zero = zero;
    o.save_dir = save_dir;
    o.save_every = save_dir.empty() ? 0 : kSaveStep;
    o.resume = resume;
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, layout, o, comm);
    EXPECT_TRUE(run.ok()) << layout.Name() << ": " << run.status();
    if (!run.ok()) return std::vector<double>{};
    EXPECT_TRUE(run->trainer->Run().ok()) << layout.Name();
    return run->trainer->losses();
  };
  // Two uninterrupted dp2 runs side by side, --zero=0 and --zero=1.
  std::vector<std::vector<double>> full(2);
  const std::vector<std::string> dirs = {*dir_ + "/zero0", *dir_ + "/zero1"};
  mpitest::RunSideBySide({2, 2}, [&](int job, MPI_Comm comm) {
    full[job] = train(Layout{2, 1, 1}, job, dirs[job], "", comm);
  });
  // Each rank ran one of them; share both curves.
  for (int job : {0, 1}) {
    mpitest::ShareLosses(full[job], kSteps, 2 * job);
  }
  for (int i = 0; i < kSteps; ++i) {
    ASSERT_NEAR(full[1][i], full[0][i], 1e-6 * std::abs(full[0][i]));
  }
  if (mpitest::WorldRank() == 0) {
    ExpectSameTensors(dirs[1] + "/" + CheckpointName(kSaveStep),
                      dirs[0] + "/" + CheckpointName(kSaveStep),
                      "/optimizer.h5", Options().model);
  }
  struct Resume {
    Layout layout;
    int zero;
    int from;  // the --zero level of the checkpoint
  };
  const std::vector<Resume> resumes = {
      {Layout{1, 2, 2}, 0, 1}, {Layout{2, 1, 1}, 0, 1},
      {Layout{4, 1, 1}, 1, 1}, {Layout{2, 1, 2}, 1, 0},
      {Layout{2, 2, 2}, 0, 1}, {Layout{2, 1, 1}, 1, 0}};
  std::vector<int> sizes;
  for (const Resume& r : resumes) sizes.push_back(r.layout.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const Resume& r = resumes[job];
    const std::string name = absl::StrCat(r.layout.Name(), " --zero=", r.zero,
                                          " from --zero=", r.from);
    const std::vector<double> resumed =
        train(r.layout, r.zero, "",
              dirs[r.from] + "/" + CheckpointName(kSaveStep), comm);
    ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps - kSaveStep)) << name;
    const bool same_layout = r.layout.world() == 2;
    for (int i = 0; i < kSteps - kSaveStep; ++i) {
      const double want = full[r.from][kSaveStep + i];
      EXPECT_NEAR(resumed[i], want,
                  (same_layout ? 1e-6 : 1e-4) * std::abs(want))
          << name << " step " << kSaveStep + i + 1;
    }
  });
}

// `o` as a Llama with 2 key/value heads and untied embeddings.
TrainOptions WithTwoKeyValueHeads(TrainOptions o) {
  o.model.family = ModelFamilyKind::kLlama;
  o.model.n_kv_heads = 2;
  o.model.ffn_hidden = 64;
  o.model.tie_embeddings = false;
  return o;
}

// Collective over `comm`: resumes `resume` (a checkpoint of step kSaveStep
// saved by a run on `source`, whose losses were `full`) under `layout` and
// expects the rest of the source's curve: bit for bit under the source's
// tp, else to 1e-4 relative.
void ExpectResumeFollowsCurve(MpiRuntime& runtime, const Layout& layout,
                              const Layout& source, const TrainOptions& resume,
                              const std::vector<double>& full, MPI_Comm comm) {
  const std::string name = absl::StrCat(layout.Name(), " from ", source.Name());
  absl::StatusOr<mpitest::LayoutRun> run =
      mpitest::StartLayout(runtime, layout, resume, comm);
  ASSERT_TRUE(run.ok()) << name << ": " << run.status();
  ASSERT_EQ(run->trainer->step(), kSaveStep) << name;
  ASSERT_TRUE(run->trainer->Run().ok()) << name;
  const std::vector<double>& resumed = run->trainer->losses();
  ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps - kSaveStep)) << name;
  const bool same_layout = layout.tp == source.tp;
  for (int i = 0; i < kSteps - kSaveStep; ++i) {
    const double want = full[kSaveStep + i];
    if (same_layout) {
      EXPECT_EQ(resumed[i], want) << name << " step " << kSaveStep + i + 1;
    } else {
      EXPECT_NEAR(resumed[i], want, 1e-4 * std::abs(want))
          << name << " step " << kSaveStep + i + 1;
    }
  }
}

// A Llama with 2 key/value heads: under tp 4 each head is replicated over
// two ranks, under tp 1 and tp 2 it is not. Its checkpoints stay
// layout-free: the tp4 run's initial weights equal one process's bit for
// bit (each replicated element written once, by its owner: a second writer
// would also double its checksum and fail the loads below), a tp4
// checkpoint resumes under tp1 and tp2 and a tp1 checkpoint under tp4 on
// the source's loss curve, and each resumes bit for bit under its own
// layout.
TEST_F(CheckpointResumeTest, ReplicatedKeyValueHeadsResumeAcrossTp) {
  TrainOptions o = WithTwoKeyValueHeads(Options());
  o.save_every = kSaveStep;
  const std::vector<Layout> sources = {Layout{1, 4, 1}, Layout{1, 1, 1}};
  const std::vector<std::string> dirs = {*dir_ + "/kv_tp4", *dir_ + "/kv_tp1"};
  // Both uninterrupted runs side by side; the tp4 one also saves step 0.
  std::vector<std::vector<double>> full(2);
  mpitest::RunSideBySide({4, 1}, [&](int job, MPI_Comm comm) {
    TrainOptions s = o;
    s.save_dir = dirs[job];
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, sources[job], s, comm);
    ASSERT_TRUE(run.ok()) << run.status();
    if (job == 0) {
      ASSERT_TRUE(run->trainer->Save().ok());
    }
    ASSERT_TRUE(run->trainer->Run().ok());
    full[job] = run->trainer->losses();
  });
  // Share both curves (ranks 0 and 4 ran them).
  for (int job : {0, 1}) {
    mpitest::ShareLosses(full[job], kSteps, 4 * job);
  }
  for (int i = 0; i < kSteps; ++i) {
    ASSERT_NEAR(full[0][i], full[1][i], 1e-4 * std::abs(full[1][i]));
  }
  if (mpitest::WorldRank() == 0) {
    const std::string single = *dir_ + "/kv_single";
    SaveSingle(o, single);
    ExpectSameTensors(dirs[0] + "/" + CheckpointName(0),
                      single + "/" + CheckpointName(0), "/model.h5", o.model);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  struct Resume {
    Layout layout;
    int from;  // index into sources
  };
  for (const std::vector<Resume>& batch :
       {std::vector<Resume>{
            {Layout{1, 4, 1}, 0}, {Layout{1, 1, 1}, 0}, {Layout{1, 2, 1}, 0}},
        std::vector<Resume>{{Layout{1, 4, 1}, 1}, {Layout{1, 1, 1}, 1}}}) {
    std::vector<int> sizes;
    for (const Resume& r : batch) sizes.push_back(r.layout.world());
    mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
      const Resume& r = batch[job];
      TrainOptions resume = o;
      resume.save_every = 0;
      resume.resume = dirs[r.from] + "/" + CheckpointName(kSaveStep);
      ExpectResumeFollowsCurve(*runtime_, r.layout, sources[r.from], resume,
                               full[r.from], comm);
    });
  }
}

// ZeRO-2 and ZeRO-3 checkpoints too: a dp4 --zero=`level` run and a tp2
// --zero=0 run each save at step 4; each checkpoint resumes under its own
// layout and level bit-exactly (the same losses to the last bit), and
// under the other's to 1e-4 relative of the source's curve (another layout
// sums in other orders). The dp4 run's global batch of 8 is two
// microbatches per rank, so its gradients are accumulated across
// reduce-scatters; under ZeRO-3 its weights are gathered whole for the
// save and sharded again after the load.
void CheckpointResumeTest::ExpectShardedCheckpointsResume(int level) {
  struct Run {
    Layout layout;
    int zero;
  };
  const std::vector<Run> sources = {{Layout{4, 1, 1}, level},
                                    {Layout{1, 2, 1}, 0}};
  auto train = [&](const Run& r, const std::string& save_dir,
                   const std::string& resume, MPI_Comm comm) {
    TrainOptions o = Options();
    o.zero = r.zero;
    o.dp_bucket_mb = 0.01;  // several buckets
    o.save_dir = save_dir;
    o.save_every = save_dir.empty() ? 0 : kSaveStep;
    o.resume = resume;
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, r.layout, o, comm);
    EXPECT_TRUE(run.ok()) << r.layout.Name() << ": " << run.status();
    if (!run.ok()) return std::vector<double>{};
    EXPECT_TRUE(run->trainer->Run().ok()) << r.layout.Name();
    return run->trainer->losses();
  };
  const std::vector<std::string> dirs = {
      absl::StrCat(*dir_, "/zero", level, "-dp4"),
      absl::StrCat(*dir_, "/zero0-tp2-for-", level)};
  std::vector<std::vector<double>> full(2);
  mpitest::RunSideBySide({4, 2}, [&](int job, MPI_Comm comm) {
    full[job] = train(sources[job], dirs[job], "", comm);
  });
  // Share both curves: job 0 ran on ranks 0-3, job 1 on ranks 4-5.
  for (int job : {0, 1}) mpitest::ShareLosses(full[job], kSteps, 4 * job);
  struct Resume {
    Run run;
    int from;  // the source run
  };
  const std::vector<Resume> resumes = {
      {sources[0], 0}, {sources[1], 0}, {sources[1], 1}, {sources[0], 1}};
  std::vector<int> sizes;
  for (const Resume& r : resumes) sizes.push_back(r.run.layout.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const Resume& r = resumes[job];
    const std::string name = absl::StrCat(
        r.run.layout.Name(), " --zero=", r.run.zero, " from ", dirs[r.from]);
    const std::vector<double> resumed =
        train(r.run, "", dirs[r.from] + "/" + CheckpointName(kSaveStep), comm);
    ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps - kSaveStep)) << name;
    const bool same = r.run.layout.world() == sources[r.from].layout.world();
    for (int i = 0; i < kSteps - kSaveStep; ++i) {
      const double want = full[r.from][kSaveStep + i];
      if (same) {
        EXPECT_EQ(resumed[i], want) << name << " step " << kSaveStep + i + 1;
      } else {
        EXPECT_NEAR(resumed[i], want, 1e-4 * std::abs(want))
            << name << " step " << kSaveStep + i + 1;
      }
    }
  });
}

// ZeRO-2 with both sums over tp that run on the owned blocks: a Llama
// with one key/value head (replicated over tp 2) under dp2·tp2
// --sequence_parallel --zero=2 saves at step 4; resumed under the same
// layout and options it repeats the uninterrupted run's losses bit for
// bit, and under dp1·tp2 --zero=0 without sequence parallelism it follows
// them to 1e-4 relative.
TEST_F(CheckpointResumeTest, ZeroTwoWithSumsOverTpResumesBitExactly) {
  TrainOptions o = Options();
  o.model.family = ModelFamilyKind::kLlama;
  o.model.n_kv_heads = 1;
  o.model.ffn_hidden = 64;
  o.model.tie_embeddings = false;
  o.dp_bucket_mb = 0.01;  // several buckets
  const Layout source{2, 2, 1};
  auto train = [&](const Layout& layout, bool sharded,
                   const std::string& save_dir, const std::string& resume,
                   MPI_Comm comm) {
    TrainOptions r = o;
    r.zero = sharded ? 2 : 0;
    r.sequence_parallel = sharded;
    r.save_dir = save_dir;
    r.save_every = save_dir.empty() ? 0 : kSaveStep;
    r.resume = resume;
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, layout, r, comm);
    EXPECT_TRUE(run.ok()) << layout.Name() << ": " << run.status();
    if (!run.ok()) return std::vector<double>{};
    EXPECT_TRUE(run->trainer->Run().ok()) << layout.Name();
    return run->trainer->losses();
  };
  const std::string dir = *dir_ + "/zero2-sp-kv1";
  std::vector<double> full;
  mpitest::RunSideBySide({source.world()}, [&](int, MPI_Comm comm) {
    full = train(source, true, dir, "", comm);
  });
  // Share the curve: ranks 0-3 ran it.
  mpitest::ShareLosses(full, kSteps, 0);
  const std::vector<Layout> layouts = {source, Layout{1, 2, 1}};
  mpitest::RunSideBySide({4, 2}, [&](int job, MPI_Comm comm) {
    const bool same = job == 0;
    const std::string name = layouts[job].Name();
    const std::vector<double> resumed = train(
        layouts[job], same, "", dir + "/" + CheckpointName(kSaveStep), comm);
    ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps - kSaveStep)) << name;
    for (int i = 0; i < kSteps - kSaveStep; ++i) {
      const double want = full[kSaveStep + i];
      if (same) {
        EXPECT_EQ(resumed[i], want) << name << " step " << kSaveStep + i + 1;
      } else {
        EXPECT_NEAR(resumed[i], want, 1e-4 * std::abs(want))
            << name << " step " << kSaveStep + i + 1;
      }
    }
  });
}

TEST_F(CheckpointResumeTest,
       ZeroTwoCheckpointsResumeUnderOtherLevelsAndLayouts) {
  ExpectShardedCheckpointsResume(2);
}

TEST_F(CheckpointResumeTest,
       ZeroThreeCheckpointsResumeUnderOtherLevelsAndLayouts) {
  ExpectShardedCheckpointsResume(3);
}

}  // namespace
}  // namespace trellis
