// IndexDb implementation. Layout and rules: index_db.h.
#include "index/index_db.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/options_util.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/xattr.h>
#include <xxhash.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <optional>

#include "blockstore/log.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

namespace kvfs {

namespace {

constexpr uint64_t kInoReserve = 1ull << 20;
constexpr uint64_t kMaxCookie = (1ull << 63) - 1;
constexpr uint8_t kInodeRecordVersion = 1;

enum Cf : int { kDentries, kDirCookies, kInodes, kXattrs, kStaged, kSegments, kSegFiles, kTombstones, kMeta, kNumCf };
const char* const kCfNames[kNumCf] = {"dentries", "dircookies", "inodes",     "xattrs", "staged",
                                      "segments", "segfiles",   "tombstones", "meta"};

// meta keys
const char kMetaFormat[] = "format";
const char kMetaNode[] = "node";
const char kMetaInoLimit[] = "ino_limit";
const char kMetaHlc[] = "hlc";
const char kMetaClean[] = "clean";
const char kMetaStats[] = "stats";
const char kMetaAppliedPrefix[] = "applied/";

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---- encoding ----
void PutBE64(std::string* s, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; i++) b[i] = char(v >> (56 - 8 * i));
  s->append(b, 8);
}
uint64_t GetBE64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | uint8_t(p[i]);
  return v;
}
void PutLE(std::string* s, uint64_t v, int n) {
  for (int i = 0; i < n; i++) s->push_back(char(v >> (8 * i)));
}
void PutStr(std::string* s, std::string_view v) {
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
std::string EncodeInode(const InodeRec& r) {
  std::string s;
  PutLE(&s, kInodeRecordVersion, 1);
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
  PutStr(&s, r.symlink);
  PutLE(&s, r.stamp, 8);
  PutStr(&s, r.stamp_node);
  return s;
}

bool DecodeInode(std::string_view v, InodeRec* r) {
  Reader rd{v};
  if (rd.U8() != kInodeRecordVersion) return false;
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
  r->stamp = rd.U64();
  r->stamp_node = rd.Str();
  return rd.ok;
}

struct DentryVal {
  uint64_t ino = 0;
  uint32_t mode = 0;  // S_IFMT bits
  uint64_t cookie = 0;
  uint64_t stamp = 0;
  std::string node;
};
std::string EncodeDentry(const DentryVal& d) {
  std::string s;
  PutLE(&s, d.ino, 8);
  PutLE(&s, d.mode, 4);
  PutLE(&s, d.cookie, 8);
  PutLE(&s, d.stamp, 8);
  PutStr(&s, d.node);
  return s;
}
bool DecodeDentry(std::string_view v, DentryVal* d) {
  Reader rd{v};
  d->ino = rd.U64();
  d->mode = rd.U32();
  d->cookie = rd.U64();
  d->stamp = rd.U64();
  d->node = rd.Str();
  return rd.ok;
}

std::string EncodeCookieVal(std::string_view name, uint64_t ino, uint32_t mode) {
  std::string s;
  PutStr(&s, name);
  PutLE(&s, ino, 8);
  PutLE(&s, mode, 4);
  return s;
}

std::string InoKey(uint64_t ino) {
  std::string k;
  PutBE64(&k, ino);
  return k;
}
std::string DentryKey(uint64_t parent, std::string_view name) {
  std::string k = InoKey(parent);
  k.append(name);
  return k;
}
std::string CookieKey(uint64_t parent, uint64_t cookie) {
  std::string k = InoKey(parent);
  PutBE64(&k, cookie);
  return k;
}
std::string XattrKey(uint64_t ino, std::string_view name) { return DentryKey(ino, name); }
std::string SegKey(const SegmentId& id) {
  std::string k = id.node;
  k.push_back('\0');
  PutBE64(&k, id.generation);
  PutBE64(&k, id.seq);
  return k;
}
bool DecodeSegKey(std::string_view k, SegmentId* id) {
  auto z = k.find('\0');
  if (z == std::string_view::npos || k.size() != z + 17) return false;
  id->node = std::string(k.substr(0, z));
  id->generation = GetBE64(k.data() + z + 1);
  id->seq = GetBE64(k.data() + z + 9);
  return true;
}
std::string EncodeSeg(const SegmentInfo& s) {
  std::string v;
  PutLE(&v, uint8_t(s.state), 1);
  PutLE(&v, s.live_bytes, 8);
  PutLE(&v, s.live_records, 8);
  PutLE(&v, s.cut, 8);  // absent in records written before it existed (decoded as "no cut")
  return v;
}
bool DecodeSeg(std::string_view v, SegmentInfo* s) {
  Reader rd{v};
  s->state = SegmentState(rd.U8());
  s->live_bytes = rd.U64();
  s->live_records = rd.U64();
  s->cut = rd.s.size() >= 8 ? rd.U64() : UINT64_MAX;
  return rd.ok;
}
std::string EncodeTomb(uint64_t stamp, std::string_view node) {
  std::string v;
  PutLE(&v, stamp, 8);
  PutStr(&v, node);
  return v;
}
bool DecodeTomb(std::string_view v, Tombstone* t) {
  Reader rd{v};
  t->stamp = rd.U64();
  t->node = rd.Str();
  return rd.ok;
}

// (stamp, node) order; true if a > b.
bool Newer(uint64_t as, std::string_view an, uint64_t bs, std::string_view bn) {
  if (as != bs) return as > bs;
  return an > bn;
}

Status ToStatus(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::OK();
  if (s.IsNotFound()) return Status::NotFound(std::string(what) + ": " + s.ToString());
  if (s.IsCorruption()) return Status::Corruption(std::string(what) + ": " + s.ToString());
  if (s.IsNoSpace()) return Status::NoSpace(std::string(what) + ": " + s.ToString());
  return Status::IOError(std::string(what) + ": " + s.ToString());
}

Status ValidateName(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos)
    return Status::InvalidArgument("invalid name '" + std::string(name) + "'");
  if (name.size() > 255) return Status::FromErrno(ENAMETOOLONG, "name too long");
  return Status::OK();
}

// Splits "/a/b/c" into {"a","b","c"}; InvalidArgument for relative paths or empty components.
Status SplitPath(std::string_view path, std::vector<std::string_view>* out) {
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

std::string JoinPath(std::string_view dir, std::string_view name) {
  std::string p(dir);
  if (p != "/") p.push_back('/');
  p.append(name);
  return p;
}

Node NodeOf(const InodeRec& r) {
  Node n;
  n.attr = r.attr;
  n.location = r.loc;
  n.committed = r.committed;
  n.parent = r.parent;
  n.name = r.name;
  return n;
}

}  // namespace

uint64_t DirCookieOf(std::string_view name) {
  uint64_t c = XXH3_64bits(name.data(), name.size()) & kMaxCookie;
  return c < 3 ? c + 3 : c;
}

// ------------------------------------------------------------------------------------------------
struct IndexDb::Impl {
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> cf;
  std::string dir;
  std::string node;
  std::mutex mu;          // serializes every write
  uint64_t next_ino = 2;  // under mu
  uint64_t ino_limit = 2; // under mu
  uint64_t (*cookie_hash)(std::string_view) = nullptr;
  std::atomic<uint64_t> hlc{0};
  std::atomic<uint64_t> files{0}, dirs{0}, live_bytes{0}, staged{0};

  rocksdb::ColumnFamilyHandle* H(Cf c) const { return cf[c]; }
  Status DbGet(Cf c, const std::string& key, std::string* val, bool* found,
               const rocksdb::Snapshot* snap = nullptr) {
    rocksdb::ReadOptions ro;
    ro.snapshot = snap;
    auto s = db->Get(ro, H(c), key, val);
    *found = s.ok();
    if (s.ok() || s.IsNotFound()) return Status::OK();
    return ToStatus(s, "index get");
  }
  Result<uint64_t> AllocIno();

  // A failed write (typically ENOSPC on the local index disk) puts RocksDB in its read-only error
  // state: every later write fails, and syncing its WAL again would trip RocksDB's own assertion. So
  // the first failure is logged once, loudly, and SyncWal/MarkClean stop touching the WAL; the index is
  // read-only until the next mount (which rebuilds it from the journals: it was not closed cleanly).
  std::atomic<bool> write_failed{false};
  Status WriteError(const rocksdb::Status& rs, std::string_view what) {
    Status st = ToStatus(rs, what);
    if (!write_failed.exchange(true)) {
      spdlog::error("kvfs: local index {} is read-only after a failed write ({}): creates, renames, unlinks and "
                    "peers' changes fail (ENOSPC/EIO) until the next mount; reads of existing files continue. "
                    "Free space in {} and remount (the index is rebuilt from the journals)",
                    dir, st.ToString(), dir);
    }
    return st;
  }
};

// A write transaction under Impl::mu: an overlay of pending puts/deletes per column family (so later
// steps of one operation see earlier ones), an undo log for per-op rollback, and counter deltas.
class Txn {
 public:
  explicit Txn(IndexDb::Impl* im) : im_(im) {}

  Status Get(Cf c, const std::string& key, std::string* val, bool* found) {
    auto it = ov_[c].find(key);
    if (it != ov_[c].end()) {
      *found = it->second.has_value();
      if (*found) *val = *it->second;
      return Status::OK();
    }
    return im_->DbGet(c, key, val, found);
  }
  void Put(Cf c, const std::string& key, std::string val) { Set(c, key, std::move(val)); }
  void Del(Cf c, const std::string& key) { Set(c, key, std::nullopt); }

  // Visits keys with `prefix` in order (overlay merged over the DB); fn returns false to stop.
  Status ForEachPrefix(Cf c, const std::string& prefix,
                       const std::function<bool(const std::string&, const std::string&)>& fn) {
    std::unique_ptr<rocksdb::Iterator> it(im_->db->NewIterator(rocksdb::ReadOptions(), im_->H(c)));
    it->Seek(prefix);
    auto ot = ov_[c].lower_bound(prefix);
    for (;;) {
      bool dv = it->Valid() && it->key().starts_with(prefix);
      bool ovv = ot != ov_[c].end() && std::string_view(ot->first).starts_with(prefix);
      if (!dv && !ovv) break;
      int cmp = !dv ? 1 : !ovv ? -1 : it->key().compare(rocksdb::Slice(ot->first));
      bool go = true;
      if (cmp < 0) {
        go = fn(it->key().ToString(), it->value().ToString());
        it->Next();
      } else {
        if (ot->second) go = fn(ot->first, *ot->second);
        if (cmp == 0) it->Next();
        ++ot;
      }
      if (!go) break;
    }
    return ToStatus(it->status(), "index iterate");
  }

  struct Mark {
    size_t undo;
    int64_t files, dirs, live, staged;
    uint64_t hlc;
  };
  Mark GetMark() const { return {undo_.size(), d_files, d_dirs, d_live, d_staged, hlc}; }
  void Rollback(const Mark& m) {
    while (undo_.size() > m.undo) {
      Undo& u = undo_.back();
      if (u.had) ov_[u.cf][u.key] = std::move(u.old);
      else ov_[u.cf].erase(u.key);
      undo_.pop_back();
    }
    d_files = m.files, d_dirs = m.dirs, d_live = m.live, d_staged = m.staged, hlc = m.hlc;
  }

