// kvfs-fsck's check: the analysis pass (index/fsck_internal.h; what it reports: index/fsck.h).
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "blockstore/format.h"
#include "blockstore/segment_check.h"
#include "index/fsck_internal.h"
#include "index/hlc.h"
#include "index/journal.h"
#include "index/journal_format.h"
#include "index/replay.h"
#include "index/snapshot.h"

namespace kvfs::fsck_internal {
namespace {

bool EndsWith(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

}  // namespace

OwnerState Fsck::ReadOwner(const std::string& node) {
  OwnerState o;
  std::string text;
  Status r = env_->ReadFileToString(OwnerFilePath(opts_.backing_dir, node), &text);
  if (r.ok()) {
    auto p = OwnerRecord::Parse(text);
    if (p.ok()) {
      o.has = true;
      o.rec = *p;
    } else {
      o.unreadable = true;
    }
  }
  if (env_->ReadFileToString(HeartbeatFilePath(opts_.backing_dir, node), &text).ok()) {
    auto hb = HeartbeatRecord::Parse(text);
    if (hb.ok()) o.hb_age_ns = WallClockNs() - hb->time_ns;
  }
  const HostIdentity self = opts_.self ? *opts_.self : HostIdentity::Current();
  auto alive = opts_.process_alive ? opts_.process_alive : LocalProcessAlive;
  const int64_t timeout_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(opts_.heartbeat_timeout).count();
  std::string hb = o.hb_age_ns ? "heartbeat " + std::to_string(*o.hb_age_ns / 1000000000) + " s old"
                               : "no heartbeat";
  if (!o.has) {
    o.live = o.unreadable && o.hb_age_ns && *o.hb_age_ns <= timeout_ns;
    o.desc = o.unreadable ? "unreadable OWNER, " + hb : "no owner";
    return o;
  }
  o.desc = "host=" + o.rec.owner.host + " pid=" + std::to_string(o.rec.owner.pid) +
           " generation=" + std::to_string(o.rec.generation);
  if (o.rec.released) {
    o.desc += " released";
  } else if (o.rec.owner.host == self.host && o.rec.owner.boot_id == self.boot_id && !alive(o.rec.owner)) {
    o.desc += " dead (pid gone)";
  } else if (o.rec.owner.host == self.host && o.rec.owner.boot_id == self.boot_id) {
    o.live = true;  // a process running on this host (pid alive): live whatever its heartbeat's age
    o.desc += " LIVE (running on this host, " + hb + ")";
  } else if (!o.hb_age_ns || *o.hb_age_ns > timeout_ns) {
    o.desc += " dead (" + hb + ")";
  } else {
    o.live = true;
    o.desc += " LIVE (" + hb + ")";
  }
  return o;
}

Status Fsck::ScanSegment(const std::string& node, uint64_t gen, uint64_t seq, uint64_t cut, SegScan* s) {
  s->id = SegmentId{node, gen, seq};
  s->path = SegmentFilePath(opts_.backing_dir, s->id);
  auto f = env_->Open(s->path, OpenOptions{});
  if (!f.ok()) return f.status();
  return CheckSegmentFile(f->get(), cut, opts_.verify_data, s);
}

Status Fsck::Analyze(const std::map<std::string, uint64_t>& owned, Analysis* a) {
  // 1. Replay every node's journals into a scratch index (cross-node references count).
  const char* tmpdir = getenv("TMPDIR");
  std::string tmpl = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/kvfs-fsck-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return Status::IOError("mkdtemp " + tmpl, errno);
  const std::string scratch = buf.data();
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      stdfs::remove_all(dir, ec);
    }
  } cleanup{scratch};
  std::map<std::string, ReplayNodeResult> replays;
  std::map<std::string, DumpEntry> dump;
  {
    IndexDbOptions io;
    io.dir = scratch + "/index";
    io.node_id = opts_.index_node.empty() ? "kvfs-fsck" : opts_.index_node;
    auto idx = IndexDb::Open(io);
    if (!idx.ok()) return idx.status();
    Progress("replaying the journals of " + std::to_string(all_nodes_.size()) + " node(s)", 0, 1);
    std::vector<ReplaySource> sources;
    for (const auto& node : all_nodes_) sources.push_back(ReplaySource{node, {}, nullptr, &replays[node]});
    KVFS_RETURN_IF_ERROR(ReplayNodes(env_, opts_.backing_dir, sources, idx->get()));
    auto d = (*idx)->DumpByPath();
    if (!d.ok()) return d.status();
    dump = std::move(*d);
    (*idx)->Close();
  }

