// FaultInjectionEnv: injected errors surface as the right Status, short writes, hangs, counters, and the
// drop-unsynced crash model on real files.
#include "blockstore/fault_env.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace kvfs {
namespace {

class FaultEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvfs-fault-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<BackingFile> OpenW(const std::string& name, bool create = true) {
    OpenOptions o;
    o.write = true;
    o.create = create;
    auto f = env_.Open(dir_ + "/" + name, o);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(*f) : nullptr;
  }
  std::string Contents(const std::string& name) {
    std::string s;
    Status st = Env::Posix()->ReadFileToString(dir_ + "/" + name, &s);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return s;
  }
  bool Exists(const std::string& name) { return std::filesystem::exists(dir_ + "/" + name); }

  FaultInjectionEnv env_{Env::Posix()};
  std::string dir_;
};

TEST_F(FaultEnvTest, PassesThroughAndCountsOwnOperations) {
  const uint64_t base_writes = Env::Posix()->counters().write_batches;
  {
    auto f = OpenW("a");
    ASSERT_TRUE(f->Write(0, "hello", 5).ok());
    ASSERT_TRUE(f->Sync().ok());
    char buf[8];
    size_t got = 0;
    ASSERT_TRUE(f->Read(0, sizeof(buf), buf, &got).ok());
    EXPECT_EQ(std::string(buf, got), "hello");
  }
  EXPECT_EQ(env_.counters().open, 1u);
  EXPECT_EQ(env_.counters().create, 1u);
  EXPECT_EQ(env_.counters().close, 1u);
  EXPECT_EQ(env_.counters().write_batches, 1u);
  EXPECT_EQ(env_.counters().write, 1u);
  EXPECT_EQ(env_.counters().sync, 1u);
  EXPECT_EQ(env_.counters().read, 1u);
  EXPECT_EQ(env_.counters().bytes_written, 5u);
  EXPECT_EQ(env_.counters().bytes_read, 5u);
  EXPECT_GE(Env::Posix()->counters().write_batches, base_writes + 1);  // the base counts on its own
  std::vector<std::string> names;
  ASSERT_TRUE(env_.GetChildren(dir_, &names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"a"});
  EXPECT_EQ(env_.counters().list, 1u);
  EXPECT_EQ(env_.counters().MetadataOps(), 3u);  // open, close, list
}

TEST_F(FaultEnvTest, InjectedEnospcAndEioSurfaceAsNoSpaceAndIOError) {
  auto f = OpenW("seg");
  int id = env_.FailWrites(ENOSPC);
  Status s = f->Write(0, "abc", 3);
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_EQ(s.ToErrno(), ENOSPC);
  EXPECT_EQ(env_.FaultFired(id), 1u);
  env_.RemoveFault(id);
  env_.FailWrites(EIO);
  s = f->Write(0, "abc", 3);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_EQ(s.ToErrno(), EIO);
  env_.ClearFaults();
  ASSERT_TRUE(f->Write(0, "abc", 3).ok());
  EXPECT_EQ(Contents("seg"), "abc");

  env_.FailReads(EIO);
  char buf[4];
  size_t got = 99;
  s = f->Read(0, 3, buf, &got);
  EXPECT_TRUE(s.IsIOError());
  EXPECT_EQ(got, 0u);
  env_.ClearFaults();

  env_.FailSyncs(EIO);
  EXPECT_TRUE(f->Sync().IsIOError());
  env_.ClearFaults();
  EXPECT_TRUE(f->Sync().ok());
}

TEST_F(FaultEnvTest, PathFilterLimitsFaults) {
  auto a = OpenW("journal-1");
  auto b = OpenW("seg-1");
  env_.FailWrites(EIO, "journal");
  EXPECT_TRUE(a->Write(0, "x", 1).IsIOError());
  EXPECT_TRUE(b->Write(0, "x", 1).ok());
}

TEST_F(FaultEnvTest, MetadataFaultsAndDisappearingDirectory) {
  env_.FailMetadata(EIO, "/sub");
  EXPECT_TRUE(env_.CreateDir(dir_ + "/sub").IsIOError());
  EXPECT_TRUE(env_.CreateDir(dir_ + "/other").ok());
  env_.ClearFaults();
  ASSERT_TRUE(env_.CreateDir(dir_ + "/sub").ok());
  auto f = OpenW("sub/file");
  ASSERT_TRUE(f->Write(0, "data", 4).ok());

  env_.Disappear(dir_ + "/sub");
  EXPECT_TRUE(env_.Stat(dir_ + "/sub/file").status().IsNotFound());
  std::vector<std::string> names;
  EXPECT_TRUE(env_.GetChildren(dir_ + "/sub", &names).IsNotFound());
  EXPECT_TRUE(env_.Open(dir_ + "/sub/file", OpenOptions{}).status().IsNotFound());
  EXPECT_TRUE(f->Write(4, "more", 4).IsNotFound());  // an open file of the directory too
  EXPECT_TRUE(env_.Rename(dir_ + "/sub/file", dir_ + "/moved").IsNotFound());
  EXPECT_TRUE(env_.Stat(dir_ + "/other").ok());  // elsewhere: fine
  env_.ClearFaults();
  EXPECT_TRUE(env_.Stat(dir_ + "/sub/file").ok());
}

