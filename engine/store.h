// Store: the kvfs engine that the FUSE layer drives. Namespace (RocksDB index + journal) and data
// (segments + LRU) of one node over one backing directory. No FUSE in here.
//
// Inode numbers are the index's: root is 1 (kRootIno), never reused for other content within a mount's
// life. Names are single path components. Paths in the journal are computed from the parent chain.
//
// Lifecycle of a file (docs/design.md §4):
//   CreateFile        -> a *staged* dentry + inode in the index: visible to Lookup/ReadDir/Rename/Unlink
//                        on this node, nothing journaled, gone after a crash.
//   WriteRecord       -> the bytes of a version appended as a record (group commit); readable at once
//                        through Read(); not durable until the next group commit.
//   CommitFile        -> journal PUT under the inode's current name; the inode becomes *committed*.
//   Sync              -> returns when every record and journal entry enqueued before it is durable.
// A group commit runs every StoreOptions::group_commit_interval_ms even without Sync and publishes the
// entries (journal written, not fdatasync'd: peers see them); a durable round follows within
// StoreOptions::sync_interval_ms, so a file closed more than group_commit_interval_ms + sync_interval_ms
// before a crash (power cut included) survives it; a kill of the daemon alone loses no published entry.
//
// Errors: Status codes map to errno with Status::ToErrno (ENOENT, EEXIST, ENOTEMPTY, ENOTDIR, EISDIR,
// EINVAL, ENOSPC, EIO, ...). Thread safety: every method may be called concurrently from many threads.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/kernel_copy.h"
#include "blockstore/s3_env.h"
#include "blockstore/status.h"
#include "blockstore/types.h"
#include "blockstore/value_buffer.h"
#include "index/inode.h"

namespace kvfs {

struct StoreOptions {
  std::string backing_dir;              // the export (or any POSIX directory)
  std::string index_dir;                // local RocksDB directory; default /var/lib/kvfs/<fs-id>-<node>
  std::string node_id;                  // default: host name
  uint64_t segment_size = 256ull << 20; // bytes; a record larger than this gets a segment of its own
  uint64_t cache_size = 1ull << 30;     // LRU of record values, bytes
  uint32_t group_commit_interval_ms = 20;  // visibility: entries are journaled (not synced) this often
  // Durability interval: segments, then the journal, are fdatasync'd at most this long after a round
  // that only published (0: every group-commit round fdatasyncs, as before). fsync / Sync / Close
  // always run a durable round at once (docs/semantics.md §6).
  uint32_t sync_interval_ms = 1000;
  // O_DIRECT for segment writes (default): staged chunks go to the disk straight from their aligned
  // buffers, no copy into the backing's page cache (blockstore/segment_writer.h); buffered where the
  // file system refuses O_DIRECT.
  bool direct_io = true;
  bool force_takeover = false;          // take over the node directory even if its owner looks alive
  bool atime = true;                    // reads update atime with relatime rules (Store::NoteRead); false = noatime
  // link(2) of a regular file claims the new name on the export first (engine/link_arbiter.h): of several
  // nodes linking one name at once exactly one gets 0. false: only this node's index decides (two nodes
  // racing may both get 0; one exclusive create and one removal fewer per link). kvfs mount --link-claims.
  bool link_claims = true;
  // An object tier behind env (an S3 backing: env is an S3TierEnv over a local staging directory, and
  // backing_dir is that directory). Then sealed segments are uploaded and the journal is published up to
  // the last entry whose segments are all in the bucket (engine/store_tier.cc, docs/s3.md); periodic
  // checkpoints are off (the snapshot at a clean Close stays). nullptr: a POSIX backing, as before.
  ObjectTier* tier = nullptr;
  // With a tier: the active segment is sealed (and so uploaded, and its files published to peers) once
  // it has held records for this long, even if not full: the bound on how long a file stays invisible to
  // other nodes on S3 (kvfs mount --seal-after-ms). 0 = only when full (and at unmount).
  uint32_t seal_after_ms = 0;
  uint32_t heartbeat_interval_ms = 5000;  // HEARTBEAT period (a stat of OWNER, an in-place write + fdatasync)
  uint32_t peer_poll_ms = 200;          // how often peers' journals are tailed (0 = never); backs off
                                        // for idle peers, doubling up to peer_poll_max_ms
  // The longest wait between polls of an idle peer (doubling from peer_poll_ms while polls find nothing,
  // back to peer_poll_ms on activity, and on a lookup miss when over 4 x). 0 = 4 x peer_poll_ms (kvfs mount sets 10 s on S3,
  // where every poll is billed requests: docs/s3.md "Idle cost").
  uint32_t peer_poll_max_ms = 0;
  bool peer_direct_io = false;          // read peers' journals with O_DIRECT (NFS: see growth at once)
  // Segment (value) reads with O_DIRECT: every read is 4 KiB aligned, the bytes land once in kvfs's own
  // buffer (LRU) instead of also in the backing mount's page cache, and a large read is sent as parallel
  // requests (NFS: rsize RPCs in flight) instead of through the client's read-ahead. Falls back to
  // buffered reads where the backing file system refuses O_DIRECT (tmpfs).
  bool read_direct_io = true;
  // The budget of one read's backing calls (Read, ReadPinned, ReadUncached: opening the segment, reading
  // it, checking whether it vanished), from the read's start: every call made for the read ends by then
  // (BackingDeadlineScope; a backing that bounds its calls honours it: the S3 client, DeadlineEnv), so
  // a FUSE READ never waits on the backing past it (kvfs mount --backing-deadline-ms). 0 = none.
  uint32_t read_deadline_ms = 0;
  Env* env = nullptr;                   // default Env::Posix()

