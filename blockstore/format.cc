#include "blockstore/format.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // Hash64: the runtime-dispatched XXH3 (AVX2 / AVX-512), as segment_writer.cc
#endif

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <algorithm>
#include <cstring>

namespace kvfs::format {
namespace {

template <class T>
void Put(char* dst, size_t off, T v) {
  std::memcpy(dst + off, &v, sizeof(T));
}
template <class T>
T Get(const char* src, size_t off) {
  T v;
  std::memcpy(&v, src + off, sizeof(T));
  return v;
}

constexpr size_t kHeaderChecksumOff = kSegmentHeaderSize - 8;  // 4088
constexpr size_t kNodeOff = 56;
constexpr size_t kRecordChecksumOff = 56;
constexpr size_t kTrailerChecksumOff = 56;

}  // namespace

uint64_t Hash64(const void* data, size_t len) { return XXH3_64bits(data, len); }

uint64_t MetaChecksum(std::string_view path, const uint64_t* table, size_t block_count) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, path.data(), path.size());
  if (block_count) XXH3_64bits_update(&st, table, block_count * sizeof(uint64_t));
  return XXH3_64bits_digest(&st);
}

void EncodeSegmentHeader(const SegmentHeader& h, char* dst) {
  std::memset(dst, 0, kSegmentHeaderSize);
  Put<uint64_t>(dst, 0, kSegmentMagic);
  Put<uint32_t>(dst, 8, h.version);
  Put<uint32_t>(dst, 12, h.alignment);
  Put<uint32_t>(dst, 16, h.checksum_block);
  Put<uint16_t>(dst, 20, static_cast<uint16_t>(h.node.size()));
  Put<uint64_t>(dst, 24, h.generation);
  Put<uint64_t>(dst, 32, h.seq);
  Put<int64_t>(dst, 40, h.create_time_ns);
  Put<uint64_t>(dst, 48, h.nonce);
  std::memcpy(dst + kNodeOff, h.node.data(), std::min(h.node.size(), kMaxNodeIdLength));
  Put<uint64_t>(dst, kHeaderChecksumOff, Hash64(dst, kHeaderChecksumOff));
}

Status DecodeSegmentHeader(const char* src, size_t n, SegmentHeader* out) {
  if (n < kSegmentHeaderSize) return Status::Corruption("segment header: short (" + std::to_string(n) + " bytes)");
  if (Get<uint64_t>(src, 0) != kSegmentMagic) return Status::Corruption("segment header: bad magic");
  if (Get<uint64_t>(src, kHeaderChecksumOff) != Hash64(src, kHeaderChecksumOff)) {
    return Status::Corruption("segment header: checksum mismatch");
  }
  SegmentHeader h;
  h.version = Get<uint32_t>(src, 8);
  h.alignment = Get<uint32_t>(src, 12);
  h.checksum_block = Get<uint32_t>(src, 16);
  const uint16_t node_len = Get<uint16_t>(src, 20);
  h.generation = Get<uint64_t>(src, 24);
  h.seq = Get<uint64_t>(src, 32);
  h.create_time_ns = Get<int64_t>(src, 40);
  h.nonce = Get<uint64_t>(src, 48);
  if (h.version != kFormatVersion) {
    return Status::Corruption("segment header: unsupported version " + std::to_string(h.version));
  }
  if (h.alignment != kAlignment || h.checksum_block != kChecksumBlock) {
    return Status::Corruption("segment header: unsupported alignment/checksum block " +
                              std::to_string(h.alignment) + "/" + std::to_string(h.checksum_block));
  }
  if (node_len == 0 || node_len > kMaxNodeIdLength) {
    return Status::Corruption("segment header: bad node id length " + std::to_string(node_len));
  }
  h.node.assign(src + kNodeOff, node_len);
  *out = std::move(h);
  return Status::OK();
}

void EncodeRecordHeader(const RecordHeader& h, char* dst) {
  std::memset(dst, 0, kRecordHeaderSize);
  Put<uint32_t>(dst, 0, kRecordMagic);
  Put<uint16_t>(dst, 4, h.flags);
  Put<uint16_t>(dst, 6, static_cast<uint16_t>(h.path_len));
  Put<uint64_t>(dst, 8, h.value_len);
  Put<uint64_t>(dst, 16, h.stamp);
  Put<uint32_t>(dst, 24, h.block_size);
  Put<uint32_t>(dst, 28, h.block_count);
  Put<uint64_t>(dst, 32, h.meta_checksum);
  Put<uint64_t>(dst, kRecordChecksumOff, Hash64(dst, kRecordChecksumOff));
}

