// Replay: rebuilds (or brings up to date) an IndexDb from the journals on the export alone (docs/design.md §3,
// §7 invariant 4). Shared by the Store's rebuild and `kvfs-fsck --rebuild-index`, so both agree on what
// the export means.
//
// Rules (the same as engine/store_open.cc StoreImpl::ReplayNode, from which this was extracted):
//   * Checkpoints first (index/snapshot.h): the newest snapshot-<g>-<n> of the node that verifies is
//     applied, and then only the journal files sorting at or after journal-<g>-<n> are read (older files
//     are covered, or retired). A damaged snapshot is never applied (not even in part): the next older
//     one is tried, then the journals alone. If no usable snapshot exists and the journal files that
//     exist show that some were retired (JournalsRetired), what only a snapshot held is lost, which is
//     logged (error) and reported (journal_gap). A damaged snapshot alone is no gap: when every journal
//     file it covers is still there, the journals alone give the whole namespace.
//   * A node's journal files are read in (generation, number) order with JournalReader skip_damage=true
//     (damage loses only the entries of the damaged block, journal.h).
//   * CUT{journal file, offset} entries of the node's OWN journals (the leading CUT entries of every
//     generation's first file, journal-<gen>-0, where a takeover or `kvfs-fsck --repair` writes them) limit
//     the file they name: bytes at or beyond the smallest such offset are never applied. CUTs of segment
//     files do not affect the index (no entry points behind a segment's valid end unless the export was
//     damaged; kvfs-fsck reports those).
//   * Entries are applied in batches of kReplayBatch with IndexDb::ApplyBatch, recording the applied
//     position of the node in the same batch (also at the end of a file whose last entries were CUTs).
//     CUT entries are not applied.
//   * The highest stamp seen raises the index's HLC floor.
//
// Thread safety: the functions are reentrant; the IndexDb is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/status.h"
#include "index/index_db.h"
#include "index/journal.h"
#include "index/journal_format.h"
#include "index/snapshot.h"

