// kvfs: mount / umount / stats.
//
//   kvfs mount MOUNTPOINT --backing DIR [--node-id ID] [--index-dir DIR] [--cache-size SIZE] [--staging-size SIZE]
//              [--segment-size SIZE] [--foreground] [--threads N] [--group-commit-ms N] [--direct-io]
//              [--force] [--splice] [--peer-poll-ms N] [--peer-direct-io] [-o OPTS]...
//              [--log-level LEVEL] [--config FILE]
//              [--capacity SIZE] [--high-watermark SIZE] [--low-watermark SIZE]
//              [--metrics-listen HOST:PORT]
//              [--checkpoint-entries N] [--checkpoint-interval-ms N] [--peers-publish-ms N]
//              [--backing-mode MODE] [--log-file PATH] [--log-max-size SIZE]
//   kvfs umount MOUNTPOINT [--timeout SECONDS]      (a dead mount of a killed daemon: lazy unmount)
//   kvfs stats MOUNTPOINT [--json]
//
// mount daemonises by default. Because the Store starts threads (group commit, heartbeat, RocksDB)
// and fork(2) keeps only the calling thread, the process forks FIRST: the child opens the Store and
// mounts, then reports success or a one-line error through a pipe; the parent prints the error and exits
// with the child's code, so `kvfs mount` fails with a clear message and exit 2 for usage errors
// (missing backing dir, bad mountpoint, index dir in use, unknown flag, bad size).
//
// systemd (kvfs@.service, Type=notify): with NOTIFY_SOCKET set (sd_notify(3); a no-op otherwise) the
// daemon sends READY=1 once the FUSE session is mounted and about to serve, and STOPPING=1 when the
// session ends (unmount or SIGTERM), before the final flush (Store::Close).
//
// The daemon answers two virtual xattrs on the mount root (hidden from listxattr):
//   user.kvfs.pid    the daemon's pid (kvfs umount waits for it to exit after fusermount3 -u)
//   user.kvfs.stats  one JSON object of Store and FUSE counters (kvfs stats)
#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <malloc.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "blockstore/format.h"
#include "blockstore/deadline_env.h"
#include "blockstore/node_dir.h"
#include "blockstore/fault_env.h"
#include "fuse/kvfs_fs.h"
#include "engine/store.h"
#include "fuse/stats_render.h"
#include "tools/build_info.h"
#include "tools/fuse_options.h"
#include "tools/metrics_server.h"
#include "tools/node_cmd.h"
#include "tools/size_parse.h"

namespace {

constexpr int kExitUsage = 2;  // bad invocation or environment the user can fix
constexpr int kExitFail = 1;   // runtime failure

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

// ---- TEST ONLY: simulated power cut and backing failures (tests/integration/crash_test.py) ----
// With KVFS_TEST_POWER_CUT_SIGNAL=1 in the daemon's environment, every backing request goes through a
// FaultInjectionEnv (blockstore/fault_env.h), and two signals act on it:
//   SIGUSR2  a power cut or an NFS client crash at that moment: new backing requests hang, requests
//            already in flight get kPowerCutGraceMs to finish, every write not yet made durable is dropped
//            (files cut back to their last fdatasync'ed length, files and renames whose directory was not
//            synced undone), and the process _exit()s at once with kPowerCutExitCode, flushing nothing.
//            SIGKILL alone cannot show this: the page cache survives it.
//   SIGUSR1  toggles a backing failure: while on, every backing write and fdatasync fails with EIO
//            (docs/design.md §11 case 9 "a fault-injection switch"); off again, the export works as before.
// Not a user feature; not documented in --help.
constexpr const char* kPowerCutEnvVar = "KVFS_TEST_POWER_CUT_SIGNAL";
constexpr int kPowerCutExitCode = 86;
constexpr int kPowerCutGraceMs = 100;

// Call in the process's main thread before any other thread starts (they inherit the signal mask).
kvfs::Env* StartPowerCutSimulation() {
  static kvfs::FaultInjectionEnv* env = new kvfs::FaultInjectionEnv(kvfs::Env::Posix());
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    bool failing = false;
    std::vector<int> rules;
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (sig == SIGUSR1) {
        failing = !failing;
        if (failing) {
          rules = {env->FailWrites(EIO), env->FailSyncs(EIO)};
        } else {
          for (int id : rules) env->RemoveFault(id);
          rules.clear();
        }
        std::fprintf(stderr, "kvfs: TEST backing failure switch %s\n", failing ? "ON (EIO)" : "off");
        continue;
      }
      break;  // SIGUSR2
    }
    env->Hang(std::chrono::hours(24), kvfs::kFaultAll);  // freeze: nothing new reaches the disk
    std::this_thread::sleep_for(std::chrono::milliseconds(kPowerCutGraceMs));
    kvfs::Status s = env->DropUnsyncedData();
    std::fprintf(stderr, "kvfs: TEST power cut: unsynced backing writes dropped (%s); exiting\n",
                 s.ToString().c_str());
    _exit(kPowerCutExitCode);
  }).detach();
  return env;
}

bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// True if `path` (a real path) is a mount point in /proc/self/mountinfo.
bool IsMountPoint(const std::string& path) {
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    // fields: id parent major:minor root mountpoint ...; octal escapes for spaces
    size_t p = 0;
    for (int i = 0; i < 4 && p != std::string::npos; ++i) p = line.find(' ', p + 1);
    if (p == std::string::npos) continue;
    size_t e = line.find(' ', p + 1);
    std::string mp = line.substr(p + 1, e - p - 1);
    std::string un;
    for (size_t i = 0; i < mp.size(); ++i) {
      if (mp[i] == '\\' && i + 3 < mp.size()) {
        un.push_back(static_cast<char>(std::stoi(mp.substr(i + 1, 3), nullptr, 8)));
        i += 3;
      } else {
        un.push_back(mp[i]);
      }
    }
    if (un == path) return true;
  }
  return false;
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

bool DirEmpty(const std::string& p) {
  std::error_code ec;
  return std::filesystem::directory_iterator(p, ec) == std::filesystem::directory_iterator() && !ec;
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == 0) return "node";
  return buf;
}

struct MountArgs {
  std::string mountpoint, backing, node_id, index_dir, cache_size = "1GiB", segment_size = "256MiB";
  std::string staging_size = "1GiB";
  std::string max_file_size = "16GiB";
  bool node_id_given = false;  // --node-id given (even as ''): then it must be a valid node id
  bool foreground = false, direct_io = false, force = false, splice = false;
  unsigned threads = 32;
  uint32_t group_commit_ms = 20;
  uint32_t peer_poll_ms = 200;
  bool peer_direct_io = false;
  uint32_t backing_deadline_ms = 0;
  std::vector<std::string> fuse_opts;
  std::string log_level = "info";
  std::string capacity, high_watermark, low_watermark;  // docs/design.md §6; empty = unlimited / none
  std::string metrics_listen;                           // HOST:PORT of the Prometheus listener; empty = off
  uint64_t checkpoint_entries = 1000000;                 // engine/checkpoint.h
  uint32_t checkpoint_interval_ms = 600000;
  uint32_t peers_publish_ms = 10000;
  std::string backing_mode;  // octal file mode of what kvfs creates on the export; empty = 0600 (0700 dirs)
  std::string log_file;      // empty: <index_dir>.log for a daemon, stderr in the foreground
  std::string log_max_size = "64MiB";
};

// The log rotates by size: <log>.log -> <log>.1.log -> ... <log>.<kLogFilesKept>.log (spdlog's rotating
// file sink), so a crash loop or a failing export cannot fill the local disk.
constexpr size_t kLogFilesKept = 4;

// The -o list as libfuse will parse it at mount time, checked now (before the node directory is taken
// over): a throwaway fuse_session_new with no operations parses every option and mounts nothing.
// False with libfuse's complaint, on one line, in *err.
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

