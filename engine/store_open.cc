// Store::Open and the StoreImpl lifecycle: Init (option defaults, index open or rebuild from the journals,
// node directory takeover, segment recovery of earlier generations, segment and journal writers, the
// group commit, heartbeat, peer, evictor and checkpointer threads), Rebuild / CatchUpOwnJournal /
// ReplayNode (index/replay.h), RecoverSegments (engine/recovery.h), StartPeerTailer (the PeerTailer of
// engine/peer_tailer.h over the index, HLC and ns_mu_), StopThreads and Close.
//
// Callers: Store::Open (FUSE daemon, tools, tests); Close at unmount; the destructor calls StopThreads.
// Thread safety: Init runs before the store is shared (no lock but ns_mu_ for the startup CUT/SEAL
// entries); Close is called once, when no other call runs. StopThreads stops the PeerTailer and the committer.
// Invariants: a refused mount (busy index) writes nothing to the backing store; CUTs are journaled
// first, then SEALs, at the head of the new generation's journal; the index is marked clean only when
// every entry was journaled and no entry was lost to a failed segment sync.
#include "engine/store_impl.h"

#include <sys/vfs.h>

namespace kvfs {
namespace {

// Close retries owed journal entries this often before it reports them.
constexpr int kCloseRetries = 10;
constexpr auto kCloseRetryWait = std::chrono::milliseconds(200);

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
  if (opts_.tier) {
    // An S3 backing: a snapshot is only taken at a clean Close, after the journal it covers is published
    // (a periodic one could reach the bucket ahead of its segments; docs/s3.md "The first slice: a tiered Env").
    opts_.checkpoint_entries = 0;
    opts_.checkpoint_interval_ms = 0;
  }
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
  if (ObjectTier* tier = opts_.tier) {
    // S3: the new generation is claimed with a conditional PUT (or the timed fallback): of two mounts
    // taking this node over at once, one gets it (docs/s3.md "Conditional writes and the fallback").
    nd.claim = [tier](const std::string& dir, uint64_t g, const std::string& owner) {
      return tier->ClaimGeneration(dir, g, owner);
    };
  }
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
  if (opts_.link_claims) {
    // No sweep on S3 (claims there have no server ctime to age by; a pass would LIST the bucket).
    arbiter_ = std::make_unique<LinkArbiter>(env_, opts_.backing_dir,
                                             HeartbeatFilePath(opts_.backing_dir, opts_.node_id),
                                             /*sweep=*/opts_.tier == nullptr);
    KVFS_RETURN_IF_ERROR(arbiter_->Init());
  }
  spdlog::info("kvfs: node {} generation {} ({})", opts_.node_id, node_dir_->generation(),
               node_dir_->takeover_reason());

  // An S3 backing: what a crash left in the staging directory goes to the bucket first (or aside, if
  // another mount took over since), before any journal is read.
  KVFS_RETURN_IF_ERROR(TierRecover());
  bool rebuild = !idx.ok() || (*idx)->Created() || !(*idx)->WasCleanlyClosed();
  const std::string& backing_id = node_dir_->format_id();
  if (!rebuild && !backing_id.empty()) {
    // An index built over another backing store (or over this one before it was wiped and formatted
    // again) holds Locations into segments that are not these: never serve them.
    auto have = (*idx)->BackingId();
    if (!have.ok() || *have != backing_id) {
      spdlog::warn("kvfs: index {} was built for another backing store (FORMAT id {}, the index's '{}'); rebuilding",
                   io.dir, backing_id, have.ok() ? *have : have.status().ToString());
      rebuild = true;
    }
  }
  if (!rebuild && IndexPredatesPurge(env_, opts_.backing_dir, opts_.node_id, idx->get())) {
    spdlog::warn("kvfs: node {} was purged after index {} was last used; rebuilding", opts_.node_id, io.dir);
    rebuild = true;
  }
  if (!idx.ok()) spdlog::warn("kvfs: index {} unusable ({}); rebuilding", io.dir, idx.status().ToString());
  if (rebuild) {
    // After a crash (the index was not closed): entries of the last generation whose records a power cut
    // lost after a visibility round are cut, with everything after them (engine/recovery.h).
    LostRecordPlan lost;
    KVFS_RETURN_IF_ERROR(PlanLostRecordCuts(env_, opts_.backing_dir, opts_.node_id, node_dir_->generation(), &lost));
    recovery_lost_entries_ = lost.entries_dropped;
    recovery_cuts_ += lost.cuts.size();
    lost_record_cuts_ = std::move(lost.journal_cuts);
    for (auto& e : lost.cuts) startup_cuts_.push_back(std::move(e));
  }
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
  if (!backing_id.empty()) KVFS_RETURN_IF_ERROR(index_->SetBackingId(backing_id));
  KVFS_RETURN_IF_ERROR(index_->MarkOpen());
  hlc_.SetFloor(index_->HlcFloor());

