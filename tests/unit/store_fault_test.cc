// Fault injection at the Store level (FaultInjectionEnv, DeadlineEnv): ENOSPC, EIO on read / write /
// fdatasync, a backing directory that disappears, a short write, a hung request. Each gives the caller a
// clean Status (NoSpace / IOError / TimedOut -> ENOSPC / EIO) and nothing committed before is lost.
// Also the unit-level crash harness: power cuts (DropUnsyncedData) at random moments under concurrent
// writers (KVFS_POWERCUT_ROUNDS rounds, default 8).
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "blockstore/deadline_env.h"
#include "blockstore/fault_env.h"
#include "index/fsck.h"
#include "store_harness.h"

namespace kvfs {
namespace {

using testing_harness::Content;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

class StoreFaultTest : public testing_harness::StoreHarness {
 protected:
  // a and b committed and synced before the fault.
  void Baseline() {
    WriteFile("a", Content("a", 30000, 1));
    WriteFile("b", Content("b", 200000, 1));
    ASSERT_TRUE(store_->Sync().ok());
  }
  void ExpectFile(const std::string& n, size_t size) {
    Status st;
    std::string got = ReadAll(n, &st);
    EXPECT_TRUE(st.ok()) << n << ": " << st.ToString();
    EXPECT_TRUE(got == Content(n, size, 1)) << n;
  }
  void ExpectBaselineAfterRestart() {
    store_.reset();
    OpenStore();  // plain POSIX env: "after the outage"
    ExpectFile("a", 30000);
    ExpectFile("b", 200000);
  }
};

TEST_F(StoreFaultTest, NoSpaceOnSegmentWriteIsCleanAndRecovers) {
  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);
  Baseline();
  int id = env.FailWrites(ENOSPC, "/seg/");
  Status err;
  WriteFile("c", Content("c", 50000, 1), &err);
  EXPECT_TRUE(err.IsNoSpace()) << err.ToString();
  EXPECT_EQ(err.ToErrno(), ENOSPC);
  env.RemoveFault(id);
  WriteFile("d", Content("d", 50000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  ExpectFile("a", 30000);
  CloseStore();
  OpenStore();
  ExpectFile("a", 30000);
  ExpectFile("b", 200000);
  ExpectFile("d", 50000);
  Status st;
  ReadAll("c", &st);
  EXPECT_TRUE(st.IsNotFound()) << st.ToString();  // never committed
}

TEST_F(StoreFaultTest, EioOnJournalWriteFailsSyncThenRecovers) {
  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);
  Baseline();
  int id = env.FailWrites(EIO, "journal-");
  WriteFile("c", Content("c", 5000, 1));  // committed in the index, owed to the journal
  Status s = store_->Sync();
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_EQ(s.ToErrno(), EIO);
  env.RemoveFault(id);
  EXPECT_TRUE(store_->Sync().ok());  // the entries were kept and are written now
  store_.reset();                    // crash after the successful Sync
  OpenStore();
  ExpectFile("a", 30000);
  ExpectFile("b", 200000);
  ExpectFile("c", 5000);
}

// Known bug A of docs/semantics.md (fixed): a file whose record was written (close returned 0) but
// whose journal PUT then failed with ENOSPC was never retried unless something else was journaled, and
// was lost at the next mount. Now the committer keeps the entries, in order, retries them on its own, and
// Sync fails with ENOSPC until they are in; meanwhile the files are served from the index.
TEST_F(StoreFaultTest, NoSpaceOnJournalAppendIsRetriedUntilItLands) {
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  Baseline();
  const int id = env->FailWrites(ENOSPC, "journal-");
  // Dependent entries queued behind the failing PUT: a rename of the new file, a file created and
  // unlinked, a file replaced by a rename. Replay must see them in this order.
  WriteFile("c", Content("c", 5000, 1));
  ASSERT_TRUE(store_->Rename(kRootIno, "c", kRootIno, "d", 0, nullptr).ok());
  WriteFile("e", Content("e", 7000, 1));
  ASSERT_TRUE(store_->Unlink(kRootIno, "e", nullptr).ok());
  WriteFile("f", Content("f", 9000, 1));
  WriteFile("g.tmp", Content("g", 11000, 1));
  ASSERT_TRUE(store_->Rename(kRootIno, "g.tmp", kRootIno, "b", 0, nullptr).ok());
  Status s = store_->Sync();
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_EQ(s.ToErrno(), ENOSPC);
  EXPECT_GT(env->FaultFired(id), 0u);
  StoreStats st = store_->GetStats();
  EXPECT_GE(st.unjournaled_entries, 7u);
  EXPECT_GE(st.journal_retries, 1u);
  auto expect = [&](const std::string& name, const std::string& want) {
    Status rs;
    EXPECT_TRUE(ReadAll(name, &rs) == want) << name;
    EXPECT_TRUE(rs.ok()) << name << ": " << rs.ToString();
  };
  // Served from the index meanwhile.
  expect("d", Content("c", 5000, 1));
  expect("f", Content("f", 9000, 1));
  expect("b", Content("g", 11000, 1));
  env->RemoveFault(id);  // space is back
  // Neither a Sync nor a new entry: the committer's own retry must land the entries.
  for (int i = 0; i < 3000 && store_->GetStats().unjournaled_entries != 0; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(store_->GetStats().unjournaled_entries, 0u);
  // A power cut now: only what is durable survives.
  env->DropUnsyncedData();
  store_.reset();
  env.reset();
  OpenStore();  // rebuilt from the journals
  ExpectFile("a", 30000);
  expect("d", Content("c", 5000, 1));
  expect("f", Content("f", 9000, 1));
  expect("b", Content("g", 11000, 1));
  Status rs;
  for (const char* gone : {"c", "e", "g.tmp"}) {
    ReadAll(gone, &rs);
    EXPECT_TRUE(rs.IsNotFound()) << gone << ": " << rs.ToString();
  }
}

// While entries cannot be journaled, Close tries again (RESERVE freed) and then fails, naming them: the
// daemon exits nonzero and `kvfs umount` reports it. The owed file is absent after the next mount.
TEST_F(StoreFaultTest, CloseFailsWhileEntriesAreNotJournaled) {
  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);
  Baseline();
  env.FailWrites(ENOSPC, "journal-");
  WriteFile("c", Content("c", 5000, 1));
  Status s = store_->Close();
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  store_.reset();
  env.ClearFaults();
  OpenStore();
  ExpectFile("a", 30000);
  ExpectFile("b", 200000);
  Status rs;
  ReadAll("c", &rs);
  EXPECT_TRUE(rs.IsNotFound()) << rs.ToString();
}

// A journal write that timed out (DeadlineEnv poisons the descriptor) is retried on a reopened file
// once the export answers again, instead of failing every later group commit.
TEST_F(StoreFaultTest, TimedOutJournalWriteIsRetriedOnAReopenedFile) {
  FaultInjectionEnv fenv(Env::Posix());
  DeadlineEnvOptions dopts;
  dopts.deadline = std::chrono::milliseconds(300);
  DeadlineEnv denv(&fenv, dopts);
  OpenStore(&denv);
  Baseline();
  fenv.Hang(std::chrono::seconds(30), kFaultWrite, "journal-");
  WriteFile("c", Content("c", 5000, 1));
  Status s = store_->Sync();
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  fenv.ClearFaults();  // the export answers again (the hung write completes late: same bytes)
  for (int i = 0; i < 3000 && store_->GetStats().unjournaled_entries != 0; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(store_->GetStats().unjournaled_entries, 0u);
  EXPECT_TRUE(store_->Sync().ok());
  store_.reset();  // crash, before the Envs go away
  OpenStore();
  ExpectFile("a", 30000);
  ExpectFile("c", 5000);
}

TEST_F(StoreFaultTest, EioOnSegmentSyncFailsAndKeepsCommittedFiles) {
  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);
  Baseline();
  env.FailSyncs(EIO, "/seg/");
  WriteFile("c", Content("c", 5000, 1));
  Status s = store_->Sync();
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  env.ClearFaults();
  // fsyncgate: the segment writer stays broken until a new generation; reads keep working.
  ExpectFile("a", 30000);
  ExpectBaselineAfterRestart();
  Status st;
  std::string got = ReadAll("c", &st);
  EXPECT_TRUE(st.IsNotFound() || (st.ok() && got == Content("c", 5000, 1))) << st.ToString();
}

// Issue #6 (docs/design.md §7): a failed segment fdatasync loses every record of that segment written since
// its last successful sync (the kernel may have dropped the dirty pages; on NFS ENOSPC/EIO surface at
// fsync). The PUTs pointing at those records must never be journaled (a later round, on a new segment
// writer, used to journal them): fsync reports the error, the entry is dropped and counted, and after a
// power cut the file is absent -- never EIO, never wrong bytes -- and fsck is clean.
TEST_F(StoreFaultTest, FailedSegmentSyncNeverJournalsPutsOfLostRecords) {
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  Baseline();
  FaultRule once;
  once.ops = kFaultSync;
  once.path_substr = "/seg/";
  once.err = EIO;
  once.times = 1;
  const int id = env->AddFault(once);
  WriteFile("c", Content("c", 5000, 1));  // close returned 0: its PUT is queued (deferred commit)
  Status s = store_->Sync();               // fsync: the segment's fdatasync fails
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_EQ(s.ToErrno(), EIO);
  EXPECT_EQ(env->FaultFired(id), 1u);
  // The next round (a new segment writer, whose syncs succeed) must not journal c's PUT; it drops it
  // and reports it: to this Sync (EIO), or, when a background group-commit round ran first, to that
  // round (then this Sync has nothing left to report). Either way it is counted.
  s = store_->Sync();
  EXPECT_TRUE(s.ok() || s.IsIOError()) << s.ToString();
  EXPECT_GE(store_->GetStats().lost_entries, 1u);
  // Files written after the failure go to a new segment and are durable as usual.
  WriteFile("d", Content("d", 7000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  EXPECT_EQ(store_->GetStats().unjournaled_entries, 0u);
  // A power cut: the failed segment's unsynced bytes are gone.
  env->DropUnsyncedData();
  store_.reset();
  env.reset();
  OpenStore();  // rebuilt from the journals
  ExpectFile("a", 30000);
  ExpectFile("b", 200000);
  ExpectFile("d", 7000);
  Status rs;
  std::string got = ReadAll("c", &rs);
  EXPECT_TRUE(rs.IsNotFound() || (rs.ok() && got == Content("c", 5000, 1))) << rs.ToString();
  EXPECT_TRUE(rs.IsNotFound()) << "c's record was never durable: " << rs.ToString();
  CloseStore();
  FsckOptions o;
  o.backing_dir = backing_;
  o.verify_data = true;
  auto r = RunFsck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->problems, 0u);
}

// The same loss with nobody calling fsync: the deferred commit after close cannot be made durable, so
// it is reported like an unjournaled entry (logged, counted, Close fails: umount exits nonzero), and the
// next mount rebuilds the index from the journals: the file is absent, not pointing at lost bytes.
TEST_F(StoreFaultTest, CloseFailsWhenADeferredCommitsRecordWasLostToAFailedSync) {
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  Baseline();
  FaultRule once;
  once.ops = kFaultSync;
  once.path_substr = "/seg/";
  once.err = ENOSPC;
  once.times = 1;
  env->AddFault(once);
  WriteFile("c", Content("c", 5000, 1));
  Status s = store_->Close();
  EXPECT_FALSE(s.ok());
  env->DropUnsyncedData();
  store_.reset();
  env.reset();
  OpenStore();
  ExpectFile("a", 30000);
  ExpectFile("b", 200000);
  Status rs;
  ReadAll("c", &rs);
  EXPECT_TRUE(rs.IsNotFound()) << rs.ToString();
  CloseStore();
  FsckOptions o;
  o.backing_dir = backing_;
  o.verify_data = true;
  auto r = RunFsck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->problems, 0u);
}

TEST_F(StoreFaultTest, EioOnReadIsIOErrorNotCorruption) {
  OpenStore();
  Baseline();
  CloseStore();
  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);  // cold cache
  int id = env.FailReads(EIO, "/seg/");
  Status st;
  ReadAll("a", &st);
  EXPECT_TRUE(st.IsIOError()) << st.ToString();
  EXPECT_EQ(st.ToErrno(), EIO);
  EXPECT_EQ(store_->GetStats().checksum_failures, 0u);
  env.RemoveFault(id);
  ExpectFile("a", 30000);
  ExpectFile("b", 200000);
  store_.reset();
}

TEST_F(StoreFaultTest, BackingDirectoryDisappearsAndComesBack) {
  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);
  Baseline();
  ExpectFile("a", 30000);  // now in the LRU
  int id = env.Disappear(backing_, EIO);
  Status err;
  WriteFile("c", Content("c", 70000, 1), &err);
  EXPECT_FALSE(err.ok());
  EXPECT_EQ(err.ToErrno(), EIO) << err.ToString();
  EXPECT_TRUE(store_->Mkdir(kRootIno, "dir", 0755, 0, 0).ok());  // index only; owed to the journal
  Status ss = store_->Sync();
  EXPECT_FALSE(ss.ok());
  EXPECT_EQ(ss.ToErrno(), EIO) << ss.ToString();
  ExpectFile("a", 30000);  // served from memory during the outage
  uint64_t live = 0, files = 0, total = 0, avail = 0;
  EXPECT_FALSE(store_->StatFs(&live, &files, &total, &avail).ok());
  env.RemoveFault(id);
  ExpectBaselineAfterRestart();
}

