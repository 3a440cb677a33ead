#include "fuse/op_stats.h"

#include <algorithm>

namespace kvfs {

const char* FuseOpName(FuseOp op) {
  static const char* const kNames[kFuseOpCount] = {
      "lookup",  "forget",     "getattr",   "setattr",   "readlink",    "mknod",    "mkdir",
      "unlink",  "rmdir",      "symlink",   "rename",    "link",        "open",     "read",
      "write",   "flush",      "release",   "fsync",     "opendir",     "readdir",  "readdirplus",
      "releasedir", "fsyncdir", "statfs",   "setxattr",  "getxattr",    "listxattr", "removexattr",
      "access",  "create",     "ioctl",     "fallocate", "lseek"};
  const size_t i = static_cast<size_t>(op);
  return i < kFuseOpCount ? kNames[i] : "unknown";
}

void FuseOpStats::Observe(FuseOp op, uint64_t ns) {
  const size_t i = static_cast<size_t>(op);
  if (i >= kFuseOpCount) return;
  const double s = static_cast<double>(ns) / 1e9;
  // First bucket whose upper bound is >= s (Prometheus buckets are "le"); the +Inf bucket otherwise.
  const size_t b = static_cast<size_t>(
      std::lower_bound(kLatencyBucketsSeconds.begin(), kLatencyBucketsSeconds.end(), s) -
      kLatencyBucketsSeconds.begin());
  ops_[i].buckets[b].fetch_add(1, std::memory_order_relaxed);
  ops_[i].sum_ns.fetch_add(ns, std::memory_order_relaxed);
}

std::vector<FuseOpSnapshot> FuseOpStats::Snapshot() const {
  std::vector<FuseOpSnapshot> out(kFuseOpCount);
  for (size_t i = 0; i < kFuseOpCount; ++i) {
    FuseOpSnapshot& o = out[i];
    o.op = static_cast<FuseOp>(i);
    uint64_t cum = 0;
    for (size_t b = 0; b < kLatencyBuckets; ++b) {
      cum += ops_[i].buckets[b].load(std::memory_order_relaxed);
      o.buckets[b] = cum;
    }
    o.count = cum;
    o.sum_seconds = static_cast<double>(ops_[i].sum_ns.load(std::memory_order_relaxed)) / 1e9;
  }
  return out;
}

}  // namespace kvfs
