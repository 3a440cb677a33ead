// Capacity and eviction (store.h "Capacity and eviction", docs/design.md §6), the mechanism: the decisions
// (limits, targets, reinsertion choice) are engine/eviction_policy.h's. Here: accounting of this node's
// segment bytes (OnSealed, TrackAppendLocked), the writers' hard limit (ReserveSpace), the evictor thread
// (EvictLoop / EvictOnce: per-node and global watermarks, dead-segment reclamation, sealing a mostly dead
// active segment early on a full export), drops with hits-based
// reinsertion (DropSegment, ReinsertRecord), delayed unlinks (UnlinkDue), the RESERVE file, and GoneOr
// (a read failure of a dropped or vanished segment -> NotFound).
//
// Callers: Init (InitEviction), the segment writer's seal callback, the data path (ReserveSpace,
// NoteNoSpace, TrackAppendLocked, GoneOr), the group commit (NoteNoSpace), Close (StopEvictor,
// ReleaseReserve); the rest runs on the evictor thread.
// Thread safety: cap_mu_ guards the accounting, pins and drop queue (lock order ns_mu_ -> cap_mu_; never
// held across I/O); hits_mu_ guards hits_ and loc_ino_; drops take ns_mu_ for the index change + DROP
// entry; files_mu_ to close descriptors; listener_mu_ to notify.
// Invariants: a segment holding a pinned record, or an append in flight at its seal, is never dropped;
// a dropped segment is unlinked only after the grace period and a durable journal.
#include "engine/store_impl.h"

