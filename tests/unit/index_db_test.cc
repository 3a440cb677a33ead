#include "index/index_db.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include <rocksdb/db.h>

#include "index/journal_format.h"
#include "index/replay.h"
#include "index_db_fixture.h"

namespace kvfs {
namespace {

class IndexDbTest : public IndexDbFixture {
 protected:
  static Location Loc(const std::string& node, uint64_t seq, uint64_t off, uint64_t len) {
    Location l;
    l.segment = {node, 1, seq};
    l.record_offset = off;
    l.value_offset = off + 4096;
    l.length = len;
    return l;
  }
  std::vector<std::string> List(uint64_t dir) {
    std::vector<std::string> names;
    EXPECT_TRUE(db_->ReadDir(dir, 0, [&](const DirEntry& e) {
                       names.push_back(e.name);
                       return true;
                     })
                    .ok());
    std::sort(names.begin(), names.end());
    return names;
  }

};

TEST_F(IndexDbTest, RootExistsAndNamespaceOps) {
  EXPECT_TRUE(db_->Created());
  EXPECT_FALSE(db_->WasCleanlyClosed());
  auto root = db_->GetInode(kRootIno);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->attr.mode, uint32_t(S_IFDIR | 0755));
  EXPECT_EQ(db_->GetStats().directories, 1u);

  auto d = db_->Mkdir(kRootIno, "a", 0750, 7, 8);
  ASSERT_TRUE(d.ok());
  EXPECT_GT(d->attr.ino, kRootIno);
  EXPECT_EQ(d->attr.mode, uint32_t(S_IFDIR | 0750));
  EXPECT_EQ(d->attr.uid, 7u);
  EXPECT_EQ(db_->Mkdir(kRootIno, "a", 0755, 0, 0).status().code(), Status::Code::kExists);
  EXPECT_EQ(db_->GetInode(kRootIno)->attr.nlink, 3u);
  EXPECT_EQ(db_->Mkdir(999999, "x", 0755, 0, 0).status().ToErrno(), ENOENT);
  EXPECT_EQ(db_->Mkdir(kRootIno, "", 0755, 0, 0).status().ToErrno(), EINVAL);
  EXPECT_EQ(db_->Mkdir(kRootIno, "..", 0755, 0, 0).status().ToErrno(), EINVAL);
  EXPECT_EQ(db_->Mkdir(kRootIno, "a/b", 0755, 0, 0).status().ToErrno(), EINVAL);
  EXPECT_EQ(db_->Mkdir(kRootIno, std::string(256, 'x'), 0755, 0, 0).status().ToErrno(), ENAMETOOLONG);

  auto l = db_->Lookup(kRootIno, "a");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->attr.ino, d->attr.ino);
  EXPECT_EQ(l->parent, kRootIno);
  EXPECT_EQ(l->name, "a");
  EXPECT_TRUE(l->committed);
  EXPECT_TRUE(db_->Lookup(kRootIno, "nope").status().IsNotFound());

  // Files: staged on create.
  auto f = db_->CreateFile(d->attr.ino, "f", 0640, 1, 2, true);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->committed);
  EXPECT_EQ(f->attr.mode, uint32_t(S_IFREG | 0640));
  EXPECT_EQ(db_->GetStats().staged_files, 1u);
  EXPECT_EQ(db_->GetStats().files, 0u);
  EXPECT_TRUE(db_->CreateFile(d->attr.ino, "f", 0640, 1, 2, true).status().IsExists());
  auto again = db_->CreateFile(d->attr.ino, "f", 0600, 1, 2, false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->attr.ino, f->attr.ino);
  EXPECT_EQ(db_->CreateFile(kRootIno, "a", 0644, 0, 0, false).status().ToErrno(), EISDIR);
  EXPECT_EQ(db_->CreateFile(f->attr.ino, "x", 0644, 0, 0, false).status().ToErrno(), ENOTDIR);

  // Symlinks.
  auto s = db_->Symlink(kRootIno, "ln", "a/f", 0, 0, 5);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(S_ISLNK(s->attr.mode));
  EXPECT_EQ(s->attr.size, 3u);
  EXPECT_EQ(*db_->ReadLink(s->attr.ino), "a/f");
  EXPECT_EQ(db_->ReadLink(f->attr.ino).status().ToErrno(), EINVAL);
  EXPECT_TRUE(db_->Symlink(kRootIno, "ln", "x", 0, 0).status().IsExists());

  // Rmdir / Unlink errors.
  EXPECT_EQ(db_->Rmdir(kRootIno, "a").ToErrno(), ENOTEMPTY);
  EXPECT_EQ(db_->Rmdir(kRootIno, "ln").ToErrno(), ENOTDIR);
  EXPECT_EQ(db_->Rmdir(kRootIno, "zz").ToErrno(), ENOENT);
  EXPECT_EQ(db_->Unlink(kRootIno, "a").status().ToErrno(), EISDIR);
  EXPECT_EQ(db_->Unlink(kRootIno, "zz").status().ToErrno(), ENOENT);

  auto u = db_->Unlink(d->attr.ino, "f");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->attr.ino, f->attr.ino);
  EXPECT_FALSE(u->committed);
  EXPECT_TRUE(db_->GetInode(f->attr.ino).status().IsNotFound());
  EXPECT_EQ(db_->GetStats().staged_files, 0u);
  EXPECT_TRUE(db_->Rmdir(kRootIno, "a").ok());
  EXPECT_EQ(db_->GetInode(kRootIno)->attr.nlink, 2u);
  EXPECT_TRUE(db_->Lookup(kRootIno, "a").status().IsNotFound());
  EXPECT_TRUE(db_->GetInode(d->attr.ino).status().IsNotFound());
  EXPECT_EQ(List(kRootIno), std::vector<std::string>{"ln"});

  // Unlink of a committed file with a stamp leaves a tombstone at its path.
  auto ul = db_->Unlink(kRootIno, "ln", 77);
  ASSERT_TRUE(ul.ok());
  EXPECT_TRUE(ul->committed);
  auto tb = db_->GetTombstone("/ln");
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(tb->stamp, 77u);
  EXPECT_EQ(tb->node, "n1");
  EXPECT_EQ(db_->GetStats().files, 0u);
}

// FIFOs, sockets and devices: index-only nodes made locally (Mknod) or applied from SYMLINK entries of
// version 4 (a peer's journal, a replay): mode and rdev kept, re-applying keeps the inode, rename and
// unlink entries move and remove them like any committed file.
TEST_F(IndexDbTest, SpecialFilesLocalAndApplied) {
  auto f = db_->Mknod(kRootIno, "fifo", S_IFIFO | 0640, 99, 5, 6, 10);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->attr.mode, static_cast<uint32_t>(S_IFIFO | 0640));
  EXPECT_EQ(f->attr.rdev, 0u);  // only devices keep rdev
  EXPECT_TRUE(f->committed);
  EXPECT_EQ(f->attr.uid, 5u);
  EXPECT_TRUE(db_->Mknod(kRootIno, "fifo", S_IFSOCK | 0600, 0, 0, 0, 11).status().IsExists());
  EXPECT_TRUE(db_->Mknod(kRootIno, "r", S_IFREG | 0600, 0, 0, 0, 11).status().IsInvalidArgument());
  EXPECT_TRUE(db_->Mknod(kRootIno, "l", S_IFLNK | 0600, 0, 0, 0, 11).status().IsInvalidArgument());
  auto dev = db_->Mknod(kRootIno, "null", S_IFCHR | 0666, makedev(1, 3), 0, 0, 12);
  ASSERT_TRUE(dev.ok());
  auto got = db_->GetInode(dev->attr.ino);  // read back from the inode record
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->attr.rdev, makedev(1, 3));
  EXPECT_EQ(got->attr.mode, static_cast<uint32_t>(S_IFCHR | 0666));
  EXPECT_EQ(db_->ReadLink(dev->attr.ino).status().ToErrno(), EINVAL);

  // From a peer's journal.
  EntryAttrs ea;
  ea.mode = S_IFBLK | 0660;
  ea.uid = 1;
  ea.gid = 2;
  ea.mtime_ns = 777;
  ApplyOp op;
  ASSERT_TRUE(JournalEntryToApplyOp(JournalEntry::Special("/d/sda1", ea, makedev(8, 1), 100), &op));
  ApplyOp sock;
  ea.mode = S_IFSOCK | 0755;
  ASSERT_TRUE(JournalEntryToApplyOp(JournalEntry::Special("/d/sock", ea, 0, 101), &sock));
  ASSERT_TRUE(db_->ApplyBatch(std::vector<ApplyOp>{op, sock}, "peer").ok());
  auto d = db_->Lookup(kRootIno, "d");
  ASSERT_TRUE(d.ok());
  auto blk = db_->Lookup(d->attr.ino, "sda1");
  ASSERT_TRUE(blk.ok());
  EXPECT_EQ(blk->attr.mode, static_cast<uint32_t>(S_IFBLK | 0660));
  EXPECT_EQ(blk->attr.rdev, makedev(8, 1));
  EXPECT_EQ(blk->attr.size, 0u);
  EXPECT_EQ(blk->attr.mtime_ns, 777);
  EXPECT_TRUE(blk->committed);
  // Replayed again (a restart's catch-up): same inode, nothing changes.
  auto again = db_->ApplyBatch(std::vector<ApplyOp>{op}, "peer");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(db_->Lookup(d->attr.ino, "sda1")->attr.ino, blk->attr.ino);
  auto dump = db_->DumpByPath();
  ASSERT_TRUE(dump.ok());
  EXPECT_EQ(dump->at("/d/sock").mode, static_cast<uint32_t>(S_IFSOCK | 0755));
  EXPECT_EQ(dump->at("/d/sda1").rdev, makedev(8, 1));
  EXPECT_EQ(dump->at("/null").rdev, makedev(1, 3));
  // Rename and unlink entries.
  ASSERT_TRUE(db_->ApplyRename("/d/sda1", "/d/sdb1", Location{}, 102, "peer").ok());
  auto moved = db_->Lookup(d->attr.ino, "sdb1");
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->attr.mode, static_cast<uint32_t>(S_IFBLK | 0660));
  EXPECT_EQ(moved->attr.rdev, makedev(8, 1));
  EXPECT_TRUE(db_->Lookup(d->attr.ino, "sda1").status().IsNotFound());
  ASSERT_TRUE(db_->ApplyUnlink("/d/sock", 103, "peer").ok());
  EXPECT_TRUE(db_->Lookup(d->attr.ino, "sock").status().IsNotFound());
}

