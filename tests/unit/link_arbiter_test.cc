// LinkArbiter (engine/link_arbiter.h): claims of link(2) names on a real directory, two arbiters standing
// for two nodes over one backing: one claim per (path, incarnation), a new incarnation is a new race,
// abandoned claims are passed over by exactly one claimant, kept claims are removed after their TTL,
// released ones at once, and the sweep removes only claims older than its age against the HEARTBEAT.
#include "engine/link_arbiter.h"

#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>
#include <utime.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "blockstore/node_dir.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

class LinkArbiterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/kvfs-linkarb-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    hb_ = root_ + "/HEARTBEAT";
    std::ofstream(hb_) << "t\n";
    a_ = std::make_unique<LinkArbiter>(Env::Posix(), root_, hb_);
    b_ = std::make_unique<LinkArbiter>(Env::Posix(), root_, hb_);
    ASSERT_TRUE(a_->Init().ok());
    ASSERT_TRUE(b_->Init().ok());
  }
  void TearDown() override { fs::remove_all(root_); }
  size_t Claims() {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(a_->dir())) n += e.is_directory() || e.is_regular_file();
    return n;
  }
  std::string root_, hb_;
  std::unique_ptr<LinkArbiter> a_, b_;
};

TEST_F(LinkArbiterTest, OneClaimPerPathAndIncarnation) {
  EXPECT_EQ(a_->dir(), root_ + "/.kvfs/v1/links");
  auto ca = a_->TryClaim("/kv/x", "");
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  EXPECT_TRUE(ca->won);
  EXPECT_EQ(ca->file, a_->ClaimFile("/kv/x", "", 0));
  auto cb = b_->TryClaim("/kv/x", "");
  ASSERT_TRUE(cb.ok());
  EXPECT_FALSE(cb->won);
  EXPECT_FALSE(a_->TryClaim("/kv/x", "")->won);  // the holder's own second link loses too
  // Another path, and the same path after an unlink (a tombstone: a new incarnation), are new races.
  EXPECT_TRUE(b_->TryClaim("/kv/y", "")->won);
  auto next = b_->TryClaim("/kv/x", "1234/a");
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->won);
  EXPECT_NE(next->file, ca->file);
  EXPECT_EQ(Claims(), 3u);
  EXPECT_EQ(a_->GetStats().won, 1u);
  EXPECT_EQ(a_->GetStats().lost, 1u);
  EXPECT_EQ(b_->GetStats().won, 2u);
  EXPECT_EQ(b_->GetStats().lost, 1u);
}

TEST_F(LinkArbiterTest, AbandonedClaimIsPassedOverByExactlyOne) {
  a_->SetAgesForTest(milliseconds(100), milliseconds(60000), milliseconds(600000));
  b_->SetAgesForTest(milliseconds(100), milliseconds(60000), milliseconds(600000));
  // A claim whose link never published (its creator crashed): made here by a third arbiter.
  LinkArbiter dead(Env::Posix(), root_, hb_);
  ASSERT_TRUE(dead.TryClaim("/kv/z", "")->won);
  std::this_thread::sleep_for(milliseconds(150));
  EXPECT_FALSE(a_->TryClaim("/kv/z", "")->won) << "younger than the last heartbeat: live";
  std::ofstream(hb_) << "t2\n";  // the next heartbeat: the claim is 150 ms old on the server's clock
  auto ca = a_->TryClaim("/kv/z", "");
  auto cb = b_->TryClaim("/kv/z", "");
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_NE(ca->won, cb->won) << "exactly one of the two takes the chain's next claim";
  const std::string file = ca->won ? ca->file : cb->file;
  EXPECT_EQ(file, a_->ClaimFile("/kv/z", "", 1));
  EXPECT_EQ(a_->GetStats().abandoned + b_->GetStats().abandoned, 2u);
  // The age is the claim's own, not how long a node has watched it: a node that never saw it before
  // passes over it at once, and a claim removed and made again is young again.
  LinkArbiter fresh(Env::Posix(), root_, hb_);
  fresh.SetAgesForTest(milliseconds(100), milliseconds(60000), milliseconds(600000));
  ASSERT_TRUE(dead.TryClaim("/kv/w", "")->won);
  std::this_thread::sleep_for(milliseconds(150));
  std::ofstream(hb_) << "t3\n";
  EXPECT_TRUE(fresh.TryClaim("/kv/w", "")->won);
  ASSERT_FALSE(fs::exists(dead.ClaimFile("/kv/v", "", 0)));  // not there yet
  ASSERT_TRUE(dead.TryClaim("/kv/v", "")->won);
  std::this_thread::sleep_for(milliseconds(150));
  ASSERT_EQ(::rmdir(dead.ClaimFile("/kv/v", "", 0).c_str()), 0);
  ASSERT_TRUE(dead.TryClaim("/kv/v", "")->won);  // made again after the old one's removal
  std::ofstream(hb_) << "t4\n";
  EXPECT_FALSE(fresh.TryClaim("/kv/v", "")->won) << "a re-made claim is young";
}