namespace kvfs {
namespace {

// Dead-segment reclamation (store.h): a sealed segment of this node with no live record is dropped once
// it has been evictable this long (a record written just before its segment sealed may still be
// waiting for its commit), looked for at most this often (one index read per tracked segment).
// The age is StoreOptions::dead_segment_age_ms (10 s); the scan interval is a fifth of it, at most 2 s.
constexpr auto kEvictTick = std::chrono::milliseconds(100);
// While the export is full the age is at most this: a writer waits for the space. (What the age guards,
// a record appended before its segment sealed and not committed yet, is also guarded by its pin and by
// the append tickets: DropCandidateLocked.)
constexpr auto kFullExportDeadAge = std::chrono::milliseconds(1000);

}  // namespace

Status StoreImpl::InitEviction() {
  const uint64_t cap = opts_.capacity_bytes, seg = opts_.segment_size;
  auto limits = EvictionLimits::Make(cap, seg, opts_.global_high_watermark_bytes,
                                     opts_.global_low_watermark_bytes);
  if (!limits.ok()) return limits.status();
  limits_ = *limits;
  if (opts_.reinsert_max_fraction < 0 || opts_.reinsert_max_fraction > 0.9) {
    return Status::InvalidArgument("reinsert_max_fraction must be in [0, 0.9]");
  }
  // Always on: without a bound it only reclaims dead segments and keeps RESERVE (store.h).
  evict_enabled_ = true;
  track_hits_ = opts_.reinsert_min_hits > 0 && opts_.reinsert_max_fraction > 0;
  if (cap && cap < 2 * seg) {
    spdlog::warn("kvfs: capacity {} is under two segments ({} each): writes may fail with ENOSPC", cap, seg);
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
  if (!limits_.bounded()) {
    spdlog::info("kvfs: no capacity limit (no --capacity): only dead segments are reclaimed; {} bytes in {} "
                 "segment(s) of earlier generations",
                 node_bytes_, own_segs_.size());
  } else {
    spdlog::info("kvfs: capacity {} (evict above {} down to {}), global watermarks {}/{}, {} bytes in {} segment(s) "
                 "of earlier generations, reinsertion {}",
                 cap, limits_.node_high, limits_.node_low, limits_.global_high, limits_.global_low, node_bytes_,
                 own_segs_.size(), track_hits_ ? "on" : "off");
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
  TierSegmentSealed(seg.id);  // an S3 backing: queued for its upload (store_tier.cc)
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

void StoreImpl::OnRetired(const SealedSegment& seg) {
  segments_retired_++;
  LogLimited(spdlog::level::warn, "segment-retired",
             "kvfs: segment {}-{} could not be sealed (export full?): retired unsealed ({} records, {} bytes); "
             "it is reclaimed once none of its files is live, and sealed by the next mount's recovery",
             seg.id.generation, seg.id.seq, seg.record_count, seg.file_size);
  OnSealed(seg);  // never appended again: evictable like a sealed one
}

void StoreImpl::SealMostlyDeadActive() {
  auto writer = Segments();
  const SegmentId active = writer->ActiveSegment();
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    auto it = own_segs_.find(active);
    // Nothing appended yet, already sealed, or pinned (a held or uncommitted record: it could not be
    // dropped once sealed anyway; looked at again next round).
    if (it == own_segs_.end() || it->second.evictable || pins_.count(active)) return;
    bytes = it->second.bytes;
  }
  auto st = index_->GetSegment(active);
  if (!st.ok() && !st.status().IsNotFound()) return;
  const uint64_t live = st.ok() ? st->live_bytes : 0;  // NotFound: no file of it was ever committed
  if (!ShouldSealActiveEarly(bytes, live)) return;
  bool rotated = false;
  Status s = writer->Rotate(active, &rotated);
  if (!s.ok()) {
    LogLimited(spdlog::level::warn, LogKey("seal-early", s), "kvfs: sealing segment {}-{} early: {}",
               active.generation, active.seq, ErrnoText(s));
    return;
  }
  if (!rotated) return;
  segments_sealed_early_++;
  spdlog::info("kvfs: export full: segment {}-{} sealed early ({} of its {} bytes live) so that its dead bytes "
               "can be reclaimed", active.generation, active.seq, live, bytes);
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
  if (need > limits_.hard_limit) return Status::NoSpace("record larger than the capacity");
  std::unique_lock<std::mutex> l(cap_mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.writer_wait_ms);
  bool counted = false;
  while (node_bytes_ + dropping_bytes_ + inflight_bytes_ + need > limits_.hard_limit) {
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
        node_bytes_ + dropping_bytes_ + inflight_bytes_ + need > limits_.hard_limit) {
      return Status::NoSpace("capacity reached: eviction did not free space in time");
    }
  }
  inflight_bytes_ += need;
  return Status::OK();
}

void StoreImpl::NoteNoSpace(uint64_t need) {
  nospace_events_++;
  if (!evict_enabled_) return;
  for (uint64_t cur = nospace_need_.load(); need > cur && !nospace_need_.compare_exchange_weak(cur, need);) {
  }
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
    FlushAtimes(false);  // the reads' atime notes, about a second after the first (Store::NoteRead)
    if (arbiter_) arbiter_->Tick();  // link claims due for removal; a bounded step of the sweep
    l.lock();
  }
}

uint64_t StoreImpl::PeerSegmentBytes() {
  std::vector<SegmentInfo> segs;
  Status s = index_->ListSegments([&](const SegmentInfo& si) {
    if (si.id.node != opts_.node_id && si.state != SegmentState::kDropped) segs.push_back(si);
    return true;
  });
  if (!s.ok()) spdlog::warn("kvfs: listing segments for the global watermark: {}", s.ToString());
  std::map<std::string, NodeSegmentStats> nodes;
  PeerSegmentSizes(segs, kPeerSegmentStatsPerEvictTick, kPeerOpenSegmentRestat, &nodes);
  uint64_t sum = 0;
  for (const auto& [node, n] : nodes) sum += n.segment_bytes;
  return sum;
}

bool StoreImpl::BackingLow() {
  const auto now = std::chrono::steady_clock::now();
  if (now - low_checked_ < std::chrono::seconds(1)) return low_;
  low_checked_ = now;
  uint64_t total = 0, avail = 0;
  low_ = env_->StatFs(opts_.backing_dir, &total, &avail).ok() && avail < ReserveBytes() + 2 * opts_.segment_size;
  return low_;
}

void StoreImpl::ReclaimDeadSegments(bool full) {
  const auto now = std::chrono::steady_clock::now();
  const std::chrono::milliseconds age(opts_.dead_segment_age_ms);
  const auto short_age = std::min<std::chrono::milliseconds>(age, kFullExportDeadAge);
  const auto scan = std::clamp<std::chrono::milliseconds>((full ? short_age : age) / 5, std::chrono::milliseconds(50),
                                                          std::chrono::milliseconds(2000));
  if (now - last_dead_scan_ < scan) return;
  last_dead_scan_ = now;
  std::vector<std::pair<SegmentId, bool>> old;  // (segment, younger than the ordinary age)
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    for (const auto& [id, t] : own_segs_) {
      if (DropCandidateLocked(id, t) && now - t.evictable_since >= short_age) {
        old.emplace_back(id, !full && now - t.evictable_since < age);
      }
    }
  }
  std::vector<SegmentId> young_dead;
  for (const auto& [id, young] : old) {
    {
      std::lock_guard<std::mutex> l(cap_mu_);
      if (evict_stop_) return;
    }
    auto st = index_->GetSegment(id);
    // NotFound: the index has no entry (no record of it was ever committed); dead too.
    if (st.ok() ? st->live_records != 0 : !st.status().IsNotFound()) continue;
    if (young) {
      young_dead.push_back(id);
    } else {
      DropSegment(id, /*reinsert=*/false);
    }
  }
  // Dead segments younger than the ordinary age go too while the backing is low on space: asked only
  // when there are some (an idle node sends no statvfs: multinode_test counts its metadata ops).
  if (young_dead.empty() || !BackingLow()) return;
  for (const auto& id : young_dead) {
    {
      std::lock_guard<std::mutex> l(cap_mu_);
      if (evict_stop_) return;
    }
    DropSegment(id, /*reinsert=*/false);
  }
}

