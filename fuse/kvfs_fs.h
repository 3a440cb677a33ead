// KvfsFs: the libfuse3 low-level file system over a Store (docs/design.md §4 operation semantics, §8 settings).
//
// What lives here: the in-memory inode table (only inodes the kernel knows, with lookup counts and
// FORGET, as in libfuse's example/passthrough_hp.cc), open handles, and staged *versions* of files.
// Everything persistent lives in the Store. The exact rules are written down in docs/semantics.md;
// in short:
//   - O_TRUNC / O_CREAT opens start a new version, other writable opens join the inode's primary
//     staged version (copy-on-write from the committed content when there is none: references to
//     the committed record, a 1 MiB chunk copied into memory on its first partial write; unchanged,
//     it writes and journals nothing).
//   - Staged bytes are bounded by FsOptions::staging_bytes: over it, the staged chunks of the version
//     holding the most memory spill to a provisional record (Store::WriteProvisionalRecord).
//   - A second O_TRUNC open of an inode whose primary version still has writers gets a *shadow*
//     version of its own (direct_io): both writers produce whole versions, never a mix.
//   - New content gets a new inode number (docs/design.md §3): a writable open or truncate(path) of a committed
//     file nobody writes moves it to a fresh number (Store::Renumber) and answers ESTALE, so the kernel
//     retries on the new number; the old number keeps the old content for its open handles. The retry
//     (same thread) never renumbers again: a new version starts on any number with no page-cache
//     handle open (readers of numbers a retry may find use direct_io), so open(2) never fails ESTALE.
//     A retry that comes back to the renumbered number (a /proc/self/fd or /dev/fd reopen follows the
//     link to the inode, not the name) moves the name back and writes in place, like a local fs: the
//     readers open on that number then see the new content (docs/semantics.md §1).
//   - Versions commit in the order their last writers were released: one released before another
//     version committed is superseded (never committed, never joined).
//   - FLUSH writes the version's bytes as one record (Store::WriteRecord) when they changed since the
//     last record; fsync and the last RELEASE of a version's writable handles commit it
//     (Store::CommitFile) under the inode's name at that moment. Unlinked versions are discarded.
//
// Thread safety: the FUSE callbacks run on many worker threads (fuse_session_loop_mt); all shared state
// is guarded by the table mutex (inode map, lookup counts) and per-inode / per-version mutexes, always
// taken in that order: table -> inode -> version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "blockstore/status.h"
#include "fuse/op_stats.h"
#include "engine/store.h"

