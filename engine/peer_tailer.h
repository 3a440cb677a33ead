// PeerTailer: reads the journals of the other nodes on the shared backing directory and applies their
// entries to this node's index (docs/design.md §5). Per peer it keeps the position read up to (the end
// of the last applied entry) and:
//  * reads the peer's journal files from there (JournalReader, skip_damage = false: a short or bad tail
//    means "not yet", retried at the next poll, never cut), updates the HLC with every entry's stamp and
//    applies the entries in batches of kReplayBatch with IndexDb::ApplyBatch under the namespace mutex,
//    recording the new position in the same batch;
//  * starts a peer it has never read at its newest snapshot, and re-reads the newest snapshot when the
//    journal file at its position is gone (the peer retired it: engine/checkpoint.h);
//  * forgets the segments of a node purged while we were not reading (<node>/PURGED);
//  * reports what the applied entries changed (names, in-place inode changes) through the notify hook
//    (kernel invalidation), and each DROP of a peer's segment through segment_dropped.
// The peer thread (Start) wakes every poll_interval and polls each known peer, backing off for idle
// peers (the wait doubles with each poll that finds nothing, up to idle_poll_max: 4 intervals by
// default, 10 s on S3), and polls every peer early on RequestRefresh (a lookup miss; at most every
// interval / 4), again after the peer's group commit; with a bound over 4 intervals (S3) an early poll
// also puts every peer back on the interval. It looks for new nodes every 25 intervals (every
// idle_poll_max while all known peers are idle at it; on an early poll: when the last look is 5
// intervals old): one stat of the nodes directory, and a listing only when that stat changed since the
// last listing (or that listing was within nodes_dir_settle of the directory's last change, or
// nodes_relist_max ago).
//
// Callers: StoreImpl (engine/store_open.cc) makes one in Init over its index, HLC and namespace mutex,
// ResumeFromIndex, Start; Store::RefreshPeers -> RefreshAll (tests, tools); Store::RequestPeerRefresh
// (FUSE lookup misses) -> RequestRefresh; the checkpointer's peers file -> Positions; Store::GetStats
// -> GetStats; StopThreads -> Stop.
//
// Thread safety: every method may be called from any thread. mu_ serializes polls (peer thread vs
// RefreshAll) and guards the per-peer states; while a poll applies a batch it takes the namespace mutex
// (lock order: mu_ -> namespace mutex), so peer batches are ordered with the store's local mutations.
// wake_mu_ (thread scheduling) and stats_mu_ (per-peer figures) are leaves. GetStats takes mu_ for the
// peer count (it waits for a poll in progress) and then stats_mu_. The hooks run on the polling thread with mu_ held and the namespace mutex NOT held;
// they must not call back into the tailer.
//
// Invariants:
//  * A peer's position only moves past entries the index has applied; the index records it in the same
//    ApplyBatch as the entries, so a tailer resumed from the index (ResumeFromIndex, after a restart)
//    applies no entry twice. The in-memory position may be ahead of the recorded one only by entries that
//    yield no index operation (a journal file's CUT, entries naming an invalid node id) or the start of a
//    later file: re-reading those is harmless.
//  * Within one peer, entries are applied in journal order; a poll stops at the first torn or damaged
//    tail and resumes there.
//  * This node's own journal is never tailed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/status.h"
#include "engine/store.h"
#include "index/hlc.h"
#include "index/index_db.h"
#include "index/journal.h"
#include "index/snapshot.h"

