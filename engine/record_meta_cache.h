// RecordMetaCache: the verified metadata (header, path, block checksum table) of the few records being
// read block-range by block-range right now, so the 1 MiB FUSE READs of one large value read its
// metadata from the segment once, not once (or twice: a table over 4 KiB) per request (issue 15).
//
// Who calls it: StoreImpl::ReadImpl on its "too large to load whole" path (engine/store_data.cc): Find
// before a range read; Insert the RecordMeta the segment reader parsed (segment_reader.h meta_out);
// Erase when a read of the record failed (the next read parses the metadata again).
//
// Why a plain bounded cache is enough: a record is immutable once written (segments are append-only and
// a SegmentId is never reused), so an entry never goes stale; an entry of a dropped segment is never
// asked for again (reads of it fail at SegmentFile) and ages out. Every value byte is still verified
// against the cached checksums, which were verified (meta checksum, CheckLoc) when they were read.
//
// Bounds: at most kMaxEntries records and kMaxBytes of checksum tables (a 36 MiB value's table is 4.5 KiB;
// a table larger than kMaxBytes / 4 is not kept). Least recently used out first.
// Thread safety: every method may be called concurrently (one mutex, never held across I/O).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "blockstore/segment_reader.h"
#include "blockstore/types.h"

namespace kvfs {

class RecordMetaCache {
 public:
  static constexpr size_t kMaxEntries = 64;
  static constexpr uint64_t kMaxBytes = 4ull << 20;

  std::shared_ptr<const RecordMeta> Find(const Location& loc) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = map_.find(Key(loc));
    if (it == map_.end()) return nullptr;
    const RecordMeta& m = *it->second->second;
    if (m.value_offset != loc.value_offset || m.value_len() != loc.length) return nullptr;  // not this value
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }

  void Insert(const Location& loc, RecordMeta meta) {
    const uint64_t charge = Charge(meta);
    if (charge > kMaxBytes / 4) return;
    auto m = std::make_shared<const RecordMeta>(std::move(meta));
    std::lock_guard<std::mutex> l(mu_);
    const auto key = Key(loc);
    if (map_.count(key)) return;
    lru_.emplace_front(key, std::move(m));
    map_.emplace(key, lru_.begin());
    bytes_ += charge;
    while (map_.size() > kMaxEntries || bytes_ > kMaxBytes) {
      auto& last = lru_.back();
      bytes_ -= Charge(*last.second);
      map_.erase(last.first);
      lru_.pop_back();
    }
  }

  void Erase(const Location& loc) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = map_.find(Key(loc));
    if (it == map_.end()) return;
    bytes_ -= Charge(*it->second->second);
    lru_.erase(it->second);
    map_.erase(it);
  }

  size_t size() {
    std::lock_guard<std::mutex> l(mu_);
    return map_.size();
  }

 private:
  using Key_ = std::pair<SegmentId, uint64_t>;  // segment, record offset
  static Key_ Key(const Location& loc) { return {loc.segment, loc.record_offset}; }
  static uint64_t Charge(const RecordMeta& m) {
    return sizeof(RecordMeta) + m.path.size() + m.checksums.size() * sizeof(uint64_t);
  }

  std::mutex mu_;
  std::list<std::pair<Key_, std::shared_ptr<const RecordMeta>>> lru_;  // most recent first
  std::map<Key_, decltype(lru_)::iterator> map_;
  uint64_t bytes_ = 0;
};

}  // namespace kvfs
