// GroupCommitter (engine/group_commit.h) without a journal: a fake round records what it was given and
// fails on demand. Order, grouping, retries, Sync results and Stop. No durations are asserted: the
// gather interval and backoff are set to an hour where a test must not depend on them firing.
#include "engine/group_commit.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kvfs {
namespace {

constexpr auto kHour = std::chrono::milliseconds(3600 * 1000);

JournalEntry E(int i) { return JournalEntry::Unlink("/f" + std::to_string(i), i); }

// The round hook: takes the batch into `journal` unless a failure is scripted for this round. A scripted
// failure may first take `take_before_fail` entries (as a journal writer that keeps what was appended).
class FakeJournal {
 public:
  Status Round(std::vector<JournalEntry>* batch, Status* lost, bool durable) {
    std::lock_guard<std::mutex> l(mu_);
    rounds_.push_back(batch->size());
    durable_.push_back(durable);
    Status s;
    if (!script_.empty()) {
      Step st = script_.front();
      script_.pop_front();
      for (size_t i = 0; i < st.take_before_fail && !batch->empty(); i++) {
        journal_.push_back(batch->front().path);
        batch->erase(batch->begin());
      }
      if (!st.fail.ok()) {
        s = st.fail;
      } else if (!st.lost.ok()) {
        *lost = st.lost;
      }
    }
    if (s.ok()) {
      for (auto& e : *batch) journal_.push_back(e.path);
      batch->clear();
    }
    cv_.notify_all();
    return s;
  }
  void Script(Status fail, size_t take_before_fail = 0, Status lost = Status::OK()) {
    std::lock_guard<std::mutex> l(mu_);
    script_.push_back({fail, take_before_fail, lost});
  }
  void WaitRounds(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return rounds_.size() >= n; });
  }
  std::vector<std::string> journal() {
    std::lock_guard<std::mutex> l(mu_);
    return journal_;
  }
  std::vector<size_t> rounds() {
    std::lock_guard<std::mutex> l(mu_);
    return rounds_;
  }
  std::vector<bool> durable() {  // per round: was it a durable round
    std::lock_guard<std::mutex> l(mu_);
    return durable_;
  }
  GroupCommitHooks Hooks(std::vector<Status>* failures = nullptr) {
    GroupCommitHooks h;
    h.round = [this](std::vector<JournalEntry>* b, Status* lost, bool durable) { return Round(b, lost, durable); };
    h.on_round_failed = [failures](const Status& s) {
      if (failures) failures->push_back(s);
    };
    return h;
  }

 private:
  struct Step {
    Status fail;
    size_t take_before_fail = 0;
    Status lost;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Step> script_;
  std::vector<std::string> journal_;
  std::vector<size_t> rounds_;
  std::vector<bool> durable_;
};

std::vector<std::string> Paths(int from, int to) {
  std::vector<std::string> v;
  for (int i = from; i < to; i++) v.push_back("/f" + std::to_string(i));
  return v;
}

TEST(GroupCommitTest, SyncCommitsEverythingQueuedBeforeItInOneRoundInOrder) {
  FakeJournal j;
  GroupCommitter gc({kHour, kHour}, j.Hooks());
  gc.Start();
  for (int i = 0; i < 5; i++) gc.Enqueue(E(i));
  ASSERT_TRUE(gc.Sync().ok());
  EXPECT_EQ(j.journal(), Paths(0, 5));
  EXPECT_EQ(j.rounds(), std::vector<size_t>{5});  // one group, started by the Sync, not the interval
  EXPECT_EQ(gc.Unjournaled(), 0u);
  EXPECT_FALSE(gc.owed());
}

TEST(GroupCommitTest, QueuedEntriesGoWithoutSyncAfterTheInterval) {
  FakeJournal j;
  GroupCommitter gc({std::chrono::milliseconds(1), kHour}, j.Hooks());
  gc.Start();
  gc.Enqueue(E(0));
  gc.Enqueue(E(1));
  j.WaitRounds(1);
  EXPECT_EQ(j.journal().front(), "/f0");
}

TEST(GroupCommitTest, EntriesEnqueuedBeforeStartGoInTheFirstRound) {
  FakeJournal j;
  GroupCommitter gc({kHour, kHour}, j.Hooks());
  gc.Enqueue(E(0));
  gc.Enqueue(E(1));
  gc.Start();
  ASSERT_TRUE(gc.Sync().ok());
  EXPECT_EQ(j.journal(), Paths(0, 2));
}