  void RaiseHlc(uint64_t s) { hlc = std::max(hlc, s); }

  Status Commit() {
    rocksdb::WriteBatch wb;
    for (int c = 0; c < kNumCf; c++) {
      for (auto& [k, v] : ov_[c]) {
        if (v) wb.Put(im_->H(Cf(c)), k, *v);
        else wb.Delete(im_->H(Cf(c)), k);
      }
    }
    uint64_t nf = im_->files + d_files, nd = im_->dirs + d_dirs, nl = im_->live_bytes + d_live;
    if (d_files || d_dirs || d_live) {
      std::string v;
      PutLE(&v, nf, 8);
      PutLE(&v, nd, 8);
      PutLE(&v, nl, 8);
      wb.Put(im_->H(kMeta), kMetaStats, v);
    }
    bool raise = hlc > im_->hlc.load();
    if (raise) {
      std::string v;
      PutLE(&v, hlc, 8);
      wb.Put(im_->H(kMeta), kMetaHlc, v);
    }
    if (wb.Count() == 0) return Status::OK();
    rocksdb::WriteOptions wo;
    wo.sync = false;
    auto s = im_->db->Write(wo, &wb);
    if (!s.ok()) return im_->WriteError(s, "index write");
    im_->files = nf, im_->dirs = nd, im_->live_bytes = nl;
    im_->staged += d_staged;
    if (raise) im_->hlc = hlc;
    return Status::OK();
  }

  int64_t d_files = 0, d_dirs = 0, d_live = 0, d_staged = 0;
  uint64_t hlc = 0;

 private:
  void Set(Cf c, const std::string& key, std::optional<std::string> v) {
    auto it = ov_[c].find(key);
    if (it != ov_[c].end()) {
      undo_.push_back({c, key, true, std::move(it->second)});
      it->second = std::move(v);
    } else {
      undo_.push_back({c, key, false, std::nullopt});
      ov_[c].emplace(key, std::move(v));
    }
  }
  struct Undo {
    Cf cf;
    std::string key;
    bool had;
    std::optional<std::string> old;
  };
  IndexDb::Impl* im_;
  std::map<std::string, std::optional<std::string>> ov_[kNumCf];
  std::vector<Undo> undo_;
};

Result<uint64_t> IndexDb::Impl::AllocIno() {
  if (next_ino >= ino_limit) {
    uint64_t lim = next_ino + kInoReserve;
    std::string v;
    PutLE(&v, lim, 8);
    rocksdb::WriteOptions wo;
    wo.sync = true;
    auto s = db->Put(wo, H(kMeta), kMetaInoLimit, v);
    if (!s.ok()) return WriteError(s, "reserve inode numbers");
    ino_limit = lim;
  }
  return next_ino++;
}

// ---- transaction-level helpers (all under mu) ----
namespace {

struct Ops {
  IndexDb::Impl* im;
  Txn& t;

  Status GetRec(uint64_t ino, std::optional<InodeRec>* out) {
    std::string v;
    bool found;
    KVFS_RETURN_IF_ERROR(t.Get(kInodes, InoKey(ino), &v, &found));
    out->reset();
    if (!found) return Status::OK();
    InodeRec r;
    if (!DecodeInode(v, &r)) return Status::Corruption("bad inode record " + std::to_string(ino));
    *out = std::move(r);
    return Status::OK();
  }
  Result<InodeRec> MustRec(uint64_t ino) {
    std::optional<InodeRec> r;
    KVFS_RETURN_IF_ERROR(GetRec(ino, &r));
    if (!r) return Status::NotFound("inode " + std::to_string(ino));
    return std::move(*r);
  }
  Result<InodeRec> MustDir(uint64_t ino) {
    auto r = MustRec(ino);
    if (r.ok() && !r->is_dir()) return Status::FromErrno(ENOTDIR, "inode " + std::to_string(ino) + " not a directory");
    return r;
  }
  Status GetDentry(uint64_t parent, std::string_view name, std::optional<DentryVal>* out) {
    std::string v;
    bool found;
    KVFS_RETURN_IF_ERROR(t.Get(kDentries, DentryKey(parent, name), &v, &found));
    out->reset();
    if (!found) return Status::OK();
    DentryVal d;
    if (!DecodeDentry(v, &d)) return Status::Corruption("bad dentry");
    *out = std::move(d);
    return Status::OK();
  }

  // Adds (sign +1) or removes (-1) a record's contribution to counters, segments and secondary CFs.
  Status Account(const InodeRec& r, int sign) {
    if (r.is_dir()) {
      t.d_dirs += sign;
      return Status::OK();
    }
    if (!r.committed) {
      t.d_staged += sign;
      if (sign > 0) t.Put(kStaged, InoKey(r.attr.ino), "");
      else t.Del(kStaged, InoKey(r.attr.ino));
      return Status::OK();
    }
    t.d_files += sign;
    if (r.is_reg()) t.d_live += sign * int64_t(r.attr.size);
    if (!r.loc.empty()) {
      std::string sk = SegKey(r.loc.segment);
      std::string v;
      bool found;
      KVFS_RETURN_IF_ERROR(t.Get(kSegments, sk, &v, &found));
      SegmentInfo si;
      if (found && !DecodeSeg(v, &si)) return Status::Corruption("bad segment record");
      si.live_bytes += sign * int64_t(r.loc.length);
      si.live_records += sign;
      t.Put(kSegments, sk, EncodeSeg(si));
      std::string fk = sk + InoKey(r.attr.ino);
      if (sign > 0) t.Put(kSegFiles, fk, "");
      else t.Del(kSegFiles, fk);
    }
    return Status::OK();
  }
  // Replaces old (may be null) by new record (may be null), keeping every derived structure right.
  Status PutRec(const InodeRec* old, const InodeRec* nw) {
    if (old) KVFS_RETURN_IF_ERROR(Account(*old, -1));
    if (nw) {
      KVFS_RETURN_IF_ERROR(Account(*nw, +1));
      t.Put(kInodes, InoKey(nw->attr.ino), EncodeInode(*nw));
      if (nw->stamp) t.RaiseHlc(nw->stamp);
    } else if (old) {
      t.Del(kInodes, InoKey(old->attr.ino));
      // xattrs of a removed inode go with it
      std::vector<std::string> keys;
      KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kXattrs, InoKey(old->attr.ino), [&](auto& k, auto&) {
        keys.push_back(k);
        return true;
      }));
      for (auto& k : keys) t.Del(kXattrs, k);
    }
    return Status::OK();
  }
  Status UpdateRec(const InodeRec& old, const InodeRec& nw) { return PutRec(&old, &nw); }

  Result<uint64_t> AllocCookie(uint64_t parent, std::string_view name) {
    uint64_t c = DirCookieOf(name);
    if (im->cookie_hash) {
      c = im->cookie_hash(name) & kMaxCookie;
      if (c < 3) c += 3;
    }
    for (;;) {
      std::string v;
      bool found;
      KVFS_RETURN_IF_ERROR(t.Get(kDirCookies, CookieKey(parent, c), &v, &found));
      if (!found) return c;
      c = c >= kMaxCookie ? 3 : c + 1;
    }
  }
  // Binds parent/name -> ino. cookie 0 = allocate one.
  Status Link(uint64_t parent, std::string_view name, uint64_t ino, uint32_t mode, uint64_t stamp,
              std::string_view node, uint64_t cookie = 0) {
    if (!cookie) {
      auto c = AllocCookie(parent, name);
      if (!c.ok()) return c.status();
      cookie = *c;
    }
    DentryVal d{ino, mode & S_IFMT, cookie, stamp, std::string(node)};
    t.Put(kDentries, DentryKey(parent, name), EncodeDentry(d));
    t.Put(kDirCookies, CookieKey(parent, cookie), EncodeCookieVal(name, ino, mode & S_IFMT));
    if (stamp) t.RaiseHlc(stamp);
    return Status::OK();
  }
  void UnlinkDentry(uint64_t parent, std::string_view name, const DentryVal& d) {
    t.Del(kDentries, DentryKey(parent, name));
    t.Del(kDirCookies, CookieKey(parent, d.cookie));
  }
  // mtime/ctime = now; nlink += delta.
  Status TouchDir(uint64_t dir, int nlink_delta) {
    auto r = MustRec(dir);
    if (!r.ok()) return r.status();
    InodeRec n = *r;
    n.attr.mtime_ns = n.attr.ctime_ns = NowNs();
    n.attr.nlink = uint32_t(int64_t(n.attr.nlink) + nlink_delta);
    return UpdateRec(*r, n);
  }
  Result<bool> DirEmpty(uint64_t dir) {
    bool empty = true;
    KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kDirCookies, InoKey(dir), [&](auto&, auto&) {
      empty = false;
      return false;
    }));
    return empty;
  }
  Result<std::string> PathOf(uint64_t ino) {
    std::vector<std::string> parts;
    for (int depth = 0; ino != kRootIno; depth++) {
      if (depth > 4096) return Status::Corruption("parent loop at inode " + std::to_string(ino));
      auto r = MustRec(ino);
      if (!r.ok()) return r.status();
      parts.push_back(r->name);
      ino = r->parent;
    }
    std::string p;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) p += "/" + *it;
    return p.empty() ? std::string("/") : p;
  }
  // true if `ino` is `anc` or lies below it.
  Result<bool> IsUnder(uint64_t ino, uint64_t anc) {
    for (int depth = 0; depth < 4096; depth++) {
      if (ino == anc) return true;
      if (ino == kRootIno) return false;
      auto r = MustRec(ino);
      if (!r.ok()) return r.status();
      ino = r->parent;
    }
    return Status::Corruption("parent loop");
  }
  Status GetTomb(const std::string& path, std::optional<Tombstone>* out) {
    std::string v;
    bool found;
    KVFS_RETURN_IF_ERROR(t.Get(kTombstones, path, &v, &found));
    out->reset();
    if (!found) return Status::OK();
    Tombstone tb;
    if (!DecodeTomb(v, &tb)) return Status::Corruption("bad tombstone");
    *out = std::move(tb);
    return Status::OK();
  }
  Status RaiseTomb(const std::string& path, uint64_t stamp, std::string_view node) {
    std::optional<Tombstone> tb;
    KVFS_RETURN_IF_ERROR(GetTomb(path, &tb));
    if (!tb || Newer(stamp, node, tb->stamp, tb->node)) t.Put(kTombstones, path, EncodeTomb(stamp, node));
    t.RaiseHlc(stamp);
    return Status::OK();
  }
  Result<SegmentState> SegState(const SegmentId& id, bool* known) {
    std::string v;
    bool found;
    KVFS_RETURN_IF_ERROR(t.Get(kSegments, SegKey(id), &v, &found));
    *known = found;
    SegmentInfo si;
    if (found && !DecodeSeg(v, &si)) return Status::Corruption("bad segment record");
    return si.state;
  }
  Result<bool> InDroppedSegment(const Location& loc) {
    if (loc.empty()) return false;
    bool known;
    auto st = SegState(loc.segment, &known);
    if (!st.ok()) return st.status();
    return known && *st == SegmentState::kDropped;
  }
  Result<InodeRec> NewRec(uint32_t mode, uint64_t parent, std::string_view name) {
    auto ino = im->AllocIno();
    if (!ino.ok()) return ino.status();
    InodeRec r;
    r.attr.ino = *ino;
    r.attr.mode = mode;
    r.attr.atime_ns = r.attr.mtime_ns = r.attr.ctime_ns = NowNs();
    r.attr.nlink = S_ISDIR(mode) ? 2 : 1;
    if (S_ISDIR(mode)) r.attr.size = 4096;
    r.committed = true;
    r.parent = parent;
    r.name = std::string(name);
    return r;
  }
  // Removes the dentry parent/name (d) and, unless it is a detached-keep case, the inode it names.
  Status RemoveEntryAndInode(uint64_t parent, std::string_view name, const DentryVal& d) {
    UnlinkDentry(parent, name, d);
    std::optional<InodeRec> r;
    KVFS_RETURN_IF_ERROR(GetRec(d.ino, &r));
    if (r) KVFS_RETURN_IF_ERROR(PutRec(&*r, nullptr));
    return Status::OK();
  }
};

