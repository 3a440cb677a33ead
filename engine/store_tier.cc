// The Store's side of an object tier (an S3 backing; StoreOptions::tier, blockstore/s3_env.h, docs/s3.md
// "The first slice"): sealed segments uploaded, the journal published behind them.
//
// Publication rule: this generation's journal reaches the bucket only as a synced prefix that ends after
// an entry such that every entry up to it has its segments in the bucket (uploaded by this mount, of
// an earlier generation — uploaded by TierRecover at the latest — or another node's), so a remount from
// the bucket or a peer never sees an entry pointing at a segment object that does not exist.
//
// Callers: the committer thread (CommitRound -> TierNoteAppended / TierNoteSynced), the segment writer's
// leader thread (OnSealed -> TierSegmentSealed), the uploader thread (TierRound, woken by both and every
// second), the evictor (UnlinkDue -> TierPublishedThrough), Init (TierRecover) and Close (TierFlush).
// Uploads never delay a commit: local durability does not depend on the bucket, and a failed upload only
// leaves the segment queued and the journal unpublished (an error line; retried every second).
#include "engine/store_impl.h"

namespace kvfs {
namespace {

constexpr auto kTierPublishInterval = std::chrono::milliseconds(1000);
constexpr int kTierFlushTries = 10;
constexpr auto kTierFlushWait = std::chrono::milliseconds(500);

}  // namespace

bool StoreImpl::TierUploadedLocked(const SegmentId& id) const {
  if (id.node != opts_.node_id || id.generation < node_dir_->generation()) return true;
  return tier_uploaded_.count(id) > 0;
}

void StoreImpl::TierSegmentSealed(const SegmentId& id) {
  if (!opts_.tier) return;
  std::lock_guard<std::mutex> l(tier_mu_);
  tier_pending_.push_back(id);
  tier_wake_ = true;
  tier_cv_.notify_all();
}

void StoreImpl::TierWake() {
  std::lock_guard<std::mutex> l(tier_mu_);
  tier_wake_ = true;
  tier_cv_.notify_all();
}

void StoreImpl::TierStart() {
  if (!opts_.tier) return;
  tier_thread_ = std::thread([this] {
    for (;;) {
      {
        std::unique_lock<std::mutex> l(tier_mu_);
        tier_cv_.wait_for(l, kTierPublishInterval, [&] { return tier_stop_ || tier_wake_; });
        if (tier_stop_) return;
        tier_wake_ = false;
      }
      TierSealIfOld();
      TierRound(false);
    }
  });
}

void StoreImpl::TierSealIfOld() {
  if (opts_.seal_after_ms == 0) return;
  auto writer = Segments();
  const SegmentId active = writer->ActiveSegment();
  bool holds = false;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    auto it = own_segs_.find(active);
    holds = it != own_segs_.end() && !it->second.evictable && it->second.bytes > 0;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!holds) {
    tier_seal_seen_ = SegmentId{};
    return;
  }
  if (!(tier_seal_seen_ == active)) {
    tier_seal_seen_ = active;
    tier_seal_since_ = now;
    return;
  }
  if (now - tier_seal_since_ < std::chrono::milliseconds(opts_.seal_after_ms)) return;
  bool rotated = false;
  Status s = writer->Rotate(active, &rotated);
  if (!s.ok()) {
    LogLimited(spdlog::level::warn, LogKey("seal-after", s), "kvfs: s3: sealing segment {}-{} after {} ms: {}",
               active.generation, active.seq, opts_.seal_after_ms, ErrnoText(s));
    return;
  }
  tier_seal_seen_ = SegmentId{};
  if (rotated) {
    spdlog::debug("kvfs: s3: segment {}-{} sealed after {} ms (--seal-after-ms)", active.generation, active.seq,
                  opts_.seal_after_ms);
  }
}

void StoreImpl::TierStop() {
  if (!tier_thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(tier_mu_);
    tier_stop_ = true;
    tier_cv_.notify_all();
  }
  tier_thread_.join();
}

