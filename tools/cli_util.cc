// Helpers of the kvfs subcommands (tools/cli_util.h).
#include "tools/cli_util.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kvfs::cli {

[[noreturn]] void Die(int code, const std::string& msg) {
  std::fprintf(stderr, "kvfs: %s\n", msg.c_str());
  std::exit(code);
}

// Something merely unusual in the options: one line on the terminal, the mount goes on.
void Warn(const std::string& msg) { std::fprintf(stderr, "kvfs: warning: %s\n", msg.c_str()); }

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  if (!realpath(p.c_str(), buf)) return p;
  return buf;
}

bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The file system type of the mount at `path` (a real path) in /proc/self/mountinfo ("" if none):
// the field after " - ".
std::string MountFsType(const std::string& path) {
  std::ifstream f("/proc/self/mountinfo");
  std::string line, type;
  while (std::getline(f, line)) {
    size_t p = 0;
    for (int i = 0; i < 4 && p != std::string::npos; ++i) p = line.find(' ', p + 1);
    if (p == std::string::npos) continue;
    size_t e = line.find(' ', p + 1);
    std::string mp = line.substr(p + 1, e - p - 1), un;
    for (size_t i = 0; i < mp.size(); ++i) {
      if (mp[i] == '\\' && i + 3 < mp.size()) {
        un.push_back(static_cast<char>(std::stoi(mp.substr(i + 1, 3), nullptr, 8)));
        i += 3;
      } else {
        un.push_back(mp[i]);
      }
    }
    const size_t dash = line.find(" - ");
    if (un == path && dash != std::string::npos) {
      const size_t t = dash + 3;
      type = line.substr(t, line.find(' ', t) - t);  // the last mount on path wins
    }
  }
  return type;
}

// True if `path` (a real path) is a mount point in /proc/self/mountinfo.
bool IsMountPoint(const std::string& path) { return !MountFsType(path).empty(); }

bool DirEmpty(const std::string& p) {
  std::error_code ec;
  return std::filesystem::directory_iterator(p, ec) == std::filesystem::directory_iterator() && !ec;
}

bool ReadXattr(const std::string& path, const char* name, std::string* out) {
  std::vector<char> buf(1 << 16);
  for (;;) {
    ssize_t n = getxattr(path.c_str(), name, buf.data(), buf.size());
    if (n >= 0) {
      out->assign(buf.data(), static_cast<size_t>(n));
      return true;
    }
    if (errno != ERANGE) return false;
    buf.resize(buf.size() * 4);
  }
}

std::string CloseStatusPath(pid_t pid) {
  std::string dir = access("/run", W_OK) == 0 ? "/run/kvfs" : "/tmp/kvfs-" + std::to_string(getuid());
  return dir + "/close-" + std::to_string(pid);
}

}  // namespace kvfs::cli
