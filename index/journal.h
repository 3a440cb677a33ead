// Journal files: JournalWriter (this node's single writer), JournalReader (recovery, fsck, peer tailing)
// and ListJournalFiles. Format: index/journal_format.h and docs/format.md "## Journal"; semantics:
// docs/design.md §2 "Journal" and "Commit protocol".
//
// Positions. A JournalPosition (generation, file number, offset) names the byte just after an entry (its
// end) in journal-<generation>-<file_number>; positions compare lexicographically, so within one node's
// journal a later entry always has a larger position. Reading "from" a position starts at that offset of
// that file. Positions are what the Store records as "applied up to" and what CUT{file, offset} cuts at.
//
// What damage costs (the JournalReader contract, with skip_damage = true):
//   * A fragment is invalid if its header is all zeros, its type is unknown, its length crosses the
//     block, or its checksum does not match. At the first invalid fragment in block k the reader drops
//     the rest of block k and resumes at block k+1 (every block starts with a fragment header).
//   * Lost are: every entry with at least one fragment in the dropped part of block k. That is (a) the
//     entries that start at or after the damaged fragment within block k, (b) an entry that began in an
//     earlier block and continues into block k (its earlier fragments were valid but are dropped), and
//     (c) an entry that starts in block k and continues into later blocks (its MIDDLE/LAST fragments
//     there are "orphans", counted and dropped). Entries that end in block k before the damaged fragment
//     are kept, and every entry that starts at or after the first fragment header of a later valid block
//     is read. Consecutive damaged blocks form one region.
//   * Mid-file damage vs torn tail: an invalid region followed by at least one complete valid entry is
//     mid-file damage (skipped, counted in corrupt_*). Anything after the last complete entry that is not
//     just block-trailer padding — a partial header or fragment at EOF, a FIRST without its LAST, a zero
//     region, garbage, even damage followed only by orphan fragments — is the torn tail: valid_end is the
//     end of the last complete entry, and that is where recovery cuts (CUT{file, valid_end.offset}).
//
// Thread safety: JournalWriter is thread-safe (Append from many threads while one thread runs
// Flush/Sync; Flush and Sync serialize among themselves). A JournalReader is used by one thread.
#pragma once

#include <compare>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/status.h"
#include "index/journal_format.h"

namespace kvfs {

struct JournalPosition {
  uint64_t generation = 0;
  uint64_t file_number = 0;
  uint64_t offset = 0;  // bytes from the start of the file (end of an entry)
  auto operator<=>(const JournalPosition&) const = default;
  bool operator==(const JournalPosition&) const = default;
  std::string ToString() const;  // "<gen>-<n>@<offset>"
};

// ---- listing ----
struct JournalFile {
  uint64_t generation = 0;
  uint64_t number = 0;
  std::string path;  // node_dir + "/" + JournalFileName(generation, number)
  int64_t listed_size = -1;  // the size the listing gave (ListNodeFiles on an object store), -1 unknown
};
// The journal files of a node directory (names parsed by ParseJournalFileName; other names ignored),
// sorted by (generation, number). NotFound if node_dir does not exist.
Status ListJournalFiles(Env* env, const std::string& node_dir, std::vector<JournalFile>* out);

// ---- writer ----
struct JournalWriterOptions {
  Env* env = nullptr;            // required
  std::string dir;               // the node directory, <backing>/.kvfs/v1/nodes/<node>
  std::string node;              // written into every file header
  uint64_t generation = 0;       // this mount's generation
  uint64_t first_file_number = 0;
  // Rotation: an Append that finds the current file at or beyond this size (bytes) starts file n+1, so a
  // file exceeds it by at most one entry (plus its fragment headers and block padding).
  uint64_t max_file_size = kJournalDefaultMaxFileSize;
  bool sync_dir_on_create = true;  // fsync the directory in the first Sync after a file was created
};

// The single writer of one node generation's journal files. Entries are encoded and fragmented in
// memory by Append; Flush writes all buffered bytes with one BackingFile::Write per file at explicit
// offsets (never O_APPEND, never O_DIRECT, never a stat); Sync = Flush + fdatasync. The Store's group
// commit calls Sync once per group and acknowledges entries whose position <= synced_position().
//
// Errors: a failed Flush keeps its bytes and the next Flush/Sync rewrites them at the same offsets; a
// failed Sync (fdatasync may have dropped dirty pages, "fsyncgate") re-queues every byte written since
// the last successful Sync, so the next Sync rewrites and re-syncs them. Positions handed out stay valid.
// The file whose write or fdatasync timed out is closed and reopened by the next Flush (a descriptor
// that DeadlineEnv poisoned fails every later write); rewriting is idempotent because every byte of a
// journal file has exactly one value at its offset. So the Store can retry after ENOSPC, EIO
// or a timeout until the bytes land, in their original order.
// Memory: bytes appended since the last successful Sync are held in memory.
class JournalWriter {
 public:
  // Creates the first file journal-<generation>-<first_file_number> (O_CREAT|O_EXCL: Exists if it is
  // already there — a generation only ever writes new files) and buffers its header record.
  static Result<std::unique_ptr<JournalWriter>> Open(const JournalWriterOptions& opts);
  ~JournalWriter();  // closes files; does NOT flush (call Sync first)

  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;

