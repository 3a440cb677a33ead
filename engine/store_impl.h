// StoreImpl: the one implementation of Store (engine/store.h), declared here for the files that define
// its methods. Private to engine/: nothing outside engine/*.cc includes this header. See store.h for the
// contract and docs/design.md §2-§4, §7. Store::Open (store_open.cc) is the only way to make one.
//
// The methods live in one file per family:
//   store_open.cc        Open/Init, index rebuild and catch-up, segment recovery wiring, wiring of the
//                        PeerTailer (StartPeerTailer; peers' journals: peer_tailer.h), StopThreads, Close
//   store_commit.cc      the group commit's rounds (CommitRound; queue and thread: group_commit.h), Sync
//   store_namespace.cc   namespace mutations (Mkdir .. Rename, SetAttr, xattrs, Renumber)
//   store_data.cc        record writes (WriteRecord*, pins), CommitFile, reads (Read, ReadPinned, LRU)
//   store_checkpoint.cc  wiring of the Checkpointer (engine/checkpoint.h): the cut, peer positions
//   capacity.cc          capacity and eviction: the evictor thread, drops, reinsertion, RESERVE (its
//                        decisions: eviction_policy.h)
//   store_stats.cc       StatFs and GetStats
//   peer_holds.cc        holds of peers' segments on the export (markers under holds/), and the owner's
//                        check of its peers' markers before it unlinks a dropped segment
//
// Thread safety: every public method may be called concurrently. Where two mutexes are held together,
// ns_mu_ is taken first (then cap_mu_, hits_mu_, files_mu_, or the committer's in EnqueueLocked); the others are
// taken alone. cap_mu_ is never held across I/O; on the read path only a loading Flight waits on I/O.
// The PeerTailer's mutex (a whole poll) is taken before ns_mu_, and is held while its hooks take files_mu_
// and listener_mu_.
//
// Ordering rules (invariants):
//  * ns_mu_ serializes every namespace mutation together with the enqueueing of its journal entry, so
//    the journal order equals the order in which the index applied the changes.
//  * Commit protocol (docs/design.md §2): a group commit round takes the entries queued so far, syncs the
//    segments first (every record those entries point to was appended before the entry was queued),
//    then appends + syncs the journal, then acknowledges Sync() callers. One fdatasync per file per round.
//  * The index is updated at once (local visibility); the journal follows within one group-commit
//    interval. After a crash the index may be ahead of the journal, so an index that was not closed
//    cleanly is rebuilt from the journals (it is a cache: docs/design.md §3).
#pragma once

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
#include "engine/dir_renames.h"
#include "engine/eviction_policy.h"
#include "engine/group_commit.h"
#include "engine/link_arbiter.h"
#include "engine/peer_tailer.h"
#include "engine/read_admission.h"
#include "engine/record_meta_cache.h"
#include "index/hlc.h"
#include "index/index_db.h"
#include "index/journal.h"
#include "index/journal_format.h"
#include "engine/recovery.h"
#include "index/replay.h"
#include "index/snapshot.h"