// RENAME_EXCHANGE locally (IndexDb::Exchange) and from a journal (EXCHANGE entries): files, a file with
// a directory across parents (link counts follow), refusals, and a replayed entry that changes nothing.
TEST_F(IndexDbTest, ExchangeLocalAndApplied) {
  auto d1 = db_->Mkdir(kRootIno, "d1", S_IFDIR | 0755, 0, 0, 1);
  auto d2 = db_->Mkdir(kRootIno, "d2", S_IFDIR | 0755, 0, 0, 2);
  ASSERT_TRUE(d1.ok() && d2.ok());
  Attr fa;
  fa.mode = S_IFREG | 0644;
  fa.size = 10;
  ASSERT_TRUE(db_->ApplyPut("/d1/a", Loc("n", 1, 0, 10), fa, 10, "n").ok());
  fa.size = 20;
  ASSERT_TRUE(db_->ApplyPut("/d2/b", Loc("n", 1, 100, 20), fa, 11, "n").ok());
  auto sub = db_->Mkdir(d2->attr.ino, "sub", S_IFDIR | 0700, 0, 0, 12);
  ASSERT_TRUE(sub.ok());
  const uint64_t ia = db_->Lookup(d1->attr.ino, "a")->attr.ino, ib = db_->Lookup(d2->attr.ino, "b")->attr.ino;

  auto r = db_->Exchange(d1->attr.ino, "a", d2->attr.ino, "b", 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->first.attr.ino, ia);
  EXPECT_EQ(r->first.parent, d2->attr.ino);
  EXPECT_EQ(db_->Lookup(d1->attr.ino, "a")->attr.ino, ib);
  EXPECT_EQ(db_->Lookup(d1->attr.ino, "a")->attr.size, 20u);
  EXPECT_EQ(db_->Lookup(d2->attr.ino, "b")->attr.ino, ia);
  EXPECT_EQ(db_->GetInode(ia)->name, "b");
  // A file with a directory across parents: d2 loses a subdirectory, d1 gains one.
  const uint32_t n1 = db_->GetInode(d1->attr.ino)->attr.nlink, n2 = db_->GetInode(d2->attr.ino)->attr.nlink;
  ASSERT_TRUE(db_->Exchange(d1->attr.ino, "a", d2->attr.ino, "sub", 21).ok());
  EXPECT_TRUE(S_ISDIR(db_->Lookup(d1->attr.ino, "a")->attr.mode));
  EXPECT_EQ(db_->Lookup(d2->attr.ino, "sub")->attr.ino, ib);
  EXPECT_EQ(db_->GetInode(d1->attr.ino)->attr.nlink, n1 + 1);
  EXPECT_EQ(db_->GetInode(d2->attr.ino)->attr.nlink, n2 - 1);
  EXPECT_EQ(List(d1->attr.ino), std::vector<std::string>{"a"});
  // Refusals: a missing name, a directory into its own subtree.
  EXPECT_TRUE(db_->Exchange(d1->attr.ino, "a", d2->attr.ino, "zz", 22).status().IsNotFound());
  EXPECT_TRUE(db_->Exchange(d1->attr.ino, "zz", d2->attr.ino, "b", 22).status().IsNotFound());
  auto inner = db_->Mkdir(sub->attr.ino, "inner", S_IFDIR | 0700, 0, 0, 23);  // sub is now /d1/a
  ASSERT_TRUE(inner.ok());
  EXPECT_TRUE(db_->Exchange(kRootIno, "d1", sub->attr.ino, "inner", 24).status().IsInvalidArgument());

  // From a journal: an EXCHANGE of "n" swaps /d2/b and /d2/sub back; applied again, nothing changes.
  ApplyOp op;
  ASSERT_TRUE(JournalEntryToApplyOp(JournalEntry::Exchange("/d2/b", "/d2/sub", 30), &op));
  EXPECT_EQ(op.kind, ApplyOp::Kind::kExchange);
  auto ar = db_->ApplyBatch(std::vector<ApplyOp>{op}, "n");
  ASSERT_TRUE(ar.ok());
  EXPECT_EQ(ar->applied, 1u);
  EXPECT_EQ(db_->Lookup(d2->attr.ino, "b")->attr.ino, ib);
  EXPECT_EQ(db_->Lookup(d2->attr.ino, "sub")->attr.ino, ia);
  auto again = db_->ApplyBatch(std::vector<ApplyOp>{op}, "n");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->applied, 0u);
  EXPECT_EQ(db_->Lookup(d2->attr.ino, "b")->attr.ino, ib);
  // An older EXCHANGE (a binding is newer) and one with a missing name change nothing.
  ASSERT_TRUE(JournalEntryToApplyOp(JournalEntry::Exchange("/d2/b", "/d2/sub", 25), &op));
  EXPECT_EQ(db_->ApplyBatch(std::vector<ApplyOp>{op}, "n")->applied, 0u);
  ASSERT_TRUE(JournalEntryToApplyOp(JournalEntry::Exchange("/d2/b", "/d2/none", 40), &op));
  EXPECT_EQ(db_->ApplyBatch(std::vector<ApplyOp>{op}, "n")->applied, 0u);
  EXPECT_EQ(db_->Lookup(d2->attr.ino, "b")->attr.ino, ib);
}

TEST_F(IndexDbTest, CommitSetAttrAndStats) {
  uint64_t d = Mkdir(kRootIno, "d");
  auto f = db_->CreateFile(d, "chunk", 0644, 0, 0, true);
  ASSERT_TRUE(f.ok());
  Location loc = Loc("n1", 1, 4096, 10000);
  Attr a = f->attr;
  a.size = 10000;
  a.mtime_ns = 123;
  auto c = db_->CommitFile(f->attr.ino, loc, a, 10);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->committed);
  EXPECT_EQ(c->location, loc);
  EXPECT_EQ(c->attr.size, 10000u);
  auto st = db_->GetStats();
  EXPECT_EQ(st.files, 1u);
  EXPECT_EQ(st.directories, 2u);
  EXPECT_EQ(st.live_bytes, 10000u);
  EXPECT_EQ(st.staged_files, 0u);
  auto seg = db_->GetSegment(loc.segment);
  ASSERT_TRUE(seg.ok());
  EXPECT_EQ(seg->state, SegmentState::kOpen);
  EXPECT_EQ(seg->live_bytes, 10000u);
  EXPECT_EQ(seg->live_records, 1u);
  EXPECT_EQ(*db_->FullPath(f->attr.ino), "/d/chunk");
  EXPECT_EQ(*db_->ResolvePath("/d/chunk"), f->attr.ino);
  EXPECT_EQ(*db_->ResolvePath("/"), kRootIno);
  EXPECT_EQ(db_->ResolvePath("/d/chunk/x").status().ToErrno(), ENOTDIR);
  EXPECT_EQ(db_->ResolvePath("/d/nope").status().ToErrno(), ENOENT);
  EXPECT_GE(db_->HlcFloor(), 10u);

  Attr na;
  na.mode = 0600;
  na.uid = 42;
  na.mtime_ns = 999;
  auto sa = db_->SetAttr(f->attr.ino, na, kSetMode | kSetUid | kSetMtime);
  ASSERT_TRUE(sa.ok());
  EXPECT_EQ(sa->mode, uint32_t(S_IFREG | 0600));
  EXPECT_EQ(sa->uid, 42u);
  EXPECT_EQ(sa->gid, 0u);
  EXPECT_EQ(sa->mtime_ns, 999);
  EXPECT_EQ(sa->size, 10000u);
  na.size = 5000;
  ASSERT_TRUE(db_->SetAttr(f->attr.ino, na, kSetSize).ok());
  EXPECT_EQ(db_->GetStats().live_bytes, 5000u);
  EXPECT_TRUE(db_->SetAttr(123456, na, kSetSize).status().IsNotFound());

  // Unlinked before commit -> NotFound.
  auto g = db_->CreateFile(d, "g", 0644, 0, 0, true);
  ASSERT_TRUE(db_->Unlink(d, "g").ok());
  EXPECT_TRUE(db_->CommitFile(g->attr.ino, loc, a, 11).status().IsNotFound());

  auto u = db_->Unlink(d, "chunk", 12);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(db_->GetStats().files, 0u);
  EXPECT_EQ(db_->GetStats().live_bytes, 0u);
  EXPECT_EQ(db_->GetSegment(loc.segment)->live_bytes, 0u);
  EXPECT_EQ(db_->GetSegment(loc.segment)->live_records, 0u);
}