  // Encodes and buffers one entry (rotating to a new file first if the current one is full); returns
  // the entry's end position. No I/O.
  JournalPosition Append(const JournalEntry& entry);

  // Starts file n+1 now (checkpoints: the entries appended after this call go to a new file) unless the
  // current file holds no entry yet. Returns the number of the file that later entries go to. No I/O
  // (the file is created by the next Flush/Sync).
  uint64_t Rotate();

  // Writes every buffered byte (creating a rotated file when first needed). No fdatasync.
  Status Flush();
  // Flush, then fdatasync every file written since the last Sync (and the directory after a create).
  // On OK every entry appended before the call is durable.
  Status Sync();
  // Flush, then write back (BackingFile::WriteBack, sync_file_range) every file written since the last
  // WriteBack/Sync: on NFS the bytes are on the server (peers on other clients see them), not durable.
  // A failed write-back is handled like a failed Sync (the bytes are rewritten by the next Flush/Sync).
  Status WriteBack();

  // End of the last appended entry (the header end of a fresh file before any Append).
  JournalPosition appended_position() const;
  JournalPosition flushed_position() const;
  JournalPosition synced_position() const;
  uint64_t buffered_bytes() const;  // appended, not yet written
  uint64_t current_file_number() const;
  std::string FilePath(uint64_t number) const;

 private:
  explicit JournalWriter(const JournalWriterOptions& opts);
  struct Chunk {
    uint64_t file_number = 0;
    uint64_t offset = 0;
    std::string data;
  };
  void AddRecordLocked(FragmentType single_type, std::string_view payload);  // requires mu_
  void EmitLocked(const char* data, size_t n);                             // requires mu_
  void StartFileLocked(uint64_t number);                                   // requires mu_
  Status FlushLocked();                                                    // requires io_mu_
  // A Sync or WriteBack of file_number failed with s: drops the file if it timed out and re-queues every
  // byte written since the last good Sync; returns s. Requires io_mu_ (takes mu_).
  Status RequeueUnsynced(uint64_t file_number, const Status& s);
  Result<BackingFile*> FileFor(uint64_t number);                           // requires io_mu_

  const JournalWriterOptions opts_;

  mutable std::mutex mu_;  // guards the fields below up to io_mu_
  uint64_t file_number_ = 0;
  uint64_t file_offset_ = 0;  // bytes of the current file, written or buffered
  uint64_t entries_in_file_ = 0;
  std::deque<Chunk> pending_;
  uint64_t pending_bytes_ = 0;
  JournalPosition appended_;
  JournalPosition flushed_;
  JournalPosition synced_;

