// What `kvfs mount` refuses or warns about before it starts (tools/mount_checks.h).
#define FUSE_USE_VERSION 312
#include "tools/mount_checks.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <tuple>

#include "tools/cli_util.h"
#include "tools/size_parse.h"

namespace kvfs::cli {

bool CheckFuseOptions(const std::vector<std::string>& opts, std::string* err) {
  static std::string* captured = nullptr;
  std::string msgs;
  captured = &msgs;
  fuse_set_log_func([](enum fuse_log_level, const char* fmt, va_list ap) {
    char buf[1024];
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    if (captured) *captured += buf;
  });
  std::string o = "fsname=kvfs,subtype=kvfs";
  for (const auto& x : opts) {
    if (!x.empty()) o += "," + x;
  }
  std::vector<std::string> argv_s = {"kvfs", "-o", o};
  std::vector<char*> argv;
  for (auto& x : argv_s) argv.push_back(x.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  static const fuse_lowlevel_ops no_ops{};
  fuse_session* se = fuse_session_new(&args, &no_ops, sizeof(no_ops), nullptr);
  fuse_opt_free_args(&args);
  if (se) fuse_session_destroy(se);
  fuse_set_log_func(nullptr);  // back to libfuse's default (stderr)
  captured = nullptr;
  if (se) return true;
  for (auto& ch : msgs) {
    if (ch == '\n') ch = ' ';
  }
  while (!msgs.empty() && msgs.back() == ' ') msgs.pop_back();
  if (msgs.rfind("fuse: ", 0) == 0) msgs = msgs.substr(6);
  *err = "bad -o option: " + (msgs.empty() ? o : msgs);
  return false;
}

uint64_t SizeOrDie(const std::string& what, const std::string& text) {
  uint64_t v = 0;
  std::string err;
  if (!kvfs::ParseSize(text, &v, &err)) Die(kExitUsage, what + ": " + err);
  return v;
}

std::string HumanSize(uint64_t b) {
  static const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int i = 0;
  while (v >= 1024 && i < 5) v /= 1024, ++i;
  char buf[64];
  std::snprintf(buf, sizeof(buf), i == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[i]);
  return buf;
}

namespace {

uint64_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace

std::string BareHint(const std::string& text, const char* unit) {
  const bool bare = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == ' ';
  });
  return bare ? " (a number without a unit is bytes: write e.g. " + text + unit + ")" : "";
}

void CheckSizes(const MountArgs& a, uint64_t segment, uint64_t cache, uint64_t staging, uint64_t capacity,
                uint64_t high) {
  const std::string seg_text = a.segment_size.empty() ? HumanSize(segment) : a.segment_size;
  if (segment > kMaxSegmentSize) {
    Die(kExitUsage, "--segment-size " + seg_text + " is over the limit of " + HumanSize(kMaxSegmentSize));
  }
  if (segment > (4ull << 30)) {
    Warn("--segment-size " + seg_text + ": eviction and reclamation free whole segments of " +
         HumanSize(segment));
  }
  const uint64_t ram = PhysicalMemory();
  for (const auto& [flag, text, v] : {std::tuple{"--cache-size", a.cache_size, cache},
                                      std::tuple{"--staging-size", a.staging_size, staging}}) {
    if (ram && v > ram) {
      Die(kExitUsage, std::string(flag) + " " + text + " (" + HumanSize(v) + ") is more than this machine's memory (" +
                          HumanSize(ram) + ")");
    }
    if (ram && v > ram / 2) {
      Warn(std::string(flag) + " " + text + " is more than half of this machine's memory (" + HumanSize(ram) + ")");
    }
    if (v < (1u << 20) && !BareHint(text).empty()) {
      Warn(std::string(flag) + " " + text + " is " + HumanSize(v) + BareHint(text, "MiB"));
    }
  }
  if (ram && cache <= ram / 2 && staging <= ram / 2 && cache + staging > ram * 3 / 4) {
    Warn("--cache-size and --staging-size together (" + HumanSize(cache + staging) + ") are more than 3/4 of this "
         "machine's memory (" + HumanSize(ram) + ")");
  }
  for (const auto& [flag, text, v] : {std::tuple{"--capacity", a.capacity, capacity},
                                      std::tuple{"--high-watermark", a.high_watermark, high}}) {
    if (v == 0 && text.empty()) continue;
    if (v < kMinSegments * segment) {
      Die(kExitUsage, std::string(flag) + " " + text + " (" + HumanSize(v) + ") is less than " +
                          std::to_string(kMinSegments) + " segments of --segment-size " + HumanSize(segment) +
                          ": eviction would empty the cache at every write" + BareHint(text));
    }
    if (v < kFewSegments * segment) {
      Warn(std::string(flag) + " " + text + " holds only " + std::to_string(v / segment) + " segments of " +
           HumanSize(segment) + ": each eviction drops a large part of the cache (a smaller --segment-size helps)");
    }
  }
}

std::string FuseMountProblem(const std::vector<std::string>& fopts, const std::string& mountpoint) {
  int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  const int open_errno = errno;
  if (fd >= 0) close(fd);
  if (geteuid() == 0) {
    if (fd < 0) {
      return std::string("cannot open /dev/fuse: ") + strerror(open_errno) +
             (open_errno == ENOENT ? " (load the fuse module: modprobe fuse)" : "");
    }
    return "";
  }
  std::string fusermount;
  for (const char* p : {"/usr/bin/fusermount3", "/bin/fusermount3", "/usr/local/bin/fusermount3"}) {
    if (access(p, X_OK) == 0) {
      fusermount = p;
      break;
    }
  }
  struct stat st {};
  const bool setuid_root = !fusermount.empty() && stat(fusermount.c_str(), &st) == 0 && st.st_uid == 0 &&
                           (st.st_mode & S_ISUID);
  if (!setuid_root) {
    if (fusermount.empty()) return "a mount by a non-root user needs fusermount3 (package fuse3); it is not installed";
    return "a mount by a non-root user needs " + fusermount + " setuid root, and it is not";
  }
  if (std::find(fopts.begin(), fopts.end(), "allow_other") != fopts.end()) {
    bool allowed = false;
    std::ifstream conf("/etc/fuse.conf");
    std::string line;
    while (std::getline(conf, line)) {
      line.erase(0, line.find_first_not_of(" \t"));
      if (line.rfind("user_allow_other", 0) == 0) allowed = true;
    }
    if (!allowed) {
      return "-o allow_other (a default) needs 'user_allow_other' in /etc/fuse.conf for a mount by a non-root "
             "user: add that line, mount as root, or give -o default_permissions (then only this user sees "
             "the files)";
    }
  }
  if (access(mountpoint.c_str(), W_OK) != 0) {
    return "a non-root user can mount only on a directory it may write; '" + mountpoint + "': " + strerror(errno);
  }
  return "";
}

}  // namespace kvfs::cli