namespace kvfs {

// 4 LRU shards: values are large (144 KiB - 36 MiB) and copies dominate lock hold times, so few, big
// shards keep a 36 MiB value cacheable (a shard holds capacity / 4) at little contention cost.
inline constexpr int kCacheShardBits = 2;
// Capacity and eviction (store.h "Capacity and eviction").
inline constexpr uint64_t kReserveMaxBytes = 1ull << 20;       // <node dir>/RESERVE: min(1 MiB, segment / 4)
inline constexpr const char* kReserveName = "RESERVE";
// Journal entries owed after a failed group commit are retried with a backoff from the group-commit
// interval up to this (and at once when space is freed).
inline constexpr auto kRetryMaxBackoff = std::chrono::milliseconds(1000);

// parent directory path + "/" + name ("/" + name under the root).
inline std::string JoinPath(const std::string& dir, std::string_view name) {
  std::string p = dir == "/" ? std::string() : dir;
  p += '/';
  p.append(name);
  return p;
}


class StoreImpl final : public Store {
 public:
  explicit StoreImpl(const StoreOptions& opts)
      : opts_(opts),
        env_(opts.env ? opts.env : Env::Posix()),
        cache_(opts.cache_size, kCacheShardBits),
        admission_(ProbationBytes(opts.cache_size), kGhostKeys) {}
  // Probation holds 1/8 of the cache, between 16 and 256 MiB; ghosts remember 64 Ki keys (~6 MiB).
  static uint64_t ProbationBytes(uint64_t cache_size) {
    return std::clamp<uint64_t>(cache_size / 8, 16ull << 20, 256ull << 20);
  }
  static constexpr size_t kGhostKeys = 64 * 1024;
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
  // RENAME_EXCHANGE (store_namespace.cc); ns_mu_ held.
  Status ExchangeLocked(uint64_t parent, std::string_view name, uint64_t new_parent, std::string_view new_name);
  // The same with a directory on a side (a and b: the nodes at the two names, pa and pb their paths).
  Status ExchangeDirLocked(uint64_t parent, std::string_view name, uint64_t new_parent, std::string_view new_name,
                           const Node& a, const Node& b, const std::string& pa, const std::string& pb);
  // The entry binding path to committed non-directory ino's content (store_namespace.cc); ns_mu_ held.
  Result<JournalEntry> ContentBinding(uint64_t ino, const std::string& path, uint64_t stamp);
  // link(2) (store_namespace.cc): claims across nodes (arbiter_), then BindLink.
  struct LinkClaimCheck {
    std::string path, incarnation;
  };
  Result<Node> BindLink(uint64_t ino, const Location* loc, const Attr* attr, uint64_t new_parent,
                          std::string_view new_name, const ExtentMapRef* ext, const LinkClaimCheck* check);
  std::string LinkIncarnationLocked(const std::string& path);
  void AwaitLinkedName(uint64_t parent, std::string_view name);
  static constexpr auto kLinkLostWait = std::chrono::milliseconds(150);
  std::unique_ptr<LinkArbiter> arbiter_;  // null with StoreOptions::link_claims off
  Result<Node> Mknod(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev, uint32_t uid,
                     uint32_t gid) override;
  Result<Node> Symlink(uint64_t parent, std::string_view name, std::string_view target, uint32_t uid,
                       uint32_t gid) override;
  Result<std::string> ReadLink(uint64_t ino) override { return index_->ReadLink(ino); }
  Status Unlink(uint64_t parent, std::string_view name, uint64_t* ino_out) override;
  Status DropStaged(uint64_t ino) override;
  Status Rename(uint64_t parent, std::string_view name, uint64_t new_parent, std::string_view new_name,
                unsigned flags, uint64_t* replaced_ino) override;
  Result<Node> Link(uint64_t ino, const Location* loc, const Attr* attr, uint64_t new_parent,
                    std::string_view new_name, const ExtentMapRef* ext = nullptr) override;
  Result<Attr> SetAttr(uint64_t ino, const Attr& attr, uint32_t mask) override;
  bool NoteRead(uint64_t ino, const Attr& attr, bool committed = true) override;
  int64_t PendingAtime(uint64_t ino) override;
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
  Status PinRecord(const Location& loc) override;
  void UnpinRecord(const Location& loc) override;
  Status ReadUncached(const Location& loc, uint64_t offset, size_t len, char* buf, size_t* got) override;
  Status CommitFile(uint64_t ino, const Location& loc, const Attr& attr, const ExtentMapRef& ext,
                    const Location& written) override;
  using Store::CommitFile;
  // Whole map or extent delta for the PUT of a commit (docs/format.md "Extent deltas"); requires ns_mu_.
  void ChoosePutContent(const IndexDb::CommitBase& base, JournalEntry* put);
  Result<Node> Renumber(uint64_t ino, uint64_t to = 0) override;
  Status Read(const Location& loc, uint64_t offset, size_t len, char* buf, size_t* got) override;
  Status ReadPinned(const Location& loc, uint64_t offset, size_t len, PinnedBytes* out) override;
  uint64_t ReadUnitEnd(const Location& loc, uint64_t offset) const override;
  Status ReadImpl(const Location& loc, uint64_t offset, size_t len, char* buf, PinnedBytes* pin, size_t* got);
  Status Sync() override;

  Status StatFs(uint64_t* live_bytes, uint64_t* files, uint64_t* backing_total,
                uint64_t* backing_avail) override;
  StoreStats GetStats() override;