namespace kvfs {

class DirRenameLog;

struct PeerTailerOptions {
  Env* env = nullptr;
  // Directory renames applied on this node (engine/dir_renames.h): peers' entries older than one are
  // redirected to where it moved their path; the directory RENAMEs this tailer applies are noted there.
  // Null: neither.
  DirRenameLog* dir_renames = nullptr;
  std::string backing_dir;
  std::string node;  // this node: never tailed
  // The peer thread's period (idle peers are polled every 2, then 4 intervals); 0 = no thread, RequestRefresh is a no-op
  // (RefreshAll only).
  std::chrono::milliseconds poll_interval{200};
  // The longest wait between polls of an idle peer: the wait doubles from poll_interval with every poll
  // that finds nothing new, up to this; 0 = 4 x poll_interval. The nodes directory is listed every
  // max(25 x poll_interval, this) while every known peer is idle at this bound.
  std::chrono::milliseconds idle_poll_max{0};
  // The peers' group commit interval: an early poll is followed by one more 2 x this + 10 ms later.
  std::chrono::milliseconds group_commit_interval{20};
  bool direct_io = false;  // read peers' journals with O_DIRECT (NFS: see growth at once)
  // Keep each peer's newest journal file open between polls and read its tail through that descriptor
  // (one read per poll, no listing of the node directory and no open/close), listing the node
  // directory again only when tail_relist has passed without new entries (the peer may have cut to a
  // new file: a checkpoint, a new generation). Only where a kept descriptor sees the file grow: O_DIRECT
  // reads (direct_io, on NFS) or a local file system; never on an object store (store_open.cc decides).
  bool keep_tail_open = false;
  std::chrono::milliseconds tail_relist{2000};
  // Look for new nodes with one stat of the nodes directory and list it only when that stat changed
  // (a new node's mkdir changes the directory's mtime, ctime and link count). False: list at every look
  // (an object store: the stat is of the local staging directory and says nothing about the bucket).
  bool nodes_dir_stat = true;
  // A listing whose stat shows a change younger than this (by this host's wall clock) does not vouch for
  // the next look: coarse or skewed timestamps could hide a change made in the same tick. Applies to
  // whole-second timestamps; finer ones (a kernel tick) settle in 100 ms (or this, if shorter).
  std::chrono::milliseconds nodes_dir_settle{2000};
  // List the nodes directory at least this often whatever its stat says (a backing whose directory
  // timestamps do not move).
  std::chrono::milliseconds nodes_relist_max{30000};
};

struct PeerTailerHooks {
  // What an applied batch changed (never called with nothing in it). May be empty.
  std::function<void(const PeerChanges&)> notify;
  // A peer's segment was dropped (its DROP entry, or its node was purged): the owner closes what it
  // holds open of it, so later reads fail to open (ENOENT) instead of reading a stale NFS handle.
  // May be empty.
  std::function<void(const SegmentId&)> segment_dropped;
};

struct PeerTailerStats {
  uint64_t peers = 0;            // peers with a state (resumed from the index, or polled)
  uint64_t entries_applied = 0;  // entries applied from peers' journals and snapshots
  uint64_t unresolved_deltas = 0;  // peers' extent delta PUTs whose base this index did not hold
  uint64_t orphans_applied = 0;    // peers' SETATTR/XATTR applied on a retry, after the PUT they change
  uint64_t orphans_pending = 0;    // such entries still waiting for their name
  uint64_t dir_rename_redirects = 0;  // peers' entries older than a directory rename, applied under its new path
  uint64_t polls = 0;            // polls of one peer
  uint64_t tail_reads = 0;       // of those, answered by the kept tail alone (no listing, no open)
  uint64_t nodes_listings = 0;   // listings of the nodes directory by the peer thread
  uint64_t nodes_looks_unchanged = 0;  // looks for new nodes answered by the directory's stat alone
  std::vector<PeerJournalStats> journals;  // per polled peer, by id
};

class PeerTailer {
 public:
  // index, hlc and ns_mu are the owner's and must outlive the tailer.
  PeerTailer(PeerTailerOptions opts, IndexDb* index, HybridClock* hlc, std::mutex* ns_mu, PeerTailerHooks hooks);
  ~PeerTailer();  // Stop()

  // Resumes every peer where the index says it stopped (the applied positions it records with each
  // batch: a previous mount, or the rebuild that made the index). Call before Start.
  void ResumeFromIndex();
  // Starts the peer thread (no-op when poll_interval is 0, or after Stop).
  void Start();
  // Ends the peer thread (waits for a poll in progress). Idempotent.
  void Stop();

  // Lists the nodes and polls every peer now. Returns the first poll's error (the others still run).
  Status RefreshAll();
  // Polls `node`'s journal now, on the caller's thread (waits for a poll in progress), and applies what
  // is new: everything the peer made durable before this call started is applied when it returns OK
  // (engine/peer_holds.cc relies on it). Cost: one listing of the node's directory + the journal read.
  Status PollNow(const std::string& node);
  // Asks the peer thread for an early poll of every known peer (a lookup miss may mean a peer just
  // wrote the name). Rate-limited to one per poll_interval / 4; never blocks on a poll.
  void RequestRefresh();

  // How far each peer has been read (peers with a position): what the peers file publishes.
  std::map<std::string, JournalPosition> Positions();
  PeerTailerStats GetStats();

 private:
  // Per-peer tailing state (guarded by mu_).
  struct PeerState {
    bool have_position = false;
    JournalPosition position;  // end of the last applied entry
    uint32_t idle_polls = 0;
    std::chrono::steady_clock::time_point next_poll{};
    // The journal file at `position` was missing: PURGED was checked for this position (once).
    bool purge_checked = false;
    JournalPosition purge_checked_at;
    // The last read of journal file (clean_file) ended clean at EOF, the file then clean_size bytes: a
    // listing that gives the same size (an object store's) means nothing new, no need to open it.
    std::pair<uint64_t, uint64_t> clean_file{UINT64_MAX, UINT64_MAX};
    uint64_t clean_size = 0;
    // keep_tail_open: the newest journal file of the last listing, open, and which file it is.
    std::shared_ptr<BackingFile> tail;
    std::pair<uint64_t, uint64_t> tail_key{UINT64_MAX, UINT64_MAX};
    std::chrono::steady_clock::time_point listed_at{};  // the last listing of the peer's directory
  };
  struct PeerStatsRec {
    uint64_t polls = 0, applied = 0;
    double lag_s = 0;
    bool polled = false;
    std::chrono::steady_clock::time_point last_poll{};
  };

