// ChunkBuffer: the bytes of a staged file version, in fixed 1 MiB chunks.
//
// Each chunk slot is either
//   * in RAM: a 1 MiB allocation that never moves, so growing a 36 MiB value by 4 KiB pwrites never
//     copies what was written, and an all-RAM value is handed to Store::WriteRecord as a list of
//     string_views (one per chunk) without a concatenation; or
//   * a *reference* to bytes already on the backing store: value bytes [off, off + n) of the record at
//     `loc` hold the chunk's bytes (n = the chunk's bytes below size()). References come from the
//     committed value a copy-on-write version starts from (SetBacking), from spills of staged
//     chunks to provisional records (ToRef; SpillDirty when a chunk holds clean pages: only its dirty
//     pages are written), and from a FLUSH, whose clean full chunks leave RAM (ReleaseClean).
//   * *mapped* (SetBacking of an ExtentMap, docs/design.md §13): a chunk of a committed version made
//     of several extents and/or holes, read (and materialized) through that map;
//   * a *hole*: a chunk that reads as zeros and holds no RAM. Growing a file (truncate up, a write far
//     beyond the end) makes the chunks it skips holes, so ftruncate(fd, 1 TiB) costs no memory, and
//     Punch (fallocate PUNCH_HOLE) makes the chunks it covers whole holes; a write into a hole
//     allocates that one chunk. A hole a FLUSH in extent form finds stays a hole of
//     the committed map (docs/semantics.md "Holes"); NextData/NextHole answer lseek from them.
// Bytes between the old end and a write or truncate beyond it read as zeros.
//
// Reading or changing a referenced chunk goes through a Fetch callback (the FUSE layer passes one that
// calls Store::Read, so every byte is verified against its block checksum). A write or a growing resize
// that touches a referenced chunk first copies the chunk into RAM (*materializes* it: one read of up to
// 1 MiB), unless the write replaces every byte of it. The methods without a Fetch are for all-RAM
// buffers (they must not touch a referenced chunk).
//
// Dirty pages (the extent form of a version, docs/design.md §13; what FLUSH appends, fuse/commit.cc): a RAM chunk
// remembers what lies *under* it — the referenced bytes it was copied from (base), or a hole — and which
// 4 KiB pages changed since (written, or zeroed by a growing resize over base bytes). ToExtentMap(rec)
// describes the version as base extents + holes + the dirty pages, which DirtyParts() lists in the order
// they would be appended as ONE record `rec`: a 2 MiB pwrite into a 64 MiB copy-on-write version gives
// 2 MiB of dirty parts, a 50 KiB pwrite at 1.6 MB of a new file 53,760 bytes (the pages it touches;
// the rest is a hole).
//
// Sealed pages (docs/design.md §13 "Sealed closes"): a close of a few dirty pages seals them (Seal)
// instead of appending them; ToExtentMapSealed(rec) is then the version as of that close while a writer
// that joined writes other pages, and RebaseSealed makes only the sealed pages clean once they are a
// record. While pages are sealed, Write/Resize/Punch refuse what would change that state (SealConflicts).
//
// Memory: RAM chunks come from BufferPool::Default() and go back to it when freed (spill, commit,
// truncate, the version's end), so a store's copy into staging lands in pages that are already present
// instead of freshly mapped ones (blockstore/buffer_pool.h says why that matters and how it is bounded).
//
// Errors: the Fetch's Status (EIO for a checksum mismatch, NotFound for a dropped segment); on an error
// the buffer is unchanged. Not thread-safe: the owner (a Version) guards it with its own lock.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <bitset>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "blockstore/buffer_pool.h"
#include "blockstore/extent_map.h"
#include "blockstore/status.h"
#include "blockstore/types.h"

namespace kvfs {

// One 1 MiB staging chunk from the buffer pool; returns it to the pool when destroyed (touched: writes
// copy into it).
struct PooledChunkDeleter {
  void operator()(char* p) const { BufferPool::Default().Put({p, BufferPool::ClassCapacity(1ull << 20), true}); }
};
using ChunkPtr = std::unique_ptr<char, PooledChunkDeleter>;
inline ChunkPtr NewChunk() { return ChunkPtr(BufferPool::Default().Get(1ull << 20).data); }

class ChunkBuffer {
 public:
  static constexpr uint64_t kChunk = 1ull << 20;  // bytes
  static constexpr uint64_t kPage = 4096;          // dirty-tracking granularity, bytes

  // Reads exactly len bytes of the value at loc, starting at value offset off, into out.
  using Fetch = std::function<Status(const Location& loc, uint64_t off, size_t len, char* out)>;

