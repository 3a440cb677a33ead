// CheckSegmentFile: see segment_check.h (extracted from index/fsck.cc's segment scan).
#include "blockstore/segment_check.h"

#include <algorithm>

#include "blockstore/segment_reader.h"

namespace kvfs {
namespace {

constexpr uint64_t kVerifyChunk = 4ull << 20;  // bytes of value verified per ReadValue call

// Walks the records from 4096 up to s->limit (see segment_check.h), filling records, damaged, torn and
// tail_start.
Status WalkRecords(BackingFile* file, bool verify_data, SegmentCheck* s) {
  s->records.clear();
  s->damaged.clear();
  s->torn = false;
  s->tail_start = 0;
  uint64_t off = format::kSegmentHeaderSize;
  auto good_at = [&](uint64_t o, RecordMeta* m) -> Result<bool> {
    auto r = ReadRecordMeta(file, o);
    if (r.ok()) {
      if (r->end_offset > s->limit) return false;
      *m = std::move(*r);
      return true;
    }
    if (r.status().IsCorruption()) return false;
    return r.status();
  };
  while (off < s->limit) {
    RecordMeta m;
    auto g = good_at(off, &m);
    if (!g.ok()) return g.status();
    if (!*g) {
      // Resynchronise at the next 4 KiB block holding a valid record.
      uint64_t next = off + kAlignment;
      bool found = false;
      for (; next < s->limit; next += kAlignment) {
        auto g2 = good_at(next, &m);
        if (!g2.ok()) return g2.status();
        if (*g2) {
          found = true;
          break;
        }
      }
      if (!found) {
        s->torn = true;
        s->tail_start = off;
        break;
      }
      s->damaged.emplace_back(off, next);
      off = next;
    }
    CheckedRecord ri;
    ri.value_offset = m.value_offset;
    ri.value_len = m.value_len();
    ri.end = m.end_offset;
    ri.stamp = m.header.stamp;
    ri.flags = m.header.flags;
    ri.path = m.path;
    if (verify_data) {
      std::string buf;
      for (uint64_t vo = 0; vo < ri.value_len; vo += kVerifyChunk) {
        const size_t n = static_cast<size_t>(std::min(kVerifyChunk, ri.value_len - vo));
        buf.resize(n);
        size_t got = 0;
        Status vs = ReadValue(file, m, vo, n, buf.data(), &got);
        if (vs.IsCorruption()) {
          ri.bad_value = true;
          ri.bad_detail = vs.message();
          break;
        }
        KVFS_RETURN_IF_ERROR(vs);
      }
    }
    s->records.emplace(off, std::move(ri));
    off = m.end_offset;
  }
  if (!s->torn) s->tail_start = std::max<uint64_t>(off, format::kSegmentHeaderSize);
  return Status::OK();
}

// A footer read without the header's nonce (damaged header) counts only if it lists exactly the records
// the walk found before the limit, and the walk found nothing else.
bool FooterMatchesWalk(const SegmentFooter& footer, const SegmentCheck& s) {
  if (s.torn || !s.damaged.empty()) return false;
  auto it = s.records.begin();
  for (const auto& e : footer.entries) {
    if (e.record_offset >= s.limit) break;
    if (it == s.records.end() || it->first != e.record_offset || it->second.value_offset != e.value_offset ||
        it->second.value_len != e.value_length) {
      return false;
    }
    ++it;
  }
  return it == s.records.end();
}

}  // namespace

Status CheckSegmentFile(BackingFile* file, uint64_t cut, bool verify_data, SegmentCheck* s) {
  *s = SegmentCheck{};
  s->cut = cut;
  auto size = file->Size();
  if (!size.ok()) return size.status();
  s->size = *size;
  auto h = ReadSegmentHeader(file);
  if (!h.ok()) {
    if (!h.status().IsCorruption()) return h.status();
    s->header_detail = h.status().message();
    // A crash between creating the file and writing its header leaves it short or zero: a torn tail at 0.
    std::string block(format::kSegmentHeaderSize, '\0');
    size_t got = 0;
    KVFS_RETURN_IF_ERROR(file->Read(0, block.size(), block.data(), &got));
    if (got < block.size() || block.find_first_not_of('\0') == std::string::npos) {
      s->header_torn = true;
      s->limit = std::min(s->size, cut);
      s->torn = cut == UINT64_MAX;
      s->tail_start = 0;
      return Status::OK();
    }
    // A damaged header: the records carry their own checksums and reads never use the header
    // (ReadLocMeta/ReadValue), so the records are walked like any other segment's.
  } else {
    s->header_ok = true;
    s->header = *h;
  }
  auto footer = ReadFooter(file, s->size, /*check_nonce=*/s->header_ok);
  if (footer.ok()) {
    s->sealed = true;
    s->footer_offset = footer->trailer.footer_offset;
  } else if (footer.status().IsCorruption()) {
    s->trailer_bad = true;
    s->trailer_detail = footer.status().message();
  } else if (!footer.status().IsNotFound()) {
    return footer.status();
  }
  const uint64_t end = s->sealed ? s->footer_offset : s->size;
  s->limit = std::min(end, cut);
  KVFS_RETURN_IF_ERROR(WalkRecords(file, verify_data, s));
  if (!s->header_ok && s->sealed && !FooterMatchesWalk(*footer, *s)) {
    // Without the nonce the trailer is trusted only when it agrees with the records: else unsealed.
    s->sealed = false;
    s->footer_offset = 0;
    s->trailer_bad = true;
    s->trailer_detail = "trailer does not match the records (the header is damaged: no nonce to check it)";
    s->limit = std::min(s->size, cut);
    KVFS_RETURN_IF_ERROR(WalkRecords(file, verify_data, s));
  }
  return Status::OK();
}

}  // namespace kvfs
