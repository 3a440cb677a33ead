// kvfs-nfsim: a thin passthrough FUSE file system that stands in for an NFS export in benchmarks.
//
//   kvfs-nfsim SOURCE_DIR MOUNTPOINT [--latency-us 500] [--data-mbps 0] [--dir-timeout 30]
//              [--file-timeout 0] [--negative-timeout 0] [--threads 64] [--splice] [--foreground]
//
// Every FUSE request under MOUNTPOINT is passed through to SOURCE_DIR (a real directory), counted by
// type, and -- for the operations a network file system turns into a round trip -- delayed by
// --latency-us before it is executed. Reads and writes optionally pay --data-mbps (a per-byte cost,
// bytes / bandwidth, added per request). Because it is a FUSE layer, it sees everything that reaches the
// kernel VFS for that mount: plain syscalls, O_DIRECT, io_uring (kvfs's segment writes), mmap'd I/O.
//
// Round trips (delayed and reported as "metadata"): lookup, getattr, setattr, open, opendir, create,
// mknod, mkdir, rmdir, unlink, rename, link, symlink, readlink, flush (= the NFS CLOSE: close(2) waits
// for FUSE FLUSH, while FUSE sends RELEASE asynchronously after close(2) has returned), readdir, access,
// statfs, fsync, fsyncdir, fallocate, lseek(SEEK_DATA/HOLE), and user xattr calls. Counted but free:
// release/releasedir (the close was charged at flush), forget (kernel-local), read/write (data cost only),
// ioctl (answered ENOTTY locally, as NFS does for TCGETS), access(F_OK) (NFS answers it from the LOOKUP),
// and the kernel's `security.*` getxattr probe that FUSE issues before writes (no NFS counterpart;
// answered ENODATA). No default_permissions: with it the kernel would refresh a chunk file's attributes
// (GETATTR) before every open, which an NFS client does not do beyond its OPEN. fsync/fsyncdir are reported
// apart ("syncs") so a benchmark can count them separately.
//
// Caching model (see docs/benchmarks.md "The NFS stand-in"): FUSE's own kernel caches are what an NFS
// client's caches would be. Directories keep entries and attributes for --dir-timeout (like acdirmin=30s:
// the hash fan-out directories of a long-running cache are known to the client), regular files and
// negative entries for --file-timeout / --negative-timeout (default 0, like actimeo=0 on files: every
// stat/open/access of a chunk file is a round trip, which is what a shared store with several writers
// needs and what the NFS test bed measured: a missing-name stat is 1 LOOKUP). The data page cache follows
// NFS close-to-open: an open keeps the cached pages when the file's mtime and size did not change since
// the previous open (fi->keep_cache), otherwise they are dropped.
//
// Counters: getxattr("user.nfsim.stats") on the mount root returns one JSON object (not counted);
// setxattr("user.nfsim.reset", any) on the root zeroes the counters. SIGINT/SIGTERM unmount.
#define FUSE_USE_VERSION 312

#include <dirent.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fuse/session.h"

#include <sys/sysmacros.h>

namespace {

// ---------------------------------------------------------------------------------------------------
// Counters

enum Op : int {
  kLookup, kGetattr, kSetattr, kOpen, kOpendir, kCreate, kMknod, kMkdir, kRmdir, kUnlink, kRename, kLink,
  kSymlink, kReadlink, kFlush, kReaddir, kAccess, kStatfs, kFsync, kFsyncdir, kFallocate, kLseek, kXattr,
  // free (not round trips)
  kRelease, kReleasedir, kForget, kRead, kWrite, kIoctl, kSecurityXattr, kAccessFok,
  kNumOps
};
constexpr int kFirstFree = kRelease;
const char* const kOpNames[kNumOps] = {
    "lookup", "getattr", "setattr", "open", "opendir", "create", "mknod", "mkdir", "rmdir", "unlink",
    "rename", "link", "symlink", "readlink", "flush", "readdir", "access", "statfs", "fsync", "fsyncdir",
    "fallocate", "lseek", "xattr", "release", "releasedir", "forget", "read", "write", "ioctl",
    "security_xattr_probe", "access_f_ok"};

struct Options {
  std::string source, mountpoint;
  long latency_us = 500;
  double data_mbps = 0;  // 0 = no per-byte cost
  double dir_timeout = 30, file_timeout = 0, negative_timeout = 0;
  unsigned threads = 64;
  unsigned read_ahead_kb = 15360;  // an NFS client reads ahead 15 x rsize (1 MiB); FUSE's bdi default is 128
  bool splice = false, foreground = false, writeback = false;
};

struct Inode {
  int fd = -1;  // O_PATH
  dev_t dev = 0;
  ino_t ino = 0;
  bool is_dir = false;
  uint64_t nlookup = 0;  // guarded by Fs::mu
  // close-to-open page cache model: (mtime, size) at the previous open
  std::mutex m;
  int64_t seen_mtime_ns = -1;
  off_t seen_size = -1;
};

struct DirHandle {
  DIR* dp = nullptr;
  off_t offset = 0;
  struct dirent* entry = nullptr;
};

struct Fs {
  Options o;
  Inode root;
  std::mutex mu;
  std::map<std::pair<dev_t, ino_t>, Inode*> inodes;
  std::atomic<uint64_t> ops[kNumOps];
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0}, delay_ns{0}, data_delay_ns{0};
  timespec start{};
  Fs() {
    for (auto& a : ops) a = 0;
  }
};
Fs* g_fs = nullptr;

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void SleepNs(int64_t ns, std::atomic<uint64_t>* acc) {
  if (ns <= 0) return;
  int64_t t0 = MonoNs();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  acc->fetch_add(static_cast<uint64_t>(MonoNs() - t0), std::memory_order_relaxed);
}

