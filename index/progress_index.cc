// IndexDb, node positions / peer progress: the applied journal position of each node (meta
// "applied/<node>", recorded by ApplyBatch in the batch it describes) and the HLC floor (meta "hlc",
// raised by every Txn::Commit that writes a newer stamp). Layout: index_keys.h.
// Callers: the Store and its checkpoints (engine/): where a peer's tailing or the own-node catch-up
// resumes, the HLC at mount; replay (SetHlcFloor); the tests.
// Thread-safety: reads take no lock; SetHlcFloor takes Impl::mu.
// Invariants: an applied position is written in the same WriteBatch as the entries up to it, so the
// index never claims entries it does not hold; the HLC floor only rises.
#include "index/index_db.h"

#include <rocksdb/db.h>

#include <mutex>

#include "index/index_keys.h"
#include "index/index_txn.h"

namespace kvfs {

using namespace index_internal;

// ---- applied journal positions ----
Result<std::string> IndexDb::GetAppliedPosition(std::string_view node) {
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kMeta, std::string(kMetaAppliedPrefix) + std::string(node), &v, &found));
  if (!found) return Status::NotFound("no applied position for node " + std::string(node));
  return v;
}

std::map<std::string, std::string> IndexDb::GetAppliedPositions() {
  std::map<std::string, std::string> out;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->H(kMeta)));
  std::string p = kMetaAppliedPrefix;
  for (it->Seek(p); it->Valid() && it->key().starts_with(p); it->Next())
    out[it->key().ToString().substr(p.size())] = it->value().ToString();
  return out;
}

// ---- HLC / stats ----
uint64_t IndexDb::HlcFloor() const { return impl_->hlc.load(); }

Status IndexDb::SetHlcFloor(uint64_t stamp) {
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  t.RaiseHlc(stamp);
  return t.Commit();
}

}  // namespace kvfs
