// Focused tests of the IndexDb parts that index_db_test.cc covers only in passing (issue #14): the key
// and value encodings (index/index_keys.h: the on-disk format), locations and segments
// (location_index.cc), Renumber (namespace_index.cc), applied positions and the HLC floor
// (progress_index.cc), and ExportLive (index_export.cc).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <initializer_list>
#include <map>
#include <set>

#include "index/index_db.h"
#include "index/index_keys.h"
#include "index_db_fixture.h"

namespace kvfs {
namespace {

using namespace index_internal;

// ---- index_keys.h: the format ----

TEST(IndexKeysTest, IntegerKeysAreBigEndianAndSortNumerically) {
  EXPECT_EQ(InoKey(1), std::string("\0\0\0\0\0\0\0\1", 8));
  EXPECT_EQ(InoKey(0x0102030405060708ull), std::string("\1\2\3\4\5\6\7\x08", 8));
  EXPECT_LT(InoKey(255), InoKey(256));
  EXPECT_EQ(DentryKey(2, "ab"), InoKey(2) + "ab");
  EXPECT_EQ(CookieKey(2, 7), InoKey(2) + InoKey(7));
  EXPECT_EQ(XattrKey(3, "user.k"), InoKey(3) + "user.k");
  EXPECT_EQ(GetBE64(InoKey(0xdeadbeef12345678ull).data()), 0xdeadbeef12345678ull);
}

TEST(IndexKeysTest, SegmentKeysSortByNodeThenGenerationThenSeq) {
  const SegmentId s{"n1", 2, 256};
  std::string k = SegKey(s);
  EXPECT_EQ(k, std::string("n1\0", 3) + InoKey(2) + InoKey(256));
  SegmentId back;
  ASSERT_TRUE(DecodeSegKey(k, &back));
  EXPECT_EQ(back, s);
  EXPECT_FALSE(DecodeSegKey(k.substr(0, k.size() - 1), &back));  // truncated
  EXPECT_FALSE(DecodeSegKey("n1", &back));                        // no separator
  // "n1" sorts before "n10" (the 0x00 separator), numbers numerically.
  std::vector<SegmentId> sorted = {{"a", 99, 0}, {"n1", 1, 5}, {"n1", 2, 255}, {"n1", 2, 256},
                                   {"n1", 10, 0}, {"n10", 1, 1}};
  for (size_t i = 1; i < sorted.size(); i++) EXPECT_LT(SegKey(sorted[i - 1]), SegKey(sorted[i])) << i;
}

TEST(IndexKeysTest, SegmentValueWithoutCutDecodesAsNoCut) {
  SegmentInfo si;
  si.state = SegmentState::kSealed;
  si.live_bytes = 12345;
  si.live_records = 7;
  si.cut = 8192;
  std::string v = EncodeSeg(si);
  ASSERT_EQ(v.size(), 25u);  // u8 state, u64 live_bytes, u64 live_records, u64 cut
  EXPECT_EQ(uint8_t(v[0]), 1u);
  SegmentInfo d;
  ASSERT_TRUE(DecodeSeg(v, &d));
  EXPECT_EQ(d.state, SegmentState::kSealed);
  EXPECT_EQ(d.live_bytes, 12345u);
  EXPECT_EQ(d.live_records, 7u);
  EXPECT_EQ(d.cut, 8192u);
  // A record written before the cut existed (17 bytes) means "no cut".
  SegmentInfo old;
  ASSERT_TRUE(DecodeSeg(v.substr(0, 17), &old));
  EXPECT_EQ(old.live_bytes, 12345u);
  EXPECT_EQ(old.cut, UINT64_MAX);
  EXPECT_FALSE(DecodeSeg(v.substr(0, 10), &old));
}

TEST(IndexKeysTest, InodeRecordRoundTripsEveryFieldAndChecksItsVersion) {
  InodeRec r;
  r.attr = {.ino = 42, .mode = S_IFREG | 0640, .uid = 1000, .gid = 100, .size = 5000,
            .atime_ns = -5, .mtime_ns = 1700000000123456789, .ctime_ns = 3, .nlink = 1};
  r.loc.segment = {"node-a", 3, 9};
  r.loc.record_offset = 4096;
  r.loc.value_offset = 8192;
  r.loc.length = 5000;
  r.committed = true;
  r.parent = 7;
  r.name = "file";
  r.symlink = "";
  r.stamp = 99;
  r.stamp_node = "node-b";
  std::string v = EncodeInode(r);
  // u8 version + 8+4+4+4+8+8+8+8+4 attr + u8 committed + u64 parent + str name + str node + 5 u64 loc
  // + str symlink + u64 stamp + str stamp_node
  EXPECT_EQ(v.size(), 1 + 56 + 1 + 8 + (4 + 4) + (4 + 6) + 40 + 4 + 8 + (4 + 6));
  EXPECT_EQ(uint8_t(v[0]), 1u);  // version 1: no extent map (extent_index_test.cc has version 2)
  InodeRec d;
  ASSERT_TRUE(DecodeInode(v, &d));
  EXPECT_EQ(d.attr.ino, 42u);
  EXPECT_EQ(d.attr.mode, uint32_t(S_IFREG | 0640));
  EXPECT_EQ(d.attr.uid, 1000u);
  EXPECT_EQ(d.attr.gid, 100u);
  EXPECT_EQ(d.attr.size, 5000u);
  EXPECT_EQ(d.attr.atime_ns, -5);
  EXPECT_EQ(d.attr.mtime_ns, 1700000000123456789);
  EXPECT_EQ(d.attr.ctime_ns, 3);
  EXPECT_EQ(d.attr.nlink, 1u);
  EXPECT_EQ(d.loc, r.loc);
  EXPECT_TRUE(d.committed);
  EXPECT_EQ(d.parent, 7u);
  EXPECT_EQ(d.name, "file");
  EXPECT_EQ(d.stamp, 99u);
  EXPECT_EQ(d.stamp_node, "node-b");
  EXPECT_TRUE(d.is_reg());
  std::string other = v;
  other[0] = char(kInodeRecordVersion + 1);
  EXPECT_FALSE(DecodeInode(other, &d));
  EXPECT_FALSE(DecodeInode(v.substr(0, v.size() - 1), &d));
}

TEST(IndexKeysTest, DentryAndTombstoneValues) {
  DentryVal dv{.ino = 9, .mode = S_IFLNK, .cookie = 1234, .stamp = 77, .node = "n2"};
  std::string v = EncodeDentry(dv);
  EXPECT_EQ(v.size(), 8u + 4 + 8 + 8 + 4 + 2);
  DentryVal d;
  ASSERT_TRUE(DecodeDentry(v, &d));
  EXPECT_EQ(d.ino, 9u);
  EXPECT_EQ(d.mode, uint32_t(S_IFLNK));
  EXPECT_EQ(d.cookie, 1234u);
  EXPECT_EQ(d.stamp, 77u);
  EXPECT_EQ(d.node, "n2");
  Tombstone tb;
  ASSERT_TRUE(DecodeTomb(EncodeTomb(500, "p"), &tb));
  EXPECT_EQ(tb.stamp, 500u);
  EXPECT_EQ(tb.node, "p");
  EXPECT_FALSE(DecodeTomb(std::string(5, '\0'), &tb));
  // With the binding it removed (since the link claims); the value above, of an older index, has none.
  ASSERT_TRUE(DecodeTomb(EncodeTomb(500, "p", 42, "q"), &tb));
  EXPECT_EQ(tb.stamp, 500u);
  EXPECT_EQ(tb.removed_stamp, 42u);
  EXPECT_EQ(tb.removed_node, "q");
  ASSERT_TRUE(DecodeTomb(EncodeTomb(500, "p"), &tb));
  EXPECT_EQ(tb.removed_stamp, 0u);
  EXPECT_EQ(tb.removed_node, "");
}

TEST(IndexKeysTest, StampOrderNamesAndPaths) {
  EXPECT_TRUE(Newer(2, "a", 1, "z"));
  EXPECT_TRUE(Newer(1, "b", 1, "a"));
  EXPECT_FALSE(Newer(1, "a", 1, "a"));
  EXPECT_FALSE(Newer(1, "z", 2, "a"));
  EXPECT_TRUE(ValidateName("f.txt").ok());
  const std::string_view with_nul("a\0b", 3);
  for (std::string_view bad : std::initializer_list<std::string_view>{"", ".", "..", "a/b", with_nul})
    EXPECT_TRUE(ValidateName(bad).IsInvalidArgument()) << bad;
  EXPECT_FALSE(ValidateName(std::string(256, 'x')).ok());
  EXPECT_TRUE(ValidateName(std::string(255, 'x')).ok());
  std::vector<std::string_view> parts;
  ASSERT_TRUE(SplitPath("/a/bc/d", &parts).ok());
  EXPECT_EQ(parts, (std::vector<std::string_view>{"a", "bc", "d"}));
  ASSERT_TRUE(SplitPath("/", &parts).ok());
  EXPECT_TRUE(parts.empty());
  for (std::string_view bad : {"a/b", "", "/a//b", "/a/./b", "/a/../b"})
    EXPECT_TRUE(SplitPath(bad, &parts).IsInvalidArgument()) << bad;
  EXPECT_EQ(JoinPath("/", "a"), "/a");
  EXPECT_EQ(JoinPath("/a", "b"), "/a/b");
}

// ---- an IndexDb in a temporary directory ----

class IndexPartsTest : public IndexDbFixture {
 protected:
  static Location Loc(const SegmentId& seg, uint64_t off, uint64_t len) {
    Location l;
    l.segment = seg;
    l.record_offset = off;
    l.value_offset = off + 4096;
    l.length = len;
    return l;
  }
  std::vector<SegmentId> ListIds() {
    std::vector<SegmentId> ids;
    EXPECT_TRUE(db_->ListSegments([&](const SegmentInfo& si) {
                     ids.push_back(si.id);
                     return true;
                   })
                    .ok());
    return ids;
  }
  uint64_t CookieOf(uint64_t dir, const std::string& name) {
    uint64_t cookie = 0;
    EXPECT_TRUE(db_->ReadDir(dir, 0, [&](const DirEntry& e) {
                     if (e.name == name) cookie = e.cookie;
                     return true;
                   })
                    .ok());
    return cookie;
  }

};

// ---- location_index.cc ----

TEST_F(IndexPartsTest, SegmentsRegisterAccountAndListInKeyOrder) {
  const SegmentId seg{"n1", 1, 1}, sealed{"n1", 1, 5};
  ASSERT_TRUE(db_->SetSegmentState(sealed, SegmentState::kSealed).ok());  // registers an unknown one
  auto si = db_->GetSegment(sealed);
  ASSERT_TRUE(si.ok());
  EXPECT_EQ(si->id, sealed);
  EXPECT_EQ(si->state, SegmentState::kSealed);
  EXPECT_EQ(si->live_bytes, 0u);
  EXPECT_EQ(si->live_records, 0u);
  EXPECT_EQ(si->cut, UINT64_MAX);

  // Committing files located in a segment registers it (open) and counts them.
  Node a = CommitNew(kRootIno, "a", Loc(seg, 0, 300), 10);
  CommitNew(kRootIno, "b", Loc(seg, 4096, 500), 11);
  si = db_->GetSegment(seg);
  ASSERT_TRUE(si.ok());
  EXPECT_EQ(si->state, SegmentState::kOpen);
  EXPECT_EQ(si->live_bytes, 800u);
  EXPECT_EQ(si->live_records, 2u);
  ASSERT_TRUE(db_->Unlink(kRootIno, "a").ok());
  EXPECT_EQ(db_->GetSegment(seg)->live_bytes, 500u);
  EXPECT_EQ(db_->GetSegment(seg)->live_records, 1u);
  EXPECT_TRUE(db_->GetInode(a.attr.ino).status().IsNotFound());

  // Listing is in key order: node bytes (then the 0x00 separator), generation, seq, numerically.
  for (const SegmentId& s : {SegmentId{"n1", 10, 0}, SegmentId{"n10", 1, 1}, SegmentId{"n1", 2, 256},
                             SegmentId{"n1", 2, 255}, SegmentId{"a", 99, 0}})
    ASSERT_TRUE(db_->SetSegmentState(s, SegmentState::kOpen).ok());
  std::vector<SegmentId> want = {{"a", 99, 0},   {"n1", 1, 1},  {"n1", 1, 5}, {"n1", 2, 255},
                                 {"n1", 2, 256}, {"n1", 10, 0}, {"n10", 1, 1}};
  EXPECT_EQ(ListIds(), want);
  int calls = 0;
  ASSERT_TRUE(db_->ListSegments([&](const SegmentInfo&) { return ++calls < 2; }).ok());
  EXPECT_EQ(calls, 2);

  // A DROP deletes the files still located in the segment and zeroes its live counts.
  EXPECT_EQ(db_->GetStats().files, 1u);
  auto r = db_->ApplyDrop(seg);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->applied, 1u);
  ASSERT_EQ(r->changed.size(), 1u);
  EXPECT_EQ(r->changed[0].name, "b");
  EXPECT_TRUE(db_->Lookup(kRootIno, "b").status().IsNotFound());
  si = db_->GetSegment(seg);
  EXPECT_EQ(si->state, SegmentState::kDropped);
  EXPECT_EQ(si->live_bytes, 0u);
  EXPECT_EQ(si->live_records, 0u);
  EXPECT_EQ(db_->GetStats().files, 0u);
  EXPECT_EQ(db_->GetStats().live_bytes, 0u);

