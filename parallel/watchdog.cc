#include "parallel/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "framework/status.h"
#include "parallel/mpi_communicator.h"

namespace trellis {
namespace {

constexpr int kNoticeTag = 1;
constexpr int kAnswerTag = 2;
constexpr double kGatherSeconds = 3.0;
constexpr double kHoldOffSeconds = 30.0;

std::string Hostname() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

GroupCounts ParseCounts(const std::string& text) {
  GroupCounts counts;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    int64_t count = 0;
    if (parts.size() == 2 && absl::SimpleAtoi(parts[1], &count)) {
      counts[std::string(parts[0])] = count;
    }
  }
  return counts;
}

[[noreturn]] void AbortJob() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

}  // namespace

absl::StatusOr<CommFault> ParseCommFault(absl::string_view text) {
  CommFault fault;
  if (text.empty()) return fault;
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &fault.rank) ||
      !absl::SimpleAtoi(parts[2], &fault.seq) || parts[1].empty() ||
      fault.rank < 0 || fault.seq < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("communication fault \"", text,
                     "\" is not RANK:GROUP:SEQ (e.g. 2:dp:5)"));
  }
  fault.group = std::string(parts[1]);
  return fault;
}

absl::Status WatchdogOptions::ReadTestFaults() {
  for (auto [name, fault] :
       {std::pair{"TRELLIS_TEST_SKIP_COLLECTIVE", &skip},
        std::pair{"TRELLIS_TEST_STOP_COLLECTIVE", &stop}}) {
    const char* value = std::getenv(name);
    absl::StatusOr<CommFault> parsed =
        ParseCommFault(value == nullptr ? "" : value);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": ", parsed.status().message()));
    }
    *fault = *parsed;
  }
  return absl::OkStatus();
}

std::string DescribeLag(const std::string& group, int64_t seq,
                        const std::vector<int>& members, int self, int world,
                        const std::map<int, GroupCounts>& answers) {
  std::vector<std::string> lagging;
  for (int m : members) {
    if (m == self) continue;
    auto it = answers.find(m);
    if (it == answers.end()) continue;
    auto count = it->second.find(group);
    const int64_t issued = count == it->second.end() ? 0 : count->second;
    if (issued <= seq) {
      lagging.push_back(absl::StrCat("rank ", m, " (issued ", issued, ")"));
    }
  }
  std::vector<int> silent;
  for (int r = 0; r < world; ++r) {
    if (r != self && answers.find(r) == answers.end()) silent.push_back(r);
  }
  std::string text =
      lagging.empty()
          ? absl::StrCat("no answering member of ", group, " lags")
          : absl::StrCat("lagging on ", group, " (has not issued seq ", seq,
                         "): ", absl::StrJoin(lagging, ", "));
  if (!silent.empty()) {
    absl::StrAppend(&text, "; no answer from rank",
                    silent.size() > 1 ? "s " : " ", absl::StrJoin(silent, ", "),
                    " (stopped, or busy outside a watched wait)");
  }
  return text;
}

Watchdog::Watchdog(WatchdogOptions options, MPI_Comm world)
    : options_(std::move(options)), hostname_(Hostname()) {
  TRELLIS_CHECK_GT(options_.timeout_s, 0.0) << "watchdog timeout";
  if (world == MPI_COMM_NULL) return;
  TRELLIS_MPI_CHECK(MPI_Comm_dup(world, &side_));
  TRELLIS_MPI_CHECK(MPI_Comm_set_errhandler(side_, MPI_ERRORS_RETURN));
  TRELLIS_MPI_CHECK(MPI_Comm_rank(side_, &rank_));
  TRELLIS_MPI_CHECK(MPI_Comm_size(side_, &world_));
}

Watchdog::~Watchdog() {
  if (side_ != MPI_COMM_NULL) MPI_Comm_free(&side_);
}

void Watchdog::AddGroup(const std::string& name, std::vector<int> members) {
  members_[name] = std::move(members);
  issued_.emplace(name, 0);
}

int64_t Watchdog::NextSeq(const std::string& group) const {
  auto it = issued_.find(group);
  return it == issued_.end() ? 0 : it->second;
}

bool Watchdog::TakeSkipFault(const std::string& group, int64_t seq) {
  if (skip_taken_ || !options_.skip.Matches(rank_, group, seq)) return false;
  skip_taken_ = true;
  return true;
}