void StoreImpl::TierNoteAppended(const JournalEntry& e, const JournalPosition& end) {
  if (!opts_.tier) return;
  TierItem item{end, {}};
  for (const Location& rec : e.Records()) {  // location, old_location, an extent map's records
    if (OwnSegment(rec.segment)) item.refs.push_back(rec.segment);
  }
  if (e.op == JournalOp::kSeal && OwnSegment(e.segment)) item.refs.push_back(e.segment);
  std::lock_guard<std::mutex> l(tier_mu_);
  tier_unsynced_.push_back(std::move(item));
}

void StoreImpl::TierNoteSynced(const JournalPosition& synced) {
  if (!opts_.tier) return;
  std::lock_guard<std::mutex> l(tier_mu_);
  size_t n = 0;
  while (n < tier_unsynced_.size() && !(synced < tier_unsynced_[n].end)) n++;
  if (spdlog::should_log(spdlog::level::debug) && n > 0) {
    std::string refs;
    for (size_t i = 0; i < n; i++) {
      for (const auto& id : tier_unsynced_[i].refs) refs += " " + std::to_string(id.generation) + "-" + std::to_string(id.seq);
    }
    spdlog::debug("kvfs: s3: {} entries synced to {} need segments{}", n, synced.ToString(), refs);
  }
  for (size_t i = 0; i < n; i++) tier_rounds_.push_back(std::move(tier_unsynced_[i]));
  tier_unsynced_.erase(tier_unsynced_.begin(), tier_unsynced_.begin() + static_cast<std::ptrdiff_t>(n));
  // The synced end itself (a fresh file's header, a rotation): publishable once what precedes it is.
  if (tier_rounds_.empty() || tier_rounds_.back().end < synced) tier_rounds_.push_back(TierItem{synced, {}});
  tier_wake_ = true;
  tier_cv_.notify_all();
}

Status StoreImpl::TierRound(bool force) {
  ObjectTier* tier = opts_.tier;
  if (!tier) return Status::OK();
  std::lock_guard<std::mutex> io(tier_io_mu_);
  // 1. Uploads, oldest first.
  bool uploaded_any = false;
  Status failed;
  for (;;) {
    SegmentId id;
    {
      std::lock_guard<std::mutex> l(tier_mu_);
      if (tier_pending_.empty()) break;
      id = tier_pending_.front();
    }
    const std::string path = SegmentFilePath(opts_.backing_dir, id);
    Status s = tier->UploadStaged(path);
    if (s.IsNotFound()) {
      // No staged copy: fine if the object is there (uploaded already); otherwise its bytes are gone, and
      // the entries that point into it must never be published: a failure, retried, the journal held back.
      auto size = tier->PublishedSize(path);
      s = !size.ok() ? size.status()
          : *size > 0 ? Status::OK()
                      : Status::IOError("sealed segment " + path + " is neither staged nor in the bucket");
    }
    if (!s.ok()) {
      failed = s;
      break;
    }
    {
      std::lock_guard<std::mutex> l(tier_mu_);
      tier_pending_.pop_front();
      tier_uploaded_.insert(id);
    }
    {
      // Reads of it reopen the path: the object now (the staged copy is gone).
      std::lock_guard<std::mutex> fl(files_mu_);
      ForgetSegmentFileLocked(id);
    }
    spdlog::debug("kvfs: s3: segment {}-{} uploaded", id.generation, id.seq);
    tier_segments_uploaded_++;
    uploaded_any = true;
  }
  // 2. The journal, up to the last synced entry that, with every entry before it, has its segments in the bucket.
  JournalPosition target = tier_published_;
  size_t rounds = 0;
  {
    std::lock_guard<std::mutex> l(tier_mu_);
    for (const auto& r : tier_rounds_) {
      bool ok = true;
      for (const auto& id : r.refs) ok = ok && TierUploadedLocked(id);
      if (!ok) break;
      if (target < r.end) target = r.end;
      rounds++;
    }
  }
  if (!(target > tier_published_)) {
    // Rounds that add nothing to what is published (an empty round, a repeated position).
    std::lock_guard<std::mutex> l(tier_mu_);
    for (size_t i = 0; i < rounds && !tier_rounds_.empty(); i++) tier_rounds_.pop_front();
    rounds = 0;
  }
  const auto now = std::chrono::steady_clock::now();
  const bool due = force || uploaded_any || now - tier_last_publish_ >= kTierPublishInterval;
  if (failed.ok() && target > tier_published_ && due) {
    for (uint64_t n = tier_published_.file_number; n <= target.file_number && failed.ok(); n++) {
      const std::string path = journal_->FilePath(n);
      uint64_t len = target.offset;
      if (n < target.file_number) {
        auto size = tier->StagedSize(path);
        if (!size.ok()) {
          if (size.status().IsNotFound()) continue;  // retired behind a snapshot
          failed = size.status();
          break;
        }
        len = *size;
      }
      Status s = tier->PublishPrefix(path, len);
      if (!s.ok()) failed = s;
    }
    if (failed.ok()) {
      spdlog::debug("kvfs: s3: journal published to {}", target.ToString());
      tier_published_ = target;
      tier_last_publish_ = now;
      tier_journal_publications_++;
      std::lock_guard<std::mutex> l(tier_mu_);
      for (size_t i = 0; i < rounds && !tier_rounds_.empty(); i++) tier_rounds_.pop_front();
    }
  }
  if (!failed.ok()) {
    tier_failures_++;
    if (!tier_failing_) {
      spdlog::error("kvfs: s3: upload or journal publication failed ({}); the staged files stay in the staging "
                    "directory and are retried every second and at unmount; files written since are not in "
                    "the bucket yet", ErrnoText(failed));
    }
    tier_failing_ = true;
  } else if (tier_failing_) {
    spdlog::info("kvfs: s3: uploads work again");
    tier_failing_ = false;
  }
  return failed;
}

