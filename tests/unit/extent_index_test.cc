// Files as extents in the journal, the index and the replay (docs/design.md §13, step 1): PUT entry
// version 3 (the `ext` map), inode record version 2, segment accounting per record of a map, DROP of
// any segment a file uses, MOVE of one record of a map, snapshots and the replay of v3 PUTs. Older
// encodings (single-record PUTs, v1 inode records) keep their exact bytes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "blockstore/extent_map.h"
#include "blockstore/node_dir.h"
#include "engine/checkpoint.h"
#include "index/index_db.h"
#include "index/index_keys.h"
#include "index/journal.h"
#include "index/journal_format.h"
#include "index/replay.h"
#include "index/snapshot.h"
#include "index_db_fixture.h"

namespace kvfs {
namespace {

using namespace index_internal;
namespace fs = std::filesystem;

Location Rec(const std::string& node, uint64_t gen, uint64_t seq, uint64_t off, uint64_t len) {
  Location l;
  l.segment = SegmentId{node, gen, seq};
  l.record_offset = off;
  l.value_offset = off + 4096;
  l.length = len;
  return l;
}

// A 3 MiB file: [0, 1 MiB) from record A (segment 1), a 512 KiB hole, [1.5 MiB, 2.5 MiB) from record
// B (segment 2), [2.5 MiB, 3 MiB) again from A (its second half).
ExtentMap TwoSegmentMap(const Location& a, const Location& b) {
  ExtentMap m(3 << 20);
  EXPECT_TRUE(m.Overlay(0, 1 << 20, a, 0).ok());
  EXPECT_TRUE(m.Overlay(3 << 19, 1 << 20, b, 0).ok());
  EXPECT_TRUE(m.Overlay(5 << 19, 1 << 19, a, 1 << 20).ok());
  return m;
}

ExtentMapRef Ref(ExtentMap m) { return ExtentMapRef(std::make_shared<const ExtentMap>(std::move(m))); }

const Location kA = Rec("n1", 1, 1, 0, 2 << 20);       // 2 MiB value, 1.5 MiB used
const Location kB = Rec("n1", 1, 2, 8192, 1 << 20);    // 1 MiB value, all used

TEST(ExtentJournalTest, PutVersion3RoundTripsAndOtherEntriesKeepTheirVersion) {
  EntryAttrs at;
  at.mode = 0100644;
  at.size = 3 << 20;
  JournalEntry put = JournalEntry::Put("/slots/f", Location{}, at, 77);
  put.xattrs.emplace();
  put.xattrs->emplace_back("user.k", "v");
  put.extents = Ref(TwoSegmentMap(kA, kB));
  EXPECT_EQ(JournalEntryVersion(put), 3);
  std::string buf;
  EncodeJournalEntry(put, &buf);
  EXPECT_EQ(buf[0], 3);
  JournalEntry d;
  ASSERT_TRUE(DecodeJournalEntry(buf, &d).ok());
  EXPECT_EQ(d, put);
  ASSERT_TRUE(d.extents);
  EXPECT_EQ(d.extents->extents().size(), 3u);
  EXPECT_EQ(d.Records(), (std::vector<Location>{kA, kB}));
  for (size_t n = 0; n < buf.size(); n++) {  // every prefix is truncated
    EXPECT_TRUE(DecodeJournalEntry(std::string_view(buf.data(), n), &d).IsCorruption()) << n;
  }
  // Without an xattr set a v3 PUT still carries one (empty): it decodes as the empty set.
  JournalEntry bare = put;
  bare.xattrs.reset();
  buf.clear();
  EncodeJournalEntry(bare, &buf);
  ASSERT_TRUE(DecodeJournalEntry(buf, &d).ok());
  EXPECT_TRUE(d.xattrs && d.xattrs->empty());
  EXPECT_EQ(d.extents, put.extents);

  // A v3 PUT with a location, or a size other than its map's, is corrupt.
  JournalEntry bad = put;
  bad.location = kB;
  buf.clear();
  EncodeJournalEntry(bad, &buf);
  EXPECT_TRUE(DecodeJournalEntry(buf, &d).IsCorruption());
  bad = put;
  bad.attrs.size = 1;
  buf.clear();
  EncodeJournalEntry(bad, &buf);
  EXPECT_TRUE(DecodeJournalEntry(buf, &d).IsCorruption());

  // Single-record PUTs keep versions 1 and 2 (an older reader reads them), every other op version 1.
  JournalEntry one = JournalEntry::Put("/f", kB, at, 5);
  EXPECT_EQ(JournalEntryVersion(one), 1);
  one.xattrs.emplace();
  EXPECT_EQ(JournalEntryVersion(one), 2);
  buf.clear();
  EncodeJournalEntry(one, &buf);
  EXPECT_EQ(buf[0], 2);
  EXPECT_EQ(JournalEntryVersion(JournalEntry::Move("/f", kA, kB, 5)), 1);
  EXPECT_EQ(JournalEntryVersion(JournalEntry::Rename("/f", "/g", {}, 5)), 1);
}

TEST(ExtentIndexKeysTest, InodeRecordVersion2OnlyForExtentFiles) {
  InodeRec r;
  r.attr.ino = 42;
  r.attr.mode = S_IFREG | 0644;
  r.attr.size = kB.length;
  r.committed = true;
  r.parent = 1;
  r.name = "f";
  r.loc = kB;
  r.stamp = 9;
  r.stamp_node = "n1";
  const std::string v1 = EncodeInode(r);
  EXPECT_EQ(v1[0], 1);  // a single-record file keeps the v1 bytes
  InodeRec d;
  ASSERT_TRUE(DecodeInode(v1, &d));
  EXPECT_EQ(d.loc, kB);
  EXPECT_FALSE(d.extents);

  r.loc = Location{};
  r.attr.size = 3 << 20;
  r.extents = Ref(TwoSegmentMap(kA, kB));
  const std::string v2 = EncodeInode(r);
  EXPECT_EQ(v2[0], 2);
  ASSERT_TRUE(DecodeInode(v2, &d));
  EXPECT_TRUE(d.loc.empty());
  ASSERT_TRUE(d.extents);
  EXPECT_EQ(*d.extents, *r.extents);
  // Truncated, an unknown version, a damaged map: not decoded.
  EXPECT_FALSE(DecodeInode(v2.substr(0, v2.size() - 1), &d));
  std::string v3 = v2;
  v3[0] = 3;
  EXPECT_FALSE(DecodeInode(v3, &d));
  std::string dmg = v2;
  dmg[dmg.size() - 1] = 0x7f;  // the last extent's value offset: now past its record's value
  EXPECT_FALSE(DecodeInode(dmg, &d));
}

class ExtentIndexTest : public IndexDbFixture {
 protected:
  ApplyOp PutOp(const std::string& path, ExtentMapRef ext, uint64_t stamp) {
    ApplyOp op;
    op.kind = ApplyOp::Kind::kPut;
    op.path = path;
    op.attr.mode = S_IFREG | 0644;
    op.attr.size = ext->size();
    op.extents = std::move(ext);
    op.stamp = stamp;
    return op;
  }
  SegmentInfo Seg(const Location& l) {
    auto s = db_->GetSegment(l.segment);
    return s.ok() ? *s : SegmentInfo{};
  }
};

// Account per record of the map, MOVE of one record, DROP of a segment the file uses in part.
TEST_F(ExtentIndexTest, AccountMoveDropOnATwoSegmentFile) {
  ASSERT_TRUE(db_->ApplyMkdir("/d", Attr{}).ok());
  ApplyOp op = PutOp("/d/f", Ref(TwoSegmentMap(kA, kB)), 10);
  auto r = db_->ApplyBatch({&op, 1}, "n1");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->applied, 1u);
  auto ino = db_->ResolvePath("/d/f");
  ASSERT_TRUE(ino.ok());
  auto n = db_->GetInode(*ino);
  ASSERT_TRUE(n.ok());
  EXPECT_TRUE(n->location.empty());
  ASSERT_TRUE(n->extents);
  EXPECT_EQ(n->attr.size, 3u << 20);
  EXPECT_EQ(Seg(kA).live_bytes, 3u << 19);  // 1.5 MiB of the 2 MiB record
  EXPECT_EQ(Seg(kA).live_records, 1u);
  EXPECT_EQ(Seg(kB).live_bytes, 1u << 20);
  EXPECT_EQ(Seg(kB).live_records, 1u);
  EXPECT_EQ(db_->GetStats().live_bytes, 5u << 19);  // data bytes, the hole excluded
  // The same PUT re-applied (a replay) keeps the inode number.
  op.stamp = 11;
  ASSERT_EQ(db_->ApplyBatch({&op, 1}, "n1")->applied, 1u);
  EXPECT_EQ(*db_->ResolvePath("/d/f"), *ino);
  EXPECT_EQ(Seg(kA).live_bytes, 3u << 19);

