// IndexDb's on-disk format: the RocksDB column families, the encodings of their keys and values, and
// the small pure helpers every part of IndexDb shares (names and paths, (stamp, node) order, RocksDB
// status mapping). Private to IndexDb: included only by its part files (index_db.cc, namespace_index.cc,
// location_index.cc, progress_index.cc, index_apply.cc, index_export.cc) and index_txn.h; everything
// else (snapshots, fsck, the engine) goes through the IndexDb API in index_db.h.
// Thread-safety: value types and pure functions, no state.
// Invariants: this file IS the index format. Bump kIndexFormatVersion (index_db.h) if you change a key
// or value encoding below; integers in keys are big-endian (so they sort numerically), in values
// little-endian fixed-width; strings in values are <u32 length><bytes>.
//
// ---- On-disk layout (RocksDB 7.8, column families) and the part that owns each ----
//
//   CF          key                                    value                                          part
//   ----------  -------------------------------------  ---------------------------------------------  ---------
//   dentries    parent u64 BE | name                   ino u64, mode u32, cookie u64, stamp u64,      namespace
//                                                      node str
//   dircookies  parent u64 BE | cookie u64 BE          name str, ino u64, mode u32   (readdir order)  namespace
//   inodes      ino u64 BE                             InodeRecord (EncodeInode below; versioned)     namespace
//   xattrs      ino u64 BE | name                      value bytes                                    namespace
//   xattrstamps ino u64 BE | name                      stamp u64, node str, removed u8: the (stamp,   namespace
//                                                      node) of the name's last set or remove (format 3;
//                                                      absent: older than any entry)
//   dirrenames  stamp u64 BE | node                    from str, to str: the record of a directory    namespace
//                                                      rename (the (stamp, node) of the RENAME entry
//                                                      that moved it; format 4; never pruned)
//                                                      [, kind u8 1: a directory RENAME_EXCHANGE's
//                                                      record, both ways at once; format 5]
//   staged      ino u64 BE                             (empty)  uncommitted files; dropped at Open    namespace
//   tombstones  full path                              stamp u64, node str[, removed stamp u64, node str]  namespace
//   segments    node | 0x00 | gen u64 BE | seq u64 BE  state u8, live_bytes u64, live_records u64,    location
//                                                      [cut u64] (absent in older records: no cut)
//   segfiles    <segments key> | ino u64 BE            (empty)  which inodes are located in a segment location
//   meta        one key per value, below
//
//   meta key        value                                              written by
//   --------------  -------------------------------------------------  --------------------------------------
//   format          u32 kIndexFormatVersion                            index_db.cc (Open, new index)
//   node            node id bytes                                      index_db.cc (Open, new index)
//   ino_limit       u64: numbers below it are reserved (synced)        index_db.cc (Impl::AllocIno)
//   clean           "1" closed cleanly, "0" open                       index_db.cc (MarkOpen / MarkClean)
//   stats           u64 files, u64 directories, u64 live_bytes         index_txn.h (Txn::Commit)
//   hlc             u64 highest stamp written or set                   index_txn.h (Txn::Commit)
//   applied/<node>  journal position "<gen>-<n>@<offset>" (journal.h)  index_apply.cc (ApplyBatch);
//                                                                      read by progress_index.cc
//
// Parts: "namespace" = namespace_index.cc (by inode) and index_apply.cc (by path) write them through
// Ops (index_txn.h); "location" = location_index.cc, plus Ops::Account, which keeps segments' live
// bytes/records and segfiles in step with every committed inode. index_export.cc only reads.
// Dentries have a whole-key bloom filter (negative lookups of a hash fan-out never touch a data block).
#pragma once

#include <rocksdb/status.h>
#include <sys/stat.h>

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "blockstore/status.h"
#include "blockstore/types.h"
#include "index/index_db.h"
#include "index/inode.h"
#include "index/journal_format.h"