// GetInode and Lookup answer from an in-memory cache of inode records (index_txn.h): every committed
// change must be visible to the next read, read once before the change or not, and a reader racing
// the writer must never keep an older record than the last write.
TEST_F(IndexDbTest, InodeCacheSeesEveryCommittedChange) {
  uint64_t d = Mkdir(kRootIno, "d");
  Node f = CommitNew(d, "f", Loc("n1", 1, 4096, 100), 10);
  ASSERT_EQ(db_->GetInode(f.attr.ino)->attr.size, 100u);  // cached now
  Attr na;
  na.size = 7;
  ASSERT_TRUE(db_->SetAttr(f.attr.ino, na, kSetSize).ok());
  EXPECT_EQ(db_->GetInode(f.attr.ino)->attr.size, 7u);
  EXPECT_EQ(db_->Lookup(d, "f")->attr.size, 7u);
  // A rename over the name: the old inode is gone, the name gives the new one.
  Node g = CommitNew(d, "g", Loc("n1", 1, 8192, 300), 11);
  ASSERT_EQ(db_->Lookup(d, "g")->attr.ino, g.attr.ino);
  ASSERT_TRUE(db_->Rename(d, "g", d, "f", 0, 12).ok());
  auto l = db_->Lookup(d, "f");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->attr.ino, g.attr.ino);
  EXPECT_EQ(l->attr.size, 300u);
  EXPECT_EQ(l->name, "f");
  EXPECT_TRUE(db_->GetInode(f.attr.ino).status().IsNotFound());
  EXPECT_TRUE(db_->Lookup(d, "g").status().IsNotFound());
  ASSERT_TRUE(db_->Unlink(d, "f", 13).ok());
  EXPECT_TRUE(db_->GetInode(g.attr.ino).status().IsNotFound());
  EXPECT_TRUE(db_->Lookup(d, "f").status().IsNotFound());

  // Readers hammer one inode while the writer sets its size 1..2000: after each write returns, no
  // reader may see a smaller size than the one written (a stale cache entry would).
  Node h = CommitNew(d, "h", Loc("n1", 2, 4096, 1), 14);
  std::atomic<uint64_t> written{0};
  std::atomic<bool> stop{false};
  std::atomic<int> stale{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; t++) {
    readers.emplace_back([&] {
      while (!stop) {
        uint64_t floor = written.load();
        auto n = db_->GetInode(h.attr.ino);
        if (!n.ok() || n->attr.size < floor) stale++;
      }
    });
  }
  for (uint64_t i = 1; i <= 2000; i++) {
    Attr a;
    a.size = i;
    ASSERT_TRUE(db_->SetAttr(h.attr.ino, a, kSetSize).ok());
    written = i;
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(stale.load(), 0);
  EXPECT_EQ(db_->GetInode(h.attr.ino)->attr.size, 2000u);
  // Survives a reopen (a new cache over the same records).
  Reopen();
  EXPECT_EQ(db_->GetInode(h.attr.ino)->attr.size, 2000u);
}

TEST_F(IndexDbTest, Xattrs) {
  auto f = db_->CreateFile(kRootIno, "f", 0644, 0, 0, true);
  uint64_t ino = f->attr.ino;
  EXPECT_TRUE(db_->GetXattr(ino, "user.a").status().IsNotFound());
  EXPECT_TRUE(db_->SetXattr(ino, "user.a", "1", XATTR_REPLACE).IsNotFound());
  ASSERT_TRUE(db_->SetXattr(ino, "user.a", "1", XATTR_CREATE).ok());
  EXPECT_TRUE(db_->SetXattr(ino, "user.a", "2", XATTR_CREATE).IsExists());
  ASSERT_TRUE(db_->SetXattr(ino, "user.a", "2", XATTR_REPLACE).ok());
  ASSERT_TRUE(db_->SetXattr(ino, "user.b", std::string("x\0y", 3), 0).ok());
  EXPECT_EQ(*db_->GetXattr(ino, "user.a"), "2");
  EXPECT_EQ(*db_->GetXattr(ino, "user.b"), std::string("x\0y", 3));
  EXPECT_EQ(*db_->ListXattr(ino), (std::vector<std::string>{"user.a", "user.b"}));
  ASSERT_TRUE(db_->RemoveXattr(ino, "user.a").ok());
  EXPECT_TRUE(db_->RemoveXattr(ino, "user.a").IsNotFound());
  EXPECT_EQ(*db_->ListXattr(ino), std::vector<std::string>{"user.b"});
  EXPECT_TRUE(db_->SetXattr(987654, "user.a", "1", 0).IsNotFound());
  // xattrs go with the inode
  ASSERT_TRUE(db_->Unlink(kRootIno, "f").ok());
  EXPECT_TRUE(db_->GetXattr(ino, "user.b").status().IsNotFound());
}

TEST_F(IndexDbTest, RenameRules) {
  uint64_t a = Mkdir(kRootIno, "a");
  uint64_t b = Mkdir(kRootIno, "b");
  uint64_t a1 = Mkdir(a, "a1");
  Node f1 = CommitNew(a, "f1", Loc("n1", 1, 0, 100), 5);
  Node f2 = CommitNew(b, "f2", Loc("n1", 1, 8192, 200), 6);
  uint64_t empty = Mkdir(b, "empty");
  uint64_t full = Mkdir(b, "full");
  Mkdir(full, "x");

  EXPECT_EQ(db_->Rename(a, "nope", b, "x", 0).status().ToErrno(), ENOENT);
  EXPECT_EQ(db_->Rename(a, "f1", 424242, "x", 0).status().ToErrno(), ENOENT);
  EXPECT_EQ(db_->Rename(a, "f1", f2.attr.ino, "x", 0).status().ToErrno(), ENOTDIR);
  EXPECT_EQ(db_->Rename(a, "f1", b, "f2", RENAME_NOREPLACE).status().ToErrno(), EEXIST);
  EXPECT_EQ(db_->Rename(a, "f1", b, "f2", RENAME_EXCHANGE).status().ToErrno(), EINVAL);
  EXPECT_EQ(db_->Rename(a, "f1", b, "empty", 0).status().ToErrno(), EISDIR);
  EXPECT_EQ(db_->Rename(a, "a1", b, "f2", 0).status().ToErrno(), ENOTDIR);
  EXPECT_EQ(db_->Rename(a, "a1", b, "full", 0).status().ToErrno(), ENOTEMPTY);
  EXPECT_EQ(db_->Rename(kRootIno, "a", a1, "sub", 0).status().ToErrno(), EINVAL);
  EXPECT_EQ(db_->Rename(kRootIno, "a", a, "self", 0).status().ToErrno(), EINVAL);

  // same name: no-op
  auto same = db_->Rename(a, "f1", a, "f1", 0);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->moved.attr.ino, f1.attr.ino);

  // Replace a file atomically.
  auto r = db_->Rename(a, "f1", b, "f2", 0, 9);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->replaced);
  EXPECT_EQ(r->replaced_node.attr.ino, f2.attr.ino);
  EXPECT_TRUE(r->replaced_node.committed);
  EXPECT_EQ(r->moved.attr.ino, f1.attr.ino);
  EXPECT_EQ(db_->Lookup(b, "f2")->attr.ino, f1.attr.ino);
  EXPECT_EQ(db_->Lookup(b, "f2")->location, Loc("n1", 1, 0, 100));
  EXPECT_TRUE(db_->Lookup(a, "f1").status().IsNotFound());
  EXPECT_TRUE(db_->GetInode(f2.attr.ino).status().IsNotFound());
  EXPECT_EQ(*db_->FullPath(f1.attr.ino), "/b/f2");
  EXPECT_EQ(db_->GetTombstone("/a/f1")->stamp, 9u);
  EXPECT_EQ(db_->GetStats().files, 1u);
  EXPECT_EQ(db_->GetStats().live_bytes, 100u);

  // Directory over an empty directory, across parents; nlink follows.
  uint32_t root_nlink = db_->GetInode(kRootIno)->attr.nlink;
  uint32_t b_nlink = db_->GetInode(b)->attr.nlink;
  auto rd = db_->Rename(a, "a1", b, "empty", 0);
  ASSERT_TRUE(rd.ok()) << rd.status().ToString();
  EXPECT_TRUE(rd->replaced);
  EXPECT_EQ(rd->replaced_node.attr.ino, empty);
  EXPECT_EQ(db_->Lookup(b, "empty")->attr.ino, a1);
  EXPECT_EQ(db_->GetInode(a)->attr.nlink, 2u);
  EXPECT_EQ(db_->GetInode(b)->attr.nlink, b_nlink);  // -1 replaced, +1 moved in
  EXPECT_EQ(db_->GetInode(kRootIno)->attr.nlink, root_nlink);

  // Whole subtree moves with its directory.
  ASSERT_TRUE(db_->Rename(kRootIno, "b", a, "b2", 0).ok());
  EXPECT_EQ(*db_->ResolvePath("/a/b2/full/x"), *db_->ResolvePath("/a/b2/full/x"));
  EXPECT_EQ(*db_->FullPath(db_->Lookup(full, "x")->attr.ino), "/a/b2/full/x");
  EXPECT_EQ(db_->GetInode(a)->attr.nlink, 3u);
  EXPECT_EQ(List(kRootIno), std::vector<std::string>{"a"});

  // Rename of a staged file (temp + rename): no tombstone, stays staged.
  auto tmp = db_->CreateFile(a, "k.tmp", 0644, 0, 0, true);
  auto rt = db_->Rename(a, "k.tmp", a, "k", 0);
  ASSERT_TRUE(rt.ok());
  EXPECT_FALSE(rt->replaced);
  EXPECT_FALSE(rt->moved.committed);
  EXPECT_TRUE(db_->GetTombstone("/a/k.tmp").status().IsNotFound());
  EXPECT_EQ(*db_->FullPath(tmp->attr.ino), "/a/k");
  // Commit then lands under the new name.
  Attr at = tmp->attr;
  at.size = 1;
  ASSERT_TRUE(db_->CommitFile(tmp->attr.ino, Loc("n1", 2, 0, 1), at, 20).ok());
  EXPECT_TRUE(db_->Lookup(a, "k")->committed);
}

