// ExtentMap: a file version as a list of extents over records, with holes (docs/design.md §13 "Files as
// extents"; the encoding is docs/format.md "Extent maps").
//
// A file of `size` bytes is a sorted list of non-overlapping extents; extent e says that file bytes
// [e.file_offset, e.file_offset + e.length) are value bytes [e.value_offset, e.value_offset + e.length)
// of the record at e.record. Every byte below `size` that no extent covers is a *hole* and reads as
// zeros; a hole costs nothing on the export. A file written once is one extent {0, size, record, 0}
// covering the whole value of one record: that is exactly today's one-Location file
// (FromLocation / SingleRecord convert both ways), so single-record files keep today's encoding and
// read path.
//
// Building a new version from an old one: copy the map and Overlay() the ranges a writer changed with
// the record their bytes were appended as (only the dirty ranges are written, never the whole file);
// Resize() truncates or extends (extending adds a hole). The records an old version referenced and the
// new one does not any more (or only in part) become dead space: LiveBytesByRecord() is what a
// version keeps alive, per record, for capacity accounting.
//
// Fragmentation bound, two rules, applied by the writer at FLUSH (CompactionRanges: the live extents
// it picks are copied into the FLUSH's record, next to the dirty pages):
//  * per record (NeedsCompaction's cold records): a record of which less than 1/kMinLiveFraction of the
//    bytes is still live has its live extents copied. Copying L live bytes frees at least
//    (kMinLiveFraction - 1)·L dead bytes, each of which was replaced by a byte written through the
//    mount, so this adds at most 1/(kMinLiveFraction - 1) = 0.2 bytes to the export per byte written,
//    and one file never keeps more than kMinLiveFraction times its data bytes alive in records it
//    references only in part.
//  * extent count: joining neighbouring extents into one (copying them, zero-filling the gap) has no
//    such bound: small scattered rewrites make two extents each, and joining them back costs about
//    the extents between them (file size / extents), so joins are paid from a *copy budget*: a credit
//    per file of 1/(kMinLiveFraction - 1) of the dirty bytes its FLUSHes appended, less every byte its
//    compaction copies (cold ones included) copied (fuse Staging::compaction_credit). Over
//    kJoinExtents a FLUSH joins the cheapest boundaries down to kJoinExtents / 2 while its copies stay
//    within the credit; below that count, or with no credit, the map just grows. Over kMaxExtents, the
//    hard cap, it joins the cheapest down to kMaxExtents - kMaxExtents / 8 whatever that costs.
// So below the cap all compaction copies together add at most 0.2 bytes per dirty byte (the 1.2x
// target), plus what cold copies take beyond the credit (at most another 0.2, in practice rare; a dirty
// byte is a byte of a 4 KiB page written through the mount). Only a file rewritten at more than
// kMaxExtents / 2 scattered pages faster than its credit pays for joins reaches the cap (a data extent is
// at least a page: never a file of 64 MiB or less). The cap is what a map may cost (design.md §13
// "Why 16,384"): ~15 bytes per extent encoded, written whole in a whole-map journal PUT (first PUT of a
// path after a mount, then after at most 256 deltas) and in the local index's inode record at every
// commit; 96 bytes per extent in memory; O(extents) CPU per commit.
//
// Plain value type; not thread-safe (copy it). Pure functions, no I/O except through ReadExtents's
// fetch callback.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "blockstore/status.h"
#include "blockstore/types.h"

namespace kvfs {

struct Extent {
  uint64_t file_offset = 0;   // first file byte this extent holds
  uint64_t length = 0;        // bytes, > 0
  Location record;            // the record (its whole value: record.length bytes), never empty
  uint64_t value_offset = 0;  // offset in the record's value of the extent's first byte
  uint64_t file_end() const { return file_offset + length; }
  bool operator==(const Extent&) const = default;
};

class ExtentMap {
 public:
  static constexpr size_t kJoinExtents = 1024;     // more: joins within the copy budget, to 512
  static constexpr size_t kMaxExtents = 16384;     // more: joins whatever they cost, to 14,336
  static constexpr uint64_t kMinLiveFraction = 6;  // a record under 1/6 live: copy its live extents

  ExtentMap() = default;
  // size bytes, no extent: a sparse file of holes.
  explicit ExtentMap(uint64_t size) : size_(size) {}
  // The first `size` bytes of the record at loc (size <= loc.length); an empty loc or size 0: no
  // extent (size 0 with an empty loc is a 0-byte file).
  static ExtentMap FromLocation(const Location& loc, uint64_t size);

  uint64_t size() const { return size_; }
  const std::vector<Extent>& extents() const { return extents_; }
  bool operator==(const ExtentMap&) const = default;