TEST_F(StoreFaultTest, ShortSegmentWriteLeavesNoTornRecord) {
  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);
  Baseline();
  env.ShortWriteNth(1, 4096, EIO, "/seg/");
  Status err;
  WriteFile("c", Content("c", 100000, 1), &err);
  EXPECT_TRUE(err.IsIOError()) << err.ToString();
  WriteFile("d", Content("d", 100000, 1));  // written over the short write's space
  ASSERT_TRUE(store_->Sync().ok());
  CloseStore();
  FsckOptions o;
  o.backing_dir = backing_;
  o.verify_data = true;
  auto r = RunFsck(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->problems, 0u);
  EXPECT_EQ(r->Count(FsckKind::kSegmentDamaged), 0u);
  OpenStore();
  ExpectFile("a", 30000);
  ExpectFile("b", 200000);
  ExpectFile("d", 100000);
}

TEST_F(StoreFaultTest, HungBackingWriteTimesOutWithDeadlineEnv) {
  FaultInjectionEnv fenv(Env::Posix());
  DeadlineEnvOptions dopts;
  dopts.deadline = std::chrono::milliseconds(300);
  DeadlineEnv denv(&fenv, dopts);
  OpenStore(&denv);
  Baseline();
  ExpectFile("a", 30000);
  fenv.Hang(std::chrono::seconds(30), kFaultWrite | kFaultSync, "/seg/");
  const auto t0 = Clock::now();
  Status err;
  WriteFile("c", Content("c", 20000, 1), &err);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_TRUE(err.IsTimedOut()) << err.ToString();
  EXPECT_EQ(err.ToErrno(), EIO);
  EXPECT_LT(ms, 2000);
  EXPECT_GE(denv.timeouts(), 1u);
  ExpectFile("a", 30000);  // reads keep being served
  fenv.ClearFaults();      // wakes the hung request (its late result is dropped)
  // The file that timed out is poisoned: no late write can land on data written after it.
  WriteFile("d", Content("d", 20000, 1), &err);
  EXPECT_FALSE(err.ok());
  store_.reset();  // before the Envs go away
  OpenStore();
  ExpectFile("a", 30000);
  ExpectFile("b", 200000);
}

