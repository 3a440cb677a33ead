#include "blockstore/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "blockstore/value_buffer.h"

namespace kvfs {
namespace {

TEST(BufferPoolTest, SizeClassesAreAtMostAQuarterOver) {
  EXPECT_EQ(BufferPool::ClassCapacity(0), 4096u);
  EXPECT_EQ(BufferPool::ClassCapacity(1), 4096u);
  EXPECT_EQ(BufferPool::ClassCapacity(4097), 8192u);
  EXPECT_EQ(BufferPool::ClassCapacity(1u << 20), 1u << 20);            // a staging chunk is a class
  EXPECT_EQ(BufferPool::ClassCapacity((1u << 20) + 1), 1280u << 10);   // 1.25 MiB
  EXPECT_EQ(BufferPool::ClassCapacity(144u << 10), 160u << 10);        // SGLang's 144 KiB chunk
  EXPECT_EQ(BufferPool::ClassCapacity(2359296 + 4096), 2560u << 10);   // vLLM's 2.25 MiB + metadata
  EXPECT_EQ(BufferPool::ClassCapacity(36u << 20), 40u << 20);
  for (size_t n = 64 << 10; n < (64u << 20); n = n * 9 / 7 + 4097) {
    const size_t c = BufferPool::ClassCapacity(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c, n + n / 4 + 4096) << n;
    EXPECT_EQ(c % 4096, 0u);
  }
}

TEST(BufferPoolTest, FreedBlocksAreReusedAlignedAndWritable) {
  BufferPool pool(64ull << 20);
  auto a = pool.Get(2359296);
  ASSERT_NE(a.data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 4096, 0u);
  EXPECT_EQ(a.capacity, 2560u << 10);
  std::memset(a.data, 0xab, a.capacity);
  char* first = a.data;
  pool.Put(a);
  EXPECT_EQ(pool.GetStats().free_bytes, 2560u << 10);
  auto b = pool.Get(2359296 + 100);  // same class
  EXPECT_EQ(b.data, first);
  EXPECT_EQ(static_cast<unsigned char>(b.data[12345]), 0xab);  // the same pages, not fresh ones
  auto st = pool.GetStats();
  EXPECT_EQ(st.reused, 1u);
  EXPECT_EQ(st.fresh, 1u);
  EXPECT_EQ(st.free_bytes, 0u);
  auto c = pool.Get(1u << 20);  // another class: fresh
  EXPECT_NE(c.data, first);
  EXPECT_EQ(pool.GetStats().fresh, 2u);
  pool.Put(b);
  pool.Put(c);
}

TEST(BufferPoolTest, NeverHoldsMoreThanItsLimitOfFreeMemory) {
  BufferPool pool(4u << 20);
  std::vector<BufferPool::Block> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(pool.Get(1u << 20));
  for (auto& b : blocks) pool.Put(b);
  auto st = pool.GetStats();
  EXPECT_EQ(st.free_bytes, 4u << 20);
  EXPECT_EQ(st.released, 6u);
  // A block larger than the whole limit is never kept.
  pool.Put(pool.Get(8u << 20));
  EXPECT_EQ(pool.GetStats().free_bytes, 4u << 20);
  EXPECT_EQ(pool.GetStats().released, 7u);
  pool.Trim(1u << 20);
  EXPECT_EQ(pool.GetStats().free_bytes, 1u << 20);
  pool.SetLimit(0);
  EXPECT_EQ(pool.GetStats().free_bytes, 0u);
}

TEST(BufferPoolTest, SmallBlocksComeFromTheHeapAndAreNotHeld) {
  BufferPool pool;
  auto a = pool.Get(100);
  ASSERT_NE(a.data, nullptr);
  EXPECT_EQ(a.capacity, 4096u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 4096, 0u);
  pool.Put(a);
  EXPECT_EQ(pool.GetStats().free_bytes, 0u);
}

TEST(BufferPoolTest, ConcurrentGetPutKeepsEveryBlockPrivate) {
  BufferPool pool(16u << 20);
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto b = pool.Get((1u << 20) + (i % 3) * 300000);
        std::memset(b.data, t * 50 + i % 50, b.capacity);
        for (size_t off = 0; off < b.capacity; off += 4096) {
          if (b.data[off] != static_cast<char>(t * 50 + i % 50)) bad++;
        }
        pool.Put(b);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(pool.GetStats().free_bytes, 16u << 20);
}

TEST(BufferPoolTest, ValueBuffersReturnTheirMemoryToTheDefaultPool) {
  const auto before = BufferPool::Default().GetStats();
  char* p = nullptr;
  {
    auto v = ValueBuffer::Allocate(3u << 20, 4096);
    ASSERT_TRUE(v);
    EXPECT_GE(v->capacity(), (3u << 20) + 4096);
    p = v->base();
  }
  auto v2 = ValueBuffer::Allocate(3u << 20, 4096);
  EXPECT_EQ(v2->base(), p);
  EXPECT_EQ(BufferPool::Default().GetStats().reused, before.reused + 1);
}

TEST(BufferPoolTest, RemembersWhichBlocksUserCodeTouchedAndHandsThoseOutFirst) {
  BufferPool pool(64ull << 20);
  auto fresh = pool.Get(1u << 20);
  EXPECT_FALSE(fresh.touched);  // a fresh mapping: populated, never accessed from user mode
  auto other = pool.Get(1u << 20);
  other.touched = true;  // its owner wrote into it
  char* const touched_block = other.data;
  pool.Put(other);
  pool.Put(fresh);  // returned last, but untouched
  auto a = pool.Get(1u << 20);
  EXPECT_EQ(a.data, touched_block);
  EXPECT_TRUE(a.touched);
  auto b = pool.Get(1u << 20);
  EXPECT_FALSE(b.touched);
  auto st = pool.GetStats();
  EXPECT_EQ(st.reused, 2u);
  EXPECT_EQ(st.reused_untouched, 1u);
  pool.Put(a);
  pool.Put(b);
  // Trimming gives back the untouched block first (the touched one already paid its first touches).
  pool.Trim(1u << 20);
  auto c = pool.Get(1u << 20);
  EXPECT_EQ(c.data, touched_block);
  EXPECT_TRUE(c.touched);
  EXPECT_EQ(pool.GetStats().free_bytes, 0u);
  pool.Put(c);
  // The bound holds whatever the mix.
  std::vector<BufferPool::Block> blocks;
  for (int i = 0; i < 12; ++i) blocks.push_back(pool.Get(4u << 20));
  for (size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].touched = i % 2 == 0;
    pool.Put(blocks[i]);
  }
  EXPECT_LE(pool.GetStats().free_bytes, 64ull << 20);
}

TEST(BufferPoolTest, ValueBuffersCarryTheTouchedMarkBackToThePool) {
  BufferPool::Default().Trim(0);
  char* p = nullptr;
  {
    auto v = ValueBuffer::Allocate(5u << 20);
    ASSERT_TRUE(v);
    EXPECT_FALSE(v->touched());
    v->MarkTouched();
    p = v->base();
  }
  auto v2 = ValueBuffer::Allocate(5u << 20);
  EXPECT_EQ(v2->base(), p);
  EXPECT_TRUE(v2->touched());
  auto copy = ValueBuffer::Copy(std::string(300000, 'x'));
  EXPECT_TRUE(copy->touched());  // memcpy'd into
}

}  // namespace
}  // namespace kvfs