  SegmentWriterOptions so;
  so.segment_size = opts_.segment_size;
  so.direct_io = opts_.direct_io;
  so.seal_on_close = true;
  so.on_seal = [this](const SealedSegment& seg) { OnSealed(seg); };
  so.on_retire = [this](const SealedSegment& seg) { OnRetired(seg); };
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
  tier_published_ = JournalPosition{jo.generation, jo.first_file_number, 0};

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
  committer_.Start();
  TierStart();
  node_dir_->StartHeartbeat(std::chrono::milliseconds(opts_.heartbeat_interval_ms));
  ClearOwnHoldMarkers();  // an earlier generation's holds of peers' segments (peer_holds.cc)
  KVFS_RETURN_IF_ERROR(StartPeerTailer());
  KVFS_RETURN_IF_ERROR(InitEviction());
  KVFS_RETURN_IF_ERROR(StartCheckpointer());
  // Make the fresh journal file, the CUTs and the directory entries durable before serving.
  return Sync();
}

// Whether a descriptor kept open on dir sees another process's appends at once without O_DIRECT: a
// local disk file system (one page cache for every process). Not NFS (close-to-open: a kept descriptor
// trusts the client's attribute cache, 3-60 s), FUSE or other network file systems.
static bool BackingIsLocalFileSystem(const std::string& dir) {
  struct statfs sf;
  if (statfs(dir.c_str(), &sf) != 0) return false;
  switch (static_cast<uint64_t>(sf.f_type)) {
    case 0xEF53:      // ext2/3/4
    case 0x58465342:  // xfs
    case 0x9123683E:  // btrfs
    case 0x01021994:  // tmpfs
    case 0x2FC12FC1:  // zfs
    case 0x794C7630:  // overlayfs
      return true;
    default:
      return false;
  }
}

// The PeerTailer over our index, HLC and namespace mutex. It resumes tailing each peer where the index says
// it stopped (rebuild or previous mount); its thread runs when peer_poll_ms > 0.
Status StoreImpl::StartPeerTailer() {
  PeerTailerOptions po;
  po.env = env_;
  po.backing_dir = opts_.backing_dir;
  po.node = opts_.node_id;
  po.dir_renames = &dir_renames_;
  po.poll_interval = std::chrono::milliseconds(opts_.peer_poll_ms);
  po.idle_poll_max = std::chrono::milliseconds(opts_.peer_poll_max_ms);
  po.group_commit_interval = std::chrono::milliseconds(opts_.group_commit_interval_ms);
  po.direct_io = opts_.peer_direct_io;
  // A kept descriptor must see the peer's appends: with O_DIRECT (every read goes to the server), or on
  // a local file system (one page cache). Not on an object store (its polls list sizes instead).
  po.keep_tail_open = opts_.tier == nullptr && (opts_.peer_direct_io || BackingIsLocalFileSystem(opts_.backing_dir));
  po.nodes_dir_stat = opts_.tier == nullptr;  // S3: Stat gives the staging directory's, not the bucket's
  PeerTailerHooks hooks;
  hooks.notify = [this](const PeerChanges& c) { NotifyChanges(c); };
  hooks.segment_dropped = [this](const SegmentId& id) {
    std::lock_guard<std::mutex> fl(files_mu_);
    ForgetSegmentFileLocked(id);
  };
  tailer_ = std::make_unique<PeerTailer>(std::move(po), index_.get(), &hlc_, &ns_mu_, std::move(hooks));
  tailer_->ResumeFromIndex();
  tailer_->Start();
  return Status::OK();
}

Status StoreImpl::Rebuild() {
  auto t0 = std::chrono::steady_clock::now();
  auto nodes = ListNodes(env_, opts_.backing_dir);
  if (!nodes.ok()) return nodes.status();
  KVFS_RETURN_IF_ERROR(ReplayNodes(*nodes, &startup_cuts_));
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
  KVFS_RETURN_IF_ERROR(ReplayNodes({opts_.node_id}, &startup_cuts_, from, &entries));
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

// Replays the journals of `nodes` (after `from`, given for one node only) into the index as one history,
// with the shared rules of index/replay.h (the same code `kvfs-fsck --rebuild-index` runs). A torn tail
// of one of this node's own files that no CUT covers yet yields a CUT entry in *cuts, journaled by the
// new generation. *entries = entries read.
Status StoreImpl::ReplayNodes(const std::vector<std::string>& nodes, std::vector<JournalEntry>* cuts,
                              const JournalPosition& from, uint64_t* entries) {
  std::vector<ReplayNodeResult> results(nodes.size());
  std::vector<ReplaySource> sources;
  for (size_t i = 0; i < nodes.size(); i++) {
    sources.push_back(ReplaySource{nodes[i], from, nodes[i] == opts_.node_id ? &lost_record_cuts_ : nullptr,
                                   &results[i]});
  }
  KVFS_RETURN_IF_ERROR(kvfs::ReplayNodes(env_, opts_.backing_dir, sources, index_.get()));
  if (entries) *entries = 0;
  for (size_t i = 0; i < nodes.size(); i++) {
    const std::string& node = nodes[i];
    const ReplayNodeResult& result = results[i];
    if (entries) *entries += result.entries;
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
  }
  return Status::OK();
}

void StoreImpl::StopThreads() {
  if (checkpointer_) checkpointer_->Stop();
  StopEvictor();
  if (node_dir_) node_dir_->StopHeartbeat();
  if (tailer_) tailer_->Stop();
  committer_.Stop();
  TierStop();
}

Status StoreImpl::Close() {
  if (closed_) return Status::OK();
  FlushAtimes(true);  // journaled by the Sync below
  StopEvictor();  // no reinsertion may race with Segments()->Close()
  // Peers' changes no longer matter to this node; with a hung backing every poll would cost a deadline
  // per peer before the unmount's own writes (S3 breaker: 26 s with 4 peers at a 4 s deadline).
  if (tailer_) tailer_->Stop();
  SweepPeerHolds(true);  // every hold of a peer's segment was released with the last handle
  Status s = Sync();
  // The links' PUTs are durable: their claims go now (a peer that has not applied one yet answers from
  // its index within a poll or two).
  if (arbiter_ && s.ok()) arbiter_->Tick(true);
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
  for (auto& e : sealed) TierNoteAppended(e, journal_->Append(e));
  if (s.ok()) s = journal_->Sync();
  for (const auto& e : sealed) index_->SetSegmentState(e.segment, SegmentState::kSealed);
  if (s.ok() && opts_.tier) {
    // An S3 backing: every sealed segment uploaded and the journal published before the snapshot
    // (which a remount from the bucket may read instead of the journal).
    s = TierFlush();
  }
  if (s.ok() && checkpointer_) {
    // Clean unmount: a snapshot of everything journaled since the last one, and our final read positions.
    closing_ = true;
    Status c = opts_.checkpoint_on_close ? checkpointer_->CheckpointNow(true) : Status::OK();
    if (!c.ok()) spdlog::error("kvfs: checkpoint at unmount: {}", c.ToString());
    c = checkpointer_->PublishPeers(false);
    if (!c.ok()) spdlog::warn("kvfs: peers file at unmount: {}", c.ToString());
  }
  if (s.ok() && opts_.tier) s = TierFlush();  // what the checkpoint appended (journal rotation)
  if (opts_.tier) {
    // Also after a failed unmount (a gateway down): what it cost is what a site pays for.
    const S3Counters& c = opts_.tier->s3_counters();
    spdlog::info("kvfs: s3: {} segment(s) uploaded, {} journal publication(s); requests put={} get={} head={} "
                 "delete={} list={} multipart={}/{}/{} total={}; bytes sent {} received {}",
                 tier_segments_uploaded_.load(), tier_journal_publications_.load(), c.Requests(S3Op::kPut),
                 c.Requests(S3Op::kGet), c.Requests(S3Op::kHead), c.Requests(S3Op::kDelete), c.Requests(S3Op::kList),
                 c.Requests(S3Op::kCreateMultipart), c.Requests(S3Op::kUploadPart),
                 c.Requests(S3Op::kCompleteMultipart), c.TotalRequests(), c.bytes_sent.load(),
                 c.bytes_received.load());
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
  if (s.ok()) {
    // Clean unmount: RESERVE goes too (a node that is not mounted holds no space for its journal; the
    // evictor recreates it at the next mount), removed while this mount still owns the directory.
    // Kept after a failed close, for the next mount to free.
    Status r = env_->Remove(node_dir_->dir() + "/" + kReserveName);
    if (!r.ok() && !r.IsNotFound()) spdlog::warn("kvfs: removing the eviction reserve at unmount: {}", ErrnoText(r));
    reserve_present_ = false;
  }
  if (s.ok()) s = node_dir_->Release();
  index_->Close();
  if (!s.ok()) spdlog::error("kvfs: close: {}", ErrnoText(s));
  return s;
}

}  // namespace kvfs