  // True when the whole file is the whole value of one record (today's one-Location file, or a 0-byte
  // file: *loc empty). Such a version is encoded as a plain Location.
  bool SingleRecord(Location* loc) const;
  // Bytes held by extents (size() minus holes).
  uint64_t DataBytes() const;

  // File bytes [file_offset, file_offset + length) now come from value bytes [value_offset, ...) of
  // `record`; what they replaced is cut out of (or removed from) the extents it covered. Grows size()
  // to the range's end. length 0 does nothing. InvalidArgument: an empty record, or a value range
  // past record.length.
  Status Overlay(uint64_t file_offset, uint64_t length, const Location& record, uint64_t value_offset);
  // Sets the size: shrinking cuts extents at n, growing adds a hole [size, n).
  void Resize(uint64_t n);
  // Makes [off, off + len) a hole (clipped to the size).
  void Punch(uint64_t off, uint64_t len);

  // One piece of a range: `length` bytes at file offset `file_offset`, from `extent` at
  // value_offset, or a hole (extent == nullptr).
  struct Piece {
    uint64_t file_offset = 0;
    uint64_t length = 0;
    const Extent* extent = nullptr;  // null: zeros
    uint64_t value_offset = 0;       // in extent->record's value
  };
  // The pieces of [off, off + len) clipped to the size, in file order, covering it without a gap.
  std::vector<Piece> Pieces(uint64_t off, uint64_t len) const;

  // SEEK_DATA / SEEK_HOLE: the first offset >= off that is data (resp. a hole; size() counts as a
  // hole); size() if none (callers answer ENXIO for off >= size()).
  uint64_t NextData(uint64_t off) const;
  uint64_t NextHole(uint64_t off) const;

  // Live bytes per record this version references (what capacity accounting counts), keyed by
  // the record's Location.
  std::map<std::pair<SegmentId, uint64_t>, uint64_t> LiveBytesByRecord() const;
  // Every record referenced (a version's handle must pin/hold each), in first-use order, no
  // duplicates.
  std::vector<Location> Records() const;
  // What every FLUSH's map meets (the hard part of the bound above): true when the map has more than
  // kMaxExtents extents or references a record of which less than 1/kMinLiveFraction is live.
  // *cold = those records (copy their live extents into the next record).
  bool NeedsCompaction(std::vector<Location>* cold = nullptr) const;

  // A file byte range [offset, offset + length).
  struct Range {
    uint64_t offset = 0;
    uint64_t length = 0;
    bool operator==(const Range&) const = default;
  };
  // The compaction copies (design.md §13): given that the extents of `fresh` are what the next FLUSH
  // appends (its dirty pages), the file ranges that FLUSH should write as its ONE record: the extents
  // of `fresh`, every extent of a cold record (under 1/kMinLiveFraction live, `fresh` excepted), and
  // runs of neighbouring extents joined into one by copying them (and zero-filling the gap between
  // them, if any), cheapest join first (the bytes it copies that are not copied anyway, including the
  // rest of a record the join leaves under 1/kMinLiveFraction live): over kJoinExtents, down to
  // kJoinExtents / 2 while the bytes copied (cold extents included) stay within `budget`; over
  // kMaxExtents, down to kMaxExtents - kMaxExtents / 8 whatever it costs. Small cold extents go first,
  // large holes stay holes (a gap costs its length), extents already copied make their neighbours'
  // joins cheaper. The result meets NeedsCompaction() == false. Sorted, disjoint, adjacent ranges
  // merged; the total is at most DataBytes() plus the gaps filled. Empty when nothing is to be copied:
  // the FLUSH appends `fresh`'s extents only.
  std::vector<Range> CompactionRanges(const Location& fresh, uint64_t budget = UINT64_MAX) const;
  // This map with the bytes of `ranges` (sorted, disjoint, within the size) read from `record`, laid
  // out back to back in range order from value offset 0 (what a FLUSH of CompactionRanges() wrote).
  ExtentMap WithRangesFrom(const std::vector<Range>& ranges, const Location& record) const;

  // Checks the invariants (sorted, non-overlapping, length > 0, within size, value range within the
  // record, record not empty). Decoders call it: Corruption with `what` on a violation.
  Status Validate() const;

  // Appends e behind every extent (e.file_offset >= the last extent's end; grows size() to its end),
  // merged with the last one when it continues it in the same record (builders that walk a file in
  // order). length 0 does nothing.
  void PushBack(const Extent& e);
  // Appends an extent at the end without merging (decoders; call Validate after).
  void AppendUnchecked(const Extent& e) { extents_.push_back(e); }
  void SetSizeUnchecked(uint64_t n) { size_ = n; }

