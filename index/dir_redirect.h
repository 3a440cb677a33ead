// The redirect rule of directory renames, shared by the live nodes (engine/dir_renames.h, in memory for
// 60 s) and every rebuild of the index (index/replay.h ReplayNodes, from the records of the snapshots it
// applies; docs/design.md §3 "Rebuild order").
//
// A directory rename moved `from` to `to` at (stamp, node). An entry with (stamp s, node n) older than
// it, (s, n) < (stamp, node), whose path is `from` or lies under it, was written before the rename and
// lands where the rename moved it: `to` + the rest of its path. Renames apply oldest first, so a chain
// d -> d2 -> d3 sends d/y to d3/y and an entry made between the two renames, d2/z, to d3/z. Entries
// newer than a rename are left as they are (the writer had seen the rename, or raced it: its entry names
// the path it meant). Segment entries (SEAL, DROP, CUT) and the records themselves are never changed.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>
#include <string>

#include "index/index_db.h"

namespace kvfs {

// Sorts records by (stamp, node), the order Redirect* expects.
void SortDirRenames(std::vector<DirRenameRecord>* records);

// Rewrites *path (of an entry at (stamp, node)) through `records` (sorted by (stamp, node)). True if
// it changed.
bool RedirectDirPath(std::span<const DirRenameRecord> records, std::string* path, uint64_t stamp,
                     const std::string& node);

// Rewrites op's path (and `to` for RENAME / EXCHANGE) through the records newer than op (op.node, or
// `batch_node` when op.node is empty). True if something changed.
bool RedirectApplyOp(std::span<const DirRenameRecord> records, ApplyOp* op, const std::string& batch_node);

}  // namespace kvfs