void ApplyAttrMask(Attr* a, const Attr& in, uint32_t mask) {
  if (mask & kSetMode) a->mode = (a->mode & S_IFMT) | (in.mode & 07777);
  if (mask & kSetUid) a->uid = in.uid;
  if (mask & kSetGid) a->gid = in.gid;
  if ((mask & kSetSize) && S_ISREG(a->mode)) a->size = in.size;
  if (mask & kSetAtime) a->atime_ns = in.atime_ns;
  if (mask & kSetMtime) a->mtime_ns = in.mtime_ns;
  if (mask & kSetCtime) a->ctime_ns = in.ctime_ns;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
IndexDb::IndexDb() : impl_(std::make_unique<Impl>()) {}
IndexDb::~IndexDb() { Close(); }

namespace {
// RocksDB's own diagnostics go to kvfs's log (spdlog; see Logv), instead of a LOG file in
// the index dir: on a full index disk RocksDB's file logger asserts (WritableFileWriter::
// AssertFalseAndGetStatusForPrevError in Debian's librocksdb) on its next line after a failed append,
// which aborted the daemon.
class SpdlogRocksLogger final : public rocksdb::Logger {
 public:
  SpdlogRocksLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char buf[1024];
    std::vsnprintf(buf, sizeof(buf), format, ap);
    // RocksDB's errors as kvfs warnings; its warnings (e.g. a refused Open, which kvfs reports itself as a
    // one-line error) only with --log-level debug.
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) LogLimited(spdlog::level::warn, "rocksdb-error", "rocksdb: {}", buf);
    else spdlog::debug("rocksdb: {}", buf);
  }
};
}  // namespace

Result<std::unique_ptr<IndexDb>> IndexDb::Open(const IndexDbOptions& opts) {
  if (opts.dir.empty()) return Status::InvalidArgument("index dir not set");
  if (opts.node_id.empty() || opts.node_id.find('\0') != std::string::npos)
    return Status::InvalidArgument("node id not set");
  std::error_code ec;
  std::filesystem::create_directories(opts.dir, ec);
  if (ec) return Status::IOError("create index dir " + opts.dir + ": " + ec.message(), ec.value());
  bool created = !std::filesystem::exists(std::filesystem::path(opts.dir) / "CURRENT");

  rocksdb::Options dbo;
  dbo.create_if_missing = true;
  dbo.create_missing_column_families = true;
  dbo.keep_log_file_num = 3;
  dbo.info_log = std::make_shared<SpdlogRocksLogger>();
  dbo.max_background_jobs = 2;
  dbo.db_write_buffer_size = 64ull << 20;
  auto cache = rocksdb::NewLRUCache(opts.block_cache_bytes);
  std::vector<rocksdb::ColumnFamilyDescriptor> cfds;
  for (int c = 0; c < kNumCf; c++) {
    rocksdb::ColumnFamilyOptions co;
    co.write_buffer_size = 16ull << 20;
    rocksdb::BlockBasedTableOptions bt;
    bt.block_cache = cache;
    if (c == kDentries) {
      bt.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
      bt.whole_key_filtering = true;
    }
    co.table_factory.reset(rocksdb::NewBlockBasedTableFactory(bt));
    cfds.emplace_back(kCfNames[c], co);
  }
  cfds.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());

  std::unique_ptr<IndexDb> idx(new IndexDb());
  Impl* im = idx->impl_.get();
  im->dir = opts.dir;
  im->node = opts.node_id;
  im->cookie_hash = opts.cookie_hash_for_test;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  auto s = rocksdb::DB::Open(dbo, opts.dir, cfds, &handles, &im->db);
  if (!s.ok()) {
    std::string m = s.ToString();
    if (m.find("lock") != std::string::npos || m.find("LOCK") != std::string::npos)
      return Status::Busy("index dir " + opts.dir + " is in use by another kvfs mount (" + m + ")");
    return ToStatus(s, "open index " + opts.dir);
  }
  im->cf = handles;  // last is default; kept so Close destroys it
  idx->node_id_ = opts.node_id;
  idx->created_ = created;

  auto get_meta = [&](const char* key, std::string* v, bool* found) { return im->DbGet(kMeta, key, v, found); };
  std::string v;
  bool found;
  rocksdb::WriteBatch init;
  KVFS_RETURN_IF_ERROR(get_meta(kMetaFormat, &v, &found));
  if (found) {
    Reader rd{v};
    uint32_t fmt = rd.U32();
    if (!rd.ok || fmt != kIndexFormatVersion)
      return Status::NotSupported("index " + opts.dir + " has format " + std::to_string(fmt) + ", expected " +
                                  std::to_string(kIndexFormatVersion));
  } else {
    std::string f;
    PutLE(&f, kIndexFormatVersion, 4);
    init.Put(im->H(kMeta), kMetaFormat, f);
  }
  KVFS_RETURN_IF_ERROR(get_meta(kMetaNode, &v, &found));
  if (found && v != opts.node_id)
    return Status::InvalidArgument("index dir " + opts.dir + " belongs to node '" + v + "', not '" +
                                   opts.node_id + "'");
  if (!found) init.Put(im->H(kMeta), kMetaNode, opts.node_id);
  KVFS_RETURN_IF_ERROR(get_meta(kMetaInoLimit, &v, &found));
  if (found) im->next_ino = im->ino_limit = Reader{v}.U64();
  KVFS_RETURN_IF_ERROR(get_meta(kMetaHlc, &v, &found));
  if (found) im->hlc = Reader{v}.U64();
  KVFS_RETURN_IF_ERROR(get_meta(kMetaClean, &v, &found));
  idx->was_clean_ = found && v == "1" && !created;
  KVFS_RETURN_IF_ERROR(get_meta(kMetaStats, &v, &found));
  if (found) {
    Reader rd{v};
    im->files = rd.U64();
    im->dirs = rd.U64();
    im->live_bytes = rd.U64();
  }
  KVFS_RETURN_IF_ERROR(im->DbGet(kInodes, InoKey(kRootIno), &v, &found));
  if (!found) {
    InodeRec root;
    root.attr.ino = kRootIno;
    root.attr.mode = S_IFDIR | 0755;
    root.attr.nlink = 2;
    root.attr.size = 4096;
    root.attr.atime_ns = root.attr.mtime_ns = root.attr.ctime_ns = NowNs();
    root.committed = true;
    init.Put(im->H(kInodes), InoKey(kRootIno), EncodeInode(root));
    im->dirs += 1;
    std::string st;
    PutLE(&st, im->files.load(), 8);
    PutLE(&st, im->dirs.load(), 8);
    PutLE(&st, im->live_bytes.load(), 8);
    init.Put(im->H(kMeta), kMetaStats, st);
  }
  if (init.Count()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    KVFS_RETURN_IF_ERROR(ToStatus(im->db->Write(wo, &init), "init index"));
  }

  // Staged inodes never survive a restart (nothing of them was journaled).
  {
    std::lock_guard<std::mutex> l(im->mu);
    Txn t(im);
    Ops o{im, t};
    std::vector<uint64_t> staged;
    KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kStaged, "", [&](auto& k, auto&) {
      if (k.size() == 8) staged.push_back(GetBE64(k.data()));
      return true;
    }));
    im->staged = staged.size();  // Account(-1) below brings it to 0
    for (uint64_t ino : staged) {
      std::optional<InodeRec> r;
      KVFS_RETURN_IF_ERROR(o.GetRec(ino, &r));
      if (!r) {
        t.Del(kStaged, InoKey(ino));
        t.d_staged -= 1;
        continue;
      }
      std::optional<DentryVal> d;
      KVFS_RETURN_IF_ERROR(o.GetDentry(r->parent, r->name, &d));
      if (d && d->ino == ino) o.UnlinkDentry(r->parent, r->name, *d);
      KVFS_RETURN_IF_ERROR(o.PutRec(&*r, nullptr));
    }
    KVFS_RETURN_IF_ERROR(t.Commit());
    if (!staged.empty()) spdlog::info("index {}: dropped {} staged inodes of the previous run", opts.dir, staged.size());
  }
  return idx;
}

Status IndexDb::Close() {
  if (!impl_ || !impl_->db) return Status::OK();
  for (auto* h : impl_->cf) impl_->db->DestroyColumnFamilyHandle(h);
  impl_->cf.clear();
  auto s = impl_->db->Close();
  delete impl_->db;
  impl_->db = nullptr;
  return ToStatus(s, "close index");
}

Status IndexDb::Destroy(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return Status::OK();
  if (std::filesystem::exists(std::filesystem::path(dir) / "CURRENT")) {
    // Take the RocksDB lock (opening every column family) to make sure nobody uses it.
    std::vector<std::string> names;
    auto s = rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir, &names);
    if (s.ok()) {
      std::vector<rocksdb::ColumnFamilyDescriptor> cfds;
      for (auto& n : names) cfds.emplace_back(n, rocksdb::ColumnFamilyOptions());
      std::vector<rocksdb::ColumnFamilyHandle*> hs;
      rocksdb::DB* db = nullptr;
      rocksdb::Options o;
      s = rocksdb::DB::Open(o, dir, cfds, &hs, &db);
      if (!s.ok()) {
        std::string m = s.ToString();
        if (m.find("lock") != std::string::npos || m.find("LOCK") != std::string::npos)
          return Status::Busy("index dir " + dir + " is in use by another kvfs mount");
      } else {
        for (auto* h : hs) db->DestroyColumnFamilyHandle(h);
        db->Close();
        delete db;
      }
    }
  }
  std::filesystem::remove_all(dir, ec);
  if (ec) return Status::IOError("remove index dir " + dir + ": " + ec.message(), ec.value());
  return Status::OK();
}

Status IndexDb::MarkOpen() {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return ToStatus(impl_->db->Put(wo, impl_->H(kMeta), kMetaClean, "0"), "mark open");
}

