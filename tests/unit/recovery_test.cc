// Mount-time recovery at the Store level (engine/recovery.h, Store::Open): the crash states are made with
// FaultInjectionEnv (a short segment write, a failing journal, a crash = the Store destroyed without
// Close), then a new Store must
//   * CUT a torn segment tail (a CUT entry at the head of the new generation's journal; the file keeps
//     every byte), and SEAL the earlier generation's unsealed segment;
//   * journal a SEAL that a crash lost (sealed on disk, no SEAL entry);
//   * apply `kvfs-fsck --repair` entries (UNLINK, SEAL) appended to its own journal while it was down,
//     although its local index is clean;
// after which kvfs-fsck finds no problem, and a second recovery finds nothing to do.
#include <gtest/gtest.h>

#include "blockstore/fault_env.h"
#include "index/fsck.h"
#include "index/journal.h"
#include "store_harness.h"

namespace kvfs {
namespace {

using testing_harness::Content;
namespace fs = std::filesystem;

class RecoveryTest : public testing_harness::StoreHarness {
 protected:
  FsckReport Fsck(bool repair = false, const std::string& rebuild_index = "") {
    FsckOptions o;
    o.backing_dir = backing_;
    o.repair = repair;
    o.rebuild_index_dir = rebuild_index;
    o.process_alive = [](const HostIdentity&) { return false; };  // the crashed "mount" was this process
    auto r = RunFsck(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : FsckReport{};
  }
  static std::string Describe(const FsckReport& r) {
    std::string s;
    for (const auto& f : r.findings) {
      s += std::string(FsckKindName(f.kind)) + (f.severity == FsckSeverity::kProblem ? " P " : " i ") + f.detail + "\n";
    }
    return s;
  }
  // Entries of the newest journal file (the running generation's journal-<G>-0).
  std::vector<JournalEntry> NewestJournalEntries() {
    auto paths = JournalPaths();
    EXPECT_FALSE(paths.empty());
    std::vector<std::pair<JournalEntry, JournalPosition>> entries;
    JournalReadReport rep;
    EXPECT_TRUE(ReadJournalFile(Env::Posix(), paths.back(), JournalReaderOptions{}, &entries, &rep).ok());
    std::vector<JournalEntry> out;
    for (auto& [e, p] : entries) out.push_back(e);
    return out;
  }
  void ExpectFile(const std::string& n, size_t size, uint64_t seed = 1) {
    Status st;
    std::string got = ReadAll(n, &st);
    EXPECT_TRUE(st.ok()) << n << ": " << st.ToString();
    EXPECT_TRUE(got == Content(n, size, seed)) << n;
  }
  void ExpectNothingToRecover() {
    auto st = store_->GetStats();
    EXPECT_EQ(st.recovery_entries, 0u);
    EXPECT_EQ(st.recovery_cuts, 0u);
    EXPECT_EQ(st.recovery_seals, 0u);
  }
};

TEST_F(RecoveryTest, TornSegmentTailIsCutAndTheSegmentSealedAtMount) {
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  const Location a = WriteFile("a", Content("a", 30000, 1));
  WriteFile("b", Content("b", 200000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  const std::string seg = SegPath(a);
  const uint64_t valid_end = fs::file_size(seg);
  // The next record write reaches the file only partly (a header block and a bit), then the mount dies.
  env->ShortWriteNth(1, 4096 + 512, EIO, "/seg/");
  // The writer's truncation of what landed fails too (a crash before it), so the torn bytes stay.
  env->AddFault(FaultRule{.ops = kFaultTruncate, .path_substr = "/seg/", .err = EIO});
  Status err;
  WriteFile("c", Content("c", 100000, 1), &err);
  ASSERT_TRUE(err.IsIOError()) << err.ToString();
  store_.reset();  // crash
  env.reset();
  const uint64_t crashed_size = fs::file_size(seg);
  ASSERT_EQ(crashed_size, valid_end + 4096 + 512);

  env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  auto st = store_->GetStats();
  EXPECT_EQ(st.recovery_cuts, 1u);
  EXPECT_EQ(st.recovery_seals, 1u);
  auto entries = NewestJournalEntries();
  ASSERT_GE(entries.size(), 2u);
  EXPECT_EQ(entries[0].op, JournalOp::kCut);  // CUTs lead journal-<G>-0
  EXPECT_EQ(entries[0].cut_file.kind, FileRef::Kind::kSegment);
  EXPECT_EQ(entries[0].cut_file.node, node_);
  EXPECT_EQ(entries[0].cut_file.generation, a.segment.generation);
  EXPECT_EQ(entries[0].cut_file.number, a.segment.seq);
  EXPECT_EQ(entries[0].cut_offset, valid_end);
  EXPECT_EQ(entries[1].op, JournalOp::kSeal);
  EXPECT_TRUE(entries[1].segment == a.segment);
  EXPECT_EQ(fs::file_size(seg), crashed_size);  // never truncated
  ExpectFile("a", 30000);
  ExpectFile("b", 200000);
  Status cs;
  ReadAll("c", &cs);
  EXPECT_TRUE(cs.IsNotFound()) << cs.ToString();
  CloseStore();

  auto r = Fsck();
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  // Idempotent: the next mount (clean) and a mount after a crash find nothing more to cut or seal.
  OpenStore(env.get());
  ExpectNothingToRecover();
  store_.reset();  // crash of a generation that wrote nothing
  OpenStore(env.get());
  ExpectNothingToRecover();
  ExpectFile("b", 200000);
  CloseStore();
  EXPECT_EQ(fs::file_size(seg), crashed_size);
  EXPECT_EQ(Fsck().problems, 0u);
}

// Issue #6 (docs/semantics.md "Known bugs", seen once in crash_test.py test_sigkill_cycles): the CUT of a
// torn segment tail lives in journal-<G>-0 of the recovering generation. Two clean unmounts later (two
// snapshots) that journal file is retired, but the segment file stays: the CUT must outlive it (the
// snapshot carries it), or kvfs-fsck after a clean stop reports the tail as torn again.
TEST_F(RecoveryTest, SegmentCutSurvivesJournalRetirement) {
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  const Location a = WriteFile("a", Content("a", 30000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  const std::string seg = SegPath(a);
  const uint64_t valid_end = fs::file_size(seg);
  env->ShortWriteNth(1, 4096 + 512, EIO, "/seg/");
  // The writer's truncation of what landed fails too (a crash before it), so the torn bytes stay.
  env->AddFault(FaultRule{.ops = kFaultTruncate, .path_substr = "/seg/", .err = EIO});
  Status err;
  WriteFile("c", Content("c", 100000, 1), &err);
  ASSERT_TRUE(err.IsIOError()) << err.ToString();
  store_.reset();  // crash
  env.reset();
  const std::string first_journal = JournalPaths().front();

  OpenStore();  // recovery: CUT{seg, valid_end} + SEAL at the head of journal-<G>-0
  EXPECT_EQ(store_->GetStats().recovery_cuts, 1u);
  const std::string cut_journal = JournalPaths().back();
  CloseStore();  // snapshot 1
  EXPECT_EQ(Fsck().problems, 0u);
  for (int round = 0; round < 2; ++round) {  // snapshot 2 retires what snapshot 1 covers, 3 the rest
    OpenStore();
    ExpectNothingToRecover();
    WriteFile("r" + std::to_string(round), Content("r", 5000 + round, 1));
    CloseStore();
  }
  EXPECT_FALSE(fs::exists(first_journal));
  EXPECT_FALSE(fs::exists(cut_journal));  // the journal file holding the CUT was retired
  EXPECT_EQ(fs::file_size(seg), valid_end + 4096 + 512);
  auto r = Fsck();
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  EXPECT_EQ(r.Count(FsckKind::kSegmentTornTail), 0u) << Describe(r);
  // The same from a rebuilt index (the snapshot, not the journals) and after a crash of a later mount.
  fs::remove_all(index_);
  OpenStore();
  ExpectNothingToRecover();
  ExpectFile("a", 30000);
  store_.reset();
  OpenStore();
  EXPECT_EQ(store_->GetStats().recovery_cuts, 0u);
  CloseStore();
  r = Fsck();
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  auto fixed = Fsck(/*repair=*/true);
  EXPECT_EQ(fixed.repaired, 0u) << Describe(fixed);
}

// Issue #6, the second way to a torn tail after a clean stop: a failed (short) record write left bytes past
// the writer's next offset; the next records reuse that space, and when they are shorter the seal's
// trailer did not end the file (fsck: "torn tail: 77712 bytes after offset 53248", the footer). The writer
// truncates what a failed write left, so the clean stop's seal ends the file.
TEST_F(RecoveryTest, FailedWriteThenShorterRecordsThenCleanStopIsClean) {
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  WriteFile("a", Content("a", 30000, 1));
  env->ShortWriteNth(1, 90000, ENOSPC, "/seg/");
  Status err;
  WriteFile("c", Content("c", 200000, 1), &err);
  EXPECT_FALSE(err.ok());
  WriteFile("d", Content("d", 5000, 1));
  CloseStore();
  auto r = Fsck();
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  OpenStore();
  ExpectFile("a", 30000);
  ExpectFile("d", 5000);
  CloseStore();
}

// The same when every record of the segment failed: the clean stop seals it with 0 records (no unsealed
// segment of the stopped generation, no torn tail).
TEST_F(RecoveryTest, SegmentWhoseOnlyWriteFailedIsSealedEmptyAtCleanStop) {
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  env->ShortWriteNth(2, 50000, EIO, "/seg/");  // 1 = the new segment's header, 2 = the record
  Status err;
  WriteFile("c", Content("c", 200000, 1), &err);
  EXPECT_FALSE(err.ok());
  CloseStore();
  ASSERT_EQ(SegmentPaths().size(), 1u);
  auto r = Fsck();
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  OpenStore();
  ExpectNothingToRecover();
  WriteFile("d", Content("d", 5000, 1));
  ExpectFile("d", 5000);
  CloseStore();
  EXPECT_EQ(Fsck().problems, 0u);
}

TEST_F(RecoveryTest, HeaderlessSegmentOfACrashIsCutAtZero) {
  OpenStore();
  const Location a = WriteFile("a", Content("a", 30000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  store_.reset();
  // A crash right after a segment file was created: no header block yet.
  const std::string empty = SegmentFilePath(backing_, SegmentId{node_, a.segment.generation, a.segment.seq + 1});
  { std::ofstream(empty).flush(); }
  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);
  auto st = store_->GetStats();
  EXPECT_EQ(st.recovery_cuts, 1u);
  EXPECT_EQ(st.recovery_seals, 2u);  // the crashed active segment and the empty one
  auto entries = NewestJournalEntries();
  ASSERT_GE(entries.size(), 3u);
  EXPECT_EQ(entries[0].op, JournalOp::kCut);
  EXPECT_EQ(entries[0].cut_file.number, a.segment.seq + 1);
  EXPECT_EQ(entries[0].cut_offset, 0u);
  ExpectFile("a", 30000);
  CloseStore();
  auto r = Fsck();
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  EXPECT_TRUE(fs::exists(empty));
  OpenStore(&env);
  ExpectNothingToRecover();
  CloseStore();
}

TEST_F(RecoveryTest, LostSealIsJournaledAtMount) {
  segment_size_ = 1ull << 20;
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  WriteFile("f0", Content("f0", 300000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  // The journal fails from now on: the records reach the segments (one of them fills up and is sealed
  // on disk), but neither their PUTs nor the SEAL entry reach the journal before the crash.
  env->FailWrites(EIO, "journal-");
  for (int i = 1; i <= 4; ++i) WriteFile("f" + std::to_string(i), Content("f" + std::to_string(i), 300000, 1));
  EXPECT_FALSE(store_->Sync().ok());
  ASSERT_EQ(SegmentPaths().size(), 2u);
  store_.reset();
  env.reset();
  {
    auto before = Fsck();
    EXPECT_EQ(before.Count(FsckKind::kSealNotJournaled, true), 1u) << Describe(before);
    EXPECT_EQ(before.Count(FsckKind::kUnsealedSegment, true), 1u) << Describe(before);
  }

  env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  auto st = store_->GetStats();
  EXPECT_EQ(st.recovery_cuts, 0u);
  EXPECT_EQ(st.recovery_seals, 2u);  // the lost SEAL of the full segment + the crashed active one
  size_t seals = 0;
  for (const auto& e : NewestJournalEntries()) seals += e.op == JournalOp::kSeal;
  EXPECT_EQ(seals, 2u);
  ExpectFile("f0", 300000);
  CloseStore();
  auto r = Fsck();
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  EXPECT_EQ(r.Count(FsckKind::kSealNotJournaled), 0u);
  OpenStore(env.get());
  ExpectNothingToRecover();
  CloseStore();
}

TEST_F(RecoveryTest, CleanIndexAppliesFsckRepairUnlinkWrittenWhileDown) {
  OpenStore();
  const Location a = WriteFile("a", Content("a", 10000, 1));
  const Location b = WriteFile("b", Content("b", 150000, 1));
  WriteFile("c", Content("c", 70001, 1));
  CloseStore();  // the local index is clean
  FlipByte(SegPath(b), b.record_offset + 9);  // b's record header: b is a dangling entry
  auto fixed = Fsck(/*repair=*/true);
  EXPECT_EQ(fixed.Count(FsckKind::kDanglingEntry), 1u) << Describe(fixed);
  EXPECT_EQ(fixed.repaired, 1u) << Describe(fixed);

  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);
  EXPECT_EQ(store_->GetStats().recovery_entries, 1u);  // the UNLINK of /b
  Status st;
  ReadAll("b", &st);
  EXPECT_TRUE(st.IsNotFound()) << st.ToString();  // not EIO: the repair's UNLINK applies here too
  ExpectFile("a", 10000);
  ExpectFile("c", 70001);
  auto names = List();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "c"}));
  // A later write of the path wins over the repair's UNLINK (its stamp is above it).
  WriteFile("b", Content("b", 5000, 2));
  CloseStore();
  OpenStore(&env);
  ExpectNothingToRecover();
  ExpectFile("b", 5000, 2);
  CloseStore();
  fs::remove_all(index_);  // the rebuilt index agrees
  OpenStore(&env);
  ExpectFile("b", 5000, 2);
  ExpectFile("a", 10000);
  (void)a;
  CloseStore();
}

TEST_F(RecoveryTest, CleanIndexAppliesFsckRepairSealWrittenWhileDown) {
  OpenStore();
  WriteFile("a", Content("a", 30000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  store_.reset();  // crash: the segment stays unsealed, the index is dirty
  // A clean index made from the export (kvfs-fsck --rebuild-index), then a repair that seals the segment.
  auto rebuilt = Fsck(false, index_);
  EXPECT_EQ(rebuilt.index_files, 1u);
  auto fixed = Fsck(true);
  EXPECT_EQ(fixed.Count(FsckKind::kUnsealedSegment, true), 1u) << Describe(fixed);
  EXPECT_EQ(fixed.unrepaired, 0u) << Describe(fixed);

  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);
  auto st = store_->GetStats();
  EXPECT_EQ(st.recovery_entries, 1u);  // the repair's SEAL, applied to the clean index
  EXPECT_EQ(st.recovery_seals, 0u);    // so the segment needs no SEAL of the mount's own
  EXPECT_EQ(st.recovery_cuts, 0u);
  ExpectFile("a", 30000);
  CloseStore();
  EXPECT_EQ(Fsck().problems, 0u);
  OpenStore(&env);
  ExpectNothingToRecover();
  CloseStore();
}

TEST_F(RecoveryTest, PowerCutThenMountLeavesNothingForFsck) {
  // Power cuts at several moments of a writer; each mount after it must leave an export that kvfs-fsck
  // finds clean (torn tails cut, segments sealed, SEALs journaled) and lose no synced file.
  segment_size_ = 1ull << 20;
  std::vector<std::pair<std::string, size_t>> synced;
  for (int round = 0; round < 6; ++round) {
    auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
    OpenStore(env.get());
    for (int i = 0; i < 6; ++i) {
      const std::string n = "r" + std::to_string(round) + "-" + std::to_string(i);
      const size_t size = 50000 + 61000 * i;
      WriteFile(n, Content(n, size, 1));
      if (i == 2 + round % 3) {
        ASSERT_TRUE(store_->Sync().ok());
        for (int j = 0; j <= i; ++j) {
          const std::string m = "r" + std::to_string(round) + "-" + std::to_string(j);
          synced.emplace_back(m, 50000 + 61000 * j);
        }
      }
    }
    ASSERT_TRUE(env->DropUnsyncedData().ok());  // the power cut
    store_.reset();
    env.reset();
    OpenStore();
    for (const auto& [n, size] : synced) ExpectFile(n, size);
    CloseStore();
    auto r = Fsck();
    EXPECT_EQ(r.problems, 0u) << "round " << round << "\n" << Describe(r);
  }
}

// ---- Visibility rounds and power cuts (#15) ----------------------------------------------------------
// A group commit within the durability interval journals without fdatasync. The durability interval is
// an hour here: only Sync (fsync) makes anything durable.
class VisibilityRecoveryTest : public RecoveryTest {
 protected:
  void SetUp() override {
    RecoveryTest::SetUp();
    sync_interval_ms_ = 3600 * 1000;
    checkpoint_on_close_ = false;
  }
  // Waits until the journal file on the backing holds an entry for `path` (a visibility round wrote it).
  void WaitPublished(const std::string& path) {
    auto has = [&] {
      for (const auto& e : NewestJournalEntries()) {
        if (e.path == path) return true;
      }
      return false;
    };
    for (int i = 0; i < 20000 && (!has() || store_->GetStats().visibility_rounds == 0); i++) usleep(1000);
    ASSERT_TRUE(has()) << path;
    EXPECT_GT(store_->GetStats().visibility_rounds, 0u);
  }
  void ExpectAbsent(const std::string& n) {
    Status st;
    ReadAll(n, &st);
    EXPECT_TRUE(st.IsNotFound()) << n << ": " << st.ToString();
  }
};

TEST_F(VisibilityRecoveryTest, ClosedFilesArePublishedWithoutASync) {
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  auto syncs = [&] { return env->counters().sync.load() + env->counters().syncdir.load(); };
  const uint64_t syncs0 = syncs();
  for (int i = 0; i < 10; i++) WriteFile("f" + std::to_string(i), Content("f" + std::to_string(i), 50000, 1));
  WaitPublished("/f9");
  // The journal holds the PUTs (a peer or a rebuilt index sees them) and nothing was fdatasync'd.
  EXPECT_EQ(syncs(), syncs0);
  size_t puts = 0;
  for (const auto& e : NewestJournalEntries()) puts += e.op == JournalOp::kPut;
  EXPECT_EQ(puts, 10u);
  // fsync: one durable round (segment + journal fdatasync).
  ASSERT_TRUE(store_->Sync().ok());
  EXPECT_EQ(syncs(), syncs0 + 3);  // the segment, its directory (a new file), then the journal
  CloseStore();
}

// A power cut after a visibility round that loses the unsynced bytes of every file: the files closed
// after the last fsync are gone, the fsync'd one is whole, nothing reads EIO.
TEST_F(VisibilityRecoveryTest, PowerCutAfterAVisibilityRoundKeepsTheSyncedPrefix) {
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  WriteFile("a", Content("a", 70000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  WriteFile("b", Content("b", 90000, 1));
  WriteFile("c", Content("c", 5000, 1));
  WaitPublished("/c");
  ASSERT_TRUE(env->DropUnsyncedData().ok());  // the power cut
  store_.reset();
  OpenStore();
  ExpectFile("a", 70000);
  ExpectAbsent("b");
  ExpectAbsent("c");
  CloseStore();
  EXPECT_EQ(Fsck().problems, 0u);
}

// The reordering a power cut may show without fdatasync: the journal's written-back pages reached stable
// storage, the segment's did not. The PUTs of b and c point at records that are gone: the mount cuts the
// journal at b's PUT (b, c and everything after them dropped, counted), so the state is the prefix up to
// a, never a name that reads EIO. Before the recovery rule, b and c came back and read EIO.
TEST_F(VisibilityRecoveryTest, PowerCutThatKeptTheJournalButNotTheRecordsCutsAtTheFirstLostRecord) {
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  WriteFile("a", Content("a", 70000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  WriteFile("b", Content("b", 90000, 1));
  WriteFile("c", Content("c", 5000, 1));
  WaitPublished("/c");
  ASSERT_TRUE(store_->Mkdir(kRootIno, "d", 0755, 0, 0).ok());  // journaled after b and c
  WaitPublished("/d");
  ASSERT_TRUE(env->DropUnsyncedData("/journal-").ok());  // the power cut: journal pages survived
  store_.reset();
  OpenStore();
  ExpectFile("a", 70000);
  ExpectAbsent("b");
  ExpectAbsent("c");
  EXPECT_TRUE(store_->Lookup(kRootIno, "d").status().IsNotFound());  // after the cut: not in the prefix
  EXPECT_GE(store_->GetStats().recovery_lost_entries, 3u);
  // Work goes on: a new file, then a clean remount and fsck.
  WriteFile("e", Content("e", 3000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  CloseStore();
  OpenStore();
  ExpectFile("a", 70000);
  ExpectFile("e", 3000);
  ExpectAbsent("b");
  CloseStore();
  EXPECT_EQ(Fsck().problems, 0u) << Describe(Fsck());
}

// The same reordering when the lost records are in a segment file created after the last durable round:
// the power cut removed its name (the directory was never synced), so the PUTs pointing into it have no
// file at all. Files are a prefix: whole up to some point, absent after it, never EIO.
TEST_F(VisibilityRecoveryTest, PowerCutThatLostANewSegmentFileCutsAtItsFirstRecord) {
  segment_size_ = 1ull << 20;
  auto env = std::make_unique<FaultInjectionEnv>(Env::Posix());
  OpenStore(env.get());
  WriteFile("a", Content("a", 70000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  const int n = 6;  // 6 x 300 KB: the 1 MiB segment is sealed and a new one created meanwhile
  for (int i = 0; i < n; i++) WriteFile("b" + std::to_string(i), Content("b" + std::to_string(i), 300000, 1));
  WaitPublished("/b" + std::to_string(n - 1));
  EXPECT_GE(store_->GetStats().segments_created, 2u);
  ASSERT_TRUE(env->DropUnsyncedData("/journal-").ok());
  store_.reset();
  OpenStore();
  ExpectFile("a", 70000);
  bool gone = false;
  int kept = 0;
  for (int i = 0; i < n; i++) {
    const std::string name = "b" + std::to_string(i);
    Status st;
    std::string got = ReadAll(name, &st);
    if (st.IsNotFound()) {
      gone = true;
      continue;
    }
    ASSERT_TRUE(st.ok()) << name << ": " << st.ToString();
    EXPECT_FALSE(gone) << name << " survived after an earlier file was dropped: not a prefix";
    EXPECT_TRUE(got == Content(name, 300000, 1)) << name;
    kept++;
  }
  EXPECT_LT(kept, n);  // the new segment's records were lost
  EXPECT_GT(store_->GetStats().recovery_lost_entries, 0u);
  CloseStore();
  EXPECT_EQ(Fsck().problems, 0u) << Describe(Fsck());
}

}  // namespace
}  // namespace kvfs