  void SetChangeListener(std::function<void(const PeerChanges&)> fn) override {
    std::lock_guard<std::mutex> l(listener_mu_);
    listener_ = std::move(fn);
  }
  Status RefreshPeers() override {
    if (!tailer_) return Status::InvalidArgument("store is not open");
    return tailer_->RefreshAll();
  }
  void RequestPeerRefresh() override {
    if (tailer_) tailer_->RequestRefresh();
  }
  Status Checkpoint() override {
    if (!checkpointer_) return Status::InvalidArgument("store is not open");
    return checkpointer_->CheckpointNow(false);
  }
  Status PublishPeerProgress() override {
    if (!checkpointer_) return Status::InvalidArgument("store is not open");
    return checkpointer_->PublishPeers(true);
  }

 private:
  // Queues a journal entry for the next group commit. Requires ns_mu_ (journal order = index order).
  void EnqueueLocked(JournalEntry e) { committer_.Enqueue(std::move(e)); }
  // One round: segments durable, then the given entries appended and durable.
  // Returns the round's error (entries re-queued). *lost: set when the round dropped entries that
  // publish records a failed segment sync may have lost (DropLostEntries); the round is OK otherwise.
  Status CommitRound(std::vector<JournalEntry>* batch, Status* lost, bool durable);
  // Removes from batch the PUT / MOVE entries whose record lies in a retired segment writer's segment
  // past what its last successful fdatasync covered (SegmentWriter::MayBeLost). Returns how many.
  uint64_t DropLostEntries(std::vector<JournalEntry>* batch);
  void StopThreads();
  Status Rebuild();
  // Replays `nodes` as one history (index/replay.h ReplayNodes), from `from` (one node only) or from the start.
  Status ReplayNodes(const std::vector<std::string>& nodes, std::vector<JournalEntry>* cuts,
                     const JournalPosition& from = {}, uint64_t* entries = nullptr);
  Status CatchUpOwnJournal();
  Status RecoverSegments();
  Result<std::shared_ptr<BackingFile>> SegmentFile(const SegmentId& id);
  Result<LruCache::Value> LoadValue(const Location& loc);
  // Value bytes [off, off + len) of loc (a piece of a large value), verified, one backing read (plus the
  // record metadata when meta_cache_ does not have it and off is past the first block).
  Result<LruCache::Value> LoadPiece(const Location& loc, uint64_t off, uint64_t len);
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
  uint64_t recovery_lost_entries_ = 0;  // set by Init (PlanLostRecordCuts)
  JournalCuts lost_record_cuts_;        // own journal CUTs planned by Init, honoured by the replay

  std::mutex ns_mu_;  // namespace mutations + their journal entries
  // Staged inodes that took the name of a committed file by a rename (journaled as nothing, so that peers
  // see no ENOENT window before the staged file's PUT replaces it): the journal still has the replaced
  // file at the staged inode's path. Removing that name before the commit (unlink, rename away) must
  // journal its UNLINK, or peers and an index rebuilt from the journals resurrect the replaced content
  // (breaker-1 item 1). Guarded by ns_mu_; in memory only (staged inodes vanish at a crash, and a clean
  // close commits them first).
  std::unordered_set<uint64_t> shadowing_;
  // Extent delta PUTs (docs/format.md "Extent deltas"): per path (a writable open of a committed file
  // commits a new inode under the name, so the chain follows the name), the chain of delta PUTs journaled
  // since its last whole PUT in this mount (none: the next PUT is whole). A delta is journaled only
  // against this node's own binding, at most kDeltaChainMax in a row, and only while the deltas since the
  // last whole map add up to less than that map's encoding: journal bytes per commit stay about a
  // delta's, and a peer that could not resolve one gets a whole map again soon. Guarded by ns_mu_.
  static constexpr uint32_t kDeltaChainMax = 256;
  struct DeltaChain {
    uint32_t count = 0;       // deltas since the whole PUT
    uint64_t bytes = 0;       // their encoded bytes
    uint64_t epoch = 0;       // delta_epoch_ when the whole PUT was journaled
  };
  std::unordered_map<std::string, DeltaChain> delta_chains_;
  // Bumped when a PUT is dropped unjournaled (DropLostEntries): every chain then restarts with a whole PUT.
  std::atomic<uint64_t> delta_epoch_{0};
  std::atomic<uint64_t> delta_puts_{0}, delta_put_bytes_{0}, map_puts_{0}, map_put_bytes_{0};
  bool XattrJournaled(uint64_t ino);  // requires ns_mu_

