// Store implementation: the glue between the RocksDB index (index_db.h), the journal (journal.h), the
// segment writer/reader (blockstore/) and the LRU. See store.h for the contract and DESIGN §2-§4, §7.
//
// Ordering rules this file keeps:
//  * ns_mu_ serializes every namespace mutation together with the enqueueing of its journal entry, so
//    the journal order equals the order in which the index applied the changes.
//  * Commit protocol (DESIGN §2): a group commit round takes the entries queued so far, syncs the
//    segments first (every record those entries point to was appended before the entry was queued),
//    then appends + syncs the journal, then acknowledges Sync() callers. One fdatasync per file per round.
//  * The index is updated at once (local visibility); the journal follows within one group-commit
//    interval. After a crash the index may be ahead of the journal, so an index that was not closed
//    cleanly is rebuilt from the journals (it is a cache: DESIGN §3).
#include "engine/store.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "blockstore/format.h"
#include "blockstore/log.h"
#include "blockstore/lru_cache.h"
#include "blockstore/node_dir.h"
#include "blockstore/segment_reader.h"
#include "blockstore/segment_writer.h"
#include "engine/checkpoint.h"
#include "index/hlc.h"
#include "index/index_db.h"
#include "index/journal.h"
#include "index/journal_format.h"
#include "engine/recovery.h"
#include "index/replay.h"
#include "index/snapshot.h"

namespace kvfs {
namespace {

// Values up to this size are loaded whole into the LRU on a miss (one backing read per value, shared by
// concurrent readers); larger ones are read block-range by block-range.
constexpr uint64_t kWholeValueLoadMax = 64ull << 20;
// 4 LRU shards: values are large (144 KiB - 36 MiB) and copies dominate lock hold times, so few, big
// shards keep a 36 MiB value cacheable (a shard holds capacity / 4) at little contention cost.
constexpr int kCacheShardBits = 2;
// Entries per ApplyBatch during a rebuild.
constexpr size_t kRebuildBatch = kReplayBatch;
// Capacity and eviction (store.h "Capacity and eviction").
constexpr uint64_t kReserveMaxBytes = 1ull << 20;       // <node dir>/RESERVE: min(1 MiB, segment / 4)
constexpr const char* kReserveName = "RESERVE";
// Dead-segment reclamation (store.h): a sealed segment of this node with no live record is dropped once
// it has been evictable this long (a record written just before its segment sealed may still be
// waiting for its commit), looked for at most this often (one index read per tracked segment).
constexpr auto kDeadSegmentAge = std::chrono::seconds(10);
constexpr auto kDeadSegmentScan = std::chrono::seconds(2);
constexpr auto kEvictTick = std::chrono::milliseconds(100);
// Journal entries owed after a failed group commit are retried with a backoff from the group-commit
// interval up to this (and at once when space is freed); Close retries this often before it reports them.
constexpr auto kRetryMaxBackoff = std::chrono::milliseconds(1000);
constexpr int kCloseRetries = 10;
constexpr auto kCloseRetryWait = std::chrono::milliseconds(200);

std::string JoinPath(const std::string& dir, std::string_view name) {
  std::string p = dir == "/" ? std::string() : dir;
  p += '/';
  p.append(name);
  return p;
}

std::string DefaultNodeId() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "node";
  std::string id;
  for (const char* p = host; *p; ++p) {
    char c = *p;
    id += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  }
  return id;
}

}  // namespace

class StoreImpl final : public Store {
 public:
  explicit StoreImpl(const StoreOptions& opts)
      : opts_(opts), env_(opts.env ? opts.env : Env::Posix()), cache_(opts.cache_size, kCacheShardBits) {}
  ~StoreImpl() override {
    if (!closed_) {
      // A Store destroyed without Close behaves like a crash of the mount (tests use this), except that
      // threads are stopped.
      StopThreads();
    }
  }

  Status Init();
  Status Close() override;

  // ---- namespace ----
  Result<Node> Lookup(uint64_t parent, std::string_view name) override { return index_->Lookup(parent, name); }
  Result<Node> GetInode(uint64_t ino) override { return index_->GetInode(ino); }
  Result<Node> Mkdir(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid,
                     uint32_t gid) override;
  Status Rmdir(uint64_t parent, std::string_view name) override;
  Result<Node> CreateFile(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid, uint32_t gid,
                          bool exclusive) override {
    std::lock_guard<std::mutex> l(ns_mu_);
    return index_->CreateFile(parent, name, mode, uid, gid, exclusive);
  }
  Result<Node> Symlink(uint64_t parent, std::string_view name, std::string_view target, uint32_t uid,
                       uint32_t gid) override;
  Result<std::string> ReadLink(uint64_t ino) override { return index_->ReadLink(ino); }
  Status Unlink(uint64_t parent, std::string_view name, uint64_t* ino_out) override;
  Status Rename(uint64_t parent, std::string_view name, uint64_t new_parent, std::string_view new_name,
                unsigned flags, uint64_t* replaced_ino) override;
  Result<Attr> SetAttr(uint64_t ino, const Attr& attr, uint32_t mask) override;
  Status ReadDir(uint64_t dir, uint64_t after, const std::function<bool(const DirEntry&)>& fn) override {
    return index_->ReadDir(dir, after, fn);
  }
  Status SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags) override;
  Result<std::string> GetXattr(uint64_t ino, std::string_view name) override {
    return index_->GetXattr(ino, name);
  }
  Result<std::vector<std::string>> ListXattr(uint64_t ino) override { return index_->ListXattr(ino); }
  Status RemoveXattr(uint64_t ino, std::string_view name) override;

  // ---- data ----
  Result<Location> WriteRecord(uint64_t ino, const std::vector<std::string_view>& parts) override {
    return AppendRecord(ino, parts, 0);
  }
  Result<Location> WriteProvisionalRecord(uint64_t ino, const std::vector<std::string_view>& parts) override {
    return AppendRecord(ino, parts, format::kRecordFlagProvisional);
  }
  Result<Location> AppendRecord(uint64_t ino, const std::vector<std::string_view>& parts, uint16_t flags);
  Result<Location> WriteRecordStreamed(uint64_t ino, uint64_t length, const RecordSource& source) override;
  // Capacity checks, the append itself (fn(tag, stamp)), pins and accounting of one record.
  Result<Location> AppendWith(uint64_t ino, uint64_t len, uint16_t flags,
                              const std::function<Result<Location>(const std::string&, uint64_t)>& fn);
  void ReleaseRecordPin(const Location& loc) override;
  Status ReadUncached(const Location& loc, uint64_t offset, size_t len, char* buf, size_t* got) override;
  Status CommitFile(uint64_t ino, const Location& loc, const Attr& attr) override;
  Result<Node> Renumber(uint64_t ino, uint64_t to = 0) override;
  Status Read(const Location& loc, uint64_t offset, size_t len, char* buf, size_t* got) override;
  Status ReadPinned(const Location& loc, uint64_t offset, size_t len, PinnedBytes* out) override;
  Status ReadImpl(const Location& loc, uint64_t offset, size_t len, char* buf, PinnedBytes* pin, size_t* got);
  Status Sync() override;

  Status StatFs(uint64_t* live_bytes, uint64_t* files, uint64_t* backing_total,
                uint64_t* backing_avail) override;
  StoreStats GetStats() override;

  void SetChangeListener(std::function<void(const PeerChanges&)> fn) override {
    std::lock_guard<std::mutex> l(listener_mu_);
    listener_ = std::move(fn);
  }
  Status RefreshPeers() override;
  void RequestPeerRefresh() override;
  Status Checkpoint() override {
    if (!checkpointer_) return Status::InvalidArgument("store is not open");
    return checkpointer_->CheckpointNow(false);
  }
  Status PublishPeerProgress() override {
    if (!checkpointer_) return Status::InvalidArgument("store is not open");
    return checkpointer_->PublishPeers(true);
  }

 private:
  // Per-peer tailing state (peer thread only, or RefreshPeers under peer_mu_).
  struct PeerState {
    bool have_position = false;
    JournalPosition position;  // end of the last applied entry
    uint32_t idle_polls = 0;
    std::chrono::steady_clock::time_point next_poll{};
    // The journal file at `position` was missing: PURGED was checked for this position (once).
    bool purge_checked = false;
    JournalPosition purge_checked_at;
  };
  // PollPeer helpers (checkpoint.h): a missing file at our position = retired (-> newest snapshot) or
  // purged (-> forget the node's old data).
  Status ApplyPeerSnapshot(const std::string& node, const std::vector<SnapshotFile>& snaps, PeerState* st,
                           PeerChanges* out, uint64_t* changed);
  Status ForgetPurgedPeer(const std::string& node, uint64_t purge_generation, PeerChanges* out);
  void NotifyPeerChanges(const PeerChanges& out);
  void PeerLoop();
  // Reads and applies whatever is new in node's journals. *changed = entries applied.
  Status PollPeer(const std::string& node, PeerState* st, uint64_t* changed);

  // Queues a journal entry for the next group commit. Requires ns_mu_ (journal order = index order).
  void EnqueueLocked(JournalEntry e);
  void GroupCommitLoop();
  // One round: segments durable, then the given entries appended and durable.
  // Returns the round's error (entries re-queued). *lost: set when the round dropped entries that
  // publish records a failed segment sync may have lost (DropLostEntries); the round is OK otherwise.
  Status CommitRound(std::vector<JournalEntry>* batch, Status* lost);
  // Removes from batch the PUT / MOVE entries whose record lies in a retired segment writer's segment
  // past what its last successful fdatasync covered (SegmentWriter::MayBeLost). Returns how many.
  uint64_t DropLostEntries(std::vector<JournalEntry>* batch);
  void StopThreads();
  Status Rebuild();
  Status ReplayNode(const std::string& node, std::vector<JournalEntry>* cuts, const JournalPosition& from = {},
                    uint64_t* entries = nullptr);
  Status CatchUpOwnJournal();
  Status RecoverSegments();
  Result<std::shared_ptr<BackingFile>> SegmentFile(const SegmentId& id);
  Result<LruCache::Value> LoadValue(const Location& loc);
  Result<std::string> PathOf(uint64_t parent, std::string_view name) {
    auto dir = index_->FullPath(parent);
    if (!dir.ok()) return dir.status();
    return JoinPath(*dir, name);
  }

  StoreOptions opts_;
  Env* env_;
  LruCache cache_;
  HybridClock hlc_;
  std::unique_ptr<NodeDir> node_dir_;
  std::unique_ptr<IndexDb> index_;
  // The active segment writer. Replaced (ReopenSegmentWriter) after a failed fdatasync broke it: the
  // kernel may have dropped the dirty pages, so later records go to a fresh segment. Guarded by seg_mu_;
  // users take a reference with Segments().
  std::shared_ptr<SegmentWriter> segments_;
  // Writers replaced after a failed sync (guarded by seg_mu_): kept to tell which records are lost.
  std::vector<std::shared_ptr<SegmentWriter>> retired_writers_;
  std::mutex seg_mu_;
  std::shared_ptr<SegmentWriter> Segments() {
    std::lock_guard<std::mutex> l(seg_mu_);
    return segments_;
  }
  SegmentWriterOptions seg_opts_;
  void ReopenSegmentWriter();
  std::unique_ptr<JournalWriter> journal_;
  // Checkpoints, peers file, journal retirement (engine/checkpoint.h).
  std::unique_ptr<Checkpointer> checkpointer_;
  Status StartCheckpointer();
  Result<Checkpointer::Cut> CutForCheckpoint();
  bool closing_ = false;
  bool closed_ = false;
  std::vector<JournalEntry> startup_cuts_;   // CUTs found by the recovery, journaled first at start
  std::vector<JournalEntry> startup_seals_;  // SEALs of earlier generations' segments, journaled next
  uint64_t recovery_entries_ = 0, recovery_cuts_ = 0, recovery_seals_ = 0;  // set by Init

  std::mutex ns_mu_;  // namespace mutations + their journal entries
  // Staged inodes that took the name of a committed file by a rename (journaled as nothing, so that peers
  // see no ENOENT window before the staged file's PUT replaces it): the journal still has the replaced
  // file at the staged inode's path. Removing that name before the commit (unlink, rename away) must
  // journal its UNLINK, or peers and an index rebuilt from the journals resurrect the replaced content
  // (breaker-1 item 1). Guarded by ns_mu_; in memory only (staged inodes vanish at a crash, and a clean
  // close commits them first).
  std::unordered_set<uint64_t> shadowing_;
  bool XattrJournaled(uint64_t ino);  // requires ns_mu_

  // Group commit state, guarded by gc_mu_.
  std::mutex gc_mu_;
  std::condition_variable gc_cv_;    // wakes the commit thread
  std::condition_variable done_cv_;  // wakes Sync() waiters
  std::vector<JournalEntry> pending_;
  uint64_t rounds_started_ = 0, rounds_done_ = 0, last_ok_round_ = 0;
  Status last_round_status_;
  bool sync_requested_ = false;
  bool stop_ = false;
  // A round failed: its entries (re-queued in pending_, or kept by the journal writer) are owed to the
  // journal. The committer retries at retry_at_ (backoff interval .. kRetryMaxBackoff) without waiting
  // for new entries, or at once when space may have come back (KickCommit) or a Sync() asks.
  bool owed_ = false, retry_kick_ = false;
  std::chrono::milliseconds backoff_{0};
  std::chrono::steady_clock::time_point retry_at_{}, owed_since_{};
  std::thread gc_thread_;
  // Entries appended to the journal writer whose Sync has not succeeded yet (committer thread; read by
  // GetStats). Together with pending_ these are what a crash now would lose.
  std::atomic<uint64_t> appended_unsynced_{0}, journal_retries_{0};
  std::atomic<uint64_t> lost_entries_{0};  // StoreStats::lost_entries
  // Wakes the committer for an immediate retry of owed entries (space was freed).
  void KickCommit();
  uint64_t UnjournaledEntries();

  // Read side: open segment files, shared loads.
  std::mutex files_mu_;
  std::map<SegmentId, std::shared_ptr<BackingFile>> files_;
  struct Flight {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    LruCache::Value value;
  };
  std::mutex flights_mu_;
  std::map<std::string, std::shared_ptr<Flight>> flights_;

  // Peer tailing.
  std::mutex peer_mu_;  // serializes polls (peer thread vs RefreshPeers); guards peers_
  std::map<std::string, PeerState> peers_;
  std::mutex listener_mu_;
  std::function<void(const PeerChanges&)> listener_;
  std::mutex peer_wake_mu_;
  std::condition_variable peer_cv_;
  bool peer_wake_ = false, peer_stop_ = false;
  std::chrono::steady_clock::time_point last_early_poll_{}, followup_at_{};
  bool followup_pending_ = false;
  std::thread peer_thread_;
  std::atomic<uint64_t> peer_entries_applied_{0}, peer_polls_{0};
  // Per-peer figures for GetStats (own mutex: a scrape must not wait for a slow poll under peer_mu_).
  struct PeerStatsRec {
    uint64_t polls = 0, applied = 0;
    double lag_s = 0;
    bool polled = false;
    std::chrono::steady_clock::time_point last_poll{};
  };
  std::mutex peer_stats_mu_;
  std::map<std::string, PeerStatsRec> peer_stats_;
  void NotePeerPoll(const std::string& node, uint64_t applied, uint64_t newest_stamp);

  std::atomic<uint64_t> records_written_{0}, journal_entries_{0}, group_commits_{0}, checksum_failures_{0};
  std::atomic<uint64_t> cache_hits_{0}, cache_misses_{0};

  // ---- capacity and eviction (store.h "Capacity and eviction") ----
  Status InitEviction();
  void StopEvictor();
  void OnSealed(const SealedSegment& seg);
  void TrackAppendLocked(const Location& loc);  // requires cap_mu_
  Status ReserveSpace(uint64_t need);
  void NoteNoSpace();
  void EvictLoop();
  void EvictOnce();
  uint64_t PeerSegmentBytes();
  // Returns the bytes freed net of reinsertion (0 if the store is closing: then nothing is dropped).
  uint64_t DropSegment(const SegmentId& seg, bool reinsert);
  uint64_t ReinsertRecord(const SegmentId& seg, uint64_t record_offset, uint64_t ino, uint64_t budget);
  void UnlinkDue(bool all);
  void EnsureReserve();
  void ReleaseReserve();
  Status GoneOr(const Location& loc, Status s);  // a read failure of a dropped/vanished segment -> NotFound
  void NotifyListener(const std::vector<ApplyResult::Changed>& changed);
  bool OwnSegment(const SegmentId& id) const { return id.node == opts_.node_id; }

  bool evict_enabled_ = false;
  bool track_hits_ = false;
  uint64_t node_high_ = 0, node_low_ = 0, hard_limit_ = 0, global_high_ = 0, global_low_ = 0;
  std::chrono::milliseconds grace_{0};
  struct SegTrack {
    uint64_t bytes = 0;
    bool evictable = false;  // sealed, or of an older generation (never appended again)
    std::chrono::steady_clock::time_point evictable_since{};
    // Appends with a ticket <= this may have put a record in it before it was sealed (a batch of
    // appends seals the segment between two of them): not droppable until they have pinned it.
    uint64_t sealed_after_ticket = 0;
  };
  // AppendWith tickets (cap_mu_): a record is pinned only after its append returns, so a segment
  // sealed meanwhile must wait for every append in flight at its seal (DropCandidateLocked).
  uint64_t next_append_ticket_ = 1;
  std::set<uint64_t> appends_in_flight_;
  bool DropCandidateLocked(const SegmentId& id, const SegTrack& t) const {
    return t.evictable && !pins_.count(id) &&
           (appends_in_flight_.empty() || *appends_in_flight_.begin() > t.sealed_after_ticket);
  }
  void ReclaimDeadSegments();
  bool bounded_ = false;  // capacity or global watermark set: live data may be evicted
  // RESERVE released for a full backing, or not creatable for lack of space: record writes then keep
  // that much of the backing free for the journal (so deletes work) until RESERVE is back.
  std::atomic<bool> hold_reserve_{false};
  // Records written by WriteRecord* / WriteProvisionalRecord and not released yet (ReleaseRecordPin, or
  // CommitFile of that record), by (segment, record offset); pins_ counts them per segment. A segment
  // with a pinned record is never dropped, neither as dead nor by eviction.
  std::set<std::pair<SegmentId, uint64_t>> pinned_records_;
  std::map<SegmentId, uint64_t> pins_;
  void ReleaseRecordPinLocked(const Location& loc);
  uint64_t ReserveBytes() const { return std::min(kReserveMaxBytes, opts_.segment_size / 4); }
  std::chrono::steady_clock::time_point last_dead_scan_{};
  struct Dropping {
    SegmentId id;
    uint64_t bytes = 0;
    std::chrono::steady_clock::time_point due;
  };
  std::mutex cap_mu_;  // lock order: ns_mu_ -> cap_mu_; never held across I/O
  std::condition_variable evict_cv_;  // wakes the evictor
  std::condition_variable space_cv_;  // wakes writers waiting for space
  std::map<SegmentId, SegTrack> own_segs_;  // this node's segment files, oldest first
  std::set<SegmentId> dropped_own_;         // this node's segments dropped during this mount
  std::deque<Dropping> dropping_;           // dropped, waiting for their unlink (due order)
  uint64_t node_bytes_ = 0, dropping_bytes_ = 0, inflight_bytes_ = 0;
  bool evict_stop_ = false, evict_wake_ = false, emergency_ = false, stuck_ = false;
  bool reserve_present_ = false;            // evictor thread (and Init) only
  std::thread evict_thread_;
  std::mutex hits_mu_;
  // Own segments: record offset -> hits (reads at offset 0) / -> inode committed there.
  std::map<SegmentId, std::unordered_map<uint64_t, uint32_t>> hits_;
  std::map<SegmentId, std::unordered_map<uint64_t, uint64_t>> loc_ino_;
  std::atomic<uint64_t> segments_dropped_{0}, segment_bytes_dropped_{0}, segments_unlinked_{0};
  std::atomic<uint64_t> records_reinserted_{0}, bytes_reinserted_{0}, writer_waits_{0}, nospace_events_{0};
};

