// kvfs-bench's connector profiles (tools/bench_profiles.h).
#include "tools/bench_profiles.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "tools/bench_io.h"

namespace kvfs::bench {
namespace {

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


// ===================================================================================================
// The connector patterns of 2026 (docs/benchmarks.md "Profiles"; tests/integration/link_publish_test.py,
// connectors2026_test.py). Helpers here are prefixed (P26) so the unity build sees no duplicate names.

void P26Fsync(int fd, const std::string& what) {
  if (SYS("fsync", ::fsync(fd)) != 0) FailErrno("fsync " + what);
}
void P26Unlink(const std::string& p) {
  if (SYS("unlink", ::unlink(p.c_str())) != 0) FailErrno("unlink " + p);
}
// fallocate mode 0 (a preallocation); EOPNOTSUPP is accepted (the connectors then go on without it).
void P26Fallocate(int fd, off_t len, const std::string& what) {
  if (SYS("fallocate", ::fallocate(fd, 0, 0, len)) != 0 && errno != EOPNOTSUPP) FailErrno("fallocate " + what);
}
bool P26Aligned(size_t n) { return n % 4096 == 0; }

// ---- LMCache fs_native, link publish: unique O_EXCL temp, write, fsync, close, link(tmp, final) (EEXIST =
// another writer won), unlink(tmp), fsync(dirfd). O_DIRECT when the length is f_bsize-aligned, as LMCache.
std::string LnkDir(const Ctx& c) { return c.root + "/lmcache_native"; }
std::string LnkFinal(const Ctx& c, uint64_t id) {
  return LnkDir(c) + "/vllm@Qwen3-8B@1@0@" + Key(id, c.salt) + "@bfloat16@g0.data";
}
void LnkInit(const Ctx& c) { MkdirE(LnkDir(c), 0777); }
void LnkStore(const Ctx& c, uint64_t id, char* buf) {
  std::string f = LnkFinal(c, id);
  if (StatE(f) != ENOENT) Fail("lmcache-link store: " + f + " exists");
  std::string tmp = f + ".tmp." + std::to_string(getpid()) + "." + std::to_string(Rand63());
  int fd = Open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (P26Aligned(c.size) ? O_DIRECT : 0), 0644);
  if (fd < 0) FailErrno("open " + tmp);
  WriteAll(fd, buf, c.size);
  P26Fsync(fd, tmp);
  CloseOk(fd);
  if (SYS("link", ::link(tmp.c_str(), f.c_str())) != 0 && errno != EEXIST) FailErrno("link " + tmp);
  P26Unlink(tmp);
  int dfd = Open(LnkDir(c), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) FailErrno("open " + LnkDir(c));
  P26Fsync(dfd, LnkDir(c));
  CloseOk(dfd);
}
void LnkLoad(const Ctx& c, uint64_t id, char* buf) {
  std::string f = LnkFinal(c, id);
  int fd = Open(f, O_RDONLY | O_CLOEXEC | (P26Aligned(c.size) ? O_DIRECT : 0));
  if (fd < 0) FailErrno("open " + f);
  ReadExact(fd, buf, c.size, f);
  CloseOk(fd);
}

// ---- NVIDIA Dynamo KVBM G4: one file per block straight to the final name <hash:016x>_<worker>_<world>
// (no temp, no rename), preallocated, O_DIRECT, one pwrite, close; loads through an fd cache: the first
// load of a block opens it O_RDONLY|O_DIRECT and keeps it open, every load is one pread.
struct G4Cache {
  std::mutex mu;
  std::unordered_map<uint64_t, int> fds;
};
std::string G4Dir(const Ctx& c) { return c.root + "/dynamo_g4"; }
std::string G4Final(const Ctx& c, uint64_t id) { return G4Dir(c) + "/" + Key(id, c.salt).substr(0, 16) + "_0_1"; }
void G4Store(const Ctx& c, uint64_t id, char* buf) {
  std::string f = G4Final(c, id);
  int fd = Open(f, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (P26Aligned(c.size) ? O_DIRECT : 0), 0644);
  if (fd < 0) FailErrno("open " + f);
  P26Fallocate(fd, static_cast<off_t>(c.size), f);
  PwriteAll(fd, buf, c.size, 0);
  CloseOk(fd);
}
void G4Load(G4Cache& cache, const Ctx& c, uint64_t id, char* buf) {
  int fd = -1;
  {
    std::lock_guard<std::mutex> g(cache.mu);
    auto it = cache.fds.find(id);
    if (it != cache.fds.end()) fd = it->second;
  }
  std::string f = G4Final(c, id);
  if (fd < 0) {
    fd = Open(f, O_RDONLY | O_CLOEXEC | (P26Aligned(c.size) ? O_DIRECT : 0));
    if (fd < 0) FailErrno("open " + f);
    std::lock_guard<std::mutex> g(cache.mu);
    auto [it, fresh] = cache.fds.emplace(id, fd);
    if (!fresh) {  // another thread loaded the same block at once: keep one
      CloseOk(fd);
      fd = it->second;
    }
  }
  PreadExact(fd, buf, c.size, 0, f);
}
void G4Release(G4Cache& cache) {
  std::lock_guard<std::mutex> g(cache.mu);
  for (auto& [id, fd] : cache.fds) CloseOk(fd);
  cache.fds.clear();
}

// ---- VAST VUA: a prefix trie of directories, one 2-hex-char level per chunk of a sequence; chunk k of a
// sequence lives at depth k+1 (sequences of --trie-depth chunks), each level holding `_data` and `_tokens`
// written O_CREAT|O_TRUNC to the final name; every access walks the levels with openat(dirfd, O_DIRECTORY).
constexpr size_t kVuaTokens = 2400;  // 600 tokens x 4 B
std::string VuaLevel(const Ctx& c, uint64_t seq, unsigned lvl) {
  return Key(seq, c.salt ^ (lvl / 32)).substr((lvl % 32) * 2, 2);
}
// Opens the directory of chunk id (levels 0..depth-1 of its sequence) by openat from the root; with
// create, mkdirat of missing levels (EEXIST is normal: another thread made it). Returns the fd or -errno.
int VuaWalk(const Ctx& c, uint64_t id, bool create) {
  uint64_t seq = id / c.trie_depth;
  unsigned depth = static_cast<unsigned>(id % c.trie_depth) + 1;
  int dfd = Open(c.root + "/vua", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) FailErrno("open vua root");
  // The lookup phase's absent keys (bit 62) are prefixes never seen: their first level is not a 2-hex
  // name ("g" + 1 hex), so they miss there. With 2-hex names a 1-level probe would hit a stored
  // sequence's first level (and its `_data`) 2 times in 256 (a flaky "got hit").
  const bool absent = id & (1ull << 62);
  for (unsigned l = 0; l < depth; ++l) {
    std::string name = VuaLevel(c, seq, l);
    if (absent && l == 0) name[0] = 'g';
    int nfd = SYS("openat", ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (nfd < 0 && errno == ENOENT && create) {
      if (SYS("mkdirat", ::mkdirat(dfd, name.c_str(), 0755)) != 0 && errno != EEXIST) FailErrno("mkdirat " + name);
      nfd = SYS("openat", ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    }
    int e = errno;
    CloseOk(dfd);
    if (nfd < 0) {
      if (e == ENOENT) return -ENOENT;
      errno = e;
      FailErrno("openat level " + std::to_string(l) + " " + name);
    }
    dfd = nfd;
  }
  return dfd;
}
void VuaInit(const Ctx& c) { MkdirE(c.root + "/vua", 0777); }
void VuaWriteAt(int dfd, const char* name, const char* buf, size_t n) {
  int fd = SYS("openat", ::openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd < 0) FailErrno(std::string("openat ") + name);
  WriteAll(fd, buf, n);
  CloseOk(fd);
}
void VuaReadAt(int dfd, const char* name, char* buf, size_t n) {
  int fd = SYS("openat", ::openat(dfd, name, O_RDONLY | O_CLOEXEC));
  if (fd < 0) FailErrno(std::string("openat ") + name);
  ReadExact(fd, buf, n, name);
  CloseOk(fd);
}
void VuaStore(const Ctx& c, uint64_t id, char* buf) {
  int dfd = VuaWalk(c, id, true);
  if (dfd < 0) Fail("vua-trie: level missing after mkdirat");
  char tok[kVuaTokens];
  Fill(tok, sizeof(tok), (1ull << 60) | id, c.salt);
  VuaWriteAt(dfd, "_tokens", tok, sizeof(tok));
  VuaWriteAt(dfd, "_data", buf, c.size);
  CloseOk(dfd);
}
void VuaLoad(const Ctx& c, uint64_t id, char* buf) {
  int dfd = VuaWalk(c, id, false);
  if (dfd < 0) Fail("vua-trie load: level of chunk " + std::to_string(id) + " missing");
  char tok[kVuaTokens];
  VuaReadAt(dfd, "_tokens", tok, sizeof(tok));
  Verify(tok, sizeof(tok), (1ull << 60) | id, c.salt, "_tokens of chunk " + std::to_string(id));
  VuaReadAt(dfd, "_data", buf, c.size);
  CloseOk(dfd);
}
bool VuaExists(const Ctx& c, uint64_t id) {
  int dfd = VuaWalk(c, id, false);
  if (dfd < 0) return false;
  int r = SYS("faccessat", ::faccessat(dfd, "_data", F_OK, 0));
  CloseOk(dfd);
  return r == 0;
}

// ---- vLLM multi-node tensor parallel: rank 0 creates the temp O_CREAT|O_EXCL|O_RDWR|O_TRUNC and
// ftruncates it to the chunk size; then --ranks threads (rank 0 on its fd, the others on their own
// O_RDWR opens) each pwrite their slice at rank * slice and close; then rename to the final name.
std::string TpFinal(const Ctx& c, uint64_t id) {
  std::string k = Key(id, c.salt);
  return c.root + "/vllm_tp/" + k.substr(0, 2) + "/" + k + ".bin";
}
void TpInit(const Ctx& c) {
  MkdirE(c.root + "/vllm_tp", 0777);
  for (int i = 0; i < 256; ++i) {  // the fan-out, made at start-up (excluded from the counts)
    char h[3];
    std::snprintf(h, sizeof(h), "%02x", i);
    MkdirE(c.root + "/vllm_tp/" + h, 0777);
  }
}
void TpStore(const Ctx& c, uint64_t id, char* buf) {
  std::string f = TpFinal(c, id);
  std::string tmp = f + ".tmp" + std::to_string(Rand63());
  int fd0 = Open(tmp, O_RDWR | O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC, 0644);
  if (fd0 < 0) FailErrno("open " + tmp);
  if (SYS("ftruncate", ::ftruncate(fd0, static_cast<off_t>(c.size))) != 0) FailErrno("ftruncate " + tmp);
  unsigned ranks = std::max(1u, c.ranks);
  size_t slice = (c.size / ranks + 4095) / 4096 * 4096;
  std::vector<Recorder> recs(ranks);
  std::vector<std::string> errs(ranks);
  std::vector<std::thread> ts;
  for (unsigned r = 0; r < ranks; ++r) {
    ts.emplace_back([&, r] {
      t_rec = &recs[r];
      try {
        size_t off = std::min(c.size, r * slice), len = std::min(slice, c.size - off);
        int fd = r == 0 ? fd0 : Open(tmp, O_RDWR | O_CLOEXEC);
        if (fd < 0) FailErrno("rank " + std::to_string(r) + " open " + tmp);
        if (len) PwriteAll(fd, buf + off, len, static_cast<off_t>(off));
        CloseOk(fd);
      } catch (const std::exception& e) {
        errs[r] = e.what();
      }
      t_rec = nullptr;
    });
  }
  for (auto& t : ts) t.join();
  if (t_rec) {  // the ranks' syscalls count as the store's
    for (auto& rc : recs) {
      for (auto& [k, v] : rc.sys) t_rec->sys[k].insert(t_rec->sys[k].end(), v.begin(), v.end());
    }
  }
  for (auto& e : errs) {
    if (!e.empty()) Fail(e);
  }
  RenameOk(tmp, f);
}
void TpLoad(const Ctx& c, uint64_t id, char* buf) {
  std::string f = TpFinal(c, id);
  int fd = Open(f, O_RDONLY | O_CLOEXEC);
  if (fd < 0) FailErrno("open " + f);
  ReadExact(fd, buf, c.size, f);
  CloseOk(fd);
}

// ---- vLLM SimpleCPUOffloadConnector disk backend: ONE preallocated file (--file-bytes) of fixed slots of
// the chunk size; chunk i is slot i. Init creates and preallocates it and closes it (the file a restarted
// server finds), then opens the long-lived O_RDWR|O_DIRECT fd every store pwrites its slot through; the
// last store of the phase closes it (the connector's shutdown: where kvfs writes its copy-on-write
// version, so the store phase counts it). Loads pread slots through a long-lived O_RDWR|O_DIRECT fd opened
// by the first load. The index of slots is in the client's memory: lookups touch no file.
struct SlotState {
  std::mutex mu;
  int fd = -1;
  std::atomic<uint64_t> stored{0};
};
std::string SlotFile(const Ctx& c) { return c.root + "/vllm_slots/kv.rank_0"; }
uint64_t SlotFileBytes(const Ctx& c) {
  uint64_t want = std::max<uint64_t>(c.chunks * c.size, 64ull << 20);
  uint64_t b = c.file_bytes ? c.file_bytes : want;
  return (b + c.size - 1) / c.size * c.size;
}
void SlotInit(SlotState& s, const Ctx& c) {
  if (!P26Aligned(c.size)) Fail("vllm-slotfile: the slot size (--chunk-bytes) must be a multiple of 4096 (O_DIRECT)");
  uint64_t fb = SlotFileBytes(c);
  if (fb < c.chunks * c.size) Fail("vllm-slotfile: --file-bytes smaller than chunks x slot size");
  MkdirE(c.root + "/vllm_slots", 0777);
  std::string f = SlotFile(c);
  int fd = Open(f, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) FailErrno("open " + f);
  if (SYS("fallocate", ::fallocate(fd, 0, 0, static_cast<off_t>(fb))) != 0) {
    if (errno != EOPNOTSUPP) FailErrno("fallocate " + f);
    if (SYS("ftruncate", ::ftruncate(fd, static_cast<off_t>(fb))) != 0) FailErrno("ftruncate " + f);
  }
  CloseOk(fd);
  s.stored = 0;
  s.fd = Open(f, O_RDWR | O_DIRECT | O_CLOEXEC);
  if (s.fd < 0) FailErrno("open " + f);
}
void SlotStore(SlotState& s, const Ctx& c, uint64_t id, char* buf) {
  int fd;
  {
    std::lock_guard<std::mutex> g(s.mu);
    fd = s.fd;
  }
  if (fd < 0) Fail("vllm-slotfile store: the slot file is not open");
  PwriteAll(fd, buf, c.size, static_cast<off_t>(id * c.size));
  if (++s.stored == c.chunks) {
    std::lock_guard<std::mutex> g(s.mu);
    CloseOk(s.fd);
    s.fd = -1;
  }
}
void SlotLoad(SlotState& s, const Ctx& c, uint64_t id, char* buf) {
  int fd;
  {
    std::lock_guard<std::mutex> g(s.mu);
    if (s.fd < 0) {
      s.fd = Open(SlotFile(c), O_RDWR | O_DIRECT | O_CLOEXEC);
      if (s.fd < 0) FailErrno("open " + SlotFile(c));
    }
    fd = s.fd;
  }
  PreadExact(fd, buf, c.size, static_cast<off_t>(id * c.size), SlotFile(c));
}
void SlotRelease(SlotState& s) {
  std::lock_guard<std::mutex> g(s.mu);
  if (s.fd >= 0) CloseOk(s.fd);
  s.fd = -1;
}

}  // namespace

std::vector<Profile> Profiles() {
  auto g4 = std::make_shared<G4Cache>();
  auto slots = std::make_shared<SlotState>();
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
      {"lmcache-link", "LMCache fs_native link publish: stat, unique O_EXCL tmp, write, fsync, link(tmp, final), unlink tmp, fsync dir",
       37748736, false, LnkInit, LnkStore, LnkLoad,
       [](const Ctx& c, uint64_t id) { return StatE(LnkFinal(c, id)) == 0; }, nullptr, true},
      {"dynamo-g4", "Dynamo KVBM G4: final name O_EXCL|O_DIRECT, fallocate, 1 pwrite, close; loads: fd cache + pread",
       2097152, false, [](const Ctx& c) { MkdirE(G4Dir(c), 0777); }, G4Store,
       [g4](const Ctx& c, uint64_t id, char* buf) { G4Load(*g4, c, id, buf); },
       [](const Ctx& c, uint64_t id) { return StatE(G4Final(c, id)) == 0; },
       [g4](const Ctx&) { G4Release(*g4); }, true},
      {"vua-trie", "VAST VUA trie: openat walk of 2-hex levels (chunk k of a sequence at depth k+1), _tokens + _data O_TRUNC",
       9437184, false, VuaInit, VuaStore, VuaLoad, VuaExists, nullptr, true},
      {"vllm-tp-pwrite", "vLLM TP: tmp O_EXCL + ftruncate, --ranks threads pwrite their slices (own fds), rename",
       37748736, false, TpInit, TpStore, TpLoad, [](const Ctx& c, uint64_t id) { return StatE(TpFinal(c, id)) == 0; },
       nullptr, true},
      {"vllm-slotfile", "vLLM disk slots: one preallocated file, O_DIRECT pwrite/pread of slots via a long-lived O_RDWR fd",
       2097152, false, [slots](const Ctx& c) { SlotInit(*slots, c); },
       [slots](const Ctx& c, uint64_t id, char* buf) { SlotStore(*slots, c, id, buf); },
       [slots](const Ctx& c, uint64_t id, char* buf) { SlotLoad(*slots, c, id, buf); },
       [](const Ctx&, uint64_t id) { return !(id & (1ull << 62)); },  // the slot index is in memory
       [slots](const Ctx&) { SlotRelease(*slots); }, true},
  };
}

}  // namespace kvfs::bench
