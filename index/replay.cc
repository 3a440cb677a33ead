// Replay of journals into an IndexDb: see replay.h.
#include "index/replay.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "blockstore/log.h"
#include "blockstore/node_dir.h"

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

bool JournalEntryToApplyOp(const JournalEntry& e, ApplyOp* op) {
  // Segment ids become backing paths (SegmentFilePath): only valid node ids may reach them.
  auto bad_node = [&](const std::string& node) {
    if (ValidateNodeId(node).ok()) return false;
    LogLimited(spdlog::level::warn, "journal-bad-node-id", "kvfs: skipping {} entry on '{}': segment of invalid node id '{}'",
               JournalOpName(e.op), e.path, node);
    return true;
  };
  if (!e.location.empty() && bad_node(e.location.segment.node)) return false;
  if (!e.old_location.empty() && bad_node(e.old_location.segment.node)) return false;
  if ((e.op == JournalOp::kSeal || e.op == JournalOp::kDrop) && bad_node(e.segment.node)) return false;
  op->stamp = e.stamp;
  op->path = e.path;
  switch (e.op) {
    case JournalOp::kPut:
      op->kind = ApplyOp::Kind::kPut;
      op->location = e.location;
      op->attr = FromEntryAttrs(e.attrs);
      return true;
    case JournalOp::kSymlink:
      op->kind = ApplyOp::Kind::kPut;
      op->attr = FromEntryAttrs(e.attrs);
      op->symlink = e.path2;
      return true;
    case JournalOp::kRename:
      op->kind = ApplyOp::Kind::kRename;
      op->to = e.path2;
      op->location = e.location;
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
    case JournalOp::kCut:
      return false;
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

Status ReplayNode(Env* env, const std::string& backing, const std::string& node, IndexDb* index,
                  ReplayNodeResult* out, const JournalPosition& from) {
  std::vector<JournalFile> files;
  Status s = ListJournalFiles(env, NodeDirPath(backing, node), &files);
  if (s.IsNotFound()) return Status::OK();
  KVFS_RETURN_IF_ERROR(s);
  JournalCuts cut_at;
  CollectNodeCuts(env, node, files, &cut_at);

  for (const auto& f : files) {
    const auto key = std::make_pair(f.generation, f.number);
    const auto from_key = std::make_pair(from.generation, from.file_number);
    if (key < from_key) continue;
    const uint64_t start = key == from_key ? from.offset : 0;
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
