// Bad input through the real programs: each run must end with a nonzero
// exit status (never a signal) and, for trellis's own errors, exactly one
// line on stderr, "<program>: error: ...", naming the flag or file at fault.
// Here: trellis-train's data files and flags, trellis-eval's files and
// flags, trellis-bench's, trellis-checkpoint-bench's and
// trellis-preprocess's, and every program's --help. Checkpoints through the
// programs are programs_checkpoint_test's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/tools/programs_test_util.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/save_dir_lock.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

// Every file under `dir` with its size, one per line, sorted.
std::string DirListing(const std::string& dir) {
  std::vector<std::string> lines;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    lines.push_back(e.path().string() + " " +
                    (e.is_regular_file() ? std::to_string(e.file_size())
                                         : std::string("dir")));
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}
using programs_test::Describe;
using programs_test::ProgramResult;
using programs_test::ProgramsTest;
using programs_test::ReadFile;
using programs_test::RunProgram;
using programs_test::TinyFlags;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST_F(ProgramsTest, TrainSucceedsOnGoodInput) {
  const std::vector<std::string> args = TinyFlags(byte_data_);
  const ProgramResult r = RunProgram("train", args, dir_);
  EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe("train", args, r);
  EXPECT_THAT(r.out, HasSubstr("2/2 | loss")) << r.out;
}

