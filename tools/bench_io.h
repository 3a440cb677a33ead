// kvfs-bench's syscall layer: every file system call a profile replays goes through a wrapper here that
// issues exactly that one syscall and records its latency (per syscall name, per thread) in the calling
// thread's Recorder; the chunk contents (a salted word pattern every load verifies) and the chunk keys.
// Called by the profiles (tools/bench_profiles.cc) and the phases (tools/bench_phases.cc).
//
// Thread safety: the wrappers may run on any number of threads; each records into its own thread's
// t_rec (set by the phase runner; nullptr = not recorded). Failures throw Failure.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvfs::bench {

// ---------------------------------------------------------------------------------------------------
// Timing and syscall recording

inline int64_t NowNs() {
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
extern thread_local constinit Recorder* t_rec;

inline void Note(const char* name, int64_t t0) {
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

[[noreturn]] void Fail(const std::string& what);
[[noreturn]] void FailErrno(const std::string& what);

int Open(const std::string& p, int flags, mode_t mode = 0);
void CloseOk(int fd);
// Returns 0 or the errno.
int StatE(const std::string& p, struct stat* st = nullptr);
int AccessE(const std::string& p);
int MkdirE(const std::string& p, mode_t m);
void RenameOk(const std::string& a, const std::string& b);
void WriteAll(int fd, const char* buf, size_t n, const char* name = "write");
void PwriteAll(int fd, const char* buf, size_t n, off_t off);
void ReadExact(int fd, char* buf, size_t n, const std::string& what);
void PreadExact(int fd, char* buf, size_t n, off_t off, const std::string& what);

// ---------------------------------------------------------------------------------------------------
// Content: word k of chunk N is ((N << 32) + k) ^ salt (the traces' blkN pattern, salted per run).

void Fill(char* buf, size_t len, uint64_t id, uint64_t salt);
// Throws Failure naming `what` and the offset of the first mismatch.
void Verify(const char* buf, size_t len, uint64_t id, uint64_t salt, const std::string& what);

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
std::string Key(uint64_t i, uint64_t salt);

// A random 63-bit number (per-thread generator): temp-name tags, as the connectors draw them.
uint64_t Rand63();

}  // namespace kvfs::bench