Status IndexDb::MarkClean() {
  KVFS_RETURN_IF_ERROR(SyncWal());  // refused after a failed write: the next mount rebuilds
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return ToStatus(impl_->db->Put(wo, impl_->H(kMeta), kMetaClean, "1"), "mark clean");
}

Status IndexDb::SyncWal() {
  if (impl_->write_failed) return Status::IOError("index " + impl_->dir + " is read-only after a failed write");
  auto s = impl_->db->FlushWAL(true);
  return s.ok() ? Status::OK() : impl_->WriteError(s, "sync index wal");
}

// ---- reads ----
Result<Node> IndexDb::Lookup(uint64_t parent, std::string_view name) {
  const rocksdb::Snapshot* snap = impl_->db->GetSnapshot();
  std::string v;
  bool found;
  Status s = impl_->DbGet(kDentries, DentryKey(parent, name), &v, &found, snap);
  DentryVal d;
  InodeRec r;
  if (s.ok() && !found) s = Status::NotFound(std::string(name));
  if (s.ok() && !DecodeDentry(v, &d)) s = Status::Corruption("bad dentry");
  if (s.ok()) s = impl_->DbGet(kInodes, InoKey(d.ino), &v, &found, snap);
  if (s.ok() && !found) s = Status::NotFound(std::string(name));
  if (s.ok() && !DecodeInode(v, &r)) s = Status::Corruption("bad inode record");
  impl_->db->ReleaseSnapshot(snap);
  if (!s.ok()) return s;
  return NodeOf(r);
}

Result<Node> IndexDb::GetInode(uint64_t ino) {
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kInodes, InoKey(ino), &v, &found));
  if (!found) return Status::NotFound("inode " + std::to_string(ino));
  InodeRec r;
  if (!DecodeInode(v, &r)) return Status::Corruption("bad inode record");
  return NodeOf(r);
}

Result<std::string> IndexDb::ReadLink(uint64_t ino) {
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kInodes, InoKey(ino), &v, &found));
  if (!found) return Status::NotFound("inode " + std::to_string(ino));
  InodeRec r;
  if (!DecodeInode(v, &r)) return Status::Corruption("bad inode record");
  if (!S_ISLNK(r.attr.mode)) return Status::InvalidArgument("not a symlink");
  return r.symlink;
}

Status IndexDb::ReadDir(uint64_t dir, uint64_t after, const std::function<bool(const DirEntry&)>& fn) {
  auto n = GetInode(dir);
  if (!n.ok()) return n.status();
  if (!S_ISDIR(n->attr.mode)) return Status::FromErrno(ENOTDIR, "not a directory");
  if (after >= kMaxCookie) return Status::OK();
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->H(kDirCookies)));
  std::string prefix = InoKey(dir);
  for (it->Seek(CookieKey(dir, after + 1)); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    if (it->key().size() != 16) return Status::Corruption("bad dircookie key");
    Reader rd{std::string_view(it->value().data(), it->value().size())};
    DirEntry e;
    e.name = rd.Str();
    e.ino = rd.U64();
    e.mode = rd.U32();
    if (!rd.ok) return Status::Corruption("bad dircookie value");
    e.cookie = GetBE64(it->key().data() + 8);
    if (!fn(e)) break;
  }
  return ToStatus(it->status(), "readdir");
}

Result<std::string> IndexDb::GetXattr(uint64_t ino, std::string_view name) {
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kXattrs, XattrKey(ino, name), &v, &found));
  if (!found) return Status::NotFound("xattr " + std::string(name));
  return v;
}

Result<std::vector<std::string>> IndexDb::ListXattr(uint64_t ino) {
  auto n = GetInode(ino);
  if (!n.ok()) return n.status();
  std::vector<std::string> out;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->H(kXattrs)));
  std::string prefix = InoKey(ino);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next())
    out.push_back(it->key().ToString().substr(8));
  KVFS_RETURN_IF_ERROR(ToStatus(it->status(), "list xattrs"));
  return out;
}

Result<std::string> IndexDb::FullPath(uint64_t ino) {
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  return o.PathOf(ino);
}

Result<uint64_t> IndexDb::ResolvePath(std::string_view path) {
  std::vector<std::string_view> comps;
  KVFS_RETURN_IF_ERROR(SplitPath(path, &comps));
  const rocksdb::Snapshot* snap = impl_->db->GetSnapshot();
  uint64_t ino = kRootIno;
  Status s;
  for (size_t i = 0; i < comps.size() && s.ok(); i++) {
    std::string v;
    bool found;
    s = impl_->DbGet(kDentries, DentryKey(ino, comps[i]), &v, &found, snap);
    if (!s.ok()) break;
    if (!found) {
      s = Status::NotFound(std::string(path));
      break;
    }
    DentryVal d;
    if (!DecodeDentry(v, &d)) {
      s = Status::Corruption("bad dentry");
      break;
    }
    if (i + 1 < comps.size() && !S_ISDIR(d.mode)) s = Status::FromErrno(ENOTDIR, std::string(path));
    ino = d.ino;
  }
  impl_->db->ReleaseSnapshot(snap);
  if (!s.ok()) return s;
  return ino;
}

// ---- local namespace writes ----
Result<Node> IndexDb::Mkdir(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid, uint32_t gid,
                            uint64_t stamp) {
  KVFS_RETURN_IF_ERROR(ValidateName(name));
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  auto p = o.MustDir(parent);
  if (!p.ok()) return p.status();
  std::optional<DentryVal> d;
  KVFS_RETURN_IF_ERROR(o.GetDentry(parent, name, &d));
  if (d) return Status::Exists(std::string(name));
  auto r = o.NewRec(S_IFDIR | (mode & 07777), parent, name);
  if (!r.ok()) return r.status();
  r->attr.uid = uid, r->attr.gid = gid;
  r->stamp = stamp;
  if (stamp) r->stamp_node = impl_->node;
  KVFS_RETURN_IF_ERROR(o.PutRec(nullptr, &*r));
  KVFS_RETURN_IF_ERROR(o.Link(parent, name, r->attr.ino, r->attr.mode, stamp, stamp ? impl_->node : ""));
  KVFS_RETURN_IF_ERROR(o.TouchDir(parent, +1));
  KVFS_RETURN_IF_ERROR(t.Commit());
  return NodeOf(*r);
}

Status IndexDb::Rmdir(uint64_t parent, std::string_view name) {
  KVFS_RETURN_IF_ERROR(ValidateName(name));
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  std::optional<DentryVal> d;
  KVFS_RETURN_IF_ERROR(o.GetDentry(parent, name, &d));
  if (!d) return Status::NotFound(std::string(name));
  if (!S_ISDIR(d->mode)) return Status::FromErrno(ENOTDIR, std::string(name));
  auto empty = o.DirEmpty(d->ino);
  if (!empty.ok()) return empty.status();
  if (!*empty) return Status::FromErrno(ENOTEMPTY, std::string(name));
  KVFS_RETURN_IF_ERROR(o.RemoveEntryAndInode(parent, name, *d));
  KVFS_RETURN_IF_ERROR(o.TouchDir(parent, -1));
  return t.Commit();
}

Result<Node> IndexDb::CreateFile(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid,
                                 uint32_t gid, bool exclusive) {
  KVFS_RETURN_IF_ERROR(ValidateName(name));
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  auto p = o.MustDir(parent);
  if (!p.ok()) return p.status();
  std::optional<DentryVal> d;
  KVFS_RETURN_IF_ERROR(o.GetDentry(parent, name, &d));
  if (d) {
    if (exclusive) return Status::Exists(std::string(name));
    if (S_ISDIR(d->mode)) return Status::FromErrno(EISDIR, std::string(name));
    auto r = o.MustRec(d->ino);
    if (!r.ok()) return r.status();
    return NodeOf(*r);
  }
  auto r = o.NewRec(S_IFREG | (mode & 07777), parent, name);
  if (!r.ok()) return r.status();
  r->attr.uid = uid, r->attr.gid = gid;
  r->committed = false;
  KVFS_RETURN_IF_ERROR(o.PutRec(nullptr, &*r));
  KVFS_RETURN_IF_ERROR(o.Link(parent, name, r->attr.ino, r->attr.mode, 0, ""));
  KVFS_RETURN_IF_ERROR(o.TouchDir(parent, 0));
  KVFS_RETURN_IF_ERROR(t.Commit());
  return NodeOf(*r);
}

Result<Node> IndexDb::Symlink(uint64_t parent, std::string_view name, std::string_view target, uint32_t uid,
                              uint32_t gid, uint64_t stamp) {
  KVFS_RETURN_IF_ERROR(ValidateName(name));
  if (target.empty() || target.size() > 4095) return Status::InvalidArgument("bad symlink target");
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  auto p = o.MustDir(parent);
  if (!p.ok()) return p.status();
  std::optional<DentryVal> d;
  KVFS_RETURN_IF_ERROR(o.GetDentry(parent, name, &d));
  if (d) return Status::Exists(std::string(name));
  auto r = o.NewRec(S_IFLNK | 0777, parent, name);
  if (!r.ok()) return r.status();
  r->attr.uid = uid, r->attr.gid = gid;
  r->attr.size = target.size();
  r->symlink = std::string(target);
  r->stamp = stamp;
  if (stamp) r->stamp_node = impl_->node;
  KVFS_RETURN_IF_ERROR(o.PutRec(nullptr, &*r));
  KVFS_RETURN_IF_ERROR(o.Link(parent, name, r->attr.ino, r->attr.mode, stamp, stamp ? impl_->node : ""));
  KVFS_RETURN_IF_ERROR(o.TouchDir(parent, 0));
  KVFS_RETURN_IF_ERROR(t.Commit());
  return NodeOf(*r);
}

Result<Node> IndexDb::Unlink(uint64_t parent, std::string_view name, uint64_t stamp) {
  KVFS_RETURN_IF_ERROR(ValidateName(name));
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  std::optional<DentryVal> d;
  KVFS_RETURN_IF_ERROR(o.GetDentry(parent, name, &d));
  if (!d) return Status::NotFound(std::string(name));
  if (S_ISDIR(d->mode)) return Status::FromErrno(EISDIR, std::string(name));
  auto r = o.MustRec(d->ino);
  if (!r.ok()) return r.status();
  if (stamp) {
    auto pp = o.PathOf(parent);
    if (!pp.ok()) return pp.status();
    KVFS_RETURN_IF_ERROR(o.RaiseTomb(JoinPath(*pp, name), stamp, impl_->node));
  }
  KVFS_RETURN_IF_ERROR(o.RemoveEntryAndInode(parent, name, *d));
  KVFS_RETURN_IF_ERROR(o.TouchDir(parent, 0));
  KVFS_RETURN_IF_ERROR(t.Commit());
  return NodeOf(*r);
}

