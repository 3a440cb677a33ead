#include "blockstore/segment_reader.h"

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "blockstore/kernel_copy.h"

namespace kvfs {
namespace {

constexpr uint64_t B = kChecksumBlock;
constexpr size_t kScratchKeep = 8u << 20;  // a thread keeps up to this much scratch between calls

struct FreeDeleter {
  void operator()(char* p) const { free(p); }
};
using AlignedBuf = std::unique_ptr<char, FreeDeleter>;

AlignedBuf AllocAligned(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, kAlignment, std::max<size_t>(AlignUp(n), kAlignment)) != 0) return nullptr;
  return AlignedBuf(static_cast<char*>(p));
}

// An aligned buffer of at least n bytes: the thread's cached scratch when small enough, else owned.
class Scratch {
 public:
  explicit Scratch(size_t n) {
    thread_local AlignedBuf cached;
    thread_local size_t cached_cap = 0;
    if (n <= kScratchKeep) {
      if (cached_cap < n) {
        size_t cap = std::max<size_t>(AlignUp(n), 256 * 1024);
        cached = AllocAligned(cap);
        cached_cap = cached ? cap : 0;
      }
      p_ = cached.get();
    } else {
      owned_ = AllocAligned(n);
      p_ = owned_.get();
    }
  }
  char* get() const { return p_; }

 private:
  char* p_ = nullptr;
  AlignedBuf owned_;
};

std::string At(const BackingFile* f, uint64_t off) { return f->path() + " @" + std::to_string(off); }

// Parses record metadata from buf (avail bytes read at record offset `off`). On failure *why says how.
// NeedMore (returned as kTruncated with *need set) when avail < the metadata size.
Status ParseMeta(const BackingFile* f, const char* buf, size_t avail, uint64_t off, RecordMeta* m, ScanStop* why,
                 uint64_t* need) {
  *need = 0;
  if (avail >= 4 && !format::HasRecordMagic(buf)) {
    *why = ScanStop::kBadMagic;
    return Status::Corruption("segment " + At(f, off) + ": no record (bad magic)");
  }
  if (avail < format::kRecordHeaderSize) {
    *why = ScanStop::kTruncated;
    return Status::Corruption("segment " + At(f, off) + ": file ends inside the record header");
  }
  format::RecordHeader h;
  Status s = format::DecodeRecordHeader(buf, &h);
  if (!s.ok()) {
    *why = ScanStop::kBadHeader;
    return Status::Corruption("segment " + At(f, off) + ": " + s.message());
  }
  const uint64_t meta = format::RecordMetaSize(h.path_len, h.value_len);
  if (avail < meta) {
    *why = ScanStop::kTruncated;
    *need = format::ValueDelta(h.path_len, h.value_len);
    return Status::Corruption("segment " + At(f, off) + ": file ends inside the record path/checksum table");
  }
  m->record_offset = off;
  m->header = h;
  m->value_offset = off + format::ValueDelta(h.path_len, h.value_len);
  m->end_offset = off + format::RecordSpan(h.path_len, h.value_len);
  m->path.assign(buf + format::kRecordHeaderSize, h.path_len);
  m->checksums.resize(h.block_count);
  if (h.block_count) {
    std::memcpy(m->checksums.data(), buf + format::kRecordHeaderSize + h.path_len, h.block_count * sizeof(uint64_t));
  }
  if (format::MetaChecksum(m->path, m->checksums.data(), h.block_count) != h.meta_checksum) {
    *why = ScanStop::kBadMeta;
    return Status::Corruption("segment " + At(f, off) + ": record path/checksum table checksum mismatch");
  }
  return Status::OK();
}

