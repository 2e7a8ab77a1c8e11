#include "tools/trainer/health/stop_signals.h"

#include <atomic>
#include <csignal>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trellis {
namespace {

// The one piece of process-wide state: what a signal handler may touch.
std::atomic<int> received{0};
static_assert(std::atomic<int>::is_always_lock_free);

void OnSignal(int signal) { received.store(signal); }

const std::map<std::string, int>& KnownSignals() {
  static const auto* const kSignals = new std::map<std::string, int>{
      {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM},
      {"INT", SIGINT},   {"HUP", SIGHUP},   {"CONT", SIGCONT}};
  return *kSignals;
}

}  // namespace

std::string SignalName(int signal) {
  for (const auto& [name, number] : KnownSignals()) {
    if (number == signal) return "SIG" + name;
  }
  return absl::StrCat("signal ", signal);
}

absl::Status InstallStopSignals(const std::string& names) {
  const std::map<std::string, int>& kSignals = KnownSignals();
  std::set<int> wanted;
  for (absl::string_view piece :
       absl::StrSplit(names, ',', absl::SkipEmpty())) {
    std::string name(piece);
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    auto it = kSignals.find(name);
    if (it == kSignals.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--stop_signals: unknown signal '", std::string(piece),
                       "'; use names such as USR1,TERM"));
    }
    wanted.insert(it->second);
  }
  // The process's stop signals (only main threads install them).
  static std::set<int>* const installed = new std::set<int>();
  for (const int signal : *installed) {
    if (wanted.count(signal) == 0) std::signal(signal, SIG_DFL);
  }
  for (const int signal : wanted) {
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(signal, &action, nullptr);
  }
  *installed = std::move(wanted);
  return absl::OkStatus();
}

int StopSignalReceived() { return received.load(); }

}  // namespace trellis
