// Bad input through the real programs: each run must end with a nonzero
// exit status (never a signal) and, for trellis's own errors, exactly one
// line on stderr, "<program>: error: ...", naming the flag or file at fault.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tests/tools/tools_test_util.h"
#include "tools/trainer/shard_io.h"

extern char** environ;

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct ProgramResult {
  bool exited = false;  // false: killed by a signal (or never started)
  int exit_code = -1;
  int signal = 0;
  std::string out, err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs build/bin/trellis-<program> with `args` in `dir`, stdout and stderr
// captured to files there.
ProgramResult RunProgram(const std::string& program,
                         const std::vector<std::string>& args,
                         const std::string& dir) {
  const std::string binary =
      absl::StrCat(TRELLIS_BINARY_DIR, "/bin/trellis-", program);
  const std::string out_path = dir + "/stdout.txt";
  const std::string err_path = dir + "/stderr.txt";
  std::vector<std::string> argv_strings = {binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = {"OPENBLAS_NUM_THREADS=1"};
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ProgramResult result;
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr,
                             argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << binary;
  if (rc != 0) return result;
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  result.exited = WIFEXITED(status);
  result.exit_code = result.exited ? WEXITSTATUS(status) : -1;
  result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

std::string Describe(const std::string& program,
                     const std::vector<std::string>& args,
                     const ProgramResult& r) {
  return absl::StrCat("trellis-", program, " ", absl::StrJoin(args, " "),
                      "\nexit ", r.exit_code, " signal ", r.signal,
                      "\nstderr:\n", r.err, "stdout:\n", r.out);
}

// The small model every run here trains (a fraction of a second).
std::vector<std::string> TinyFlags(const std::string& data) {
  return {"--n_layer=1",   "--n_head=2",           "--d_model=16",
          "--seq_len=16",  "--micro_batch_size=2", "--global_batch_size=4",
          "--steps=2",     "--warmup_steps=1",     "--eval_every=0",
          "--data=" + data};
}

class ProgramsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    byte_data_ = dir_ + "/byte.h5";
    test::WriteTokenFile(byte_data_, test::kByteVocab, 20000);
  }

  // Expects a clean failure: a nonzero exit and one stderr line that starts
  // with "trellis-<program>: error: " and contains every one of `names`.
  void ExpectError(const std::string& program,
                   const std::vector<std::string>& args,
                   const std::vector<std::string>& names) {
    const ProgramResult r = RunProgram(program, args, dir_);
    const std::string what = Describe(program, args, r);
    EXPECT_TRUE(r.exited) << what;
    EXPECT_NE(r.exit_code, 0) << what;
    EXPECT_THAT(r.err,
                StartsWith(absl::StrCat("trellis-", program, ": error: ")))
        << what;
    ASSERT_FALSE(r.err.empty()) << what;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << what;
    for (const std::string& name : names) {
      EXPECT_THAT(r.err, HasSubstr(name)) << what;
    }
  }

  // Expects a nonzero exit without a crash (absl's own flag errors).
  void ExpectRefused(const std::string& program,
                     const std::vector<std::string>& args,
                     const std::string& name) {
    const ProgramResult r = RunProgram(program, args, dir_);
    const std::string what = Describe(program, args, r);
    EXPECT_TRUE(r.exited) << what;
    EXPECT_NE(r.exit_code, 0) << what;
    EXPECT_THAT(r.err, HasSubstr(name)) << what;
  }

  void Train(std::vector<std::string> args,
             const std::vector<std::string>& names) {
    std::vector<std::string> all = TinyFlags(byte_data_);
    all.insert(all.end(), args.begin(), args.end());
    ExpectError("train", all, names);
  }

  // Trains the tiny model with `args` added; expects success.
  ProgramResult TrainOk(const std::vector<std::string>& args) {
    std::vector<std::string> all = TinyFlags(byte_data_);
    all.insert(all.end(), args.begin(), args.end());
    const ProgramResult r = RunProgram("train", all, dir_);
    EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe("train", all, r);
    return r;
  }

  // Trains the tiny model for 2 steps into <dir>/ckpt; returns that dir.
  std::string MakeCheckpoint() {
    std::vector<std::string> args = TinyFlags(byte_data_);
    args.push_back("--save_dir=" + dir_ + "/ckpt");
    const ProgramResult r = RunProgram("train", args, dir_);
    EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe("train", args, r);
    EXPECT_TRUE(fs::exists(dir_ + "/ckpt/step_00000002/model.h5"));
    return dir_ + "/ckpt";
  }

  // A copy of the byte token file with `damage` applied to its bytes.
  std::string Damaged(const std::string& name,
                      void (*damage)(std::string& bytes)) {
    std::string bytes = ReadFile(byte_data_);
    damage(bytes);
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return path;
  }

  std::string dir_, byte_data_;
};

TEST_F(ProgramsTest, TrainSucceedsOnGoodInput) {
  const std::vector<std::string> args = TinyFlags(byte_data_);
  const ProgramResult r = RunProgram("train", args, dir_);
  EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe("train", args, r);
  EXPECT_THAT(r.out, HasSubstr("2/2 | loss")) << r.out;
}

// NaN gradients from step 2 on (a test hook): after --max_skipped_steps
// skips the run saves step 1 and ends with one line saying what to do.
TEST_F(ProgramsTest, TrainGivesUpAfterConsecutiveSkippedSteps) {
  setenv("TRELLIS_TEST_INJECT_NAN", "2+:0", 1);
  Train({"--steps=6", "--max_skipped_steps=2", "--save_dir=" + dir_ + "/ck"},
        {"2 consecutive steps skipped", "non-finite", "--resume=auto",
         "--max_skipped_steps", "saved step 1"});
  unsetenv("TRELLIS_TEST_INJECT_NAN");
  EXPECT_TRUE(fs::exists(dir_ + "/ck/step_00000001/model.h5"));
}

TEST_F(ProgramsTest, TrainMissingDataFile) {
  Train({"--data=" + dir_ + "/missing.h5"}, {dir_ + "/missing.h5"});
}

TEST_F(ProgramsTest, TrainTruncatedDataFile) {
  const std::string path =
      Damaged("truncated.h5", [](std::string& b) { b.resize(b.size() / 2); });
  Train({"--data=" + path}, {path});
}

TEST_F(ProgramsTest, TrainDataFileWithFlippedSignature) {
  const std::string path = Damaged("flipped_signature.h5", [](std::string& b) {
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(~b[i]);
  });
  Train({"--data=" + path}, {path});
}

TEST_F(ProgramsTest, TrainDataFileWithFlippedSuperblock) {
  const std::string path = Damaged("flipped_superblock.h5", [](std::string& b) {
    for (int i = 8; i < 96; ++i) b[i] = static_cast<char>(~b[i]);
  });
  Train({"--data=" + path}, {path});
}

TEST_F(ProgramsTest, TrainNotAnHdf5File) {
  const std::string path = dir_ + "/text.h5";
  std::ofstream(path) << "In the beginning was plain text.\n";
  Train({"--data=" + path}, {path, "not an HDF5 file"});
}

TEST_F(ProgramsTest, TrainResumeOfAnotherModelSize) {
  const std::string ckpt = MakeCheckpoint();
  Train({"--resume=" + ckpt, "--d_model=32"},
        {ckpt, "d_model=16", "d_model=32"});
}

TEST_F(ProgramsTest, TrainResumeWithAnotherVocabulary) {
  const std::string ckpt = MakeCheckpoint();
  const std::string gpt2 = dir_ + "/gpt2.h5";
  test::WriteTokenFile(gpt2, test::kGpt2Vocab, 2000);
  Train({"--resume=" + ckpt, "--data=" + gpt2},
        {ckpt, "vocab_size=257", "vocab_size=50257"});
}

TEST_F(ProgramsTest, TrainResumeFromDamagedCheckpoints) {
  const std::string ckpt = MakeCheckpoint();
  const std::string step = ckpt + "/step_00000002";
  Train({"--resume=" + dir_ + "/nothing"}, {"--resume=" + dir_ + "/nothing"});
  // A stale `latest`: it names a checkpoint that is gone.
  std::ofstream(ckpt + "/latest", std::ios::trunc) << "step_00000009\n";
  Train({"--resume=" + ckpt}, {ckpt + "/latest", "step_00000009"});
  const std::string model = step + "/model.h5";
  fs::resize_file(model, fs::file_size(model) / 2);
  Train({"--resume=" + step}, {model});
  std::ofstream(step + "/state.json", std::ios::trunc) << "{\"step\": 2";
  Train({"--resume=" + step}, {step + "/state.json"});
}

TEST_F(ProgramsTest, TrainResumeAutoWithUnreadableLatestTakesNewest) {
  const std::string save = dir_ + "/ckpt";
  const std::vector<std::string> keep = {"--save_dir=" + save,
                                         "--keep_checkpoints=1"};
  ProgramResult r = TrainOk({keep[0], keep[1], "--resume=auto"});
  EXPECT_THAT(r.out,
              HasSubstr("resume: starting fresh: no checkpoint in " + save))
      << r.out;
  int64_t step = 2;
  for (const char* latest :
       std::initializer_list<const char*>{"", " \n", nullptr}) {
    if (latest == nullptr) {
      fs::remove(save + "/latest");
    } else {
      std::ofstream(save + "/latest", std::ios::trunc) << latest;
    }
    const std::string from = save + "/" + absl::StrFormat("step_%08d", step);
    step += 2;
    r = TrainOk(
        {keep[0], keep[1], "--resume=auto", absl::StrCat("--steps=", step)});
    EXPECT_THAT(r.out, AllOf(HasSubstr(save + "/latest is missing or empty"),
                             HasSubstr("resumed from " + from)))
        << r.out;
    // The checkpoint it resumed from was older: only the new one is kept.
    EXPECT_FALSE(fs::exists(from));
    EXPECT_TRUE(fs::exists(save + absl::StrFormat("/step_%08d", step)));
  }
}

TEST_F(ProgramsTest, TrainIntoASaveDirWithLaterCheckpointsIsRefused) {
  const std::string save = dir_ + "/ckpt";
  TrainOk({"--save_dir=" + save, "--steps=4", "--save_every=2"});
  // Resuming from step 2 into the same directory would save step 4 over
  // nothing: the first run's step 4 stays and this run's weights are lost.
  Train({"--save_dir=" + save, "--steps=4",
         "--resume=" + save + "/step_00000002"},
        {"--save_dir=" + save, "step_00000004", "--resume=auto"});
  // So would a fresh start (no --resume) into it.
  Train({"--save_dir=" + save, "--steps=4"},
        {"step_00000002, step_00000004", "beyond step 0"});
  EXPECT_EQ(ReadFile(save + "/latest"), "step_00000004\n");
  EXPECT_TRUE(fs::exists(save + "/step_00000002/model.h5"));
  // Continuing from the newest is fine.
  const ProgramResult r =
      TrainOk({"--save_dir=" + save, "--steps=6", "--resume=auto"});
  EXPECT_THAT(r.out, HasSubstr("resumed from " + save + "/step_00000004"));
  EXPECT_EQ(ReadFile(save + "/latest"), "step_00000006\n");
}

TEST_F(ProgramsTest, TrainResumeWithAnotherSeedOrBatchIsRefused) {
  const std::string ckpt = MakeCheckpoint();
  Train({"--resume=" + ckpt, "--steps=4", "--seed=7"},
        {ckpt, "--seed=1337", "--seed=7"});
  Train({"--resume=" + ckpt, "--steps=4", "--global_batch_size=8"},
        {ckpt, "--global_batch_size=4", "--global_batch_size=8"});
  TrainOk({"--resume=" + ckpt, "--steps=4"});
}

TEST_F(ProgramsTest, EvalWithAnotherVocabulary) {
  const std::string ckpt = MakeCheckpoint();
  const std::string gpt2 = dir_ + "/gpt2.h5";
  test::WriteTokenFile(gpt2, test::kGpt2Vocab, 2000);
  ExpectError("eval", {"--load=" + ckpt, "--data=" + gpt2},
              {ckpt, "vocab_size=257", "vocab_size=50257"});
}

// Same vocabulary size, another tokenizer: the ids mean other strings.
TEST_F(ProgramsTest, ResumeAndEvalWithAnotherTokenizer) {
  const std::string ckpt = MakeCheckpoint();
  const std::string other = dir_ + "/other.h5";
  test::WriteTokenFile(other, {"other-bytes", 257, 256}, 6000);
  Train({"--resume=" + ckpt, "--data=" + other},
        {ckpt, "'byte'", "'other-bytes'", "--tokenizer=byte"});
  ExpectError("eval", {"--load=" + ckpt, "--data=" + other},
              {ckpt, "'byte'", "'other-bytes'"});
}

// Eval's errors name eval's flags, not the trainer's it shares checks with.
TEST_F(ProgramsTest, EvalNamesItsOwnFlags) {
  const std::string ckpt = MakeCheckpoint();
  const std::string small = dir_ + "/small.h5";
  test::WriteTokenFile(small, test::kByteVocab, 40);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--load=" + dir_ + "/nothing",
                                 "--data=" + byte_data_},
        std::vector<std::string>{"--load=" + ckpt, "--data=" + small,
                                 "--micro_batch_size=64"}}) {
    const ProgramResult r = RunProgram("eval", args, dir_);
    const std::string what = Describe("eval", args, r);
    EXPECT_TRUE(r.exited && r.exit_code != 0) << what;
    EXPECT_THAT(r.err, StartsWith("trellis-eval: error: ")) << what;
    EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("--load"),
                                        HasSubstr("--micro_batch_size")))
        << what;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("--resume"))) << what;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("--global_batch_size")))
        << what;
  }
  ExpectError("eval", {"--load=" + ckpt, "--data=" + byte_data_, "stray"},
              {"'stray'"});
}