  // ---- checkpoints and journal retirement (engine/checkpoint.h, docs/operations.md) ----
  uint64_t checkpoint_entries = 1000000;     // snapshot after this many journal entries (0 = not by count)
  uint32_t checkpoint_interval_ms = 600000;  // ... or this long after the last one if anything was journaled
                                             // (0 = not by time)
  bool checkpoint_on_close = true;           // snapshot at a clean Close if anything was journaled
  uint32_t peers_publish_ms = 10000;         // <node dir>/peers rewrite period (only when a position moved)
  uint32_t retire_check_ms = 10000;          // retirement check period while covered journal files remain

  // ---- capacity and eviction (docs/design.md §6; see "Capacity and eviction" below) ----
  uint64_t capacity_bytes = 0;              // bytes of THIS node's segment files (0 = unlimited)
  uint64_t global_high_watermark_bytes = 0; // over all nodes' segments (0 = no global watermark)
  uint64_t global_low_watermark_bytes = 0;  // evict down to this (0 = 7/8 of the high watermark)
  uint32_t reinsert_min_hits = 1;           // reads since written that earn a reinsertion (0 = plain FIFO)
  double reinsert_max_fraction = 0.5;       // reinserted bytes per dropped segment <= this * its bytes
  uint32_t drop_grace_ms = 0;               // DROP -> unlink delay; 0 = 2 * peer_poll_ms + 500
  uint32_t writer_wait_ms = 10000;          // how long a writer over the hard limit waits for eviction
  // How long a sealed segment with no live record waits before it is dropped (dead-segment
  // reclamation); tests shorten it (kvfs mount: KVFS_TEST_DEAD_SEGMENT_AGE_MS, not in --help).
  uint32_t dead_segment_age_ms = 10000;
};

// What applying peers' journal entries changed, for kernel cache invalidation
// (fuse_lowlevel_notify_inval_entry for names, fuse_lowlevel_notify_inval_inode for inodes).
struct PeerChanges {
  struct Name {
    uint64_t parent = 0;
    std::string name;
    uint64_t old_ino = 0;  // what the name resolved to before (0 = absent)
  };
  std::vector<Name> names;
  std::vector<uint64_t> inodes;  // attributes / xattrs changed in place
};

// ---- Capacity and eviction (docs/design.md §6) ----
// The evictor thread always runs. Without capacity_bytes or global_high_watermark_bytes it only reclaims
// dead segments and keeps RESERVE (below); live data is evicted only when one of them is set.
//  * Dead segments: a sealed segment of this node (or one of an older generation) with no live record
//    (every file in it deleted or rewritten), evictable for 10 s, is dropped like an evicted one (DROP,
//    grace, unlink), so deleted and rewritten bytes are reclaimed without a capacity. A handle opened
//    before its file was deleted or replaced here holds its segment (PinRecord) until it is closed;
//    one opened on a peer holds it through its marker (engine/peer_holds.cc): after the DROP its unlink
//    waits while a live peer marks it (StoreStats::segments_held_by_peers).
//    Segments holding pinned records (ReleaseRecordPin, PinRecord) are never "dead" here.
//  * Node bytes = sizes of this node's segment files (sealed: file size; active: end of its last
//    record), excluding dropped segments that wait for their unlink.
//  * Per node: when node bytes > high = capacity - segment_size (capacity when it is under three
//    segments), the evictable segments (sealed, or of an older generation; never one holding a
//    pinned record, see ReleaseRecordPin) with no live record are dropped first, whatever their age
//    (StoreStats::dead_segments_evicted); then, only if node bytes are still over high, the oldest
//    evictable segments, (generation, seq) first (FIFO), until node bytes <= low = high -
//    max(segment_size, capacity / 8). (The global watermark and a full export below use the same order.)
//  * Global: global bytes = node bytes + the size of every peer segment file the index knows and has
//    not seen dropped, from a stat of the file (a peer's segment size may differ from this node's): a
//    sealed one stat'ed once and kept, an open one at most once a second, at most 64 stats per evictor
//    round (shared with GetStats' sizes, NodeSegmentStats); a segment not sized yet counts its live
//    bytes (a lower bound: a joining node evicts late rather than too much). Over the high watermark,
//    this node drops its proportional share (node bytes / global bytes) of the excess over the low
//    watermark.
//  * Hard limit: a WriteRecord that would take node bytes + segments awaiting unlink + records in
//    flight over capacity + segment_size waits (up to writer_wait_ms) for the evictor, then NoSpace.
//    So the node's segment files stay under capacity + 2 segments.
//  * Hits-based reinsertion (CacheLib Navy's hits policy): Read at offset 0 of a record in one of
//    this node's segments counts one hit for that record (in memory, per Location; a read of a whole
//    file through FUSE starts at offset 0 once; reads the kernel page cache answers are not seen).
//    Before a segment is dropped, its live records with >= reinsert_min_hits hits are appended again
//    (most hits first, at most reinsert_max_fraction of the segment's bytes) and journaled as MOVE
//    {path, old, new} with the record's original stamp. A reinserted record starts with 0 hits, so it
//    is reinserted again only if read again: reinsertion alone cannot loop, and every drop frees at
//    least (1 - reinsert_max_fraction) of its segment. Costs ~50 bytes of memory per committed file of
//    this mount (location -> inode) and per read record.
//  * Segment cleaner (CleanSegments, with or without a capacity): when node bytes > 2 x this node's
//    live bytes + 2 segments, every 2 s, the evictable unpinned segments whose live records (whole)
//    take at most 1/4 of the segment are emptied, lowest live fraction first, at most one segment's
//    worth of copies per round, none while the export is full: each record a file uses is re-appended
//    and journaled as MOVE (ReinsertRecord), then the segment, dead now, is dropped. At most 1/3 byte
//    copied per byte freed (StoreStats::cleaned_*).
//  * Drop = index ApplyDrop + journal DROP{segment} (its files become ENOENT at once, here and on
//    peers when they apply it), then after drop_grace_ms a durable journal, a listing of the live
//    peers' hold markers (engine/peer_holds.cc: a marked segment waits, re-checked every second), this
//    node's fds of the segment closed, and one unlink. Dropped segments whose unlink a crash interrupted are unlinked
//    after the grace period at the next Open.
//  * A read of a segment that was dropped or vanished (unlinked, ESTALE) is NotFound (ENOENT).
//  * CommitFile of a record whose segment was dropped meanwhile: NoSpace.
//  * Backing store full (NoSpace from a record write or a journal append): the writer gets NoSpace; the
//    evictor frees a RESERVE file (<node dir>/RESERVE, min(1 MiB, segment_size / 4), kept while mounted)
//    so owed journal entries (PUTs of written records, DROP, the user's UNLINK) can be journaled, drops
//    the oldest segments until two segments' worth of space is free (only with a capacity or watermark;
//    dead segments always), and recreates RESERVE once no entry is owed and its size plus max(twice its
//    size, the largest record that failed for lack of space meanwhile; at most a segment and 1/4 of the
//    export) is free, so the store leaves its full state only when that write fits. While it is freed,
//    record writes keep its size of the backing free (NoSpace otherwise). A clean Close
//    removes RESERVE (a node not mounted holds no space); after a crash or a failed Close it stays, and
//    Open removes it before the takeover when the backing has under 2 MiB free, so a full backing can
//    be remounted.
//  * Full export, mostly dead active segment: while the export is full (from the first NoSpace until
//    RESERVE is back), the evictor seals the active segment early when at least half of its bytes are
//    dead (files deleted or rewritten: ShouldSealActiveEarly, eviction_policy.h) and nothing in it is
//    pinned, and dead segments are dropped 1 s after they sealed instead of dead_segment_age_ms. So an
//    export smaller than a few segments, filled and then emptied by rm, gets its space back within
//    seconds, without a remount. A seal that cannot be written (no room for the footer) retires the
//    segment unsealed instead: it is never appended again and is reclaimed the same way. Dead segments
//    also go after 1 s while the backing has less than RESERVE plus two segments free, full or not (the
//    evictor's statvfs, at most one a second and only while such a young dead segment exists): a fill
//    can end with room for the write that failed, RESERVE back at once, and the rm after it then
//    waited the ordinary age.
//  * Journal failures (NoSpace, IOError, TimedOut): the entries stay queued in order and the group
//    commit retries them (backoff from group_commit_interval_ms to 1 s; at once when RESERVE is freed or
//    a dropped segment is unlinked). Sync fails meanwhile; StoreStats::unjournaled_entries counts them.
//  * Segment fdatasync failures (docs/design.md §7): the segment writer is replaced by a new one (new segment);
//    every record the failed writer wrote after its segment's last successful fdatasync is treated as
//    lost (SegmentWriter::MayBeLost), and the PUT / MOVE entries pointing at those records are never
//    journaled: dropped, logged, counted (StoreStats::lost_entries). The Sync whose round failed or
//    dropped entries returns the error; after any loss checkpoints are refused and Close fails (the
//    index is not marked clean, so the next mount rebuilds it from the journals, without those files).

// Bytes handed out by Store::ReadPinned without a copy: `data` points into `owner` (an LRU value or a
// buffer the read filled), which stays alive as long as the caller holds this.
struct PinnedBytes {
  std::shared_ptr<const ValueBuffer> owner;
  const char* data = nullptr;
  size_t len = 0;
};

// Backing-store operations by kind since the mount (a copy of EnvCounters, env.h): the round trips a
// network file system pays for, which kvfs exists to make rare.
struct BackingOpCounts {
  uint64_t open = 0, create = 0, close = 0, read = 0, write = 0, write_batches = 0, sync = 0, mkdir = 0,
           rename = 0, remove = 0, stat = 0, list = 0, syncdir = 0;
  uint64_t writeback = 0;  // sync_file_range write-backs of the journal (visibility rounds); not syncs
};

// The segments one node (this one or a peer) has on the export now, as this node knows them.
//   This node: exact, from its evictor's accounting (with or without --capacity): every segment file of
//     this node on the export (open = the active one, sealed = sealed or of an earlier generation,
//     unlinking = dropped and waiting for their unlink after the peers' grace period) and the sum of
//     their sizes (sealed: file size; active: end of its last record); estimated = false.
//   A peer: the segments this index knows (dropped ones excluded), sized by a stat of each file (a sealed
//     one once, then kept; an open one at every call; StoreImpl::PeerSegmentSizes: at most 256 stats
//     per call); a segment not sized yet (over that bound, or its stat failed) counts its live bytes (or
//     its last stat if larger), a lower bound, and sets estimated. The global watermark sizes peers'
//     segments with the same code and cache.
// live_bytes / files: sizes and number of the committed files whose content is in them (the payload).
// dead_bytes = segment_bytes - live_bytes (0 if negative): bytes on the export no file uses (record
// metadata and 4 KiB padding, deleted and rewritten files, provisional spills, unlinking segments).
struct NodeSegmentStats {
  std::string node;
  uint64_t open_segments = 0, sealed_segments = 0, unlinking_segments = 0;
  uint64_t segment_bytes = 0, live_bytes = 0, dead_bytes = 0;
  uint64_t files = 0;
  bool estimated = true;