  // Entries appended to the journal writer whose Sync has not succeeded yet (committer thread; read by
  // GetStats). Together with the committer's queue these are what a crash now would lose.
  std::atomic<uint64_t> appended_unsynced_{0};
  std::atomic<uint64_t> lost_entries_{0};  // StoreStats::lost_entries
  // The journal queue and committer thread (engine/group_commit.h); its rounds are CommitRound.
  GroupCommitter committer_{
      GroupCommitterOptions{std::chrono::milliseconds(std::max<uint32_t>(1, opts_.group_commit_interval_ms)),
                            kRetryMaxBackoff, std::chrono::milliseconds(opts_.sync_interval_ms)},
      GroupCommitHooks{[this](std::vector<JournalEntry>* batch, Status* lost, bool durable) {
                         return CommitRound(batch, lost, durable);
                       },
                       [this](const Status& s) {
                         // A full backing store: the evictor frees RESERVE (and reclaims dead segments)
                         // so the journal can take the owed entries; it kicks the committer when it did.
                         if (s.IsNoSpace()) NoteNoSpace();
                       },
                       [this] { return appended_unsynced_.load(); }}};
  // Wakes the committer for an immediate retry of owed entries (space was freed).
  void KickCommit() { committer_.Kick(); }
  uint64_t UnjournaledEntries() { return committer_.Unjournaled(); }

  // Read side: open segment files, shared loads.
  std::mutex files_mu_;
  std::map<SegmentId, std::shared_ptr<BackingFile>> files_;
  // Bumped with every descriptor closed (ForgetSegmentFileLocked): SegmentFile opens without files_mu_
  // and keeps its descriptor only if none was closed meanwhile (it may be of a file removed since).
  uint64_t files_epoch_ = 0;  // guarded by files_mu_
  void ForgetSegmentFileLocked(const SegmentId& id) {
    files_.erase(id);
    files_epoch_++;
  }
  struct Flight {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    LruCache::Value value;
  };
  std::mutex flights_mu_;
  std::map<std::string, std::shared_ptr<Flight>> flights_;
  // Loads that missed the read deadline (TimedOut): the unit's key -> until when a new load of it fails at
  // once with that status (read_deadline_ms after the failure, or until a load succeeds: all forgotten). The kernel retries a failed page read
  // right away with a READ of its own; without this it would wait a second deadline on a backing that
  // just did not answer. Guarded by flights_mu_; expired entries are pruned as new ones come.
  struct TimedOutLoad {
    std::chrono::steady_clock::time_point until;
    Status status;
  };
  std::map<std::string, TimedOutLoad> timed_out_loads_;
  // Metadata of the large values being read by block range (one metadata read per record, not per READ).
  RecordMetaCache meta_cache_;
  // Which loaded values enter the LRU (probation FIFO + ghost keys); sized in the constructor.
  ReadAdmission admission_;
  std::atomic<uint64_t> probation_reads_{0};  // FUSE reads answered from probation (rest of one load)

  // The change listener (SetChangeListener): told what peers' entries (PeerTailer) and this node's
  // drops (capacity.cc) changed. NotifyChanges calls it with no lock held.
  std::mutex listener_mu_;
  std::function<void(const PeerChanges&)> listener_;
  void NotifyChanges(const PeerChanges& out);
  // Peer tailing (engine/peer_tailer.h): made by Init over index_, hlc_ and ns_mu_; its hooks call
  // NotifyChanges and close a dropped peer segment's descriptor (files_mu_). Declared after what its
  // hooks use; its thread is stopped by StopThreads.
  // Directory renames applied here (own and peers'): peers' older entries follow them (dir_renames.h).
  // Declared before tailer_, which points to it.
  DirRenameLog dir_renames_;
  std::unique_ptr<PeerTailer> tailer_;
  Status StartPeerTailer();

  std::atomic<uint64_t> records_written_{0}, journal_entries_{0}, group_commits_{0}, checksum_failures_{0};
  std::atomic<uint64_t> visibility_rounds_{0};  // rounds that published entries without fdatasync
  // Per value read (the request at offset 0 of a value; store_data.cc ReadImpl), not per FUSE request.
  std::atomic<uint64_t> cache_hits_{0}, cache_misses_{0};
  std::atomic<uint64_t> read_loaded_bytes_{0};  // bytes the read path loaded from the export (per byte)

