#include "blockstore/kernel_copy.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "blockstore/format.h"

namespace kvfs {
namespace {

std::atomic<uint64_t> g_kernel_copy_bytes{0};
std::atomic<uint64_t> g_kernel_copy_fallbacks{0};
std::atomic<uint64_t> g_kernel_write_bytes{0};
std::atomic<uint64_t> g_kernel_write_fallbacks{0};
std::atomic<bool> g_kernel_copy_disabled{false};

// A thread's pipe and window. The window is touched from user mode once, when it is allocated.
struct KernelCopyLane {
  int rd = -1;
  int wr = -1;
  char* window = nullptr;
  bool refused = false;  // the kernel said vmsplice/pipes are not available here: stop asking

  ~KernelCopyLane() {
    ClosePipe();
    free(window);
  }
  void ClosePipe() {
    if (rd >= 0) close(rd);
    if (wr >= 0) close(wr);
    rd = wr = -1;
  }
  bool Ready() {
    if (refused) return false;
    if (!window) {
      void* p = nullptr;
      if (posix_memalign(&p, 4096, kKernelCopyWindow) != 0) return false;
      window = static_cast<char*>(p);
      std::memset(window, 0, kKernelCopyWindow);  // its one first touch
    }
    if (rd < 0) {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) return false;
      rd = p[0];
      wr = p[1];
      // Room for a whole window of page references (a failure keeps the default 64 KiB: more rounds).
      (void)fcntl(wr, F_SETPIPE_SZ, static_cast<int>(kKernelCopyWindow));
    }
    return true;
  }
  // n bytes of src into dst through the pipe. False on any failure (the pipe is dropped: it may hold
  // references that were not read).
  bool Copy(const char* src, char* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      iovec iov{const_cast<char*>(src + done), n - done};
      ssize_t k = vmsplice(wr, &iov, 1, SPLICE_F_NONBLOCK);
      if (k <= 0) {
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == ENOSYS || errno == EPERM || errno == EINVAL)) refused = true;
        ClosePipe();
        return false;
      }
      size_t got = 0;
      while (got < static_cast<size_t>(k)) {
        ssize_t r = read(rd, dst + done + got, static_cast<size_t>(k) - got);
        if (r <= 0) {
          if (r < 0 && errno == EINTR) continue;
          ClosePipe();
          return false;
        }
        got += static_cast<size_t>(r);
      }
      done += static_cast<size_t>(k);
    }
    return true;
  }
};

// VisitThroughKernel; count = false for the probe (its bytes are not the read path's).
bool VisitImpl(const char* src, size_t len, size_t grain,
               const std::function<bool(size_t offset, const char* p, size_t n)>& visit, bool count) {
  thread_local KernelCopyLane lane;
  const size_t step = grain == 0 ? kKernelCopyWindow : std::max(grain, kKernelCopyWindow / grain * grain);
  size_t off = 0;
  if (!g_kernel_copy_disabled.load(std::memory_order_relaxed) && step <= kKernelCopyWindow && lane.Ready()) {
    while (off < len) {
      const size_t n = std::min(step, len - off);
      if (!lane.Copy(src + off, lane.window, n)) break;
      if (count) g_kernel_copy_bytes.fetch_add(n, std::memory_order_relaxed);
      if (!visit(off, lane.window, n)) return false;
      off += n;
    }
  }
  if (off < len) {
    // The kernel refused: the same bytes, read in place.
    if (count) g_kernel_copy_fallbacks.fetch_add(1, std::memory_order_relaxed);
    while (off < len) {
      const size_t n = std::min(step, len - off);
      if (!visit(off, src + off, n)) return false;
      off += n;
    }
  }
  return true;
}

// Hashes [p, p + n) as the read path verifies a value: XXH3 per 64 KiB block. Returns a value that
// depends on every hash (so the compiler keeps them).
uint64_t HashBlocks(const char* p, size_t n) {
  constexpr size_t kBlock = 64 * 1024;
  uint64_t acc = 0;
  for (size_t off = 0; off < n; off += kBlock) acc ^= format::Hash64(p + off, std::min(kBlock, n - off));
  return acc;
}