TEST_F(IndexDbTest, ReadDirPagedWhileMutating) {
  uint64_t d = Mkdir(kRootIno, "big");
  constexpr int kStable = 20000;  // 200 pages of 100 while another thread creates and unlinks
  for (int i = 0; i < kStable; i++) {
    auto r = db_->CreateFile(d, "stable-" + std::to_string(i), 0644, 0, 0, true);
    ASSERT_TRUE(r.ok());
  }
  std::atomic<bool> stop{false};
  std::thread mutator([&] {
    int i = 0;
    while (!stop) {
      std::string n = "churn-" + std::to_string(i);
      EXPECT_TRUE(db_->CreateFile(d, n, 0644, 0, 0, true).ok());
      if (i >= 50) {
        EXPECT_TRUE(db_->Unlink(d, "churn-" + std::to_string(i - 50)).ok());
      }
      i++;
    }
  });
  std::set<std::string> seen_stable;
  uint64_t after = 0, last_cookie = 0;
  int pages = 0;
  for (;;) {
    int n = 0;
    uint64_t last = after;
    ASSERT_TRUE(db_->ReadDir(d, after, [&](const DirEntry& e) {
                       EXPECT_GT(e.cookie, last_cookie);  // strictly increasing: never repeats
                       EXPECT_GE(e.cookie, 3u);
                       last_cookie = e.cookie;
                       last = e.cookie;
                       if (e.name.rfind("stable-", 0) == 0) {
                         EXPECT_TRUE(seen_stable.insert(e.name).second) << e.name;
                       }
                       return ++n < 100;
                     })
                    .ok());
    if (n == 0) break;
    after = last;
    pages++;
  }
  stop = true;
  mutator.join();
  EXPECT_EQ(seen_stable.size(), size_t(kStable));
  EXPECT_GE(pages, kStable / 100);

  // Cookies are stable across reopen and a continuation after reopen resumes at the same place.
  std::map<std::string, uint64_t> cookies;
  ASSERT_TRUE(db_->ReadDir(d, 0, [&](const DirEntry& e) {
                     cookies[e.name] = e.cookie;
                     return true;
                   })
                  .ok());
  Reopen();
  // staged files are dropped at reopen; use committed ones for the stability check
  uint64_t d2 = Mkdir(kRootIno, "small");
  for (int i = 0; i < 500; i++) CommitNew(d2, "c" + std::to_string(i), Loc("n1", 3, i * 4096, 1), 100 + i);
  std::map<std::string, uint64_t> before;
  ASSERT_TRUE(db_->ReadDir(d2, 0, [&](const DirEntry& e) {
                     before[e.name] = e.cookie;
                     EXPECT_EQ(e.cookie, DirCookieOf(e.name));  // no collisions among 500 names
                     return true;
                   })
                  .ok());
  Reopen();
  std::map<std::string, uint64_t> afterm;
  ASSERT_TRUE(db_->ReadDir(d2, 0, [&](const DirEntry& e) {
                     afterm[e.name] = e.cookie;
                     return true;
                   })
                  .ok());
  EXPECT_EQ(before, afterm);
  EXPECT_EQ(before.size(), 500u);
  EXPECT_EQ(List(d).size(), 0u);  // every entry there was staged
}

TEST_F(IndexDbTest, ApplyLastWriterWins) {
  Attr a;
  a.mode = S_IFREG | 0644;
  a.size = 10;
  a.mtime_ns = 1;
  Location l1 = Loc("p", 1, 0, 10), l2 = Loc("p", 1, 4096, 10), l3 = Loc("p", 1, 8192, 10);

  // PUT creates missing parents.
  auto r = db_->ApplyPut("/x/y/k", l1, a, 100, "p");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->applied, 1u);
  EXPECT_EQ(r->changed.size(), 3u);  // x, y, k
  auto k = db_->ResolvePath("/x/y/k");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(db_->GetInode(*k)->location, l1);
  EXPECT_TRUE(db_->GetInode(*k)->committed);

  // An older PUT loses to the current entry.
  r = db_->ApplyPut("/x/y/k", l2, a, 90, "p");
  EXPECT_EQ(r->skipped, 1u);
  EXPECT_EQ(db_->GetInode(*db_->ResolvePath("/x/y/k"))->location, l1);
  // Same stamp: node breaks the tie.
  r = db_->ApplyPut("/x/y/k", l2, a, 100, "q");
  EXPECT_EQ(r->applied, 1u);
  auto k2 = *db_->ResolvePath("/x/y/k");
  EXPECT_NE(k2, *k);  // new content -> new inode number
  EXPECT_EQ(db_->GetInode(k2)->location, l2);
  EXPECT_TRUE(db_->GetInode(*k).status().IsNotFound());
  // Re-applying the same entry changes nothing.
  r = db_->ApplyPut("/x/y/k", l2, a, 100, "q");
  EXPECT_EQ(r->skipped, 1u);
  EXPECT_EQ(*db_->ResolvePath("/x/y/k"), k2);

  // UNLINK newer than the entry removes it and leaves a tombstone.
  r = db_->ApplyUnlink("/x/y/k", 200, "p");
  EXPECT_EQ(r->applied, 1u);
  ASSERT_EQ(r->changed.size(), 1u);
  EXPECT_EQ(r->changed[0].old_ino, k2);
  EXPECT_EQ(r->changed[0].new_ino, 0u);
  EXPECT_TRUE(db_->ResolvePath("/x/y/k").status().IsNotFound());
  // An older PUT applied after the UNLINK does not resurrect it.
  r = db_->ApplyPut("/x/y/k", l3, a, 150, "p");
  EXPECT_EQ(r->skipped, 1u);
  EXPECT_TRUE(db_->ResolvePath("/x/y/k").status().IsNotFound());
  // A newer one does, and clears the tombstone.
  r = db_->ApplyPut("/x/y/k", l3, a, 250, "p");
  EXPECT_EQ(r->applied, 1u);
  EXPECT_EQ(db_->GetInode(*db_->ResolvePath("/x/y/k"))->location, l3);
  EXPECT_TRUE(db_->GetTombstone("/x/y/k").status().IsNotFound());
  // An older UNLINK does not remove the newer file.
  r = db_->ApplyUnlink("/x/y/k", 240, "p");
  EXPECT_EQ(r->skipped, 1u);
  EXPECT_TRUE(db_->ResolvePath("/x/y/k").ok());
  EXPECT_GE(db_->HlcFloor(), 250u);

  // A PUT where a directory is: skipped, not an error.
  r = db_->ApplyPut("/x/y", l1, a, 1000, "p");
  EXPECT_EQ(r->skipped, 1u);
  // A PUT under a file: skipped.
  r = db_->ApplyPut("/x/y/k/z", l1, a, 1000, "p");
  EXPECT_EQ(r->skipped, 1u);

  // Stats follow applied entries.
  auto st = db_->GetStats();
  EXPECT_EQ(st.files, 1u);
  EXPECT_EQ(st.live_bytes, 10u);
  EXPECT_EQ(st.directories, 3u);
}

TEST_F(IndexDbTest, ApplyStagedLocalFileAndOrderIndependence) {
  // A staged local file is newer than anything applied: an UNLINK leaves it, a PUT detaches it and the
  // commit takes the name back.
  auto s = db_->CreateFile(kRootIno, "k", 0644, 0, 0, true);
  ASSERT_TRUE(s.ok());
  Attr a;
  a.mode = S_IFREG | 0644;
  a.size = 5;
  ASSERT_EQ(db_->ApplyUnlink("/k", 50, "p")->skipped, 0u);
  EXPECT_EQ(db_->Lookup(kRootIno, "k")->attr.ino, s->attr.ino);
  auto r = db_->ApplyPut("/k", Loc("p", 1, 0, 5), a, 60, "p");
  EXPECT_EQ(r->applied, 1u);
  auto peer = db_->Lookup(kRootIno, "k");
  EXPECT_NE(peer->attr.ino, s->attr.ino);
  EXPECT_TRUE(peer->committed);
  EXPECT_FALSE(db_->GetInode(s->attr.ino)->committed);  // detached, still there
  Attr mine = s->attr;
  mine.size = 7;
  auto c = db_->CommitFile(s->attr.ino, Loc("n1", 1, 0, 7), mine, 70);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(db_->Lookup(kRootIno, "k")->attr.ino, s->attr.ino);
  EXPECT_TRUE(db_->GetInode(peer->attr.ino).status().IsNotFound());
  EXPECT_EQ(db_->GetStats().files, 1u);
  EXPECT_EQ(db_->GetStats().live_bytes, 7u);

  // Two indexes that apply the same entries in different orders end with the same content.
  std::vector<ApplyOp> ops;
  auto put = [&](std::string p, uint64_t stamp, uint64_t off) {
    ApplyOp o;
    o.kind = ApplyOp::Kind::kPut;
    o.path = p;
    o.attr = a;
    o.location = Loc("p", 2, off, 5);
    o.stamp = stamp;
    ops.push_back(o);
  };
  auto unl = [&](std::string p, uint64_t stamp) {
    ApplyOp o;
    o.kind = ApplyOp::Kind::kUnlink;
    o.path = p;
    o.stamp = stamp;
    ops.push_back(o);
  };
  put("/d/a", 10, 0);
  put("/d/a", 20, 4096);
  unl("/d/a", 15);
  put("/d/b", 10, 8192);
  unl("/d/b", 30);
  put("/d/b", 25, 12288);
  put("/d/c", 5, 16384);
  IndexDbOptions o2;
  o2.dir = dir_ + "2";
  o2.node_id = "n2";
  auto other = IndexDb::Open(o2);
  ASSERT_TRUE(other.ok());
  std::vector<ApplyOp> rev(ops.rbegin(), ops.rend());
  ASSERT_TRUE(db_->ApplyBatch(ops, "p").ok());
  for (auto& op : rev) ASSERT_TRUE((*other)->ApplyBatch({&op, 1}, "p").ok());
  auto d1 = db_->DumpByPath();
  auto d2 = (*other)->DumpByPath();
  ASSERT_TRUE(d1.ok() && d2.ok());
  d1->erase("/k");
  EXPECT_EQ(*d1, *d2);
  EXPECT_EQ(d2->count("/d/a"), 1u);
  EXPECT_EQ((*d2)["/d/a"].location.record_offset, 4096u);
  EXPECT_EQ(d2->count("/d/b"), 0u);
  EXPECT_EQ(d2->count("/d/c"), 1u);
  other->reset();
  ASSERT_TRUE(IndexDb::Destroy(o2.dir).ok());
  EXPECT_FALSE(std::filesystem::exists(o2.dir));
}

