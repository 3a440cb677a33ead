// IndexDb's state and write machinery, shared by its part files (index_db.cc, namespace_index.cc,
// location_index.cc, progress_index.cc, index_apply.cc, index_export.cc); private to IndexDb.
//   * IndexDb::Impl: the RocksDB handles, the namespace mutex, the inode allocator, the HLC floor and
//     the in-memory counters;
//   * Txn: one write = one atomic WriteBatch, with an overlay (later steps of an operation see earlier
//     ones), undo marks (ApplyBatch rolls back one malformed op) and counter deltas;
//   * Ops: the steps writers compose on a Txn (inode records, dentries + cookies, tombstones, segment
//     membership, paths).
// Thread-safety: Txn and Ops are used by one thread holding Impl::mu (every write holds it); Commit
// writes the batch, then publishes the counters / HLC floor (atomics readers load without the lock).
// Readers use Impl::db directly (snapshots / iterators), never a Txn.
// Invariants: every change of an inode record goes through Ops::PutRec, which keeps the counters, the
// staged CF and the segments / segfiles CFs in step with the inodes CF (and drops a removed inode's
// xattrs); a dentry and its dircookies entry are written and deleted together (Ops::Link /
// Ops::UnlinkDentry). Key and value encodings: index_keys.h.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "index/index_db.h"
#include "index/index_keys.h"

namespace kvfs {

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

  // Read-through cache of decoded inode records (GETATTR, LOOKUP, OPEN): a RocksDB Get of a memtable
  // holding a busy mount's recent writes costs ~24,000 instructions, a hit here ~1,000 (callgrind,
  // tools/instr_per_chunk.sh's lookup phase). Coherence: the only writer of the inodes CF is
  // Txn::Commit (and Open's initial root record, before any reader); after its batch is written it
  // erases the inodes it touched and bumps `epoch`. A reader that misses notes `epoch` before its
  // Get and inserts what it read only if no commit ran meanwhile, so an entry never outlives a newer
  // record. Bounded by kInodeCacheEntries (an arbitrary entry is dropped when full: ~200 B each).
  static constexpr size_t kInodeCacheEntries = 65536;
  std::mutex icache_mu;
  uint64_t icache_epoch = 0;                                          // under icache_mu
  std::unordered_map<uint64_t, index_internal::InodeRec> icache;      // under icache_mu
  bool CachedInode(uint64_t ino, index_internal::InodeRec* r, uint64_t* epoch) {
    std::lock_guard<std::mutex> g(icache_mu);
    *epoch = icache_epoch;
    auto it = icache.find(ino);
    if (it == icache.end()) return false;
    *r = it->second;
    return true;
  }
  void CacheInode(uint64_t ino, const index_internal::InodeRec& r, uint64_t epoch) {
    std::lock_guard<std::mutex> g(icache_mu);
    if (epoch != icache_epoch) return;
    if (icache.size() >= kInodeCacheEntries && !icache.count(ino)) icache.erase(icache.begin());
    icache[ino] = r;
  }
  // After a committed batch: `inode_keys` are the InoKey()s it put or deleted.
  template <typename Keys>
  void UncacheInodes(const Keys& inode_keys) {
    std::lock_guard<std::mutex> g(icache_mu);
    icache_epoch++;
    for (const auto& kv : inode_keys) {
      if (kv.first.size() == 8) icache.erase(index_internal::GetBE64(kv.first.data()));
    }
  }

  rocksdb::ColumnFamilyHandle* H(index_internal::Cf c) const { return cf[c]; }
  Status DbGet(index_internal::Cf c, const std::string& key, std::string* val, bool* found,
               const rocksdb::Snapshot* snap = nullptr) {
    rocksdb::ReadOptions ro;
    ro.snapshot = snap;
    auto s = db->Get(ro, H(c), key, val);
    *found = s.ok();
    if (s.ok() || s.IsNotFound()) return Status::OK();
    return index_internal::ToStatus(s, "index get");
  }
  Result<uint64_t> AllocIno();