  Reopen();
  EXPECT_EQ(ListIds(), want);
  EXPECT_EQ(db_->GetSegment(sealed)->state, SegmentState::kSealed);
  EXPECT_EQ(db_->GetSegment(seg)->state, SegmentState::kDropped);
  EXPECT_TRUE(db_->GetSegment({"n1", 1, 2}).status().IsNotFound());
}

// ---- namespace_index.cc: Renumber ----

TEST_F(IndexPartsTest, RenumberMovesNameXattrsAndSegmentMembershipToTheNewNumber) {
  const SegmentId seg{"n1", 1, 1};
  uint64_t d = Mkdir(kRootIno, "d");
  Node f = CommitNew(d, "f", Loc(seg, 0, 300), 40);
  ASSERT_TRUE(db_->SetXattr(f.attr.ino, "user.k", "v", 0).ok());
  const uint64_t cookie = CookieOf(d, "f");
  ASSERT_NE(cookie, 0u);
  auto before = db_->DumpByPath();
  ASSERT_TRUE(before.ok());
  auto stats = db_->GetStats();

  auto n = db_->Renumber(f.attr.ino);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  const uint64_t nino = n->attr.ino;
  EXPECT_GT(nino, f.attr.ino);
  EXPECT_EQ(n->location, f.location);
  EXPECT_EQ(n->parent, d);
  EXPECT_EQ(n->name, "f");
  EXPECT_TRUE(db_->GetInode(f.attr.ino).status().IsNotFound());
  EXPECT_EQ(db_->Lookup(d, "f")->attr.ino, nino);
  EXPECT_EQ(db_->GetInode(nino)->attr.size, 300u);
  EXPECT_EQ(*db_->GetXattr(nino, "user.k"), "v");
  EXPECT_FALSE(db_->GetXattr(f.attr.ino, "user.k").ok());
  EXPECT_EQ(CookieOf(d, "f"), cookie);  // a listing in progress neither repeats nor skips it
  EXPECT_EQ(*db_->FullPath(nino), "/d/f");
  EXPECT_EQ(*db_->DumpByPath(), *before);  // content and path unchanged
  EXPECT_EQ(db_->GetStats().files, stats.files);
  EXPECT_EQ(db_->GetStats().live_bytes, stats.live_bytes);
  EXPECT_EQ(db_->GetSegment(seg)->live_records, 1u);
  EXPECT_EQ(db_->GetSegment(seg)->live_bytes, 300u);

  // Undo: back to the old number, which is free again.
  auto back = db_->Renumber(nino, f.attr.ino);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attr.ino, f.attr.ino);
  EXPECT_EQ(db_->Lookup(d, "f")->attr.ino, f.attr.ino);
  EXPECT_TRUE(db_->GetInode(nino).status().IsNotFound());
  EXPECT_EQ(*db_->GetXattr(f.attr.ino, "user.k"), "v");

