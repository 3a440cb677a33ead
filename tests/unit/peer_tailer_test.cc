// PeerTailer (engine/peer_tailer.h) on its own. Node A is a real Store over a temp backing directory
// (store_harness.h); node B is only what the tailer needs: an IndexDb, a HybridClock, a namespace mutex
// and hooks that record what they are told. The test polls (RefreshAll) unless it starts the thread.
// Checked: what B's index holds after each poll (A's changes, in A's order), what the hooks heard
// (exactly the changed names / inodes, the dropped segments), B's position against A's journal, a torn
// tail of A's journal, B's restart (resumed from its index: nothing applied twice, also through two
// Stores), a purged A, early polls of the thread. No durations are asserted.
#include "engine/peer_tailer.h"
#include "engine/dir_renames.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "blockstore/node_dir.h"
#include "index/snapshot.h"
#include "index/inode.h"
#include "index/journal.h"
#include "index/replay.h"
#include "store_harness.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;
using testing_harness::Content;

constexpr auto kHour = std::chrono::milliseconds(3600 * 1000);

class PeerTailerTest : public testing_harness::StoreHarness {
 protected:
  PeerTailerTest() { heartbeat_interval_ms_ = 3600 * 1000; }

  void SetUp() override {
    StoreHarness::SetUp();
    OpenStore();  // node A
    OpenB();
  }
  void TearDown() override {
    CloseB();
    StoreHarness::TearDown();
  }

  // Node B: its index (kept across CloseB / OpenB) and a tailer resumed from it.
  void OpenB(std::chrono::milliseconds poll_interval = std::chrono::milliseconds(0), std::string node = "node-b") {
    IndexDbOptions io;
    io.dir = root_ + "/index-b";
    io.node_id = "node-b";
    auto db = IndexDb::Open(io);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    b_index_ = std::move(*db);
    PeerTailerOptions po;
    po.env = Env::Posix();
    po.backing_dir = backing_;
    po.node = node;
    po.poll_interval = poll_interval;
    po.group_commit_interval = std::chrono::milliseconds(5);
    po.dir_renames = &b_renames_;
    PeerTailerHooks hooks;
    hooks.notify = [this](const PeerChanges& c) {
      std::lock_guard<std::mutex> l(heard_mu_);
      heard_.push_back(c);
    };
    hooks.segment_dropped = [this](const SegmentId& id) {
      std::lock_guard<std::mutex> l(heard_mu_);
      dropped_.push_back(id);
    };
    tailer_ = std::make_unique<PeerTailer>(po, b_index_.get(), &b_hlc_, &b_ns_mu_, hooks);
    tailer_->ResumeFromIndex();
  }
  void CloseB() {
    tailer_.reset();
    if (b_index_) {
      EXPECT_TRUE(b_index_->Close().ok());
    }
    b_index_.reset();
  }