  // 2. References, SEAL/DROP sets, path stamps and CUTs from every node's journals.
  std::set<RecKey> refs;
  std::set<SegmentId> seals, drops;
  std::map<std::string, JournalCuts> seg_cuts;
  for (const auto& node : all_nodes_) {
    std::vector<JournalFile> files;
    Status s = ListJournalFiles(env_, NodeDirPath(opts_.backing_dir, node), &files);
    if (s.IsNotFound()) continue;
    KVFS_RETURN_IF_ERROR(s);
    // The snapshot the replay used stands for the journal files it covers (some may be retired).
    const auto& used_snapshot = replays[node].snapshot;
    if (!used_snapshot.empty()) {
      Status rs = ReadSnapshot(env_, used_snapshot, node, [&](const JournalEntry& e) {
        a->max_stamp = std::max(a->max_stamp, e.stamp);
        switch (e.op) {
          case JournalOp::kPut:
            for (const Location& l : e.Records())  // its location, or every record of its extent map
              refs.emplace(l.segment.node, l.segment.generation, l.segment.seq, l.record_offset);
            a->path_stamp[e.path] = std::max(a->path_stamp[e.path], e.stamp);
            break;
          case JournalOp::kSymlink: a->path_stamp[e.path] = std::max(a->path_stamp[e.path], e.stamp); break;
          case JournalOp::kSeal: seals.insert(e.segment); break;
          case JournalOp::kDrop: drops.insert(e.segment); break;
          case JournalOp::kCut:  // a segment CUT whose journal file may be retired (snapshot.h)
            if (e.cut_file.kind == FileRef::Kind::kSegment && e.cut_file.node == node) {
              auto& cuts = seg_cuts[node];
              const auto key = std::make_pair(e.cut_file.generation, e.cut_file.number);
              auto it = cuts.find(key);
              cuts[key] = it == cuts.end() ? e.cut_offset : std::min(it->second, e.cut_offset);
            }
            break;
          default: break;
        }
        return Status::OK();
      });
      if (rs.IsIOError()) return rs;
    }
    JournalCuts jcuts;
    CollectNodeCuts(env_, node, files, &jcuts, &seg_cuts[node]);
    for (const auto& f : files) {
      JournalReaderOptions ro;
      auto c = jcuts.find({f.generation, f.number});
      if (c != jcuts.end()) ro.limit = c->second;
      std::vector<std::pair<JournalEntry, JournalPosition>> entries;
      JournalReadReport rep;
      Status rs = ReadJournalFile(env_, f.path, ro, &entries, &rep);
      if (rs.IsIOError()) return rs;
      for (const auto& [e, pos] : entries) {
        a->max_stamp = std::max(a->max_stamp, e.stamp);
        auto ref = [&](const Location& l) {
          if (!l.empty()) refs.emplace(l.segment.node, l.segment.generation, l.segment.seq, l.record_offset);
        };
        auto bind = [&](const std::string& p) {
          auto& st = a->path_stamp[p];
          st = std::max(st, e.stamp);
        };
        switch (e.op) {
          case JournalOp::kPut:
            for (const Location& l : e.Records()) ref(l);
            bind(e.path);
            break;
          case JournalOp::kSymlink: bind(e.path); break;
          case JournalOp::kRename: ref(e.location); bind(e.path2); break;
          case JournalOp::kExchange: bind(e.path); bind(e.path2); break;
          case JournalOp::kMove: ref(e.location); ref(e.old_location); bind(e.path); break;
          case JournalOp::kSeal: seals.insert(e.segment); break;
          case JournalOp::kDrop: drops.insert(e.segment); break;
          default: break;
        }
      }
      if (std::find(selected_.begin(), selected_.end(), node) != selected_.end()) {
        auto& sum = a->summaries[node];
        sum.journal_files++;
        sum.journal_entries += rep.entries;
        sum.journal_bytes += rep.file_size;
      }
    }
  }