TEST(DeadlineEnvTest, HungRequestsTimeOutAndLateResultsAreDropped) {
  char tmpl[] = "/var/tmp/kvfs-deadline-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    FaultInjectionEnv fenv(Env::Posix());
    DeadlineEnvOptions o;
    o.deadline = std::chrono::milliseconds(100);
    o.threads = 2;
    DeadlineEnv env(&fenv, o);
    OpenOptions w;
    w.write = w.create = true;
    auto f = env.Open(dir + "/f", w);
    ASSERT_TRUE(f.ok());
    std::string data(8192, 'x');
    ASSERT_TRUE((*f)->Write(0, data.data(), data.size()).ok());
    ASSERT_TRUE((*f)->Sync().ok());

    int hang = fenv.Hang(std::chrono::seconds(20), kFaultRead);
    std::string buf(4096, '\0');
    size_t got = 99;
    auto t0 = Clock::now();
    Status s = (*f)->Read(0, 4096, buf.data(), &got);
    EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
    EXPECT_EQ(got, 0u);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
    // Queued behind hung requests (2 workers, both stuck): still bounded by the deadline.
    s = (*f)->Read(0, 4096, buf.data(), &got);
    EXPECT_TRUE(s.IsTimedOut());
    std::vector<std::string> names;
    fenv.Hang(std::chrono::seconds(20), kFaultList);
    EXPECT_TRUE(env.GetChildren(dir, &names).IsTimedOut());
    fenv.ClearFaults();
    (void)hang;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE((*f)->Read(0, 4096, buf.data(), &got).ok());
    EXPECT_EQ(got, 4096u);
    EXPECT_EQ(buf, std::string(4096, 'x'));
    EXPECT_TRUE(env.GetChildren(dir, &names).ok());
    EXPECT_EQ(names, std::vector<std::string>{"f"});

    // A timed-out write poisons the file for writes; reads still work.
    fenv.Hang(std::chrono::milliseconds(400), kFaultWrite);
    EXPECT_TRUE((*f)->Write(8192, data.data(), 4096).IsTimedOut());
    fenv.ClearFaults();
    Status w2 = (*f)->Write(8192, data.data(), 4096);
    EXPECT_TRUE(w2.IsIOError()) << w2.ToString();
    EXPECT_TRUE((*f)->Sync().IsIOError());
    EXPECT_TRUE((*f)->Read(0, 4096, buf.data(), &got).ok());
    EXPECT_GE(env.timeouts(), 4u);
    f->reset();
  }
  fs::remove_all(dir);
}

