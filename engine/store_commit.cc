// The Store's side of the group commit (docs/design.md §2, store.h "Journal failures" / "Segment
// fdatasync failures"): CommitRound, the round the GroupCommitter (engine/group_commit.h: queue, thread,
// ordering, retries) runs: segments durable, entries that publish possibly lost records dropped
// (DropLostEntries), SEALs, journal append + sync; the segment writer swap after a failed fdatasync
// (ReopenSegmentWriter); Sync.
//
// Callers: the committer thread (CommitRound); Sync from FUSE fsync, Close, checkpoints.
// Thread safety: CommitRound runs on the committer thread only, with no Store mutex held but seg_mu_
// (briefly, for the segment writer pointer and the retired writers).
// Invariants: a record is written (visibility round) or synced (durable round) before the journal entries
// that point into it are written; in a durable round segments are fdatasync'd before the journal; an entry
// appended to the journal writer is the writer's (it rewrites unsynced bytes itself): never re-queued.
#include "engine/store_impl.h"

namespace kvfs {

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
    Location lost;  // a record of the entry (its location, or one of its extent map's) that may be lost
    if (e.op == JournalOp::kPut || e.op == JournalOp::kMove) {
      for (const Location& rec : e.ContentRecords()) {
        for (const auto& w : retired) {
          if (lost.empty() && w->MayBeLost(rec)) lost = rec;
        }
      }
    }
    if (!lost.empty()) {
      dropped++;
      spdlog::error("kvfs: {} {} not journaled: its record (segment {}-{} offset {}) was written before a "
                    "failed segment sync and may be lost; the file is absent (or its previous version) after "
                    "the next mount", JournalOpName(e.op), e.path, lost.segment.generation,
                    lost.segment.seq, lost.record_offset);
      continue;
    }
    if (kept != i) (*batch)[kept] = std::move(e);
    kept++;
  }
  batch->resize(kept);
  lost_entries_ += dropped;
  if (dropped) delta_epoch_++;  // a dropped PUT may be a delta chain's base: chains restart whole
  return dropped;
}

Status StoreImpl::CommitRound(std::vector<JournalEntry>* batch, Status* lost, bool durable) {
  // 1. Records first: every entry in the batch points at a record appended (written) before it was
  // queued. A durable round makes them durable; a visibility round relies on their being written
  // (O_DIRECT: on the server; buffered: written back below) before the journal bytes that point at them.
  auto segments = Segments();
  Status s = durable ? segments->Sync() : segments->WriteBack();
  if (!s.ok()) {
    // The entries stay queued (the caller re-queues the batch); the writer is broken for good, so
    // records written from now on go to a new segment, and the entries pointing at its records that
    // were not durable yet are dropped by the next rounds (docs/design.md §7: never journal a PUT of lost bytes).
    if (durable) ReopenSegmentWriter();
    return s;
  }
  // Entries publishing records that a failed sync may have lost: never journaled (docs/design.md §7).
  if (const uint64_t n = DropLostEntries(batch)) {
    *lost = Status::IOError(std::to_string(n) + " file(s) not made durable: a segment fdatasync failed after "
                            "their records were written");
  }
  // 2. Segments sealed since the last round are journaled as SEAL (a seal fdatasyncs its segment).
  for (const auto& seg : segments->TakeSealed()) {
    batch->push_back(JournalEntry::Seal(seg.id, hlc_.Now()));
    index_->SetSegmentState(seg.id, SegmentState::kSealed);
  }
  // 3. The journal entries. Once appended, the journal writer owns them: a failed Flush/Sync keeps
  // their bytes and rewrites them at the next one, so they are not re-queued here (no duplicates).
  journal_entries_ += batch->size();
  // An S3 backing: TierNoteAppended keeps the segments each entry needs in the bucket before it is published.
  for (const auto& e : *batch) TierNoteAppended(e, journal_->Append(e));
  appended_unsynced_ += batch->size();
  batch->clear();
  if (!durable) {
    // A visibility round: the entries are written and written back (peers and a rebuilt index see
    // them), not fdatasync'd; the next durable round (sync interval, fsync, Close) makes them durable.
    if (journal_->flushed_position() == journal_->appended_position()) return Status::OK();
    KVFS_RETURN_IF_ERROR(journal_->Flush());
    KVFS_RETURN_IF_ERROR(journal_->WriteBack());
    visibility_rounds_++;
    return Status::OK();
  }
  if (journal_->synced_position() == journal_->appended_position()) {
    appended_unsynced_ = 0;
    return Status::OK();
  }
  KVFS_RETURN_IF_ERROR(journal_->Sync());
  appended_unsynced_ = 0;
  group_commits_++;
  // 4. An S3 backing: the uploader thread publishes the journal behind the segment uploads (store_tier.cc).
  TierNoteSynced(journal_->synced_position());
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

Status StoreImpl::Sync() { return committer_.Sync(); }

}  // namespace kvfs
