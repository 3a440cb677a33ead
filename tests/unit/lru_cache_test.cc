// LruCache: byte budget (also under 8 concurrent threads), LRU order within a shard, oversize values,
// shared_ptr keeps evicted values alive, counters.
#include "blockstore/lru_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace kvfs {
namespace {

LruCache::Value Val(size_t n, char c = 'v') { return ValueBuffer::Copy(std::string(n, c)); }
std::string Str(const LruCache::Value& v) { return std::string(v->view()); }

TEST(LruCacheTest, InsertLookupEraseAndCounters) {
  LruCache c(1 << 20);
  EXPECT_EQ(c.Capacity(), 1u << 20);
  EXPECT_EQ(c.NumShards(), 16u);
  EXPECT_EQ(c.Lookup("a"), nullptr);
  ASSERT_TRUE(c.Insert("a", Val(100, 'a')));
  auto v = c.Lookup("a");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(Str(v), std::string(100, 'a'));
  EXPECT_EQ(c.Usage(), LruCache::Charge("a", v));
  EXPECT_EQ(c.Usage(), 100u + 1u + LruCache::kEntryOverhead);
  // Replace.
  ASSERT_TRUE(c.Insert("a", Val(50, 'b')));
  EXPECT_EQ(Str(c.Lookup("a")), std::string(50, 'b'));
  EXPECT_EQ(c.Usage(), 50u + 1u + LruCache::kEntryOverhead);
  EXPECT_EQ(c.EntryCount(), 1u);
  EXPECT_TRUE(c.Erase("a"));
  EXPECT_FALSE(c.Erase("a"));
  EXPECT_EQ(c.Usage(), 0u);
  EXPECT_EQ(c.hits(), 2u);
  EXPECT_EQ(c.misses(), 1u);
  EXPECT_EQ(c.inserts(), 2u);
  EXPECT_EQ(Str(v), std::string(100, 'a'));  // the reader's copy outlived replace and erase
}

TEST(LruCacheTest, EvictsLeastRecentlyUsedWithinAShard) {
  // One shard so the order is global; room for exactly 3 entries of 1000 bytes (+ key + overhead).
  const uint64_t charge = LruCache::Charge("k0", Val(1000));
  LruCache c(3 * charge, /*shard_bits=*/0);
  ASSERT_TRUE(c.Insert("k0", Val(1000)));
  ASSERT_TRUE(c.Insert("k1", Val(1000)));
  ASSERT_TRUE(c.Insert("k2", Val(1000)));
  EXPECT_EQ(c.Usage(), 3 * charge);
  ASSERT_NE(c.Lookup("k0"), nullptr);  // k0 becomes MRU; LRU is now k1
  ASSERT_TRUE(c.Insert("k3", Val(1000)));
  EXPECT_EQ(c.Lookup("k1"), nullptr);
  EXPECT_NE(c.Lookup("k0"), nullptr);
  EXPECT_NE(c.Lookup("k2"), nullptr);
  EXPECT_NE(c.Lookup("k3"), nullptr);
  EXPECT_EQ(c.evictions(), 1u);
  // Order now (MRU..LRU): k3 k2 k0. A value needing two slots evicts k0 then k2.
  ASSERT_TRUE(c.Insert("big", Val(2 * 1000 + LruCache::kEntryOverhead)));
  EXPECT_EQ(c.Lookup("k0"), nullptr);
  EXPECT_EQ(c.Lookup("k2"), nullptr);
  EXPECT_NE(c.Lookup("k3"), nullptr);
  EXPECT_LE(c.Usage(), c.Capacity());
}

TEST(LruCacheTest, ValueLargerThanAShardIsNotCached) {
  LruCache c(16 * 4096);  // 16 shards of 4096 bytes
  EXPECT_EQ(c.ShardCapacity(), 4096u);
  ASSERT_TRUE(c.Insert("x", Val(100)));
  EXPECT_FALSE(c.Insert("x", Val(4096)));  // 4096 + key + overhead > 4096
  EXPECT_EQ(c.Lookup("x"), nullptr);       // the old value is gone too: never stale
  EXPECT_EQ(c.Usage(), 0u);
  EXPECT_FALSE(c.Insert("y", nullptr));
  LruCache zero(0);
  EXPECT_FALSE(zero.Insert("z", Val(1)));
  EXPECT_EQ(zero.Usage(), 0u);
}

TEST(LruCacheTest, EvictedValueStaysAliveForItsReader) {
  const uint64_t charge = LruCache::Charge("a", Val(1000));
  LruCache c(charge, 0);
  ASSERT_TRUE(c.Insert("a", Val(1000, 'a')));
  LruCache::Value held = c.Lookup("a");
  ASSERT_TRUE(c.Insert("b", Val(1000, 'b')));  // evicts a
  EXPECT_EQ(c.Lookup("a"), nullptr);
  EXPECT_EQ(held.use_count(), 1);  // only the reader holds it now
  EXPECT_EQ(Str(held), std::string(1000, 'a'));
}

TEST(LruCacheTest, CacheKeyOfLocationIsUnique) {
  Location a{SegmentId{"node1", 3, 1}, 0, 4096, 100};
  Location b = a;
  b.segment.seq = 2;
  Location c = a;
  c.segment.node = "node10";
  EXPECT_EQ(CacheKey(a), CacheKey(a));
  EXPECT_NE(CacheKey(a), CacheKey(b));
  EXPECT_NE(CacheKey(a), CacheKey(c));
}

TEST(LruCacheTest, NeverExceedsBudgetUnderEightThreads) {
  const uint64_t capacity = 256 * 1024;
  LruCache c(capacity);  // 16 shards of 16 KiB
  std::atomic<bool> over{false};
  std::atomic<uint64_t> max_seen{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < 20000; ++i) {
        std::string key = "k" + std::to_string(rng() % 2000);
        switch (rng() % 4) {
          case 0:
          case 1: {
            const size_t n = rng() % 12000;  // some near the 16 KiB shard budget
            c.Insert(key, Val(n, static_cast<char>('a' + n % 26)));
            break;
          }
          case 2: {
            auto v = c.Lookup(key);
            if (v && v->size() && v->data()[0] != static_cast<char>('a' + v->size() % 26)) over = true;  // torn
            break;
          }
          case 3:
            c.Erase(key);
            break;
        }
        const uint64_t u = c.Usage();
        uint64_t m = max_seen.load();
        while (u > m && !max_seen.compare_exchange_weak(m, u)) {
        }
        if (u > capacity) over = true;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(over.load());
  EXPECT_LE(max_seen.load(), capacity);
  EXPECT_GT(max_seen.load(), capacity / 2);  // the test did fill the cache
  EXPECT_LE(c.Usage(), capacity);
  // Usage equals the sum of the charges of what is cached.
  uint64_t sum = 0;
  for (int k = 0; k < 2000; ++k) {
    std::string key = "k" + std::to_string(k);
    if (auto v = c.Lookup(key)) sum += LruCache::Charge(key, v);
  }
  EXPECT_EQ(sum, c.Usage());
  c.Clear();
  EXPECT_EQ(c.Usage(), 0u);
  EXPECT_EQ(c.EntryCount(), 0u);
}

}  // namespace
}  // namespace kvfs
