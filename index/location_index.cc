// IndexDb, locations and segments: segment state and CUTs (SetSegmentState, SetSegmentCut, GetSegment,
// ListSegments). Owns the CFs segments and segfiles (layout: index_keys.h); their live bytes / records
// and segfiles membership move with every committed inode through Ops::Account (index_txn.h), and
// journal SEAL / DROP / CUT / MOVE entries are applied in index_apply.cc. A file's location itself
// lives in its inode record (namespace part).
// Callers: the Store (engine/: store_open.cc, group_commit.cc, capacity.cc, peer_tailer.cc, recovery.cc,
// store_stats.cc), the tests.
// Thread-safety: writes take Impl::mu; reads take no lock (ListSegments iterates a consistent view).
// Invariants: SegmentInfo::cut only decreases (the lowest applied CUT); a CUT of a dropped segment is a
// no-op; live bytes / records are exactly the sums over the committed inodes located in the segment.
#include "index/index_db.h"

#include <rocksdb/db.h>

#include "index/index_keys.h"
#include "index/index_txn.h"

namespace kvfs {

using namespace index_internal;

// ---- segments ----
Status IndexDb::SetSegmentState(const SegmentId& seg, SegmentState state) {
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  std::string sk = SegKey(seg);
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(t.Get(kSegments, sk, &v, &found));
  SegmentInfo si;
  if (found && !DecodeSeg(v, &si)) return Status::Corruption("bad segment record");
  si.state = state;
  t.Put(kSegments, sk, EncodeSeg(si));
  return t.Commit();
}

Status IndexDb::SetSegmentCut(const SegmentId& seg, uint64_t offset) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kCut;
  op.segment = seg;
  op.cut_offset = offset;
  auto r = ApplyBatch({&op, 1}, node_id_);
  return r.ok() ? Status::OK() : r.status();
}

Result<SegmentInfo> IndexDb::GetSegment(const SegmentId& seg) {
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kSegments, SegKey(seg), &v, &found));
  if (!found) return Status::NotFound("segment not in index");
  SegmentInfo si;
  if (!DecodeSeg(v, &si)) return Status::Corruption("bad segment record");
  si.id = seg;
  return si;
}

Result<std::vector<uint64_t>> IndexDb::SegmentInodes(const SegmentId& seg) {
  const std::string prefix = SegKey(seg);
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->H(kSegFiles)));
  std::vector<uint64_t> out;
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    std::string_view k(it->key().data(), it->key().size());
    if (k.substr(0, prefix.size()) != prefix) break;
    if (k.size() == prefix.size() + 8) out.push_back(GetBE64(k.data() + prefix.size()));
  }
  KVFS_RETURN_IF_ERROR(ToStatus(it->status(), "list segment inodes"));
  return out;
}

Status IndexDb::ListSegments(const std::function<bool(const SegmentInfo&)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->H(kSegments)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    SegmentInfo si;
    if (!DecodeSegKey(std::string_view(it->key().data(), it->key().size()), &si.id) ||
        !DecodeSeg(std::string_view(it->value().data(), it->value().size()), &si))
      return Status::Corruption("bad segment record");
    if (!fn(si)) break;
  }
  return ToStatus(it->status(), "list segments");
}

}  // namespace kvfs