TEST_F(LinkArbiterTest, AClaimThatCannotBeCreatedIsEioAndAMissingDirectoryIsMadeAgain) {
  fs::remove_all(a_->dir());
  auto c = a_->TryClaim("/kv/m", "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->won);
  ASSERT_EQ(::chmod(a_->dir().c_str(), 0500), 0);
  if (::geteuid() == 0) {
    // root ignores the mode bits: make the directory a file instead.
    fs::remove_all(a_->dir());
    std::ofstream(a_->dir()) << "x";
  }
  auto e = a_->TryClaim("/kv/n", "");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().ToErrno(), EIO) << e.status().ToString();
  EXPECT_EQ(a_->GetStats().errors, 1u);
  fs::remove(a_->dir());
}

TEST_F(LinkArbiterTest, KeptClaimsGoAfterTheirTtlReleasedAtOnce) {
  a_->SetAgesForTest(milliseconds(30000), milliseconds(200), milliseconds(600000));
  auto c1 = a_->TryClaim("/kv/1", "");
  auto c2 = a_->TryClaim("/kv/2", "");
  ASSERT_TRUE(c1->won && c2->won);
  a_->Keep(c1->file);
  a_->Release(c2->file);
  EXPECT_FALSE(fs::exists(c2->file));
  a_->Tick();
  EXPECT_TRUE(fs::exists(c1->file)) << "kept until its TTL";
  EXPECT_EQ(a_->GetStats().pending, 1u);
  std::this_thread::sleep_for(milliseconds(250));
  a_->Tick();
  EXPECT_FALSE(fs::exists(c1->file));
  EXPECT_EQ(a_->GetStats().pending, 0u);
  EXPECT_EQ(a_->GetStats().removed, 2u);
  // Tick(true) (a clean unmount) removes every kept claim whatever its deadline.
  a_->SetAgesForTest(milliseconds(30000), milliseconds(60000), milliseconds(600000));
  auto c3 = a_->TryClaim("/kv/3", "");
  a_->Keep(c3->file);
  a_->Tick(true);
  EXPECT_FALSE(fs::exists(c3->file));
}

TEST_F(LinkArbiterTest, AnUnmountRemovesAtMostItsCapOfKeptClaims) {
  const size_t n = LinkArbiter::kCloseRemovals + 3;
  for (size_t i = 0; i < n; ++i) {
    auto c = a_->TryClaim("/kv/c" + std::to_string(i), "");
    ASSERT_TRUE(c.ok() && c->won);
    a_->Keep(c->file);
  }
  a_->Tick(true);
  EXPECT_EQ(Claims(), 3u);
  EXPECT_EQ(a_->GetStats().removed, LinkArbiter::kCloseRemovals);
  EXPECT_TRUE(fs::exists(a_->ClaimFile("/kv/c" + std::to_string(n - 1), "", 0))) << "the newest are left";
}