  // A failed write (typically ENOSPC on the local index disk) puts RocksDB in its read-only error
  // state: every later write fails, and syncing its WAL again would trip RocksDB's own assertion. So
  // the first failure is logged once, loudly, and SyncWal/MarkClean stop touching the WAL; the index is
  // read-only until the next mount (which rebuilds it from the journals: it was not closed cleanly).
  std::atomic<bool> write_failed{false};
  Status WriteError(const rocksdb::Status& rs, std::string_view what) {
    Status st = index_internal::ToStatus(rs, what);
    if (!write_failed.exchange(true)) {
      spdlog::error("kvfs: local index {} is read-only after a failed write ({}): creates, renames, unlinks and "
                    "peers' changes fail (ENOSPC/EIO) until the next mount; reads of existing files continue. "
                    "Free space in {} and remount (the index is rebuilt from the journals)",
                    dir, st.ToString(), dir);
    }
    return st;
  }
};

namespace index_internal {

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
    if (!ov_[kInodes].empty()) im_->UncacheInodes(ov_[kInodes]);
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

// ---- transaction-level helpers (all under mu) ----
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
    if (r.is_reg()) t.d_live += sign * int64_t(r.extents ? r.extents->DataBytes() : r.attr.size);
    if (r.extents) {
      // Per record of the map: its live bytes (the extents that still use it) and one record; one
      // segfiles key per (segment, inode), so dropping any segment the file uses drops the file.
      std::map<SegmentId, std::pair<uint64_t, uint64_t>> per_seg;  // segment -> (live bytes, records)
      for (const auto& [rec, bytes] : r.extents->LiveBytesByRecord()) {
        auto& [b, n] = per_seg[rec.first];
        b += bytes;
        n += 1;
      }
      for (const auto& [seg, bn] : per_seg) KVFS_RETURN_IF_ERROR(AccountSegment(seg, r.attr.ino, bn.first, bn.second, sign));
    } else if (!r.loc.empty()) {
      KVFS_RETURN_IF_ERROR(AccountSegment(r.loc.segment, r.attr.ino, r.loc.length, 1, sign));
    }
    return Status::OK();
  }
  // Adds (sign +1) or removes (-1) `bytes` live bytes and `records` live records of segment seg used by
  // inode ino, and its segfiles key.
  Status AccountSegment(const SegmentId& seg, uint64_t ino, uint64_t bytes, uint64_t records, int sign) {
    std::string sk = SegKey(seg);
    std::string v;
    bool found;
    KVFS_RETURN_IF_ERROR(t.Get(kSegments, sk, &v, &found));
    SegmentInfo si;
    if (found && !DecodeSeg(v, &si)) return Status::Corruption("bad segment record");
    si.live_bytes += sign * int64_t(bytes);
    si.live_records += sign * int64_t(records);
    t.Put(kSegments, sk, EncodeSeg(si));
    std::string fk = sk + InoKey(ino);
    if (sign > 0) t.Put(kSegFiles, fk, "");
    else t.Del(kSegFiles, fk);
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
      keys.clear();
      KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kXattrStamps, InoKey(old->attr.ino), [&](auto& k, auto&) {
        keys.push_back(k);
        return true;
      }));
      for (auto& k : keys) t.Del(kXattrStamps, k);
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
  // renameat2(RENAME_EXCHANGE): parent a/name a (dentry da, inode ra) and parent b/name b (db, rb) swap
  // what they name, in this transaction. Each dentry keeps its cookie (a listing neither skips nor
  // repeats either name) and gets (stamp, node); each inode record moves to the other name (ctime now;
  // non-directories take (stamp, node) as their binding). A directory exchanged with a non-directory
  // across parents moves one link count between them. The caller checked existence and cycles.
  // keep_bindings (an exchange with a directory on a side): each inode keeps its dentry's (stamp, node)
  // and its own, as the files under a renamed directory do: the exchange is its record, not a binding.
  Status SwapDentries(uint64_t pa, std::string_view na, const DentryVal& da, const InodeRec& ra, uint64_t pb,
                      std::string_view nb, const DentryVal& db, const InodeRec& rb, uint64_t stamp,
                      std::string_view node, bool keep_bindings = false) {
    if (keep_bindings) {
      KVFS_RETURN_IF_ERROR(Link(pa, na, rb.attr.ino, rb.attr.mode, db.stamp, db.node, da.cookie));
      KVFS_RETURN_IF_ERROR(Link(pb, nb, ra.attr.ino, ra.attr.mode, da.stamp, da.node, db.cookie));
    } else {
      KVFS_RETURN_IF_ERROR(Link(pa, na, rb.attr.ino, rb.attr.mode, stamp, node, da.cookie));
      KVFS_RETURN_IF_ERROR(Link(pb, nb, ra.attr.ino, ra.attr.mode, stamp, node, db.cookie));
    }
    const int64_t now = NowNs();
    InodeRec ma = ra, mb = rb;
    ma.parent = pb, ma.name = std::string(nb), ma.attr.ctime_ns = now;
    mb.parent = pa, mb.name = std::string(na), mb.attr.ctime_ns = now;
    if (stamp && !keep_bindings && !ma.is_dir()) ma.stamp = stamp, ma.stamp_node = std::string(node);
    if (stamp && !keep_bindings && !mb.is_dir()) mb.stamp = stamp, mb.stamp_node = std::string(node);
    KVFS_RETURN_IF_ERROR(UpdateRec(ra, ma));
    KVFS_RETURN_IF_ERROR(UpdateRec(rb, mb));
    // A subdirectory's ".." counts in its parent's nlink.
    const int delta = (pa != pb) ? (int(rb.is_dir()) - int(ra.is_dir())) : 0;
    KVFS_RETURN_IF_ERROR(TouchDir(pa, delta));
    if (pb != pa) KVFS_RETURN_IF_ERROR(TouchDir(pb, -delta));
    return Status::OK();
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
  // removed: the dentry this tombstone removes (its binding is recorded), or null (none: the binding a
  // tombstone already holds is kept).
  Status RaiseTomb(const std::string& path, uint64_t stamp, std::string_view node, const DentryVal* removed) {
    std::optional<Tombstone> tb;
    KVFS_RETURN_IF_ERROR(GetTomb(path, &tb));
    const bool bound = removed != nullptr && removed->stamp != 0;
    if (!tb || Newer(stamp, node, tb->stamp, tb->node)) {
      const uint64_t rs = bound ? removed->stamp : tb ? tb->removed_stamp : 0;
      const std::string rn = bound ? removed->node : tb ? tb->removed_node : std::string();
      t.Put(kTombstones, path, EncodeTomb(stamp, node, rs, rn));
    } else if (bound && (tb->removed_stamp != removed->stamp || tb->removed_node != removed->node)) {
      // An older UNLINK applied after a newer one (peers' orders differ) still removes this binding.
      t.Put(kTombstones, path, EncodeTomb(tb->stamp, tb->node, removed->stamp, removed->node));
    }
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
  // True if any record of the content (a Location, or an extent map's records) lies in a dropped
  // segment: the file's bytes are gone in part (a cache miss, as for a one-record file).
  Result<bool> InDroppedSegment(const Location& loc, const ExtentMapRef& ext) {
    if (!ext) return InDroppedSegment(loc);
    for (const Location& rec : ext->Records()) {
      auto d = InDroppedSegment(rec);
      if (!d.ok() || *d) return d;
    }
    return false;
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

// After a size change of an extent file (SetAttrMask kSetSize): its map follows (cut at, or a hole up to,
// the new size), so attr.size and the map's size stay equal.
// The content of a committed regular file as an extent map (its map, or its one record as a map of one
// extent): what an extent delta PUT of its path applies to (docs/format.md "Extent deltas"). False for
// anything else (not committed, not regular, an inline value, no record).
inline bool DeltaBaseOf(const InodeRec& r, ExtentMap* out) {
  if (!r.committed || !r.is_reg()) return false;
  if (r.extents) {
    *out = *r.extents;
    return true;
  }
  if (r.loc.empty()) return false;
  *out = ExtentMap::FromLocation(r.loc, r.attr.size);
  return true;
}

inline void ResizeExtents(InodeRec* r) {
  if (!r->extents || r->extents->size() == r->attr.size) return;
  ExtentMap m = *r->extents;
  m.Resize(r->attr.size);
  r->extents = NormalizeExtents(std::move(m), &r->loc);
}

inline void ApplyAttrMask(Attr* a, const Attr& in, uint32_t mask) {
  if (mask & kSetMode) a->mode = (a->mode & S_IFMT) | (in.mode & 07777);
  if (mask & kSetUid) a->uid = in.uid;
  if (mask & kSetGid) a->gid = in.gid;
  if ((mask & kSetSize) && S_ISREG(a->mode)) a->size = in.size;
  if (mask & kSetAtime) a->atime_ns = in.atime_ns;
  if (mask & kSetMtime) a->mtime_ns = in.mtime_ns;
  if (mask & kSetCtime) a->ctime_ns = in.ctime_ns;
}

}  // namespace index_internal
}  // namespace kvfs