// Two runs saving into one directory published a checkpoint with one run's
// state beside the other's weights: while a process holds --save_dir, a
// second run is refused before it trains, naming the holder.
TEST_F(ProgramsTest, TrainRefusesASaveDirInUse) {
  const std::string save = dir_ + "/shared_ckpt";
  fs::create_directories(save);
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  const pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {  // another run: holds the lock until told to go
    auto lock = SaveDirLock::Acquire(save);
    char c = lock.ok() ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1 || read(release[0], &c, 1) != 1) _exit(2);
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  std::vector<std::string> args = TinyFlags(byte_data_);
  args.push_back("--save_dir=" + save);
  ExpectError("train", args,
              {"--save_dir=" + save, "in use by another run",
               absl::StrCat("pid ", holder)});
  EXPECT_FALSE(fs::exists(save + "/step_00000002"));
  ASSERT_EQ(write(release[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(holder, &status, 0), holder);
  // Once the holder is gone the directory is free again.
  const ProgramResult r = RunProgram("train", args, dir_);
  EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe("train", args, r);
  EXPECT_TRUE(fs::exists(save + "/step_00000002/model.h5"));
}

// A metrics file on a full disk was cut mid-line with exit 0: the failed
// write is said once while training goes on, and the run's exit says what
// was lost.
TEST_F(ProgramsTest, TrainSaysAMetricsFileItCouldNotWrite) {
  std::vector<std::string> args = TinyFlags(byte_data_);
  args.push_back("--metrics_file=/dev/full");
  const ProgramResult r = RunProgram("train", args, dir_);
  const std::string what = Describe("train", args, r);
  EXPECT_TRUE(r.exited) << what;
  EXPECT_EQ(r.exit_code, 1) << what;
  const std::string said =
      "error: --metrics_file=/dev/full: writing step 1 failed (No space left "
      "on device)";
  ASSERT_NE(r.err.find(said), std::string::npos) << what;
  EXPECT_EQ(r.err.find(said, r.err.find(said) + 1), std::string::npos)
      << "said more than once: " << what;
  EXPECT_THAT(r.err, HasSubstr("trellis-train: error: the run trained to the "
                               "end, but --metrics_file=/dev/full holds no "
                               "step from 1 on"))
      << what;
  EXPECT_THAT(r.out, HasSubstr("2/2 | loss")) << what;
}

// --eod_mask_loss over data that is all end-of-text logged loss 0 and
// gradient norm 0 every step without a word: it is said once.
TEST_F(ProgramsTest, TrainSaysOnceWhenNoPositionCountsTowardTheLoss) {
  const std::string data = dir_ + "/all_eot.h5";
  {
    auto writer = TokenDatasetWriter::Create(data, test::kByteVocab);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int i = 0; i < 2000; ++i) {
      ASSERT_TRUE((*writer)->AppendDocument({}).ok());
    }
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  std::vector<std::string> args = TinyFlags(data);
  args.push_back("--eod_mask_loss");
  const ProgramResult r = RunProgram("train", args, dir_);
  const std::string what = Describe("train", args, r);
  EXPECT_TRUE(r.exited && r.exit_code == 0) << what;
  const std::string said = "warning: --eod_mask_loss: a global batch";
  ASSERT_NE(r.err.find(said), std::string::npos) << what;
  EXPECT_EQ(r.err.find(said, r.err.find(said) + 1), std::string::npos)
      << "said more than once: " << what;
  EXPECT_THAT(r.err, HasSubstr("no position counts toward its loss")) << what;
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

// Resumed, it gave up again at step 1, said "saved step 1" and kept the
// first save ("already exists"), losing the data position reached since.
TEST_F(ProgramsTest, TrainGivingUpTwiceKeepsTheLaterPosition) {
  const std::string ck = dir_ + "/ck";
  const std::vector<std::string> args = {"--steps=6", "--max_skipped_steps=2",
                                         "--save_dir=" + ck, "--resume=auto"};
  const std::vector<std::string> said = {"2 consecutive steps skipped",
                                         "saved step 1"};
  setenv("TRELLIS_TEST_INJECT_NAN", "2+:0", 1);
  Train(args, said);
  const absl::StatusOr<TrainingState> first =
      ReadTrainingState(ck + "/step_00000001");
  Train(args, said);
  unsetenv("TRELLIS_TEST_INJECT_NAN");
  const absl::StatusOr<TrainingState> second =
      ReadTrainingState(ck + "/step_00000001");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_GT(second->samples_consumed, first->samples_consumed);
}

// A `latest` that is a directory failed the run's last save, after all its
// training: it is refused before the first step.
TEST_F(ProgramsTest, TrainRefusesALatestThatIsNotAFile) {
  const std::string ck = dir_ + "/ck_latest";
  fs::create_directories(ck + "/latest");
  Train({"--steps=2", "--save_dir=" + ck}, {ck + "/latest", "not a file"});
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

// Converting a model over itself removed the original before the new
// files were whole (a full disk midway lost both): refused before reading,
// however the same path is spelled, and the input is left as it was.
TEST_F(ProgramsTest, ConvertRefusesToWriteOverItsInput) {
  const std::string ckpt = MakeCheckpoint();
  const std::string before = DirListing(ckpt);
  for (const std::string& output :
       {ckpt, ckpt + "/", ckpt + "/../" + fs::path(ckpt).filename().string()}) {
    ExpectError("convert", {"--input=" + ckpt, "--to=hf", "--output=" + output},
                {"--output=" + output, "is --input itself"});
  }
  EXPECT_EQ(DirListing(ckpt), before);
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
  ExpectError("eval",
              {"--load=" + ckpt, "--data=" + byte_data_, "--max_windows=-1"},
              {"--max_windows=-1", "at least 0"});
  const std::string text = dir_ + "/text.h5";
  std::ofstream(text) << "plain text\n";
  ExpectError("eval", {"--load=" + ckpt, "--data=" + text}, {text});
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
  ExpectError("bench", {"--loss_chunk_rows=-2"}, {"--loss_chunk_rows=-2"});
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

// A directory where a file belongs is said to be one, in one line naming
// the flag: state.json as a directory aborted trellis-eval with an
// uncaught stream exception, readers reported "truncated: 4096 bytes", and
// --input said "no such file".
TEST_F(ProgramsTest, DirectoriesWhereFilesBelongAreSaidSo) {
  const std::string text = dir_ + "/a.txt";
  std::ofstream(text) << "Some text.\n";
  const std::string folder = dir_ + "/folder";
  fs::create_directories(folder);
  const std::string out = dir_ + "/out.h5";
  ExpectError("preprocess", {"--input=" + folder, "--output=" + out},
              {"--input " + folder, "is a directory", "glob"});
  ExpectError(
      "preprocess",
      {"--input=" + text, "--output=" + out, "--tokenizer=hf:" + folder},
      {"is a directory", "--tokenizer=hf:" + folder + "/tokenizer.json"});
  ExpectError("preprocess",
              {"--input=" + text, "--output=" + out,
               "--tokenizer=sentencepiece:" + folder},
              {folder, "is a directory"});
  const std::string ck = dir_ + "/ck";
  fs::create_directories(ck + "/state.json");
  ExpectError("eval", {"--load=" + ck, "--data=" + text},
              {ck + "/state.json is a directory"});
  ExpectError("generate", {"--load=" + folder, "--prompt=hi"},
              {"--load=" + folder});
  const std::string hf = dir_ + "/hf";
  fs::create_directories(hf + "/model.safetensors");
  ExpectError("convert", {"--input=" + hf, "--to=trellis", "--output=x"},
              {hf + "/model.safetensors is a directory"});
  ExpectError(
      "convert",
      {"--input=" + folder, "--from=llmc", "--to=trellis", "--output=y"},
      {folder + " is a directory, not an llm.c"});
  fs::create_directories(dir_ + "/cluster.json");
  ExpectError("plan", {"--cluster=" + dir_ + "/cluster.json"},
              {"--cluster", "is a directory"});
  EXPECT_FALSE(fs::exists(out));
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