// Counts one request of type `op` and, for round trips, waits the configured latency first.
void Rpc(Op op) {
  g_fs->ops[op].fetch_add(1, std::memory_order_relaxed);
  if (op < kFirstFree) SleepNs(g_fs->o.latency_us * 1000, &g_fs->delay_ns);
}

void DataCost(uint64_t bytes) {
  if (g_fs->o.data_mbps <= 0 || bytes == 0) return;
  SleepNs(static_cast<int64_t>(static_cast<double>(bytes) * 1e3 / g_fs->o.data_mbps), &g_fs->data_delay_ns);
}

std::string StatsJson() {
  Fs& f = *g_fs;
  uint64_t meta = 0, syncs = 0;
  std::string ops = "{";
  for (int i = 0; i < kNumOps; ++i) {
    uint64_t v = f.ops[i].load();
    if (i < kFirstFree) {
      if (i == kFsync || i == kFsyncdir) syncs += v;
      else meta += v;
    }
    if (i) ops += ",";
    ops += "\"" + std::string(kOpNames[i]) + "\":" + std::to_string(v);
  }
  ops += "}";
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double up = double(now.tv_sec - f.start.tv_sec) + double(now.tv_nsec - f.start.tv_nsec) / 1e9;
  char head[512];
  std::snprintf(head, sizeof(head),
                "{\"pid\":%d,\"latency_us\":%ld,\"data_mbps\":%.1f,\"dir_timeout\":%.3f,\"file_timeout\":%.3f,"
                "\"negative_timeout\":%.3f,\"uptime_s\":%.3f,\"metadata_ops\":%llu,\"syncs\":%llu,"
                "\"bytes_read\":%llu,\"bytes_written\":%llu,\"delay_ns\":%llu,\"data_delay_ns\":%llu,\"ops\":",
                getpid(), f.o.latency_us, f.o.data_mbps, f.o.dir_timeout, f.o.file_timeout, f.o.negative_timeout,
                up, (unsigned long long)meta, (unsigned long long)syncs, (unsigned long long)f.bytes_read.load(),
                (unsigned long long)f.bytes_written.load(), (unsigned long long)f.delay_ns.load(),
                (unsigned long long)f.data_delay_ns.load());
  return std::string(head) + ops + "}";
}

// ---------------------------------------------------------------------------------------------------
// Inode table (as libfuse's example/passthrough_ll.c: one O_PATH fd per inode the kernel knows)

Inode* In(fuse_ino_t ino) {
  if (ino == FUSE_ROOT_ID) return &g_fs->root;
  return reinterpret_cast<Inode*>(ino);
}
int Fd(fuse_ino_t ino) { return In(ino)->fd; }
std::string ProcPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

double AttrTimeout(const struct stat& st) { return S_ISDIR(st.st_mode) ? g_fs->o.dir_timeout : g_fs->o.file_timeout; }

