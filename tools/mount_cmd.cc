// `kvfs mount` (tools/mount_cmd.h).
#define FUSE_USE_VERSION 312
#include "tools/mount_cmd.h"

#include <sys/vfs.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <malloc.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "blockstore/deadline_env.h"
#include "blockstore/format.h"
#include "blockstore/kernel_copy.h"
#include "blockstore/node_dir.h"
#include "blockstore/s3_env.h"
#include "engine/eviction_policy.h"
#include "engine/store.h"
#include "fuse/kvfs_fs.h"
#include "fuse/stats_render.h"
#include "tools/build_info.h"
#include "tools/cli_util.h"
#include "tools/fuse_options.h"
#include "tools/metrics_server.h"
#include "tools/mount_checks.h"
#include "tools/power_cut.h"

namespace kvfs::cli {
namespace {

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == 0) return "node";
  return buf;
}

// The log rotates by size: <log>.log -> <log>.1.log -> ... <log>.<kLogFilesKept>.log (spdlog's rotating
// file sink), so a crash loop or a failing export cannot fill the local disk.
constexpr size_t kLogFilesKept = 4;

void WriteCloseStatus(const std::string& text) {
  const std::string path = CloseStatusPath(getpid());
  mkdir(path.substr(0, path.rfind('/')).c_str(), 0700);
  const mode_t old = umask(077);
  std::ofstream f(path, std::ios::trunc);
  f << text << "\n";
  f.close();
  umask(old);
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

// weakly_canonical without throwing: a path under a directory this user may not search (the default
// /var/lib/kvfs for a non-root user) is taken lexically; the open that follows reports the real error.
// Segment size of an S3 backing when --segment-size is not given: one object per sealed segment, uploaded
// whole in one PUT (the client's multipart threshold is 64 MiB), reasonably quick publication.
constexpr uint64_t kS3DefaultSegmentSize = 64ull << 20;

std::string CanonicalOrLexical(const std::string& p) {
  std::error_code ec;
  std::filesystem::path c = std::filesystem::weakly_canonical(p, ec);
  return ec ? std::filesystem::path(p).lexically_normal().string() : c.string();
}

}  // namespace

