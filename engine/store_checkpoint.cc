// Wiring of the Checkpointer (engine/checkpoint.h: snapshots, journal rotation, peers file, journal
// retirement) into the store: StartCheckpointer hands it the callbacks, CutForCheckpoint is the cut.
//
// Callers: Init; the checkpointer thread and Checkpoint() / Close through the callbacks.
// Thread safety: CutForCheckpoint holds ns_mu_ (no namespace writer) across one Sync (the committer's mutex); the
// peer-position callback takes the PeerTailer's mutex (PeerTailer::Positions).
// Invariants: the view taken at the cut holds exactly what the journal files before the new one hold.
#include "engine/store_impl.h"

namespace kvfs {

Status StoreImpl::StartCheckpointer() {
  CheckpointerOptions co;
  co.env = env_;
  co.backing_dir = opts_.backing_dir;
  co.node = opts_.node_id;
  co.generation = node_dir_->generation();
  co.checkpoint_entries = opts_.checkpoint_entries;
  co.checkpoint_interval_ms = opts_.checkpoint_interval_ms;
  co.peers_publish_ms = opts_.peers_publish_ms;
  co.retire_check_ms = opts_.retire_check_ms;
  checkpointer_ = std::make_unique<Checkpointer>(
      co, index_.get(), [this] { return CutForCheckpoint(); }, [this] { return journal_entries_.load(); },
      [this] { return std::make_pair(node_dir_->generation(), journal_->current_file_number()); },
      [this] { return tailer_->Positions(); });
  checkpointer_->Start();
  return Status::OK();
}

// Excludes namespace writers (ns_mu_), makes every entry queued so far durable, starts a new journal file
// for later entries and takes a view of the index: the view then holds exactly what the journal files
// before the new one hold (plus, harmlessly, SEAL states the group commit may set meanwhile).
Result<Checkpointer::Cut> StoreImpl::CutForCheckpoint() {
  std::lock_guard<std::mutex> l(ns_mu_);
  KVFS_RETURN_IF_ERROR(Sync());
  KVFS_RETURN_IF_ERROR(journal_->Sync());
  if (lost_entries_ > 0) {
    // The index still holds the files whose PUT was dropped (lost records): a snapshot of it would
    // publish them. No snapshot until the next mount rebuilds the index from the journals.
    return Status::IOError("no checkpoint after files were lost to a failed segment sync (until remount)");
  }
  Checkpointer::Cut cut;
  cut.generation = node_dir_->generation();
  cut.number = journal_->Rotate();
  if (!closing_) KVFS_RETURN_IF_ERROR(journal_->Sync());  // creates the new file: peers move past the old one
  cut.view = index_->NewView();
  return cut;
}

}  // namespace kvfs