  // A journal of a third node, "node-0" (polled before node-a: it sorts first), holding `entries`.
  void WriteNode0Journal(std::vector<JournalEntry> entries) {
    const std::string dir = NodeDirPath(backing_, "node-0");
    std::filesystem::create_directories(dir);
    JournalWriterOptions o;
    o.env = Env::Posix();
    o.dir = dir;
    o.node = "node-0";
    o.generation = 1;
    auto w = JournalWriter::Open(o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (auto& e : entries) (*w)->Append(std::move(e));
    ASSERT_TRUE((*w)->Sync().ok());
  }

  // Appends `entries` to the journal of a fake peer `node` (one writer per node, kept open: a later call
  // continues the same file) and syncs them.
  void AppendPeerJournal(const std::string& node, std::vector<JournalEntry> entries) {
    auto& w = peer_writers_[node];
    if (!w) {
      const std::string dir = NodeDirPath(backing_, node);
      std::filesystem::create_directories(dir);
      JournalWriterOptions o;
      o.env = Env::Posix();
      o.dir = dir;
      o.node = node;
      o.generation = 1;
      auto opened = JournalWriter::Open(o);
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      w = std::move(*opened);
    }
    for (auto& e : entries) w->Append(std::move(e));
    ASSERT_TRUE(w->Sync().ok());
  }

  // Every name the notify hook was given, in order; clears what was heard.
  std::vector<std::string> TakeNames() {
    std::lock_guard<std::mutex> l(heard_mu_);
    std::vector<std::string> names;
    for (const auto& c : heard_)
      for (const auto& n : c.names) names.push_back(n.name);
    heard_.clear();
    return names;
  }
  size_t Calls() {
    std::lock_guard<std::mutex> l(heard_mu_);
    return heard_.size();
  }
  std::vector<std::string> BNames() {
    std::vector<std::string> names;
    EXPECT_TRUE(b_index_->ReadDir(kRootIno, 0, [&](const DirEntry& e) {
      names.push_back(e.name);
      return true;
    }).ok());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::vector<std::string> ANames() {
    auto names = List();
    std::sort(names.begin(), names.end());
    return names;
  }

  // B's tailer's position in A's journal (a failure if it has none).
  JournalPosition BPosition() {
    const auto pos = tailer_->Positions();
    auto it = pos.find("node-a");
    if (it == pos.end()) {
      ADD_FAILURE() << "B's tailer has no position for node-a";
      return {};
    }
    return it->second;
  }
  // B's index's applied position of A ("" if none).
  std::string BAppliedPosition() {
    auto r = b_index_->GetAppliedPosition("node-a");
    return r.ok() ? *r : std::string();
  }

  // A's journal, every entry with its end position, in order.
  std::vector<std::pair<JournalEntry, JournalPosition>> AJournal() {
    std::vector<std::pair<JournalEntry, JournalPosition>> all;
    for (const auto& path : JournalPaths()) {
      std::vector<std::pair<JournalEntry, JournalPosition>> entries;
      JournalReadReport rep;
      EXPECT_TRUE(ReadJournalFile(Env::Posix(), path, JournalReaderOptions{}, &entries, &rep).ok()) << path;
      all.insert(all.end(), entries.begin(), entries.end());
    }
    return all;
  }
  // Entries of A's journal that are index operations (what a tailer counts as applied).
  uint64_t AApplicable() {
    uint64_t n = 0;
    for (const auto& [e, pos] : AJournal()) {
      ApplyOp op;
      if (JournalEntryToApplyOp(e, &op)) n++;
    }
    return n;
  }
  uint64_t AMaxStamp() {
    uint64_t m = 0;
    for (const auto& [e, pos] : AJournal()) m = std::max(m, e.stamp);
    return m;
  }

  static std::string ReadFileBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void WriteFileBytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }

  std::unique_ptr<IndexDb> b_index_;
  std::map<std::string, std::unique_ptr<JournalWriter>> peer_writers_;

  DirRenameLog b_renames_;
  HybridClock b_hlc_;
  std::mutex b_ns_mu_;
  std::unique_ptr<PeerTailer> tailer_;
  std::mutex heard_mu_;
  std::vector<PeerChanges> heard_;
  std::vector<SegmentId> dropped_;
};

// What A does, B's index shows after a poll, in A's order (an unlink after a rename removes the renamed
// name); the listener hears exactly the names that changed, in the order they changed; B's position is
// the end of A's last entry; its clock is past A's stamps.
TEST_F(PeerTailerTest, AppliesAPeersChangesInJournalOrder) {
  const Location l1 = WriteFile("c1.tmp", Content("c1", 8192, 1));
  ASSERT_TRUE(store_->Sync().ok());
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  auto c1 = b_index_->Lookup(kRootIno, "c1.tmp");
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  EXPECT_EQ(c1->attr.size, 8192u);
  EXPECT_EQ(c1->location, l1);
  EXPECT_EQ(TakeNames(), std::vector<std::string>{"c1.tmp"});

  ASSERT_TRUE(store_->Rename(kRootIno, "c1.tmp", kRootIno, "c1", 0, nullptr).ok());
  const Location l2 = WriteFile("c2", Content("c2", 4096, 2));
  ASSERT_TRUE(store_->Unlink(kRootIno, "c1", nullptr).ok());
  ASSERT_TRUE(store_->Mkdir(kRootIno, "d", S_IFDIR | 0755, 0, 0).ok());
  ASSERT_TRUE(store_->Sync().ok());
  ASSERT_TRUE(tailer_->RefreshAll().ok());

  EXPECT_EQ(TakeNames(), (std::vector<std::string>{"c1.tmp", "c1", "c2", "c1", "d"}));
  EXPECT_EQ(BNames(), ANames());
  EXPECT_EQ(BNames(), (std::vector<std::string>{"c2", "d"}));
  EXPECT_TRUE(b_index_->Lookup(kRootIno, "c1").status().IsNotFound());
  EXPECT_TRUE(b_index_->Lookup(kRootIno, "c1.tmp").status().IsNotFound());
  auto c2 = b_index_->Lookup(kRootIno, "c2");
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c2->location, l2);
  EXPECT_EQ(c2->attr.size, 4096u);
  auto d = b_index_->Lookup(kRootIno, "d");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(S_ISDIR(d->attr.mode));

  const auto journal = AJournal();
  ASSERT_FALSE(journal.empty());
  const auto pos = tailer_->Positions();
  ASSERT_EQ(pos.size(), 1u);
  EXPECT_EQ(pos.at("node-a"), journal.back().second);
  EXPECT_EQ(BAppliedPosition(), journal.back().second.ToString());
  EXPECT_GT(b_hlc_.Now(), AMaxStamp());