  // ---- peers' segment sizes (store_stats.cc), for `kvfs stats` and the global watermark ----
  // Adds the sizes of peers' segment files (segs: every peer segment the index knows, not dropped) to
  // their nodes' segment_bytes, with at most max_stats stats; sets estimated for a node with a segment
  // not sized this call. A peer's open segment stat'ed less than open_max_age ago counts that size
  // (0: stat'ed at every call). Shared by GetStats (kPeerSegmentStatsPerCall, 0) and the evictor
  // (PeerSegmentBytes: kPeerSegmentStatsPerEvictTick, kPeerOpenSegmentRestat), and so is the cache.
  void PeerSegmentSizes(const std::vector<SegmentInfo>& segs, size_t max_stats,
                        std::chrono::milliseconds open_max_age, std::map<std::string, NodeSegmentStats>* nodes);
  static constexpr size_t kPeerSegmentStatsPerCall = 256;
  static constexpr size_t kPeerSegmentStatsPerEvictTick = 64;
  static constexpr std::chrono::milliseconds kPeerOpenSegmentRestat{1000};
  struct PeerSegSize {
    uint64_t bytes = 0;
    bool sealed = false;  // stat'ed after its seal: the size never changes
    std::chrono::steady_clock::time_point at;
  };
  std::mutex peer_sizes_mu_;  // held by PeerSegmentSizes (GetStats and the evictor may run concurrently)
  std::map<SegmentId, PeerSegSize> peer_seg_sizes_;  // the last stat of each peer segment file still listed

  // ---- capacity and eviction (store.h "Capacity and eviction") ----
  Status InitEviction();
  void StopEvictor();
  void OnSealed(const SealedSegment& seg);
  void OnRetired(const SealedSegment& seg);  // a seal that could not be written: reclaimable all the same
  // A full export: seals the active segment early when most of it is dead (store.h "Capacity and eviction").
  void SealMostlyDeadActive();
  void TrackAppendLocked(const Location& loc);  // requires cap_mu_
  Status ReserveSpace(uint64_t need);
  // A write or journal append found the backing (or the capacity) full. need: the bytes the record
  // needed (value + metadata block; 0 for the journal): RESERVE comes back only once that fits too.
  void NoteNoSpace(uint64_t need = 0);
  void EvictLoop();
  void EvictOnce();
  // All peers' segment bytes for the global watermark: PeerSegmentSizes over the index's peer segments
  // (a sealed one stat'ed once, an open one at most every kPeerOpenSegmentRestat, at most
  // kPeerSegmentStatsPerEvictTick stats per call; not sized yet: its live bytes, a lower bound).
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
  // IOError once another mount has taken this node directory over (NodeDir::ownership_lost, seen by
  // the heartbeat): this mount is fenced. Its records and journal entries would go to a generation
  // nobody reads any more, so every write path (record appends, commits, namespace changes) fails
  // with EIO instead of returning success for bytes that are lost (logged through LogLimited).
  // Reads go on.
  Status Fenced() const;
  // A file's xattrs sorted by name, as its journaled PUT carries them (commit, link).
  Result<std::vector<std::pair<std::string, std::string>>> SortedXattrs(uint64_t ino);