namespace kvfs {

inline constexpr size_t kReplayBatch = 1024;

// Translates a journal entry into an index ApplyOp. false for entries the index does not apply: CUT of a
// journal file (a CUT of a segment file becomes ApplyOp::kCut, applied only to the journal's own node's
// segments), and entries naming a segment whose node id is not a valid one (ValidateNodeId: a peer's journal must not
// make this node open a path outside <backing>/.kvfs/v1/nodes/<node>/; logged, rate-limited, skipped).
bool JournalEntryToApplyOp(const JournalEntry& e, ApplyOp* op);

// The same for an entry of a snapshot: a RENAME there is the record of a directory rename
// (ApplyOp::Kind::kDirRenameRecord: stored, nothing moves; index/snapshot.h).
bool SnapshotEntryToApplyOp(const JournalEntry& e, ApplyOp* op);

// The attributes a journal entry carries for an inode's Attr (mode, owner, size, times).
EntryAttrs ToEntryAttrs(const Attr& a);

// (generation, number) of a node's journal file -> bytes of it that stay valid (smallest CUT offset).
using JournalCuts = std::map<std::pair<uint64_t, uint64_t>, uint64_t>;

// Reads the leading CUT entries of every journal-<gen>-0 file in `files` that name `node`'s own files.
// journal_cuts: CUTs of journal files. segment_cuts (optional): CUTs of segment files, keyed by
// (generation, seq). Unreadable files are skipped (the main pass reports them).
void CollectNodeCuts(Env* env, const std::string& node, const std::vector<JournalFile>& files,
                     JournalCuts* journal_cuts, JournalCuts* segment_cuts = nullptr);

// What replaying one journal file found.
struct ReplayedFile {
  JournalFile file;
  bool opened = false;          // false: JournalReader::Open failed (status says why)
  Status status;                // first error of Open/Next (NotSupported, misplaced file, I/O)
  uint64_t limit = UINT64_MAX;  // CUT offset applied, or UINT64_MAX
  JournalReadReport report;
};

struct ReplayNodeResult {
  std::string snapshot;            // path of the snapshot applied ("" = none)
  uint64_t snapshot_entries = 0;
  std::vector<std::pair<std::string, Status>> bad_snapshots;  // skipped (Corruption / NotSupported / I/O)
  bool journal_gap = false;        // journals were retired and no usable snapshot covers them
  std::vector<ReplayedFile> files;
  uint64_t entries = 0;    // entries read (CUTs included)
  uint64_t max_stamp = 0;  // highest stamp read
  // Extent delta PUTs (entry version 5) whose base binding the index did not hold when they were
  // applied: each bound nothing and applied as an UNLINK at its stamp (docs/format.md "Extent deltas").
  uint64_t unresolved_deltas = 0;
  // Entries of this node (snapshot or journal) moved by a directory rename record (ReplayNodes).
  uint64_t redirected = 0;
};

// Applies the newest snapshot of `snaps` (sorted oldest first) that verifies, in batches of kReplayBatch
// through apply(ops, last) (last = the final call, possibly with no ops). Damaged ones are skipped
// (logged, appended to *bad) and nothing of them is applied. *used = the snapshot applied (nullptr:
// none); *max_stamp raised by its header. Errors: apply's, and NotFound-free I/O errors are treated as
// "damaged" (skipped) so a replay still proceeds with the journals.
Status ApplyNewestSnapshot(Env* env, const std::string& node, const std::vector<SnapshotFile>& snaps,
                           const std::function<Status(std::vector<ApplyOp>* ops, bool last)>& apply,
                           const SnapshotFile** used, uint64_t* entries, uint64_t* max_stamp,
                           std::vector<std::pair<std::string, Status>>* bad);

// Replays every journal file of `node` under `backing` into `index` (rules above). A node directory
// without journals is OK (empty result). Errors: only IndexDb failures and a failure to list the
// directory; damaged / unreadable files are reported in the result and skipped.
// from: replay only what lies after this position (an entry end the index already holds, e.g. its
// applied position of the node): files before from's (generation, number) are skipped and that file is
// read from from.offset (its header is not re-checked). Default {0, 0, 0}: everything (from the newest
// usable snapshot on). With a position, a snapshot is used only when the file at `from` is gone (retired)
// and the newest snapshot covers past it.
// extra_cuts (optional): journal CUTs not on the export yet (the Store's mount-time recovery journals
// them at the head of its new generation's journal after the replay), honoured like the collected ones.
Status ReplayNode(Env* env, const std::string& backing, const std::string& node, IndexDb* index,
                  ReplayNodeResult* out, const JournalPosition& from = {}, const JournalCuts* extra_cuts = nullptr);

// Whether journal files of a node were retired, from the files that exist (both sorted oldest first, as
// ListNodeFiles gives them). Retirement (engine/checkpoint.cc) removes the OLDEST journal files, those
// before a snapshot it keeps: so some were retired iff the oldest journal file is not number 0 of its
// generation, or a snapshot file (usable or not) names a position at or before the oldest journal file
// (snapshot-<g>-<n> stands for the files before journal-<g>-<n>), or there are snapshots but no journals.
// A journal set starting at number 0 before every snapshot is complete: the journals alone cover all.
bool JournalsRetired(const std::vector<JournalFile>& journals, const std::vector<SnapshotFile>& snapshots);

// One node of a ReplayNodes: what to replay (as ReplayNode's arguments) and where its result goes.
struct ReplaySource {
  std::string node;
  JournalPosition from;                    // {} = everything (from the newest usable snapshot on)
  const JournalCuts* extra_cuts = nullptr;
  ReplayNodeResult* out = nullptr;         // required
};

// Replays several nodes as one history (docs/design.md §3 "Rebuild order"): every node's snapshot first,
// then the entries of all their journal tails merged by stamp, each journal in its own order (the lowest
// (clock, node) first, a journal's clock being the highest stamp taken from it so far or its next
// entry's). A node's entry that depends on a peer's (a SETATTR, XATTR or directory RENAME of a name
// the peer bound, written after this node applied the peer's entry, so with a higher HLC stamp) is
// applied after it, as it was on the live nodes; a node-by-node replay dropped it (no such name yet).
// A SETATTR or XATTR that finds no name when applied (ApplyResult::no_target: a snapshot's change to a
// peer's file whose binding comes later, or that lies under a directory renamed later) is applied again
// once at the end, where last-writer-wins by stamp decides as always.
// Every applied op is redirected by the records of directory renames and exchanges the chosen snapshots
// hold (index/dir_redirect.h), except a node's ops by its own records and by those its snapshot holds; a
// node's own exchange record that another snapshot holds and its own does not redirects the node's ops
// until its journal tail reaches that EXCHANGE (which the index then skips: it holds the record).
// Batches mix nodes (ApplyOp::node) and record every node's position they reach. Otherwise the rules
// and errors of ReplayNode, per node; with one source it is ReplayNode.
Status ReplayNodes(Env* env, const std::string& backing, std::span<const ReplaySource> sources, IndexDb* index);

// Replays every node under `backing` (ListNodes order) with ReplayNodes. out (optional): per-node results.
Status ReplayAllNodes(Env* env, const std::string& backing, IndexDb* index,
                      std::map<std::string, ReplayNodeResult>* out = nullptr);

}  // namespace kvfs
