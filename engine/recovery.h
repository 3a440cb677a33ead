// Mount-time recovery of a node's segment files (docs/design.md §2 "Nothing a peer may be reading is ever
// truncated", §7 invariant 3). The Store runs it after it took the node directory over (a new generation
// G) and its index holds every entry of the node's journals (rebuilt, or caught up); it journals what
// the plan says as the first entries of journal-<G>-0, where replay and kvfs-fsck read CUTs.
//
// For every segment file of `node` of a generation < G that the index does not know as sealed or dropped
// (a SEAL / DROP entry was applied), the file is checked exactly as kvfs-fsck checks it
// (blockstore/segment_check.h), honouring the CUT already made for it (at the head of a journal-<g>-0, or
// in the index: SegmentInfo::cut, from a snapshot once that journal file was retired), and:
//   * a torn tail (bytes after the last valid record, or a header block that was never written) or a
//     damaged trailer gets CUT{segment, valid end} — the file itself is never truncated or rewritten;
//   * the segment gets SEAL{segment}: an unsealed one is sealed logically (it is never appended again:
//     its writer's generation is over), and one sealed on disk whose SEAL entry a crash lost gets it now.
// Damage inside a segment (a damaged header, damaged regions between valid records) is logged; it is
// kvfs-fsck's to report (its files' reads fail with EIO; `kvfs-fsck --repair` unlinks them).
// A second run finds nothing to do: every segment it handled is then known as sealed.
//
// Cost: one listing of the node's seg/ directory, one index lookup per segment file of an earlier
// generation, and a metadata walk (one or two reads per record) of each unsealed segment only — after a
// crash, typically the one segment that was active.
//
// Thread safety: reentrant; run it before the node's generation writes anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/status.h"
#include "index/index_db.h"
#include "index/journal_format.h"
#include "index/replay.h"

namespace kvfs {

struct SegmentRecoveryPlan {
  std::vector<JournalEntry> cuts;   // CUT{segment file, valid end}; stamp 0 (the caller stamps them)
  std::vector<JournalEntry> seals;  // SEAL{segment}; stamp 0
  uint64_t checked = 0;             // segment files walked
  uint64_t damaged = 0;             // of those, with a damaged header or damaged regions (logged)
};

// Records lost to a power cut after a visibility round (docs/design.md §7 "Visibility and durability").
// A group-commit round that does not fdatasync publishes journal entries whose records are written but not
// durable; after a power cut (or a crash of the NFS server) the journal may hold entries whose records
// never reached stable storage. Before the replay of a node whose index is rebuilt, this plans the cut
// that keeps the state a prefix:
//   * g = the node's newest generation below `generation` that has journal files (the one that ran
//     last; an older one was recovered by the mount after it);
//   * suspect segments: g's segment files without a valid seal on disk (a seal fdatasyncs its segment,
//     so every record of a sealed segment is durable);
//   * g's journal files are read in order (honouring the CUTs already journaled); the first entry (PUT,
//     MOVE, RENAME) that points at a record of a suspect segment whose metadata or value blocks do not
//     verify is where g's journal is cut: CUT{that file, the entry's start}, and CUT{file, header end}
//     for every later file of g. Every entry from there on is dropped (counted, logged), so what
//     survives is a prefix of what the node journaled.
// Cost: one listing of seg/, a footer read per segment of g, and a verified read of each record of a
// suspect segment that an entry points at (at most a segment's bytes; the records written in the last
// sync interval are what is normally at stake).
struct LostRecordPlan {
  std::vector<JournalEntry> cuts;    // CUT{journal file, offset}; stamp 0 (the caller stamps them)
  JournalCuts journal_cuts;          // the same, for ReplayNode's extra_cuts
  uint64_t records_checked = 0;      // records verified
  uint64_t entries_dropped = 0;      // entries at or after the cut
};
Status PlanLostRecordCuts(Env* env, const std::string& backing, const std::string& node, uint64_t generation,
                          LostRecordPlan* out);

// Removes the stale *.tmp files (an interrupted Env::WriteFileAtomic of OWNER, HEARTBEAT or peers) of
// `node`'s directory and its seg/ directory, as `kvfs-fsck --repair` does. Only for the node's owner,
// before its own heartbeat / peer threads start (nothing else writes .tmp files there). *removed = count.
Status RemoveStaleTempFiles(Env* env, const std::string& backing, const std::string& node, uint64_t* removed);

// Plans the recovery of `node`'s segments of generations < `generation` (see above). Reads only.
// Errors: IOError from listing or reading the export (a read failure is never taken for damage).
Status PlanSegmentRecovery(Env* env, const std::string& backing, const std::string& node, uint64_t generation,
                           IndexDb* index, SegmentRecoveryPlan* out);

}  // namespace kvfs