namespace kvfs {

struct FsOptions {
  unsigned max_threads = 32;            // fuse_loop_cfg_set_max_threads (libfuse's default 10 is too few)
  bool clone_fd = true;                 // one /dev/fuse fd per worker thread
  bool splice = false;                  // FUSE_CAP_SPLICE_{READ,WRITE,MOVE}; off by default
  uint32_t max_write = 1u << 20;        // bytes per WRITE request
  // Read-ahead window of a buffered sequential read(2), bytes (`kvfs mount --read-ahead`): INIT's
  // max_readahead and, set at Mount, the mount's bdi read_ahead_kb (FuseSession::SetReadAhead), which the
  // kernel would otherwise keep at 128 KiB. 0 = the kernel's default (128 KiB READs).
  uint32_t read_ahead = 4u << 20;
  double entry_timeout_s = 3600;        // names change only through this daemon on one node
  double attr_timeout_s = 3600;         // committed files and directories
  double negative_timeout_s = 1;        // ENOENT answers (connectors mostly probe absent keys)
  bool direct_io_all = false;           // reply direct_io on every open (debugging / benchmarks)
  // The journal PUT of a version whose last writer was released waits this long (ms), so a rename
  // right after close(2) comes first: temp + rename journals one PUT under the final name. 0 = commit
  // in the RELEASE handler. Keep it well below the group-commit interval (durability adds it).
  uint32_t commit_delay_ms = 5;
  // TEST ONLY (kvfs mount reads KVFS_TEST_LOOKUP_DELAY_MS; not in --help): a LOOKUP that finds a staged
  // regular file waits this long (ms) between the index lookup and its reply, so a test can make the
  // file's deferred commit land inside that window (tests/integration/shared_names_test.py).
  uint32_t test_lookup_delay_ms = 0;
  // TEST ONLY (KVFS_TEST_READ_DELAY_MS): every READ handler waits this long (ms) before it answers, so a
  // test sees whether the requests of one read(2) are in the daemon at once (FsStats::reads_in_flight_max).
  uint32_t test_read_delay_ms = 0;
  // TEST ONLY (KVFS_TEST_AFTER_COMMIT_DELAY_MS): the last release of the daemon's first committed version
  // waits this long (ms) after its commit before the version leaves the inode's versions being written,
  // so a test can open (join) it in that window (tests/integration/open_hold_test.py test_writer_joins_committed_version).
  uint32_t test_after_commit_delay_ms = 0;
  // TEST ONLY (KVFS_TEST_UNLINK_MARK_DELAY_MS): unlink and rename wait this long (ms) between the Store
  // call and marking the inode that lost its name (open_hold_test OpenDuringUnlinkTest).
  uint32_t test_unlink_mark_delay_ms = 0;
  // TEST ONLY (KVFS_TEST_RELEASE_DELAY_MS): the RELEASE of a direct_io writer waits this long (ms) first,
  // as it may under load (the kernel sends RELEASE after close(2) returned; open_hold_test).
  uint32_t test_release_delay_ms = 0;
  // TEST ONLY (KVFS_TEST_NOTIFY_DELAY_MS): the notifier thread waits this long (ms) before each dentry
  // invalidation, so a peer's replacement is in the index while the kernel still has the old dentry
  // and inode unmarked (open_hold_test PeerRetryTest).
  uint32_t test_notify_delay_ms = 0;
  // TEST ONLY (KVFS_TEST_LOOKUP_REPLY_DELAY_MS, KVFS_TEST_LOOKUP_REPLY_DELAY_NAME): a LOOKUP of that name
  // that found it waits this long (ms) between the index lookup and its reply (before the inode's lookup
  // reference is taken), so a peer's change of the name or inode is applied and invalidated while the
  // older answer is in flight (lookup_cache_test.py CrossNodeTest, the racing-LOOKUP cases).
  uint32_t test_lookup_reply_delay_ms = 0;
  std::string test_lookup_reply_delay_name;
  // TEST ONLY (KVFS_TEST_LOOKUP_REPLY_DELAY_AFTER_REF=1): that wait comes after the lookup reference is
  // taken instead (the invalidation that misses meanwhile is then repeated: fuse.inval_retries).
  bool test_lookup_reply_delay_after_ref = false;
  // Staging memory budget, bytes: RAM held by the bytes of files being written (docs/design.md §4). A write
  // that would take it over the budget first spills the staged chunks of the version holding the most
  // RAM to a provisional record in the active segment (Store::WriteProvisionalRecord) and keeps only
  // their Locations; it never waits for memory. A write whose spill fails gets that error (ENOSPC when
  // the backing store is full) and changes nothing.
  uint64_t staging_bytes = 1ull << 30;
  // Largest file size, bytes (<= kMaxValueLength, a record's largest value). A write ending beyond it or
  // a truncate/fallocate to more is EFBIG. Holes cost nothing: growth is held as holes while staged (no
  // RAM) and committed as holes of the file's extent map (docs/format.md); a file committed as one
  // record (written whole and small enough) holds every byte, so this bounds what such a file costs.
  uint64_t max_file_size = 16ull << 30;
  // What this binary is (tools/build_info.h; kvfs mount sets them), shown by the stats: the version and
  // the git commit it was built from ("" when unknown).
  std::string version, git_commit;
};

// Counters of the FUSE layer (exported through the user.kvfs.stats virtual xattr with Store stats).
struct FsStats {
  uint64_t known_inodes = 0, open_handles = 0, staged_versions = 0;
  uint64_t staged_bytes = 0;          // RAM of staged versions now (what the budget counts)
  uint64_t staging_budget = 0;        // FsOptions::staging_bytes
  uint64_t read_ahead = 0;            // the mount's read-ahead window in effect, bytes (ApplyReadAhead)
  uint64_t spilled_bytes = 0;         // provisional records of versions still staged, bytes now
  uint64_t spills = 0, spilled_bytes_total = 0, spill_errors = 0;  // since mount
  uint64_t whole_record_commits = 0;  // flushes that reused one existing record (no second copy)
  uint64_t extent_flushes = 0;  // flushes that appended only the dirty pages (a version as extents)
  // Extent flushes over the fragmentation bound that also copied cold extents (design.md §13), and
  // the bytes they copied besides the dirty pages (zero-filled gaps included).
  uint64_t compaction_flushes = 0, compaction_copied_bytes = 0;
  // Closes that sealed their few dirty pages for the deferred commit instead of appending a record, and
  // the records those deferred commits appended (each the pages of one or more sealed closes).
  uint64_t sealed_closes = 0, sealed_flushes = 0;
  uint64_t flushes_deferred = 0;      // closes that left the record to another writer still writing
  uint64_t closes_committed_open = 0;  // commits of a closed version other writers still have open
  uint64_t closes_superseded_late = 0;  // versions released after a later close had committed: dropped
  uint64_t commits_owed = 0;  // commits that left their version to a joined writer's queued commit
  uint64_t streamed_commits = 0;  // flushes of partly spilled versions, written in 4 MiB pieces
  uint64_t shadow_versions_created = 0, versions_committed = 0, versions_discarded = 0;
  uint64_t flush_records = 0, flush_errors = 0, commit_errors = 0;
  uint64_t failed_publishes = 0;  // versions whose close/fsync/commit failed: their names were restored
  uint64_t bytes_read = 0, bytes_written = 0;  // READ reply bytes, WRITE request bytes
  uint64_t reads_in_flight_max = 0;  // most READ requests handled at once since mount
  uint64_t inodes_renumbered = 0;  // committed files moved to a new inode number for a new version
  uint64_t fresh_forgotten = 0;    // renumbered numbers whose readers use the page cache again (retry over)
  uint64_t hidden_reset = 0;       // inodes whose hidden versions are over: readers use the page cache again
  // Kernel cache invalidations (notify_inval_entry / notify_inval_inode calls, retries included), those
  // the kernel answered ENOENT (it held no such dentry / inode), inval_inode calls repeated because a
  // reply holding a lookup reference was in flight, and LOOKUP / READDIRPLUS entries answered with
  // timeout 0 because an invalidation of their name or inode missed while they were computed.
  uint64_t inval_calls = 0, inval_missed = 0, inval_retries = 0, lookups_uncached = 0;
};

// Everything `kvfs stats` and the Prometheus exposition show, taken at one moment (KvfsFs::Snapshot);
// rendered by fuse/stats_render.h. Counters are totals since the mount, gauges are current values.
struct StatsSnapshot {
  int64_t pid = 0;  // the daemon's
  std::string version, git_commit;  // FsOptions::version, git_commit
  StoreStats store;
  FsStats fs;
  std::vector<FuseOpSnapshot> fuse_ops;  // every operation kind, in FuseOp order
};

class KvfsFs {
 public:
  // `store` must outlive this object. Does not mount. `store` may be null: then AttachStore gives it
  // before Loop (kvfs mount mounts FUSE first and opens the store after, so a mount that fails touches
  // neither the node directory nor the index; until the loop runs, the kernel holds requests to the
  // mount: they wait, they do not see the directory underneath).
  KvfsFs(Store* store, FsOptions opts);
  // The Store of an object constructed without one: once, before Loop, from the mounting thread.
  void AttachStore(Store* store);
  ~KvfsFs();
  KvfsFs(const KvfsFs&) = delete;
  KvfsFs& operator=(const KvfsFs&) = delete;

