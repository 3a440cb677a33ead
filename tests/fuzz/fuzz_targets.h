// Fuzz targets for the parsers that read bytes another node (or a damaged disk) wrote:
//   FuzzJournalEntry   - a peer's journal entry (index/journal_format.h DecodeJournalEntry) and journal
//                        file header; a decoded entry must re-encode to bytes that decode to the same entry.
//   FuzzSegment        - a segment file (blockstore/segment_reader.h: header, record header + path +
//                        checksum table, value blocks, trailer + footer, the forward scan), over an
//                        in-memory file. The first input byte selects checksum fix-ups so the fuzzer gets
//                        past the XXH3 checksums into the field checks behind them.
// Each returns 0; a broken invariant calls abort() (a crash for libFuzzer and for the corpus test).
//
// Used by tests/fuzz/*_fuzzer.cc (libFuzzer, -DKVFS_FUZZ=ON with clang) and by the regression corpus
// test tests/unit/fuzz_corpus_test.cc (every file under tests/data/fuzz/<target>/, normal unit tests).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/format.h"
#include "blockstore/segment_reader.h"
#include "index/journal_format.h"

namespace kvfs::fuzz {

inline void Check(bool ok) {
  if (!ok) std::abort();
}

inline int FuzzJournalEntry(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  JournalEntry e;
  if (DecodeJournalEntry(in, &e).ok()) {
    std::string enc;
    EncodeJournalEntry(e, &enc);
    JournalEntry e2;
    Check(DecodeJournalEntry(enc, &e2).ok());
    std::string enc2;
    EncodeJournalEntry(e2, &enc2);
    Check(enc == enc2);
  }
  JournalFileHeader h;
  (void)DecodeJournalFileHeader(in, &h);
  return 0;
}

// A read-only in-memory BackingFile.
class MemFile final : public BackingFile {
 public:
  explicit MemFile(std::string bytes) : bytes_(std::move(bytes)) {}
  Status Read(uint64_t offset, size_t n, void* buf, size_t* got) override {
    *got = 0;
    if (offset >= bytes_.size()) return Status::OK();
    *got = static_cast<size_t>(std::min<uint64_t>(n, bytes_.size() - offset));
    std::memcpy(buf, bytes_.data() + offset, *got);
    return Status::OK();
  }
  Status Write(std::span<const WriteOp>) override { return Status::IOError("read-only", EROFS); }
  Status Sync() override { return Status::OK(); }
  Status Truncate(uint64_t) override { return Status::IOError("read-only", EROFS); }
  Result<uint64_t> Size() override { return static_cast<uint64_t>(bytes_.size()); }
  const std::string& path() const override { return path_; }

 private:
  std::string bytes_;
  std::string path_ = "fuzz.kseg";
};

template <typename T>
void PutLE(std::string* s, size_t off, T v) {
  if (off + sizeof(T) <= s->size()) std::memcpy(s->data() + off, &v, sizeof(T));
}
template <typename T>
T GetLE(const std::string& s, size_t off) {
  T v{};
  if (off + sizeof(T) <= s.size()) std::memcpy(&v, s.data() + off, sizeof(T));
  return v;
}

// Fix-up bits (first input byte).
inline constexpr uint8_t kFixSegmentHeader = 1, kFixRecord = 2, kFixTrailer = 4;

inline int FuzzSegment(const uint8_t* data, size_t size) {
  if (size == 0 || size > (8u << 20)) return 0;
  const uint8_t fix = data[0];
  std::string f(reinterpret_cast<const char*>(data) + 1, size - 1);
  namespace fmt = format;
  if ((fix & kFixSegmentHeader) && f.size() >= fmt::kSegmentHeaderSize) {
    PutLE<uint64_t>(&f, 0, fmt::kSegmentMagic);
    PutLE<uint64_t>(&f, 4088, fmt::Hash64(f.data(), 4088));
  }
  if ((fix & kFixRecord) && f.size() >= fmt::kSegmentHeaderSize + fmt::kRecordHeaderSize) {
    const size_t r = fmt::kSegmentHeaderSize;
    PutLE<uint32_t>(&f, r, fmt::kRecordMagic);
    const uint16_t path_len = GetLE<uint16_t>(f, r + 6);
    const uint32_t blocks = GetLE<uint32_t>(f, r + 28);
    const uint64_t meta_end = r + fmt::kRecordHeaderSize + uint64_t{path_len} + 8ull * blocks;
    if (path_len > 0 && meta_end <= f.size()) {
      std::string_view path(f.data() + r + fmt::kRecordHeaderSize, path_len);
      std::vector<uint64_t> table(blocks);
      if (blocks) std::memcpy(table.data(), f.data() + r + fmt::kRecordHeaderSize + path_len, 8ull * blocks);
      PutLE<uint64_t>(&f, r + 32, fmt::MetaChecksum(path, table.data(), blocks));
    }
    PutLE<uint64_t>(&f, r + 56, fmt::Hash64(f.data() + r, 56));
  }
  if ((fix & kFixTrailer) && f.size() >= fmt::kSegmentHeaderSize + fmt::kTrailerBlockSize) {
    f.resize(f.size() / kAlignment * kAlignment);
    const size_t t = f.size() - fmt::kTrailerSize;
    PutLE<uint64_t>(&f, t, fmt::kTrailerMagic);
    PutLE<uint32_t>(&f, t + 8, fmt::kFormatVersion);
    const uint64_t foff = GetLE<uint64_t>(f, t + 16), count = GetLE<uint64_t>(f, t + 24);
    if (foff < f.size() && count <= (f.size() - foff) / fmt::kFooterEntrySize) {
      PutLE<uint64_t>(&f, t + 32, fmt::Hash64(f.data() + foff, count * fmt::kFooterEntrySize));
    }
    PutLE<uint64_t>(&f, t + 40, GetLE<uint64_t>(f, 48));  // the header's nonce
    PutLE<uint64_t>(&f, t + 56, fmt::Hash64(f.data() + t, 56));
  }

  MemFile file(f);
  (void)ReadSegmentHeader(&file);
  auto meta = ReadRecordMeta(&file, fmt::kSegmentHeaderSize);
  if (meta.ok()) {
    Check(meta->value_offset >= meta->record_offset && meta->end_offset >= meta->value_offset);
    Check(meta->end_offset - meta->value_offset >= meta->value_len());
    Check(meta->checksums.size() == fmt::BlockCount(meta->value_len()));
    std::vector<char> out(256 * 1024);
    size_t got = 0;
    Status s = ReadValue(&file, *meta, 0, out.size(), out.data(), &got);
    if (s.ok()) Check(got <= meta->value_len() && got <= out.size());
  }
  auto footer = ReadFooter(&file, f.size());
  if (footer.ok()) {
    for (const auto& e : footer->entries) Check(e.value_offset + e.value_length <= footer->trailer.footer_offset);
  }
  SegmentScanner sc(&file, f.size(), ScanOptions{true});
  if (sc.Init().ok()) {
    ScannedRecord rec;
    uint64_t n = 0, prev = 0;
    while (sc.Next(&rec)) {
      Check(rec.loc.record_offset >= prev && rec.loc.value_offset + rec.loc.length <= f.size());
      prev = rec.loc.value_offset;
      Check(++n <= f.size() / kAlignment);
    }
  }
  return 0;
}

}  // namespace kvfs::fuzz
