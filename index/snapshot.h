// Journal checkpoints (docs/design.md §2 "Journal": snapshot-<gen>-<n>): a compact, sealed image of one node's
// live namespace entries, so a joining node (or one whose index was deleted) reads the newest snapshot
// plus the journal files after it instead of all history, and old journal files can be retired.
// Format: docs/format.md "## Snapshots" (byte tables repeated below). Written and rotated by the Store
// (engine/checkpoint.h); read by the replay (index/replay.h), the peer tailer and kvfs-fsck.
//
// What a snapshot of node N holds (Store::Checkpoint builds it from its index at one consistent moment):
//   * PUT / SYMLINK for every committed file or symlink whose name was last bound by N (dentry stamp,
//     node = N), with the current attributes and the dentry's stamp (HLC);
//   * UNLINK{path, stamp} for every tombstone of N (deleted or renamed-away names), so a late or replayed
//     PUT of another node with an older stamp cannot resurrect the name;
//   * MKDIR for every directory (directories carry no stamps; MKDIR creates only if missing);
//   * XATTR for the user xattrs of those files and directories: a name set or removed after the
//     binding (it has a per-name stamp) as that set or remove at its stamp, the others at the file's
//     dentry stamp (0 for directories); then, if the attributes changed after the binding (the inode's
//     attribute stamp is not the dentry's; any journaled change of a directory), SETATTR{path, whole
//     attribute set, kSetAttrsWhole, that stamp}, so that an older change in another node's journal
//     cannot win over it in a rebuild;
//   * for every committed file bound by ANOTHER node whose attributes N changed last (the inode's
//     attribute stamp is N's): SETATTR{path, whole attribute set, kSetAttrsWhole, that stamp}; and for
//     every xattr name of such a file whose last set or remove is N's: XATTR{path, name, value or
//     remove, its stamp}. Without them a change N made to a peer's file would be lost once N's journal
//     is retired; a replay applies one that finds no name yet again at its end (index/replay.h);
//   * RENAME{from, to, location, stamp} first, for every directory rename the index holds a record of
//     (IndexDb::ListDirRenames; never pruned, like tombstones): N's own (no location) and the peers'
//     that N applied (location.segment.node = that peer, every other field 0). A reader stores it as a
//     record and moves nothing (the snapshot already holds the result); every rebuild redirects the
//     entries older than it that name `from` or a path under it (index/replay.h ReplayNodes), except
//     N's own entries by the records N's snapshot holds (N's names already reflect them); the record of
//     a directory RENAME_EXCHANGE is such a RENAME with location.segment.seq = 1 (version 5);
//   * SEAL / DROP for every segment of N the index knows as sealed / dropped;
//   * CUT{segment file, offset} for every segment of N, not dropped, that a CUT entry cut (the lowest
//     offset; IndexDb SegmentInfo::cut): the journal file holding the CUT is retired behind the snapshot,
//     the segment file is not, and replay, mount-time recovery and kvfs-fsck must still stop at the cut.
// Entries are the journal's (index/journal_format.h), so applying a snapshot goes through the same
// last-writer-wins code as the journal (index/replay.h). A snapshot "covers" every journal file of N
// that sorts before journal-<gen>-<n> (its name), i.e. every entry up to position (gen, n, 0).
//
// Layout (little-endian; XXH3-64 seed 0):
//   header  | chunk 0 | chunk 1 | ... | trailer (48 bytes)
//
//   header:  0 magic "KVFSSNAP" (8) | 8 version u32 (1) | 12 entry version u32 (highest of its entries, >= 2) |
//            16 generation u64 | 24 file number u64 | 32 max stamp u64 | 40 created ns u64 |
//            48 node length u16 | 50 reserved (6) | 56 header checksum u64 = XXH3 of [0,56) + node |
//            64 node bytes
//   chunk:   0 payload length u32 (1..kSnapshotMaxChunk) | 4 entry count u32 | 8 payload checksum u64 |
//            16 payload = entry count x (varint length, encoded journal entry)
//   trailer: 0 magic "KVFSSEND" | 8 chunk count u64 | 16 entry count u64 | 24 trailer offset u64 |
//            32 digest u64 = XXH3 of the concatenated chunk checksums | 40 trailer checksum u64 = XXH3 of [0,40)
//
// Atomicity: the writer fills snapshot-<gen>-<n>.tmp, fdatasyncs it, renames it to its final name and
// syncs the directory, so a snapshot file either is complete or does not exist (a crash leaves a .tmp
// that the next checkpoint replaces and kvfs-fsck reports as a stale temp file). Readers still verify
// every checksum: a damaged snapshot is Corruption, and ReadSnapshot delivers NO entry of it (the
// whole file is verified before the first entry is handed out), so the caller falls back to an older
// snapshot or to the journals (replay.h) — never wrong entries.
//
// Thread safety: SnapshotWriter is used by one thread; the functions are reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/status.h"
#include "index/journal.h"
#include "index/journal_format.h"