  // The map survives a reopen (inode record v2) and shows in DumpByPath / ExportLive.
  Reopen();
  n = db_->GetInode(*ino);
  ASSERT_TRUE(n.ok() && n->extents);
  EXPECT_EQ(*n->extents, TwoSegmentMap(kA, kB));
  auto dump = db_->DumpByPath();
  ASSERT_TRUE(dump.ok());
  ASSERT_TRUE(dump->at("/d/f").extents);
  EXPECT_EQ(*dump->at("/d/f").extents, TwoSegmentMap(kA, kB));
  int files = 0;
  auto view = db_->NewView();
  ASSERT_TRUE(db_->ExportLive(*view, "n1", [&](const IndexDb::ExportItem& it) {
                    if (it.kind != IndexDb::ExportItem::Kind::kFile) return Status::OK();
                    files++;
                    EXPECT_TRUE(it.location.empty());
                    EXPECT_TRUE(it.extents && *it.extents == TwoSegmentMap(kA, kB));
                    return Status::OK();
                  }).ok());
  EXPECT_EQ(files, 1);

  // A truncating SETATTR cuts the map with the size.
  Attr sa;
  sa.size = 1 << 20;
  ASSERT_EQ(db_->ApplySetattr("/d/f", sa, kSetSize, 12, "n1")->applied, 1u);
  n = db_->GetInode(*ino);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->attr.size, 1u << 20);
  ASSERT_TRUE(n->extents);  // the first half of record A: not the whole record, still a map
  EXPECT_EQ(n->extents->size(), 1u << 20);
  EXPECT_EQ(n->extents->extents().size(), 1u);
  EXPECT_EQ(Seg(kA).live_bytes, 1u << 20);
  EXPECT_EQ(Seg(kB).live_bytes, 0u);
  EXPECT_EQ(Seg(kB).live_records, 0u);
}