// ---------------------------------------------------------------------------------------------------
// Open / rebuild / close

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& opts) {
  auto store = std::make_unique<StoreImpl>(opts);
  Status s = store->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<Store>(std::move(store));
}

Status StoreImpl::Init() {
  if (opts_.backing_dir.empty()) return Status::InvalidArgument("no backing directory given");
  if (opts_.node_id.empty()) opts_.node_id = DefaultNodeId();
  KVFS_RETURN_IF_ERROR(ValidateNodeId(opts_.node_id));
  if (opts_.segment_size < (1ull << 20) || opts_.segment_size % kAlignment != 0) {
    return Status::InvalidArgument("segment size must be a multiple of 4 KiB and at least 1 MiB");
  }
  if (opts_.index_dir.empty()) {
    uint64_t h = XXH3_64bits(opts_.backing_dir.data(), opts_.backing_dir.size());
    char buf[32];
    snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
    opts_.index_dir = std::string("/var/lib/kvfs/") + buf + "-" + opts_.node_id;
  }

  // The index first: a refused mount (index dir held by another mount) must not write anything to the
  // shared backing store. Rebuilt below when new, not closed cleanly, or unusable.
  KVFS_RETURN_IF_ERROR(Env::Posix()->CreateDirs(opts_.index_dir));
  IndexDbOptions io;
  io.dir = opts_.index_dir;
  io.node_id = opts_.node_id;
  auto idx = IndexDb::Open(io);
  if (!idx.ok() && idx.status().IsBusy()) return idx.status();
  NodeDirOptions nd;
  nd.env = env_;
  nd.backing_dir = opts_.backing_dir;
  nd.node_id = opts_.node_id;
  nd.force = opts_.force_takeover;
  {
    // A full backing store: the takeover's HEARTBEAT/OWNER rewrites need a few blocks. This node's
    // RESERVE (kept by the previous mount for exactly this) gives them back, so a remount works and the
    // user can delete files; the evictor recreates it once there is room.
    uint64_t total = 0, avail = 0;
    if (env_->StatFs(opts_.backing_dir, &total, &avail).ok() && avail < 2 * kReserveMaxBytes) {
      Status r = env_->Remove(NodeDirPath(opts_.backing_dir, opts_.node_id) + "/" + kReserveName);
      if (r.ok()) spdlog::warn("kvfs: backing store nearly full ({} bytes free): released RESERVE", avail);
    }
  }
  auto acquired = NodeDir::Acquire(nd);
  if (!acquired.ok()) return acquired.status();
  node_dir_ = std::move(*acquired);
  spdlog::info("kvfs: node {} generation {} ({})", opts_.node_id, node_dir_->generation(),
               node_dir_->takeover_reason());

  bool rebuild = !idx.ok() || (*idx)->Created() || !(*idx)->WasCleanlyClosed();
  if (!rebuild && IndexPredatesPurge(env_, opts_.backing_dir, opts_.node_id, idx->get())) {
    spdlog::warn("kvfs: node {} was purged after index {} was last used; rebuilding", opts_.node_id, io.dir);
    rebuild = true;
  }
  if (!idx.ok()) spdlog::warn("kvfs: index {} unusable ({}); rebuilding", io.dir, idx.status().ToString());
  if (rebuild && idx.ok() && (*idx)->Created()) {
    index_ = std::move(*idx);  // empty: replay straight into it
    KVFS_RETURN_IF_ERROR(Rebuild());
  } else if (rebuild) {
    if (idx.ok()) (*idx)->Close();
    KVFS_RETURN_IF_ERROR(IndexDb::Destroy(io.dir));
    auto fresh = IndexDb::Open(io);
    if (!fresh.ok()) return fresh.status();
    index_ = std::move(*fresh);
    KVFS_RETURN_IF_ERROR(Rebuild());
  } else {
    index_ = std::move(*idx);
    KVFS_RETURN_IF_ERROR(CatchUpOwnJournal());
  }
  KVFS_RETURN_IF_ERROR(RecoverSegments());
  KVFS_RETURN_IF_ERROR(index_->MarkOpen());
  hlc_.SetFloor(index_->HlcFloor());

  SegmentWriterOptions so;
  so.segment_size = opts_.segment_size;
  so.direct_io = opts_.direct_io;
  so.seal_on_close = true;
  so.on_seal = [this](const SealedSegment& seg) { OnSealed(seg); };
  seg_opts_ = so;
  auto sw = SegmentWriter::Open(env_, node_dir_->seg_dir(), opts_.node_id, node_dir_->generation(), so);
  if (!sw.ok()) return sw.status();
  segments_ = std::shared_ptr<SegmentWriter>(std::move(*sw));

  JournalWriterOptions jo;
  jo.env = env_;
  jo.dir = node_dir_->dir();
  jo.node = opts_.node_id;
  jo.generation = node_dir_->generation();
  auto jw = JournalWriter::Open(jo);
  if (!jw.ok()) return jw.status();
  journal_ = std::move(*jw);

  {
    std::lock_guard<std::mutex> l(ns_mu_);
    // CUTs first: replay and kvfs-fsck read them at the head of journal-<generation>-0.
    for (auto& cut : startup_cuts_) {
      cut.stamp = hlc_.Now();
      EnqueueLocked(std::move(cut));
    }
    startup_cuts_.clear();
    for (auto& seal : startup_seals_) {
      seal.stamp = hlc_.Now();
      EnqueueLocked(std::move(seal));
    }
    startup_seals_.clear();
  }
  gc_thread_ = std::thread([this] { GroupCommitLoop(); });
  node_dir_->StartHeartbeat(std::chrono::milliseconds(opts_.heartbeat_interval_ms));
  // Resume tailing each peer where the index says it stopped (rebuild or previous mount).
  for (const auto& [node, pos] : index_->GetAppliedPositions()) {
    if (node == opts_.node_id) continue;
    PeerState st;
    unsigned long long g = 0, n = 0, off = 0;
    if (sscanf(pos.c_str(), "%llu-%llu@%llu", &g, &n, &off) == 3) {
      st.have_position = true;
      st.position = JournalPosition{g, n, off};
    }
    peers_[node] = st;
  }
  if (opts_.peer_poll_ms > 0) peer_thread_ = std::thread([this] { PeerLoop(); });
  KVFS_RETURN_IF_ERROR(InitEviction());
  KVFS_RETURN_IF_ERROR(StartCheckpointer());
  // Make the fresh journal file, the CUTs and the directory entries durable before serving.
  return Sync();
}

