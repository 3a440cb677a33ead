// PeerTailer (engine/peer_tailer.h): polls of peers' journals (PollPeer), their snapshots
// (ApplyPeerSnapshot) and purges (ForgetPurgedPeer), the peer thread (Loop: adaptive poll interval, early
// polls by RequestRefresh), per-peer figures.
//
// Callers, thread safety and invariants: see peer_tailer.h. mu_ is held for a whole poll; the namespace
// mutex only around each IndexDb::ApplyBatch; the hooks run under mu_ alone.
#include "engine/peer_tailer.h"

#include <algorithm>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "blockstore/log.h"
#include "blockstore/node_dir.h"
#include "engine/checkpoint.h"
#include "engine/dir_renames.h"
#include "index/replay.h"

namespace kvfs {
namespace {

// Entries per ApplyBatch of a peer's journal.
constexpr size_t kPeerApplyBatch = kReplayBatch;

}  // namespace

PeerTailer::PeerTailer(PeerTailerOptions opts, IndexDb* index, HybridClock* hlc, std::mutex* ns_mu,
                       PeerTailerHooks hooks)
    : opts_(std::move(opts)), index_(index), hlc_(hlc), ns_mu_(ns_mu), hooks_(std::move(hooks)) {}

PeerTailer::~PeerTailer() { Stop(); }

void PeerTailer::ResumeFromIndex() {
  const auto positions = index_->GetAppliedPositions();
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [node, pos] : positions) {
    if (node == opts_.node) continue;
    PeerState st;
    unsigned long long g = 0, n = 0, off = 0;
    if (sscanf(pos.c_str(), "%llu-%llu@%llu", &g, &n, &off) == 3) {
      st.have_position = true;
      st.position = JournalPosition{g, n, off};
    }
    peers_[node] = st;
  }
}

void PeerTailer::Start() {
  if (opts_.poll_interval.count() == 0) return;
  std::lock_guard<std::mutex> l(wake_mu_);
  if (stop_ || thread_.joinable()) return;
  thread_ = std::thread([this] { Loop(); });
}