// A flagfile path without --flagfile= (or any stray word) is refused, not
// ignored.
TEST_F(ProgramsTest, StrayPositionalArguments) {
  Train({"configs/gpt2-124m.flags"},
        {"'configs/gpt2-124m.flags'", "--flagfile="});
  ExpectError("convert",
              {"--input=" + dir_ + "/in", "--to=hf", "--output=" + dir_ + "/o",
               "stray"},
              {"'stray'", "--flagfile="});
}

TEST_F(ProgramsTest, EvalSucceedsThenRefusesBadFiles) {
  const std::string ckpt = MakeCheckpoint();
  const std::vector<std::string> good = {
      "--load=" + ckpt, "--data=" + byte_data_, "--max_windows=8"};
  const ProgramResult r = RunProgram("eval", good, dir_);
  EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe("eval", good, r);
  EXPECT_THAT(r.out, HasSubstr("eval_loss "));
  // A blend: each file's loss after the weighted total, and in the JSON.
  const std::string second = dir_ + "/second.h5";
  test::WriteTokenFile(second, test::kByteVocab, 3000);
  const std::vector<std::string> blend = {
      "--load=" + ckpt, "--data=0.5:" + byte_data_ + ",0.5:" + second,
      "--max_windows=4"};
  const ProgramResult b = RunProgram("eval", blend, dir_);
  EXPECT_TRUE(b.exited && b.exit_code == 0) << Describe("eval", blend, b);
  EXPECT_THAT(b.out, HasSubstr(" (" + byte_data_ + " "));
  EXPECT_THAT(b.out, HasSubstr(", " + second + " "));
  EXPECT_THAT(b.out, HasSubstr("\"eval_loss_by_source\":{"));
  ExpectError("eval", {"--load=" + ckpt, "--data=" + dir_ + "/missing.h5"},
              {dir_ + "/missing.h5"});
  ExpectError("eval", {"--load=" + dir_ + "/nothing", "--data=" + byte_data_},
              {dir_ + "/nothing"});
  ExpectError("eval", {"--data=" + byte_data_}, {"--load"});
  const std::string text = dir_ + "/text.h5";
  std::ofstream(text) << "plain text\n";
  ExpectError("eval", {"--load=" + ckpt, "--data=" + text}, {text});
}

