// kvfs-bench's stack: the mounts one profile runs against, built fresh under --work for every profile and
// mode: src/ (the "NFS server's disk"), nfs/ (kvfs-nfsim over src/), and per mode kv/ (kvfs over
// nfs/kvfs-backing, index in idx/), ceil/ (a second kvfs-nfsim at 0 latency over nfs/ceiling-backing) or
// a private directory of the tmpfs; plus the process measurements the report uses (CPU seconds, peak RSS,
// load average) and Run, the fork+exec of kvfs, kvfs-nfsim and fusermount3. Called by RunMode
// (tools/bench_phases.cc) and main (tools/kvfs_bench.cc).
//
// Thread safety: a Stack belongs to one thread (RunMode's); NfsStats/KvfsStats may be called while the
// workload threads run. The free functions are reentrant.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tools/bench_config.h"

namespace kvfs::bench {

// fork + execvp of argv; waits and returns its exit code (128 when it did not exit). quiet: stdout to
// /dev/null.
int Run(const std::vector<std::string>& argv, bool quiet = false);
// True if `mp` is a mount point in /proc/self/mounts.
bool IsMounted(const std::string& mp);
// The value of xattr `name` of `path` ("" if none).
std::string GetXattr(const std::string& path, const char* name);
// A process's peak RSS (VmHWM in /proc/PID/status), KiB; 0 if unknown.
uint64_t VmHwmKb(pid_t pid);

// /proc/loadavg: 1, 5 and 15 minute load averages.
json LoadAvg();

// CPU seconds (user + system, all threads) a process has used so far; 0 if it is gone.
double ProcCpuS(pid_t pid);

// CPU seconds (user + system, all threads) this process has used so far.
double SelfCpuS();

// What runs between the workload and the export (tools/kvfs_bench.cc header). kS3Kvfs: kvfs mounted over
// s3://BUCKET/PREFIX/<run>/ (staging and index directories under the run's base directory, no nfsim);
// kS3Object: no mount at all, the profile's chunks are one object each (RunObjectMode).
enum class Mode { kDirect, kKvfs, kTmpfs, kCeiling, kS3Kvfs, kS3Object };

// The S3 request counters as JSON: {"requests": {"put": N, ..., "total": N}, "bytes_sent", "bytes_received"}
// (the shape of kvfs stats --json "s3"), from the bench's own client.
json S3ClientCounters(const Config& cfg);
// Removes every object under key_prefix (the cleanup after an s3 mode; its requests are not in any phase).
void DeleteS3Prefix(const Config& cfg, const std::string& key_prefix);

struct Stack {
  const Config& cfg;
  std::string base, src, nfs, kv, idx, ceil;
  bool kvfs_mode, tmpfs_mode, ceiling_mode;
  bool s3_mode = false, s3_object_mode = false;  // kS3Kvfs (kvfs_mode is also true) / kS3Object
  std::string staging, s3_key_prefix;  // s3 modes: kvfs's --s3-staging; the run's keys ("<prefix><run>/")
  json last_unmount_s3;                // s3-kvfs: the daemon's S3 counters at its last unmount (its log line)
  pid_t kvfs_pid = 0, ceiling_pid = 0;
  uint64_t hwm_kb = 0;  // the daemon's (kvfs or ceiling) VmHWM, max over its lifetimes

  Stack(const Config& c, const std::string& name, Mode m);
  // The FUSE daemon between the workload and nfsim: kvfs, the ceiling passthrough, or none (0).
  pid_t DaemonPid() const { return kvfs_mode ? kvfs_pid : ceiling_mode ? ceiling_pid : 0; }
  const char* DaemonName() const { return kvfs_mode ? "kvfs" : ceiling_mode ? "ceiling" : ""; }
  std::string Tool(const std::string& t) const { return cfg.build + "/tools/" + t; }
  void MountNfs();
  void MountKvfs();
  // The ceiling: kvfs-nfsim at 0 latency over the nfsim mount (same caching flags as nfsim's defaults;
  // --ceiling-arg adds to them).
  void MountCeiling();
  // A fresh stack: unmounts, removes the base directory, creates and mounts what the mode needs.
  void Up();
  // Unmounts what is mounted (kvfs first, then the ceiling, then nfsim); records the daemon's VmHWM.
  void Down();
  // Client restart: drops kvfs's memory and both mounts' page caches; the "server" keeps its cache.
  void Remount();
  // The directory the workload runs in.
  std::string Root() const {
    return kvfs_mode ? kv : ceiling_mode ? ceil : tmpfs_mode ? base + "/direct" : nfs + "/direct";
  }
  json NfsStats() const;   // nfsim's counters (user.nfsim.stats); {} in tmpfs mode
  json KvfsStats() const;  // kvfs's counters (user.kvfs.stats); null unless kvfs mode
  // S3 requests so far, S3ClientCounters' shape: s3-kvfs: the daemon's (kvfs stats "s3"); s3-object: the
  // bench's client; null otherwise.
  json S3Stats() const;
};

}  // namespace kvfs::bench
