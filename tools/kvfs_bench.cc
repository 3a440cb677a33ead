// kvfs-bench: KV-cache connector workloads, direct on a (simulated) NFS export vs kvfs mounted over it.
//
//   kvfs-bench [--profile vllm,sglang-file,...|all] [--chunks N] [--threads T] [--chunk-bytes B]
//              [--hit-ratio 0.5] [--latency-us 500] [--data-mbps 0] [--modes direct,ceiling,kvfs,tmpfs]
//              [--work DIR] [--tmpfs DIR] [--build DIR] [--json FILE] [--no-cold-load] [--no-progress]
//              [--repeat R] [--fill-bytes auto|B] [--kvfs-arg ARG]... [--nfsim-arg ARG]... [--ceiling-arg ARG]...
//
// For every profile and mode it builds a fresh stack under --work (default /var/tmp/kvfs-bench):
//   src/   the "NFS server's disk" (a real directory)
//   nfs/   kvfs-nfsim mounted over src/ (counts every operation, adds --latency-us per metadata op)
//   kv/    kvfs mounted with --backing nfs/kvfs-backing (mode kvfs only); idx/ its local index dir
// and replays the connector's exact syscall sequence (docs/design.md §10, tests/data/traces) against
// nfs/direct (mode direct) or kv/ (mode kvfs): init (excluded from counts), store, lookup, [remount of
// the client side: kvfs and nfsim, so the load is cold in every client cache and warm only in the
// "server's" page cache], load, warm load. Every load verifies every byte.
// Mode ceiling is what a minimal FUSE daemon can do over the same directory: the same workload through a
// second kvfs-nfsim at 0 latency (a plain passthrough, no cache, no index) mounted at ceil/ over
// nfs/ceiling-backing, so its bytes take the same two FUSE hops as kvfs's (app -> daemon -> nfsim -> disk).
// With --fill-bytes, a load_full phase (cold load with a full cache) runs after a second client restart;
// in kvfs mode the value cache is first filled with that many bytes of other files (auto: 1.25x kvfs's
// --cache-size), so the measured chunks are loaded while the cache evicts. --repeat R runs every mode R times, interleaved
// (direct, ceiling, kvfs, direct, ...), and reports the ratios of each run and their median.
// Mode tmpfs is the memory baseline of the warm-load target: the same profile, chunk set, threads and
// syscalls on a directory of a tmpfs (--tmpfs, default /dev/shm), no FUSE, no nfsim, no remount.
//
// Why C++: the replay must issue exactly the connectors' syscalls (O_DIRECT with aligned buffers, dup'd
// descriptors, pwrite per 4 KiB page) from N threads and time each one to microseconds; a Python replay
// would add interpreter time to every 10 us kvfs operation and serialize threads on the GIL.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------
// Timing and syscall recording

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Per-thread latency samples (ns) per syscall name and per connector-level operation.
struct Recorder {
  std::map<std::string, std::vector<uint32_t>> sys;
  std::vector<uint32_t> ops;
};
thread_local Recorder* t_rec = nullptr;

void Note(const char* name, int64_t t0) {
  if (t_rec) t_rec->sys[name].push_back(static_cast<uint32_t>(std::min<int64_t>(NowNs() - t0, UINT32_MAX)));
}

// Each wrapper issues one syscall, records its latency under the syscall's name, returns its result and
// leaves errno as the syscall set it.
#define SYS(name, expr)          \
  ({                             \
    int64_t _t0 = NowNs();       \
    auto _r = (expr);            \
    int _e = errno;              \
    Note(name, _t0);             \
    errno = _e;                  \
    _r;                          \
  })

[[noreturn]] void Fail(const std::string& what) { throw Failure(what); }
[[noreturn]] void FailErrno(const std::string& what) { throw Failure(what + ": " + std::strerror(errno)); }

int Open(const std::string& p, int flags, mode_t mode = 0) { return SYS("openat", ::open(p.c_str(), flags, mode)); }
void CloseOk(int fd) {
  if (SYS("close", ::close(fd)) != 0) FailErrno("close");
}
// Returns 0 or the errno.
int StatE(const std::string& p, struct stat* st = nullptr) {
  struct stat s;
  return SYS("stat", ::stat(p.c_str(), st ? st : &s)) == 0 ? 0 : errno;
}
int AccessE(const std::string& p) { return SYS("access", ::access(p.c_str(), F_OK)) == 0 ? 0 : errno; }
int MkdirE(const std::string& p, mode_t m) { return SYS("mkdir", ::mkdir(p.c_str(), m)) == 0 ? 0 : errno; }
void RenameOk(const std::string& a, const std::string& b) {
  if (SYS("rename", ::rename(a.c_str(), b.c_str())) != 0) FailErrno("rename " + a);
}
void WriteAll(int fd, const char* buf, size_t n, const char* name = "write") {
  ssize_t w = SYS(name, ::write(fd, buf, n));
  if (w != static_cast<ssize_t>(n)) {
    if (w < 0) FailErrno(std::string(name));
    Fail(std::string(name) + ": short " + std::to_string(w) + " of " + std::to_string(n));
  }
}
void PwriteAll(int fd, const char* buf, size_t n, off_t off) {
  ssize_t w = SYS("pwrite64", ::pwrite(fd, buf, n, off));
  if (w != static_cast<ssize_t>(n)) {
    if (w < 0) FailErrno("pwrite64");
    Fail("pwrite64: short");
  }
}
void ReadExact(int fd, char* buf, size_t n, const std::string& what) {
  ssize_t r = SYS("read", ::read(fd, buf, n));
  if (r < 0) FailErrno("read " + what);
  if (r != static_cast<ssize_t>(n)) Fail("short read " + what + ": " + std::to_string(r) + " of " + std::to_string(n));
}
void PreadExact(int fd, char* buf, size_t n, off_t off, const std::string& what) {
  ssize_t r = SYS("pread64", ::pread(fd, buf, n, off));
  if (r < 0) FailErrno("pread64 " + what);
  if (r != static_cast<ssize_t>(n)) Fail("short pread " + what);
}

// ---------------------------------------------------------------------------------------------------
// Content: word k of chunk N is ((N << 32) + k) ^ salt (the traces' blkN pattern, salted per run).

void Fill(char* buf, size_t len, uint64_t id, uint64_t salt) {
  size_t words = len / 8;
  auto* w = reinterpret_cast<uint64_t*>(buf);
  for (size_t k = 0; k < words; ++k) w[k] = ((id << 32) + k) ^ salt;
  if (len % 8) {
    uint64_t x = ((id << 32) + words) ^ salt;
    std::memcpy(buf + words * 8, &x, len % 8);
  }
}
void Verify(const char* buf, size_t len, uint64_t id, uint64_t salt, const std::string& what) {
  size_t words = len / 8;
  auto* w = reinterpret_cast<const uint64_t*>(buf);
  for (size_t k = 0; k < words; ++k) {
    if (w[k] != (((id << 32) + k) ^ salt)) Fail("content mismatch in " + what + " at byte " + std::to_string(k * 8));
  }
  if (len % 8) {
    uint64_t x = ((id << 32) + words) ^ salt;
    if (std::memcmp(buf + words * 8, &x, len % 8) != 0) Fail("content mismatch in tail of " + what);
  }
}

struct AlignedBuf {
  char* p = nullptr;
  size_t cap = 0;
  explicit AlignedBuf(size_t n) : cap((n + 4095) / 4096 * 4096) {
    if (posix_memalign(reinterpret_cast<void**>(&p), 4096, cap ? cap : 4096) != 0) throw std::bad_alloc();
    std::memset(p, 0, cap);
  }
  ~AlignedBuf() { free(p); }
};

// 64-hex key of chunk i (sha256-like length; splitmix64 words, deterministic per run).
std::string Key(uint64_t i, uint64_t salt) {
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  char out[65];
  uint64_t s = mix(mix(i) ^ salt);
  for (int k = 0; k < 4; ++k) {
    s = mix(s + k);
    std::snprintf(out + 16 * k, 17, "%016" PRIx64, s);
  }
  return std::string(out, 64);
}

uint64_t Rand63() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng() >> 1;
}

// ---------------------------------------------------------------------------------------------------
// Profiles: one per connector row of docs/design.md §10

struct Ctx {
  std::string root;
  size_t size = 0;
  uint64_t salt = 0;
};

struct Profile {
  std::string name, what;
  size_t default_size;
  bool stop_at_first_miss;  // lookup: stat until the first miss (llm-d, SGLang file) vs every key
  std::function<void(const Ctx&)> init;
  std::function<void(const Ctx&, uint64_t id, char* buf)> store;  // buf: aligned, size bytes, filled
  std::function<void(const Ctx&, uint64_t id, char* buf)> load;   // fills buf (size bytes)
  std::function<bool(const Ctx&, uint64_t id)> exists;            // one lookup probe
};

