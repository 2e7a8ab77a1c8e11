#include "tools/options/program_help.h"

#include <cstdio>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tools/options/options.h"

namespace trellis {
namespace {

// The groups in the order help lists them; the program's own flags last.
constexpr const char* kGroups[] = {"model",        "data",        "batch",
                                   "optimization", "checkpoints", "logging",
                                   "layout",       "device"};

// Option name → group, from the option lists.
std::map<std::string, std::string> GroupOfOption() {
  std::map<std::string, std::string> group;
#define TRELLIS_OPTION_GROUP(g, type, name, value, help) \
  group[#name] = absl::AsciiStrToLower(#g);
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_OPTION_GROUP)
  TRELLIS_RUN_OPTIONS(TRELLIS_OPTION_GROUP)
  TRELLIS_PARALLEL_OPTIONS(TRELLIS_OPTION_GROUP)
#undef TRELLIS_OPTION_GROUP
  return group;
}

// The flags the project defines (its programs' and the trainer's), not
// the libraries' (absl's own --flagfile and the like).
bool ProjectFlag(const absl::CommandLineFlag& flag) {
  return absl::StrContains(flag.Filename(), "tools/") && !flag.IsRetired();
}

std::string Entry(const absl::CommandLineFlag& flag) {
  std::string value = flag.DefaultValue();
  if (value.empty()) value = "''";
  return absl::StrCat("  --", flag.Name(), "=", value, "\n      ", flag.Help(),
                      "\n");
}

}  // namespace

std::string ProgramHelp(const std::string& usage) {
  const std::map<std::string, std::string> group_of = GroupOfOption();
  // group → flag name → entry (sorted by name within a group).
  std::map<std::string, std::map<std::string, std::string>> groups;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!ProjectFlag(*flag)) continue;
    auto it = group_of.find(std::string(name));
    const std::string group = it == group_of.end() ? "" : it->second;
    groups[group][std::string(name)] = Entry(*flag);
  }
  std::string out = usage + "\n";
  auto print = [&](const std::string& group, const std::string& title) {
    auto it = groups.find(group);
    if (it == groups.end()) return;
    absl::StrAppend(&out, "\n", title, ":\n");
    for (const auto& [name, entry] : it->second) out += entry;
  };
  for (const char* group : kGroups) print(group, group);
  print("", "this program");
  absl::StrAppend(&out,
                  "\n--flagfile=FILE reads flags from FILE (e.g. "
                  "configs/tiny.flags); later flags override it. "
                  "--helpfull lists every flag, libraries' too.\n");
  return out;
}

bool PrintHelpIfAsked(int argc, char** argv, const std::string& usage) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "--helpshort" ||
        arg == "-helpshort" || arg == "-h") {
      std::fputs(ProgramHelp(usage).c_str(), stdout);
      std::fflush(stdout);
      return true;
    }
  }
  return false;
}

}  // namespace trellis