  void Loop();
  // The peer thread's look for new nodes: a stat of the nodes directory, then a listing into *nodes
  // unless the stat equals the one taken before the last settled listing (or nodes_dir_stat is off, or
  // nodes_relist_max has passed). Peer thread only.
  void ListNodesIfChanged(std::vector<std::string>* nodes);
  bool NodesDirUnchanged(const FileInfo& now) const;
  // Reads and applies whatever is new in node's journals. *changed = entries applied. Requires mu_.
  // may_use_tail: the peer thread's polls may read the kept tail without listing (keep_tail_open);
  // PollNow and RefreshAll always list (they promise everything durable before the call).
  Status PollPeer(const std::string& node, PeerState* st, uint64_t* changed, bool may_use_tail = false);
  Status ReadJournalFile(const std::string& node, PeerState* st, std::pair<uint64_t, uint64_t> key,
                         const std::string& path, uint64_t start, const std::shared_ptr<BackingFile>& file,
                         uint64_t* changed, uint64_t* newest_stamp, bool* stop, bool* read_failed);
  // PollPeer helpers (checkpoint.h): a missing file at our position = retired (-> newest snapshot) or
  // purged (-> forget the node's old data).
  Status ApplyPeerSnapshot(const std::string& node, const std::vector<SnapshotFile>& snaps, PeerState* st,
                           PeerChanges* out, uint64_t* changed);
  Status ForgetPurgedPeer(const std::string& node, uint64_t purge_generation, PeerChanges* out);
  void Notify(const PeerChanges& out);
  // Keeps the ops of a batch the index skipped for want of a name (ApplyResult::no_target) as orphans.
  void KeepOrphans(const std::string& node, const std::vector<ApplyOp>& ops, const ApplyResult& r);
  // Applies the orphans again (after a poll round that applied entries): those that now find their
  // name leave the list, so do those older than kOrphanRetention. Requires mu_.
  void RetryOrphans();
  void SegmentDropped(const SegmentId& id);
  void NotePoll(const std::string& node, uint64_t applied, uint64_t newest_stamp);

  const PeerTailerOptions opts_;
  IndexDb* const index_;
  HybridClock* const hlc_;
  std::mutex* const ns_mu_;
  const PeerTailerHooks hooks_;

  std::mutex mu_;  // serializes polls; guards peers_
  std::map<std::string, PeerState> peers_;
  // A peer's SETATTR / XATTR of a name another peer bound, read before that peer's PUT of the name (the
  // peers are polled in turn: A's chmod of B's new file can be read first). Applied again after each
  // round that applied something, so it lands once the PUT is here, as a rebuild orders them (index/
  // replay.h). Bounded: kMaxOrphans (oldest dropped), kOrphanRetention. Not kept across restarts.
  struct Orphan {
    ApplyOp op;  // op.node = the peer
    std::chrono::steady_clock::time_point since;
  };
  static constexpr size_t kMaxOrphans = 4096;
  static constexpr std::chrono::seconds kOrphanRetention{60};
  std::vector<Orphan> orphans_;
  std::atomic<uint64_t> orphans_applied_{0};

  std::mutex wake_mu_;  // the thread's schedule
  std::condition_variable cv_;
  bool wake_ = false, stop_ = false;
  std::atomic<bool> stopping_{false};  // Stop() called: a poll round ends after the peer it is polling
  std::chrono::steady_clock::time_point last_early_poll_{}, followup_at_{};
  bool followup_pending_ = false;
  bool early_polled_ = false;    // last_early_poll_ is set (steady_clock's epoch is the boot)
  bool followup_moved_ = false;  // RequestRefresh set followup_at_: the loop recomputes its deadline
  bool refresh_requested_ = false;  // RequestRefresh since the last round: idle peers back to the interval
  std::thread thread_;
  // The peer thread's last listing of the nodes directory (ListNodesIfChanged; that thread only).
  FileInfo nodes_dir_stat_;          // the stat taken just before it
  bool nodes_dir_settled_ = false;   // that stat may answer later looks
  std::chrono::steady_clock::time_point nodes_full_listed_at_{};
  std::atomic<uint64_t> nodes_listings_{0}, nodes_looks_unchanged_{0};

  std::atomic<uint64_t> entries_applied_{0}, polls_{0}, unresolved_deltas_{0}, tail_reads_{0};
  std::mutex stats_mu_;  // guards stats_
  std::map<std::string, PeerStatsRec> stats_;
};

}  // namespace kvfs