  // 3. Per selected node: owner, temp files, journal findings, segment scans.
  uint64_t ni = 0;
  for (const auto& node : selected_) {
    auto& sum = a->summaries[node];
    sum.node = node;
    const std::string dir = NodeDirPath(opts_.backing_dir, node);
    OwnerState own = ReadOwner(node);
    auto ow = owned.find(node);
    uint64_t current_gen = own.has ? own.rec.generation : 0;
    bool live = own.live;
    if (ow != owned.end()) {
      live = false;
      current_gen = ow->second;
      sum.owner = "owned by this kvfs-fsck (generation " + std::to_string(ow->second) + ")";
    } else {
      sum.owner = own.desc;
    }
    sum.live = live;
    sum.owner_generation = current_gen;
    auto add = [&](FsckFinding f) {
      f.node = node;
      a->findings.push_back(std::move(f));
    };

    // Stale temp files.
    for (const std::string& d : {dir, SegmentDirPath(opts_.backing_dir, node)}) {
      std::vector<std::string> names;
      Status s = env_->GetChildren(d, &names);
      if (s.IsNotFound()) continue;
      KVFS_RETURN_IF_ERROR(s);
      std::sort(names.begin(), names.end());
      for (const auto& n : names) {
        if (!EndsWith(n, ".tmp")) continue;
        FsckFinding f;
        f.kind = FsckKind::kStaleTempFile;
        f.file = d + "/" + n;
        // A live owner may be in the middle of its WriteFileAtomic right now.
        f.severity = live ? FsckSeverity::kInfo : FsckSeverity::kProblem;
        f.detail = live ? "temp file of a live owner (may be in use)" : "stale temp file";
        f.repairable = !live;
        f.repair = "remove";
        add(std::move(f));
      }
    }

    // Snapshots (as the replay saw them).
    const auto& rr = replays[node];
    {
      NodeFiles nf;
      Status ls = ListNodeFiles(env_, dir, &nf);
      if (!ls.ok() && !ls.IsNotFound()) return ls;
      sum.snapshots = nf.snapshots.size();
      sum.snapshot = rr.snapshot;
      sum.snapshot_entries = rr.snapshot_entries;
    }
    for (const auto& [path, st] : rr.bad_snapshots) {
      if (st.IsIOError()) return st;
      FsckFinding f;
      f.kind = FsckKind::kSnapshotDamaged;
      f.file = path;
      f.detail = st.ToString() + (rr.snapshot.empty() ? "" : "; using " + rr.snapshot);
      add(std::move(f));
    }
    sum.unresolved_deltas = rr.unresolved_deltas;
    if (rr.unresolved_deltas > 0) {
      // Not damage by itself: the writer's next whole PUT of the path binds it again. Each such entry
      // applied as an UNLINK at its stamp (the file reads as absent, a cache miss, never other bytes).
      FsckFinding f;
      f.kind = FsckKind::kUnresolvedDelta;
      f.severity = FsckSeverity::kInfo;
      f.file = dir;
      f.detail = std::to_string(rr.unresolved_deltas) +
                 " extent delta PUT(s) whose base this node's journals and snapshot do not hold (a lost or "
                 "damaged entry before them): applied as UNLINKs, those files read as absent";
      add(std::move(f));
    }
    if (rr.journal_gap) {
      FsckFinding f;
      f.kind = FsckKind::kJournalGap;
      f.file = dir;
      f.detail = "journal files were retired and no usable snapshot covers them: entries only they held are lost";
      add(std::move(f));
    }

    // Journals (as the replay saw them).
    uint64_t last_gen_file = 0;
    for (const auto& rf : rr.files) {
      if (rf.file.generation == current_gen) last_gen_file = std::max(last_gen_file, rf.file.number);
    }
    for (const auto& rf : rr.files) {
      const auto& rep = rf.report;
      FsckFinding base;
      base.file = rf.file.path;
      if (!rf.opened || !rf.status.ok()) {
        if (rf.status.IsIOError()) return rf.status;
        FsckFinding f = base;
        f.kind = FsckKind::kJournalUnreadable;
        f.detail = rf.status.ToString();
        add(std::move(f));
        if (!rf.opened) continue;
      }
      if (rep.corrupt_regions > 0) {
        FsckFinding f = base;
        f.kind = FsckKind::kJournalDamaged;
        f.bytes = rep.corrupt_bytes;
        f.detail = std::to_string(rep.corrupt_regions) + " damaged region(s), " + std::to_string(rep.corrupt_blocks) +
                   " block(s), " + std::to_string(rep.corrupt_bytes) + " bytes skipped; their entries are lost";
        add(std::move(f));
      }
      if (rep.bad_entries > 0) {
        FsckFinding f = base;
        f.kind = FsckKind::kJournalBadEntry;
        f.detail = std::to_string(rep.bad_entries) + " checksummed record(s) that do not decode (skipped)";
        add(std::move(f));
      }
      if (rep.end == JournalEnd::kTorn && rf.limit == UINT64_MAX) {
        FsckFinding f = base;
        f.kind = FsckKind::kJournalTornTail;
        f.offset = rep.valid_end.offset;
        f.bytes = rep.tail_bytes;
        const bool in_progress = live && rf.file.generation == current_gen && rf.file.number == last_gen_file;
        f.severity = in_progress ? FsckSeverity::kInfo : FsckSeverity::kProblem;
        f.detail = std::string(in_progress ? "tail being written by the live owner: " : "torn tail: ") +
                   std::to_string(rep.tail_bytes) + (rep.tail_zero ? " zero" : "") + " bytes after offset " +
                   std::to_string(rep.valid_end.offset);
        f.repairable = !in_progress;
        f.repair = "CUT at " + std::to_string(rep.valid_end.offset);
        add(std::move(f));
      }
    }

    // Segments.
    std::vector<std::string> names;
    Status ls = env_->GetChildren(SegmentDirPath(opts_.backing_dir, node), &names);
    if (!ls.ok() && !ls.IsNotFound()) return ls;
    std::sort(names.begin(), names.end());
    auto& node_scans = a->scans[node];
    uint64_t si = 0;
    for (const auto& n : names) {
      uint64_t gen = 0, seq = 0;
      if (!ParseSegmentFileName(n, &gen, &seq)) continue;
      Progress("checking segments of " + node, si++, names.size());
      uint64_t cut = UINT64_MAX;
      auto c = seg_cuts[node].find({gen, seq});
      if (c != seg_cuts[node].end()) cut = c->second;
      SegScan& s = node_scans[{gen, seq}];
      Status scan = ScanSegment(node, gen, seq, cut, &s);
      if (scan.IsNotFound()) {
        // Gone between the listing and the open: a live owner's eviction dropped it (a dead segment, or
        // one whose files it unlinked). Like a segment never listed: a file still located in it is a
        // dangling entry below.
        node_scans.erase({gen, seq});
        continue;
      }
      KVFS_RETURN_IF_ERROR(scan);
      s.dropped = drops.count(s.id) > 0;
      s.seal_journaled = seals.count(s.id) > 0;
      sum.segments++;
      sum.segment_file_bytes += s.size;
      if (s.sealed) sum.sealed_segments++;
      if (s.dropped) continue;  // dropped: its files are gone from the index; the file awaits unlink
      const bool active = live && gen == current_gen;
      FsckFinding base;
      base.file = s.path;
      if (!s.header_ok && !s.header_torn) {
        // Reads do not use the header (each record carries its own checksums): its records are checked
        // one by one below, like any segment's, and only those that fail are reported (dangling-entry).
        FsckFinding f = base;
        f.kind = FsckKind::kSegmentBadHeader;
        f.detail = s.header_detail + " (reads do not use it: its " + std::to_string(s.records.size()) +
                   " records are checked one by one; segments are never rewritten)";
        add(std::move(f));
      }
      for (const auto& [start, end] : s.damaged) {
        FsckFinding f = base;
        f.kind = FsckKind::kSegmentDamaged;
        f.offset = start;
        f.bytes = end - start;
        f.detail = "damaged region [" + std::to_string(start) + ", " + std::to_string(end) +
                   "): records in it are lost";
        add(std::move(f));
      }
      if (s.trailer_bad) {
        FsckFinding f = base;
        f.kind = FsckKind::kSegmentBadTrailer;
        f.offset = s.tail_start;
        f.bytes = s.size - s.tail_start;
        const bool handled = s.cut != UINT64_MAX;
        f.severity = handled ? FsckSeverity::kInfo : FsckSeverity::kProblem;
        f.detail = s.trailer_detail + (handled ? " (already cut)" : "");
        f.repairable = !handled;
        f.repair = "CUT at " + std::to_string(s.tail_start);
        add(std::move(f));
      } else if (s.torn) {
        FsckFinding f = base;
        f.kind = FsckKind::kSegmentTornTail;
        f.offset = s.tail_start;
        f.bytes = s.limit - s.tail_start;
        f.severity = active ? FsckSeverity::kInfo : FsckSeverity::kProblem;
        f.detail = std::string(active ? "tail being written by the live owner: " : "torn tail: ") +
                   std::to_string(f.bytes) + " bytes after offset " + std::to_string(s.tail_start);
        f.repairable = !active;
        f.repair = "CUT at " + std::to_string(s.tail_start);
        if (!opts_.append_in_place && !active) {
          // An object store: a segment object is uploaded whole once sealed (or after its CUT), never
          // appended to, so bytes that end inside a record are damage in the bucket, not a crash's tail.
          f.detail = "truncated or damaged object: " + std::to_string(f.bytes) + " bytes after offset " +
                     std::to_string(s.tail_start) +
                     " are no complete record (segment objects are uploaded whole: damage in the bucket, not a "
                     "crash's torn tail; no mount repairs it; records past the offset are lost)";
          f.repair = "CUT at " + std::to_string(s.tail_start) +
                     " journaled (the object is left as it is; files whose records lay past it are unlinked)";
        }
        add(std::move(f));
      }
      if (!s.sealed && !s.seal_journaled && !active) {
        FsckFinding f = base;
        f.kind = FsckKind::kUnsealedSegment;
        f.offset = s.tail_start;
        f.detail = "unsealed segment of " +
                   std::string(gen < current_gen ? "an older generation" : "a dead owner") + " (" +
                   std::to_string(s.records.size()) + " records, valid end " + std::to_string(s.tail_start) + ")";
        f.repairable = true;
        f.repair = "SEAL";
        add(std::move(f));
      } else if (s.sealed && !s.seal_journaled && !active) {
        FsckFinding f = base;
        f.kind = FsckKind::kSealNotJournaled;
        f.detail = "sealed on disk but no SEAL entry in the journal";
        f.repairable = true;
        f.repair = "SEAL entry";
        add(std::move(f));
      }
      for (const auto& [off, r] : s.records) {
        sum.records++;
        sum.record_value_bytes += r.value_len;
        if (opts_.verify_data) sum.verified_value_bytes += r.value_len;
        if (r.flags & format::kRecordFlagProvisional) sum.provisional_records++;
        if (!refs.count(RecKey{node, gen, seq, off})) {
          sum.orphan_records++;
          sum.orphan_bytes += r.value_len;
          FsckFinding f = base;
          f.kind = FsckKind::kOrphanRecord;
          f.severity = FsckSeverity::kInfo;
          f.offset = off;
          f.bytes = r.value_len;
          f.path = r.path;
          f.detail = (r.flags & format::kRecordFlagProvisional) ? "provisional record, in no journal entry"
                                                                 : "record in no journal entry (dead bytes)";
          add(std::move(f));
        }
      }
    }
    Progress("checked " + node, ++ni, selected_.size());
  }