  const PeerTailerStats st = tailer_->GetStats();
  EXPECT_EQ(st.peers, 1u);
  EXPECT_EQ(st.polls, 2u);
  EXPECT_EQ(st.entries_applied, AApplicable());
  // PUT c1.tmp; the rename of a committed file: UNLINK c1.tmp + PUT c1; PUT c2, UNLINK c1, MKDIR d.
  EXPECT_EQ(st.entries_applied, 6u);
  ASSERT_EQ(st.journals.size(), 1u);
  EXPECT_EQ(st.journals[0].node, "node-a");
  EXPECT_EQ(st.journals[0].polls, 2u);
  EXPECT_EQ(st.journals[0].entries_applied, 6u);
  EXPECT_GE(st.journals[0].last_poll_age_seconds, 0.0);
  EXPECT_TRUE(dropped_.empty());
}

// Peers are polled in turn: node-0's chmod and xattr of a name node-a bound (written after node-0 saw it:
// higher stamps) are read before node-a's PUT of it ("node-0" sorts first). They find no name then and
// are kept as orphans, applied again after the round: B ends with node-0's mode and xattr, as a rebuild
// (merged by stamp) would. Before, B dropped them and differed for good.
TEST_F(PeerTailerTest, APeersChangeReadBeforeThePutItChangesLandsAfterIt) {
  WriteFile("y", Content("y", 4096, 9));
  ASSERT_TRUE(store_->Sync().ok());
  const uint64_t later = AMaxStamp() + 1000;
  {
    EntryAttrs at;
    at.mode = S_IFREG | 0600;
    WriteNode0Journal({JournalEntry::Setattr("/y", at, kSetMode, later),
                       JournalEntry::Xattr("/y", "user.vllm_kv_crc32", "0badf00d", false, later + 1),
                       JournalEntry::Xattr("/nothing-here", "user.x", "1", false, later + 2)});
  }
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  auto y = b_index_->Lookup(kRootIno, "y");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
  auto x = b_index_->GetXattr(y->attr.ino, "user.vllm_kv_crc32");
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(*x, "0badf00d");
  PeerTailerStats st = tailer_->GetStats();
  EXPECT_EQ(st.orphans_applied, 2u);
  EXPECT_EQ(st.orphans_pending, 1u);  // /nothing-here: kept (bounded in count and age), never applied
  // Only a missing name makes an orphan: an older change that loses to the binding (stamp 1, below
  // node-a's PUT) is skipped for good.
  ApplyOp older;
  older.kind = ApplyOp::Kind::kSetattr;
  older.path = "/y";
  older.attr.mode = S_IFREG | 0644;
  older.mask = kSetMode;
  older.stamp = 1;
  ApplyOp missing = older;
  missing.path = "/d/absent";
  auto r = b_index_->ApplyBatch(std::vector<ApplyOp>{older, missing}, "node-0");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->no_target, std::vector<size_t>{1});
  EXPECT_EQ(b_index_->Lookup(kRootIno, "y")->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
}

// node-a PUTs d/y; node-0 (read first: "node-0" sorts before "node-a") renamed d to d2 after it had seen
// that PUT (a higher stamp). B applies the rename, then node-a's older PUT: it follows the rename to
// d2/y (engine/dir_renames.h), as a rebuild merged by stamp would place it. Before, it re-created d/y
// beside an empty d2.
TEST_F(PeerTailerTest, APeersPutOlderThanADirectoryRenameReadFirstFollowsIt) {
  auto d = store_->Mkdir(kRootIno, "d", S_IFDIR | 0755, 0, 0);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(store_->Sync().ok());
  ASSERT_TRUE(tailer_->RefreshAll().ok());  // B has d
  const Location ly = WriteFile("y", Content("y", 4096, 5), nullptr, d->attr.ino);
  ASSERT_TRUE(store_->Sync().ok());
  const uint64_t later = AMaxStamp() + 1000;
  WriteNode0Journal({JournalEntry::Rename("/d", "/d2", Location{}, later)});
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  EXPECT_EQ(BNames(), (std::vector<std::string>{"d2"}));
  auto d2 = b_index_->Lookup(kRootIno, "d2");
  ASSERT_TRUE(d2.ok()) << d2.status().ToString();
  auto y = b_index_->Lookup(d2->attr.ino, "y");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->location, ly);
  EXPECT_EQ(tailer_->GetStats().dir_rename_redirects, 1u);
  EXPECT_EQ(b_renames_.size(), 1u);
}