char* MapFresh(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

double SecondsPerGb(std::chrono::steady_clock::duration d, size_t bytes) {
  return bytes ? std::chrono::duration<double>(d).count() * 1e9 / static_cast<double>(bytes) : 0.0;
}

std::atomic<bool> g_verify_kernel{true};
std::mutex g_choice_mu;
VerifyCopyChoice g_choice;  // guarded by g_choice_mu

}  // namespace

bool VisitThroughKernel(const char* src, size_t len, size_t grain,
                        const std::function<bool(size_t offset, const char* p, size_t n)>& visit) {
  return VisitImpl(src, len, grain, visit, /*count=*/true);
}

void WriteThroughKernel(char* dst, const char* src, size_t n) {
  // Set once the kernel refuses the call itself (seccomp, no CONFIG_CROSS_MEMORY_ATTACH): stop asking.
  static std::atomic<bool> refused{false};
  size_t done = 0;
  if (!g_kernel_copy_disabled.load(std::memory_order_relaxed) && !refused.load(std::memory_order_relaxed)) {
    const pid_t self = getpid();
    while (done < n) {
      iovec local{const_cast<char*>(src + done), n - done};
      iovec remote{dst + done, n - done};
      const ssize_t k = process_vm_writev(self, &local, 1, &remote, 1, 0);
      if (k <= 0) {
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == ENOSYS || errno == EPERM)) refused.store(true, std::memory_order_relaxed);
        break;
      }
      done += static_cast<size_t>(k);
    }
    g_kernel_write_bytes.fetch_add(done, std::memory_order_relaxed);
  }
  if (done < n) {
    g_kernel_write_fallbacks.fetch_add(1, std::memory_order_relaxed);
    std::memcpy(dst + done, src + done, n - done);
  }
}

KernelCopyStats GetKernelCopyStats() {
  return {g_kernel_copy_bytes.load(std::memory_order_relaxed), g_kernel_copy_fallbacks.load(std::memory_order_relaxed),
          g_kernel_write_bytes.load(std::memory_order_relaxed), g_kernel_write_fallbacks.load(std::memory_order_relaxed)};
}

void SetKernelCopyDisabledForTest(bool disabled) { g_kernel_copy_disabled.store(disabled); }

bool ParseVerifyCopyMode(std::string_view s, VerifyCopyMode* out) {
  if (s == "auto") {
    *out = VerifyCopyMode::kAuto;
  } else if (s == "kernel") {
    *out = VerifyCopyMode::kKernel;
  } else if (s == "inplace" || s == "in-place" || s == "in_place") {
    *out = VerifyCopyMode::kInPlace;
  } else {
    return false;
  }
  return true;
}

const char* VerifyCopyModeName(VerifyCopyMode m) {
  switch (m) {
    case VerifyCopyMode::kAuto: return "auto";
    case VerifyCopyMode::kKernel: return "kernel";
    case VerifyCopyMode::kInPlace: return "inplace";
  }
  return "?";
}

