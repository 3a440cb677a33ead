// kvfs-fsck's repair of a taken-over node and the index rebuild (index/fsck_internal.h; the repair
// steps: index/fsck.h).
#include <cstdint>
#include <string>
#include <vector>

#include "blockstore/format.h"
#include "blockstore/segment_reader.h"
#include "index/fsck_internal.h"
#include "index/hlc.h"
#include "index/index_db.h"
#include "index/journal.h"
#include "index/journal_format.h"
#include "index/replay.h"

namespace kvfs::fsck_internal {

Status Fsck::PhysicalSeal(SegScan* s) {
  std::vector<format::FooterEntry> entries;
  for (const auto& [off, r] : s->records) {
    format::FooterEntry e;
    e.record_offset = off;
    e.value_offset = r.value_offset;
    e.value_length = r.value_len;
    e.stamp = r.stamp;
    e.path_hash = format::Hash64(r.path.data(), r.path.size());
    entries.push_back(e);
  }
  const uint64_t count = entries.size();
  const uint64_t fbytes = format::FooterBytes(count);
  std::string buf(fbytes + format::kTrailerBlockSize, '\0');
  for (uint64_t i = 0; i < count; ++i) format::EncodeFooterEntry(entries[i], buf.data() + i * format::kFooterEntrySize);
  format::Trailer t;
  t.footer_offset = s->tail_start;
  t.record_count = count;
  t.footer_checksum = format::Hash64(buf.data(), count * format::kFooterEntrySize);
  t.nonce = s->header.nonce;
  format::EncodeTrailerBlock(t, buf.data() + fbytes);
  OpenOptions o;
  o.write = true;  // no create, no truncate: append after the last record
  auto f = env_->Open(s->path, o);
  if (!f.ok()) return f.status();
  KVFS_RETURN_IF_ERROR((*f)->Write(s->tail_start, buf.data(), buf.size()));
  KVFS_RETURN_IF_ERROR((*f)->Sync());
  // Verify it reads back as sealed.
  auto footer = ReadFooter(f->get(), s->tail_start + buf.size());
  if (!footer.ok()) return Status::Corruption("physical seal of " + s->path + " did not verify: " + footer.status().ToString());
  s->sealed = true;
  return Status::OK();
}

Status Fsck::Repair(const std::string& node, NodeDir* nd, Analysis* a) {
  const std::string& reason = nd->takeover_reason();
  const bool provably_dead = reason == "fresh" || reason == "released" || reason.rfind("owner pid", 0) == 0;
  HybridClock hlc;
  hlc.SetFloor(a->max_stamp);
  std::vector<JournalEntry> cuts, seals, unlinks;
  std::vector<FsckFinding*> done;
  auto& node_scans = a->scans[node];
  for (auto& f : a->findings) {
    if (f.node != node || f.severity != FsckSeverity::kProblem || !f.repairable) continue;
    switch (f.kind) {
      case FsckKind::kJournalTornTail: {
        uint64_t g = 0, n = 0;
        ParseJournalFileName(stdfs::path(f.file).filename().string(), &g, &n);
        cuts.push_back(JournalEntry::Cut(FileRef{FileRef::Kind::kJournal, node, g, n}, f.offset, hlc.Now()));
        done.push_back(&f);
        break;
      }
      case FsckKind::kSegmentTornTail:
      case FsckKind::kSegmentBadTrailer: {
        uint64_t g = 0, q = 0;
        ParseSegmentFileName(stdfs::path(f.file).filename().string(), &g, &q);
        cuts.push_back(JournalEntry::Cut(FileRef{FileRef::Kind::kSegment, node, g, q}, f.offset, hlc.Now()));
        done.push_back(&f);
        break;
      }
      case FsckKind::kUnsealedSegment: {
        uint64_t g = 0, q = 0;
        ParseSegmentFileName(stdfs::path(f.file).filename().string(), &g, &q);
        SegScan& s = node_scans[{g, q}];
        const bool clean = s.header_ok && !s.torn && s.damaged.empty() && s.cut == UINT64_MAX && !s.trailer_bad &&
                           s.tail_start == s.size;
        if (clean && provably_dead && opts_.append_in_place) {
          KVFS_RETURN_IF_ERROR(PhysicalSeal(&s));
          f.repair = "SEAL (footer + trailer appended, SEAL entry)";
        } else {
          f.repair = "SEAL entry only (logical: " +
                     std::string(!clean               ? "the segment does not end cleanly"
                                 : !provably_dead     ? "previous owner only presumed dead"
                                                      : "an object is never appended to") +
                     ")";
        }
        seals.push_back(JournalEntry::Seal(SegmentId{node, g, q}, hlc.Now()));
        done.push_back(&f);
        break;
      }
      case FsckKind::kSealNotJournaled: {
        uint64_t g = 0, q = 0;
        ParseSegmentFileName(stdfs::path(f.file).filename().string(), &g, &q);
        seals.push_back(JournalEntry::Seal(SegmentId{node, g, q}, hlc.Now()));
        done.push_back(&f);
        break;
      }
      case FsckKind::kDanglingEntry:
      case FsckKind::kStaleTempName: {
        const uint64_t st = a->path_stamp[f.path];
        unlinks.push_back(JournalEntry::Unlink(f.path, st + 1));
        done.push_back(&f);
        break;
      }
      case FsckKind::kStaleTempFile: {
        Status s = env_->Remove(f.file);
        if (!s.ok() && !s.IsNotFound()) return s;
        f.repaired = true;
        break;
      }
      default:
        break;
    }
  }
  if (!cuts.empty() || !seals.empty() || !unlinks.empty()) {
    JournalWriterOptions jo;
    jo.env = env_;
    jo.dir = nd->dir();
    jo.node = node;
    jo.generation = nd->generation();
    jo.first_file_number = 0;
    auto jw = JournalWriter::Open(jo);
    if (!jw.ok()) return jw.status();
    for (const auto* v : {&cuts, &seals, &unlinks}) {
      for (const auto& e : *v) (*jw)->Append(e);  // CUTs first: replay reads them at the head
    }
    KVFS_RETURN_IF_ERROR((*jw)->Sync());
    a->summaries[node].repair_generation = nd->generation();
  }
  for (auto* f : done) f->repaired = true;
  return Status::OK();
}

Status Fsck::RebuildInto(const std::string& dir, const std::string& node, uint64_t* files) {
  KVFS_RETURN_IF_ERROR(IndexDb::Destroy(dir));
  IndexDbOptions io;
  io.dir = dir;
  io.node_id = node;
  auto idx = IndexDb::Open(io);
  if (!idx.ok()) return idx.status();
  Progress("rebuilding the index from " + std::to_string(all_nodes_.size()) + " node(s)", 0, 1);
  std::map<std::string, ReplayNodeResult> results;
  std::vector<ReplaySource> sources;
  for (const auto& n : all_nodes_) sources.push_back(ReplaySource{n, {}, nullptr, &results[n]});
  KVFS_RETURN_IF_ERROR(ReplayNodes(env_, opts_.backing_dir, sources, idx->get()));
  *files = (*idx)->GetStats().files;
  {
    // The index belongs to this backing store (its FORMAT id): the mount checks it (engine/store_open.cc).
    std::string text;
    KVFS_RETURN_IF_ERROR(env_->ReadFileToString(FormatFilePath(opts_.backing_dir), &text));
    auto fi = FormatInfo::Parse(text);
    if (!fi.ok()) return fi.status();
    if (!fi->id.empty()) KVFS_RETURN_IF_ERROR((*idx)->SetBackingId(fi->id));
  }
  KVFS_RETURN_IF_ERROR((*idx)->MarkClean());
  return (*idx)->Close();
}

}  // namespace kvfs::fsck_internal