TEST_F(LinkArbiterTest, AClaimIsOneMkdirAndAFileClaimOfAnEarlierVersionStillExcludes) {
  auto& c = Env::Posix()->counters();
  const uint64_t mkdir0 = c.mkdir.load(), open0 = c.open.load(), close0 = c.close.load(), stat0 = c.stat.load();
  auto won = a_->TryClaim("/kv/d", "");
  ASSERT_TRUE(won.ok() && won->won);
  EXPECT_TRUE(fs::is_directory(won->file));
  // One round trip on NFS (MKDIR), where the O_EXCL create of earlier versions cost an OPEN and a CLOSE.
  EXPECT_EQ(c.mkdir.load() - mkdir0, 1u);
  EXPECT_EQ(c.open.load() - open0, 0u);
  EXPECT_EQ(c.close.load() - close0, 0u);
  EXPECT_EQ(c.stat.load() - stat0, 0u);
  // A claim file left by a node running an earlier version (or made on S3) excludes a directory claim.
  const std::string old_kind = a_->ClaimFile("/kv/f", "", 0);
  std::ofstream(old_kind).put('\0');
  auto lost = b_->TryClaim("/kv/f", "");
  ASSERT_TRUE(lost.ok());
  EXPECT_FALSE(lost->won);
  EXPECT_TRUE(fs::is_regular_file(old_kind));
  // Released: the directory goes (one removal).
  a_->Release(won->file);
  EXPECT_FALSE(fs::exists(won->file));
  EXPECT_EQ(a_->GetStats().removed, 1u);
  // A claim directory that cannot be removed (someone put a file in it) is an error, not a removal.
  auto stuck = a_->TryClaim("/kv/g", "");
  ASSERT_TRUE(stuck.ok() && stuck->won);
  std::ofstream(stuck->file + "/junk").put('x');
  a_->Release(stuck->file);
  EXPECT_TRUE(fs::exists(stuck->file));
  EXPECT_EQ(a_->GetStats().removed, 1u);
  EXPECT_EQ(a_->GetStats().errors, 1u);
  fs::remove_all(stuck->file);
  // The sweep removes old claims of both kinds.
  auto dir_claim = b_->TryClaim("/kv/e", "");
  ASSERT_TRUE(dir_claim.ok() && dir_claim->won);
  struct stat hb;
  ASSERT_EQ(stat(hb_.c_str(), &hb), 0);
  struct utimbuf t{hb.st_mtime - 1200, hb.st_mtime - 1200};
  ASSERT_EQ(utime(old_kind.c_str(), &t), 0);
  ASSERT_EQ(utime(dir_claim->file.c_str(), &t), 0);
  a_->SweepAtNextTickForTest();
  a_->Tick();
  EXPECT_FALSE(fs::exists(old_kind));
  EXPECT_FALSE(fs::exists(dir_claim->file));
  EXPECT_EQ(a_->GetStats().swept, 2u);
}

TEST_F(LinkArbiterTest, SweepRemovesOnlyClaimsOlderThanItsAgeAgainstTheHeartbeat) {
  auto young = b_->TryClaim("/kv/young", "");
  auto old = b_->TryClaim("/kv/old", "");
  ASSERT_TRUE(young->won && old->won);
  // The old claim's mtime 20 minutes before the HEARTBEAT's (both are the server's clock).
  struct stat hb;
  ASSERT_EQ(stat(hb_.c_str(), &hb), 0);
  struct utimbuf t{hb.st_mtime - 1200, hb.st_mtime - 1200};
  ASSERT_EQ(utime(old->file.c_str(), &t), 0);
  a_->Tick();  // no pass in the first kFirstSweepAfter of a mount
  EXPECT_TRUE(fs::exists(old->file));
  a_->SweepAtNextTickForTest();
  a_->Tick();  // this tick starts a pass and stats up to kSweepStatsPerStep names
  EXPECT_FALSE(fs::exists(old->file));
  EXPECT_TRUE(fs::exists(young->file));
  EXPECT_EQ(a_->GetStats().swept, 1u);
  // The next pass is an hour away: a claim aged now stays.
  ASSERT_EQ(utime(young->file.c_str(), &t), 0);
  a_->Tick();
  EXPECT_TRUE(fs::exists(young->file));
}

}  // namespace
}  // namespace kvfs
