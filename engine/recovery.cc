// Mount-time segment recovery: see recovery.h.
#include "engine/recovery.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "blockstore/node_dir.h"
#include "blockstore/segment_check.h"
#include "index/journal.h"
#include "index/replay.h"

namespace kvfs {

Status RemoveStaleTempFiles(Env* env, const std::string& backing, const std::string& node, uint64_t* removed) {
  for (const std::string& d : {NodeDirPath(backing, node), SegmentDirPath(backing, node)}) {
    std::vector<std::string> names;
    Status s = env->GetChildren(d, &names);
    if (s.IsNotFound()) continue;
    KVFS_RETURN_IF_ERROR(s);
    for (const auto& n : names) {
      if (n.size() < 4 || n.compare(n.size() - 4, 4, ".tmp") != 0) continue;
      Status r = env->Remove(d + "/" + n);
      if (!r.ok() && !r.IsNotFound()) return r;
      spdlog::info("kvfs: removed stale temp file {}/{}", d, n);
      (*removed)++;
    }
  }
  return Status::OK();
}

Status PlanSegmentRecovery(Env* env, const std::string& backing, const std::string& node, uint64_t generation,
                           IndexDb* index, SegmentRecoveryPlan* out) {
  std::vector<std::string> names;
  Status ls = env->GetChildren(SegmentDirPath(backing, node), &names);
  if (ls.IsNotFound()) return Status::OK();
  KVFS_RETURN_IF_ERROR(ls);
  std::sort(names.begin(), names.end());
  std::vector<SegmentId> candidates;
  for (const auto& n : names) {
    SegmentId id;
    id.node = node;
    if (!ParseSegmentFileName(n, &id.generation, &id.seq) || id.generation >= generation) continue;
    auto st = index->GetSegment(id);
    if (st.ok() && st->state != SegmentState::kOpen) continue;  // SEAL or DROP applied
    if (!st.ok() && !st.status().IsNotFound()) return st.status();
    candidates.push_back(id);
  }
  if (candidates.empty()) return Status::OK();
  std::sort(candidates.begin(), candidates.end(), [](const SegmentId& a, const SegmentId& b) {
    return std::make_pair(a.generation, a.seq) < std::make_pair(b.generation, b.seq);
  });

  // CUTs already journaled for segment files (a previous recovery or kvfs-fsck --repair).
  JournalCuts journal_cuts, segment_cuts;
  std::vector<JournalFile> files;
  Status lj = ListJournalFiles(env, NodeDirPath(backing, node), &files);
  if (!lj.ok() && !lj.IsNotFound()) return lj;
  CollectNodeCuts(env, node, files, &journal_cuts, &segment_cuts);

  for (const auto& id : candidates) {
    const std::string path = SegmentFilePath(backing, id);
    auto f = env->Open(path, OpenOptions{});
    if (!f.ok()) {
      if (f.status().IsNotFound()) continue;  // unlinked meanwhile (a dropped segment)
      return f.status();
    }
    auto c = segment_cuts.find({id.generation, id.seq});
    uint64_t cut = c == segment_cuts.end() ? UINT64_MAX : c->second;
    // A CUT whose journal file was retired lives on in the index (from a snapshot).
    auto known = index->GetSegment(id);
    if (known.ok()) cut = std::min(cut, known->cut);
    SegmentCheck sc;
    KVFS_RETURN_IF_ERROR(CheckSegmentFile(f->get(), cut, /*verify_data=*/false, &sc));
    out->checked++;
    const FileRef ref{FileRef::Kind::kSegment, node, id.generation, id.seq};
    if (!sc.header_ok && !sc.header_torn) {
      out->damaged++;
      spdlog::error("kvfs: segment {}: damaged header ({}); none of its records is trusted (kvfs-fsck reports "
                    "it); sealing it", path, sc.header_detail);
    } else {
      if (!sc.damaged.empty()) {
        out->damaged++;
        spdlog::error("kvfs: segment {}: {} damaged region(s) between valid records (kvfs-fsck reports them)", path,
                      sc.damaged.size());
      }
      // The same rule as kvfs-fsck's repair: a damaged trailer not yet cut, or a torn tail, is cut at the
      // end of the last valid record.
      if ((sc.trailer_bad && cut == UINT64_MAX) || (!sc.trailer_bad && sc.torn)) {
        const uint64_t tail = (sc.torn ? sc.limit : sc.size) - sc.tail_start;
        spdlog::warn("kvfs: segment {}: {} of {} bytes after offset {}; cutting (CUT entry)", path,
                     sc.trailer_bad ? "damaged trailer," : "torn tail", tail, sc.tail_start);
        out->cuts.push_back(JournalEntry::Cut(ref, sc.tail_start, 0));
      }
    }
    if (sc.sealed) {
      spdlog::info("kvfs: segment {} is sealed but its SEAL entry was lost; journaling it", path);
    } else {
      spdlog::info("kvfs: segment {} of generation {} was left unsealed ({} records, valid end {}); sealing it "
                   "logically (SEAL entry)", path, id.generation, sc.records.size(), sc.tail_start);
    }
    out->seals.push_back(JournalEntry::Seal(id, 0));
  }
  return Status::OK();
}

}  // namespace kvfs