// ---- vLLM fs tier, C helper (vllm.fs_io_C, what wheels ship): traces/vllm-large-cext.trace
const char* kVllmModel = "Qwen_Qwen3-8B_0611cf79f8f1";
std::string VllmFinal(const Ctx& c, uint64_t id) {
  std::string k = Key(id, c.salt);
  return c.root + "/" + kVllmModel + "_r0/" + k.substr(0, 3) + "/" + k.substr(3, 2) + "_g0/" + k + ".bin";
}
void VllmInit(const Ctx& c) {
  // stat $ROOT; mkdir <M>; stat config.json; open(w); fstat; ioctl TCGETS; lseek x2; write; close;
  // O_DIRECT probe: open(O_WRONLY|O_CREAT|O_TRUNC|O_DIRECT); write 4096; close; unlink.
  StatE(c.root);
  std::string m = c.root + "/" + kVllmModel;
  MkdirE(m, 0777);
  StatE(m + "/config.json");
  int fd = Open(m + "/config.json", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) FailErrno("config.json");
  struct stat st;
  fstat(fd, &st);
  termios t;
  ioctl(fd, TCGETS, &t);
  lseek(fd, 0, SEEK_CUR);
  lseek(fd, 0, SEEK_CUR);
  std::string cfg(1806, ' ');
  WriteAll(fd, cfg.data(), cfg.size());
  CloseOk(fd);
  std::string probe = m + "/.o_direct_probe_" + std::to_string(Rand63()) + ".tmp";
  fd = Open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) FailErrno("O_DIRECT probe");
  AlignedBuf z(4096);
  WriteAll(fd, z.p, 4096);
  CloseOk(fd);
  ::unlink(probe.c_str());
}
void VllmStore(const Ctx& c, uint64_t id, char* buf) {
  std::string f = VllmFinal(c, id);
  if (AccessE(f) != ENOENT) Fail("vllm store: " + f + " exists");
  // stat leaf -> parents until one exists, then mkdir downwards (EEXIST is normal under races).
  std::vector<std::string> dirs;
  std::string d = f.substr(0, f.rfind('/'));
  for (int i = 0; i < 4; ++i) {
    if (StatE(d) == 0) break;
    dirs.push_back(d);
    d = d.substr(0, d.rfind('/'));
  }
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    int e = MkdirE(*it, 0777);
    if (e && e != EEXIST) Fail("mkdir " + *it + ": " + std::strerror(e));
  }
  std::string tmp = f + "_" + std::to_string(Rand63()) + ".tmp";
  int fd = Open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0) FailErrno("open " + tmp);
  WriteAll(fd, buf, c.size);
  CloseOk(fd);
  RenameOk(tmp, f);
}
void VllmLoad(const Ctx& c, uint64_t id, char* buf) {
  std::string f = VllmFinal(c, id);
  int fd = Open(f, O_RDONLY | O_DIRECT);
  if (fd < 0) FailErrno("open " + f);
  ReadExact(fd, buf, c.size, f);
  CloseOk(fd);
}

// ---- llm-d fs connector (older vLLM): flat model directory (the layout is not in docs/design.md §10).
std::string LlmdFinal(const Ctx& c, uint64_t id) { return c.root + "/llmd_Qwen3-8B/" + Key(id, c.salt) + ".kv"; }
void LlmdInit(const Ctx& c) { MkdirE(c.root + "/llmd_Qwen3-8B", 0777); }
void LlmdStore(const Ctx& c, uint64_t id, char* buf) {
  std::string f = LlmdFinal(c, id);
  int probe = Open(f, O_RDONLY);
  if (probe >= 0) {  // hit: touch atime and skip
    timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    SYS("utimensat", ::utimensat(AT_FDCWD, f.c_str(), ts, 0));
    CloseOk(probe);
    Fail("llmd store: " + f + " exists");
  }
  std::string tmp = f + ".tmp" + std::to_string(Rand63());
  int fd = Open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) FailErrno("open " + tmp);
  WriteAll(fd, buf, c.size);
  RenameOk(tmp, f);  // while still open
  CloseOk(fd);
}
void LlmdLoad(const Ctx& c, uint64_t id, char* buf) {
  std::string f = LlmdFinal(c, id);
  int fd = Open(f, O_RDONLY);
  if (fd < 0) FailErrno("open " + f);
  off_t end = SYS("lseek", ::lseek(fd, 0, SEEK_END));
  if (end != static_cast<off_t>(c.size)) Fail("llmd: size " + std::to_string(end));
  PreadExact(fd, buf, c.size, end - static_cast<off_t>(c.size), f);  // the tail slice (here: all of it)
  CloseOk(fd);
}

// ---- LMCache fs connector: flat dir, deterministic <key>.tmp, 28 B header + data.
constexpr size_t kLmcHeader = 28;
std::string LmcFinal(const Ctx& c, uint64_t id) {
  return c.root + "/lmcache/vllm@Qwen3-8B@1@0@" + Key(id, c.salt) + "@bfloat16.data";
}
void LmcInit(const Ctx& c) { MkdirE(c.root + "/lmcache", 0777); }
void LmcStore(const Ctx& c, uint64_t id, char* buf) {
  std::string f = LmcFinal(c, id);
  if (StatE(f) != ENOENT) Fail("lmcache store: exists");
  std::string tmp = f + ".tmp";
  int fd = Open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) FailErrno("open " + tmp);
  WriteAll(fd, buf, kLmcHeader);
  WriteAll(fd, buf + kLmcHeader, c.size - kLmcHeader);
  CloseOk(fd);
  RenameOk(tmp, f);
}
void LmcLoad(const Ctx& c, uint64_t id, char* buf) {
  std::string f = LmcFinal(c, id);
  int fd = Open(f, O_RDONLY);
  if (fd < 0) FailErrno("open " + f);
  ReadExact(fd, buf, kLmcHeader, f);
  ReadExact(fd, buf + kLmcHeader, c.size - kLmcHeader, f);
  CloseOk(fd);
}

// ---- LMCache nixl_store_dynamic (POSIX): one pwrite / pread per 4 KiB page.
std::string NixlFinal(const Ctx& c, uint64_t id) { return c.root + "/lmcache_nixl/" + Key(id, c.salt) + ".bin"; }
void NixlInit(const Ctx& c) { MkdirE(c.root + "/lmcache_nixl", 0777); }
void NixlStore(const Ctx& c, uint64_t id, char* buf) {
  std::string f = NixlFinal(c, id);
  std::string tmp = f + ".tmp" + std::to_string(Rand63());
  int fd = Open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) FailErrno("open " + tmp);
  for (size_t off = 0; off < c.size; off += 4096) PwriteAll(fd, buf + off, std::min<size_t>(4096, c.size - off), off);
  CloseOk(fd);
  RenameOk(tmp, f);
}
void NixlLoad(const Ctx& c, uint64_t id, char* buf) {
  std::string f = NixlFinal(c, id);
  int fd = Open(f, O_RDWR);
  if (fd < 0) FailErrno("open " + f);
  for (size_t off = 0; off < c.size; off += 4096) {
    PreadExact(fd, buf + off, std::min<size_t>(4096, c.size - off), off, f);
  }
  CloseOk(fd);
}

// ---- SGLang HiCache file: flat dir, numpy.tofile's 17 syscalls per page (traces/sglang-*.trace).
std::string SglFinal(const Ctx& c, uint64_t id) {
  return c.root + "/hicache/" + Key(id, c.salt) + "_Qwen-Qwen3-8B_0_1.bin";
}
void SglInit(const Ctx& c) {
  StatE(c.root + "/hicache");
  StatE(c.root);
  MkdirE(c.root + "/hicache", 0777);
}
void SglStore(const Ctx& c, uint64_t id, char* buf) {
  std::string f = SglFinal(c, id);
  if (StatE(f) != ENOENT) Fail("sglang store: exists");
  char uuid[33];
  std::snprintf(uuid, sizeof(uuid), "%016" PRIx64 "%016" PRIx64, Rand63(), Rand63());
  std::string tmp = f + ".tmp." + std::to_string(getpid()) + "." + std::to_string(gettid()) + "." + uuid;
  int h1 = Open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (h1 < 0) FailErrno("open " + tmp);
  struct stat st;
  SYS("fstat", ::fstat(h1, &st));
  termios t;
  if (SYS("ioctl", ::ioctl(h1, TCGETS, &t)) == 0 || errno != ENOTTY) Fail("ioctl TCGETS: expected ENOTTY");
  SYS("lseek", ::lseek(h1, 0, SEEK_CUR));
  int h2 = SYS("fcntl", ::fcntl(h1, F_DUPFD_CLOEXEC, 0));
  if (h2 < 0) FailErrno("F_DUPFD_CLOEXEC");
  SYS("fcntl", ::fcntl(h2, F_GETFL));
  SYS("lseek", ::lseek(h2, 0, SEEK_CUR));
  SYS("lseek", ::lseek(h1, 0, SEEK_CUR));
  SYS("fstat", ::fstat(h2, &st));
  SYS("lseek", ::lseek(h2, 0, SEEK_SET));
  WriteAll(h2, buf, c.size);
  CloseOk(h2);
  SYS("lseek", ::lseek(h1, 0, SEEK_SET));
  SYS("lseek", ::lseek(h1, static_cast<off_t>(c.size), SEEK_SET));
  CloseOk(h1);
  RenameOk(tmp, f);
}
void SglLoad(const Ctx& c, uint64_t id, char* buf) {
  std::string f = SglFinal(c, id);
  int fd = Open(f, O_RDONLY | O_CLOEXEC);
  if (fd < 0) FailErrno("open " + f);
  struct stat st;
  SYS("fstat", ::fstat(fd, &st));
  if (st.st_size != static_cast<off_t>(c.size)) Fail("sglang: fstat size " + std::to_string(st.st_size));
  ReadExact(fd, buf, c.size, f);
  CloseOk(fd);
}