namespace kvfs::index_internal {

inline constexpr uint64_t kInoReserve = 1ull << 20;
inline constexpr uint64_t kMaxCookie = (1ull << 63) - 1;
// 1: every record without an extent map (what older builds wrote); 2: a file with one (+ str extents).
inline constexpr uint8_t kInodeRecordVersion = 2;

enum Cf : int {
  kDentries, kDirCookies, kInodes, kXattrs, kStaged, kSegments, kSegFiles, kTombstones, kMeta, kXattrStamps,
  kDirRenames, kNumCf
};
inline constexpr const char* kCfNames[kNumCf] = {"dentries", "dircookies", "inodes",     "xattrs", "staged",
                                                 "segments", "segfiles",   "tombstones", "meta",
                                                 "xattrstamps", "dirrenames"};

// meta keys
inline constexpr char kMetaFormat[] = "format";
inline constexpr char kMetaNode[] = "node";
inline constexpr char kMetaInoLimit[] = "ino_limit";
inline constexpr char kMetaHlc[] = "hlc";
inline constexpr char kMetaClean[] = "clean";
inline constexpr char kMetaBackingId[] = "backing_id";  // FormatInfo::id the index was built for
inline constexpr char kMetaStats[] = "stats";
inline constexpr char kMetaAppliedPrefix[] = "applied/";

inline int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---- encoding ----
inline void PutBE64(std::string* s, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; i++) b[i] = char(v >> (56 - 8 * i));
  s->append(b, 8);
}
inline uint64_t GetBE64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | uint8_t(p[i]);
  return v;
}
inline void PutLE(std::string* s, uint64_t v, int n) {
  for (int i = 0; i < n; i++) s->push_back(char(v >> (8 * i)));
}
inline void PutStr(std::string* s, std::string_view v) {
  PutLE(s, v.size(), 4);
  s->append(v);
}