// Tombstones record the binding they removed (the link claims' incarnation, engine/link_arbiter.h): two
// nodes that each unlink the same file (their own UNLINK first, the other's later) end with the same
// removed binding, the PUT's (stamp, node), though their tombstones' own stamps came in different
// orders; a later PUT and UNLINK of the name move it on.
TEST_F(IndexDbTest, TombstonesRecordTheBindingTheyRemoved) {
  IndexDbOptions o2;
  o2.dir = dir_ + "2";
  o2.node_id = "b";
  auto other = IndexDb::Open(o2);
  ASSERT_TRUE(other.ok());
  Attr a;
  a.mode = S_IFREG | 0644;
  a.size = 5;
  auto op = [&](ApplyOp::Kind k, uint64_t stamp, uint64_t off) {
    ApplyOp o;
    o.kind = k;
    o.path = "/x";
    o.attr = a;
    o.location = Loc("p", 2, off, 5);
    o.stamp = stamp;
    return o;
  };
  const ApplyOp put = op(ApplyOp::Kind::kPut, 10, 0), unl_a = op(ApplyOp::Kind::kUnlink, 20, 0),
               unl_b = op(ApplyOp::Kind::kUnlink, 25, 0);
  for (IndexDb* db : {db_.get(), other->get()}) ASSERT_TRUE(db->ApplyBatch({&put, 1}, "p").ok());
  ASSERT_TRUE(db_->ApplyBatch({&unl_a, 1}, "a").ok());
  ASSERT_TRUE((*other)->ApplyBatch({&unl_b, 1}, "b").ok());
  ASSERT_TRUE(db_->ApplyBatch({&unl_b, 1}, "b").ok());
  ASSERT_TRUE((*other)->ApplyBatch({&unl_a, 1}, "a").ok());
  for (IndexDb* db : {db_.get(), other->get()}) {
    auto t = db->GetTombstone("/x");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->stamp, 25u);
    EXPECT_EQ(t->node, "b");
    EXPECT_EQ(t->removed_stamp, 10u);
    EXPECT_EQ(t->removed_node, "p");
  }
  const ApplyOp put2 = op(ApplyOp::Kind::kPut, 30, 4096), unl2 = op(ApplyOp::Kind::kUnlink, 40, 0);
  ASSERT_TRUE(db_->ApplyBatch({&put2, 1}, "q").ok());
  EXPECT_TRUE(db_->GetTombstone("/x").status().IsNotFound()) << "a PUT that wins removes the tombstone";
  ASSERT_TRUE(db_->ApplyBatch({&unl2, 1}, "a").ok());
  EXPECT_EQ(db_->GetTombstone("/x")->removed_stamp, 30u);
  EXPECT_EQ(db_->GetTombstone("/x")->removed_node, "q");
  other->reset();
  ASSERT_TRUE(IndexDb::Destroy(o2.dir).ok());
}

// Concurrent attribute and xattr changes on two nodes (docs/semantics.md §4): every order of applying
// the nodes' journals (each node's own in its order, as live tailing and replay do) gives the same
// records, last writer by (stamp, node) per attribute set and per xattr name. The entries go through the
// journal codec, as a replay reads them.
TEST_F(IndexDbTest, ConcurrentSetattrXattrConvergeInEveryOrder) {
  using J = std::pair<std::string, JournalEntry>;  // (node, entry)
  auto ea = [](uint32_t mode, int64_t at, int64_t mt, int64_t ct, uint64_t size) {
    EntryAttrs a;
    a.mode = S_IFREG | mode;
    a.uid = a.gid = 1000;
    a.size = size;
    a.atime_ns = at, a.mtime_ns = mt, a.ctime_ns = ct;
    return a;
  };
  const uint32_t W = kSetAttrsWhole;
  std::vector<J> base = {
      {"c", JournalEntry::Put("/f", Loc("c", 1, 0, 5), ea(0644, 1, 1, 1, 5), 10)},
      {"c", JournalEntry::Put("/g", Loc("c", 1, 4096, 5), ea(0644, 1, 1, 1, 5), 35)},
  };
  std::vector<J> ja = {
      // chmod 600 on A (its whole set: the times it had)
      {"a", JournalEntry::Setattr("/f", ea(0600, 1, 1, 200, 5), kSetMode | W, 20)},
      {"a", JournalEntry::Xattr("/f", "user.k", "from-a", false, 22)},
      {"a", JournalEntry::Xattr("/f", "user.r", "x", false, 24)},
      {"a", JournalEntry::Xattr("/f", "user.r2", "", true, 29)},
      // chmod 700 of /g's version at 35, which A had when B's new version (40) had not reached it
      {"a", JournalEntry::Setattr("/g", ea(0700, 1, 1, 410, 5), kSetMode | W, 41)},
      {"a", JournalEntry::Xattr("/g", "user.g", "1", false, 42)},
  };
  std::vector<J> jb = {
      // utimens on B, later than A's chmod: B's whole set still has mode 644
      {"b", JournalEntry::Setattr("/f", ea(0644, 555, 666, 210, 5), kSetAtime | kSetMtime | W, 21)},
      {"b", JournalEntry::Xattr("/f", "user.k", "from-b", false, 23)},
      {"b", JournalEntry::Xattr("/f", "user.r", "", true, 25)},
      {"b", JournalEntry::Xattr("/f", "user.r2", "y", false, 30)},
  };
  JournalEntry gput = JournalEntry::Put("/g", Loc("b", 1, 0, 9), ea(0644, 400, 400, 400, 9), 40);
  gput.xattrs = std::vector<std::pair<std::string, std::string>>{{"user.p", "q"}};
  jb.push_back({"b", gput});

  auto build = [&](const std::vector<std::vector<J>*>& order, const std::string& dir) {
    IndexDbOptions o;
    o.dir = dir;
    o.node_id = "x";
    auto db = IndexDb::Open(o);
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    std::vector<J> all = base;
    for (auto* j : order) all.insert(all.end(), j->begin(), j->end());
    for (auto& [node, e] : all) {
      std::string enc;
      EncodeJournalEntry(e, &enc);
      JournalEntry d;
      EXPECT_TRUE(DecodeJournalEntry(enc, &d).ok());
      ApplyOp op;
      EXPECT_TRUE(JournalEntryToApplyOp(d, &op));
      EXPECT_TRUE((*db)->ApplyBatch({&op, 1}, node).ok());
    }
    return std::move(*db);
  };
  struct Seen {
    Attr f, g;
    std::map<std::string, DumpEntry> dump;
  };
  auto look = [&](IndexDb* db) {
    Seen s;
    s.f = db->GetInode(*db->ResolvePath("/f"))->attr;
    s.g = db->GetInode(*db->ResolvePath("/g"))->attr;
    s.dump = *db->DumpByPath();
    return s;
  };
  // A then B (on A: its own first), B then A (on B), and an interleaving (a replay by stamp).
  std::vector<J> inter;
  {
    std::vector<J> x = ja;
    x.insert(x.end(), jb.begin(), jb.end());
    std::stable_sort(x.begin(), x.end(), [](const J& l, const J& r) { return l.second.stamp < r.second.stamp; });
    inter = x;
  }
  auto ab = build({&ja, &jb}, dir_ + "_ab");
  auto ba = build({&jb, &ja}, dir_ + "_ba");
  auto il = build({&inter}, dir_ + "_il");
  Seen sa = look(ab.get()), sb = look(ba.get()), si = look(il.get());
  for (const Seen* s : {&sa, &sb, &si}) {
    SCOPED_TRACE(s == &sa ? "A,B" : s == &sb ? "B,A" : "by stamp");
    // /f: B's utimens (21) is the last attribute set: mode 644, its times; A's chmod (20) lost.
    EXPECT_EQ(s->f.mode, uint32_t(S_IFREG | 0644));
    EXPECT_EQ(s->f.atime_ns, 555);
    EXPECT_EQ(s->f.mtime_ns, 666);
    EXPECT_EQ(s->f.ctime_ns, 210);
    EXPECT_EQ(s->dump.at("/f").xattrs,
              (std::map<std::string, std::string>{{"user.k", "from-b"}, {"user.r2", "y"}}));
    // /g: B's new version (40) brings content and size; A's later chmod (41) and xattr (42) stay.
    EXPECT_EQ(s->g.mode, uint32_t(S_IFREG | 0700));
    EXPECT_EQ(s->g.size, 9u);
    EXPECT_EQ(s->g.ctime_ns, 410);
    EXPECT_EQ(s->dump.at("/g").location, Loc("b", 1, 0, 9));
    EXPECT_EQ(s->dump.at("/g").xattrs, (std::map<std::string, std::string>{{"user.g", "1"}, {"user.p", "q"}}));
    EXPECT_EQ(s->f.atime_ns, sa.f.atime_ns);
    EXPECT_EQ(s->g.atime_ns, sa.g.atime_ns);
    EXPECT_EQ(s->g.mtime_ns, sa.g.mtime_ns);
    EXPECT_EQ(s->dump, sa.dump);
  }
  // Re-applying everything (a catch-up over entries already in) changes nothing.
  for (auto* j : {&ja, &jb}) {
    for (auto& [node, e] : *j) {
      ApplyOp op;
      ASSERT_TRUE(JournalEntryToApplyOp(e, &op));
      ASSERT_TRUE(ab->ApplyBatch({&op, 1}, node).ok());
    }
  }
  Seen again = look(ab.get());
  EXPECT_EQ(again.dump, sa.dump);
  EXPECT_EQ(again.f.atime_ns, 555);
  EXPECT_EQ(again.g.mode, uint32_t(S_IFREG | 0700));
  // An entry of an older binary (no kSetAttrsWhole) sets only the fields it names, if it is the newest.
  Attr old;
  old.uid = 7;
  old.mode = 0777;
  EXPECT_EQ(ab->ApplySetattr("/f", old, kSetUid, 50, "o")->applied, 1u);
  EXPECT_EQ(ab->ApplySetattr("/f", old, kSetMode, 49, "o")->skipped, 1u);
  auto f = ab->GetInode(*ab->ResolvePath("/f"))->attr;
  EXPECT_EQ(f.uid, 7u);
  EXPECT_EQ(f.mode, uint32_t(S_IFREG | 0644));
  for (auto* db : {&ab, &ba, &il}) db->reset();
  for (auto sfx : {"_ab", "_ba", "_il"}) ASSERT_TRUE(IndexDb::Destroy(dir_ + sfx).ok());
}