Status StoreImpl::Rebuild() {
  auto t0 = std::chrono::steady_clock::now();
  auto nodes = ListNodes(env_, opts_.backing_dir);
  if (!nodes.ok()) return nodes.status();
  for (const auto& node : *nodes) KVFS_RETURN_IF_ERROR(ReplayNode(node, &startup_cuts_));
  auto st = index_->GetStats();
  spdlog::info("kvfs: index rebuilt from {} node(s): {} files, {} dirs, {} live bytes in {} ms", nodes->size(),
               st.files, st.directories, st.live_bytes,
               std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
                   .count());
  return Status::OK();
}

// A clean index holds this node's own entries up to its applied position of this node (recorded at the
// clean close, or by the rebuild that made it). Entries appended to the node's journal after that — by
// `kvfs-fsck --repair` (CUT, SEAL, UNLINK in a generation of its own) or by a mount of this node that
// used another index directory — are applied now, before anything is served.
Status StoreImpl::CatchUpOwnJournal() {
  JournalPosition from;
  auto pos = index_->GetAppliedPosition(opts_.node_id);
  if (pos.ok()) {
    unsigned long long g = 0, n = 0, off = 0;
    if (sscanf(pos->c_str(), "%llu-%llu@%llu", &g, &n, &off) != 3) {
      return Status::Corruption("index: bad applied position '" + *pos + "' of node " + opts_.node_id);
    }
    from = JournalPosition{g, n, off};
  } else if (!pos.status().IsNotFound()) {
    return pos.status();
  }
  uint64_t entries = 0;
  KVFS_RETURN_IF_ERROR(ReplayNode(opts_.node_id, &startup_cuts_, from, &entries));
  recovery_entries_ += entries;
  if (entries > 0) {
    spdlog::info("kvfs: applied {} entries of this node's journal written after {} while it was down "
                 "(kvfs-fsck --repair?)", entries, from.ToString());
  }
  return Status::OK();
}

// This node's directory after a takeover: stale temp files removed; segments of earlier generations:
// torn tails cut, unsealed ones sealed, lost SEALs journaled (engine/recovery.h). The entries lead the
// new generation's journal (Init).
Status StoreImpl::RecoverSegments() {
  uint64_t removed = 0;
  KVFS_RETURN_IF_ERROR(RemoveStaleTempFiles(env_, opts_.backing_dir, opts_.node_id, &removed));
  SegmentRecoveryPlan plan;
  KVFS_RETURN_IF_ERROR(PlanSegmentRecovery(env_, opts_.backing_dir, opts_.node_id, node_dir_->generation(),
                                           index_.get(), &plan));
  for (const auto& e : plan.seals) KVFS_RETURN_IF_ERROR(index_->SetSegmentState(e.segment, SegmentState::kSealed));
  // The index keeps the CUTs (SegmentInfo::cut) for the snapshots: the journal file that holds them is
  // retired behind a later snapshot, the segment file is not.
  for (const auto& e : plan.cuts) {
    const SegmentId id{e.cut_file.node, e.cut_file.generation, e.cut_file.number};
    KVFS_RETURN_IF_ERROR(index_->SetSegmentCut(id, e.cut_offset));
  }
  recovery_cuts_ += plan.cuts.size();
  recovery_seals_ += plan.seals.size();
  for (auto& e : plan.cuts) startup_cuts_.push_back(std::move(e));
  for (auto& e : plan.seals) startup_seals_.push_back(std::move(e));
  return Status::OK();
}

// Replays `node`'s journals (after `from`) into the index with the shared rules of index/replay.h (the
// same code `kvfs-fsck --rebuild-index` runs). A torn tail of one of this node's own files that no CUT
// covers yet yields a CUT entry in *cuts, journaled by the new generation. *entries = entries read.
Status StoreImpl::ReplayNode(const std::string& node, std::vector<JournalEntry>* cuts, const JournalPosition& from,
                             uint64_t* entries) {
  ReplayNodeResult result;
  KVFS_RETURN_IF_ERROR(kvfs::ReplayNode(env_, opts_.backing_dir, node, index_.get(), &result, from));
  if (entries) *entries = result.entries;
  for (const auto& f : result.files) {
    if (!f.opened || !f.status.ok()) {
      spdlog::error("kvfs: journal {}: {}", f.file.path, ErrnoText(f.status));
      continue;
    }
    const auto& rep = f.report;
    if (rep.corrupt_regions > 0) {
      spdlog::error("kvfs: journal {}: {} damaged region(s), {} bytes skipped", f.file.path, rep.corrupt_regions,
                    rep.corrupt_bytes);
    }
    if (rep.end == JournalEnd::kTorn && node == opts_.node_id && f.limit == UINT64_MAX) {
      spdlog::warn("kvfs: journal {}: torn tail of {} bytes at offset {}; cutting", f.file.path, rep.tail_bytes,
                   rep.valid_end.offset);
      FileRef ref;
      ref.kind = FileRef::Kind::kJournal;
      ref.node = node;
      ref.generation = f.file.generation;
      ref.number = f.file.number;
      cuts->push_back(JournalEntry::Cut(ref, rep.valid_end.offset, 0));
    }
  }
  return Status::OK();
}

void StoreImpl::StopThreads() {
  if (checkpointer_) checkpointer_->Stop();
  StopEvictor();
  if (node_dir_) node_dir_->StopHeartbeat();
  {
    std::lock_guard<std::mutex> l(peer_wake_mu_);
    peer_stop_ = true;
  }
  peer_cv_.notify_all();
  if (peer_thread_.joinable()) peer_thread_.join();
  {
    std::lock_guard<std::mutex> l(gc_mu_);
    stop_ = true;
  }
  gc_cv_.notify_all();
  if (gc_thread_.joinable()) gc_thread_.join();
}

Status StoreImpl::Close() {
  if (closed_) return Status::OK();
  StopEvictor();  // no reinsertion may race with Segments()->Close()
  Status s = Sync();
  if (!s.ok()) {
    // Entries are owed to the journal (a full or failing backing store). The evictor is stopped, so
    // RESERVE is freed here for the journal; then a few more tries before the failure is reported
    // (kvfs umount / the daemon's exit status): the files those entries publish would be missing at the
    // next mount.
    if (s.IsNoSpace()) ReleaseReserve();
    for (int i = 0; i < kCloseRetries && !s.ok(); i++) {
      std::this_thread::sleep_for(kCloseRetryWait);
      s = Sync();
    }
    if (!s.ok()) {
      spdlog::error("kvfs: close: {} journal entries could not be journaled ({}); the files and changes they "
                    "publish are lost at the next mount", UnjournaledEntries(), ErrnoText(s));
    }
  }
  if (s.ok() && lost_entries_ > 0) {
    // The index holds files whose PUT was dropped (their records may be lost): it must not be marked
    // clean, so the next mount rebuilds it from the journals, without them.
    s = Status::IOError(std::to_string(lost_entries_.load()) +
                        " file(s) lost to a failed segment sync were not journaled");
    spdlog::error("kvfs: close: {}; they are absent (or their previous version) at the next mount", s.message());
  }
  StopThreads();
  closed_ = true;
  if (s.ok()) s = Segments()->Close();
  std::vector<JournalEntry> sealed;
  for (const auto& seg : Segments()->TakeSealed()) sealed.push_back(JournalEntry::Seal(seg.id, hlc_.Now()));
  for (auto& e : sealed) journal_->Append(e);
  if (s.ok()) s = journal_->Sync();
  for (const auto& e : sealed) index_->SetSegmentState(e.segment, SegmentState::kSealed);
  if (s.ok() && checkpointer_) {
    // Clean unmount: a snapshot of everything journaled since the last one, and our final read positions.
    closing_ = true;
    Status c = opts_.checkpoint_on_close ? checkpointer_->CheckpointNow(true) : Status::OK();
    if (!c.ok()) spdlog::error("kvfs: checkpoint at unmount: {}", c.ToString());
    c = checkpointer_->PublishPeers(false);
    if (!c.ok()) spdlog::warn("kvfs: peers file at unmount: {}", c.ToString());
  }
  if (s.ok()) {
    // The index holds this node's entries up to here: the next mount applies only what follows
    // (CatchUpOwnJournal).
    auto r = index_->ApplyBatch({}, opts_.node_id, journal_->synced_position().ToString());
    if (!r.ok()) s = r.status();
  }
  if (s.ok()) {
    index_->SetHlcFloor(hlc_.Now());
    s = index_->MarkClean();
  }
  if (s.ok()) s = node_dir_->Release();
  index_->Close();
  if (!s.ok()) spdlog::error("kvfs: close: {}", ErrnoText(s));
  return s;
}

// ---------------------------------------------------------------------------------------------------
// Group commit

void StoreImpl::EnqueueLocked(JournalEntry e) {
  bool first;
  {
    std::lock_guard<std::mutex> l(gc_mu_);
    first = pending_.empty();
    pending_.push_back(std::move(e));
  }
  // The first entry of a group starts the group-commit interval; later ones just join it.
  if (first) gc_cv_.notify_one();
}

void StoreImpl::GroupCommitLoop() {
  const auto interval = std::chrono::milliseconds(std::max<uint32_t>(1, opts_.group_commit_interval_ms));
  std::unique_lock<std::mutex> l(gc_mu_);
  for (;;) {
    if (owed_) {
      // Entries are owed to the journal after a failed round: retry after the backoff, at once when
      // space may be back (KickCommit) or a Sync() caller asks, without waiting for new entries.
      gc_cv_.wait_until(l, retry_at_, [&] { return stop_ || sync_requested_ || retry_kick_; });
    } else {
      // Wait for work: a Sync() caller, or queued entries (then wait out the interval to gather a group).
      gc_cv_.wait(l, [&] { return stop_ || sync_requested_ || !pending_.empty(); });
      if (!sync_requested_ && !stop_) {
        gc_cv_.wait_for(l, interval, [&] { return stop_ || sync_requested_; });
      }
    }
    if (stop_ && pending_.empty() && !sync_requested_ && !owed_) break;
    sync_requested_ = false;
    retry_kick_ = false;
    std::vector<JournalEntry> batch;
    batch.swap(pending_);
    const uint64_t round = ++rounds_started_;
    l.unlock();
    Status lost;
    Status s = CommitRound(&batch, &lost);
    // A full backing store: the evictor frees RESERVE (and reclaims dead segments) so the journal can
    // take the owed entries; it kicks this thread when it did.
    if (s.IsNoSpace()) NoteNoSpace();
    l.lock();
    const auto now = std::chrono::steady_clock::now();
    if (!s.ok()) {
      // Keep the entries for the next round, in order ahead of anything queued meanwhile (they are still
      // owed to the journal); report the error to the waiters of this round.
      pending_.insert(pending_.begin(), std::make_move_iterator(batch.begin()),
                      std::make_move_iterator(batch.end()));
      LogLimited(spdlog::level::err, LogKey("group-commit", s),
                 "kvfs: group commit failed: {} ({} entries not journaled yet, retrying)", ErrnoText(s),
                 pending_.size() + appended_unsynced_.load());
      if (!owed_) {
        owed_since_ = now;
        backoff_ = interval;
      } else {
        backoff_ = std::min<std::chrono::milliseconds>(2 * backoff_, kRetryMaxBackoff);
      }
      owed_ = true;
      retry_at_ = now + backoff_;
      journal_retries_++;
    } else {
      if (owed_) {
        spdlog::info("kvfs: journal writable again: owed entries journaled after {} ms of failures",
                     std::chrono::duration_cast<std::chrono::milliseconds>(now - owed_since_).count());
      }
      owed_ = false;
      // A round that dropped lost entries fails its Sync() callers (fsync reports the loss).
      if (lost.ok()) last_ok_round_ = round;
    }
    last_round_status_ = s.ok() ? lost : s;
    rounds_done_ = round;
    done_cv_.notify_all();
    if (stop_ && (pending_.empty() || !s.ok())) break;
  }
}

void StoreImpl::KickCommit() {
  {
    std::lock_guard<std::mutex> l(gc_mu_);
    if (!owed_) return;
    retry_kick_ = true;
  }
  gc_cv_.notify_all();
}

uint64_t StoreImpl::UnjournaledEntries() {
  std::lock_guard<std::mutex> l(gc_mu_);
  return pending_.size() + appended_unsynced_.load();
}

uint64_t StoreImpl::DropLostEntries(std::vector<JournalEntry>* batch) {
  std::vector<std::shared_ptr<SegmentWriter>> retired;
  {
    std::lock_guard<std::mutex> l(seg_mu_);
    retired = retired_writers_;
  }
  if (retired.empty()) return 0;
  uint64_t dropped = 0;
  size_t kept = 0;
  for (size_t i = 0; i < batch->size(); i++) {
    JournalEntry& e = (*batch)[i];
    bool lost = false;
    if ((e.op == JournalOp::kPut || e.op == JournalOp::kMove) && !e.location.empty()) {
      for (const auto& w : retired) lost = lost || w->MayBeLost(e.location);
    }
    if (lost) {
      dropped++;
      spdlog::error("kvfs: {} {} not journaled: its record (segment {}-{} offset {}) was written before a "
                    "failed segment sync and may be lost; the file is absent (or its previous version) after "
                    "the next mount", JournalOpName(e.op), e.path, e.location.segment.generation,
                    e.location.segment.seq, e.location.record_offset);
      continue;
    }
    if (kept != i) (*batch)[kept] = std::move(e);
    kept++;
  }
  batch->resize(kept);
  lost_entries_ += dropped;
  return dropped;
}