TEST_F(ExtentIndexTest, MoveReplacesTheRecordInEveryExtentAndDropRemovesTheFile) {
  ASSERT_TRUE(db_->ApplyMkdir("/d", Attr{}).ok());
  ApplyOp op = PutOp("/d/f", Ref(TwoSegmentMap(kA, kB)), 10);
  ASSERT_EQ(db_->ApplyBatch({&op, 1}, "n1")->applied, 1u);
  const uint64_t ino = *db_->ResolvePath("/d/f");
  // MOVE of record A (reinsertion re-appended it whole into segment 3): both extents of A follow.
  const Location a2 = Rec("n1", 1, 3, 4096, kA.length);
  EXPECT_EQ(db_->ApplyMove("/d/f", Rec("n1", 1, 1, 4096 * 9, kA.length), a2)->skipped, 1u);  // not used
  EXPECT_EQ(db_->ApplyMove("/d/f", kA, Rec("n1", 1, 3, 0, 5))->skipped, 1u);  // another length: malformed
  EXPECT_EQ(db_->ApplyMove("/d/f", kA, a2)->applied, 1u);
  auto n = db_->GetInode(ino);
  ASSERT_TRUE(n.ok() && n->extents);
  EXPECT_EQ(*n->extents, TwoSegmentMap(a2, kB));
  EXPECT_EQ(Seg(kA).live_bytes, 0u);
  EXPECT_EQ(Seg(kA).live_records, 0u);
  EXPECT_EQ(Seg(a2).live_bytes, 3u << 19);
  EXPECT_EQ(Seg(a2).live_records, 1u);
  EXPECT_EQ(Seg(kB).live_bytes, 1u << 20);

  // DROP of segment 1 (no longer used): the file stays. DROP of segment 2: the file is gone (a miss),
  // and segment 3's accounting goes with it.
  ASSERT_TRUE(db_->ApplyDrop(kA.segment).ok());
  EXPECT_TRUE(db_->ResolvePath("/d/f").ok());
  auto dr = db_->ApplyDrop(kB.segment);
  ASSERT_TRUE(dr.ok());
  EXPECT_TRUE(db_->ResolvePath("/d/f").status().IsNotFound());
  EXPECT_EQ(Seg(a2).live_bytes, 0u);
  EXPECT_EQ(Seg(a2).live_records, 0u);
  EXPECT_EQ(Seg(kB).live_records, 0u);
  EXPECT_EQ(db_->GetStats().live_bytes, 0u);
  // A later PUT whose map uses a dropped segment is skipped.
  op.stamp = 20;
  EXPECT_EQ(db_->ApplyBatch({&op, 1}, "n1")->skipped, 1u);
  // A PUT with a map and a location is malformed: skipped, nothing applied.
  ApplyOp bad = PutOp("/d/g", Ref(TwoSegmentMap(a2, Rec("n1", 1, 4, 0, 1 << 20))), 21);
  bad.location = a2;
  EXPECT_EQ(db_->ApplyBatch({&bad, 1}, "n1")->skipped, 1u);
  EXPECT_TRUE(db_->ResolvePath("/d/g").status().IsNotFound());
}