void PeerTailer::Stop() {
  stopping_ = true;
  {
    std::lock_guard<std::mutex> l(wake_mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::map<std::string, JournalPosition> PeerTailer::Positions() {
  std::map<std::string, JournalPosition> m;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [node, st] : peers_)
    if (st.have_position) m[node] = st.position;
  return m;
}

PeerTailerStats PeerTailer::GetStats() {
  PeerTailerStats s;
  {
    std::lock_guard<std::mutex> l(mu_);
    s.peers = peers_.size();
    s.orphans_pending = orphans_.size();
    s.dir_rename_redirects = opts_.dir_renames ? opts_.dir_renames->redirected() : 0;
  }
  s.entries_applied = entries_applied_;
  s.unresolved_deltas = unresolved_deltas_;
  s.orphans_applied = orphans_applied_;
  s.polls = polls_;
  s.tail_reads = tail_reads_;
  s.nodes_listings = nodes_listings_;
  s.nodes_looks_unchanged = nodes_looks_unchanged_;
  std::lock_guard<std::mutex> l(stats_mu_);
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [id, r] : stats_) {
    PeerJournalStats p;
    p.node = id;
    p.polls = r.polls;
    p.entries_applied = r.applied;
    p.lag_seconds = r.lag_s;
    if (r.polled) p.last_poll_age_seconds = std::chrono::duration<double>(now - r.last_poll).count();
    s.journals.push_back(p);
  }
  return s;
}

void PeerTailer::NotePoll(const std::string& node, uint64_t applied, uint64_t newest_stamp) {
  std::lock_guard<std::mutex> l(stats_mu_);
  PeerStatsRec& r = stats_[node];
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

namespace {
// A BackingFile that shares a descriptor kept open across polls (PeerState::tail) with one JournalReader.
class SharedTailFile final : public BackingFile {
 public:
  explicit SharedTailFile(std::shared_ptr<BackingFile> f) : f_(std::move(f)) {}
  Status Read(uint64_t offset, size_t n, void* buf, size_t* got) override { return f_->Read(offset, n, buf, got); }
  Status Write(std::span<const WriteOp> ops) override { return f_->Write(ops); }
  Status Sync() override { return f_->Sync(); }
  Status Truncate(uint64_t size) override { return f_->Truncate(size); }
  Result<uint64_t> Size() override { return f_->Size(); }
  const std::string& path() const override { return f_->path(); }

 private:
  std::shared_ptr<BackingFile> f_;
};
}  // namespace

Status PeerTailer::PollPeer(const std::string& node, PeerState* st, uint64_t* changed, bool may_use_tail) {
  *changed = 0;
  polls_++;
  uint64_t newest_stamp = 0;  // of the entries read in this poll (peer lag, GetStats)
  struct NoteOnExit {
    PeerTailer* self;
    const std::string& node;
    const uint64_t* changed;
    const uint64_t* newest;
    ~NoteOnExit() { self->NotePoll(node, *changed, *newest); }
  } note_on_exit{this, node, changed, &newest_stamp};
  if (may_use_tail && st->tail && st->have_position &&
      st->tail_key == std::make_pair(st->position.generation, st->position.file_number)) {
    // The kept tail (keep_tail_open): our position is in the newest journal file the last listing
    // found. Read on through the kept descriptor: one read, no listing, no open. Nothing new for
    // tail_relist since that listing: list again (the peer may have moved to a new file: a checkpoint's
    // cut, or a new generation).
    bool stop = false, failed = false;
    Status s = ReadJournalFile(node, st, st->tail_key, st->tail->path(), st->position.offset, st->tail, changed,
                               &newest_stamp, &stop, &failed);
    if (s.ok() && !failed) {
      tail_reads_++;
      if (*changed > 0 || stop || std::chrono::steady_clock::now() - st->listed_at < opts_.tail_relist) {
        return Status::OK();
      }
    } else {
      st->tail.reset();  // e.g. ESTALE: the file was retired under us; the listing below decides
    }
  }
  NodeFiles nf;
  Status s = ListNodeFiles(opts_.env, NodeDirPath(opts_.backing_dir, node), &nf);
  if (s.IsNotFound()) return Status::OK();
  KVFS_RETURN_IF_ERROR(s);
  st->listed_at = std::chrono::steady_clock::now();
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
        auto purged = ReadPurgedGeneration(opts_.env, opts_.backing_dir, node);
        if (purged.ok() && *purged >= st->position.generation) {
          KVFS_RETURN_IF_ERROR(ForgetPurgedPeer(node, *purged, &snap_changes));
          st->position = JournalPosition{*purged + 1, 0, 0};
          std::lock_guard<std::mutex> l(*ns_mu_);
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
    Notify(snap_changes);
  }
  for (const auto& f : files) {
    uint64_t start = 0;
    if (st->have_position) {
      const auto key = std::make_pair(f.generation, f.number);
      const auto at = std::make_pair(st->position.generation, st->position.file_number);
      if (key < at) continue;  // fully applied before
      if (key == at) {
        start = st->position.offset;
        // Read cleanly to the size the listing gives (S3: the journal object's size; a journal object
        // is only ever replaced by a longer prefix): nothing new, so an idle peer's poll is that one
        // LIST, without the open (HEAD) and read (GET) of its journal object.
        if (f.listed_size >= 0 && st->clean_file == key && static_cast<uint64_t>(f.listed_size) == st->clean_size) {
          continue;
        }
      } else {
        // Every earlier file was read to its clean end: we are past it (what the peers file publishes,
        // so the writer may retire it), even if this file holds no entry yet.
        st->position = JournalPosition{f.generation, f.number, 0};
      }
    }
    // The newest file is kept open for the next polls (keep_tail_open); older ones are read once.
    const bool newest = opts_.keep_tail_open && &f == &files.back();
    const auto key = std::make_pair(f.generation, f.number);
    std::shared_ptr<BackingFile> file;
    if (newest) {
      if (!st->tail || st->tail_key != key) {
        OpenOptions o;
        o.direct = opts_.direct_io;
        auto opened = opts_.env->Open(f.path, o);
        if (!opened.ok()) return opened.status();
        st->tail = std::shared_ptr<BackingFile>(std::move(*opened));
        st->tail_key = key;
      }
      file = st->tail;
    } else if (st->tail && st->tail_key == key) {
      file = st->tail;
    }
    bool stop = false;
    bool failed = false;
    KVFS_RETURN_IF_ERROR(ReadJournalFile(node, st, key, f.path, start, file, changed, &newest_stamp, &stop, &failed));
    if (failed && file) st->tail.reset();  // a kept descriptor that fails (ESTALE) is not kept
    if (stop) break;  // "not yet"
  }
  if (st->tail && (files.empty() || st->tail_key != std::make_pair(files.back().generation, files.back().number))) {
    st->tail.reset();  // not the newest file any more (or gone)
  }
  return Status::OK();
}

// Reads journal file `key` (at `path`) from `start` and applies its entries (batches of kPeerApplyBatch,
// each with the position after it). file: a descriptor kept open (PeerState::tail), or null to open
// the file for this read. *stop: the read ended at a torn or damaged tail, or an error of the reader
// ("not yet": the next poll resumes at the position).
Status PeerTailer::ReadJournalFile(const std::string& node, PeerState* st, std::pair<uint64_t, uint64_t> key,
                                   const std::string& path, uint64_t start, const std::shared_ptr<BackingFile>& file,
                                   uint64_t* changed, uint64_t* newest_stamp, bool* stop_out, bool* read_failed) {
  const JournalFile f{key.first, key.second, path, -1};
    JournalReaderOptions ro;
    // A short or bad tail in a peer's file means "not yet" (the writer is still appending, or NFS has
    // not shown us its bytes): stop there and retry at the next poll, never cut.
    ro.skip_damage = false;
    ro.direct = opts_.direct_io;
    ro.expect_node = node;
    ro.readahead = 4 * kJournalBlockSize;  // an idle peer's poll reads one small window at its tail
    auto reader = file ? JournalReader::OpenFile(opts_.env, std::make_unique<SharedTailFile>(file), path, start, ro)
                       : JournalReader::Open(opts_.env, path, start, ro);
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
        std::lock_guard<std::mutex> l(*ns_mu_);
        if (opts_.dir_renames) {
          for (auto& op : ops) opts_.dir_renames->Redirect(&op, node);
        }
        r = index_->ApplyBatch(ops, node, last.ToString());
        if (r.ok() && opts_.dir_renames) {
          for (size_t i : r->moved_dirs) {
            opts_.dir_renames->Note(ops[i].path, ops[i].to, ops[i].stamp, node,
                                    ops[i].kind == ApplyOp::Kind::kExchange);
          }
        }
      }
      if (!r.ok()) return r.status();
      *changed += ops.size();
      entries_applied_ += ops.size();
      unresolved_deltas_ += r->unresolved_deltas;
      KeepOrphans(node, ops, *r);
      for (const auto& op : ops) {
        // A peer dropped a segment: close our fd now, so reads after its unlink fail to open
        // (ENOENT) rather than read a stale NFS handle.
        if (op.kind == ApplyOp::Kind::kDrop) SegmentDropped(op.segment);
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
        if (read_failed) *read_failed = true;
        break;
      }
      if (!*more) break;
      if (!hlc_->Update(e.stamp).ok()) {
        spdlog::warn("kvfs: peer {} entry stamp {} is too far in the future; applied without advancing the clock",
                     node, e.stamp);
      }
      ApplyOp op;
      if (JournalEntryToApplyOp(e, &op)) ops.push_back(std::move(op));
      last = end;
      *newest_stamp = std::max(*newest_stamp, e.stamp);
      if (ops.size() >= kPeerApplyBatch) KVFS_RETURN_IF_ERROR(apply());
    }
    KVFS_RETURN_IF_ERROR(apply());
    if (!st->have_position || st->position < last) {
      // Entries that apply nothing (CUT) still move the position.
      st->have_position = true;
      st->position = last;
    }
    Notify(out);
    const auto& rep = (*reader)->report();
    if (!stop && rep.end == JournalEnd::kClean) {
      st->clean_file = {f.generation, f.number};
      st->clean_size = rep.file_size;
    }
    if (stop || rep.end == JournalEnd::kDamaged || rep.end == JournalEnd::kTorn) *stop_out = true;
    return Status::OK();
}