TEST(GroupCommitTest, FailedRoundKeepsItsEntriesAheadOfNewOnesAndSyncReportsTheError) {
  FakeJournal j;
  std::vector<Status> failures;
  GroupCommitter gc({kHour, kHour}, j.Hooks(&failures));
  gc.Start();
  for (int i = 0; i < 3; i++) gc.Enqueue(E(i));
  j.Script(Status::NoSpace("full"));
  Status s = gc.Sync();
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_TRUE(gc.owed());
  EXPECT_EQ(gc.retries(), 1u);
  EXPECT_EQ(gc.Unjournaled(), 3u);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_TRUE(failures[0].IsNoSpace());
  EXPECT_TRUE(j.journal().empty());
  gc.Enqueue(E(3));
  ASSERT_TRUE(gc.Sync().ok());  // a Sync retries at once, without waiting for the backoff
  EXPECT_EQ(j.journal(), Paths(0, 4));
  EXPECT_FALSE(gc.owed());
  EXPECT_EQ(gc.Unjournaled(), 0u);
}

TEST(GroupCommitTest, EntriesTheFailedRoundTookAreNotQueuedAgain) {
  FakeJournal j;
  GroupCommitter gc({kHour, kHour}, j.Hooks());
  gc.Start();
  for (int i = 0; i < 4; i++) gc.Enqueue(E(i));
  j.Script(Status::IOError("sync failed"), 2);  // the writer kept the first two (it rewrites them itself)
  EXPECT_FALSE(gc.Sync().ok());
  EXPECT_EQ(gc.Unjournaled(), 2u);
  ASSERT_TRUE(gc.Sync().ok());
  EXPECT_EQ(j.journal(), Paths(0, 4));  // no duplicates, same order
}

TEST(GroupCommitTest, KickRetriesOwedEntriesBeforeTheBackoff) {
  FakeJournal j;
  GroupCommitter gc({kHour, kHour}, j.Hooks());
  gc.Start();
  gc.Enqueue(E(0));
  j.Script(Status::NoSpace("full"));
  EXPECT_FALSE(gc.Sync().ok());
  gc.Kick();
  j.WaitRounds(2);
  EXPECT_EQ(j.journal(), Paths(0, 1));
  ASSERT_TRUE(gc.Sync().ok());
  EXPECT_FALSE(gc.owed());
}

TEST(GroupCommitTest, OwedEntriesAreRetriedAfterTheBackoffWithoutKickOrSync) {
  FakeJournal j;
  GroupCommitter gc({std::chrono::milliseconds(1), std::chrono::milliseconds(4)}, j.Hooks());
  // The failures are scripted before the entry is queued: queued first, a round 1 ms later (the
  // interval) could journal it before the script existed, and WaitRounds(4) then waited forever (a CI
  // shard hung on it under load, 2026-12-07).
  j.Script(Status::IOError("a"));
  j.Script(Status::IOError("b"));
  j.Script(Status::IOError("c"));
  gc.Start();
  gc.Enqueue(E(0));
  j.WaitRounds(4);  // three failures, then the retry that succeeds
  EXPECT_EQ(j.journal(), Paths(0, 1));
  EXPECT_EQ(gc.retries(), 3u);
}

TEST(GroupCommitTest, KickWithNothingOwedDoesNothing) {
  FakeJournal j;
  GroupCommitter gc({kHour, kHour}, j.Hooks());
  gc.Start();
  gc.Kick();
  ASSERT_TRUE(gc.Sync().ok());
  EXPECT_EQ(j.rounds(), std::vector<size_t>{0});  // only the Sync's (empty) round
}

TEST(GroupCommitTest, RoundThatLostEntriesFailsItsSyncButIsNotRetried) {
  FakeJournal j;
  GroupCommitter gc({kHour, kHour}, j.Hooks());
  gc.Start();
  gc.Enqueue(E(0));
  j.Script(Status::OK(), 0, Status::IOError("1 file(s) not made durable"));
  Status s = gc.Sync();
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_FALSE(gc.owed());
  EXPECT_EQ(gc.retries(), 0u);
  ASSERT_TRUE(gc.Sync().ok());  // the next round is clean
}

TEST(GroupCommitTest, StopCommitsWhatIsQueuedAndLaterSyncsReturnOk) {
  FakeJournal j;
  GroupCommitter gc({kHour, kHour}, j.Hooks());
  gc.Start();
  for (int i = 0; i < 3; i++) gc.Enqueue(E(i));
  gc.Stop();
  EXPECT_EQ(j.journal(), Paths(0, 3));
  EXPECT_TRUE(gc.Sync().ok());
  gc.Stop();  // idempotent
}

TEST(GroupCommitTest, StopWithoutStartAndSyncAfterItDoNotHang) {
  FakeJournal j;
  GroupCommitter gc({kHour, kHour}, j.Hooks());
  gc.Stop();
  EXPECT_TRUE(gc.Sync().ok());
  gc.Start();  // refused after Stop
  EXPECT_TRUE(gc.Sync().ok());
  EXPECT_TRUE(j.rounds().empty());
}