Status StoreImpl::CommitRound(std::vector<JournalEntry>* batch, Status* lost) {
  // 1. Records first: every entry in the batch points at a record appended before it was queued.
  auto segments = Segments();
  Status s = segments->Sync();
  if (!s.ok()) {
    // The entries stay queued (the caller re-queues the batch); the writer is broken for good, so
    // records written from now on go to a new segment, and the entries pointing at its records that
    // were not durable yet are dropped by the next rounds (DESIGN §7: never journal a PUT of lost bytes).
    ReopenSegmentWriter();
    return s;
  }
  // Entries publishing records that a failed sync may have lost: never journaled (DESIGN §7).
  if (const uint64_t n = DropLostEntries(batch)) {
    *lost = Status::IOError(std::to_string(n) + " file(s) not made durable: a segment fdatasync failed after "
                            "their records were written");
  }
  // 2. Segments sealed since the last round are journaled as SEAL.
  for (const auto& seg : segments->TakeSealed()) {
    batch->push_back(JournalEntry::Seal(seg.id, hlc_.Now()));
    index_->SetSegmentState(seg.id, SegmentState::kSealed);
  }
  // 3. The journal entries, durable. Once appended, the journal writer owns them: a failed Sync keeps
  // their bytes and rewrites them at the next one, so they are not re-queued here (no duplicates).
  journal_entries_ += batch->size();
  for (const auto& e : *batch) journal_->Append(e);
  appended_unsynced_ += batch->size();
  batch->clear();
  if (journal_->synced_position() == journal_->appended_position()) {
    appended_unsynced_ = 0;
    return Status::OK();
  }
  KVFS_RETURN_IF_ERROR(journal_->Sync());
  appended_unsynced_ = 0;
  group_commits_++;
  return Status::OK();
}

void StoreImpl::ReopenSegmentWriter() {
  std::lock_guard<std::mutex> l(seg_mu_);
  SegmentWriterOptions so = seg_opts_;
  so.first_seq = segments_->ActiveSegment().seq + 1;
  auto sw = SegmentWriter::Open(env_, node_dir_->seg_dir(), opts_.node_id, node_dir_->generation(), so);
  if (!sw.ok()) {
    spdlog::error("kvfs: cannot open a new segment writer after a failed sync: {}", sw.status().ToString());
    return;
  }
  spdlog::warn("kvfs: segment sync failed; new records go to segment {}", so.first_seq);
  retired_writers_.push_back(segments_);
  segments_ = std::shared_ptr<SegmentWriter>(std::move(*sw));
}

Status StoreImpl::Sync() {
  std::unique_lock<std::mutex> l(gc_mu_);
  if (stop_ && !gc_thread_.joinable()) return Status::OK();
  // The round that starts after this point covers everything enqueued before the call.
  const uint64_t target = rounds_started_ + 1;
  sync_requested_ = true;
  gc_cv_.notify_all();
  done_cv_.wait(l, [&] { return rounds_done_ >= target || (stop_ && !gc_thread_.joinable()); });
  if (last_ok_round_ >= target) return Status::OK();
  return last_round_status_.ok() ? Status::IOError("group commit did not complete") : last_round_status_;
}

// ---------------------------------------------------------------------------------------------------
// Namespace mutations

Result<Node> StoreImpl::Mkdir(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid,
                              uint32_t gid) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  const uint64_t stamp = hlc_.Now();
  auto n = index_->Mkdir(parent, name, mode, uid, gid, stamp);
  if (!n.ok()) return n;
  EnqueueLocked(JournalEntry::Mkdir(*path, ToEntryAttrs(n->attr), stamp));
  return n;
}

Status StoreImpl::Rmdir(uint64_t parent, std::string_view name) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  KVFS_RETURN_IF_ERROR(index_->Rmdir(parent, name));
  EnqueueLocked(JournalEntry::Rmdir(*path, hlc_.Now()));
  return Status::OK();
}

Result<Node> StoreImpl::Symlink(uint64_t parent, std::string_view name, std::string_view target, uint32_t uid,
                                uint32_t gid) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  const uint64_t stamp = hlc_.Now();
  auto n = index_->Symlink(parent, name, target, uid, gid, stamp);
  if (!n.ok()) return n;
  EnqueueLocked(JournalEntry::Symlink(*path, std::string(target), ToEntryAttrs(n->attr), stamp));
  return n;
}

Status StoreImpl::Unlink(uint64_t parent, std::string_view name, uint64_t* ino_out) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto existing = index_->Lookup(parent, name);
  if (!existing.ok()) return existing.status();
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  const bool journaled = existing->committed || shadowing_.count(existing->attr.ino) != 0;
  const uint64_t stamp = journaled ? hlc_.Now() : 0;
  auto removed = index_->Unlink(parent, name, stamp);
  if (!removed.ok()) return removed.status();
  shadowing_.erase(removed->attr.ino);
  if (ino_out) *ino_out = removed->attr.ino;
  if (journaled) EnqueueLocked(JournalEntry::Unlink(*path, stamp));
  return Status::OK();
}

Status StoreImpl::Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                         std::string_view new_name, unsigned flags, uint64_t* replaced_ino) {
  std::lock_guard<std::mutex> l(ns_mu_);
  if (replaced_ino) *replaced_ino = 0;
  auto src = index_->Lookup(parent, name);
  if (!src.ok()) return src.status();
  auto from = PathOf(parent, name);
  if (!from.ok()) return from.status();
  auto to = PathOf(new_parent, new_name);
  if (!to.ok()) return to.status();
  // A committed source (or a directory: its entries are journaled by path) is journaled as RENAME; a
  // staged file is not in the journal yet: its later PUT goes under the new name.
  const bool journaled = src->committed || S_ISDIR(src->attr.mode);
  const uint64_t stamp = hlc_.Now();
  auto r = index_->Rename(parent, name, new_parent, new_name, flags, journaled ? stamp : 0);
  if (!r.ok()) return r.status();
  if (r->replaced && replaced_ino) *replaced_ino = r->replaced_node.attr.ino;
  const uint64_t src_ino = src->attr.ino;
  if (!r->replaced && r->moved.parent == parent && r->moved.name == name) {
    return Status::OK();  // renamed onto itself: nothing changed
  }
  // Does the journal hold a file at `to` that this rename removes? A committed destination, or a staged
  // one that itself replaced a committed file there.
  bool dst_in_journal = false;
  if (r->replaced) {
    const uint64_t d = r->replaced_node.attr.ino;
    dst_in_journal = r->replaced_node.committed || shadowing_.count(d) != 0;
    shadowing_.erase(d);
  }
  if (journaled) {
    EnqueueLocked(JournalEntry::Rename(*from, *to, src->location, stamp));
    return Status::OK();
  }
  // A staged source that had replaced a committed file at `from` moves away: that name is gone now, so
  // the file the journal still has there is unlinked.
  if (shadowing_.erase(src_ino) != 0) EnqueueLocked(JournalEntry::Unlink(*from, stamp));
  // A staged source replacing a committed destination journals nothing now: its PUT under the new name
  // (at commit, a few ms later) replaces the destination for peers in one step. Journaling an UNLINK
  // here would show peers an ENOENT window on every temp + rename publish (cases.md case 2). If the
  // staged file is discarded instead (unlinked or renamed away before its commit), that UNLINK is
  // journaled then (shadowing_).
  if (dst_in_journal) shadowing_.insert(src_ino);
  return Status::OK();
}

Result<Attr> StoreImpl::SetAttr(uint64_t ino, const Attr& attr, uint32_t mask) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto n = index_->GetInode(ino);
  if (!n.ok()) return n.status();
  const bool journaled = n->committed || S_ISDIR(n->attr.mode);
  const uint64_t stamp = journaled ? hlc_.Now() : 0;
  auto a = index_->SetAttr(ino, attr, mask, stamp);
  if (!a.ok() || !journaled || ino == kRootIno) return a;
  auto path = index_->FullPath(ino);
  if (path.ok()) EnqueueLocked(JournalEntry::Setattr(*path, ToEntryAttrs(*a), mask, stamp));
  return a;
}

// A staged file's xattrs are journaled with its PUT (the PUT carries the whole set), not one by one: an
// XATTR entry for a path peers do not have yet (or still bind to the file it replaces) would be lost or
// land on the wrong file (breaker-1 item 4).
bool StoreImpl::XattrJournaled(uint64_t ino) {
  auto n = index_->GetInode(ino);
  return ino != kRootIno && n.ok() && (n->committed || !S_ISREG(n->attr.mode));
}

Status StoreImpl::SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags) {
  std::lock_guard<std::mutex> l(ns_mu_);
  const uint64_t stamp = hlc_.Now();
  KVFS_RETURN_IF_ERROR(index_->SetXattr(ino, name, value, flags, stamp));
  auto path = index_->FullPath(ino);
  if (path.ok() && XattrJournaled(ino)) {
    EnqueueLocked(JournalEntry::Xattr(*path, std::string(name), std::string(value), false, stamp));
  }
  return Status::OK();
}

Status StoreImpl::RemoveXattr(uint64_t ino, std::string_view name) {
  std::lock_guard<std::mutex> l(ns_mu_);
  const uint64_t stamp = hlc_.Now();
  KVFS_RETURN_IF_ERROR(index_->RemoveXattr(ino, name, stamp));
  auto path = index_->FullPath(ino);
  if (path.ok() && XattrJournaled(ino)) EnqueueLocked(JournalEntry::Xattr(*path, std::string(name), "", true, stamp));
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------------
// Data

Result<Location> StoreImpl::AppendRecord(uint64_t ino, const std::vector<std::string_view>& parts,
                                         uint16_t flags) {
  uint64_t len = 0;
  for (auto p : parts) len += p.size();
  return AppendWith(ino, len, flags, [&](const std::string& tag, uint64_t stamp) {
    return Segments()->Append(tag, stamp, parts, flags);
  });
}

Result<Location> StoreImpl::WriteRecordStreamed(uint64_t ino, uint64_t length, const RecordSource& source) {
  return AppendWith(ino, length, 0, [&](const std::string& tag, uint64_t stamp) {
    return Segments()->AppendStreamed(tag, stamp, length, source);
  });
}

void StoreImpl::ReleaseRecordPinLocked(const Location& loc) {
  if (loc.empty() || pinned_records_.erase({loc.segment, loc.record_offset}) == 0) return;
  auto it = pins_.find(loc.segment);
  if (it != pins_.end() && --it->second == 0) {
    pins_.erase(it);
    stuck_ = false;  // a segment may be evictable again
    evict_wake_ = true;
  }
}

void StoreImpl::ReleaseRecordPin(const Location& loc) {
  if (loc.empty()) return;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    ReleaseRecordPinLocked(loc);
  }
  evict_cv_.notify_one();
}

Result<Location> StoreImpl::AppendWith(uint64_t ino, uint64_t len, uint16_t flags,
                                       const std::function<Result<Location>(const std::string&, uint64_t)>& fn) {
  auto path = index_->FullPath(ino);
  // A staged file that was unlinked (or detached) still writes its record: it may be renamed back or
  // committed; the record tag is informational.
  std::string tag = path.ok() ? *path : "/.kvfs-detached/" + std::to_string(ino);
  uint64_t need = 0;
  if (evict_enabled_) {
    need = AlignUp(len) + kAlignment;  // value + its metadata block (path, checksum table)
    if (hold_reserve_.load()) {
      // The backing was full: one statvfs per record until RESERVE is back (store.h).
      uint64_t total = 0, avail = 0;
      if (env_->StatFs(opts_.backing_dir, &total, &avail).ok() && avail < ReserveBytes() + need) {
        NoteNoSpace();
        return Status::NoSpace("backing store full (" + std::to_string(avail) +
                               " bytes free, kept for the journal until deleted files are reclaimed)");
      }
    }
    if (opts_.capacity_bytes) KVFS_RETURN_IF_ERROR(ReserveSpace(need));
  }
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    ticket = next_append_ticket_++;
    appends_in_flight_.insert(ticket);
  }
  auto loc = fn(tag, hlc_.Now());
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    if (loc.ok() && pinned_records_.emplace(loc->segment, loc->record_offset).second) {
      pins_[loc->segment]++;  // until ReleaseRecordPin / CommitFile: never dropped (dead or evicted)
    }
    appends_in_flight_.erase(ticket);
  }
  if (loc.ok()) records_written_++;
  if (evict_enabled_) {
    std::lock_guard<std::mutex> l(cap_mu_);
    if (opts_.capacity_bytes) inflight_bytes_ -= need;
    if (loc.ok()) TrackAppendLocked(*loc);
  }
  if (!loc.ok() && loc.status().IsNoSpace()) NoteNoSpace();
  return loc;
}