// node-0's snapshot holds its rename of d to d2 (a record: node-0's journal holding the RENAME is
// retired) and d2; B reads it before node-a's older MKDIR d and PUT d/y (node-0 sorts first): the
// record is noted and stored, and node-a's entries follow it to d2/y. Before, B had d/y beside an
// empty d2.
TEST_F(PeerTailerTest, APeersSnapshotRecordOfADirectoryRenameRedirectsOlderEntriesReadAfterIt) {
  auto d = store_->Mkdir(kRootIno, "d", S_IFDIR | 0755, 0, 0);
  ASSERT_TRUE(d.ok());
  const Location ly = WriteFile("y", Content("y", 4096, 5), nullptr, d->attr.ino);
  ASSERT_TRUE(store_->Sync().ok());
  const uint64_t later = AMaxStamp() + 1000;
  const std::string dir = NodeDirPath(backing_, "node-0");
  std::filesystem::create_directories(dir);
  {
    auto w = SnapshotWriter::Create(Env::Posix(), dir, "node-0", 1, 1);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Add(JournalEntry::Rename("/d", "/d2", Location{}, later)).ok());
    EntryAttrs da;
    da.mode = S_IFDIR | 0755;
    ASSERT_TRUE((*w)->Add(JournalEntry::Mkdir("/d2", da, 0)).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  EXPECT_EQ(BNames(), (std::vector<std::string>{"d2"}));
  auto d2 = b_index_->Lookup(kRootIno, "d2");
  ASSERT_TRUE(d2.ok()) << d2.status().ToString();
  auto y = b_index_->Lookup(d2->attr.ino, "y");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->location, ly);
  EXPECT_EQ(*b_index_->ListDirRenames(), (std::vector<DirRenameRecord>{{"/d", "/d2", later, "node-0"}}));
  EXPECT_EQ(b_renames_.size(), 1u);
}

// node-a PUTs x/f; node-0 (read first) exchanged the directories x and y after it had seen that PUT. B
// applies the EXCHANGE (one record, noted both ways), then node-a's older PUT: it follows its directory
// to y/f. And node-a's older PUT y/g lands in x/g: the record maps both paths in one step.
TEST_F(PeerTailerTest, APeersPutsOlderThanADirectoryExchangeReadFirstFollowTheirDirectories) {
  auto x = store_->Mkdir(kRootIno, "x", S_IFDIR | 0755, 0, 0);
  ASSERT_TRUE(x.ok());
  auto y = store_->Mkdir(kRootIno, "y", S_IFDIR | 0755, 0, 0);
  ASSERT_TRUE(y.ok());
  ASSERT_TRUE(store_->Sync().ok());
  ASSERT_TRUE(tailer_->RefreshAll().ok());  // B has x and y
  const Location lf = WriteFile("f", Content("f", 4096, 5), nullptr, x->attr.ino);
  const Location lg = WriteFile("g", Content("g", 4096, 6), nullptr, y->attr.ino);
  ASSERT_TRUE(store_->Sync().ok());
  const uint64_t later = AMaxStamp() + 1000;
  WriteNode0Journal({JournalEntry::Exchange("/x", "/y", later)});
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  EXPECT_EQ(BNames(), (std::vector<std::string>{"x", "y"}));
  auto bx = b_index_->Lookup(kRootIno, "x");
  ASSERT_TRUE(bx.ok());
  auto by = b_index_->Lookup(kRootIno, "y");
  ASSERT_TRUE(by.ok());
  auto f = b_index_->Lookup(by->attr.ino, "f");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->location, lf);
  auto g = b_index_->Lookup(bx->attr.ino, "g");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->location, lg);
  EXPECT_FALSE(b_index_->Lookup(bx->attr.ino, "f").ok());
  EXPECT_FALSE(b_index_->Lookup(by->attr.ino, "g").ok());
  EXPECT_EQ(tailer_->GetStats().dir_rename_redirects, 2u);
  EXPECT_EQ(*b_index_->ListDirRenames(), (std::vector<DirRenameRecord>{{"/x", "/y", later, "node-0", true}}));
  EXPECT_EQ(b_renames_.size(), 1u);
}

