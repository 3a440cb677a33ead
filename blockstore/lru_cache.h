// LruCache: a byte-bounded, sharded, thread-safe LRU cache of record values (docs/design.md §4 "Read").
//
// Keys are byte strings (use CacheKey(const Location&) for record values); values are
// std::shared_ptr<const ValueBuffer> (blockstore/value_buffer.h: aligned, not zero-filled), so a reader that got a value keeps it alive after it is evicted,
// erased or replaced: eviction only drops the cache's reference.
//
// Structure (as LevelDB's util/cache.cc ShardedLRUCache, without its handle/refcount protocol since
// shared_ptr does that job): 2^shard_bits shards chosen by the key's hash; each shard has a mutex, a hash
// map key -> entry and an intrusive recency list (front = most recently used).
//
// Guarantees:
//  * Budget. Each shard holds at most capacity / 2^shard_bits bytes of charge (the remainder of the
//    division is unused); Usage() <= Capacity() at every instant, also under concurrent use: an Insert
//    evicts before it adds, both under the shard's lock.
//  * Charge of an entry = value->size() + key.size() + kEntryOverhead bytes.
//  * An entry whose charge exceeds one shard's budget is not cached (Insert returns false), and an older
//    value under that key is erased (so a lookup never returns a stale value after an Insert).
//  * LRU order within a shard: Lookup and Insert make the entry the most recently used; eviction removes
//    the least recently used entries of the inserting shard until the new entry fits. Across shards
//    there is no global order.
//  * Counters (hits, misses, inserts, evictions) are relaxed atomics: exact once the cache is quiescent.
//
// Thread safety: every method may be called concurrently. Cost: one shard mutex per call, O(1) average.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "blockstore/types.h"
#include "blockstore/value_buffer.h"

namespace kvfs {

// A compact, unique byte key for a record value: node, generation, seq, value offset, length.
std::string CacheKey(const Location& loc);

class LruCache {
 public:
  using Value = std::shared_ptr<const ValueBuffer>;
  static constexpr size_t kEntryOverhead = 64;  // bytes charged per entry for bookkeeping
  static constexpr int kDefaultShardBits = 4;   // 16 shards

  // capacity: total byte budget (0 = cache nothing). shard_bits: log2 of the shard count, 0..10.
  explicit LruCache(uint64_t capacity_bytes, int shard_bits = kDefaultShardBits);
  ~LruCache();
  LruCache(const LruCache&) = delete;
  LruCache& operator=(const LruCache&) = delete;

  // Inserts or replaces key -> value and makes it the most recently used. Returns false (and caches
  // nothing, erasing any old value of key) when value is null or its charge exceeds a shard's budget.
  bool Insert(std::string_view key, Value value);
  // The value of key (and makes it the most recently used), or nullptr on a miss.
  Value Lookup(std::string_view key);
  // Removes key; returns whether it was present.
  bool Erase(std::string_view key);
  // Removes every entry.
  void Clear();

  uint64_t Usage() const { return usage_.load(std::memory_order_acquire); }  // bytes charged now
  uint64_t Capacity() const { return capacity_; }
  uint64_t ShardCapacity() const { return shard_capacity_; }
  size_t NumShards() const { return shards_.size(); }
  size_t EntryCount() const;
  static uint64_t Charge(std::string_view key, const Value& v) {
    return (v ? v->size() : 0) + key.size() + kEntryOverhead;
  }

  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }
  uint64_t inserts() const { return inserts_.load(std::memory_order_relaxed); }
  uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    std::string key;
    Value value;
    uint64_t charge;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mu;
    std::list<Entry> lru;  // front = most recently used
    std::unordered_map<std::string, std::list<Entry>::iterator, StringHash, std::equal_to<>> map;
    uint64_t usage = 0;
  };

  Shard& ShardFor(std::string_view key, size_t* hash);
  // Requires s.mu held. Unlinks it and returns its value (released by the caller outside the lock).
  Value RemoveLocked(Shard& s, std::list<Entry>::iterator it);

  const uint64_t capacity_;
  const int shard_bits_;
  const uint64_t shard_capacity_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> usage_{0};
  std::atomic<uint64_t> hits_{0}, misses_{0}, inserts_{0}, evictions_{0};
};

}  // namespace kvfs
