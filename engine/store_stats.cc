// Info (store.h "info"): StatFs (docs/design.md §6 statfs figures) and GetStats (the counters behind
// `kvfs stats` and the Prometheus exposition).
//
// Callers: the FUSE layer (statfs), the stats and metrics servers. Backing I/O: one statvfs of the
// backing directory each (through the Env: a deadline applies). Thread safety: reads atomics and
// the index's figures; takes the committer's mutex (UnjournaledEntries), the PeerTailer's (its GetStats)
// and cap_mu_ one at a time, briefly. Invariants: none beyond a consistent-enough snapshot (figures are
// read separately).
#include "engine/store_impl.h"

#include "blockstore/buffer_pool.h"
#include "blockstore/kernel_copy.h"

namespace kvfs {

NodeSegmentStats SumSegmentStats(const std::vector<NodeSegmentStats>& nodes) {
  NodeSegmentStats sum;
  sum.estimated = false;
  for (const auto& n : nodes) {
    sum.open_segments += n.open_segments;
    sum.sealed_segments += n.sealed_segments;
    sum.unlinking_segments += n.unlinking_segments;
    sum.segment_bytes += n.segment_bytes;
    sum.live_bytes += n.live_bytes;
    sum.dead_bytes += n.dead_bytes;
    sum.files += n.files;
    sum.estimated = sum.estimated || n.estimated;
  }
  return sum;
}

Status StoreImpl::StatFs(uint64_t* live_bytes, uint64_t* files, uint64_t* backing_total,
                         uint64_t* backing_avail) {
  auto st = index_->GetStats();
  *live_bytes = st.live_bytes;
  *files = st.files + st.directories;
  uint64_t total = 0, free_bytes = 0;
  KVFS_RETURN_IF_ERROR(env_->StatFs(opts_.backing_dir, &total, &free_bytes));
  const uint64_t cap = opts_.global_high_watermark_bytes ? opts_.global_high_watermark_bytes : opts_.capacity_bytes;
  *backing_total = cap ? std::min(cap, total) : total;
  uint64_t blocks = st.live_bytes + free_bytes;  // docs/design.md §6: min(capacity, global live + backing free)
  if (cap) blocks = std::max<uint64_t>(st.live_bytes, std::min(cap, blocks));
  *backing_avail = blocks - st.live_bytes;
  return Status::OK();
}

// A peer's segment files are sized by a stat of each (the file's size is what it occupies; the peer's
// segment size may differ from this node's: adapted to the export, or given by flag). Sealed files never
// change: their sizes are kept (peer_seg_sizes_) and each is stat'ed once; open ones (the peer's active
// segment, usually one per peer) again once their last stat is open_max_age old. At most max_stats
// stats per call (a joining node that knows thousands of peer segments spreads them over its first
// calls); a segment not sized this call counts max(its live bytes, its last stat): a lower bound (a
// file only grows until its seal), never more than is on the export; it marks the node's figures
// estimated. A file already gone (dropped by its node, the DROP not applied here yet) counts 0 bytes.
void StoreImpl::PeerSegmentSizes(const std::vector<SegmentInfo>& segs, size_t max_stats,
                                 std::chrono::milliseconds open_max_age,
                                 std::map<std::string, NodeSegmentStats>* nodes) {
  std::lock_guard<std::mutex> l(peer_sizes_mu_);
  const auto now = std::chrono::steady_clock::now();
  std::map<SegmentId, PeerSegSize> kept;
  size_t stats = 0;
  for (const auto& si : segs) {
    NodeSegmentStats& n = (*nodes)[si.id.node];
    const bool sealed = si.state == SegmentState::kSealed;
    auto it = peer_seg_sizes_.find(si.id);
    const PeerSegSize* known = it != peer_seg_sizes_.end() ? &it->second : nullptr;
    if (known && (known->sealed || (!sealed && now - known->at < open_max_age))) {
      n.segment_bytes += known->bytes;
      kept.emplace(si.id, *known);
      continue;
    }
    if (stats < max_stats) {
      stats++;
      auto info = env_->Stat(SegmentFilePath(opts_.backing_dir, si.id));
      if (info.ok()) {
        n.segment_bytes += info->size;
        kept.emplace(si.id, PeerSegSize{info->size, sealed, now});
        continue;
      }
      if (info.status().IsNotFound()) continue;
    }
    n.segment_bytes += std::max(si.live_bytes, known ? known->bytes : 0);
    n.estimated = true;
    if (known) kept.emplace(si.id, *known);
  }
  peer_seg_sizes_ = std::move(kept);  // segments no longer listed (dropped) are forgotten
}

StoreStats StoreImpl::GetStats() {
  StoreStats s;
  auto st = index_->GetStats();
  s.files = st.files;
  s.directories = st.directories;
  s.live_bytes = st.live_bytes;
  s.segments_created = Segments()->GetStats().segments_created;
  s.records_written = records_written_;
  s.journal_entries = journal_entries_;
  s.group_commits = group_commits_;
  s.visibility_rounds = visibility_rounds_;
  s.unjournaled_entries = UnjournaledEntries();
  s.journal_retries = committer_.retries();
  s.lost_entries = lost_entries_;
  s.cache_hits = cache_hits_;
  s.cache_misses = cache_misses_;
  s.read_loaded_bytes = read_loaded_bytes_;
  s.atime_updates = atime_updates_;
  s.probation_reads = probation_reads_;
  s.probation_bytes = admission_.probation_bytes();
  const BufferPool::Stats pool = BufferPool::Default().GetStats();
  s.pool_reused = pool.reused;
  s.pool_fresh = pool.fresh;
  s.pool_fresh_bytes = pool.fresh_bytes;
  s.pool_free_bytes = pool.free_bytes;
  s.pool_reused_untouched = pool.reused_untouched;
  const KernelCopyStats kc = GetKernelCopyStats();
  s.verify_kernel_copy_bytes = kc.bytes;
  s.verify_kernel_copy_fallbacks = kc.fallbacks;
  s.kernel_write_bytes = kc.write_bytes;
  s.kernel_write_fallbacks = kc.write_fallbacks;
  s.verify_copy = GetVerifyCopy();
  s.cache_bytes = cache_.Usage();
  s.checksum_failures = checksum_failures_;
  auto& c = env_->counters();
  s.backing_metadata_ops = c.MetadataOps();
  s.backing_syncs = c.sync + c.syncdir;
  s.backing_bytes_written = c.bytes_written;
  s.backing_bytes_read = c.bytes_read;
  s.backing_files_created = c.create.load();
  PeerTailerStats peers = tailer_ ? tailer_->GetStats() : PeerTailerStats{};
  s.peers = peers.peers;
  s.peer_entries_applied = peers.entries_applied;
  s.peer_unresolved_deltas = peers.unresolved_deltas;
  s.peer_orphans_applied = peers.orphans_applied;
  s.peer_orphans_pending = peers.orphans_pending;
  s.peer_dir_rename_redirects = peers.dir_rename_redirects;
  s.delta_puts = delta_puts_;
  s.delta_put_bytes = delta_put_bytes_;
  s.map_puts = map_puts_;
  s.map_put_bytes = map_put_bytes_;
  if (arbiter_) {
    const LinkArbiter::Stats a = arbiter_->GetStats();
    s.link_claims_won = a.won;
    s.link_claims_lost = a.lost;
    s.link_claims_abandoned = a.abandoned;
    s.link_claims_removed = a.removed;
    s.link_claims_swept = a.swept;
    s.link_claims_pending = a.pending;
    s.link_claims_errors = a.errors;
  }
  s.peer_polls = peers.polls;
  s.peer_tail_reads = peers.tail_reads;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    s.node_segment_bytes = node_bytes_;
  }
  s.segments_dropped = segments_dropped_;
  s.dead_segments_evicted = dead_segments_evicted_;
  s.cleaned_segments = cleaned_segments_;
  s.cleaned_records = cleaned_records_;
  s.cleaned_bytes_copied = cleaned_bytes_copied_;
  s.cleaned_bytes_freed = cleaned_bytes_freed_;
  s.segment_bytes_dropped = segment_bytes_dropped_;
  s.segments_unlinked = segments_unlinked_;
  s.records_reinserted = records_reinserted_;
  s.bytes_reinserted = bytes_reinserted_;
  s.writer_waits = writer_waits_;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    s.segments_pinned = pins_.size();
    for (const auto& [id, n] : pins_) {
      auto t = own_segs_.find(id);
      if (t != own_segs_.end()) s.segment_bytes_pinned += t->second.bytes;
    }
    for (const auto& [k, n] : held_records_) s.records_held_open += n;
    s.segments_held_by_peers = held_by_peers_.size();
    for (const auto& [id, bytes] : held_by_peers_) s.segment_bytes_held_by_peers += bytes;
  }
  {
    std::lock_guard<std::mutex> l(peer_holds_mu_);
    for (const auto& [id, h] : peer_holds_) s.peer_segments_held += h->count > 0 ? 1 : 0;
  }
  s.peer_hold_markers = peer_hold_markers_;
  s.peer_hold_markers_created = peer_hold_markers_created_;
  s.peer_hold_checks_failed = peer_hold_checks_failed_;
  s.unlinks_deferred_by_peers = unlinks_deferred_by_peers_;
  s.nospace_events = nospace_events_;
  s.segments_sealed_early = segments_sealed_early_;
  s.segments_retired = segments_retired_;
  if (opts_.tier) {
    const S3Counters& c = opts_.tier->s3_counters();
    s.s3 = true;
    for (size_t i = 0; i < S3Counters::kOps; i++) {
      s.s3_requests.emplace_back(S3OpName(static_cast<S3Op>(i)), c.requests[i].load());
    }
    s.s3_requests_total = c.TotalRequests();
    s.s3_bytes_sent = c.bytes_sent.load();
    s.s3_bytes_received = c.bytes_received.load();
    s.s3_split_reads = c.split_reads.load();
    s.s3_read_parts = c.read_parts.load();
    s.s3_read_parts_parallel = c.read_parts_parallel.load();
    s.s3_gets_in_flight = c.gets_in_flight.load();
    s.s3_gets_in_flight_peak = c.gets_in_flight_peak.load();
    s.s3_credential_reloads = c.credential_reloads.load();
    s.s3_credential_retries = c.credential_retries.load();
    s.s3_segments_uploaded = tier_segments_uploaded_.load();
    s.s3_journal_publications = tier_journal_publications_.load();
    s.s3_failures = tier_failures_.load();
    std::lock_guard<std::mutex> l(tier_mu_);
    s.s3_segments_pending = tier_pending_.size();
  }
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
  b.writeback = c.writeback;
  // Segments per node: live bytes and files from the index (one scan of its segments column family);
  // this node's segment files from the evictor's accounting; peers' from the sizes of their files.
  std::map<std::string, NodeSegmentStats> nodes;
  nodes[opts_.node_id].node = opts_.node_id;
  std::vector<SegmentInfo> peer_segs;
  Status ls = index_->ListSegments([&](const SegmentInfo& si) {
    if (si.state == SegmentState::kDropped) return true;
    NodeSegmentStats& n = nodes[si.id.node];
    n.node = si.id.node;
    n.live_bytes += si.live_bytes;
    n.files += si.live_records;
    if (si.id.node == opts_.node_id) return true;
    n.estimated = false;  // unless a segment's size below is
    if (si.state == SegmentState::kSealed) {
      n.sealed_segments++;
    } else {
      n.open_segments++;
    }
    peer_segs.push_back(si);
    return true;
  });
  if (!ls.ok()) spdlog::warn("kvfs: listing segments for stats: {}", ls.ToString());
  PeerSegmentSizes(peer_segs, kPeerSegmentStatsPerCall, std::chrono::milliseconds(0), &nodes);
  {
    NodeSegmentStats& own = nodes[opts_.node_id];
    own.estimated = false;
    std::lock_guard<std::mutex> l(cap_mu_);
    for (const auto& [id, t] : own_segs_) {
      if (t.evictable) {
        own.sealed_segments++;
      } else {
        own.open_segments++;
      }
    }
    own.unlinking_segments = dropping_.size();
    own.segment_bytes = node_bytes_ + dropping_bytes_;
  }
  s.nodes.push_back(nodes[opts_.node_id]);
  for (auto& [id, n] : nodes) {
    if (id != opts_.node_id) s.nodes.push_back(n);
  }
  for (auto& n : s.nodes) n.dead_bytes = n.segment_bytes > n.live_bytes ? n.segment_bytes - n.live_bytes : 0;
  s.peer_journals = std::move(peers.journals);
  s.capacity_bytes = limits_.capacity;
  s.evict_high_bytes = limits_.node_high;
  s.evict_low_bytes = limits_.node_low;
  s.global_high_watermark_bytes = limits_.global_high;
  s.global_low_watermark_bytes = limits_.global_low;
  s.segment_size = opts_.segment_size;
  s.cache_capacity_bytes = opts_.cache_size;
  s.backing_fs_ok = env_->StatFs(opts_.backing_dir, &s.backing_fs_size, &s.backing_fs_avail).ok();
  if (!s.backing_fs_ok) s.backing_fs_size = s.backing_fs_avail = 0;
  s.recovery_entries = recovery_entries_;
  s.recovery_cuts = recovery_cuts_;
  s.recovery_seals = recovery_seals_;
  s.recovery_lost_entries = recovery_lost_entries_;
  return s;
}

}  // namespace kvfs