// Looks `name` up under `parent` (no counting: callers count the request they serve) and fills e.
int DoLookup(fuse_ino_t parent, const char* name, fuse_entry_param* e) {
  std::memset(e, 0, sizeof(*e));
  int fd = openat(Fd(parent), name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno;
  if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    int err = errno;
    close(fd);
    return err;
  }
  Inode* in = nullptr;
  {
    std::lock_guard<std::mutex> g(g_fs->mu);
    auto key = std::make_pair(e->attr.st_dev, e->attr.st_ino);
    auto it = g_fs->inodes.find(key);
    if (it != g_fs->inodes.end()) {
      in = it->second;
      in->nlookup++;
    } else {
      in = new Inode();
      in->fd = fd;
      fd = -1;
      in->dev = e->attr.st_dev;
      in->ino = e->attr.st_ino;
      in->is_dir = S_ISDIR(e->attr.st_mode);
      in->nlookup = 1;
      g_fs->inodes[key] = in;
    }
  }
  if (fd >= 0) close(fd);
  e->ino = reinterpret_cast<fuse_ino_t>(in);
  e->attr_timeout = AttrTimeout(e->attr);
  e->entry_timeout = AttrTimeout(e->attr);
  return 0;
}

void Forget(fuse_ino_t ino, uint64_t n) {
  if (ino == FUSE_ROOT_ID) return;
  Inode* in = In(ino);
  std::lock_guard<std::mutex> g(g_fs->mu);
  if (in->nlookup < n) n = in->nlookup;
  in->nlookup -= n;
  if (in->nlookup == 0) {
    g_fs->inodes.erase(std::make_pair(in->dev, in->ino));
    close(in->fd);
    delete in;
  }
}

void ReplyEntry(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_entry_param e;
  int err = DoLookup(parent, name, &e);
  if (err) return (void)fuse_reply_err(req, err);
  fuse_reply_entry(req, &e);
}

// ---------------------------------------------------------------------------------------------------
// Operations

