// kvfs-bench's connector profiles (tools/bench_profiles.h).
#include "tools/bench_profiles.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

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

}  // namespace

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

}  // namespace kvfs::bench
