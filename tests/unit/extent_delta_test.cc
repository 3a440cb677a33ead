// Extent delta PUTs (docs/format.md "Extent deltas", issue #18): DiffExtentMaps / ApplyExtentDelta,
// the dext encoding in PUT entry version 5, and how the index applies a delta in every order a reader
// may meet it: on its base, after a peer's PUT of the path, after a newer PUT, twice, on a base taken
// from a snapshot, on a base this index holds in another form. A delta never binds another version's
// bytes: what cannot be rebuilt exactly is an UNLINK at the delta's stamp.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "blockstore/extent_map.h"
#include "blockstore/node_dir.h"
#include "engine/checkpoint.h"
#include "index/index_db.h"
#include "index/journal_format.h"
#include "index/replay.h"
#include "index/snapshot.h"
#include "index_db_fixture.h"

namespace kvfs {
namespace extent_delta_test {

namespace fs = std::filesystem;

Location DRec(const std::string& node, uint64_t seq, uint64_t len) {
  Location l;
  l.segment = SegmentId{node, 1, seq};
  l.record_offset = 4096 * seq;
  l.value_offset = 4096 * seq + 4096;
  l.length = len;
  return l;
}

ExtentMapRef DRef(ExtentMap m) { return ExtentMapRef(std::make_shared<const ExtentMap>(std::move(m))); }

// The map of a 64 MiB slot file of record `whole` with `n` 4 KiB pages rewritten from records 100, 101...
ExtentMap DRewritten(const Location& whole, int n, uint32_t seed) {
  ExtentMap m = ExtentMap::FromLocation(whole, whole.length);
  std::mt19937 rng(seed);
  for (int i = 0; i < n; i++) {
    const uint64_t page = rng() % (whole.length / 4096);
    EXPECT_TRUE(m.Overlay(page * 4096, 4096, DRec("n2", 100 + i, 4096), 0).ok());
  }
  return m;
}

TEST(ExtentDeltaTest, DiffThenApplyGivesTheNewMapExactly) {
  std::mt19937 rng(18);
  const Location big = DRec("n1", 1, 8 << 20), other = DRec("n1", 2, 1 << 20);
  int checked = 0, smaller = 0;
  for (int round = 0; round < 400; round++) {
    ExtentMap base = ExtentMap::FromLocation(big, big.length - (rng() % 3) * 12345);
    for (int i = 0; i < 20; i++) {  // a fragmented base: overlays and holes
      const uint64_t off = rng() % base.size(), len = 1 + rng() % 65536;
      if (rng() % 4 == 0) base.Punch(off, len);
      else ASSERT_TRUE(base.Overlay(off, std::min<uint64_t>(len, other.length), other, rng() % 4096).ok());
    }
    ExtentMap next = base;
    const Location fresh = DRec("n1", 10 + round, 256 << 10);
    for (int i = 0, n = 1 + rng() % 4; i < n; i++) {  // one FLUSH: dirty pages, punches, resizes
      const int op = rng() % 6;
      const uint64_t off = rng() % (next.size() + 4096), len = 4096 * (1 + rng() % 8);
      if (op == 0) next.Punch(off, len);
      else if (op == 1) next.Resize(rng() % (10 << 20));
      else ASSERT_TRUE(next.Overlay(off, len, fresh, 4096 * (rng() % 16)).ok());
    }
    ExtentDelta d = DiffExtentMaps(base, next);
    EXPECT_TRUE(d.Validate().ok());
    EXPECT_EQ(d.size, next.size());
    ExtentMap got;
    ASSERT_TRUE(ApplyExtentDelta(base, d, &got).ok());
    EXPECT_EQ(got, next) << "round " << round;
    checked++;
    std::string full, delta;
    EncodeExtentMap(next, &full);
    EncodeExtentDelta(d, &delta);
    smaller += delta.size() < full.size();
  }
  EXPECT_EQ(checked, 400);
  EXPECT_GT(smaller, 300);  // small changes of a fragmented map: the delta is the smaller encoding
  // Nothing changed: an empty delta; a shrink alone: no piece, only the size.
  const ExtentMap m = DRewritten(big, 30, 1);
  EXPECT_TRUE(DiffExtentMaps(m, m).pieces.empty());
  ExtentMap shrunk = m;
  shrunk.Resize(4 << 20);
  ExtentDelta d = DiffExtentMaps(m, shrunk);
  EXPECT_TRUE(d.pieces.empty());
  EXPECT_EQ(d.size, 4u << 20);
}

TEST(ExtentDeltaTest, OneRewrittenPageCostsAConstantDeltaWhateverTheMap) {
  const Location big = DRec("n1", 1, 64 << 20);
  for (int extents : {10, 1000}) {
    ExtentMap base = DRewritten(big, extents, 7);
    ExtentMap next = base;
    ASSERT_TRUE(next.Overlay(12345 * 4096, 4096, DRec("n1", 5000, 4096), 0).ok());
    ExtentDelta d = DiffExtentMaps(base, next);
    ASSERT_EQ(d.pieces.size(), 1u);
    EXPECT_EQ(d.pieces[0], (ExtentDelta::Piece{12345 * 4096, 4096, DRec("n1", 5000, 4096), 0}));
    d.base_stamp = 1ull << 40;
    d.map_checksum = ExtentMapChecksum(next);
    std::string enc, full;
    EncodeExtentDelta(d, &enc);
    EncodeExtentMap(next, &full);
    EXPECT_LT(enc.size(), 64u) << extents;  // about 40 bytes, not O(extents)
    if (extents == 1000) EXPECT_GT(full.size(), 10000u);
  }
}

TEST(ExtentDeltaTest, PutVersion5RoundTripsAndRejectsMalformedDeltas) {
  const Location big = DRec("n1", 1, 64 << 20);
  ExtentMap base = DRewritten(big, 20, 3), next = base;
  ASSERT_TRUE(next.Overlay(4096, 8192, DRec("n1", 77, 8192), 0).ok());
  next.Punch(1 << 20, 4096);
  next.Resize(65 << 20);
  ExtentDelta d = DiffExtentMaps(base, next);
  d.base_stamp = 500;
  d.map_checksum = ExtentMapChecksum(next);
  EntryAttrs at;
  at.mode = 0100644;
  at.size = next.size();
  JournalEntry put = JournalEntry::Put("/slots/f", Location{}, at, 600);
  put.xattrs.emplace();
  put.delta = d;
  EXPECT_EQ(JournalEntryVersion(put), 5);
  std::string buf;
  EncodeJournalEntry(put, &buf);
  EXPECT_EQ(buf[0], 5);
  JournalEntry got;
  ASSERT_TRUE(DecodeJournalEntry(buf, &got).ok());
  EXPECT_EQ(got, put);
  EXPECT_EQ(got.Records(), (std::vector<Location>{DRec("n1", 77, 8192)}));
  EXPECT_EQ(got.ContentRecords(), got.Records());
  for (size_t n = 0; n < buf.size(); n++) {
    EXPECT_TRUE(DecodeJournalEntry(std::string_view(buf.data(), n), &got).IsCorruption()) << n;
  }
  // A reader that knows entry version 4 stops at it (NotSupported), as at any newer entry.
  std::string newer = buf;
  newer[0] = 6;
  EXPECT_EQ(DecodeJournalEntry(newer, &got).code(), Status::Code::kNotSupported);
  // The size of the PUT and of its delta must agree.
  JournalEntry bad = put;
  bad.attrs.size++;
  buf.clear();
  EncodeJournalEntry(bad, &buf);
  EXPECT_TRUE(DecodeJournalEntry(buf, &got).IsCorruption());
  // A piece past its record's value, overlapping pieces, an empty piece: Corruption.
  for (int k = 0; k < 3; k++) {
    ExtentDelta x = d;
    if (k == 0) x.pieces[0].value_offset = x.pieces[0].record.length;
    if (k == 1) x.pieces.push_back(x.pieces[0]);
    if (k == 2) x.pieces[0].length = 0;
    EXPECT_FALSE(x.Validate().ok()) << k;
    std::string e;
    EncodeExtentDelta(x, &e);
    ExtentDelta y;
    EXPECT_TRUE(DecodeExtentDelta(e, &y).IsCorruption()) << k;
  }
  // Older versions keep their bytes: a v3 PUT (whole map) is still written and read as before.
  JournalEntry v3 = put;
  v3.delta.reset();
  v3.extents = DRef(next);
  EXPECT_EQ(JournalEntryVersion(v3), 3);
}

class ExtentDeltaApplyTest : public IndexDbFixture {
 protected:
  const Location big_ = DRec("n2", 1, 64 << 20);
  ApplyOp Put(const std::string& path, const ExtentMap& m, uint64_t stamp) {
    ApplyOp op;
    op.kind = ApplyOp::Kind::kPut;
    op.path = path;
    op.attr.mode = S_IFREG | 0644;
    op.attr.size = m.size();
    op.extents = NormalizeExtents(m, &op.location);
    op.stamp = stamp;
    return op;
  }
  ApplyOp Delta(const std::string& path, const ExtentMap& base, const ExtentMap& next, uint64_t base_stamp,
                uint64_t stamp) {
    ApplyOp op;
    op.kind = ApplyOp::Kind::kPut;
    op.path = path;
    op.attr.mode = S_IFREG | 0644;
    op.attr.size = next.size();
    ExtentDelta d = DiffExtentMaps(base, next);
    d.base_stamp = base_stamp;
    d.map_checksum = ExtentMapChecksum(next);
    op.delta = std::move(d);
    op.stamp = stamp;
    return op;
  }
  ApplyResult Apply(const ApplyOp& op, const std::string& node) {
    auto r = db_->ApplyBatch({&op, 1}, node);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ApplyResult{};
  }
  // The path's content as a map (its one record as a map of one extent); nullopt when absent.
  std::optional<ExtentMap> Content(const std::string& path) {
    auto dump = db_->DumpByPath();
    EXPECT_TRUE(dump.ok());
    auto it = dump->find(path);
    if (it == dump->end()) return std::nullopt;
    if (it->second.extents) return *it->second.extents;
    return ExtentMap::FromLocation(it->second.location, it->second.size);
  }
  // n2's chain: a whole 64 MiB file, then two in-place rewrites.
  ExtentMap m0() { return ExtentMap::FromLocation(big_, big_.length); }
  ExtentMap m1() {
    ExtentMap m = m0();
    EXPECT_TRUE(m.Overlay(40960, 4096, DRec("n2", 2, 4096), 0).ok());
    return m;
  }
  ExtentMap m2() {
    ExtentMap m = m1();
    EXPECT_TRUE(m.Overlay(8 << 20, 8192, DRec("n2", 3, 8192), 0).ok());
    m.Punch(1 << 20, 1 << 20);
    return m;
  }
};

TEST_F(ExtentDeltaApplyTest, ADeltaOnItsBaseRebuildsTheMapAndIsIdempotent) {
  EXPECT_EQ(Apply(Put("/d/f", m0(), 10), "n2").applied, 1u);  // a single-record base (a v2 PUT)
  EXPECT_EQ(Apply(Delta("/d/f", m0(), m1(), 10, 20), "n2").applied, 1u);
  EXPECT_EQ(Content("/d/f"), m1());
  EXPECT_EQ(Apply(Delta("/d/f", m1(), m2(), 20, 30), "n2").applied, 1u);
  EXPECT_EQ(Content("/d/f"), m2());
  // Replayed again (a crash before the applied position was stored): every entry is skipped, the map stays.
  for (const ApplyOp& op : {Put("/d/f", m0(), 10), Delta("/d/f", m0(), m1(), 10, 20), Delta("/d/f", m1(), m2(), 20, 30)}) {
    ApplyResult r = Apply(op, "n2");
    EXPECT_EQ(r.applied, 0u);
    EXPECT_EQ(r.unresolved_deltas, 0u);
  }
  EXPECT_EQ(Content("/d/f"), m2());
}

TEST_F(ExtentDeltaApplyTest, APeerPutBetweenBaseAndDeltaMakesTheDeltaAnUnlinkUntilTheNextWholePut) {
  Apply(Put("/d/f", m1(), 20), "n2");
  ExtentMap theirs = ExtentMap::FromLocation(DRec("n3", 9, 1 << 20), 1 << 20);
  Apply(Put("/d/f", theirs, 25), "n3");  // n3's PUT reached this index between n2's base and delta
  ApplyResult r = Apply(Delta("/d/f", m1(), m2(), 20, 30), "n2");
  EXPECT_EQ(r.unresolved_deltas, 1u);
  EXPECT_EQ(Content("/d/f"), std::nullopt);  // neither n3's bytes nor a guess: the name is gone
  // An older PUT arriving later loses to the delta's stamp (its tombstone).
  Apply(Put("/d/f", theirs, 28), "n3");
  EXPECT_EQ(Content("/d/f"), std::nullopt);
  // The next delta of the chain has no base either; n2's next whole PUT brings the file back.
  EXPECT_EQ(Apply(Delta("/d/f", m2(), m1(), 30, 40), "n2").unresolved_deltas, 1u);
  EXPECT_EQ(Content("/d/f"), std::nullopt);
  EXPECT_EQ(Apply(Put("/d/f", m2(), 50), "n2").applied, 1u);
  EXPECT_EQ(Content("/d/f"), m2());
}

TEST_F(ExtentDeltaApplyTest, ANewerPeerPutWinsOverTheDeltaAsOverAWholePut) {
  Apply(Put("/d/f", m1(), 20), "n2");
  ExtentMap theirs = ExtentMap::FromLocation(DRec("n3", 9, 1 << 20), 1 << 20);
  Apply(Put("/d/f", theirs, 35), "n3");
  ApplyResult r = Apply(Delta("/d/f", m1(), m2(), 20, 30), "n2");
  EXPECT_EQ(r.applied, 0u);
  EXPECT_EQ(r.unresolved_deltas, 0u);
  EXPECT_EQ(Content("/d/f"), theirs);
  // In the other order (the delta first, then n3's newer PUT) the result is the same.
  Apply(Put("/d/g", m1(), 20), "n2");
  Apply(Delta("/d/g", m1(), m2(), 20, 30), "n2");
  EXPECT_EQ(Content("/d/g"), m2());
  Apply(Put("/d/g", theirs, 35), "n3");
  EXPECT_EQ(Content("/d/g"), theirs);
}

TEST_F(ExtentDeltaApplyTest, ABaseThisIndexHoldsInAnotherFormIsNeverUsed) {
  // Same (stamp, node) but another map (here: the writer's base differs from what this index holds,
  // as after a MOVE or a SETATTR of the size that reached the two indexes in another order): the map
  // checksum does not match, the delta binds nothing.
  Apply(Put("/d/f", m1(), 20), "n2");
  ExtentMap writers_base = m1();
  ASSERT_TRUE(writers_base.Overlay(0, 4096, DRec("n2", 7, 4096), 0).ok());
  ExtentMap writers_next = writers_base;
  ASSERT_TRUE(writers_next.Overlay(8192, 4096, DRec("n2", 8, 4096), 0).ok());
  ApplyResult r = Apply(Delta("/d/f", writers_base, writers_next, 20, 30), "n2");
  EXPECT_EQ(r.unresolved_deltas, 1u);
  EXPECT_EQ(Content("/d/f"), std::nullopt);
  // Another node's binding with the base's stamp is not the base either (bases are the writer's own).
  Apply(Put("/d/h", m1(), 20), "n3");
  EXPECT_EQ(Apply(Delta("/d/h", m1(), m2(), 20, 30), "n2").unresolved_deltas, 1u);
  EXPECT_EQ(Content("/d/h"), std::nullopt);
  // No binding at all (the base lost to journal damage): the same rule.
  EXPECT_EQ(Apply(Delta("/d/k", m1(), m2(), 20, 30), "n2").unresolved_deltas, 1u);
  EXPECT_EQ(Content("/d/k"), std::nullopt);
}

TEST(ExtentDeltaReplayTest, JournalWithDeltasAndASnapshotBetweenBaseAndDelta) {
  char tmpl[] = "/var/tmp/kvfs-extent-delta-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl, backing = root + "/backing";
  const std::string node_dir = NodeDirPath(backing, "n2");
  fs::create_directories(node_dir);
  const Location big = DRec("n2", 1, 64 << 20);
  ExtentMap m0 = ExtentMap::FromLocation(big, big.length), m1 = m0;
  ASSERT_TRUE(m1.Overlay(40960, 4096, DRec("n2", 2, 4096), 0).ok());
  ExtentMap m2 = m1;
  ASSERT_TRUE(m2.Overlay(1 << 20, 4096, DRec("n2", 3, 4096), 0).ok());
  auto delta_put = [&](const ExtentMap& base, const ExtentMap& next, uint64_t base_stamp, uint64_t stamp) {
    EntryAttrs at;
    at.mode = 0100644;
    at.size = next.size();
    JournalEntry e = JournalEntry::Put("/d/f", Location{}, at, stamp);
    e.xattrs.emplace();
    ExtentDelta d = DiffExtentMaps(base, next);
    d.base_stamp = base_stamp;
    d.map_checksum = ExtentMapChecksum(next);
    e.delta = d;
    return e;
  };
  auto open = [&](const std::string& name) {
    IndexDbOptions io;
    io.dir = root + "/" + name;
    io.node_id = "n9";
    auto idx = IndexDb::Open(io);
    EXPECT_TRUE(idx.ok());
    return std::move(*idx);
  };
  JournalWriterOptions o;
  o.env = Env::Posix();
  o.dir = node_dir;
  o.node = "n2";
  o.generation = 1;
  {
    auto w = JournalWriter::Open(o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EntryAttrs at;
    at.mode = 0100644;
    at.size = big.length;
    (*w)->Append(JournalEntry::Put("/d/f", big, at, 10));
    (*w)->Append(delta_put(m0, m1, 10, 20));
    ASSERT_TRUE((*w)->Sync().ok());
  }
  // A reader replays base + delta from the journal.
  auto idx = open("idx1");
  ReplayNodeResult res;
  ASSERT_TRUE(ReplayNode(Env::Posix(), backing, "n2", idx.get(), &res).ok());
  auto dump = idx->DumpByPath();
  ASSERT_TRUE(dump.ok());
  ASSERT_TRUE(dump->at("/d/f").extents);
  EXPECT_EQ(*dump->at("/d/f").extents, m1);
  // A snapshot taken here (it holds the whole map m1 at the binding's stamp 20), the journal files before
  // it retired, then a delta on m1: a node joining from the snapshot resolves it.
  auto view = idx->NewView();
  ASSERT_TRUE(WriteSnapshotFromIndex(Env::Posix(), idx.get(), *view, node_dir, "n2", 1, 1, nullptr).ok());
  view.reset();
  fs::remove(node_dir + "/" + JournalFileName(1, 0));
  o.first_file_number = 1;
  {
    auto w = JournalWriter::Open(o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    (*w)->Append(delta_put(m1, m2, 20, 30));
    ASSERT_TRUE((*w)->Sync().ok());
  }
  auto idx2 = open("idx2");
  ReplayNodeResult res2;
  ASSERT_TRUE(ReplayNode(Env::Posix(), backing, "n2", idx2.get(), &res2).ok());
  auto dump2 = idx2->DumpByPath();
  ASSERT_TRUE(dump2.ok());
  ASSERT_TRUE(dump2->count("/d/f"));
  ASSERT_TRUE(dump2->at("/d/f").extents);
  EXPECT_EQ(*dump2->at("/d/f").extents, m2);
  idx.reset();
  idx2.reset();
  fs::remove_all(root);
}

}  // namespace extent_delta_test
}  // namespace kvfs
