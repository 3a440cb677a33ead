// Journal on-disk format: file names, physical blocks/fragments, the file header, and the entry codec.
// Prose spec: docs/format.md "## Journal". Semantics of the entries: docs/design.md §2 "Journal".
//
// BUMP kJournalFormatVersion (physical layout, file header) OR kJournalEntryVersion (entry encoding) IF
// YOU CHANGE ANYTHING BELOW, and keep docs/format.md in sync.
//
// ---- File ----------------------------------------------------------------------------------------------
// <backing>/.kvfs/v1/nodes/<node>/journal-<gen>-<n>   gen, n: 20-digit zero-padded decimal (uint64).
// One writer per file (the node's current generation); files are written with pwrite at explicit
// offsets, never truncated, never rewritten (a torn tail is cut logically by a CUT entry elsewhere).
//
// ---- Physical layout (LevelDB's log format, doc/log_format.md) ------------------------------------------
// The file is a sequence of 32 KiB blocks (kJournalBlockSize); the last one may be short. A record (the
// file header or one encoded entry) is split into fragments that never cross a block boundary:
//
//   +----------+--------+------+----------------+
//   | checksum | length | type | payload        |     header: 7 bytes (kJournalFragmentHeaderSize)
//   | u32 LE   | u16 LE | u8   | `length` bytes |
//   +----------+--------+------+----------------+
//
//   checksum = low 32 bits of XXH3_64bits(bytes [4, 7 + length)), i.e. over length, type and payload.
//   type     = 1 FULL | 2 FIRST | 3 MIDDLE | 4 LAST (a record = FULL, or FIRST MIDDLE* LAST)
//              5 FILE_HEADER (only as the first fragment of the file, at offset 0; a whole record)
//              0 is never written: an all-zero header is a "zero region" (a hole / unwritten tail).
//   When fewer than 7 bytes are left in a block, they are zero padding (the trailer) and the next
//   fragment starts at the next block. A record may be empty in principle; entries never are.
//
// A reader that meets an invalid fragment (bad checksum, type, or a length crossing the block) skips to
// the next block boundary and resynchronises there; what is lost is stated in journal.h (JournalReader).
//
// ---- File header record (payload of the FILE_HEADER fragment at offset 0) -------------------------------
//   offset size
//   0      8    magic "KVFSJRNL"
//   8      4    format version (u32 LE) = kJournalFormatVersion
//   12     4    block size (u32 LE) = 32768
//   16     8    generation (u64 LE)       must equal <gen> of the file name
//   24     8    file number (u64 LE)      must equal <n> of the file name
//   32     2    node id length L (u16 LE)
//   34     L    node id bytes
//
// ---- Entry record (payload of FULL, or concatenated FIRST..LAST) ----------------------------------------
//   u8 entry version (= kJournalEntryVersion), u8 op (JournalOp), varint64 stamp (HLC, index/hlc.h),
//   then the op's fields in the order of the table below. Encodings:
//     varint   LEB128 (7 bits per byte, low first, LevelDB's PutVarint64), at most 10 bytes
//     svarint  zigzag then varint (signed times)
//     str      varint length + bytes
//     bool     one byte, 0 or 1
//     loc      (Location, blockstore/types.h) u8 present (0: empty Location, nothing follows;
//              1: str node, varint generation, varint seq, varint record_offset, varint value_offset,
//              varint length)
//     seg      (SegmentId) str node, varint generation, varint seq
//     attrs    varint mode, varint uid, varint gid, varint size, svarint atime_ns, svarint mtime_ns,
//              svarint ctime_ns
//     file     (FileRef) u8 kind (1 journal, 2 segment), str node, varint generation, varint number
//   op          fields
//   1 PUT       str path, loc location, attrs, str inline_value; entry version 2 adds
//               varint n, n x (str xattr name, str value): the file's complete xattr set, names in
//               byte order (version 1: no set recorded; applying it leaves the xattrs as they are);
//               entry version 3 adds bool has_extents, then (if 1) ext extents: the file is that extent
//               map (location empty, inline_value empty, attrs.size = the map's size; docs/design.md
//               §13). Written only for a file whose map is not a single record: every other PUT keeps
//               version 1/2 and its bytes, and an older reader stops at a version-3 entry (NotSupported).
//               Entry version 5 turns has_extents into u8 content (0 none, 1 ext, 2 dext): 2 = an extent
//               DELTA (dext, below) against the writer's own binding of the path; the reader rebuilds the
//               map from the binding it holds (docs/format.md "Extent deltas"; index_apply.cc PutDelta)
//   2 RENAME    str path (from), str path2 (to), loc location
//   3 UNLINK    str path
//   4 MKDIR     str path, attrs
//   5 RMDIR     str path
//   6 SETATTR   str path, attrs, varint mask (SetAttrMask bits of index/inode.h)
//   7 XATTR     str path, str xattr_name, str xattr_value, bool xattr_remove
//   8 SEAL      seg segment
//   9 DROP      seg segment
//   10 MOVE     str path, loc old_location, loc location (new)
//   11 CUT      file cut_file, varint cut_offset
//   12 SYMLINK  str path, str path2 (target), attrs; an index-only node: a symlink (entry version 1,
//               attrs.mode's type S_IFLNK) or, at entry version 4, a FIFO / socket / character or block
//               device (attrs.mode's type S_IFIFO / S_IFSOCK / S_IFCHR / S_IFBLK, target empty) followed
//               by varint rdev (st_rdev). Version 1-3 with a special type, or version 4 with S_IFLNK or
//               a target, is Corruption: an older reader (entry version <= 3) stops at the version-4
//               entry (NotSupported) instead of binding the name as a symlink or regular file.
//   13 EXCHANGE str path, str path2: renameat2(RENAME_EXCHANGE), the two names swap what they name in
//               one step; written at entry version 4 only (so an older reader stops with NotSupported
//               instead of skipping an unknown op); a version 1-3 EXCHANGE is Corruption
// Decoding rejects (Corruption) an unknown op, a truncated field, a varint longer than 10 bytes or
// overflowing its type, a bool other than 0/1, and trailing bytes; an entry version > the one this build
// knows is NotSupported (a newer peer), not Corruption.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <optional>
#include <utility>
#include <vector>

