// Internal to the kvfs-fsck engine (index/fsck.h; not for other callers): the Fsck class of one RunFsck
// call and what its analysis pass hands to the repair. Its parts:
//   index/fsck.cc         Run: the backing dir and FORMAT, node selection, analyse -> take over -> analyse
//                         again -> repair -> release, the index rebuild, the report's totals
//   index/fsck_check.cc   the check (Analyze): journals replayed into a scratch index, references and
//                         SEAL/DROP/CUT sets, owner liveness (ReadOwner), per-node temp files, snapshots,
//                         journals and segment scans (ScanSegment), live files against the scans
//   index/fsck_repair.cc  the repair of one taken-over node (one journal of CUT/SEAL/UNLINK entries, the
//                         physical seal, stale temp files) and RebuildInto
//
// Thread safety: an Fsck is used by one thread (RunFsck's) only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/node_dir.h"
#include "blockstore/segment_check.h"
#include "blockstore/status.h"
#include "index/fsck.h"

namespace kvfs::fsck_internal {

namespace stdfs = std::filesystem;

// One segment file of a node: the shared check (blockstore/segment_check.h) plus what the journals say.
struct SegScan : SegmentCheck {
  SegmentId id;
  std::string path;
  bool dropped = false;
  bool seal_journaled = false;
};

using RecKey = std::tuple<std::string, uint64_t, uint64_t, uint64_t>;  // node, gen, seq, record offset

struct OwnerState {
  bool has = false;
  bool unreadable = false;
  OwnerRecord rec;
  std::optional<int64_t> hb_age_ns;
  bool live = false;
  std::string desc;
};

// Everything one analysis pass learned (internal; the repair works from it).
struct Analysis {
  std::vector<FsckFinding> findings;
  std::map<std::string, FsckNodeSummary> summaries;
  std::map<std::string, std::map<std::pair<uint64_t, uint64_t>, SegScan>> scans;  // node -> (gen,seq)
  std::map<std::string, uint64_t> path_stamp;  // max stamp of any entry that bound the path
  uint64_t max_stamp = 0;
};

class Fsck {
 public:
  explicit Fsck(const FsckOptions& o) : opts_(o), env_(o.env ? o.env : Env::Posix()) {}
  Result<FsckReport> Run();

 private:
  void Progress(const std::string& phase, uint64_t done, uint64_t total) {
    if (opts_.progress) opts_.progress(phase, done, total);
  }
  // The check (fsck_check.cc). `owned`: nodes this run has taken over, with their new generation.
  OwnerState ReadOwner(const std::string& node);
  Status Analyze(const std::map<std::string, uint64_t>& owned, Analysis* a);
  // The export-wide link claims: counts in *rep, a finding per stale claim (removed when repairing).
  Status CheckLinkClaims(FsckReport* rep, std::vector<FsckFinding>* findings);
  Status ScanSegment(const std::string& node, uint64_t gen, uint64_t seq, uint64_t cut, SegScan* s);
  // The repair of one node taken over as `nd`, and the index rebuild (fsck_repair.cc).
  Status Repair(const std::string& node, NodeDir* nd, Analysis* a);
  Status PhysicalSeal(SegScan* s);
  Status RebuildInto(const std::string& dir, const std::string& node, uint64_t* files);

  FsckOptions opts_;
  Env* env_;
  std::vector<std::string> all_nodes_, selected_;
};

}  // namespace kvfs::fsck_internal
