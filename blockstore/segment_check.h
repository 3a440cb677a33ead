// CheckSegmentFile: where a segment's valid data ends, with resynchronisation after damage. Shared by
// kvfs-fsck (index/fsck_check.cc) and the Store's mount-time recovery (engine/recovery.cc), so both agree on
// where a torn tail starts and therefore on the offset of its CUT entry (docs/design.md §2, §7).
//
// The walk (docs/format.md "Segment"):
//   * the 4 KiB segment header is checked first. A file shorter than one header block, or whose header
//     block is all zeros, is a crash right after the file was created: header_torn, a torn tail at 0.
//     Any other bad header is header damage (header_ok = false, header_detail): the records are walked
//     all the same, since each record carries its own checksums and reads never use the header (the
//     mount reads such a segment's files fine); only the trailer's nonce cannot be checked, so a trailer
//     then counts only if its footer lists exactly the records the walk found (else trailer_bad);
//   * a valid trailer (ReadFooter) means sealed: records end at footer_offset. A trailer magic that
//     does not check out is trailer_bad (treated as unsealed: the walk runs to the end of the file);
//   * records are walked forward from 4096 up to limit = min(end, cut) (cut = the offset of a CUT
//     {segment} entry that applies, else UINT64_MAX). A record counts only if its header + metadata check
//     out and it ends at or before the limit. After an invalid one the walk RESYNCHRONISES at the next
//     4 KiB block holding a valid record: the skipped range is a damaged region (its records are lost);
//     if no valid record follows, everything from the first invalid byte on is the torn tail
//     (torn = true, tail_start = its first byte: where a CUT goes);
//   * verify_data: every value block checksum of every record too (bad_value per record).
// tail_start is also set when the segment is not torn: the end of the last valid record (>= 4096), i.e.
// where a footer would go.
//
// Errors: IOError (or another non-Corruption status) from the Env: a read failure is never taken for
// damage. Damage is reported in the result, not as an error.
// Thread safety: reentrant; the BackingFile must not be used by another thread meanwhile.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/format.h"
#include "blockstore/status.h"
#include "blockstore/types.h"

namespace kvfs {

struct CheckedRecord {
  uint64_t value_offset = 0, value_len = 0, end = 0, stamp = 0;
  uint16_t flags = 0;
  std::string path;
  bool bad_value = false;  // verify_data: a value block checksum mismatch
  std::string bad_detail;
};

struct SegmentCheck {
  uint64_t size = 0;            // file size, bytes
  bool header_ok = false;
  bool header_torn = false;     // shorter than a header block or an all-zero one (crash right after create)
  std::string header_detail;    // why the header is bad
  format::SegmentHeader header;  // valid when header_ok (records are walked either way)
  bool sealed = false;          // valid trailer + footer
  bool trailer_bad = false;
  std::string trailer_detail;
  uint64_t footer_offset = 0;   // sealed
  uint64_t cut = UINT64_MAX;    // the CUT offset passed in
  uint64_t limit = 0;           // min(end of records, cut)
  std::map<uint64_t, CheckedRecord> records;           // valid records by record offset
  std::vector<std::pair<uint64_t, uint64_t>> damaged;  // [start, end) regions skipped by resync
  bool torn = false;            // bytes after the last valid record (before limit) that are not records
  uint64_t tail_start = 0;      // torn: first byte of the torn tail; else end of the last valid record
};

// Checks the segment in `file` (see the header comment). cut: UINT64_MAX if no CUT applies.
Status CheckSegmentFile(BackingFile* file, uint64_t cut, bool verify_data, SegmentCheck* out);

}  // namespace kvfs