// The segment cleaner. Records are never rewritten in place (§2 of design.md), and a segment comes back
// only when no live record is left in it: a file rewritten in place (a preallocated slot file, 2 MiB
// pwrites) leaves a few live extents in every segment it ever wrote to, each pinning a whole segment
// (measured: 55 slot files of 32 MiB, 1.9 GB live, kept 21.6 GB of segments). When this node's dead
// segment bytes exceed its live bytes, the sealed, unpinned segments whose live records together take
// at most 1/4 of the segment are emptied, lowest live fraction first: each record some file still
// uses is re-appended and journaled as MOVE (ReinsertRecord, as eviction's reinsertion does), then the
// segment, dead now, is dropped as a dead one is. Copying C <= B/4 bytes frees B >= 4C: at most 1/3 byte
// copied per byte freed. A round copies at most one segment's worth (more segments wait for the next
// rounds, every 2 s), and none while the export is full.
void StoreImpl::CleanSegments() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_clean_scan_ < std::chrono::seconds(2)) return;
  last_clean_scan_ = now;
  struct Cand {
    SegmentId id;
    uint64_t bytes, live;
  };
  std::vector<Cand> cands;
  uint64_t node_bytes, live_total = 0;
  std::vector<std::pair<SegmentId, uint64_t>> segs;  // (own segment, bytes)
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    node_bytes = node_bytes_;
    for (const auto& [id, t] : own_segs_) segs.emplace_back(id, t.bytes);
  }
  std::vector<bool> droppable(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    auto st = index_->GetSegment(segs[i].first);
    const uint64_t live = st.ok() ? st->live_bytes : 0;
    live_total += live;
    std::lock_guard<std::mutex> l(cap_mu_);
    auto it = own_segs_.find(segs[i].first);
    if (st.ok() && st->live_records > 0 && it != own_segs_.end() && DropCandidateLocked(it->first, it->second) &&
        live * 4 <= segs[i].second) {
      cands.push_back(Cand{segs[i].first, segs[i].second, live});
    }
  }
  // Worth it only when dead bytes exceed live ones (space amplification over 2x) by two segments or more.
  const uint64_t seg_size = opts_.segment_size;
  if (node_bytes <= 2 * live_total + 2 * seg_size || cands.empty()) return;
  std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    // live / bytes ascending
    return static_cast<unsigned __int128>(a.live) * b.bytes < static_cast<unsigned __int128>(b.live) * a.bytes;
  });
  uint64_t round_budget = seg_size;  // bytes copied per round
  for (const Cand& c : cands) {
    {
      std::lock_guard<std::mutex> l(cap_mu_);
      if (evict_stop_ || hold_reserve_.load()) return;
    }
    // The records files use in it, by the files (one MOVE per file: a record two files share is copied
    // for each; the second copy is what keeps the bound honest, so it counts).
    auto inos = index_->SegmentInodes(c.id);
    if (!inos.ok()) continue;
    std::vector<std::pair<uint64_t, Location>> recs;  // (ino, record in c.id)
    uint64_t copy = 0;
    for (uint64_t ino : *inos) {
      auto node = index_->GetInode(ino);
      if (!node.ok() || !node->committed) continue;
      std::set<uint64_t> seen;
      for (const Location& rec : ContentRecords(node->location, node->extents)) {
        if (rec.segment != c.id || !seen.insert(rec.record_offset).second) continue;
        recs.emplace_back(ino, rec);
        copy += AlignUp(rec.length) + kAlignment;
      }
    }
    // Whole records are copied (dead extents of a record included): the bound is on what is copied.
    if (recs.empty() || copy * 4 > c.bytes || copy > round_budget) continue;
    uint64_t copied = 0, n = 0;
    for (const auto& [ino, rec] : recs) {
      {
        std::lock_guard<std::mutex> l(cap_mu_);
        if (evict_stop_) return;
      }
      const uint64_t used = ReinsertRecord(c.id, rec.record_offset, ino, UINT64_MAX);
      copied += used;
      if (used) n++;
    }
    round_budget -= std::min(round_budget, copied);
    cleaned_records_ += n;
    cleaned_bytes_copied_ += copied;
    auto st = index_->GetSegment(c.id);
    if (st.ok() && st->live_records == 0) {
      const uint64_t f = DropSegment(c.id, /*reinsert=*/false);
      if (f > 0) {
        cleaned_segments_++;
        cleaned_bytes_freed_ += c.bytes;
      }
      spdlog::debug("kvfs: cleaned segment {}-{} ({} bytes, {} live): {} records, {} bytes copied", c.id.generation,
                    c.id.seq, c.bytes, c.live, n, copied);
    }
    if (round_budget < kAlignment) break;
  }
}