  // Creates the FUSE session and mounts it at `mountpoint`. fuse_opts are "-o" option strings
  // (e.g. "allow_other,default_permissions"); fsname/subtype are added here. Errors: InvalidArgument
  // for bad options, IOError when the mount fails.
  Status Mount(const std::string& mountpoint, const std::vector<std::string>& fuse_opts,
               const std::string& fsname);
  // After Mount, before Loop (INIT may only lower it): FsOptions::read_ahead into the mount's bdi
  // (FuseSession::SetReadAhead), so a buffered sequential read(2) reaches the daemon as 1 MiB READs, not
  // 128 KiB ones (docs/design.md §8). OK when read_ahead is 0; IOError (nothing changed) without root,
  // with a read-only /sys, or when another mount on the same path raced this one.
  Status ApplyReadAhead();
  // Installs SIGINT/SIGTERM/SIGHUP handlers that end the loop (fuse_set_signal_handlers).
  Status InstallSignalHandlers();
  // Runs the multi-threaded loop until the file system is unmounted or a signal arrives. Returns 0 on a
  // clean exit, 1 without a Store or a session. Unmounts (if still mounted) before returning.
  int Loop();
  // Ends the loop from another thread.
  void Exit();

  // The Store's and this layer's figures now. Thread-safe; cheap (one scan of the index's segment list).
  StatsSnapshot Snapshot();
  // StatsToJson(Snapshot()): what the user.kvfs.stats xattr answers and `kvfs stats` prints.
  std::string StatsJson();
  FsStats GetFsStats();

  struct Impl;  // fuse/kvfs_fs_impl.h; public only so the FUSE callbacks (fuse/ops_*.cc) can name it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfs
