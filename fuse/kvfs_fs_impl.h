// Private to fuse/: the internals of KvfsFs (fuse/kvfs_fs.h), shared by the files that implement them.
//
// What it holds: the in-memory model of the FUSE layer (the model itself is described in kvfs_fs.h and
// docs/semantics.md):
//   - Inode: one inode the kernel knows (lookup counts, FORGET) or that an open handle still uses;
//   - Version: a staged (copy-on-write) version of a file's content, with its RAM/spill accounting;
//   - Handle: one open file or directory (fi->fh);
//   - Staging: the staging memory budget and the registry of live versions spills pick victims from;
//   - KvfsFs::Impl: the inode table, the renumber/retry bookkeeping, the notifier and committer
//     threads, counters, and the member functions the FUSE callbacks call;
//   - the FUSE callbacks (Op*), one file per family, and the helpers they share.
// Where each part is defined:
//   fuse/inode_table.cc   inode table and lookup counts, renumber/retry tracking, kernel notifications,
//                         attributes and entry replies
//   fuse/versions.cc      starting and joining versions (AcquireWritable), renumbering, truncate
//   fuse/staging.cc       the staging budget: RAM accounting, spills of versions to provisional records
//   fuse/commit.cc        flush/commit/release of versions and the deferred-commit thread
//   fuse/ops_namespace.cc lookup/forget/mkdir/mknod/create/unlink/rmdir/symlink/rename/link/readlink
//   fuse/ops_attr.cc      getattr/setattr/access/statfs
//   fuse/ops_file.cc      open/read/write/flush/release/fsync/fallocate/lseek/ioctl
//   fuse/ops_dir.cc       opendir/readdir(plus)/releasedir/fsyncdir
//   fuse/ops_xattr.cc     set/get/list/removexattr (and the virtual stats/pid xattrs of the root)
//   fuse/kvfs_fs.cc       session set-up (init, mount, loop), the op table, KvfsFs's public methods
// Who calls it: only the files above (libfuse calls the Op* callbacks through the table in kvfs_fs.cc).
//
// Thread safety: the callbacks run on many worker threads (fuse_session_loop_mt). Locks, always taken in
// this order: Version::io_mu (record writes and commits of one version) -> Inode::commit_mu ->
// Inode::mu (versions of the inode, flags) -> Version::mu (bytes, attr; shared for readers).
// Impl::table_mu (inode map, Inode::nlookup/open_handles) comes before Inode::mu (MaybeEraseLocked,
// stats) and is never taken while an inode's or version's lock is held. Leaf locks: Impl::fresh_mu,
// retry_mu, nq_mu, cq_mu, miss_mu (taken under table_mu by the notifier), Staging::mu. The comments on
// each field name the mutex that guards it.
//
// Invariants: an Inode stays in the table while the kernel holds a lookup reference, a handle is open,
// or a version is still being written or committed (Inode::writing non-empty); the root is never
// erased. Inode::writing holds exactly the versions with writers > 0 or a commit pending. Staging
// counts every byte of RAM chunks of live versions (ram_bytes) and of their provisional records
// (spilled_bytes). A superseded version never commits and is never joined.
#pragma once

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fs.h>  // RENAME_NOREPLACE, RENAME_EXCHANGE
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "blockstore/log.h"
#include "fuse/chunk_buffer.h"
#include "fuse/kvfs_fs.h"
#include "fuse/session.h"
#include "fuse/stats_render.h"

namespace kvfs {
inline int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
inline int64_t TsNs(const timespec& ts) { return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec; }
inline timespec NsTs(int64_t ns) {
  timespec ts;
  ts.tv_sec = ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  if (ts.tv_nsec < 0) {
    ts.tv_nsec += 1000000000;
    ts.tv_sec -= 1;
  }
  return ts;
}

// Where an error is reported: xattr calls answer ENODATA for a missing attribute, not ENOENT; an
// inode the kernel holds but the index no longer has (replaced or unlinked, e.g. by a peer) is ESTALE,
// so the kernel looks the name up again (docs/design.md §4 "A dead inode answers ESTALE").
enum class ErrCtx { kDefault, kXattr, kInode };

// THE one place where a Status becomes an errno for a FUSE reply.
inline int ToErrno(const Status& s, ErrCtx ctx = ErrCtx::kDefault) {
  if (s.ok()) return 0;
  if (ctx == ErrCtx::kXattr && s.IsNotFound()) return ENODATA;
  if (ctx == ErrCtx::kInode && s.IsNotFound()) return ESTALE;
  int e = s.ToErrno();
  return e > 0 ? e : EIO;
}

// ext: the committed content's extent map, if it is one (st_blocks counts its data bytes, holes excluded).
inline void FillStat(const Attr& a, struct stat* st, const ExtentMapRef& ext = {}) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = a.ino;
  st->st_mode = a.mode;
  st->st_nlink = a.nlink;
  st->st_rdev = static_cast<dev_t>(a.rdev);
  st->st_uid = a.uid;
  st->st_gid = a.gid;
  st->st_size = static_cast<off_t>(a.size);
  st->st_blksize = 4096;
  st->st_blocks = static_cast<blkcnt_t>(((ext ? ext->DataBytes() : a.size) + 511) / 512);
  st->st_atim = NsTs(a.atime_ns);
  st->st_mtim = NsTs(a.mtime_ns);
  st->st_ctim = NsTs(a.ctime_ns);
}

struct Version;

// Staging memory: what the budget (FsOptions::staging_bytes) counts, the spill counters, and a registry
// of the live versions from which spills pick their victims.
struct Staging {
  std::atomic<int64_t> ram_bytes{0};      // RAM chunks of all staged versions (ChunkBuffer::capacity)
  std::atomic<int64_t> spilled_bytes{0};  // provisional records written for versions still staged
  std::atomic<uint64_t> spills{0}, spilled_total{0}, spill_errors{0}, whole_record_commits{0},
      extent_flushes{0};
  std::atomic<uint64_t> compaction_flushes{0}, compaction_copied_bytes{0};  // design.md §13 compaction copies
  std::atomic<uint64_t> sealed_closes{0}, sealed_flushes{0};  // design.md §13 sealed closes
  // The copy budget of the extent-count compaction joins, per inode number (design.md §13,
  // ExtentMap::CompactionRanges): each extent FLUSH adds 1/(kMinLiveFraction - 1) of the dirty bytes it
  // appends, its compaction copies spend it (KvfsFs::Impl::FlushLocked). Here, not in the Inode: a
  // writable open of a committed file moves it to a new number (Store::Renumber; the budget moves with
  // it, MoveCompactionCredit) and the kernel forgets the old Inode. In memory only; at most 65,536
  // numbers (then all restart at 0: fewer joins, never more).
  std::mutex credit_mu;
  std::unordered_map<uint64_t, uint64_t> compaction_credit;  // guarded by credit_mu
  std::atomic<uint64_t> flushes_deferred{0};  // FLUSHes that left the record to another writer's (OpFlush)
  std::atomic<uint64_t> streamed_commits{0};  // records written by streaming a partly spilled version
  Store* store = nullptr;  // ReleaseRecordPin of a version's records when it is gone
  std::mutex mu;  // guards versions
  std::unordered_map<const Version*, std::weak_ptr<Version>> versions;
};

// A staged version of a file's content (docs/design.md §4 "Versions").
struct Version {
  Version(uint64_t s, uint64_t i, bool hid, bool dio, Staging* st)
      : seq(s), ino(i), hidden(hid), direct(dio), staging(st) {}
  ~Version() {
    staging->ram_bytes.fetch_sub(static_cast<int64_t>(data.capacity()));
    staging->spilled_bytes.fetch_sub(static_cast<int64_t>(spilled));
    // Nothing references its spills and its record any more: their segments may be evicted or
    // reclaimed (a committed record's pin was released by its CommitFile already; idempotent).
    for (const Location& l : spills) staging->store->ReleaseRecordPin(l);
    staging->store->ReleaseRecordPin(record);
    staging->store->UnpinRecord(base);
    for (const Location& l : bases) staging->store->UnpinRecord(l);
    staging->store->UnpinRecord(held);
    std::lock_guard<std::mutex> g(staging->mu);
    staging->versions.erase(this);
  }

  const uint64_t seq;   // creation order among this daemon's versions
  const uint64_t ino;   // the inode it belongs to (the tag of its spill records)
  // hidden: not shown to stat/readers/rename until it commits (truncating rewrites of committed files
  // and concurrent O_TRUNC writers). direct: its handles use direct_io, so its bytes never enter the
  // inode's page cache, which another version owns (the concurrent O_TRUNC "shadow" case).
  const bool hidden;
  const bool direct;
  Staging* const staging;

  // mu guards data, attr, gen and spilled. Writers and spills take it exclusively, readers and flush
  // shared.
  std::shared_mutex mu;
  ChunkBuffer data;   // RAM chunks + references (copy-on-write base, spilled chunks)
  uint64_t spilled = 0;             // bytes of the provisional records written for this version
  // Its provisional records: each pins its segment against eviction (Store::ReleaseRecordPin) until
  // the version is destroyed, so its close never finds a spill evicted.
  std::vector<Location> spills;
  // The copy-on-write base (ChunkBuffer::SetBacking of a committed record), held (Store::PinRecord)
  // until the version is destroyed, so its not-yet-copied chunks stay readable after the file is
  // unlinked or replaced. Empty when not held (no base, or its segment was already dropped: reads of
  // its chunks then answer ENOENT).
  Location base;
  void HoldBase(const Location& l) {
    if (staging->store->PinRecord(l).ok()) base = l;
  }
  // The copy-on-write base is a committed extent map (ChunkBuffer::SetBacking(map)): every record of
  // it held the same way (bases).
  std::vector<Location> bases;
  void HoldBases(const ExtentMap& m) {
    for (const Location& l : m.Records()) {
      if (staging->store->PinRecord(l).ok()) bases.push_back(l);
    }
  }
  std::atomic<uint64_t> ram{0};     // data.capacity() as of the last change (victim choice, no lock)
  std::atomic<bool> spilling{false};  // a thread is spilling it (others pick another victim)
  Attr attr;          // mode, uid, gid, times; attr.size is ignored (data.size() is the size)
  uint64_t gen = 1;   // bumped on every change of the bytes or the size
  uint64_t attr_gen = 1;  // bumped on every change of attr (chmod, utimens...) after creation

  // io_mu serializes record writes and commits of this version; guards the fields below.
  std::mutex io_mu;
  bool has_record = false;
  uint64_t record_gen = 0;
  Location record;
  // The extent form (docs/design.md §13): the version as an extent map when it is not one record
  // (record is then empty). The records its FLUSHes append (only the dirty pages) join `spills`: the
  // chunks reference them after the FLUSH (ChunkBuffer::Rebase), held until the version ends.
  ExtentMapRef record_ext;
  uint64_t committed_gen = 0;  // gen of the last successful CommitFile (0 = never)
  uint64_t committed_attr_gen = 0;
  // Small closes (docs/design.md §13 "Sealed closes"): a close whose dirty pages are few seals them
  // (ChunkBuffer::Seal) instead of appending them; the deferred commit appends the pages of every close
  // sealed meanwhile as ONE record (Impl::FlushSealedLocked). sealed_gen: gen at the last seal (valid
  // while data.sealed()). closes: the closes (FLUSHes of close(2)) of this version that recorded or
  // sealed its bytes (written under io_mu, read by ReleaseWritable without it); sealed_closes: closes at
  // the last seal; flushed_closes: the closes whose state `record` holds; committed_closes: the closes
  // whose state the last commit published (a deferred commit of an earlier close has nothing to do).
  uint64_t sealed_gen = 0;
  std::atomic<uint64_t> closes{0};
  uint64_t sealed_closes = 0;
  uint64_t flushed_closes = 0;
  uint64_t committed_closes = 0;
  // A FLUSH (close) or fsync of it failed: it is never published, every later flush/commit of it fails
  // with this status, and its last release removes what it made visible (Impl::Unpublish).
  Status failed = Status::OK();
  bool unpublished = false;  // Impl::Unpublish ran for it (guarded by the owning Inode's mu)

  // Writable handles with WRITEs since their last FLUSH (Handle::dirty). A FLUSH while another handle
  // still has some writes no record (that handle's FLUSH will, with every writer's bytes): N ranks
  // filling one file at their own offsets (vLLM multi-node TP) write it once, not N times.
  std::atomic<int> dirty_handles{0};

  // Guarded by the owning Inode's mu.
  int writers = 0;
  // Read-only handles reading this staged version (opened while it was being written or while its
  // commit was pending). They go on reading it after its commit, when its bytes may be the committed
  // record (a spill of a closed version just references it): that record is held for them.
  int readers = 0;
  // The record of its last successful commit (empty: never committed, or committed empty).
  Location committed_loc;
  // committed_loc held (Store::PinRecord) while readers or writers use the version after its commit
  // (docs/semantics.md §6.10), released when the last of them is gone or with the version.
  Location held;
  // The latest close of the version that changed it (Impl::next_order; 0 = none yet): taken at a FLUSH
  // (close(2) of a writer handle, PromoteAtClose) or at the RELEASE of a handle that wrote after its
  // last FLUSH, when `gen` moved since the previous one (last_close_gen; Impl::NoteCloseLocked).
  uint64_t last_close = 0;
  uint64_t last_close_gen = 0;
  // Impl::next_order when the version was created (its content then: a copy of the file, or empty for
  // an O_TRUNC open). Its order while no close changed it (Impl::ChangeOrderLocked). Set once by
  // NewVersion before the version is shared.
  uint64_t created_order = 0;
  // Set when its last writer is released: its last_close (the moment of that close(2)), or a new order
  // if it has none. A commit counts from this moment, not from the RELEASE (which the kernel sends after
  // close(2) returned, in any order under load) nor from when the deferred commit runs: the order of
  // close(2) decides which version wins.
  uint64_t close_order = 0;
  // A version released before another version of the inode committed: it never commits (it would put
  // older content over newer), no open joins it, stat ignores it. Its deferred commit just drops it.
  bool superseded = false;
};

// One inode the kernel knows (or that an open handle still uses).
struct Inode {
  Inode(uint64_t i, uint32_t t) : ino(i), type(t) {}
  const uint64_t ino;
  const uint32_t type;  // S_IFMT bits

  // Guarded by Impl::table_mu.
  uint64_t nlookup = 0;
  uint64_t open_handles = 0;

  // Serializes the commits of this inode's versions (taken after Version::io_mu, before mu), so the
  // superseded check and CommitFile are one step.
  std::mutex commit_mu;
  std::mutex mu;  // guards the fields below
  bool unlinked = false;             // its name was unlinked or replaced: staged versions are discarded
  std::shared_ptr<Version> primary;  // the staged version that opens join and stat shows
  std::vector<std::shared_ptr<Version>> writing;  // versions with writers > 0 (primary + hidden ones)
  uint64_t committed_seq = 0;        // seq of the newest committed version
  // Version::close_order (or commit order) of the newest committed content, and the seq of the version
  // that committed it: another version whose last close came before it never commits (Impl::Commit
  // marks it superseded); the version itself commits again (a chmod after its commit, its sealed pages).
  uint64_t committed_order = 0;
  uint64_t committed_order_seq = 0;
  bool contended = false;            // a hidden version is being written: page cache may mix versions
  // Open handles of this inode that use the page cache (not direct_io): while any is open, no new
  // version may start on this number (its O_TRUNC would reset their i_size, its writes their pages).
  uint64_t pc_handles = 0;
  // Writable direct_io handles of the visible version (primary): while any is open, readers of this
  // inode use direct_io too (the writer's bytes bypass the page cache they would read).
  uint64_t direct_writers = 0;
  // Of those, the handles whose last FLUSH came after their last WRITE (Handle::dw_quiet): their
  // close(2) returned and their RELEASE is on its way. A reader opening while every direct writer is
  // such waits for their RELEASEs (`released`, up to kReleaseWait) instead of taking direct_io, where
  // MAP_SHARED fails with ENODEV (write, close, then mmap: the kernel sends RELEASE after close(2)
  // returned, sometimes after the next OPEN).
  uint64_t quiet_direct_writers = 0;
  std::condition_variable released;  // notified (under no lock) when a direct writer is released
  bool renumbered = false;           // Store::Renumber moved its name to a new number (unlinked too)
  uint64_t lost_parent = 0;          // the name the kernel last looked it up by, or that it lost
  std::string lost_name;             // (renumbered, unlinked, replaced): where an ESTALE'd open retries
  uint64_t renumbered_to = 0;        // the number Renumber gave its name (0: none)
  // Bumped when a version starts on this number in place under open page-cache readers (a reopen via
  // /proc/self/fd: Impl::UndoRenumber): readers opened before then read the current content, as on a
  // local fs, not the content pinned at their open. Read without in->mu.
  std::atomic<uint64_t> rewrites{0};
  // Cached pages may belong to a hidden version: readers use direct_io, no keep_cache. Cleared by a
  // read-only open once no version is being written and no page-cache handle is open (OpOpen).
  bool hidden_ever = false;
  Attr last_attr;                    // last attributes seen (answers fstat of an unlinked file)
  Location last_loc;                 // last committed location seen (opens of a just-replaced file)
  ExtentMapRef last_ext;             // its extent map instead, for an extent file (last_loc empty)
  bool last_committed = false;
  // The kernel was given this inode's staged attributes with a positive attr_timeout
  // (Impl::StagedCacheable): a commit whose attributes the kernel cannot derive invalidates them.
  bool staged_cached = false;
  // A peer's PUT took this staged file's name (the index detached it): its commit takes the name back,
  // and the kernel's dentry of the name (the peer's inode) must be dropped then.
  bool detached = false;
};

struct Handle {
  std::shared_ptr<Inode> inode;
  std::shared_ptr<Version> version;  // writable handles; readers of a staged version
  bool writable = false;
  bool append = false;  // O_APPEND
  Location loc;      // readers of committed content: held (Store::PinRecord) from open to RELEASE
  ExtentMapRef ext;  // readers of an extent file's committed content: its map (loc empty), every
                     // record of it held from open to RELEASE
  bool held = false; // loc (or every record of ext) is pinned by this handle
  uint64_t size = 0;
  bool pc = false;   // counted in Inode::pc_handles (opened without direct_io)
  bool dw = false;   // counted in Inode::direct_writers
  std::atomic<bool> dw_quiet{false};  // counted in Inode::quiet_direct_writers (set under Inode::mu)
  uint64_t rewrites = 0;  // Inode::rewrites at open (readers of committed content)
  std::atomic<bool> dirty{false};  // WRITEs since this handle's last FLUSH (counted in Version::dirty_handles)
  std::atomic<bool> wrote{false};  // any WRITE through this handle (its release commits the version, below)
  // Version::closes after this handle's last FLUSH, when that FLUSH recorded or sealed the version's
  // bytes itself (0: it left them to another writer's FLUSH, or none yet). Its release then commits
  // the state of that close (or a later one), not bytes written since by writers that opened after it
  // (the kernel sends RELEASE after close(2) returned, sometimes after the next OPEN).
  std::atomic<uint64_t> flushed_close{0};
};

inline Handle* H(fuse_file_info* fi) { return reinterpret_cast<Handle*>(fi->fh); }

struct KvfsFs::Impl {
  Impl(Store* s, FsOptions o) : store(s), opts(o) { staging.store = s; }