void StoreImpl::EvictOnce() {
  SweepPeerHolds(false);
  UnlinkDue(false);
  bool emergency;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    emergency = emergency_;
    emergency_ = false;
  }
  if (emergency) {
    // The backing store itself is full: free the reserve so DROP (and the user's UNLINK) entries can be
    // journaled; with a capacity or watermark, drop until two segments' worth of space will be free.
    ReleaseReserve();
    if (!hold_reserve_.exchange(true)) {
      uint64_t total = 0, avail = 0;
      env_->StatFs(opts_.backing_dir, &total, &avail);
      spdlog::info("kvfs: backing store full ({} bytes free): RESERVE released for the journal; dead segments "
                   "go {} ms after their seal until a {}-byte record fits again",
                   avail, kFullExportDeadAge.count(), nospace_need_.load());
    }
    KickCommit();  // journal entries that failed for lack of space go now
    last_dead_scan_ = {};
  }
  // Full (until RESERVE is back): a mostly dead active segment is sealed so that it can be reclaimed,
  // and dead segments go sooner (store.h "Capacity and eviction").
  const bool full = emergency || hold_reserve_.load();
  if (full) SealMostlyDeadActive();
  ReclaimDeadSegments(full);
  if (!full) CleanSegments();
  uint64_t node_bytes;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    node_bytes = node_bytes_;
  }
  // Target for this node's bytes (eviction_policy.h).
  const uint64_t peer_bytes = limits_.global_high ? PeerSegmentBytes() : 0;
  uint64_t target = EvictionTarget(limits_, node_bytes, peer_bytes);
  if (emergency && limits_.bounded()) {
    uint64_t total = 0, avail = 0;
    const bool have_avail = env_->StatFs(opts_.backing_dir, &total, &avail).ok();
    uint64_t pending;
    {
      std::lock_guard<std::mutex> l(cap_mu_);
      pending = dropping_bytes_;
    }
    target = EmergencyTarget(limits_, target, node_bytes, have_avail ? &avail : nullptr, pending);
  }
  if (target == kNoEvictionTarget || target >= node_bytes) return;
  // Free (node bytes at the start - target), net of reinsertion. Bytes written meanwhile are the next
  // round's business: a fast writer must not make one round evict everything.
  const uint64_t goal = node_bytes - target;
  // The segments that may be dropped (records of unfinished files stay: DropCandidateLocked), oldest
  // (generation, seq) first. Dead ones (no live record: every file in them deleted or rewritten, e.g.
  // the spills of a close that failed) cost nothing to drop and go first, whatever their age (their
  // dead-segment reclamation may still be waiting for dead_segment_age_ms); then the live ones, FIFO,
  // down to the target, but only if what the dead ones left still calls for eviction (over the high
  // mark; a full export always does). Before, FIFO dropped an old segment holding a committed file
  // while dead ones were available (breaker F5: the file a failed in-place rewrite left was lost).
  std::vector<SegmentId> order;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    for (const auto& [id, t] : own_segs_) {
      if (DropCandidateLocked(id, t)) order.push_back(id);
    }
  }
  std::vector<bool> dead(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    auto st = index_->GetSegment(order[i]);
    // NotFound: the index has no entry (no record of it was ever committed); dead too. An index error:
    // treated as live (FIFO).
    dead[i] = st.ok() ? st->live_records == 0 : st.status().IsNotFound();
  }
  std::vector<std::pair<SegmentId, bool>> victims;  // (segment, dead)
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < order.size(); ++i) {
      if (dead[i] == (pass == 0)) victims.emplace_back(order[i], dead[i]);
    }
  }
  uint64_t freed = 0;
  bool live_checked = false;
  for (const auto& [victim, is_dead] : victims) {
    if (freed >= goal) break;
    if (!is_dead && !live_checked) {
      live_checked = true;
      const uint64_t left = node_bytes - std::min(freed, node_bytes);
      const uint64_t t = EvictionTarget(limits_, left, peer_bytes);
      if (!emergency && (t == kNoEvictionTarget || t >= left)) return;  // the dead ones were enough
    }
    {
      std::lock_guard<std::mutex> l(cap_mu_);
      if (evict_stop_) return;
    }
    // Pinned since it was listed (or the store is closing): 0, the next one. A full store has no room
    // to reinsert; a dead segment has nothing to reinsert.
    const uint64_t f = DropSegment(victim, /*reinsert=*/!emergency && !is_dead);
    if (is_dead && f > 0) dead_segments_evicted_++;
    freed += f;
  }
  if (freed < goal) {
    // Nothing (more) to drop this round: writers over the hard limit stop waiting for it.
    std::lock_guard<std::mutex> l(cap_mu_);
    stuck_ = true;
    space_cv_.notify_all();
  }
}