Status StoreImpl::CommitFile(uint64_t ino, const Location& loc, const Attr& attr) {
  std::lock_guard<std::mutex> l(ns_mu_);
  if (evict_enabled_ && !loc.empty() && OwnSegment(loc.segment)) {
    std::lock_guard<std::mutex> c(cap_mu_);
    if (dropped_own_.count(loc.segment)) {
      return Status::NoSpace("the record's segment was evicted before the file was committed");
    }
  }
  const uint64_t stamp = hlc_.Now();
  auto n = index_->CommitFile(ino, loc, attr, stamp);
  if (!n.ok()) return n.status();
  shadowing_.erase(ino);  // its PUT replaces whatever the journal had at its path
  auto path = index_->FullPath(ino);
  if (!path.ok()) return path.status();
  JournalEntry put = JournalEntry::Put(*path, loc, ToEntryAttrs(n->attr), stamp);
  // The file's xattrs travel with its content (set while it was staged, or kept by a new version).
  put.xattrs.emplace();
  auto names = index_->ListXattr(ino);
  if (!names.ok()) return names.status();
  std::sort(names->begin(), names->end());
  for (auto& name : *names) {
    auto v = index_->GetXattr(ino, name);
    if (!v.ok()) return v.status();
    put.xattrs->emplace_back(std::move(name), std::move(*v));
  }
  EnqueueLocked(std::move(put));
  if (track_hits_ && !loc.empty() && OwnSegment(loc.segment)) {
    std::lock_guard<std::mutex> h(hits_mu_);
    loc_ino_[loc.segment][loc.record_offset] = n->attr.ino;
  }
  if (!loc.empty()) {
    // Committed: from now on the record is the file's content and ages like any other (store.h).
    std::lock_guard<std::mutex> c(cap_mu_);
    ReleaseRecordPinLocked(loc);
  }
  return Status::OK();
}

Result<Node> StoreImpl::Renumber(uint64_t ino, uint64_t to) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto n = index_->Renumber(ino, to);
  if (!n.ok()) return n.status();
  const Location& loc = n->location;
  if (track_hits_ && !loc.empty() && OwnSegment(loc.segment)) {
    std::lock_guard<std::mutex> h(hits_mu_);
    auto it = loc_ino_.find(loc.segment);
    if (it != loc_ino_.end()) {
      auto x = it->second.find(loc.record_offset);
      if (x != it->second.end() && x->second == ino) x->second = n->attr.ino;
    }
  }
  return n;
}

Result<std::shared_ptr<BackingFile>> StoreImpl::SegmentFile(const SegmentId& id) {
  std::lock_guard<std::mutex> l(files_mu_);
  auto it = files_.find(id);
  if (it != files_.end()) return it->second;
  OpenOptions o;
  o.direct = opts_.read_direct_io;
  auto f = env_->Open(SegmentFilePath(opts_.backing_dir, id), o);
  if (!f.ok() && o.direct && f.status().ToErrno() == EINVAL) {
    // The backing file system refuses O_DIRECT (tmpfs): buffered reads work the same.
    o.direct = false;
    f = env_->Open(SegmentFilePath(opts_.backing_dir, id), o);
  }
  if (!f.ok()) return f.status();
  std::shared_ptr<BackingFile> file(std::move(*f));
  files_.emplace(id, file);
  return file;
}

Result<LruCache::Value> StoreImpl::LoadValue(const Location& loc) {
  auto file = SegmentFile(loc.segment);
  if (!file.ok()) return file.status();
  // One read of metadata + value straight into an aligned, uninitialised buffer, verified in place.
  auto v = LoadWholeValue(file->get(), loc);
  if (!v.ok()) return v.status();
  return LruCache::Value(std::move(*v));
}

Status StoreImpl::Read(const Location& loc, uint64_t offset, size_t len, char* buf, size_t* got) {
  *got = 0;
  PinnedBytes p;
  KVFS_RETURN_IF_ERROR(ReadImpl(loc, offset, len, buf, &p, got));
  if (p.owner) {
    if (p.len) memcpy(buf, p.data, p.len);
    *got = p.len;
  }
  return Status::OK();
}

Status StoreImpl::ReadUncached(const Location& loc, uint64_t offset, size_t len, char* buf, size_t* got) {
  *got = 0;
  if (loc.empty() || offset >= loc.length || len == 0) return Status::OK();
  const size_t n = static_cast<size_t>(std::min<uint64_t>(len, loc.length - offset));
  if (auto v = cache_.Lookup(CacheKey(loc))) {
    cache_hits_++;
    std::memcpy(buf, v->data() + offset, n);
    *got = n;
    return Status::OK();
  }
  cache_misses_++;
  auto file = SegmentFile(loc.segment);
  if (!file.ok()) return GoneOr(loc, file.status());
  Status s = ReadValue(file->get(), loc, offset, n, buf, got);
  if (s.IsCorruption()) {
    checksum_failures_++;
    LogLimited(spdlog::level::err, "checksum", "kvfs: checksum mismatch reading segment {}/{}-{} record @{}: {}",
               loc.segment.node, loc.segment.generation, loc.segment.seq, loc.record_offset, ErrnoText(s));
  }
  return GoneOr(loc, s);
}

Status StoreImpl::ReadPinned(const Location& loc, uint64_t offset, size_t len, PinnedBytes* out) {
  *out = PinnedBytes{};
  size_t got = 0;
  return ReadImpl(loc, offset, len, nullptr, out, &got);
}

// buf != nullptr: a large uncached range is read straight into buf (*got set); everything else comes
// back pinned in *pin (the caller copies if it wants the bytes in buf).
Status StoreImpl::ReadImpl(const Location& loc, uint64_t offset, size_t len, char* buf, PinnedBytes* pin,
                           size_t* got) {
  *got = 0;
  if (loc.empty() || offset >= loc.length || len == 0) return Status::OK();
  const size_t n = static_cast<size_t>(std::min<uint64_t>(len, loc.length - offset));
  if (track_hits_ && offset == 0 && OwnSegment(loc.segment)) {
    std::lock_guard<std::mutex> l(hits_mu_);
    uint32_t& h = hits_[loc.segment][loc.record_offset];
    if (h < UINT32_MAX) h++;
  }
  const std::string key = CacheKey(loc);
  if (auto v = cache_.Lookup(key)) {
    cache_hits_++;
    pin->data = v->data() + offset;
    pin->len = n;
    pin->owner = std::move(v);
    return Status::OK();
  }
  cache_misses_++;
  // Whole-value loads only for values well below a cache shard's budget: two hot values that each
  // fill a shard would evict each other between the 1 MiB FUSE reads of one load (and each miss would
  // re-read and re-verify the whole value).
  if (loc.length > kWholeValueLoadMax || loc.length > cache_.ShardCapacity() / 4) {
    // Too large to cache: read and verify just the blocks covering the range.
    auto file = SegmentFile(loc.segment);
    if (!file.ok()) return GoneOr(loc, file.status());
    if (buf) {
      Status s = ReadValue(file->get(), loc, offset, n, buf, got);
      if (s.IsCorruption()) checksum_failures_++;
      return GoneOr(loc, s);
    }
    auto r = ReadValueRange(file->get(), loc, offset, n);
    if (!r.ok()) {
      if (r.status().IsCorruption()) checksum_failures_++;
      return GoneOr(loc, r.status());
    }
    pin->data = (*r)->data();
    pin->len = (*r)->size();
    pin->owner = std::move(*r);
    return Status::OK();
  }
  // One backing load per value, shared by concurrent readers.
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    std::lock_guard<std::mutex> l(flights_mu_);
    auto& slot = flights_[key];
    if (!slot) {
      slot = std::make_shared<Flight>();
      leader = true;
    }
    flight = slot;
  }
  if (leader) {
    auto v = LoadValue(loc);
    if (!v.ok() && v.status().IsCorruption()) {
      // Retry once through a fresh descriptor (the damage may be a transient read fault, or a peer's
      // segment whose growth this descriptor's cache does not show yet), then report EIO.
      {
        std::lock_guard<std::mutex> l(files_mu_);
        files_.erase(loc.segment);
      }
      v = LoadValue(loc);
    }
    if (!v.ok()) v = GoneOr(loc, v.status());
    if (v.ok()) cache_.Insert(key, *v);
    {
      std::lock_guard<std::mutex> l(flight->mu);
      flight->done = true;
      flight->status = v.ok() ? Status::OK() : v.status();
      if (v.ok()) flight->value = *v;
    }
    flight->cv.notify_all();
    std::lock_guard<std::mutex> l(flights_mu_);
    flights_.erase(key);
  } else {
    std::unique_lock<std::mutex> l(flight->mu);
    flight->cv.wait(l, [&] { return flight->done; });
  }
  if (!flight->status.ok()) {
    if (flight->status.IsCorruption() && leader) {
      checksum_failures_++;
      LogLimited(spdlog::level::err, "checksum", "kvfs: checksum mismatch reading segment {}/{}-{} record @{}: {}",
                 loc.segment.node, loc.segment.generation, loc.segment.seq, loc.record_offset,
                 ErrnoText(flight->status));
    }
    return flight->status;
  }
  pin->data = flight->value->data() + offset;
  pin->len = n;
  pin->owner = flight->value;
  return Status::OK();
}


// ---------------------------------------------------------------------------------------------------
// Peers (DESIGN §5): tail every other node's journal and apply it to the index.

void StoreImpl::NotePeerPoll(const std::string& node, uint64_t applied, uint64_t newest_stamp) {
  std::lock_guard<std::mutex> l(peer_stats_mu_);
  PeerStatsRec& r = peer_stats_[node];
  r.polls++;
  r.applied += applied;
  r.polled = true;
  r.last_poll = std::chrono::steady_clock::now();
  if (newest_stamp != 0) {
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
    const int64_t lag_ms = now_ms - static_cast<int64_t>(newest_stamp >> HybridClock::kLogicalBits);
    r.lag_s = lag_ms > 0 ? static_cast<double>(lag_ms) / 1000.0 : 0.0;
  }
}