// " (a number without a unit is bytes)" when `text` has no unit: `--capacity 500` is 500 bytes.
std::string BareHint(const std::string& text) {
  const bool bare = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == ' ';
  });
  return bare ? " (a number without a unit is bytes: write e.g. " + text + "GiB)" : "";
}

uint64_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// Sizes that cannot work are usage errors (exit 2, one line); merely unusual ones are warned about.
//   segment size      at most kMaxSegmentSize; over 4 GiB warned (eviction frees whole segments)
//   cache, staging    at most the machine's memory; over half of it warned (also their sum)
//   capacity, high    at least kMinSegments segments (eviction keeps one segment of headroom and
//   watermark         drops whole segments: below that every write empties the cache); under
//                     kFewSegments segments warned; any size option below 1 MiB without a unit warned
constexpr uint64_t kMaxSegmentSize = 64ull << 30;
constexpr uint64_t kMinSegments = 2, kFewSegments = 8;

void CheckSizes(const MountArgs& a, uint64_t segment, uint64_t cache, uint64_t staging, uint64_t capacity,
                uint64_t high) {
  if (segment > kMaxSegmentSize) {
    Die(kExitUsage, "--segment-size " + a.segment_size + " is over the limit of " + HumanSize(kMaxSegmentSize));
  }
  if (segment > (4ull << 30)) {
    Warn("--segment-size " + a.segment_size + ": eviction and reclamation free whole segments of " +
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
    if (v < (1u << 20) && !BareHint(text).empty()) Warn(std::string(flag) + " " + text + " is " + HumanSize(v) + BareHint(text));
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

// The daemon's final result for `kvfs umount` (which cannot wait(2) for a process it did not start):
// <run dir>/close-<pid> = the Store::Close error, written just before the daemon exits if that failed
// (none when it succeeded; a stale one of an earlier process with the same pid is removed at mount);
// umount reads and removes it. Run dir: /run/kvfs when /run is writable (root), else /tmp/kvfs-<uid>.
std::string CloseStatusPath(pid_t pid) {
  std::string dir = access("/run", W_OK) == 0 ? "/run/kvfs" : "/tmp/kvfs-" + std::to_string(getuid());
  return dir + "/close-" + std::to_string(pid);
}

void WriteCloseStatus(const std::string& text) {
  const std::string path = CloseStatusPath(getpid());
  mkdir(path.substr(0, path.rfind('/')).c_str(), 0700);
  const mode_t old = umask(077);
  std::ofstream f(path, std::ios::trunc);
  f << text << "\n";
  f.close();
  umask(old);
}

// Why FUSE cannot be mounted here, checked before the store opens (which takes a new node generation
// and may create the index): "" when it looks mountable. As root the kernel device must open; a
// non-root user mounts through the setuid fusermount3, which refuses allow_other unless /etc/fuse.conf
// says user_allow_other, and a mountpoint the user cannot write.
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

// Runs fn() with file descriptor 2 going to a memory file and returns what was written there (libfuse's
// and fusermount3's complaints go to stderr, which is the log file in a daemon): each line is also
// logged, so nothing is lost from the log.
std::string CaptureStderr(const std::function<void()>& fn) {
  fflush(stderr);
  const int saved = dup(2);
  const int mem = memfd_create("kvfs-stderr", MFD_CLOEXEC);
  if (saved < 0 || mem < 0) {
    if (saved >= 0) close(saved);
    if (mem >= 0) close(mem);
    fn();
    return "";
  }
  dup2(mem, 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string out;
  char buf[4096];
  ssize_t n;
  off_t off = 0;
  while ((n = pread(mem, buf, sizeof(buf), off)) > 0 && out.size() < (1 << 20)) {
    out.append(buf, static_cast<size_t>(n));
    off += n;
  }
  close(mem);
  size_t i = 0;
  while (i < out.size()) {
    size_t e = out.find('\n', i);
    if (e == std::string::npos) e = out.size();
    if (e > i) spdlog::warn("{}", out.substr(i, e - i));
    i = e + 1;
  }
  return out;
}

// The last non-empty line of text, without libfuse's "fuse: " prefix ("" if none).
std::string LastLine(const std::string& text) {
  std::string last;
  size_t i = 0;
  while (i < text.size()) {
    size_t e = text.find('\n', i);
    if (e == std::string::npos) e = text.size();
    std::string l = text.substr(i, e - i);
    if (l.find_first_not_of(" \t\r") != std::string::npos) last = l;
    i = e + 1;
  }
  if (last.rfind("fuse: ", 0) == 0) last = last.substr(6);
  return last;
}

// The pid holding RocksDB's lock on <index_dir>/LOCK (an fcntl write lock), or 0 if none / unknown.
pid_t IndexLockHolder(const std::string& index_dir) {
  const int fd = open((index_dir + "/LOCK").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return 0;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  const bool got = fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  close(fd);
  return got ? fl.l_pid : 0;
}

// Child -> parent status over a pipe: "<exit code> <message>\n" (0 = mounted).
void Report(int fd, int code, const std::string& msg) {
  if (fd < 0) return;
  std::string s = std::to_string(code) + " " + msg + "\n";
  ssize_t n = write(fd, s.data(), s.size());
  (void)n;
  close(fd);
}

int RunMount(MountArgs a) {
  // ---- checks the user can fix: exit 2 with one line ----
  if (!IsDir(a.backing)) Die(kExitUsage, "backing directory '" + a.backing + "' does not exist or is not a directory");
  if (!IsDir(a.mountpoint)) Die(kExitUsage, "mountpoint '" + a.mountpoint + "' does not exist or is not a directory");
  a.backing = RealPath(a.backing);
  a.mountpoint = RealPath(a.mountpoint);
  {
    // The daemon reads and writes its segments under the backing directory: it must not be (inside)
    // the mountpoint, and the mountpoint must not be inside kvfs's own metadata.
    auto inside = [](const std::string& p, const std::string& dir) {
      return p == dir || (p.size() > dir.size() && p.compare(0, dir.size(), dir) == 0 &&
                          (dir == "/" || p[dir.size()] == '/'));
    };
    if (inside(a.backing, a.mountpoint)) {
      Die(kExitUsage, "backing directory '" + a.backing + "' is the mountpoint or inside it");
    }
    if (a.backing.find("/.kvfs") != std::string::npos || inside(a.mountpoint, a.backing + "/.kvfs")) {
      Die(kExitUsage, "backing directory '" + a.backing + "' is inside kvfs metadata (.kvfs)");
    }
  }
  if (IsMountPoint(a.mountpoint)) Die(kExitUsage, "mountpoint '" + a.mountpoint + "' is busy (already mounted)");
  if (!DirEmpty(a.mountpoint)) Die(kExitUsage, "mountpoint '" + a.mountpoint + "' is not empty");
  if (a.threads == 0) Die(kExitUsage, "--threads must be at least 1");
  // Every option is checked before anything touches the backing or node directory.
  auto lvl = spdlog::level::from_str(a.log_level);
  if (lvl == spdlog::level::off && a.log_level != "off") {
    Die(kExitUsage, "--log-level '" + a.log_level + "': must be one of trace, debug, info, warn, error, critical, off");
  }
  kvfs::StoreOptions so;
  so.backing_dir = a.backing;
  so.node_id = a.node_id_given ? a.node_id : HostName();
  if (kvfs::Status ns = kvfs::ValidateNodeId(so.node_id); !ns.ok()) {
    Die(kExitUsage, (a.node_id_given ? "--node-id: " : "host name as node id (use --node-id): ") + ns.message());
  }
  if (a.index_dir.empty()) {
    char h[17];
    std::snprintf(h, sizeof(h), "%016llx",
                  static_cast<unsigned long long>(XXH64(a.backing.data(), a.backing.size(), 0)));
    a.index_dir = std::string("/var/lib/kvfs/") + h + "-" + so.node_id;
  } else {
    std::filesystem::path ip(a.index_dir);
    a.index_dir = std::filesystem::absolute(ip).lexically_normal().string();
  }
  so.index_dir = a.index_dir;
  so.cache_size = SizeOrDie("--cache-size", a.cache_size);
  so.segment_size = SizeOrDie("--segment-size", a.segment_size);
  if (so.segment_size < (1u << 20)) Die(kExitUsage, "--segment-size must be at least 1MiB" + BareHint(a.segment_size));
  if (so.segment_size % 4096 != 0) Die(kExitUsage, "--segment-size must be a multiple of 4KiB");
  if (SizeOrDie("--staging-size", a.staging_size) < (4u << 20)) {
    Die(kExitUsage, "--staging-size must be at least 4MiB" + BareHint(a.staging_size));
  }
  {
    uint64_t m = SizeOrDie("--max-file-size", a.max_file_size);
    if (m == 0 || m > kvfs::format::kMaxValueLength) Die(kExitUsage, "--max-file-size must be between 1 and 1TiB");
  }
  so.group_commit_interval_ms = a.group_commit_ms;
  so.peer_poll_ms = a.peer_poll_ms;
  // TEST ONLY (not in --help): KVFS_TEST_DEAD_SEGMENT_AGE_MS and KVFS_TEST_DROP_GRACE_MS shorten the
  // wait before a dead segment is dropped (10 s) and before a dropped segment is unlinked.
  if (const char* d = std::getenv("KVFS_TEST_DEAD_SEGMENT_AGE_MS")) so.dead_segment_age_ms = static_cast<uint32_t>(std::atoi(d));
  if (const char* d = std::getenv("KVFS_TEST_DROP_GRACE_MS")) so.drop_grace_ms = static_cast<uint32_t>(std::atoi(d));
  so.peer_direct_io = a.peer_direct_io;
  so.checkpoint_entries = a.checkpoint_entries;
  so.checkpoint_interval_ms = a.checkpoint_interval_ms;
  if (a.peers_publish_ms == 0) Die(kExitUsage, "--peers-publish-ms must be at least 1");
  so.peers_publish_ms = a.peers_publish_ms;
  so.retire_check_ms = std::max<uint32_t>(a.peers_publish_ms, 1000);
  so.direct_io = a.direct_io;
  so.force_takeover = a.force;
  if (!a.capacity.empty()) so.capacity_bytes = SizeOrDie("--capacity", a.capacity);
  if (!a.high_watermark.empty()) so.global_high_watermark_bytes = SizeOrDie("--high-watermark", a.high_watermark);
  if (!a.low_watermark.empty()) so.global_low_watermark_bytes = SizeOrDie("--low-watermark", a.low_watermark);
  if (so.global_low_watermark_bytes && !so.global_high_watermark_bytes) {
    Die(kExitUsage, "--low-watermark needs --high-watermark");
  }
  if (so.global_high_watermark_bytes && so.global_low_watermark_bytes >= so.global_high_watermark_bytes) {
    Die(kExitUsage, "--low-watermark must be below --high-watermark");
  }
  CheckSizes(a, so.segment_size, so.cache_size, SizeOrDie("--staging-size", a.staging_size), so.capacity_bytes,
             so.global_high_watermark_bytes);
  if (!a.backing_mode.empty()) {
    auto m = kvfs::ParseBackingMode(a.backing_mode);
    if (!m.ok()) Die(kExitUsage, "--backing-mode: " + m.status().message());
    if (m->file & 0004) {
      Warn("--backing-mode " + a.backing_mode + " lets every local user read the cached bytes on the export");
    }
    kvfs::SetBackingModes(*m);  // before anything is created (index dir, node dir, log)
  }
  kvfs::ListenAddress metrics_addr;
  if (!a.metrics_listen.empty()) {
    std::string err;
    if (!kvfs::ParseListenAddress(a.metrics_listen, &metrics_addr, &err)) Die(kExitUsage, "--metrics-listen " + err);
  }
  // docs/design.md §8 defaults; default_permissions stays on unless -o no_default_permissions (tools/fuse_options.h).
  const std::vector<std::string> fopts = kvfs::MountFuseOptions(a.fuse_opts);
  {
    std::string err;
    if (!CheckFuseOptions(fopts, &err)) Die(kExitUsage, err);
  }
  // What would make the FUSE mount fail, found before the store opens (a new node generation, maybe a new
  // index) and before the daemon forks: such a mount leaves nothing behind.
  if (std::string why = FuseMountProblem(fopts, a.mountpoint); !why.empty()) Die(kExitUsage, why);

  uint64_t log_max = SizeOrDie("--log-max-size", a.log_max_size);
  if (log_max < (1u << 20)) Die(kExitUsage, "--log-max-size must be at least 1MiB" + BareHint(a.log_max_size));
  // The log lives next to the index directory, never in it: a rebuild of the index (after a crash)
  // removes that directory, and the log of the crash must survive it.
  if (a.log_file.empty() && !a.foreground) a.log_file = so.index_dir + ".log";
  if (!a.log_file.empty()) {
    a.log_file = std::filesystem::absolute(a.log_file).lexically_normal().string();
    const std::string idx = so.index_dir + "/";
    if (a.log_file.rfind(idx, 0) == 0) Die(kExitUsage, "--log-file must not be inside the index dir (a rebuild removes it)");
  }
  // What kvfs creates locally (index, log) gets the directory mode's complement as umask: owner-only by
  // default, the --backing-mode group bits otherwise (files the Env creates carry their mode explicitly).
  umask(~kvfs::GetBackingModes().dir & 0777);

  // Logs go to stderr (spdlog's default is stdout), or to the rotating log file (a daemon's, or --log-file).
  spdlog::set_default_logger(spdlog::stderr_logger_mt("kvfs"));
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %L kvfs[%P] %v");

  // ---- fork first (see header comment) ----
  int report_fd = -1;
  if (!a.foreground) {
    int p[2];
    if (pipe(p) != 0) Die(kExitFail, std::string("pipe: ") + strerror(errno));
    pid_t pid = fork();
    if (pid < 0) Die(kExitFail, std::string("fork: ") + strerror(errno));
    if (pid > 0) {
      close(p[1]);
      std::string msg;
      char buf[512];
      ssize_t n;
      while ((n = read(p[0], buf, sizeof(buf))) > 0) msg.append(buf, static_cast<size_t>(n));
      close(p[0]);
      if (msg.empty()) {
        int st = 0;
        waitpid(pid, &st, 0);
        Die(kExitFail, "daemon exited before mounting (see " + a.log_file + ")");
      }
      int code = std::atoi(msg.c_str());
      std::string text = msg.substr(msg.find(' ') + 1);
      while (!text.empty() && text.back() == '\n') text.pop_back();
      if (code != 0) {
        waitpid(pid, nullptr, 0);
        Die(code, text);
      }
      return 0;
    }
    close(p[0]);
    report_fd = p[1];
    setsid();
    // Descriptors inherited from the caller (a pipe's write end, a shell's fds) would keep the caller's
    // pipeline waiting until the unmount: the daemon keeps only stdio and its report pipe.
    for (int fd = 3; fd < report_fd; ++fd) close(fd);
    close_range(static_cast<unsigned>(report_fd) + 1, ~0U, 0);
    // The daemon logs to its log file from its first line (store open and recovery included); stderr
    // goes there too (libfuse, fusermount3). A failure before the mount reaches the terminal through the
    // report pipe, not through stderr.
    int logfd = open(a.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, kvfs::GetBackingModes().file);
    if (logfd < 0 && errno == ENOENT) {
      (void)kvfs::Env::Posix()->CreateDirs(std::filesystem::path(a.log_file).parent_path().string());
      logfd = open(a.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, kvfs::GetBackingModes().file);
    }
    if (logfd >= 0) {
      dup2(logfd, 2);
      if (logfd > 2) close(logfd);
    }
  }
  if (!a.log_file.empty()) {
    try {
      auto sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(a.log_file, log_max, kLogFilesKept);
      auto logger = std::make_shared<spdlog::logger>("kvfs", sink);
      spdlog::drop("kvfs");
      spdlog::set_default_logger(logger);
      spdlog::set_level(lvl);
      spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %L kvfs[%P] %v");
      spdlog::flush_on(spdlog::level::trace);  // every line at once, as stderr had it (logs are rare)
    } catch (const spdlog::spdlog_ex& e) {
      const std::string m = std::string("cannot open log file: ") + e.what();
      if (report_fd >= 0) {
        Report(report_fd, kExitUsage, m);
        _exit(kExitUsage);
      }
      Die(kExitUsage, m);
    }
  }
  auto fail = [&](int code, const std::string& msg) -> int {
    if (report_fd >= 0) {
      Report(report_fd, code, msg);
      _exit(code);
    }
    Die(code, msg);
  };

  unlink(CloseStatusPath(getpid()).c_str());  // a stale result of an earlier process with this pid
  kvfs::Env* base_env = kvfs::Env::Posix();
  if (const char* pc = std::getenv(kPowerCutEnvVar); pc != nullptr && std::string(pc) == "1") {
    base_env = StartPowerCutSimulation();  // TEST ONLY (see above); before any thread starts
    spdlog::warn("kvfs: {}=1: TEST fault hooks on (SIGUSR2: power cut; SIGUSR1: backing EIO switch)",
                 kPowerCutEnvVar);
  }
  so.env = base_env;

  // The metrics socket is bound before the store opens: a port in use fails the mount with nothing touched.
  kvfs::MetricsServer metrics;
  if (!a.metrics_listen.empty()) {
    kvfs::Status bs = metrics.Bind(metrics_addr);
    if (!bs.ok()) return fail(kExitUsage, bs.message());
  }

  if (a.backing_deadline_ms > 0) {
    // Every backing request gets a deadline: a hung export becomes EIO for the caller (docs/design.md §7).
    // Created here, after the fork (its worker threads would not survive it); lives until exit.
    kvfs::DeadlineEnvOptions dopts;
    dopts.deadline = std::chrono::milliseconds(a.backing_deadline_ms);
    static kvfs::DeadlineEnv* deadline_env = new kvfs::DeadlineEnv(base_env, dopts);
    so.env = deadline_env;
  }
  // Staged chunks (1 MiB each) and large cached values are mmap'ed and unmapped when freed, so memory
  // that a spill or a commit frees goes back to the system at once (glibc's dynamic threshold would
  // rise above 1 MiB after the first such free and keep freed chunks in the heap instead).
  mallopt(M_MMAP_THRESHOLD, 512 * 1024);
  const bool index_existed = IsDir(so.index_dir);
  auto opened = kvfs::Store::Open(so);
  if (!opened.ok()) {
    const auto& s = opened.status();
    if (s.IsBusy() && s.message().rfind("index dir", 0) == 0) {
      // RocksDB's lock: another mount on this host uses this index dir (--force cannot help).
      const pid_t holder = IndexLockHolder(so.index_dir);
      return fail(kExitUsage, "index dir '" + so.index_dir + "' is in use by another kvfs mount on this host" +
                                  (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
                                  "; give this mount its own --index-dir");
    }
    if (s.IsBusy()) {  // the node directory: NodeDir's message names the owner (host, pid, heartbeat)
      return fail(kExitUsage, "node '" + so.node_id + "' is in use: " + s.message() +
                                  (a.force ? std::string() : "; use --force to take over if it is not"));
    }
    std::string hint;
    if (s.ToErrno() == EACCES && so.index_dir.rfind("/var/lib/kvfs/", 0) == 0 && geteuid() != 0) {
      hint = " (a mount by a non-root user needs --index-dir in a directory it can write)";
    }
    return fail(s.IsInvalidArgument() || !hint.empty() ? kExitUsage : kExitFail,
                "cannot open store: " + s.ToString() + hint);
  }
  std::unique_ptr<kvfs::Store> store = std::move(*opened);

  kvfs::FsOptions fo;
  fo.max_threads = a.threads;
  fo.staging_bytes = SizeOrDie("--staging-size", a.staging_size);
  fo.max_file_size = SizeOrDie("--max-file-size", a.max_file_size);
  fo.splice = a.splice;
  fo.version = kvfs::BuildVersion();
  fo.git_commit = kvfs::BuildCommit();
  // TEST ONLY (not in --help): KVFS_TEST_COMMIT_DELAY_MS widens the deferred-commit window (default 5 ms)
  // so that tests act inside it deterministically (multinode_test, fs_ops_test).
  if (const char* d = std::getenv("KVFS_TEST_COMMIT_DELAY_MS")) fo.commit_delay_ms = static_cast<uint32_t>(std::atoi(d));
  // TEST ONLY: KVFS_TEST_LOOKUP_DELAY_MS delays LOOKUP replies for staged files (FsOptions).
  if (const char* d = std::getenv("KVFS_TEST_LOOKUP_DELAY_MS")) fo.test_lookup_delay_ms = static_cast<uint32_t>(std::atoi(d));
  // TEST ONLY: KVFS_TEST_READ_DELAY_MS delays every READ reply (FsOptions).
  if (const char* d = std::getenv("KVFS_TEST_READ_DELAY_MS")) fo.test_read_delay_ms = static_cast<uint32_t>(std::atoi(d));
  auto fs = std::make_unique<kvfs::KvfsFs>(store.get(), fo);
  kvfs::Status ms;
  const std::string mount_err = CaptureStderr([&] { ms = fs->Mount(a.mountpoint, fopts, "kvfs:" + a.backing); });
  if (!ms.ok()) {
    fs.reset();
    store->Close();
    // A failed first mount leaves no index behind (it would only be rebuilt by the next one).
    if (!index_existed) {
      std::error_code ec;
      std::filesystem::remove_all(so.index_dir, ec);
    }
    const std::string why = LastLine(mount_err);
    return fail(ms.IsInvalidArgument() ? kExitUsage : kExitFail, ms.message() + (why.empty() ? "" : ": " + why));
  }
  // From now on libfuse's messages go through spdlog (the rotating log file of a daemon), not fd 2.
  fuse_set_log_func([](enum fuse_log_level level, const char* fmt, va_list ap) {
    char buf[1024];
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    std::string m(buf);
    while (!m.empty() && m.back() == '\n') m.pop_back();
    spdlog::log(level <= FUSE_LOG_ERR ? spdlog::level::err
                : level <= FUSE_LOG_WARNING ? spdlog::level::warn
                : level <= FUSE_LOG_INFO ? spdlog::level::info : spdlog::level::debug,
                "libfuse: {}", m);
  });
  kvfs::Status ss = fs->InstallSignalHandlers();
  if (!ss.ok()) spdlog::warn("{}", ss.ToString());
  if (report_fd >= 0) {
    // Daemon: stdin and stdout off the terminal (stderr is already the log file, see the fork).
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
      if (devnull > 2) close(devnull);
    }
    Report(report_fd, 0, "mounted");
    report_fd = -1;
    if (chdir("/") != 0) spdlog::warn("chdir /: {}", strerror(errno));
  }
  spdlog::info("mounted {} over {} (node {}, index {}, {} threads)", a.mountpoint, a.backing, so.node_id,
               so.index_dir, a.threads);
  if (!a.metrics_listen.empty()) {
    kvfs::KvfsFs* fsp = fs.get();
    metrics.Serve([fsp] { return kvfs::StatsToPrometheus(fsp->Snapshot()); });
    spdlog::info("metrics at http://{}/metrics", a.metrics_listen);
  }

  sd_notifyf(0, "READY=1\nSTATUS=serving %s over %s\nMAINPID=%d", a.mountpoint.c_str(), a.backing.c_str(),
             static_cast<int>(getpid()));

  int rc = fs->Loop();
  sd_notifyf(0, "STOPPING=1\nSTATUS=unmounted %s; flushing", a.mountpoint.c_str());
  metrics.Stop();  // before fs goes: the listener renders from it
  fs.reset();  // unmounts if still mounted, destroys the session
  kvfs::Status cs = store->Close();
  if (!cs.ok()) {
    spdlog::error("store close: {}", cs.ToString());
    rc = kExitFail;
  }
  if (!cs.ok()) WriteCloseStatus("store close failed: " + cs.ToString());
  spdlog::info("unmounted {}", a.mountpoint);
  return rc;
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

int RunUmount(const std::string& mp_in, double timeout_s) {
  struct stat mst;
  const bool dead = stat(mp_in.c_str(), &mst) != 0 && errno == ENOTCONN;  // a mount whose daemon is gone
  if (!dead && !IsDir(mp_in)) Die(kExitUsage, "mountpoint '" + mp_in + "' does not exist");
  std::string mp = RealPath(mp_in);
  if (dead) {
    mp = std::filesystem::absolute(mp_in).lexically_normal().string();
    if (mp.size() > 1 && mp.back() == '/') mp.pop_back();
  }
  if (!IsMountPoint(mp)) Die(kExitUsage, "'" + mp + "' is not mounted");
  std::string pid_s;
  pid_t pid = 0;
  if (ReadXattr(mp, "user.kvfs.pid", &pid_s)) {
    pid = static_cast<pid_t>(std::atoi(pid_s.c_str()));
  } else if (errno == ENOTCONN && MountFsType(mp) == "fuse.kvfs") {
    // The daemon is gone (killed, crashed): the kernel keeps a dead mount that every access fails with
    // "Transport endpoint is not connected". Nothing is left to flush: detach it (lazy unmount).
    pid_t c = fork();
    if (c == 0) {
      execlp("fusermount3", "fusermount3", "-u", "-z", mp.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int st = 0;
    if (c < 0 || waitpid(c, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || IsMountPoint(mp)) {
      Die(kExitFail, "'" + mp + "' is a dead kvfs mount (its daemon is gone) and fusermount3 -u -z failed");
    }
    std::fprintf(stderr,
                 "kvfs: '%s' was a dead kvfs mount (its daemon is gone: Transport endpoint is not connected); "
                 "cleared it with a lazy unmount; the next mount recovers the node\n",
                 mp.c_str());
    return 0;
  } else {
    Die(kExitUsage, "'" + mp + "' is not a kvfs mount (no user.kvfs.pid: " + strerror(errno) + ")");
  }
  // fusermount3 -u: a clean (not lazy) unmount; fails with EBUSY while files are open.
  int errp[2];
  if (pipe(errp) != 0) Die(kExitFail, std::string("pipe: ") + strerror(errno));
  pid_t c = fork();
  if (c == 0) {
    dup2(errp[1], 2);
    close(errp[0]);
    execlp("fusermount3", "fusermount3", "-u", mp.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(errp[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = read(errp[0], buf, sizeof(buf))) > 0) err.append(buf, static_cast<size_t>(n));
  close(errp[0]);
  int st = 0;
  waitpid(c, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    Die(kExitFail, "unmount of '" + mp + "' failed: " + (err.empty() ? "fusermount3 error" : err));
  }
  // Wait for the daemon to flush (Store::Close) and exit.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto alive = [](pid_t p) {
    if (kill(p, 0) != 0) return false;
    // A zombie (a foreground daemon whose parent has not reaped it yet) has exited: done.
    std::ifstream st("/proc/" + std::to_string(p) + "/stat");
    std::string line;
    std::getline(st, line);
    size_t rp = line.rfind(')');
    return !(rp != std::string::npos && rp + 2 < line.size() && (line[rp + 2] == 'Z' || line[rp + 2] == 'X'));
  };
  while (pid > 0 && alive(pid)) {
    if (std::chrono::steady_clock::now() > deadline) {
      Die(kExitFail, "unmounted, but daemon pid " + std::to_string(pid) + " did not exit within " +
                         std::to_string(static_cast<int>(timeout_s)) + "s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The daemon's own result (its final flush may have failed, e.g. a full backing store).
  if (pid > 0) {
    const std::string path = CloseStatusPath(pid);
    std::ifstream f(path);
    std::string line;
    if (f && std::getline(f, line)) {
      unlink(path.c_str());
      if (!line.empty()) {
        Die(kExitFail, "unmounted, but the daemon's final flush failed (" + line +
                           "); see its log; run kvfs-fsck before trusting the last writes");
      }
    }
  }
  return 0;
}

int RunStats(const std::string& mp_in, bool json) {
  if (!IsDir(mp_in)) Die(kExitUsage, "mountpoint '" + mp_in + "' does not exist");
  std::string mp = RealPath(mp_in);
  std::string raw;
  if (!ReadXattr(mp, "user.kvfs.stats", &raw)) {
    Die(kExitUsage, "'" + mp + "' is not a kvfs mount (no user.kvfs.stats: " + strerror(errno) + ")");
  }
  nlohmann::json j = nlohmann::json::parse(raw, nullptr, false);
  if (j.is_discarded()) Die(kExitFail, "daemon returned malformed stats");
  if (json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  auto u = [&](const char* k) { return j.value(k, uint64_t{0}); };
  const std::string version = j.value("version", std::string()), commit = j.value("commit", std::string());
  if (!version.empty()) {
    std::printf("version                kvfs %s%s\n", version.c_str(),
                commit.empty() ? "" : (" (git " + commit + ")").c_str());
  }
  std::printf("files                  %llu\n", (unsigned long long)u("files"));
  std::printf("directories            %llu\n", (unsigned long long)u("directories"));
  std::printf("live bytes             %llu\n", (unsigned long long)u("live_bytes"));
  // Segment files on the export now (not since the mount): this node's exact, all nodes' with the peers'
  // sizes estimated from this index. Overhead per file = (segment bytes - live bytes) / files.
  if (j.contains("export")) {
    auto n = [](const nlohmann::json& o, const char* k) { return (unsigned long long)o.value(k, uint64_t{0}); };
    const auto& own = j["export"]["node"];
    const auto& all = j["export"]["all_nodes"];
    std::printf("segments               %llu on the export (%llu open, %llu sealed, %llu being unlinked), %llu bytes\n",
                n(own, "segments"), n(own, "open_segments"), n(own, "sealed_segments"), n(own, "unlinking_segments"),
                n(own, "segment_bytes"));
    std::printf("segment bytes          %llu live (%llu files), %llu dead; overhead %.0f bytes per file\n",
                n(own, "live_bytes"), n(own, "files"), n(own, "dead_bytes"), own.value("overhead_bytes_per_file", 0.0));
    std::printf("all nodes              %llu segments, %llu bytes%s: %llu live (%llu files), %llu dead; overhead %.0f bytes per file\n",
                n(all, "segments"), n(all, "segment_bytes"), all.value("estimated", false) ? " (peers estimated)" : "",
                n(all, "live_bytes"), n(all, "files"), n(all, "dead_bytes"), all.value("overhead_bytes_per_file", 0.0));
  }
  if (j.contains("backing_fs") && j["backing_fs"].value("ok", false)) {
    const auto& b = j["backing_fs"];
    const uint64_t size = b.value("size_bytes", uint64_t{0}), avail = b.value("avail_bytes", uint64_t{0});
    std::printf("export file system     %llu bytes, %llu available (%.1f%% used)\n", (unsigned long long)size,
                (unsigned long long)avail, size ? 100.0 * double(size - std::min(size, avail)) / double(size) : 0.0);
  }
  if (j.contains("config")) {
    const auto& c = j["config"];
    auto n = [&](const char* k) { return (unsigned long long)c.value(k, uint64_t{0}); };
    if (n("capacity_bytes")) {
      std::printf("capacity               %llu bytes (evict above %llu down to %llu)\n", n("capacity_bytes"),
                  n("evict_high_bytes"), n("evict_low_bytes"));
    } else {
      std::printf("capacity               unlimited (dead segments reclaimed only)\n");
    }
    if (n("global_high_watermark_bytes")) {
      std::printf("global watermarks      high %llu, low %llu bytes (all nodes)\n", n("global_high_watermark_bytes"),
                  n("global_low_watermark_bytes"));
    }
  }
  std::printf("records written        %llu (%llu segments created since the mount)\n",
              (unsigned long long)u("records_written"), (unsigned long long)u("segments_created"));
  std::printf("journal entries        %llu (%llu group commits)\n", (unsigned long long)u("journal_entries"),
              (unsigned long long)u("group_commits"));
  if (u("unjournaled_entries") || u("journal_retries")) {
    std::printf("unjournaled entries    %llu (%llu failed group commits retried)\n",
                (unsigned long long)u("unjournaled_entries"), (unsigned long long)u("journal_retries"));
  }
  if (u("lost_entries")) {
    std::printf("lost entries           %llu (records written before a failed segment sync; remount)\n",
                (unsigned long long)u("lost_entries"));
  }
  // Per value read (a load, or a re-read from the start), not per FUSE request: the 2nd and 3rd 1 MiB
  // requests of one cold read are probation reads, neither hits nor misses.
  std::printf("cache hit rate         %.1f%% of value reads (%llu hits, %llu misses, %llu bytes cached)\n",
              100.0 * j.value("cache_hit_rate", 0.0), (unsigned long long)u("cache_hits"),
              (unsigned long long)u("cache_misses"), (unsigned long long)u("cache_bytes"));
  std::printf("probation              %llu reads, %llu bytes (loaded values read once so far)\n",
              (unsigned long long)u("probation_reads"), (unsigned long long)u("probation_bytes"));
  if (j.contains("buffer_pool")) {
    const auto& bp = j["buffer_pool"];
    std::printf("buffer pool            %llu reused, %llu fresh (%llu bytes), %llu bytes free\n",
                (unsigned long long)bp.value("reused", uint64_t{0}), (unsigned long long)bp.value("fresh", uint64_t{0}),
                (unsigned long long)bp.value("fresh_bytes", uint64_t{0}),
                (unsigned long long)bp.value("free_bytes", uint64_t{0}));
  }
  std::printf("checksum failures      %llu\n", (unsigned long long)u("checksum_failures"));
  std::printf("backing metadata ops   %llu\n", (unsigned long long)u("backing_metadata_ops"));
  std::printf("backing syncs          %llu\n", (unsigned long long)u("backing_syncs"));
  std::printf("backing bytes written  %llu\n", (unsigned long long)u("backing_bytes_written"));
  std::printf("backing bytes read     %llu\n", (unsigned long long)u("backing_bytes_read"));
  std::printf("backing files created  %llu\n", (unsigned long long)u("backing_files_created"));
  if (j.contains("fuse")) {
    const auto& f = j["fuse"];
    std::printf("open handles           %llu\n", (unsigned long long)f.value("open_handles", uint64_t{0}));
    std::printf("staged versions        %llu (%llu bytes)\n", (unsigned long long)f.value("staged_versions", uint64_t{0}),
                (unsigned long long)f.value("staged_bytes", uint64_t{0}));
    std::printf("fuse bytes read        %llu\n", (unsigned long long)f.value("bytes_read", uint64_t{0}));
    std::printf("fuse bytes written     %llu\n", (unsigned long long)f.value("bytes_written", uint64_t{0}));
    std::printf("staging                %llu bytes in RAM of %llu budget, %llu bytes spilled (%llu spills, %llu bytes since mount)\n",
                (unsigned long long)f.value("staged_bytes", uint64_t{0}),
                (unsigned long long)f.value("staging_budget", uint64_t{0}),
                (unsigned long long)f.value("spilled_bytes", uint64_t{0}),
                (unsigned long long)f.value("spills", uint64_t{0}),
                (unsigned long long)f.value("spilled_bytes_total", uint64_t{0}));
  }
  if (j.contains("backing_ops") && j["backing_ops"].is_object()) {
    std::string line;
    for (const auto& [op, n] : j["backing_ops"].items()) {
      if (n.is_number_unsigned() && n.get<uint64_t>() > 0) line += " " + op + "=" + std::to_string(n.get<uint64_t>());
    }
    std::printf("backing ops by kind   %s\n", line.empty() ? " none" : line.c_str());
  }
  if (j.contains("eviction")) {
    const auto& e = j["eviction"];
    std::printf("evicted segments       %llu (%llu bytes)\n", (unsigned long long)e.value("segments_dropped", uint64_t{0}),
                (unsigned long long)e.value("segment_bytes_dropped", uint64_t{0}));
  }
  if (j.contains("nodes")) {
    for (const auto& n : j["nodes"]) {
      std::printf("node %-17s %llu segments, %llu bytes%s: %llu live (%llu files), %llu dead\n",
                  n.value("node", std::string()).c_str(), (unsigned long long)n.value("segments", uint64_t{0}),
                  (unsigned long long)n.value("segment_bytes", uint64_t{0}), n.value("estimated", true) ? " (est.)" : "",
                  (unsigned long long)n.value("live_bytes", uint64_t{0}), (unsigned long long)n.value("files", uint64_t{0}),
                  (unsigned long long)n.value("dead_bytes", uint64_t{0}));
    }
  }
  if (j.contains("peer_journals")) {
    for (const auto& p : j["peer_journals"]) {
      std::printf("peer %-17s %llu entries applied, lag %.3f s, last poll %.1f s ago\n",
                  p.value("node", std::string()).c_str(), (unsigned long long)p.value("entries_applied", uint64_t{0}),
                  p.value("lag_seconds", 0.0), p.value("last_poll_age_seconds", -1.0));
    }
  }
  if (j.contains("fuse_ops") && j["fuse_ops"].is_object()) {
    std::printf("fuse operations        count      mean latency\n");
    for (const auto& [op, o] : j["fuse_ops"].items()) {
      const uint64_t n = o.value("count", uint64_t{0});
      std::printf("  %-20s %10llu %10.1f us\n", op.c_str(), (unsigned long long)n,
                  n ? 1e6 * o.value("sum_seconds", 0.0) / double(n) : 0.0);
    }
  }
  return 0;
}

// CLI11 2.1 reads a config file only for the top-level app, so `kvfs mount ... --config FILE` is
// expanded here: every key of FILE that is not given on the command line becomes "--key=value" ("-oVALUE"
// for o; flags: "--key" when true), in one argument each so that no value list can swallow the
// mountpoint that follows. Unknown keys then fail like unknown flags.
bool ExpandConfig(CLI::App* mount, std::vector<std::string>* args, std::string* err) {
  if (args->empty() || (*args)[0] != "mount") return true;
  std::string file;
  for (size_t i = 1; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    if (a == "--config" && i + 1 < args->size()) file = (*args)[i + 1];
    if (a.rfind("--config=", 0) == 0) file = a.substr(9);
  }
  if (file.empty()) return true;
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigINI().from_file(file);
  } catch (const CLI::Error& e) {
    *err = "config file '" + file + "': " + e.what();
    return false;
  }
  auto given = [&](const std::string& flag) {
    for (size_t i = 1; i < args->size(); ++i) {
      const std::string& a = (*args)[i];
      if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
    }
    return false;
  };
  std::vector<std::string> extra;
  for (const auto& it : items) {
    if (it.name.empty() || it.name == "++" || it.name == "--" || it.name == "config") continue;
    std::string flag = (it.name.size() == 1 ? "-" : "--") + it.name;
    if (given(flag)) continue;
    CLI::Option* opt = mount->get_option_no_throw(flag);
    if (opt == nullptr) {
      *err = "config file '" + file + "': unknown key '" + it.name + "'";
      return false;
    }
    if (opt->get_expected_max() == 0) {  // a flag
      std::string v = it.inputs.empty() ? "true" : it.inputs[0];
      if (v == "true" || v == "1" || v == "yes" || v == "on") extra.push_back(flag);
      else if (!(v == "false" || v == "0" || v == "no" || v == "off")) {
        *err = "config file '" + file + "': '" + it.name + "' must be true or false";
        return false;
      }
      continue;
    }
    // A comma list (o = allow_other,default_permissions) may arrive as several inputs: one argument.
    std::string joined;
    for (const auto& v : it.inputs) joined += (joined.empty() ? "" : ",") + v;
    extra.push_back(flag.size() == 2 ? flag + joined : flag + "=" + joined);
  }
  args->insert(args->begin() + 1, extra.begin(), extra.end());
  return true;
}

// mount(8) integration: mount.fuse3 runs `kvfs SOURCE MOUNTPOINT -o OPTS` for the type fuse.kvfs (an
// /etc/fstab line `/mnt/novus /mnt/novus-kv fuse.kvfs _netdev,node_id=gpu7 0 0`, or `mount -t fuse.kvfs`).
// Rewrites that form into `mount MOUNTPOINT --backing SOURCE ...`: an OPTS key that names a long flag of
// `kvfs mount` (node_id or node-id -> --node-id; flags without a value or =true/false) becomes that flag;
// mount(8)'s own options (_netdev, nofail, defaults, rw, auto, noauto, user, nouser, users) are dropped;
// everything else goes to FUSE as -o (none left, or only generic VFS flags such as suid,noexec: plus the
// default allow_other,default_permissions). The "dev,suid" mount.fuse3 appends is dropped: such a mount
// is nosuid,nodev like `kvfs mount`, unless the operator wrote suid / dev (kvfs_suid / kvfs_dev through
// mount(8), which does not pass suid and dev on to the helper).
// Leaves `args` alone unless args[0] and args[1] are both not commands and not flags. False (message
// printed) for a malformed call.
bool TranslateMountHelperForm(CLI::App* mount, std::vector<std::string>* args) {
  auto& a = *args;
  static const char* kCommands[] = {"mount", "umount", "stats", "node"};
  if (a.size() < 2 || a[0].empty() || a[0][0] == '-' || a[1].empty() || a[1][0] == '-') return true;
  for (const char* c : kCommands) {
    if (a[0] == c) return true;
  }
  std::vector<std::string> out = {"mount", a[1], "--backing", a[0]};
  std::vector<std::string> fuse;
  auto bad = [](const std::string& m) {
    std::fprintf(stderr, "kvfs: %s\n", m.c_str());
    return false;
  };
  // Every -o list, split at commas, in order.
  std::vector<std::string> raw;
  for (size_t i = 2; i < a.size(); ++i) {
    std::string list;
    if (a[i] == "-o" && i + 1 < a.size()) {
      list = a[++i];
    } else if (a[i].rfind("-o", 0) == 0 && a[i].size() > 2) {
      list = a[i].substr(2);
    } else if (a[i] == "-n" || a[i] == "-s" || a[i] == "-v") {
      continue;  // mount(8) helper flags: no mtab, sloppy, verbose
    } else {
      return bad("unexpected argument '" + a[i] + "' (mount helper form: kvfs SOURCE MOUNTPOINT -o OPTS)");
    }
    size_t p = 0;
    while (p <= list.size()) {
      size_t e = list.find(',', p);
      if (e == std::string::npos) e = list.size();
      if (e > p) raw.push_back(list.substr(p, e - p));
      p = e + 1;
    }
  }
  // mount.fuse3 (as root) appends "dev" unless the options have "nodev", then "suid" unless they have
  // "nosuid": its defaults, not the operator's choice. That tail is dropped, so libfuse's defaults
  // nosuid,nodev apply as they do for `kvfs mount`; a "suid" or "dev" the operator wrote (earlier in
  // the list) is kept and honoured.
  {
    std::vector<std::string> tail;
    auto has = [&](const char* x) { return std::find(raw.begin(), raw.end(), x) != raw.end(); };
    if (!has("nodev")) tail.push_back("dev");
    if (!has("nosuid")) tail.push_back("suid");
    if (!tail.empty() && raw.size() >= tail.size() &&
        std::equal(tail.begin(), tail.end(), raw.end() - static_cast<std::ptrdiff_t>(tail.size()))) {
      raw.resize(raw.size() - tail.size());
    }
  }
  for (std::string opt : raw) {
    // mount(8) keeps "suid" and "dev" to itself (they never reach the helper): kvfs_suid / kvfs_dev ask
    // for them through mount(8) and fstab.
    if (opt == "kvfs_suid" || opt == "kvfs_dev") opt = opt.substr(5);
    static const char* kIgnored[] = {"_netdev", "nofail", "defaults", "rw", "auto", "noauto", "user", "nouser",
                                     "users"};
    if (std::find_if(std::begin(kIgnored), std::end(kIgnored), [&](const char* x) { return opt == x; }) !=
        std::end(kIgnored)) {
      continue;
    }
    size_t eq = opt.find('=');
    std::string key = opt.substr(0, eq), val = eq == std::string::npos ? "" : opt.substr(eq + 1);
    std::replace(key.begin(), key.end(), '_', '-');
    CLI::Option* o = key.size() > 1 && key != "backing" ? mount->get_option_no_throw("--" + key) : nullptr;
    if (o == nullptr) {
      fuse.push_back(opt);
      continue;
    }
    if (o->get_expected_max() == 0) {  // a flag: `splice` or `splice=true|false`
      if (eq == std::string::npos || val == "true" || val == "1" || val == "yes" || val == "on") {
        out.push_back("--" + key);
      } else if (!(val == "false" || val == "0" || val == "no" || val == "off")) {
        return bad("mount option '" + opt + "': must be true or false");
      }
      continue;
    }
    if (eq == std::string::npos || val.empty()) return bad("mount option '" + opt + "' needs a value");
    out.push_back("--" + key);
    out.push_back(val);
  }
  // Generic VFS flags (suid, dev, noexec, ...) do not replace the default FUSE options; any other FUSE
  // option (allow_other, ...) does, as -o does for `kvfs mount`.
  static const char* kGeneric[] = {"dev",   "nodev",   "suid",   "nosuid",     "exec",       "noexec",
                                   "ro",    "atime",   "noatime", "diratime",  "nodiratime", "relatime",
                                   "norelatime", "strictatime", "sync", "async", "dirsync", "lazytime",
                                   "nolazytime"};
  bool only_generic = std::all_of(fuse.begin(), fuse.end(), [&](const std::string& f) {
    return std::find_if(std::begin(kGeneric), std::end(kGeneric), [&](const char* x) { return f == x; }) !=
           std::end(kGeneric);
  });
  if (!fuse.empty() && only_generic) fuse.insert(fuse.begin(), {"allow_other", "default_permissions"});
  if (!fuse.empty()) {
    std::string j;
    for (const auto& f : fuse) j += (j.empty() ? "" : ",") + f;
    out.push_back("-o");
    out.push_back(j);
  }
  a = std::move(out);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvfs: a FUSE file system for LLM KV-cache chunk files over a shared export", "kvfs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kvfs ") + kvfs::BuildVersion() +
                                        (*kvfs::BuildCommit() ? std::string(" (git ") + kvfs::BuildCommit() + ")" : ""));

  MountArgs ma;
  auto* mount = app.add_subcommand("mount", "mount kvfs at MOUNTPOINT over a backing directory");
  std::string config_file;
  mount->add_option("--config", config_file,
                    "read options from a file (INI/TOML, keys = long flag names, e.g. backing=/mnt/novus, "
                    "threads=64, direct-io=true, o=allow_other; a [mount] section is optional); flags on the "
                    "command line win");
  mount->add_option("mountpoint", ma.mountpoint, "where to mount")->required();
  mount->add_option("--backing", ma.backing, "the backing directory (the shared export)")->required();
  mount->add_option("--node-id", ma.node_id, "this node's id (default: host name)");
  mount->add_option("--index-dir", ma.index_dir,
                    "local RocksDB index directory (default /var/lib/kvfs/<hash-of-backing>-<node>)");
  mount->add_option("--cache-size", ma.cache_size, "LRU cache of values, e.g. 4GiB (default 1GiB)");
  mount->add_option("--segment-size", ma.segment_size, "segment file size, e.g. 256MiB (default)");
  mount->add_option("--staging-size", ma.staging_size,
                    "memory budget for the bytes of files being written, e.g. 4GiB (default 1GiB); over it "
                    "staged bytes spill to the active segment");
  mount->add_option("--max-file-size", ma.max_file_size,
                    "largest file size, e.g. 64GiB (default 16GiB, at most 1TiB); a write or truncate "
                    "beyond it is EFBIG (files on kvfs are not sparse: a file costs its size when committed)");
  mount->add_flag("--foreground,-f", ma.foreground, "stay in the foreground");
  mount->add_option("--threads", ma.threads, "max FUSE worker threads (default 32)");
  mount->add_option("--group-commit-ms", ma.group_commit_ms, "group commit interval in ms (default 20)");
  mount->add_flag("--direct-io", ma.direct_io, "O_DIRECT for segment writes");
  mount->add_option("--peer-poll-ms", ma.peer_poll_ms, "how often peers' journals are tailed, ms (0 = never)");
  mount->add_flag("--peer-direct-io", ma.peer_direct_io, "read peers' journals with O_DIRECT");
  mount->add_option("--backing-deadline-ms", ma.backing_deadline_ms,
                    "deadline for every backing-store request; a hung export becomes EIO (default 0 = off)");
  mount->add_flag("--force", ma.force, "take over the node directory even if its owner looks alive");
  mount->add_flag("--splice", ma.splice, "enable FUSE splice read/write/move");
  mount->add_option("-o", ma.fuse_opts,
                    "FUSE mount options, comma separated (default allow_other,default_permissions; "
                    "default_permissions is kept unless no_default_permissions is given)")
      ->delimiter(',')
      ->allow_extra_args(false);  // `-o LIST MOUNTPOINT`: LIST only
  mount->add_option("--log-level", ma.log_level, "trace|debug|info|warn|error (default info)");
  mount->add_option("--capacity", ma.capacity,
                    "bound on this node's segment bytes on the export, e.g. 500GiB (default unlimited); "
                    "the oldest segments are evicted");
  mount->add_option("--high-watermark", ma.high_watermark,
                    "global bound on all nodes' segment bytes: over it, each node evicts its share");
  mount->add_option("--low-watermark", ma.low_watermark,
                    "global eviction target (default 7/8 of --high-watermark)");
  mount->add_option("--checkpoint-entries", ma.checkpoint_entries,
                    "write a journal checkpoint (snapshot) after this many journal entries (default "
                    "1000000; 0 = not by count); also at a clean unmount");
  mount->add_option("--checkpoint-interval-ms", ma.checkpoint_interval_ms,
                    "... or this long after the last one if anything was journaled (default 600000; 0 = not by "
                    "time)");
  mount->add_option("--peers-publish-ms", ma.peers_publish_ms,
                    "how often this node's read progress (<node dir>/peers) is rewritten when it moved, ms "
                    "(default 10000); also the journal retirement check period");
  mount->add_option("--backing-mode", ma.backing_mode,
                    "permission bits of the files kvfs creates on the export and in its index dir, octal "
                    "(default 0600: owner only; directories get x where r is set, 0700); e.g. 0640 for a "
                    "group that reads the export");
  mount->add_option("--log-file", ma.log_file,
                    "log file (default for a daemon: <index-dir>.log, next to the index dir; in the foreground: "
                    "stderr); rotated by size");
  mount->add_option("--log-max-size", ma.log_max_size,
                    "rotate the log file at this size, keeping 4 old ones (<log>.1.log ...; default 64MiB)");
  mount->add_option("--metrics-listen", ma.metrics_listen,
                    "serve Prometheus metrics at http://HOST:PORT/metrics, e.g. 127.0.0.1:9464 (default off)");

  std::string ump;
  double utimeout = 120;
  auto* umount = app.add_subcommand("umount", "unmount and wait for the daemon to flush and exit");
  umount->add_option("mountpoint", ump, "the kvfs mount point")->required();
  umount->add_option("--timeout", utimeout, "seconds to wait for the daemon (default 120)");

  std::string smp;
  bool sjson = false;
  auto* stats = app.add_subcommand("stats", "print the daemon's counters");
  stats->add_option("mountpoint", smp, "the kvfs mount point")->required();
  stats->add_flag("--json", sjson, "print JSON");

  // `kvfs node list|retire|purge` (tools/node_cmd.h).
  std::string nsub, nbacking, nnode;
  bool njson = false, nforce = false;
  uint32_t ngrace = 8000;
  auto* nodecmd = app.add_subcommand("node", "list, retire or purge the nodes of a backing directory");
  nodecmd->add_option("command", nsub, "list | retire | purge")->required();
  nodecmd->add_option("--backing", nbacking, "the backing directory")->required();
  nodecmd->add_option("--node", nnode, "node id (retire, purge)");
  nodecmd->add_flag("--json", njson, "print JSON");
  nodecmd->add_flag("--force", nforce, "retire a node that looks live; purge a released node");
  nodecmd->add_option("--grace-ms", ngrace, "purge: wait between the DROP entries and the removal (default 8000)");

  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  if (!TranslateMountHelperForm(mount, &args)) return kExitUsage;  // `kvfs SOURCE MOUNTPOINT -o OPTS`
  if (!args.empty() && args[0] != "mount" && args[0] != "umount" && args[0] != "stats" && args[0] != "node" &&
      args[0][0] != '-') {
    std::fprintf(stderr, "kvfs: unknown command '%s' (use mount, umount, stats or node; see kvfs --help)\n",
                 args[0].c_str());
    return kExitUsage;
  }
  std::string cfg_err;
  if (!ExpandConfig(mount, &args, &cfg_err)) {
    std::fprintf(stderr, "kvfs: %s\n", cfg_err.c_str());
    return kExitUsage;
  }
  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments reversed
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    for (auto& ch : what) {
      if (ch == '\n') ch = ' ';
    }
    std::fprintf(stderr, "kvfs: %s (see kvfs --help)\n", what.c_str());
    return kExitUsage;
  }

  if (mount->parsed()) {
    ma.node_id_given = mount->count("--node-id") > 0;
    return RunMount(ma);
  }
  if (umount->parsed()) return RunUmount(ump, utimeout);
  if (stats->parsed()) return RunStats(smp, sjson);
  if (nodecmd->parsed()) return kvfs::RunNodeCommand(nsub, nbacking, nnode, njson, nforce, ngrace);
  return kExitUsage;
}
