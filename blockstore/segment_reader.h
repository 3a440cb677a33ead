// Reading segments (format: blockstore/format.h): record metadata, verified value ranges, the footer of
// a sealed segment, and a forward scan that finds the torn or damaged tail of an unsealed one.
//
// Every read is 4 KiB aligned (offset, length, memory) so the file may be opened with O_DIRECT, which
// is how a node reads a peer's segment on NFS (docs/design.md §2). Every value byte handed out has been verified
// against its 64 KiB block checksum; a mismatch is Status::Corruption naming the segment file and the
// offset, and the output bytes are not returned (zeroed, *got = 0). A loader that reads into a
// ValueBuffer user code never touched (ValueBuffer::touched() false: a fresh pool block) parses and
// verifies it from kernel copies (blockstore/kernel_copy.h), so the buffer's pages are never accessed
// from user mode (on a guest with shadow paging the first such access costs a hypervisor trap per
// page) -- unless the process verifies in place (VerifyUntouchedThroughKernel false: --verify-copy
// inplace, or auto where the probe found no trap); then it hashes in place and marks the buffer touched.
//
// Thread safety: free functions are safe to call concurrently (each uses a thread-local scratch buffer);
// a SegmentScanner is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/format.h"
#include "blockstore/status.h"
#include "blockstore/types.h"
#include "blockstore/value_buffer.h"