  Store* store;
  FsOptions opts;
  // The read-ahead window ApplyReadAhead set on the mount (bytes); the kernel's 128 KiB until then or when
  // it could not (stats: config.read_ahead_bytes).
  std::atomic<uint32_t> read_ahead_applied{128u << 10};
  KvfsFs* owner = nullptr;  // for StatsJson
  FuseSession session;  // created and mounted by KvfsFs::Mount; the notifier reads session.get()
  // Declared before every member that holds Versions (table, deferred commits, ...): members are
  // destroyed in reverse order, and ~Version unregisters from staging.
  Staging staging;

  // Unlinks and renames in flight on this node, from before their Store call until the inode that lost
  // its name is marked (MarkUnlinked): a read-only OPEN whose inode is gone from the index waits for the
  // ones that started before it looked (WaitUnlinksBefore) and only then looks at Inode::unlinked, so a
  // name removed on this node just before the OPEN is always seen as such (the doomed inode opens) and
  // never answered ESTALE. Tickets, not a lock: later unlinks never make the OPEN wait. unlink_mu is a
  // leaf.
  std::mutex unlink_mu;
  std::condition_variable unlink_cv;
  uint64_t unlink_next = 1;           // the next ticket (unlink_mu)
  std::set<uint64_t> unlink_inflight;  // tickets of unlinks/renames not marked yet (unlink_mu)
  uint64_t BeginUnlink() {
    std::lock_guard<std::mutex> g(unlink_mu);
    unlink_inflight.insert(unlink_next);
    return unlink_next++;
  }
  void EndUnlink(uint64_t ticket) {
    {
      std::lock_guard<std::mutex> g(unlink_mu);
      unlink_inflight.erase(ticket);
    }
    unlink_cv.notify_all();
  }
  // Waits until every unlink/rename begun before this call has marked its inode.
  void WaitUnlinksBefore() {
    std::unique_lock<std::mutex> g(unlink_mu);
    const uint64_t limit = unlink_next;
    unlink_cv.wait(g, [&] { return unlink_inflight.empty() || *unlink_inflight.begin() >= limit; });
  }
  std::mutex table_mu;
  std::unordered_map<uint64_t, std::shared_ptr<Inode>> table;
  std::atomic<uint64_t> next_seq{1};
  std::atomic<uint64_t> next_order{1};  // Version::close_order
  // Reads referenced chunks of staged versions (copy-on-write bases, spills): Store::Read, so every
  // byte is verified against its block checksum.
  ChunkBuffer::Fetch fetch = [this](const Location& l, uint64_t off, size_t len, char* out) -> Status {
    size_t got = 0;
    Status s = store->Read(l, off, len, out, &got);
    if (s.ok() && got != len) return Status::Corruption("short read of a staged extent");
    return s;
  };
  // The same without loading values into the LRU: a streamed commit reads each spilled byte once.
  ChunkBuffer::Fetch fetch_uncached = [this](const Location& l, uint64_t off, size_t len, char* out) -> Status {
    size_t got = 0;
    Status s = store->ReadUncached(l, off, len, out, &got);
    if (s.ok() && got != len) return Status::Corruption("short read of a staged extent");
    return s;
  };
  std::atomic<uint64_t> open_handles{0}, staged_versions{0}, shadows{0}, committed{0}, discarded{0},
      flush_records{0}, flush_errors{0}, commit_errors{0}, renumbered{0},
      failed_publishes{0}, closes_committed_open{0}, closes_superseded_late{0}, commits_owed{0}, fresh_forgotten{0},
      hidden_reset{0};
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0};
  // READ handlers running now, and the most there ever were at once (ReadInFlight): shows whether the
  // requests of one O_DIRECT read(2) overlap (tests/integration/fs_ops_test.py).
  std::atomic<uint32_t> reads_in_flight{0}, reads_in_flight_max{0};
  FuseOpStats op_stats;  // requests and handler latency by operation (Timed in MakeOps)

  // Inode numbers that Renumber handed out (the number a retried open finds). Read-only opens of them
  // use direct_io, so such a number never has page-cache handles: a retried writable open can always
  // start its version there (never a second ESTALE). `virgin` until the first writable open starts a
  // version on it without renumbering again. Not tied to the inode table: the kernel's retry itself
  // may FORGET the new number (fuse_dentry_revalidate) before it looks it up again. Bounded: the oldest
  // numbers are dropped first (kMaxFresh renumbers later; their readers use the page cache again).
  // A number stops being fresh once its retry is over: a read-only open finds it with no version
  // being written, no retry pending for its name, and no retry started on it for kFreshQuietNs
  // (ForgetUsedFresh), so readers of a file rewritten in place use the page cache (and can mmap it
  // MAP_SHARED) again. The quiet time covers a writer whose LOOKUP found the number the name had
  // before (a renumber in between) and whose OPEN is answered ESTALE there: its retry finds this
  // number, and must find it free of page-cache handles; that writer is not known to be retrying
  // until its OPEN arrives.
  // fresh_mu is a leaf lock, also taken under Inode::mu.
  static constexpr size_t kMaxFresh = 65536;
  static constexpr int64_t kFreshQuietNs = 2'000'000'000;
  enum class Fresh : uint8_t { kVirgin, kUsed, kForgotten };
  struct FreshState {
    Fresh state;
    int64_t since_ns;  // steady clock: when it was added or its virgin taken
  };
  std::mutex fresh_mu;
  std::unordered_map<uint64_t, FreshState> fresh;  // ino -> state; fresh_order lists every key once
  std::deque<uint64_t> fresh_order;
  void AddFresh(uint64_t ino, bool virgin = true);
  bool IsFresh(uint64_t ino);
  bool TakeVirgin(uint64_t ino);
  // Forgets ino if it is fresh, no longer virgin and quiet for kFreshQuietNs; returns true if it did.
  bool ForgetUsedFresh(uint64_t ino);

  // Threads whose open (or truncate(path)) we answered ESTALE, by the request's pid (the calling
  // thread's id), with the name a renumber moved when we know it. The kernel retries such a call once,
  // after a fresh LOOKUP; the thread's next open is that retry, and it must not get ESTALE again (ext4
  // never answers ESTALE): it starts its version on the number it finds when no page-cache handle is
  // open there (docs/semantics.md §1 "Inode numbers"). While a retry on a name is pending, whatever
  // number the name gets meanwhile (a rename over it) is kept free of page-cache readers (AddFresh),
  // and other writers do not renumber it (the retry's OPEN may follow its LOOKUP at any time). A stale
  // entry (the retry's LOOKUP failed) only spares the thread's next open a renumber. Bounded (cleared
  // when kMaxFresh threads wait). A leaf lock.
  using NameKey = std::pair<uint64_t, std::string>;
  struct NameKeyHash {
    size_t operator()(const NameKey& k) const {
      return std::hash<std::string>()(k.second) ^ (std::hash<uint64_t>()(k.first) * 0x9e3779b97f4a7c15ull);
    }
  };
  std::mutex retry_mu;
  std::unordered_map<uint32_t, NameKey> retrying;          // tid -> name (parent 0: unknown)
  std::unordered_map<NameKey, int, NameKeyHash> pending;   // name -> retrying threads
  void MarkRetry(const fuse_ctx* ctx, uint64_t parent = 0, const std::string& name = {});
  // The retry's call holds its name pending until the call is over (the ticket's destructor), not
  // only until it starts: a reader that finds no retry pending on the name (ForgetUsedFresh) then
  // also finds the retry's version being written, never a retry about to start one.
  class RetryTicket {
   public:
    RetryTicket() = default;
    RetryTicket(Impl* fs, NameKey k) : fs_(fs), key_(std::move(k)) {}
    RetryTicket(RetryTicket&& o) noexcept : fs_(o.fs_), key_(std::move(o.key_)) { o.fs_ = nullptr; }
    RetryTicket(const RetryTicket&) = delete;
    RetryTicket& operator=(const RetryTicket&) = delete;
    RetryTicket& operator=(RetryTicket&&) = delete;
    ~RetryTicket();
    operator bool() const { return fs_ != nullptr; }  // NOLINT: this call is a retry
    const NameKey& key() const { return key_; }
   private:
    Impl* fs_ = nullptr;
    NameKey key_;  // parent 0: no name was pending
  };
  RetryTicket TakeRetry(const fuse_ctx* ctx);
  // A LOOKUP by a thread whose open is being retried: the retry's own LOOKUP (LOOKUP_REVAL) of the name
  // it will open. The regular file found is the retry's target: from now on it gets no page-cache
  // readers, and other writers do not renumber it.
  void RetryLookup(const fuse_ctx* ctx, uint64_t parent, const std::string& name, uint64_t ino);
  // own: the caller's ticket, not counted (a retry's own call does not see itself pending).
  bool RetryPending(uint64_t parent, const std::string& name, const RetryTicket* own = nullptr);
  // The error reply of an open/create/truncate(path): a missing inode is ESTALE, and the thread's
  // retry is expected (MarkRetry) when the call would write (writer: a writable or O_TRUNC open, a
  // truncate). A read-only open's retry needs no renumber bookkeeping: marking it would make the number
  // its retry finds "fresh" (no page-cache readers, so no mmap) for kMaxFresh renumbers to come.
  void ReplyOpenError(fuse_req_t req, const Status& s, bool writer = true);
  // Whether open(2) flags ask to write (a writable access mode, or O_TRUNC, which truncates on Linux
  // even with O_RDONLY).
  static bool OpensForWrite(int flags) { return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC); }

  // Kernel page-cache invalidations run on their own thread: fuse_lowlevel_notify_inval_inode must not
  // be called from a worker that the kernel may be waiting on.
  std::mutex nq_mu;
  std::condition_variable nq_cv;
  struct Notice {
    uint64_t ino = 0;       // inval_inode (name empty) or the old inode of a changed name
    uint64_t parent = 0;    // inval_entry when name is not empty
    std::string name;
    bool attrs_only = false;  // inval_inode of the attributes only (a directory a peer changed)
    // No kernel call: mark inode `ino` detached (Inode::detached) if it is still being written. Queued
    // by OnPeerChanges, which must not take an inode's mu itself: a peer poll can run on a FUSE worker
    // that holds that very mu (an open pinning a peer's record polls the peer: Store::PinRecord).
    bool detach = false;
  };
  std::deque<Notice> nq;
  struct ListenerGate {
    std::mutex mu;
    Impl* impl = nullptr;
  };
  std::shared_ptr<ListenerGate> gate;
  bool nq_stop = false;
  std::thread notifier;
  // Invalidations the kernel missed. inval_inode answers ENOENT when the kernel holds no inode of that
  // number, inval_entry when it holds no dentry of the name; either may be a LOOKUP (or READDIRPLUS)
  // reply computed from the index before the peer's change was applied and not yet installed by the
  // kernel, which would then cache the older answer for the full timeouts. Two checks close that:
  //  * a reply whose inode or name missed an invalidation since its index lookup began (seq0 =
  //    MissSeq() then; checked after the inode's lookup reference is taken) gets timeout 0 for what
  //    missed (ReplyEntry, readdirplus: counted as fuse.lookups_uncached);
  //  * an inode that missed while the daemon holds a lookup reference of it (its reply was already
  //    computed) gets its inval_inode again after 10, 40, 160, 640 and 2560 ms while it keeps missing
  //    and the reference stays (fuse.inval_retries). A dentry needs no retry: the kernel holds the
  //    directory's lock over a LOOKUP it sends without a dentry (lookup_slow) and inval_entry takes it.
  // Order: the notifier checks nlookup and records the miss under table_mu; Ref takes table_mu before
  // the reply checks the misses (miss_mu, a leaf lock), so every miss is seen by one of the two.
  struct Miss {
    uint64_t seq = 0;
    uint64_t ino = 0;     // inval_inode
    uint64_t parent = 0;  // inval_entry
    std::string name;
  };
  static constexpr size_t kMaxMisses = 4096;  // older ones: a reply that began before them is uncached
  std::mutex miss_mu;
  uint64_t miss_seq = 0;     // misses recorded since mount (miss_mu)
  std::deque<Miss> misses;   // the last kMaxMisses, oldest first (miss_mu)
  struct InvalRetry {
    std::chrono::steady_clock::time_point due;
    uint64_t ino = 0;
    bool attrs_only = false;
    int tries = 0;
  };
  static constexpr size_t kMaxInvalRetries = 4096;
  std::deque<InvalRetry> inval_retry_q;  // nq_mu; due times in order of insertion, not sorted
  std::atomic<uint64_t> inval_calls{0}, inval_missed{0}, inval_retries{0}, lookups_uncached{0};
  uint64_t MissSeq();
  // Records a missed invalidation (table_mu held); true when the daemon holds a lookup reference of ino.
  bool RecordMissLocked(uint64_t ino, uint64_t parent, const std::string& name);
  // What of a reply that began at seq0 missed an invalidation since: *name (entry of parent/name) and
  // *attrs (the inode's attributes; also when the name missed).
  void MissedSince(uint64_t seq0, uint64_t ino, uint64_t parent, const std::string& name, bool* name_missed,
                   bool* attrs_missed);

  // ---- inode table ----
  std::shared_ptr<Inode> Ref(uint64_t ino, uint32_t type);
  std::shared_ptr<Inode> Get(uint64_t ino);
  // Get, or create an entry without a lookup reference (a handle or an op on an inode we dropped).
  std::shared_ptr<Inode> GetOrMake(uint64_t ino, uint32_t type);
  void MaybeEraseLocked(const std::shared_ptr<Inode>& in);
  void Forget(uint64_t ino, uint64_t n);
  void AddHandle(const std::shared_ptr<Inode>& in);
  void DropHandle(const std::shared_ptr<Inode>& in);
  // parent/name: the name it lost (a writable open that then answers ESTALE expects its retry there).
  // if_gone: only if the index has no such inode (checked under the inode's mu): the notifier's mark
  // of a number that lost its name, which a magic-link reopen may have given back meanwhile
  // (UndoRenumber changes the index, then clears `unlinked` under the inode's mu).
  void MarkUnlinked(uint64_t ino, uint64_t parent, const std::string& name, bool if_gone = false);

  // The inode's path in the mount, for log lines ("/a/b"); "(unlinked)" when the index no longer has it.
  std::string PathOf(uint64_t ino);

  void QueueInval(uint64_t ino);
  // Peers' journal entries were applied to the index (Store's peer thread): tell the kernel.
  void OnPeerChanges(const PeerChanges& c);
  void NotifierMain();

  // ---- attributes ----
  static void VersionAttr(Version& v, Attr* a);

  // Attributes stat shows for ino: the primary staged version if any, else the Store's. *timeout: how
  // long the kernel may cache them (0 while staged: st_size must be exact).
  // The attributes stat shows while versions are staged (in->mu held): the newest version being
  // written (hidden ones included: the kernel keeps ONE i_size per inode, and the writer's page-cache
  // reads and appends use it, so it must be the writer's size), else the visible primary. False: none.
  static bool StagedAttr(Inode& in, Attr* out);
  // Whether the kernel may cache a staged file's attributes for attr_timeout_s (in->mu held): one
  // visible version (primary) and no other version being written, never contended or renumbered. Its
  // attributes then change only by requests of this kernel: WRITE, fallocate and the O_TRUNC open
  // mark the kernel's size/mtime stale (stat asks again), SETATTR replies with new ones. What the kernel
  // cannot see invalidates: a hidden version's commit or a contended one (Commit), a failed publish
  // (Unpublish), a peer's SETATTR/XATTR (OnPeerChanges), a commit whose st_blocks differs (an extent
  // map). Sets in->staged_cached when true.
  static bool StagedCacheable(Inode& in);

  // ext (optional): the committed content's extent map, when the attributes are the index's.
  Status GetAttr(uint64_t ino, Attr* out, double* timeout, ExtentMapRef* ext = nullptr);

  // Replies with a positive entry for node (one lookup reference). fresh_only: if n is a staged regular
  // file of which no staged version is left here, reply nothing and return false (the caller looks again).
  // The index's attributes of a staged file are placeholders (size 0): the sizes are the versions' (and
  // StagedAttr shows them). A LOOKUP that read n from the index before the file's deferred commit and
  // replies after it (the commit dropped the version) would give the kernel size 0 with a valid lookup:
  // the kernel then cuts that inode's i_size and page cache under its readers (a publisher's rename
  // looks up the target name: LOOKUP_RENAME_TARGET). The index commits before the version is dropped,
  // so looking again finds the committed node.
  // seq0: MissSeq() before the index lookup (UINT64_MAX: not a LOOKUP's reply, no miss check);
  // test_delay_ms: TEST ONLY, a wait after the lookup reference is taken (FsOptions).
  bool ReplyEntry(fuse_req_t req, const Node& n, bool fresh_only = false, uint64_t seq0 = UINT64_MAX,
                  uint32_t test_delay_ms = 0);
  void ReplyNegative(fuse_req_t req);

  // ---- versions ----
  std::shared_ptr<Version> NewVersion(uint64_t ino, bool hidden, bool direct);

  // After a change of v.data (v.mu held exclusively): the RAM it holds now vs. cap_before.
  void AccountRam(Version& v, uint64_t cap_before);

  // ---- staging budget (docs/design.md §4: "a FUSE worker never waits for memory") ----
  // Called before a change that allocates up to `need` bytes of staging RAM (no version lock held).
  // While the staged RAM + need exceeds the budget, spills the version holding the most RAM (its own
  // version included). Never waits for memory: when every candidate is being spilled by another
  // thread, or nothing is left to spill, the change goes ahead over the budget. Errors of the spill
  // (NoSpace: backing store or capacity full; IOError) are the caller's: the write fails cleanly,
  // nothing staged is lost (the victim keeps its bytes in RAM).
  Status MakeRoom(uint64_t need);

  // The staged version with the most RAM that no other thread is spilling (marked spilling), or null.
  std::shared_ptr<Version> PickVictim();

  // Writes v's RAM chunks as ONE provisional record and keeps only their Locations (ChunkBuffer::ToRef).
  // Full chunks only, so appends to the partial last chunk do not read it back; the last chunk too when
  // there is nothing else. Of chunks that hold clean pages (bytes already on the export, holes) only the
  // dirty pages are written, the rest become references again (ChunkBuffer::SpillDirty): no byte is
  // written twice, and the new references name only records the version already holds. The record is journaled only if the version is later committed whole from it
  // (FlushLocked); otherwise it is an orphan (dead bytes).
  Status Spill(Version& v);

  // A version for a new writable handle of `in` (its writer counted). The rule (docs/semantics.md):
  //  - without O_TRUNC: join the newest version being written; if none, a copy-on-write *primary*
  //    version of the committed content (visible: stat and new readers see it, as on a local fs);
  //  - O_TRUNC while another version of the inode is being written: a *shadow* (hidden + direct_io),
  //    so two writers of one temp name each produce a whole version and nobody sees a mix;
  //  - O_TRUNC of a committed file nobody writes: a *replacement* (hidden, page cache): readers and
  //    stat keep the committed content until the new version commits whole;
  //  - O_TRUNC of a staged file (created, never committed): a new empty primary version.
  // need_content=false: the caller truncates to 0 anyway (skip the copy-on-write load).
  // retry: the kernel's retry of this thread's call that we answered ESTALE (TakeRetry): never renumber
  // again where that is safe.
  Result<std::shared_ptr<Version>> AcquireWritable(const std::shared_ptr<Inode>& in, bool trunc,
                                                   const fuse_ctx* ctx, bool need_content = true,
                                                   bool retry = false);
  // The kernel's retry of a writable open we answered ESTALE came back to the very number we renumbered
  // away from: the open did not go through a name (a /proc/self/fd or /dev/fd magic link, which re-opens
  // the same inode however often it is retried), so a new number can never reach it. Like a local fs, the
  // open then writes that inode: the name moves back to it (Store::Renumber(to)), provided no version
  // of the number the name got is being written: versions whose writers all closed are committed
  // first (their RELEASEs waited for, up to 1 s); read-only handles open there keep their content
  // (that number becomes unlinked). The caller starts its version in place (readers see the rewrite).
  // Returns whether it did. Takes in->mu, the other inode's mu and table_mu; the caller holds none.
  bool UndoRenumber(const std::shared_ptr<Inode>& in);
  // inplace: UndoRenumber just gave the name back to this number: start the version here whatever
  // page-cache handles are open, as a visible version, and invalidate the kernel's cache of the inode.
  Result<std::shared_ptr<Version>> AcquireWritableOnce(const std::shared_ptr<Inode>& in, bool trunc,
                                                       const fuse_ctx* ctx, bool need_content, bool retry,
                                                       bool inplace,
                                                       std::vector<std::shared_ptr<Version>>* settle, bool waited);

  // Sets v's size (setattr, truncate by name, fallocate): spills first when growing over the budget,
  // and after, when a large growth took staging over it (its zeros go to the backing store).
  // grow_only: leave a larger size alone (fallocate).
  Status Truncate(Version& v, uint64_t size, int64_t now, bool grow_only = false);

  bool IsUnlinked(Inode& in);

  // Releases the write pin of the record(s) v's previous FLUSH wrote (not its spills). Requires v.io_mu.
  void ReleaseFlushedRecord(Version& v);
  // Writes v's bytes as a record if they changed since the last record. Requires v.io_mu. at_close (the
  // FLUSH of close(2)): a few dirty pages of a version that is not all new bytes are sealed instead
  // (Version::sealed_gen), their record left to the deferred commit (kSealMaxBytes).
  Status FlushLocked(Inode& in, Version& v, bool at_close = false);
  // Dirty bytes up to which a close seals its pages instead of appending them (16 pages: a record of
  // more pages than that costs at most 1/16 more for its metadata block).
  static constexpr uint64_t kSealMaxBytes = 64 * 1024;
  // Appends the pages sealed by v's closes (if any) as one record: v.record / record_ext become the
  // version as of its last sealed close (ChunkBuffer::ToExtentMapSealed), the pages written since stay
  // dirty. Requires v.io_mu. A failure marks v failed (its closes returned 0: never published).
  Status FlushSealedLocked(Version& v);
  // The same, taking v.io_mu: before a write over sealed pages, a resize, a punch or a spill.
  Status FlushSealed(Version& v);
  // Adds `earned` to inode ino's compaction copy budget and takes `spent` from it (saturating at 0).
  void CreditCompaction(uint64_t ino, uint64_t earned, uint64_t spent);
  // A file moved from inode number `from` to `to` (Store::Renumber, or its undo): its budget moves too.
  void MoveCompactionCredit(uint64_t from, uint64_t to);

  // *close_no (at_close): Version::closes after this close.
  Status Flush(Inode& in, Version& v, bool at_close = false, uint64_t* close_no = nullptr);

  // Commits v (record + journal PUT under the inode's current name) unless its name is gone.
  // as_flushed: commit what v's last FLUSH wrote (v.record / v.record_ext, the size they hold), without
  // writing the bytes written since as a record first (pages its closes sealed are appended first, as
  // that close's state: FlushSealedLocked): the deferred commit of a close that a writer joined after
  // (FinishRelease), so a peer never sees that writer's unclosed bytes.
  // close_no (with as_flushed): the deferred commit of the close that made v.closes that number; nothing
  // to do when a commit published that close (or a later state) already.
  Status Commit(const std::shared_ptr<Inode>& in, const std::shared_ptr<Version>& v, bool as_flushed = false,
                uint64_t close_no = 0);

  // A close (FLUSH) or fsync of v failed with s: v is never published (Version::failed).
  void MarkFailed(Version& v, const Status& s);
  // A read-only handle starts / stops reading staged version v (under its Inode's mu): Version::readers,
  // and the hold of its committed record (Version::held) for such handles. *unpin: a hold the caller
  // releases (Store::UnpinRecord) after dropping the lock.
  void TestUnlinkMarkDelay() {  // TEST ONLY (FsOptions::test_unlink_mark_delay_ms)
    if (opts.test_unlink_mark_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(opts.test_unlink_mark_delay_ms));
    }
  }
  void AddReaderLocked(Version& v, Location* unpin);
  void DropReaderLocked(Version& v, Location* unpin);
  // v's committed record held for its handles (Version::held) if it is committed and not held yet:
  // readers (AddReaderLocked) and a writer that joins a committed version (AcquireWritable). Under the
  // Inode's mu. *unpin: an older hold the caller releases.
  void HoldCommittedLocked(Version& v, Location* unpin);

  // The last release of a version that could not be published (failed close/fsync or commit): the
  // name goes back to what it was before the open (docs/semantics.md): a staged file's name is removed
  // (Store::DropStaged), a committed file keeps its committed content; the kernel's cached entry and
  // attributes are invalidated. Counts failed_publishes.
  // Runs once per version: at the failed FLUSH of its only writer, else at its last release.
  void Unpublish(const std::shared_ptr<Inode>& in, const std::shared_ptr<Version>& v, const Status& why);

  // close(2) of a writer handle of v (FLUSH): notes the close's order (Version::last_close), and if
  // the handle is v's last writer, v becomes what stat and new readers see at once (close-to-open),
  // even though its journal PUT waits for RELEASE, which the kernel sends asynchronously after close
  // returns.
  void PromoteAtClose(const std::shared_ptr<Inode>& in, const std::shared_ptr<Version>& v);
  // A writer handle of v released with writes after its last FLUSH (no close(2) saw them: shared-mmap
  // writeback, a killed process): that RELEASE is v's latest close.
  void NoteDirtyRelease(const std::shared_ptr<Inode>& in, const std::shared_ptr<Version>& v);
  // Both: a close of v that changed it (gen moved since v's last noted close) takes a new order
  // (Version::last_close). Called under the inode's mu; takes v.mu shared.
  void NoteCloseLocked(Version& v);
  // The moment v's content dates from: its last close that changed it, else its creation.
  static uint64_t ChangeOrderLocked(const Version& v) { return v.last_close != 0 ? v.last_close : v.created_order; }
  // v is older than the content another version of the inode committed (its last change came before
  // that commit's close): it must not become visible, be joined or commit. Under the inode's mu.
  static bool StaleLocked(const Inode& in, const Version& v) {
    return in.committed_order_seq != v.seq && ChangeOrderLocked(v) < in.committed_order;
  }

  // Drops one writer of v; the last one commits it (docs/design.md §4 "Commit"). defer: commit it
  // opts.commit_delay_ms later on the committer thread, so that the rename that usually follows close
  // (temp file + rename) happens first and the journal gets one PUT under the final name instead of a
  // PUT under the temp name + a RENAME. Until then the version stays staged and visible as before.
  // wrote: the released handle wrote to v. When other writers keep a visible version open, such a
  // release still commits it (deferred the same way; FinishRelease): a close is a commit point
  // (close-to-open, and "closed 25 ms before a crash survives it", docs/semantics.md §1), however long
  // other handles stay open.
  // flushed_close: Handle::flushed_close of the released handle (nothing written through it since).
  Status ReleaseWritable(const std::shared_ptr<Inode>& in, const std::shared_ptr<Version>& v,
                         bool defer = false, bool wrote = false, uint64_t flushed_close = 0);

  // The last writer is gone: commit v (again if something changed while committing), then drop it.
  // last_writer: see Deferred::last_writer.
  Status FinishRelease(const std::shared_ptr<Inode>& in, const std::shared_ptr<Version>& v,
                       bool last_writer = false, uint64_t close_no = 0);

  // ---- deferred commits ----
  struct Deferred {
    std::chrono::steady_clock::time_point due;
    std::shared_ptr<Inode> in;
    std::shared_ptr<Version> v;
    // The release was the version's last writer's (its FLUSH wrote every byte written until then), or
    // its handle's own FLUSH recorded or sealed the version (Handle::flushed_close): a writer that joins
    // within the delay must not get its bytes into this close's commit (Commit as_flushed).
    bool last_writer = false;
    uint64_t close_no = 0;  // v->closes at the release (Commit's close_no)
  };
  std::mutex cq_mu;
  std::condition_variable cq_cv;
  std::deque<Deferred> cq;  // due times are nondecreasing (one fixed delay)
  bool cq_stop = false;
  int cq_inflight = 0;  // commits the committer thread popped and is running (guarded by cq_mu)
  std::thread committer;

  void CommitterMain();
  void RunDeferred(Deferred& d);
  // Runs every deferred commit now, in the calling thread, and waits for the one the committer may be
  // running: fsync / fsyncdir must also cover files closed just before (their commit is deferred).
  void DrainDeferred();
  // Commits everything deferred now and stops the committer thread.
  void StopCommitter();
};

