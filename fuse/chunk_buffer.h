// ChunkBuffer: the bytes of a staged file version, in fixed 1 MiB chunks.
//
// Chunks never move once allocated, so growing a 36 MiB value by 4 KiB pwrites never copies what was
// written, and the whole value is handed to Store::WriteRecord as a list of string_views (one per chunk)
// without a concatenation. Bytes between the old end and a write or truncate beyond it read as zeros
// (files have no holes: they are zero-filled here).
//
// Not thread-safe: the owner (a Version) guards it with its own lock.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

namespace kvfs {

class ChunkBuffer {
 public:
  static constexpr uint64_t kChunk = 1ull << 20;  // bytes

  uint64_t size() const { return size_; }
  // Bytes allocated (what the staging budget counts).
  uint64_t capacity() const { return chunks_.size() * kChunk; }

  // Sets the size; growing zero-fills [old size, n), shrinking frees the chunks past the end.
  void Resize(uint64_t n) {
    if (n > size_) {
      Reserve(n);
      Zero(size_, n);
    } else {
      chunks_.resize((n + kChunk - 1) / kChunk);
    }
    size_ = n;
  }

  // Writes len bytes at off, zero-filling a gap between the current end and off.
  void Write(uint64_t off, const char* p, size_t len) {
    if (len == 0) return;
    uint64_t end = off + len;
    Reserve(end);
    if (off > size_) Zero(size_, off);
    while (len > 0) {
      uint64_t ci = off / kChunk, co = off % kChunk;
      size_t n = std::min<uint64_t>(len, kChunk - co);
      std::memcpy(chunks_[ci].get() + co, p, n);
      off += n;
      p += n;
      len -= n;
    }
    size_ = std::max(size_, end);
  }

  // Copies up to len bytes at off into out; returns the count (short only at the end).
  size_t Read(uint64_t off, size_t len, char* out) const {
    if (off >= size_) return 0;
    len = std::min<uint64_t>(len, size_ - off);
    size_t done = 0;
    while (done < len) {
      uint64_t ci = off / kChunk, co = off % kChunk;
      size_t n = std::min<uint64_t>(len - done, kChunk - co);
      std::memcpy(out + done, chunks_[ci].get() + co, n);
      off += n;
      done += n;
    }
    return done;
  }

  // iovecs over [off, off+len) clipped to the size (valid until the next mutation).
  size_t Iov(uint64_t off, size_t len, std::vector<iovec>* iov) const {
    iov->clear();
    if (off >= size_) return 0;
    len = std::min<uint64_t>(len, size_ - off);
    size_t done = 0;
    while (done < len) {
      uint64_t ci = off / kChunk, co = off % kChunk;
      size_t n = std::min<uint64_t>(len - done, kChunk - co);
      iov->push_back(iovec{chunks_[ci].get() + co, n});
      off += n;
      done += n;
    }
    return done;
  }

  // The whole value as one view per chunk (valid until the next mutation).
  std::vector<std::string_view> Parts() const {
    std::vector<std::string_view> parts;
    uint64_t left = size_;
    for (size_t i = 0; left > 0; ++i) {
      size_t n = std::min<uint64_t>(left, kChunk);
      parts.emplace_back(chunks_[i].get(), n);
      left -= n;
    }
    return parts;
  }

  // A writable pointer to chunk i (for filling the buffer in place, e.g. from Store::Read); the caller
  // then sets the size with SetSizeUnchecked.
  char* ChunkData(size_t i) { return chunks_[i].get(); }
  void ReserveFor(uint64_t n) { Reserve(n); }
  void SetSizeUnchecked(uint64_t n) { size_ = n; }

 private:
  void Reserve(uint64_t n) {
    size_t want = (n + kChunk - 1) / kChunk;
    while (chunks_.size() < want) chunks_.emplace_back(new char[kChunk]);  // not zeroed: see Zero
  }
  void Zero(uint64_t from, uint64_t to) {
    while (from < to) {
      uint64_t ci = from / kChunk, co = from % kChunk;
      size_t n = std::min<uint64_t>(to - from, kChunk - co);
      std::memset(chunks_[ci].get() + co, 0, n);
      from += n;
    }
  }

  std::vector<std::unique_ptr<char[]>> chunks_;
  uint64_t size_ = 0;
};

}  // namespace kvfs