void OpInit(void*, fuse_conn_info* conn) {
  // NFS revalidates cached data at open (close-to-open), not on every read: no auto_inval_data.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  conn->want &= ~FUSE_CAP_READDIRPLUS;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  if (conn->capable & FUSE_CAP_ASYNC_DIO) conn->want |= FUSE_CAP_ASYNC_DIO;
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  // Requests in flight: an NFSv4.1 client has 64 session slots (nfs.max_session_slots); FUSE's default
  // of 12 background requests (async direct I/O, read-ahead) made 4+ threads of 2.25 MiB O_DIRECT reads
  // queue in fuse_get_req, in front of the "network".
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  if (g_fs->o.splice) {
    conn->want |= (conn->capable & (FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE));
  } else {
    conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  }
  if (g_fs->o.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE)) conn->want |= FUSE_CAP_WRITEBACK_CACHE;
  conn->max_write = 1u << 20;
  conn->max_readahead = 1u << 20;
  // The bdi's read-ahead can only be raised after INIT (the kernel takes min(bdi, max_readahead) then):
  // a helper thread sets /sys/class/bdi/<dev>/read_ahead_kb once the loop answers.
  if (g_fs->o.read_ahead_kb > 0) {
    std::thread([] {
      usleep(20000);
      struct stat st;
      if (stat(g_fs->o.mountpoint.c_str(), &st) != 0) return;
      std::string p = "/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)) +
                      "/read_ahead_kb";
      FILE* f = std::fopen(p.c_str(), "w");
      if (!f) return;
      std::fprintf(f, "%u\n", g_fs->o.read_ahead_kb);
      std::fclose(f);
    }).detach();
  }
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Rpc(kLookup);
  fuse_entry_param e;
  int err = DoLookup(parent, name, &e);
  if (err == ENOENT && g_fs->o.negative_timeout > 0) {
    std::memset(&e, 0, sizeof(e));
    e.entry_timeout = g_fs->o.negative_timeout;
    return (void)fuse_reply_entry(req, &e);
  }
  if (err) return (void)fuse_reply_err(req, err);
  fuse_reply_entry(req, &e);
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t n) {
  g_fs->ops[kForget]++;
  Forget(ino, n);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* f) {
  g_fs->ops[kForget] += count;
  for (size_t i = 0; i < count; ++i) Forget(f[i].ino, f[i].nlookup);
  fuse_reply_none(req);
}

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Rpc(kGetattr);
  struct stat st;
  int r = fi ? fstat(static_cast<int>(fi->fh), &st) : fstatat(Fd(ino), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
  if (r != 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_attr(req, &st, AttrTimeout(st));
}

void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int valid, fuse_file_info* fi) {
  Rpc(kSetattr);
  int fd = Fd(ino);
  std::string p = ProcPath(fd);
  int r = 0;
  if (valid & FUSE_SET_ATTR_MODE) r = fi ? fchmod(static_cast<int>(fi->fh), attr->st_mode) : chmod(p.c_str(), attr->st_mode);
  if (r == 0 && (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
    uid_t u = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : static_cast<uid_t>(-1);
    gid_t gg = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : static_cast<gid_t>(-1);
    r = fchownat(fd, "", u, gg, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
  }
  if (r == 0 && (valid & FUSE_SET_ATTR_SIZE)) {
    r = fi ? ftruncate(static_cast<int>(fi->fh), attr->st_size) : truncate(p.c_str(), attr->st_size);
  }
  if (r == 0 && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
    timespec tv[2];
    tv[0].tv_sec = 0;
    tv[1].tv_sec = 0;
    tv[0].tv_nsec = UTIME_OMIT;
    tv[1].tv_nsec = UTIME_OMIT;
    if (valid & FUSE_SET_ATTR_ATIME_NOW) tv[0].tv_nsec = UTIME_NOW;
    else if (valid & FUSE_SET_ATTR_ATIME) tv[0] = attr->st_atim;
    if (valid & FUSE_SET_ATTR_MTIME_NOW) tv[1].tv_nsec = UTIME_NOW;
    else if (valid & FUSE_SET_ATTR_MTIME) tv[1] = attr->st_mtim;
    r = fi ? futimens(static_cast<int>(fi->fh), tv) : utimensat(AT_FDCWD, p.c_str(), tv, 0);
  }
  if (r != 0) return (void)fuse_reply_err(req, errno);
  struct stat st;
  if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_attr(req, &st, AttrTimeout(st));
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  Rpc(kReadlink);
  char buf[PATH_MAX + 1];
  ssize_t n = readlinkat(Fd(ino), "", buf, PATH_MAX);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  buf[n] = 0;
  fuse_reply_readlink(req, buf);
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Rpc(kMknod);
  if (mknodat(Fd(parent), name, mode, rdev) != 0) return (void)fuse_reply_err(req, errno);
  ReplyEntry(req, parent, name);
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Rpc(kMkdir);
  if (mkdirat(Fd(parent), name, mode) != 0) return (void)fuse_reply_err(req, errno);
  ReplyEntry(req, parent, name);
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  Rpc(kSymlink);
  if (symlinkat(link, Fd(parent), name) != 0) return (void)fuse_reply_err(req, errno);
  ReplyEntry(req, parent, name);
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char* name) {
  Rpc(kLink);
  if (linkat(AT_FDCWD, ProcPath(Fd(ino)).c_str(), Fd(parent), name, AT_SYMLINK_FOLLOW) != 0) {
    return (void)fuse_reply_err(req, errno);
  }
  ReplyEntry(req, parent, name);
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Rpc(kUnlink);
  fuse_reply_err(req, unlinkat(Fd(parent), name, 0) == 0 ? 0 : errno);
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Rpc(kRmdir);
  fuse_reply_err(req, unlinkat(Fd(parent), name, AT_REMOVEDIR) == 0 ? 0 : errno);
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
              unsigned int flags) {
  Rpc(kRename);
  int r = renameat2(Fd(parent), name, Fd(newparent), newname, flags);
  fuse_reply_err(req, r == 0 ? 0 : errno);
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Rpc(kOpendir);
  int fd = openat(Fd(ino), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return (void)fuse_reply_err(req, errno);
  auto* d = new DirHandle();
  d->dp = fdopendir(fd);
  if (!d->dp) {
    int err = errno;
    close(fd);
    delete d;
    return (void)fuse_reply_err(req, err);
  }
  fi->fh = reinterpret_cast<uint64_t>(d);
  fuse_reply_open(req, fi);
}

void OpReaddir(fuse_req_t req, fuse_ino_t, size_t size, off_t offset, fuse_file_info* fi) {
  Rpc(kReaddir);
  auto* d = reinterpret_cast<DirHandle*>(fi->fh);
  std::vector<char> buf(size);
  size_t used = 0;
  if (offset != d->offset) {
    seekdir(d->dp, offset);
    d->entry = nullptr;
    d->offset = offset;
  }
  for (;;) {
    if (!d->entry) {
      errno = 0;
      d->entry = readdir(d->dp);
      if (!d->entry) {
        if (errno && used == 0) return (void)fuse_reply_err(req, errno);
        break;
      }
    }
    struct stat st;
    std::memset(&st, 0, sizeof(st));
    st.st_ino = d->entry->d_ino;
    st.st_mode = static_cast<mode_t>(d->entry->d_type) << 12;
    off_t next = d->entry->d_off;
    size_t n = fuse_add_direntry(req, buf.data() + used, size - used, d->entry->d_name, &st, next);
    if (n > size - used) break;
    used += n;
    d->entry = nullptr;
    d->offset = next;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void OpReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  g_fs->ops[kReleasedir]++;
  auto* d = reinterpret_cast<DirHandle*>(fi->fh);
  closedir(d->dp);
  delete d;
  fuse_reply_err(req, 0);
}

void OpFsyncdir(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
  Rpc(kFsyncdir);
  int fd = dirfd(reinterpret_cast<DirHandle*>(fi->fh)->dp);
  int r = datasync ? fdatasync(fd) : fsync(fd);
  fuse_reply_err(req, r == 0 ? 0 : errno);
}

// Opens of the backing file drop O_DIRECT: the kernel already sends an O_DIRECT caller's I/O straight to
// this layer (FUSE direct_IO), like an NFS client sends it straight to the server; the server side
// (here: the backing ext4) keeps its own page cache, as an NFS server does.
int BackingFlags(int flags) { return (flags & ~(O_NOFOLLOW | O_DIRECT)) | O_CLOEXEC; }

void SetKeepCache(Inode* in, int fd, fuse_file_info* fi) {
  struct stat st;
  if (fstat(fd, &st) != 0) return;
  int64_t m = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  std::lock_guard<std::mutex> g(in->m);
  fi->keep_cache = (m == in->seen_mtime_ns && st.st_size == in->seen_size) ? 1 : 0;
  in->seen_mtime_ns = m;
  in->seen_size = st.st_size;
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  Rpc(kCreate);
  int fd = openat(Fd(parent), name, BackingFlags(fi->flags) | O_CREAT, mode);
  if (fd < 0) return (void)fuse_reply_err(req, errno);
  fuse_entry_param e;
  int err = DoLookup(parent, name, &e);
  if (err) {
    close(fd);
    return (void)fuse_reply_err(req, err);
  }
  fi->fh = static_cast<uint64_t>(fd);
  SetKeepCache(In(e.ino), fd, fi);
  fuse_reply_create(req, &e, fi);
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Rpc(kOpen);
  int fd = open(ProcPath(Fd(ino)).c_str(), BackingFlags(fi->flags));
  if (fd < 0) return (void)fuse_reply_err(req, errno);
  fi->fh = static_cast<uint64_t>(fd);
  SetKeepCache(In(ino), fd, fi);
  fuse_reply_open(req, fi);
}

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  g_fs->ops[kRead]++;
  if (g_fs->o.splice) {
    fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    buf.buf[0].fd = static_cast<int>(fi->fh);
    buf.buf[0].pos = off;
    g_fs->bytes_read += size;  // requested bytes (an upper bound at end of file)
    DataCost(size);
    fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
    return;
  }
  thread_local std::unique_ptr<char[]> tbuf;
  thread_local size_t tcap = 0;
  if (tcap < size) {
    tbuf.reset(new char[size]);
    tcap = size;
  }
  ssize_t n = pread(static_cast<int>(fi->fh), tbuf.get(), size, off);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  g_fs->bytes_read += static_cast<uint64_t>(n);
  DataCost(static_cast<uint64_t>(n));
  fuse_reply_buf(req, tbuf.get(), static_cast<size_t>(n));
}

void OpWriteBuf(fuse_req_t req, fuse_ino_t, fuse_bufvec* in_buf, off_t off, fuse_file_info* fi) {
  g_fs->ops[kWrite]++;
  fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in_buf));
  out.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  out.buf[0].fd = static_cast<int>(fi->fh);
  out.buf[0].pos = off;
  ssize_t n = fuse_buf_copy(&out, in_buf, static_cast<fuse_buf_copy_flags>(0));
  if (n < 0) return (void)fuse_reply_err(req, static_cast<int>(-n));
  g_fs->bytes_written += static_cast<uint64_t>(n);
  DataCost(static_cast<uint64_t>(n));
  fuse_reply_write(req, static_cast<size_t>(n));
}

void OpFlush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  Rpc(kFlush);
  fuse_reply_err(req, 0);
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  g_fs->ops[kRelease]++;
  close(static_cast<int>(fi->fh));
  fuse_reply_err(req, 0);
}

