// SegmentWriter: appends records (blockstore/format.h) to the segments of one node directory,
// <backing>/.kvfs/v1/nodes/<node>/seg/, as files named SegmentFileName(generation, seq) (node_dir.h)
// ("00000000000000000003-00000000000000000017.kseg"). Single writer per directory and generation (docs/design.md §2): two
// SegmentWriters must never share (seg_dir, generation).
//
// Group commit (LevelDB db_impl.cc writer queue): every Append prepares its record (header, path,
// checksum table; for O_DIRECT also the aligned copy of the value) in the calling thread, then joins a
// queue. The thread at the front is the leader: it takes the queued records (up to max_batch_bytes),
// places them at consecutive offsets and writes them with ONE BackingFile::Write batch, then wakes the
// followers. A value is copied at most once: not at all without O_DIRECT (the batch points into the
// caller's parts; the kernel copies them into the page cache), nor with O_DIRECT when the parts are 4 KiB
// aligned in memory and all but the last a multiple of 4 KiB long (staged 1 MiB chunks: the kernel
// reads them straight from the caller's memory, only a partial last block is copied, padded); other
// parts are copied into one aligned staging buffer with O_DIRECT (required by the kernel).
//
// Segments: the first Append creates segment first_seq (O_CREAT|O_EXCL; a header block is written).
// When a record does not fit (segment_size would be exceeded counting the footer and trailer), the
// leader seals the segment (footer + trailer written, then fdatasync), reports it (TakeSealed and
// on_seal), and creates the next seq. A record larger than segment_size goes alone into a segment of
// its own (that segment is sealed before the next record). Rotate(seg) seals the active segment early
// (the Store's way to make a mostly dead active segment reclaimable on a full export).
//
// A seal whose footer cannot be written (NoSpace, IOError: a full export) retires the segment unsealed:
// it is never appended again, its bytes past the last record are truncated away, and it is reported
// through on_retire (not TakeSealed: it gets no SEAL entry; the next mount's recovery seals it
// logically), so the Store can still reclaim it once nothing in it is live.
//
// Durability: Append returns once the record is written (readable through the Env by this process,
// not durable). Sync() makes every record whose Append returned before the call durable (fdatasync of
// every segment file written since the last Sync, sealed ones included, and of the directory when a
// segment file was created). A failed fdatasync breaks the writer for good (the kernel may have
// dropped the dirty pages; "fsyncgate"): every later Append/Sync returns that error and the caller opens
// a new writer with a new seq/generation. Every record of the failed segment (of every segment of
// the writer) written since that segment's last successful fdatasync must then be treated as lost:
// MayBeLost tells (docs/design.md §7: no journal entry may point at it). A failed write (ENOSPC, EIO) only fails the Appends of that
// batch; the space they would have used is reused by the next batch, so no torn record is left in the
// middle of a segment, and what part of it landed is truncated away (BackingFile::Truncate; nothing
// refers to it), at once and again before the seal if that failed, so a sealed file ends with its trailer.
//
// Close(): Sync(), then seals the active segment if SegmentWriterOptions::seal_on_close (default: the
// active segment stays unsealed; recovery scans it; a segment whose every record write failed is sealed
// with 0 records), then closes the files. The destructor closes files
// without syncing.
//
// Thread safety: Append, Sync, TakeSealed and GetStats may be called concurrently. Close must not race
// with Append.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/format.h"
#include "blockstore/status.h"
#include "blockstore/types.h"