// A BackingDeadlineScope (a FUSE READ's budget) ends the calls made inside it by its end, together: the
// first waits for the hung read until the scope ends, the second finds the budget spent; a call outside
// the scope gets the Env's own deadline again.
TEST(DeadlineEnvTest, ReadBudgetScopeBoundsSequentialCalls) {
  char tmpl[] = "/var/tmp/kvfs-deadline-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    FaultInjectionEnv fenv(Env::Posix());
    DeadlineEnvOptions o;
    o.deadline = std::chrono::seconds(60);  // far longer than the hang: only the scope can end the calls
    DeadlineEnv env(&fenv, o);
    OpenOptions w;
    w.write = w.create = true;
    auto f = env.Open(dir + "/f", w);
    ASSERT_TRUE(f.ok());
    std::string data(4096, 'x');
    ASSERT_TRUE((*f)->Write(0, data.data(), data.size()).ok());
    fenv.Hang(std::chrono::seconds(5), kFaultRead | kFaultList);
    std::string buf(4096, '\0');
    size_t got = 0;
    {
      BackingDeadlineScope budget(std::chrono::milliseconds(200));
      EXPECT_TRUE((*f)->Read(0, 4096, buf.data(), &got).IsTimedOut());
      std::vector<std::string> names;
      EXPECT_TRUE(env.GetChildren(dir, &names).IsTimedOut());
      {
        BackingDeadlineScope longer(std::chrono::seconds(30));  // nested: the earlier end stays
        EXPECT_EQ(BackingDeadlineScope::Current(), budget.Current());
      }
    }
    EXPECT_EQ(env.timeouts(), 2u);
    EXPECT_EQ(BackingDeadlineScope::Current(), BackingDeadlineScope::Clock::time_point::max());
    fenv.ClearFaults();
    ASSERT_TRUE((*f)->Read(0, 4096, buf.data(), &got).ok());
    EXPECT_EQ(buf, data);
    f->reset();
  }
  fs::remove_all(dir);
}