TEST_F(IndexDbTest, ApplyRenameMkdirRmdirSetattrXattrMove) {
  Attr a;
  a.mode = S_IFREG | 0644;
  a.size = 5;
  Location l1 = Loc("p", 1, 0, 5);
  ASSERT_TRUE(db_->ApplyPut("/d/k.tmp", l1, a, 10, "p").ok());
  uint64_t ino = *db_->ResolvePath("/d/k.tmp");
  auto r = db_->ApplyRename("/d/k.tmp", "/e/k", l1, 11, "p");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->applied, 1u);
  EXPECT_TRUE(db_->ResolvePath("/d/k.tmp").status().IsNotFound());
  EXPECT_EQ(*db_->ResolvePath("/e/k"), ino);  // same content keeps its inode
  EXPECT_EQ(db_->GetTombstone("/d/k.tmp")->stamp, 11u);
  // RENAME whose source we never saw: links the destination from the location.
  r = db_->ApplyRename("/d/other.tmp", "/e/other", Loc("p", 1, 4096, 5), 12, "p");
  EXPECT_EQ(r->applied, 1u);
  EXPECT_EQ(db_->GetInode(*db_->ResolvePath("/e/other"))->attr.size, 5u);
  // An older PUT of the renamed-away temp name stays dead.
  EXPECT_EQ(db_->ApplyPut("/d/k.tmp", l1, a, 10, "p")->skipped, 1u);

  // MKDIR creates parents; RMDIR ignores a non-empty directory.
  Attr da;
  da.mode = 0700;
  ASSERT_TRUE(db_->ApplyMkdir("/m/n/o", da).ok());
  EXPECT_EQ(db_->GetInode(*db_->ResolvePath("/m/n/o"))->attr.mode, uint32_t(S_IFDIR | 0700));
  EXPECT_EQ(db_->ApplyRmdir("/m/n")->skipped, 1u);
  EXPECT_EQ(db_->ApplyRmdir("/m/n/o")->applied, 1u);
  EXPECT_TRUE(db_->ResolvePath("/m/n/o").status().IsNotFound());
  // Directory rename via apply.
  EXPECT_EQ(db_->ApplyRename("/m", "/mm", Location(), 13, "p")->applied, 1u);
  EXPECT_TRUE(db_->ResolvePath("/mm/n").ok());
  // SETATTR / XATTR newer than the entry apply; older ones do not.
  Attr sa;
  sa.mode = 0600;
  sa.mtime_ns = 77;
  EXPECT_EQ(db_->ApplySetattr("/e/k", sa, kSetMode | kSetMtime, 20, "p")->applied, 1u);
  EXPECT_EQ(db_->GetInode(ino)->attr.mode, uint32_t(S_IFREG | 0600));
  EXPECT_EQ(db_->GetInode(ino)->attr.mtime_ns, 77);
  EXPECT_EQ(db_->ApplySetattr("/e/k", sa, kSetUid, 5, "p")->skipped, 1u);
  EXPECT_EQ(db_->ApplyXattr("/e/k", "user.x", "v", false, 21, "p")->applied, 1u);
  EXPECT_EQ(*db_->GetXattr(ino, "user.x"), "v");
  EXPECT_EQ(db_->ApplyXattr("/e/k", "user.x", "", true, 22, "p")->applied, 1u);
  EXPECT_TRUE(db_->GetXattr(ino, "user.x").status().IsNotFound());

  // MOVE only where the old location still matches: at its path, else in a file bound elsewhere (a
  // MOVE ordered before a peer's rename of its path, index_apply.cc Move); a record no file references
  // moves nothing.
  Location l9 = Loc("p", 9, 0, 5);
  EXPECT_EQ(db_->ApplyMove("/e/k", Loc("p", 1, 8192, 5), l9)->skipped, 1u);
  EXPECT_EQ(db_->ApplyMove("/e/k", l1, l9)->applied, 1u);
  EXPECT_EQ(db_->GetInode(ino)->location, l9);
  EXPECT_EQ(db_->GetSegment(l9.segment)->live_records, 1u);
  EXPECT_EQ(db_->GetSegment(l1.segment)->live_records, 1u);  // /e/other

  // SEAL, then DROP: the segment's files vanish; later entries pointing into it are skipped.
  ASSERT_TRUE(db_->ApplySeal(l1.segment).ok());
  EXPECT_EQ(db_->GetSegment(l1.segment)->state, SegmentState::kSealed);
  r = db_->ApplyDrop(l1.segment);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(db_->GetSegment(l1.segment)->state, SegmentState::kDropped);
  EXPECT_EQ(db_->GetSegment(l1.segment)->live_records, 0u);
  EXPECT_TRUE(db_->ResolvePath("/e/other").status().IsNotFound());
  EXPECT_TRUE(db_->ResolvePath("/e/k").ok());  // moved out before the drop
  EXPECT_EQ(db_->ApplyPut("/e/late", Loc("p", 1, 8192, 5), a, 100, "p")->skipped, 1u);
  EXPECT_TRUE(db_->ResolvePath("/e/late").status().IsNotFound());
  std::vector<SegmentInfo> segs;
  ASSERT_TRUE(db_->ListSegments([&](const SegmentInfo& s) {
                     segs.push_back(s);
                     return true;
                   })
                  .ok());
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].id.seq, 1u);
  EXPECT_EQ(segs[1].id.seq, 9u);

  EXPECT_EQ(*db_->PruneTombstones(12), 1u);  // /d/k.tmp (11)
  EXPECT_TRUE(db_->GetTombstone("/d/k.tmp").status().IsNotFound());
  // A directory renamed over an empty directory replaces it, as rename(2) did on the node that journaled
  // it (before, peers and a replay skipped the entry: the source stayed, the namespaces diverged).
  ASSERT_TRUE(db_->ApplyMkdir("/r/d1/x", da).ok());
  ASSERT_TRUE(db_->ApplyPut("/r/d1/x/f", Loc("p", 9, 8192, 5), a, 14, "p").ok());
  ASSERT_TRUE(db_->ApplyMkdir("/r/d2", da).ok());
  const uint64_t d1 = *db_->ResolvePath("/r/d1");
  const uint32_t r_nlink = db_->GetInode(*db_->ResolvePath("/r"))->attr.nlink;
  EXPECT_EQ(db_->ApplyRename("/r/d1", "/r/d2", Location(), 15, "p")->applied, 1u);
  EXPECT_TRUE(db_->ResolvePath("/r/d1").status().IsNotFound());
  EXPECT_EQ(*db_->ResolvePath("/r/d2"), d1);
  EXPECT_TRUE(db_->ResolvePath("/r/d2/x/f").ok());
  EXPECT_EQ(db_->GetInode(*db_->ResolvePath("/r"))->attr.nlink, r_nlink - 1);
  // ... across parents (mv x1 y1/ with y1/x1 an empty directory).
  ASSERT_TRUE(db_->ApplyMkdir("/r/x1/z", da).ok());
  ASSERT_TRUE(db_->ApplyMkdir("/r/y1/x1", da).ok());
  EXPECT_EQ(db_->ApplyRename("/r/x1", "/r/y1/x1", Location(), 16, "p")->applied, 1u);
  EXPECT_TRUE(db_->ResolvePath("/r/y1/x1/z").ok());
  EXPECT_TRUE(db_->ResolvePath("/r/x1").status().IsNotFound());
  // A destination that is not empty here (a peer filled it meanwhile) or not a directory stays.
  ASSERT_TRUE(db_->ApplyMkdir("/r/s1", da).ok());
  ASSERT_TRUE(db_->ApplyMkdir("/r/s2/full", da).ok());
  EXPECT_EQ(db_->ApplyRename("/r/s1", "/r/s2", Location(), 17, "p")->skipped, 1u);
  EXPECT_TRUE(db_->ResolvePath("/r/s1").ok());
  EXPECT_TRUE(db_->ResolvePath("/r/s2/full").ok());
  ASSERT_TRUE(db_->ApplyPut("/r/file", Loc("p", 9, 12288, 5), a, 18, "p").ok());
  EXPECT_EQ(db_->ApplyRename("/r/s1", "/r/file", Location(), 19, "p")->skipped, 1u);
  EXPECT_TRUE(db_->ResolvePath("/r/s1").ok());
}

TEST_F(IndexDbTest, ApplyPositionIsAtomicWithBatch) {
  EXPECT_TRUE(db_->GetAppliedPosition("p").status().IsNotFound());
  Attr a;
  a.mode = S_IFREG | 0644;
  a.size = 1;
  std::atomic<bool> done{false};
  std::atomic<int> violations{0}, checks{0};
  std::thread reader([&] {
    while (!done) {
      auto pos = db_->GetAppliedPosition("p");
      if (!pos.ok()) continue;
      int n = std::stoi(*pos);
      // every file of batches <= n must exist
      for (int f = 0; f < 10; f++)
        if (!db_->ResolvePath("/b" + std::to_string(n) + "/f" + std::to_string(f)).ok()) violations++;
      checks++;
    }
  });
  for (int b = 1; b <= 300; b++) {
    std::vector<ApplyOp> ops;
    for (int f = 0; f < 10; f++) {
      ApplyOp o;
      o.kind = ApplyOp::Kind::kPut;
      o.path = "/b" + std::to_string(b) + "/f" + std::to_string(f);
      o.attr = a;
      o.location = Loc("p", b, f * 4096, 1);
      o.stamp = b * 100 + f;
      ops.push_back(o);
    }
    auto r = db_->ApplyBatch(ops, "p", std::to_string(b));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->applied, 10u);
  }
  done = true;
  reader.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(checks.load(), 0);
  EXPECT_EQ(*db_->GetAppliedPosition("p"), "300");
  Reopen();
  EXPECT_EQ(*db_->GetAppliedPosition("p"), "300");
  EXPECT_EQ(db_->GetAppliedPositions().size(), 1u);
  EXPECT_EQ(db_->GetStats().files, 3000u);
  EXPECT_TRUE(db_->ResolvePath("/b300/f9").ok());
}

