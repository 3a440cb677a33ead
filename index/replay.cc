// Replay of journals into an IndexDb: see replay.h.
#include "index/replay.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "blockstore/log.h"
#include "blockstore/node_dir.h"
#include "index/snapshot.h"

namespace kvfs {
namespace {

Attr FromEntryAttrs(const EntryAttrs& e) {
  Attr a;
  a.mode = e.mode;
  a.uid = e.uid;
  a.gid = e.gid;
  a.size = e.size;
  a.atime_ns = e.atime_ns;
  a.mtime_ns = e.mtime_ns;
  a.ctime_ns = e.ctime_ns;
  return a;
}

}  // namespace

EntryAttrs ToEntryAttrs(const Attr& a) {
  EntryAttrs e;
  e.mode = a.mode;
  e.uid = a.uid;
  e.gid = a.gid;
  e.size = a.size;
  e.atime_ns = a.atime_ns;
  e.mtime_ns = a.mtime_ns;
  e.ctime_ns = a.ctime_ns;
  return e;
}

bool JournalEntryToApplyOp(const JournalEntry& e, ApplyOp* op) {
  // Segment ids become backing paths (SegmentFilePath): only valid node ids may reach them.
  auto bad_node = [&](const std::string& node) {
    if (ValidateNodeId(node).ok()) return false;
    LogLimited(spdlog::level::warn, "journal-bad-node-id", "kvfs: skipping {} entry on '{}': segment of invalid node id '{}'",
               JournalOpName(e.op), e.path, node);
    return true;
  };
  for (const Location& rec : e.Records()) {
    if (bad_node(rec.segment.node)) return false;
  }
  if ((e.op == JournalOp::kSeal || e.op == JournalOp::kDrop) && bad_node(e.segment.node)) return false;
  if (e.op == JournalOp::kCut && (e.cut_file.kind != FileRef::Kind::kSegment || bad_node(e.cut_file.node))) {
    return false;  // a journal file's CUT limits only the reading of that file (CollectNodeCuts)
  }
  op->stamp = e.stamp;
  op->path = e.path;
  switch (e.op) {
    case JournalOp::kPut:
      op->kind = ApplyOp::Kind::kPut;
      op->location = e.location;
      op->extents = e.extents;
      op->delta = e.delta;
      op->attr = FromEntryAttrs(e.attrs);
      op->xattrs = e.xattrs;
      return true;
    case JournalOp::kSymlink:  // a symlink, or (entry version 4) a FIFO, socket or device
      op->kind = ApplyOp::Kind::kPut;
      op->attr = FromEntryAttrs(e.attrs);
      op->attr.rdev = e.rdev;
      op->symlink = e.path2;
      if (!IsSpecialFileMode(e.attrs.mode)) op->attr.mode = S_IFLNK | (e.attrs.mode & 07777);
      return true;
    case JournalOp::kRename:
      op->kind = ApplyOp::Kind::kRename;
      op->to = e.path2;
      op->location = e.location;
      return true;
    case JournalOp::kExchange:
      op->kind = ApplyOp::Kind::kExchange;
      op->to = e.path2;
      return true;
    case JournalOp::kUnlink:
      op->kind = ApplyOp::Kind::kUnlink;
      return true;
    case JournalOp::kMkdir:
      op->kind = ApplyOp::Kind::kMkdir;
      op->attr = FromEntryAttrs(e.attrs);
      return true;
    case JournalOp::kRmdir:
      op->kind = ApplyOp::Kind::kRmdir;
      return true;
    case JournalOp::kSetattr:
      op->kind = ApplyOp::Kind::kSetattr;
      op->attr = FromEntryAttrs(e.attrs);
      op->mask = e.mask;
      return true;
    case JournalOp::kXattr:
      op->kind = ApplyOp::Kind::kXattr;
      op->xattr_name = e.xattr_name;
      op->xattr_value = e.xattr_value;
      op->xattr_remove = e.xattr_remove;
      return true;
    case JournalOp::kSeal:
      op->kind = ApplyOp::Kind::kSeal;
      op->segment = e.segment;
      return true;
    case JournalOp::kDrop:
      op->kind = ApplyOp::Kind::kDrop;
      op->segment = e.segment;
      return true;
    case JournalOp::kMove:
      op->kind = ApplyOp::Kind::kMove;
      op->location = e.location;
      op->old_location = e.old_location;
      return true;
    case JournalOp::kCut:  // of a segment file: SegmentInfo::cut (carried by snapshots)
      op->kind = ApplyOp::Kind::kCut;
      op->segment = SegmentId{e.cut_file.node, e.cut_file.generation, e.cut_file.number};
      op->cut_offset = e.cut_offset;
      return true;
  }
  return false;
}

void CollectNodeCuts(Env* env, const std::string& node, const std::vector<JournalFile>& files,
                     JournalCuts* journal_cuts, JournalCuts* segment_cuts) {
  for (const auto& f : files) {
    if (f.number != 0) continue;
    auto reader = JournalReader::Open(env, f.path, 0, JournalReaderOptions{});
    if (!reader.ok()) continue;
    JournalEntry e;
    JournalPosition end;
    for (;;) {
      auto more = (*reader)->Next(&e, &end);
      if (!more.ok() || !*more || e.op != JournalOp::kCut) break;
      if (e.cut_file.node != node) continue;
      JournalCuts* into = e.cut_file.kind == FileRef::Kind::kJournal ? journal_cuts : segment_cuts;
      if (into == nullptr) continue;
      auto key = std::make_pair(e.cut_file.generation, e.cut_file.number);
      auto it = into->find(key);
      (*into)[key] = it == into->end() ? e.cut_offset : std::min(it->second, e.cut_offset);
    }
  }
}

Status ApplyNewestSnapshot(Env* env, const std::string& node, const std::vector<SnapshotFile>& snaps,
                           const std::function<Status(std::vector<ApplyOp>* ops, bool last)>& apply,
                           const SnapshotFile** used, uint64_t* entries, uint64_t* max_stamp,
                           std::vector<std::pair<std::string, Status>>* bad) {
  *used = nullptr;
  *entries = 0;
  for (auto it = snaps.rbegin(); it != snaps.rend(); ++it) {
    std::vector<ApplyOp> ops;
    uint64_t n = 0;
    Status apply_error;
    SnapshotInfo info;
    Status s = ReadSnapshot(
        env, it->path, node,
        [&](const JournalEntry& e) -> Status {
          ApplyOp op;
          n++;
          if (!JournalEntryToApplyOp(e, &op)) return Status::OK();
          ops.push_back(std::move(op));
          if (ops.size() >= kReplayBatch) {
            apply_error = apply(&ops, false);
            ops.clear();
            return apply_error;
          }
          return Status::OK();
        },
        &info);
    if (!apply_error.ok()) return apply_error;
    if (!s.ok()) {
      spdlog::error("kvfs: snapshot {} not used: {}", it->path, s.ToString());
      if (bad) bad->emplace_back(it->path, s);
      if (n > 0) {
        // Verified but an entry failed to decode in the second pass: what was applied is correct (it
        // verified), but the snapshot is incomplete; fall back to older data too.
        spdlog::error("kvfs: snapshot {}: {} entries were applied before the error", it->path, n);
      }
      continue;
    }
    KVFS_RETURN_IF_ERROR(apply(&ops, true));
    *used = &*it;
    *entries = n;
    *max_stamp = std::max(*max_stamp, info.max_stamp);
    return Status::OK();
  }
  return Status::OK();
}

bool JournalsRetired(const std::vector<JournalFile>& journals, const std::vector<SnapshotFile>& snapshots) {
  if (journals.empty()) return !snapshots.empty();
  const JournalFile& oldest = journals.front();
  if (oldest.number != 0) return true;  // the first files of its generation are gone
  const auto oldest_key = std::make_pair(oldest.generation, oldest.number);
  return std::any_of(snapshots.begin(), snapshots.end(), [&](const SnapshotFile& s) {
    return std::make_pair(s.generation, s.number) <= oldest_key;
  });
}

Status ReplayNode(Env* env, const std::string& backing, const std::string& node, IndexDb* index,
                  ReplayNodeResult* out, const JournalPosition& from, const JournalCuts* extra_cuts) {
  NodeFiles nf;
  Status s = ListNodeFiles(env, NodeDirPath(backing, node), &nf);
  if (s.IsNotFound()) return Status::OK();
  KVFS_RETURN_IF_ERROR(s);
  std::vector<JournalFile> files = std::move(nf.journals);
  // Snapshots: a replay from the beginning starts from the newest usable one; a replay from a position
  // uses one only if the journal file at that position is gone (retired meanwhile) and the newest
  // snapshot covers past it.
  const bool from_start = from == JournalPosition{};
  const auto from_key = std::make_pair(from.generation, from.file_number);
  bool want_snapshot = !nf.snapshots.empty() && from_start;
  if (!nf.snapshots.empty() && !from_start) {
    const bool present = std::any_of(files.begin(), files.end(), [&](const JournalFile& f) {
      return std::make_pair(f.generation, f.number) == from_key;
    });
    want_snapshot = !present && std::make_pair(nf.snapshots.back().generation, nf.snapshots.back().number) > from_key;
  }
  JournalPosition start_at = from;
  const SnapshotFile* used = nullptr;
  if (want_snapshot) {
    KVFS_RETURN_IF_ERROR(ApplyNewestSnapshot(
        env, node, nf.snapshots,
        [&](std::vector<ApplyOp>* ops, bool) -> Status {
          if (ops->empty()) return Status::OK();
          auto r = index->ApplyBatch(*ops, node);
          if (!r.ok()) return r.status();
          out->unresolved_deltas += r->unresolved_deltas;
          return Status::OK();
        },
        &used, &out->snapshot_entries, &out->max_stamp, &out->bad_snapshots));
  }
  if (used != nullptr) {
    out->snapshot = used->path;
    // (g, n, 0) = "everything before journal-<g>-<n>": a peer tailer continues there.
    const JournalPosition cover{used->generation, used->number, 0};
    auto r = index->ApplyBatch({}, node, cover.ToString());
    if (!r.ok()) return r.status();
    if (start_at < cover) start_at = cover;
  } else if (from_start ? JournalsRetired(files, nf.snapshots) : want_snapshot) {
    out->journal_gap = true;
    spdlog::error("kvfs: node {}: journal files were retired and no usable snapshot covers them; names "
                  "only a snapshot held are missing (kvfs-fsck reports it)",
                  node);
  }
  std::erase_if(files, [&](const JournalFile& f) {
    return std::make_pair(f.generation, f.number) < std::make_pair(start_at.generation, start_at.file_number);
  });
  JournalCuts cut_at;
  CollectNodeCuts(env, node, files, &cut_at);
  if (extra_cuts) {
    for (const auto& [key, off] : *extra_cuts) {
      auto it = cut_at.find(key);
      cut_at[key] = it == cut_at.end() ? off : std::min(it->second, off);
    }
  }

  for (const auto& f : files) {
    const auto key = std::make_pair(f.generation, f.number);
    const auto start_key = std::make_pair(start_at.generation, start_at.file_number);
    if (key < start_key) continue;
    const uint64_t start = key == start_key ? start_at.offset : 0;
    ReplayedFile rf;
    rf.file = f;
    JournalReaderOptions ro;
    ro.skip_damage = true;
    auto cut = cut_at.find({f.generation, f.number});
    if (cut != cut_at.end()) ro.limit = rf.limit = cut->second;
    auto reader = JournalReader::Open(env, f.path, start, ro);
    if (!reader.ok()) {
      spdlog::error("kvfs: journal {} unreadable: {}", f.path, reader.status().ToString());
      rf.status = reader.status();
      out->files.push_back(std::move(rf));
      continue;
    }
    rf.opened = true;
    std::vector<ApplyOp> ops;
    JournalPosition last, recorded;
    auto flush = [&]() -> Status {
      if (ops.empty()) return Status::OK();
      auto r = index->ApplyBatch(ops, node, last.ToString());
      ops.clear();
      if (!r.ok()) return r.status();
      out->unresolved_deltas += r->unresolved_deltas;
      recorded = last;
      return Status::OK();
    };
    JournalEntry e;
    JournalPosition end;
    for (;;) {
      auto more = (*reader)->Next(&e, &end);
      if (!more.ok()) {
        spdlog::error("kvfs: journal {}: {}", f.path, more.status().ToString());
        rf.status = more.status();
        break;
      }
      if (!*more) break;
      out->entries++;
      out->max_stamp = std::max(out->max_stamp, e.stamp);
      ApplyOp op;
      if (JournalEntryToApplyOp(e, &op)) ops.push_back(std::move(op));
      last = end;
      if (ops.size() >= kReplayBatch) KVFS_RETURN_IF_ERROR(flush());
    }
    KVFS_RETURN_IF_ERROR(flush());
    if (last != JournalPosition{} && last != recorded) {
      // Only entries the index does not apply (CUTs) since the last batch: record the position anyway,
      // so a replay from it (Store::Open of a clean index) does not read them again.
      auto r = index->ApplyBatch({}, node, last.ToString());
      if (!r.ok()) return r.status();
    }
    rf.report = (*reader)->report();
    if (rf.report.corrupt_regions > 0) {
      spdlog::error("kvfs: journal {}: {} damaged region(s), {} bytes skipped", f.path,
                    rf.report.corrupt_regions, rf.report.corrupt_bytes);
    }
    out->files.push_back(std::move(rf));
  }
  if (out->max_stamp) KVFS_RETURN_IF_ERROR(index->SetHlcFloor(out->max_stamp));
  return Status::OK();
}

Status ReplayAllNodes(Env* env, const std::string& backing, IndexDb* index,
                      std::map<std::string, ReplayNodeResult>* out) {
  auto nodes = ListNodes(env, backing);
  if (!nodes.ok()) return nodes.status();
  for (const auto& node : *nodes) {
    ReplayNodeResult r;
    KVFS_RETURN_IF_ERROR(ReplayNode(env, backing, node, index, &r));
    if (out) (*out)[node] = std::move(r);
  }
  return Status::OK();
}

}  // namespace kvfs