void OpFsync(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
  Rpc(kFsync);
  int fd = static_cast<int>(fi->fh);
  int r = datasync ? fdatasync(fd) : fsync(fd);
  fuse_reply_err(req, r == 0 ? 0 : errno);
}

void OpStatfs(fuse_req_t req, fuse_ino_t ino) {
  Rpc(kStatfs);
  struct statvfs sv;
  if (fstatvfs(Fd(ino), &sv) != 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_statfs(req, &sv);
}

void OpAccess(fuse_req_t req, fuse_ino_t ino, int mask) {
  // access(F_OK) after a successful LOOKUP needs no round trip on NFS (nfs_permission returns early when no
  // r/w/x bit is asked); FUSE (without default_permissions) still sends FUSE_ACCESS: counted apart, free.
  Rpc(mask == F_OK ? kAccessFok : kAccess);
  int r = faccessat(AT_FDCWD, ProcPath(Fd(ino)).c_str(), mask, 0);
  fuse_reply_err(req, r == 0 ? 0 : errno);
}

void OpFallocate(fuse_req_t req, fuse_ino_t, int mode, off_t off, off_t len, fuse_file_info* fi) {
  Rpc(kFallocate);
  int r = fallocate(static_cast<int>(fi->fh), mode, off, len);
  fuse_reply_err(req, r == 0 ? 0 : errno);
}

void OpLseek(fuse_req_t req, fuse_ino_t, off_t off, int whence, fuse_file_info* fi) {
  Rpc(kLseek);
  off_t r = lseek(static_cast<int>(fi->fh), off, whence);
  if (r < 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_lseek(req, r);
}

void OpIoctl(fuse_req_t req, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned, const void*, size_t,
             size_t) {
  g_fs->ops[kIoctl]++;
  fuse_reply_err(req, ENOTTY);
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  if (ino == FUSE_ROOT_ID && std::strcmp(name, "user.nfsim.stats") == 0) {
    std::string s = StatsJson();
    if (size == 0) return (void)fuse_reply_xattr(req, s.size());
    if (size < s.size()) return (void)fuse_reply_err(req, ERANGE);
    return (void)fuse_reply_buf(req, s.data(), s.size());
  }
  if (std::strncmp(name, "security.", 9) == 0) {
    g_fs->ops[kSecurityXattr]++;
    return (void)fuse_reply_err(req, ENODATA);
  }
  Rpc(kXattr);
  std::vector<char> buf(size);
  ssize_t n = getxattr(ProcPath(Fd(ino)).c_str(), name, size ? buf.data() : nullptr, size);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  if (size == 0) return (void)fuse_reply_xattr(req, static_cast<size_t>(n));
  fuse_reply_buf(req, buf.data(), static_cast<size_t>(n));
}

void OpSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  if (ino == FUSE_ROOT_ID && std::strcmp(name, "user.nfsim.reset") == 0) {
    for (auto& a : g_fs->ops) a = 0;
    g_fs->bytes_read = 0;
    g_fs->bytes_written = 0;
    g_fs->delay_ns = 0;
    g_fs->data_delay_ns = 0;
    return (void)fuse_reply_err(req, 0);
  }
  Rpc(kXattr);
  int r = setxattr(ProcPath(Fd(ino)).c_str(), name, value, size, flags);
  fuse_reply_err(req, r == 0 ? 0 : errno);
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Rpc(kXattr);
  std::vector<char> buf(size);
  ssize_t n = listxattr(ProcPath(Fd(ino)).c_str(), size ? buf.data() : nullptr, size);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  if (size == 0) return (void)fuse_reply_xattr(req, static_cast<size_t>(n));
  fuse_reply_buf(req, buf.data(), static_cast<size_t>(n));
}

void OpRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  Rpc(kXattr);
  int r = removexattr(ProcPath(Fd(ino)).c_str(), name);
  fuse_reply_err(req, r == 0 ? 0 : errno);
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof(ops));
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetattr;
  ops.setattr = OpSetattr;
  ops.readlink = OpReadlink;
  ops.mknod = OpMknod;
  ops.mkdir = OpMkdir;
  ops.symlink = OpSymlink;
  ops.link = OpLink;
  ops.unlink = OpUnlink;
  ops.rmdir = OpRmdir;
  ops.rename = OpRename;
  ops.opendir = OpOpendir;
  ops.readdir = OpReaddir;
  ops.releasedir = OpReleasedir;
  ops.fsyncdir = OpFsyncdir;
  ops.create = OpCreate;
  ops.open = OpOpen;
  ops.read = OpRead;
  ops.write_buf = OpWriteBuf;
  ops.flush = OpFlush;
  ops.release = OpRelease;
  ops.fsync = OpFsync;
  ops.statfs = OpStatfs;
  ops.access = OpAccess;
  ops.fallocate = OpFallocate;
  ops.lseek = OpLseek;
  ops.ioctl = OpIoctl;
  ops.getxattr = OpGetxattr;
  ops.setxattr = OpSetxattr;
  ops.listxattr = OpListxattr;
  ops.removexattr = OpRemovexattr;
  return ops;
}