// A format-2 index (no xattrstamps column family) opens as format 3 and keeps its xattrs; those count
// as older than any entry, so a peer's XATTR applies over them.
TEST_F(IndexDbTest, Format2IndexOpensAsFormat3) {
  auto f = CommitNew(kRootIno, "f", Loc("n1", 1, 0, 5), 10);
  ASSERT_TRUE(db_->SetXattr(f.attr.ino, "user.a", "old", 0, 0).ok());
  db_.reset();
  {  // make it what a format-2 build left: drop the family, format 2
    rocksdb::Options o;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfds;
    for (const char* n : {"dentries", "dircookies", "inodes", "xattrs", "staged", "segments", "segfiles",
                          "tombstones", "meta", "xattrstamps", "dirrenames"})
      cfds.emplace_back(n, rocksdb::ColumnFamilyOptions());
    cfds.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> h;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_, cfds, &h, &raw).ok());
    ASSERT_TRUE(raw->DropColumnFamily(h[9]).ok());
    ASSERT_TRUE(raw->DropColumnFamily(h[10]).ok());
    std::string two("\x02\0\0\0", 4);
    ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), h[8], "format", two).ok());
    for (auto* x : h) ASSERT_TRUE(raw->DestroyColumnFamilyHandle(x).ok());
    delete raw;
  }
  Reopen();
  EXPECT_EQ(*db_->GetXattr(f.attr.ino, "user.a"), "old");
  EXPECT_EQ(db_->ApplyXattr("/f", "user.a", "peer", false, 11, "p")->applied, 1u);
  EXPECT_EQ(db_->ApplyXattr("/f", "user.a", "older", false, 10, "p")->skipped, 1u);  // older than the name's last set (11)
  EXPECT_EQ(*db_->GetXattr(f.attr.ino, "user.a"), "peer");
  Reopen();  // now format 3 with the family
  EXPECT_EQ(*db_->GetXattr(f.attr.ino, "user.a"), "peer");
}

// A format-3 index (no dirrenames column family) opens as format 4 with no records; a directory rename
// applied or made after that keeps one (the RENAME entry's (stamp, node), from, to), and a damaged record
// is Corruption.
TEST_F(IndexDbTest, Format3IndexOpensAsFormat4AndDirectoryRenamesKeepRecords) {
  uint64_t d = Mkdir(kRootIno, "d");
  CommitNew(d, "f", Loc("n1", 1, 0, 5), 10);
  db_.reset();
  {  // make it what a format-3 build left: drop the family, format 3
    rocksdb::Options o;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfds;
    for (const char* n : {"dentries", "dircookies", "inodes", "xattrs", "staged", "segments", "segfiles",
                          "tombstones", "meta", "xattrstamps", "dirrenames"})
      cfds.emplace_back(n, rocksdb::ColumnFamilyOptions());
    cfds.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> h;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_, cfds, &h, &raw).ok());
    ASSERT_TRUE(raw->DropColumnFamily(h[10]).ok());
    std::string three("\x03\0\0\0", 4);
    ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), h[8], "format", three).ok());
    for (auto* x : h) ASSERT_TRUE(raw->DestroyColumnFamilyHandle(x).ok());
    delete raw;
  }
  Reopen();
  EXPECT_TRUE(db_->ResolvePath("/d/f").ok());
  ASSERT_TRUE(db_->ListDirRenames().ok());
  EXPECT_TRUE(db_->ListDirRenames()->empty());
  // A local rename of a directory (journaled: stamp != 0) and a peer's applied one keep records; a
  // file's rename, an unjournaled one and a RENAME that moves nothing keep none.
  ASSERT_TRUE(db_->Rename(kRootIno, "d", kRootIno, "d2", 0, 20).ok());
  CommitNew(kRootIno, "g", Loc("n1", 1, 0, 6), 21);
  ASSERT_TRUE(db_->Rename(kRootIno, "g", kRootIno, "g2", 0, 22).ok());
  uint64_t e = Mkdir(kRootIno, "e");
  ASSERT_TRUE(db_->Rename(kRootIno, "e", kRootIno, "e0", 0, 0).ok());
  (void)e;
  EXPECT_EQ(db_->ApplyRename("/d2", "/sub/d3", Location{}, 30, "peer")->applied, 1u);
  EXPECT_EQ(db_->ApplyRename("/nothing", "/x", Location{}, 31, "peer")->applied, 0u);
  const std::vector<DirRenameRecord> want{{"/d", "/d2", 20, db_->node_id()}, {"/d2", "/sub/d3", 30, "peer"}};
  EXPECT_EQ(*db_->ListDirRenames(), want);
  EXPECT_EQ(*db_->ListDirRenames("peer"), (std::vector<DirRenameRecord>{want[1]}));
  // A snapshot's record (kDirRenameRecord) is stored and moves nothing; a malformed one is skipped.
  ApplyOp rec;
  rec.kind = ApplyOp::Kind::kDirRenameRecord;
  rec.path = "/sub/d3";
  rec.to = "/d4";
  rec.stamp = 40;
  ApplyOp bad = rec;
  bad.path = "/";
  bad.stamp = 41;
  std::vector<ApplyOp> ops{rec, bad};
  auto r = db_->ApplyBatch(ops, "other");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->applied, 1u);
  EXPECT_EQ(r->skipped, 1u);
  EXPECT_TRUE(db_->ResolvePath("/sub/d3/f").ok());
  EXPECT_EQ(db_->ListDirRenames()->size(), 3u);
  Reopen();  // format 4 now, records kept
  EXPECT_EQ(db_->ListDirRenames()->size(), 3u);
  EXPECT_EQ(db_->ListDirRenames()->back(), (DirRenameRecord{"/sub/d3", "/d4", 40, "other"}));
  db_.reset();
  {  // a damaged record (a value that does not decode)
    rocksdb::Options o;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfds;
    for (const char* n : {"dentries", "dircookies", "inodes", "xattrs", "staged", "segments", "segfiles",
                          "tombstones", "meta", "xattrstamps", "dirrenames"})
      cfds.emplace_back(n, rocksdb::ColumnFamilyOptions());
    cfds.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> h;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_, cfds, &h, &raw).ok());
    std::string key("\0\0\0\0\0\0\0\x32zz", 10);
    ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), h[10], key, "\x05\0").ok());
    for (auto* x : h) ASSERT_TRUE(raw->DestroyColumnFamilyHandle(x).ok());
    delete raw;
  }
  Reopen();
  EXPECT_TRUE(db_->ListDirRenames().status().IsCorruption());
}

// Index format 5: a format-4 index opens as 5; an exchange with a directory on a side (journaled:
// stamp != 0) keeps one record with exchange set (a kind byte after `to`) and every name its binding;
// with a staged file on the other side the record is the directory's rename to the file's name; a
// record with an unknown kind byte is Corruption.
TEST_F(IndexDbTest, Format4IndexOpensAsFormat5AndDirectoryExchangesKeepRecords) {
  uint64_t x = Mkdir(kRootIno, "x");
  uint64_t y = Mkdir(kRootIno, "y");
  CommitNew(x, "f", Loc("n1", 1, 0, 5), 10);
  db_.reset();
  {  // what a format-4 build left
    rocksdb::Options o;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfds;
    for (const char* n : {"dentries", "dircookies", "inodes", "xattrs", "staged", "segments", "segfiles",
                          "tombstones", "meta", "xattrstamps", "dirrenames"})
      cfds.emplace_back(n, rocksdb::ColumnFamilyOptions());
    cfds.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> h;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_, cfds, &h, &raw).ok());
    std::string four("\x04\0\0\0", 4);
    ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), h[8], "format", four).ok());
    for (auto* r : h) ASSERT_TRUE(raw->DestroyColumnFamilyHandle(r).ok());
    delete raw;
  }
  Reopen();
  ASSERT_TRUE(db_->Exchange(kRootIno, "x", kRootIno, "y", 20).ok());
  EXPECT_EQ(db_->ResolvePath("/y/f").ok(), true);
  EXPECT_EQ(*db_->ResolvePath("/y"), x);
  // A file with a directory: the file keeps its binding (21): a peer's PUT at 21.. loses, at 22 wins.
  CommitNew(kRootIno, "g", Loc("n1", 1, 100, 6), 21);
  ASSERT_TRUE(db_->Exchange(kRootIno, "g", kRootIno, "x", 22).ok());
  EXPECT_TRUE(S_ISREG(db_->Lookup(kRootIno, "x")->attr.mode));
  Attr fa;
  fa.mode = S_IFREG | 0644;
  fa.size = 7;
  EXPECT_EQ(db_->ApplyPut("/x", Loc("n2", 1, 200, 7), fa, 21, "0")->applied, 0u);  // ("0" sorts first)
  EXPECT_EQ(db_->ApplyPut("/x", Loc("n2", 1, 200, 7), fa, 21, "zzz")->applied, 1u);  // (restamped to 22 it would lose)
  // A staged file with a directory: the record of the directory's rename to the file's name.
  auto staged = db_->CreateFile(kRootIno, "s", 0644, 0, 0, true);
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(db_->Exchange(kRootIno, "g", kRootIno, "s", 23).ok());
  const std::string me = db_->node_id();
  const std::vector<DirRenameRecord> want{{"/x", "/y", 20, me, true}, {"/g", "/x", 22, me, true},
                                          {"/g", "/s", 23, me, false}};
  EXPECT_EQ(*db_->ListDirRenames(), want);
  (void)y;
  Reopen();  // format 5 now, records kept
  EXPECT_EQ(*db_->ListDirRenames(), want);
  db_.reset();
  {  // a record with an unknown kind byte
    rocksdb::Options o;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfds;
    for (const char* n : {"dentries", "dircookies", "inodes", "xattrs", "staged", "segments", "segfiles",
                          "tombstones", "meta", "xattrstamps", "dirrenames"})
      cfds.emplace_back(n, rocksdb::ColumnFamilyOptions());
    cfds.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> h;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_, cfds, &h, &raw).ok());
    std::string five;
    ASSERT_TRUE(raw->Get(rocksdb::ReadOptions(), h[8], "format", &five).ok());
    EXPECT_EQ(five, std::string("\x05\0\0\0", 4));
    std::string key("\0\0\0\0\0\0\0\x40zz", 10);
    std::string val = std::string("\x02\0\0\0/a", 6) + std::string("\x02\0\0\0/b", 6) + "\x07";
    ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), h[10], key, val).ok());
    for (auto* r : h) ASSERT_TRUE(raw->DestroyColumnFamilyHandle(r).ok());
    delete raw;
  }
  Reopen();
  EXPECT_TRUE(db_->ListDirRenames().status().IsCorruption());
}

