// Small strong types shared by blockstore/, index/ and fuse/.
#pragma once

#include <cstdint>
#include <string>

namespace kvfs {

inline constexpr uint64_t kAlignment = 4096;        // record / segment alignment, bytes
inline constexpr uint64_t kChecksumBlock = 65536;   // one XXH3-64 per 64 KiB of value

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a = kAlignment) { return (v + a - 1) / a * a; }

// Identifies one segment file: <backing>/.kvfs/v1/nodes/<node>/seg/<generation>-<seq>.kseg
struct SegmentId {
  std::string node;
  uint64_t generation = 0;
  uint64_t seq = 0;
  bool operator==(const SegmentId&) const = default;
  auto operator<=>(const SegmentId&) const = default;
};

// Where a file's value lives. A file of 0 bytes has an empty Location (no record).
struct Location {
  SegmentId segment;
  uint64_t record_offset = 0;  // byte offset of the record header in the segment (4 KiB aligned)
  uint64_t value_offset = 0;   // byte offset of the first value byte (4 KiB aligned)
  uint64_t length = 0;         // value length in bytes
  bool empty() const { return segment.node.empty(); }
  bool operator==(const Location&) const = default;
};

}  // namespace kvfs
