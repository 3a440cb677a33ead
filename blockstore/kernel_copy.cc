#include "blockstore/kernel_copy.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace kvfs {
namespace {

std::atomic<uint64_t> g_kernel_copy_bytes{0};
std::atomic<uint64_t> g_kernel_copy_fallbacks{0};
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

}  // namespace

bool VisitThroughKernel(const char* src, size_t len, size_t grain,
                        const std::function<bool(size_t offset, const char* p, size_t n)>& visit) {
  thread_local KernelCopyLane lane;
  const size_t step = grain == 0 ? kKernelCopyWindow : std::max(grain, kKernelCopyWindow / grain * grain);
  size_t off = 0;
  if (!g_kernel_copy_disabled.load(std::memory_order_relaxed) && step <= kKernelCopyWindow && lane.Ready()) {
    while (off < len) {
      const size_t n = std::min(step, len - off);
      if (!lane.Copy(src + off, lane.window, n)) break;
      g_kernel_copy_bytes.fetch_add(n, std::memory_order_relaxed);
      if (!visit(off, lane.window, n)) return false;
      off += n;
    }
  }
  if (off < len) {
    // The kernel refused: the same bytes, read in place.
    g_kernel_copy_fallbacks.fetch_add(1, std::memory_order_relaxed);
    while (off < len) {
      const size_t n = std::min(step, len - off);
      if (!visit(off, src + off, n)) return false;
      off += n;
    }
  }
  return true;
}

KernelCopyStats GetKernelCopyStats() {
  return {g_kernel_copy_bytes.load(std::memory_order_relaxed), g_kernel_copy_fallbacks.load(std::memory_order_relaxed)};
}

void SetKernelCopyDisabledForTest(bool disabled) { g_kernel_copy_disabled.store(disabled); }

}  // namespace kvfs
