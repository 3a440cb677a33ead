// Mount-time segment recovery: see recovery.h.
#include "engine/recovery.h"

#include <algorithm>
#include <map>
#include <set>
#include <memory>

#include <spdlog/spdlog.h>

#include "blockstore/node_dir.h"
#include "blockstore/segment_check.h"
#include "blockstore/segment_reader.h"
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

Status PlanLostRecordCuts(Env* env, const std::string& backing, const std::string& node, uint64_t generation,
                          LostRecordPlan* out) {
  std::vector<JournalFile> files;
  Status lj = ListJournalFiles(env, NodeDirPath(backing, node), &files);
  if (lj.IsNotFound()) return Status::OK();
  KVFS_RETURN_IF_ERROR(lj);
  uint64_t g = 0;
  bool any = false;
  for (const auto& f : files) {
    if (f.generation < generation && (!any || f.generation > g)) g = f.generation, any = true;
  }
  if (!any) return Status::OK();
  // Suspect segments: g's segment files without a valid seal on disk.
  std::vector<std::string> names;
  Status ls = env->GetChildren(SegmentDirPath(backing, node), &names);
  if (ls.IsNotFound()) return Status::OK();
  KVFS_RETURN_IF_ERROR(ls);
  std::map<uint64_t, std::shared_ptr<BackingFile>> suspect;  // seq -> open file
  std::set<uint64_t> present;                                // seqs of g's segment files on the export
  for (const auto& n : names) {
    SegmentId id;
    id.node = node;
    if (!ParseSegmentFileName(n, &id.generation, &id.seq) || id.generation != g) continue;
    present.insert(id.seq);
    auto f = env->Open(SegmentFilePath(backing, id), OpenOptions{});
    if (!f.ok()) {
      if (f.status().IsNotFound()) continue;
      return f.status();
    }
    auto size = (*f)->Size();
    if (!size.ok()) return size.status();
    auto footer = ReadFooter(f->get(), *size);
    if (footer.ok()) continue;  // sealed: fdatasync'd at the seal
    if (!footer.status().IsNotFound() && !footer.status().IsCorruption()) return footer.status();
    suspect[id.seq] = std::shared_ptr<BackingFile>(std::move(*f));
  }
  JournalCuts journal_cuts;
  CollectNodeCuts(env, node, files, &journal_cuts);
  // Segments of g that g dropped (DROP entries): their files are gone legitimately. A segment of g that
  // is neither on the export nor dropped was created after the last durable round and its name was lost.
  std::set<uint64_t> dropped;
  for (const auto& f : files) {
    if (f.generation != g) continue;
    JournalReaderOptions ro;
    auto c = journal_cuts.find({f.generation, f.number});
    if (c != journal_cuts.end()) ro.limit = c->second;
    std::vector<std::pair<JournalEntry, JournalPosition>> entries;
    JournalReadReport rep;
    if (!ReadJournalFile(env, f.path, ro, &entries, &rep).ok()) continue;
    for (const auto& [e, pos] : entries) {
      if (e.op == JournalOp::kDrop && e.segment.node == node && e.segment.generation == g) dropped.insert(e.segment.seq);
    }
  }
  auto missing = [&](uint64_t seq) { return !present.count(seq) && !dropped.count(seq); };
  std::map<std::pair<uint64_t, uint64_t>, bool> verified;  // (seq, record offset) -> record intact
  std::vector<char> buf;
  auto intact = [&](const Location& loc) -> Result<bool> {
    const auto key = std::make_pair(loc.segment.seq, loc.record_offset);
    auto it = verified.find(key);
    if (it != verified.end()) return it->second;
    BackingFile* file = suspect.at(loc.segment.seq).get();
    out->records_checked++;
    bool ok = true;
    RecordMeta meta;
    constexpr size_t kPiece = 4u << 20;
    buf.resize(std::min<uint64_t>(kPiece, std::max<uint64_t>(loc.length, 1)));
    for (uint64_t off = 0; ok && (off < loc.length || off == 0); off += kPiece) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(kPiece, loc.length - off));
      size_t got = 0;
      Status s = off == 0 ? ReadValue(file, loc, 0, len, buf.data(), &got, &meta)
                          : ReadValue(file, meta, off, len, buf.data(), &got);
      if (s.IsCorruption() || (s.ok() && got != len)) {
        ok = false;
      } else if (!s.ok()) {
        return s;  // a read failure is never taken for a lost record
      }
      if (loc.length == 0) break;
    }
    verified[key] = ok;
    return ok;
  };

  bool cutting = false;
  for (const auto& f : files) {
    if (f.generation != g) continue;
    const auto key = std::make_pair(f.generation, f.number);
    const FileRef ref{FileRef::Kind::kJournal, node, f.generation, f.number};
    if (cutting) {
      // A later file of g: nothing of it stays (its header record stays readable).
      JournalFileHeader h;
      h.generation = f.generation;
      h.file_number = f.number;
      h.node = node;
      const uint64_t header_end = kJournalFragmentHeaderSize + EncodeJournalFileHeader(h).size();
      JournalReaderOptions ro;
      auto c = journal_cuts.find(key);
      if (c != journal_cuts.end()) ro.limit = c->second;
      std::vector<std::pair<JournalEntry, JournalPosition>> entries;
      JournalReadReport rep;
      if (ReadJournalFile(env, f.path, ro, &entries, &rep).ok()) out->entries_dropped += entries.size();
      if (c == journal_cuts.end() || c->second > header_end) {
        out->cuts.push_back(JournalEntry::Cut(ref, header_end, 0));
        out->journal_cuts[key] = header_end;
      }
      continue;
    }
    JournalReaderOptions ro;
    ro.skip_damage = true;
    auto c = journal_cuts.find(key);
    if (c != journal_cuts.end()) ro.limit = c->second;
    auto reader = JournalReader::Open(env, f.path, 0, ro);
    if (!reader.ok()) continue;  // the replay reports it
    JournalEntry e;
    JournalPosition end;
    uint64_t start = 0;  // start of the next entry: the end of the previous one (header end at first)
    bool first = true;
    for (;;) {
      auto more = (*reader)->Next(&e, &end);
      if (!more.ok() || !*more) break;
      if (first) {
        JournalFileHeader h = (*reader)->report().header;
        start = kJournalFragmentHeaderSize + EncodeJournalFileHeader(h).size();
        first = false;
      }
      if (cutting) {
        out->entries_dropped++;
        continue;
      }
      // The first record of the entry (its location, or any of its extent map's) in a suspect or missing
      // segment of g that did not reach stable storage.
      Location bad;
      if (e.op == JournalOp::kPut || e.op == JournalOp::kMove || e.op == JournalOp::kRename) {
        for (const Location& rec : e.ContentRecords()) {
          if (rec.segment.node != node || rec.segment.generation != g) continue;
          const bool gone = missing(rec.segment.seq);
          if (!gone && !suspect.count(rec.segment.seq)) continue;
          Result<bool> ok = false;
          if (!gone) ok = intact(rec);
          if (!ok.ok()) return ok.status();
          if (!*ok) {
            bad = rec;
            break;
          }
        }
      }
      if (!bad.empty()) {
        spdlog::error("kvfs: journal {}: {} {} points at a record that did not reach stable storage (segment "
                      "{}-{} offset {}: a power cut after a group commit that did not sync); cutting the journal "
                      "at offset {}: this entry and every later one of generation {} are dropped",
                      f.path, JournalOpName(e.op), e.path, g, bad.segment.seq, bad.record_offset,
                      start, g);
        out->cuts.push_back(JournalEntry::Cut(ref, start, 0));
        out->journal_cuts[key] = start;
        cutting = true;
        out->entries_dropped++;
        continue;
      }
      start = end.offset;
    }
  }
  if (out->entries_dropped > 0) {
    spdlog::error("kvfs: node {}: {} journal entr{} of generation {} dropped (their records, or an earlier "
                  "entry's, were lost to a power cut before the durability interval's sync)",
                  node, out->entries_dropped, out->entries_dropped == 1 ? "y" : "ies", g);
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
      // Reads do not use the header: each record carries its own checksums (segment_check.h).
      spdlog::error("kvfs: segment {}: damaged header ({}); its {} records are read and checked one by one "
                    "(kvfs-fsck reports it)", path, sc.header_detail, sc.records.size());
    }
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