// Flips one byte in the middle of tensor `path`'s data in `file`.
void FlipTensorByte(const std::string& file, const std::string& path) {
  int64_t at = 0;
  {
    absl::StatusOr<TensorFileReader> r = TensorFileReader::Open(file);
    ASSERT_TRUE(r.ok()) << r.status();
    absl::StatusOr<TensorLocation> where = r->Locate(path);
    ASSERT_TRUE(where.ok() && where->offset > 0) << where.status();
    at = where->offset + NumElements(where->shape) * 2 + 1;
  }
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char c = static_cast<char>(f.get() ^ 0x10);
  f.seekp(at);
  f.put(c);
}

// A corrupt tensor stops eval, resume and convert, naming the tensor.
TEST_F(ProgramsTest, CorruptCheckpointTensorsAreRefusedByName) {
  const std::string step = MakeCheckpoint() + "/step_00000002";
  const std::string model = step + "/model.h5";
  const std::string copy = dir_ + "/model.h5.good";
  fs::copy_file(model, copy);
  FlipTensorByte(model, "h.0.mlp.c_fc.weight");
  const std::vector<std::string> names = {model, "h.0.mlp.c_fc.weight",
                                          "checksum"};
  ExpectError("eval", {"--load=" + step, "--data=" + byte_data_}, names);
  Train({"--resume=" + step}, names);
  ExpectError("convert",
              {"--input=" + step, "--output=" + dir_ + "/hf", "--to=hf"},
              names);
  fs::copy_file(copy, model, fs::copy_options::overwrite_existing);
  const std::string opt = step + "/optimizer.h5";
  FlipTensorByte(opt, "exp_avg_sq/wte");
  Train({"--resume=" + step}, {opt, "exp_avg_sq/wte"});
  ExpectError("convert",
              {"--input=" + step, "--output=" + dir_ + "/t", "--to=trellis"},
              {opt, "exp_avg_sq/wte"});
}

