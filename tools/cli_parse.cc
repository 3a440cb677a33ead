// See cli_parse.h.
#include "tools/cli_parse.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>

#include "tools/cli_util.h"

namespace kvfs::cli {

int UsageError(const std::string& prog, const std::string& msg) {
  std::string one = msg;
  std::replace(one.begin(), one.end(), '\n', ' ');
  while (!one.empty() && one.back() == ' ') one.pop_back();
  std::fprintf(stderr, "%s: %s (see %s --help)\n", prog.c_str(), one.c_str(), prog.c_str());
  return kExitUsage;
}

int Parse(CLI::App* app, const std::string& prog, std::vector<std::string> args) {
  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments reversed
    app->parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app->exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app->exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app->exit(e);
  } catch (const CLI::ParseError& e) {
    return UsageError(prog, e.what());
  }
  return -1;
}

const CLI::Validator& NonNegativeSeconds() {
  static const CLI::Validator v(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(d) || d < 0 || d > 1e9) {
          return "'" + s + "' is not a number of seconds (>= 0)";
        }
        return std::string();
      },
      "SECONDS>=0");
  return v;
}

}  // namespace kvfs::cli