  // Refusals.
  EXPECT_TRUE(db_->Renumber(d).status().IsInvalidArgument());  // a directory
  auto staged = db_->CreateFile(d, "s", 0644, 0, 0, true);
  ASSERT_TRUE(staged.ok());
  EXPECT_TRUE(db_->Renumber(staged->attr.ino).status().IsInvalidArgument());       // not committed
  EXPECT_TRUE(db_->Renumber(f.attr.ino, d).status().IsInvalidArgument());          // number in use
  EXPECT_TRUE(db_->Renumber(f.attr.ino, kRootIno).status().IsInvalidArgument());   // root
  EXPECT_TRUE(db_->Renumber(f.attr.ino, f.attr.ino).status().IsInvalidArgument()); // itself
  EXPECT_TRUE(db_->Renumber(nino + 1000).status().IsNotFound());
  EXPECT_EQ(db_->Lookup(d, "f")->attr.ino, f.attr.ino);

  // Segment membership moved with the number: a DROP of the segment still removes the file.
  n = db_->Renumber(f.attr.ino);
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE(db_->ApplyDrop(seg).ok());
  EXPECT_TRUE(db_->Lookup(d, "f").status().IsNotFound());
  EXPECT_TRUE(db_->GetInode(n->attr.ino).status().IsNotFound());
  EXPECT_EQ(db_->GetStats().files, 0u);
}