// Reads and parses the record at off; limit = file end (or footer) when known, else UINT64_MAX.
Status ReadMetaImpl(BackingFile* f, uint64_t off, uint64_t limit, RecordMeta* m, ScanStop* why) {
  *why = ScanStop::kIOError;
  if (off % kAlignment != 0) {
    *why = ScanStop::kBadMagic;
    return Status::Corruption("segment " + At(f, off) + ": record offset not 4 KiB aligned");
  }
  uint64_t need = 0;
  {
    Scratch sb(kAlignment);
    size_t got = 0;
    KVFS_RETURN_IF_ERROR(f->Read(off, kAlignment, sb.get(), &got));
    Status s = ParseMeta(f, sb.get(), got, off, m, why, &need);
    if (s.ok() || need == 0 || got < kAlignment) {
      if (s.ok() && m->end_offset > limit) {
        *why = ScanStop::kTruncated;
        return Status::Corruption("segment " + At(f, off) + ": record (value " + std::to_string(m->value_len()) +
                                  " bytes) extends past the end at " + std::to_string(limit));
      }
      return s;
    }
  }
  // Metadata larger than one block (long value: big checksum table): read all of it.
  Scratch sb(need);
  size_t got = 0;
  *why = ScanStop::kIOError;
  KVFS_RETURN_IF_ERROR(f->Read(off, need, sb.get(), &got));
  uint64_t need2 = 0;
  KVFS_RETURN_IF_ERROR(ParseMeta(f, sb.get(), got, off, m, why, &need2));
  if (m->end_offset > limit) {
    *why = ScanStop::kTruncated;
    return Status::Corruption("segment " + At(f, off) + ": record extends past the end at " + std::to_string(limit));
  }
  return Status::OK();
}

Status BlockMismatch(const BackingFile* f, const RecordMeta& m, uint64_t i) {
  return Status::Corruption("segment " + At(f, m.value_offset + i * B) + ": value block " + std::to_string(i) +
                            " of record @" + std::to_string(m.record_offset) + " (" + m.path + ") checksum mismatch");
}

// Verifies blocks [b0, b1] held in buf (buf = start of block b0) against meta. in_place = false: buf
// is a freshly loaded buffer that user code never accessed; it is hashed from kernel copies into a
// reused window (blockstore/kernel_copy.h) so its pages are never accessed from user mode.
Status VerifyBlocks(const BackingFile* f, const RecordMeta& m, const char* buf, uint64_t b0, uint64_t b1,
                    bool in_place = true) {
  const uint64_t len = m.value_len();
  if (in_place) {
    for (uint64_t i = b0; i <= b1; ++i) {
      const uint64_t n = std::min<uint64_t>(B, len - i * B);
      if (format::Hash64(buf + (i - b0) * B, n) != m.checksums[i]) return BlockMismatch(f, m, i);
    }
    return Status::OK();
  }
  const uint64_t total = std::min((b1 + 1) * B, len) - b0 * B;
  uint64_t bad = UINT64_MAX;
  VisitThroughKernel(buf, total, B, [&](size_t off, const char* p, size_t n) {
    for (size_t j = 0; j < n; j += B) {
      const uint64_t i = b0 + (off + j) / B;
      if (format::Hash64(p + j, std::min<uint64_t>(B, n - j)) != m.checksums[i]) {
        bad = i;
        return false;
      }
    }
    return true;
  });
  return bad == UINT64_MAX ? Status::OK() : BlockMismatch(f, m, bad);
}

// Whether a loader verifies vb in place: user code touched it already, or the process verifies
// never-touched buffers in place (kernel_copy.h VerifyUntouchedThroughKernel: --verify-copy); then it
// is touched from now on (the pool learns it at the free). Call before ParseLoadedMeta.
bool VerifyInPlace(ValueBuffer& vb) {
  if (vb.touched()) return true;
  if (VerifyUntouchedThroughKernel()) return false;
  vb.MarkTouched();
  return true;
}