TEST_F(ExtentIndexTest, CommitFileWithAMapAndUnlinkKeepAccountingExact) {
  const uint64_t d = Mkdir(kRootIno, "d");
  auto c = db_->CreateFile(d, "f", 0644, 0, 0, true);
  ASSERT_TRUE(c.ok());
  Attr a = c->attr;
  a.size = 3 << 20;
  auto n = db_->CommitFile(c->attr.ino, Location{}, a, 5, {}, Ref(TwoSegmentMap(kA, kB)));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(n->extents);
  EXPECT_EQ(Seg(kA).live_records, 1u);
  EXPECT_EQ(Seg(kB).live_records, 1u);
  // A map with a location, or another size, is refused.
  EXPECT_TRUE(db_->CommitFile(c->attr.ino, kB, a, 6, {}, Ref(TwoSegmentMap(kA, kB))).status().IsInvalidArgument());
  a.size = 1;
  EXPECT_TRUE(db_->CommitFile(c->attr.ino, {}, a, 6, {}, Ref(TwoSegmentMap(kA, kB))).status().IsInvalidArgument());
  // Renumber keeps the map and its accounting.
  auto rn = db_->Renumber(c->attr.ino);
  ASSERT_TRUE(rn.ok());
  ASSERT_TRUE(rn->extents);
  EXPECT_EQ(Seg(kA).live_records, 1u);
  ASSERT_TRUE(db_->Unlink(d, "f", 7).ok());
  EXPECT_EQ(Seg(kA).live_bytes, 0u);
  EXPECT_EQ(Seg(kA).live_records, 0u);
  EXPECT_EQ(Seg(kB).live_bytes, 0u);
  EXPECT_EQ(db_->GetStats().files, 0u);
}