Result<RenameResult> IndexDb::Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                                     std::string_view new_name, unsigned flags, uint64_t stamp) {
  if (flags & ~unsigned(RENAME_NOREPLACE)) return Status::InvalidArgument("unsupported rename flags");
  KVFS_RETURN_IF_ERROR(ValidateName(name));
  KVFS_RETURN_IF_ERROR(ValidateName(new_name));
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  std::optional<DentryVal> sd, dd;
  KVFS_RETURN_IF_ERROR(o.GetDentry(parent, name, &sd));
  if (!sd) return Status::NotFound(std::string(name));
  auto np = o.MustDir(new_parent);
  if (!np.ok()) return np.status();
  auto src = o.MustRec(sd->ino);
  if (!src.ok()) return src.status();
  RenameResult res;
  if (parent == new_parent && name == new_name) {
    res.moved = NodeOf(*src);
    return res;
  }
  KVFS_RETURN_IF_ERROR(o.GetDentry(new_parent, new_name, &dd));
  const bool src_dir = src->is_dir();
  if (dd) {
    if (dd->ino == sd->ino) {
      res.moved = NodeOf(*src);
      return res;
    }
    if (flags & RENAME_NOREPLACE) return Status::Exists(std::string(new_name));
    if (src_dir && !S_ISDIR(dd->mode)) return Status::FromErrno(ENOTDIR, std::string(new_name));
    if (!src_dir && S_ISDIR(dd->mode)) return Status::FromErrno(EISDIR, std::string(new_name));
    if (S_ISDIR(dd->mode)) {
      auto empty = o.DirEmpty(dd->ino);
      if (!empty.ok()) return empty.status();
      if (!*empty) return Status::FromErrno(ENOTEMPTY, std::string(new_name));
    }
  }
  if (src_dir && new_parent != parent) {
    auto under = o.IsUnder(new_parent, sd->ino);
    if (!under.ok()) return under.status();
    if (*under) return Status::InvalidArgument("cannot move a directory into its own subtree");
  }
  if (stamp) {
    auto pp = o.PathOf(parent);
    if (!pp.ok()) return pp.status();
    KVFS_RETURN_IF_ERROR(o.RaiseTomb(JoinPath(*pp, name), stamp, impl_->node));
  }
  uint64_t cookie = 0;
  if (dd) {
    auto rr = o.MustRec(dd->ino);
    if (!rr.ok()) return rr.status();
    res.replaced = true;
    res.replaced_node = NodeOf(*rr);
    cookie = dd->cookie;
    KVFS_RETURN_IF_ERROR(o.RemoveEntryAndInode(new_parent, new_name, *dd));
    if (S_ISDIR(dd->mode)) KVFS_RETURN_IF_ERROR(o.TouchDir(new_parent, -1));
  }
  o.UnlinkDentry(parent, name, *sd);
  uint64_t dstamp = stamp ? stamp : sd->stamp;
  std::string dnode = stamp ? impl_->node : sd->node;
  KVFS_RETURN_IF_ERROR(o.Link(new_parent, new_name, sd->ino, src->attr.mode, dstamp, dnode, cookie));
  InodeRec moved = *src;
  moved.parent = new_parent;
  moved.name = std::string(new_name);
  moved.attr.ctime_ns = NowNs();
  if (stamp) moved.stamp = stamp, moved.stamp_node = impl_->node;
  KVFS_RETURN_IF_ERROR(o.UpdateRec(*src, moved));
  int delta = (src_dir && parent != new_parent) ? 1 : 0;
  KVFS_RETURN_IF_ERROR(o.TouchDir(parent, -delta));
  if (new_parent != parent) KVFS_RETURN_IF_ERROR(o.TouchDir(new_parent, delta));
  KVFS_RETURN_IF_ERROR(t.Commit());
  res.moved = NodeOf(moved);
  return res;
}

Result<Attr> IndexDb::SetAttr(uint64_t ino, const Attr& attr, uint32_t mask, uint64_t stamp) {
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  auto r = o.MustRec(ino);
  if (!r.ok()) return r.status();
  InodeRec n = *r;
  ApplyAttrMask(&n.attr, attr, mask);
  if (stamp) n.stamp = stamp, n.stamp_node = impl_->node;
  KVFS_RETURN_IF_ERROR(o.UpdateRec(*r, n));
  KVFS_RETURN_IF_ERROR(t.Commit());
  return n.attr;
}

Result<Node> IndexDb::CommitFile(uint64_t ino, const Location& loc, const Attr& attr, uint64_t stamp,
                                 std::string_view node) {
  std::string nd = node.empty() ? impl_->node : std::string(node);
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  auto r = o.MustRec(ino);
  if (!r.ok()) return r.status();
  if (r->is_dir()) return Status::FromErrno(EISDIR, "commit of a directory");
  if (!r->is_reg()) return Status::InvalidArgument("commit of a non-regular file");
  InodeRec n = *r;
  n.loc = loc;
  n.attr.size = attr.size;
  n.attr.mode = S_IFREG | (attr.mode & 07777);
  n.attr.uid = attr.uid, n.attr.gid = attr.gid;
  n.attr.atime_ns = attr.atime_ns, n.attr.mtime_ns = attr.mtime_ns, n.attr.ctime_ns = attr.ctime_ns;
  n.committed = true;
  n.stamp = stamp, n.stamp_node = nd;
  std::optional<DentryVal> d;
  KVFS_RETURN_IF_ERROR(o.GetDentry(r->parent, r->name, &d));
  uint64_t cookie = 0;
  if (d && d->ino != ino) {  // detached staged inode: take the name back (our stamp is newer)
    if (S_ISDIR(d->mode)) return Status::FromErrno(EISDIR, r->name);
    cookie = d->cookie;
    KVFS_RETURN_IF_ERROR(o.RemoveEntryAndInode(r->parent, r->name, *d));
  } else if (d) {
    cookie = d->cookie;
  } else {
    auto p = o.MustDir(r->parent);
    if (!p.ok()) return Status::NotFound("parent of inode " + std::to_string(ino) + " is gone");
  }
  KVFS_RETURN_IF_ERROR(o.Link(r->parent, r->name, ino, n.attr.mode, stamp, nd, cookie));
  KVFS_RETURN_IF_ERROR(o.UpdateRec(*r, n));
  if (stamp) {
    auto pp = o.PathOf(ino);
    if (pp.ok()) t.Del(kTombstones, *pp);
  }
  KVFS_RETURN_IF_ERROR(t.Commit());
  return NodeOf(n);
}

Result<Node> IndexDb::Renumber(uint64_t ino, uint64_t to) {
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  auto r = o.MustRec(ino);
  if (!r.ok()) return r.status();
  if (!r->is_reg() || !r->committed) return Status::InvalidArgument("renumber of a non-committed or non-regular inode");
  std::optional<DentryVal> d;
  KVFS_RETURN_IF_ERROR(o.GetDentry(r->parent, r->name, &d));
  if (!d || d->ino != ino) return Status::NotFound("inode " + std::to_string(ino) + " has no name");
  Result<uint64_t> nino = to;
  if (to == 0) {
    nino = impl_->AllocIno();
    if (!nino.ok()) return nino.status();
  } else {
    std::optional<InodeRec> taken;
    KVFS_RETURN_IF_ERROR(o.GetRec(to, &taken));
    if (taken || to == ino || to == kRootIno) {
      return Status::InvalidArgument("renumber to inode " + std::to_string(to) + ": the number is in use");
    }
  }
  std::vector<std::pair<std::string, std::string>> xattrs;  // (name, value)
  const std::string prefix = InoKey(ino);
  KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kXattrs, prefix, [&](auto& k, auto& v) {
    xattrs.emplace_back(k.substr(prefix.size()), v);
    return true;
  }));
  InodeRec n = *r;
  n.attr.ino = *nino;
  KVFS_RETURN_IF_ERROR(o.PutRec(&*r, nullptr));  // old number: record, xattrs, segment membership
  KVFS_RETURN_IF_ERROR(o.PutRec(nullptr, &n));
  for (auto& [name, value] : xattrs) t.Put(kXattrs, XattrKey(*nino, name), std::move(value));
  KVFS_RETURN_IF_ERROR(o.Link(r->parent, r->name, *nino, n.attr.mode, d->stamp, d->node, d->cookie));
  KVFS_RETURN_IF_ERROR(t.Commit());
  return NodeOf(n);
}

Status IndexDb::SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags,
                         uint64_t stamp) {
  if (name.empty() || name.size() > 255) return Status::InvalidArgument("bad xattr name");
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  auto r = o.MustRec(ino);
  if (!r.ok()) return r.status();
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(t.Get(kXattrs, XattrKey(ino, name), &v, &found));
  if (found && (flags & XATTR_CREATE)) return Status::Exists(std::string(name));
  if (!found && (flags & XATTR_REPLACE)) return Status::NotFound(std::string(name));
  t.Put(kXattrs, XattrKey(ino, name), std::string(value));
  if (stamp) t.RaiseHlc(stamp);
  return t.Commit();
}

Status IndexDb::RemoveXattr(uint64_t ino, std::string_view name, uint64_t stamp) {
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(t.Get(kXattrs, XattrKey(ino, name), &v, &found));
  if (!found) return Status::NotFound(std::string(name));
  t.Del(kXattrs, XattrKey(ino, name));
  if (stamp) t.RaiseHlc(stamp);
  return t.Commit();
}

// ---- journal application ----
namespace {

struct Applier {
  Ops& o;
  Txn& t;
  std::string node;
  ApplyResult& res;

  // Resolves the parent directory of `path`, creating missing directories when create is true.
  // Returns 0 (with *skip) on a conflict (a non-directory in the way, missing parent without create).
  Result<uint64_t> Parent(std::string_view path, bool create, const Attr& attr, std::string* leaf, bool* skip) {
    std::vector<std::string_view> comps;
    KVFS_RETURN_IF_ERROR(SplitPath(path, &comps));
    *skip = comps.empty();
    if (comps.empty()) return uint64_t(0);
    uint64_t ino = kRootIno;
    for (size_t i = 0; i + 1 < comps.size(); i++) {
      std::optional<DentryVal> d;
      KVFS_RETURN_IF_ERROR(o.GetDentry(ino, comps[i], &d));
      if (d) {
        if (!S_ISDIR(d->mode)) {
          *skip = true;
          return uint64_t(0);
        }
        ino = d->ino;
        continue;
      }
      if (!create) {
        *skip = true;
        return uint64_t(0);
      }
      auto nid = MakeDir(ino, comps[i], S_IFDIR | 0755, attr.uid, attr.gid);
      if (!nid.ok()) return nid.status();
      ino = *nid;
    }
    *leaf = std::string(comps.back());
    return ino;
  }
  Result<uint64_t> MakeDir(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid, uint32_t gid) {
    auto r = o.NewRec(S_IFDIR | (mode & 07777), parent, name);
    if (!r.ok()) return r.status();
    r->attr.uid = uid, r->attr.gid = gid;
    KVFS_RETURN_IF_ERROR(o.PutRec(nullptr, &*r));
    KVFS_RETURN_IF_ERROR(o.Link(parent, name, r->attr.ino, r->attr.mode, 0, ""));
    KVFS_RETURN_IF_ERROR(o.TouchDir(parent, +1));
    res.changed.push_back({parent, std::string(name), 0, r->attr.ino});
    return r->attr.ino;
  }