  // 4. Live files against the scans: dangling entries, damaged values, live bytes.
  std::set<std::pair<std::string, std::pair<uint64_t, uint64_t>>> live_recs;  // (node,(gen,seq)) offsets
  std::set<RecKey> live_keys;
  for (const auto& [path, d] : dump) {
    if (!S_ISREG(d.mode)) continue;
    // Each record the file uses (its location, or every record of its extent map) is checked; a file
    // counts as live in the summary of each node holding one of its records.
    const auto ext_live = d.extents ? d.extents->LiveBytesByRecord()
                                    : std::map<std::pair<SegmentId, uint64_t>, uint64_t>{};
    std::set<std::string> counted;  // nodes whose summary counted this file
    for (const Location& l : ContentRecords(d.location, d.extents)) {
      auto ns = a->scans.find(l.segment.node);
      if (ns == a->scans.end()) continue;  // a node not selected
      auto& sum = a->summaries[l.segment.node];
      std::string why;
      auto sit = ns->second.find({l.segment.generation, l.segment.seq});
      const SegScan* s = sit == ns->second.end() ? nullptr : &sit->second;
      if (s == nullptr) {
        why = "segment file " + SegmentFilePath(opts_.backing_dir, l.segment) + " is missing";
      } else if (l.record_offset >= s->limit && s->cut != UINT64_MAX && l.record_offset >= s->cut) {
        why = "record is behind the CUT at " + std::to_string(s->cut);
      } else {
        auto r = s->records.find(l.record_offset);
        if (r == s->records.end()) {
          why = s->torn && l.record_offset >= s->tail_start
                    ? "record is in the torn tail (valid end " + std::to_string(s->tail_start) + ")"
                    : "no valid record at offset " + std::to_string(l.record_offset);
          for (const auto& [st, en] : s->damaged) {
            if (l.record_offset >= st && l.record_offset < en) why = "record is in a damaged region";
          }
        } else if (r->second.value_offset != l.value_offset || r->second.value_len != l.length) {
          why = "record does not match the location";
        } else if (r->second.bad_value) {
          why = "value checksum mismatch: " + r->second.bad_detail;
        } else if (d.extents) {
          // Each extent's value range must lie inside the record it names (design.md §13 step 5).
          for (const Extent& e : d.extents->extents()) {
            if (!(e.record == l)) continue;
            if (e.value_offset > r->second.value_len || e.length > r->second.value_len - e.value_offset) {
              why = "extent at file bytes [" + std::to_string(e.file_offset) + ", " + std::to_string(e.file_end()) +
                    ") lies past the record's " + std::to_string(r->second.value_len) + " value bytes";
              break;
            }
          }
        }
      }
      if (why.empty()) {
        if (counted.insert(l.segment.node).second) sum.live_files++;
        // A record with several names (link(2)) counts its bytes once; an extent file counts the bytes of
        // its extents in the record.
        if (live_keys.emplace(l.segment.node, l.segment.generation, l.segment.seq, l.record_offset).second) {
          sum.live_bytes += d.extents ? ext_live.at({l.segment, l.record_offset}) : l.length;
        }
        continue;
      }
      FsckFinding f;
      f.kind = FsckKind::kDanglingEntry;
      f.node = l.segment.node;
      f.file = SegmentFilePath(opts_.backing_dir, l.segment);
      f.offset = l.record_offset;
      f.bytes = l.length;
      f.path = path;
      f.detail = "live file " + path + ": " + why + " (reads fail with EIO/ENOENT)";
      if (d.extents) {
        // An extent file: which of its bytes this record holds (the others may read; the file goes whole).
        uint64_t in_rec = 0, n_ext = 0;
        for (const Extent& e : d.extents->extents()) {
          if (e.record == l) {
            in_rec += e.length;
            n_ext++;
          }
        }
        f.detail += "; extent file of " + std::to_string(d.extents->extents().size()) + " extents, " +
                    std::to_string(n_ext) + " of them (" + std::to_string(in_rec) + " bytes) in this record";
      }
      f.repairable = true;
      f.repair = "UNLINK";
      a->findings.push_back(std::move(f));
      break;  // one finding per file (its UNLINK repairs it)
    }
  }
  // Live files under connector temp names, older than stale_temp_age_s (kvfs-fsck --remove-stale-temp).
  if (opts_.stale_temp_age_s >= 0) {
    const int64_t now = opts_.now_ns != 0 ? opts_.now_ns
                                          : std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count();
    const int64_t min_age = opts_.stale_temp_age_s * 1000000000LL;
    for (const auto& [path, d] : dump) {
      if (!S_ISREG(d.mode) || !IsConnectorTempName(path) || now - d.mtime_ns < min_age) continue;
      // The UNLINK goes to the journal of the node that holds the record (any node's would do: the
      // stamp decides), or of the first node checked for an empty file.
      const std::vector<Location> recs = ContentRecords(d.location, d.extents);
      std::string node = recs.empty() ? std::string() : recs.front().segment.node;
      if (node.empty() || std::find(selected_.begin(), selected_.end(), node) == selected_.end()) {
        if (selected_.empty()) continue;
        node = selected_.front();
      }
      FsckFinding f;
      f.kind = FsckKind::kStaleTempName;
      f.node = node;
      f.path = path;
      f.bytes = d.size;
      f.detail = "temp name " + path + " (" + std::to_string(d.size) + " bytes), last written " +
                 std::to_string((now - d.mtime_ns) / 1000000000LL) + " s ago";
      f.repairable = true;
      f.repair = "UNLINK";
      a->findings.push_back(std::move(f));
    }
  }
  // Damaged values of records no live file uses: informational.
  for (const auto& [node, segs] : a->scans) {
    for (const auto& [gs, s] : segs) {
      for (const auto& [off, r] : s.records) {
        if (!r.bad_value || live_keys.count(RecKey{node, gs.first, gs.second, off})) continue;
        FsckFinding f;
        f.kind = FsckKind::kSegmentBadValue;
        f.severity = FsckSeverity::kInfo;
        f.node = node;
        f.file = s.path;
        f.offset = off;
        f.bytes = r.value_len;
        f.path = r.path;
        f.detail = "value checksum mismatch in a record no live file uses: " + r.bad_detail;
        a->findings.push_back(std::move(f));
      }
    }
  }
  for (auto& [node, sum] : a->summaries) {
    sum.dead_bytes = sum.record_value_bytes > sum.live_bytes ? sum.record_value_bytes - sum.live_bytes : 0;
  }
  return Status::OK();
}

}  // namespace kvfs::fsck_internal