  uint64_t segments() const { return open_segments + sealed_segments + unlinking_segments; }
  // What a file costs on the export beyond its own bytes: (segment_bytes - live_bytes) / files, 0
  // without files. Includes the space of deleted files not reclaimed yet.
  double OverheadPerFile() const {
    return files ? static_cast<double>(dead_bytes) / static_cast<double>(files) : 0.0;
  }
};

// The sum over nodes (node = "", estimated if any part is).
NodeSegmentStats SumSegmentStats(const std::vector<NodeSegmentStats>& nodes);

// Tailing of one peer's journal (docs/design.md §5). lag_seconds: for the newest entry applied, the time from
// the peer stamping it (the physical part of its HLC stamp) to this node applying it: the peer's group
// commit + NFS visibility + this node's poll interval (clock skew between the nodes adds to it; never
// negative). last_poll_age_seconds: time since the last completed poll of the peer (-1 = never).
struct PeerJournalStats {
  std::string node;
  uint64_t polls = 0, entries_applied = 0;
  double lag_seconds = 0, last_poll_age_seconds = -1;
};

// A snapshot of the Store's counters (GetStats): monotonic counters since the mount unless the comment
// says "gauge". The one source of these figures for `kvfs stats` and the Prometheus exposition.
struct StoreStats {
  uint64_t files = 0, directories = 0, live_bytes = 0;  // gauges (index)
  uint64_t segments_created = 0;  // segment files this node created since the mount
  uint64_t records_written = 0, journal_entries = 0, group_commits = 0;
  uint64_t visibility_rounds = 0;  // group-commit rounds that wrote the journal without fdatasync
  // Gauge: journal entries not durable yet (queued for the next group commit, or kept after a failed
  // one and being retried). Normally 0 between rounds; while the backing store is full or failing it is
  // what a crash would lose, and Sync (fsync) and Close fail until it is 0 again.
  uint64_t unjournaled_entries = 0;
  uint64_t journal_retries = 0;  // group commits that failed (their entries kept and retried)
  // Entries never journaled because the record they publish (PUT, MOVE) was in a segment whose fdatasync
  // failed after the record was written: the bytes may be lost (issue #6, docs/semantics.md §Durability).
  // Their Sync (fsync) failed, and Close fails, so the next mount rebuilds the index without them.
  uint64_t lost_entries = 0;
  // Per value read: a read of a value from its offset 0 (a load, or a re-read from the start) counts one
  // hit (answered from the LRU, or promoted from probation) or one miss (it waited for the export),
  // whatever the number of FUSE requests it takes. cache_bytes: gauge, bytes in the LRU.
  uint64_t cache_hits = 0, cache_misses = 0, cache_bytes = 0;
  // Per byte: the bytes the read path loaded from the export (values and 4 MiB pieces loaded whole,
  // block ranges of values too large to cache), against the FUSE bytes read (fuse/kvfs_fs.h).
  uint64_t read_loaded_bytes = 0;
  // Reads answered from probation (engine/read_admission.h): the rest of a read whose first request
  // loaded the value (neither a hit nor a miss); probation_bytes: gauge, values held there now.
  uint64_t probation_reads = 0, probation_bytes = 0;
  // The data path's buffer pool (blockstore/buffer_pool.h): blocks handed out again vs freshly mapped,
  // bytes mapped fresh, and (gauge) free bytes it holds for reuse (at most its limit, 256 MiB).
  uint64_t pool_reused = 0, pool_fresh = 0, pool_fresh_bytes = 0, pool_free_bytes = 0;
  uint64_t pool_reused_untouched = 0;  // reused blocks never accessed from user mode
  // Loaded bytes verified (and metadata parsed) from kernel copies, not in place (blockstore/kernel_copy.h),
  // and the loads that fell back to in place because the kernel refused.
  uint64_t verify_kernel_copy_bytes = 0, verify_kernel_copy_fallbacks = 0;
  uint64_t kernel_write_bytes = 0, kernel_write_fallbacks = 0;  // S3 GET bodies (kernel_copy.h WriteThroughKernel)
  // How values loaded into never-touched memory are verified (--verify-copy: the mode asked, the path
  // used, and the mount-time probe's figures when the mode is auto; blockstore/kernel_copy.h).
  VerifyCopyChoice verify_copy;
  uint64_t checksum_failures = 0;
  uint64_t atime_updates = 0;  // reads' atime notes journaled (Store::NoteRead), since the mount
  uint64_t backing_metadata_ops = 0, backing_syncs = 0, backing_bytes_written = 0, backing_bytes_read = 0;
  uint64_t backing_files_created = 0;
  uint64_t peers = 0, peer_entries_applied = 0, peer_polls = 0;
  uint64_t peer_tail_reads = 0;  // peer polls answered by a kept journal descriptor (no listing, no open)
  // Extent delta PUTs (docs/format.md "Extent deltas"): this node's PUTs of extent files journaled as a
  // delta / as a whole map, with their encoded content bytes; peers' deltas this index could not resolve
  // (applied as UNLINK).
  uint64_t delta_puts = 0, delta_put_bytes = 0, map_puts = 0, map_put_bytes = 0, peer_unresolved_deltas = 0;
  uint64_t peer_orphans_applied = 0, peer_orphans_pending = 0;  // PeerTailerStats orphans_*
  uint64_t peer_dir_rename_redirects = 0;  // PeerTailerStats dir_rename_redirects
  // link(2) claims on the export (engine/link_arbiter.h): won, lost to another link, abandoned claims
  // passed over, claims removed, crash leftovers swept, claims waiting for their removal (gauge), claims
  // that could not be created (the link failed).
  uint64_t link_claims_won = 0, link_claims_lost = 0, link_claims_abandoned = 0, link_claims_removed = 0,
           link_claims_swept = 0, link_claims_pending = 0, link_claims_errors = 0;
  // Capacity and eviction.
  uint64_t node_segment_bytes = 0;        // this node's segment files (excluding those awaiting unlink)
  uint64_t segments_dropped = 0, segment_bytes_dropped = 0, segments_unlinked = 0;
  // Of segments_dropped: those a capacity / watermark round dropped with no live record (dead ones go
  // before live ones, whatever their age); dead-segment reclamation's own drops are not counted here.
  uint64_t dead_segments_evicted = 0;
  // The segment cleaner: segments it emptied (their live records re-appended, MOVE) and dropped, the
  // records and bytes it appended for that, and the segment bytes those drops freed.
  uint64_t cleaned_segments = 0, cleaned_records = 0, cleaned_bytes_copied = 0, cleaned_bytes_freed = 0;
  uint64_t records_reinserted = 0, bytes_reinserted = 0;
  uint64_t writer_waits = 0, nospace_events = 0;
  // On a full export: active segments sealed early because most of their bytes were dead (so they can
  // be reclaimed), and segments retired unsealed because their seal could not be written (still
  // reclaimable; the next mount's recovery seals them). See "Capacity and eviction".
  uint64_t segments_sealed_early = 0, segments_retired = 0;
  // Gauges: segments holding a pinned record (written, not committed yet; or held by an open handle /
  // copy-on-write base, PinRecord), never dropped; this node's bytes in them; records held by handles.
  uint64_t segments_pinned = 0, segment_bytes_pinned = 0, records_held_open = 0;
  // Across nodes (docs/semantics.md §6.10 "Across nodes", engine/peer_holds.cc). As a holder: gauges
  // peer_segments_held (peers' segments with a record held by a handle here) and peer_hold_markers (this
  // node's markers on the export: those plus the ones lingering 5 s after their last hold); counters
  // peer_hold_markers_created and peer_hold_checks_failed (a marker that could not be created or an
  // owner's journal that could not be read: that hold has no guarantee). As an owner: gauges
  // segments_held_by_peers / segment_bytes_held_by_peers (dropped segments whose unlink waits for a live
  // peer's hold; their bytes are in no other figure of this node but the unlinking segments); counter
  // unlinks_deferred_by_peers (dropped segments found held by a peer at least once).
  uint64_t peer_segments_held = 0, peer_hold_markers = 0, peer_hold_markers_created = 0,
           peer_hold_checks_failed = 0;
  uint64_t segments_held_by_peers = 0, segment_bytes_held_by_peers = 0, unlinks_deferred_by_peers = 0;
  BackingOpCounts backing_ops;
  // An S3 backing (StoreOptions::tier; docs/s3.md): HTTP requests sent by type (S3OpName: put, get, head,
  // delete, list, multipart parts...; retries included: what a site is billed for), segments uploaded,
  // sealed segments waiting for their upload, journal publications, failed uploads/publications, bytes.
  bool s3 = false;
  std::vector<std::pair<std::string, uint64_t>> s3_requests;
  uint64_t s3_requests_total = 0, s3_segments_uploaded = 0, s3_segments_pending = 0, s3_journal_publications = 0;
  uint64_t s3_failures = 0, s3_bytes_sent = 0, s3_bytes_received = 0;
  // Parallel ranged GETs (S3Counters): reads split into parts, their parts, the parts fetched on helper
  // threads; GETs in flight now and the most at once.
  uint64_t s3_split_reads = 0, s3_read_parts = 0, s3_read_parts_parallel = 0, s3_gets_in_flight = 0,
           s3_gets_in_flight_peak = 0;
  // Credentials re-read from the shared credentials file (changed, or after a 403 naming the key or
  // token), and requests retried once with the re-read ones (S3Counters).
  uint64_t s3_credential_reloads = 0, s3_credential_retries = 0;
  // Segments on the export now: this node first (exact), then peers by id (their files' sizes); never empty.
  // The totals over all nodes: SumSegmentStats(nodes).
  std::vector<NodeSegmentStats> nodes;
  std::vector<PeerJournalStats> peer_journals;  // by peer id
  // Configuration (constant while mounted): --capacity (0 = unlimited) and this node's eviction
  // thresholds from it (evict above evict_high down to evict_low; 0 without a capacity;
  // engine/eviction_policy.h), the global watermarks (0 = none; low = 7/8 of high unless given), the
  // segment size and the value cache's size.
  uint64_t capacity_bytes = 0, evict_high_bytes = 0, evict_low_bytes = 0;
  uint64_t global_high_watermark_bytes = 0, global_low_watermark_bytes = 0;
  uint64_t segment_size = 0, cache_capacity_bytes = 0;
  // Gauges: the backing directory's file system (statvfs, one backing stat per GetStats): its size and
  // the bytes available to kvfs (f_bavail). backing_fs_ok = false (both 0) when statvfs failed.
  uint64_t backing_fs_size = 0, backing_fs_avail = 0;
  bool backing_fs_ok = false;
  // Mount-time recovery (Open): own journal entries applied to a clean index (written while the node
  // was down, e.g. by kvfs-fsck --repair), CUT and SEAL entries journaled for earlier generations'
  // segments. A second Open after a clean Close finds 0, 0, 0.
  uint64_t recovery_entries = 0, recovery_cuts = 0, recovery_seals = 0;
  // Own journal entries dropped at this mount because they (or an earlier entry) pointed at a record that
  // a power cut lost after a visibility round (engine/recovery.h PlanLostRecordCuts).
  uint64_t recovery_lost_entries = 0;
};

class Store {
 public:
  // Opens (creating if needed) the store: validates the backing dir and its FORMAT, takes over the node
  // directory by the rule of docs/design.md §2 (Busy if a live owner holds it and !force_takeover), opens or
  // rebuilds the index (rebuild when it is missing or was not closed cleanly; a clean one applies the
  // node's own journal entries written after its clean close, e.g. by kvfs-fsck --repair), recovers the
  // node's segments of earlier generations (engine/recovery.h: torn tails CUT, unsealed segments and lost
  // SEALs journaled as SEAL; nothing is truncated), journals those CUT/SEAL entries first in the new
  // generation's journal, starts the group commit and heartbeat threads.
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& opts);
  virtual ~Store() = default;

