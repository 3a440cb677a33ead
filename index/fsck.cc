// kvfs-fsck engine: see fsck.h. This part runs the check and the repair (index/fsck_internal.h lists the
// others) and holds the small public helpers.
#include "index/fsck.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <memory>

#include "index/fsck_internal.h"

namespace kvfs {
namespace fsck_internal {

Result<FsckReport> Fsck::Run() {
  KVFS_RETURN_IF_ERROR(CheckBackingDir(env_, opts_.backing_dir));
  {
    std::string text;
    Status s = env_->ReadFileToString(FormatFilePath(opts_.backing_dir), &text);
    if (s.IsNotFound()) {
      return Status::InvalidArgument("'" + opts_.backing_dir + "' is not a kvfs backing directory (no " +
                                     FormatFilePath(opts_.backing_dir) + ")");
    }
    KVFS_RETURN_IF_ERROR(s);
    auto fi = FormatInfo::Parse(text);
    if (!fi.ok()) return Status::InvalidArgument("bad FORMAT file: " + fi.status().message());
    if (fi->version > kFormatVersion) return Status::InvalidArgument("backing store format is newer than this kvfs-fsck");
  }
  auto nodes = ListNodes(env_, opts_.backing_dir);
  if (!nodes.ok()) return nodes.status();
  all_nodes_ = *nodes;
  if (!opts_.node.empty()) {
    if (std::find(all_nodes_.begin(), all_nodes_.end(), opts_.node) == all_nodes_.end()) {
      return Status::InvalidArgument("no node '" + opts_.node + "' under " + NodesDirPath(opts_.backing_dir));
    }
    selected_ = {opts_.node};
  } else {
    selected_ = all_nodes_;
  }
  if (!opts_.rebuild_index_dir.empty()) {
    if (opts_.index_node.empty()) {
      if (!opts_.node.empty()) opts_.index_node = opts_.node;
      else if (all_nodes_.size() == 1) opts_.index_node = all_nodes_[0];
      else return Status::InvalidArgument("--rebuild-index needs --node when the export has several nodes");
    }
    std::error_code ec;
    const stdfs::path d(opts_.rebuild_index_dir);
    if (stdfs::exists(d, ec) && !stdfs::is_empty(d, ec) && !stdfs::exists(d / "CURRENT", ec)) {
      return Status::InvalidArgument("'" + opts_.rebuild_index_dir + "' is neither empty nor a kvfs index");
    }
  }

  Analysis a;
  KVFS_RETURN_IF_ERROR(Analyze({}, &a));
  FsckReport rep;
  if (opts_.repair) {
    std::map<std::string, std::unique_ptr<NodeDir>> acquired;
    std::map<std::string, uint64_t> owned;
    for (const auto& node : selected_) {
      bool needs = false;
      for (const auto& f : a.findings) {
        needs |= f.node == node && f.severity == FsckSeverity::kProblem && f.repairable;
      }
      if (!needs) continue;
      NodeDirOptions no;
      no.env = env_;
      no.backing_dir = opts_.backing_dir;
      no.node_id = node;
      no.heartbeat_timeout = opts_.heartbeat_timeout;
      no.self = opts_.self;
      no.process_alive = opts_.process_alive;
      no.refuse_running_local_owner = true;  // a running mount holds segments no tool outside sees
      no.claim = opts_.claim;
      auto nd = NodeDir::Acquire(no);
      if (!nd.ok()) {
        if (!nd.status().IsBusy()) return nd.status();
        a.summaries[node].repair_refused = true;
        a.summaries[node].repair_refused_reason = nd.status().message();
        rep.repair_refused = true;
        continue;
      }
      owned[node] = (*nd)->generation();
      acquired[node] = std::move(*nd);
    }
    if (!acquired.empty()) {
      Analysis b;
      KVFS_RETURN_IF_ERROR(Analyze(owned, &b));
      for (auto& [node, nd] : acquired) {
        Status s = Repair(node, nd.get(), &b);
        if (s.ok() && opts_.after_repair) s = opts_.after_repair(nd->dir());
        Status rs = nd->Release();
        KVFS_RETURN_IF_ERROR(s);
        KVFS_RETURN_IF_ERROR(rs);
      }
      for (auto& [node, sum] : a.summaries) {
        if (sum.repair_refused) b.summaries[node].repair_refused = true,
                                b.summaries[node].repair_refused_reason = sum.repair_refused_reason;
      }
      a = std::move(b);
    }
  }
  KVFS_RETURN_IF_ERROR(CheckLinkClaims(&rep, &a.findings));
  if (!opts_.rebuild_index_dir.empty()) {
    KVFS_RETURN_IF_ERROR(RebuildInto(opts_.rebuild_index_dir, opts_.index_node, &rep.index_files));
  }
  rep.findings = std::move(a.findings);
  for (auto& [node, sum] : a.summaries) {
    sum.node = node;
    rep.nodes.push_back(sum);
  }
  for (const auto& f : rep.findings) {
    if (f.severity != FsckSeverity::kProblem) continue;
    rep.problems++;
    if (f.repaired) rep.repaired++;
    else rep.unrepaired++;
  }
  return rep;
}

// Link claims belong to no node (the export's .kvfs/v1/links, engine/link_arbiter.h): each one is
// counted; one at least kLinkClaimSweepAgeS old by its mtime (the server's clock, against this host's:
// NFS keeps them close) is an informational finding, and --repair removes it, as a mount's sweep would.
// A younger one may decide a link(2) in progress: never touched. On S3 Stat gives no mtime (0): counted only.
Status Fsck::CheckLinkClaims(FsckReport* rep, std::vector<FsckFinding>* findings) {
  const std::string dir = LinkClaimsDirPath(opts_.backing_dir);
  std::vector<std::string> names;
  Status s = env_->GetChildren(dir, &names);
  if (s.IsNotFound()) return Status::OK();
  KVFS_RETURN_IF_ERROR(s);
  std::sort(names.begin(), names.end());
  const int64_t now = opts_.now_ns != 0 ? opts_.now_ns
                                        : std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::system_clock::now().time_since_epoch())
                                              .count();
  for (const auto& n : names) {
    const std::string path = dir + "/" + n;
    auto st = env_->Stat(path);
    if (!st.ok()) {
      if (st.status().IsNotFound()) continue;  // removed meanwhile (its creator, a sweep)
      return st.status();
    }
    rep->link_claims++;
    const int64_t age_s = (now - st->mtime_ns) / 1000000000LL;
    if (st->mtime_ns == 0 || age_s < kLinkClaimSweepAgeS) continue;
    rep->link_claims_stale++;
    FsckFinding f;
    f.kind = FsckKind::kLinkClaim;
    f.severity = FsckSeverity::kInfo;
    f.file = path;
    f.detail = "link claim made " + std::to_string(age_s) +
               " s ago (its creator removes a claim a minute after its link: a crash left this one; harmless, a "
               "later link of the name passes it over)";
    f.repairable = true;
    f.repair = "remove";
    if (opts_.repair) {
      Status r = env_->Remove(path);
      if (r.ok() || r.IsNotFound()) {
        f.repaired = true;
        rep->link_claims_removed++;
      } else {
        f.detail += "; not removed: " + r.ToString();
      }
    }
    findings->push_back(std::move(f));
  }
  return Status::OK();
}

}  // namespace fsck_internal