Status StoreImpl::PollPeer(const std::string& node, PeerState* st, uint64_t* changed) {
  *changed = 0;
  peer_polls_++;
  uint64_t newest_stamp = 0;  // of the entries read in this poll (peer lag, GetStats)
  struct NoteOnExit {
    StoreImpl* self;
    const std::string& node;
    const uint64_t* changed;
    const uint64_t* newest;
    ~NoteOnExit() { self->NotePeerPoll(node, *changed, *newest); }
  } note_on_exit{this, node, changed, &newest_stamp};
  NodeFiles nf;
  Status s = ListNodeFiles(env_, NodeDirPath(opts_.backing_dir, node), &nf);
  if (s.IsNotFound()) return Status::OK();
  KVFS_RETURN_IF_ERROR(s);
  const std::vector<JournalFile>& files = nf.journals;
  {
    // Checkpoints (engine/checkpoint.h). A peer we have never read starts from its newest snapshot. If
    // the file at our position is gone, the peer retired it (we were not live, or it was not needed) or
    // was purged: forget a purged node's old data; re-read the newest snapshot that covers the gap.
    PeerChanges snap_changes;
    if (!st->have_position) {
      if (!nf.snapshots.empty()) KVFS_RETURN_IF_ERROR(ApplyPeerSnapshot(node, nf.snapshots, st, &snap_changes, changed));
    } else {
      const auto at = std::make_pair(st->position.generation, st->position.file_number);
      const bool present = std::any_of(files.begin(), files.end(), [&](const JournalFile& f) {
        return std::make_pair(f.generation, f.number) == at;
      });
      if (!present && !(st->purge_checked && st->purge_checked_at == st->position)) {
        st->purge_checked = true;
        st->purge_checked_at = st->position;
        auto purged = ReadPurgedGeneration(env_, opts_.backing_dir, node);
        if (purged.ok() && *purged >= st->position.generation) {
          KVFS_RETURN_IF_ERROR(ForgetPurgedPeer(node, *purged, &snap_changes));
          st->position = JournalPosition{*purged + 1, 0, 0};
          std::lock_guard<std::mutex> l(ns_mu_);
          auto r = index_->ApplyBatch({}, node, st->position.ToString());
          if (!r.ok()) return r.status();
        }
      }
      const auto now_at = std::make_pair(st->position.generation, st->position.file_number);
      const bool present_now = std::any_of(files.begin(), files.end(), [&](const JournalFile& f) {
        return std::make_pair(f.generation, f.number) == now_at;
      });
      if (!present_now && !nf.snapshots.empty() &&
          std::make_pair(nf.snapshots.back().generation, nf.snapshots.back().number) > now_at) {
        spdlog::info("kvfs: peer {}: journal file {} at our position {} is gone (retired); re-reading its "
                     "newest snapshot",
                     node, JournalFileName(now_at.first, now_at.second), st->position.ToString());
        KVFS_RETURN_IF_ERROR(ApplyPeerSnapshot(node, nf.snapshots, st, &snap_changes, changed));
      }
    }
    NotifyPeerChanges(snap_changes);
  }
  for (const auto& f : files) {
    uint64_t start = 0;
    if (st->have_position) {
      const auto key = std::make_pair(f.generation, f.number);
      const auto at = std::make_pair(st->position.generation, st->position.file_number);
      if (key < at) continue;  // fully applied before
      if (key == at) {
        start = st->position.offset;
      } else {
        // Every earlier file was read to its clean end: we are past it (what the peers file publishes,
        // so the writer may retire it), even if this file holds no entry yet.
        st->position = JournalPosition{f.generation, f.number, 0};
      }
    }
    JournalReaderOptions ro;
    // A short or bad tail in a peer's file means "not yet" (the writer is still appending, or NFS has
    // not shown us its bytes): stop there and retry at the next poll, never cut.
    ro.skip_damage = false;
    ro.direct = opts_.peer_direct_io;
    ro.expect_node = node;
    ro.readahead = 4 * kJournalBlockSize;  // an idle peer's poll reads one small window at its tail
    auto reader = JournalReader::Open(env_, f.path, start, ro);
    if (!reader.ok()) return reader.status();
    std::vector<ApplyOp> ops;
    JournalPosition last = st->have_position ? st->position : JournalPosition{f.generation, f.number, start};
    JournalEntry e;
    JournalPosition end;
    PeerChanges out;
    auto apply = [&]() -> Status {
      if (ops.empty()) return Status::OK();
      Result<ApplyResult> r = Status::OK();
      {
        std::lock_guard<std::mutex> l(ns_mu_);
        r = index_->ApplyBatch(ops, node, last.ToString());
      }
      if (!r.ok()) return r.status();
      *changed += ops.size();
      peer_entries_applied_ += ops.size();
      for (const auto& op : ops) {
        // A peer dropped a segment: close our fd now, so reads after its unlink fail to open
        // (ENOENT) rather than read a stale NFS handle.
        if (op.kind == ApplyOp::Kind::kDrop) {
          std::lock_guard<std::mutex> fl(files_mu_);
          files_.erase(op.segment);
        }
      }
      ops.clear();
      for (auto& c : r->changed) out.names.push_back(PeerChanges::Name{c.parent, std::move(c.name), c.old_ino});
      for (uint64_t ino : r->attr_changed) out.inodes.push_back(ino);
      st->have_position = true;
      st->position = last;
      return Status::OK();
    };
    bool stop = false;
    for (;;) {
      auto more = (*reader)->Next(&e, &end);
      if (!more.ok()) {
        LogLimited(spdlog::level::warn, LogKey("peer-journal:" + node, more.status()), "kvfs: peer {} journal {}: {}",
                   node, f.path, ErrnoText(more.status()));
        stop = true;
        break;
      }
      if (!*more) break;
      if (!hlc_.Update(e.stamp).ok()) {
        spdlog::warn("kvfs: peer {} entry stamp {} is too far in the future; applied without advancing the clock",
                     node, e.stamp);
      }
      ApplyOp op;
      if (JournalEntryToApplyOp(e, &op)) ops.push_back(std::move(op));
      last = end;
      newest_stamp = std::max(newest_stamp, e.stamp);
      if (ops.size() >= kRebuildBatch) KVFS_RETURN_IF_ERROR(apply());
    }
    KVFS_RETURN_IF_ERROR(apply());
    if (!st->have_position || st->position < last) {
      // Entries that apply nothing (CUT) still move the position.
      st->have_position = true;
      st->position = last;
    }
    NotifyPeerChanges(out);
    const auto& rep = (*reader)->report();
    if (stop || rep.end == JournalEnd::kDamaged || rep.end == JournalEnd::kTorn) break;  // "not yet"
  }
  return Status::OK();
}

void StoreImpl::NotifyPeerChanges(const PeerChanges& out) {
  if (out.names.empty() && out.inodes.empty()) return;
  std::function<void(const PeerChanges&)> fn;
  {
    std::lock_guard<std::mutex> l(listener_mu_);
    fn = listener_;
  }
  if (fn) fn(out);
}

// Applies node's newest usable snapshot (index/replay.h ApplyNewestSnapshot) and moves our position to
// its cover. Nothing happens if none verifies (the journals that remain are read as usual).
Status StoreImpl::ApplyPeerSnapshot(const std::string& node, const std::vector<SnapshotFile>& snaps,
                                    PeerState* st, PeerChanges* out, uint64_t* changed) {
  const SnapshotFile* used = nullptr;
  uint64_t entries = 0, max_stamp = 0;
  KVFS_RETURN_IF_ERROR(ApplyNewestSnapshot(
      env_, node, snaps,
      [&](std::vector<ApplyOp>* ops, bool) -> Status {
        if (ops->empty()) return Status::OK();
        Result<ApplyResult> r = Status::OK();
        {
          std::lock_guard<std::mutex> l(ns_mu_);
          r = index_->ApplyBatch(*ops, node);
        }
        if (!r.ok()) return r.status();
        *changed += ops->size();
        peer_entries_applied_ += ops->size();
        for (auto& c : r->changed) out->names.push_back(PeerChanges::Name{c.parent, std::move(c.name), c.old_ino});
        for (uint64_t ino : r->attr_changed) out->inodes.push_back(ino);
        return Status::OK();
      },
      &used, &entries, &max_stamp, nullptr));
  if (used == nullptr) return Status::OK();
  if (!hlc_.Update(max_stamp).ok()) {
    spdlog::warn("kvfs: peer {} snapshot stamp {} is too far in the future", node, max_stamp);
  }
  st->have_position = true;
  st->position = JournalPosition{used->generation, used->number, 0};
  st->purge_checked = false;
  std::lock_guard<std::mutex> l(ns_mu_);
  auto r = index_->ApplyBatch({}, node, st->position.ToString());
  if (!r.ok()) return r.status();
  spdlog::info("kvfs: peer {}: applied snapshot {} ({} entries)", node, used->path, entries);
  return Status::OK();
}

