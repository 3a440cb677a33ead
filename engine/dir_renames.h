// DirRenameLog: the directory renames a node applied recently, so that a peer's entry older than such a
// rename, read after it, lands where the rename moved its path instead of re-creating the old path.
//
// Why: a node tails its peers one journal at a time (engine/peer_tailer.h). B PUTs d/y (stamp t1), A
// renames d to d2 (t2 > t1, after it applied B's PUT). A node C that reads A's journal before B's
// applies the rename first (d is moved without y), then B's older PUT, which re-created d/y: C ended
// with d2 and d/y where A and B have d2/y, until its next rebuild (which merges journals by stamp). The
// renaming node itself had the same race with entries that were still on their way to it. Now every
// directory rename applied on this node (its own, Store::Rename, and its peers', PeerTailer) is noted
// here with its stamp, and an entry of a peer that is older than a noted rename of a directory above
// its path is rewritten to the path that directory has now: C applies B's PUT as d2/y.
//
// The rule is last-writer-wins by (stamp, node), as everywhere in the index: an entry with stamp s and
// node n is redirected by the renames (t, m) with (s, n) < (t, m) whose source is its path or an
// ancestor of it, oldest rename first (so a chain d -> d2 -> d3 sends d/y to d3/y, and an entry made
// between the two renames, d2/z, to d3/z). Entries newer than a rename are left as they are (the writer
// had seen the rename, or raced it: its entry names the path it meant). The rule itself is
// index/dir_redirect.h, which every rebuild shares (index/replay.h ReplayNodes redirects by the records
// of directory renames that the snapshots carry, index_db.h DirRenameRecord).
//
// Bounded: renames are kept for kKeep (60 s, far above the peer visibility delay of ~0.4 s) and at most
// kMaxRenames (the oldest go first); in memory only (the index keeps every record, for rebuilds).
//
// Thread safety: all methods may be called from any thread (one mutex).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include <vector>

#include "index/dir_redirect.h"
#include "index/index_db.h"

namespace kvfs {

class DirRenameLog {
 public:
  static constexpr std::chrono::seconds kKeep{60};
  static constexpr size_t kMaxRenames = 4096;

  // A directory renamed from `from` to `to` (absolute index paths, "/a/b") at (stamp, node); exchange: a
  // RENAME_EXCHANGE of the two (index/dir_redirect.h: older entries under either follow to the other).
  void Note(std::string from, std::string to, uint64_t stamp, std::string node, bool exchange = false);

  // Rewrites op's path (and `to` for RENAME / EXCHANGE) through the noted renames newer than op
  // (op.node, or `batch_node` when op.node is empty). Returns true when something changed. Segment ops
  // (SEAL, DROP, CUT) are never changed.
  // reflected (optional): renames op's path already reflects (a peer snapshot's own records), skipped.
  bool Redirect(ApplyOp* op, const std::string& batch_node, const DirRenameKeys* reflected = nullptr);

  size_t size();
  uint64_t redirected() const { return redirected_.load(std::memory_order_relaxed); }

 private:
  void ExpireLocked(std::chrono::steady_clock::time_point now);

  std::mutex mu_;
  std::vector<DirRenameRecord> renames_;                    // in (stamp, node) order (Note inserts in place)
  std::vector<std::chrono::steady_clock::time_point> noted_;  // when each of renames_ was noted
  // renames_ as a lookup structure, rebuilt by the first Redirect after they changed (set_dirty_), not
  // by every Note: a rebuild is O(renames), and a Note per rename made 4,106 renames take 127 s under
  // ASan (O(n^2); a node applying many directory renames paid it on every one).
  DirRenameSet set_;
  bool set_dirty_ = false;
  std::atomic<uint64_t> redirected_{0};  // ops rewritten
};

}  // namespace kvfs