namespace kvfs {

// A record's header, path and checksum table.
struct RecordMeta {
  uint64_t record_offset = 0;  // 4 KiB aligned
  uint64_t value_offset = 0;   // 4 KiB aligned
  uint64_t end_offset = 0;     // where the next record (or the footer) starts
  format::RecordHeader header;
  std::string path;
  std::vector<uint64_t> checksums;  // one XXH3-64 per 64 KiB block of the value
  uint64_t value_len() const { return header.value_len; }
};

struct SegmentFooter {
  format::Trailer trailer;
  std::vector<format::FooterEntry> entries;  // record order
};

// Reads and verifies the segment header (the first 4 KiB). Corruption if damaged or short.
Result<format::SegmentHeader> ReadSegmentHeader(BackingFile* file);

// Reads and verifies the record at record_offset (header checksum, then path + table against the meta
// checksum). Corruption when there is no valid record there (bad magic, checksum, or the file ends
// inside the metadata).
Result<RecordMeta> ReadRecordMeta(BackingFile* file, uint64_t record_offset);

// Reads value bytes [offset, offset + len) of the record into out: reads only the 64 KiB blocks that
// overlap the range, verifies each against its checksum, copies out the requested bytes.
// *got = bytes copied (< len only when the range passes the end of the value; 0 when offset >= length).
// Corruption on a checksum mismatch or when the file ends inside the value.
Status ReadValue(BackingFile* file, const RecordMeta& meta, uint64_t offset, size_t len, char* out, size_t* got);
// Same from a Location (the index's view): reads the record metadata too (in the same read when the
// range starts in the first block), and checks that it matches loc (Corruption otherwise). meta_out
// (optional): the verified metadata, for a caller that keeps it (engine/record_meta_cache.h) and reads
// the next range through the RecordMeta overload without reading the metadata again.
Status ReadValue(BackingFile* file, const Location& loc, uint64_t offset, size_t len, char* out, size_t* got,
                 RecordMeta* meta_out = nullptr);

// The whole value at loc, verified, in a fresh ValueBuffer: ONE read of the record's metadata and value
// straight into the buffer (4 KiB aligned, so O_DIRECT works; no scratch copy, no zero fill), then the
// metadata is parsed and checked against loc and every block verified in place. Corruption as ReadValue
// (the buffer is dropped, no bytes are handed out); IOError(ENOMEM) when the buffer cannot be allocated.
Result<std::shared_ptr<ValueBuffer>> LoadWholeValue(BackingFile* file, const Location& loc);
// Value bytes [offset, offset + len) of the record at loc, verified, in a fresh ValueBuffer (size() = the
// bytes available, < len only at the end of the value; 0 when offset >= length). The covering blocks are
// read straight into the buffer (no copy); the record metadata is read first unless the range starts
// in the first block (then it comes with the same read). Errors as ReadValue; meta_out as ReadValue.
Result<std::shared_ptr<ValueBuffer>> ReadValueRange(BackingFile* file, const Location& loc, uint64_t offset,
                                                    size_t len, RecordMeta* meta_out = nullptr);
// Same with the record's metadata already read and checked (meta_out of a call above): ONE read, of the
// covering blocks only.
Result<std::shared_ptr<ValueBuffer>> ReadValueRange(BackingFile* file, const RecordMeta& meta, uint64_t offset,
                                                    size_t len);

// Footer of a sealed segment of file_size bytes. NotFound when the segment is not sealed (no trailer);
// Corruption when a trailer is there but it, the footer or the header nonce does not check out.
// check_nonce = false skips the header (for a segment whose header is damaged: the caller must then
// confirm the footer against the records it walked, as CheckSegmentFile does).
Result<SegmentFooter> ReadFooter(BackingFile* file, uint64_t file_size, bool check_nonce = true);

// Why a scan stopped.
enum class ScanStop {
  kNone,             // still scanning
  kEndOfFile,        // unsealed segment ends exactly after the last record: clean
  kFooter,           // sealed segment: reached the footer: clean
  kTruncated,        // a record (or its header block) extends past the end of the file: torn tail
  kBadMagic,         // no record magic where a record should start (zeros: torn / never written)
  kBadHeader,        // record magic but header checksum or fields bad
  kBadMeta,          // path / checksum table does not match the meta checksum
  kBadValue,         // verify_values: a value block does not match its checksum
  kIOError,          // the read itself failed (stop_status() has it); not evidence of damage
};
const char* ScanStopName(ScanStop s);

struct ScanOptions {
  bool verify_values = false;  // also read and hash every value block (fsck); default: metadata only
};

struct ScannedRecord {
  Location loc;  // loc.segment from the segment header
  std::string path;
  uint64_t stamp = 0;
  uint16_t flags = 0;
};

// Walks a segment forward from the first record:
//   SegmentScanner sc(file, size);  KVFS_RETURN_IF_ERROR(sc.Init());
//   ScannedRecord r;  while (sc.Next(&r)) { ... }   // then sc.stop_reason(), sc.stop_offset()
// For a sealed segment (valid trailer) the scan ends at the footer; a damaged trailer is treated as
// unsealed (the scan runs to the end of the file).
class SegmentScanner {
 public:
  SegmentScanner(BackingFile* file, uint64_t file_size, ScanOptions opts = {});
  // Reads the segment header (Corruption if damaged: then nothing in the file can be trusted) and the
  // trailer.
  Status Init();
  // Next good record; false once stopped.
  bool Next(ScannedRecord* rec);

  const format::SegmentHeader& header() const { return header_; }
  bool sealed() const { return sealed_; }
  const SegmentFooter& footer() const { return footer_; }  // valid when sealed()
  // First byte not covered by a good record: where the stop condition was found.
  uint64_t stop_offset() const { return offset_; }
  ScanStop stop_reason() const { return stop_; }
  const Status& stop_status() const { return stop_status_; }  // human-readable cause (OK when clean)
  uint64_t records() const { return records_; }

 private:
  void Stop(ScanStop why, Status s);

  BackingFile* const file_;
  const uint64_t file_size_;
  const ScanOptions opts_;
  format::SegmentHeader header_;
  SegmentFooter footer_;
  bool sealed_ = false;
  uint64_t limit_ = 0;
  uint64_t offset_ = 0;
  uint64_t records_ = 0;
  ScanStop stop_ = ScanStop::kNone;
  Status stop_status_;
  bool init_ = false;
};

}  // namespace kvfs