void PeerTailer::Notify(const PeerChanges& out) {
  if (out.names.empty() && out.inodes.empty()) return;
  if (hooks_.notify) hooks_.notify(out);
}

void PeerTailer::SegmentDropped(const SegmentId& id) {
  if (hooks_.segment_dropped) hooks_.segment_dropped(id);
}

// Applies node's newest usable snapshot (index/replay.h ApplyNewestSnapshot) and moves our position to
// its cover. Nothing happens if none verifies (the journals that remain are read as usual).
Status PeerTailer::ApplyPeerSnapshot(const std::string& node, const std::vector<SnapshotFile>& snaps,
                                     PeerState* st, PeerChanges* out, uint64_t* changed) {
  const SnapshotFile* used = nullptr;
  uint64_t entries = 0, max_stamp = 0;
  DirRenameKeys reflected;  // the snapshot's records: its names already reflect them
  KVFS_RETURN_IF_ERROR(ApplyNewestSnapshot(
      opts_.env, node, snaps,
      [&](std::vector<ApplyOp>* ops, bool) -> Status {
        if (ops->empty()) return Status::OK();
        Result<ApplyResult> r = Status::OK();
        {
          std::lock_guard<std::mutex> l(*ns_mu_);
          if (opts_.dir_renames) {
            // The snapshot's records of directory renames (they come first: the peer's own and those it
            // applied): the peers' entries older than one, read after it, follow it
            // (engine/dir_renames.h). The snapshot's own entries follow the renames noted here, except
            // those records (its names reflect them, index/dir_redirect.h).
            for (const auto& op : *ops) {
              if (op.kind == ApplyOp::Kind::kDirRenameRecord) {
                const std::string& by = op.node.empty() ? node : op.node;
                opts_.dir_renames->Note(op.path, op.to, op.stamp, by, op.exchange);
                reflected.emplace(op.stamp, by);
              }
            }
            for (auto& op : *ops) opts_.dir_renames->Redirect(&op, node, &reflected);
          }
          r = index_->ApplyBatch(*ops, node);
        }
        if (!r.ok()) return r.status();
        *changed += ops->size();
        entries_applied_ += ops->size();
        KeepOrphans(node, *ops, *r);
        for (auto& c : r->changed) out->names.push_back(PeerChanges::Name{c.parent, std::move(c.name), c.old_ino});
        for (uint64_t ino : r->attr_changed) out->inodes.push_back(ino);
        return Status::OK();
      },
      &used, &entries, &max_stamp, nullptr));
  if (used == nullptr) return Status::OK();
  if (!hlc_->Update(max_stamp).ok()) {
    spdlog::warn("kvfs: peer {} snapshot stamp {} is too far in the future", node, max_stamp);
  }
  st->have_position = true;
  st->position = JournalPosition{used->generation, used->number, 0};
  st->purge_checked = false;
  std::lock_guard<std::mutex> l(*ns_mu_);
  auto r = index_->ApplyBatch({}, node, st->position.ToString());
  if (!r.ok()) return r.status();
  spdlog::info("kvfs: peer {}: applied snapshot {} ({} entries)", node, used->path, entries);
  return Status::OK();
}