Status StoreImpl::TierPublishedThrough(const JournalPosition& pos) {
  if (!opts_.tier) return Status::OK();
  TierRound(true);
  std::lock_guard<std::mutex> io(tier_io_mu_);
  if (tier_published_ >= pos) return Status::OK();
  return Status::Busy("the journal is published up to " + tier_published_.ToString() + ", not yet " + pos.ToString() +
                      " (it waits for the active segment's seal and upload)");
}

Status StoreImpl::TierFlush() {
  if (!opts_.tier) return Status::OK();
  TierNoteSynced(journal_->synced_position());
  for (int i = 0; i < kTierFlushTries; i++) {
    Status r = TierRound(true);
    {
      std::lock_guard<std::mutex> l(tier_mu_);
      if (tier_pending_.empty() && tier_rounds_.empty()) break;
    }
    // A round that timed out waited the whole S3 deadline (--backing-deadline-ms) for a gateway that
    // does not answer: another would wait as long again. Ten of them made an unmount under a hung
    // gateway take 10 x the deadline (63 s at 5 s); now it gives up here, the staging directory keeps
    // what is not uploaded, and the next mount with it uploads it. Fast failures (refused connections,
    // 5xx: each call already retried with backoff inside its deadline) still get the ten tries.
    if (r.IsTimedOut()) {
      spdlog::warn("kvfs: s3: unmount: the gateway did not answer within the deadline ({}); not retrying",
                   ErrnoText(r));
      break;
    }
    std::this_thread::sleep_for(kTierFlushWait);
  }
  std::lock_guard<std::mutex> l(tier_mu_);
  if (!tier_pending_.empty() || !tier_rounds_.empty()) {
    return Status::IOError(std::to_string(tier_pending_.size()) + " sealed segment(s) not uploaded and the journal "
                           "published only up to " + tier_published_.ToString() + "; the staging directory keeps "
                           "them (the next mount with it uploads them)");
  }
  return Status::OK();
}