// ---- helpers shared by the FUSE callbacks ----

inline KvfsFs::Impl* FS(fuse_req_t req) { return static_cast<KvfsFs::Impl*>(fuse_req_userdata(req)); }

// Counts one READ handler in Impl::reads_in_flight for its lifetime (and raises reads_in_flight_max).
// TEST ONLY: waits FsOptions::test_read_delay_ms first, so the requests of one read(2) that the kernel
// sends together are all in the daemon at once.
struct ReadInFlight {
  explicit ReadInFlight(KvfsFs::Impl* f) : fs(f) {
    uint32_t now = fs->reads_in_flight.fetch_add(1, std::memory_order_relaxed) + 1;
    uint32_t max = fs->reads_in_flight_max.load(std::memory_order_relaxed);
    while (now > max && !fs->reads_in_flight_max.compare_exchange_weak(max, now, std::memory_order_relaxed)) {
    }
    if (fs->opts.test_read_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(fs->opts.test_read_delay_ms));  // TEST ONLY
    }
  }
  ~ReadInFlight() { fs->reads_in_flight.fetch_sub(1, std::memory_order_relaxed); }
  ReadInFlight(const ReadInFlight&) = delete;
  ReadInFlight& operator=(const ReadInFlight&) = delete;
  KvfsFs::Impl* fs;
};