#include "blockstore/extent_map.h"
#include "blockstore/node_dir.h"
#include "blockstore/status.h"
#include "blockstore/types.h"
#include "index/inode.h"  // IsSpecialFileMode

namespace kvfs {

// ---- physical constants ----
inline constexpr size_t kJournalBlockSize = 32768;
inline constexpr size_t kJournalFragmentHeaderSize = 7;
inline constexpr size_t kJournalMaxFragmentPayload = kJournalBlockSize - kJournalFragmentHeaderSize;
inline constexpr uint32_t kJournalFormatVersion = 1;
// Entry version written (JournalEntryVersion): 5 for a PUT whose content is an extent delta
// (JournalEntry::delta), 4 for EXCHANGE and for a SYMLINK entry of a special file (FIFO, socket,
// device: adds rdev), 3 for a PUT of an extent file (JournalEntry::extents set), 2 for any other PUT
// that carries the file's xattrs, 1 for every other op (same layout in 1 to 5). Readers accept
// 1..kJournalEntryVersion.
inline constexpr uint8_t kJournalEntryVersion = 5;
inline constexpr char kJournalMagic[8] = {'K', 'V', 'F', 'S', 'J', 'R', 'N', 'L'};
inline constexpr uint64_t kJournalDefaultMaxFileSize = 64ull << 20;

enum class FragmentType : uint8_t {
  kZero = 0,  // never written
  kFull = 1,
  kFirst = 2,
  kMiddle = 3,
  kLast = 4,
  kFileHeader = 5,
};
inline constexpr uint8_t kMaxFragmentType = 5;

// Checksum of a fragment: low 32 bits of XXH3-64 over [length u16 LE][type u8][payload].
uint32_t JournalFragmentChecksum(uint8_t type, const char* payload, size_t length);

// ---- file names ----
// JournalFileName(gen, n) / ParseJournalFileName(name, &gen, &n) ("journal-<gen20>-<n20>", strict) come
// from blockstore/node_dir.h (the one owner of the backing layout), included here.

// ---- file header ----
struct JournalFileHeader {
  uint32_t format_version = kJournalFormatVersion;
  uint32_t block_size = kJournalBlockSize;
  uint64_t generation = 0;
  uint64_t file_number = 0;
  std::string node;
  bool operator==(const JournalFileHeader&) const = default;
};
std::string EncodeJournalFileHeader(const JournalFileHeader& h);
// Corruption on a bad magic/size; NotSupported on an unknown format version or block size.
Status DecodeJournalFileHeader(std::string_view in, JournalFileHeader* h);

// ---- entries ----
enum class JournalOp : uint8_t {
  kPut = 1,
  kRename = 2,
  kUnlink = 3,
  kMkdir = 4,
  kRmdir = 5,
  kSetattr = 6,
  kXattr = 7,
  kSeal = 8,
  kDrop = 9,
  kMove = 10,
  kCut = 11,
  kSymlink = 12,
  kExchange = 13,
};
inline constexpr uint8_t kMaxJournalOp = 13;
const char* JournalOpName(JournalOp op);

// Attributes carried by PUT / MKDIR / SETATTR / SYMLINK (no inode number: inodes are node-local).
struct EntryAttrs {
  uint32_t mode = 0;  // S_IFREG / S_IFDIR / S_IFLNK | permission bits
  uint32_t uid = 0, gid = 0;
  uint64_t size = 0;  // bytes
  int64_t atime_ns = 0, mtime_ns = 0, ctime_ns = 0;  // ns since the epoch
  bool operator==(const EntryAttrs&) const = default;
};

// A file a CUT refers to: a journal file journal-<generation>-<number> or a segment
// seg/<generation>-<number>.kseg, of `node`.
struct FileRef {
  enum class Kind : uint8_t { kJournal = 1, kSegment = 2 };
  Kind kind = Kind::kJournal;
  std::string node;
  uint64_t generation = 0;
  uint64_t number = 0;
  bool operator==(const FileRef&) const = default;
};

// One namespace operation. A flat struct: each op uses the fields listed in the table above; the others
// stay default (the codec neither writes nor reads them, so a round trip of a well-formed entry is exact).
// `stamp` (HLC) is encoded for every op: PUT/RENAME/UNLINK/MKDIR/RMDIR/SETATTR/XATTR/SYMLINK/EXCHANGE use it for
// last-writer-wins by (stamp, node); MOVE carries the ORIGINAL PUT's stamp; SEAL/DROP/CUT carry the local
// clock when written (informational).
struct JournalEntry {
  JournalOp op = JournalOp::kPut;
  uint64_t stamp = 0;
  std::string path;   // every op except SEAL/DROP/CUT; RENAME: the source
  std::string path2;  // RENAME: destination; SYMLINK: target; EXCHANGE: the other name
  Location location;  // PUT, RENAME (the renamed file's location, for checks), MOVE (the new location)
  Location old_location;  // MOVE: applies only while the path still has this location
  EntryAttrs attrs;       // PUT, MKDIR, SETATTR, SYMLINK
  uint32_t mask = 0;      // SETATTR: SetAttrMask bits (index/inode.h)
  std::string inline_value;  // PUT: the whole value of a small file when `location` is empty (else "")
  // PUT: the file's complete set of extended attributes (name, value), names sorted, when the entry
  // records one (entry version 2, what this build writes); nullopt for a version-1 PUT.
  std::optional<std::vector<std::pair<std::string, std::string>>> xattrs;
  // PUT: the file's extent map when it is not a single record (entry version 3; `location` is then
  // empty and attrs.size = extents->size()); null for every other PUT. A version-3 PUT always carries
  // an xattr set (an empty one if `xattrs` is nullopt).
  ExtentMapRef extents;
  // PUT (entry version 5): the file's new extent map as a delta against the map of the binding of
  // `path` by the same node with stamp delta->base_stamp (location, inline_value and extents empty,
  // attrs.size = delta->size). Replay and peers resolve it into `extents` (index_apply.cc); one they
  // cannot resolve exactly (map checksum) binds nothing: docs/format.md "Extent deltas".
  std::optional<ExtentDelta> delta;
  std::string xattr_name, xattr_value;  // XATTR
  bool xattr_remove = false;            // XATTR: true = removexattr (xattr_value empty)
  SegmentId segment;                    // SEAL, DROP
  FileRef cut_file;                     // CUT
  uint64_t cut_offset = 0;              // CUT: bytes of cut_file that remain valid
  uint64_t rdev = 0;                    // SYMLINK of a special file (version 4): st_rdev (devices; else 0)