TEST_F(ProgramsTest, TrainNonsenseFlags) {
  Train({"--steps=-1"}, {"--steps=-1"});
  Train({"--tp=3"}, {"tp=3"});
  Train({"--global_batch_size=5"}, {"--global_batch_size=5"});
  Train({"--stop_signals=FOO"}, {"FOO"});
}

TEST_F(ProgramsTest, TrainFlagsAbslRefuses) {
  std::vector<std::string> args = TinyFlags(byte_data_);
  args.push_back("--lr=abc");
  ExpectRefused("train", args, "lr");
  args.back() = "--unknown_flag=1";
  ExpectRefused("train", args, "unknown_flag");
  // Enum-like and list flags are parsed where they are read, naming the
  // accepted values.
  args.back() = "--schedule=foo";
  ExpectRefused("train", args, "choose gpipe, 1f1b, interleaved-1f1b or zb-h1");
  args.back() = "--pp_layers=1,x";
  ExpectRefused("train", args, "'x' is not an integer");
  args.back() = "--device=tpu";
  ExpectRefused("train", args, "choose cpu or cuda");
  ExpectRefused("eval", {"--recompute=some"}, "none, selective or full");
  ExpectRefused("eval", {"--max_windows=lots"}, "max_windows");
  ExpectRefused("preprocess", {"--threads=many"}, "threads");
}