// `kvfs node purge` removed node's files while we were not reading (its DROP entries are gone with its
// journal): drop every segment of the node that our index still knows, so its names vanish here too.
Status StoreImpl::ForgetPurgedPeer(const std::string& node, uint64_t purge_generation, PeerChanges* out) {
  std::vector<ApplyOp> ops;
  KVFS_RETURN_IF_ERROR(index_->ListSegments([&](const SegmentInfo& si) {
    if (si.id.node == node && si.id.generation <= purge_generation && si.state != SegmentState::kDropped) {
      ApplyOp op;
      op.kind = ApplyOp::Kind::kDrop;
      op.segment = si.id;
      ops.push_back(std::move(op));
    }
    return true;
  }));
  spdlog::warn("kvfs: peer {} was purged (generation {}) while we were away: forgetting {} of its segments",
               node, purge_generation, ops.size());
  if (ops.empty()) return Status::OK();
  Result<ApplyResult> r = Status::OK();
  {
    std::lock_guard<std::mutex> l(ns_mu_);
    r = index_->ApplyBatch(ops, node);
  }
  if (!r.ok()) return r.status();
  for (const auto& op : ops) {
    std::lock_guard<std::mutex> fl(files_mu_);
    files_.erase(op.segment);
  }
  for (auto& c : r->changed) out->names.push_back(PeerChanges::Name{c.parent, std::move(c.name), c.old_ino});
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------------
// Checkpoints (engine/checkpoint.h): snapshot + journal rotation, peers file, journal retirement.

Status StoreImpl::StartCheckpointer() {
  CheckpointerOptions co;
  co.env = env_;
  co.backing_dir = opts_.backing_dir;
  co.node = opts_.node_id;
  co.generation = node_dir_->generation();
  co.checkpoint_entries = opts_.checkpoint_entries;
  co.checkpoint_interval_ms = opts_.checkpoint_interval_ms;
  co.peers_publish_ms = opts_.peers_publish_ms;
  co.retire_check_ms = opts_.retire_check_ms;
  checkpointer_ = std::make_unique<Checkpointer>(
      co, index_.get(), [this] { return CutForCheckpoint(); }, [this] { return journal_entries_.load(); },
      [this] { return std::make_pair(node_dir_->generation(), journal_->current_file_number()); },
      [this] {
        std::map<std::string, JournalPosition> m;
        std::lock_guard<std::mutex> l(peer_mu_);
        for (const auto& [node, st] : peers_)
          if (st.have_position) m[node] = st.position;
        return m;
      });
  checkpointer_->Start();
  return Status::OK();
}

// Excludes namespace writers (ns_mu_), makes every entry queued so far durable, starts a new journal file
// for later entries and takes a view of the index: the view then holds exactly what the journal files
// before the new one hold (plus, harmlessly, SEAL states the group commit may set meanwhile).
Result<Checkpointer::Cut> StoreImpl::CutForCheckpoint() {
  std::lock_guard<std::mutex> l(ns_mu_);
  KVFS_RETURN_IF_ERROR(Sync());
  KVFS_RETURN_IF_ERROR(journal_->Sync());
  if (lost_entries_ > 0) {
    // The index still holds the files whose PUT was dropped (lost records): a snapshot of it would
    // publish them. No snapshot until the next mount rebuilds the index from the journals.
    return Status::IOError("no checkpoint after files were lost to a failed segment sync (until remount)");
  }
  Checkpointer::Cut cut;
  cut.generation = node_dir_->generation();
  cut.number = journal_->Rotate();
  if (!closing_) KVFS_RETURN_IF_ERROR(journal_->Sync());  // creates the new file: peers move past the old one
  cut.view = index_->NewView();
  return cut;
}

Status StoreImpl::RefreshPeers() {
  auto nodes = ListNodes(env_, opts_.backing_dir);
  if (!nodes.ok()) return nodes.status();
  std::lock_guard<std::mutex> l(peer_mu_);
  Status first;
  for (const auto& node : *nodes) {
    if (node == opts_.node_id) continue;
    uint64_t changed = 0;
    Status s = PollPeer(node, &peers_[node], &changed);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

void StoreImpl::RequestPeerRefresh() {
  if (opts_.peer_poll_ms == 0) return;
  {
    std::lock_guard<std::mutex> l(peer_wake_mu_);
    const auto now = std::chrono::steady_clock::now();
    // A miss usually means a peer is about to publish the name: poll now, and once more after the
    // peer's group commit has had time to make its entry durable.
    followup_at_ = now + std::chrono::milliseconds(2 * opts_.group_commit_interval_ms + 10);
    followup_pending_ = true;
    if (now - last_early_poll_ < std::chrono::milliseconds(std::max<uint32_t>(1, opts_.peer_poll_ms / 4))) return;
    last_early_poll_ = now;
    peer_wake_ = true;
  }
  peer_cv_.notify_one();
}

void StoreImpl::PeerLoop() {
  using clock = std::chrono::steady_clock;
  const auto interval = std::chrono::milliseconds(opts_.peer_poll_ms);
  std::vector<std::string> nodes;
  bool listed_once = false;
  clock::time_point listed_at;
  for (;;) {
    bool early = false;
    {
      std::unique_lock<std::mutex> l(peer_wake_mu_);
      auto until = clock::now() + interval;
      if (followup_pending_ && followup_at_ < until) until = followup_at_;
      peer_cv_.wait_until(l, until, [&] { return peer_stop_ || peer_wake_; });
      if (peer_stop_) return;
      early = peer_wake_;
      if (followup_pending_ && clock::now() >= followup_at_) {
        early = true;
        followup_pending_ = false;
      }
      peer_wake_ = false;
    }
    // New nodes appear rarely: list the nodes directory every 25 intervals (5 s at the default) and on
    // an early poll (a lookup miss: maybe a new node's file) if the last listing is 5 intervals old (1 s).
    // Not on every early poll: a connector storing new chunks misses on every name it probes, which woke
    // this thread up to 20-40 times/s, and each listing (opendir, readdir x2, getattr) is a round trip on
    // NFS: 1.9 backing metadata ops per vLLM chunk stored (docs/benchmarks.md, full-size run). Known
    // nodes are polled on every early round as before, and are not stat'ed again.
    const auto since = clock::now() - listed_at;
    if (!listed_once || since >= 25 * interval || (early && since >= 5 * interval)) {
      auto listed = ListNodes(env_, opts_.backing_dir, &nodes);
      if (listed.ok()) nodes = *listed;
      listed_at = clock::now();
      listed_once = true;
    }
    std::lock_guard<std::mutex> l(peer_mu_);
    const auto now = clock::now();
    for (const auto& node : nodes) {
      if (node == opts_.node_id) continue;
      PeerState& st = peers_[node];
      if (!early && now < st.next_poll) continue;
      uint64_t changed = 0;
      Status s = PollPeer(node, &st, &changed);
      if (!s.ok()) {
        LogLimited(spdlog::level::warn, LogKey("peer-tail:" + node, s), "kvfs: tailing peer {}: {}", node,
                   ErrnoText(s));
      }
      if (changed) {
        st.idle_polls = 0;
        st.next_poll = now + interval;
      } else if (!early) {
        // Back off for idle peers (64 idle nodes must not flood the server): 1x, 2x, 4x the interval.
        // An early (lookup-miss) poll that finds nothing leaves the schedule alone. The visibility
        // bound for a peer idle for a while is therefore group commit + 4 x interval, and a reader
        // that probes (a lookup miss) sees it within group commit + interval / 4 + a few ms.
        st.idle_polls = std::min<uint32_t>(st.idle_polls + 1, 2);
        st.next_poll = now + interval * (1u << st.idle_polls) - interval / 2;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Capacity and eviction (store.h "Capacity and eviction", DESIGN §6)

Status StoreImpl::InitEviction() {
  const uint64_t cap = opts_.capacity_bytes, seg = opts_.segment_size;
  global_high_ = opts_.global_high_watermark_bytes;
  global_low_ = opts_.global_low_watermark_bytes ? opts_.global_low_watermark_bytes : global_high_ / 8 * 7;
  if (global_high_ && global_low_ >= global_high_) {
    return Status::InvalidArgument("the low watermark must be below the high watermark");
  }
  if (opts_.reinsert_max_fraction < 0 || opts_.reinsert_max_fraction > 0.9) {
    return Status::InvalidArgument("reinsert_max_fraction must be in [0, 0.9]");
  }
  // Always on: without a bound it only reclaims dead segments and keeps RESERVE (store.h).
  bounded_ = cap > 0 || global_high_ > 0;
  evict_enabled_ = true;
  track_hits_ = opts_.reinsert_min_hits > 0 && opts_.reinsert_max_fraction > 0;
  if (cap) {
    node_high_ = cap >= 3 * seg ? cap - seg : cap;
    const uint64_t step = std::max(seg, cap / 8);
    node_low_ = node_high_ > step ? node_high_ - step : 0;
    hard_limit_ = cap + seg;
    if (cap < 2 * seg) {
      spdlog::warn("kvfs: capacity {} is under two segments ({} each): writes may fail with ENOSPC", cap, seg);
    }
  }
  grace_ = std::chrono::milliseconds(opts_.drop_grace_ms ? opts_.drop_grace_ms
                                                         : 2 * opts_.peer_poll_ms + 500);
  // This node's segment files of earlier generations (one listing and one stat each, at mount only).
  std::vector<std::string> names;
  Status ls = env_->GetChildren(node_dir_->seg_dir(), &names);
  if (!ls.ok() && !ls.IsNotFound()) return ls;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    for (const auto& name : names) {
      SegmentId id;
      id.node = opts_.node_id;
      if (!ParseSegmentFileName(name, &id.generation, &id.seq)) continue;
      if (id.generation >= node_dir_->generation()) continue;  // ours are tracked as they are written
      auto info = env_->Stat(node_dir_->seg_dir() + "/" + name);
      if (!info.ok()) continue;
      auto st = index_->GetSegment(id);
      if (st.ok() && st->state == SegmentState::kDropped) {
        // Dropped before a crash or unmount ended its grace period: unlink after a new one.
        dropped_own_.insert(id);
        dropping_.push_back(Dropping{id, info->size, now + grace_});
        dropping_bytes_ += info->size;
        continue;
      }
      own_segs_[id] = SegTrack{info->size, true, now};
      node_bytes_ += info->size;
    }
  }
  if (cap == 0 && global_high_ == 0) {
    spdlog::info("kvfs: no capacity limit (no --capacity): only dead segments are reclaimed; {} bytes in {} "
                 "segment(s) of earlier generations",
                 node_bytes_, own_segs_.size());
  } else {
    spdlog::info("kvfs: capacity {} (evict above {} down to {}), global watermarks {}/{}, {} bytes in {} segment(s) "
                 "of earlier generations, reinsertion {}",
                 cap, node_high_, node_low_, global_high_, global_low_, node_bytes_, own_segs_.size(),
                 track_hits_ ? "on" : "off");
  }
  EnsureReserve();
  evict_wake_ = true;
  evict_thread_ = std::thread([this] { EvictLoop(); });
  return Status::OK();
}

void StoreImpl::StopEvictor() {
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    evict_stop_ = true;
  }
  evict_cv_.notify_all();
  space_cv_.notify_all();
  if (evict_thread_.joinable()) evict_thread_.join();
}

void StoreImpl::OnSealed(const SealedSegment& seg) {
  if (!evict_enabled_) return;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    if (dropped_own_.count(seg.id)) return;
    SegTrack& t = own_segs_[seg.id];
    node_bytes_ += seg.file_size;
    node_bytes_ -= t.bytes;
    t.bytes = seg.file_size;
    t.evictable = true;
    t.evictable_since = std::chrono::steady_clock::now();
    t.sealed_after_ticket = next_append_ticket_ - 1;
    stuck_ = false;
    evict_wake_ = true;
  }
  evict_cv_.notify_one();
}

void StoreImpl::TrackAppendLocked(const Location& loc) {
  if (dropped_own_.count(loc.segment)) return;
  SegTrack& t = own_segs_[loc.segment];
  const uint64_t end = AlignUp(loc.value_offset + loc.length);
  if (end > t.bytes && !t.evictable) {
    node_bytes_ += end - t.bytes;
    t.bytes = end;
  }
}

Status StoreImpl::ReserveSpace(uint64_t need) {
  if (need > hard_limit_) return Status::NoSpace("record larger than the capacity");
  std::unique_lock<std::mutex> l(cap_mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.writer_wait_ms);
  bool counted = false;
  while (node_bytes_ + dropping_bytes_ + inflight_bytes_ + need > hard_limit_) {
    if (evict_stop_) return Status::NoSpace("capacity reached (store closing)");
    // Nothing left to evict and nothing about to be unlinked: waiting would not help.
    if (stuck_ && dropping_.empty() && inflight_bytes_ == 0) return Status::NoSpace("capacity reached");
    if (!counted) {
      writer_waits_++;
      counted = true;
    }
    evict_wake_ = true;
    evict_cv_.notify_one();
    if (space_cv_.wait_until(l, deadline) == std::cv_status::timeout &&
        node_bytes_ + dropping_bytes_ + inflight_bytes_ + need > hard_limit_) {
      return Status::NoSpace("capacity reached: eviction did not free space in time");
    }
  }
  inflight_bytes_ += need;
  return Status::OK();
}

void StoreImpl::NoteNoSpace() {
  nospace_events_++;
  if (!evict_enabled_) return;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    emergency_ = true;
    evict_wake_ = true;
  }
  evict_cv_.notify_one();
}

void StoreImpl::EvictLoop() {
  std::unique_lock<std::mutex> l(cap_mu_);
  for (;;) {
    evict_cv_.wait_for(l, kEvictTick, [&] { return evict_stop_ || evict_wake_; });
    if (evict_stop_) return;
    evict_wake_ = false;
    l.unlock();
    EvictOnce();
    l.lock();
  }
}

uint64_t StoreImpl::PeerSegmentBytes() {
  uint64_t sum = 0;
  Status s = index_->ListSegments([&](const SegmentInfo& si) {
    if (si.id.node == opts_.node_id || si.state == SegmentState::kDropped) return true;
    sum += si.state == SegmentState::kSealed ? std::max(opts_.segment_size, si.live_bytes) : si.live_bytes;
    return true;
  });
  if (!s.ok()) spdlog::warn("kvfs: listing segments for the global watermark: {}", s.ToString());
  return sum;
}

void StoreImpl::ReclaimDeadSegments() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_dead_scan_ < kDeadSegmentScan) return;
  last_dead_scan_ = now;
  std::vector<SegmentId> old;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    for (const auto& [id, t] : own_segs_) {
      if (DropCandidateLocked(id, t) && now - t.evictable_since >= kDeadSegmentAge) {
        old.push_back(id);
      }
    }
  }
  for (const auto& id : old) {
    {
      std::lock_guard<std::mutex> l(cap_mu_);
      if (evict_stop_) return;
    }
    auto st = index_->GetSegment(id);
    // NotFound: the index has no entry (no record of it was ever committed); dead too.
    if (st.ok() ? st->live_records != 0 : !st.status().IsNotFound()) continue;
    DropSegment(id, /*reinsert=*/false);
  }
}

void StoreImpl::EvictOnce() {
  UnlinkDue(false);
  ReclaimDeadSegments();
  bool emergency;
  uint64_t node_bytes;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    emergency = emergency_;
    emergency_ = false;
    node_bytes = node_bytes_;
  }
  // Target for this node's bytes.
  uint64_t target = UINT64_MAX;
  if (opts_.capacity_bytes && node_bytes > node_high_) target = node_low_;
  if (global_high_) {
    const uint64_t global = node_bytes + PeerSegmentBytes();
    if (global > global_high_ && global > 0) {
      // This node's proportional share of the excess over the low watermark.
      const double share = static_cast<double>(global - global_low_) * node_bytes / global;
      const uint64_t t = node_bytes > share ? node_bytes - static_cast<uint64_t>(share) : 0;
      target = std::min(target, t);
    }
  }
  if (emergency) {
    // The backing store itself is full: free the reserve so DROP (and the user's UNLINK) entries can be
    // journaled; with a capacity or watermark, drop until two segments' worth of space will be free.
    ReleaseReserve();
    hold_reserve_ = true;
    KickCommit();  // journal entries that failed for lack of space go now
    last_dead_scan_ = {};
    ReclaimDeadSegments();
  }
  if (emergency && bounded_) {
    target = std::min(target, node_bytes ? node_bytes - 1 : 0);  // at least the oldest segment
    uint64_t total = 0, avail = 0;
    if (env_->StatFs(opts_.backing_dir, &total, &avail).ok() && avail < 2 * opts_.segment_size) {
      uint64_t pending;
      {
        std::lock_guard<std::mutex> l(cap_mu_);
        pending = dropping_bytes_;
      }
      const uint64_t want = 2 * opts_.segment_size - avail;
      if (want > pending) {
        const uint64_t more = want - pending;
        target = std::min(target, node_bytes > more ? node_bytes - more : 0);
      }
    }
  }
  if (target == UINT64_MAX || target >= node_bytes) return;
  // Free (node bytes at the start - target), net of reinsertion. Bytes written meanwhile are the next
  // round's business: a fast writer must not make one round evict everything.
  const uint64_t goal = node_bytes - target;
  uint64_t freed = 0;
  while (freed < goal) {
    SegmentId victim;
    {
      std::lock_guard<std::mutex> l(cap_mu_);
      if (evict_stop_) break;
      auto it = std::find_if(own_segs_.begin(), own_segs_.end(), [this](const auto& kv) {
        return DropCandidateLocked(kv.first, kv.second);  // records of unfinished files stay
      });
      if (it == own_segs_.end()) {
        stuck_ = true;
        space_cv_.notify_all();
        break;
      }
      victim = it->first;
    }
    const uint64_t f = DropSegment(victim, /*reinsert=*/!emergency);  // a full store has no room to reinsert
    if (f == 0) break;
    freed += f;
  }
}

void StoreImpl::NotifyListener(const std::vector<ApplyResult::Changed>& changed) {
  if (changed.empty()) return;
  PeerChanges out;
  for (const auto& c : changed) out.names.push_back(PeerChanges::Name{c.parent, c.name, c.old_ino});
  std::function<void(const PeerChanges&)> fn;
  {
    std::lock_guard<std::mutex> l(listener_mu_);
    fn = listener_;
  }
  if (fn) fn(out);
}

uint64_t StoreImpl::DropSegment(const SegmentId& seg, bool reinsert) {
  uint64_t bytes = 0, reinserted = 0;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    auto it = own_segs_.find(seg);
    if (it == own_segs_.end()) return 0;
    bytes = it->second.bytes;
  }
  // 1. Hits-based reinsertion: live records read since they were (re)written, most hits first.
  if (track_hits_ && reinsert) {
    std::vector<std::pair<uint32_t, uint64_t>> hot;  // (hits, record offset)
    std::unordered_map<uint64_t, uint64_t> inos;
    {
      std::lock_guard<std::mutex> l(hits_mu_);
      auto h = hits_.find(seg);
      if (h != hits_.end()) {
        auto li = loc_ino_.find(seg);
        for (const auto& [off, n] : h->second) {
          if (n < opts_.reinsert_min_hits) continue;
          hot.emplace_back(n, off);
          if (li != loc_ino_.end()) {
            auto x = li->second.find(off);
            if (x != li->second.end()) inos[off] = x->second;
          }
        }
      }
    }
    std::sort(hot.begin(), hot.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    uint64_t budget = static_cast<uint64_t>(opts_.reinsert_max_fraction * static_cast<double>(bytes));
    for (const auto& [n, off] : hot) {
      {
        // Closing: keep the segment (the records moved so far just left dead copies in it).
        std::lock_guard<std::mutex> l(cap_mu_);
        if (evict_stop_) return 0;
      }
      auto x = inos.find(off);
      const uint64_t used = ReinsertRecord(seg, off, x == inos.end() ? 0 : x->second, budget);
      budget -= std::min(budget, used);
      reinserted += used;
      if (budget < kAlignment) break;
    }
  }
  // 2. The drop: index first (its files are ENOENT at once), then the journal entry.
  Result<ApplyResult> r = Status::OK();
  {
    std::lock_guard<std::mutex> l(ns_mu_);
    {
      std::lock_guard<std::mutex> c(cap_mu_);
      // Pinned since it was picked: keep it.
      auto it = own_segs_.find(seg);
      if (it != own_segs_.end() && !DropCandidateLocked(seg, it->second)) return 0;
      if (it != own_segs_.end()) {
        bytes = it->second.bytes;
        node_bytes_ -= bytes;
        own_segs_.erase(it);
      }
      dropped_own_.insert(seg);
      dropping_.push_back(Dropping{seg, bytes, std::chrono::steady_clock::now() + grace_});
      dropping_bytes_ += bytes;
    }
    r = index_->ApplyDrop(seg);
    EnqueueLocked(JournalEntry::Drop(seg, hlc_.Now()));
  }
  {
    std::lock_guard<std::mutex> l(hits_mu_);
    hits_.erase(seg);
    loc_ino_.erase(seg);
  }
  segments_dropped_++;
  segment_bytes_dropped_ += bytes;
  const uint64_t freed = bytes > reinserted ? bytes - reinserted : 1;
  if (!r.ok()) {
    spdlog::error("kvfs: index drop of segment {}-{}: {}", seg.generation, seg.seq, r.status().ToString());
    return freed;
  }
  spdlog::debug("kvfs: dropped segment {}-{} ({} bytes, {} file(s), {} bytes reinserted)", seg.generation,
                seg.seq, bytes, r->changed.size(), reinserted);
  NotifyListener(r->changed);
  return freed;
}