  bool operator==(const JournalEntry&) const = default;

  // Constructors of well-formed entries.
  static JournalEntry Put(std::string path, Location loc, EntryAttrs attrs, uint64_t stamp,
                          std::string inline_value = {});
  static JournalEntry Rename(std::string from, std::string to, Location loc, uint64_t stamp);
  static JournalEntry Unlink(std::string path, uint64_t stamp);
  static JournalEntry Mkdir(std::string path, EntryAttrs attrs, uint64_t stamp);
  static JournalEntry Rmdir(std::string path, uint64_t stamp);
  static JournalEntry Setattr(std::string path, EntryAttrs attrs, uint32_t mask, uint64_t stamp);
  static JournalEntry Xattr(std::string path, std::string name, std::string value, bool remove,
                            uint64_t stamp);
  static JournalEntry Seal(SegmentId seg, uint64_t stamp);
  static JournalEntry Drop(SegmentId seg, uint64_t stamp);
  static JournalEntry Move(std::string path, Location old_loc, Location new_loc, uint64_t original_stamp);
  static JournalEntry Cut(FileRef file, uint64_t offset, uint64_t stamp);
  static JournalEntry Symlink(std::string path, std::string target, EntryAttrs attrs, uint64_t stamp);
  // An index-only special file: attrs.mode's type is S_IFIFO, S_IFSOCK, S_IFCHR or S_IFBLK (op SYMLINK,
  // entry version 4, no target).
  static JournalEntry Special(std::string path, EntryAttrs attrs, uint64_t rdev, uint64_t stamp);
  // renameat2(RENAME_EXCHANGE) of two existing names (entry version 4).
  static JournalEntry Exchange(std::string a, std::string b, uint64_t stamp);

