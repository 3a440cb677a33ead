// KernelCopy: reads bytes of this process's own memory through a kernel copy into a small, reused,
// per-thread window, so the memory itself is never accessed from user mode (the read path's checksum
// verification of freshly loaded values; blockstore/segment_reader.cc).
//
// Why: on a hypervisor with shadow page tables (the dev VM: a PVM guest), the first user-mode access to
// each page of a new mapping traps to the hypervisor even when the page is already present in the
// guest's page tables (MAP_POPULATE): ~10-15 us per 4 KiB page, ~3 s of CPU per GB. The kernel reaches the
// same pages through its own mapping (get_user_pages + the direct map) without that trap: an O_DIRECT read
// fills a buffer that way, and the FUSE reply (writev on /dev/fuse) copies from it that way. So a value
// loaded into fresh memory and verified by hashing it in place paid the trap on every page (the xxh3
// loop's first load: 55-60 % of the daemon's CPU in a cold load into an empty LRU), while the same bytes
// copied by the kernel into a window that user mode already touched cost a memcpy (~0.3 s/GB measured,
// vs ~3 s/GB). On bare metal or with hardware-assisted paging (EPT/NPT) there is no such trap: the pages
// an O_DIRECT read filled are already mapped, hashing them in place would cost ~0.13 s/GB, and the kernel
// copy is extra work (~0.3 s/GB measured here, so ~0.2 s/GB more than in place). Choosing the path per
// machine (a mount-time probe of the first-touch cost) is left to do (#15); a buffer already touched from
// user mode (BufferPool tracks it) is verified in place everywhere.
//
// How: vmsplice(2) of the source range into a per-thread pipe (page references, no copy), then read(2)
// from the pipe into the thread's window (the one copy, by the kernel, into user-touched memory). When
// the kernel refuses (no vmsplice, seccomp, fd limits), the range is handed out in place (same bytes,
// the slow way) and fallbacks is counted.
//
// Thread safety: every function may be called from many threads at once (the pipe and window are per
// thread). Invariant: the bytes handed to visit are exactly src's bytes at the time of the call; the
// caller must not let src change meanwhile (the read path owns the buffer until it is verified).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace kvfs {

// Bytes the window holds, and so the most handed to one visit call.
inline constexpr size_t kKernelCopyWindow = 256 * 1024;

// Calls visit(offset, p, n) for consecutive ranges covering [0, len) of src, in order: p holds a copy of
// src[offset, offset + n) made by the kernel (or src + offset itself after a fallback). n <= the window and
// a multiple of grain (grain divides kKernelCopyWindow), except for the last range. Stops and returns
// false as soon as visit returns false; true when every range was visited.
bool VisitThroughKernel(const char* src, size_t len, size_t grain,
                        const std::function<bool(size_t offset, const char* p, size_t n)>& visit);

struct KernelCopyStats {
  uint64_t bytes = 0;      // bytes handed out as kernel copies
  uint64_t fallbacks = 0;  // calls (or their rest) handed out in place because the kernel refused
};
KernelCopyStats GetKernelCopyStats();

// Tests: when true, every call takes the fallback (in-place) path.
void SetKernelCopyDisabledForTest(bool disabled);

}  // namespace kvfs
