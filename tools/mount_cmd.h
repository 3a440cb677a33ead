// `kvfs mount`: checks the options, daemonises, mounts the FUSE session, opens the Store and serves it
// until unmount. Called by main (tools/kvfs_main.cc) with the parsed options; the refusals it checks
// first are in tools/mount_checks.h.
//
// mount daemonises by default. Because the Store starts threads (group commit, heartbeat, RocksDB)
// and fork(2) keeps only the calling thread, the process forks FIRST: the child mounts FUSE, then opens
// the Store (so a mount the kernel or fusermount3 refuses takes no node generation and creates no
// index; a Store that fails to open unmounts again, and requests that waited on the mount meanwhile
// fail with ENOTCONN or ECONNABORTED), then reports success or a one-line error through a pipe; the
// parent prints the error and exits with the child's code, so `kvfs mount` fails with a clear message
// and exit 2 for usage errors (missing backing dir, bad mountpoint, index dir in use, unknown flag, bad
// size).
//
// systemd (kvfs@.service, Type=notify): with NOTIFY_SOCKET set (sd_notify(3); a no-op otherwise) the
// daemon sends READY=1 once the FUSE session is mounted and about to serve, and STOPPING=1 when the
// session ends (unmount or SIGTERM), before the final flush (Store::Close).
//
// The daemon answers two virtual xattrs on the mount root (hidden from listxattr):
//   user.kvfs.pid    the daemon's pid (kvfs umount waits for it to exit after fusermount3 -u)
//   user.kvfs.stats  one JSON object of Store and FUSE counters (kvfs stats)
//
// Thread safety: RunMount runs once per process, on its main thread (it forks, sets the process's
// umask, logger, signal handlers and stdio).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvfs::cli {

struct MountArgs {
  std::string mountpoint, backing, node_id, index_dir, cache_size = "1GiB";
  std::string segment_size;  // empty: chosen from the export's size (AutoSegmentSize, RunMount)
  std::string staging_size = "1GiB";
  std::string max_file_size = "16GiB";
  std::string read_ahead = "4MiB";
  bool node_id_given = false;  // --node-id given (even as ''): then it must be a valid node id
  bool foreground = false, direct_io = false, buffered_segment_writes = false, force = false, splice = false;
  unsigned threads = 32;
  uint32_t group_commit_ms = 20;
  uint32_t sync_interval_ms = 1000;  // 0 = every group commit is durable
  uint32_t peer_poll_ms = 200;
  uint32_t peer_poll_max_ms = 0;  // 0: 4 x peer_poll_ms on a directory, kS3PeerPollMaxMs on S3
  bool peer_direct_io = false;
  uint32_t backing_deadline_ms = 0;
  std::vector<std::string> fuse_opts;
  std::string log_level = "info";
  std::string capacity, high_watermark, low_watermark;  // docs/design.md §6; empty = unlimited / none
  std::string metrics_listen;                           // HOST:PORT of the Prometheus listener; empty = off
  uint64_t checkpoint_entries = 1000000;                 // engine/checkpoint.h
  uint32_t checkpoint_interval_ms = 600000;
  uint32_t peers_publish_ms = 10000;
  std::string backing_mode;  // octal file mode of what kvfs creates on the export; empty = 0600 (0700 dirs)
  std::string log_file;      // empty: <index_dir>.log for a daemon, stderr in the foreground
  std::string log_max_size = "64MiB";
  std::string verify_copy = "auto";  // auto | kernel | inplace (blockstore/kernel_copy.h)
  std::string segment_size_note;  // how the segment size was chosen (RunMount logs it once the store is open)
  std::string segment_size_short;  // the same, short, for the line a daemonised mount prints on success
  bool quiet = false;              // --quiet: no line on success (the mount(8) helper form sets it)
  // An S3 backing (--backing s3://BUCKET/PREFIX, docs/s3.md): endpoint URL, region, path-style
  // addressing, a CA bundle, and the local staging directory (the active segment, sealed segments until
  // their upload, the journal until its publication, copies of the small files).
  std::string s3_endpoint, s3_region = "us-east-1", s3_ca, s3_staging;
  std::string link_claims = "on";  // on | off: link(2) claims the new name on the export (StoreOptions::link_claims)
  uint32_t seal_after_ms = 0;  // S3: seal the active segment once it held records this long (0 = when full)
  uint32_t s3_read_parts = 4;  // S3: ranged GETs in flight per large read (S3Config::read_parts)
  std::string s3_read_split_min = "4MiB";  // S3: the smallest read split into parts (S3Config::read_split_min)
  bool s3_path_style = false;
  std::string s3_url;  // set by RunMount: the s3:// URL (a.backing becomes the staging directory)
};

// Runs `kvfs mount`: the exit code of the command (0 mounted: the parent of a daemon returns at once, a
// foreground mount when it is unmounted). Usage errors exit(2) with one line on stderr.
int RunMount(MountArgs a);

}  // namespace kvfs::cli