// Two fake peers: the mover makes /d and binds /d/bf (stamp 5); the renamer renames /d to /d2 (stamp
// 20); the mover, having applied the rename, re-appends bf's record (MOVE /d2/bf, stamp 5) and drops
// the old segment (stamp 21). B reads the mover's MOVE and DROP before the RENAME (the mover sorts
// first) or after it: either way the MOVE finds bf (by its old record when /d2/bf is not there yet) and
// B ends with /d2/bf at the new record. Before, in the first order B had an empty /d2.
TEST_F(PeerTailerTest, APeersMoveWrittenAfterADirectoryRenameKeepsTheFileInEitherReadOrder) {
  for (const bool move_first : {true, false}) {
    SCOPED_TRACE(move_first ? "MOVE read before the RENAME" : "MOVE read after the RENAME");
    const std::string mover = move_first ? "node-0" : "node-1", renamer = move_first ? "node-1" : "node-0";
    const std::string d = move_first ? "/d" : "/e", d2 = d + "2";
    Location old_rec, new_rec;
    old_rec.segment = SegmentId{mover, 1, 1};
    old_rec.value_offset = 4096;
    old_rec.length = 10;
    new_rec = old_rec;
    new_rec.segment.seq = 2;
    EntryAttrs da, fa;
    da.mode = S_IFDIR | 0755;
    fa.mode = S_IFREG | 0644;
    fa.size = 10;
    AppendPeerJournal(mover, {JournalEntry::Mkdir(d, da, 1), JournalEntry::Put(d + "/bf", old_rec, fa, 5)});
    ASSERT_TRUE(tailer_->RefreshAll().ok());
    auto bd = b_index_->Lookup(kRootIno, d.substr(1));
    ASSERT_TRUE(bd.ok()) << bd.status().ToString();
    ASSERT_TRUE(b_index_->Lookup(bd->attr.ino, "bf").ok());
    AppendPeerJournal(mover, {JournalEntry::Move(d2 + "/bf", old_rec, new_rec, 5),
                              JournalEntry::Drop(old_rec.segment, 21)});
    AppendPeerJournal(renamer, {JournalEntry::Rename(d, d2, Location{}, 20)});
    ASSERT_TRUE(tailer_->RefreshAll().ok());
    EXPECT_FALSE(b_index_->Lookup(kRootIno, d.substr(1)).ok());
    auto bd2 = b_index_->Lookup(kRootIno, d2.substr(1));
    ASSERT_TRUE(bd2.ok()) << bd2.status().ToString();
    auto bf = b_index_->Lookup(bd2->attr.ino, "bf");
    ASSERT_TRUE(bf.ok()) << bf.status().ToString();
    EXPECT_EQ(bf->location, new_rec);
  }
}

// The exchanger (read first) swaps /x and /y (stamp 20) after the mover bound /x/bf (stamp 5); the
// mover, having applied the exchange, journals MOVE /y/bf (stamp 5) and the DROP. B applies the
// EXCHANGE, then the MOVE: the redirect rule sends its path back to /x/bf (older than the exchange's
// record), where nothing references the old record, so it finds bf at /y/bf by the record. Before, the
// DROP removed /y/bf.
TEST_F(PeerTailerTest, APeersMoveAfterADirectoryExchangeIsNotLostToTheRedirect) {
  Location old_rec;
  old_rec.segment = SegmentId{"node-1", 1, 1};
  old_rec.value_offset = 4096;
  old_rec.length = 10;
  Location new_rec = old_rec;
  new_rec.segment.seq = 2;
  EntryAttrs da, fa;
  da.mode = S_IFDIR | 0755;
  fa.mode = S_IFREG | 0644;
  fa.size = 10;
  AppendPeerJournal("node-1", {JournalEntry::Mkdir("/x", da, 1), JournalEntry::Mkdir("/y", da, 2),
                               JournalEntry::Put("/x/bf", old_rec, fa, 5)});
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  AppendPeerJournal("node-0", {JournalEntry::Exchange("/x", "/y", 20)});
  AppendPeerJournal("node-1", {JournalEntry::Move("/y/bf", old_rec, new_rec, 5),
                               JournalEntry::Drop(old_rec.segment, 21)});
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  auto bx = b_index_->Lookup(kRootIno, "x");
  auto by = b_index_->Lookup(kRootIno, "y");
  ASSERT_TRUE(bx.ok() && by.ok());
  EXPECT_FALSE(b_index_->Lookup(bx->attr.ino, "bf").ok());
  auto bf = b_index_->Lookup(by->attr.ino, "bf");
  ASSERT_TRUE(bf.ok()) << bf.status().ToString();
  EXPECT_EQ(bf->location, new_rec);
  EXPECT_EQ(tailer_->GetStats().dir_rename_redirects, 1u);
}