  // MOVE (reinsertion re-appended a record whole, same value, elsewhere): every extent whose record is
  // old_record now references new_record (value offsets unchanged). Returns how many extents changed;
  // InvalidArgument (nothing changed) if the two records' value lengths differ.
  Result<size_t> ReplaceRecord(const Location& old_record, const Location& new_record);

 private:
  void Normalize();  // merges adjacent extents that continue each other in the same record
  uint64_t size_ = 0;
  std::vector<Extent> extents_;
};

// A delta of one extent map against another (docs/format.md "Extent deltas", design.md §13 "Journaling
// a rewrite"): the new size, and the file ranges whose mapping changed, each either a hole (record
// empty) or value bytes [value_offset, value_offset + length) of a record. Applying it to the map it was
// made from (ApplyExtentDelta) gives exactly the new map (the writer checks it before journaling one);
// base_stamp and map_checksum are the journal's: the (stamp) of the writer's own binding of the path the
// delta applies to, and a checksum of the map it must produce (index/journal_format.h
// ExtentMapChecksum), so a reader that holds another base never binds wrong bytes.
struct ExtentDelta {
  struct Piece {
    uint64_t file_offset = 0;
    uint64_t length = 0;        // > 0
    Location record;            // empty: a hole
    uint64_t value_offset = 0;  // in record's value (0 for a hole)
    uint64_t file_end() const { return file_offset + length; }
    bool operator==(const Piece&) const = default;
  };
  uint64_t base_stamp = 0;
  uint64_t map_checksum = 0;
  uint64_t size = 0;
  std::vector<Piece> pieces;  // sorted, disjoint, within size
  bool operator==(const ExtentDelta&) const = default;
  // The records the pieces reference, in first-use order, no duplicates.
  std::vector<Location> Records() const;
  // Sorted, disjoint, length > 0, within size, value ranges within their records: InvalidArgument.
  Status Validate() const;
};
// The delta that turns `base` into `next` (base_stamp and map_checksum left 0): next's size, and next's
// mapping (extent or hole) of every range where it differs from base resized to next's size; adjacent
// changed ranges that continue each other are one piece. O(extents of both).
ExtentDelta DiffExtentMaps(const ExtentMap& base, const ExtentMap& next);
// base resized to d.size, then each piece overlaid (a record) or punched (a hole), in order.
// InvalidArgument on a piece outside the size or past its record; *out unchanged then.
Status ApplyExtentDelta(const ExtentMap& base, const ExtentDelta& d, ExtentMap* out);

// A committed file version's extent map, shared and immutable: null = the file is a single record (or
// 0 bytes, or inline), and its one Location says it all (today's encoding everywhere). Index records,
// journal entries and handles carry it, so copies cost one reference count; == compares the maps, not
// the pointers. Thread-safe to share (the map is never modified once wrapped).
class ExtentMapRef {
 public:
  ExtentMapRef() = default;
  ExtentMapRef(std::shared_ptr<const ExtentMap> p) : p_(std::move(p)) {}  // NOLINT: implicit on purpose
  explicit operator bool() const { return p_ != nullptr; }
  const ExtentMap& operator*() const { return *p_; }
  const ExtentMap* operator->() const { return p_.get(); }
  const ExtentMap* get() const { return p_.get(); }
  const std::shared_ptr<const ExtentMap>& shared() const { return p_; }
  bool operator==(const ExtentMapRef& o) const { return p_ == o.p_ || (p_ && o.p_ && *p_ == *o.p_); }

 private:
  std::shared_ptr<const ExtentMap> p_;
};

// The stored form of a version's content: a map that is a single record (or a 0-byte file) becomes
// *loc and a null ref (today's encoding); any other map an empty *loc and the shared map.
ExtentMapRef NormalizeExtents(ExtentMap m, Location* loc);
// Every record a content (Location or map) references, in first-use order, no duplicates; none for an
// empty Location without a map.
std::vector<Location> ContentRecords(const Location& loc, const ExtentMapRef& ext);

// Reads file bytes [off, off + len) of map into out (clipped to the size; *got = bytes filled):
// extents through fetch(record, value_offset, n, out), holes as zeros. The first fetch error is
// returned (out is then partly filled, *got = 0).
using ExtentFetch = std::function<Status(const Location& record, uint64_t value_offset, size_t n, char* out)>;
Status ReadExtents(const ExtentMap& map, uint64_t off, size_t len, char* out, const ExtentFetch& fetch, size_t* got);

}  // namespace kvfs
