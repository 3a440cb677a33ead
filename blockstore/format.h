// On-disk format of a kvfs data segment: <backing>/.kvfs/v1/nodes/<node>/seg/<gen>-<seq>.kseg
//
// Prose spec: docs/format.md ("Segments"). Source of the layout ideas: LevelDB doc/log_format.md and
// RocksDB db/blob/blob_log_format.h (fixed header + checksummed records, "bump the version if you
// change this"), CacheLib Navy / Haystack (large append-only files, value blocks checksummed apart).
//
// All integers are little-endian, fixed width. Checksums are XXH3-64 (xxhash >= 0.8, XXH3_64bits,
// seed 0). Every structure starts on a 4 KiB (kAlignment) boundary so that O_DIRECT can write and read
// it, and so a forward scan can find a torn tail.
//
//   segment file:
//   +------------------+----------+----------+-----+----------+--------------------+---------------+
//   | segment header   | record 0 | record 1 | ... | record n | footer (sealed     | trailer block |
//   | (one 4 KiB block)|          |          |     |          |  only, 4 KiB pad)  | (sealed only) |
//   +------------------+----------+----------+-----+----------+--------------------+---------------+
//
// An unsealed segment ends after its last (possibly torn) record. A segment is sealed iff its last
// 4 KiB block holds a valid trailer whose nonce matches the segment header's (so a value that happens
// to end with trailer-like bytes can never make an unsealed segment look sealed).
//
// FORMAT VERSION: kFormatVersion. Bump the version if you change ANY table below.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "blockstore/status.h"
#include "blockstore/types.h"