namespace kvfs {

struct SealedSegment {
  SegmentId id;
  uint64_t file_size = 0;     // bytes, header to trailer
  uint64_t record_count = 0;
  uint64_t data_bytes = 0;    // sum of value lengths
};

struct SegmentWriterOptions {
  uint64_t segment_size = 256ull << 20;  // bytes; a multiple of 4096, >= 64 KiB
  // O_DIRECT for segment files (falls back to buffered where the file system refuses it at open).
  bool direct_io = false;
  uint64_t first_seq = 1;                // seq of the first segment this writer creates
  uint64_t max_batch_bytes = 64ull << 20;  // group commit cap per leader round (at least one record)
  bool seal_on_close = false;
  // Called by the leader thread (no lock held) right after a segment is sealed and synced.
  std::function<void(const SealedSegment&)> on_seal;
  // Called by the leader thread (no lock held) when a seal failed to be written and the segment was
  // retired unsealed (see above); file_size = its bytes on the export as far as known.
  std::function<void(const SealedSegment&)> on_retire;
};

struct SegmentWriterStats {
  uint64_t records = 0, value_bytes = 0, batches = 0, segments_created = 0, segments_sealed = 0, syncs = 0;
  uint64_t segments_retired = 0;  // seals that could not be written: retired unsealed (on_retire)
};

class SegmentWriter {
 public:
  // Creates seg_dir if needed (mkdir -p). No segment file is created until the first Append.
  // InvalidArgument on a bad node id (empty / > 256 bytes) or segment_size.
  static Result<std::unique_ptr<SegmentWriter>> Open(Env* env, std::string seg_dir, std::string node,
                                                     uint64_t generation, SegmentWriterOptions opts);
  ~SegmentWriter();
  SegmentWriter(const SegmentWriter&) = delete;
  SegmentWriter& operator=(const SegmentWriter&) = delete;

  // Appends one record: value = concatenation of parts (pointers must stay valid until return), tagged
  // with the full virtual path (1..65535 bytes) and the HLC stamp. Returns where the value lives.
  // NoSpace / IOError when the batch write failed; the writer stays usable (unless broken by Sync).
  Result<Location> Append(std::string_view path, uint64_t stamp, const std::vector<std::string_view>& parts,
                          uint16_t flags = 0);

  // Fills out[0, len) with value bytes [off, off + len) of a streamed record. Called on the appender's
  // own thread, in value order, with off a multiple of kStreamPiece and len <= kStreamPiece.
  using ValueSource = std::function<Status(uint64_t off, size_t len, char* out)>;
  static constexpr size_t kStreamPiece = 4u << 20;  // bytes; a multiple of the 64 KiB checksum block
  // Appends one record of value_len bytes produced by `source` piece by piece, so the caller never
  // holds the whole value in memory (the writer holds one kStreamPiece buffer). Same record format and
  // Location as Append. The record is written alone: appends queued behind it wait until it is done
  // (as they wait for one large batch). Its value is written first and its metadata (header, path,
  // checksum table, computed while streaming) last, so a crash in the middle leaves no valid record
  // (a torn tail for recovery), never a record with wrong bytes. If source fails (or a write does),
  // the record is not written, its space is reused by the next append (as after a failed batch), and
  // the error is returned.
  Result<Location> AppendStreamed(std::string_view path, uint64_t stamp, uint64_t value_len,
                                  const ValueSource& source, uint16_t flags = 0);

  // Durability barrier (see above). Concurrent Syncs are serialized.
  Status Sync();
  // Visibility without durability: every record whose Append returned before the call is written back
  // to the backing (BackingFile::WriteBack of each segment written since the last Sync; nothing to do
  // with O_DIRECT, whose writes are at the backing when Append returns), not made durable. The broken
  // writer's error after a failed fdatasync.
  Status WriteBack();

  // Seals segment `seg` now if it is still the active one and holds at least one record, so that the
  // next record goes to a new segment; waits its turn in the append queue like an Append. OK when it was
  // sealed, when its seal could not be written and it was retired unsealed (on_retire), or when there was
  // nothing to do (not active any more, no record); the broken writer's error after a failed fdatasync.
  // *rotated (optional): set when the segment was sealed or retired by this call.
  Status Rotate(const SegmentId& seg, bool* rotated = nullptr);

  // Sync + optional seal + close. Idempotent. Appends after Close fail with InvalidArgument.
  Status Close();

  // Segments sealed since the last call (oldest first); the Store journals SEAL{segment} for each.
  std::vector<SealedSegment> TakeSealed();