// trellis-bench checks every flag before it measures anything, so each of
// these fails at once.
TEST_F(ProgramsTest, BenchBadFlags) {
  ExpectError("bench", {"--device=tpu"}, {"--device=tpu", "cpu or cuda"});
  ExpectError("bench", {"--preset=gpt2-9000m"},
              {"--preset=gpt2-9000m", "gpt2-124m", "gpt2-1558m"});
  ExpectError("bench", {"--precision=fp8"}, {"--precision=fp8"});
  ExpectError("bench", {"--precision=bf16"},
              {"--precision=bf16", "--device=cuda"});
  ExpectError("bench", {"--recompute=some"}, {"--recompute=some"});
  ExpectError("bench", {"--attention=flash"},
              {"--attention=flash", "cudnn, mma or simt"});
  ExpectError("bench", {"--steps=0"}, {"--steps=0"});
  ExpectError("bench", {"--warmup=-1"}, {"--warmup=-1"});
  ExpectError("bench", {"--gemm_size=0"}, {"--gemm_size=0"});
  ExpectError("bench", {"--peak_tflops=-5"}, {"--peak_tflops=-5"});
  ExpectError("bench", {"--n_layer=0"}, {"n_layer=0"});
  ExpectError("bench", {"--n_head=5"}, {"--d_model=384", "--n_head=5"});
  ExpectError("bench", {"--preset=gpt2-124m", "--n_head=5"},
              {"--d_model=768", "--n_head=5"});
  ExpectError("bench", {"--global_batch_size=6"}, {"--global_batch_size=6"});
  ExpectError("bench", {"--json=" + dir_ + "/no/such/bench.json"},
              {"--json", dir_ + "/no/such"});
  ExpectError("bench", {"extra"}, {"'extra'"});
  ExpectRefused("bench", {"--steps=many"}, "steps");
  ExpectRefused("bench", {"--n_layer=some"}, "n_layer");
}

