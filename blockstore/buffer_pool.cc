#include "blockstore/buffer_pool.h"

#include <stdlib.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>

#include "blockstore/types.h"

namespace kvfs {

BufferPool& BufferPool::Default() {
  static BufferPool* pool = new BufferPool();  // never destroyed: buffers may outlive static destructors
  return *pool;
}

BufferPool::~BufferPool() { Trim(0); }

size_t BufferPool::ClassCapacity(size_t size) {
  if (size == 0) size = 1;
  if (size < kMinPooled) return AlignUp(size);
  // Four classes per power of two: 2^k * {1, 1.25, 1.5, 1.75}, rounded to 4 KiB (exact for >= 64 KiB).
  const size_t top = std::bit_floor(size);
  const size_t step = top / 4;
  size_t cap = top;
  while (cap < size) cap += step;
  return AlignUp(cap);
}

BufferPool::Block BufferPool::Get(size_t size) {
  const size_t cap = ClassCapacity(size);
  if (cap < kMinPooled) {
    void* p = nullptr;
    if (posix_memalign(&p, kAlignment, cap) != 0) return {};
    return {static_cast<char*>(p), cap, true};
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& fc : free_) {
      if (fc.capacity != cap) continue;
      for (int t = 1; t >= 0; --t) {  // touched blocks first
        auto& list = fc.lists[t];
        if (list.empty()) continue;
        Block b = list.back();
        list.pop_back();
        stats_.reused++;
        if (!b.touched) stats_.reused_untouched++;
        stats_.free_bytes -= cap;
        return b;
      }
    }
    stats_.fresh++;
    stats_.fresh_bytes += cap;
  }
  // MAP_POPULATE: the kernel faults every page in during the call, instead of one trap per page on
  // first touch (and an O_DIRECT read into the block then pins present pages: no mmap-lock convoy).
  void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return {};
  return {static_cast<char*>(p), cap, false};
}

void BufferPool::Release(Block b) {
  if (b.capacity < kMinPooled) {
    free(b.data);
  } else {
    munmap(b.data, b.capacity);
  }
}

void BufferPool::Put(Block b) {
  if (!b.data) return;
  if (b.capacity < kMinPooled) return Release(b);
  std::vector<Block> out;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (b.capacity > limit_) {
      stats_.released++;
      out.push_back(b);
    } else {
      auto it = std::lower_bound(free_.begin(), free_.end(), b.capacity,
                                 [](const FreeClass& e, size_t c) { return e.capacity < c; });
      if (it == free_.end() || it->capacity != b.capacity) it = free_.insert(it, FreeClass{b.capacity, {}});
      it->lists[b.touched ? 1 : 0].push_back(b);
      stats_.free_bytes += b.capacity;
      // Over the limit: drop the least recently returned blocks of the largest classes first.
      if (stats_.free_bytes > limit_) TrimLocked(limit_, &out);
    }
  }
  for (const Block& r : out) Release(r);  // munmap outside the lock
}

void BufferPool::TrimLocked(size_t keep_bytes, std::vector<Block>* out) {
  // Untouched blocks first (a touched one saved the first-touch cost of its pages), largest classes
  // first, and in each list the least recently returned first (the block returned last stays warm).
  for (int t = 0; t <= 1; ++t) {
    for (auto it = free_.rbegin(); it != free_.rend() && stats_.free_bytes > keep_bytes; ++it) {
      auto& list = it->lists[t];
      size_t n = 0;
      while (n < list.size() && stats_.free_bytes > keep_bytes) {
        out->push_back(list[n]);
        stats_.free_bytes -= list[n].capacity;
        stats_.released++;
        n++;
      }
      list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(n));
    }
  }
}

void BufferPool::Trim(size_t keep_bytes) {
  std::vector<Block> out;
  {
    std::lock_guard<std::mutex> g(mu_);
    TrimLocked(keep_bytes, &out);
  }
  for (const Block& r : out) Release(r);
}

void BufferPool::SetLimit(size_t bytes) {
  std::vector<Block> out;
  {
    std::lock_guard<std::mutex> g(mu_);
    limit_ = bytes;
    TrimLocked(limit_, &out);
  }
  for (const Block& r : out) Release(r);
}

size_t BufferPool::limit() const {
  std::lock_guard<std::mutex> g(mu_);
  return limit_;
}

BufferPool::Stats BufferPool::GetStats() const {
  std::lock_guard<std::mutex> g(mu_);
  return stats_;
}

}  // namespace kvfs
