#include "fuse/stats_render.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace kvfs {
namespace {

std::string Num(uint64_t v) { return std::to_string(v); }
std::string Num(double v) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.9g", v);
  return b;
}

// Builds the exposition text: one family (HELP, TYPE, samples) at a time.
class Expo {
 public:
  void Family(const char* name, const char* type, const char* help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  template <typename T>
  void Sample(std::string_view name, const std::string& labels, T value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    out_ += ' ';
    out_ += Num(value);
    out_ += '\n';
  }
  template <typename T>
  void One(const char* name, const char* type, const char* help, T value) {
    Family(name, type, help);
    Sample(name, "", value);
  }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

std::string Label(const char* k, std::string_view v) { return std::string(k) + "=\"" + PrometheusEscape(v) + "\""; }

// One node's (or all nodes') segments on the export now, as JSON.
nlohmann::json SegmentsJson(const NodeSegmentStats& n) {
  return {{"segments", n.segments()},
          {"open_segments", n.open_segments},
          {"sealed_segments", n.sealed_segments},
          {"unlinking_segments", n.unlinking_segments},
          {"segment_bytes", n.segment_bytes},
          {"live_bytes", n.live_bytes},
          {"dead_bytes", n.dead_bytes},
          {"files", n.files},
          {"overhead_bytes_per_file", n.OverheadPerFile()},
          {"estimated", n.estimated}};
}

}  // namespace

std::string PrometheusEscape(std::string_view v) {
  std::string o;
  o.reserve(v.size());
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

std::string StatsToJson(const StatsSnapshot& snap) {
  const StoreStats& st = snap.store;
  const FsStats& f = snap.fs;
  nlohmann::json j;
  j["pid"] = snap.pid;
  j["version"] = snap.version;
  j["commit"] = snap.git_commit;
  j["files"] = st.files;
  j["directories"] = st.directories;
  j["live_bytes"] = st.live_bytes;
  // On the export now: this node's segments (exact) and all nodes' (peers: their files' sizes).
  const NodeSegmentStats own = st.nodes.empty() ? NodeSegmentStats{} : st.nodes.front();
  j["segments"] = own.segments();
  j["segment_bytes"] = own.segment_bytes;
  j["export"] = {{"node", SegmentsJson(own)}, {"all_nodes", SegmentsJson(SumSegmentStats(st.nodes))}};
  j["segments_created"] = st.segments_created;
  j["records_written"] = st.records_written;
  j["journal_entries"] = st.journal_entries;
  j["extent_puts"] = {{"delta", st.delta_puts}, {"delta_bytes", st.delta_put_bytes}, {"map", st.map_puts},
                      {"map_bytes", st.map_put_bytes}, {"peer_unresolved_deltas", st.peer_unresolved_deltas}};
  j["peer_orphans"] = {{"applied", st.peer_orphans_applied}, {"pending", st.peer_orphans_pending}};
  j["peer_dir_rename_redirects"] = st.peer_dir_rename_redirects;
  j["link_claims"] = {{"won", st.link_claims_won},         {"lost", st.link_claims_lost},
                      {"abandoned", st.link_claims_abandoned}, {"removed", st.link_claims_removed},
                      {"swept", st.link_claims_swept},         {"pending", st.link_claims_pending},
                      {"errors", st.link_claims_errors}};
  j["group_commits"] = st.group_commits;
  j["visibility_rounds"] = st.visibility_rounds;
  j["unjournaled_entries"] = st.unjournaled_entries;
  j["journal_retries"] = st.journal_retries;
  j["lost_entries"] = st.lost_entries;
  j["cache_hits"] = st.cache_hits;
  j["cache_misses"] = st.cache_misses;
  j["cache_bytes"] = st.cache_bytes;
  const uint64_t lookups = st.cache_hits + st.cache_misses;
  j["cache_hit_rate"] = lookups ? double(st.cache_hits) / double(lookups) : 0.0;  // per value read
  j["read_loaded_bytes"] = st.read_loaded_bytes;                                  // per byte
  j["probation_reads"] = st.probation_reads;
  j["probation_bytes"] = st.probation_bytes;
  j["buffer_pool"] = {{"reused", st.pool_reused},
                      {"fresh", st.pool_fresh},
                      {"fresh_bytes", st.pool_fresh_bytes},
                      {"free_bytes", st.pool_free_bytes},
                      {"reused_untouched", st.pool_reused_untouched},
                      {"kernel_copy_bytes", st.verify_kernel_copy_bytes},
                      {"kernel_copy_fallbacks", st.verify_kernel_copy_fallbacks},
                      {"kernel_write_bytes", st.kernel_write_bytes},
                      {"kernel_write_fallbacks", st.kernel_write_fallbacks}};
  {
    // --verify-copy: what was asked, the path never-touched buffers take, and the mount's probe.
    const VerifyCopyChoice& vc = st.verify_copy;
    nlohmann::json v = {{"mode", VerifyCopyModeName(vc.mode)},
                        {"path", vc.kernel ? "kernel" : "inplace"},
                        {"probed", vc.probed},
                        {"description", DescribeVerifyCopy(vc)}};
    if (vc.probed) {
      v["probe"] = {{"in_place_fresh_s_per_gb", vc.probe.in_place_fresh_s_per_gb},
                    {"in_place_touched_s_per_gb", vc.probe.in_place_touched_s_per_gb},
                    {"kernel_copy_s_per_gb", vc.probe.kernel_copy_s_per_gb},
                    {"kernel_copy_works", vc.probe.kernel_copy_works},
                    {"bytes", vc.probe.bytes},
                    {"rounds", vc.probe.rounds},
                    {"elapsed_ms", vc.probe.elapsed_ms}};
    }
    j["verify_copy"] = std::move(v);
  }
  j["checksum_failures"] = st.checksum_failures;
  j["atime_updates"] = st.atime_updates;
  j["backing_metadata_ops"] = st.backing_metadata_ops;
  j["backing_syncs"] = st.backing_syncs;
  j["backing_bytes_written"] = st.backing_bytes_written;
  j["backing_bytes_read"] = st.backing_bytes_read;
  j["backing_files_created"] = st.backing_files_created;
  const BackingOpCounts& b = st.backing_ops;
  j["backing_ops"] = {{"open", b.open},   {"create", b.create}, {"close", b.close},
                      {"read", b.read},   {"write", b.write},   {"write_batches", b.write_batches},
                      {"sync", b.sync},   {"mkdir", b.mkdir},   {"rename", b.rename},
                      {"remove", b.remove}, {"stat", b.stat},   {"list", b.list},
                      {"syncdir", b.syncdir}, {"writeback", b.writeback}};
  j["eviction"] = {{"node_segment_bytes", st.node_segment_bytes},
                   {"segments_dropped", st.segments_dropped},
                   {"dead_segments_evicted", st.dead_segments_evicted},
                   {"cleaned_segments", st.cleaned_segments},
                   {"cleaned_records", st.cleaned_records},
                   {"cleaned_bytes_copied", st.cleaned_bytes_copied},
                   {"cleaned_bytes_freed", st.cleaned_bytes_freed},
                   {"segment_bytes_dropped", st.segment_bytes_dropped},
                   {"segments_unlinked", st.segments_unlinked},
                   {"records_reinserted", st.records_reinserted},
                   {"bytes_reinserted", st.bytes_reinserted},
                   {"writer_waits", st.writer_waits},
                   {"nospace_events", st.nospace_events},
                   {"segments_sealed_early", st.segments_sealed_early},
                   {"segments_retired", st.segments_retired},
                   {"segments_pinned", st.segments_pinned},
                   {"segment_bytes_pinned", st.segment_bytes_pinned},
                   {"records_held_open", st.records_held_open},
                   {"peer_segments_held", st.peer_segments_held},
                   {"peer_hold_markers", st.peer_hold_markers},
                   {"peer_hold_markers_created", st.peer_hold_markers_created},
                   {"peer_hold_checks_failed", st.peer_hold_checks_failed},
                   {"segments_held_by_peers", st.segments_held_by_peers},
                   {"segment_bytes_held_by_peers", st.segment_bytes_held_by_peers},
                   {"unlinks_deferred_by_peers", st.unlinks_deferred_by_peers}};
  j["config"] = {{"capacity_bytes", st.capacity_bytes},
                 {"evict_high_bytes", st.evict_high_bytes},
                 {"evict_low_bytes", st.evict_low_bytes},
                 {"global_high_watermark_bytes", st.global_high_watermark_bytes},
                 {"global_low_watermark_bytes", st.global_low_watermark_bytes},
                 {"segment_size_bytes", st.segment_size},
                 {"cache_size_bytes", st.cache_capacity_bytes},
                 {"staging_budget_bytes", f.staging_budget},
                 {"read_ahead_bytes", f.read_ahead}};
  j["backing_fs"] = {{"ok", st.backing_fs_ok}, {"size_bytes", st.backing_fs_size}, {"avail_bytes", st.backing_fs_avail}};
  if (st.s3) {
    nlohmann::json req = nlohmann::json::object();
    for (const auto& [op, n] : st.s3_requests) req[op] = n;
    req["total"] = st.s3_requests_total;
    j["s3"] = {{"requests", req},
               {"segments_uploaded", st.s3_segments_uploaded},
               {"segments_pending", st.s3_segments_pending},
               {"journal_publications", st.s3_journal_publications},
               {"failures", st.s3_failures},
               {"bytes_sent", st.s3_bytes_sent},
               {"bytes_received", st.s3_bytes_received},
               {"split_reads", st.s3_split_reads},
               {"read_parts", st.s3_read_parts},
               {"read_parts_parallel", st.s3_read_parts_parallel},
               {"gets_in_flight", st.s3_gets_in_flight},
               {"gets_in_flight_peak", st.s3_gets_in_flight_peak},
               {"credential_reloads", st.s3_credential_reloads},
               {"credential_retries", st.s3_credential_retries}};
  }
  j["recovery"] = {{"own_entries_applied", st.recovery_entries},
                   {"cuts", st.recovery_cuts},
                   {"seals", st.recovery_seals},
                   {"lost_entries", st.recovery_lost_entries}};
  j["nodes"] = nlohmann::json::array();
  for (const auto& n : st.nodes) {
    nlohmann::json o = SegmentsJson(n);
    o["node"] = n.node;
    j["nodes"].push_back(std::move(o));
  }
  j["peers"] = st.peers;
  j["peer_polls"] = {{"polls", st.peer_polls}, {"tail_reads", st.peer_tail_reads}};
  j["peer_journals"] = nlohmann::json::array();
  for (const auto& p : st.peer_journals) {
    j["peer_journals"].push_back({{"node", p.node},
                                  {"polls", p.polls},
                                  {"entries_applied", p.entries_applied},
                                  {"lag_seconds", p.lag_seconds},
                                  {"last_poll_age_seconds", p.last_poll_age_seconds}});
  }
  j["fuse"] = {{"known_inodes", f.known_inodes},
               {"open_handles", f.open_handles},
               {"staged_versions", f.staged_versions},
               {"staged_bytes", f.staged_bytes},
               {"staging_budget", f.staging_budget},
               {"spilled_bytes", f.spilled_bytes},
               {"spills", f.spills},
               {"spilled_bytes_total", f.spilled_bytes_total},
               {"spill_errors", f.spill_errors},
               {"whole_record_commits", f.whole_record_commits},
               {"extent_flushes", f.extent_flushes},
               {"compaction_flushes", f.compaction_flushes},
               {"compaction_copied_bytes", f.compaction_copied_bytes},
               {"sealed_closes", f.sealed_closes},
               {"sealed_flushes", f.sealed_flushes},
               {"flushes_deferred", f.flushes_deferred},
               {"closes_committed_open", f.closes_committed_open},
               {"closes_superseded_late", f.closes_superseded_late},
               {"commits_owed", f.commits_owed},
               {"streamed_commits", f.streamed_commits},
               {"shadow_versions_created", f.shadow_versions_created},
               {"versions_committed", f.versions_committed},
               {"versions_discarded", f.versions_discarded},
               {"flush_records", f.flush_records},
               {"flush_errors", f.flush_errors},
               {"commit_errors", f.commit_errors},
               {"failed_publishes", f.failed_publishes},
               {"inodes_renumbered", f.inodes_renumbered},
               {"fresh_forgotten", f.fresh_forgotten},
               {"hidden_reset", f.hidden_reset},
               {"inval_calls", f.inval_calls},
               {"inval_missed", f.inval_missed},
               {"inval_retries", f.inval_retries},
               {"lookups_uncached", f.lookups_uncached},
               {"bytes_read", f.bytes_read},
               {"bytes_written", f.bytes_written},
               {"reads_in_flight_max", f.reads_in_flight_max}};
  nlohmann::json ops = nlohmann::json::object();
  for (const auto& o : snap.fuse_ops) {
    if (o.count == 0) continue;
    nlohmann::json buckets = nlohmann::json::array();
    for (size_t i = 0; i < kLatencyBucketsSeconds.size(); ++i) buckets.push_back(o.buckets[i]);
    ops[FuseOpName(o.op)] = {{"count", o.count}, {"sum_seconds", o.sum_seconds}, {"buckets", buckets}};
  }
  j["fuse_ops"] = ops;
  nlohmann::json le = nlohmann::json::array();
  for (double x : kLatencyBucketsSeconds) le.push_back(x);
  j["fuse_op_buckets_seconds"] = le;  // upper bounds of fuse_ops.*.buckets (cumulative counts)
  return j.dump();
}

std::string StatsToPrometheus(const StatsSnapshot& snap) {
  const StoreStats& st = snap.store;
  const FsStats& f = snap.fs;
  Expo e;

  // ---- what is running, and how it is configured ----
  e.Family("kvfs_build_info", "gauge", "Always 1: the kvfs version and the git commit it was built from (labels).");
  e.Sample("kvfs_build_info", Label("version", snap.version) + "," + Label("commit", snap.git_commit), uint64_t{1});
  e.One("kvfs_capacity_bytes", "gauge", "This node's --capacity (0 = unlimited).", st.capacity_bytes);
  e.One("kvfs_eviction_high_bytes", "gauge",
        "This node evicts when its segment bytes exceed this (from --capacity; 0 = no capacity).", st.evict_high_bytes);
  e.One("kvfs_eviction_low_bytes", "gauge", "... down to this (from --capacity; 0 = no capacity).",
        st.evict_low_bytes);
  e.One("kvfs_global_high_watermark_bytes", "gauge", "--high-watermark over all nodes' segments (0 = none).",
        st.global_high_watermark_bytes);
  e.One("kvfs_global_low_watermark_bytes", "gauge",
        "--low-watermark (7/8 of the high one unless given; 0 = no watermark).", st.global_low_watermark_bytes);
  e.One("kvfs_segment_size_bytes", "gauge",
        "Segment size: --segment-size, or chosen at mount from the export's size.", st.segment_size);
  e.One("kvfs_cache_capacity_bytes", "gauge", "--cache-size: the value cache's bound.", st.cache_capacity_bytes);

  // ---- the export's file system (statvfs of the backing directory) ----
  if (st.backing_fs_ok) {
    e.One("kvfs_backing_fs_size_bytes", "gauge", "Size of the backing directory's file system (the export).",
          st.backing_fs_size);
    e.One("kvfs_backing_fs_avail_bytes", "gauge",
          "Bytes of the backing directory's file system available to kvfs (statvfs f_bavail).", st.backing_fs_avail);
  } else {
    e.Family("kvfs_backing_fs_size_bytes", "gauge", "Size of the backing directory's file system (the export).");
    e.Family("kvfs_backing_fs_avail_bytes", "gauge",
             "Bytes of the backing directory's file system available to kvfs (statvfs f_bavail).");
  }

  // ---- FUSE layer ----
  e.Family("kvfs_fuse_operation_duration_seconds", "histogram",
           "Time the daemon spent handling FUSE requests, by operation.");
  for (const auto& o : snap.fuse_ops) {
    const std::string op = Label("op", FuseOpName(o.op));
    for (size_t i = 0; i < kLatencyBuckets; ++i) {
      const std::string le = i < kLatencyBucketsSeconds.size() ? Num(kLatencyBucketsSeconds[i]) : "+Inf";
      e.Sample("kvfs_fuse_operation_duration_seconds_bucket", op + ",le=\"" + le + "\"", o.buckets[i]);
    }
    e.Sample("kvfs_fuse_operation_duration_seconds_sum", op, o.sum_seconds);
    e.Sample("kvfs_fuse_operation_duration_seconds_count", op, o.count);
  }
  e.One("kvfs_fuse_read_bytes_total", "counter", "Bytes returned by FUSE READ requests.", f.bytes_read);
  e.One("kvfs_fuse_written_bytes_total", "counter", "Bytes received in FUSE WRITE requests.", f.bytes_written);
  e.One("kvfs_fuse_open_handles", "gauge", "Open file handles.", f.open_handles);
  e.One("kvfs_fuse_known_inodes", "gauge", "Inodes the kernel holds references to.", f.known_inodes);
  e.One("kvfs_staged_versions", "gauge", "File versions being written (in memory, not yet committed).",
        f.staged_versions);
  e.One("kvfs_staged_bytes", "gauge", "Memory held by staged file versions (what --staging-size bounds).",
        f.staged_bytes);
  e.One("kvfs_staging_budget_bytes", "gauge", "The staging memory budget (--staging-size).", f.staging_budget);
  e.One("kvfs_spilled_bytes", "gauge", "Bytes of staged versions spilled to provisional records.", f.spilled_bytes);
  e.One("kvfs_spills_total", "counter", "Spills of staged bytes to provisional records.", f.spills);
  e.One("kvfs_spilled_bytes_total", "counter", "Bytes written by spills.", f.spilled_bytes_total);
  e.One("kvfs_spill_errors_total", "counter", "Spills that failed (the write that needed them failed).",
        f.spill_errors);
  e.One("kvfs_versions_committed_total", "counter", "File versions committed (journaled).", f.versions_committed);
  e.One("kvfs_versions_discarded_total", "counter", "Staged versions discarded (unlinked before commit).",
        f.versions_discarded);
  e.One("kvfs_shadow_versions_created_total", "counter", "Concurrent O_TRUNC writers given a version of their own.",
        f.shadow_versions_created);
  e.One("kvfs_flush_records_total", "counter", "Records written by FLUSH.", f.flush_records);
  e.One("kvfs_flush_errors_total", "counter", "FLUSH requests that failed to write their record.", f.flush_errors);
  e.One("kvfs_commit_errors_total", "counter", "Version commits that failed.", f.commit_errors);
  e.One("kvfs_failed_publishes_total", "counter",
        "Versions not published because their close, fsync or commit failed (the name was restored).",
        f.failed_publishes);
  e.One("kvfs_inodes_renumbered_total", "counter",
        "Committed files moved to a new inode number for a new version (docs/design.md §3).", f.inodes_renumbered);
  e.One("kvfs_fresh_numbers_forgotten_total", "counter",
        "Renumbered inode numbers whose writer's retry is over: their readers use the page cache again.",
        f.fresh_forgotten);
  e.One("kvfs_hidden_versions_reset_total", "counter",
        "Inodes whose hidden versions are over: their readers use the page cache again.", f.hidden_reset);
  e.One("kvfs_closes_superseded_late_total", "counter",
        "Versions released after a version closed later had committed (RELEASE out of close order): dropped.",
        f.closes_superseded_late);
  e.One("kvfs_commits_owed_total", "counter",
        "Commits after which a writer that joined meanwhile had changed the version: it stays being written "
        "until that writer's queued commit.",
        f.commits_owed);

  // ---- index and data ----
  e.One("kvfs_files", "gauge", "Files in the index (this node's and applied peers').", st.files);
  e.One("kvfs_directories", "gauge", "Directories in the index.", st.directories);
  e.One("kvfs_live_bytes", "gauge", "Logical bytes of all files in the index.", st.live_bytes);
  e.One("kvfs_records_written_total", "counter", "Records appended to this node's segments.", st.records_written);
  e.One("kvfs_journal_entries_total", "counter", "Entries appended to this node's journal.", st.journal_entries);
  e.One("kvfs_group_commits_total", "counter", "Group commits (durability rounds).", st.group_commits);
  e.One("kvfs_visibility_rounds_total", "counter", "Group-commit rounds that wrote the journal without fdatasync.",
        st.visibility_rounds);
  e.One("kvfs_unjournaled_entries", "gauge",
        "Journal entries not durable yet (queued, or kept after a failed group commit and retried).",
        st.unjournaled_entries);
  e.One("kvfs_journal_retries_total", "counter", "Group commits that failed; their entries were kept and retried.",
        st.journal_retries);
  e.One("kvfs_lost_entries_total", "counter",
        "Entries not journaled because their record was written before a failed segment fdatasync.",
        st.lost_entries);
  e.One("kvfs_cache_hits_total", "counter",
        "Value reads (per read of a value from offset 0, not per FUSE request) served from the LRU or "
        "promoted from probation by a second read from the start.",
        st.cache_hits);
  e.One("kvfs_cache_misses_total", "counter",
        "Value reads (per read of a value from offset 0, not per FUSE request) that waited for the backing store.",
        st.cache_misses);
  e.One("kvfs_read_loaded_bytes_total", "counter",
        "Bytes the read path loaded from the backing store (per byte; compare kvfs_fuse_read_bytes_total).",
        st.read_loaded_bytes);
  e.One("kvfs_cache_bytes", "gauge", "Bytes held by the value cache.", st.cache_bytes);
  e.One("kvfs_probation_reads_total", "counter",
        "Reads answered from probation: the rest of a read whose first request loaded the value.",
        st.probation_reads);
  e.One("kvfs_probation_bytes", "gauge", "Bytes of loaded values on probation (not in the LRU yet).",
        st.probation_bytes);
  e.One("kvfs_buffer_pool_reused_total", "counter", "Data-path buffers handed out again from the pool.",
        st.pool_reused);
  e.One("kvfs_buffer_pool_fresh_total", "counter", "Data-path buffers that had to be mapped fresh.", st.pool_fresh);
  e.One("kvfs_buffer_pool_fresh_bytes_total", "counter", "Bytes of freshly mapped data-path buffers.",
        st.pool_fresh_bytes);
  e.One("kvfs_buffer_pool_free_bytes", "gauge", "Free bytes the buffer pool holds for reuse (at most 256 MiB).",
        st.pool_free_bytes);
  e.One("kvfs_buffer_pool_reused_untouched_total", "counter",
        "Data-path buffers handed out again that user code had never accessed.", st.pool_reused_untouched);
  e.One("kvfs_read_verify_kernel_copy_bytes_total", "counter",
        "Loaded bytes verified from kernel copies instead of in place (never-touched buffers).",
        st.verify_kernel_copy_bytes);
  e.One("kvfs_read_verify_kernel_copy_fallbacks_total", "counter",
        "Verifications that fell back to in place because the kernel refused the copy.",
        st.verify_kernel_copy_fallbacks);
  e.One("kvfs_kernel_write_bytes_total", "counter",
        "S3 GET bodies written into never-touched buffers by the kernel (process_vm_writev) instead of memcpy.",
        st.kernel_write_bytes);
  e.One("kvfs_kernel_write_fallbacks_total", "counter",
        "Such writes done by memcpy because the kernel refused process_vm_writev.", st.kernel_write_fallbacks);
  e.One("kvfs_checksum_failures_total", "counter", "Reads that failed their checksum (answered EIO).",
        st.checksum_failures);

  // ---- backing store ----
  const BackingOpCounts& b = st.backing_ops;
  e.Family("kvfs_backing_operations_total", "counter",
           "Operations on the backing store (the export), by kind; create opens are also counted as open.");
  const std::pair<const char*, uint64_t> kinds[] = {
      {"open", b.open},   {"create", b.create}, {"close", b.close},  {"read", b.read},     {"write", b.write},
      {"write_batch", b.write_batches}, {"sync", b.sync}, {"mkdir", b.mkdir}, {"rename", b.rename},
      {"remove", b.remove}, {"stat", b.stat}, {"list", b.list},      {"syncdir", b.syncdir},
      {"writeback", b.writeback}};
  for (const auto& [k, v] : kinds) e.Sample("kvfs_backing_operations_total", Label("op", k), v);
  e.One("kvfs_backing_read_bytes_total", "counter", "Bytes read from the backing store.", st.backing_bytes_read);
  e.One("kvfs_backing_written_bytes_total", "counter", "Bytes written to the backing store.",
        st.backing_bytes_written);

  // ---- segments on the export now: this node (exact), then per node (peers: sizes of their files) ----
  const NodeSegmentStats own = st.nodes.empty() ? NodeSegmentStats{} : st.nodes.front();
  e.Family("kvfs_export_segments", "gauge",
           "This node's segment files on the export now, by state (open, sealed; unlinking: dropped, waiting "
           "for the unlink).");
  e.Sample("kvfs_export_segments", "state=\"open\"", own.open_segments);
  e.Sample("kvfs_export_segments", "state=\"sealed\"", own.sealed_segments);
  e.Sample("kvfs_export_segments", "state=\"unlinking\"", own.unlinking_segments);
  e.One("kvfs_export_segment_bytes", "gauge", "Bytes of this node's segment files on the export now.",
        own.segment_bytes);
  e.One("kvfs_export_live_bytes", "gauge", "Bytes of the committed files whose content is in this node's segments.",
        own.live_bytes);
  e.One("kvfs_export_dead_bytes", "gauge",
        "Bytes of this node's segments no file uses (record metadata, padding, deleted and rewritten files).",
        own.dead_bytes);
  e.One("kvfs_export_files", "gauge",
        "Live records in this node's segments (one per file written once; a file rewritten in place counts "
        "each record its extents use).",
        own.files);
  e.One("kvfs_export_overhead_per_file_bytes", "gauge",
        "(segment bytes - live bytes) / live records of this node: what a record costs on the export beyond its "
        "bytes.",
        own.OverheadPerFile());
  e.One("kvfs_segments_created_total", "counter", "Segment files this node created.", st.segments_created);
  e.Family("kvfs_node_segments", "gauge",
           "A node's segment files on the export now, by state (open, sealed; unlinking: dropped, waiting for "
           "the unlink, this node only).");
  for (const auto& n : st.nodes) {
    e.Sample("kvfs_node_segments", Label("node", n.node) + ",state=\"open\"", n.open_segments);
    e.Sample("kvfs_node_segments", Label("node", n.node) + ",state=\"sealed\"", n.sealed_segments);
    e.Sample("kvfs_node_segments", Label("node", n.node) + ",state=\"unlinking\"", n.unlinking_segments);
  }
  e.Family("kvfs_node_segment_bytes", "gauge",
           "Bytes of a node's segment files on the export now (this node: its accounting; peers: the files' "
           "sizes, a not yet sized segment counted by its live bytes).");
  for (const auto& n : st.nodes) e.Sample("kvfs_node_segment_bytes", Label("node", n.node), n.segment_bytes);
  e.Family("kvfs_node_live_bytes", "gauge", "Bytes of the committed files whose content is in a node's segments.");
  for (const auto& n : st.nodes) e.Sample("kvfs_node_live_bytes", Label("node", n.node), n.live_bytes);
  e.Family("kvfs_node_dead_bytes", "gauge",
           "Segment bytes of a node no file uses: record metadata, padding, deleted and rewritten files.");
  for (const auto& n : st.nodes) e.Sample("kvfs_node_dead_bytes", Label("node", n.node), n.dead_bytes);
  e.Family("kvfs_node_files", "gauge", "Live records in a node's segments (as kvfs_export_files).");
  for (const auto& n : st.nodes) e.Sample("kvfs_node_files", Label("node", n.node), n.files);
  e.Family("kvfs_node_overhead_per_file_bytes", "gauge",
           "(segment bytes - live bytes) / live records of a node: what a record costs on the export beyond its bytes.");
  for (const auto& n : st.nodes) {
    e.Sample("kvfs_node_overhead_per_file_bytes", Label("node", n.node), n.OverheadPerFile());
  }

  // ---- peers ----
  e.One("kvfs_peers", "gauge", "Peer nodes whose journals this node tails.", st.peers);
  e.Family("kvfs_peer_journal_polls_total", "counter", "Polls of a peer's journal.");
  for (const auto& p : st.peer_journals) e.Sample("kvfs_peer_journal_polls_total", Label("peer", p.node), p.polls);
  e.Family("kvfs_peer_journal_entries_applied_total", "counter", "A peer's journal entries applied to this index.");
  for (const auto& p : st.peer_journals) {
    e.Sample("kvfs_peer_journal_entries_applied_total", Label("peer", p.node), p.entries_applied);
  }
  e.Family("kvfs_peer_journal_lag_seconds", "gauge",
           "For the newest applied entry of a peer: time from its stamp on the peer to its apply here.");
  for (const auto& p : st.peer_journals) e.Sample("kvfs_peer_journal_lag_seconds", Label("peer", p.node), p.lag_seconds);
  e.Family("kvfs_peer_journal_last_poll_age_seconds", "gauge", "Time since the last completed poll of a peer.");
  for (const auto& p : st.peer_journals) {
    if (p.last_poll_age_seconds >= 0) {
      e.Sample("kvfs_peer_journal_last_poll_age_seconds", Label("peer", p.node), p.last_poll_age_seconds);
    }
  }

  // ---- capacity and eviction ----
  e.One("kvfs_evicted_segments_total", "counter", "Segments of this node dropped by eviction.", st.segments_dropped);
  e.One("kvfs_evicted_bytes_total", "counter", "Bytes of this node's segments dropped by eviction.",
        st.segment_bytes_dropped);
  e.One("kvfs_unlinked_segments_total", "counter", "Dropped segments whose files were removed.", st.segments_unlinked);
  e.One("kvfs_reinserted_records_total", "counter", "Records rewritten before their segment was dropped.",
        st.records_reinserted);
  e.One("kvfs_reinserted_bytes_total", "counter", "Bytes rewritten by reinsertion.", st.bytes_reinserted);
  e.One("kvfs_cleaned_segments_total", "counter",
        "Segments the segment cleaner emptied (live records re-appended) and dropped.", st.cleaned_segments);
  e.One("kvfs_cleaned_bytes_copied_total", "counter", "Bytes the segment cleaner re-appended.",
        st.cleaned_bytes_copied);
  e.One("kvfs_writer_waits_total", "counter", "Writes that waited for eviction at the capacity limit.",
        st.writer_waits);
  e.One("kvfs_nospace_events_total", "counter", "Writes that found the backing store or capacity full (ENOSPC).",
        st.nospace_events);
  e.One("kvfs_segments_sealed_early_total", "counter",
        "Active segments sealed early on a full export because most of their bytes were dead.",
        st.segments_sealed_early);
  e.One("kvfs_segments_retired_total", "counter",
        "Segments retired unsealed because their seal could not be written (full export).", st.segments_retired);
  if (st.s3) {
    e.Family("kvfs_s3_requests_total", "counter", "S3 requests sent to the bucket, by type (retries included).");
    for (const auto& [op, n] : st.s3_requests) e.Sample("kvfs_s3_requests_total", Label("op", op), n);
    e.One("kvfs_s3_segments_uploaded_total", "counter", "Sealed segments uploaded to the bucket.", st.s3_segments_uploaded);
    e.One("kvfs_s3_segments_pending", "gauge", "Sealed segments staged locally, waiting for their upload.",
          st.s3_segments_pending);
    e.One("kvfs_s3_journal_publications_total", "counter", "Journal prefixes published to the bucket.",
          st.s3_journal_publications);
    e.One("kvfs_s3_failures_total", "counter", "Failed segment uploads and journal publications (retried).",
          st.s3_failures);
    e.One("kvfs_s3_split_reads_total", "counter", "Large reads fetched as several ranged GETs in flight.",
          st.s3_split_reads);
    e.One("kvfs_s3_read_parts_total", "counter", "Ranged GETs (parts) of split reads.", st.s3_read_parts);
    e.One("kvfs_s3_read_parts_parallel_total", "counter",
          "Parts of split reads fetched on a helper thread, concurrently with the reader's own part.",
          st.s3_read_parts_parallel);
    e.One("kvfs_s3_gets_in_flight", "gauge", "S3 GETs being transferred now.", st.s3_gets_in_flight);
    e.One("kvfs_s3_gets_in_flight_peak", "gauge", "The most S3 GETs in flight at once since the mount.",
          st.s3_gets_in_flight_peak);
    e.One("kvfs_s3_credential_reloads_total", "counter",
          "S3 credentials re-read from the shared credentials file (it changed, or a 403 named the key).",
          st.s3_credential_reloads);
    e.One("kvfs_s3_credential_retries_total", "counter",
          "S3 requests answered 403 and retried once with re-read credentials.", st.s3_credential_retries);
  }
  return std::move(e.str());
}

}  // namespace kvfs