Status StoreImpl::TierRecover() {
  ObjectTier* tier = opts_.tier;
  if (!tier) return Status::OK();
  const uint64_t gen = node_dir_->generation();
  const std::string dir = node_dir_->dir(), seg_dir = node_dir_->seg_dir();
  {
    // A crash in the middle of a segment upload left a multipart upload open in the bucket (stored and
    // billed until aborted); this node owns the directory now, so none of its uploads is in progress.
    uint64_t aborted = 0;
    Status a = tier->AbortStaleUploads(seg_dir, &aborted);
    if (!a.ok()) spdlog::warn("kvfs: s3: listing unfinished uploads of {}: {}", seg_dir, a.ToString());
    if (aborted) spdlog::info("kvfs: s3: aborted {} unfinished multipart upload(s) left by an earlier mount", aborted);
  }
  std::vector<std::string> local, all;
  Status ls = tier->ListStaged(dir, &local);
  if (!ls.ok() && !ls.IsNotFound()) return ls;
  ls = env_->GetChildren(dir, &all);  // the bucket's and the staging directory's names
  if (!ls.ok() && !ls.IsNotFound()) return ls;
  // A generation between the leftovers and ours that this staging directory never held: a mount from
  // another staging directory (another machine, an emptied disk) took over since and built on what was
  // published then. The leftovers are obsolete: publishing them now would change that generation's
  // history under it. They are set aside (renamed *.obsolete in the staging directory), not uploaded.
  const std::set<std::string> here(local.begin(), local.end());
  uint64_t foreign = 0;
  for (const auto& n : all) {
    uint64_t g = 0, num = 0;
    if ((ParseJournalFileName(n, &g, &num) || ParseSnapshotFileName(n, &g, &num)) && g < gen && !here.count(n)) {
      foreign = std::max(foreign, g);
    }
  }
  uint64_t segs = 0, journals = 0, obsolete = 0;
  auto set_aside = [&](const std::string& path, uint64_t g) -> Status {
    obsolete++;
    spdlog::warn("kvfs: s3: {} (generation {}) was left in the staging directory by an earlier mount, but generation {} "
                 "was mounted from another staging directory since: not uploaded (it would change what that "
                 "mount built on); kept as {}.obsolete", path, g, foreign, path);
    return tier->SetAsideStaged(path);
  };
  std::vector<std::string> names;
  ls = tier->ListStaged(seg_dir, &names);
  if (!ls.ok() && !ls.IsNotFound()) return ls;
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    SegmentId id{opts_.node_id, 0, 0};
    if (!ParseSegmentFileName(n, &id.generation, &id.seq) || id.generation >= gen) continue;
    if (id.generation < foreign) {
      KVFS_RETURN_IF_ERROR(set_aside(seg_dir + "/" + n, id.generation));
      continue;
    }
    Status s = tier->UploadStaged(seg_dir + "/" + n);
    if (!s.ok() && !s.IsNotFound()) {
      return Status::IOError("s3: cannot upload staged segment " + n + " of an earlier mount: " + s.ToString());
    }
    segs++;
  }
  for (const auto& n : local) {
    uint64_t g = 0, num = 0;
    if (!ParseJournalFileName(n, &g, &num) || g >= gen) continue;
    const std::string path = dir + "/" + n;
    if (g < foreign) {
      KVFS_RETURN_IF_ERROR(set_aside(path, g));
      continue;
    }
    auto size = tier->StagedSize(path);
    if (!size.ok()) return size.status();
    auto published = tier->PublishedSize(path);
    if (!published.ok()) return published.status();
    if (*published == *size) continue;  // published whole already (a clean unmount)
    Status s = tier->PublishPrefix(path, *size);
    if (!s.ok()) return Status::IOError("s3: cannot publish staged journal " + n + " of an earlier mount: " + s.ToString());
    journals++;
  }
  if (segs + journals > 0) {
    spdlog::info("kvfs: s3: uploaded {} staged segment(s) and published {} journal file(s) left by an earlier mount",
                 segs, journals);
  }
  if (obsolete > 0) spdlog::warn("kvfs: s3: {} obsolete staged file(s) set aside", obsolete);
  return Status::OK();
}

}  // namespace kvfs