// Re-appends the record at (seg, record_offset) if it is still the committed content of a file, and
// journals MOVE. ino = the inode committed there (0: unknown, e.g. committed by an earlier mount; then
// the record's path tag is resolved). Returns the bytes appended (0 if skipped).
uint64_t StoreImpl::ReinsertRecord(const SegmentId& seg, uint64_t record_offset, uint64_t ino, uint64_t budget) {
  auto file = SegmentFile(seg);
  if (!file.ok()) return 0;
  auto meta = ReadRecordMeta(file->get(), record_offset);
  if (!meta.ok()) return 0;
  if (ino == 0) {
    auto resolved = index_->ResolvePath(meta->path);
    if (!resolved.ok()) return 0;
    ino = *resolved;
  }
  auto node = index_->GetInode(ino);
  if (!node.ok() || !node->committed || !S_ISREG(node->attr.mode) || node->location.segment != seg ||
      node->location.record_offset != record_offset) {
    return 0;  // unlinked, replaced, or moved meanwhile: dead bytes
  }
  const Location old = node->location;
  const uint64_t need = AlignUp(old.length) + kAlignment;
  if (need > budget) return 0;
  LruCache::Value value = cache_.Lookup(CacheKey(old));
  if (!value) {
    auto v = LoadValue(old);
    if (!v.ok()) {
      spdlog::warn("kvfs: reinsertion read of {}: {}", meta->path, v.status().ToString());
      return 0;
    }
    value = *v;
  }
  auto path = index_->FullPath(ino);
  if (!path.ok()) return 0;
  const uint64_t stamp = meta->header.stamp;  // the record's original stamp, kept by MOVE
  auto nl = Segments()->Append(*path, stamp, {value->view()});
  if (!nl.ok()) {
    if (nl.status().IsNoSpace()) NoteNoSpace();
    return 0;
  }
  {
    std::lock_guard<std::mutex> c(cap_mu_);
    TrackAppendLocked(*nl);
  }
  bool moved = false;
  {
    std::lock_guard<std::mutex> l(ns_mu_);
    auto cur = index_->FullPath(ino);  // a rename meanwhile: the MOVE goes under the current name
    if (cur.ok()) {
      auto r = index_->ApplyMove(*cur, old, *nl);
      if (r.ok() && r->applied > 0) {
        EnqueueLocked(JournalEntry::Move(*cur, old, *nl, stamp));
        moved = true;
      }
    }
  }
  if (moved) {
    cache_.Insert(CacheKey(*nl), value);
    std::lock_guard<std::mutex> h(hits_mu_);
    loc_ino_[nl->segment][nl->record_offset] = ino;
    records_reinserted_++;
    bytes_reinserted_ += old.length;
  }
  return need;
}

void StoreImpl::UnlinkDue(bool all) {
  std::vector<Dropping> due;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    const auto now = std::chrono::steady_clock::now();
    while (!dropping_.empty() && (all || dropping_.front().due <= now)) {
      due.push_back(dropping_.front());
      dropping_.pop_front();
    }
  }
  if (due.empty()) {
    bool idle;
    {
      std::lock_guard<std::mutex> l(cap_mu_);
      idle = dropping_.empty();
    }
    if (idle && !reserve_present_) EnsureReserve();
    return;
  }
  // The DROP entries must be durable before the files go (a rebuild must not point into them).
  Status s = Sync();
  std::vector<Dropping> retry;
  for (auto& d : due) {
    Status r = s;
    if (r.ok()) {
      {
        std::lock_guard<std::mutex> fl(files_mu_);
        files_.erase(d.id);  // close our fd (an in-flight read keeps its shared_ptr until it returns)
      }
      r = env_->Remove(SegmentFilePath(opts_.backing_dir, d.id));
      if (r.IsNotFound()) r = Status::OK();
    }
    if (!r.ok()) {
      LogLimited(spdlog::level::warn, LogKey("unlink-dropped", r), "kvfs: unlink of dropped segment {}-{}: {} (retrying)",
                 d.id.generation, d.id.seq, ErrnoText(r));
      d.due = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      retry.push_back(d);
      continue;
    }
    segments_unlinked_++;
    {
      std::lock_guard<std::mutex> h(hits_mu_);
      hits_.erase(d.id);  // reads during the grace period may have counted hits
    }
    std::lock_guard<std::mutex> l(cap_mu_);
    dropping_bytes_ -= d.bytes;
  }
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    for (auto& d : retry) dropping_.push_back(d);
  }
  space_cv_.notify_all();
  if (retry.size() < due.size()) KickCommit();  // space was freed: owed journal entries may go now
}

void StoreImpl::EnsureReserve() {
  if (reserve_present_) return;
  {
    std::lock_guard<std::mutex> l(gc_mu_);
    if (owed_) return;  // the space is the journal's until the owed entries are in
  }
  if (hold_reserve_.load()) {
    // After a full backing store: recreate RESERVE only when that leaves at least twice its size free.
    // Taking back the space it just freed would fill the backing again at once and fail the journal
    // appends it was freed for (RESERVE released and recreated every evictor tick).
    uint64_t total = 0, avail = 0;
    if (!env_->StatFs(opts_.backing_dir, &total, &avail).ok() || avail < 3 * ReserveBytes()) return;
  }
  const std::string path = node_dir_->dir() + "/" + kReserveName;
  OpenOptions o;
  o.write = true;
  o.create = true;
  auto f = env_->Open(path, o);
  if (!f.ok()) return;
  const std::string zeros(ReserveBytes(), '\0');
  Status s = (*f)->Write(0, zeros.data(), zeros.size());
  if (s.ok()) s = (*f)->Sync();
  if (!s.ok()) {
    // Retried every evictor round while the backing is full: logged once.
    if (!(s.IsNoSpace() && hold_reserve_.exchange(true))) {
      spdlog::warn("kvfs: cannot write the eviction reserve {}: {}", path, ErrnoText(s));
    }
    f->reset();
    env_->Remove(path);
    return;
  }
  reserve_present_ = true;
  hold_reserve_ = false;
}

void StoreImpl::ReleaseReserve() {
  if (!reserve_present_) return;
  Status s = env_->Remove(node_dir_->dir() + "/" + kReserveName);
  if (!s.ok() && !s.IsNotFound()) spdlog::warn("kvfs: removing the eviction reserve: {}", s.ToString());
  reserve_present_ = false;
}

Status StoreImpl::GoneOr(const Location& loc, Status s) {
  if (s.ok() || s.IsNotFound() || s.IsCorruption()) return s;
  // An I/O error (e.g. ESTALE of an NFS handle whose file a peer unlinked): is the segment gone?
  {
    std::lock_guard<std::mutex> fl(files_mu_);
    files_.erase(loc.segment);
  }
  auto st = index_->GetSegment(loc.segment);
  if (st.ok() && st->state == SegmentState::kDropped) return Status::NotFound("segment dropped (evicted)");
  auto info = env_->Stat(SegmentFilePath(opts_.backing_dir, loc.segment));
  if (!info.ok() && info.status().IsNotFound()) return Status::NotFound("segment vanished");
  return s;
}

// ---------------------------------------------------------------------------------------------------
// Info

Status StoreImpl::StatFs(uint64_t* live_bytes, uint64_t* files, uint64_t* backing_total,
                         uint64_t* backing_avail) {
  auto st = index_->GetStats();
  *live_bytes = st.live_bytes;
  *files = st.files + st.directories;
  uint64_t total = 0, free_bytes = 0;
  KVFS_RETURN_IF_ERROR(env_->StatFs(opts_.backing_dir, &total, &free_bytes));
  const uint64_t cap = opts_.global_high_watermark_bytes ? opts_.global_high_watermark_bytes : opts_.capacity_bytes;
  *backing_total = cap ? std::min(cap, total) : total;
  uint64_t blocks = st.live_bytes + free_bytes;  // DESIGN §6: min(capacity, global live + backing free)
  if (cap) blocks = std::max<uint64_t>(st.live_bytes, std::min(cap, blocks));
  *backing_avail = blocks - st.live_bytes;
  return Status::OK();
}

StoreStats StoreImpl::GetStats() {
  StoreStats s;
  auto st = index_->GetStats();
  s.files = st.files;
  s.directories = st.directories;
  s.live_bytes = st.live_bytes;
  auto sw = Segments()->GetStats();
  s.segments = sw.segments_created;
  s.segment_bytes = sw.value_bytes;
  s.records_written = records_written_;
  s.journal_entries = journal_entries_;
  s.group_commits = group_commits_;
  s.unjournaled_entries = UnjournaledEntries();
  s.journal_retries = journal_retries_;
  s.lost_entries = lost_entries_;
  s.cache_hits = cache_hits_;
  s.cache_misses = cache_misses_;
  s.cache_bytes = cache_.Usage();
  s.checksum_failures = checksum_failures_;
  auto& c = env_->counters();
  s.backing_metadata_ops = c.MetadataOps();
  s.backing_syncs = c.sync + c.syncdir;
  s.backing_bytes_written = c.bytes_written;
  s.backing_bytes_read = c.bytes_read;
  s.backing_files_created = c.create.load();
  {
    std::lock_guard<std::mutex> l(peer_mu_);
    s.peers = peers_.size();
  }
  s.peer_entries_applied = peer_entries_applied_;
  s.peer_polls = peer_polls_;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    s.node_segment_bytes = node_bytes_;
  }
  s.segments_dropped = segments_dropped_;
  s.segment_bytes_dropped = segment_bytes_dropped_;
  s.segments_unlinked = segments_unlinked_;
  s.records_reinserted = records_reinserted_;
  s.bytes_reinserted = bytes_reinserted_;
  s.writer_waits = writer_waits_;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    s.segments_pinned = pins_.size();
  }
  s.nospace_events = nospace_events_;
  auto& b = s.backing_ops;
  b.open = c.open;
  b.create = c.create;
  b.close = c.close;
  b.read = c.read;
  b.write = c.write;
  b.write_batches = c.write_batches;
  b.sync = c.sync;
  b.mkdir = c.mkdir;
  b.rename = c.rename;
  b.remove = c.remove;
  b.stat = c.stat;
  b.list = c.list;
  b.syncdir = c.syncdir;
  // Segments per node, from the index (one scan of its segments column family; no backing I/O).
  std::map<std::string, NodeSegmentStats> nodes;
  nodes[opts_.node_id].node = opts_.node_id;
  Status ls = index_->ListSegments([&](const SegmentInfo& si) {
    if (si.state == SegmentState::kDropped) return true;
    NodeSegmentStats& n = nodes[si.id.node];
    n.node = si.id.node;
    if (si.state == SegmentState::kSealed) {
      n.sealed_segments++;
      n.segment_bytes += std::max(opts_.segment_size, si.live_bytes);
    } else {
      n.open_segments++;
      n.segment_bytes += si.live_bytes;
    }
    n.live_bytes += si.live_bytes;
    return true;
  });
  if (!ls.ok()) spdlog::warn("kvfs: listing segments for stats: {}", ls.ToString());
  if (evict_enabled_) {
    NodeSegmentStats& own = nodes[opts_.node_id];
    own.segment_bytes = s.node_segment_bytes;
    own.estimated = false;
  }
  s.nodes.push_back(nodes[opts_.node_id]);
  for (auto& [id, n] : nodes) {
    if (id != opts_.node_id) s.nodes.push_back(n);
  }
  for (auto& n : s.nodes) n.dead_bytes = n.segment_bytes > n.live_bytes ? n.segment_bytes - n.live_bytes : 0;
  {
    std::lock_guard<std::mutex> l(peer_stats_mu_);
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [id, r] : peer_stats_) {
      PeerJournalStats p;
      p.node = id;
      p.polls = r.polls;
      p.entries_applied = r.applied;
      p.lag_seconds = r.lag_s;
      if (r.polled) p.last_poll_age_seconds = std::chrono::duration<double>(now - r.last_poll).count();
      s.peer_journals.push_back(p);
    }
  }
  s.recovery_entries = recovery_entries_;
  s.recovery_cuts = recovery_cuts_;
  s.recovery_seals = recovery_seals_;
  return s;
}

}  // namespace kvfs
