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
// copy is extra work (~0.3 s/GB measured here, so ~0.2 s/GB more than in place). So the path is chosen per
// machine: `kvfs mount --verify-copy auto` (the default) runs ProbeVerifyCopy once at mount (a few ms:
// hashes fresh MAP_POPULATE pages in place, the same pages again, and fresh pages through the kernel
// copy) and ChooseVerifyCopy picks the cheaper path for never-touched buffers; `kernel` / `inplace`
// force one (SetVerifyCopy; the read path asks VerifyUntouchedThroughKernel). A buffer already touched
// from user mode (BufferPool tracks it) is verified in place everywhere.
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
#include <string>
#include <string_view>

namespace kvfs {

// Bytes the window holds, and so the most handed to one visit call.
inline constexpr size_t kKernelCopyWindow = 256 * 1024;

// Calls visit(offset, p, n) for consecutive ranges covering [0, len) of src, in order: p holds a copy of
// src[offset, offset + n) made by the kernel (or src + offset itself after a fallback). n <= the window and
// a multiple of grain (grain divides kKernelCopyWindow), except for the last range. Stops and returns
// false as soon as visit returns false; true when every range was visited.
bool VisitThroughKernel(const char* src, size_t len, size_t grain,
                        const std::function<bool(size_t offset, const char* p, size_t n)>& visit);

// Writes src[0, n) into dst through the kernel: process_vm_writev(2) on this process pins dst's pages and
// copies into them through the kernel's own mapping, so dst is never accessed from user mode (a loader
// that receives a value in pieces, e.g. an S3 GET's body from libcurl's buffer, into a never-touched
// ValueBuffer). src should be memory user mode touched already. Falls back to memcpy (counted in
// write_fallbacks) when the kernel refuses. Thread-safe.
void WriteThroughKernel(char* dst, const char* src, size_t n);

struct KernelCopyStats {
  uint64_t bytes = 0;      // bytes handed out as kernel copies
  uint64_t fallbacks = 0;  // calls (or their rest) handed out in place because the kernel refused
  uint64_t write_bytes = 0;      // WriteThroughKernel: bytes the kernel wrote
  uint64_t write_fallbacks = 0;  // WriteThroughKernel: calls (or their rest) done by memcpy
};
KernelCopyStats GetKernelCopyStats();

// Tests: when true, every call takes the fallback (in-place) path.
void SetKernelCopyDisabledForTest(bool disabled);

// ---- Which path verifies a value loaded into never-touched memory (per process) ----

// --verify-copy: auto (probe at mount), kernel, inplace.
enum class VerifyCopyMode : uint8_t { kAuto, kKernel, kInPlace };
// "auto" | "kernel" | "inplace" (also "in-place", "in_place"); false for anything else.
bool ParseVerifyCopyMode(std::string_view s, VerifyCopyMode* out);
const char* VerifyCopyModeName(VerifyCopyMode m);  // "auto" | "kernel" | "inplace"

// What ProbeVerifyCopy measured: seconds of CPU per GB (1e9 bytes) of hashing (XXH3, 64 KiB blocks, as
// the read path does) on each path; the best of `rounds` rounds of `bytes` each.
struct VerifyCopyProbe {
  double in_place_fresh_s_per_gb = 0;    // fresh MAP_POPULATE pages hashed in place (their first user touch)
  double in_place_touched_s_per_gb = 0;  // the same pages hashed again (touched: the steady-state cost)
  double kernel_copy_s_per_gb = 0;       // fresh pages hashed through the kernel copy (vmsplice + read)
  bool kernel_copy_works = false;        // the kernel copy ran without a fallback
  uint64_t bytes = 0;                    // per path and round
  int rounds = 0;
  double elapsed_ms = 0;                 // the whole probe, wall time
};
// Runs on the calling thread (its kernel-copy pipe and window are made if they were not); does not move
// GetKernelCopyStats. Two fresh mappings of `bytes` per round, unmapped before it returns.
VerifyCopyProbe ProbeVerifyCopy(size_t bytes = 512 * 1024, int rounds = 4);

// The decision (a pure function of the figures): the kernel copy when it works and costs less than
// kKernelCopyAdvantage of hashing fresh pages in place (a clear win: on a guest with shadow paging
// ~0.3 vs ~3 s/GB); in place otherwise (bare metal, EPT/NPT: ~0.13 in place vs ~0.3 s/GB through the
// copy), and when a figure is missing (0: below the clock's resolution).
inline constexpr double kKernelCopyAdvantage = 0.8;
bool ChooseVerifyCopy(const VerifyCopyProbe& p);

// The process's choice (default: kernel, mode kernel, not probed: what a program that never calls
// SetVerifyCopy gets, e.g. kvfs-fsck).
struct VerifyCopyChoice {
  VerifyCopyMode mode = VerifyCopyMode::kKernel;  // as asked
  bool kernel = true;                             // what never-touched buffers use
  bool probed = false;                            // probe holds figures (mode auto)
  VerifyCopyProbe probe;
};
// mode kernel / inplace: that path, no probe. mode auto: probes (on a short-lived thread of its own, so
// the probe's pipe and window are freed) and chooses. Returns the choice, also set process-wide.
VerifyCopyChoice ConfigureVerifyCopy(VerifyCopyMode mode);
void SetVerifyCopy(const VerifyCopyChoice& c);
VerifyCopyChoice GetVerifyCopy();
// The read path's question, cheap (one relaxed atomic load): verify a never-touched buffer through a
// kernel copy (true) or in place (false)?
bool VerifyUntouchedThroughKernel();
// One line for the log: "kernel copy (auto: in place 3.05 s/GB on fresh pages, 0.13 s/GB touched; kernel
// copy 0.31 s/GB; probe 4 x 512 KiB, 9.8 ms)".
std::string DescribeVerifyCopy(const VerifyCopyChoice& c);

}  // namespace kvfs