int64_t Watchdog::Start(const std::string& group, CommOp op, int peer,
                        int64_t bytes, bool skipped) {
  FlightRecord record;
  record.group = group;
  record.op = CommOpName(op);
  record.peer = peer;
  record.bytes = bytes;
  record.seq = NextSeq(group);
  record.state =
      skipped ? FlightRecord::State::kSkipped : FlightRecord::State::kWaiting;
  if (!skipped) ++issued_[group];
  return recorder_.Begin(std::move(record));
}

absl::Status Watchdog::Await(Request& request, int64_t id) {
  const Clock::time_point start = Clock::now();
  const auto timeout = std::chrono::duration<double>(options_.timeout_s);
  int64_t polls = 0;
  std::chrono::microseconds sleep(10);
  while (!request.Poll()) {
    ++polls;
    if (polls < 64) {
      std::this_thread::yield();
      continue;
    }
    if (polls % 16 == 0) AnswerNotices();
    const Clock::time_point now = Clock::now();
    const bool held_off =
        noticed_any_ &&
        now - noticed_ < std::chrono::duration<double>(kHoldOffSeconds);
    if (now - start > timeout && !held_off) {
      const std::optional<FlightRecord> record = recorder_.Find(id);
      return absl::DeadlineExceededError(absl::StrCat(
          "waited more than ", options_.timeout_s, " s on ",
          record ? absl::StrCat(record->op, " seq ", record->seq, " of group ",
                                record->group, " (peer ", record->peer, ")")
                 : absl::StrCat("operation #", id)));
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(250));
  }
  return absl::OkStatus();
}

std::string Watchdog::CountsText() const {
  std::string text;
  for (const auto& [group, count] : issued_) {
    absl::StrAppend(&text, group, " ", count, "\n");
  }
  return text;
}

absl::StatusOr<std::string> Watchdog::Dump(const std::string& reason) {
  dumped_ = true;
  nlohmann::json issued = nlohmann::json::object();
  for (const auto& [group, count] : issued_) issued[group] = count;
  return WriteDump(reason, issued);
}

absl::StatusOr<std::string> Watchdog::WriteDump(
    const std::string& reason, const nlohmann::json& issued) const {
  const nlohmann::json dump = {
      {"rank", rank_},    {"host", hostname_},
      {"reason", reason}, {"time_unix_s", UnixSeconds()},
      {"issued", issued}, {"operations", recorder_.ToJson()}};
  std::cerr << "flight recorder of rank " << rank_ << " on " << hostname_
            << " (" << reason << "), oldest first:\n"
            << recorder_.ToText() << "flight recorder of rank " << rank_
            << " as JSON: " << dump.dump() << std::endl;
  namespace fs = std::filesystem;
  const fs::path dir = options_.dump_dir.empty() ? "." : options_.dump_dir;
  const fs::path path = dir / absl::StrCat("flight_", rank_, ".json");
  const fs::path temporary = dir / absl::StrCat(".flight_", rank_, ".tmp");
  std::error_code error;
  fs::create_directories(dir, error);
  {
    std::ofstream out(temporary);
    out << dump.dump(1) << "\n";
    if (!out.good()) {
      return absl::UnavailableError(
          absl::StrCat("cannot write ", temporary.string()));
    }
  }
  fs::rename(temporary, path, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat(
        "cannot rename ", temporary.string(), ": ", error.message()));
  }
  return path.string();
}

bool Watchdog::AnswerNotices() {
  if (side_ == MPI_COMM_NULL) return false;
  bool any = false;
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kNoticeTag, side_, &flag, &status) !=
            MPI_SUCCESS ||
        !flag) {
      break;
    }
    int from = -1;
    MPI_Recv(&from, 1, MPI_INT, status.MPI_SOURCE, kNoticeTag, side_,
             MPI_STATUS_IGNORE);
    any = true;
    if (!dumped_) {
      absl::StatusOr<std::string> path =
          Dump(absl::StrCat("rank ", from, " timed out"));
      if (!path.ok()) std::cerr << path.status().message() << std::endl;
    }
    const std::string counts = CountsText();
    MPI_Send(counts.data(), static_cast<int>(counts.size()), MPI_CHAR,
             status.MPI_SOURCE, kAnswerTag, side_);
    noticed_ = Clock::now();
    noticed_any_ = true;
  }
  return any;
}