TEST_F(IndexDbTest, ReopenPersistsEverything) {
  uint64_t d = Mkdir(kRootIno, "d");
  Node f = CommitNew(d, "f", Loc("n1", 1, 0, 300), 40);
  ASSERT_TRUE(db_->SetXattr(f.attr.ino, "user.k", "v", 0).ok());
  ASSERT_TRUE(db_->Symlink(d, "s", "f", 0, 0, 41).ok());
  auto staged = db_->CreateFile(d, "staged", 0644, 0, 0, true);
  ASSERT_TRUE(db_->SetHlcFloor(5000).ok());
  ASSERT_TRUE(db_->MarkOpen().ok());
  auto dump = db_->DumpByPath();
  ASSERT_TRUE(dump.ok());
  EXPECT_EQ(dump->size(), 3u);  // d, d/f, d/s (staged excluded)
  auto stats = db_->GetStats();
  // unclean close (no MarkClean)
  Reopen();
  EXPECT_FALSE(db_->Created());
  EXPECT_FALSE(db_->WasCleanlyClosed());
  EXPECT_EQ(*db_->DumpByPath(), *dump);
  EXPECT_EQ(db_->GetStats().files, stats.files);
  EXPECT_EQ(db_->GetStats().live_bytes, stats.live_bytes);
  EXPECT_EQ(db_->GetStats().directories, stats.directories);
  EXPECT_EQ(db_->GetStats().staged_files, 0u);
  EXPECT_TRUE(db_->Lookup(d, "staged").status().IsNotFound());
  EXPECT_TRUE(db_->GetInode(staged->attr.ino).status().IsNotFound());
  EXPECT_EQ(db_->HlcFloor(), 5000u);
  EXPECT_EQ(*db_->GetXattr(f.attr.ino, "user.k"), "v");
  EXPECT_EQ(db_->Lookup(d, "f")->location, Loc("n1", 1, 0, 300));
  // inode numbers never go back
  auto n = db_->Mkdir(kRootIno, "new", 0755, 0, 0);
  EXPECT_GT(n->attr.ino, staged->attr.ino);
  ASSERT_TRUE(db_->MarkClean().ok());
  Reopen();
  EXPECT_TRUE(db_->WasCleanlyClosed());
  ASSERT_TRUE(db_->MarkOpen().ok());
  Reopen();
  EXPECT_FALSE(db_->WasCleanlyClosed());
}

TEST_F(IndexDbTest, SecondOpenIsBusyAndNodeChecked) {
  IndexDbOptions o;
  o.dir = dir_;
  o.node_id = "n1";
  auto second = IndexDb::Open(o);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsBusy()) << second.status().ToString();
  EXPECT_NE(second.status().message().find("in use by another kvfs mount"), std::string::npos);
  EXPECT_TRUE(IndexDb::Destroy(dir_).IsBusy());
  db_.reset();
  o.node_id = "other";
  auto wrong = IndexDb::Open(o);
  EXPECT_TRUE(wrong.status().IsInvalidArgument()) << wrong.status().ToString();
  Reopen();
}

// Every name hashes to the same cookie: probing must still give each entry its own cookie, so paged
// listings return every entry exactly once, across deletes, inserts, and reopen.
TEST(DirCookieTest, CollisionsLoseNothing) {
  char tmpl[] = "/tmp/kvfs_index_db_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  IndexDbOptions o;
  o.dir = std::string(tmpl) + "/idx";
  o.node_id = "n1";
  for (uint64_t h : {uint64_t(5), uint64_t((1ull << 63) - 1), ~uint64_t(0)}) {
    IndexDb::Destroy(o.dir);
    static uint64_t fixed;
    fixed = h;
    o.cookie_hash_for_test = [](std::string_view) { return fixed; };
    auto db = IndexDb::Open(o);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    for (int i = 0; i < 60; i++) ASSERT_TRUE((*db)->Mkdir(kRootIno, "n" + std::to_string(i), 0755, 0, 0).ok());
    ASSERT_TRUE((*db)->Rmdir(kRootIno, "n10").ok());  // a hole in the probe chain
    ASSERT_TRUE((*db)->Rmdir(kRootIno, "n0").ok());
    auto page_all = [&](IndexDb* d) {
      std::vector<std::string> names;
      std::set<uint64_t> cookies;
      uint64_t after = 0;
      for (;;) {
        int n = 0;
        EXPECT_TRUE(d->ReadDir(kRootIno, after, [&](const DirEntry& e) {
                       names.push_back(e.name);
                       EXPECT_TRUE(cookies.insert(e.cookie).second);
                       EXPECT_GE(e.cookie, 3u);
                       after = e.cookie;
                       return ++n < 7;
                     })
                        .ok());
        if (n == 0) break;
        // mutate between pages: the hole gets reused by a new name
        if (names.size() == 7) {
          EXPECT_TRUE(d->Mkdir(kRootIno, "late", 0755, 0, 0).ok());
        }
      }
      std::sort(names.begin(), names.end());
      return names;
    };
    auto names = page_all(db->get());
    std::set<std::string> uniq(names.begin(), names.end());
    EXPECT_EQ(uniq.size(), names.size());
    for (int i = 1; i < 60; i++)
      if (i != 10) {
        EXPECT_EQ(uniq.count("n" + std::to_string(i)), 1u) << i;
      }
    EXPECT_EQ(uniq.count("n0") + uniq.count("n10"), 0u);
    db->reset();
    auto again = IndexDb::Open(o);
    ASSERT_TRUE(again.ok());
    std::map<std::string, uint64_t> c1;
    ASSERT_TRUE((*again)->ReadDir(kRootIno, 0, [&](const DirEntry& e) {
                       c1[e.name] = e.cookie;
                       return true;
                     })
                    .ok());
    EXPECT_EQ(c1.size(), 59u);  // 58 + late
    EXPECT_TRUE((*again)->Lookup(kRootIno, "late").ok());
  }
  std::filesystem::remove_all(tmpl);
}

TEST(DirCookieTest, NeverReserved) {
  for (int i = 0; i < 10000; i++) {
    uint64_t c = DirCookieOf("name" + std::to_string(i));
    EXPECT_GE(c, 3u);
    EXPECT_LT(c, 1ull << 63);
  }
  EXPECT_EQ(DirCookieOf("abc"), DirCookieOf("abc"));
}

// Segment CUTs (issue #6): the lowest offset is kept, only the applying node's own segments are cut, a
// dropped segment is left alone, and the cut survives a reopen and is exported for the snapshot.
TEST_F(IndexDbTest, SegmentCutsKeepTheLowestOwnOffset) {
  const SegmentId own{"n1", 3, 7}, peer{"p", 3, 7}, gone{"n1", 3, 8};
  auto cut = [&](const SegmentId& seg, uint64_t off, const std::string& node) {
    ApplyOp op;
    op.kind = ApplyOp::Kind::kCut;
    op.segment = seg;
    op.cut_offset = off;
    auto r = db_->ApplyBatch({&op, 1}, node);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->applied : 0;
  };
  EXPECT_TRUE(db_->GetSegment(own).status().IsNotFound());
  EXPECT_EQ(cut(own, 90112, "n1"), 1u);
  EXPECT_EQ(db_->GetSegment(own)->state, SegmentState::kOpen);
  EXPECT_EQ(db_->GetSegment(own)->cut, 90112u);
  EXPECT_EQ(cut(own, 1 << 20, "n1"), 0u);  // a higher one changes nothing
  EXPECT_EQ(db_->GetSegment(own)->cut, 90112u);
  ASSERT_TRUE(db_->SetSegmentCut(own, 8192).ok());
  EXPECT_EQ(db_->GetSegment(own)->cut, 8192u);
  ASSERT_TRUE(db_->ApplySeal(own).ok());
  EXPECT_EQ(db_->GetSegment(own)->cut, 8192u);  // SEAL keeps it
  EXPECT_EQ(cut(peer, 4096, "n1"), 0u);         // another node's segment: never from our journal
  EXPECT_TRUE(db_->GetSegment(peer).status().IsNotFound());
  EXPECT_EQ(cut(peer, 4096, "p"), 1u);          // from its own node's journal
  EXPECT_EQ(db_->GetSegment(peer)->cut, 4096u);
  ASSERT_TRUE(db_->ApplyDrop(gone).ok());
  EXPECT_EQ(cut(gone, 4096, "n1"), 0u);
  EXPECT_EQ(db_->GetSegment(gone)->cut, UINT64_MAX);
  Reopen();
  EXPECT_EQ(db_->GetSegment(own)->cut, 8192u);
  std::vector<SegmentInfo> exported;
  auto view = db_->NewView();
  ASSERT_TRUE(db_->ExportLive(*view, "n1", [&](const IndexDb::ExportItem& it) {
                   if (it.kind == IndexDb::ExportItem::Kind::kSegment) exported.push_back(it.segment);
                   return Status::OK();
                 })
                  .ok());
  ASSERT_EQ(exported.size(), 2u);
  EXPECT_TRUE(exported[0].id == own);
  EXPECT_EQ(exported[0].cut, 8192u);
  EXPECT_TRUE(exported[1].id == gone);
  EXPECT_EQ(exported[1].state, SegmentState::kDropped);
}

}  // namespace
}  // namespace kvfs