// A poll that finds nothing new tells the listener nothing; an attribute change in place is reported as
// the inode (B's number), not as a name.
TEST_F(PeerTailerTest, ListenerHearsOnlyWhatChanged) {
  WriteFile("f", Content("f", 4096, 3));
  WriteFile("g", Content("g", 4096, 4));
  ASSERT_TRUE(store_->Sync().ok());
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  EXPECT_EQ(TakeNames(), (std::vector<std::string>{"f", "g"}));
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  EXPECT_EQ(Calls(), 0u);
  EXPECT_EQ(tailer_->GetStats().entries_applied, 2u);

  auto af = store_->Lookup(kRootIno, "f");
  ASSERT_TRUE(af.ok());
  Attr a = af->attr;
  a.mode = S_IFREG | 0600;
  ASSERT_TRUE(store_->SetAttr(af->attr.ino, a, kSetMode).ok());
  ASSERT_TRUE(store_->Sync().ok());
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  auto bf = b_index_->Lookup(kRootIno, "f");
  ASSERT_TRUE(bf.ok());
  EXPECT_EQ(bf->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
  {
    std::lock_guard<std::mutex> l(heard_mu_);
    ASSERT_EQ(heard_.size(), 1u);
    EXPECT_TRUE(heard_[0].names.empty());
    EXPECT_EQ(heard_[0].inodes, std::vector<uint64_t>{bf->attr.ino});
    heard_.clear();
  }
  EXPECT_EQ(b_index_->Lookup(kRootIno, "g")->attr.mode, static_cast<uint32_t>(S_IFREG | 0644));
  EXPECT_EQ(tailer_->GetStats().entries_applied, 3u);
}

// A's last entry is only half there (the writer is still appending, or NFS has not shown its bytes):
// B applies everything before it, stays at the end of the entry before, and applies the last entry
// once it is complete, exactly once.
TEST_F(PeerTailerTest, TornTailIsNotAppliedUntilComplete) {
  WriteFile("t1", Content("t1", 4096, 5));
  const Location l2 = WriteFile("t2", Content("t2", 4096, 6));
  ASSERT_TRUE(store_->Sync().ok());
  const auto journal = AJournal();
  ASSERT_GE(journal.size(), 2u);
  const auto& [last, last_end] = journal.back();
  ASSERT_EQ(last.op, JournalOp::kPut);
  ASSERT_EQ(last.path, "/t2");
  const JournalPosition before = journal[journal.size() - 2].second;
  ASSERT_EQ(before.file_number, last_end.file_number);
  ASSERT_GT(last_end.offset, before.offset + 2);
  const std::string path = JournalPaths().back();
  const std::string whole = ReadFileBytes(path);
  ASSERT_GE(whole.size(), last_end.offset);

  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(before.offset + (last_end.offset - before.offset) / 2)), 0);
  for (int i = 0; i < 2; i++) {
    ASSERT_TRUE(tailer_->RefreshAll().ok());
    EXPECT_TRUE(b_index_->Lookup(kRootIno, "t1").ok());
    EXPECT_TRUE(b_index_->Lookup(kRootIno, "t2").status().IsNotFound()) << "a torn entry was applied";
    EXPECT_EQ(BPosition(), before);
  }
  EXPECT_EQ(TakeNames(), std::vector<std::string>{"t1"});

  WriteFileBytes(path, whole);
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  auto t2 = b_index_->Lookup(kRootIno, "t2");
  ASSERT_TRUE(t2.ok()) << t2.status().ToString();
  EXPECT_EQ(t2->location, l2);
  EXPECT_EQ(TakeNames(), std::vector<std::string>{"t2"});
  EXPECT_EQ(BPosition(), last_end);
  EXPECT_EQ(tailer_->GetStats().entries_applied, AApplicable());
  EXPECT_EQ(tailer_->GetStats().entries_applied, 2u);
}

// B's tailer restarts over its index: it resumes where the index says it stopped, applies nothing
// twice, and then applies exactly what A wrote meanwhile.
TEST_F(PeerTailerTest, PositionsSurviveRestart) {
  WriteFile("r1", Content("r1", 4096, 7));
  ASSERT_TRUE(store_->Rename(kRootIno, "r1", kRootIno, "r2", 0, nullptr).ok());
  ASSERT_TRUE(store_->Sync().ok());
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  const JournalPosition pos = BPosition();
  EXPECT_EQ(pos, AJournal().back().second);
  EXPECT_EQ(tailer_->GetStats().entries_applied, 3u);  // PUT r1, then UNLINK r1 + PUT r2 (the rename)
  TakeNames();

  CloseB();
  WriteFile("r3", Content("r3", 4096, 8));  // while B is down
  ASSERT_TRUE(store_->Sync().ok());
  OpenB();
  EXPECT_EQ(BPosition(), pos);
  EXPECT_EQ(tailer_->GetStats().peers, 1u);
  EXPECT_EQ(tailer_->GetStats().polls, 0u);
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  EXPECT_EQ(TakeNames(), std::vector<std::string>{"r3"});
  EXPECT_EQ(tailer_->GetStats().entries_applied, 1u);
  EXPECT_EQ(BNames(), (std::vector<std::string>{"r2", "r3"}));

  CloseB();
  OpenB();
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  EXPECT_EQ(Calls(), 0u);
  EXPECT_EQ(tailer_->GetStats().entries_applied, 0u);
  EXPECT_EQ(tailer_->GetStats().polls, 1u);
  EXPECT_EQ(BPosition(), AJournal().back().second);
}