  // Binds parent/leaf to a committed file described by rec (a new inode is allocated if rec.attr.ino
  // is 0), replacing a committed or detaching a staged entry `cur`.
  Status Bind(uint64_t parent, const std::string& leaf, const std::optional<DentryVal>& cur, InodeRec rec,
              uint64_t stamp) {
    uint64_t cookie = 0, old_ino = 0;
    if (cur) {
      cookie = cur->cookie;
      old_ino = cur->ino;
      std::optional<InodeRec> cr;
      KVFS_RETURN_IF_ERROR(o.GetRec(cur->ino, &cr));
      if (cr && !cr->committed) {
        o.UnlinkDentry(parent, leaf, *cur);  // detach: the staged record stays
      } else {
        KVFS_RETURN_IF_ERROR(o.RemoveEntryAndInode(parent, leaf, *cur));
      }
    }
    std::optional<InodeRec> old;
    if (rec.attr.ino == 0) {
      auto ino = o.im->AllocIno();
      if (!ino.ok()) return ino.status();
      rec.attr.ino = *ino;
    } else {
      KVFS_RETURN_IF_ERROR(o.GetRec(rec.attr.ino, &old));
    }
    rec.parent = parent;
    rec.name = leaf;
    rec.committed = true;
    rec.stamp = stamp;
    rec.stamp_node = node;
    KVFS_RETURN_IF_ERROR(o.PutRec(old ? &*old : nullptr, &rec));
    KVFS_RETURN_IF_ERROR(o.Link(parent, leaf, rec.attr.ino, rec.attr.mode, stamp, node, cookie));
    KVFS_RETURN_IF_ERROR(o.TouchDir(parent, 0));
    res.changed.push_back({parent, leaf, old_ino, rec.attr.ino});
    return Status::OK();
  }

  // Whether a PUT-like binding of path at (stamp, node) wins over the tombstone and current entry.
  // *cur receives the current entry. Returns false (skip) when it loses or conflicts with a directory.
  Result<bool> Wins(const std::string& path, uint64_t parent, const std::string& leaf, uint64_t stamp,
                    std::optional<DentryVal>* cur) {
    std::optional<Tombstone> tb;
    KVFS_RETURN_IF_ERROR(o.GetTomb(path, &tb));
    if (tb && !Newer(stamp, node, tb->stamp, tb->node)) return false;
    KVFS_RETURN_IF_ERROR(o.GetDentry(parent, leaf, cur));
    if (!*cur) return true;
    if (S_ISDIR((*cur)->mode)) return false;
    std::optional<InodeRec> cr;
    KVFS_RETURN_IF_ERROR(o.GetRec((*cur)->ino, &cr));
    if (cr && !cr->committed) return true;  // staged: gets detached
    return Newer(stamp, node, (*cur)->stamp, (*cur)->node);
  }

  Result<bool> Put(const ApplyOp& op) {
    auto dropped = o.InDroppedSegment(op.location);
    if (!dropped.ok()) return dropped.status();
    if (*dropped) return false;
    std::string leaf;
    bool skip;
    auto parent = Parent(op.path, true, op.attr, &leaf, &skip);
    if (!parent.ok()) return parent.status();
    if (skip) return false;
    std::optional<DentryVal> cur;
    auto w = Wins(op.path, *parent, leaf, op.stamp, &cur);
    if (!w.ok()) return w.status();
    if (!*w) return false;
    InodeRec rec;
    rec.attr = op.attr;
    rec.attr.ino = 0;
    rec.attr.nlink = 1;
    uint32_t type = op.attr.mode & S_IFMT;
    if (type != S_IFLNK) type = S_IFREG;
    rec.attr.mode = type | (op.attr.mode & 07777);
    if (type == S_IFLNK) {
      rec.symlink = op.symlink;
      rec.attr.size = op.symlink.size();
    } else {
      rec.loc = op.location;
    }
    if (cur) {  // same content re-applied (e.g. replay): keep the inode number
      std::optional<InodeRec> cr;
      KVFS_RETURN_IF_ERROR(o.GetRec(cur->ino, &cr));
      if (cr && cr->committed && (cr->attr.mode & S_IFMT) == type && cr->loc == rec.loc &&
          cr->symlink == rec.symlink)
        rec.attr.ino = cr->attr.ino;
    }
    if (rec.attr.ino && cur) {
      // in place: update record and dentry stamp without unlinking
      std::optional<InodeRec> old;
      KVFS_RETURN_IF_ERROR(o.GetRec(rec.attr.ino, &old));
      rec.parent = *parent, rec.name = leaf, rec.committed = true, rec.stamp = op.stamp, rec.stamp_node = node;
      KVFS_RETURN_IF_ERROR(o.PutRec(&*old, &rec));
      KVFS_RETURN_IF_ERROR(o.Link(*parent, leaf, rec.attr.ino, rec.attr.mode, op.stamp, node, cur->cookie));
      res.attr_changed.push_back(rec.attr.ino);
    } else {
      KVFS_RETURN_IF_ERROR(Bind(*parent, leaf, cur, rec, op.stamp));
      rec.attr.ino = res.changed.back().new_ino;
    }
    if (op.xattrs) {
      // The PUT carries the file's whole xattr set: it replaces what the index has.
      std::vector<std::string> keys;
      KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kXattrs, InoKey(rec.attr.ino), [&](auto& k, auto&) {
        keys.push_back(k);
        return true;
      }));
      for (auto& k : keys) t.Del(kXattrs, k);
      for (const auto& [name, value] : *op.xattrs) t.Put(kXattrs, XattrKey(rec.attr.ino, name), value);
    }
    t.Del(kTombstones, op.path);
    t.RaiseHlc(op.stamp);
    return true;
  }

  Result<bool> Unlink(const ApplyOp& op) {
    KVFS_RETURN_IF_ERROR(o.RaiseTomb(op.path, op.stamp, node));
    std::string leaf;
    bool skip;
    auto parent = Parent(op.path, false, op.attr, &leaf, &skip);
    if (!parent.ok()) return parent.status();
    if (skip) return true;  // tombstone recorded
    std::optional<DentryVal> cur;
    KVFS_RETURN_IF_ERROR(o.GetDentry(*parent, leaf, &cur));
    if (!cur || S_ISDIR(cur->mode)) return !cur;
    std::optional<InodeRec> cr;
    KVFS_RETURN_IF_ERROR(o.GetRec(cur->ino, &cr));
    if (cr && !cr->committed) return true;  // a staged local file is newer
    if (!Newer(op.stamp, node, cur->stamp, cur->node)) return false;
    KVFS_RETURN_IF_ERROR(o.RemoveEntryAndInode(*parent, leaf, *cur));
    KVFS_RETURN_IF_ERROR(o.TouchDir(*parent, 0));
    res.changed.push_back({*parent, leaf, cur->ino, 0});
    return true;
  }

  Result<bool> Rename(const ApplyOp& op) {
    if (op.path == op.to) return false;
    // Source
    std::string sleaf;
    bool sskip;
    auto sparent = Parent(op.path, false, op.attr, &sleaf, &sskip);
    if (!sparent.ok()) return sparent.status();
    std::optional<DentryVal> sd;
    std::optional<InodeRec> src;
    if (!sskip) {
      KVFS_RETURN_IF_ERROR(o.GetDentry(*sparent, sleaf, &sd));
      if (sd) {
        KVFS_RETURN_IF_ERROR(o.GetRec(sd->ino, &src));
        bool movable = src && (src->is_dir() || (src->committed && Newer(op.stamp, node, sd->stamp, sd->node)));
        if (!movable) src.reset();
      }
    }
    bool src_dir = src && src->is_dir();
    if (!src_dir) KVFS_RETURN_IF_ERROR(o.RaiseTomb(op.path, op.stamp, node));
    auto dropped = o.InDroppedSegment(src ? src->loc : op.location);
    if (!dropped.ok()) return dropped.status();
    // Destination
    std::string dleaf;
    bool dskip;
    auto dparent = Parent(op.to, true, op.attr, &dleaf, &dskip);
    if (!dparent.ok()) return dparent.status();
    bool link = !dskip && !*dropped;
    std::optional<DentryVal> dd;
    if (link && src_dir) {
      KVFS_RETURN_IF_ERROR(o.GetDentry(*dparent, dleaf, &dd));
      auto under = o.IsUnder(*dparent, src->attr.ino);
      if (!under.ok()) return under.status();
      if (dd || *under) return false;  // directory renames never replace; no cycles
      o.UnlinkDentry(*sparent, sleaf, *sd);
      KVFS_RETURN_IF_ERROR(o.Link(*dparent, dleaf, src->attr.ino, src->attr.mode, 0, ""));
      InodeRec moved = *src;
      moved.parent = *dparent, moved.name = dleaf;
      KVFS_RETURN_IF_ERROR(o.UpdateRec(*src, moved));
      int delta = *sparent != *dparent ? 1 : 0;
      KVFS_RETURN_IF_ERROR(o.TouchDir(*sparent, -delta));
      if (delta) KVFS_RETURN_IF_ERROR(o.TouchDir(*dparent, delta));
      res.changed.push_back({*sparent, sleaf, src->attr.ino, 0});
      res.changed.push_back({*dparent, dleaf, 0, src->attr.ino});
      return true;
    }
    if (src_dir) return false;
    if (link) {
      auto w = Wins(op.to, *dparent, dleaf, op.stamp, &dd);
      if (!w.ok()) return w.status();
      link = *w;
      if (dd && sd && dd->ino == sd->ino) link = false;  // from == to
    }
    bool changed = false;
    if (src) {
      o.UnlinkDentry(*sparent, sleaf, *sd);
      KVFS_RETURN_IF_ERROR(o.TouchDir(*sparent, 0));
      res.changed.push_back({*sparent, sleaf, src->attr.ino, 0});
      changed = true;
      if (!link) KVFS_RETURN_IF_ERROR(o.PutRec(&*src, nullptr));
    }
    if (link) {
      InodeRec rec;
      if (src) {
        rec = *src;  // keeps its inode number and content
      } else if (!op.location.empty()) {
        rec.attr.mode = S_IFREG | 0644;
        rec.attr.size = op.location.length;
        rec.attr.nlink = 1;
        rec.attr.atime_ns = rec.attr.mtime_ns = rec.attr.ctime_ns = NowNs();
        rec.loc = op.location;
      } else {
        return changed;  // nothing known to link (a 0-byte file we never saw)
      }
      KVFS_RETURN_IF_ERROR(Bind(*dparent, dleaf, dd, rec, op.stamp));
      t.Del(kTombstones, op.to);
      changed = true;
    }
    t.RaiseHlc(op.stamp);
    return changed;
  }

  Result<bool> Mkdir(const ApplyOp& op) {
    std::string leaf;
    bool skip;
    auto parent = Parent(op.path, true, op.attr, &leaf, &skip);
    if (!parent.ok()) return parent.status();
    if (skip) return false;
    std::optional<DentryVal> cur;
    KVFS_RETURN_IF_ERROR(o.GetDentry(*parent, leaf, &cur));
    if (cur) return false;
    auto r = MakeDir(*parent, leaf, (op.attr.mode & 07777) ? op.attr.mode : 0755, op.attr.uid, op.attr.gid);
    if (!r.ok()) return r.status();
    return true;
  }

  Result<bool> Rmdir(const ApplyOp& op) {
    std::string leaf;
    bool skip;
    auto parent = Parent(op.path, false, op.attr, &leaf, &skip);
    if (!parent.ok()) return parent.status();
    if (skip) return false;
    std::optional<DentryVal> cur;
    KVFS_RETURN_IF_ERROR(o.GetDentry(*parent, leaf, &cur));
    if (!cur || !S_ISDIR(cur->mode)) return false;
    auto empty = o.DirEmpty(cur->ino);
    if (!empty.ok()) return empty.status();
    if (!*empty) return false;
    KVFS_RETURN_IF_ERROR(o.RemoveEntryAndInode(*parent, leaf, *cur));
    KVFS_RETURN_IF_ERROR(o.TouchDir(*parent, -1));
    res.changed.push_back({*parent, leaf, cur->ino, 0});
    return true;
  }

  // The committed node at path that an attribute change of (stamp, node) may modify, or nullopt.
  Result<std::optional<InodeRec>> AttrTarget(const ApplyOp& op) {
    auto ino = [&]() -> Result<uint64_t> {
      if (op.path == "/") return kRootIno;
      std::string leaf;
      bool skip;
      auto parent = Parent(op.path, false, op.attr, &leaf, &skip);
      if (!parent.ok()) return parent.status();
      if (skip) return uint64_t(0);
      std::optional<DentryVal> cur;
      KVFS_RETURN_IF_ERROR(o.GetDentry(*parent, leaf, &cur));
      if (!cur) return uint64_t(0);
      // Equal (stamp, node) = the binding event itself (a snapshot's XATTR entries carry their file's
      // stamp): applies.
      if (!S_ISDIR(cur->mode) && !Newer(op.stamp, node, cur->stamp, cur->node) &&
          !(op.stamp == cur->stamp && node == cur->node))
        return uint64_t(0);
      return cur->ino;
    }();
    if (!ino.ok()) return ino.status();
    std::optional<InodeRec> r;
    if (*ino == 0) return r;
    KVFS_RETURN_IF_ERROR(o.GetRec(*ino, &r));
    if (r && !r->committed) r.reset();
    return r;
  }

  Result<bool> Setattr(const ApplyOp& op) {
    auto r = AttrTarget(op);
    if (!r.ok()) return r.status();
    if (!*r) return false;
    InodeRec n = **r;
    ApplyAttrMask(&n.attr, op.attr, op.mask);
    if (op.stamp > n.stamp) n.stamp = op.stamp, n.stamp_node = node;
    KVFS_RETURN_IF_ERROR(o.UpdateRec(**r, n));
    t.RaiseHlc(op.stamp);
    res.attr_changed.push_back(n.attr.ino);
    return true;
  }

  Result<bool> Xattr(const ApplyOp& op) {
    auto r = AttrTarget(op);
    if (!r.ok()) return r.status();
    if (!*r) return false;
    std::string k = XattrKey((*r)->attr.ino, op.xattr_name);
    if (op.xattr_remove) t.Del(kXattrs, k);
    else t.Put(kXattrs, k, op.xattr_value);
    t.RaiseHlc(op.stamp);
    res.attr_changed.push_back((*r)->attr.ino);
    return true;
  }

  Result<bool> Move(const ApplyOp& op) {
    auto dropped = o.InDroppedSegment(op.location);
    if (!dropped.ok()) return dropped.status();
    if (*dropped) return false;
    std::string leaf;
    bool skip;
    auto parent = Parent(op.path, false, op.attr, &leaf, &skip);
    if (!parent.ok()) return parent.status();
    if (skip) return false;
    std::optional<DentryVal> cur;
    KVFS_RETURN_IF_ERROR(o.GetDentry(*parent, leaf, &cur));
    if (!cur) return false;
    std::optional<InodeRec> r;
    KVFS_RETURN_IF_ERROR(o.GetRec(cur->ino, &r));
    if (!r || !r->committed || !r->is_reg() || !(r->loc == op.old_location)) return false;
    InodeRec n = *r;
    n.loc = op.location;
    KVFS_RETURN_IF_ERROR(o.UpdateRec(*r, n));
    return true;
  }

  // The segment's record (default SegmentInfo when absent), with *found.
  Status GetSeg(const SegmentId& seg, SegmentInfo* si, bool* found) {
    std::string v;
    KVFS_RETURN_IF_ERROR(t.Get(kSegments, SegKey(seg), &v, found));
    if (*found && !DecodeSeg(v, si)) return Status::Corruption("bad segment record");
    return Status::OK();
  }

  Result<bool> SetSegState(const SegmentId& seg, SegmentState st) {
    SegmentInfo si;
    bool found;
    KVFS_RETURN_IF_ERROR(GetSeg(seg, &si, &found));
    if (found && (si.state == SegmentState::kDropped || si.state == st)) return false;
    si.state = st;
    t.Put(kSegments, SegKey(seg), EncodeSeg(si));
    return true;
  }

  Result<bool> Cut(const SegmentId& seg, uint64_t offset) {
    SegmentInfo si;
    bool found;
    KVFS_RETURN_IF_ERROR(GetSeg(seg, &si, &found));
    if (found && (si.state == SegmentState::kDropped || si.cut <= offset)) return false;
    si.cut = offset;
    t.Put(kSegments, SegKey(seg), EncodeSeg(si));
    return true;
  }

  Result<bool> Drop(const ApplyOp& op) {
    auto ch = SetSegState(op.segment, SegmentState::kDropped);
    if (!ch.ok()) return ch.status();
    std::string prefix = SegKey(op.segment);
    std::vector<uint64_t> inos;
    KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kSegFiles, prefix, [&](auto& k, auto&) {
      if (k.size() == prefix.size() + 8) inos.push_back(GetBE64(k.data() + prefix.size()));
      return true;
    }));
    for (uint64_t ino : inos) {
      std::optional<InodeRec> r;
      KVFS_RETURN_IF_ERROR(o.GetRec(ino, &r));
      if (!r) continue;
      std::optional<DentryVal> d;
      KVFS_RETURN_IF_ERROR(o.GetDentry(r->parent, r->name, &d));
      if (d && d->ino == ino) {
        o.UnlinkDentry(r->parent, r->name, *d);
        KVFS_RETURN_IF_ERROR(o.TouchDir(r->parent, 0));
        res.changed.push_back({r->parent, r->name, ino, 0});
      }
      KVFS_RETURN_IF_ERROR(o.PutRec(&*r, nullptr));
    }
    return *ch || !inos.empty();
  }

  Result<bool> Apply(const ApplyOp& op) {
    switch (op.kind) {
      case ApplyOp::Kind::kPut: return Put(op);
      case ApplyOp::Kind::kRename: return Rename(op);
      case ApplyOp::Kind::kUnlink: return Unlink(op);
      case ApplyOp::Kind::kMkdir: return Mkdir(op);
      case ApplyOp::Kind::kRmdir: return Rmdir(op);
      case ApplyOp::Kind::kSetattr: return Setattr(op);
      case ApplyOp::Kind::kXattr: return Xattr(op);
      case ApplyOp::Kind::kMove: return Move(op);
      case ApplyOp::Kind::kSeal: return SetSegState(op.segment, SegmentState::kSealed);
      case ApplyOp::Kind::kDrop: return Drop(op);
      // A node cuts only its own segment files (as CollectNodeCuts reads them): a peer's journal never
      // limits another node's segment.
      case ApplyOp::Kind::kCut: return op.segment.node == node ? Cut(op.segment, op.cut_offset) : Result<bool>(false);
    }
    return Status::InvalidArgument("unknown apply op");
  }
};

}  // namespace