  std::mutex io_mu_;  // serializes Flush/Sync; guards the fields below
  std::map<uint64_t, std::unique_ptr<BackingFile>> files_;  // open files (current + unsynced old ones)
  std::vector<Chunk> unsynced_;                             // written since the last successful Sync
  size_t written_back_chunks_ = 0;                          // of unsynced_, those a WriteBack covered
  uint64_t max_created_ = 0;                                // highest file number created so far
  bool dir_sync_needed_ = false;
};

// ---- reader ----
struct JournalReaderOptions {
  // true (recovery, fsck, a peer file the writer has moved on from): skip invalid regions and keep
  // reading, as described at the top of this file. false (tailing a peer's live file): stop at the first
  // invalid fragment; report says whether valid data lies behind it (damage) or not (torn tail / "not
  // yet") and the next Next() re-reads from valid_end.
  bool skip_damage = true;
  bool direct = false;                  // open with O_DIRECT (peer files on NFS)
  size_t readahead = 32 * kJournalBlockSize;  // bytes per read (a multiple of the block size)
  // If non-empty, the header's node must equal it (else Corruption).
  std::string expect_node;
  // Bytes at or beyond this offset are ignored, as if the file ended there: pass the offset of a CUT
  // {file, offset} that applies to this file, so every reader agrees on what the cut file holds.
  uint64_t limit = UINT64_MAX;
};

enum class JournalEnd : uint8_t {
  kNotReached = 0,  // Next() has not returned false yet
  kClean,           // the data ends after a complete entry (or only block-trailer padding follows)
  kTorn,            // bytes after valid_end do not form a complete entry and nothing valid follows
  kDamaged,         // skip_damage == false only: stopped at an invalid region with valid data behind it
};
const char* JournalEndName(JournalEnd e);

struct JournalReadReport {
  bool header_valid = false;  // the FILE_HEADER record was read (only when reading from offset 0)
  JournalFileHeader header;
  JournalPosition valid_end;  // end of the last complete record read (where a CUT points)
  uint64_t file_size = 0;     // bytes of the file seen by the last read that hit EOF
  uint64_t entries = 0;       // entries returned
  uint64_t bad_entries = 0;   // records with a valid checksum whose entry did not decode (skipped)
  // Mid-file damage that was skipped (each region followed by a complete valid entry):
  uint64_t corrupt_regions = 0;
  uint64_t corrupt_bytes = 0;   // from the first invalid byte to the block boundary where reading resumed
  uint64_t corrupt_blocks = 0;  // blocks touched by those regions
  uint64_t dropped_fragments = 0;  // valid fragments dropped because their entry spans damage
  // End state (set when Next returns false):
  JournalEnd end = JournalEnd::kNotReached;
  uint64_t tail_bytes = 0;   // kTorn / kDamaged: file_size - valid_end.offset
  bool tail_zero = false;    // kTorn: every tail byte is zero (an unwritten / not-yet-visible region)
};

// Reads one journal file forward from a position. Use: while ((r = reader->Next(&e, &pos)).ok() && *r)
// { ... }; then check r.status() and report(). After Next returned false it may be called again to
// continue (tailing): it re-reads the file from valid_end and sees data appended since.
class JournalReader {
 public:
  // path: .../journal-<gen>-<n> (the name gives the positions' generation and file number; Invalid-
  // Argument otherwise). start_offset: 0 (read and check the header) or an entry's end offset.
  static Result<std::unique_ptr<JournalReader>> Open(Env* env, const std::string& path,
                                                     uint64_t start_offset,
                                                     const JournalReaderOptions& opts = {});
  // The same over a file already open (a peer's journal kept open between polls); path names it (as
  // above).
  static Result<std::unique_ptr<JournalReader>> OpenFile(Env* env, std::unique_ptr<BackingFile> file,
                                                         const std::string& path, uint64_t start_offset,
                                                         const JournalReaderOptions& opts = {});
  ~JournalReader();

  // true: *entry is the next entry and *end its end position. false: no further complete entry now;
  // see report().end. Errors: IOError from the Env; Corruption if a valid header names another file
  // (misplaced journal); NotSupported for a newer format or entry version (the reader stops there).
  Result<bool> Next(JournalEntry* entry, JournalPosition* end);

  const JournalReadReport& report() const { return report_; }
  uint64_t generation() const { return generation_; }
  uint64_t file_number() const { return number_; }

 private:
  JournalReader(Env* env, std::unique_ptr<BackingFile> file, uint64_t gen, uint64_t number,
                uint64_t start, const JournalReaderOptions& opts);
  // The bytes of block b that exist ({nullptr, 0} past EOF); may be short only for the last block.
  Result<std::pair<const char*, size_t>> Block(uint64_t b);
  void DropWindow();
  // Is there a valid fragment at the start of any block >= b? (lookahead for skip_damage = false)
  Result<bool> ValidDataFrom(uint64_t b);
  enum class Frag { kValid, kTrailer, kEof, kInvalid };
  // Parses the fragment at offset pos_ (within block data [p, p+len)).
  Frag ParseAt(const char* p, size_t len, size_t in_block, uint8_t* type, const char** payload,
               size_t* n) const;
  JournalPosition Pos(uint64_t off) const { return JournalPosition{generation_, number_, off}; }
  void Finish(JournalEnd end);

  Env* env_;
  std::unique_ptr<BackingFile> file_;
  const uint64_t generation_, number_;
  const JournalReaderOptions opts_;

  char* buf_ = nullptr;  // readahead window (aligned for O_DIRECT)
  size_t buf_cap_ = 0;
  uint64_t win_block_ = 0;  // first block in the window
  size_t win_len_ = 0;      // valid bytes in the window
  bool win_valid_ = false;
  bool win_eof_ = false;    // the window's read hit EOF

  uint64_t pos_;  // next fragment offset
  std::string record_;
  bool in_record_ = false;
  uint64_t record_fragments_ = 0;
  // Damage seen since valid_end (folded into the report when a complete entry follows).
  bool bad_pending_ = false;
  uint64_t bad_start_ = 0;
  uint64_t tent_regions_ = 0, tent_bytes_ = 0, tent_blocks_ = 0, tent_dropped_ = 0;
  uint64_t last_bad_block_ = UINT64_MAX;
  Status sticky_;  // a NotSupported / misplaced-file error: returned by every later Next()
  JournalReadReport report_;
};

// Reads a whole journal file from offset 0 (skip_damage as given), appending every entry and its end
// position to *out and filling *report. Errors as JournalReader::Next.
Status ReadJournalFile(Env* env, const std::string& path, const JournalReaderOptions& opts,
                       std::vector<std::pair<JournalEntry, JournalPosition>>* out,
                       JournalReadReport* report);

}  // namespace kvfs