bool HasRecordMagic(const char* src) { return Get<uint32_t>(src, 0) == kRecordMagic; }

Status DecodeRecordHeader(const char* src, RecordHeader* out) {
  if (!HasRecordMagic(src)) return Status::Corruption("record header: bad magic");
  if (Get<uint64_t>(src, kRecordChecksumOff) != Hash64(src, kRecordChecksumOff)) {
    return Status::Corruption("record header: checksum mismatch");
  }
  RecordHeader h;
  h.flags = Get<uint16_t>(src, 4);
  h.path_len = Get<uint16_t>(src, 6);
  h.value_len = Get<uint64_t>(src, 8);
  h.stamp = Get<uint64_t>(src, 16);
  h.block_size = Get<uint32_t>(src, 24);
  h.block_count = Get<uint32_t>(src, 28);
  h.meta_checksum = Get<uint64_t>(src, 32);
  if (h.flags & ~kRecordKnownFlags) return Status::Corruption("record header: unknown flags " + std::to_string(h.flags));
  if (h.path_len == 0) return Status::Corruption("record header: empty path");
  if (h.value_len > kMaxValueLength) {
    return Status::Corruption("record header: value length " + std::to_string(h.value_len) + " over the maximum");
  }
  if (h.block_size != kChecksumBlock) {
    return Status::Corruption("record header: unsupported block size " + std::to_string(h.block_size));
  }
  if (h.block_count != BlockCount(h.value_len)) {
    return Status::Corruption("record header: block count " + std::to_string(h.block_count) +
                              " does not match value length " + std::to_string(h.value_len));
  }
  *out = h;
  return Status::OK();
}

void EncodeFooterEntry(const FooterEntry& e, char* dst) {
  Put<uint64_t>(dst, 0, e.record_offset);
  Put<uint64_t>(dst, 8, e.value_offset);
  Put<uint64_t>(dst, 16, e.value_length);
  Put<uint64_t>(dst, 24, e.stamp);
  Put<uint64_t>(dst, 32, e.path_hash);
}

FooterEntry DecodeFooterEntry(const char* src) {
  FooterEntry e;
  e.record_offset = Get<uint64_t>(src, 0);
  e.value_offset = Get<uint64_t>(src, 8);
  e.value_length = Get<uint64_t>(src, 16);
  e.stamp = Get<uint64_t>(src, 24);
  e.path_hash = Get<uint64_t>(src, 32);
  return e;
}

void EncodeTrailerBlock(const Trailer& t, char* dst) {
  std::memset(dst, 0, kTrailerBlockSize);
  char* p = dst + kTrailerBlockSize - kTrailerSize;
  Put<uint64_t>(p, 0, kTrailerMagic);
  Put<uint32_t>(p, 8, kFormatVersion);
  Put<uint64_t>(p, 16, t.footer_offset);
  Put<uint64_t>(p, 24, t.record_count);
  Put<uint64_t>(p, 32, t.footer_checksum);
  Put<uint64_t>(p, 40, t.nonce);
  Put<uint64_t>(p, kTrailerChecksumOff, Hash64(p, kTrailerChecksumOff));
}

Status DecodeTrailer(const char* src, Trailer* out) {
  if (Get<uint64_t>(src, 0) != kTrailerMagic) return Status::NotFound("segment trailer: absent (not sealed)");
  if (Get<uint64_t>(src, kTrailerChecksumOff) != Hash64(src, kTrailerChecksumOff)) {
    return Status::Corruption("segment trailer: checksum mismatch");
  }
  if (Get<uint32_t>(src, 8) != kFormatVersion) {
    return Status::Corruption("segment trailer: unsupported version " + std::to_string(Get<uint32_t>(src, 8)));
  }
  Trailer t;
  t.footer_offset = Get<uint64_t>(src, 16);
  t.record_count = Get<uint64_t>(src, 24);
  t.footer_checksum = Get<uint64_t>(src, 32);
  t.nonce = Get<uint64_t>(src, 40);
  if (t.footer_offset < kSegmentHeaderSize || t.footer_offset % kAlignment != 0 || t.footer_offset >= (1ull << 56)) {
    return Status::Corruption("segment trailer: bad footer offset " + std::to_string(t.footer_offset));
  }
  if (t.record_count > t.footer_offset) {  // bounds count * 40 far from overflow (a decoder bound)
    return Status::Corruption("segment trailer: " + std::to_string(t.record_count) + " records cannot fit before " +
                              "the footer at " + std::to_string(t.footer_offset));
  }
  *out = t;
  return Status::OK();
}

}  // namespace kvfs::format