namespace kvfs::format {

static_assert(std::endian::native == std::endian::little, "kvfs on-disk encoding assumes a little-endian host");

inline constexpr uint32_t kFormatVersion = 1;

// ---------------------------------------------------------------------------------------------------
// Segment header: the first 4 KiB block of every segment.
//
//   offset  size  field
//   ------  ----  ------------------------------------------------------------------------------
//        0     8  magic            "KVFSSEG\0"  (kSegmentMagic)
//        8     4  version          kFormatVersion
//       12     4  alignment        4096 (kAlignment): records and value offsets are multiples of it
//       16     4  checksum block   65536 (kChecksumBlock): bytes of value per block checksum
//       20     2  node id length   1..kMaxNodeIdLength
//       22     2  reserved         0
//       24     8  generation       writer generation (a new mount of the node = a new generation)
//       32     8  seq              segment number within the generation
//       40     8  creation time    ns since the Unix epoch (CLOCK_REALTIME), informational
//       48     8  nonce            random per segment; repeated in the trailer (see above)
//       56   256  node id          bytes, zero padded
//      312  3776  reserved         0
//     4088     8  header checksum  XXH3-64 of bytes [0, 4088)
// ---------------------------------------------------------------------------------------------------
inline constexpr uint64_t kSegmentMagic = 0x004745535346564Bull;  // bytes "KVFSSEG\0"
inline constexpr size_t kSegmentHeaderSize = 4096;
inline constexpr size_t kMaxNodeIdLength = 256;

struct SegmentHeader {
  uint32_t version = kFormatVersion;
  uint32_t alignment = static_cast<uint32_t>(kAlignment);
  uint32_t checksum_block = static_cast<uint32_t>(kChecksumBlock);
  std::string node;
  uint64_t generation = 0;
  uint64_t seq = 0;
  int64_t create_time_ns = 0;
  uint64_t nonce = 0;
};

// dst: kSegmentHeaderSize bytes. Requires 1 <= node.size() <= kMaxNodeIdLength.
void EncodeSegmentHeader(const SegmentHeader& h, char* dst);
// src: n bytes (at least kSegmentHeaderSize, else Corruption). Corruption on bad magic / checksum /
// unknown version / inconsistent fields (message says which).
Status DecodeSegmentHeader(const char* src, size_t n, SegmentHeader* out);

// ---------------------------------------------------------------------------------------------------
// Record: starts on a 4 KiB boundary (record offset), value starts on the next 4 KiB boundary after
// the meta (header + path + checksum table), value is zero padded to a 4 KiB boundary; the next record
// (or the footer) follows.
//
//   record offset
//   +------------------------+-----------+------------------------------+------+-----------+------+
//   | record header 64 bytes | path      | checksum table               | pad  | value     | pad  |
//   |                        | path_len  | block_count x u64 (XXH3-64)  | to 4K| value_len | to 4K|
//   +------------------------+-----------+------------------------------+------+-----------+------+
//                                                                              ^ value offset
//
// Record header (64 bytes):
//
//   offset  size  field
//   ------  ----  ------------------------------------------------------------------------------
//        0     4  magic            "KREC" (kRecordMagic)
//        4     2  flags            kRecordFlag* bits; unknown bits are Corruption
//        6     2  path length      bytes of the full virtual path (no NUL), 1..65535
//        8     8  value length     bytes (0 allowed), at most kMaxValueLength (1 TiB)
//       16     8  stamp            hybrid logical clock stamp of the write (opaque here)
//       24     4  block size       65536 (kChecksumBlock)
//       28     4  block count      ceil(value length / block size)
//       32     8  meta checksum    XXH3-64 of path bytes followed by the checksum table bytes
//       40    16  reserved         0
//       56     8  header checksum  XXH3-64 of bytes [0, 56)
//
// Checksum table entry i = XXH3-64 of value bytes [i*65536, min((i+1)*65536, value length)).
// ---------------------------------------------------------------------------------------------------
inline constexpr uint32_t kRecordMagic = 0x4345524Bu;  // bytes "KREC"
inline constexpr size_t kRecordHeaderSize = 64;
inline constexpr size_t kMaxPathLength = 65535;
// A decoder bound, not a limit anyone reaches (a file's bytes are staged in memory): it keeps the
// record-size arithmetic (BlockCount, RecordSpan, offsets) far from 64-bit overflow for any header a
// peer or a damaged disk may present.
inline constexpr uint64_t kMaxValueLength = 1ull << 40;
inline constexpr uint16_t kRecordFlagProvisional = 1u << 0;  // staged data spilled before commit (§4)
inline constexpr uint16_t kRecordKnownFlags = kRecordFlagProvisional;

struct RecordHeader {
  uint16_t flags = 0;
  uint32_t path_len = 0;
  uint64_t value_len = 0;
  uint64_t stamp = 0;
  uint32_t block_size = static_cast<uint32_t>(kChecksumBlock);
  uint32_t block_count = 0;
  uint64_t meta_checksum = 0;
};

// dst: kRecordHeaderSize bytes.
void EncodeRecordHeader(const RecordHeader& h, char* dst);
// src: kRecordHeaderSize bytes. Corruption on bad magic, checksum, unknown flags, block size, a value
// length over kMaxValueLength or a block count that does not match the value length.
Status DecodeRecordHeader(const char* src, RecordHeader* out);
// True iff src (>= 4 bytes) starts with the record magic (to tell "no record here" from damage).
bool HasRecordMagic(const char* src);

inline constexpr uint64_t BlockCount(uint64_t value_len) { return (value_len + kChecksumBlock - 1) / kChecksumBlock; }
// Bytes of header + path + checksum table.
inline constexpr uint64_t RecordMetaSize(uint64_t path_len, uint64_t value_len) {
  return kRecordHeaderSize + path_len + 8 * BlockCount(value_len);
}
// Offset of the value relative to the record offset (4 KiB multiple).
inline constexpr uint64_t ValueDelta(uint64_t path_len, uint64_t value_len) {
  return AlignUp(RecordMetaSize(path_len, value_len));
}
// Total bytes a record occupies in the segment (4 KiB multiple).
inline constexpr uint64_t RecordSpan(uint64_t path_len, uint64_t value_len) {
  return ValueDelta(path_len, value_len) + AlignUp(value_len);
}

// XXH3_64bits (on x86-64 libxxhash's runtime-dispatched version: AVX2 / AVX-512 where present, the
// same values). Thread-safe.
uint64_t Hash64(const void* data, size_t len);
// XXH3-64 of path || table (table = block_count little-endian u64 checksums).
uint64_t MetaChecksum(std::string_view path, const uint64_t* table, size_t block_count);

// ---------------------------------------------------------------------------------------------------
// Footer (sealed segments): at the 4 KiB boundary after the last record (footer offset), one 40-byte
// entry per record in record order, zero padded to a 4 KiB boundary.
//
//   offset  size  field
//   ------  ----  ------------------------------------------------------------------------------
//        0     8  record offset
//        8     8  value offset
//       16     8  value length
//       24     8  stamp
//       32     8  path hash        XXH3-64 of the full virtual path
// ---------------------------------------------------------------------------------------------------
inline constexpr size_t kFooterEntrySize = 40;

struct FooterEntry {
  uint64_t record_offset = 0;
  uint64_t value_offset = 0;
  uint64_t value_length = 0;
  uint64_t stamp = 0;
  uint64_t path_hash = 0;
  bool operator==(const FooterEntry&) const = default;
};

void EncodeFooterEntry(const FooterEntry& e, char* dst);  // dst: kFooterEntrySize bytes
FooterEntry DecodeFooterEntry(const char* src);

// ---------------------------------------------------------------------------------------------------
// Trailer (sealed segments): the last 64 bytes of the last 4 KiB block of the file (the block is zero
// before it). File size of a sealed segment = footer offset + AlignUp(count * 40) + 4096.
//
//   offset  size  field
//   ------  ----  ------------------------------------------------------------------------------
//        0     8  magic            "KVFSEND\0" (kTrailerMagic)
//        8     4  version          kFormatVersion
//       12     4  reserved         0
//       16     8  footer offset    4 KiB aligned, >= 4096, < 2^56
//       24     8  record count     <= footer offset (a decoder bound: no overflow in the sizes)
//       32     8  footer checksum  XXH3-64 of the count * 40 footer entry bytes (no padding)
//       40     8  nonce            = the segment header's nonce
//       48     8  reserved         0
//       56     8  trailer checksum XXH3-64 of bytes [0, 56)
// ---------------------------------------------------------------------------------------------------
inline constexpr uint64_t kTrailerMagic = 0x00444E455346564Bull;  // bytes "KVFSEND\0"
inline constexpr size_t kTrailerSize = 64;
inline constexpr size_t kTrailerBlockSize = 4096;

struct Trailer {
  uint64_t footer_offset = 0;
  uint64_t record_count = 0;
  uint64_t footer_checksum = 0;
  uint64_t nonce = 0;
};

// dst: kTrailerBlockSize bytes (zeroed, trailer in its last kTrailerSize bytes).
void EncodeTrailerBlock(const Trailer& t, char* dst);
// src: kTrailerSize bytes. NotFound when the magic is absent (not sealed); Corruption when the magic is
// there but the checksum, version or fields are wrong (including the bounds in the table above).
Status DecodeTrailer(const char* src, Trailer* out);
inline constexpr uint64_t FooterBytes(uint64_t count) { return AlignUp(count * kFooterEntrySize); }
inline constexpr uint64_t SealedFileSize(uint64_t footer_offset, uint64_t count) {
  return footer_offset + FooterBytes(count) + kTrailerBlockSize;
}

// Segment file names ("<gen20>-<seq20>.kseg") are defined once, in blockstore/node_dir.h.

}  // namespace kvfs::format