// ParseMeta of the metadata prefix of a loaded buffer: in place when user code may have touched it,
// else from a kernel copy (as VerifyBlocks).
Status ParseLoadedMeta(const BackingFile* f, const ValueBuffer& vb, size_t avail, uint64_t off, RecordMeta* m) {
  ScanStop why;
  uint64_t need = 0;
  if (vb.touched()) return ParseMeta(f, vb.base(), avail, off, m, &why, &need);
  thread_local std::string copy;
  copy.resize(avail);
  VisitThroughKernel(vb.base(), avail, kAlignment, [&](size_t o, const char* p, size_t n) {
    std::memcpy(copy.data() + o, p, n);
    return true;
  });
  return ParseMeta(f, copy.data(), avail, off, m, &why, &need);
}

}  // namespace

const char* ScanStopName(ScanStop s) {
  switch (s) {
    case ScanStop::kNone: return "none";
    case ScanStop::kEndOfFile: return "end-of-file";
    case ScanStop::kFooter: return "footer";
    case ScanStop::kTruncated: return "truncated";
    case ScanStop::kBadMagic: return "bad-magic";
    case ScanStop::kBadHeader: return "bad-header";
    case ScanStop::kBadMeta: return "bad-meta";
    case ScanStop::kBadValue: return "bad-value";
    case ScanStop::kIOError: return "io-error";
  }
  return "?";
}

Result<format::SegmentHeader> ReadSegmentHeader(BackingFile* file) {
  Scratch sb(format::kSegmentHeaderSize);
  size_t got = 0;
  KVFS_RETURN_IF_ERROR(file->Read(0, format::kSegmentHeaderSize, sb.get(), &got));
  format::SegmentHeader h;
  Status s = format::DecodeSegmentHeader(sb.get(), got, &h);
  if (!s.ok()) return Status::Corruption("segment " + file->path() + ": " + s.message());
  return h;
}

Result<RecordMeta> ReadRecordMeta(BackingFile* file, uint64_t record_offset) {
  RecordMeta m;
  ScanStop why;
  KVFS_RETURN_IF_ERROR(ReadMetaImpl(file, record_offset, UINT64_MAX, &m, &why));
  return m;
}

namespace {

// Checks that the record metadata read at loc.record_offset describes the value loc points at.
Status CheckLoc(const BackingFile* file, const Location& loc, const RecordMeta& m) {
  if (m.value_offset != loc.value_offset || m.value_len() != loc.length) {
    return Status::Corruption("segment " + At(file, loc.record_offset) + ": record does not match its location (value @" +
                              std::to_string(m.value_offset) + "+" + std::to_string(m.value_len()) + ")");
  }
  return Status::OK();
}

Status CheckLocShape(const Location& loc) {
  if (loc.empty() || loc.value_offset <= loc.record_offset) {
    return Status::InvalidArgument("segment reader: empty or malformed location");
  }
  return Status::OK();
}

// The record metadata of loc in ONE read: the Location says how long it is (value_offset -
// record_offset), so a checksum table over 4 KiB (values over ~30 MiB) needs no second read. Checked
// against loc. An implausible length (damaged index entry) reads the metadata the scanner's way.
Result<RecordMeta> ReadLocMeta(BackingFile* file, const Location& loc) {
  const uint64_t delta = loc.value_offset - loc.record_offset;
  if (delta % kAlignment != 0 || delta > format::ValueDelta(format::kMaxPathLength, loc.length)) {
    auto m = ReadRecordMeta(file, loc.record_offset);
    if (!m.ok()) return m.status();
    KVFS_RETURN_IF_ERROR(CheckLoc(file, loc, *m));
    return m;
  }
  Scratch sb(delta);
  if (sb.get() == nullptr) return Status::IOError("segment reader: out of memory", ENOMEM);
  size_t r = 0;
  KVFS_RETURN_IF_ERROR(file->Read(loc.record_offset, delta, sb.get(), &r));
  RecordMeta m;
  ScanStop why;
  uint64_t need = 0;
  KVFS_RETURN_IF_ERROR(ParseMeta(file, sb.get(), std::min<uint64_t>(r, delta), loc.record_offset, &m, &why, &need));
  KVFS_RETURN_IF_ERROR(CheckLoc(file, loc, m));
  return m;
}

// Blocks [b0, b1] of the value read into buf (buf = value byte b0 * B; the caller guarantees room for
// AlignUp of the blocks' bytes). *n = value bytes of the blocks. Corruption on a short read or mismatch.
Status ReadBlocksInto(BackingFile* file, const RecordMeta& m, uint64_t b0, uint64_t b1, char* buf, uint64_t* n,
                      bool in_place = true) {
  const uint64_t want = std::min((b1 + 1) * B, m.value_len()) - b0 * B;
  size_t r = 0;
  KVFS_RETURN_IF_ERROR(file->Read(m.value_offset + b0 * B, AlignUp(want), buf, &r));
  if (r < want) {
    return Status::Corruption("segment " + At(file, m.value_offset + b0 * B + r) + ": file ends inside the value of record @" +
                              std::to_string(m.record_offset));
  }
  KVFS_RETURN_IF_ERROR(VerifyBlocks(file, m, buf, b0, b1, in_place));
  *n = want;
  return Status::OK();
}

}  // namespace

