// kvfs-fsck engine: checks (and with repair, repairs) what is on the export (docs/design.md §2, §7). The CLI is
// tools/kvfs_fsck.cc; this library part is what the tests drive. Its parts (fsck.cc, fsck_check.cc,
// fsck_repair.cc) are listed in index/fsck_internal.h.
//
// What is checked, per node directory <backing>/.kvfs/v1/nodes/<node>/:
//   * journals: every fragment checksum and entry (JournalReader, skip_damage), honouring the node's CUT
//     entries: mid-file damage (entries lost), undecodable entries, torn tails, unreadable files;
//   * snapshots (index/snapshot.h): every checksum; the newest one that verifies stands for the journal
//     files it covers, so journal files retired behind it are not missing (nothing is reported); a
//     damaged snapshot is reported, and retired journals that no usable snapshot covers are a gap
//     (entries lost). Entries of the snapshot in use count as references like journal entries (its segment
//     CUTs too: they outlive the retired journal that first held them);
//   * segments: header checksum; every record header + metadata checksum, walking forward from 4096 and
//     RESYNCHRONISING at the next 4 KiB block that holds a valid record after damage (so mid-segment
//     damage is told apart from a torn tail); footer + trailer (sealed segments); with verify_data every
//     value block checksum too; CUT{segment} entries limit what counts;
//   * cross references, against an index replayed from the journals alone (index/replay.h): a live file
//     whose record is missing (segment file gone, damaged header, behind a cut or torn tail, in a damaged
//     region, metadata not matching its location, or with verify_data a bad value) is a *dangling entry*;
//     a valid record referenced by no journal entry of any node is an *orphan* (dead bytes: a crash
//     between a record and its PUT, or a provisional spill; informational, space comes back when the
//     segment is dropped);
//   * unsealed segments of previous generations (or of a dead node), sealed segments without a SEAL
//     entry, stale *.tmp files (Env::WriteFileAtomic leftovers), live/dead bytes per node.
// A node is *live* when its OWNER is not released and its heartbeat is fresh (and, on this host, its pid
// runs): torn tails of a live node's current generation are "in progress" (informational), and repair of
// a live node is refused (Busy, with NodeDir's message).
//
// Repair (FsckOptions::repair) of a node with repairable problems:
//   1. takes the node directory over exactly like a mount (NodeDir::Acquire without force: refused with
//      Busy if a live mount owns it), which starts a new generation G;
//   2. re-checks the node (nothing can change under us now);
//   3. writes journal-<G>-0 (JournalWriter; never touches an existing file): first one CUT{file, valid
//      end} per uncut torn tail of a journal or segment and per damaged trailer (the Store's replay and
//      this checker honour them), then SEAL for every unsealed segment of an older generation and every
//      sealed segment lacking its SEAL entry, then UNLINK{path, stamp+1} for every dangling live file
//      (stamp = the highest stamp that bound the path, so the UNLINK wins last-writer-wins but loses to
//      any later write of the path); syncs it;
//   4. PHYSICALLY seals (appends footer + trailer at the end of file, then fdatasync) an unsealed segment
//      of an older generation only when it ends exactly after its last valid record (no torn tail, no
//      damage, no cut) AND the previous owner is provably dead (OWNER released, or same host and boot id
//      with its pid gone). Appending never changes a byte a peer may have read. Otherwise (the owner
//      was only presumed dead by an old heartbeat, whose stale process could still append) the segment
//      is sealed logically only (the SEAL entry);
//   5. removes stale *.tmp files of the node directory and its seg/ directory;
//   6. releases the node directory (OWNER state=released), so the next mount takes it over at once.
// Nothing is ever truncated or rewritten. Repair is idempotent: a second run finds nothing repairable.
// A mount of the node does step 3's CUTs and SEALs and step 5 itself (engine/recovery.h, the same segment
// check: blockstore/segment_check.h), and applies what a repair journaled to its index, clean or not.
// Unrepairable damage (lost journal entries, damaged segment headers or mid-segment regions) is
// reported every time (its consequences — dangling files — are repaired).
//
// Thread safety: RunFsck is reentrant; one call at a time per backing directory when repairing.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/node_dir.h"
#include "blockstore/status.h"
#include "index/index_db.h"

