// NodeDir: names, FORMAT, the takeover rule (fresh, released, live, dead pid, stale heartbeat, force),
// generations, heartbeat thread, bad backing directories.
#include "blockstore/node_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "blockstore/fault_env.h"

namespace kvfs {
namespace {

using namespace std::chrono_literals;

class NodeDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvfs-nodedir-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  NodeDirOptions Opts(const std::string& node = "n1") {
    NodeDirOptions o;
    o.backing_dir = dir_;
    o.node_id = node;
    o.heartbeat_timeout = 30s;
    return o;
  }
  void Put(const std::string& path, const std::string& data) {
    ASSERT_TRUE(Env::Posix()->CreateDirs(path.substr(0, path.find_last_of('/'))).ok());
    ASSERT_TRUE(Env::Posix()->WriteFileAtomic(path, data).ok());
  }
  std::string Get(const std::string& path) {
    std::string s;
    EXPECT_TRUE(Env::Posix()->ReadFileToString(path, &s).ok()) << path;
    return s;
  }
  // Plants an OWNER + HEARTBEAT as if another mount held n1.
  void PlantOwner(const HostIdentity& who, uint64_t gen, int64_t heartbeat_age_ns) {
    OwnerRecord r;
    r.owner = who;
    r.generation = gen;
    r.acquired_ns = WallClockNs();
    Put(OwnerFilePath(dir_, "n1"), r.Serialize());
    HeartbeatRecord hb;
    hb.time_ns = WallClockNs() - heartbeat_age_ns;
    hb.host = who.host;
    hb.pid = who.pid;
    hb.generation = gen;
    Put(HeartbeatFilePath(dir_, "n1"), hb.Serialize());
  }