// IndexDb::SegmentInodes (the segment cleaner's list of the files to copy out of a segment, engine/
// capacity.cc CleanSegments): exactly the committed inodes with a record in the segment, whatever other
// segments, nodes or staged files share its key prefix, and it follows commit, renumber, MOVE, unlink
// and DROP.
TEST_F(ExtentIndexTest, SegmentInodesListsExactlyTheCommittedFilesOfASegment) {
  using Inos = std::vector<uint64_t>;
  auto inos = [&](const Location& l) {
    auto r = db_->SegmentInodes(l.segment);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Inos{{~0ull}};
  };
  const uint64_t d = Mkdir(kRootIno, "d");
  // Segment 1 of n1: two plain files and the extent file's record A; segment 2: the extent file's
  // record B and a plain file. Neighbouring keys: n1's segment 256 and (generation 2, seq 1), node n10's
  // segment (1, 1), which share the bytes of n1's prefix up to the node name's end or the seq.
  const uint64_t f1 = CommitNew(d, "f1", Rec("n1", 1, 1, 4096 * 700, 4096), 5).attr.ino;
  const uint64_t f2 = CommitNew(d, "f2", Rec("n1", 1, 1, 4096 * 702, 4096), 5).attr.ino;
  const uint64_t g = CommitNew(d, "g", Rec("n1", 1, 2, 4096 * 600, 4096), 5).attr.ino;
  const uint64_t o1 = CommitNew(d, "o1", Rec("n10", 1, 1, 0, 4096), 5).attr.ino;
  const uint64_t o2 = CommitNew(d, "o2", Rec("n1", 1, 256, 0, 4096), 5).attr.ino;
  const uint64_t o3 = CommitNew(d, "o3", Rec("n1", 2, 1, 0, 4096), 5).attr.ino;
  auto c = db_->CreateFile(d, "h", 0644, 0, 0, true);
  ASSERT_TRUE(c.ok());
  Attr a = c->attr;
  a.size = 3 << 20;
  ASSERT_TRUE(db_->CommitFile(c->attr.ino, Location{}, a, 5, {}, Ref(TwoSegmentMap(kA, kB))).ok());
  const uint64_t h = c->attr.ino;
  // A staged file (not committed) written into segment 1 is not listed: nothing live of it there.
  ASSERT_TRUE(db_->CreateFile(d, "staged", 0644, 0, 0, true).ok());
  EXPECT_EQ(inos(kA), (Inos{f1, f2, h}));
  EXPECT_EQ(inos(kB), (Inos{g, h}));
  EXPECT_EQ(inos(Rec("n10", 1, 1, 0, 1)), (Inos{o1}));
  EXPECT_EQ(inos(Rec("n1", 1, 256, 0, 1)), (Inos{o2}));
  EXPECT_EQ(inos(Rec("n1", 2, 1, 0, 1)), (Inos{o3}));
  EXPECT_EQ(inos(Rec("n1", 1, 3, 0, 1)), Inos{});
  EXPECT_EQ(inos(Rec("n", 1, 1, 0, 1)), Inos{});
  // Renumber: the new inode number, not the old one.
  auto rn = db_->Renumber(f2);
  ASSERT_TRUE(rn.ok());
  const uint64_t f2b = rn->attr.ino;
  ASSERT_NE(f2b, f2);
  EXPECT_EQ(inos(kA), (Inos{f1, h, f2b}));
  // MOVE of the extent file's record A to segment 3 (what the cleaner journals): h leaves segment 1.
  const Location a3 = Rec("n1", 1, 3, 4096, kA.length);
  ASSERT_EQ(db_->ApplyMove("/d/h", kA, a3)->applied, 1u);
  EXPECT_EQ(inos(kA), (Inos{f1, f2b}));
  EXPECT_EQ(inos(a3), (Inos{h}));
  EXPECT_EQ(inos(kB), (Inos{g, h}));
  // Unlink: gone from its segment.
  ASSERT_TRUE(db_->Unlink(d, "f1", 7).ok());
  EXPECT_EQ(inos(kA), (Inos{f2b}));
  // DROP of segment 2: g and h are gone, so h leaves segment 3 too; the others stay.
  ASSERT_TRUE(db_->ApplyDrop(kB.segment).ok());
  EXPECT_EQ(inos(kB), Inos{});
  EXPECT_EQ(inos(a3), Inos{});
  EXPECT_EQ(inos(kA), (Inos{f2b}));
  EXPECT_EQ(inos(Rec("n10", 1, 1, 0, 1)), (Inos{o1}));
  // And it persists (the segfiles keys are in the index, not in memory).
  Reopen();
  EXPECT_EQ(inos(kA), (Inos{f2b}));
  EXPECT_EQ(inos(Rec("n1", 2, 1, 0, 1)), (Inos{o3}));
}