std::map<int, GroupCounts> Watchdog::GatherAnswers() {
  std::map<int, GroupCounts> answers;
  if (side_ == MPI_COMM_NULL) return answers;
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    MPI_Request request;
    if (MPI_Isend(&rank_, 1, MPI_INT, r, kNoticeTag, side_, &request) ==
        MPI_SUCCESS) {
      MPI_Request_free(&request);
    }
  }
  const Clock::time_point until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(kGatherSeconds));
  while (static_cast<int>(answers.size()) < world_ - 1 &&
         Clock::now() < until) {
    AnswerNotices();
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, side_, &flag, &status) !=
        MPI_SUCCESS) {
      break;
    }
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    int length = 0;
    MPI_Get_count(&status, MPI_CHAR, &length);
    std::string text(static_cast<size_t>(std::max(length, 0)), '\0');
    MPI_Recv(text.data(), length, MPI_CHAR, status.MPI_SOURCE, kAnswerTag,
             side_, MPI_STATUS_IGNORE);
    answers[status.MPI_SOURCE] = ParseCounts(text);
  }
  return answers;
}

void Watchdog::Fail(int64_t id) {
  const std::optional<FlightRecord> record = recorder_.Find(id);
  const std::string group = record ? record->group : "?";
  const int64_t seq = record ? record->seq : -1;
  const std::map<int, GroupCounts> answers = GatherAnswers();
  std::string lag;
  if (side_ != MPI_COMM_NULL) {
    auto members = members_.find(group);
    lag = DescribeLag(
        group, seq,
        members == members_.end() ? std::vector<int>{} : members->second, rank_,
        world_, answers);
  }
  std::string line =
      absl::StrCat("watchdog: rank ", rank_, " on ", hostname_,
                   " waited more than ", options_.timeout_s, " s on ",
                   record ? absl::StrCat(record->op, " seq ", seq, " of group ",
                                         group, " (peer ", record->peer, ", ",
                                         record->bytes, " bytes)")
                          : absl::StrCat("operation #", id));
  if (!lag.empty()) absl::StrAppend(&line, "; ", lag);
  absl::StatusOr<std::string> path = Dump(line);
  absl::StrAppend(&line, path.ok() ? "; flight recorder in " : "; ",
                  path.ok() ? *path : path.status().message(),
                  " (--comm_timeout_s sets the deadline)");
  std::cerr << line << std::endl;
  AbortJob();
}

void Watchdog::WatchDevice(int64_t id, Device device) {
  CompletionProbe probe = DeviceCompletionProbe(device);
  if (probe == nullptr) {
    recorder_.Finish(id);  // CPU work is done when issued
    return;
  }
  WatchDevice(id, std::move(probe));
}

void Watchdog::WatchDevice(int64_t id, CompletionProbe probe) {
  if (device_monitor_ == nullptr) {
    device_monitor_ = std::make_unique<DeviceWaitMonitor>(
        options_.timeout_s, [this](int64_t done) { recorder_.Finish(done); },
        [this](int64_t late, double waited_s) { FailDevice(late, waited_s); });
  }
  device_monitor_->Watch(id, std::move(probe));
}

void Watchdog::FailDevice(int64_t id, double waited_s) {
  const std::optional<FlightRecord> record = recorder_.Find(id);
  std::string line = absl::StrCat(
      "watchdog: rank ", rank_, " on ", hostname_, ": the device work behind ",
      record ? absl::StrCat(record->op, " seq ", record->seq, " of group ",
                            record->group, " (peer ", record->peer, ", ",
                            record->bytes, " bytes)")
             : absl::StrCat("operation #", id),
      " has not finished after ", absl::StrFormat("%.1f", waited_s),
      " s (a GPU collective some peer never joined, or a hung kernel)");
  absl::StatusOr<std::string> path = WriteDump(line, nullptr);
  absl::StrAppend(&line, path.ok() ? "; flight recorder in " : "; ",
                  path.ok() ? *path : path.status().message(),
                  " (--comm_timeout_s sets the deadline)");
  std::cerr << line << std::endl;
  // This thread may not call MPI (MPI_THREAD_FUNNELED): the process ends,
  // and the launcher ends the job.
  std::_Exit(1);
}

}  // namespace trellis
