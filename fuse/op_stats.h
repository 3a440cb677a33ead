// Per-operation counters of the FUSE layer: how many requests of each kind (LOOKUP, READ, WRITE, ...)
// the daemon handled and how long its handler took, as a latency histogram.
//
// Latency = time from the start of the low-level handler to its return (the reply is sent inside it;
// a deferred commit on the committer thread is not part of RELEASE's time). Buckets are fixed (seconds,
// upper bounds, Prometheus `le`): kLatencyBucketsSeconds, then +Inf.
//
// Thread safety: Observe is lock-free (relaxed atomics) and may be called from every FUSE worker at
// once; Snapshot may run concurrently with it (each figure is read once; a snapshot taken during
// requests may be off by the requests in flight, never torn within one counter).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvfs {

// Kinds of FUSE requests the daemon implements (the names are the `op` label values).
enum class FuseOp : uint8_t {
  kLookup, kForget, kGetattr, kSetattr, kReadlink, kMknod, kMkdir, kUnlink, kRmdir, kSymlink, kRename,
  kLink, kOpen, kRead, kWrite, kFlush, kRelease, kFsync, kOpendir, kReaddir, kReaddirplus, kReleasedir,
  kFsyncdir, kStatfs, kSetxattr, kGetxattr, kListxattr, kRemovexattr, kAccess, kCreate, kIoctl,
  kFallocate, kLseek,
  kCount  // not an operation
};
inline constexpr size_t kFuseOpCount = static_cast<size_t>(FuseOp::kCount);

// Lower-case name of an operation ("lookup", "readdirplus", ...).
const char* FuseOpName(FuseOp op);

// Upper bounds of the latency buckets, seconds (10 us .. 10 s); a last +Inf bucket is implied.
inline constexpr std::array<double, 19> kLatencyBucketsSeconds = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,   0.05,     0.1,     0.25,   0.5,     1.0,    2.5,   5.0,    10.0};
inline constexpr size_t kLatencyBuckets = kLatencyBucketsSeconds.size() + 1;  // + Inf

// One operation kind's figures at a moment.
struct FuseOpSnapshot {
  FuseOp op = FuseOp::kLookup;
  uint64_t count = 0;         // requests handled
  double sum_seconds = 0;     // total handler time
  // Cumulative bucket counts (Prometheus semantics): buckets[i] = requests with latency <=
  // kLatencyBucketsSeconds[i]; buckets.back() (+Inf) == count.
  std::array<uint64_t, kLatencyBuckets> buckets{};
};

class FuseOpStats {
 public:
  // Records one request of kind op that took `ns` nanoseconds.
  void Observe(FuseOp op, uint64_t ns);
  // Every operation kind (kFuseOpCount entries, in enum order), zero counts included.
  std::vector<FuseOpSnapshot> Snapshot() const;

 private:
  struct PerOp {
    std::array<std::atomic<uint64_t>, kLatencyBuckets> buckets{};  // NOT cumulative; count = their sum
    std::atomic<uint64_t> sum_ns{0};
  };
  std::array<PerOp, kFuseOpCount> ops_;
};

}  // namespace kvfs