// Unit-level crash harness: 4 writer threads commit self-describing files (name + size in the name,
// content derived from the name) and Sync now and then; at a random moment the backing layer drops every
// unsynced write (power cut / NFS client crash) while they run. After restart: every file acknowledged
// by a successful Sync is byte-identical, and every file that is visible reads exactly what its writer
// wrote (never other bytes). The mount-level SIGKILL harness is tests/integration/crash_test.py.
TEST_F(StoreFaultTest, PowerCutAtRandomMomentsUnderConcurrentWriters) {
  const char* env_rounds = getenv("KVFS_POWERCUT_ROUNDS");
  const int rounds = env_rounds ? atoi(env_rounds) : 8;
  std::mt19937 rng(12345);
  uint64_t total_acked = 0, total_visible = 0;
  for (int round = 0; round < rounds; ++round) {
    auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
    OpenStore(env.get());
    std::atomic<bool> stop{false};
    // Set just before the power cut: a Sync that returns after it may have been "acknowledged" by the
    // fault Env after the drop (impossible in a real power cut, where the process dies with it).
    std::atomic<bool> cut{false};
    std::vector<std::vector<std::pair<std::string, size_t>>> acked(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 r(round * 100 + t);
        std::vector<std::pair<std::string, size_t>> pending;
        for (int i = 0; !stop.load(); ++i) {
          size_t size = 147456 + r() % (2359296 - 147456);  // 144 KiB .. 2.25 MiB
          if (r() % 4 == 0) size = r() % 70000;
          std::string name = "r" + std::to_string(round) + "-t" + std::to_string(t) + "-" + std::to_string(i) + "-" +
                             std::to_string(size);
          Status err;
          WriteFile(name, Content(name, size, 5), &err);
          if (err.ok()) pending.emplace_back(name, size);
          if (r() % 3 == 0) {
            if (store_->Sync().ok() && !cut.load()) {
              for (auto& p : pending) acked[t].push_back(p);
              pending.clear();
            }
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 120));
    cut = true;
    env->DropUnsyncedData();  // the power cut, while the writers run (its errors are irrelevant)
    stop = true;
    for (auto& th : threads) th.join();
    store_.reset();
    env.reset();
    OpenStore();  // reboot: plain POSIX
    for (const auto& per : acked) {
      for (const auto& [name, size] : per) {
        Status st;
        std::string got = ReadAll(name, &st);
        EXPECT_TRUE(st.ok() && got == Content(name, size, 5)) << "acknowledged " << name << ": " << st.ToString();
        total_acked++;
      }
    }
    for (const auto& name : List()) {
      const size_t size = std::stoull(name.substr(name.rfind('-') + 1));
      Status st;
      std::string got = ReadAll(name, &st);
      EXPECT_TRUE(st.ok() && got == Content(name, size, 5)) << "visible " << name << ": " << st.ToString();
      total_visible++;
    }
    CloseStore();
  }
  RecordProperty("acked_files", static_cast<int>(total_acked));
  RecordProperty("visible_files", static_cast<int>(total_visible));
  std::printf("power cuts: %d rounds, %llu acknowledged files verified, %llu visible files verified\n", rounds,
              (unsigned long long)total_acked, (unsigned long long)total_visible);
}

}  // namespace
}  // namespace kvfs
