// BufferPool: reused, 4 KiB-aligned, already-faulted memory for the data path (staging chunks, values
// the read path loads, blocks it verifies).
//
// Why: every byte kvfs stages or loads used to land in memory that was mapped fresh for it (glibc mmaps
// large allocations and unmaps them on free). The first touch of a fresh page costs a page fault, on a
// VM a hypervisor exit too: 20-190 us per 4 KiB page measured on the dev VM, more than the memcpy that
// follows. A 2.25 MiB store copied into fresh staging chunks, and a cold load into fresh value buffers
// (touched page by page before the O_DIRECT read), spent most of the daemon's CPU in those faults. The
// pool keeps freed blocks, with their pages present, and hands them out again; a block that must be
// made fresh is mapped with MAP_POPULATE (the kernel fills every page in one call, no per-page trap).
//
// Shape: blocks of >= kMinPooled bytes are rounded up to a size class (4 KiB multiples: 2^k, 1.25 * 2^k,
// 1.5 * 2^k, 1.75 * 2^k, so at most 25 % over the request; 1 MiB, a staging chunk, is a class). Each
// class keeps a LIFO free list (the most recently used block, the one most likely still in the CPU's
// caches, goes out first). Smaller blocks come from posix_memalign / free (the heap keeps those).
//
// Touched or not: a block remembers whether its pages were ever accessed from user mode since they were
// mapped (Block::touched; the owner says so when it gives the block back). A block only the kernel wrote
// and read (an O_DIRECT load verified through blockstore/kernel_copy.h and replied to FUSE) stays
// untouched; a staging chunk (memcpy'd into) is touched. Get hands out touched blocks first (they cost
// nothing more to touch again); the read path verifies an untouched block through a kernel copy
// instead of in place (on the dev VM the first user access to each page of a mapping costs a
// hypervisor trap, ~3 s of CPU per GB). Trimming releases untouched blocks first.
//
// Memory bound: free blocks held by the pool total at most limit() bytes (default kDefaultLimit); a
// block returned over the limit is unmapped at once, so the pool never holds more than limit() of
// memory nobody uses, and memory a burst needed goes back to the system when the burst ends. Trim(n)
// returns free blocks until at most n bytes are held. Blocks in use are not the pool's to bound: their
// owners (the LRU's capacity, the staging budget) bound them.
//
// Errors: Get returns {nullptr, 0} when memory is exhausted. Thread safety: every method may be called
// from many threads at once (one mutex; a few operations per chunk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace kvfs {

class BufferPool {
 public:
  static constexpr size_t kMinPooled = 64 * 1024;          // smaller blocks: the heap
  static constexpr size_t kDefaultLimit = 256ull << 20;    // free bytes held, at most

  struct Block {
    char* data = nullptr;
    size_t capacity = 0;  // bytes usable at data; >= the size asked for; 4 KiB multiple
    bool touched = false; // its pages were accessed from user mode since they were mapped
  };

  struct Stats {
    uint64_t reused = 0;       // Get answered from a free list
    uint64_t reused_untouched = 0;  // of those, blocks never accessed from user mode
    uint64_t fresh = 0;        // Get that mapped (or allocated) new memory
    uint64_t fresh_bytes = 0;  // bytes of those
    uint64_t released = 0;     // blocks unmapped because the pool was over its limit (or trimmed)
    uint64_t free_bytes = 0;   // gauge: bytes of free blocks held now
  };

  // The process's pool (the daemon's data path shares one).
  static BufferPool& Default();

  explicit BufferPool(size_t limit = kDefaultLimit) : limit_(limit) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A block of at least `size` bytes (size 0 is treated as 1), 4 KiB aligned, contents unspecified
  // (a reused block holds old bytes), every page present. A touched free block of the class if there is
  // one, else an untouched one, else a fresh mapping (touched = false). Blocks under kMinPooled come
  // from the heap and say touched.
  Block Get(size_t size);
  // Gives a block from Get back; b.touched is what the caller knows (set it when user code read or
  // wrote the pages, or may have). Null blocks are ignored.
  void Put(Block b);

  // The capacity Get(size) hands out.
  static size_t ClassCapacity(size_t size);

  void SetLimit(size_t bytes);
  size_t limit() const;
  // Unmaps free blocks (largest first) until at most keep_bytes are held.
  void Trim(size_t keep_bytes);
  Stats GetStats() const;

 private:
  static void Release(Block b);
  void TrimLocked(size_t keep_bytes, std::vector<Block>* out);

  mutable std::mutex mu_;
  size_t limit_;
  // Free blocks by class capacity, ascending (a handful of classes in use at a time); per class the
  // untouched [0] and touched [1] blocks, each a LIFO list.
  struct FreeClass {
    size_t capacity;
    std::vector<Block> lists[2];
  };
  std::vector<FreeClass> free_;
  Stats stats_;
};

}  // namespace kvfs