TEST(GroupCommitTest, ConcurrentEnqueuersKeepEachThreadsOrder) {
  FakeJournal j;
  GroupCommitter gc({std::chrono::milliseconds(1), kHour}, j.Hooks());
  gc.Start();
  constexpr int kThreads = 4, kPer = 500;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kPer; i++) {
        gc.Enqueue(JournalEntry::Unlink("/t" + std::to_string(t) + "/" + std::to_string(i), 0));
        if (i % 100 == 99) {
          EXPECT_TRUE(gc.Sync().ok());
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  ASSERT_TRUE(gc.Sync().ok());
  auto journal = j.journal();
  ASSERT_EQ(journal.size(), static_cast<size_t>(kThreads * kPer));
  std::vector<int> next(kThreads, 0);
  for (const auto& p : journal) {
    const int t = p[2] - '0';
    EXPECT_EQ(p, "/t" + std::to_string(t) + "/" + std::to_string(next[t]));
    next[t]++;
  }
}

// Visibility vs durability (#15): with a durability interval, the interval's rounds only publish; a Sync()
// runs a durable round (empty here: everything was published already) and only that one satisfies it.
TEST(GroupCommitTest, RoundsWithinTheSyncIntervalOnlyPublishAndSyncMakesThemDurable) {
  FakeJournal j;
  GroupCommitter gc({std::chrono::milliseconds(1), kHour, kHour}, j.Hooks());
  gc.Start();
  gc.Enqueue(E(0));
  j.WaitRounds(1);
  gc.Enqueue(E(1));
  j.WaitRounds(2);
  EXPECT_EQ(j.durable(), (std::vector<bool>{false, false}));
  ASSERT_TRUE(gc.Sync().ok());
  EXPECT_EQ(gc.visibility_rounds(), 2u);
  EXPECT_EQ(j.rounds(), (std::vector<size_t>{1, 1, 0}));
  EXPECT_EQ(j.durable(), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(j.journal(), Paths(0, 2));
  EXPECT_EQ(gc.durable_rounds(), 1u);
}

// sync_interval 0: every round is durable (the behaviour before #15).
TEST(GroupCommitTest, ZeroSyncIntervalMakesEveryRoundDurable) {
  FakeJournal j;
  GroupCommitter gc({std::chrono::milliseconds(1), kHour, std::chrono::milliseconds(0)}, j.Hooks());
  gc.Start();
  gc.Enqueue(E(0));
  j.WaitRounds(1);
  EXPECT_EQ(j.durable(), std::vector<bool>{true});
  EXPECT_EQ(gc.visibility_rounds(), 0u);
}

// A visibility round is followed by a durable round when the durability interval has passed, with no new
// entry to start it (the committer wakes for the deadline).
TEST(GroupCommitTest, ADurableRoundFollowsAVisibilityRoundWithoutNewEntries) {
  FakeJournal j;
  GroupCommitter gc({std::chrono::milliseconds(1), kHour, std::chrono::milliseconds(1)}, j.Hooks());
  gc.Start();
  gc.Enqueue(E(0));
  j.WaitRounds(2);
  EXPECT_EQ(j.rounds(), (std::vector<size_t>{1, 0}));
  EXPECT_EQ(j.durable(), (std::vector<bool>{false, true}));
  gc.Stop();  // nothing left to make durable: no further round
  EXPECT_EQ(gc.durable_rounds(), 1u);
  EXPECT_EQ(j.rounds().size(), 2u);
}

// Stop after visibility rounds: the final round is durable (a clean unmount leaves nothing unsynced).
TEST(GroupCommitTest, StopAfterAVisibilityRoundRunsADurableRound) {
  FakeJournal j;
  GroupCommitter gc({std::chrono::milliseconds(1), kHour, kHour}, j.Hooks());
  gc.Start();
  gc.Enqueue(E(0));
  j.WaitRounds(1);
  gc.Stop();
  EXPECT_EQ(j.durable(), (std::vector<bool>{false, true}));
}

// A visibility round that dropped lost entries fails the Sync() of the durable round after it.
TEST(GroupCommitTest, ALossInAVisibilityRoundFailsTheNextSync) {
  FakeJournal j;
  GroupCommitter gc({std::chrono::milliseconds(1), kHour, kHour}, j.Hooks());
  j.Script(Status::OK(), 0, Status::IOError("lost"));
  gc.Start();
  gc.Enqueue(E(0));
  j.WaitRounds(1);
  EXPECT_FALSE(gc.Sync().ok());
  EXPECT_TRUE(gc.Sync().ok());
}

}  // namespace
}  // namespace kvfs
