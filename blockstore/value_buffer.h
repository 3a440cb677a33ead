// ValueBuffer: the bytes of one record value as the read path holds them (LRU entries, pinned replies).
//
// Why not std::string: a cache-miss load of a 2.25-36 MiB value into std::string::resize() zero-fills
// the whole buffer (a wasted pass over every byte, plus the page faults of a fresh mapping) before the
// read overwrites it, and std::string's memory is not 4 KiB aligned, so the load had to read into a
// scratch buffer and copy. A ValueBuffer is one 4 KiB-aligned allocation of `prefix + size` bytes, left
// uninitialised; the loader reads the record's metadata block(s) and the value straight into it with one
// pread (O_DIRECT-able), verifies the value in place, and exposes [prefix, prefix + size) as the value.
// The allocation comes from BufferPool::Default() and goes back to it when the last owner lets go
// (blockstore/buffer_pool.h): its pages are present (reused, or populated when mapped), so neither the
// read into it nor the FUSE reply from it takes a page fault per 4 KiB. touched() says whether user code
// may have accessed its pages (from the pool's Block::touched; MarkTouched when it does): a loader
// verifies an untouched buffer through a kernel copy (blockstore/kernel_copy.h), so a value loaded into
// fresh memory, cached and replied from is never accessed from user mode at all.
//
// Thread safety: a ValueBuffer is filled by one thread (the loader) before it is shared; afterwards it is
// read-only (LruCache::Value is a shared_ptr<const ValueBuffer>) and may be read concurrently.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

namespace kvfs {

class ValueBuffer {
 public:
  // A buffer with `prefix` bytes of room before the value and `size` value bytes; the allocation (base())
  // is 4 KiB aligned, its capacity at least prefix + size rounded up to 4 KiB (the pool's size class);
  // contents uninitialised. nullptr when memory is exhausted.
  static std::shared_ptr<ValueBuffer> Allocate(size_t size, size_t prefix = 0);
  // A buffer holding a copy of bytes (tests, small values).
  static std::shared_ptr<ValueBuffer> Copy(std::string_view bytes);

  ~ValueBuffer();
  ValueBuffer(const ValueBuffer&) = delete;
  ValueBuffer& operator=(const ValueBuffer&) = delete;

  // The value bytes.
  char* data() { return base_ + prefix_; }
  const char* data() const { return base_ + prefix_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data(), size_}; }
  // The whole allocation (prefix + value + padding to 4 KiB): where a loader reads into.
  char* base() { return base_; }
  const char* base() const { return base_; }
  size_t prefix() const { return prefix_; }
  // Changes where the value starts within the allocation (the loader, before sharing the buffer).
  // Requires prefix + size <= capacity().
  void SetWindow(size_t prefix, size_t size) { prefix_ = prefix; size_ = size; }
  size_t capacity() const { return capacity_; }
  // Whether user code may have accessed the allocation's pages (see above). Whoever reads or writes the
  // bytes with the CPU (memcpy, hashing in place) calls MarkTouched; the pool learns it at the free.
  bool touched() const { return touched_; }
  void MarkTouched() { touched_ = true; }

 private:
  ValueBuffer(char* base, size_t capacity, size_t prefix, size_t size, bool touched)
      : base_(base), capacity_(capacity), prefix_(prefix), size_(size), touched_(touched) {}
  char* base_;
  size_t capacity_;
  size_t prefix_;
  size_t size_;
  bool touched_;
};

}  // namespace kvfs
