// kvfs-bench's timed syscall wrappers, chunk contents and keys (tools/bench_io.h).
#include "tools/bench_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>

namespace kvfs::bench {

thread_local constinit Recorder* t_rec = nullptr;

[[noreturn]] void Fail(const std::string& what) { throw Failure(what); }
[[noreturn]] void FailErrno(const std::string& what) { throw Failure(what + ": " + std::strerror(errno)); }

int Open(const std::string& p, int flags, mode_t mode) { return SYS("openat", ::open(p.c_str(), flags, mode)); }
void CloseOk(int fd) {
  if (SYS("close", ::close(fd)) != 0) FailErrno("close");
}
int StatE(const std::string& p, struct stat* st) {
  struct stat s;
  return SYS("stat", ::stat(p.c_str(), st ? st : &s)) == 0 ? 0 : errno;
}
int AccessE(const std::string& p) { return SYS("access", ::access(p.c_str(), F_OK)) == 0 ? 0 : errno; }
int MkdirE(const std::string& p, mode_t m) { return SYS("mkdir", ::mkdir(p.c_str(), m)) == 0 ? 0 : errno; }
void RenameOk(const std::string& a, const std::string& b) {
  if (SYS("rename", ::rename(a.c_str(), b.c_str())) != 0) FailErrno("rename " + a);
}
void WriteAll(int fd, const char* buf, size_t n, const char* name) {
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

}  // namespace kvfs::bench