int RunMount(MountArgs a) {
  // ---- checks the user can fix: exit 2 with one line ----
  if (a.backing.rfind("s3://", 0) == 0) {
    // An S3 backing: the engine works under the staging directory through an S3TierEnv (docs/s3.md).
    std::string bucket, prefix;
    if (kvfs::Status u = kvfs::ParseS3Url(a.backing, &bucket, &prefix); !u.ok()) Die(kExitUsage, "--backing " + u.message());
    if (a.s3_endpoint.empty()) Die(kExitUsage, "--backing " + a.backing + " needs --s3-endpoint URL");
    if (a.s3_staging.empty()) Die(kExitUsage, "--backing " + a.backing + " needs --s3-staging DIR (a local directory)");
    if (!IsDir(a.s3_staging)) Die(kExitUsage, "--s3-staging '" + a.s3_staging + "' does not exist or is not a directory");
    // Credentials are looked up before the daemon forks: missing ones are one line and exit 2 here.
    if (auto c = kvfs::S3Credentials::FromEnvironment(); !c.ok()) Die(kExitUsage, c.status().message());
    (void)SizeOrDie("--s3-read-split-min", a.s3_read_split_min);
    a.s3_url = a.backing;
    a.backing = a.s3_staging;
  } else if (!a.s3_endpoint.empty() || !a.s3_staging.empty() || !a.s3_ca.empty() || a.s3_path_style) {
    Die(kExitUsage, "--s3-* options need --backing s3://BUCKET/PREFIX");
  } else if (a.seal_after_ms > 0) {
    Die(kExitUsage, "--seal-after-ms needs --backing s3://BUCKET/PREFIX (on a directory peers read the active "
                    "segment as it grows)");
  }
  if (!IsDir(a.backing)) Die(kExitUsage, "backing directory '" + a.backing + "' does not exist or is not a directory");
  if (!IsDir(a.mountpoint)) Die(kExitUsage, "mountpoint '" + a.mountpoint + "' does not exist or is not a directory");
  a.backing = RealPath(a.backing);
  a.mountpoint = RealPath(a.mountpoint);
  // p is dir or inside it (both absolute and normal).
  auto inside = [](const std::string& p, const std::string& dir) {
    return p == dir || (p.size() > dir.size() && p.compare(0, dir.size(), dir) == 0 &&
                        (dir == "/" || p[dir.size()] == '/'));
  };
  {
    // The daemon reads and writes its segments under the backing directory: it must not be (inside)
    // the mountpoint, and the mountpoint must not be inside kvfs's own metadata.
    if (inside(a.backing, a.mountpoint)) {
      Die(kExitUsage, "backing directory '" + a.backing + "' is the mountpoint or inside it");
    }
    if (a.backing.find("/.kvfs") != std::string::npos || inside(a.mountpoint, a.backing + "/.kvfs")) {
      Die(kExitUsage, "backing directory '" + a.backing + "' is inside kvfs metadata (.kvfs)");
    }
    // Works (kvfs reads and writes only <backing>/.kvfs), but whatever walks the backing directory (find,
    // du, a backup) walks into the mount too, and reads every cached file through it.
    if (inside(a.mountpoint, a.backing)) {
      Warn("mountpoint '" + a.mountpoint + "' is inside the backing directory '" + a.backing +
           "': programs that walk the backing (find, du, backups) walk into the mount too");
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
  // The store opens after the FUSE mount is made (see the mount below): an index inside the mountpoint
  // would wait for the daemon's own mount, which does not serve before the store is open.
  if (inside(CanonicalOrLexical(a.index_dir), a.mountpoint)) {
    Die(kExitUsage, "--index-dir '" + a.index_dir + "' is the mountpoint or inside it");
  }
  so.cache_size = SizeOrDie("--cache-size", a.cache_size);
  if (!a.segment_size.empty()) {
    so.segment_size = SizeOrDie("--segment-size", a.segment_size);
    if (so.segment_size < (1u << 20)) Die(kExitUsage, "--segment-size must be at least 1MiB" + BareHint(a.segment_size, "MiB"));
    if (so.segment_size % 4096 != 0) Die(kExitUsage, "--segment-size must be a multiple of 4KiB");
  }
  if (SizeOrDie("--staging-size", a.staging_size) < (4u << 20)) {
    Die(kExitUsage, "--staging-size must be at least 4MiB" + BareHint(a.staging_size, "MiB"));
  }
  if (uint64_t ra = SizeOrDie("--read-ahead", a.read_ahead);
      ra != 0 && (ra < (128u << 10) || ra > (256u << 20) || ra % 4096 != 0)) {
    // A bare number is bytes (8192 is 8 KiB, not read_ahead_kb's 8 MiB); under 128 KiB would make reads
    // smaller than the kernel's default.
    Die(kExitUsage, "--read-ahead must be 0 (the kernel's 128KiB) or 128KiB to 256MiB in 4KiB steps; got '" +
                        a.read_ahead + "' = " + std::to_string(ra) + " bytes");
  }
  {
    uint64_t m = SizeOrDie("--max-file-size", a.max_file_size);
    if (m == 0 || m > kvfs::format::kMaxValueLength) Die(kExitUsage, "--max-file-size must be between 1 and 1TiB");
  }
  so.group_commit_interval_ms = a.group_commit_ms;
  so.sync_interval_ms = a.sync_interval_ms;
  so.peer_poll_ms = a.peer_poll_ms;
  // On S3 every poll of an idle peer is billed (a LIST, a HEAD and a GET): idle peers back off to 10 s
  // (docs/s3.md "Idle cost"); a lookup miss still polls at once.
  so.peer_poll_max_ms = a.peer_poll_max_ms > 0 ? a.peer_poll_max_ms : !a.s3_url.empty() ? 10000 : 0;
  so.seal_after_ms = a.seal_after_ms;
  so.link_claims = a.link_claims == "on";
  // Every read's backing calls end within the deadline together (a FUSE READ never waits past it).
  so.read_deadline_ms = a.backing_deadline_ms;
  // TEST ONLY (not in --help): KVFS_TEST_DEAD_SEGMENT_AGE_MS and KVFS_TEST_DROP_GRACE_MS shorten the
  // wait before a dead segment is dropped (10 s) and before a dropped segment is unlinked.
  if (const char* d = std::getenv("KVFS_TEST_DEAD_SEGMENT_AGE_MS")) so.dead_segment_age_ms = static_cast<uint32_t>(std::atoi(d));
  if (const char* d = std::getenv("KVFS_TEST_DROP_GRACE_MS")) so.drop_grace_ms = static_cast<uint32_t>(std::atoi(d));
  so.peer_direct_io = a.peer_direct_io;
  if (!so.peer_direct_io && a.s3_url.empty()) {
    // On NFS peers' journals are read with O_DIRECT whatever the flag says: a buffered read trusts the
    // client's attribute cache (3-60 s) for the file's size, and O_DIRECT lets the peer thread keep the
    // newest journal file open and read its tail without a listing and an open per poll (design.md §5).
    struct statfs sf;
    if (statfs(a.backing.c_str(), &sf) == 0 && sf.f_type == 0x6969 /* NFS_SUPER_MAGIC */) so.peer_direct_io = true;
  }
  so.checkpoint_entries = a.checkpoint_entries;
  so.checkpoint_interval_ms = a.checkpoint_interval_ms;
  if (a.peers_publish_ms == 0) Die(kExitUsage, "--peers-publish-ms must be at least 1");
  so.peers_publish_ms = a.peers_publish_ms;
  so.retire_check_ms = std::max<uint32_t>(a.peers_publish_ms, 1000);
  so.direct_io = !a.buffered_segment_writes;  // O_DIRECT unless asked (--direct-io: the default)
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
  if (a.segment_size.empty() && !a.s3_url.empty()) {
    so.segment_size = kS3DefaultSegmentSize;
    a.segment_size_short = HumanSize(so.segment_size) + " (default for s3)";
    a.segment_size_note = "segment size " + HumanSize(so.segment_size) +
                          " (the default for an s3 backing: one object per sealed segment; --segment-size sets it)";
  } else if (a.segment_size.empty()) {
    // Not given: from the size of what kvfs may use (engine/eviction_policy.h AutoSegmentSize,
    // docs/operations.md "Sizing"): the export's size, or a smaller --capacity / --high-watermark.
    uint64_t usable = 0;
    std::string of = "the export's";
    struct statvfs sv {};
    if (statvfs(a.backing.c_str(), &sv) == 0) usable = static_cast<uint64_t>(sv.f_blocks) * sv.f_frsize;
    for (const auto& [flag, v] : {std::pair{"--capacity", so.capacity_bytes},
                                  std::pair{"--high-watermark", so.global_high_watermark_bytes}}) {
      if (v && (usable == 0 || v < usable)) {
        usable = v;
        of = flag;
      }
    }
    so.segment_size = kvfs::AutoSegmentSize(usable);
    // The short form (the one-line "mounted" message) names what the size was derived from; the clamp to
    // [4 MiB, 256 MiB] means it is often not literally 1/8 (a 252 GiB export gets 256 MiB).
    a.segment_size_short = HumanSize(so.segment_size) +
                           (usable == 0 ? " (default)" : " (automatic, for " + of + " " + HumanSize(usable) + ")");
    a.segment_size_note = usable == 0
        ? "segment size " + HumanSize(so.segment_size) + " (the export's size is unknown; --segment-size sets it)"
        : "segment size " + HumanSize(so.segment_size) + " (1/8 of " + of + " " + HumanSize(usable) +
              " as a power of two, between " + HumanSize(kvfs::kMinAutoSegmentSize) + " and " +
              HumanSize(kvfs::kDefaultSegmentSize) + "; --segment-size sets it)";
  } else {
    a.segment_size_note = "segment size " + HumanSize(so.segment_size) + " (--segment-size)";
    a.segment_size_short = HumanSize(so.segment_size);
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
  kvfs::VerifyCopyMode verify_copy = kvfs::VerifyCopyMode::kAuto;
  if (!kvfs::ParseVerifyCopyMode(a.verify_copy, &verify_copy)) {
    Die(kExitUsage, "--verify-copy '" + a.verify_copy + "': must be auto, kernel or inplace");
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
  // atime (docs/semantics.md §4): relatime unless -o noatime (the last of atime/noatime/relatime/
  // strictatime given wins; strictatime is served as relatime).
  for (const auto& o : a.fuse_opts) {
    if (o == "noatime") so.atime = false;
    if (o == "atime" || o == "relatime" || o == "strictatime") so.atime = true;
  }
  // A read-only mount never updates atime (as Linux).
  if (std::find(fopts.begin(), fopts.end(), "ro") != fopts.end()) so.atime = false;
  // What would make the FUSE mount fail, found before the store opens (a new node generation, maybe a new
  // index) and before the daemon forks: such a mount leaves nothing behind.
  if (std::string why = FuseMountProblem(fopts, a.mountpoint); !why.empty()) Die(kExitUsage, why);

  uint64_t log_max = SizeOrDie("--log-max-size", a.log_max_size);
  if (log_max < (1u << 20)) Die(kExitUsage, "--log-max-size must be at least 1MiB" + BareHint(a.log_max_size, "MiB"));
  // The log lives next to the index directory, never in it: a rebuild of the index (after a crash)
  // removes that directory, and the log of the crash must survive it.
  if (a.log_file.empty() && !a.foreground) a.log_file = so.index_dir + ".log";
  if (!a.log_file.empty()) {
    a.log_file = std::filesystem::absolute(a.log_file).lexically_normal().string();
    const std::string idx = so.index_dir + "/";
    if (a.log_file.rfind(idx, 0) == 0) Die(kExitUsage, "--log-file must not be inside the index dir (a rebuild removes it)");
    if (inside(CanonicalOrLexical(a.log_file), a.mountpoint)) {
      Die(kExitUsage, "--log-file '" + a.log_file + "' is inside the mountpoint (the daemon would write into itself)");
    }
  }
  // What kvfs creates locally (index, log) gets the directory mode's complement as umask: owner-only by
  // default, the --backing-mode group bits otherwise (files the Env creates carry their mode explicitly).
  umask(~kvfs::GetBackingModes().dir & 0777);

  // Logs go to stderr (spdlog's default is stdout), or to the rotating log file (a daemon's, or --log-file).
  spdlog::set_default_logger(spdlog::stderr_logger_mt("kvfs"));
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %L kvfs[%P] %v");

  // ---- fork first (see tools/mount_cmd.h) ----
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
      // A warning of the daemon's mount (after a tab): on stderr, also with --quiet.
      if (const size_t tab = text.find('\t'); tab != std::string::npos) {
        std::fprintf(stderr, "kvfs: warning: %s\n", text.substr(tab + 1).c_str());
      }
      // One line on success (--quiet, and the mount(8) helper form, print nothing): where, which node,
      // the segment size chosen and where the daemon logs.
      if (!a.quiet) {
        const std::string over = a.s3_url.empty() ? a.backing : a.s3_url + " (staging " + a.backing + ")";
        std::printf("kvfs: mounted %s over %s: node %s, segment size %s, log %s\n", a.mountpoint.c_str(),
                    over.c_str(), so.node_id.c_str(), a.segment_size_short.c_str(), a.log_file.c_str());
        std::fflush(stdout);
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
    // The log file (a daemon's, or --log-file) gets the reason too, not just the terminal: a failed
    // mount leaves no empty log behind.
    if (!a.log_file.empty()) spdlog::error("kvfs: mount failed: {}", msg);
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

  std::unique_ptr<kvfs::S3TierEnv> s3_env;
  if (!a.s3_url.empty()) {
    // Created after the fork (libcurl handles). One listing checks the endpoint, the credentials and the
    // bucket before anything is written.
    kvfs::S3Config cfg;
    std::string prefix;
    (void)kvfs::ParseS3Url(a.s3_url, &cfg.bucket, &prefix);
    cfg.endpoint = a.s3_endpoint;
    cfg.region = a.s3_region;
    cfg.path_style = a.s3_path_style;
    cfg.ca_file = a.s3_ca;
    if (a.backing_deadline_ms > 0) cfg.deadline_ms = a.backing_deadline_ms;
    cfg.read_parts = a.s3_read_parts;
    cfg.read_split_min = SizeOrDie("--s3-read-split-min", a.s3_read_split_min);
    auto creds = kvfs::S3Credentials::FromEnvironment();
    if (!creds.ok()) return fail(kExitUsage, creds.status().message());
    cfg.credentials = *creds;
    auto client = kvfs::S3Client::Create(cfg);
    if (!client.ok()) return fail(kExitUsage, "s3: " + client.status().message());
    std::shared_ptr<kvfs::S3Client> shared(std::move(*client));
    auto probe = shared->ListDelimited(prefix, "", 1);
    if (!probe.ok()) return fail(kExitFail, "s3 " + a.s3_url + " at " + a.s3_endpoint + ": " + probe.status().ToString());
    s3_env = std::make_unique<kvfs::S3TierEnv>(shared, prefix, a.backing, base_env);
    so.env = s3_env.get();
    so.tier = s3_env.get();
    spdlog::info("kvfs: s3 backing {} at {} (staging {})", a.s3_url, a.s3_endpoint, a.backing);
  } else if (a.backing_deadline_ms > 0) {
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
  kvfs::FsOptions fo;
  fo.max_threads = a.threads;
  fo.staging_bytes = SizeOrDie("--staging-size", a.staging_size);
  fo.max_file_size = SizeOrDie("--max-file-size", a.max_file_size);
  fo.read_ahead = static_cast<uint32_t>(SizeOrDie("--read-ahead", a.read_ahead));
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
  // TEST ONLY: KVFS_TEST_AFTER_COMMIT_DELAY_MS widens the window after a version's commit (FsOptions).
  // TEST ONLY: KVFS_TEST_UNLINK_MARK_DELAY_MS widens unlink's and rename's window (FsOptions).
  if (const char* d = std::getenv("KVFS_TEST_UNLINK_MARK_DELAY_MS")) {
    fo.test_unlink_mark_delay_ms = static_cast<uint32_t>(std::atoi(d));
  }
  // TEST ONLY: KVFS_TEST_RELEASE_DELAY_MS delays the RELEASE of direct_io writers (FsOptions).
  if (const char* d = std::getenv("KVFS_TEST_RELEASE_DELAY_MS")) fo.test_release_delay_ms = static_cast<uint32_t>(std::atoi(d));
  // TEST ONLY: KVFS_TEST_NEGATIVE_TIMEOUT_S: how long the kernel caches an ENOENT answer (FsOptions;
  // default 1 s), so a test can tell a peer's invalidation of a negative entry from its expiry.
  if (const char* d = std::getenv("KVFS_TEST_NEGATIVE_TIMEOUT_S")) fo.negative_timeout_s = std::atof(d);
  // TEST ONLY: KVFS_TEST_NOTIFY_DELAY_MS delays every dentry invalidation (FsOptions).
  if (const char* d = std::getenv("KVFS_TEST_NOTIFY_DELAY_MS")) fo.test_notify_delay_ms = static_cast<uint32_t>(std::atoi(d));
  // TEST ONLY: KVFS_TEST_LOOKUP_REPLY_DELAY_MS / _NAME delay a found name's LOOKUP reply (FsOptions).
  if (const char* d = std::getenv("KVFS_TEST_LOOKUP_REPLY_DELAY_MS")) fo.test_lookup_reply_delay_ms = static_cast<uint32_t>(std::atoi(d));
  if (const char* d = std::getenv("KVFS_TEST_LOOKUP_REPLY_DELAY_NAME")) fo.test_lookup_reply_delay_name = d;
  if (const char* d = std::getenv("KVFS_TEST_LOOKUP_REPLY_DELAY_AFTER_REF")) fo.test_lookup_reply_delay_after_ref = std::atoi(d) != 0;
  if (const char* d = std::getenv("KVFS_TEST_AFTER_COMMIT_DELAY_MS")) {
    fo.test_after_commit_delay_ms = static_cast<uint32_t>(std::atoi(d));
  }
  // The FUSE mount first, the store after: a mount that fails (the kernel or fusermount3 refuses it,
  // /dev/fuse) has then taken no node generation and created no index. Until the loop answers the
  // kernel's INIT, requests to the mount wait (a long index rebuild included) instead of reaching the
  // empty directory underneath; if the store cannot be opened, the mount is removed again (the waiting
  // requests then fail with ENOTCONN or ECONNABORTED: the session's fd is closed first, which aborts the connection).
  auto fs = std::make_unique<kvfs::KvfsFs>(nullptr, fo);
  // SIGINT/SIGTERM/SIGHUP stay blocked (pending, not lost) from before the mount until the handlers that
  // end the loop are installed below: one that came as soon as the mount was visible killed the daemon
  // with the mount left behind (cli_test test_sigterm_while_the_store_opens, once on a loaded machine).
  sigset_t end_signals, old_mask;
  sigemptyset(&end_signals);
  sigaddset(&end_signals, SIGINT);
  sigaddset(&end_signals, SIGTERM);
  sigaddset(&end_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &end_signals, &old_mask);
  kvfs::Status ms;
  const std::string mount_err = CaptureStderr([&] { ms = fs->Mount(a.mountpoint, fopts, "kvfs:" + (a.s3_url.empty() ? a.backing : a.s3_url)); });
  if (!ms.ok()) {
    fs.reset();
    const std::string why = LastLine(mount_err);
    return fail(ms.IsInvalidArgument() ? kExitUsage : kExitFail, ms.message() + (why.empty() ? "" : ": " + why));
  }
  // Before the loop answers INIT, outside the stderr capture (its warning is logged once).
  // A daemon also hands the warning to the terminal with its "mounted" report (its log is a file).
  std::string mount_warning;
  if (kvfs::Status ra = fs->ApplyReadAhead(); !ra.ok()) {
    mount_warning = "read-ahead of " + a.mountpoint + " left at the kernel's 128 KiB (--read-ahead " + a.read_ahead +
                    "): " + ra.message();
    spdlog::warn("kvfs: {}", mount_warning);
  } else if (fo.read_ahead) {
    spdlog::debug("kvfs: read-ahead of {} set to {} KiB", a.mountpoint, fo.read_ahead >> 10);
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
  // SIGINT/SIGTERM/SIGHUP from now on end the loop (at once if one comes while the store opens).
  kvfs::Status ss = fs->InstallSignalHandlers();
  if (!ss.ok()) spdlog::warn("{}", ss.ToString());
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);  // a signal that came meanwhile is handled now

  const bool index_existed = IsDir(so.index_dir);
  const bool index_was_empty = index_existed && DirEmpty(so.index_dir);  // pre-created by the operator
  // TEST ONLY (not in --help): KVFS_TEST_STORE_OPEN_DELAY_MS waits that long with the FUSE mount made and
  // the store not open yet, so that tests access the mountpoint in that window (cli_test).
  if (const char* d = std::getenv("KVFS_TEST_STORE_OPEN_DELAY_MS")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(d)));
  }
  // How loads into never-touched memory are verified (blockstore/kernel_copy.h): forced, or a probe of a
  // few ms (after the fork: it runs on a thread of its own). Before the store opens, which may read.
  const kvfs::VerifyCopyChoice verify_choice = kvfs::ConfigureVerifyCopy(verify_copy);
  auto opened = kvfs::Store::Open(so);
  if (!opened.ok()) {
    fs.reset();  // unmounts
    // A failed first mount leaves no index behind (it would only be rebuilt by the next one); an index
    // dir that existed empty is left empty.
    std::error_code ec;
    if (!index_existed) {
      std::filesystem::remove_all(so.index_dir, ec);
    } else if (index_was_empty) {
      std::vector<std::filesystem::path> made;
      for (const auto& e : std::filesystem::directory_iterator(so.index_dir, ec)) made.push_back(e.path());
      for (const auto& m : made) std::filesystem::remove_all(m, ec);
    }
    const auto& s = opened.status();
    if (s.IsBusy() && s.message().rfind("index dir", 0) == 0) {
      // RocksDB's lock: another mount on this host uses this index dir (--force cannot help).
      const pid_t holder = IndexLockHolder(so.index_dir);
      return fail(kExitUsage, "index dir '" + so.index_dir + "' is in use by another kvfs mount on this host" +
                                  (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
                                  "; give this mount its own --index-dir");
    }
    // S3: the node directory is named by its URL, not by its path in the local staging directory.
    auto shown = [&](std::string text) {
      if (a.s3_url.empty() || a.backing.empty()) return text;
      std::string u = a.s3_url;
      while (!u.empty() && u.back() == '/') u.pop_back();
      for (size_t p = text.find(a.backing); p != std::string::npos; p = text.find(a.backing, p + u.size())) {
        text.replace(p, a.backing.size(), u);
      }
      return text;
    };
    if (s.IsBusy()) {  // the node directory: NodeDir's message names the owner (host, pid, heartbeat)
      return fail(kExitUsage, "node '" + so.node_id + "' is in use: " + shown(s.message()) +
                                  (a.force ? std::string() : "; use --force to take over if it is not"));
    }
    std::string hint;
    if (s.ToErrno() == EACCES && so.index_dir.rfind("/var/lib/kvfs/", 0) == 0 && geteuid() != 0) {
      hint = " (a mount by a non-root user needs --index-dir in a directory it can write)";
    }
    return fail(s.IsInvalidArgument() || !hint.empty() ? kExitUsage : kExitFail,
                "cannot open store: " + shown(s.ToString()) + hint);
  }
  std::unique_ptr<kvfs::Store> store = std::move(*opened);
  fs->AttachStore(store.get());
  spdlog::info("kvfs: {}", a.segment_size_note);  // after the open: a refused mount prints its one line only
  spdlog::info("kvfs: verify copy: {}", kvfs::DescribeVerifyCopy(verify_choice));
  if (report_fd >= 0) {
    // Daemon: stdin and stdout off the terminal (stderr is already the log file, see the fork).
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
      if (devnull > 2) close(devnull);
    }
    Report(report_fd, 0, mount_warning.empty() ? "mounted" : "mounted\t" + mount_warning);
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

}  // namespace kvfs::cli
