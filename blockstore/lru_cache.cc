#include "blockstore/lru_cache.h"

#include <algorithm>
#include <cstring>

namespace kvfs {

namespace {

void PutFixed64(std::string* out, uint64_t v) {
  char buf[8];
  std::memcpy(buf, &v, 8);
  out->append(buf, 8);
}

}  // namespace

std::string CacheKey(const Location& loc) {
  std::string k;
  k.reserve(loc.segment.node.size() + 1 + 32);
  k.append(loc.segment.node);
  k.push_back('\0');  // node ids contain no NUL, so the encoding is unambiguous
  PutFixed64(&k, loc.segment.generation);
  PutFixed64(&k, loc.segment.seq);
  PutFixed64(&k, loc.value_offset);
  PutFixed64(&k, loc.length);
  return k;
}

LruCache::LruCache(uint64_t capacity_bytes, int shard_bits)
    : capacity_(capacity_bytes),
      shard_bits_(std::clamp(shard_bits, 0, 10)),
      shard_capacity_(capacity_bytes >> shard_bits_) {
  shards_.reserve(size_t{1} << shard_bits_);
  for (size_t i = 0; i < (size_t{1} << shard_bits_); ++i) shards_.push_back(std::make_unique<Shard>());
}

LruCache::~LruCache() = default;

LruCache::Shard& LruCache::ShardFor(std::string_view key, size_t* hash) {
  *hash = StringHash{}(key);
  // Top bits pick the shard; the shard's map uses the low bits (hash mod bucket count).
  size_t idx = shard_bits_ == 0 ? 0 : static_cast<size_t>(static_cast<uint64_t>(*hash) >> (64 - shard_bits_));
  return *shards_[idx];
}

LruCache::Value LruCache::RemoveLocked(Shard& s, std::list<Entry>::iterator it) {
  Value v = std::move(it->value);
  s.usage -= it->charge;
  usage_.fetch_sub(it->charge, std::memory_order_acq_rel);
  s.map.erase(it->key);
  s.lru.erase(it);
  return v;
}

bool LruCache::Insert(std::string_view key, Value value) {
  size_t h;
  Shard& s = ShardFor(key, &h);
  const uint64_t charge = Charge(key, value);
  std::vector<Value> dropped;  // released after the lock
  bool cached = false;
  {
    std::lock_guard<std::mutex> l(s.mu);
    auto old = s.map.find(key);
    if (old != s.map.end()) dropped.push_back(RemoveLocked(s, old->second));
    if (value && charge <= shard_capacity_) {
      // Evict least recently used entries until the new one fits, before charging it.
      while (s.usage + charge > shard_capacity_ && !s.lru.empty()) {
        dropped.push_back(RemoveLocked(s, std::prev(s.lru.end())));
        evictions_.fetch_add(1, std::memory_order_relaxed);
      }
      s.lru.push_front(Entry{std::string(key), std::move(value), charge});
      s.map.emplace(s.lru.front().key, s.lru.begin());
      s.usage += charge;
      usage_.fetch_add(charge, std::memory_order_acq_rel);
      inserts_.fetch_add(1, std::memory_order_relaxed);
      cached = true;
    }
  }
  return cached;
}

LruCache::Value LruCache::Lookup(std::string_view key) {
  size_t h;
  Shard& s = ShardFor(key, &h);
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  s.lru.splice(s.lru.begin(), s.lru, it->second);  // iterators stay valid
  hits_.fetch_add(1, std::memory_order_relaxed);
  return it->second->value;
}

bool LruCache::Erase(std::string_view key) {
  size_t h;
  Shard& s = ShardFor(key, &h);
  Value dropped;
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return false;
  dropped = RemoveLocked(s, it->second);
  return true;
}

void LruCache::Clear() {
  for (auto& sp : shards_) {
    std::list<Entry> lru;
    {
      std::lock_guard<std::mutex> l(sp->mu);
      sp->map.clear();
      lru.swap(sp->lru);
      usage_.fetch_sub(sp->usage, std::memory_order_acq_rel);
      sp->usage = 0;
    }
  }
}

size_t LruCache::EntryCount() const {
  size_t n = 0;
  for (const auto& sp : shards_) {
    std::lock_guard<std::mutex> l(sp->mu);
    n += sp->map.size();
  }
  return n;
}

}  // namespace kvfs