// The same through two Stores (the wiring in Store::Open): B's second mount resumes from its index.
TEST_F(PeerTailerTest, StoreResumesTailingAfterRemount) {
  StoreOptions oc = Options();
  oc.node_id = "node-c";
  oc.index_dir = root_ + "/index-c";
  auto c = Store::Open(oc);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  WriteFile("s1", Content("s1", 4096, 9));
  WriteFile("s2", Content("s2", 4096, 10));
  ASSERT_TRUE(store_->Sync().ok());
  ASSERT_TRUE((*c)->RefreshPeers().ok());
  EXPECT_EQ((*c)->GetStats().peer_entries_applied, 2u);
  ASSERT_TRUE((*c)->Close().ok());
  c->reset();

  c = Store::Open(oc);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<std::string> heard;
  (*c)->SetChangeListener([&](const PeerChanges& ch) {
    for (const auto& n : ch.names) heard.push_back(n.name);
  });
  EXPECT_EQ((*c)->GetStats().peers, 1u);
  ASSERT_TRUE((*c)->RefreshPeers().ok());
  EXPECT_TRUE(heard.empty());
  EXPECT_EQ((*c)->GetStats().peer_entries_applied, 0u);
  EXPECT_TRUE((*c)->Lookup(kRootIno, "s1").ok());
  WriteFile("s3", Content("s3", 4096, 11));
  ASSERT_TRUE(store_->Sync().ok());
  ASSERT_TRUE((*c)->RefreshPeers().ok());
  EXPECT_EQ(heard, std::vector<std::string>{"s3"});
  EXPECT_EQ((*c)->GetStats().peer_entries_applied, 1u);
  const auto stats = (*c)->GetStats();
  ASSERT_EQ(stats.peer_journals.size(), 1u);
  EXPECT_EQ(stats.peer_journals[0].node, "node-a");
  EXPECT_EQ(stats.peer_journals[0].polls, 2u);
  EXPECT_EQ(stats.peer_journals[0].entries_applied, 1u);
  ASSERT_TRUE((*c)->Close().ok());
}

// A was purged while B was not reading (its journal gone, PURGED left): B drops A's segments from its
// index, tells the hooks which segment and which names went, and moves past the purged generation.
TEST_F(PeerTailerTest, PurgedPeerIsForgotten) {
  const Location l = WriteFile("p1", Content("p1", 4096, 12));
  ASSERT_TRUE(store_->Sync().ok());
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  ASSERT_TRUE(b_index_->Lookup(kRootIno, "p1").ok());
  TakeNames();
  const uint64_t gen = l.segment.generation;
  CloseStore();
  for (const auto& e : fs::directory_iterator(NodeDir())) {
    if (e.path().filename() != "OWNER") fs::remove_all(e.path());
  }
  ASSERT_TRUE(Env::Posix()
                  ->WriteFileAtomic(NodeDir() + "/PURGED", "time_ns=1\nhost=h\ngeneration=" + std::to_string(gen) + "\n")
                  .ok());

  ASSERT_TRUE(tailer_->RefreshAll().ok());
  EXPECT_TRUE(b_index_->Lookup(kRootIno, "p1").status().IsNotFound());
  EXPECT_EQ(TakeNames(), std::vector<std::string>{"p1"});
  EXPECT_EQ(dropped_, std::vector<SegmentId>{l.segment});
  EXPECT_EQ(BPosition(), (JournalPosition{gen + 1, 0, 0}));
  EXPECT_EQ(BAppliedPosition(), (JournalPosition{gen + 1, 0, 0}).ToString());
  // Once is enough.
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  EXPECT_EQ(Calls(), 0u);
  EXPECT_EQ(dropped_.size(), 1u);
}

