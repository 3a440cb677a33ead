// Peer tailing (docs/design.md §5): reads every other node's journal from where this index stopped
// (PollPeer), applies the entries to the index, follows retired journals to the peer's newest snapshot
// (ApplyPeerSnapshot) and forgets purged nodes (ForgetPurgedPeer), tells the change listener
// (NotifyPeerChanges), and keeps per-peer figures for GetStats. PeerLoop is the peer thread (adaptive
// poll interval, early polls by RequestPeerRefresh); RefreshPeers polls every peer now.
//
// Callers: the peer thread (started by Init), RefreshPeers (tests, tools), RequestPeerRefresh (FUSE
// lookup misses). Thread safety: peer_mu_ serializes polls and guards peers_; ns_mu_ is taken while a
// batch is applied (so it orders with local mutations); files_mu_ to drop descriptors of dropped
// segments; listener_mu_, peer_stats_mu_, peer_wake_mu_ are leaves. The listener runs with no lock held.
// Invariants: a peer's position only moves past entries the index has applied.
#include "engine/store_impl.h"

namespace kvfs {
namespace {

// Entries per ApplyBatch during a rebuild.
constexpr size_t kRebuildBatch = kReplayBatch;

}  // namespace

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

}  // namespace kvfs