// ---- progress_index.cc ----

TEST_F(IndexPartsTest, AppliedPositionsPerNodeAndARisingHlcFloor) {
  EXPECT_EQ(db_->HlcFloor(), 0u);
  EXPECT_TRUE(db_->GetAppliedPositions().empty());
  EXPECT_TRUE(db_->GetAppliedPosition("p").status().IsNotFound());

  ApplyOp put;
  put.kind = ApplyOp::Kind::kPut;
  put.path = "/f";
  put.attr.mode = S_IFREG | 0644;
  put.attr.size = 10;
  put.location = Loc({"p", 1, 1}, 0, 10);
  put.stamp = 700;
  ASSERT_TRUE(db_->ApplyBatch({&put, 1}, "p", "1-1@100").ok());
  EXPECT_EQ(db_->HlcFloor(), 700u);
  EXPECT_EQ(*db_->GetAppliedPosition("p"), "1-1@100");
  // A batch with no ops still records its position; one without a position leaves it alone.
  ASSERT_TRUE(db_->ApplyBatch({}, "p2", "3-2@0").ok());
  put.path = "/g";
  put.stamp = 650;
  ASSERT_TRUE(db_->ApplyBatch({&put, 1}, "p").ok());
  EXPECT_EQ(*db_->GetAppliedPosition("p"), "1-1@100");
  EXPECT_EQ(db_->HlcFloor(), 700u);  // an older stamp does not lower it
  std::map<std::string, std::string> want = {{"p", "1-1@100"}, {"p2", "3-2@0"}};
  EXPECT_EQ(db_->GetAppliedPositions(), want);

  ASSERT_TRUE(db_->SetHlcFloor(500).ok());
  EXPECT_EQ(db_->HlcFloor(), 700u);  // raises only
  ASSERT_TRUE(db_->SetHlcFloor(9000).ok());
  EXPECT_EQ(db_->HlcFloor(), 9000u);
  ASSERT_TRUE(db_->Mkdir(kRootIno, "d", 0755, 0, 0, 9500).ok());  // a local stamped write raises it
  EXPECT_EQ(db_->HlcFloor(), 9500u);

  Reopen();
  EXPECT_EQ(db_->HlcFloor(), 9500u);
  EXPECT_EQ(db_->GetAppliedPositions(), want);
}

