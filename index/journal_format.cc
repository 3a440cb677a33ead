#include "index/journal_format.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <cstdio>
#include <cstring>

#include "index/coding.h"

namespace kvfs {
namespace {

// ---- fixed-width little endian ----
void PutFixed16(std::string* out, uint16_t v) {
  char b[2] = {static_cast<char>(v & 0xff), static_cast<char>(v >> 8)};
  out->append(b, 2);
}
void PutFixed32(std::string* out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; i++) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 4);
}
void PutFixed64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; i++) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 8);
}

// ---- varints (LevelDB util/coding) ----
void PutVarint64(std::string* out, uint64_t v) {
  char b[10];
  int n = 0;
  while (v >= 0x80) {
    b[n++] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  b[n++] = static_cast<char>(v);
  out->append(b, n);
}
void PutSvarint64(std::string* out, int64_t v) {
  PutVarint64(out, (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
}
void PutVarStr(std::string* out, std::string_view s) {
  PutVarint64(out, s.size());
  out->append(s.data(), s.size());
}
void PutLocation(std::string* out, const Location& l) {
  if (l.empty()) {
    out->push_back(0);
    return;
  }
  out->push_back(1);
  PutVarStr(out, l.segment.node);
  PutVarint64(out, l.segment.generation);
  PutVarint64(out, l.segment.seq);
  PutVarint64(out, l.record_offset);
  PutVarint64(out, l.value_offset);
  PutVarint64(out, l.length);
}
void PutExtentMap(std::string* out, const ExtentMap& m) {
  PutVarint64(out, m.size());
  const std::vector<Location> records = m.Records();
  PutVarint64(out, records.size());
  // The index of each record, by (segment, record offset): O(extents x log records), not a linear
  // search per extent (a map of kMaxExtents extents over as many records is encoded at every commit).
  std::map<std::pair<SegmentId, uint64_t>, uint64_t> index;
  for (const Location& r : records) {
    index.emplace(std::make_pair(r.segment, r.record_offset), index.size());
    PutLocation(out, r);
  }
  PutVarint64(out, m.extents().size());
  uint64_t prev_end = 0;
  for (const Extent& e : m.extents()) {
    PutVarint64(out, e.file_offset - prev_end);
    PutVarint64(out, e.length);
    PutVarint64(out, index.at({e.record.segment, e.record.record_offset}));
    PutVarint64(out, e.value_offset);
    prev_end = e.file_end();
  }
}
void PutExtentDelta(std::string* out, const ExtentDelta& d) {
  PutVarint64(out, d.base_stamp);
  PutFixed64(out, d.map_checksum);
  PutVarint64(out, d.size);
  const std::vector<Location> records = d.Records();
  PutVarint64(out, records.size());
  for (const Location& r : records) PutLocation(out, r);
  PutVarint64(out, d.pieces.size());
  uint64_t prev_end = 0;
  for (const ExtentDelta::Piece& p : d.pieces) {
    PutVarint64(out, p.file_offset - prev_end);
    PutVarint64(out, p.length);
    if (p.record.empty()) {
      PutVarint64(out, 0);
    } else {
      const auto it = std::find(records.begin(), records.end(), p.record);
      PutVarint64(out, static_cast<uint64_t>(it - records.begin()) + 1);
      PutVarint64(out, p.value_offset);
    }
    prev_end = p.file_end();
  }
}
void PutSegment(std::string* out, const SegmentId& s) {
  PutVarStr(out, s.node);
  PutVarint64(out, s.generation);
  PutVarint64(out, s.seq);
}
void PutAttrs(std::string* out, const EntryAttrs& a) {
  PutVarint64(out, a.mode);
  PutVarint64(out, a.uid);
  PutVarint64(out, a.gid);
  PutVarint64(out, a.size);
  PutSvarint64(out, a.atime_ns);
  PutSvarint64(out, a.mtime_ns);
  PutSvarint64(out, a.ctime_ns);
}

// A bounds-checked cursor; the first failure sticks and every later read fails too.
class Decoder {
 public:
  explicit Decoder(std::string_view in) : p_(in.data()), end_(in.data() + in.size()) {}
  bool ok() const { return ok_; }
  bool done() const { return p_ == end_; }
  const char* what() const { return what_; }

  uint8_t U8(const char* field) {
    if (!ok_ || p_ == end_) return Fail(field), 0;
    return static_cast<uint8_t>(*p_++);
  }
  uint64_t Varint(const char* field) {
    uint64_t v = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
      if (!ok_ || p_ == end_) return Fail(field), 0;
      const uint64_t b = static_cast<unsigned char>(*p_++);
      if (shift == 63 && b > 1) return Fail(field), 0;  // would overflow 64 bits
      v |= (b & 0x7f) << shift;
      if (b < 0x80) return v;
    }
    return Fail(field), 0;  // more than 10 bytes
  }
  uint32_t Varint32(const char* field) {
    const uint64_t v = Varint(field);
    if (v > UINT32_MAX) return Fail(field), 0;
    return static_cast<uint32_t>(v);
  }
  int64_t Svarint(const char* field) {
    const uint64_t u = Varint(field);
    return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
  }
  bool Bool(const char* field) {
    const uint8_t b = U8(field);
    if (b > 1) return Fail(field), false;
    return b == 1;
  }
  std::string Str(const char* field) {
    const uint64_t n = Varint(field);
    if (!ok_ || n > static_cast<uint64_t>(end_ - p_)) return Fail(field), std::string();
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  Location Loc(const char* field) {
    Location l;
    if (!Bool(field)) return l;
    l.segment.node = Str(field);
    l.segment.generation = Varint(field);
    l.segment.seq = Varint(field);
    l.record_offset = Varint(field);
    l.value_offset = Varint(field);
    l.length = Varint(field);
    if (ok_ && l.segment.node.empty()) Fail(field);  // a present Location names its node
    return l;
  }
  // The part ext and dext share: varint r, r x loc (each present), then the varint count n of the
  // entries that follow, which is returned. A loc takes at least 7 bytes and an entry at least 3: counts
  // above what is left are corrupt (no huge reserve).
  uint64_t RecordTable(const char* field, std::vector<Location>* records) {
    const uint64_t r = Varint(field);
    if (!ok_ || r > static_cast<uint64_t>(end_ - p_)) return Fail(field), 0;
    records->reserve(r);
    for (uint64_t i = 0; i < r && ok_; ++i) {
      records->push_back(Loc(field));
      if (ok_ && records->back().empty()) Fail(field);
    }
    const uint64_t n = Varint(field);
    if (ok_ && n > static_cast<uint64_t>(end_ - p_)) Fail(field);
    return ok_ ? n : 0;
  }
  // An entry `gap` bytes after *prev_end, `length` bytes long: its file offset, and *prev_end moved to
  // its end; false if either overflows 64 bits.
  static bool Place(uint64_t gap, uint64_t length, uint64_t* prev_end, uint64_t* file_offset) {
    if (gap > UINT64_MAX - *prev_end || length > UINT64_MAX - (*prev_end + gap)) return false;
    *file_offset = *prev_end + gap;
    *prev_end = *file_offset + length;
    return true;
  }
  // ext (docs/format.md "Extent maps"): varint size, varint r, r x loc (each present), varint n,
  // n x (varint gap, varint length, varint record index, varint value_offset); gap = file offset minus
  // the previous extent's end (0 for the first: its file offset).
  ExtentMap Ext(const char* field) {
    ExtentMap m(Varint(field));
    std::vector<Location> records;
    const uint64_t n = RecordTable(field, &records);
    if (!ok_) return ExtentMap();
    uint64_t prev_end = 0;
    for (uint64_t i = 0; i < n && ok_; ++i) {
      Extent e;
      const uint64_t gap = Varint(field);
      e.length = Varint(field);
      const uint64_t idx = Varint(field);
      e.value_offset = Varint(field);
      if (!ok_) break;
      if (idx >= records.size() || !Place(gap, e.length, &prev_end, &e.file_offset)) {
        return Fail(field), ExtentMap();
      }
      e.record = records[idx];
      m.AppendUnchecked(e);
    }
    if (ok_ && !m.Validate().ok()) return Fail(field), ExtentMap();
    return m;
  }
  uint64_t Fixed64(const char* field) {
    if (!ok_ || end_ - p_ < 8) return Fail(field), 0;
    const uint64_t v = GetFixed(p_, 8);
    p_ += 8;
    return v;
  }
  // dext (docs/format.md "Extent deltas").
  ExtentDelta Dext(const char* field) {
    ExtentDelta d;
    d.base_stamp = Varint(field);
    d.map_checksum = Fixed64(field);
    d.size = Varint(field);
    std::vector<Location> records;
    const uint64_t n = RecordTable(field, &records);
    if (!ok_) return ExtentDelta();
    uint64_t prev_end = 0;
    for (uint64_t i = 0; i < n && ok_; ++i) {
      ExtentDelta::Piece p;
      const uint64_t gap = Varint(field);
      p.length = Varint(field);
      const uint64_t ref = Varint(field);
      if (ref > 0) p.value_offset = Varint(field);
      if (!ok_) break;
      if (ref > records.size() || !Place(gap, p.length, &prev_end, &p.file_offset)) {
        return Fail(field), ExtentDelta();
      }
      if (ref > 0) p.record = records[ref - 1];
      d.pieces.push_back(std::move(p));
    }
    if (ok_ && !d.Validate().ok()) return Fail(field), ExtentDelta();
    return d;
  }
  SegmentId Seg(const char* field) {
    SegmentId s;
    s.node = Str(field);
    s.generation = Varint(field);
    s.seq = Varint(field);
    return s;
  }
  EntryAttrs Attrs() {
    EntryAttrs a;
    a.mode = Varint32("attrs.mode");
    a.uid = Varint32("attrs.uid");
    a.gid = Varint32("attrs.gid");
    a.size = Varint("attrs.size");
    a.atime_ns = Svarint("attrs.atime");
    a.mtime_ns = Svarint("attrs.mtime");
    a.ctime_ns = Svarint("attrs.ctime");
    return a;
  }

 private:
  void Fail(const char* field) {
    if (ok_) what_ = field;
    ok_ = false;
  }
  const char* p_;
  const char* end_;
  bool ok_ = true;
  const char* what_ = "";
};

}  // namespace

uint32_t JournalFragmentChecksum(uint8_t type, const char* payload, size_t length) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const char head[3] = {static_cast<char>(length & 0xff), static_cast<char>((length >> 8) & 0xff),
                        static_cast<char>(type)};
  XXH3_64bits_update(&state, head, 3);
  if (length) XXH3_64bits_update(&state, payload, length);
  return static_cast<uint32_t>(XXH3_64bits_digest(&state));
}

std::string EncodeJournalFileHeader(const JournalFileHeader& h) {
  std::string out(kJournalMagic, sizeof(kJournalMagic));
  PutFixed32(&out, h.format_version);
  PutFixed32(&out, h.block_size);
  PutFixed64(&out, h.generation);
  PutFixed64(&out, h.file_number);
  const size_t n = h.node.size() > UINT16_MAX ? UINT16_MAX : h.node.size();
  PutFixed16(&out, static_cast<uint16_t>(n));
  out.append(h.node.data(), n);
  return out;
}

Status DecodeJournalFileHeader(std::string_view in, JournalFileHeader* h) {
  constexpr size_t kFixed = 34;
  if (in.size() < kFixed || memcmp(in.data(), kJournalMagic, sizeof(kJournalMagic)) != 0) {
    return Status::Corruption("journal file header: bad magic or size");
  }
  const char* p = in.data();
  h->format_version = static_cast<uint32_t>(GetFixed(p + 8, 4));
  h->block_size = static_cast<uint32_t>(GetFixed(p + 12, 4));
  h->generation = GetFixed(p + 16, 8);
  h->file_number = GetFixed(p + 24, 8);
  const size_t n = GetFixed(p + 32, 2);
  if (in.size() != kFixed + n) return Status::Corruption("journal file header: bad node length");
  h->node.assign(p + kFixed, n);
  if (h->format_version != kJournalFormatVersion) {
    return Status::NotSupported("journal format version " + std::to_string(h->format_version));
  }
  if (h->block_size != kJournalBlockSize) {
    return Status::NotSupported("journal block size " + std::to_string(h->block_size));
  }
  return Status::OK();
}

const char* JournalOpName(JournalOp op) {
  switch (op) {
    case JournalOp::kPut: return "PUT";
    case JournalOp::kRename: return "RENAME";
    case JournalOp::kUnlink: return "UNLINK";
    case JournalOp::kMkdir: return "MKDIR";
    case JournalOp::kRmdir: return "RMDIR";
    case JournalOp::kSetattr: return "SETATTR";
    case JournalOp::kXattr: return "XATTR";
    case JournalOp::kSeal: return "SEAL";
    case JournalOp::kDrop: return "DROP";
    case JournalOp::kMove: return "MOVE";
    case JournalOp::kCut: return "CUT";
    case JournalOp::kSymlink: return "SYMLINK";
    case JournalOp::kExchange: return "EXCHANGE";
  }
  return "UNKNOWN";
}

// ---- constructors ----
JournalEntry JournalEntry::Put(std::string path, Location loc, EntryAttrs attrs, uint64_t stamp,
                               std::string inline_value) {
  JournalEntry e;
  e.op = JournalOp::kPut;
  e.path = std::move(path);
  e.location = std::move(loc);
  e.attrs = attrs;
  e.stamp = stamp;
  e.inline_value = std::move(inline_value);
  return e;
}
JournalEntry JournalEntry::Rename(std::string from, std::string to, Location loc, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kRename;
  e.path = std::move(from);
  e.path2 = std::move(to);
  e.location = std::move(loc);
  e.stamp = stamp;
  return e;
}
JournalEntry JournalEntry::Unlink(std::string path, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kUnlink;
  e.path = std::move(path);
  e.stamp = stamp;
  return e;
}
JournalEntry JournalEntry::Mkdir(std::string path, EntryAttrs attrs, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kMkdir;
  e.path = std::move(path);
  e.attrs = attrs;
  e.stamp = stamp;
  return e;
}
JournalEntry JournalEntry::Rmdir(std::string path, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kRmdir;
  e.path = std::move(path);
  e.stamp = stamp;
  return e;
}
JournalEntry JournalEntry::Setattr(std::string path, EntryAttrs attrs, uint32_t mask, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kSetattr;
  e.path = std::move(path);
  e.attrs = attrs;
  e.mask = mask;
  e.stamp = stamp;
  return e;
}
JournalEntry JournalEntry::Xattr(std::string path, std::string name, std::string value, bool remove,
                                 uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kXattr;
  e.path = std::move(path);
  e.xattr_name = std::move(name);
  e.xattr_value = std::move(value);
  e.xattr_remove = remove;
  e.stamp = stamp;
  return e;
}
JournalEntry JournalEntry::Seal(SegmentId seg, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kSeal;
  e.segment = std::move(seg);
  e.stamp = stamp;
  return e;
}
JournalEntry JournalEntry::Drop(SegmentId seg, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kDrop;
  e.segment = std::move(seg);
  e.stamp = stamp;
  return e;
}
JournalEntry JournalEntry::Move(std::string path, Location old_loc, Location new_loc, uint64_t original_stamp) {
  JournalEntry e;
  e.op = JournalOp::kMove;
  e.path = std::move(path);
  e.old_location = std::move(old_loc);
  e.location = std::move(new_loc);
  e.stamp = original_stamp;
  return e;
}
JournalEntry JournalEntry::Cut(FileRef file, uint64_t offset, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kCut;
  e.cut_file = std::move(file);
  e.cut_offset = offset;
  e.stamp = stamp;
  return e;
}
JournalEntry JournalEntry::Symlink(std::string path, std::string target, EntryAttrs attrs, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kSymlink;
  e.path = std::move(path);
  e.path2 = std::move(target);
  e.attrs = attrs;
  e.stamp = stamp;
  return e;
}

JournalEntry JournalEntry::Special(std::string path, EntryAttrs attrs, uint64_t rdev, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kSymlink;
  e.path = std::move(path);
  e.attrs = attrs;
  e.rdev = rdev;
  e.stamp = stamp;
  return e;
}

JournalEntry JournalEntry::Exchange(std::string a, std::string b, uint64_t stamp) {
  JournalEntry e;
  e.op = JournalOp::kExchange;
  e.path = std::move(a);
  e.path2 = std::move(b);
  e.stamp = stamp;
  return e;
}

// ---- codec ----
uint8_t JournalEntryVersion(const JournalEntry& e) {
  if (e.op == JournalOp::kExchange) return 4;
  if (e.op == JournalOp::kSymlink && IsSpecialFileMode(e.attrs.mode)) return 4;
  if (e.op != JournalOp::kPut) return 1;
  if (e.delta) return 5;
  if (e.extents) return 3;
  return e.xattrs.has_value() ? 2 : 1;
}

std::vector<Location> JournalEntry::Records() const {
  std::vector<Location> out = kvfs::ContentRecords(location, extents);
  auto add = [&](const Location& l) {
    if (!l.empty() && std::find(out.begin(), out.end(), l) == out.end()) out.push_back(l);
  };
  if (extents) add(location);  // malformed (a v3 PUT has none), but never hide it from a check
  if (delta) {
    add(location);
    for (const Location& l : delta->Records()) add(l);
  }
  add(old_location);
  return out;
}

std::vector<Location> JournalEntry::ContentRecords() const {
  std::vector<Location> out = kvfs::ContentRecords(location, extents);
  if (delta) {
    for (const Location& l : delta->Records()) {
      if (std::find(out.begin(), out.end(), l) == out.end()) out.push_back(l);
    }
  }
  return out;
}

void EncodeJournalEntry(const JournalEntry& e, std::string* out) {
  const uint8_t version = JournalEntryVersion(e);
  const bool v2 = e.op == JournalOp::kPut && version >= 2;
  out->push_back(static_cast<char>(version));
  out->push_back(static_cast<char>(e.op));
  PutVarint64(out, e.stamp);
  switch (e.op) {
    case JournalOp::kPut:
      PutVarStr(out, e.path);
      PutLocation(out, e.location);
      PutAttrs(out, e.attrs);
      PutVarStr(out, e.inline_value);
      if (v2) {
        static const std::vector<std::pair<std::string, std::string>> kNone;
        const auto& xs = e.xattrs ? *e.xattrs : kNone;
        PutVarint64(out, xs.size());
        for (const auto& [name, value] : xs) {
          PutVarStr(out, name);
          PutVarStr(out, value);
        }
      }
      if (version >= 5) {
        out->push_back(2);  // content: an extent delta
        PutExtentDelta(out, *e.delta);
      } else if (version >= 3) {
        out->push_back(1);  // has_extents
        PutExtentMap(out, *e.extents);
      }
      break;
    case JournalOp::kRename:
      PutVarStr(out, e.path);
      PutVarStr(out, e.path2);
      PutLocation(out, e.location);
      break;
    case JournalOp::kUnlink:
    case JournalOp::kRmdir:
      PutVarStr(out, e.path);
      break;
    case JournalOp::kMkdir:
      PutVarStr(out, e.path);
      PutAttrs(out, e.attrs);
      break;
    case JournalOp::kSetattr:
      PutVarStr(out, e.path);
      PutAttrs(out, e.attrs);
      PutVarint64(out, e.mask);
      break;
    case JournalOp::kXattr:
      PutVarStr(out, e.path);
      PutVarStr(out, e.xattr_name);
      PutVarStr(out, e.xattr_value);
      out->push_back(e.xattr_remove ? 1 : 0);
      break;
    case JournalOp::kSeal:
    case JournalOp::kDrop:
      PutSegment(out, e.segment);
      break;
    case JournalOp::kMove:
      PutVarStr(out, e.path);
      PutLocation(out, e.old_location);
      PutLocation(out, e.location);
      break;
    case JournalOp::kCut:
      out->push_back(static_cast<char>(e.cut_file.kind));
      PutVarStr(out, e.cut_file.node);
      PutVarint64(out, e.cut_file.generation);
      PutVarint64(out, e.cut_file.number);
      PutVarint64(out, e.cut_offset);
      break;
    case JournalOp::kSymlink:
      PutVarStr(out, e.path);
      PutVarStr(out, e.path2);
      PutAttrs(out, e.attrs);
      if (version >= 4) PutVarint64(out, e.rdev);
      break;
    case JournalOp::kExchange:
      PutVarStr(out, e.path);
      PutVarStr(out, e.path2);
      break;
  }
}

Status DecodeJournalEntry(std::string_view in, JournalEntry* e) {
  Decoder d(in);
  const uint8_t version = d.U8("version");
  if (!d.ok()) return Status::Corruption("journal entry: empty");
  if (version == 0) return Status::Corruption("journal entry: version 0");
  if (version > kJournalEntryVersion) {
    return Status::NotSupported("journal entry version " + std::to_string(version) + " (this build knows " +
                                std::to_string(kJournalEntryVersion) + ")");
  }
  const uint8_t op = d.U8("op");
  if (d.ok() && (op == 0 || op > kMaxJournalOp)) {
    return Status::Corruption("journal entry: unknown op " + std::to_string(op));
  }
  *e = JournalEntry();
  e->op = static_cast<JournalOp>(op);
  e->stamp = d.Varint("stamp");
  switch (e->op) {
    case JournalOp::kPut:
      e->path = d.Str("path");
      e->location = d.Loc("location");
      e->attrs = d.Attrs();
      e->inline_value = d.Str("inline_value");
      if (version >= 2) {
        const uint64_t n = d.Varint("xattr count");
        // Each pair takes at least 2 bytes: a count above what is left is corrupt (no huge reserve).
        if (d.ok() && n > in.size()) return Status::Corruption("journal entry: PUT xattr count " + std::to_string(n));
        e->xattrs.emplace();
        for (uint64_t i = 0; i < n && d.ok(); ++i) {
          std::string name = d.Str("xattr name");
          std::string value = d.Str("xattr value");
          e->xattrs->emplace_back(std::move(name), std::move(value));
        }
      }
      if (version >= 5) {
        // u8 content: 0 none, 1 ext, 2 dext (a version-5 PUT is written only with a delta).
        const uint8_t content = d.U8("content");
        if (d.ok() && content > 2) return Status::Corruption("journal entry: PUT content kind " + std::to_string(content));
        if (content == 2) {
          ExtentDelta x = d.Dext("delta");
          if (!d.ok()) break;
          if (!e->location.empty() || !e->inline_value.empty() || e->attrs.size != x.size) {
            return Status::Corruption("journal entry: PUT with an extent delta carries a location, an inline value "
                                      "or a size other than its delta's");
          }
          e->delta = std::move(x);
          break;
        }
        if (content == 0) break;
      }
      if (version >= 3 && (version >= 5 || d.Bool("has_extents"))) {
        ExtentMap m = d.Ext("extents");
        if (!d.ok()) break;
        if (!e->location.empty() || !e->inline_value.empty() || e->attrs.size != m.size()) {
          return Status::Corruption("journal entry: PUT with extents carries a location, an inline value or a "
                                    "size other than its map's");
        }
        e->extents = ExtentMapRef(std::make_shared<const ExtentMap>(std::move(m)));
      }
      break;
    case JournalOp::kRename:
      e->path = d.Str("from");
      e->path2 = d.Str("to");
      e->location = d.Loc("location");
      break;
    case JournalOp::kUnlink:
    case JournalOp::kRmdir:
      e->path = d.Str("path");
      break;
    case JournalOp::kMkdir:
      e->path = d.Str("path");
      e->attrs = d.Attrs();
      break;
    case JournalOp::kSetattr:
      e->path = d.Str("path");
      e->attrs = d.Attrs();
      e->mask = d.Varint32("mask");
      break;
    case JournalOp::kXattr:
      e->path = d.Str("path");
      e->xattr_name = d.Str("xattr_name");
      e->xattr_value = d.Str("xattr_value");
      e->xattr_remove = d.Bool("xattr_remove");
      break;
    case JournalOp::kSeal:
    case JournalOp::kDrop:
      e->segment = d.Seg("segment");
      break;
    case JournalOp::kMove:
      e->path = d.Str("path");
      e->old_location = d.Loc("old_location");
      e->location = d.Loc("location");
      break;
    case JournalOp::kCut: {
      const uint8_t kind = d.U8("cut_file.kind");
      if (d.ok() && kind != static_cast<uint8_t>(FileRef::Kind::kJournal) &&
          kind != static_cast<uint8_t>(FileRef::Kind::kSegment)) {
        return Status::Corruption("journal entry: bad CUT file kind " + std::to_string(kind));
      }
      e->cut_file.kind = static_cast<FileRef::Kind>(kind);
      e->cut_file.node = d.Str("cut_file.node");
      e->cut_file.generation = d.Varint("cut_file.generation");
      e->cut_file.number = d.Varint("cut_file.number");
      e->cut_offset = d.Varint("cut_offset");
      break;
    }
    case JournalOp::kSymlink:
      e->path = d.Str("path");
      e->path2 = d.Str("target");
      e->attrs = d.Attrs();
      if (version >= 4) e->rdev = d.Varint("rdev");
      // Version 4 is exactly a special file (no target); versions 1-3 never carry one.
      if (d.ok() && (version >= 4) != IsSpecialFileMode(e->attrs.mode)) {
        return Status::Corruption("journal entry (SYMLINK): version " + std::to_string(version) + " with mode " +
                                  std::to_string(e->attrs.mode));
      }
      if (d.ok() && version >= 4 && !e->path2.empty()) {
        return Status::Corruption("journal entry (SYMLINK): special file with a target");
      }
      break;
    case JournalOp::kExchange:
      if (version < 4) return Status::Corruption("journal entry (EXCHANGE): version " + std::to_string(version));
      e->path = d.Str("path");
      e->path2 = d.Str("path2");
      break;
  }
  if (!d.ok()) {
    return Status::Corruption(std::string("journal entry (") + JournalOpName(e->op) + "): truncated or bad " +
                              d.what());
  }
  if (!d.done()) {
    return Status::Corruption(std::string("journal entry (") + JournalOpName(e->op) + "): trailing bytes");
  }
  return Status::OK();
}

void EncodeExtentMap(const ExtentMap& m, std::string* out) { PutExtentMap(out, m); }

uint64_t ExtentMapChecksum(const ExtentMap& m) {
  std::string b;
  PutExtentMap(&b, m);
  return XXH3_64bits(b.data(), b.size());
}

void EncodeExtentDelta(const ExtentDelta& d, std::string* out) { PutExtentDelta(out, d); }

Status DecodeExtentDelta(std::string_view in, ExtentDelta* d) {
  Decoder dec(in);
  ExtentDelta got = dec.Dext("extent delta");
  if (!dec.ok()) return Status::Corruption(std::string("extent delta: truncated or bad ") + dec.what());
  if (!dec.done()) return Status::Corruption("extent delta: trailing bytes");
  *d = std::move(got);
  return Status::OK();
}

Status DecodeExtentMap(std::string_view in, ExtentMap* m) {
  Decoder d(in);
  ExtentMap got = d.Ext("extent map");
  if (!d.ok()) return Status::Corruption(std::string("extent map: truncated or bad ") + d.what());
  if (!d.done()) return Status::Corruption("extent map: trailing bytes");
  *m = std::move(got);
  return Status::OK();
}

}  // namespace kvfs