// ---- SGLang HiCache nixl (POSIX): bucket dir, final name without O_TRUNC, O_DIRECT, one pwrite/pread.
std::string SnxBucket(const Ctx& c) { return c.root + "/sglang_nixl"; }
std::string SnxFinal(const Ctx& c, uint64_t id) { return SnxBucket(c) + "/" + Key(id, c.salt) + "_Qwen-Qwen3-8B_0"; }
void SnxInit(const Ctx&) {}
void SnxStore(const Ctx& c, uint64_t id, char* buf) {
  int e = MkdirE(SnxBucket(c), 0755);
  if (e && e != EEXIST) Fail("mkdir bucket");
  std::string f = SnxFinal(c, id);
  int fd = Open(f, O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (fd < 0) FailErrno("open " + f);
  PwriteAll(fd, buf, c.size, 0);
  CloseOk(fd);
}
void SnxLoad(const Ctx& c, uint64_t id, char* buf) {
  std::string f = SnxFinal(c, id);
  int fd = Open(f, O_RDWR | O_DIRECT);
  if (fd < 0) FailErrno("open " + f);
  PreadExact(fd, buf, c.size, 0, f);
  CloseOk(fd);
}

// ---- creates: 1 KiB files in one directory (open O_CREAT|O_EXCL, one write, close): the file-create rate.
std::string CrtFinal(const Ctx& c, uint64_t id) { return c.root + "/creates/" + Key(id, c.salt).substr(0, 40); }
void CrtInit(const Ctx& c) { MkdirE(c.root + "/creates", 0777); }
void CrtStore(const Ctx& c, uint64_t id, char* buf) {
  std::string f = CrtFinal(c, id);
  int fd = Open(f, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) FailErrno("open " + f);
  WriteAll(fd, buf, c.size);
  CloseOk(fd);
}
void CrtLoad(const Ctx& c, uint64_t id, char* buf) {
  std::string f = CrtFinal(c, id);
  int fd = Open(f, O_RDONLY | O_CLOEXEC);
  if (fd < 0) FailErrno("open " + f);
  ReadExact(fd, buf, c.size, f);
  CloseOk(fd);
}

std::vector<Profile> Profiles() {
  return {
      {"vllm", "vLLM fs tier (C helper): access, stat parents, mkdir fan-out, O_DIRECT|O_EXCL tmp, 1 write, rename",
       2359296, false, VllmInit, VllmStore, VllmLoad,
       [](const Ctx& c, uint64_t id) { return AccessE(VllmFinal(c, id)) == 0; }},
      {"llmd", "llm-d fs: open probe, tmp O_TRUNC, write, rename while open, close; load lseek END + pread",
       37748736, true, LlmdInit, LlmdStore, LlmdLoad,
       [](const Ctx& c, uint64_t id) { return StatE(LlmdFinal(c, id)) == 0; }},
      {"lmcache-fs", "LMCache fs: stat, deterministic <key>.tmp O_TRUNC, 28 B header + data, rename",
       37748736 + kLmcHeader, false, LmcInit, LmcStore, LmcLoad,
       [](const Ctx& c, uint64_t id) { return StatE(LmcFinal(c, id)) == 0; }},
      {"lmcache-nixl", "LMCache nixl POSIX: tmp O_RDWR|O_TRUNC, one pwrite per 4 KiB, rename; 4 KiB preads",
       37748736, false, NixlInit, NixlStore, NixlLoad,
       // lookup: answered in memory for known keys, stat on a miss
       [](const Ctx& c, uint64_t id) { return (id & (1ull << 62)) ? StatE(NixlFinal(c, id)) == 0 : true; }},
      {"sglang-file", "SGLang HiCacheFile: flat dir, numpy.tofile's 17 syscalls per page, rename", 147456, true,
       SglInit, SglStore, SglLoad, [](const Ctx& c, uint64_t id) { return StatE(SglFinal(c, id)) == 0; }},
      {"sglang-nixl", "SGLang HiCache nixl POSIX: mkdir bucket, open(final, O_RDWR|O_CREAT|O_DIRECT), 1 pwrite",
       9437184, false, SnxInit, SnxStore, SnxLoad,
       [](const Ctx& c, uint64_t id) { return StatE(SnxFinal(c, id)) == 0; }},
      {"creates", "creates of 1 KiB files in one directory: open(O_CREAT|O_EXCL), 1 write, close; stat; read",
       1024, false, CrtInit, CrtStore, CrtLoad, [](const Ctx& c, uint64_t id) { return StatE(CrtFinal(c, id)) == 0; }},
  };
}

// ---------------------------------------------------------------------------------------------------
// Stack: nfsim + (optionally) kvfs

struct Config {
  std::vector<std::string> profiles{"all"}, modes{"direct", "kvfs", "tmpfs"};
  uint64_t chunks = 200, chunk_bytes = 0;
  unsigned threads = 4;
  double hit_ratio = 0.5;
  long latency_us = 500;
  double data_mbps = 0;
  std::string work = "/var/tmp/kvfs-bench", tmpfs = "/dev/shm", build, json_out;
  bool cold_load = true, progress = true;
  std::vector<std::string> kvfs_args, nfsim_args, ceiling_args;
  unsigned lookup_batch = 128;
  unsigned repeat = 1;
  int64_t fill_bytes = 0;  // load_full's cache filler (kvfs mode): -1 = auto (1.25x kvfs's --cache-size), 0 = no load_full
  std::string phase_hook;  // sh -c "HOOK PROFILE MODE PHASE begin|end" around every phase (test bed RPC counts)
};

int Run(const std::vector<std::string>& argv, bool quiet = false) {
  pid_t p = fork();
  if (p == 0) {
    if (quiet) {
      int dn = ::open("/dev/null", O_WRONLY);
      dup2(dn, 1);
    }
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    _exit(127);
  }
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

bool IsMounted(const std::string& mp) {
  std::ifstream f("/proc/self/mounts");
  std::string dev, dir, rest;
  std::string want = fs::weakly_canonical(mp).string();
  while (f >> dev >> dir && std::getline(f, rest)) {
    if (dir == want) return true;
  }
  return false;
}

std::string GetXattr(const std::string& path, const char* name) {
  std::vector<char> buf(1 << 16);
  for (int i = 0; i < 4; ++i) {
    ssize_t n = getxattr(path.c_str(), name, buf.data(), buf.size());
    if (n >= 0) return std::string(buf.data(), static_cast<size_t>(n));
    if (errno != ERANGE) return "";
    buf.resize(buf.size() * 4);
  }
  return "";
}

uint64_t VmHwmKb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

enum class Mode { kDirect, kKvfs, kTmpfs, kCeiling };

// "1GiB", "256MiB", "512M", "4096": kvfs's size syntax (binary multiples), enough for --cache-size.
uint64_t ParseSizeOr(const std::string& t, uint64_t dflt) {
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || v < 0) return dflt;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case 0: return static_cast<uint64_t>(v);
    case 'K': return static_cast<uint64_t>(v * 1024.0);
    case 'M': return static_cast<uint64_t>(v * 1048576.0);
    case 'G': return static_cast<uint64_t>(v * 1073741824.0);
    case 'T': return static_cast<uint64_t>(v * 1099511627776.0);
    default: return dflt;
  }
}
// kvfs's value cache capacity for this run (--kvfs-arg --cache-size X, else kvfs's default 1 GiB).
uint64_t KvfsCacheBytes(const Config& c) {
  uint64_t v = 1ull << 30;
  for (size_t i = 0; i + 1 < c.kvfs_args.size(); ++i) {
    if (c.kvfs_args[i] == "--cache-size") v = ParseSizeOr(c.kvfs_args[i + 1], v);
  }
  for (auto& a : c.kvfs_args) {
    if (a.rfind("--cache-size=", 0) == 0) v = ParseSizeOr(a.substr(13), v);
  }
  return v;
}