  uint64_t size() const { return size_; }
  // Bytes allocated in RAM (what the staging budget counts).
  uint64_t capacity() const { return ram_chunks_ * kChunk; }
  // Bytes below size() held by references (on the backing store).
  uint64_t referenced_bytes() const {
    uint64_t n = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].ram && !slots_[i].hole) n += ChunkLen(i);
    }
    return n;
  }
  // True when some chunk is not in RAM (referenced or a hole): Parts() may not be used, Read may.
  bool has_refs() const { return ram_chunks_ < slots_.size(); }

  // Replaces the content with references to the first `size` bytes of the value at loc (chunk i ->
  // value offset i * kChunk). size must be <= loc.length.
  void SetBacking(const Location& loc, uint64_t size) {
    sealed_ = false;
    base_map_.reset();
    slots_.clear();
    ram_chunks_ = 0;
    size_ = size;
    for (uint64_t off = 0; off < size; off += kChunk) slots_.push_back(Slot{nullptr, loc, off});
  }

  // Replaces the content with the committed version `map` (design.md §13): a chunk that one extent
  // covers whole is a plain reference to its record, a chunk without data a hole, any other chunk is
  // *mapped* (read through the map: its extents' records, zeros in its holes). Nothing is read.
  void SetBacking(std::shared_ptr<const ExtentMap> map) {
    sealed_ = false;
    slots_.clear();
    ram_chunks_ = 0;
    size_ = map->size();
    base_map_ = std::move(map);
    for (uint64_t off = 0; off < size_; off += kChunk) slots_.push_back(BackingSlot(off / kChunk));
  }

  // Sets the size; growing zero-fills [old size, n), shrinking frees the chunks past the end.
  Status Resize(uint64_t n, const Fetch& fetch) {
    if (sealed_ && n != size_) return Status::IOError("chunk buffer: resize of a version with sealed pages", EIO);
    if (n > size_) {
      if (size_ % kChunk != 0 && !slots_[size_ / kChunk].hole) {
        KVFS_RETURN_IF_ERROR(Materialize(size_ / kChunk, fetch));
      }
      Reserve(n);  // new chunks are holes
      MarkZeroedOverBase(size_, n);
      Zero(size_, n);
    } else {
      size_t keep = (n + kChunk - 1) / kChunk;
      for (size_t i = keep; i < slots_.size(); ++i) {
        if (slots_[i].ram) ram_chunks_--;
      }
      slots_.resize(keep);
      // The base under the last kept chunk ends at the new end: bytes a later growth zeroes there are a
      // hole, not base bytes.
      if (keep > 0 && slots_[keep - 1].ram) {
        slots_[keep - 1].base_len = std::min<uint64_t>(slots_[keep - 1].base_len, n - (keep - 1) * kChunk);
        // Pages wholly past the end hold nothing to write (a growth zeroes them: a hole or zeros
        // over nothing).
        for (uint64_t pg = (n - (keep - 1) * kChunk + kPage - 1) / kPage; pg < kChunk / kPage; ++pg) {
          slots_[keep - 1].dirty.reset(pg);
        }
      }
    }
    size_ = n;
    return Status::OK();
  }
  void Resize(uint64_t n) { (void)Resize(n, nullptr); }

  // Writes len bytes at off, zero-filling a gap between the current end and off.
  Status Write(uint64_t off, const char* p, size_t len, const Fetch& fetch) {
    if (len == 0) return Status::OK();
    if (SealConflicts(off, len)) return Status::IOError("chunk buffer: write over sealed pages", EIO);
    const uint64_t end = off + len;
    const uint64_t new_size = std::max(size_, end);
    const size_t old_slots = slots_.size();
    // Referenced chunks the write (or the zero-filled gap before it) changes only in part: copy them
    // into RAM first. Chunks it replaces whole just get fresh RAM.
    const uint64_t first = std::min(off, size_) / kChunk, last = (end - 1) / kChunk;
    // Every fresh chunk this write needs is taken first, so running out of memory changes nothing.
    // New chunks: from the one holding off (the gap before it stays holes) to the last one written.
    const uint64_t first_new = std::max<uint64_t>(old_slots, off / kChunk);
    std::vector<ChunkPtr> fresh;
    for (uint64_t ci = first; ci <= last; ++ci) {
      const bool whole_ref = ci < old_slots && !slots_[ci].ram && off <= ci * kChunk &&
                             end >= std::min(ci * kChunk + kChunk, new_size);
      if (whole_ref || ci >= first_new) {
        fresh.push_back(NewChunk());
        if (!fresh.back()) return Status::IOError("chunk buffer: out of memory", ENOMEM);
      }
    }
    size_t next = 0;
    for (uint64_t ci = first; ci <= last && ci < old_slots; ++ci) {
      if (slots_[ci].ram) continue;
      const uint64_t cs = ci * kChunk, ce = std::min(cs + kChunk, new_size);
      if (off <= cs && end >= ce) {
        slots_[ci].ram = std::move(fresh[next++]);
        slots_[ci].loc = Location{};
        slots_[ci].hole = false;
        slots_[ci].base_len = 0;  // replaced whole: nothing under it is read again
        slots_[ci].base_mapped = false;
        slots_[ci].mapped = false;
        slots_[ci].dirty.reset();
        slots_[ci].sealed.reset();
        slots_[ci].holed.reset();
        ram_chunks_++;
      } else {
        Status s = Materialize(ci, fetch);
        if (!s.ok()) return s;  // chunks materialized so far keep the same bytes: nothing changed
      }
    }
    Reserve(end);  // chunks past the old end start as holes; the ones this write touches get RAM
    for (uint64_t ci = first_new; ci <= last; ++ci) {
      // Not zeroed: Zero() below clears the gap before off; bytes past the new end are never read.
      slots_[ci].ram = std::move(fresh[next++]);
      slots_[ci].hole = false;
      slots_[ci].base_len = 0;
      slots_[ci].base_mapped = false;
      slots_[ci].mapped = false;
      slots_[ci].dirty.reset();
      slots_[ci].sealed.reset();
      slots_[ci].holed.reset();
      ram_chunks_++;
    }
    if (off > size_) {
      MarkZeroedOverBase(size_, off);
      Zero(size_, off);
    }
    MarkDirty(off, end);
    while (len > 0) {
      uint64_t ci = off / kChunk, co = off % kChunk;
      size_t n = std::min<uint64_t>(len, kChunk - co);
      std::memcpy(slots_[ci].ram.get() + co, p, n);
      off += n;
      p += n;
      len -= n;
    }
    size_ = new_size;
    return Status::OK();
  }
  void Write(uint64_t off, const char* p, size_t len) { (void)Write(off, p, len, nullptr); }

  // Bytes of RAM that Write(off, len) would take now: one chunk for each chunk it touches (from the one
  // holding the current end, when it writes past it) that is not in RAM yet; holes it skips take none.
  uint64_t WriteNeed(uint64_t off, size_t len) const {
    if (len == 0) return 0;
    const uint64_t end = off + len, old_slots = slots_.size();
    const uint64_t first = std::min(off, size_) / kChunk, last = (end - 1) / kChunk;
    const uint64_t first_new = std::max<uint64_t>(old_slots, off / kChunk);
    uint64_t n = 0;
    for (uint64_t ci = first; ci <= last && ci < old_slots; ++ci) {
      if (!slots_[ci].ram) n++;
    }
    if (last >= first_new) n += last - first_new + 1;
    return n * kChunk;
  }

  // fallocate PUNCH_HOLE (the size never changes): [off, off + len) clipped to the size reads as zeros.
  // A chunk it covers whole (up to the end of the file) becomes a hole (its RAM freed); in a chunk it
  // covers in part (materialized first: one read of up to 1 MiB, at most two such chunks) the bytes
  // are zeroed, a page the range covers whole becomes a hole (over base bytes too: `holed`, the base
  // is not used there any more), and the pages it covers in part over base bytes are written zeros
  // (dirty). On an error (a fetch, no memory) the bytes are unchanged (a chunk may be materialized,
  // with the same bytes).
  Status Punch(uint64_t off, uint64_t len, const Fetch& fetch) {
    if (len == 0 || off >= size_) return Status::OK();
    if (sealed_) return Status::IOError("chunk buffer: punch of a version with sealed pages", EIO);
    const uint64_t end = std::min(size_, off + std::min(len, size_ - off));
    const size_t first = off / kChunk, last = (end - 1) / kChunk;
    for (size_t ci : {first, last}) {  // the partly covered chunks: into RAM first, so nothing fails later
      const uint64_t cs = ci * kChunk;
      const bool whole = off <= cs && end >= cs + ChunkLen(ci);
      if (!whole && !slots_[ci].hole) KVFS_RETURN_IF_ERROR(Materialize(ci, fetch));
    }
    for (size_t ci = first; ci <= last; ++ci) {
      Slot& s = slots_[ci];
      const uint64_t cs = ci * kChunk, clen = ChunkLen(ci);
      const uint64_t lo = std::max(off, cs) - cs, hi = std::min(end, cs + clen) - cs;
      if (lo == 0 && hi == clen) {
        if (s.ram) ram_chunks_--;
        s = Slot{nullptr, Location{}, 0, true};
        continue;
      }
      if (s.hole) continue;  // zeros already
      std::memset(s.ram.get() + lo, 0, hi - lo);
      const bool has_base = s.base_mapped || !s.base.empty();
      for (uint64_t pg = lo / kPage; pg * kPage < hi; ++pg) {
        const uint64_t ps = pg * kPage, pe = std::min(clen, ps + kPage);
        if (lo <= ps && hi >= pe) {
          s.dirty.reset(pg);  // covered whole: a hole (over base bytes too)
          if (has_base && ps < s.base_len) s.holed.set(pg);
        } else if (has_base && ps < s.base_len) {
          s.dirty.set(pg);  // zeros over part of a page of base bytes
        }  // else: part of a page over nothing; its other bytes keep their state
      }
    }
    return Status::OK();
  }

  // Copies up to len bytes at off into out; *got = the count (short only at the end).
  Status Read(uint64_t off, size_t len, char* out, const Fetch& fetch, size_t* got) const {
    *got = 0;
    if (off >= size_) return Status::OK();
    len = std::min<uint64_t>(len, size_ - off);
    size_t done = 0;
    while (done < len) {
      uint64_t ci = off / kChunk, co = off % kChunk;
      size_t n = std::min<uint64_t>(len - done, kChunk - co);
      const Slot& s = slots_[ci];
      if (s.ram) {
        std::memcpy(out + done, s.ram.get() + co, n);
      } else if (s.hole) {
        std::memset(out + done, 0, n);
      } else if (s.mapped) {
        if (!fetch) return Status::IOError("chunk buffer: mapped chunk without a fetch");
        size_t got = 0;
        KVFS_RETURN_IF_ERROR(ReadExtents(*base_map_, off, n, out + done, fetch, &got));
      } else {
        if (!fetch) return Status::IOError("chunk buffer: referenced chunk without a fetch");
        KVFS_RETURN_IF_ERROR(fetch(s.loc, s.off + co, n, out + done));
      }
      off += n;
      done += n;
    }
    *got = done;
    return Status::OK();
  }
  size_t Read(uint64_t off, size_t len, char* out) const {
    size_t got = 0;
    (void)Read(off, len, out, nullptr, &got);
    return got;
  }

  // True when [off, off+len) clipped to the size is all in RAM (Iov may be used).
  bool InRam(uint64_t off, size_t len) const {
    if (off >= size_ || len == 0) return true;
    uint64_t end = std::min<uint64_t>(off + len, size_);
    for (uint64_t ci = off / kChunk; ci <= (end - 1) / kChunk; ++ci) {
      if (!slots_[ci].ram) return false;
    }
    return true;
  }

  // iovecs over [off, off+len) clipped to the size (valid until the next mutation). Requires InRam.
  size_t Iov(uint64_t off, size_t len, std::vector<iovec>* iov) const {
    iov->clear();
    if (off >= size_) return 0;
    len = std::min<uint64_t>(len, size_ - off);
    size_t done = 0;
    while (done < len) {
      uint64_t ci = off / kChunk, co = off % kChunk;
      size_t n = std::min<uint64_t>(len - done, kChunk - co);
      iov->push_back(iovec{slots_[ci].ram.get() + co, n});
      off += n;
      done += n;
    }
    return done;
  }

  // The whole value as one view per chunk (valid until the next mutation). Requires !has_refs().
  std::vector<std::string_view> Parts() const {
    std::vector<std::string_view> parts;
    for (size_t i = 0; i < slots_.size(); ++i) parts.emplace_back(slots_[i].ram.get(), ChunkLen(i));
    return parts;
  }

  // True when the whole value is exactly one record's value: every chunk i references value offset
  // i * kChunk of the same record and that record's length is size() (> 0). *loc = that record.
  bool WholeRecord(Location* loc) const {
    if (size_ == 0 || ram_chunks_ != 0) return false;
    const Location& l = slots_[0].loc;
    if (l.length != size_) return false;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].hole || slots_[i].off != i * kChunk || !(slots_[i].loc == l)) return false;
    }
    *loc = l;
    return true;
  }

  // ---- spilling ----
  // Indices of the chunks in RAM, in file order.
  std::vector<size_t> RamChunks() const {
    std::vector<size_t> out;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].ram) out.push_back(i);
    }
    return out;
  }
  // True when chunk i is filled to its end (not the partial last chunk that appends still grow).
  bool ChunkFull(size_t i) const { return (i + 1) * kChunk <= size_; }
  // The bytes of RAM chunk i below size() (valid until the next mutation).
  std::string_view ChunkView(size_t i) const { return std::string_view(slots_[i].ram.get(), ChunkLen(i)); }
  // Frees RAM chunk i: its bytes are now value bytes [off, off + ChunkLen) of the record at loc.
  void ToRef(size_t i, const Location& loc, uint64_t off) {
    if (slots_[i].ram) ram_chunks_--;
    slots_[i] = Slot{nullptr, loc, off, false};
  }
  // True when every page of RAM chunk i is dirty: spilling it whole writes nothing twice.
  bool ChunkAllDirty(size_t i) const { return slots_[i].dirty.count() == (ChunkLen(i) + kPage - 1) / kPage; }
  // The dirty pages of the RAM chunks `pick` (ascending), in file order, as views (valid until the next
  // mutation): what a spill appends when some of those chunks are not all dirty (SpillDirty).
  std::vector<std::string_view> DirtyPartsOf(const std::vector<size_t>& pick) const {
    std::vector<std::string_view> out;
    std::vector<bool> picked(slots_.size());
    for (size_t i : pick) picked[i] = true;
    ForEachRun([&](size_t i, uint64_t lo, uint64_t hi, RunKind k) {
      if (k == RunKind::kDirty && picked[i]) out.emplace_back(slots_[i].ram.get() + lo, hi - lo);
    });
    return out;
  }
  // After DirtyPartsOf(pick) was appended as the record `rec` (empty: there were no dirty pages): the
  // chunks in `pick` leave RAM and read the same bytes as before, their dirty pages from `rec`, their
  // clean pages from what lies under them (a base record, the base map, or a hole), through a new map
  // of the whole version (the map ToExtentMap would give, except that the dirty pages of RAM chunks not
  // picked are holes in it: those chunks stay in RAM and read those pages from RAM, never through the
  // map). Nothing is read; a clean page is never written again. O(chunks + extents of the base map).
  void SpillDirty(const std::vector<size_t>& pick, const Location& rec) {
    std::vector<bool> picked(slots_.size());
    for (size_t i : pick) picked[i] = true;
    auto m = std::make_shared<ExtentMap>(size_);
    uint64_t rec_off = 0;
    ForEachRun([&](size_t i, uint64_t lo, uint64_t hi, RunKind k) {
      const Slot& s = slots_[i];
      const uint64_t cs = i * kChunk;
      if (k == RunKind::kDirty) {
        if (!picked[i]) return;
        m->PushBack(Extent{cs + lo, hi - lo, rec, rec_off});
        rec_off += hi - lo;
      } else if (k == RunKind::kRef) {
        m->PushBack(Extent{cs + lo, hi - lo, s.loc, s.off + lo});
      } else if (k == RunKind::kBase) {
        m->PushBack(Extent{cs + lo, hi - lo, s.base, s.base_off + lo});
      } else if (k == RunKind::kMapped) {
        for (const ExtentMap::Piece& p : base_map_->Pieces(cs + lo, hi - lo)) {
          if (p.extent) m->PushBack(Extent{p.file_offset, p.length, p.extent->record, p.value_offset});
        }
      }
    });
    m->Resize(size_);
    // Every chunk that reads through the map (mapped slots, base_mapped pages of RAM chunks) finds the
    // same bytes at the same offsets in m: m was made from them.
    base_map_ = std::move(m);
    for (size_t i : pick) {
      if (slots_[i].ram) ram_chunks_--;
      slots_[i] = BackingSlot(i);
    }
  }
  // Frees the RAM of every full chunk (not the partial last one, which appends still grow) that holds
  // no dirty page and no punched page: its bytes are exactly what lies under it (what a FLUSH just
  // wrote, Rebase / RebaseWhole), so it becomes a reference to that again (plain, mapped, or a hole),
  // as a spill would make it, without any I/O. Returns the bytes freed. A later write into such a chunk
  // copies it back (Materialize: one read of up to 1 MiB, or none when it replaces the chunk whole).
  uint64_t ReleaseClean() {
    uint64_t freed = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.ram || !ChunkFull(i) || s.dirty.any() || s.holed.any()) continue;
      if (s.base_mapped) {
        if (s.base_len != ChunkLen(i)) continue;  // zeros past the base: not one piece of the map
        s = BackingSlot(i);
      } else if (!s.base.empty()) {
        if (s.base_len != ChunkLen(i)) continue;
        s = Slot{nullptr, s.base, s.base_off, false};
      } else {
        s = Slot{nullptr, Location{}, 0, true};  // nothing under it, nothing written: zeros
      }
      ram_chunks_--;
      freed += kChunk;
    }
    return freed;
  }

  // ---- the extent form (see "Dirty pages" above) ----
  // The dirty bytes, in file order, as views into RAM chunks (valid until the next mutation): what a
  // FLUSH in extent form appends as one record. Each view is a run of dirty pages of one chunk, clipped
  // to the size.
  std::vector<std::string_view> DirtyParts() const {
    std::vector<std::string_view> out;
    ForEachRun([&](size_t i, uint64_t lo, uint64_t hi, RunKind k) {
      if (k == RunKind::kDirty) out.emplace_back(slots_[i].ram.get() + lo, hi - lo);
    });
    return out;
  }
  uint64_t DirtyBytes() const {
    uint64_t n = 0;
    for (auto v : DirtyParts()) n += v.size();
    return n;
  }
  // After a FLUSH in extent form appended DirtyParts() as a record and `map` = ToExtentMap(that record):
  // the bytes are now `map` exactly. Every RAM chunk keeps its bytes, with nothing dirty and `map` under
  // it, so the next DirtyParts() / ToExtentMap() count only what is written after this (N ranks closing
  // one by one each append their own slice, not everything written so far). Chunks not in RAM read the
  // same bytes through `map` as before (it was built from them). refs_too (a FLUSH that copied extents
  // of other records into its record: the compaction copies): the referenced and mapped chunks are
  // made again from `map`, as SetBacking(map) makes them, so they no longer name the records the copies
  // replaced (a later FLUSH's map would bring them back).
  void Rebase(std::shared_ptr<const ExtentMap> map, bool refs_too = false) {
    sealed_ = false;
    base_map_ = std::move(map);
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.ram) {
        if (refs_too && !s.hole) s = BackingSlot(i);
        continue;
      }
      s.base = Location{};
      s.base_off = 0;
      s.base_len = ChunkLen(i);
      s.base_mapped = true;
      s.dirty.reset();
      s.sealed.reset();
      s.holed.reset();  // the map has those holes now
    }
  }

  // After a FLUSH wrote the whole value as one record `rec` (Parts(): every chunk i is value bytes
  // [i * kChunk, ...) of rec): every RAM chunk keeps its bytes, clean, with rec under it, so the next
  // DirtyParts() / ToExtentMap() count only what is written after this (a file reopened for writing
  // before its first close committed, or written on after an fsync, appends only its changes, not the
  // whole file again). Chunks not in RAM (holes, references a spill made meanwhile) are unchanged.
  // O(chunks), nothing read or copied.
  void RebaseWhole(const Location& rec) {
    sealed_ = false;
    bool mapped_left = false;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.ram) {
        mapped_left = mapped_left || s.mapped;
        continue;
      }
      s.base = rec;
      s.base_off = i * kChunk;
      s.base_len = ChunkLen(i);
      s.base_mapped = false;
      s.dirty.reset();
      s.sealed.reset();
      s.holed.reset();
    }
    if (!mapped_left) base_map_.reset();
  }

  // ---- sealed pages: a close whose record waits for its deferred commit (fuse/commit.cc) ----
  // Seal() marks every dirty page *sealed*: the version as of that close is ToExtentMapSealed(rec), rec
  // = SealedParts() appended as one record, whatever is written after it. Until the sealed pages are
  // appended (RebaseSealed, or a FLUSH of everything: Rebase / RebaseWhole) only writes that leave that
  // state derivable are allowed (SealConflicts is false): within the size, over no sealed page, and not
  // replacing a chunk that is not in RAM whole (its RAM copy would have nothing under it); no resize, no
  // punch, no spill (the caller appends the sealed pages first). Seal() again (another close) seals
  // every page dirty then. Returns the sealed bytes.
  uint64_t Seal() {
    uint64_t n = 0;
    for (Slot& s : slots_) {
      if (s.ram) s.sealed = s.dirty;
    }
    ForEachRun([&](size_t, uint64_t lo, uint64_t hi, RunKind k) {
      if (k == RunKind::kDirty) n += hi - lo;
    });
    sealed_ = true;
    return n;
  }
  bool sealed() const { return sealed_; }
  // The sealed state is superseded (a FLUSH recorded everything written up to a later point without
  // rebasing): no page is sealed any more; the dirty pages stay dirty.
  void Unseal() {
    sealed_ = false;
    for (Slot& s : slots_) s.sealed.reset();
  }
  // True when Write(off, len) would change what ToExtentMapSealed describes (see Seal).
  bool SealConflicts(uint64_t off, uint64_t len) const {
    if (!sealed_ || len == 0) return false;
    if (off > size_ || len > size_ - off) return true;
    const uint64_t end = off + len;
    for (uint64_t ci = off / kChunk; ci <= (end - 1) / kChunk; ++ci) {
      const Slot& s = slots_[ci];
      const uint64_t cs = ci * kChunk;
      if (!s.ram) {
        if (off <= cs && end >= cs + ChunkLen(ci)) return true;
        continue;
      }
      const uint64_t lo = std::max(off, cs) - cs, hi = std::min(end, cs + kChunk) - cs;
      for (uint64_t pg = lo / kPage; pg * kPage < hi; ++pg) {
        if (s.sealed.test(pg)) return true;
      }
    }
    return false;
  }
  // The sealed bytes in file order (views into RAM chunks, valid until the next mutation).
  std::vector<std::string_view> SealedParts() const {
    std::vector<std::string_view> out;
    ForEachRun(
        [&](size_t i, uint64_t lo, uint64_t hi, RunKind k) {
          if (k == RunKind::kDirty) out.emplace_back(slots_[i].ram.get() + lo, hi - lo);
        },
        /*sealed_view=*/true);
    return out;
  }
  // The version as of the last Seal(), given `rec` = the record whose value is SealedParts() concatenated:
  // pages dirtied after it read what lay under them then (their base, or a hole).
  ExtentMap ToExtentMapSealed(const Location& rec) const { return MapOf(rec, /*sealed_view=*/true); }
  // After SealedParts() was appended as `rec` and `map` = ToExtentMapSealed(rec): the sealed pages are
  // clean with `map` under them, the pages dirtied after the seal stay dirty (over `map`, which has
  // there what lay under them), so the next FLUSH appends only those (as Rebase, for the sealed pages).
  void RebaseSealed(std::shared_ptr<const ExtentMap> map) {
    sealed_ = false;
    base_map_ = std::move(map);
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.ram) continue;
      s.base = Location{};
      s.base_off = 0;
      s.base_len = ChunkLen(i);
      s.base_mapped = true;
      s.dirty &= ~s.sealed;
      s.sealed.reset();
      // A punched page the map has as a hole; a page written after the punch is dirty and wins.
      s.holed.reset();
    }
  }

  // SEEK_DATA / SEEK_HOLE of the staged bytes, split as ToExtentMap splits them (what a FLUSH in
  // extent form would commit): data = written pages, referenced chunks, base bytes under RAM chunks and
  // the extents of the base map; holes = hole chunks, pages of a RAM chunk neither written nor over
  // base bytes, the base map's holes. NextData: the first data offset >= off, NextHole: the first hole
  // offset >= off (size() counts as a hole); both size() if none. Walks from off's chunk, reads nothing.
  uint64_t NextData(uint64_t off) const { return NextOf(off, /*want_hole=*/false); }
  uint64_t NextHole(uint64_t off) const { return NextOf(off, /*want_hole=*/true); }

  // The version as an extent map, given `dirty` = the record whose value is DirtyParts() concatenated
  // (empty when DirtyBytes() is 0): referenced chunks and the unchanged base bytes of RAM chunks are
  // extents of their records, dirty pages extents of `dirty`, everything else (holes, zeros past a base)
  // holes.
  ExtentMap ToExtentMap(const Location& dirty) const { return MapOf(dirty, /*sealed_view=*/false); }

 private:
  ExtentMap MapOf(const Location& dirty, bool sealed_view) const {
    ExtentMap m(size_);
    uint64_t dirty_off = 0;
    ForEachRun([&](size_t i, uint64_t lo, uint64_t hi, RunKind k) {
      const Slot& s = slots_[i];
      const uint64_t cs = i * kChunk;
      if (k == RunKind::kDirty) {
        m.PushBack(Extent{cs + lo, hi - lo, dirty, dirty_off});
        dirty_off += hi - lo;
      } else if (k == RunKind::kRef) {
        m.PushBack(Extent{cs + lo, hi - lo, s.loc, s.off + lo});
      } else if (k == RunKind::kBase) {
        m.PushBack(Extent{cs + lo, hi - lo, s.base, s.base_off + lo});
      } else if (k == RunKind::kMapped) {
        for (const ExtentMap::Piece& p : base_map_->Pieces(cs + lo, hi - lo)) {
          if (p.extent) m.PushBack(Extent{p.file_offset, p.length, p.extent->record, p.value_offset});
        }
      }
    },
               sealed_view);
    m.Resize(size_);
    return m;
  }

  struct Slot {
    ChunkPtr ram;                 // null: referenced, or a hole
    Location loc;                 // referenced chunks: where the bytes are
    uint64_t off = 0;             // value offset of the chunk's first byte in loc
    bool hole = false;            // reads as zeros; no RAM, no Location
    // RAM chunks: what lies under the copy (the extent form): bytes [0, base_len) of the chunk are
    // value bytes [base_off, ...) of `base` (base_len 0: a hole under it), except the dirty pages.
    Location base{};
    uint64_t base_off = 0;
    uint64_t base_len = 0;
    bool base_mapped = false;  // the bytes under it are base_map_'s (base/base_off unused)
    std::bitset<kChunk / kPage> dirty{};
    // Pages over base bytes that a punch made holes (read as zeros, no base under them); a write
    // makes the page dirty, which wins.
    std::bitset<kChunk / kPage> holed{};
    // Dirty pages a close sealed (Seal): a subset of `dirty`.
    std::bitset<kChunk / kPage> sealed{};
    bool mapped = false;  // not in RAM: read through base_map_ (several extents and/or holes)
  };

  // kMapped: bytes of base_map_ at the same file offsets (extents or holes).
  enum class RunKind { kHole, kRef, kBase, kDirty, kMapped };
  // Calls fn(chunk, lo, hi, kind) for maximal runs of one kind, chunk by chunk in file order, byte
  // ranges within the chunk clipped to its length. sealed_view: the version as of the last Seal()
  // (kDirty = sealed pages; a page dirtied after it is what lies under it: base, mapped, or a hole).
  template <typename Fn>
  void ForEachRun(Fn&& fn, bool sealed_view = false) const {
    ForEachRunFrom(
        0,
        [&](size_t i, uint64_t lo, uint64_t hi, RunKind k) {
          fn(i, lo, hi, k);
          return false;
        },
        sealed_view);
  }
  // The same from chunk `first` on; fn returns true to stop the walk.
  template <typename Fn>
  void ForEachRunFrom(size_t first, Fn&& fn, bool sealed_view = false) const {
    for (size_t i = first; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      const uint64_t len = ChunkLen(i);
      if (s.hole) {
        if (fn(i, 0, len, RunKind::kHole)) return;
        continue;
      }
      if (!s.ram) {
        if (fn(i, 0, len, s.mapped ? RunKind::kMapped : RunKind::kRef)) return;
        continue;
      }
      uint64_t lo = 0;
      RunKind cur = RunKind::kHole;
      for (uint64_t b = 0; b < len;) {
        // Within a page: dirty, else base below base_len, else hole (a page may straddle base_len).
        const uint64_t page_end = std::min(len, (b / kPage + 1) * kPage);
        RunKind k;
        uint64_t e;
        if ((sealed_view ? s.sealed : s.dirty).test(b / kPage)) {
          k = RunKind::kDirty;
          e = page_end;
        } else if (b < s.base_len && (s.base_mapped || !s.base.empty()) && !s.holed.test(b / kPage)) {
          k = s.base_mapped ? RunKind::kMapped : RunKind::kBase;
          e = std::min(page_end, s.base_len);
        } else {
          k = RunKind::kHole;
          e = page_end;
        }
        if (b == 0) cur = k;
        if (k != cur) {
          if (fn(i, lo, b, cur)) return;
          lo = b;
          cur = k;
        }
        b = e;
      }
      if (len > lo && fn(i, lo, len, cur)) return;
    }
  }
  uint64_t NextOf(uint64_t off, bool want_hole) const {
    if (off >= size_) return size_;
    uint64_t found = size_;
    ForEachRunFrom(static_cast<size_t>(off / kChunk), [&](size_t i, uint64_t lo, uint64_t hi, RunKind k) {
      const uint64_t cs = i * kChunk;
      if (cs + hi <= off) return false;
      const uint64_t start = std::max(off, cs + lo);
      if (k == RunKind::kMapped) {
        const uint64_t at = want_hole ? base_map_->NextHole(start) : base_map_->NextData(start);
        if (at < cs + hi) {
          found = at;
          return true;
        }
        return false;
      }
      if ((k == RunKind::kHole) == want_hole) {
        found = start;
        return true;
      }
      return false;
    });
    return found;
  }
  void MarkDirty(uint64_t from, uint64_t to) {
    for (uint64_t p = from / kPage; p * kPage < to; ++p) {
      const uint64_t ci = p * kPage / kChunk;
      if (ci < slots_.size() && slots_[ci].ram) slots_[ci].dirty.set(p % (kChunk / kPage));
    }
  }
  // [from, to) is about to be zeroed in RAM chunks: the part of it over a chunk's base bytes changes
  // them (dirty); the rest is past every base, a hole either way.
  void MarkZeroedOverBase(uint64_t from, uint64_t to) {
    while (from < to) {
      const uint64_t ci = from / kChunk, co = from % kChunk;
      const uint64_t n = std::min<uint64_t>(to - from, kChunk - co);
      if (ci < slots_.size() && slots_[ci].ram && co < slots_[ci].base_len) {
        MarkDirty(from, ci * kChunk + std::min<uint64_t>(co + n, slots_[ci].base_len));
      }
      from += n;
    }
  }

  // Chunk i as base_map_ has it: one extent covering it whole is a plain reference, no data a hole,
  // anything else mapped.
  Slot BackingSlot(size_t i) const {
    const auto pieces = base_map_->Pieces(i * kChunk, ChunkLen(i));
    if (pieces.size() == 1 && pieces[0].extent) return Slot{nullptr, pieces[0].extent->record, pieces[0].value_offset};
    if (std::all_of(pieces.begin(), pieces.end(), [](const ExtentMap::Piece& p) { return !p.extent; })) {
      return Slot{nullptr, Location{}, 0, true};
    }
    Slot m{nullptr, Location{}, 0, false};
    m.mapped = true;
    return m;
  }

  size_t ChunkLen(size_t i) const { return static_cast<size_t>(std::min<uint64_t>(kChunk, size_ - i * kChunk)); }

  Status Materialize(size_t i, const Fetch& fetch) {
    Slot& s = slots_[i];
    if (s.ram) return Status::OK();
    if (s.hole) {  // a zeroed chunk
      s.ram = NewChunk();
      if (!s.ram) return Status::IOError("chunk buffer: out of memory", ENOMEM);
      std::memset(s.ram.get(), 0, kChunk);
      s.hole = false;
      s.base = Location{};
      s.base_len = 0;
      s.base_mapped = false;
      s.dirty.reset();
      s.sealed.reset();
      s.holed.reset();
      ram_chunks_++;
      return Status::OK();
    }
    if (!fetch) return Status::IOError("chunk buffer: referenced chunk without a fetch");
    ChunkPtr b = NewChunk();  // not zeroed: only [0, ChunkLen) is ever read
    if (!b) return Status::IOError("chunk buffer: out of memory", ENOMEM);
    if (s.mapped) {
      size_t got = 0;
      KVFS_RETURN_IF_ERROR(ReadExtents(*base_map_, i * kChunk, ChunkLen(i), b.get(), fetch, &got));
    } else {
      KVFS_RETURN_IF_ERROR(fetch(s.loc, s.off, ChunkLen(i), b.get()));
    }
    s.ram = std::move(b);
    s.base = s.loc;
    s.base_off = s.off;
    s.base_mapped = s.mapped;
    s.mapped = false;
    s.base_len = ChunkLen(i);
    s.dirty.reset();
    s.sealed.reset();
    s.holed.reset();
    s.loc = Location{};
    ram_chunks_++;
    return Status::OK();
  }
  void Reserve(uint64_t n) {
    size_t want = (n + kChunk - 1) / kChunk;
    while (slots_.size() < want) slots_.push_back(Slot{nullptr, Location{}, 0, true});
  }
  // Zeros [from, to); every chunk in the range is in RAM or a hole (already zeros).
  void Zero(uint64_t from, uint64_t to) {
    while (from < to) {
      uint64_t ci = from / kChunk, co = from % kChunk;
      size_t n = std::min<uint64_t>(to - from, kChunk - co);
      if (slots_[ci].ram) std::memset(slots_[ci].ram.get() + co, 0, n);
      from += n;
    }
  }

  std::vector<Slot> slots_;
  std::shared_ptr<const ExtentMap> base_map_;  // SetBacking(map): what mapped slots read
  size_t ram_chunks_ = 0;
  uint64_t size_ = 0;
  bool sealed_ = false;  // Seal() was called and no Rebase* since
};

}  // namespace kvfs