// ---- index_export.cc ----

TEST_F(IndexPartsTest, ExportLiveWalksOneNodesEntriesFromTheView) {
  uint64_t d = Mkdir(kRootIno, "d");
  Mkdir(d, "e");
  Node mine = CommitNew(d, "mine", Loc({"n1", 1, 1}, 0, 10), 50);
  ASSERT_TRUE(db_->SetXattr(mine.attr.ino, "user.k", "v", 0).ok());
  ASSERT_TRUE(db_->Symlink(d, "ln", "mine", 0, 0, 51).ok());
  ASSERT_TRUE(db_->CreateFile(d, "staged", 0644, 0, 0, true).ok());  // never exported
  CommitNew(d, "local", Loc({"n1", 1, 1}, 4096, 10), 0);              // stamp 0: not journaled
  CommitNew(d, "gone", Loc({"n1", 1, 1}, 8192, 10), 60);
  ASSERT_TRUE(db_->Unlink(d, "gone", 70).ok());                        // tombstone of n1
  ASSERT_TRUE(db_->ApplyPut("/d/theirs", Loc({"p", 1, 1}, 0, 20), mine.attr, 65, "p").ok());
  ASSERT_TRUE(db_->SetSegmentState({"n1", 1, 2}, SegmentState::kSealed).ok());
  ASSERT_TRUE(db_->SetSegmentState({"p", 1, 2}, SegmentState::kSealed).ok());

  auto view = db_->NewView();
  CommitNew(d, "later", Loc({"n1", 1, 3}, 0, 10), 80);  // after the view: not seen

  using Kind = IndexDb::ExportItem::Kind;
  std::vector<IndexDb::ExportItem> items;
  ASSERT_TRUE(db_->ExportLive(*view, "n1", [&](const IndexDb::ExportItem& it) {
                   items.push_back(it);
                   return Status::OK();
                 })
                  .ok());
  std::map<std::string, Kind> paths;
  for (auto& it : items)
    if (it.kind != Kind::kSegment) paths[it.path] = it.kind;
  std::map<std::string, Kind> want = {{"/d", Kind::kDir},          {"/d/e", Kind::kDir},
                                      {"/d/mine", Kind::kFile},    {"/d/ln", Kind::kSymlink},
                                      {"/d/gone", Kind::kTombstone}};
  EXPECT_EQ(paths, want);
  ASSERT_EQ(items.size(), 6u);
  EXPECT_EQ(items[0].path, "/d");  // a directory before anything under it
  EXPECT_EQ(items[4].kind, Kind::kTombstone);  // then tombstones, then segments
  EXPECT_EQ(items[4].stamp, 70u);
  EXPECT_EQ(items[5].kind, Kind::kSegment);
  EXPECT_EQ(items[5].segment.id, (SegmentId{"n1", 1, 2}));
  EXPECT_EQ(items[5].segment.state, SegmentState::kSealed);
  for (auto& it : items) {
    if (it.path == "/d/mine") {
      EXPECT_EQ(it.stamp, 50u);
      EXPECT_EQ(it.location, mine.location);
      EXPECT_EQ(it.attr.size, 10u);
      EXPECT_EQ(it.xattrs, (std::vector<std::pair<std::string, std::string>>{{"user.k", "v"}}));
    }
    if (it.path == "/d/ln") {
      EXPECT_EQ(it.symlink, "mine");
      EXPECT_EQ(it.stamp, 51u);
    }
  }

  // The peer's export: the directories (always) and its own file.
  std::map<std::string, uint64_t> peer;
  ASSERT_TRUE(db_->ExportLive(*view, "p", [&](const IndexDb::ExportItem& it) {
                   peer[it.kind == Kind::kSegment ? "segment" : it.path] = it.stamp;
                   return Status::OK();
                 })
                  .ok());
  EXPECT_EQ(peer, (std::map<std::string, uint64_t>{{"/d", 0}, {"/d/e", 0}, {"/d/theirs", 65}, {"segment", 0}}));

  // fn's error stops the walk and is returned.
  int calls = 0;
  Status st = db_->ExportLive(*view, "n1", [&](const IndexDb::ExportItem&) {
    calls++;
    return Status::IOError("stop");
  });
  EXPECT_TRUE(st.IsIOError());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace kvfs