const char* FsckKindName(FsckKind k) {
  switch (k) {
    case FsckKind::kStaleTempFile: return "stale-temp-file";
    case FsckKind::kJournalUnreadable: return "journal-unreadable";
    case FsckKind::kJournalDamaged: return "journal-damaged";
    case FsckKind::kJournalBadEntry: return "journal-bad-entry";
    case FsckKind::kJournalTornTail: return "journal-torn-tail";
    case FsckKind::kSegmentBadHeader: return "segment-bad-header";
    case FsckKind::kSegmentDamaged: return "segment-damaged";
    case FsckKind::kSegmentTornTail: return "segment-torn-tail";
    case FsckKind::kSegmentBadTrailer: return "segment-bad-trailer";
    case FsckKind::kSegmentBadValue: return "segment-bad-value";
    case FsckKind::kUnsealedSegment: return "unsealed-segment";
    case FsckKind::kSealNotJournaled: return "seal-not-journaled";
    case FsckKind::kDanglingEntry: return "dangling-entry";
    case FsckKind::kStaleTempName: return "stale-temp-name";
    case FsckKind::kUnresolvedDelta: return "unresolved-delta";
    case FsckKind::kOrphanRecord: return "orphan-record";
    case FsckKind::kSnapshotDamaged: return "snapshot-damaged";
    case FsckKind::kJournalGap: return "journal-gap";
    case FsckKind::kLinkClaim: return "stale-link-claim";
  }
  return "unknown";
}

size_t FsckReport::Count(FsckKind k, bool problems_only) const {
  size_t n = 0;
  for (const auto& f : findings) {
    if (f.kind == k && (!problems_only || f.severity == FsckSeverity::kProblem)) n++;
  }
  return n;
}

bool IsConnectorTempName(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t t = base.rfind(".tmp");
  if (t == std::string::npos || t == 0) return false;
  const std::string rest = base.substr(t + 4);
  if (rest.empty()) return true;
  if (std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; })) return true;
  return rest.size() > 1 && rest[0] == '.' &&
         std::all_of(rest.begin() + 1, rest.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

Result<FsckReport> RunFsck(const FsckOptions& opts) { return fsck_internal::Fsck(opts).Run(); }

}  // namespace kvfs