// `kvfs node purge` removed node's files while we were not reading (its DROP entries are gone with its
// journal): drop every segment of the node that our index still knows, so its names vanish here too.
Status PeerTailer::ForgetPurgedPeer(const std::string& node, uint64_t purge_generation, PeerChanges* out) {
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
    std::lock_guard<std::mutex> l(*ns_mu_);
    r = index_->ApplyBatch(ops, node);
  }
  if (!r.ok()) return r.status();
  for (const auto& op : ops) SegmentDropped(op.segment);
  for (auto& c : r->changed) out->names.push_back(PeerChanges::Name{c.parent, std::move(c.name), c.old_ino});
  return Status::OK();
}

Status PeerTailer::RefreshAll() {
  auto nodes = ListNodes(opts_.env, opts_.backing_dir);
  if (!nodes.ok()) return nodes.status();
  std::lock_guard<std::mutex> l(mu_);
  Status first;
  uint64_t total = 0;
  for (const auto& node : *nodes) {
    if (node == opts_.node) continue;
    uint64_t changed = 0;
    Status s = PollPeer(node, &peers_[node], &changed);
    if (!s.ok() && first.ok()) first = s;
    total += changed;
  }
  if (total > 0) RetryOrphans();
  return first;
}

void PeerTailer::KeepOrphans(const std::string& node, const std::vector<ApplyOp>& ops, const ApplyResult& r) {
  for (size_t i : r.no_target) {
    if (i >= ops.size()) continue;
    if (orphans_.size() >= kMaxOrphans) orphans_.erase(orphans_.begin());
    Orphan o{ops[i], std::chrono::steady_clock::now()};
    o.op.node = node;
    orphans_.push_back(std::move(o));
  }
}