// The thread: with an hour's interval, only an early poll (RequestRefresh) can bring A's file to B.
TEST_F(PeerTailerTest, ThreadPollsEarlyOnRequest) {
  CloseB();
  OpenB(kHour);
  tailer_->Start();
  WriteFile("e1", Content("e1", 4096, 13));
  ASSERT_TRUE(store_->Sync().ok());
  tailer_->RequestRefresh();
  const auto t0 = std::chrono::steady_clock::now();
  while (!b_index_->Lookup(kRootIno, "e1").ok() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(b_index_->Lookup(kRootIno, "e1").ok());
  tailer_->Stop();
  EXPECT_EQ(TakeNames(), std::vector<std::string>{"e1"});
  EXPECT_GE(tailer_->GetStats().polls, 1u);
  EXPECT_EQ(tailer_->GetStats().entries_applied, 1u);
}

// A refresh asked within a quarter interval of the last early poll polls no earlier, but its follow-up
// poll (after the peer's group commit) still comes, also while the thread waits for a far regular poll
// (before: the thread slept on to the regular poll, an hour here; and a first refresh within a quarter
// interval of the machine's boot was taken for a repeated one and never polled early).
TEST_F(PeerTailerTest, RepeatedRefreshStillGetsItsFollowUpPoll) {
  CloseB();
  OpenB(kHour);
  tailer_->Start();
  tailer_->RequestRefresh();  // an early poll (nothing new) and its follow-up
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  WriteFile("e2", Content("e2", 4096, 15));
  ASSERT_TRUE(store_->Sync().ok());
  tailer_->RequestRefresh();  // within 15 min of the first: only the follow-up
  const auto t0 = std::chrono::steady_clock::now();
  while (!b_index_->Lookup(kRootIno, "e2").ok() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(b_index_->Lookup(kRootIno, "e2").ok());
  tailer_->Stop();
  EXPECT_EQ(tailer_->GetStats().entries_applied, 1u);
}

// The thread looks for new nodes with one stat of the nodes directory and lists it only when that stat
// changed: lookup misses (RequestRefresh every 10 ms, a look every 5 intervals) cost no listing once the
// directory has settled (its last change nodes_dir_settle, 2 s, before a listing), and a node directory
// made meanwhile is still found at the next look (before: a listing at every look, 1 s apart by default).
TEST_F(PeerTailerTest, NewNodeFoundByTheNodesDirectoryStatWithoutRelisting) {
  CloseB();
  OpenB(std::chrono::milliseconds(10));
  tailer_->Start();
  auto refresh_for = [&](std::chrono::milliseconds d, const std::function<bool()>& done) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < d && !done()) {
      tailer_->RequestRefresh();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  // node-a's directory (made by SetUp) is the nodes directory's last change: the listings go on until
  // one comes 2 s after it; the looks after that one are answered by the stat.
  refresh_for(std::chrono::milliseconds(15000), [&] { return tailer_->GetStats().nodes_looks_unchanged >= 1; });
  const PeerTailerStats s0 = tailer_->GetStats();
  EXPECT_EQ(s0.peers, 1u);  // node-a
  EXPECT_GE(s0.nodes_listings, 1u);
  refresh_for(std::chrono::milliseconds(1000), [] { return false; });
  const PeerTailerStats s1 = tailer_->GetStats();
  EXPECT_EQ(s1.nodes_listings, s0.nodes_listings) << "the nodes directory was listed although its stat did not change";
  EXPECT_GE(s1.nodes_looks_unchanged - s0.nodes_looks_unchanged, 5u);  // ~20 looks in 1 s; the stat answered them
  EXPECT_EQ(s1.peers, 1u);

  // A new node (its directory, as its first mount makes it): found at the next look.
  ASSERT_EQ(::mkdir((NodesDirPath(backing_) + "/node-c").c_str(), 0700), 0) << strerror(errno);
  refresh_for(std::chrono::milliseconds(10000), [&] { return tailer_->GetStats().peers >= 2; });
  const PeerTailerStats s2 = tailer_->GetStats();
  EXPECT_EQ(s2.peers, 2u) << "node-c was not found";
  EXPECT_GE(s2.nodes_listings, s1.nodes_listings + 1);
  EXPECT_EQ(tailer_->Positions().count("node-c"), 0u);  // nothing to read in it yet
  tailer_->Stop();
}

// Without an interval there is no thread: RequestRefresh polls nothing. The tailer never reads its own
// node's journal.
TEST_F(PeerTailerTest, NoThreadWithoutIntervalAndNeverItsOwnJournal) {
  WriteFile("o1", Content("o1", 4096, 14));
  ASSERT_TRUE(store_->Sync().ok());
  tailer_->Start();
  tailer_->RequestRefresh();
  tailer_->Stop();
  EXPECT_EQ(tailer_->GetStats().polls, 0u);
  EXPECT_TRUE(b_index_->Lookup(kRootIno, "o1").status().IsNotFound());

  CloseB();
  OpenB(std::chrono::milliseconds(0), /*node=*/"node-a");
  ASSERT_TRUE(tailer_->RefreshAll().ok());
  EXPECT_EQ(tailer_->GetStats().polls, 0u);
  EXPECT_TRUE(tailer_->Positions().empty());
  EXPECT_TRUE(b_index_->Lookup(kRootIno, "o1").status().IsNotFound());
}

}  // namespace
}  // namespace kvfs