void StoreImpl::NotifyListener(const std::vector<ApplyResult::Changed>& changed) {
  if (changed.empty()) return;
  PeerChanges out;
  for (const auto& c : changed) out.names.push_back(PeerChanges::Name{c.parent, c.name, c.old_ino});
  NotifyChanges(out);
}

void StoreImpl::NotifyChanges(const PeerChanges& out) {
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
    ReinsertPlan plan;  // (hits, record offset), most hits first; budget (eviction_policy.h)
    std::unordered_map<uint64_t, uint64_t> inos;
    {
      std::lock_guard<std::mutex> l(hits_mu_);
      auto h = hits_.find(seg);
      plan = ChooseReinsertions(h != hits_.end() ? h->second : std::unordered_map<uint64_t, uint32_t>{},
                                opts_.reinsert_min_hits, opts_.reinsert_max_fraction, bytes);
      auto li = loc_ino_.find(seg);
      if (li != loc_ino_.end()) {
        for (const auto& [n, off] : plan.records) {
          auto x = li->second.find(off);
          if (x != li->second.end()) inos[off] = x->second;
        }
      }
    }
    uint64_t budget = plan.budget;
    for (const auto& [n, off] : plan.records) {
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
  if (!node.ok() || !node->committed || !S_ISREG(node->attr.mode)) return 0;
  // The file's record in seg: its location, or (an extent file) the record of the extents there; the
  // whole record is re-appended and MOVE replaces it in every extent that references it.
  Location old;
  for (const Location& rec : ContentRecords(node->location, node->extents)) {
    if (rec.segment == seg && rec.record_offset == record_offset) old = rec;
  }
  if (old.empty()) return 0;  // unlinked, replaced, or moved meanwhile: dead bytes
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
    if (nl.status().IsNoSpace()) NoteNoSpace(need);
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
  // The DROP entries must be durable before the files go (a rebuild must not point into them), and
  // before the peers' hold markers are listed (peer_holds.cc: the order the holders rely on). On an S3
  // backing also published (a remount from the bucket, or a peer, must not point into a deleted object).
  Status s = Sync();
  if (s.ok() && opts_.tier) s = TierPublishedThrough(journal_->synced_position());
  std::set<SegmentId> held;
  if (s.ok()) {
    std::vector<SegmentId> ids;
    for (const auto& d : due) ids.push_back(d.id);
    bool complete = true;
    held = SegmentsHeldByPeers(ids, &complete);
    if (!complete) {
      LogLimited(spdlog::level::warn, "peer-hold-list",
                 "kvfs: could not list the peers' hold markers; the unlink of {} dropped segment(s) waits",
                 due.size());
      held.insert(ids.begin(), ids.end());
    }
  }
  std::vector<Dropping> retry;
  for (auto& d : due) {
    if (held.count(d.id)) {
      // A live peer has a file of it open: the unlink waits (re-checked every second).
      {
        std::lock_guard<std::mutex> l(cap_mu_);
        if (held_by_peers_.emplace(d.id, d.bytes).second) unlinks_deferred_by_peers_++;
      }
      d.due = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      retry.push_back(d);
      continue;
    }
    Status r = s;
    if (r.ok()) {
      {
        std::lock_guard<std::mutex> fl(files_mu_);
        ForgetSegmentFileLocked(d.id);  // close our fd (an in-flight read keeps its shared_ptr until it returns)
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
    held_by_peers_.erase(d.id);
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
  if (committer_.owed()) return;  // the space is the journal's until the owed entries are in
  bool was_full = false;
  uint64_t free_before = 0;
  if (hold_reserve_.load()) {
    // After a full backing store: recreate RESERVE only when that leaves at least twice its size free,
    // and room for the largest record that failed for lack of space meanwhile. Taking back the space it
    // just freed would fill the backing again at once and fail the journal appends it was freed for
    // (RESERVE released and recreated every evictor tick). And with less than that record left, the
    // store would leave its full state while the write still fails: a 2.25 MiB chunk after 3 x 1 MiB
    // came back left ~2.1 MB, and the dead segments of an rm -rf then waited the ordinary 10 s age
    // instead of 1 s (the space came back ~10 s after the rm unless a write failed meanwhile; #18,
    // full_export_test.py test_rm_rf_*).
    // (The record counts at most a segment and a quarter of the export: a write that could never fit
    // must not keep the store in its full state, cleaner off, for the rest of the mount.)
    uint64_t total = 0, avail = 0;
    if (!env_->StatFs(opts_.backing_dir, &total, &avail).ok()) return;
    const uint64_t need = std::min({nospace_need_.load(), opts_.segment_size, total / 4});
    if (avail < ReserveBytes() + std::max(2 * ReserveBytes(), need)) return;
    was_full = true;
    free_before = avail;
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
  if (was_full) {
    spdlog::info("kvfs: backing store has room again ({} bytes free, RESERVE taken back; the largest record "
                 "that failed needed {}): dead segments wait {} ms again once more than two segments are free",
                 free_before, nospace_need_.load(), opts_.dead_segment_age_ms);
  }
  nospace_need_ = 0;
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
  // Not asked after a timeout: the backing did not answer in time, and asking it again would make the
  // caller wait for a second deadline (a FUSE READ on a frozen S3 gateway waited two).
  {
    std::lock_guard<std::mutex> fl(files_mu_);
    ForgetSegmentFileLocked(loc.segment);
  }
  auto st = index_->GetSegment(loc.segment);
  if (st.ok() && st->state == SegmentState::kDropped) return Status::NotFound("segment dropped (evicted)");
  if (s.IsTimedOut()) return s;
  auto info = env_->Stat(SegmentFilePath(opts_.backing_dir, loc.segment));
  if (!info.ok() && info.status().IsNotFound()) return Status::NotFound("segment vanished");
  return s;
}

}  // namespace kvfs