Status ReadValue(BackingFile* file, const RecordMeta& m, uint64_t offset, size_t len, char* out, size_t* got) {
  *got = 0;
  const uint64_t vlen = m.value_len();
  if (offset >= vlen || len == 0) return Status::OK();
  const uint64_t n = std::min<uint64_t>(len, vlen - offset);
  const uint64_t b0 = offset / B, b1 = (offset + n - 1) / B;
  const uint64_t want = std::min((b1 + 1) * B, vlen) - b0 * B;  // value bytes of the blocks
  const uint64_t read_len = AlignUp(want);                        // padded: aligned for O_DIRECT
  // Read straight into the caller's buffer when it is aligned and the read fits in the range.
  const bool direct = offset == b0 * B && read_len <= n && reinterpret_cast<uintptr_t>(out) % kAlignment == 0;
  Scratch sb(direct ? 0 : read_len);
  char* buf = direct ? out : sb.get();
  if (buf == nullptr) return Status::IOError("segment reader: out of memory", ENOMEM);
  uint64_t have = 0;
  Status s = ReadBlocksInto(file, m, b0, b1, buf, &have);
  if (!s.ok()) {
    if (direct) std::memset(out, 0, n);
    return s;
  }
  if (!direct) std::memcpy(out, buf + (offset - b0 * B), n);
  *got = n;
  return Status::OK();
}

Status ReadValue(BackingFile* file, const Location& loc, uint64_t offset, size_t len, char* out, size_t* got,
                 RecordMeta* meta_out) {
  *got = 0;
  KVFS_RETURN_IF_ERROR(CheckLocShape(loc));
  const uint64_t delta = loc.value_offset - loc.record_offset;
  if (offset < std::min<uint64_t>(B, loc.length) && len > 0 && delta <= B) {
    // One read for metadata + the blocks the range needs (the common whole-value or first-block read).
    const uint64_t n = std::min<uint64_t>(len, loc.length - offset);
    const uint64_t b1 = (offset + n - 1) / B;
    const uint64_t want = std::min((b1 + 1) * B, loc.length);
    Scratch sb(delta + AlignUp(want));
    if (sb.get() == nullptr) return Status::IOError("segment reader: out of memory", ENOMEM);
    size_t r = 0;
    KVFS_RETURN_IF_ERROR(file->Read(loc.record_offset, delta + AlignUp(want), sb.get(), &r));
    RecordMeta m;
    ScanStop why;
    uint64_t need = 0;
    KVFS_RETURN_IF_ERROR(ParseMeta(file, sb.get(), std::min<uint64_t>(r, delta), loc.record_offset, &m, &why, &need));
    KVFS_RETURN_IF_ERROR(CheckLoc(file, loc, m));
    if (r < delta + want) {
      return Status::Corruption("segment " + At(file, loc.record_offset + r) + ": file ends inside the value of record @" +
                                std::to_string(loc.record_offset));
    }
    KVFS_RETURN_IF_ERROR(VerifyBlocks(file, m, sb.get() + delta, 0, b1));
    std::memcpy(out, sb.get() + delta + offset, n);
    *got = n;
    if (meta_out) *meta_out = std::move(m);
    return Status::OK();
  }
  auto m = ReadLocMeta(file, loc);
  if (!m.ok()) return m.status();
  KVFS_RETURN_IF_ERROR(ReadValue(file, *m, offset, len, out, got));
  if (meta_out) *meta_out = std::move(*m);
  return Status::OK();
}