namespace kvfs {

inline constexpr char kSnapshotMagic[8] = {'K', 'V', 'F', 'S', 'S', 'N', 'A', 'P'};
inline constexpr char kSnapshotTrailerMagic[8] = {'K', 'V', 'F', 'S', 'S', 'E', 'N', 'D'};
// 2: CUT{segment file} entries (version 1, which has none, is still read). 3: SETATTR entries (changes
// to peers' files). A writer writes 3 only into a snapshot that holds a SETATTR, else 2, so a kvfs that
// reads at most version 2 still uses the snapshots of a node that changed no peer's attributes.
// 4: RENAME entries, the records of the node's directory renames (index_db.h DirRenameRecord: from,
// to, no location, the rename's stamp), which a reader stores and never applies as a move. Written only
// into a snapshot that holds one (else 3 or 2, as above), so an older kvfs refuses such a snapshot
// (NotSupported) instead of applying a record as a rename.
// 5: a RENAME record may be that of a directory RENAME_EXCHANGE (index_db.h DirRenameRecord::exchange:
// both ways at once), marked by location.segment.seq = kSnapshotExchangeRecord (every other location
// field 0; the node is always named, the snapshot's own too: an empty location is encoded as absent). Written only into a snapshot that holds one (else 4, 3 or 2, as above), so a
// kvfs that reads at most version 4 refuses it (NotSupported) instead of taking it for a rename.
inline constexpr uint32_t kSnapshotVersion = 5;
inline constexpr uint64_t kSnapshotExchangeRecord = 1;
// A snapshot's RENAME entry that is the record of a directory exchange (version 5).
inline bool IsExchangeRecord(const JournalEntry& e) {
  return e.op == JournalOp::kRename && e.location.segment.seq == kSnapshotExchangeRecord;
}
inline constexpr size_t kSnapshotHeaderFixed = 64;
inline constexpr size_t kSnapshotChunkHeader = 16;
inline constexpr size_t kSnapshotTrailerSize = 48;
inline constexpr size_t kSnapshotTargetChunk = 256 << 10;  // writer closes a chunk past this
inline constexpr size_t kSnapshotMaxChunk = 16 << 20;      // reader refuses bigger chunks

struct SnapshotFile {
  uint64_t generation = 0;
  uint64_t number = 0;  // covers journal files sorting before journal-<generation>-<number>
  std::string path;
};

// One GetChildren of a node directory: its journal files and its snapshots, both sorted by
// (generation, number). NotFound if the directory does not exist.
struct NodeFiles {
  std::vector<JournalFile> journals;
  std::vector<SnapshotFile> snapshots;
};
Status ListNodeFiles(Env* env, const std::string& node_dir, NodeFiles* out);

struct SnapshotInfo {
  std::string node;
  uint64_t generation = 0, number = 0;  // from the header (= the file name's)
  uint64_t max_stamp = 0;
  int64_t created_ns = 0;
  uint64_t entries = 0, chunks = 0, file_size = 0;
};

// Writes one snapshot. Use: Create, Add... , Finish (or destroy without Finish = abandon, .tmp removed).
class SnapshotWriter {
 public:
  // Creates <dir>/snapshot-<generation>-<number>.tmp (replacing a leftover .tmp of the same name).
  static Result<std::unique_ptr<SnapshotWriter>> Create(Env* env, const std::string& dir, const std::string& node,
                                                        uint64_t generation, uint64_t number);
  ~SnapshotWriter();
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // Buffers one entry (writes a chunk when the buffer passes kSnapshotTargetChunk). The entry's stamp
  // raises the header's max stamp... which is written at Finish (the header is rewritten then).
  Status Add(const JournalEntry& e);
  // Writes the last chunk, the trailer and the final header; fdatasync; rename to the final name;
  // sync the directory. After OK the snapshot exists under its final name.
  Status Finish();

  uint64_t entries() const { return entries_; }
  uint64_t bytes() const { return offset_; }
  const std::string& final_path() const { return final_; }

 private:
  SnapshotWriter() = default;
  Status WriteChunk();
  std::string HeaderBytes() const;
  Env* env_ = nullptr;
  std::string dir_, node_, tmp_, final_;
  uint64_t generation_ = 0, number_ = 0, max_stamp_ = 0;
  // The header's entry version: the highest of the entries added, at least 2 (a snapshot without an
  // extent file or special file keeps the header older readers accept).
  uint32_t entry_version_ = 2;
  uint32_t version_ = 2;  // 3 once a SETATTR is added, 4 once a RENAME record is (kSnapshotVersion)
  int64_t created_ns_ = 0;
  std::unique_ptr<BackingFile> file_;
  uint64_t offset_ = 0;  // next write offset
  std::string chunk_;
  uint32_t chunk_entries_ = 0;
  std::string digest_input_;  // concatenated chunk checksums
  uint64_t chunks_ = 0, entries_ = 0;
  bool finished_ = false;
};

// Reads a snapshot. Verifies the whole file first (header, every chunk checksum, trailer, counts,
// digest, expect_node if non-empty, the name's generation/number = the header's); on any mismatch
// returns Corruption naming the file and what is wrong, and fn is never called. Then decodes the entries
// and calls fn for each, in file order (fn's error stops the read and is returned). A newer snapshot or
// entry version is NotSupported. IOError from the Env. info (optional) is filled from the header/trailer.
Status ReadSnapshot(Env* env, const std::string& path, const std::string& expect_node,
                    const std::function<Status(const JournalEntry&)>& fn, SnapshotInfo* info = nullptr);

// Verification pass only (kvfs-fsck).
Status VerifySnapshot(Env* env, const std::string& path, const std::string& expect_node, SnapshotInfo* info);

}  // namespace kvfs
