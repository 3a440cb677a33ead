// Replay of journals into an IndexDb: see replay.h.
#include "index/replay.h"

#include <algorithm>
#include <memory>
#include <queue>
#include <tuple>

#include <spdlog/spdlog.h>

#include "blockstore/log.h"
#include "blockstore/node_dir.h"
#include "index/dir_redirect.h"
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

bool SnapshotEntryToApplyOp(const JournalEntry& e, ApplyOp* op) {
  if (!JournalEntryToApplyOp(e, op)) return false;
  if (e.op == JournalOp::kRename) {  // a record, never a move; a peer's names that peer in its location
    op->kind = ApplyOp::Kind::kDirRenameRecord;
    op->exchange = IsExchangeRecord(e);
    op->node = e.location.segment.node;
    op->location = Location{};
  }
  return true;
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
          if (!SnapshotEntryToApplyOp(e, &op)) return Status::OK();
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

namespace {

// One node's part of a merged replay: its remaining journal files and the entry at their head.
struct NodeCursor {
  std::string node;
  ReplayNodeResult* out = nullptr;
  std::vector<JournalFile> files;  // to read, in order
  size_t next_file = 0;
  JournalPosition start_at;        // the first file's start (its offset)
  JournalCuts cut_at;
  std::unique_ptr<JournalReader> reader;
  ReplayedFile rf;                 // of the file `reader` reads
  JournalEntry head;               // the next entry (valid when has_head)
  JournalPosition head_end;
  bool has_head = false;
  uint64_t clock = 0;              // the highest stamp taken from this journal so far (merge key)
  // The MOVEs taken since the journal's last entry that is not a MOVE: applied once more just before
  // the next one (or at the end of the merge), see ReplayNodes.
  std::vector<ApplyOp> moves_again;
  JournalPosition last, recorded;  // end of the last entry taken / recorded as applied in the index
};

// Finishes the file `c.reader` read (its report into the result).
void CloseFile(NodeCursor& c) {
  if (!c.reader) return;
  c.rf.report = c.reader->report();
  if (c.rf.report.corrupt_regions > 0) {
    spdlog::error("kvfs: journal {}: {} damaged region(s), {} bytes skipped", c.rf.file.path,
                  c.rf.report.corrupt_regions, c.rf.report.corrupt_bytes);
  }
  c.out->files.push_back(std::move(c.rf));
  c.rf = ReplayedFile{};
  c.reader.reset();
}

// Moves c.head to the node's next entry, opening its next journal files as needed; has_head = false at
// the end of the last one. Unreadable files and read errors end that file (reported in the result).
void Advance(Env* env, NodeCursor& c) {
  c.has_head = false;
  for (;;) {
    if (!c.reader) {
      if (c.next_file >= c.files.size()) return;
      const JournalFile& f = c.files[c.next_file++];
      const auto key = std::make_pair(f.generation, f.number);
      const uint64_t start =
          key == std::make_pair(c.start_at.generation, c.start_at.file_number) ? c.start_at.offset : 0;
      c.rf = ReplayedFile{};
      c.rf.file = f;
      JournalReaderOptions ro;
      ro.skip_damage = true;
      auto cut = c.cut_at.find(key);
      if (cut != c.cut_at.end()) ro.limit = c.rf.limit = cut->second;
      auto reader = JournalReader::Open(env, f.path, start, ro);
      if (!reader.ok()) {
        spdlog::error("kvfs: journal {} unreadable: {}", f.path, reader.status().ToString());
        c.rf.status = reader.status();
        c.out->files.push_back(std::move(c.rf));
        continue;
      }
      c.rf.opened = true;
      c.reader = std::move(*reader);
    }
    auto more = c.reader->Next(&c.head, &c.head_end);
    if (more.ok() && *more) {
      c.has_head = true;
      c.out->entries++;
      c.out->max_stamp = std::max(c.out->max_stamp, c.head.stamp);
      return;
    }
    if (!more.ok()) {
      spdlog::error("kvfs: journal {}: {}", c.rf.file.path, more.status().ToString());
      c.rf.status = more.status();
    }
    CloseFile(c);
  }
}

// The ops of a batch that found no name (ApplyResult::no_target), with their node, for a later retry.
void KeepOrphans(const std::vector<ApplyOp>& ops, const ApplyResult& r, const std::string& node,
                 std::vector<ApplyOp>* orphans) {
  for (size_t i : r.no_target) {
    if (i >= ops.size()) continue;
    orphans->push_back(ops[i]);
    if (orphans->back().node.empty()) orphans->back().node = node;
  }
}

// An absolute path below the root ("/a/b"), as a record of a directory rename names.
bool RecordPathOk(const std::string& p) {
  if (p.size() < 2 || p[0] != '/' || p.back() == '/') return false;
  return p.find("//") == std::string::npos && p.find('\0') == std::string::npos;
}

// What a replay of one node reads: its files, and whether it starts from a snapshot.
struct NodePlan {
  bool exists = false;  // the node directory exists
  NodeFiles nf;
  bool want_snapshot = false;
  // The snapshots ApplyNewestSnapshot may choose from: nf.snapshots[0, usable) (CollectSnapshotRecords
  // leaves out the newer ones that did not verify).
  size_t usable = 0;
  // The records the chosen snapshot holds (the node's own and the peers' it applied): its names, and
  // those of the journal tail written after it, already reflect them.
  DirRenameKeys reflected;
  // The node's own records of directory renames and exchanges that another snapshot holds and its own
  // does not: its journal tail still has the RENAME or EXCHANGE entry, which then moves nothing (an
  // EXCHANGE whose record the index holds is skipped: the other snapshot's names are swapped already; a
  // RENAME finds its destination there and stays put), so the node's entries before that entry (its
  // snapshot's and its tail's up to it) are moved by the record instead (dir_redirect.h own_pending).
  // Before, for a rename, they stayed under the old path beside the renamed directory.
  DirRenameKeys pending;
};

// Lists the node's files and decides whether the replay starts from a snapshot: a replay from the
// beginning starts from the newest usable one; a replay from a position uses one only if the journal
// file at that position is gone (retired meanwhile) and the newest snapshot covers past it.
Status PlanNode(Env* env, const std::string& backing, const ReplaySource& src, NodePlan* plan) {
  Status s = ListNodeFiles(env, NodeDirPath(backing, src.node), &plan->nf);
  if (s.IsNotFound()) return Status::OK();
  KVFS_RETURN_IF_ERROR(s);
  plan->exists = true;
  const NodeFiles& nf = plan->nf;
  const JournalPosition& from = src.from;
  const bool from_start = from == JournalPosition{};
  const auto from_key = std::make_pair(from.generation, from.file_number);
  plan->want_snapshot = !nf.snapshots.empty() && from_start;
  if (!nf.snapshots.empty() && !from_start) {
    const bool present = std::any_of(nf.journals.begin(), nf.journals.end(), [&](const JournalFile& f) {
      return std::make_pair(f.generation, f.number) == from_key;
    });
    plan->want_snapshot =
        !present && std::make_pair(nf.snapshots.back().generation, nf.snapshots.back().number) > from_key;
  }
  plan->usable = nf.snapshots.size();
  return Status::OK();
}

// Chooses the snapshot the replay of a node will apply (ApplyNewestSnapshot's choice: the newest that
// verifies) and collects its records of directory renames (RENAME entries, which a writer puts first).
// Snapshots newer than the chosen one are left out (plan->usable; reported as bad, as
// ApplyNewestSnapshot reports them). Nothing is applied.
Status CollectSnapshotRecords(Env* env, const std::string& node, NodePlan* plan, ReplayNodeResult* out,
                              std::vector<DirRenameRecord>* records) {
  const auto& snaps = plan->nf.snapshots;
  while (plan->usable > 0) {
    const SnapshotFile& sf = snaps[plan->usable - 1];
    std::vector<DirRenameRecord> found;
    bool stopped = false;
    Status s = ReadSnapshot(env, sf.path, node, [&](const JournalEntry& e) -> Status {
      if (e.op != JournalOp::kRename) {
        stopped = true;  // past the records
        return Status::Busy("records read");
      }
      // A record the index would refuse (ApplyOp kDirRenameRecord: stamp 0, a path that is not
      // absolute, the root) redirects nothing either.
      if (e.stamp == 0 || e.path == e.path2 || !RecordPathOk(e.path) || !RecordPathOk(e.path2)) {
        LogLimited(spdlog::level::warn, "snapshot-bad-dir-rename", "kvfs: snapshot {}: skipping a bad directory "
                   "rename record '{}' -> '{}'", sf.path, e.path, e.path2);
        return Status::OK();
      }
      const std::string& by = e.location.segment.node.empty() ? node : e.location.segment.node;
      if (!ValidateNodeId(by).ok()) {
        LogLimited(spdlog::level::warn, "snapshot-bad-dir-rename", "kvfs: snapshot {}: skipping a directory "
                   "rename record of invalid node id '{}'", sf.path, by);
        return Status::OK();
      }
      found.push_back(DirRenameRecord{e.path, e.path2, e.stamp, by, IsExchangeRecord(e)});
      return Status::OK();
    });
    if (s.ok() || stopped) {
      for (const auto& r : found) plan->reflected.emplace(r.stamp, r.node);
      records->insert(records->end(), found.begin(), found.end());
      return Status::OK();
    }
    spdlog::error("kvfs: snapshot {} not used: {}", sf.path, s.ToString());
    if (out) out->bad_snapshots.emplace_back(sf.path, s);
    plan->usable--;
  }
  return Status::OK();
}

// Applies the snapshot a replay of `node` starts from (if any) and lists what is left to read after it.
// records: the directory renames every applied op is redirected by (dir_redirect.h).
Status PrepareNode(Env* env, const ReplaySource& src, NodePlan& plan, IndexDb* index,
                   const DirRenameSet& records, NodeCursor* c, std::vector<ApplyOp>* orphans) {
  ReplayNodeResult* out = src.out;
  const std::string& node = src.node;
  const JournalPosition& from = src.from;
  c->node = node;
  c->out = out;
  if (!plan.exists) return Status::OK();
  NodeFiles& nf = plan.nf;
  std::vector<JournalFile> files = std::move(nf.journals);
  const bool from_start = from == JournalPosition{};
  const bool want_snapshot = plan.want_snapshot;
  JournalPosition start_at = from;
  const SnapshotFile* used = nullptr;
  const std::vector<SnapshotFile> candidates(nf.snapshots.begin(), nf.snapshots.begin() + plan.usable);
  if (want_snapshot) {
    KVFS_RETURN_IF_ERROR(ApplyNewestSnapshot(
        env, node, candidates,
        [&](std::vector<ApplyOp>* ops, bool) -> Status {
          if (ops->empty()) return Status::OK();
          for (auto& op : *ops) out->redirected += records.Redirect(&op, node, &plan.reflected, &plan.pending) ? 1 : 0;
          auto r = index->ApplyBatch(*ops, node);
          if (!r.ok()) return r.status();
          out->unresolved_deltas += r->unresolved_deltas;
          KeepOrphans(*ops, *r, node, orphans);
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
  CollectNodeCuts(env, node, files, &c->cut_at);
  if (src.extra_cuts) {
    for (const auto& [key, off] : *src.extra_cuts) {
      auto it = c->cut_at.find(key);
      c->cut_at[key] = it == c->cut_at.end() ? off : std::min(it->second, off);
    }
  }
  c->files = std::move(files);
  c->start_at = start_at;
  return Status::OK();
}

}  // namespace

Status ReplayNodes(Env* env, const std::string& backing, std::span<const ReplaySource> sources, IndexDb* index) {
  if (sources.empty()) return Status::OK();
  // 1. Every node's snapshot: a node's snapshot is its namespace at one moment, older than each entry
  //    of its journal tail.
  std::vector<NodeCursor> cursors(sources.size());
  // SETATTR / XATTR ops that found no name when applied (a snapshot's change to a peer's file whose
  // binding comes later, or lies under a directory renamed later): applied again at the end.
  std::vector<ApplyOp> orphans;
  // 0. The records of directory renames in the snapshots that will be applied: every op applied below
  //    (snapshot entries and journal-tail entries) that is older than a record and names its source or
  //    a path under it is redirected to where that rename moved it, as the live nodes did
  //    (index/dir_redirect.h). A snapshot holds the result of its node's renames but not the RENAME
  //    entries, which lie behind it: without the records a peer's older entry re-created the old path.
  //    A node's entries are not redirected by the records its own snapshot holds (its own renames, and
  //    the peers' it had applied when it checkpointed): its names already reflect them.
  std::vector<NodePlan> plans(sources.size());
  std::vector<DirRenameRecord> records;
  for (size_t i = 0; i < sources.size(); i++) {
    KVFS_RETURN_IF_ERROR(PlanNode(env, backing, sources[i], &plans[i]));
    if (plans[i].want_snapshot) {
      KVFS_RETURN_IF_ERROR(CollectSnapshotRecords(env, sources[i].node, &plans[i], sources[i].out, &records));
    }
  }
  const DirRenameSet renames(std::move(records));
  for (size_t i = 0; i < sources.size(); i++) {
    for (const auto& r : renames.records()) {
      const auto k = std::make_pair(r.stamp, r.node);
      if (r.node == sources[i].node && !plans[i].reflected.count(k)) plans[i].pending.insert(k);
    }
  }
  for (size_t i = 0; i < sources.size(); i++) {
    KVFS_RETURN_IF_ERROR(PrepareNode(env, sources[i], plans[i], index, renames, &cursors[i], &orphans));
  }
  for (auto& c : cursors) Advance(env, c);
  // 2. The journal tails, merged by stamp: each step takes the head entry of the journal with the lowest
  //    (clock, node), where a journal's clock is the highest stamp taken from it so far or its head's
  //    (an entry that carries an older stamp, a MOVE, keeps its place in its own journal). Each
  //    journal's own order is kept, and an entry a node wrote after it applied a peer's entry (its HLC
  //    then exceeds that entry's stamp) comes after it, as on the live nodes.
  //    A MOVE carries its record's old stamp, so its place here (its journal's clock) may come before
  //    peers' entries its writer had applied when it wrote it: a peer's rename of the file (UNLINK and
  //    a PUT binding the record under the new name), or of a directory above it. The MOVE finds the
  //    file by its old record where its path does not reference it (index_apply.cc Move); and it is
  //    applied once more just before its journal's next entry that is not a MOVE, whose stamp covers
  //    everything the writer had applied (or at the end): a binding of the old record made in between
  //    follows it there, as on the writer. Before, such a binding kept the old record and the writer's
  //    DROP of its segment removed the file. The first application stays where it was: a peer's delta
  //    computed against the moved map after it applied the MOVE finds that map (format.md "Extent
  //    deltas"); applying it again changes nothing that no longer references the old record.
  auto key = [](const NodeCursor& c) { return std::max(c.clock, c.head.stamp); };
  std::vector<ApplyOp> ops;
  const std::string& batch_node = sources.front().node;
  auto flush = [&]() -> Status {
    std::vector<std::pair<std::string, std::string>> positions;
    for (auto& c : cursors) {
      if (c.last != JournalPosition{} && c.last != c.recorded) positions.emplace_back(c.node, c.last.ToString());
    }
    if (ops.empty() && positions.empty()) return Status::OK();
    auto r = index->ApplyBatch(ops, batch_node, positions);
    if (!r.ok()) return r.status();
    KeepOrphans(ops, *r, batch_node, &orphans);
    ops.clear();
    for (auto& c : cursors) c.recorded = c.last;
    for (auto& c : cursors) {
      auto it = r->unresolved_by_node.find(c.node);
      if (it != r->unresolved_by_node.end()) c.out->unresolved_deltas += it->second;
    }
    return Status::OK();
  };
  // A min-heap of (key, node, cursor index): a cursor's key changes only when it advances.
  using HeapItem = std::tuple<uint64_t, const std::string*, size_t>;
  auto later = [](const HeapItem& x, const HeapItem& y) {
    if (std::get<0>(x) != std::get<0>(y)) return std::get<0>(x) > std::get<0>(y);
    return *std::get<1>(x) > *std::get<1>(y);
  };
  std::priority_queue<HeapItem, std::vector<HeapItem>, decltype(later)> heap(later);
  for (size_t i = 0; i < cursors.size(); i++) {
    if (cursors[i].has_head) heap.emplace(key(cursors[i]), &cursors[i].node, i);
  }
  auto again = [&](NodeCursor& c) -> Status {
    for (auto& op : c.moves_again) {
      ops.push_back(std::move(op));
      if (ops.size() >= kReplayBatch) KVFS_RETURN_IF_ERROR(flush());
    }
    c.moves_again.clear();
    return Status::OK();
  };
  while (!heap.empty()) {
    NodeCursor& c = cursors[std::get<2>(heap.top())];
    heap.pop();
    c.clock = key(c);
    if (c.head.op != JournalOp::kMove) KVFS_RETURN_IF_ERROR(again(c));
    ApplyOp op;
    if (JournalEntryToApplyOp(c.head, &op)) {
      if (sources.size() > 1) op.node = c.node;
      NodePlan& plan = plans[&c - cursors.data()];
      c.out->redirected += renames.Redirect(&op, c.node, &plan.reflected, &plan.pending) ? 1 : 0;
      // The node's own rename or exchange reached: its later entries were written after it (not moved by it).
      if ((op.kind == ApplyOp::Kind::kExchange || op.kind == ApplyOp::Kind::kRename) && !plan.pending.empty()) {
        plan.pending.erase({op.stamp, c.node});
      }
      if (op.kind == ApplyOp::Kind::kMove) {
        c.moves_again.push_back(op);
        c.moves_again.back().move_at_path_only = true;  // what its record reached it moved the first time
      }
      ops.push_back(std::move(op));
    }
    c.last = c.head_end;
    Advance(env, c);
    if (c.has_head) heap.emplace(key(c), &c.node, &c - cursors.data());
    if (ops.size() >= kReplayBatch) KVFS_RETURN_IF_ERROR(flush());
  }
  for (auto& c : cursors) KVFS_RETURN_IF_ERROR(again(c));
  // Also positions past entries the index does not apply (CUTs) since the last batch: a replay from
  // them (Store::Open of a clean index) does not read them again.
  KVFS_RETURN_IF_ERROR(flush());
  if (!orphans.empty()) {
    // Last-writer-wins by stamp decides as always: a change older than what the name holds now is skipped.
    auto r = index->ApplyBatch(orphans, batch_node);
    if (!r.ok()) return r.status();
    spdlog::info("kvfs: replay: {} attribute/xattr change(s) found their name only later: {} applied now, {} "
                 "still without one", orphans.size(), r->applied, r->no_target.size());
  }
  uint64_t max_stamp = 0;
  for (const auto& c : cursors) max_stamp = std::max(max_stamp, c.out->max_stamp);
  if (max_stamp) KVFS_RETURN_IF_ERROR(index->SetHlcFloor(max_stamp));
  return Status::OK();
}

Status ReplayNode(Env* env, const std::string& backing, const std::string& node, IndexDb* index,
                  ReplayNodeResult* out, const JournalPosition& from, const JournalCuts* extra_cuts) {
  const ReplaySource src{node, from, extra_cuts, out};
  return ReplayNodes(env, backing, {&src, 1}, index);
}

Status ReplayAllNodes(Env* env, const std::string& backing, IndexDb* index,
                      std::map<std::string, ReplayNodeResult>* out) {
  auto nodes = ListNodes(env, backing);
  if (!nodes.ok()) return nodes.status();
  std::map<std::string, ReplayNodeResult> results;
  std::vector<ReplaySource> sources;
  for (const auto& node : *nodes) sources.push_back(ReplaySource{node, {}, nullptr, &results[node]});
  KVFS_RETURN_IF_ERROR(ReplayNodes(env, backing, sources, index));
  if (out) *out = std::move(results);
  return Status::OK();
}

}  // namespace kvfs