namespace kvfs {

enum class FsckKind : uint8_t {
  kStaleTempFile,      // *.tmp left by an interrupted Env::WriteFileAtomic
  kJournalUnreadable,  // cannot open, newer format/entry version, misplaced file (header names another)
  kJournalDamaged,     // mid-file damage: entries of the damaged block(s) are lost
  kJournalBadEntry,    // a checksummed record that does not decode as an entry
  kJournalTornTail,    // bytes after the last complete entry, not cut
  kSegmentBadHeader,   // segment header checksum/fields bad (unrepairable; its records are checked one by one)
  kSegmentDamaged,     // a damaged region between valid records (records in it are lost)
  kSegmentTornTail,    // bytes after the last valid record that are not a valid footer, not cut
  kSegmentBadTrailer,  // a trailer magic whose checksum / footer / nonce does not check out
  kSegmentBadValue,    // verify_data: a value block checksum mismatch in a record no live file uses
  kUnsealedSegment,    // unsealed segment of an older generation / dead node (never sealed otherwise)
  kSealNotJournaled,   // sealed on disk, but no SEAL entry (crash between seal and journal)
  kDanglingEntry,      // a live file whose record is missing / damaged / behind the valid end
  kOrphanRecord,       // a valid record no journal entry references (informational: dead bytes)
  kSnapshotDamaged,    // a snapshot that does not verify (never applied; an older one or journals are used)
  kJournalGap,         // journal files were retired but no usable snapshot covers them: entries lost
  kStaleTempName,      // stale_temp_age_s: a live file with a connector temp name (*.tmp) older than that
  kUnresolvedDelta,    // extent delta PUTs whose base the node's journals do not hold (informational)
  kLinkClaim,          // a link(2) claim under .kvfs/v1/links at least kLinkClaimSweepAgeS old
                       // (informational; repair removes it, as a mount's sweep would)
};
// A connector's temp name (docs/design.md §10): the basename ends with ".tmp", ".tmp<digits>" (a pid) or
// ".tmp.<word>" (LMCache `<key>.tmp`, vLLM `<final>_<tag>.tmp`, llm-d `<final>.tmp.<n>`).
bool IsConnectorTempName(const std::string& path);
const char* FsckKindName(FsckKind k);

enum class FsckSeverity : uint8_t { kInfo, kProblem };

struct FsckFinding {
  FsckKind kind = FsckKind::kStaleTempFile;
  FsckSeverity severity = FsckSeverity::kProblem;
  std::string node;
  std::string file;     // path of the file concerned (absolute)
  uint64_t offset = 0;  // where it starts (bytes into file), when meaningful
  uint64_t bytes = 0;   // how many bytes it spans, when meaningful
  std::string path;     // virtual path (dangling entries, orphan and bad-value records)
  std::string detail;   // human-readable
  bool repairable = false;
  bool repaired = false;
  std::string repair;   // what repair does / did ("CUT at 4096", "SEAL (physical)", "UNLINK", "remove")
};

struct FsckNodeSummary {
  std::string node;
  bool live = false;            // a live mount owns it (at the time of the check)
  std::string owner;            // "host=... pid=... generation=... released|heartbeat N s old"
  uint64_t owner_generation = 0;
  uint64_t journal_files = 0, journal_entries = 0, journal_bytes = 0;
  uint64_t snapshots = 0, snapshot_entries = 0;  // snapshot files; entries of the one in use
  std::string snapshot;                          // path of the snapshot in use ("" = none)
  uint64_t segments = 0, sealed_segments = 0, segment_file_bytes = 0;
  uint64_t records = 0, record_value_bytes = 0;  // valid records found in the segments
  uint64_t live_files = 0, live_bytes = 0;       // live files located in this node's segments
  uint64_t dead_bytes = 0;                       // record_value_bytes - live_bytes
  uint64_t orphan_records = 0, orphan_bytes = 0, provisional_records = 0;
  uint64_t unresolved_deltas = 0;                // delta PUTs the replay could not resolve (see kind)
  uint64_t verified_value_bytes = 0;             // verify_data
  bool repair_refused = false;
  std::string repair_refused_reason;
  uint64_t repair_generation = 0;                // generation the repair wrote (0 = none)
};

struct FsckOptions {
  Env* env = nullptr;              // default Env::Posix()
  std::string backing_dir;
  std::string node;                // empty: every node
  bool repair = false;
  bool verify_data = false;
  // If set: after checking (and repairing), replay the export into this local directory as a complete
  // RocksDB index for `index_node` (which must be given when there are several nodes). An existing
  // RocksDB index there is replaced; any other non-empty directory is refused (InvalidArgument).
  std::string rebuild_index_dir;
  std::string index_node;
  std::chrono::milliseconds heartbeat_timeout{30000};
  // >= 0 (kvfs-fsck --remove-stale-temp AGE): report every live file with a connector temp name
  // (IsConnectorTempName) whose mtime is at least this many seconds old (stale-temp-name, a problem);
  // repair journals an UNLINK for each, as for a dangling file (a peer or the next mount applies it).
  int64_t stale_temp_age_s = -1;
  int64_t now_ns = 0;  // the clock those ages are measured against (0 = now)
  // False on an object store (kvfs-fsck s3://...: objects are written whole, never appended to): an
  // unsealed segment gets a SEAL entry only (a logical seal), never a footer appended in place.
  bool append_in_place = true;
  // Called after a node's repair wrote its journal and before the node directory is released (so its
  // next owner never sees the release without the repair): an S3 backing makes the repair journal
  // objects here (the journal is written to the staging directory first). An error aborts the run (the
  // node is released all the same). May be empty.
  std::function<Status(const std::string& node_dir)> after_repair;
  // The generation claim of a repair's takeover (NodeDirOptions::claim; S3: S3TierEnv::ClaimGeneration).
  std::function<Status(const std::string& node_dir, uint64_t generation, const std::string& owner_text)> claim;
  // Progress (phase text, done, total), e.g. for a terminal status line. May be empty.
  std::function<void(const std::string&, uint64_t, uint64_t)> progress;
  // Test hooks passed to NodeDir::Acquire / the liveness check.
  std::optional<HostIdentity> self;
  std::function<bool(const HostIdentity&)> process_alive;
};

struct FsckReport {
  std::vector<FsckFinding> findings;
  std::vector<FsckNodeSummary> nodes;
  uint64_t problems = 0;        // findings of severity kProblem
  uint64_t repaired = 0;        // of those, repaired now
  uint64_t unrepaired = 0;      // problems left (unrepairable damage, refused repairs, repair off)
  uint64_t index_files = 0;     // rebuild_index_dir: files in the rebuilt index
  bool repair_refused = false;  // some node's repair was refused (live owner)
  uint64_t link_claims = 0;     // entries under .kvfs/v1/links (claims of link(2) across nodes)
  uint64_t link_claims_stale = 0;    // of those, at least kLinkClaimSweepAgeS old (a finding each)
  uint64_t link_claims_removed = 0;  // repair: stale claims removed now
  size_t Count(FsckKind k, bool problems_only = false) const;
};

// Errors: InvalidArgument for a bad backing dir / unknown node / unusable index dir; IOError when the
// export cannot be listed or read (I/O errors while reading one file are findings, not errors, except
// that a read error is never mistaken for damage: it aborts with IOError). Problems are in the report.
Result<FsckReport> RunFsck(const FsckOptions& opts);

}  // namespace kvfs