struct Reader {
  std::string_view s;
  bool ok = true;
  uint64_t Le(int n) {
    if (s.size() < size_t(n)) {
      ok = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= uint64_t(uint8_t(s[i])) << (8 * i);
    s.remove_prefix(n);
    return v;
  }
  uint64_t U64() { return Le(8); }
  uint32_t U32() { return uint32_t(Le(4)); }
  uint8_t U8() { return uint8_t(Le(1)); }
  std::string Str() {
    uint32_t n = U32();
    if (!ok || s.size() < n) {
      ok = false;
      return {};
    }
    std::string r(s.substr(0, n));
    s.remove_prefix(n);
    return r;
  }
};

struct InodeRec {
  Attr attr;
  Location loc;
  ExtentMapRef extents;  // files that are not one record (loc empty); null otherwise
  bool committed = false;
  uint64_t parent = 0;
  std::string name;
  std::string symlink;
  uint64_t stamp = 0;
  std::string stamp_node;
  bool is_dir() const { return S_ISDIR(attr.mode); }
  bool is_reg() const { return S_ISREG(attr.mode); }
};

// InodeRecord v1 (little-endian): u8 version | u64 ino | u32 mode | u32 uid | u32 gid | u64 size |
// i64 atime | i64 mtime | i64 ctime | u32 nlink | u8 committed | u64 parent | str name |
// str loc.node | u64 loc.gen | u64 loc.seq | u64 record_offset | u64 value_offset | u64 length |
// str symlink | u64 stamp | str stamp_node
// InodeRecord v2 = v1 + str extents (the `ext` bytes of index/journal_format.h, the file's extent map;
// loc is then empty). Written only for a file with an extent map: every other record keeps v1 bytes.
// `symlink` holds a symlink's target; for a character or block device it holds the device number
// (attr.rdev, 8 bytes LE); it is empty for every other type.
inline bool IsDeviceMode(uint32_t mode) { return S_ISCHR(mode) || S_ISBLK(mode); }
inline std::string EncodeInode(const InodeRec& r) {
  std::string s;
  PutLE(&s, r.extents ? 2 : 1, 1);
  PutLE(&s, r.attr.ino, 8);
  PutLE(&s, r.attr.mode, 4);
  PutLE(&s, r.attr.uid, 4);
  PutLE(&s, r.attr.gid, 4);
  PutLE(&s, r.attr.size, 8);
  PutLE(&s, uint64_t(r.attr.atime_ns), 8);
  PutLE(&s, uint64_t(r.attr.mtime_ns), 8);
  PutLE(&s, uint64_t(r.attr.ctime_ns), 8);
  PutLE(&s, r.attr.nlink, 4);
  PutLE(&s, r.committed ? 1 : 0, 1);
  PutLE(&s, r.parent, 8);
  PutStr(&s, r.name);
  PutStr(&s, r.loc.segment.node);
  PutLE(&s, r.loc.segment.generation, 8);
  PutLE(&s, r.loc.segment.seq, 8);
  PutLE(&s, r.loc.record_offset, 8);
  PutLE(&s, r.loc.value_offset, 8);
  PutLE(&s, r.loc.length, 8);
  if (IsDeviceMode(r.attr.mode)) {
    std::string dev;
    PutLE(&dev, r.attr.rdev, 8);
    PutStr(&s, dev);
  } else {
    PutStr(&s, r.symlink);
  }
  PutLE(&s, r.stamp, 8);
  PutStr(&s, r.stamp_node);
  if (r.extents) {
    std::string ext;
    EncodeExtentMap(*r.extents, &ext);
    PutStr(&s, ext);
  }
  return s;
}

inline bool DecodeInode(std::string_view v, InodeRec* r) {
  Reader rd{v};
  const uint8_t version = rd.U8();
  if (version < 1 || version > kInodeRecordVersion) return false;
  r->attr.ino = rd.U64();
  r->attr.mode = rd.U32();
  r->attr.uid = rd.U32();
  r->attr.gid = rd.U32();
  r->attr.size = rd.U64();
  r->attr.atime_ns = int64_t(rd.U64());
  r->attr.mtime_ns = int64_t(rd.U64());
  r->attr.ctime_ns = int64_t(rd.U64());
  r->attr.nlink = rd.U32();
  r->committed = rd.U8() != 0;
  r->parent = rd.U64();
  r->name = rd.Str();
  r->loc.segment.node = rd.Str();
  r->loc.segment.generation = rd.U64();
  r->loc.segment.seq = rd.U64();
  r->loc.record_offset = rd.U64();
  r->loc.value_offset = rd.U64();
  r->loc.length = rd.U64();
  r->symlink = rd.Str();
  r->attr.rdev = 0;
  if (rd.ok && IsDeviceMode(r->attr.mode)) {
    if (r->symlink.size() != 8) return false;
    Reader dev{r->symlink};
    r->attr.rdev = dev.U64();
    r->symlink.clear();
  }
  r->stamp = rd.U64();
  r->stamp_node = rd.Str();
  r->extents = {};
  if (version >= 2) {
    const std::string ext = rd.Str();
    ExtentMap m;
    if (!rd.ok || !r->loc.empty() || !DecodeExtentMap(ext, &m).ok()) return false;
    r->extents = ExtentMapRef(std::make_shared<const ExtentMap>(std::move(m)));
  }
  return rd.ok;
}

struct DentryVal {
  uint64_t ino = 0;
  uint32_t mode = 0;  // S_IFMT bits
  uint64_t cookie = 0;
  uint64_t stamp = 0;
  std::string node;
};
inline std::string EncodeDentry(const DentryVal& d) {
  std::string s;
  PutLE(&s, d.ino, 8);
  PutLE(&s, d.mode, 4);
  PutLE(&s, d.cookie, 8);
  PutLE(&s, d.stamp, 8);
  PutStr(&s, d.node);
  return s;
}
inline bool DecodeDentry(std::string_view v, DentryVal* d) {
  Reader rd{v};
  d->ino = rd.U64();
  d->mode = rd.U32();
  d->cookie = rd.U64();
  d->stamp = rd.U64();
  d->node = rd.Str();
  return rd.ok;
}

inline std::string EncodeCookieVal(std::string_view name, uint64_t ino, uint32_t mode) {
  std::string s;
  PutStr(&s, name);
  PutLE(&s, ino, 8);
  PutLE(&s, mode, 4);
  return s;
}

inline std::string InoKey(uint64_t ino) {
  std::string k;
  PutBE64(&k, ino);
  return k;
}
inline std::string DentryKey(uint64_t parent, std::string_view name) {
  std::string k = InoKey(parent);
  k.append(name);
  return k;
}
inline std::string CookieKey(uint64_t parent, uint64_t cookie) {
  std::string k = InoKey(parent);
  PutBE64(&k, cookie);
  return k;
}
inline std::string XattrKey(uint64_t ino, std::string_view name) { return DentryKey(ino, name); }
inline std::string SegKey(const SegmentId& id) {
  std::string k = id.node;
  k.push_back('\0');
  PutBE64(&k, id.generation);
  PutBE64(&k, id.seq);
  return k;
}
inline bool DecodeSegKey(std::string_view k, SegmentId* id) {
  auto z = k.find('\0');
  if (z == std::string_view::npos || k.size() != z + 17) return false;
  id->node = std::string(k.substr(0, z));
  id->generation = GetBE64(k.data() + z + 1);
  id->seq = GetBE64(k.data() + z + 9);
  return true;
}
inline std::string EncodeSeg(const SegmentInfo& s) {
  std::string v;
  PutLE(&v, uint8_t(s.state), 1);
  PutLE(&v, s.live_bytes, 8);
  PutLE(&v, s.live_records, 8);
  PutLE(&v, s.cut, 8);  // absent in records written before it existed (decoded as "no cut")
  return v;
}
inline bool DecodeSeg(std::string_view v, SegmentInfo* s) {
  Reader rd{v};
  s->state = SegmentState(rd.U8());
  s->live_bytes = rd.U64();
  s->live_records = rd.U64();
  s->cut = rd.s.size() >= 8 ? rd.U64() : UINT64_MAX;
  return rd.ok;
}
// tombstones value: stamp u64, node str[, removed_stamp u64, removed_node str] (the removed binding,
// since the link claims; absent in older indexes: decoded as 0 / "").
inline std::string EncodeTomb(uint64_t stamp, std::string_view node, uint64_t removed_stamp = 0,
                              std::string_view removed_node = {}) {
  std::string v;
  PutLE(&v, stamp, 8);
  PutStr(&v, node);
  if (removed_stamp != 0) {
    PutLE(&v, removed_stamp, 8);
    PutStr(&v, removed_node);
  }
  return v;
}
inline bool DecodeTomb(std::string_view v, Tombstone* t) {
  Reader rd{v};
  t->stamp = rd.U64();
  t->node = rd.Str();
  t->removed_stamp = 0;
  t->removed_node.clear();
  if (rd.ok && !rd.s.empty()) {
    t->removed_stamp = rd.U64();
    t->removed_node = rd.Str();
  }
  return rd.ok;
}

// xattrstamps value: the last set or remove of one xattr name (per-name last writer wins).
struct XattrStamp {
  uint64_t stamp = 0;
  std::string node;
  bool removed = false;
};
inline std::string EncodeXattrStamp(const XattrStamp& x) {
  std::string s;
  PutLE(&s, x.stamp, 8);
  PutStr(&s, x.node);
  s.push_back(x.removed ? 1 : 0);
  return s;
}
inline bool DecodeXattrStamp(std::string_view v, XattrStamp* x) {
  Reader rd{v};
  x->stamp = rd.U64();
  x->node = rd.Str();
  uint8_t r = rd.U8();
  x->removed = r == 1;
  return rd.ok && r <= 1 && rd.s.empty();
}

// dirrenames key: stamp u64 BE | node (so records list in (stamp, node) order); value: from str, to str
// [, kind u8: 1 = the record of a directory RENAME_EXCHANGE (index format 5); absent = a rename].
inline std::string DirRenameKey(uint64_t stamp, std::string_view node) {
  std::string k;
  PutBE64(&k, stamp);
  k.append(node);
  return k;
}
inline std::string EncodeDirRename(const DirRenameRecord& r) {
  std::string v;
  PutStr(&v, r.from);
  PutStr(&v, r.to);
  if (r.exchange) v.push_back(1);
  return v;
}
// False for a damaged record: a short key, no node, a value that does not decode exactly, paths that
// are not absolute or a rename of the root.
inline bool DecodeDirRename(std::string_view k, std::string_view v, DirRenameRecord* r) {
  if (k.size() <= 8) return false;
  r->stamp = GetBE64(k.data());
  r->node = std::string(k.substr(8));
  Reader rd{v};
  r->from = rd.Str();
  r->to = rd.Str();
  r->exchange = false;
  if (rd.ok && !rd.s.empty()) {
    const uint8_t kind = rd.U8();
    if (kind != 1) return false;
    r->exchange = true;
  }
  return rd.ok && rd.s.empty() && r->stamp != 0 && r->from.size() > 1 && r->from[0] == '/' && r->to.size() > 1 &&
         r->to[0] == '/';
}

// (stamp, node) order; true if a > b.
inline bool Newer(uint64_t as, std::string_view an, uint64_t bs, std::string_view bn) {
  if (as != bs) return as > bs;
  return an > bn;
}

inline Status ToStatus(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::OK();
  if (s.IsNotFound()) return Status::NotFound(std::string(what) + ": " + s.ToString());
  if (s.IsCorruption()) return Status::Corruption(std::string(what) + ": " + s.ToString());
  if (s.IsNoSpace()) return Status::NoSpace(std::string(what) + ": " + s.ToString());
  return Status::IOError(std::string(what) + ": " + s.ToString());
}

inline Status ValidateName(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos)
    return Status::InvalidArgument("invalid name '" + std::string(name) + "'");
  if (name.size() > 255) return Status::FromErrno(ENAMETOOLONG, "name too long");
  return Status::OK();
}

// Splits "/a/b/c" into {"a","b","c"}; InvalidArgument for relative paths or empty components.
inline Status SplitPath(std::string_view path, std::vector<std::string_view>* out) {
  out->clear();
  if (path.empty() || path[0] != '/') return Status::InvalidArgument("not an absolute path: " + std::string(path));
  size_t i = 1;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view c = path.substr(i, j - i);
    if (c.empty() || c == "." || c == "..") return Status::InvalidArgument("bad path: " + std::string(path));
    out->push_back(c);
    i = j + 1;
  }
  return Status::OK();
}

inline std::string JoinPath(std::string_view dir, std::string_view name) {
  std::string p(dir);
  if (p != "/") p.push_back('/');
  p.append(name);
  return p;
}

inline Node NodeOf(const InodeRec& r) {
  Node n;
  n.attr = r.attr;
  n.location = r.loc;
  n.extents = r.extents;
  n.committed = r.committed;
  n.parent = r.parent;
  n.name = r.name;
  return n;
}

}  // namespace kvfs::index_internal