  // ---- object tier (store_tier.cc; opts_.tier set: an S3 backing) ----
  // Uploads every queued sealed segment in order (stops at the first failure, logged); then publishes
  // this generation's journal up to the last synced entry such that it and every entry before it have
  // their segments in the bucket. force: publish even if the last publication was less than
  // kTierPublishInterval ago.
  // Returns the round's failure (OK when everything it tried succeeded).
  Status TierRound(bool force);
  // Close: TierRound until nothing is queued (a few tries, none after a round that timed out); the error
  // if something stays unpublished.
  Status TierFlush();
  // OK once this generation's journal is published through pos (after a TierRound); Busy otherwise.
  // UnlinkDue: a dropped segment's object is deleted only after its DROP is published.
  Status TierPublishedThrough(const JournalPosition& pos);
  // Init: staged segments of earlier generations uploaded, staged journals of earlier generations published.
  Status TierRecover();
  void TierSegmentSealed(const SegmentId& id);  // leader thread (OnSealed / OnRetired)
  // The uploader thread: TierRound when woken (a seal, a synced round) and at least every second
  // (a publication due, an upload to retry). Started by Init, stopped by StopThreads.
  void TierStart();
  void TierStop();
  void TierWake();
  std::thread tier_thread_;
  // --seal-after-ms: the active segment the uploader thread last saw holding records, and since when.
  // Touched by the uploader thread only.
  SegmentId tier_seal_seen_;
  std::chrono::steady_clock::time_point tier_seal_since_;
  void TierSealIfOld();
  std::condition_variable tier_cv_;  // with tier_mu_
  bool tier_stop_ = false, tier_wake_ = false;  // guarded by tier_mu_
  // Every entry appended to the journal (CommitRound, Close) with its end position: the own segments it
  // points into; then the synced position once a journal Sync succeeded.
  void TierNoteAppended(const JournalEntry& e, const JournalPosition& end);
  void TierNoteSynced(const JournalPosition& synced);
  bool TierUploadedLocked(const SegmentId& id) const;  // requires tier_mu_
  struct TierItem {
    JournalPosition end;
    std::vector<SegmentId> refs;
  };
  std::mutex tier_mu_;  // lock order: leaf (never held across I/O)
  std::deque<SegmentId> tier_pending_;       // sealed/retired own segments not uploaded yet, oldest first
  std::set<SegmentId> tier_uploaded_;        // own segments of this generation in the bucket
  std::vector<TierItem> tier_unsynced_;    // entries appended, not synced yet: end, segments needed
  std::deque<TierItem> tier_rounds_;       // entries synced, not published yet (journal order)
  JournalPosition tier_published_;           // this generation's journal is in the bucket up to here
  std::mutex tier_io_mu_;                    // one TierRound at a time
  std::chrono::steady_clock::time_point tier_last_publish_{};
  bool tier_failing_ = false;                // the last upload/publication failed (log once per streak)
  std::atomic<uint64_t> tier_segments_uploaded_{0}, tier_journal_publications_{0}, tier_failures_{0};

  bool evict_enabled_ = false;
  bool track_hits_ = false;
  EvictionLimits limits_;  // set by InitEviction (eviction_policy.h)
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
  // full: the export is full (dead segments go after kFullExportDeadAge instead of dead_segment_age_ms;
  // so do those found while BackingLow()).
  void ReclaimDeadSegments(bool full);
  // The backing has less than RESERVE plus two segments free (a statvfs at most once a second; the
  // evictor thread only, and only when a dead segment younger than dead_segment_age_ms exists): such
  // segments then go after kFullExportDeadAge, as on a full export. The export need not have failed a
  // write for that: a fill can end with room for the write that failed, RESERVE comes back at once, and
  // the dead segments of an rm then waited the ordinary 10 s (full_export_test.py).
  bool BackingLow();
  std::chrono::steady_clock::time_point low_checked_{};
  bool low_ = false;
  // The segment cleaner (store.h "Capacity and eviction"): when this node's dead segment bytes exceed
  // its live bytes, re-appends the live records of its sealed, unpinned segments that are less than 1/4
  // live (ReinsertRecord: MOVE) and drops them.
  void CleanSegments();
  std::chrono::steady_clock::time_point last_clean_scan_{};
  // RESERVE released for a full backing, or not creatable for lack of space: record writes then keep
  // that much of the backing free for the journal (so deletes work) until RESERVE is back.
  std::atomic<bool> hold_reserve_{false};
  // The largest record (bytes with its metadata block) that failed for lack of space since RESERVE was
  // last written: EnsureReserve takes RESERVE back only when this much stays free after it, so the
  // store leaves its full state (1 s dead-segment age, early seals) only when that write would succeed.
  std::atomic<uint64_t> nospace_need_{0};
  // Records written by WriteRecord* / WriteProvisionalRecord and not released yet (ReleaseRecordPin, or
  // CommitFile of that record), by (segment, record offset); pins_ counts them per segment. A segment
  // with a pinned record is never dropped, neither as dead nor by eviction.
  std::set<std::pair<SegmentId, uint64_t>> pinned_records_;
  std::map<SegmentId, uint64_t> pins_;
  // Records held by readers (PinRecord), counted, by (segment, record offset); each count is one more
  // in pins_ for its segment.
  std::map<std::pair<SegmentId, uint64_t>, uint64_t> held_records_;
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
  std::atomic<uint64_t> dead_segments_evicted_{0};
  std::atomic<uint64_t> cleaned_segments_{0}, cleaned_records_{0}, cleaned_bytes_copied_{0},
      cleaned_bytes_freed_{0};
  std::atomic<uint64_t> records_reinserted_{0}, bytes_reinserted_{0}, writer_waits_{0}, nospace_events_{0};
  std::atomic<uint64_t> segments_sealed_early_{0}, segments_retired_{0};