// A journal with v3 PUTs replays into the same index; a snapshot of it carries the maps (header entry
// version 3), one without extent files keeps header entry version 2.
TEST(ExtentReplayTest, JournalAndSnapshotWithVersion3Puts) {
  char tmpl[] = "/var/tmp/kvfs-extent-replay-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl, backing = root + "/backing";
  const std::string node_dir = NodeDirPath(backing, "n1");
  fs::create_directories(node_dir);
  {
    JournalWriterOptions o;
    o.env = Env::Posix();
    o.dir = node_dir;
    o.node = "n1";
    o.generation = 1;
    auto w = JournalWriter::Open(o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EntryAttrs at;
    at.mode = 040755;
    (*w)->Append(JournalEntry::Mkdir("/d", at, 1));
    at.mode = 0100644;
    at.size = 3 << 20;
    JournalEntry put = JournalEntry::Put("/d/f", Location{}, at, 2);
    put.xattrs.emplace();
    put.extents = Ref(TwoSegmentMap(kA, kB));
    (*w)->Append(put);
    at.size = kB.length;
    (*w)->Append(JournalEntry::Put("/d/one", kB, at, 3));
    (*w)->Append(JournalEntry::Move("/d/f", kA, Rec("n1", 1, 3, 0, kA.length), 2));
    ASSERT_TRUE((*w)->Sync().ok());
  }
  auto open = [&](const std::string& name) {
    IndexDbOptions io;
    io.dir = root + "/" + name;
    io.node_id = "n1";
    auto idx = IndexDb::Open(io);
    EXPECT_TRUE(idx.ok());
    return std::move(*idx);
  };
  auto idx = open("idx1");
  ReplayNodeResult res;
  ASSERT_TRUE(ReplayNode(Env::Posix(), backing, "n1", idx.get(), &res).ok());
  EXPECT_EQ(res.entries, 4u);
  auto dump = idx->DumpByPath();
  ASSERT_TRUE(dump.ok());
  ASSERT_TRUE(dump->at("/d/f").extents);
  EXPECT_EQ(*dump->at("/d/f").extents, TwoSegmentMap(Rec("n1", 1, 3, 0, kA.length), kB));
  EXPECT_EQ(dump->at("/d/one").location, kB);
  EXPECT_FALSE(dump->at("/d/one").extents);
  EXPECT_EQ(idx->GetSegment(kB.segment)->live_records, 2u);

  // Snapshot of that index: header entry version 3; a node joining from it has the same files.
  auto view = idx->NewView();
  ASSERT_TRUE(WriteSnapshotFromIndex(Env::Posix(), idx.get(), *view, node_dir, "n1", 1, 1, nullptr).ok());
  view.reset();
  const std::string snap = node_dir + "/" + SnapshotFileName(1, 1);
  std::string bytes;
  ASSERT_TRUE(Env::Posix()->ReadFileToString(snap, &bytes).ok());
  EXPECT_EQ(uint8_t(bytes[12]), 3u);
  std::vector<JournalEntry> got;
  ASSERT_TRUE(ReadSnapshot(Env::Posix(), snap, "n1", [&](const JournalEntry& e) {
                got.push_back(e);
                return Status::OK();
              }).ok());
  int v3 = 0;
  for (const auto& e : got) v3 += JournalEntryVersion(e) == 3;
  EXPECT_EQ(v3, 1);
  auto idx2 = open("idx2");
  uint64_t entries = 0, max_stamp = 0;
  const SnapshotFile* used = nullptr;
  std::vector<std::pair<std::string, Status>> bad;
  NodeFiles nf;
  ASSERT_TRUE(ListNodeFiles(Env::Posix(), node_dir, &nf).ok());
  ASSERT_TRUE(ApplyNewestSnapshot(Env::Posix(), "n1", nf.snapshots,
                                  [&](std::vector<ApplyOp>* ops, bool) {
                                    return idx2->ApplyBatch(*ops, "n1").status();
                                  },
                                  &used, &entries, &max_stamp, &bad)
                  .ok());
  auto dump2 = idx2->DumpByPath();
  ASSERT_TRUE(dump2.ok());
  EXPECT_EQ(*dump2, *dump);

  // Without an extent file the snapshot header keeps entry version 2 (older readers accept it).
  ASSERT_TRUE(idx->ApplyUnlink("/d/f", 100, "n1").ok());
  view = idx->NewView();
  ASSERT_TRUE(WriteSnapshotFromIndex(Env::Posix(), idx.get(), *view, node_dir, "n1", 1, 2, nullptr).ok());
  view.reset();
  ASSERT_TRUE(Env::Posix()->ReadFileToString(node_dir + "/" + SnapshotFileName(1, 2), &bytes).ok());
  EXPECT_EQ(uint8_t(bytes[12]), 2u);
  idx.reset();
  idx2.reset();
  fs::remove_all(root);
}

}  // namespace
}  // namespace kvfs