VerifyCopyProbe ProbeVerifyCopy(size_t bytes, int rounds) {
  using Clock = std::chrono::steady_clock;
  VerifyCopyProbe p;
  bytes = std::max<size_t>(4096, bytes / 4096 * 4096);
  p.bytes = bytes;
  const auto start = Clock::now();
  // The thread's pipe and window first (their set-up is not the per-byte cost).
  {
    static const char warm[4096] = {};
    VisitImpl(warm, sizeof(warm), 0, [](size_t, const char*, size_t) { return true; }, false);
  }
  Clock::duration fresh = Clock::duration::max(), touched = fresh, kernel = fresh;
  uint64_t sink = 0;
  bool works = true;
  for (int r = 0; r < rounds; ++r) {
    char* a = MapFresh(bytes);
    char* b = MapFresh(bytes);
    if (!a || !b) {
      if (a) munmap(a, bytes);
      if (b) munmap(b, bytes);
      break;
    }
    auto t0 = Clock::now();
    sink ^= HashBlocks(a, bytes);  // each page's first user-mode touch
    auto t1 = Clock::now();
    sink ^= HashBlocks(a, bytes);  // the same pages, touched
    auto t2 = Clock::now();
    bool ok = true;
    VisitImpl(b, bytes, 64 * 1024, [&](size_t off, const char* q, size_t n) {
      if (q == b + off) ok = false;  // handed out in place: the kernel refused
      sink ^= HashBlocks(q, n);
      return true;
    }, false);
    auto t3 = Clock::now();
    works = works && ok;
    fresh = std::min(fresh, t1 - t0);
    touched = std::min(touched, t2 - t1);
    kernel = std::min(kernel, t3 - t2);
    p.rounds++;
    munmap(a, bytes);
    munmap(b, bytes);
  }
  if (p.rounds > 0) {
    p.in_place_fresh_s_per_gb = SecondsPerGb(fresh, bytes);
    p.in_place_touched_s_per_gb = SecondsPerGb(touched, bytes);
    p.kernel_copy_s_per_gb = SecondsPerGb(kernel, bytes);
    p.kernel_copy_works = works;
  }
  p.elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  // Keeps the hashes (and so the touches) from being optimised away.
  static std::atomic<uint64_t> g_probe_sink{0};
  g_probe_sink.fetch_xor(sink, std::memory_order_relaxed);
  return p;
}

bool ChooseVerifyCopy(const VerifyCopyProbe& p) {
  if (!p.kernel_copy_works || p.rounds == 0) return false;
  if (p.kernel_copy_s_per_gb <= 0 || p.in_place_fresh_s_per_gb <= 0) return false;
  return p.kernel_copy_s_per_gb < kKernelCopyAdvantage * p.in_place_fresh_s_per_gb;
}

VerifyCopyChoice ConfigureVerifyCopy(VerifyCopyMode mode) {
  VerifyCopyChoice c;
  c.mode = mode;
  if (mode == VerifyCopyMode::kAuto) {
    // On a thread of its own: its kernel-copy pipe and window go with it.
    std::thread t([&c] { c.probe = ProbeVerifyCopy(); });
    t.join();
    c.probed = true;
    c.kernel = ChooseVerifyCopy(c.probe);
  } else {
    c.kernel = mode == VerifyCopyMode::kKernel;
  }
  SetVerifyCopy(c);
  return c;
}

void SetVerifyCopy(const VerifyCopyChoice& c) {
  std::lock_guard<std::mutex> l(g_choice_mu);
  g_choice = c;
  g_verify_kernel.store(c.kernel, std::memory_order_relaxed);
}

VerifyCopyChoice GetVerifyCopy() {
  std::lock_guard<std::mutex> l(g_choice_mu);
  return g_choice;
}

bool VerifyUntouchedThroughKernel() { return g_verify_kernel.load(std::memory_order_relaxed); }

std::string DescribeVerifyCopy(const VerifyCopyChoice& c) {
  std::string out = c.kernel ? "kernel copy" : "in place";
  char b[256];
  if (!c.probed) {
    std::snprintf(b, sizeof(b), " (--verify-copy %s; not probed)", VerifyCopyModeName(c.mode));
    return out + b;
  }
  const VerifyCopyProbe& p = c.probe;
  std::snprintf(b, sizeof(b),
                " (auto: in place %.2f s/GB on fresh pages, %.2f s/GB touched; kernel copy %.2f s/GB%s; "
                "probe %d x %zu KiB, %.1f ms)",
                p.in_place_fresh_s_per_gb, p.in_place_touched_s_per_gb, p.kernel_copy_s_per_gb,
                p.kernel_copy_works ? "" : " (refused by the kernel)", p.rounds,
                static_cast<size_t>(p.bytes / 1024), p.elapsed_ms);
  return out + b;
}

}  // namespace kvfs
