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
// A node's own renames never redirect its own entries: its journal holds every entry it wrote before a
// rename ahead of that rename (so they are applied before it, or lie behind the same snapshot), its
// snapshot holds its names as they are after its renames, and its MOVE entries, which carry an older
// PUT's stamp, name the file's path when the MOVE was written. Redirecting them by stamp alone moved a
// name wrongly wherever the renames reuse one (x -> tmp, y -> x, tmp -> y sent y/f back to x/f).
//
// A directory RENAME_EXCHANGE at (stamp, node) is one record with exchange set: `from` and `to` swapped.
// An older entry under `from` lands under `to` and one under `to` under `from`, in one step (the record
// is looked up by both paths, and a path it moved is never moved by it again: x -> y -> x cannot happen).
//
// own_pending (rebuild only, index/replay.h): records of the entry's own node that DO apply to its own
// entries. A rebuild sets it for a node's rename and exchange records that another snapshot holds but the
// node's own journal tail still has to reach: the entry then moves nothing (an EXCHANGE whose record the
// index holds is skipped; a RENAME finds its destination, made by that snapshot, and stays put), so the
// node's entries before it are moved by the record instead.
//
// Cost: a path is looked up by each of its ancestors (a map keyed by `from`), so an entry costs
// O(depth x log records) per rename that applies to it, whatever the number of records (they are never
// pruned: a rebuild may hold many).
//
// Thread safety: a DirRenameSet is immutable after construction (const methods from any thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "index/index_db.h"

namespace kvfs {

// (stamp, node) of records: those a node's snapshot holds, which its names already reflect.
using DirRenameKeys = std::set<std::pair<uint64_t, std::string>>;

class DirRenameSet {
 public:
  DirRenameSet() = default;
  // Any order; records with stamp 0 or a `from` that is not below the root are ignored, and of several
  // with one (stamp, node) (the same rename from several snapshots) the first is kept.
  explicit DirRenameSet(std::vector<DirRenameRecord> records);

  // Rewrites *path (of an entry at (stamp, node)) through the records newer than it. True if it changed.
  // reflected (optional): records the entry's path already reflects (its node's snapshot held them),
  // skipped like the node's own.
  bool RedirectPath(std::string* path, uint64_t stamp, const std::string& node,
                    const DirRenameKeys* reflected = nullptr, const DirRenameKeys* own_pending = nullptr) const;
  // Rewrites op's path (and `to` for RENAME / EXCHANGE) through the records newer than op (op.node, or
  // `batch_node` when op.node is empty). True if something changed.
  bool Redirect(ApplyOp* op, const std::string& batch_node, const DirRenameKeys* reflected = nullptr,
                const DirRenameKeys* own_pending = nullptr) const;

  bool empty() const { return records_.empty(); }
  size_t size() const { return records_.size(); }
  const std::vector<DirRenameRecord>& records() const { return records_; }  // in (stamp, node) order

 private:
  std::vector<DirRenameRecord> records_;                      // sorted by (stamp, node)
  // from (and an exchange's to) -> indices into records_, ascending
  std::map<std::string, std::vector<size_t>, std::less<>> by_from_;
};

}  // namespace kvfs