Result<std::shared_ptr<ValueBuffer>> LoadWholeValue(BackingFile* file, const Location& loc) {
  KVFS_RETURN_IF_ERROR(CheckLocShape(loc));
  const uint64_t delta = loc.value_offset - loc.record_offset;
  // The metadata of a record is at most header + 64 KiB path + the checksum table, rounded up; a larger
  // delta is a damaged index entry, not a reason to allocate a huge buffer.
  if (delta % kAlignment != 0 || delta > format::ValueDelta(format::kMaxPathLength, loc.length)) {
    return Status::Corruption("segment " + At(file, loc.record_offset) + ": location's value offset is implausible");
  }
  auto vb = ValueBuffer::Allocate(loc.length, delta);
  if (!vb) return Status::IOError("segment reader: out of memory", ENOMEM);
  const uint64_t read_len = delta + AlignUp(loc.length);
  size_t r = 0;
  KVFS_RETURN_IF_ERROR(file->Read(loc.record_offset, read_len, vb->base(), &r));
  const bool in_place = VerifyInPlace(*vb);
  RecordMeta m;
  KVFS_RETURN_IF_ERROR(ParseLoadedMeta(file, *vb, std::min<uint64_t>(r, delta), loc.record_offset, &m));
  KVFS_RETURN_IF_ERROR(CheckLoc(file, loc, m));
  if (r < delta + loc.length) {
    return Status::Corruption("segment " + At(file, loc.record_offset + r) + ": file ends inside the value of record @" +
                              std::to_string(loc.record_offset));
  }
  if (loc.length > 0) {
    KVFS_RETURN_IF_ERROR(VerifyBlocks(file, m, vb->data(), 0, m.checksums.size() - 1, in_place));
  }
  return vb;
}

Result<std::shared_ptr<ValueBuffer>> ReadValueRange(BackingFile* file, const Location& loc, uint64_t offset,
                                                    size_t len, RecordMeta* meta_out) {
  KVFS_RETURN_IF_ERROR(CheckLocShape(loc));
  if (offset >= loc.length || len == 0) {
    auto empty = ValueBuffer::Allocate(0);
    if (!empty) return Status::IOError("segment reader: out of memory", ENOMEM);
    return empty;
  }
  const uint64_t delta = loc.value_offset - loc.record_offset;
  const uint64_t n = std::min<uint64_t>(len, loc.length - offset);
  const uint64_t b0 = offset / B, b1 = (offset + n - 1) / B;
  const uint64_t want = std::min((b1 + 1) * B, loc.length) - b0 * B;
  if (b0 == 0 && delta <= B) {
    // Metadata and blocks in one read, into the buffer (the metadata is the prefix).
    auto vb = ValueBuffer::Allocate(want, delta);
    if (!vb) return Status::IOError("segment reader: out of memory", ENOMEM);
    size_t r = 0;
    KVFS_RETURN_IF_ERROR(file->Read(loc.record_offset, delta + AlignUp(want), vb->base(), &r));
    const bool in_place = VerifyInPlace(*vb);
    RecordMeta m;
    KVFS_RETURN_IF_ERROR(ParseLoadedMeta(file, *vb, std::min<uint64_t>(r, delta), loc.record_offset, &m));
    KVFS_RETURN_IF_ERROR(CheckLoc(file, loc, m));
    if (r < delta + want) {
      return Status::Corruption("segment " + At(file, loc.record_offset + r) + ": file ends inside the value of record @" +
                                std::to_string(loc.record_offset));
    }
    KVFS_RETURN_IF_ERROR(VerifyBlocks(file, m, vb->data(), 0, b1, in_place));
    vb->SetWindow(delta + offset, n);
    if (meta_out) *meta_out = std::move(m);
    return vb;
  }
  auto m = ReadLocMeta(file, loc);
  if (!m.ok()) return m.status();
  auto vb = ReadValueRange(file, *m, offset, n);
  if (vb.ok() && meta_out) *meta_out = std::move(*m);
  return vb;
}

