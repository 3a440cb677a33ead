// Command-line parsing shared by the kvfs tools (kvfs, kvfs-fsck, kvfs-bench), so that a bad command line
// reads the same everywhere: ONE line on stderr, "PROG: WHAT (see PROG --help)", and exit status 2
// (docs/operations.md, "Exit codes"). kvfs and kvfs-fsck parse with CLI11 (Parse); kvfs-bench keeps its
// own loop (its --kvfs-arg values start with "--", which CLI11 would take for flags) and reports with
// UsageError.
//
// Thread safety: single-threaded CLI code.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace kvfs::cli {

// Prints "PROG: MSG (see PROG --help)" on stderr, newlines in MSG turned into spaces (one line).
// Returns 2 (kExitUsage).
int UsageError(const std::string& prog, const std::string& msg);

// app->parse of args (the arguments after the program name, in order). Returns -1 when they parsed;
// otherwise the exit status main should return: 0 after CLI11 printed --help / --help-all / --version,
// 2 after a UsageError line for any CLI11 parse error (unknown flag, missing value, failed check).
int Parse(CLI::App* app, const std::string& prog, std::vector<std::string> args);

// CLI11 check for a duration in seconds: a finite number, >= 0 and <= 10^9 ("-3", "nan", "inf" fail).
const CLI::Validator& NonNegativeSeconds();

}  // namespace kvfs::cli