void PeerTailer::RetryOrphans() {
  if (orphans_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(orphans_, [&](const Orphan& o) { return now - o.since > kOrphanRetention; });
  if (orphans_.empty()) return;
  std::vector<ApplyOp> ops;
  ops.reserve(orphans_.size());
  for (const auto& o : orphans_) ops.push_back(o.op);
  Result<ApplyResult> r = Status::OK();
  {
    std::lock_guard<std::mutex> l(*ns_mu_);
    if (opts_.dir_renames) {
      // A directory renamed since: the change lands under its new path (engine/dir_renames.h).
      for (size_t i = 0; i < ops.size(); ++i) {
        if (opts_.dir_renames->Redirect(&ops[i], opts_.node)) orphans_[i].op = ops[i];
      }
    }
    r = index_->ApplyBatch(ops, opts_.node);  // every op names its peer (ApplyOp::node)
  }
  if (!r.ok()) {
    LogLimited(spdlog::level::warn, LogKey("peer-orphans", r.status()), "kvfs: re-applying peers' changes: {}",
               ErrnoText(r.status()));
    return;
  }
  // What still finds no name stays; the rest applied now (or lost to a newer change: LWW).
  std::vector<Orphan> left;
  for (size_t i : r->no_target) left.push_back(std::move(orphans_[i]));
  orphans_applied_ += orphans_.size() - left.size();
  orphans_ = std::move(left);
  PeerChanges out;
  for (uint64_t ino : r->attr_changed) out.inodes.push_back(ino);
  Notify(out);
}

Status PeerTailer::PollNow(const std::string& node) {
  if (node == opts_.node) return Status::OK();
  std::lock_guard<std::mutex> l(mu_);
  uint64_t changed = 0;
  return PollPeer(node, &peers_[node], &changed);
}

void PeerTailer::RequestRefresh() {
  if (opts_.poll_interval.count() == 0) return;
  {
    std::lock_guard<std::mutex> l(wake_mu_);
    const auto now = std::chrono::steady_clock::now();
    // A miss usually means a peer is about to publish the name: poll now, and once more after the
    // peer's group commit has had time to make its entry durable.
    followup_at_ = now + 2 * opts_.group_commit_interval + std::chrono::milliseconds(10);
    followup_pending_ = true;
    followup_moved_ = true;  // the loop may be waiting for a later deadline
    refresh_requested_ = true;
    if (!early_polled_ ||
        now - last_early_poll_ >= std::chrono::milliseconds(std::max<int64_t>(1, opts_.poll_interval.count() / 4))) {
      early_polled_ = true;
      last_early_poll_ = now;
      wake_ = true;
    }
  }
  cv_.notify_one();
}

bool PeerTailer::NodesDirUnchanged(const FileInfo& now) const {
  if (!nodes_dir_settled_) return false;
  const FileInfo& was = nodes_dir_stat_;
  return now.is_dir && now.mtime_ns == was.mtime_ns && now.ctime_ns == was.ctime_ns && now.nlink == was.nlink &&
         now.ino == was.ino && now.size == was.size;
}

void PeerTailer::ListNodesIfChanged(std::vector<std::string>* nodes) {
  using clock = std::chrono::steady_clock;
  const auto now = clock::now();
  const bool backstop = now - nodes_full_listed_at_ >= opts_.nodes_relist_max;
  constexpr auto kFineSettle = std::chrono::milliseconds(100);
  const auto fine_settle = std::min<std::chrono::milliseconds>(opts_.nodes_dir_settle, kFineSettle);
  auto wall_now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  FileInfo dir;
  bool stamped = false;
  for (int attempt = 0; opts_.nodes_dir_stat && attempt < 2; attempt++) {
    // Taken BEFORE the listing: a node created between the two changes the next stat.
    auto st = opts_.env->Stat(NodesDirPath(opts_.backing_dir));
    if (!st.ok()) break;
    dir = *st;
    stamped = true;
    if (!backstop && NodesDirUnchanged(dir)) {
      nodes_looks_unchanged_++;
      return;
    }
    // Changed within the last fine_settle (fine timestamps: a node mounting just now, or this node's
    // own mkdir at mount): wait those few ms and stat again, so that this listing settles and the next
    // look is a stat again (else a fresh mount listed twice: now, and a look later).
    const int64_t age_ns = wall_now() - std::max(dir.mtime_ns, dir.ctime_ns);
    const int64_t fine_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(fine_settle).count();
    const bool coarse = dir.mtime_ns % 1000000000 == 0 && dir.ctime_ns % 1000000000 == 0;
    if (attempt > 0 || coarse || age_ns < 0 || age_ns >= fine_ns) break;
    std::unique_lock<std::mutex> l(wake_mu_);
    if (cv_.wait_for(l, std::chrono::nanoseconds(fine_ns - age_ns + 1000000), [&] { return stop_; })) return;
  }
  const int64_t wall_ns = wall_now();
  auto listed = ListNodes(opts_.env, opts_.backing_dir, nodes);
  nodes_listings_++;
  if (!listed.ok()) {
    nodes_dir_settled_ = false;  // list again at the next look
    return;
  }
  *nodes = *listed;
  nodes_full_listed_at_ = now;
  // Settled: the directory's last change (mtime, ctime) is at least nodes_dir_settle older than this
  // listing, so a change made after the listing gets a later timestamp even where timestamps are coarse
  // (1 s on some NFS servers' file systems, 2 s on FAT) and its stat differs. Until then every look lists.
  // Timestamps with a fraction of a second come from a file system that keeps them fine (a kernel tick,
  // a few ms): there kFineSettle is enough (a fresh mount's own mkdir then costs one listing, not the
  // 2-3 of a 2 s wait). A new node's mkdir also changes the link count, whatever the timestamps.
  nodes_dir_stat_ = dir;
  const bool coarse = dir.mtime_ns % 1000000000 == 0 && dir.ctime_ns % 1000000000 == 0;
  const int64_t settle_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(coarse ? opts_.nodes_dir_settle : fine_settle).count();
  nodes_dir_settled_ = stamped && dir.is_dir && std::max(dir.mtime_ns, dir.ctime_ns) + settle_ns <= wall_ns;
}

void PeerTailer::Loop() {
  using clock = std::chrono::steady_clock;
  const auto interval = opts_.poll_interval;
  const auto idle_max = std::max(interval, opts_.idle_poll_max.count() > 0 ? opts_.idle_poll_max : 4 * interval);
  std::vector<std::string> nodes;
  bool all_idle = false;  // every known peer waits idle_max between polls (the last round saw them so)
  bool listed_once = false;
  clock::time_point listed_at;
  for (;;) {
    bool early = false, reset_idle = false;
    {
      std::unique_lock<std::mutex> l(wake_mu_);
      const auto regular = clock::now() + interval;
      for (;;) {  // until the regular poll, a follow-up or a wake; a follow-up set meanwhile moves it
        auto until = regular;
        if (followup_pending_ && followup_at_ < until) until = followup_at_;
        followup_moved_ = false;
        cv_.wait_until(l, until, [&] { return stop_ || wake_ || followup_moved_; });
        if (stop_ || wake_ || clock::now() >= until) break;
      }
      if (stop_) return;
      early = wake_;
      if (followup_pending_ && clock::now() >= followup_at_) {
        early = true;
        followup_pending_ = false;
      }
      wake_ = false;
      // Only with a long backoff (S3): with the default 4 x on a directory the schedule stays as it was
      // (a connector that misses on every name it stores would otherwise keep every peer on the
      // interval, adding NFS metadata ops per chunk; its misses already poll every peer early).
      reset_idle = refresh_requested_ && early && idle_max > 4 * interval;
      if (early) refresh_requested_ = false;
    }
    // New nodes appear rarely: look for them every 25 intervals (5 s at the default) and on an early poll
    // (a lookup miss: maybe a new node's file) if the last look is 5 intervals old (1 s). Not on every
    // early poll: a connector storing new chunks misses on every name it probes, which woke this thread
    // up to 20-40 times/s (docs/benchmarks.md, full-size run). Known nodes are polled on every early
    // round as before, and are not stat'ed again.
    // While every known peer is idle at the bound, the nodes directory waits as long (a new node is
    // rare, and a lookup miss still looks within 5 intervals).
    // A look is one stat of the nodes directory; it is listed (opendir, readdir, a stat per new name:
    // round trips on NFS) only when that stat differs from the one taken before the last listing
    // (NodesDirUnchanged), so a store with no new node costs one getattr per look, and on NFS mostly
    // none (the client answers it from its attribute cache, as it would answer the listing from its
    // cached pages: docs/design.md §5 "Finding new nodes").
    const auto since = clock::now() - listed_at;
    const auto list_every = all_idle ? std::max(25 * interval, idle_max) : 25 * interval;
    if (!listed_once || since >= list_every || (early && since >= 5 * interval)) {
      ListNodesIfChanged(&nodes);
      listed_at = clock::now();
      listed_once = true;
    }
    std::lock_guard<std::mutex> l(mu_);
    const auto now = clock::now();
    bool idle_now = true;
    uint64_t round_changed = 0;
    for (const auto& node : nodes) {
      if (stopping_) break;  // an unmount: no more polls (with a hung backing, each costs a deadline)
      if (node == opts_.node) continue;
      PeerState& st = peers_[node];
      if (reset_idle) {
        // A lookup miss: this node wants what peers publish now; idle peers go back to the interval.
        st.idle_polls = 0;
        st.next_poll = now + interval;
      }
      if (!early && now < st.next_poll) {
        idle_now = idle_now && interval * (uint64_t{1} << st.idle_polls) >= idle_max;
        continue;
      }
      uint64_t changed = 0;
      Status s = PollPeer(node, &st, &changed, /*may_use_tail=*/true);
      if (!s.ok()) {
        LogLimited(spdlog::level::warn, LogKey("peer-tail:" + node, s), "kvfs: tailing peer {}: {}", node,
                   ErrnoText(s));
      }
      if (changed) {
        st.idle_polls = 0;
        st.next_poll = now + interval;
      } else if (!early) {
        // Back off for idle peers (64 idle nodes must not flood the server, and on S3 every poll is
        // billed: a LIST, a HEAD and a GET): the wait doubles, 1x, 2x, 4x ... the interval, up to
        // idle_max (4 x on a directory by default, 10 s on S3). An early (lookup-miss) poll that finds
        // nothing leaves the schedule alone with the default bound, and with a longer one (S3) puts the
        // peers back on the interval (above). The visibility bound for a peer idle for
        // a while is therefore group commit + idle_max, and a reader that probes (a lookup miss) sees it
        // within group commit + interval / 4 + a few ms.
        if (interval * (uint64_t{1} << st.idle_polls) < idle_max) st.idle_polls++;
        const auto wait = std::min<std::chrono::milliseconds>(interval * (uint64_t{1} << st.idle_polls), idle_max);
        st.next_poll = now + wait - interval / 2;
      }
      idle_now = idle_now && interval * (uint64_t{1} << st.idle_polls) >= idle_max;
      round_changed += changed;
    }
    if (round_changed > 0) RetryOrphans();
    all_idle = idle_now && !nodes.empty();
  }
}

}  // namespace kvfs