  // Flushes everything (a final group commit), writes the clean-shutdown mark, stops threads. If journal
  // entries cannot be made durable (full or failing backing store), frees RESERVE, retries for ~2 s, then
  // returns the error (logged with the number of entries): those entries' changes are lost at the next
  // mount, and the index is not marked clean.
  virtual Status Close() = 0;

  // ---- namespace ----
  virtual Result<Node> Lookup(uint64_t parent, std::string_view name) = 0;
  virtual Result<Node> GetInode(uint64_t ino) = 0;
  virtual Result<Node> Mkdir(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid,
                             uint32_t gid) = 0;
  virtual Status Rmdir(uint64_t parent, std::string_view name) = 0;  // ENOTEMPTY, ENOTDIR, ENOENT
  // Creates a staged regular file (mode includes S_IFREG). If the name exists: Exists when exclusive,
  // else returns the existing node (a lost race with another creator) — EISDIR if it is a directory.
  virtual Result<Node> CreateFile(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid,
                                  uint32_t gid, bool exclusive) = 0;
  virtual Result<Node> Symlink(uint64_t parent, std::string_view name, std::string_view target,
                               uint32_t uid, uint32_t gid) = 0;
  // A FIFO, socket, character or block device (mode's type S_IFIFO / S_IFSOCK / S_IFCHR / S_IFBLK, else
  // InvalidArgument): an index-only node with mode and rdev (devices), committed and journaled at once
  // (a SYMLINK entry of version 4). Exists if the name is taken. The kernel serves a FIFO's opens.
  virtual Result<Node> Mknod(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev,
                             uint32_t uid, uint32_t gid) = 0;
  virtual Result<std::string> ReadLink(uint64_t ino) = 0;
  // Removes a non-directory name (EISDIR for directories). *ino_out = the inode it named. Journals an
  // UNLINK if the entry was committed; a staged entry is just dropped.
  virtual Status Unlink(uint64_t parent, std::string_view name, uint64_t* ino_out) = 0;
  // Removes the name of the *staged* regular file `ino` (the FUSE layer: its version failed to publish,
  // docs/semantics.md "a failed close publishes nothing"), as Unlink would, but only while that name
  // still names `ino`: never another file that took the name meanwhile. InvalidArgument if ino is
  // committed (its content stays), NotFound if it has no name any more.
  virtual Status DropStaged(uint64_t ino) = 0;
  // flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE (alone; both names must exist, NotFound otherwise;
  // a directory that would end up in its own subtree is InvalidArgument; they swap atomically: two
  // non-directories journaled as bindings of their new content at one stamp, an exchange with a
  // directory as one EXCHANGE entry and its record; *replaced_ino = 0).
  // Replaces an existing non-directory destination atomically; *replaced_ino = the inode the
  // destination named before (0 if none).
  // Renaming a directory to another parent may answer EXDEV.
  virtual Status Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                        std::string_view new_name, unsigned flags, uint64_t* replaced_ino) = 0;
  // link(2) of a regular file (docs/semantics.md §2 "link"): binds new_parent/new_name to a NEW committed
  // inode that shares the content of `ino`: the same record (Location), no data copy. *loc / *attr: the
  // content to link (the FUSE layer passes a staged version's flushed record); null: the committed
  // content of `ino` (InvalidArgument if it has none). The new name gets ino's xattrs. Exists if the
  // name exists (checked and bound under the namespace lock: exact on this node); journals one PUT of the
  // new path. The record stays live (segment live bytes/records, segfiles) while any name refers to it.
  // ext (with loc): the staged version's extent map when its flushed content is one (*loc then empty).
  virtual Result<Node> Link(uint64_t ino, const Location* loc, const Attr* attr, uint64_t new_parent,
                            std::string_view new_name, const ExtentMapRef* ext = nullptr) = 0;
  // Updates the masked attributes (kSetSize only changes the recorded size of a *staged* file or is used
  // together with CommitFile; data is the FUSE layer's business). Journals SETATTR for committed inodes.
  virtual Result<Attr> SetAttr(uint64_t ino, const Attr& attr, uint32_t mask) = 0;
  // atime with relatime rules (docs/semantics.md §4 "Times"): the FUSE layer calls this when a handle
  // that can read opens committed content; `attr` is what it opened. If attr's atime is not after its
  // mtime or its ctime, or is a day old, `ino` is noted as read now. A note costs no index access: it is
  // kept in memory (PendingAtime answers it at once) and journaled as a SETATTR of atime alone (ctime
  // unchanged) in one batch about a second later (the evictor thread) and at Close, so peers and the
  // next mount see it; a crash loses the notes of that last second. No-op with StoreOptions::atime off.
  // Returns true if this call noted a new atime (the caller then drops the kernel's cached attributes).
  // Thread-safe.
  // committed: attr is committed content (the note is stamped now); false: a closed version whose commit
  // is pending (stamped when journaled, after that commit).
  virtual bool NoteRead(uint64_t ino, const Attr& attr, bool committed = true) = 0;
  // The atime noted by NoteRead for ino and not journaled yet, else 0. Thread-safe; lock-free when no
  // note is pending.
  virtual int64_t PendingAtime(uint64_t ino) = 0;
  // Moves the committed regular file `ino` to a fresh inode number (docs/design.md §3: new content gets a new
  // number; the FUSE layer calls it before a writer starts a new version of a committed file, so the
  // kernel's page cache and i_size of the old number stay those of the old content). Same name, content,
  // attributes and xattrs; `ino` is gone afterwards (NotFound). Nothing is journaled (inode numbers are
  // local: a rebuilt index numbers files afresh). Returns the node under its new number. NotFound if ino
  // is gone, InvalidArgument if it is not a committed regular file.
  // to != 0: move it back to `to`, a number Renumber handed out earlier that no inode uses now (the FUSE
  // layer undoes a renumber whose ESTALE retry came back to the old number: /proc/self/fd reopens);
  // InvalidArgument if an inode has that number.
  virtual Result<Node> Renumber(uint64_t ino, uint64_t to = 0) = 0;
  // Lists a directory in cookie order, starting after `after` (0 = from the start). fn returns false to
  // stop. Entries created or removed during a listing never make others skip or repeat.
  virtual Status ReadDir(uint64_t dir, uint64_t after, const std::function<bool(const DirEntry&)>& fn) = 0;

  // User xattrs (journaled). flags: XATTR_CREATE / XATTR_REPLACE.
  virtual Status SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags) = 0;
  virtual Result<std::string> GetXattr(uint64_t ino, std::string_view name) = 0;  // NotFound -> ENODATA
  virtual Result<std::vector<std::string>> ListXattr(uint64_t ino) = 0;
  virtual Status RemoveXattr(uint64_t ino, std::string_view name) = 0;

  // ---- data ----
  // Appends the value (concatenation of parts) as one record, tagged with the inode's current path.
  // Readable through Read() as soon as this returns; durable after the next group commit.
  // NoSpace when the backing store is full.
  virtual Result<Location> WriteRecord(uint64_t ino, const std::vector<std::string_view>& parts) = 0;
  // Like WriteRecord, for staged bytes spilled to the backing store before their file is committed
  // (docs/design.md §4: staging over its memory budget). The record carries the *provisional* flag
  // (docs/format.md); it is in no journal entry unless a later CommitFile names its Location, so a
  // spill of a file that is never committed is an orphan: dead bytes for recovery and kvfs-fsck (an
  // informational finding, never an error), reclaimed when its segment is dropped. Readable through
  // Read() at once. NoSpace when the backing store (or the capacity) is full.
  virtual Result<Location> WriteProvisionalRecord(uint64_t ino, const std::vector<std::string_view>& parts) = 0;
  // Fills out[0, len) with value bytes [off, off + len) of a record being written by WriteRecordStreamed:
  // called on the caller's thread, in value order, len <= 4 MiB. A non-OK Status aborts the write.
  using RecordSource = std::function<Status(uint64_t off, size_t len, char* out)>;
  // Like WriteRecord, for a value of `length` bytes that the caller produces piece by piece (4 MiB at a
  // time) instead of holding it whole: the FUSE layer's commit of a partly spilled file copies its
  // spilled ranges segment-to-segment through one 4 MiB buffer. Same record (format, flags 0) and
  // errors as WriteRecord, plus the source's own error (then no record is written). Other appends wait
  // while it runs (as behind one large WriteRecord).
  virtual Result<Location> WriteRecordStreamed(uint64_t ino, uint64_t length, const RecordSource& source) = 0;
  // Every record written (WriteRecord, WriteRecordStreamed, WriteProvisionalRecord) pins its segment
  // until released, here or by a successful CommitFile of that Location: eviction (capacity, global
  // watermark) and dead-segment reclamation never drop a segment that holds a pinned record, so the
  // spills of a file still being written, and the record of a file closed but not committed yet
  // (deferred commit), stay readable until the commit (before, eviction inside that window left a
  // 0-byte file after a successful close). The FUSE layer releases the pins of a staged version's
  // records when the version is gone. Pinned segments count against the capacity: when only pinned
  // segments are left to evict, writers get NoSpace (as for a full store). Idempotent: releasing a
  // record that is not pinned (or twice) does nothing. Thread-safe.
  virtual void ReleaseRecordPin(const Location& loc) = 0;
  // Pins the segment of an existing record (committed or not) for a reader that needs it after its
  // name is gone: an open read-only handle (its record) or a copy-on-write version (its base). Like a
  // write pin, the segment is then never dropped here (dead space, capacity, watermark) until every
  // PinRecord of that record is matched by an UnpinRecord (counted: several handles of one record).
  // NotFound if the segment was already dropped (the caller answers ENOENT: a cache miss). A peer's
  // segment is held on the export: its first hold creates this node's marker of it and reads the
  // owner's journal (a drop found there is NotFound), and the owner does not unlink it while this node
  // is live and marks it (engine/peer_holds.cc; the marker may be missing after a backing failure, then
  // reads may fail NotFound, never wrong bytes). Separate from the write pins: ReleaseRecordPin never
  // releases a PinRecord. Empty loc: OK, nothing pinned. Thread-safe.
  virtual Status PinRecord(const Location& loc) = 0;
  virtual void UnpinRecord(const Location& loc) = 0;
  // Makes `loc` (may be empty for a 0-byte file) the committed content of ino with attrs `attr`
  // (size, mode, times): journals PUT under the inode's current path. A staged inode becomes committed;
  // on success the record's pin (ReleaseRecordPin) is released.
  // ext (docs/design.md §13): the version's extent map when it is not one record (loc empty,
  // attr.size = its size): journals a version-3 PUT; written = the record the version's FLUSH appended
  // for it (its write pin is released here, as loc's is for a one-record file). Every other record of
  // the map must be held by the caller until this returns.
  virtual Status CommitFile(uint64_t ino, const Location& loc, const Attr& attr, const ExtentMapRef& ext,
                            const Location& written) = 0;
  Status CommitFile(uint64_t ino, const Location& loc, const Attr& attr) { return CommitFile(ino, loc, attr, {}, {}); }
  // Reads [offset, offset+len) of the value at loc into buf, verified against the block checksums
  // (Corruption -> EIO, never wrong bytes). Served from the LRU when cached. *got < len only at the end
  // of the value. The backing calls of a read (this and the two below) end within
  // StoreOptions::read_deadline_ms of its start (TimedOut -> EIO).
  virtual Status Read(const Location& loc, uint64_t offset, size_t len, char* buf, size_t* got) = 0;
  // Same bytes, same verification and errors, without copying them into a caller's buffer: out->data
  // points into the cached value (or a buffer the read filled) and out->owner keeps it alive. For the
  // FUSE read reply, which copies the bytes to the kernel itself. out->len < len only at the end of
  // the value.
  virtual Status ReadPinned(const Location& loc, uint64_t offset, size_t len, PinnedBytes* out) = 0;
  // The value offset where the read path's cache unit holding `offset` ends (a large value is loaded
  // and cached in pieces, store_data.cc): a read that runs past it is best asked as two ReadPinned
  // calls split there, each answered from its own cached unit. One request across it is read from the
  // export on its own (its blocks only), beside the two units other requests load: those bytes twice.
  // loc.length when the value is one unit or its units are not cached (caches under 64 MiB).
  virtual uint64_t ReadUnitEnd(const Location& loc, uint64_t offset) const = 0;
  // Same bytes, verification and errors as Read, but a value not in the LRU is not loaded into it: only
  // the 64 KiB blocks covering the range are read. For copies that read each byte once (a streamed
  // commit reading its spills back).
  virtual Status ReadUncached(const Location& loc, uint64_t offset, size_t len, char* buf, size_t* got) = 0;
  // Durability barrier: returns once everything enqueued before the call is durable on the backing store.
  // Fails (NoSpace, IOError, TimedOut) while any entry enqueued before it is still owed to the journal
  // (the entries stay queued and are retried in the background).
  virtual Status Sync() = 0;

  // ---- peers (docs/design.md §5) ----
  // Called from the peer-tailing thread, with no Store lock held, after entries of other nodes were
  // applied to the index. Set it before the mount serves requests; it must not call back into
  // mutating Store methods synchronously for long (queue the work).
  virtual void SetChangeListener(std::function<void(const PeerChanges&)> fn) = 0;
  // Tails every peer's journal once, now, and applies what is new (tests; `kvfs` tools).
  virtual Status RefreshPeers() = 0;
  // Asks the peer thread for an early poll (a lookup miss may mean a peer just wrote the name).
  // Rate-limited to one early poll per peer_poll_ms / 4; never blocks.
  virtual void RequestPeerRefresh() = 0;

  // ---- checkpoints (engine/checkpoint.h) ----
  // Now: journal cut (new file), snapshot-<gen>-<n> of this node's live entries, snapshots beyond the
  // newest two deleted, then journal retirement as far as live peers allow. Blocks namespace writers for
  // one group commit; the snapshot itself is written from a read view (seconds per million entries).
  virtual Status Checkpoint() = 0;
  // Rewrites <node dir>/peers with how far this node has read every peer (tests; normally periodic).
  virtual Status PublishPeerProgress() = 0;

  // ---- info ----
  // statfs figures (docs/design.md §6): live_bytes = global live logical bytes (this index: local and applied
  // peers' files); backing_total = the backing file system's size (min(capacity, it) with a capacity;
  // f_blocks when nothing can be written, so statfs never shows 0 blocks); backing_avail = what may still be
  // written: blocks - live_bytes where blocks = max(live, min(capacity, live + backing free)), capacity
  // = global_high_watermark_bytes if set, else capacity_bytes, else unlimited. So f_blocks = live +
  // backing_avail and f_bfree = backing_avail give docs/design.md §6's statfs.
  virtual Status StatFs(uint64_t* live_bytes, uint64_t* files, uint64_t* backing_total,
                        uint64_t* backing_avail) = 0;
  virtual StoreStats GetStats() = 0;
};

}  // namespace kvfs
