// GroupCommitter: the queue of journal entries and the thread that publishes them in rounds (group
// commit, docs/design.md §2). It owns the ordering, grouping, durability, retry and Sync rules; what a
// round does (SEALs, journal append; in a durable round segments fdatasync first and journal fdatasync
// last) is the owner's CommitRound hook, so the queue can be tested without a journal.
//
// Rules:
//  * Order: rounds see entries in Enqueue order; entries a failed round leaves in its batch are queued
//    again ahead of anything enqueued meanwhile (they are owed, in order).
//  * Grouping: the first entry of a group starts the gather interval; later ones join the round. A Sync
//    (or Stop) starts a round at once.
//  * Visibility vs durability: a round is *durable* (the hook fdatasyncs) when sync_interval is 0, when
//    a Sync() caller or Stop asked for it, or when sync_interval has passed since the first non-durable
//    round after the last durable one; other rounds only publish (visibility rounds). After a visibility
//    round a durable round follows within sync_interval even if no entry comes (the thread wakes for it).
//  * Retries: after a failed round the entries are owed; the next round runs after a backoff (interval,
//    doubling up to max_backoff) without waiting for new entries, or at once on Kick() or Sync().
//  * Sync: returns OK once a durable round that started after the call succeeded without losing entries; the
//    error of the first round that covers the call otherwise (the entries stay owed and are retried).
//  * Stop: a final round for what is queued, then the thread ends; Sync after Stop returns OK.
//
// Callers: StoreImpl (engine/store_commit.cc) enqueues under its ns_mu_ (journal order = index order),
// Sync from fsync / Close / checkpoints, Kick from the evictor when space was freed.
// Thread safety: every method may be called from any thread; one mutex guards the queue and the round
// counters and is never held while the round hook runs. Hooks run on the committer thread, except
// in_flight, which is called with the mutex held (must only read a counter).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "blockstore/status.h"
#include "index/journal_format.h"

namespace kvfs {

struct GroupCommitterOptions {
  std::chrono::milliseconds interval{20};      // gather window after the first entry of a group (>= 1 ms)
  std::chrono::milliseconds max_backoff{1000};  // retry backoff cap while entries are owed
  // Durability interval: a visibility round is followed by a durable one at most this long after it
  // (0: every round is durable).
  std::chrono::milliseconds sync_interval{0};
};

struct GroupCommitHooks {
  // One round over `batch` (entries in queue order). Returns OK, or the round's error: entries still in
  // *batch are then queued again (the round removes those it handed over for good, e.g. appended to a
  // journal writer that retries them itself). *lost: set (round OK) when the round dropped entries that
  // must fail the Sync callers of this round. durable: make everything published so far durable
  // (segments, then journal); false: publish only (a visibility round). A durable round may be called
  // with an empty batch (the durability deadline of earlier visibility rounds).
  std::function<Status(std::vector<JournalEntry>* batch, Status* lost, bool durable)> round;
  // After a failed round, with no lock held (may be empty).
  std::function<void(const Status&)> on_round_failed;
  // Entries handed to rounds and not durable yet (counted in Unjournaled and the failure log; may be empty).
  std::function<uint64_t()> in_flight;
};

class GroupCommitter {
 public:
  GroupCommitter(GroupCommitterOptions opts, GroupCommitHooks hooks);
  ~GroupCommitter();  // Stop()

  // Starts the committer thread. Entries enqueued before are committed by its first round.
  void Start();
  // Queues e for the next round. The caller serializes Enqueue calls if their order matters.
  void Enqueue(JournalEntry e);
  // Durability barrier (see Rules). Before Start it waits for Start.
  Status Sync();
  // Owed entries: retry now instead of after the backoff (space was freed). No-op when nothing is owed.
  void Kick();
  // A final round for what is queued, then the thread ends. Idempotent.
  void Stop();

  bool owed() const;                 // a round failed and its entries are not durable yet
  uint64_t Unjournaled() const;      // queued + in_flight: what a crash now would lose
  uint64_t retries() const { return retries_.load(); }  // rounds that failed
  uint64_t durable_rounds() const { return durable_rounds_.load(); }        // durable rounds that succeeded
  uint64_t visibility_rounds() const { return visibility_rounds_.load(); }  // publish-only rounds that succeeded

 private:
  void Loop();

  const GroupCommitterOptions opts_;
  const GroupCommitHooks hooks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // wakes the committer
  std::condition_variable done_cv_;  // wakes Sync() waiters
  std::vector<JournalEntry> pending_;
  uint64_t rounds_started_ = 0, rounds_done_ = 0, last_ok_round_ = 0;
  Status last_round_status_;
  bool sync_requested_ = false;
  bool stop_ = false;
  // A visibility round succeeded since the last durable round: a durable round is due at durable_due_.
  bool undurable_ = false;
  std::chrono::steady_clock::time_point durable_due_{};
  Status lost_unreported_;  // a visibility round dropped entries: reported by the next durable round
  bool exited_ = false;  // the thread ended (or Stop ran without Start): Sync returns OK at once
  // A round failed: its entries (re-queued in pending_, or kept by the round's owner) are owed. The
  // committer retries at retry_at_ (backoff interval .. max_backoff) without waiting for new entries,
  // or at once when space may have come back (Kick) or a Sync() asks.
  bool owed_ = false, retry_kick_ = false;
  std::chrono::milliseconds backoff_{0};
  std::chrono::steady_clock::time_point retry_at_{}, owed_since_{};
  std::thread thread_;
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> durable_rounds_{0}, visibility_rounds_{0};
};

}  // namespace kvfs