Result<std::shared_ptr<ValueBuffer>> ReadValueRange(BackingFile* file, const RecordMeta& m, uint64_t offset,
                                                    size_t len) {
  const uint64_t vlen = m.value_len();
  if (offset >= vlen || len == 0) {
    auto empty = ValueBuffer::Allocate(0);
    if (!empty) return Status::IOError("segment reader: out of memory", ENOMEM);
    return empty;
  }
  const uint64_t n = std::min<uint64_t>(len, vlen - offset);
  const uint64_t b0 = offset / B, b1 = (offset + n - 1) / B;
  const uint64_t want = std::min((b1 + 1) * B, vlen) - b0 * B;
  auto vb = ValueBuffer::Allocate(want);
  if (!vb) return Status::IOError("segment reader: out of memory", ENOMEM);
  uint64_t have = 0;
  KVFS_RETURN_IF_ERROR(ReadBlocksInto(file, m, b0, b1, vb->base(), &have, VerifyInPlace(*vb)));
  vb->SetWindow(offset - b0 * B, n);
  return vb;
}

Result<SegmentFooter> ReadFooter(BackingFile* file, uint64_t file_size, bool check_nonce) {
  if (file_size < format::kSegmentHeaderSize + format::kTrailerBlockSize || file_size % kAlignment != 0) {
    return Status::NotFound("segment " + file->path() + ": not sealed (size " + std::to_string(file_size) + ")");
  }
  format::Trailer t;
  {
    Scratch sb(format::kTrailerBlockSize);
    size_t got = 0;
    KVFS_RETURN_IF_ERROR(file->Read(file_size - format::kTrailerBlockSize, format::kTrailerBlockSize, sb.get(), &got));
    if (got < format::kTrailerBlockSize) return Status::NotFound("segment " + file->path() + ": not sealed (short)");
    Status s = format::DecodeTrailer(sb.get() + format::kTrailerBlockSize - format::kTrailerSize, &t);
    if (s.IsNotFound()) return Status::NotFound("segment " + file->path() + ": not sealed");
    if (!s.ok()) return Status::Corruption("segment " + file->path() + ": " + s.message());
  }
  if (format::SealedFileSize(t.footer_offset, t.record_count) != file_size) {
    return Status::Corruption("segment " + file->path() + ": trailer (footer @" + std::to_string(t.footer_offset) + ", " +
                              std::to_string(t.record_count) + " records) does not match file size " +
                              std::to_string(file_size));
  }
  if (check_nonce) {
    auto h = ReadSegmentHeader(file);
    if (!h.ok()) return h.status();
    if (h->nonce != t.nonce) return Status::Corruption("segment " + file->path() + ": trailer nonce does not match header");
  }
  SegmentFooter footer;
  footer.trailer = t;
  const uint64_t bytes = t.record_count * format::kFooterEntrySize;
  if (bytes) {
    Scratch sb(format::FooterBytes(t.record_count));
    size_t got = 0;
    KVFS_RETURN_IF_ERROR(file->Read(t.footer_offset, format::FooterBytes(t.record_count), sb.get(), &got));
    if (got < bytes || format::Hash64(sb.get(), bytes) != t.footer_checksum) {
      return Status::Corruption("segment " + At(file, t.footer_offset) + ": footer checksum mismatch");
    }
    footer.entries.reserve(t.record_count);
    uint64_t prev_end = format::kSegmentHeaderSize;
    for (uint64_t i = 0; i < t.record_count; ++i) {
      auto e = format::DecodeFooterEntry(sb.get() + i * format::kFooterEntrySize);
      if (e.record_offset < prev_end || e.value_offset < e.record_offset || e.value_offset > t.footer_offset ||
          e.value_length > t.footer_offset - e.value_offset) {
        return Status::Corruption("segment " + At(file, t.footer_offset) + ": footer entry " + std::to_string(i) +
                                  " out of order or out of range");
      }
      prev_end = e.value_offset + AlignUp(e.value_length);
      footer.entries.push_back(e);
    }
  } else if (t.footer_checksum != format::Hash64(nullptr, 0)) {
    return Status::Corruption("segment " + file->path() + ": footer checksum mismatch");
  }
  return footer;
}