// trellis-checkpoint-bench checks its flags as trellis-train does, and its
// --dir, before it builds a model: each fails at once, with one line.
TEST_F(ProgramsTest, CheckpointBenchBadFlags) {
  const std::string dir = "--dir=" + dir_;
  ExpectError("checkpoint-bench", {dir, "--n_layer=0"}, {"--n_layer"});
  ExpectError("checkpoint-bench", {dir, "--n_head=0"}, {"--n_head"});
  ExpectError("checkpoint-bench", {dir, "--d_model=0"}, {"--d_model"});
  ExpectError("checkpoint-bench", {dir, "--seq_len=-1"}, {"--seq_len"});
  ExpectError("checkpoint-bench", {dir, "--vocab_size=0"}, {"--vocab_size=0"});
  ExpectError("checkpoint-bench", {dir, "--steps=-3"}, {"--steps=-3"});
  ExpectError("checkpoint-bench", {dir, "--lr=nan"}, {"--lr=nan"});
  ExpectError("checkpoint-bench", {dir, "--d_model=1073741824"},
              {"--d_model=1073741824", "choose smaller sizes"});
  ExpectError("checkpoint-bench", {"--dir=/proc/x"},
              {"--dir=/proc/x", "writable"});
  ExpectError("checkpoint-bench", {}, {"--dir is required"});
  ExpectError("checkpoint-bench", {dir, "--load_only"}, {"--load_only"});
  ExpectError("checkpoint-bench", {dir, "configs/gpt2-124m.flags"},
              {"'configs/gpt2-124m.flags'", "--flagfile="});
}

