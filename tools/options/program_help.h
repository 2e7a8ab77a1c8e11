// --help for the programs: every flag a program defines, grouped as the
// option lists group them (model, data, batch, optimization, checkpoints,
// logging, layout, device; see tools/options/options.h), then the
// program's own, each with its default and its one-line description.
//
// A program calls PrintHelpIfAsked(argc, argv, usage) before
// absl::ParseCommandLine; it prints and returns true when the arguments
// ask for help (--help, -help, --helpshort, -h), and the program then
// exits 0. --helpfull keeps absl's listing of every flag, libraries' too.
//
// Thread safety: call from main, before other threads exist.
#ifndef TRELLIS_TOOLS_OPTIONS_PROGRAM_HELP_H_
#define TRELLIS_TOOLS_OPTIONS_PROGRAM_HELP_H_

#include <string>

namespace trellis {

// The help text of the running program: `usage`, then its flags by group.
std::string ProgramHelp(const std::string& usage);

// Prints ProgramHelp(usage) to stdout when an argument asks for help.
bool PrintHelpIfAsked(int argc, char** argv, const std::string& usage);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_OPTIONS_PROGRAM_HELP_H_