  // True when the record at loc, in one of the segments this writer created, is not known to be
  // durable: it lies at or past the end covered by its segment's last successful fdatasync (Sync or a
  // seal), or the segment's directory entry was never made durable (SyncDir). False for records known
  // durable and for locations outside this writer's segments. Meant for a writer whose Sync failed
  // (then the answer no longer changes for records already written): the caller must not journal an
  // entry that publishes such a record. Thread-safe.
  bool MayBeLost(const Location& loc) const;

  // Path of segment `seq` of this writer's generation.
  std::string SegmentPath(uint64_t seq) const;
  const std::string& seg_dir() const { return seg_dir_; }
  // The segment the next record goes to if it fits (it may not exist yet).
  SegmentId ActiveSegment() const;
  SegmentWriterStats GetStats() const;

 private:
  struct Pending;
  struct AlignedFree {
    void operator()(char* p) const;
  };
  using AlignedBuf = std::unique_ptr<char, AlignedFree>;
  static AlignedBuf AllocAligned(size_t n);

  SegmentWriter(Env* env, std::string seg_dir, std::string node, uint64_t generation, SegmentWriterOptions opts);
  Status Prepare(Pending* p);
  Result<Location> Enqueue(Pending* p);
  void WriteBatch(const std::vector<Pending*>& batch);  // leader only
  void WriteStreamed(Pending* w);                       // leader only; a batch of its own
  void RotateActive(Pending* w);                        // leader only; a batch of its own
  void CloseActive();                                   // leader only: seal (or retire) and forget it
  Status PlaceRecord(uint64_t span);                    // leader only: seal / open so span fits
  Status OpenNextSegment();                             // leader only
  Status SealActive();                                  // leader only; a failed write retires it
  void RetireActive();                                  // leader only: on_retire, after a failed seal
  Status TrimActive();                                  // leader only: truncate to next_offset_
  void MarkDirty(uint64_t end);                         // leader only; takes mu_; end: of the bytes written

  Env* const env_;
  const std::string seg_dir_;
  const std::string node_;
  const uint64_t generation_;
  const SegmentWriterOptions opts_;

  // Leader-owned state (only the thread at the front of queue_ touches it; Close when idle).
  std::shared_ptr<BackingFile> active_;
  uint64_t active_seq_ = 0;
  uint64_t active_nonce_ = 0;
  uint64_t next_offset_ = 0;
  uint64_t active_extent_ = 0;  // end of the furthest write attempted in the active segment (>= next_offset_)
  uint64_t active_data_bytes_ = 0;
  std::vector<format::FooterEntry> footer_;
  uint64_t next_seq_;
  std::atomic<bool> direct_refused_{false};  // O_DIRECT asked for but refused by the file system: buffered files

  mutable std::mutex mu_;
  std::deque<Pending*> queue_;                                  // guarded by mu_
  struct Dirty {
    std::shared_ptr<BackingFile> file;
    uint64_t end = 0;  // end of the bytes written to it so far (what a successful fdatasync makes durable)
  };
  std::map<uint64_t, Dirty> dirty_;                             // seq -> file; guarded by mu_
  bool dir_dirty_ = false;                                      // guarded by mu_
  // For MayBeLost: seq -> end of the bytes a successful fdatasync covered; the segments created by this
  // writer; those whose directory entry no SyncDir has covered yet. Guarded by mu_.
  std::map<uint64_t, uint64_t> durable_end_;
  std::map<uint64_t, bool> created_;  // seq -> name durable
  Status broken_;                                               // guarded by mu_
  bool closed_ = false;                                         // guarded by mu_
  std::vector<SealedSegment> sealed_;                           // guarded by mu_
  SegmentWriterStats stats_;                                    // guarded by mu_
  uint64_t active_seq_for_readers_;                             // guarded by mu_
  std::mutex sync_mu_;                                          // serializes Sync
};

}  // namespace kvfs