SegmentScanner::SegmentScanner(BackingFile* file, uint64_t file_size, ScanOptions opts)
    : file_(file), file_size_(file_size), opts_(opts) {}

Status SegmentScanner::Init() {
  auto h = ReadSegmentHeader(file_);
  if (!h.ok()) {
    Stop(h.status().IsCorruption() ? ScanStop::kBadHeader : ScanStop::kIOError, h.status());
    return h.status();
  }
  header_ = std::move(*h);
  auto f = ReadFooter(file_, file_size_);
  if (f.ok()) {
    sealed_ = true;
    footer_ = std::move(*f);
    limit_ = footer_.trailer.footer_offset;
  } else if (f.status().IsNotFound() || f.status().IsCorruption()) {
    limit_ = file_size_;  // unsealed (or a damaged trailer): scan to the end
  } else {
    Stop(ScanStop::kIOError, f.status());
    return f.status();
  }
  offset_ = format::kSegmentHeaderSize;
  init_ = true;
  return Status::OK();
}

void SegmentScanner::Stop(ScanStop why, Status s) {
  stop_ = why;
  stop_status_ = std::move(s);
}

bool SegmentScanner::Next(ScannedRecord* rec) {
  if (!init_ || stop_ != ScanStop::kNone) return false;
  if (offset_ >= limit_) {
    Stop(sealed_ ? ScanStop::kFooter : ScanStop::kEndOfFile, Status::OK());
    return false;
  }
  RecordMeta m;
  ScanStop why = ScanStop::kIOError;
  Status s = ReadMetaImpl(file_, offset_, limit_, &m, &why);
  if (!s.ok()) {
    Stop(why, s);
    return false;
  }
  if (opts_.verify_values && m.value_len() > 0) {
    constexpr uint64_t kChunk = 64 * B;  // 4 MiB per read
    for (uint64_t b0 = 0; b0 < m.checksums.size(); b0 += kChunk / B) {
      const uint64_t b1 = std::min<uint64_t>(b0 + kChunk / B, m.checksums.size()) - 1;
      const uint64_t want = std::min((b1 + 1) * B, m.value_len()) - b0 * B;
      Scratch sb(AlignUp(want));
      size_t r = 0;
      s = file_->Read(m.value_offset + b0 * B, AlignUp(want), sb.get(), &r);
      if (!s.ok()) {
        Stop(ScanStop::kIOError, s);
        return false;
      }
      if (r < want) {
        Stop(ScanStop::kTruncated, Status::Corruption("segment " + At(file_, offset_) + ": file ends inside the value"));
        return false;
      }
      s = VerifyBlocks(file_, m, sb.get(), b0, b1);
      if (!s.ok()) {
        Stop(ScanStop::kBadValue, s);
        return false;
      }
    }
  }
  rec->loc = Location{SegmentId{header_.node, header_.generation, header_.seq}, m.record_offset, m.value_offset,
                      m.value_len()};
  rec->path = std::move(m.path);
  rec->stamp = m.header.stamp;
  rec->flags = m.header.flags;
  offset_ = m.end_offset;
  ++records_;
  return true;
}

}  // namespace kvfs