TEST_F(FaultEnvTest, NthWriteIsShortThenFails) {
  auto f = OpenW("seg");
  env_.ShortWriteNth(2, 3, EIO);
  ASSERT_TRUE(f->Write(0, "first", 5).ok());
  WriteOp ops[2] = {{5, "ABCDE", 5}, {10, "FGHIJ", 5}};
  Status s = f->Write(std::span<const WriteOp>(ops, 2));
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find("short write"), std::string::npos);
  EXPECT_EQ(Contents("seg"), "firstABC");                        // exactly short_bytes of the batch landed
  ASSERT_TRUE(f->Write(std::span<const WriteOp>(ops, 2)).ok());  // fires once
  EXPECT_EQ(Contents("seg"), "firstABCDEFGHIJ");

  env_.ShortWriteNth(1, 7, ENOSPC);  // spans both ops of the batch
  s = f->Write(std::span<const WriteOp>(ops, 2));
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
}

TEST_F(FaultEnvTest, HangSleepsAndClearFaultsWakesIt) {
  auto f = OpenW("seg");
  env_.Hang(std::chrono::milliseconds(150), kFaultWrite);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(f->Write(0, "x", 1).ok());
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(150));

  env_.Hang(std::chrono::seconds(60), kFaultSync);
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    env_.ClearFaults();
  });
  t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(f->Sync().ok());
  took = std::chrono::steady_clock::now() - t0;
  waker.join();
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST_F(FaultEnvTest, DropUnsyncedDataLosesUnsyncedBytesAndKeepsSyncedOnes) {
  // An existing, synced file.
  {
    auto f = OpenW("seg");
    ASSERT_TRUE(f->Write(0, "durable-", 8).ok());
    ASSERT_TRUE(f->Sync().ok());
    ASSERT_TRUE(f->Write(8, "lost", 4).ok());
    EXPECT_EQ(Contents("seg"), "durable-lost");  // visible before the crash (page cache)
  }
  // A new file written and never synced, in a directory never synced.
  {
    auto g = OpenW("new");
    ASSERT_TRUE(g->Write(0, "gone", 4).ok());
  }
  // A new file synced: survives.
  {
    auto h = OpenW("synced-new");
    ASSERT_TRUE(h->Write(0, "kept", 4).ok());
    ASSERT_TRUE(h->Sync().ok());
  }
  EXPECT_EQ(env_.UnsyncedFileCount(), 2u);
  auto open_before = OpenW("seg", false);
  ASSERT_TRUE(env_.DropUnsyncedData().ok());

  EXPECT_EQ(Contents("seg"), "durable-");
  EXPECT_FALSE(Exists("new"));
  EXPECT_EQ(Contents("synced-new"), "kept");
  EXPECT_EQ(env_.UnsyncedFileCount(), 0u);
  // A handle from before the crash is stale.
  EXPECT_TRUE(open_before->Write(8, "x", 1).IsIOError());
  // The Env keeps working, as after a reboot; tracking restarts.
  auto f = OpenW("seg", false);
  ASSERT_TRUE(f->Write(8, "again", 5).ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->Write(13, "-x", 2).ok());
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(Contents("seg"), "durable-again");
}

TEST_F(FaultEnvTest, NewFileSurvivesWhenItsDirectoryWasSynced) {
  {
    auto g = OpenW("named");
    ASSERT_TRUE(g->Write(0, "data", 4).ok());
  }
  ASSERT_TRUE(env_.SyncDir(dir_).ok());
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  ASSERT_TRUE(Exists("named"));
  EXPECT_EQ(Contents("named"), "");  // the name survived, the unsynced data did not
}

TEST_F(FaultEnvTest, RenameWithoutSyncDirIsUndone) {
  ASSERT_TRUE(Env::Posix()->WriteFileAtomic(dir_ + "/OWNER", "old").ok());  // durable before the test
  {
    auto t = OpenW("OWNER.tmp");
    ASSERT_TRUE(t->Write(0, "new", 3).ok());
    ASSERT_TRUE(t->Sync().ok());
  }
  ASSERT_TRUE(env_.Rename(dir_ + "/OWNER.tmp", dir_ + "/OWNER").ok());
  EXPECT_EQ(Contents("OWNER"), "new");
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(Contents("OWNER"), "old");
  EXPECT_EQ(Contents("OWNER.tmp"), "new");  // synced file, back under its old name

  // With SyncDir after the rename, it sticks: WriteFileAtomic does exactly that.
  ASSERT_TRUE(env_.WriteFileAtomic(dir_ + "/OWNER", "newer").ok());
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(Contents("OWNER"), "newer");
  EXPECT_FALSE(Exists("OWNER.tmp"));
}

TEST_F(FaultEnvTest, ResetStateForgetsTrackingFaultsAndCounters) {
  auto f = OpenW("seg");
  ASSERT_TRUE(f->Write(0, "abc", 3).ok());
  env_.FailWrites(EIO);
  env_.ResetState();
  EXPECT_EQ(env_.counters().open, 0u);
  ASSERT_TRUE(f->Write(3, "d", 1).ok());  // faults cleared, handle still usable
  EXPECT_EQ(env_.UnsyncedFileCount(), 0u);
  f.reset();
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(Contents("seg"), "abcd");  // reset = "everything so far is durable"
}

}  // namespace
}  // namespace kvfs