// /proc/loadavg: 1, 5 and 15 minute load averages.
json LoadAvg() {
  std::ifstream f("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  f >> a >> b >> c;
  return {{"1m", a}, {"5m", b}, {"15m", c}};
}

// CPU seconds (user + system, all threads) a process has used so far; 0 if it is gone.
double ProcCpuS(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  size_t rp = line.rfind(')');  // comm may contain spaces
  if (rp == std::string::npos) return 0;
  std::istringstream in(line.substr(rp + 2));
  std::string x;
  unsigned long long utime = 0, stime = 0;
  for (int field = 3; field <= 15 && in >> x; ++field) {
    if (field == 14) utime = std::strtoull(x.c_str(), nullptr, 10);
    if (field == 15) stime = std::strtoull(x.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double SelfCpuS() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

struct Stack {
  const Config& cfg;
  std::string base, src, nfs, kv, idx, ceil;
  bool kvfs_mode, tmpfs_mode, ceiling_mode;
  pid_t kvfs_pid = 0, ceiling_pid = 0;
  uint64_t hwm_kb = 0;  // the daemon's (kvfs or ceiling) VmHWM, max over its lifetimes

  Stack(const Config& c, const std::string& name, Mode m)
      : cfg(c), kvfs_mode(m == Mode::kKvfs), tmpfs_mode(m == Mode::kTmpfs), ceiling_mode(m == Mode::kCeiling) {
    // tmpfs: a private directory of the tmpfs (pid in the name: concurrent runs do not collide).
    base = tmpfs_mode ? c.tmpfs + "/kvfs-bench-" + std::to_string(getpid()) + "-" + name : c.work + "/" + name;
    src = base + "/src";
    nfs = base + "/nfs";
    kv = base + "/kv";
    idx = base + "/idx";
    ceil = base + "/ceil";
  }
  // The FUSE daemon between the workload and nfsim: kvfs, the ceiling passthrough, or none (0).
  pid_t DaemonPid() const { return kvfs_mode ? kvfs_pid : ceiling_mode ? ceiling_pid : 0; }
  const char* DaemonName() const { return kvfs_mode ? "kvfs" : ceiling_mode ? "ceiling" : ""; }
  std::string Tool(const std::string& t) const { return cfg.build + "/tools/" + t; }
  void MountNfs() {
    std::vector<std::string> a = {Tool("kvfs-nfsim"), src, nfs, "--latency-us", std::to_string(cfg.latency_us),
                                  "--data-mbps", std::to_string(cfg.data_mbps)};
    for (auto& x : cfg.nfsim_args) a.push_back(x);
    if (Run(a) != 0) Fail("kvfs-nfsim mount failed");
    for (int i = 0; i < 100 && !IsMounted(nfs); ++i) usleep(20000);
  }
  void MountKvfs() {
    std::vector<std::string> a = {Tool("kvfs"), "mount", kv, "--backing", nfs + "/kvfs-backing",
                                  "--index-dir", idx, "--node-id", "bench", "--log-level", "warn"};
    for (auto& x : cfg.kvfs_args) a.push_back(x);
    if (Run(a) != 0) Fail("kvfs mount failed");
    kvfs_pid = static_cast<pid_t>(std::atoi(GetXattr(kv, "user.kvfs.pid").c_str()));
  }
  // The ceiling: kvfs-nfsim at 0 latency over the nfsim mount (same caching flags as nfsim's defaults;
  // --ceiling-arg adds to them).
  void MountCeiling() {
    std::vector<std::string> a = {Tool("kvfs-nfsim"), nfs + "/ceiling-backing", ceil, "--latency-us", "0"};
    for (auto& x : cfg.ceiling_args) a.push_back(x);
    if (Run(a) != 0) Fail("ceiling mount (kvfs-nfsim --latency-us 0) failed");
    for (int i = 0; i < 100 && !IsMounted(ceil); ++i) usleep(20000);
    std::string s = GetXattr(ceil, "user.nfsim.stats");
    json j = s.empty() ? json::object() : json::parse(s, nullptr, false);
    ceiling_pid = j.is_object() ? static_cast<pid_t>(j.value("pid", 0)) : 0;
    if (ceiling_pid <= 0) Fail("ceiling mount: no pid in user.nfsim.stats");
  }
  void Up() {
    Down();
    fs::remove_all(base);
    if (tmpfs_mode) {
      fs::create_directories(base + "/direct");
      return;
    }
    fs::create_directories(src);
    fs::create_directories(nfs);
    fs::create_directories(kv);
    fs::create_directories(idx);
    fs::create_directories(src + "/direct");
    fs::create_directories(src + "/kvfs-backing");
    if (ceiling_mode) {
      fs::create_directories(ceil);
      fs::create_directories(src + "/ceiling-backing");
    }
    MountNfs();
    if (kvfs_mode) MountKvfs();
    if (ceiling_mode) MountCeiling();
  }
  void Down() {
    if (tmpfs_mode) return;
    if (kvfs_mode && IsMounted(kv)) {
      if (kvfs_pid > 0) hwm_kb = std::max(hwm_kb, VmHwmKb(kvfs_pid));
      if (Run({Tool("kvfs"), "umount", kv}) != 0) Run({"fusermount3", "-u", kv});
      kvfs_pid = 0;
    }
    if (ceiling_mode && IsMounted(ceil)) {
      if (ceiling_pid > 0) hwm_kb = std::max(hwm_kb, VmHwmKb(ceiling_pid));
      for (int i = 0; i < 50 && Run({"fusermount3", "-u", ceil}) != 0; ++i) usleep(100000);
      // nfs/ is busy until the ceiling daemon has closed its backing fds: wait for it to exit.
      for (int i = 0; i < 100 && ceiling_pid > 0 && kill(ceiling_pid, 0) == 0; ++i) usleep(20000);
      ceiling_pid = 0;
    }
    if (IsMounted(nfs)) {
      for (int i = 0; i < 50 && Run({"fusermount3", "-u", nfs}) != 0; ++i) usleep(100000);
    }
  }
  // Client restart: drops kvfs's memory and both mounts' page caches; the "server" keeps its cache.
  void Remount() {
    if (tmpfs_mode) return;  // tmpfs's pages are the data: nothing to drop
    Down();
    MountNfs();
    if (kvfs_mode) MountKvfs();
    if (ceiling_mode) MountCeiling();
  }
  std::string Root() const {
    return kvfs_mode ? kv : ceiling_mode ? ceil : tmpfs_mode ? base + "/direct" : nfs + "/direct";
  }
  json NfsStats() const {
    if (tmpfs_mode) return json::object();
    std::string s = GetXattr(nfs, "user.nfsim.stats");
    return s.empty() ? json::object() : json::parse(s);
  }
  json KvfsStats() const {
    if (!kvfs_mode) return json();
    std::string s = GetXattr(kv, "user.kvfs.stats");
    return s.empty() ? json() : json::parse(s, nullptr, false);
  }
};

// ---------------------------------------------------------------------------------------------------
// Phases

struct PhaseResult {
  std::string name;
  uint64_t units = 0, bytes = 0;  // units: chunks stored/loaded or keys probed
  double seconds = 0;
  int64_t start_ns = 0, end_ns = 0;  // CLOCK_MONOTONIC: `perf record -k CLOCK_MONOTONIC` + `perf report --time`
  std::vector<uint32_t> op_lat;
  std::map<std::string, std::vector<uint32_t>> sys_lat;
  uint64_t hits = 0;
  json nfs_before, nfs_after;
  json kvfs_before, kvfs_after;
  double cpu_client = 0, cpu_daemon = 0, cpu_nfsim = 0;  // CPU seconds used during the phase
  std::string daemon;                                    // "kvfs", "ceiling" or "" (direct, tmpfs)
};

std::atomic<uint64_t> g_done{0};
std::atomic<uint64_t> g_total{0};
std::string g_label;
std::mutex g_label_mu;

void ProgressLoop(std::atomic<bool>* stop, bool tty) {
  while (!stop->load()) {
    if (tty) {
      uint64_t d = g_done.load(), t = std::max<uint64_t>(1, g_total.load());
      int w = 30, fill = static_cast<int>(w * std::min<uint64_t>(d, t) / t);
      std::string label;
      {
        std::lock_guard<std::mutex> g(g_label_mu);
        label = g_label;
      }
      std::fprintf(stderr, "\r\033[K%-34s [%s%s] %" PRIu64 "/%" PRIu64, label.c_str(), std::string(fill, '#').c_str(),
                   std::string(w - fill, '.').c_str(), d, t);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (tty) std::fprintf(stderr, "\r\033[K");
}

uint32_t Pct(std::vector<uint32_t>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

void PhaseHook(const Config& cfg, const std::string& label, const std::string& phase, const char* when) {
  if (cfg.phase_hook.empty()) return;
  std::string l = label;
  std::replace(l.begin(), l.end(), '/', ' ');  // "profile mode"
  if (Run({"/bin/sh", "-c", cfg.phase_hook + " " + l + " " + phase + " " + when}) != 0) {
    Fail("--phase-hook failed at " + label + " " + phase + " " + when);
  }
}

// Runs fn(i) for i in [0, n) on `threads` threads (each a contiguous share, like a connector's jobs).
PhaseResult RunPhase(const std::string& name, const std::string& label, uint64_t n, unsigned threads,
                     const std::function<uint64_t(uint64_t, char*)>& fn, size_t bufsize, Stack& stack) {
  PhaseResult r;
  r.name = name;
  {
    std::lock_guard<std::mutex> g(g_label_mu);
    g_label = label + " " + name;
  }
  g_done = 0;
  g_total = n;
  PhaseHook(stack.cfg, label, name, "begin");
  r.nfs_before = stack.NfsStats();
  r.kvfs_before = stack.KvfsStats();
  pid_t nfsim_pid = static_cast<pid_t>(r.nfs_before.value("pid", 0));
  pid_t daemon_pid = stack.DaemonPid();
  r.daemon = stack.DaemonName();
  double c0 = SelfCpuS(), k0 = ProcCpuS(daemon_pid), n0 = ProcCpuS(nfsim_pid);
  std::vector<Recorder> recs(threads);
  std::vector<std::string> errors(threads);
  std::atomic<uint64_t> bytes{0}, hits{0};
  int64_t t0 = NowNs();
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      t_rec = &recs[t];
      AlignedBuf buf(bufsize);
      uint64_t lo = n * t / threads, hi = n * (t + 1) / threads;
      try {
        for (uint64_t i = lo; i < hi; ++i) {
          int64_t s = NowNs();
          uint64_t b = fn(i, buf.p);
          recs[t].ops.push_back(static_cast<uint32_t>(std::min<int64_t>(NowNs() - s, UINT32_MAX)));
          if (b == UINT64_MAX) {
            hits++;
          } else {
            bytes += b;
          }
          g_done++;
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
      t_rec = nullptr;
    });
  }
  for (auto& th : ts) th.join();
  r.start_ns = t0;
  r.end_ns = NowNs();
  r.cpu_client = SelfCpuS() - c0;
  r.cpu_daemon = daemon_pid > 0 ? ProcCpuS(daemon_pid) - k0 : 0;
  r.cpu_nfsim = nfsim_pid > 0 ? ProcCpuS(nfsim_pid) - n0 : 0;
  r.seconds = static_cast<double>(r.end_ns - t0) / 1e9;
  r.nfs_after = stack.NfsStats();
  r.kvfs_after = stack.KvfsStats();
  PhaseHook(stack.cfg, label, name, "end");
  for (auto& e : errors) {
    if (!e.empty()) Fail(name + ": " + e);
  }
  r.units = n;
  r.bytes = bytes;
  r.hits = hits;
  for (auto& rc : recs) {
    r.op_lat.insert(r.op_lat.end(), rc.ops.begin(), rc.ops.end());
    for (auto& [k, v] : rc.sys) r.sys_lat[k].insert(r.sys_lat[k].end(), v.begin(), v.end());
  }
  return r;
}

json PhaseJson(PhaseResult& r) {
  json j;
  j["units"] = r.units;
  j["seconds"] = r.seconds;
  j["monotonic_s"] = {static_cast<double>(r.start_ns) / 1e9, static_cast<double>(r.end_ns) / 1e9};
  j["units_per_s"] = r.seconds > 0 ? static_cast<double>(r.units) / r.seconds : 0;
  j["bytes"] = r.bytes;
  j["mb_per_s"] = r.seconds > 0 ? static_cast<double>(r.bytes) / 1e6 / r.seconds : 0;
  j["p50_us"] = Pct(r.op_lat, 0.5) / 1e3;
  j["p99_us"] = Pct(r.op_lat, 0.99) / 1e3;
  if (r.name == "lookup") j["hits"] = r.hits;
  json sys = json::object();
  for (auto& [k, v] : r.sys_lat) {
    sys[k] = {{"n", v.size()}, {"p50_us", Pct(v, 0.5) / 1e3}, {"p99_us", Pct(v, 0.99) / 1e3}};
  }
  j["syscalls"] = sys;
  // Backing (nfsim) operations during the phase.
  json b;
  const json& a0 = r.nfs_before;
  const json& a1 = r.nfs_after;
  auto d = [&](const char* k) -> uint64_t {
    return a1.value(k, uint64_t{0}) - a0.value(k, uint64_t{0});
  };
  b["metadata_ops"] = d("metadata_ops");
  b["syncs"] = d("syncs");
  b["bytes_written"] = d("bytes_written");
  b["bytes_read"] = d("bytes_read");
  json ops = json::object(), per = json::object();
  if (a1.contains("ops")) {
    for (auto& [k, v] : a1["ops"].items()) {
      uint64_t x = v.get<uint64_t>() - a0["ops"].value(k, uint64_t{0});
      if (x) {
        ops[k] = x;
        per[k] = static_cast<double>(x) / static_cast<double>(std::max<uint64_t>(1, r.units));
      }
    }
  }
  b["ops"] = ops;
  b["ops_per_unit"] = per;
  b["metadata_ops_per_unit"] = static_cast<double>(d("metadata_ops")) / static_cast<double>(std::max<uint64_t>(1, r.units));
  b["syncs_per_unit"] = static_cast<double>(d("syncs")) / static_cast<double>(std::max<uint64_t>(1, r.units));
  j["backing"] = b;
  // CPU seconds the phase cost (clock ticks: 10 ms resolution), and per GB moved: what a CPU-bound run
  // on a shared machine is limited by, less sensitive to the other load than MB/s.
  double gb = static_cast<double>(r.bytes) / 1e9;
  // "daemon": the FUSE daemon between the workload and nfsim (kvfs, or the ceiling's passthrough), from
  // /proc/PID/stat utime + stime.
  j["cpu_s"] = {{"client", r.cpu_client}, {"kvfs", r.daemon == "kvfs" ? r.cpu_daemon : 0.0},
                {"ceiling", r.daemon == "ceiling" ? r.cpu_daemon : 0.0}, {"daemon", r.cpu_daemon},
                {"nfsim", r.cpu_nfsim}, {"total", r.cpu_client + r.cpu_daemon + r.cpu_nfsim}};
  if (gb > 0) j["cpu_s_per_gb"] = (r.cpu_client + r.cpu_daemon + r.cpu_nfsim) / gb;
  if (gb > 0 && !r.daemon.empty()) j["daemon_cpu_s_per_gb"] = r.cpu_daemon / gb;
  if (r.kvfs_after.is_object() && r.kvfs_after.contains("cache_bytes")) {
    j["kvfs_cache_bytes"] = {{"before", r.kvfs_before.is_object() ? r.kvfs_before.value("cache_bytes", uint64_t{0}) : 0},
                             {"after", r.kvfs_after.value("cache_bytes", uint64_t{0})}};
  }
  // kvfs mode: FUSE requests the kvfs daemon served during the phase, per unit (what the kernel could
  // not answer from its caches: e.g. open + read per chunk on a warm load).
  if (r.kvfs_before.is_object() && r.kvfs_after.is_object() && r.kvfs_after.contains("fuse_ops")) {
    json fo = json::object();
    for (auto& [k, v] : r.kvfs_after["fuse_ops"].items()) {
      uint64_t x1 = v.value("count", uint64_t{0});
      uint64_t x0 = r.kvfs_before.contains("fuse_ops") && r.kvfs_before["fuse_ops"].contains(k)
                        ? r.kvfs_before["fuse_ops"][k].value("count", uint64_t{0})
                        : 0;
      if (x1 > x0) fo[k] = static_cast<double>(x1 - x0) / static_cast<double>(std::max<uint64_t>(1, r.units));
    }
    j["kvfs_fuse_requests_per_unit"] = fo;
  }
  return j;
}

json RunMode(const Config& cfg, const Profile& p, size_t size, const std::string& mode) {
  Mode m = mode == "kvfs"      ? Mode::kKvfs
           : mode == "tmpfs"   ? Mode::kTmpfs
           : mode == "ceiling" ? Mode::kCeiling
                               : Mode::kDirect;
  bool kvfs = m == Mode::kKvfs;
  Stack stack(cfg, p.name + "-" + mode, m);
  std::string label = p.name + "/" + mode;
  json out;
  out["loadavg"] = {{"start", LoadAvg()}};
  try {
    stack.Up();
    Ctx c{stack.Root(), size, 0x5eed0000ull ^ static_cast<uint64_t>(NowNs())};
    {
      Recorder rec;
      t_rec = &rec;
      p.init(c);
      t_rec = nullptr;
    }
    uint64_t n = cfg.chunks;
    json phases;
    auto store = RunPhase("store", label, n, cfg.threads, [&](uint64_t i, char* buf) -> uint64_t {
      Fill(buf, size, i, c.salt);
      p.store(c, i, buf);
      return size;
    }, size, stack);
    phases["store"] = PhaseJson(store);
    // Lookup: requests of lookup_batch keys; the first hit_ratio of each request were stored, the rest
    // were never stored (a cold request's tail). One lookup thread, as the connectors do.
    uint64_t batch = cfg.lookup_batch, nreq = std::max<uint64_t>(1, n / batch);
    uint64_t present = static_cast<uint64_t>(cfg.hit_ratio * static_cast<double>(batch));
    std::vector<uint64_t> probe_ids;
    for (uint64_t q = 0; q < nreq; ++q) {
      for (uint64_t k = 0; k < batch; ++k) {
        uint64_t id = k < present ? (q * batch + k) % n : ((1ull << 62) | (q * batch + k));
        probe_ids.push_back(id);
        if (p.stop_at_first_miss && k >= present) break;  // stops at the first miss
      }
    }
    auto lookup = RunPhase("lookup", label, probe_ids.size(), 1, [&](uint64_t i, char*) -> uint64_t {
      bool hit = p.exists(c, probe_ids[i]);
      bool want = !(probe_ids[i] & (1ull << 62));
      if (hit != want) Fail("lookup of key " + std::to_string(probe_ids[i]) + ": got " + (hit ? "hit" : "miss"));
      return hit ? UINT64_MAX : 0;
    }, 4096, stack);
    phases["lookup"] = PhaseJson(lookup);
    json remount_stats;
    if (cfg.cold_load) {
      if (kvfs) out["kvfs_stats_before_remount"] = stack.KvfsStats();
      stack.Remount();
      c.root = stack.Root();
    }
    auto loadfn = [&](uint64_t i, char* buf) -> uint64_t {
      std::memset(buf, 0, 64);
      p.load(c, i, buf);
      Verify(buf, size, i, c.salt, "chunk " + std::to_string(i));
      return size;
    };
    auto load = RunPhase("load", label, n, cfg.threads, loadfn, size, stack);
    phases["load"] = PhaseJson(load);
    auto warm = RunPhase("warm_load", label, n, cfg.threads, loadfn, size, stack);
    phases["warm_load"] = PhaseJson(warm);
    // Cold load with a full cache: another client restart, then (kvfs mode) other files loaded until
    // kvfs's value cache is full, then all N chunks again, so every value is loaded while the cache
    // evicts. direct and ceiling have no bounded cache of their own: theirs is a second cold load.
    int64_t fill = cfg.fill_bytes < 0 ? static_cast<int64_t>(KvfsCacheBytes(cfg) / 4 * 5) : cfg.fill_bytes;
    if (cfg.cold_load && fill > 0 && m != Mode::kTmpfs) {
      const uint64_t cache = KvfsCacheBytes(cfg);
      const size_t fsz = std::clamp<uint64_t>(cache / 64, 64 << 10, 4 << 20) / 4096 * 4096;
      const uint64_t nf = (static_cast<uint64_t>(fill) + fsz - 1) / fsz;
      auto fill_path = [&](uint64_t i) { return c.root + "/.bench-fill/f" + std::to_string(i); };
      if (kvfs) {
        if (int e = MkdirE(c.root + "/.bench-fill", 0777); e && e != EEXIST) Fail("mkdir .bench-fill");
        RunPhase("fill_store", label, nf, cfg.threads, [&](uint64_t i, char* buf) -> uint64_t {
          Fill(buf, fsz, (1ull << 61) | i, c.salt);
          int fd = Open(fill_path(i), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
          if (fd < 0) FailErrno("open " + fill_path(i));
          WriteAll(fd, buf, fsz);
          CloseOk(fd);
          return fsz;
        }, fsz, stack);
      }
      stack.Remount();
      c.root = stack.Root();
      if (kvfs) {
        RunPhase("fill_load", label, nf, cfg.threads, [&](uint64_t i, char* buf) -> uint64_t {
          int fd = Open(fill_path(i), O_RDONLY | O_DIRECT | O_CLOEXEC);
          if (fd < 0) FailErrno("open " + fill_path(i));
          ReadExact(fd, buf, fsz, fill_path(i));
          CloseOk(fd);
          Verify(buf, fsz, (1ull << 61) | i, c.salt, "fill file " + std::to_string(i));
          return fsz;
        }, fsz, stack);
        json ks = stack.KvfsStats();
        out["fill"] = {{"files", nf}, {"file_bytes", fsz}, {"cache_size", cache},
                       {"cache_bytes_after_fill", ks.is_object() ? ks.value("cache_bytes", uint64_t{0}) : 0}};
      }
      auto full = RunPhase("load_full", label, n, cfg.threads, loadfn, size, stack);
      phases["load_full"] = PhaseJson(full);
    }
    out["phases"] = phases;
    if (kvfs) {
      out["kvfs_stats"] = stack.KvfsStats();
      stack.hwm_kb = std::max(stack.hwm_kb, VmHwmKb(stack.kvfs_pid));
    }
    out["nfsim_total"] = stack.NfsStats();
    if (m == Mode::kCeiling) stack.hwm_kb = std::max(stack.hwm_kb, VmHwmKb(stack.ceiling_pid));
    stack.Down();
    if (kvfs || m == Mode::kCeiling) out["daemon_vmhwm_kb"] = stack.hwm_kb;
    out["ok"] = true;
  } catch (const std::exception& e) {
    out["ok"] = false;
    out["error"] = e.what();
    stack.Down();
  }
  fs::remove_all(stack.base);
  out["loadavg"]["end"] = LoadAvg();
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Text report

std::string Fmt(double v, int prec = 1) {
  char b[64];
  if (v >= 1e6) std::snprintf(b, sizeof(b), "%.0f", v);
  else std::snprintf(b, sizeof(b), "%.*f", prec, v);
  return b;
}

void PrintVsTmpfs(const json& pj) {
  if (!pj.contains("warm_load_vs_tmpfs")) return;
  const json& v = pj["warm_load_vs_tmpfs"];
  std::printf("   warm load MB/s vs tmpfs (%s MB/s, same chunks, threads, syscalls):", Fmt(v["tmpfs_mb_per_s"].get<double>()).c_str());
  for (const char* m : {"direct", "kvfs"}) {
    if (v.contains(m)) std::printf(" %s %.2fx", m, v[m].get<double>());
  }
  std::printf("\n");
}

void PrintProfile(const json& pj) {
  std::printf("\n== %s: %s\n   %" PRIu64 " chunks x %" PRIu64 " B, %u threads, hit ratio %.2f, %ld us per metadata op\n",
              pj["profile"].get<std::string>().c_str(), pj["what"].get<std::string>().c_str(),
              pj["chunks"].get<uint64_t>(), pj["chunk_bytes"].get<uint64_t>(), pj["threads"].get<unsigned>(),
              pj["hit_ratio"].get<double>(), pj["latency_us"].get<long>());
  const json& m = pj["modes"];
  for (auto& [mode, r] : m.items()) {
    if (!r.value("ok", false)) std::printf("   %s FAILED: %s\n", mode.c_str(), r.value("error", std::string("?")).c_str());
  }
  if (!m.contains("direct") || !m.contains("kvfs") || !m["direct"].value("ok", false) || !m["kvfs"].value("ok", false)) {
    for (auto& [mode, r] : m.items()) {
      if (!r.value("ok", false)) continue;
      for (auto& [ph, x] : r["phases"].items()) {
        std::printf("   %-6s %-9s %10s/s %9s MB/s  p50 %s us p99 %s us  backing meta/unit %.2f\n", mode.c_str(),
                    ph.c_str(), Fmt(x["units_per_s"].get<double>()).c_str(), Fmt(x["mb_per_s"].get<double>()).c_str(),
                    Fmt(x["p50_us"].get<double>()).c_str(), Fmt(x["p99_us"].get<double>()).c_str(),
                    x["backing"]["metadata_ops_per_unit"].get<double>());
      }
    }
    PrintVsTmpfs(pj);
    return;
  }
  const json& d = m["direct"]["phases"];
  const json& k = m["kvfs"]["phases"];
  std::printf("   %-26s %14s %14s %8s\n", "", "direct", "kvfs", "kvfs/dir");
  for (const char* ph : {"store", "lookup", "load", "load_full", "warm_load"}) {
    if (!d.contains(ph) || !k.contains(ph)) continue;
    const json& a = d[ph];
    const json& b = k[ph];
    double ua = a["units_per_s"].get<double>(), ub = b["units_per_s"].get<double>();
    std::printf("   %-26s %14s %14s %7.2fx\n", (std::string(ph) + (std::string(ph) == "lookup" ? " probes/s" : " chunks/s")).c_str(),
                Fmt(ua).c_str(), Fmt(ub).c_str(), ua > 0 ? ub / ua : 0);
    if (std::string(ph) != "lookup") {
      double ma = a["mb_per_s"].get<double>(), mb = b["mb_per_s"].get<double>();
      std::printf("   %-26s %14s %14s %7.2fx\n", (std::string(ph) + " MB/s").c_str(), Fmt(ma).c_str(), Fmt(mb).c_str(),
                  ma > 0 ? mb / ma : 0);
    }
    std::printf("   %-26s %14s %14s\n", (std::string(ph) + " p50 / p99 us").c_str(),
                (Fmt(a["p50_us"].get<double>(), 0) + " / " + Fmt(a["p99_us"].get<double>(), 0)).c_str(),
                (Fmt(b["p50_us"].get<double>(), 0) + " / " + Fmt(b["p99_us"].get<double>(), 0)).c_str());
    std::printf("   %-26s %14.3f %14.3f\n", (std::string(ph) + " backing meta/unit").c_str(),
                a["backing"]["metadata_ops_per_unit"].get<double>(), b["backing"]["metadata_ops_per_unit"].get<double>());
    std::printf("   %-26s %14.3f %14.3f\n", (std::string(ph) + " backing syncs/unit").c_str(),
                a["backing"]["syncs_per_unit"].get<double>(), b["backing"]["syncs_per_unit"].get<double>());
    std::printf("   %-26s %14s %14s\n", (std::string(ph) + " backing MB w / r").c_str(),
                (Fmt(a["backing"]["bytes_written"].get<double>() / 1e6, 0) + " / " +
                 Fmt(a["backing"]["bytes_read"].get<double>() / 1e6, 0)).c_str(),
                (Fmt(b["backing"]["bytes_written"].get<double>() / 1e6, 0) + " / " +
                 Fmt(b["backing"]["bytes_read"].get<double>() / 1e6, 0)).c_str());
    if (a.contains("cpu_s_per_gb") && b.contains("cpu_s_per_gb")) {
      std::printf("   %-26s %14.2f %14.2f %7.2fx\n", (std::string(ph) + " CPU s/GB (all procs)").c_str(),
                  a["cpu_s_per_gb"].get<double>(), b["cpu_s_per_gb"].get<double>(),
                  a["cpu_s_per_gb"].get<double>() > 0 ? b["cpu_s_per_gb"].get<double>() / a["cpu_s_per_gb"].get<double>() : 0);
    }
  }
  auto types = [](const json& x) {
    std::string s;
    const json& per = x["backing"]["ops_per_unit"];
    for (auto& [t, v] : per.items()) {
      if (t == "read" || t == "write" || t == "forget" || t == "release" || t == "releasedir") continue;
      if (!s.empty()) s += " ";
      char b[64];
      std::snprintf(b, sizeof(b), "%s %.3g", t.c_str(), v.get<double>());
      s += b;
    }
    return s.empty() ? std::string("-") : s;
  };
  for (const char* ph : {"store", "lookup", "load", "load_full", "warm_load"}) {
    if (!d.contains(ph) || !k.contains(ph)) continue;
    std::printf("   backing ops/unit %-9s direct: %s\n", ph, types(d[ph]).c_str());
    std::printf("   %-26s   kvfs: %s\n", "", types(k[ph]).c_str());
  }
  for (const char* ph : {"store", "lookup", "load", "load_full", "warm_load"}) {
    if (!k.contains(ph) || !k[ph].contains("kvfs_fuse_requests_per_unit")) continue;
    std::string s;
    for (auto& [t, v] : k[ph]["kvfs_fuse_requests_per_unit"].items()) {
      char b[64];
      std::snprintf(b, sizeof(b), "%s%s %.3g", s.empty() ? "" : " ", t.c_str(), v.get<double>());
      s += b;
    }
    std::printf("   kvfs FUSE requests/unit %-9s %s\n", ph, s.empty() ? "-" : s.c_str());
  }
  std::printf("   kvfs daemon peak RSS (VmHWM): %.1f MiB\n", m["kvfs"].value("daemon_vmhwm_kb", 0.0) / 1024.0);
  PrintVsTmpfs(pj);
}

// ---------------------------------------------------------------------------------------------------
// Ratios per run (kvfs vs direct, kvfs vs the ceiling) and their medians over --repeat runs

const char* const kRatioPhases[] = {"store", "lookup", "load", "load_full", "warm_load"};

double PhaseVal(const json& modes, const char* mode, const char* ph, const char* key) {
  if (!modes.contains(mode) || !modes[mode].value("ok", false)) return -1;
  const json& p = modes[mode]["phases"];
  if (!p.contains(ph) || !p[ph].contains(key)) return -1;
  return p[ph][key].get<double>();
}

// One run's figures: per phase, units/s per mode, kvfs/direct, kvfs/ceiling, ceiling/direct, daemon CPU
// s/GB of kvfs and of the ceiling and their ratio; -1 where a figure is missing.
json RunRatios(const json& modes) {
  json out = json::object();
  auto ratio = [](double a, double b) { return a >= 0 && b > 0 ? a / b : -1.0; };
  for (const char* ph : kRatioPhases) {
    double d = PhaseVal(modes, "direct", ph, "units_per_s"), c = PhaseVal(modes, "ceiling", ph, "units_per_s"),
           k = PhaseVal(modes, "kvfs", ph, "units_per_s");
    if (d < 0 && c < 0 && k < 0) continue;
    double kc = PhaseVal(modes, "kvfs", ph, "daemon_cpu_s_per_gb"),
           cc = PhaseVal(modes, "ceiling", ph, "daemon_cpu_s_per_gb");
    out[ph] = {{"direct_units_per_s", d}, {"ceiling_units_per_s", c}, {"kvfs_units_per_s", k},
               {"direct_mb_per_s", PhaseVal(modes, "direct", ph, "mb_per_s")},
               {"ceiling_mb_per_s", PhaseVal(modes, "ceiling", ph, "mb_per_s")},
               {"kvfs_mb_per_s", PhaseVal(modes, "kvfs", ph, "mb_per_s")},
               {"kvfs_vs_direct", ratio(k, d)}, {"kvfs_vs_ceiling", ratio(k, c)}, {"ceiling_vs_direct", ratio(c, d)},
               {"kvfs_daemon_cpu_s_per_gb", kc}, {"ceiling_daemon_cpu_s_per_gb", cc},
               {"daemon_cpu_kvfs_vs_ceiling", ratio(kc, cc)}};
  }
  return out;
}

// Median of each figure over the runs (missing figures left out).
json MedianRatios(const json& runs) {
  json out = json::object();
  for (const char* ph : kRatioPhases) {
    std::map<std::string, std::vector<double>> vals;
    for (auto& r : runs) {
      if (!r["ratios"].contains(ph)) continue;
      for (auto& [k, v] : r["ratios"][ph].items()) {
        if (v.get<double>() >= 0) vals[k].push_back(v.get<double>());
      }
    }
    if (vals.empty()) continue;
    json o;
    for (auto& [k, v] : vals) {
      std::sort(v.begin(), v.end());
      o[k] = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    }
    out[ph] = o;
  }
  return out;
}

std::string PhaseLabel(const std::string& ph) {
  if (ph == "load") return "cold load, empty cache";
  if (ph == "load_full") return "cold load, full cache";
  if (ph == "warm_load") return "warm load";
  return ph;
}

void PrintRatioTable(const json& r, bool small) {
  auto num = [](double v) { return v < 0 ? std::string("-") : Fmt(v); };
  auto x = [](double v) {
    char b[32];
    if (v < 0) return std::string("-");
    std::snprintf(b, sizeof(b), "%.2fx", v);
    return std::string(b);
  };
  std::printf("     %-34s %12s %12s %12s %9s %9s   %s\n", "", "direct", "ceiling", "kvfs", "kvfs/dir", "kvfs/ceil",
              "daemon CPU s/GB kvfs / ceiling");
  for (const char* ph : kRatioPhases) {
    if (!r.contains(ph)) continue;
    const json& p = r[ph];
    bool units = small || std::string(ph) == "lookup";
    const char* pre = units ? "" : "mb_per_s";
    auto v = [&](const char* mode) {
      return p.value(units ? std::string(mode) + "_units_per_s" : std::string(mode) + "_" + pre, -1.0);
    };
    std::string cpu = "-";
    double kc = p.value("kvfs_daemon_cpu_s_per_gb", -1.0), cc = p.value("ceiling_daemon_cpu_s_per_gb", -1.0);
    if (kc >= 0 || cc >= 0) {
      char b[96];
      std::snprintf(b, sizeof(b), "%s / %s (%s)", kc >= 0 ? Fmt(kc, 2).c_str() : "-", cc >= 0 ? Fmt(cc, 2).c_str() : "-",
                    x(p.value("daemon_cpu_kvfs_vs_ceiling", -1.0)).c_str());
      cpu = b;
    }
    std::string label = PhaseLabel(ph) + (std::string(ph) == "lookup" ? " probes/s" : units ? " chunks/s" : " MB/s");
    std::printf("     %-34s %12s %12s %12s %9s %9s   %s\n", label.c_str(), num(v("direct")).c_str(),
                num(v("ceiling")).c_str(), num(v("kvfs")).c_str(), x(p.value("kvfs_vs_direct", -1.0)).c_str(),
                x(p.value("kvfs_vs_ceiling", -1.0)).c_str(), cpu.c_str());
  }
}

void PrintRuns(const json& pj) {
  if (!pj.contains("runs")) return;
  const json& runs = pj["runs"];
  if (runs.size() < 2 && !runs[0]["modes"].contains("ceiling")) return;  // the table above says it all
  bool small = pj["chunk_bytes"].get<uint64_t>() < 65536;
  std::printf("   kvfs vs direct and vs the ceiling (kvfs-nfsim at 0 latency over the same directory), %zu run%s:\n",
              runs.size(), runs.size() == 1 ? "" : "s");
  for (size_t i = 0; i < runs.size(); ++i) {
    std::string la;
    for (const char* mode : {"direct", "ceiling", "kvfs", "tmpfs"}) {  // fixed order
      if (!runs[i]["modes"].contains(mode)) continue;
      const json& r = runs[i]["modes"][mode];
      if (!r.contains("loadavg") || !r["loadavg"].contains("end")) continue;
      char b[96];
      std::snprintf(b, sizeof(b), "  %s %.2f -> %.2f", mode, r["loadavg"]["start"]["1m"].get<double>(),
                    r["loadavg"]["end"]["1m"].get<double>());
      la += b;
    }
    std::printf("   run %zu/%zu, load average (1 min) start -> end:%s\n", i + 1, runs.size(), la.c_str());
    PrintRatioTable(runs[i]["ratios"], small);
  }
  if (runs.size() > 1) {
    std::printf("   median of the %zu runs:\n", runs.size());
    PrintRatioTable(pj["median"], small);
  }
}

[[noreturn]] void Usage(const char* msg) {
  if (msg) std::fprintf(stderr, "kvfs-bench: %s\n", msg);
  std::fprintf(stderr,
               "usage: kvfs-bench [--profile P[,P...]|all] [--chunks N (200)] [--threads T (4)] [--chunk-bytes B]\n"
               "  [--hit-ratio F (0.5)] [--latency-us US (500)] [--data-mbps MBPS (0)]\n"
               "  [--modes direct,kvfs,tmpfs (default) | any of direct,ceiling,kvfs,tmpfs] [--repeat R (1)]\n"
               "  [--fill-bytes auto|B (0: no cold load with a full cache; auto: 1.25x kvfs --cache-size)]\n"
               "  [--work DIR (/var/tmp/kvfs-bench)] [--tmpfs DIR (/dev/shm)] [--build DIR (this binary's build dir)]\n"
               "  [--json FILE]\n"
               "  [--lookup-batch N (128)] [--no-cold-load] [--no-progress] [--kvfs-arg A]... [--nfsim-arg A]...\n"
               "  [--ceiling-arg A]... (added to the ceiling's kvfs-nfsim --latency-us 0)\n"
               "  [--phase-hook CMD (run as: sh -c 'CMD PROFILE MODE PHASE begin|end')]\n"
               "profiles: vllm llmd lmcache-fs lmcache-nixl sglang-file sglang-nixl creates\n");
  std::exit(2);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) {
    if (!x.empty()) v.push_back(x);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--profile" || a == "--profiles") cfg.profiles = Split(val());
    else if (a == "--modes") cfg.modes = Split(val());
    else if (a == "--chunks") cfg.chunks = std::stoull(val());
    else if (a == "--chunk-bytes") cfg.chunk_bytes = std::stoull(val());
    else if (a == "--threads") cfg.threads = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--hit-ratio") cfg.hit_ratio = std::stod(val());
    else if (a == "--latency-us") cfg.latency_us = std::stol(val());
    else if (a == "--data-mbps") cfg.data_mbps = std::stod(val());
    else if (a == "--work") cfg.work = val();
    else if (a == "--tmpfs") cfg.tmpfs = val();
    else if (a == "--build") cfg.build = val();
    else if (a == "--json") cfg.json_out = val();
    else if (a == "--lookup-batch") cfg.lookup_batch = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--no-cold-load") cfg.cold_load = false;
    else if (a == "--no-progress") cfg.progress = false;
    else if (a == "--kvfs-arg") cfg.kvfs_args.push_back(val());
    else if (a == "--nfsim-arg") cfg.nfsim_args.push_back(val());
    else if (a == "--ceiling-arg") cfg.ceiling_args.push_back(val());
    else if (a == "--repeat") cfg.repeat = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--fill-bytes") {
      std::string v = val();
      cfg.fill_bytes = v == "auto" ? -1 : static_cast<int64_t>(ParseSizeOr(v, 0));
    }
    else if (a == "--phase-hook") cfg.phase_hook = val();
    else if (a == "-h" || a == "--help") Usage(nullptr);
    else Usage(("unknown argument " + a).c_str());
  }
  if (cfg.threads == 0 || cfg.chunks == 0 || cfg.lookup_batch == 0 || cfg.repeat == 0) {
    Usage("threads, chunks, lookup batch and repeat must be > 0");
  }
  for (auto& m : cfg.modes) {
    if (m != "direct" && m != "kvfs" && m != "tmpfs" && m != "ceiling") {
      Usage(("unknown mode " + m + " (direct, ceiling, kvfs, tmpfs)").c_str());
    }
  }
  if (cfg.build.empty()) {
    fs::path self = fs::canonical("/proc/self/exe");
    cfg.build = self.parent_path().parent_path().string();
  }
  cfg.work = fs::absolute(cfg.work).string();
  fs::create_directories(cfg.work);

  std::vector<Profile> all = Profiles(), chosen;
  for (auto& name : cfg.profiles) {
    if (name == "all") {
      chosen = all;
      break;
    }
    auto it = std::find_if(all.begin(), all.end(), [&](const Profile& p) { return p.name == name; });
    if (it == all.end()) Usage(("unknown profile " + name).c_str());
    chosen.push_back(*it);
  }

  std::atomic<bool> stop{false};
  std::thread prog(ProgressLoop, &stop, cfg.progress && isatty(2));
  json report;
  report["config"] = {{"chunks", cfg.chunks}, {"threads", cfg.threads}, {"hit_ratio", cfg.hit_ratio},
                      {"latency_us", cfg.latency_us}, {"data_mbps", cfg.data_mbps}, {"cold_load", cfg.cold_load},
                      {"lookup_batch", cfg.lookup_batch}, {"kvfs_args", cfg.kvfs_args}, {"nfsim_args", cfg.nfsim_args},
                      {"ceiling_args", cfg.ceiling_args}, {"repeat", cfg.repeat}, {"fill_bytes", cfg.fill_bytes},
                      {"modes", cfg.modes}};
  report["loadavg_start"] = LoadAvg();
  report["profiles"] = json::array();
  bool all_ok = true;
  for (auto& p : chosen) {
    size_t size = cfg.chunk_bytes ? cfg.chunk_bytes : p.default_size;
    if (p.name == "lmcache-fs" && size <= kLmcHeader) Usage("lmcache-fs needs more than 28 bytes");
    json pj = {{"profile", p.name}, {"what", p.what}, {"chunks", cfg.chunks}, {"chunk_bytes", size},
               {"threads", cfg.threads}, {"hit_ratio", cfg.hit_ratio}, {"latency_us", cfg.latency_us}};
    // --repeat: the modes run interleaved (direct, ceiling, kvfs, direct, ...), so slow drifts of the
    // machine's load hit every mode alike. "modes" is the first run (what bench_plot.py reads).
    json runs = json::array();
    for (unsigned rep = 0; rep < cfg.repeat; ++rep) {
      json rm;
      for (auto& m : cfg.modes) {
        rm[m] = RunMode(cfg, p, size, m);
        all_ok = all_ok && rm[m].value("ok", false);
      }
      runs.push_back({{"modes", rm}, {"ratios", RunRatios(rm)}});
    }
    json modes = runs[0]["modes"];
    pj["modes"] = modes;
    pj["runs"] = runs;
    pj["median"] = MedianRatios(runs);
    // Warm-load target: bandwidth relative to the same loads from tmpfs (same chunks, threads, syscalls).
    if (modes.contains("tmpfs") && modes["tmpfs"].value("ok", false)) {
      // Both tmpfs loads read memory; the better one is the baseline (short phases on a shared machine
      // are noisy, and the higher baseline is the conservative one for the ratio).
      double base = std::max(modes["tmpfs"]["phases"]["load"]["mb_per_s"].get<double>(),
                             modes["tmpfs"]["phases"]["warm_load"]["mb_per_s"].get<double>());
      json vs = {{"tmpfs_mb_per_s", base}};
      for (const char* m : {"direct", "kvfs"}) {
        if (modes.contains(m) && modes[m].value("ok", false) && base > 0) {
          vs[m] = modes[m]["phases"]["warm_load"]["mb_per_s"].get<double>() / base;
        }
      }
      pj["warm_load_vs_tmpfs"] = vs;
    }
    report["profiles"].push_back(pj);
    {
      std::lock_guard<std::mutex> g(g_label_mu);
      g_label.clear();
    }
    std::fprintf(stderr, "\r\033[K");
    PrintProfile(pj);
    PrintRuns(pj);
    std::fflush(stdout);
  }
  stop = true;
  prog.join();
  report["loadavg_end"] = LoadAvg();
  std::printf("\nload average (1 min) at start %.2f, at end %.2f\n", report["loadavg_start"]["1m"].get<double>(),
              report["loadavg_end"]["1m"].get<double>());
  if (!cfg.json_out.empty()) {
    std::ofstream f(cfg.json_out);
    f << report.dump(1) << "\n";
  }
  return all_ok ? 0 : 1;
}