  // Every record this entry references: location (PUT, RENAME, MOVE), old_location (MOVE) and the
  // records of `extents` or of `delta` (PUT), no duplicates.
  std::vector<Location> Records() const;
  // The records of the content a PUT (or MOVE) publishes: its location, its map's records, or the
  // records its delta adds (a delta's base records were published by an earlier entry).
  std::vector<Location> ContentRecords() const;
};

// The entry version EncodeJournalEntry writes for e: the lowest that carries all of its fields (5: a
// PUT with an extent delta; 4: an EXCHANGE or a special file; 3: a PUT with an extent map; 2: a PUT with an xattr set; else 1), so
// older readers keep reading everything else (see kJournalEntryVersion).
uint8_t JournalEntryVersion(const JournalEntry& e);

// Appends the encoding of e to *out.
void EncodeJournalEntry(const JournalEntry& e, std::string* out);
// Decodes exactly one entry that fills `in`. Corruption on malformed input, NotSupported on a newer
// entry version. *e is unspecified on error.
Status DecodeJournalEntry(std::string_view in, JournalEntry* e);

// ---- extent maps ----
// ext (blockstore/extent_map.h; docs/format.md "Extent maps"): varint size, varint r, r x loc (the
// distinct records, each present, in first-use order), varint n, n x (varint gap, varint length,
// varint record index < r, varint value_offset), extents in file order; gap = the extent's file offset
// minus the previous extent's end (for the first: its file offset). The field of PUT entry version 3
// and of the index's inode record version 2 (docs/design.md §13).
void EncodeExtentMap(const ExtentMap& m, std::string* out);
// XXH3-64 (seed 0) of the ext encoding of m: the map checksum of an extent delta.
uint64_t ExtentMapChecksum(const ExtentMap& m);
// dext (docs/format.md "Extent deltas"): varint base_stamp, fixed64 map_checksum, varint size, varint r,
// r x loc (each present, first-use order), varint n, n x (varint gap, varint length, varint ref (0: a
// hole; i + 1: record i), varint value_offset if ref > 0). Decode checks ExtentDelta::Validate.
void EncodeExtentDelta(const ExtentDelta& d, std::string* out);
Status DecodeExtentDelta(std::string_view in, ExtentDelta* d);
// Decodes exactly one map that fills `in` and checks it (ExtentMap::Validate: sorted, no overlap,
// within the size and each record's value). Corruption on anything else; *m unchanged on error.
Status DecodeExtentMap(std::string_view in, ExtentMap* m);

}  // namespace kvfs