TEST_F(ProgramsTest, PreprocessBadInput) {
  const std::string text = dir_ + "/a.txt";
  std::ofstream(text) << "Some text.\n\nMore text.\n";
  const std::string out = dir_ + "/out.h5";
  ExpectError("preprocess", {"--output=" + out}, {"--input"});
  ExpectError("preprocess", {"--input=" + text}, {"--output"});
  ExpectError("preprocess",
              {"--input=" + dir_ + "/missing.txt", "--output=" + out},
              {dir_ + "/missing.txt"});
  ExpectError("preprocess",
              {"--input=" + text, "--output=" + dir_ + "/no/such/out.h5"},
              {"--output", dir_ + "/no/such"});
  ExpectError("preprocess",
              {"--input=" + text, "--output=" + out, "--split=foo"},
              {"--split=foo"});
  ExpectError("preprocess",
              {"--input=" + text, "--output=" + out, "--tokenizer=foo"},
              {"foo"});
  ExpectError("preprocess", {"--input=" + text, "--output=" + out, "extra"},
              {"extra"});
  const std::string blank = dir_ + "/blank.txt";
  std::ofstream(blank) << "\n   \n";
  ExpectError("preprocess",
              {"--input=" + blank, "--output=" + out, "--split=line"},
              {"no document"});
  ExpectError("preprocess",
              {"--input=" + text, "--output=" + out, "--tokenizer=gpt2",
               "--tokenizer_dir=" + dir_ + "/no_assets"},
              {dir_ + "/no_assets"});
  for (const char* threads : {"--threads=-3", "--threads=0"}) {
    ExpectError("preprocess", {"--input=" + text, "--output=" + out, threads},
                {threads});
  }
  // An output that is an input (the same file by any name) is refused and
  // the input survives.
  const std::string other = dir_ + "/b.txt";
  std::ofstream(other) << "Other text.\n";
  fs::create_hard_link(text, dir_ + "/a_link.txt");
  for (const std::string& target :
       {text, dir_ + "/a_link.txt", dir_ + "/./a.txt"}) {
    ExpectError("preprocess",
                {"--input=" + other + "," + text, "--output=" + target},
                {"--output", "is the input " + text, "choose another"});
  }
  EXPECT_EQ(ReadFile(text), "Some text.\n\nMore text.\n");
  // The same for the temporary the output is written to first.
  const std::string temporary = dir_ + "/c.txt.tmp";
  std::ofstream(temporary) << "Temporary text.\n";
  ExpectError("preprocess",
              {"--input=" + temporary, "--output=" + dir_ + "/c.txt"},
              {"temporary", "is the input " + temporary});
  EXPECT_EQ(ReadFile(temporary), "Temporary text.\n");
  // None of the failures left an output file behind.
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

// Every program's --help lists its own flags with their defaults and
// descriptions, grouped, and exits 0; trellis-train's lists every option.
TEST_F(ProgramsTest, EveryProgramExplainsItsFlags) {
  struct Case {
    const char* program;
    std::vector<std::string> shown;
  };
  const std::vector<Case> cases = {
      {"train",
       {"model:", "data:", "batch:", "optimization:", "checkpoints:",
        "logging:", "layout:", "device:", "this program:", "--n_layer=4",
        "--global_batch_size=32", "--beta2=0.95", "--resume=''",
        "--trace_steps=''", "--schedule=1f1b", "--attention=cudnn",
        "--stop_signals=USR1,TERM", "peak learning rate"}},
      {"eval", {"--load=''", "--max_windows=0", "--tp=1", "layout:"}},
      {"generate",
       {"--load=''", "--prompt=''", "--max_new_tokens=64", "--temperature=1",
        "--top_k=0", "--top_p=1", "--seed=0", "--no_cache=false", "--tp=1"}},
      {"bench", {"--preset=''", "--profile=false", "--steps=5"}},
      {"preprocess", {"--input", "--output", "--tokenizer"}},
      {"tokenizer-bench", {"--tokenizer", "--input", "--passes"}},
      {"convert", {"--from", "--to"}},
      {"bubbles", {"--plan"}},
      {"checkpoint-bench", {"--dir"}},
      {"attention-bench", {"--paths", "--shapes"}},
  };
  for (const Case& c : cases) {
    for (const char* ask : {"--help", "-h"}) {
      const ProgramResult r = RunProgram(c.program, {ask}, dir_);
      const std::string what = Describe(c.program, {ask}, r);
      EXPECT_TRUE(r.exited && r.exit_code == 0) << what;
      EXPECT_THAT(r.out, Not(HasSubstr("No flags matched"))) << what;
      EXPECT_THAT(r.out, HasSubstr("--flagfile=FILE")) << what;
      for (const std::string& text : c.shown) {
        EXPECT_THAT(r.out, HasSubstr(text)) << what;
      }
    }
  }
}

}  // namespace
}  // namespace trellis
