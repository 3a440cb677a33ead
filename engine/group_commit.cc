// GroupCommitter (engine/group_commit.h): the journal entry queue, the committer thread and its
// ordering, grouping, retry and Sync rules. What a round does is the owner's hook (StoreImpl::CommitRound
// in engine/store_commit.cc).
//
// Callers: StoreImpl. Thread safety: mu_ guards everything but the thread handle and retries_; it is
// never held while the round hook runs. Invariants: see the Rules in group_commit.h.
#include "engine/group_commit.h"

#include <algorithm>
#include <iterator>

#include <spdlog/spdlog.h>

#include "blockstore/log.h"

namespace kvfs {

GroupCommitter::GroupCommitter(GroupCommitterOptions opts, GroupCommitHooks hooks)
    : opts_(opts), hooks_(std::move(hooks)) {}

GroupCommitter::~GroupCommitter() { Stop(); }

void GroupCommitter::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable() || stop_) return;  // started, or stopped for good
  thread_ = std::thread([this] { Loop(); });
}

void GroupCommitter::Enqueue(JournalEntry e) {
  bool first;
  {
    std::lock_guard<std::mutex> l(mu_);
    first = pending_.empty();
    pending_.push_back(std::move(e));
  }
  // The first entry of a group starts the group-commit interval; later ones just join it.
  if (first) cv_.notify_one();
}

void GroupCommitter::Kick() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!owed_) return;
    retry_kick_ = true;
  }
  cv_.notify_all();
}

bool GroupCommitter::owed() const {
  std::lock_guard<std::mutex> l(mu_);
  return owed_;
}

uint64_t GroupCommitter::Unjournaled() const {
  std::lock_guard<std::mutex> l(mu_);
  return pending_.size() + (hooks_.in_flight ? hooks_.in_flight() : 0);
}

void GroupCommitter::Stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable()) t.join();
  {
    std::lock_guard<std::mutex> l(mu_);
    exited_ = true;  // also when never started
  }
  done_cv_.notify_all();  // Sync callers waiting for a round that will not come
}

Status GroupCommitter::Sync() {
  std::unique_lock<std::mutex> l(mu_);
  if (exited_) return Status::OK();
  // The round that starts after this point covers everything enqueued before the call.
  const uint64_t target = rounds_started_ + 1;
  sync_requested_ = true;
  cv_.notify_all();
  done_cv_.wait(l, [&] { return rounds_done_ >= target || exited_; });
  if (last_ok_round_ >= target) return Status::OK();
  return last_round_status_.ok() ? Status::IOError("group commit did not complete") : last_round_status_;
}

void GroupCommitter::Loop() {
  const auto interval = std::chrono::milliseconds(std::max<int64_t>(1, opts_.interval.count()));
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    if (owed_) {
      // Entries are owed to the journal after a failed round: retry after the backoff, at once when
      // space may be back (Kick) or a Sync() caller asks, without waiting for new entries.
      cv_.wait_until(l, retry_at_, [&] { return stop_ || sync_requested_ || retry_kick_; });
    } else {
      // Wait for work: a Sync() caller, queued entries (then wait out the interval to gather a group), or
      // the durability deadline of earlier visibility rounds.
      auto due = [&] { return undurable_ && std::chrono::steady_clock::now() >= durable_due_; };
      auto work = [&] { return stop_ || sync_requested_ || !pending_.empty() || due(); };
      if (undurable_) {
        cv_.wait_until(l, durable_due_, work);
      } else {
        cv_.wait(l, work);
      }
      if (!work()) continue;  // spurious wake-up before the deadline
      if (!sync_requested_ && !stop_ && !pending_.empty()) {
        cv_.wait_for(l, interval, [&] { return stop_ || sync_requested_; });
      }
    }
    if (stop_ && pending_.empty() && !sync_requested_ && !owed_ && !undurable_) break;
    const auto start = std::chrono::steady_clock::now();
    // Durable: every round without a durability interval; a Sync() caller's or the final one; or the
    // deadline of the visibility rounds since the last durable one has come.
    const bool durable = opts_.sync_interval.count() <= 0 || sync_requested_ || stop_ ||
                         (undurable_ && start >= durable_due_);
    sync_requested_ = false;
    retry_kick_ = false;
    std::vector<JournalEntry> batch;
    batch.swap(pending_);
    const uint64_t round = ++rounds_started_;
    l.unlock();
    Status lost;
    Status s = hooks_.round(&batch, &lost, durable);
    if (!s.ok() && hooks_.on_round_failed) hooks_.on_round_failed(s);
    l.lock();
    const auto now = std::chrono::steady_clock::now();
    if (!s.ok()) {
      // Keep the entries for the next round, in order ahead of anything queued meanwhile (they are still
      // owed to the journal); report the error to the waiters of this round.
      pending_.insert(pending_.begin(), std::make_move_iterator(batch.begin()),
                      std::make_move_iterator(batch.end()));
      LogLimited(spdlog::level::err, LogKey("group-commit", s),
                 "kvfs: group commit failed: {} ({} entries not journaled yet, retrying)", ErrnoText(s),
                 pending_.size() + (hooks_.in_flight ? hooks_.in_flight() : 0));
      if (!owed_) {
        owed_since_ = now;
        backoff_ = interval;
      } else {
        backoff_ = std::min<std::chrono::milliseconds>(2 * backoff_, opts_.max_backoff);
      }
      owed_ = true;
      retry_at_ = now + backoff_;
      retries_++;
    } else {
      if (owed_) {
        spdlog::info("kvfs: journal writable again: owed entries journaled after {} ms of failures",
                     std::chrono::duration_cast<std::chrono::milliseconds>(now - owed_since_).count());
      }
      owed_ = false;
      if (durable) {
        // Entries a visibility round dropped fail the Sync() callers of the durable round after it.
        if (lost.ok()) lost = lost_unreported_;
        lost_unreported_ = Status::OK();
        undurable_ = false;
        durable_rounds_++;
        // A round that dropped lost entries fails its Sync() callers (fsync reports the loss).
        if (lost.ok()) last_ok_round_ = round;
      } else {
        if (!undurable_) durable_due_ = start + opts_.sync_interval;
        undurable_ = true;
        visibility_rounds_++;
        if (!lost.ok()) lost_unreported_ = lost;  // no Sync() waits on a visibility round
      }
    }
    last_round_status_ = s.ok() ? lost : s;
    rounds_done_ = round;
    done_cv_.notify_all();
    // Stop: a final durable round still runs for visibility rounds that Stop interrupted.
    if (stop_ && ((pending_.empty() && !undurable_) || !s.ok())) break;
  }
  exited_ = true;
  done_cv_.notify_all();
}

}  // namespace kvfs