  // atime notes (NoteRead, store_namespace.cc): inode -> atime of a read not journaled yet. FlushAtimes
  // journals them (SetAttr of atime) from the evictor thread once the oldest is kAtimeFlushDelay old,
  // and all of them at Close. Lock order: atime_mu_ is a leaf (never held while SetAttr runs).
  void FlushAtimes(bool all);
  // SetAttr with the caller's HLC stamp (0: a new one); FlushAtimes passes the read's (kSetAtimeOfRead).
  Result<Attr> SetAttrStamped(uint64_t ino, const Attr& attr, uint32_t mask, uint64_t stamp);
  struct AtimeNote {
    int64_t atime_ns = 0;
    uint64_t stamp = 0;  // HLC at the read: orders it against utimensat and new versions (inode.h); 0: at the flush
  };
  std::mutex atime_mu_;
  std::unordered_map<uint64_t, AtimeNote> atime_notes_;
  std::chrono::steady_clock::time_point atime_oldest_{};
  std::atomic<size_t> atime_pending_{0};      // atime_notes_.size(), read without the lock
  std::atomic<uint64_t> atime_updates_{0};    // notes journaled since the mount

  // ---- holds of peers' segments (peer_holds.cc; docs/semantics.md §6.10 "Across nodes") ----
  // PinRecord of a record in a peer's segment: its marker <node>/holds/<owner>/<segment file name> on
  // the export (created if absent, before the owner's journal is read and the drop checked), so that
  // the owner defers the unlink of the segment after a DROP while this node is live. NotFound when the
  // segment is dropped (the hold is not taken).
  Status HoldPeerSegment(const SegmentId& seg);
  void UnholdPeerSegment(const SegmentId& seg);
  // Removes the markers not held for kPeerHoldLinger (all: every marker not held, at once). Evictor
  // thread and Close.
  void SweepPeerHolds(bool all);
  // At mount: removes this node's markers left by an earlier generation (it holds nothing yet).
  void ClearOwnHoldMarkers();
  // The owner's side: which of `segs` (this node's dropped segments) a live peer holds (a marker under
  // its holds/<this node>/). *complete = false if a listing failed (the caller keeps them all).
  std::set<SegmentId> SegmentsHeldByPeers(const std::vector<SegmentId>& segs, bool* complete);
  struct PeerHold {
    std::mutex mu;        // held across the marker's I/O and the owner's journal read (one at a time)
    bool marker = false;  // the marker exists (mu)
    uint64_t count = 0;   // PinRecords of records in the segment not matched by an UnpinRecord (peer_holds_mu_)
    std::chrono::steady_clock::time_point released{};  // when count went to 0 (peer_holds_mu_)
  };
  std::mutex peer_holds_mu_;  // a leaf, or taken inside a PeerHold's mu
  std::map<SegmentId, std::shared_ptr<PeerHold>> peer_holds_;
  std::vector<std::string> hold_check_nodes_;  // nodes listed by the last SegmentsHeldByPeers (evictor thread)
  std::set<std::string> hold_dirs_made_;  // owners whose holds/<owner>/ this mount made (peer_holds_mu_)
  std::atomic<uint64_t> peer_hold_markers_{0};  // gauge: markers of this node on the export
  std::atomic<uint64_t> peer_hold_markers_created_{0}, peer_hold_checks_failed_{0};
  // Owner side (cap_mu_): dropped segments whose unlink waits for a live peer's hold, with their bytes.
  std::map<SegmentId, uint64_t> held_by_peers_;
  std::atomic<uint64_t> unlinks_deferred_by_peers_{0};
};

}  // namespace kvfs