inline bool NameTooLong(const char* name) { return std::strlen(name) > 255; }

inline void Reply(fuse_req_t req, const Status& s, ErrCtx ctx = ErrCtx::kDefault) {
  fuse_reply_err(req, ToErrno(s, ctx));
}

// The group of a new entry in `parent` (the setgid-directory rule of Linux file systems such as ext4):
// in a directory with S_ISGID the entry gets the directory's group and a new subdirectory keeps
// S_ISGID (*mode); elsewhere the creator's gid. An unreadable parent leaves it to the create's own error.
gid_t NewEntryGid(KvfsFs::Impl* fs, fuse_ino_t parent, const fuse_ctx* ctx, mode_t* mode);

// Opens a handle of a regular file inode (shared by open and create).
// retry: this call is the kernel's retry of one we answered ESTALE (Impl::TakeRetry).
Status OpenHandle(KvfsFs::Impl* fs, fuse_req_t req, const std::shared_ptr<Inode>& in, fuse_file_info* fi,
                  bool force_trunc, bool retry);

// Closes a file or directory handle (release, releasedir, or a failed open reply): its writer releases
// its version (commit deferred), then the handle is freed and the inode's handle count dropped.
void ReleaseHandle(KvfsFs::Impl* fs, Handle* h);

// ---- the FUSE callbacks (libfuse calls them through the op table, fuse/kvfs_fs.cc) ----

// names (fuse/ops_namespace.cc)
void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name);
void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets);
void OpReadlink(fuse_req_t req, fuse_ino_t ino);
void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name);
void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name);
void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name);
void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
              unsigned flags);
void OpLink(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*);
void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t);
void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi);

// attributes (fuse/ops_attr.cc)
void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi);
void OpAccess(fuse_req_t req, fuse_ino_t ino, int mask);
void OpStatfs(fuse_req_t req, fuse_ino_t);

// file I/O (fuse/ops_file.cc)
void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi);
void OpWrite(fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t off, fuse_file_info* fi);
void OpFlush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi);
void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi);
void OpFsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi);
void OpIoctl(fuse_req_t req, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned, const void*, size_t, size_t);
void OpFallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length, fuse_file_info* fi);
void OpLseek(fuse_req_t req, fuse_ino_t, off_t off, int whence, fuse_file_info* fi);

// directories (fuse/ops_dir.cc)
void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void OpReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi);
void OpFsyncdir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*);
void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*);
void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*);

// extended attributes (fuse/ops_xattr.cc)
void OpSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags);
void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size);
void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void OpRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name);

}  // namespace kvfs