  std::string dir_;
};

TEST(NodeDirNamesTest, SegmentAndJournalNamesRoundTrip) {
  EXPECT_EQ(SegmentFileName(3, 1), "00000000000000000003-00000000000000000001.kseg");
  EXPECT_EQ(JournalFileName(3, 12), "journal-00000000000000000003-00000000000000000012");
  EXPECT_EQ(SnapshotFileName(1, 2), "snapshot-00000000000000000001-00000000000000000002");
  uint64_t g = 0, s = 0;
  ASSERT_TRUE(ParseSegmentFileName(SegmentFileName(18446744073709551615ull, 7), &g, &s));
  EXPECT_EQ(g, 18446744073709551615ull);
  EXPECT_EQ(s, 7u);
  ASSERT_TRUE(ParseJournalFileName(JournalFileName(5, 9), &g, &s));
  EXPECT_EQ(g, 5u);
  EXPECT_EQ(s, 9u);
  ASSERT_TRUE(ParseSnapshotFileName(SnapshotFileName(4, 1), &g, &s));
  EXPECT_EQ(g, 4u);
  EXPECT_FALSE(ParseSegmentFileName("3-1.kseg", &g, &s));
  EXPECT_FALSE(ParseSegmentFileName(SegmentFileName(3, 1) + ".tmp", &g, &s));
  EXPECT_FALSE(ParseSegmentFileName("0000000000000000000a-00000000000000000001.kseg", &g, &s));
  EXPECT_FALSE(ParseJournalFileName(SegmentFileName(3, 1), &g, &s));
  EXPECT_FALSE(ParseSegmentFileName("99999999999999999999-00000000000000000001.kseg", &g, &s));  // > 2^64
  EXPECT_EQ(SegmentFilePath("/b", SegmentId{"n1", 3, 1}),
            "/b/.kvfs/v1/nodes/n1/seg/00000000000000000003-00000000000000000001.kseg");
  EXPECT_EQ(JournalFilePath("/b/", "n1", 2, 1),
            "/b/.kvfs/v1/nodes/n1/journal-00000000000000000002-00000000000000000001");
  EXPECT_TRUE(ValidateNodeId("gpu-node_07.a").ok());
  EXPECT_TRUE(ValidateNodeId("a/b").IsInvalidArgument());
  EXPECT_TRUE(ValidateNodeId("..").IsInvalidArgument());
  EXPECT_TRUE(ValidateNodeId("").IsInvalidArgument());
}

TEST_F(NodeDirTest, FreshTakeoverIsGenerationOne) {
  auto nd = NodeDir::Acquire(Opts());
  ASSERT_TRUE(nd.ok()) << nd.status().ToString();
  EXPECT_EQ((*nd)->generation(), 1u);
  EXPECT_EQ((*nd)->takeover_reason(), "fresh");
  const std::string format = Get(FormatFilePath(dir_));
  ASSERT_EQ(format.size(), std::string("kvfs-format\nversion=1\nalignment=4096\nid=\n").size() + 32) << format;
  EXPECT_EQ(format.substr(0, 40), "kvfs-format\nversion=1\nalignment=4096\nid=");
  EXPECT_EQ((*nd)->format_id(), format.substr(40, 32));
  EXPECT_EQ(format.find_first_not_of("0123456789abcdef", 40), 72u);  // 32 hex digits, then the newline
  auto owner = OwnerRecord::Parse(Get(OwnerFilePath(dir_, "n1")));
  ASSERT_TRUE(owner.ok());
  const HostIdentity me = HostIdentity::Current();
  EXPECT_EQ(owner->generation, 1u);
  EXPECT_EQ(owner->owner.pid, getpid());
  EXPECT_EQ(owner->owner.host, me.host);
  EXPECT_EQ(owner->owner.boot_id, me.boot_id);
  EXPECT_EQ(owner->owner.boot_id.size(), 36u);  // a UUID
  EXPECT_FALSE(owner->released);
  auto hb = HeartbeatRecord::Parse(Get(HeartbeatFilePath(dir_, "n1")));
  ASSERT_TRUE(hb.ok());
  EXPECT_LT(WallClockNs() - hb->time_ns, 10'000'000'000);
  EXPECT_TRUE(std::filesystem::is_directory((*nd)->seg_dir()));
  EXPECT_EQ((*nd)->SegmentPath(1),
            dir_ + "/.kvfs/v1/nodes/n1/seg/00000000000000000001-00000000000000000001.kseg");
  EXPECT_FALSE(std::filesystem::exists(OwnerFilePath(dir_, "n1") + ".tmp"));
}

TEST_F(NodeDirTest, RestartAfterCleanReleaseIsGenerationTwo) {
  {
    auto nd = NodeDir::Acquire(Opts());
    ASSERT_TRUE(nd.ok());
    ASSERT_TRUE((*nd)->Release().ok());
    EXPECT_TRUE(OwnerRecord::Parse(Get(OwnerFilePath(dir_, "n1")))->released);
  }
  auto nd = NodeDir::Acquire(Opts());
  ASSERT_TRUE(nd.ok()) << nd.status().ToString();
  EXPECT_EQ((*nd)->generation(), 2u);
  EXPECT_EQ((*nd)->takeover_reason(), "released");
  ASSERT_TRUE((*nd)->previous_owner().has_value());
  EXPECT_EQ((*nd)->previous_owner()->generation, 1u);
}

TEST_F(NodeDirTest, LiveOwnerIsBusy) {
  auto first = NodeDir::Acquire(Opts());  // this process, same boot id, fresh heartbeat
  ASSERT_TRUE(first.ok());
  auto second = NodeDir::Acquire(Opts());
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsBusy()) << second.status().ToString();
  const std::string& msg = second.status().message();
  EXPECT_NE(msg.find("host=" + HostIdentity::Current().host), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid=" + std::to_string(getpid())), std::string::npos) << msg;
  EXPECT_NE(msg.find("heartbeat"), std::string::npos) << msg;
  EXPECT_EQ(OwnerRecord::Parse(Get(OwnerFilePath(dir_, "n1")))->generation, 1u);  // untouched
}

TEST_F(NodeDirTest, DeadPidOnThisHostIsTakenOver) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: /proc/<child> is gone
  HostIdentity dead = HostIdentity::Current();
  dead.pid = child;
  dead.pid_start = 0;
  PlantOwner(dead, 4, /*heartbeat_age_ns=*/0);  // fresh heartbeat, but provably dead
  ASSERT_TRUE(EnsureFormat(Env::Posix(), dir_).ok());
  auto nd = NodeDir::Acquire(Opts());
  ASSERT_TRUE(nd.ok()) << nd.status().ToString();
  EXPECT_EQ((*nd)->generation(), 5u);
  EXPECT_NE((*nd)->takeover_reason().find("gone"), std::string::npos);
}

TEST_F(NodeDirTest, ZombieOwnerCountsAsDead) {
  // breaker-1 item 9: after SIGKILL the daemon stays a zombie until its parent reaps it; remount must
  // not wait for that.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  HostIdentity z = HostIdentity::Current();
  z.pid = child;
  z.pid_start = 0;
  // Wait (untimed poll) until the child has exited: /proc/<child>/stat shows state Z.
  for (;;) {
    std::ifstream f("/proc/" + std::to_string(child) + "/stat");
    std::string line;
    std::getline(f, line);
    auto rp = line.rfind(')');
    ASSERT_NE(rp, std::string::npos);
    if (line[rp + 2] == 'Z') break;
    sched_yield();
  }
  struct stat st;
  ASSERT_EQ(::stat(("/proc/" + std::to_string(child)).c_str(), &st), 0);  // still listed: not reaped
  EXPECT_FALSE(LocalProcessAlive(z));
  PlantOwner(z, 4, /*heartbeat_age_ns=*/0);  // fresh heartbeat, but the owner is a zombie
  ASSERT_TRUE(EnsureFormat(Env::Posix(), dir_).ok());
  auto nd = NodeDir::Acquire(Opts());
  ASSERT_TRUE(nd.ok()) << nd.status().ToString();
  EXPECT_EQ((*nd)->generation(), 5u);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
}

TEST_F(NodeDirTest, ReusedPidWithOtherStartTimeCountsAsDead) {
  HostIdentity me = HostIdentity::Current();
  ASSERT_NE(me.pid_start, 0u);
  EXPECT_TRUE(LocalProcessAlive(me));
  me.pid_start += 12345;  // same pid, different process start: the recorded process is gone
  EXPECT_FALSE(LocalProcessAlive(me));
}

TEST_F(NodeDirTest, OtherHostWithFreshHeartbeatIsBusyAndStaleHeartbeatIsTakenOver) {
  HostIdentity other{"other-host", "00000000-0000-0000-0000-000000000000", 4242, 0};
  PlantOwner(other, 7, /*age=*/1'000'000'000);  // 1 s old
  auto busy = NodeDir::Acquire(Opts());
  ASSERT_FALSE(busy.ok());
  EXPECT_TRUE(busy.status().IsBusy());
  EXPECT_NE(busy.status().message().find("host=other-host pid=4242 generation=7"), std::string::npos)
      << busy.status().message();
  EXPECT_NE(busy.status().message().find("heartbeat 1."), std::string::npos) << busy.status().message();

  PlantOwner(other, 7, /*age=*/120'000'000'000);  // 120 s old, timeout 30 s
  auto nd = NodeDir::Acquire(Opts());
  ASSERT_TRUE(nd.ok()) << nd.status().ToString();
  EXPECT_EQ((*nd)->generation(), 8u);
  EXPECT_NE((*nd)->takeover_reason().find("heartbeat 120"), std::string::npos) << (*nd)->takeover_reason();
}

TEST_F(NodeDirTest, SameHostLivePidWithStaleHeartbeatIsTakenOver) {
  // A hung owner: alive, but it stopped heartbeating.
  PlantOwner(HostIdentity::Current(), 2, /*age=*/60'000'000'000);
  auto nd = NodeDir::Acquire(Opts());
  ASSERT_TRUE(nd.ok()) << nd.status().ToString();
  EXPECT_EQ((*nd)->generation(), 3u);
}

// #16: tools outside the daemon (kvfs node purge, kvfs-fsck --repair) never take over a running mount on
// this host, whatever its heartbeat's age, even with force; a dead pid is still taken over.
TEST_F(NodeDirTest, ToolsRefuseARunningOwnerOnThisHostWithAStaleHeartbeat) {
  PlantOwner(HostIdentity::Current(), 2, /*age=*/60'000'000'000);
  NodeDirOptions o = Opts();
  o.refuse_running_local_owner = true;
  o.force = true;
  auto nd = NodeDir::Acquire(o);
  ASSERT_TRUE(nd.status().IsBusy()) << nd.status().ToString();
  EXPECT_NE(nd.status().message().find("running on this host"), std::string::npos) << nd.status().ToString();
  o.process_alive = [](const HostIdentity&) { return false; };
  nd = NodeDir::Acquire(o);
  ASSERT_TRUE(nd.ok()) << nd.status().ToString();
  EXPECT_EQ((*nd)->generation(), 3u);
}

TEST_F(NodeDirTest, ForceTakesOverALiveOwner) {
  HostIdentity other{"other-host", "00000000-0000-0000-0000-000000000000", 4242, 0};
  PlantOwner(other, 7, 0);
  NodeDirOptions o = Opts();
  o.force = true;
  auto nd = NodeDir::Acquire(o);
  ASSERT_TRUE(nd.ok()) << nd.status().ToString();
  EXPECT_EQ((*nd)->generation(), 8u);
  EXPECT_EQ((*nd)->takeover_reason(), "force");
}

TEST_F(NodeDirTest, GenerationIsAboveEveryFileName) {
  {
    auto nd = NodeDir::Acquire(Opts());
    ASSERT_TRUE(nd.ok());
    ASSERT_TRUE((*nd)->Release().ok());
  }
  // Files of generations later than OWNER's (e.g. OWNER restored from an old backup).
  Put(SegmentFilePath(dir_, SegmentId{"n1", 5, 1}), "");
  Put(JournalFilePath(dir_, "n1", 9, 1), "");
  Put(NodeDirPath(dir_, "n1") + "/journal-garbage", "");
  auto nd = NodeDir::Acquire(Opts());
  ASSERT_TRUE(nd.ok());
  EXPECT_EQ((*nd)->generation(), 10u);
  ASSERT_TRUE((*nd)->Release().ok());
  // Names of another zero-padding width still count (the scan is lenient on purpose).
  Put(SegmentDirPath(dir_, "n1") + "/0000000012-0000000001.kseg", "");
  auto again = NodeDir::Acquire(Opts());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->generation(), 13u);
}

TEST_F(NodeDirTest, NewerFormatIsRefused) {
  Put(FormatFilePath(dir_), "kvfs-format\nversion=2\nalignment=4096\n");
  auto nd = NodeDir::Acquire(Opts());
  ASSERT_FALSE(nd.ok());
  EXPECT_TRUE(nd.status().IsInvalidArgument());
  EXPECT_NE(nd.status().message().find("backing store format v2 is newer than this kvfs (v1)"),
            std::string::npos)
      << nd.status().message();
  Put(FormatFilePath(dir_), "garbage");
  EXPECT_TRUE(NodeDir::Acquire(Opts()).status().IsCorruption());
  Put(FormatFilePath(dir_), "kvfs-format\nversion=1\nalignment=512\n");
  EXPECT_TRUE(NodeDir::Acquire(Opts()).status().IsInvalidArgument());
}

TEST_F(NodeDirTest, FormatIsCreatedOnceAndKept) {
  ASSERT_TRUE(EnsureFormat(Env::Posix(), dir_).ok());
  auto ino = std::filesystem::last_write_time(FormatFilePath(dir_));
  std::this_thread::sleep_for(10ms);
  auto again = EnsureFormat(Env::Posix(), dir_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->version, kFormatVersion);
  EXPECT_EQ(std::filesystem::last_write_time(FormatFilePath(dir_)), ino);
}

TEST_F(NodeDirTest, MissingBackingDirIsAClearError) {
  NodeDirOptions o = Opts();
  o.backing_dir = dir_ + "/does-not-exist";
  auto nd = NodeDir::Acquire(o);
  ASSERT_FALSE(nd.ok());
  EXPECT_TRUE(nd.status().IsInvalidArgument());
  EXPECT_NE(nd.status().message().find(o.backing_dir + " does not exist"), std::string::npos);
  o.backing_dir = "relative/path";
  EXPECT_TRUE(NodeDir::Acquire(o).status().IsInvalidArgument());
}

TEST_F(NodeDirTest, BackingPathThatIsAFileIsAClearError) {
  Put(dir_ + "/plainfile", "x");
  NodeDirOptions o = Opts();
  o.backing_dir = dir_ + "/plainfile";
  auto nd = NodeDir::Acquire(o);
  ASSERT_FALSE(nd.ok());
  EXPECT_TRUE(nd.status().IsInvalidArgument());
  EXPECT_NE(nd.status().message().find(o.backing_dir + " is not a directory"), std::string::npos)
      << nd.status().message();
}

TEST_F(NodeDirTest, ReadOnlyBackingDirIsAClearError) {
  // Tests run as root, so permission bits do not stop writes: use a read-only bind mount.
  const std::string src = dir_ + "/src", ro = dir_ + "/ro";
  std::filesystem::create_directories(src);
  std::filesystem::create_directories(ro);
  if (::mount(src.c_str(), ro.c_str(), nullptr, MS_BIND, nullptr) != 0) GTEST_SKIP() << "cannot bind mount";
  if (::mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    ::umount2(ro.c_str(), MNT_DETACH);
    GTEST_SKIP() << "cannot remount read-only";
  }
  NodeDirOptions o = Opts();
  o.backing_dir = ro;
  auto nd = NodeDir::Acquire(o);
  ::umount2(ro.c_str(), MNT_DETACH);
  ASSERT_FALSE(nd.ok());
  EXPECT_TRUE(nd.status().IsIOError()) << nd.status().ToString();
  EXPECT_EQ(nd.status().ToErrno(), EROFS);
  EXPECT_NE(nd.status().message().find("backing directory " + ro + " is not writable"), std::string::npos)
      << nd.status().message();
}

TEST_F(NodeDirTest, PermissionDeniedBackingIsAClearError) {
  // The EACCES path (what a non-root mount sees), injected.
  FaultInjectionEnv env(Env::Posix());
  env.AddFault(FaultRule{.ops = kFaultMkdir | kFaultOpen, .path_substr = "", .err = EACCES});
  NodeDirOptions o = Opts();
  o.env = &env;
  auto nd = NodeDir::Acquire(o);
  ASSERT_FALSE(nd.ok());
  EXPECT_EQ(nd.status().ToErrno(), EACCES);
  EXPECT_NE(nd.status().message().find("is not writable"), std::string::npos) << nd.status().message();
}

TEST_F(NodeDirTest, HeartbeatThreadRefreshesAndDetectsLostOwnership) {
  auto nd = NodeDir::Acquire(Opts());
  ASSERT_TRUE(nd.ok());
  const int64_t t0 = HeartbeatRecord::Parse(Get(HeartbeatFilePath(dir_, "n1")))->time_ns;
  (*nd)->StartHeartbeat(20ms);
  for (int i = 0; i < 500 && (*nd)->heartbeat()->beats() < 3; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE((*nd)->heartbeat()->beats(), 3u);
  EXPECT_EQ((*nd)->heartbeat()->failures(), 0u);
  EXPECT_GT(HeartbeatRecord::Parse(Get(HeartbeatFilePath(dir_, "n1")))->time_ns, t0);

  // Another mount forces a takeover: the old owner notices and stops heartbeating.
  NodeDirOptions o = Opts();
  o.force = true;
  o.self = HostIdentity{"usurper", "boot", 1, 0};
  auto usurper = NodeDir::Acquire(o);
  ASSERT_TRUE(usurper.ok()) << usurper.status().ToString();
  EXPECT_EQ((*usurper)->generation(), 2u);
  for (int i = 0; i < 500 && !(*nd)->ownership_lost(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE((*nd)->ownership_lost());
  // The old owner may have beaten once between the usurper's HEARTBEAT and OWNER writes; after it
  // noticed, it writes no more.
  ASSERT_TRUE((*usurper)->WriteHeartbeat().ok());
  std::this_thread::sleep_for(100ms);  // 5 heartbeat intervals of the old owner
  auto hb = HeartbeatRecord::Parse(Get(HeartbeatFilePath(dir_, "n1")));
  EXPECT_EQ(hb->host, "usurper");
  (*nd)->StopHeartbeat();
  EXPECT_TRUE((*nd)->Release().IsBusy());
  EXPECT_EQ(OwnerRecord::Parse(Get(OwnerFilePath(dir_, "n1")))->owner.host, "usurper");
}

// An idle beat costs one backing metadata operation (the stat of OWNER) and one sync: HEARTBEAT is
// rewritten in place (same fixed size) through a kept descriptor, OWNER re-read only when it changed.
TEST_F(NodeDirTest, IdleBeatIsOneStatAndOneInPlaceWrite) {
  auto nd = NodeDir::Acquire(Opts());
  ASSERT_TRUE(nd.ok());
  const std::string hb_path = HeartbeatFilePath(dir_, "n1");
  const std::string first = Get(hb_path);
  EXPECT_EQ(first.size() % kHeartbeatBytes, 0u);
  ASSERT_TRUE((*nd)->Beat().ok());  // the first beat reads OWNER once and opens HEARTBEAT
  EnvCounters& c = Env::Posix()->counters();
  const uint64_t meta0 = c.MetadataOps(), sync0 = c.sync.load(), stat0 = c.stat.load();
  int64_t prev = HeartbeatRecord::Parse(Get(hb_path))->time_ns;
  const uint64_t meta_get = c.MetadataOps();  // Get() itself is open + close
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*nd)->Beat().ok());
  EXPECT_EQ(c.stat.load() - stat0, 3u);
  EXPECT_EQ(c.MetadataOps() - meta_get, 3u) << "beats cost " << c.MetadataOps() - meta_get << " (Get " << meta_get - meta0 << ")";
  EXPECT_EQ(c.sync.load() - sync0, 3u);
  const std::string now = Get(hb_path);
  EXPECT_EQ(now.size(), first.size());
  auto hb = HeartbeatRecord::Parse(now);
  ASSERT_TRUE(hb.ok());
  EXPECT_GE(hb->time_ns, prev);
  EXPECT_EQ(hb->generation, (*nd)->generation());
  // A changed OWNER (another mount took over) is noticed by the next beat, which then writes nothing.
  NodeDirOptions o = Opts();
  o.force = true;
  o.self = HostIdentity{"usurper", "boot", 1, 0};
  auto usurper = NodeDir::Acquire(o);
  ASSERT_TRUE(usurper.ok()) << usurper.status().ToString();
  EXPECT_TRUE((*nd)->Beat().IsBusy());
  EXPECT_TRUE((*nd)->ownership_lost());
  EXPECT_EQ(HeartbeatRecord::Parse(Get(hb_path))->host, "usurper");
}

TEST_F(NodeDirTest, ListNodesReturnsNodeDirectories) {
  EXPECT_TRUE(ListNodes(Env::Posix(), dir_)->empty());
  ASSERT_TRUE(NodeDir::Acquire(Opts("b-node")).ok());
  ASSERT_TRUE(NodeDir::Acquire(Opts("a-node")).ok());
  Put(NodesDirPath(dir_) + "/stray-file", "x");
  auto nodes = ListNodes(Env::Posix(), dir_);
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ(*nodes, (std::vector<std::string>{"a-node", "b-node"}));
}

}  // namespace
}  // namespace kvfs