Result<ApplyResult> IndexDb::ApplyBatch(std::span<const ApplyOp> ops, std::string_view node,
                                        std::string_view position) {
  if (node.empty()) return Status::InvalidArgument("apply without a node");
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  ApplyResult res;
  Applier a{o, t, std::string(node), res};
  for (const ApplyOp& op : ops) {
    auto mark = t.GetMark();
    size_t nchanged = res.changed.size(), nattr = res.attr_changed.size();
    auto r = a.Apply(op);
    if (!r.ok()) {
      if (r.status().IsInvalidArgument()) {  // a malformed entry: skip it, keep the batch
        spdlog::warn("index: skipping journal entry of {} on '{}': {}", node, op.path, r.status().ToString());
        t.Rollback(mark);
        res.changed.resize(nchanged);
        res.attr_changed.resize(nattr);
        res.skipped++;
        continue;
      }
      return r.status();
    }
    if (*r) res.applied++;
    else res.skipped++;
  }
  if (!position.empty()) t.Put(kMeta, std::string(kMetaAppliedPrefix) + std::string(node), std::string(position));
  KVFS_RETURN_IF_ERROR(t.Commit());
  return res;
}

Result<std::string> IndexDb::GetAppliedPosition(std::string_view node) {
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kMeta, std::string(kMetaAppliedPrefix) + std::string(node), &v, &found));
  if (!found) return Status::NotFound("no applied position for node " + std::string(node));
  return v;
}

std::map<std::string, std::string> IndexDb::GetAppliedPositions() {
  std::map<std::string, std::string> out;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->H(kMeta)));
  std::string p = kMetaAppliedPrefix;
  for (it->Seek(p); it->Valid() && it->key().starts_with(p); it->Next())
    out[it->key().ToString().substr(p.size())] = it->value().ToString();
  return out;
}

Result<ApplyResult> IndexDb::ApplyPut(std::string_view path, const Location& loc, const Attr& attr, uint64_t stamp,
                                      std::string_view node) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kPut;
  op.path = std::string(path);
  op.location = loc;
  op.attr = attr;
  op.stamp = stamp;
  return ApplyBatch({&op, 1}, node);
}
Result<ApplyResult> IndexDb::ApplyRename(std::string_view from, std::string_view to, const Location& loc,
                                         uint64_t stamp, std::string_view node) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kRename;
  op.path = std::string(from);
  op.to = std::string(to);
  op.location = loc;
  op.stamp = stamp;
  return ApplyBatch({&op, 1}, node);
}
Result<ApplyResult> IndexDb::ApplyUnlink(std::string_view path, uint64_t stamp, std::string_view node) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kUnlink;
  op.path = std::string(path);
  op.stamp = stamp;
  return ApplyBatch({&op, 1}, node);
}
Result<ApplyResult> IndexDb::ApplyMkdir(std::string_view path, const Attr& attr) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kMkdir;
  op.path = std::string(path);
  op.attr = attr;
  return ApplyBatch({&op, 1}, node_id_);
}
Result<ApplyResult> IndexDb::ApplyRmdir(std::string_view path) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kRmdir;
  op.path = std::string(path);
  return ApplyBatch({&op, 1}, node_id_);
}
Result<ApplyResult> IndexDb::ApplySetattr(std::string_view path, const Attr& attr, uint32_t mask, uint64_t stamp,
                                          std::string_view node) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kSetattr;
  op.path = std::string(path);
  op.attr = attr;
  op.mask = mask;
  op.stamp = stamp;
  return ApplyBatch({&op, 1}, node);
}
Result<ApplyResult> IndexDb::ApplyXattr(std::string_view path, std::string_view name, std::string_view value,
                                        bool remove, uint64_t stamp, std::string_view node) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kXattr;
  op.path = std::string(path);
  op.xattr_name = std::string(name);
  op.xattr_value = std::string(value);
  op.xattr_remove = remove;
  op.stamp = stamp;
  return ApplyBatch({&op, 1}, node);
}
Result<ApplyResult> IndexDb::ApplyMove(std::string_view path, const Location& old_loc, const Location& new_loc) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kMove;
  op.path = std::string(path);
  op.old_location = old_loc;
  op.location = new_loc;
  return ApplyBatch({&op, 1}, node_id_);
}
Result<ApplyResult> IndexDb::ApplySeal(const SegmentId& seg) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kSeal;
  op.segment = seg;
  return ApplyBatch({&op, 1}, node_id_);
}
Result<ApplyResult> IndexDb::ApplyDrop(const SegmentId& seg) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kDrop;
  op.segment = seg;
  return ApplyBatch({&op, 1}, node_id_);
}

