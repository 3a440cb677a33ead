// Group commit (docs/design.md §2, store.h "Journal failures" / "Segment fdatasync failures"): the queue of
// journal entries (EnqueueLocked), the commit thread (GroupCommitLoop) and its rounds (CommitRound:
// segments durable, SEALs, journal append + sync), retries of owed entries with backoff (KickCommit),
// dropping entries that publish possibly lost records (DropLostEntries), the segment writer swap after
// a failed fdatasync (ReopenSegmentWriter) and the durability barrier Sync.
//
// Callers: namespace and data methods enqueue under ns_mu_; the commit thread (started by Init) runs
// the rounds; Sync from FUSE fsync, Close, checkpoints; KickCommit from the evictor.
// Thread safety: gc_mu_ guards the queue and round counters and is not held during a round; seg_mu_
// guards the segment writer pointer and retired writers. EnqueueLocked requires ns_mu_.
// Invariants: journal order = enqueue order = index order; a failed round's entries stay queued ahead of
// later ones; entries appended to the journal writer are its own (never re-queued, no duplicates).
#include "engine/store_impl.h"

namespace kvfs {

void StoreImpl::EnqueueLocked(JournalEntry e) {
  bool first;
  {
    std::lock_guard<std::mutex> l(gc_mu_);
    first = pending_.empty();
    pending_.push_back(std::move(e));
  }
  // The first entry of a group starts the group-commit interval; later ones just join it.
  if (first) gc_cv_.notify_one();
}

void StoreImpl::GroupCommitLoop() {
  const auto interval = std::chrono::milliseconds(std::max<uint32_t>(1, opts_.group_commit_interval_ms));
  std::unique_lock<std::mutex> l(gc_mu_);
  for (;;) {
    if (owed_) {
      // Entries are owed to the journal after a failed round: retry after the backoff, at once when
      // space may be back (KickCommit) or a Sync() caller asks, without waiting for new entries.
      gc_cv_.wait_until(l, retry_at_, [&] { return stop_ || sync_requested_ || retry_kick_; });
    } else {
      // Wait for work: a Sync() caller, or queued entries (then wait out the interval to gather a group).
      gc_cv_.wait(l, [&] { return stop_ || sync_requested_ || !pending_.empty(); });
      if (!sync_requested_ && !stop_) {
        gc_cv_.wait_for(l, interval, [&] { return stop_ || sync_requested_; });
      }
    }
    if (stop_ && pending_.empty() && !sync_requested_ && !owed_) break;
    sync_requested_ = false;
    retry_kick_ = false;
    std::vector<JournalEntry> batch;
    batch.swap(pending_);
    const uint64_t round = ++rounds_started_;
    l.unlock();
    Status lost;
    Status s = CommitRound(&batch, &lost);
    // A full backing store: the evictor frees RESERVE (and reclaims dead segments) so the journal can
    // take the owed entries; it kicks this thread when it did.
    if (s.IsNoSpace()) NoteNoSpace();
    l.lock();
    const auto now = std::chrono::steady_clock::now();
    if (!s.ok()) {
      // Keep the entries for the next round, in order ahead of anything queued meanwhile (they are still
      // owed to the journal); report the error to the waiters of this round.
      pending_.insert(pending_.begin(), std::make_move_iterator(batch.begin()),
                      std::make_move_iterator(batch.end()));
      LogLimited(spdlog::level::err, LogKey("group-commit", s),
                 "kvfs: group commit failed: {} ({} entries not journaled yet, retrying)", ErrnoText(s),
                 pending_.size() + appended_unsynced_.load());
      if (!owed_) {
        owed_since_ = now;
        backoff_ = interval;
      } else {
        backoff_ = std::min<std::chrono::milliseconds>(2 * backoff_, kRetryMaxBackoff);
      }
      owed_ = true;
      retry_at_ = now + backoff_;
      journal_retries_++;
    } else {
      if (owed_) {
        spdlog::info("kvfs: journal writable again: owed entries journaled after {} ms of failures",
                     std::chrono::duration_cast<std::chrono::milliseconds>(now - owed_since_).count());
      }
      owed_ = false;
      // A round that dropped lost entries fails its Sync() callers (fsync reports the loss).
      if (lost.ok()) last_ok_round_ = round;
    }
    last_round_status_ = s.ok() ? lost : s;
    rounds_done_ = round;
    done_cv_.notify_all();
    if (stop_ && (pending_.empty() || !s.ok())) break;
  }
}

void StoreImpl::KickCommit() {
  {
    std::lock_guard<std::mutex> l(gc_mu_);
    if (!owed_) return;
    retry_kick_ = true;
  }
  gc_cv_.notify_all();
}

uint64_t StoreImpl::UnjournaledEntries() {
  std::lock_guard<std::mutex> l(gc_mu_);
  return pending_.size() + appended_unsynced_.load();
}

uint64_t StoreImpl::DropLostEntries(std::vector<JournalEntry>* batch) {
  std::vector<std::shared_ptr<SegmentWriter>> retired;
  {
    std::lock_guard<std::mutex> l(seg_mu_);
    retired = retired_writers_;
  }
  if (retired.empty()) return 0;
  uint64_t dropped = 0;
  size_t kept = 0;
  for (size_t i = 0; i < batch->size(); i++) {
    JournalEntry& e = (*batch)[i];
    bool lost = false;
    if ((e.op == JournalOp::kPut || e.op == JournalOp::kMove) && !e.location.empty()) {
      for (const auto& w : retired) lost = lost || w->MayBeLost(e.location);
    }
    if (lost) {
      dropped++;
      spdlog::error("kvfs: {} {} not journaled: its record (segment {}-{} offset {}) was written before a "
                    "failed segment sync and may be lost; the file is absent (or its previous version) after "
                    "the next mount", JournalOpName(e.op), e.path, e.location.segment.generation,
                    e.location.segment.seq, e.location.record_offset);
      continue;
    }
    if (kept != i) (*batch)[kept] = std::move(e);
    kept++;
  }
  batch->resize(kept);
  lost_entries_ += dropped;
  return dropped;
}

Status StoreImpl::CommitRound(std::vector<JournalEntry>* batch, Status* lost) {
  // 1. Records first: every entry in the batch points at a record appended before it was queued.
  auto segments = Segments();
  Status s = segments->Sync();
  if (!s.ok()) {
    // The entries stay queued (the caller re-queues the batch); the writer is broken for good, so
    // records written from now on go to a new segment, and the entries pointing at its records that
    // were not durable yet are dropped by the next rounds (docs/design.md §7: never journal a PUT of lost bytes).
    ReopenSegmentWriter();
    return s;
  }
  // Entries publishing records that a failed sync may have lost: never journaled (docs/design.md §7).
  if (const uint64_t n = DropLostEntries(batch)) {
    *lost = Status::IOError(std::to_string(n) + " file(s) not made durable: a segment fdatasync failed after "
                            "their records were written");
  }
  // 2. Segments sealed since the last round are journaled as SEAL.
  for (const auto& seg : segments->TakeSealed()) {
    batch->push_back(JournalEntry::Seal(seg.id, hlc_.Now()));
    index_->SetSegmentState(seg.id, SegmentState::kSealed);
  }
  // 3. The journal entries, durable. Once appended, the journal writer owns them: a failed Sync keeps
  // their bytes and rewrites them at the next one, so they are not re-queued here (no duplicates).
  journal_entries_ += batch->size();
  for (const auto& e : *batch) journal_->Append(e);
  appended_unsynced_ += batch->size();
  batch->clear();
  if (journal_->synced_position() == journal_->appended_position()) {
    appended_unsynced_ = 0;
    return Status::OK();
  }
  KVFS_RETURN_IF_ERROR(journal_->Sync());
  appended_unsynced_ = 0;
  group_commits_++;
  return Status::OK();
}

void StoreImpl::ReopenSegmentWriter() {
  std::lock_guard<std::mutex> l(seg_mu_);
  SegmentWriterOptions so = seg_opts_;
  so.first_seq = segments_->ActiveSegment().seq + 1;
  auto sw = SegmentWriter::Open(env_, node_dir_->seg_dir(), opts_.node_id, node_dir_->generation(), so);
  if (!sw.ok()) {
    spdlog::error("kvfs: cannot open a new segment writer after a failed sync: {}", sw.status().ToString());
    return;
  }
  spdlog::warn("kvfs: segment sync failed; new records go to segment {}", so.first_seq);
  retired_writers_.push_back(segments_);
  segments_ = std::shared_ptr<SegmentWriter>(std::move(*sw));
}

Status StoreImpl::Sync() {
  std::unique_lock<std::mutex> l(gc_mu_);
  if (stop_ && !gc_thread_.joinable()) return Status::OK();
  // The round that starts after this point covers everything enqueued before the call.
  const uint64_t target = rounds_started_ + 1;
  sync_requested_ = true;
  gc_cv_.notify_all();
  done_cv_.wait(l, [&] { return rounds_done_ >= target || (stop_ && !gc_thread_.joinable()); });
  if (last_ok_round_ >= target) return Status::OK();
  return last_round_status_.ok() ? Status::IOError("group commit did not complete") : last_round_status_;
}

}  // namespace kvfs