[[noreturn]] void Usage(const char* msg) {
  if (msg) std::fprintf(stderr, "kvfs-nfsim: %s\n", msg);
  std::fprintf(stderr,
               "usage: kvfs-nfsim SOURCE_DIR MOUNTPOINT [--latency-us N (500)] [--data-mbps MBPS (0 = off)]\n"
               "       [--dir-timeout S (30)] [--file-timeout S (0)] [--negative-timeout S (0)]\n"
               "       [--threads N (64)] [--read-ahead-kb KB (15360)] [--writeback] [--splice] [--foreground]\n"
               "       [-o FUSE_OPTS]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> pos, fuse_opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--latency-us") o.latency_us = std::stol(val());
    else if (a == "--data-mbps") o.data_mbps = std::stod(val());
    else if (a == "--dir-timeout") o.dir_timeout = std::stod(val());
    else if (a == "--file-timeout") o.file_timeout = std::stod(val());
    else if (a == "--negative-timeout") o.negative_timeout = std::stod(val());
    else if (a == "--threads") o.threads = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--splice") o.splice = true;
    else if (a == "--writeback") o.writeback = true;
    else if (a == "--read-ahead-kb") o.read_ahead_kb = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--foreground" || a == "-f") o.foreground = true;
    else if (a == "-o") fuse_opts.push_back(val());
    else if (a == "-h" || a == "--help") Usage(nullptr);
    else if (!a.empty() && a[0] == '-') Usage(("unknown option " + a).c_str());
    else pos.push_back(a);
  }
  if (pos.size() != 2) Usage("need SOURCE_DIR and MOUNTPOINT");
  char rp[PATH_MAX];
  if (!realpath(pos[0].c_str(), rp)) Usage(("bad source dir " + pos[0]).c_str());
  o.source = rp;
  if (!realpath(pos[1].c_str(), rp)) Usage(("bad mountpoint " + pos[1]).c_str());
  o.mountpoint = rp;

  // Many O_PATH fds (one per inode the kernel knows).
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  // Sleep accuracy: the default 50 us timer slack would add ~10 % to a 0.5 ms latency. Worker threads
  // inherit it from this thread.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

  static Fs fs;
  g_fs = &fs;
  fs.o = o;
  clock_gettime(CLOCK_MONOTONIC, &fs.start);
  fs.root.fd = open(o.source.c_str(), O_PATH | O_CLOEXEC);
  if (fs.root.fd < 0) Usage(("cannot open " + o.source).c_str());
  fs.root.is_dir = true;
  fs.root.nlookup = 2;

  std::string opts = "fsname=nfsim:" + o.source + ",subtype=nfsim";
  for (auto& x : fuse_opts) opts += "," + x;
  static const fuse_lowlevel_ops ops = MakeOps();
  kvfs::FuseSession session;  // the set-up kvfs uses too (fuse/session.h)
  if (!session.Create("kvfs-nfsim", opts, ops, nullptr)) Usage(("fuse_session_new failed: -o " + opts).c_str());
  if (!session.InstallSignalHandlers()) return 1;
  if (!session.Mount(o.mountpoint)) {
    std::fprintf(stderr, "kvfs-nfsim: cannot mount at %s\n", o.mountpoint.c_str());
    return 1;
  }
  fuse_daemonize(o.foreground ? 1 : 0);
  int r = session.Loop(/*clone_fd=*/true, o.threads, o.threads);  // then unmounts
  return r < 0 ? 1 : 0;
}