Result<Tombstone> IndexDb::GetTombstone(std::string_view path) {
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kTombstones, std::string(path), &v, &found));
  if (!found) return Status::NotFound("no tombstone for " + std::string(path));
  Tombstone tb;
  if (!DecodeTomb(v, &tb)) return Status::Corruption("bad tombstone");
  return tb;
}

Result<uint64_t> IndexDb::PruneTombstones(uint64_t older_than) {
  std::lock_guard<std::mutex> l(impl_->mu);
  rocksdb::WriteBatch wb;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->H(kTombstones)));
  uint64_t n = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    Tombstone tb;
    if (DecodeTomb(std::string_view(it->value().data(), it->value().size()), &tb) && tb.stamp < older_than) {
      wb.Delete(impl_->H(kTombstones), it->key());
      n++;
    }
  }
  KVFS_RETURN_IF_ERROR(ToStatus(it->status(), "prune tombstones"));
  if (n) KVFS_RETURN_IF_ERROR(ToStatus(impl_->db->Write(rocksdb::WriteOptions(), &wb), "prune tombstones"));
  return n;
}

// ---- segments ----
Status IndexDb::SetSegmentState(const SegmentId& seg, SegmentState state) {
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  std::string sk = SegKey(seg);
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(t.Get(kSegments, sk, &v, &found));
  SegmentInfo si;
  if (found && !DecodeSeg(v, &si)) return Status::Corruption("bad segment record");
  si.state = state;
  t.Put(kSegments, sk, EncodeSeg(si));
  return t.Commit();
}

Status IndexDb::SetSegmentCut(const SegmentId& seg, uint64_t offset) {
  ApplyOp op;
  op.kind = ApplyOp::Kind::kCut;
  op.segment = seg;
  op.cut_offset = offset;
  auto r = ApplyBatch({&op, 1}, node_id_);
  return r.ok() ? Status::OK() : r.status();
}

Result<SegmentInfo> IndexDb::GetSegment(const SegmentId& seg) {
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kSegments, SegKey(seg), &v, &found));
  if (!found) return Status::NotFound("segment not in index");
  SegmentInfo si;
  if (!DecodeSeg(v, &si)) return Status::Corruption("bad segment record");
  si.id = seg;
  return si;
}

Status IndexDb::ListSegments(const std::function<bool(const SegmentInfo&)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->H(kSegments)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    SegmentInfo si;
    if (!DecodeSegKey(std::string_view(it->key().data(), it->key().size()), &si.id) ||
        !DecodeSeg(std::string_view(it->value().data(), it->value().size()), &si))
      return Status::Corruption("bad segment record");
    if (!fn(si)) break;
  }
  return ToStatus(it->status(), "list segments");
}

// ---- HLC / stats ----
uint64_t IndexDb::HlcFloor() const { return impl_->hlc.load(); }

Status IndexDb::SetHlcFloor(uint64_t stamp) {
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  t.RaiseHlc(stamp);
  return t.Commit();
}

IndexStats IndexDb::GetStats() const {
  IndexStats s;
  s.files = impl_->files;
  s.directories = impl_->dirs;
  s.live_bytes = impl_->live_bytes;
  s.staged_files = impl_->staged;
  return s;
}

// ---- dump ----
Result<std::map<std::string, DumpEntry>> IndexDb::DumpByPath() {
  std::map<std::string, DumpEntry> out;
  rocksdb::ReadOptions ro;
  ro.snapshot = impl_->db->GetSnapshot();
  struct Release {
    rocksdb::DB* db;
    const rocksdb::Snapshot* s;
    ~Release() { db->ReleaseSnapshot(s); }
  } rel{impl_->db, ro.snapshot};
  std::vector<std::pair<uint64_t, std::string>> stack{{kRootIno, "/"}};
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(ro, impl_->H(kDirCookies)));
  std::unique_ptr<rocksdb::Iterator> xit(impl_->db->NewIterator(ro, impl_->H(kXattrs)));
  while (!stack.empty()) {
    auto [dir, dpath] = stack.back();
    stack.pop_back();
    std::string prefix = InoKey(dir);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      Reader rd{std::string_view(it->value().data(), it->value().size())};
      std::string name = rd.Str();
      uint64_t ino = rd.U64();
      if (!rd.ok) return Status::Corruption("bad dircookie value");
      std::string v;
      auto s = impl_->db->Get(ro, impl_->H(kInodes), InoKey(ino), &v);
      if (!s.ok()) return ToStatus(s, "dump: inode " + std::to_string(ino));
      InodeRec r;
      if (!DecodeInode(v, &r)) return Status::Corruption("bad inode record");
      if (!r.committed) continue;
      std::string path = JoinPath(dpath, name);
      DumpEntry e;
      e.mode = r.attr.mode;
      if (r.is_dir()) {
        e.mode = S_IFDIR;
        stack.push_back({ino, path});
      } else {
        e.uid = r.attr.uid, e.gid = r.attr.gid, e.mtime_ns = r.attr.mtime_ns;
        if (r.is_reg()) e.location = r.loc, e.size = r.attr.size;
        e.symlink = r.symlink;
      }
      std::string xp = InoKey(ino);
      for (xit->Seek(xp); xit->Valid() && xit->key().starts_with(xp); xit->Next())
        e.xattrs[xit->key().ToString().substr(8)] = xit->value().ToString();
      out.emplace(std::move(path), std::move(e));
    }
    KVFS_RETURN_IF_ERROR(ToStatus(it->status(), "dump"));
  }
  return out;
}

}  // namespace kvfs

// ---- checkpoints ----
namespace kvfs {

class IndexDb::View {
 public:
  View(rocksdb::DB* db) : db_(db), snap_(db->GetSnapshot()) {}
  ~View() { db_->ReleaseSnapshot(snap_); }
  rocksdb::DB* db_;
  const rocksdb::Snapshot* snap_;
};

std::shared_ptr<const IndexDb::View> IndexDb::NewView() { return std::make_shared<const View>(impl_->db); }

Status IndexDb::ExportLive(const View& view, std::string_view node,
                           const std::function<Status(const ExportItem&)>& fn) {
  rocksdb::ReadOptions ro;
  ro.snapshot = view.snap_;
  auto* db = impl_->db;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro, impl_->H(kDirCookies)));
  std::unique_ptr<rocksdb::Iterator> xit(db->NewIterator(ro, impl_->H(kXattrs)));
  auto xattrs = [&](uint64_t ino, ExportItem* item) -> Status {
    std::string xp = InoKey(ino);
    for (xit->Seek(xp); xit->Valid() && xit->key().starts_with(xp); xit->Next())
      item->xattrs.emplace_back(xit->key().ToString().substr(8), xit->value().ToString());
    return ToStatus(xit->status(), "export xattrs");
  };
  std::vector<std::pair<uint64_t, std::string>> stack{{kRootIno, "/"}};
  while (!stack.empty()) {
    auto [dir, dpath] = stack.back();
    stack.pop_back();
    const std::string prefix = InoKey(dir);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      Reader rd{std::string_view(it->value().data(), it->value().size())};
      std::string name = rd.Str();
      uint64_t ino = rd.U64();
      if (!rd.ok) return Status::Corruption("bad dircookie value");
      std::string v;
      auto s = db->Get(ro, impl_->H(kInodes), InoKey(ino), &v);
      if (!s.ok()) return ToStatus(s, "export: inode " + std::to_string(ino));
      InodeRec r;
      if (!DecodeInode(v, &r)) return Status::Corruption("bad inode record");
      if (!r.committed && !r.is_dir()) continue;  // staged
      ExportItem item;
      item.path = JoinPath(dpath, name);
      item.attr = r.attr;
      if (r.is_dir()) {
        item.kind = ExportItem::Kind::kDir;
        stack.push_back({ino, item.path});
      } else {
        std::string dv;
        s = db->Get(ro, impl_->H(kDentries), DentryKey(dir, name), &dv);
        if (!s.ok()) return ToStatus(s, "export: dentry " + item.path);
        DentryVal d;
        if (!DecodeDentry(dv, &d)) return Status::Corruption("bad dentry");
        if (d.node != node || d.stamp == 0) continue;
        item.kind = S_ISLNK(r.attr.mode) ? ExportItem::Kind::kSymlink : ExportItem::Kind::kFile;
        item.stamp = d.stamp;
        item.location = r.loc;
        item.symlink = r.symlink;
      }
      KVFS_RETURN_IF_ERROR(xattrs(ino, &item));
      KVFS_RETURN_IF_ERROR(fn(item));
    }
    KVFS_RETURN_IF_ERROR(ToStatus(it->status(), "export"));
  }
  std::unique_ptr<rocksdb::Iterator> tit(db->NewIterator(ro, impl_->H(kTombstones)));
  for (tit->SeekToFirst(); tit->Valid(); tit->Next()) {
    Tombstone tb;
    if (!DecodeTomb(std::string_view(tit->value().data(), tit->value().size()), &tb)) {
      return Status::Corruption("bad tombstone");
    }
    if (tb.node != node) continue;
    ExportItem item;
    item.kind = ExportItem::Kind::kTombstone;
    item.path = tit->key().ToString();
    item.stamp = tb.stamp;
    KVFS_RETURN_IF_ERROR(fn(item));
  }
  KVFS_RETURN_IF_ERROR(ToStatus(tit->status(), "export tombstones"));
  std::unique_ptr<rocksdb::Iterator> sit(db->NewIterator(ro, impl_->H(kSegments)));
  std::string sp(node);
  sp.push_back('\0');
  for (sit->Seek(sp); sit->Valid() && sit->key().starts_with(sp); sit->Next()) {
    ExportItem item;
    item.kind = ExportItem::Kind::kSegment;
    if (!DecodeSegKey(std::string_view(sit->key().data(), sit->key().size()), &item.segment.id) ||
        !DecodeSeg(std::string_view(sit->value().data(), sit->value().size()), &item.segment)) {
      return Status::Corruption("bad segment record");
    }
    if (item.segment.state == SegmentState::kOpen && item.segment.cut == UINT64_MAX) continue;
    KVFS_RETURN_IF_ERROR(fn(item));
  }
  return ToStatus(sit->status(), "export segments");
}

}  // namespace kvfs
