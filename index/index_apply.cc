// IndexDb, journal-entry application by PATH: ApplyBatch (PUT, RENAME, EXCHANGE, ...) and the single-op
// conveniences (ApplyPut, ApplyRename, ApplyUnlink, ApplyMkdir, ApplyRmdir, ApplySetattr, ApplyXattr, ApplyMove, ApplySeal,
// ApplyDrop). Writes the namespace CFs and the segments CF through Ops (index_txn.h) and records meta
// "applied/<node>" (layout: index_keys.h).
// Callers: replay (index/replay.h) at rebuild and catch-up, the Store (engine/peer_tailer.cc: peers'
// journals; engine/store_open.cc: its own entries at mount), the tests.
// Thread-safety: one ApplyBatch holds Impl::mu and commits one atomic WriteBatch.
// Invariants: last writer wins per path by (stamp, node) against the dentry and the path's tombstone
// (index_db.h); superseded or conflicting ops are skipped and counted, a malformed op is rolled back
// and skipped, only I/O or corruption is an error.
#include "index/index_db.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

#include "index/index_keys.h"
#include "index/journal_format.h"
#include "index/index_txn.h"

namespace kvfs {

using namespace index_internal;

// ---- journal application ----
namespace {

struct Applier {
  Ops& o;
  Txn& t;
  std::string node;
  ApplyResult& res;
  size_t op_index = 0;          // of the op being applied, in its batch
  bool missing_target = false;  // AttrTarget found no name at the op's path (not: an older change)

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
    // The attribute stamp: the binding's, unless rec's attributes come from a newer SETATTR (a renamed
    // file's, or those a PUT keeps).
    if (!Newer(rec.stamp, rec.stamp_node, stamp, node)) rec.stamp = stamp, rec.stamp_node = node;
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

  // A PUT whose content is an extent delta (entry version 5, docs/format.md "Extent deltas"): its base
  // is this node's binding of the path with stamp base_stamp. Resolved when the path is bound here by
  // (base_stamp, this entry's node) to a committed file and the delta applied to that file's content
  // gives exactly the map the writer had (map checksum): then it is an ordinary PUT of that map. A PUT
  // that loses (last writer wins) is skipped as any PUT is. Otherwise (a peer's binding applied between
  // the base and the delta, a base lost to journal damage, a MOVE or SETATTR that reached this index in
  // another order than the writer's) the map cannot be rebuilt here, and the rule is: the entry applies
  // as an UNLINK of the path at its stamp (a cache miss, never another version's bytes), until a
  // newer PUT of the path (the writer journals a whole map at least every kDeltaChainMax commits).
  Result<bool> PutDelta(const ApplyOp& op) {
    std::string leaf;
    bool skip = false;
    std::optional<DentryVal> cur;
    auto parent = Parent(op.path, false, op.attr, &leaf, &skip);
    if (!parent.ok()) return parent.status();
    if (!skip) {
      auto w = Wins(op.path, *parent, leaf, op.stamp, &cur);
      if (!w.ok()) return w.status();
      if (!*w) return false;
    }
    const ExtentDelta& d = *op.delta;
    if (!skip && cur && cur->stamp == d.base_stamp && cur->node == node && op.attr.size == d.size) {
      std::optional<InodeRec> cr;
      KVFS_RETURN_IF_ERROR(o.GetRec(cur->ino, &cr));
      ExtentMap base, next;
      if (cr && DeltaBaseOf(*cr, &base) && ApplyExtentDelta(base, d, &next).ok() &&
          ExtentMapChecksum(next) == d.map_checksum) {
        ApplyOp full = op;
        full.delta.reset();
        full.extents = NormalizeExtents(std::move(next), &full.location);
        return Put(full);
      }
    }
    res.unresolved_deltas++;
    res.unresolved_by_node[node]++;
    spdlog::warn("index: delta PUT of '{}' by {} (stamp {}) names a base (stamp {}) this index does not hold; "
                 "applied as an UNLINK at its stamp until the node's next whole PUT of the path",
                 op.path, node, op.stamp, d.base_stamp);
    ApplyOp u;
    u.kind = ApplyOp::Kind::kUnlink;
    u.path = op.path;
    u.stamp = op.stamp;
    auto r = Unlink(u);
    if (!r.ok()) return r.status();
    return true;
  }

  Result<bool> Put(const ApplyOp& op) {
    if (op.delta) return PutDelta(op);
    if (op.extents && (!op.location.empty() || op.extents->size() != op.attr.size ||
                       (op.attr.mode & S_IFMT) == S_IFLNK)) {
      return Status::InvalidArgument("PUT with an extent map and a location, a symlink or another size");
    }
    auto dropped = o.InDroppedSegment(op.location, op.extents);
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
    std::vector<NewerXattr> keep_xattrs;
    // A PUT binds a regular file; a SYMLINK entry (also a PUT here) a symlink or, from entry version 4,
    // an index-only special file. Any other type (a directory) becomes a regular file, as before.
    uint32_t type = op.attr.mode & S_IFMT;
    const bool special = IsSpecialFileMode(type);
    if (type != S_IFLNK && !special) type = S_IFREG;
    rec.attr.mode = type | (op.attr.mode & 07777);
    rec.attr.rdev = IsDeviceMode(type) ? op.attr.rdev : 0;
    if (type == S_IFLNK) {
      rec.symlink = op.symlink;
      rec.attr.size = op.symlink.size();
    } else if (special) {
      rec.attr.size = 0;
    } else {
      rec.loc = op.location;
      rec.extents = op.extents;
    }
    if (cur) {
      std::optional<InodeRec> cr;
      KVFS_RETURN_IF_ERROR(o.GetRec(cur->ino, &cr));
      // same content re-applied (e.g. replay): keep the inode number
      if (cr && cr->committed && (cr->attr.mode & S_IFMT) == type && cr->loc == rec.loc &&
          cr->extents == rec.extents && cr->symlink == rec.symlink && cr->attr.rdev == rec.attr.rdev)
        rec.attr.ino = cr->attr.ino;
      // A SETATTR newer than this PUT was applied here before it (it named the previous version; where
      // the PUT came first it applies on top of it): its attributes stay, the PUT brings the content.
      if (cr && cr->committed && (cr->attr.mode & S_IFMT) == type && Newer(cr->stamp, cr->stamp_node, op.stamp, node)) {
        const uint64_t size = rec.attr.size;
        ApplyAttrMask(&rec.attr, cr->attr, kSetAttrsWholeFields);
        rec.attr.size = size;
        rec.stamp = cr->stamp, rec.stamp_node = cr->stamp_node;
      }
      // Likewise each xattr name set or removed after this PUT keeps that state (per-name LWW).
      if (cr && cr->committed) {
        auto nx = XattrsNewerThan(cr->attr.ino, op.stamp);
        if (!nx.ok()) return nx.status();
        keep_xattrs = std::move(*nx);
      }
    }
    if (rec.attr.ino && cur) {
      // in place: update record and dentry stamp without unlinking
      std::optional<InodeRec> old;
      KVFS_RETURN_IF_ERROR(o.GetRec(rec.attr.ino, &old));
      rec.parent = *parent, rec.name = leaf, rec.committed = true;
      if (!Newer(rec.stamp, rec.stamp_node, op.stamp, node)) rec.stamp = op.stamp, rec.stamp_node = node;
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
      keys.clear();
      KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kXattrStamps, InoKey(rec.attr.ino), [&](auto& k, auto&) {
        keys.push_back(k);
        return true;
      }));
      for (auto& k : keys) t.Del(kXattrStamps, k);  // older than the PUT, which now gates them (AttrTarget)
      for (const auto& [name, value] : *op.xattrs) t.Put(kXattrs, XattrKey(rec.attr.ino, name), value);
    }
    for (const auto& x : keep_xattrs) {  // newer than the PUT: their state stays
      const std::string k = XattrKey(rec.attr.ino, x.name);
      if (x.removed) t.Del(kXattrs, k);
      else t.Put(kXattrs, k, x.value);
      t.Put(kXattrStamps, k, x.stamp_rec);
    }
    t.Del(kTombstones, op.path);
    t.RaiseHlc(op.stamp);
    return true;
  }

  Result<bool> Unlink(const ApplyOp& op) {
    std::string leaf;
    bool skip;
    auto parent = Parent(op.path, false, op.attr, &leaf, &skip);
    if (!parent.ok()) return parent.status();
    std::optional<DentryVal> cur;
    if (!skip) KVFS_RETURN_IF_ERROR(o.GetDentry(*parent, leaf, &cur));
    // The binding this UNLINK removes (recorded in the tombstone: the link claims' incarnation): a
    // committed file's dentry older than it.
    const DentryVal* removed = nullptr;
    if (cur && !S_ISDIR(cur->mode) && cur->stamp != 0 && Newer(op.stamp, node, cur->stamp, cur->node)) {
      removed = &*cur;
    }
    KVFS_RETURN_IF_ERROR(o.RaiseTomb(op.path, op.stamp, node, removed));
    if (skip) return true;  // tombstone recorded
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
    if (!src_dir) KVFS_RETURN_IF_ERROR(o.RaiseTomb(op.path, op.stamp, node, src && sd ? &*sd : nullptr));
    auto dropped = src ? o.InDroppedSegment(src->loc, src->extents) : o.InDroppedSegment(op.location);
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
      if (*under) return false;  // no cycles
      if (dd) {
        // rename(2) of a directory replaces an EMPTY directory (the origin checked it, under its
        // namespace lock); replayed or applied here, the entry does the same. A directory that is
        // not empty here (a peer created something in it meanwhile: a cross-node race) or a
        // non-directory keeps the destination, and the source stays where it was.
        if (dd->ino == src->attr.ino || !S_ISDIR(dd->mode)) return false;
        auto removed = RemoveEmptyDir(*dparent, dleaf, *dd);
        if (!removed.ok() || !*removed) return removed;
      }
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
      res.moved_dirs.push_back(op_index);
      // Its record: every later rebuild redirects the entries older than this rename (dir_redirect.h),
      // even once the entry itself lies behind a snapshot.
      if (op.stamp != 0) PutDirRename(op.path, op.to, op.stamp);
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
        rec = *src;  // keeps its inode number and content (its location or its extent map)
      } else if (!op.location.empty()) {  // (an extent file's RENAME carries no location: not linked)
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

  void PutDirRename(const std::string& from, const std::string& to, uint64_t stamp) {
    t.Put(kDirRenames, DirRenameKey(stamp, node), EncodeDirRename(DirRenameRecord{from, to, stamp, node}));
  }

  // A snapshot's RENAME entry: the record of a directory rename, stored; nothing moves.
  Result<bool> DirRenameRecordOp(const ApplyOp& op) {
    std::vector<std::string_view> comps;
    if (op.stamp == 0 || op.path == op.to || !SplitPath(op.path, &comps).ok() || comps.empty() ||
        !SplitPath(op.to, &comps).ok() || comps.empty()) {
      return Status::InvalidArgument("bad directory rename record '" + op.path + "' -> '" + op.to + "'");
    }
    if (op.exchange) {
      // Both ends are looked up by a redirect: neither may lie under the other.
      auto under = [](const std::string& p, const std::string& anc) {
        return p.size() > anc.size() && p.compare(0, anc.size(), anc) == 0 && p[anc.size()] == '/';
      };
      if (under(op.path, op.to) || under(op.to, op.path)) {
        return Status::InvalidArgument("bad directory exchange record '" + op.path + "' <-> '" + op.to + "'");
      }
    }
    t.Put(kDirRenames, DirRenameKey(op.stamp, node),
          EncodeDirRename(DirRenameRecord{op.path, op.to, op.stamp, node, op.exchange}));
    t.RaiseHlc(op.stamp);
    return true;
  }

  // renameat2(RENAME_EXCHANGE) from a journal: applied whole or not at all. Both names must exist here,
  // each binding older than the entry by (stamp, node) (a non-directory must be committed: a staged
  // local file is newer), and neither directory may end up inside itself; otherwise nothing changes
  // (a cross-node race: the nodes differ there until one of them changes those names again). A
  // re-applied EXCHANGE is skipped: both dentries already carry its stamp.
  Result<bool> Exchange(const ApplyOp& op) {
    if (op.path == op.to) return false;
    std::string la, lb;
    bool skip_a, skip_b;
    auto pa = Parent(op.path, false, op.attr, &la, &skip_a);
    if (!pa.ok()) return pa.status();
    auto pb = Parent(op.to, false, op.attr, &lb, &skip_b);
    if (!pb.ok()) return pb.status();
    if (skip_a || skip_b) return false;
    std::optional<DentryVal> da, db;
    KVFS_RETURN_IF_ERROR(o.GetDentry(*pa, la, &da));
    KVFS_RETURN_IF_ERROR(o.GetDentry(*pb, lb, &db));
    if (!da || !db || da->ino == db->ino) return false;
    std::optional<InodeRec> ra, rb;
    KVFS_RETURN_IF_ERROR(o.GetRec(da->ino, &ra));
    KVFS_RETURN_IF_ERROR(o.GetRec(db->ino, &rb));
    if (!ra || !rb) return false;
    const bool with_dir = ra->is_dir() || rb->is_dir();
    if (with_dir && op.stamp != 0) {
      // Already reflected: this index holds the exchange's record (a snapshot that holds it was applied,
      // whose names are already swapped; or the entry was applied before). Swapping again would undo it.
      std::string v;
      bool found = false;
      KVFS_RETURN_IF_ERROR(t.Get(kDirRenames, DirRenameKey(op.stamp, node), &v, &found));
      if (found) return false;
    }
    for (const auto& [d, r] : {std::pair{&*da, &*ra}, std::pair{&*db, &*rb}}) {
      if (!r->is_dir() && !r->committed) return false;
      // A directory's dentry carries no binding to compare (directories have no stamps).
      if (!r->is_dir() && !Newer(op.stamp, node, d->stamp, d->node)) return false;
    }
    if (*pa != *pb) {
      if (ra->is_dir()) {
        auto under = o.IsUnder(*pb, ra->attr.ino);
        if (!under.ok()) return under.status();
        if (*under) return false;
      }
      if (rb->is_dir()) {
        auto under = o.IsUnder(*pa, rb->attr.ino);
        if (!under.ok()) return under.status();
        if (*under) return false;
      }
    }
    KVFS_RETURN_IF_ERROR(o.SwapDentries(*pa, la, *da, *ra, *pb, lb, *db, *rb, op.stamp, node, with_dir));
    res.changed.push_back({*pa, la, ra->attr.ino, rb->attr.ino});
    res.changed.push_back({*pb, lb, rb->attr.ino, ra->attr.ino});
    if (with_dir) {
      // Its record (both ways at once): every later rebuild redirects the entries older than it, and a
      // snapshot holding it marks this EXCHANGE as reflected (above).
      if (op.stamp != 0) {
        t.Put(kDirRenames, DirRenameKey(op.stamp, node),
              EncodeDirRename(DirRenameRecord{op.path, op.to, op.stamp, node, true}));
      }
      res.moved_dirs.push_back(op_index);
    }
    t.RaiseHlc(op.stamp);
    return true;
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
    return RemoveEmptyDir(*parent, leaf, *cur);
  }

  // Removes parent/leaf, the directory d, if it is empty; false (nothing done) if it is not.
  Result<bool> RemoveEmptyDir(uint64_t parent, const std::string& leaf, const DentryVal& d) {
    auto empty = o.DirEmpty(d.ino);
    if (!empty.ok()) return empty.status();
    if (!*empty) return false;
    KVFS_RETURN_IF_ERROR(o.RemoveEntryAndInode(parent, leaf, d));
    KVFS_RETURN_IF_ERROR(o.TouchDir(parent, -1));
    res.changed.push_back({parent, leaf, d.ino, 0});
    return true;
  }

  // The committed node at path that an attribute change of (stamp, node) may modify, or nullopt.
  Result<std::optional<InodeRec>> AttrTarget(const ApplyOp& op) {
    missing_target = false;
    auto ino = [&]() -> Result<uint64_t> {
      if (op.path == "/") return kRootIno;
      std::string leaf;
      bool skip;
      auto parent = Parent(op.path, false, op.attr, &leaf, &skip);
      if (!parent.ok()) return parent.status();
      missing_target = true;
      if (skip) return uint64_t(0);
      std::optional<DentryVal> cur;
      KVFS_RETURN_IF_ERROR(o.GetDentry(*parent, leaf, &cur));
      if (!cur) return uint64_t(0);
      missing_target = false;
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
    if (!*r) {
      if (missing_target) res.no_target.push_back(op_index);
      return false;
    }
    InodeRec n = **r;
    // Last writer wins by (stamp, node) against the inode's attribute stamp (its version's PUT, the
    // newest SETATTR applied): an older entry changes nothing, in whatever order the entries arrive.
    // (kSetAtimeOfRead, "changed since the read", is this same rule.) An entry with kSetAttrsWhole sets
    // the whole attribute set its node had, so ignoring it loses no field a newer entry did not name;
    // an older binary's entry (no bit) sets the fields it names.
    if (!Newer(op.stamp, node, n.stamp, n.stamp_node)) return false;
    const uint32_t mask = (op.mask & kSetAttrsWhole) ? op.mask | kSetAttrsWholeFields : op.mask;
    ApplyAttrMask(&n.attr, op.attr, mask);
    ResizeExtents(&n);
    n.stamp = op.stamp, n.stamp_node = node;
    KVFS_RETURN_IF_ERROR(o.UpdateRec(**r, n));
    t.RaiseHlc(op.stamp);
    res.attr_changed.push_back(n.attr.ino);
    return true;
  }

  Status GetXattrStamp(const std::string& k, XattrStamp* x) {
    std::string v;
    bool found;
    KVFS_RETURN_IF_ERROR(t.Get(kXattrStamps, k, &v, &found));
    if (found && !DecodeXattrStamp(v, x)) return Status::Corruption("bad xattr stamp record");
    if (!found) *x = XattrStamp{};
    return Status::OK();
  }

  // The names of ino whose last set or remove is newer than (stamp, node): (name, stamp record, value).
  struct NewerXattr {
    std::string name, stamp_rec, value;
    bool removed;
  };
  Result<std::vector<NewerXattr>> XattrsNewerThan(uint64_t ino, uint64_t stamp) {
    std::vector<NewerXattr> out;
    const std::string prefix = InoKey(ino);
    Status bad;
    KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kXattrStamps, prefix, [&](auto& k, auto& v) {
      XattrStamp x;
      if (!DecodeXattrStamp(v, &x)) {
        bad = Status::Corruption("bad xattr stamp record");
        return false;
      }
      if (Newer(x.stamp, x.node, stamp, node)) out.push_back({k.substr(prefix.size()), v, "", x.removed});
      return true;
    }));
    KVFS_RETURN_IF_ERROR(bad);
    for (auto& n : out) {
      bool found = false;
      if (!n.removed) KVFS_RETURN_IF_ERROR(t.Get(kXattrs, XattrKey(ino, n.name), &n.value, &found));
      if (!found) n.removed = true;
    }
    return out;
  }

  Result<bool> Xattr(const ApplyOp& op) {
    auto r = AttrTarget(op);
    if (!r.ok()) return r.status();
    if (!*r) {
      if (missing_target) res.no_target.push_back(op_index);
      return false;
    }
    std::string k = XattrKey((*r)->attr.ino, op.xattr_name);
    // Last writer wins per name by (stamp, node) against the name's last set or remove (xattrstamps;
    // none: older than any entry). The same (stamp, node) is the same event (a re-applied or a
    // snapshot's entry): applies again, to the same value.
    XattrStamp cur;
    KVFS_RETURN_IF_ERROR(GetXattrStamp(k, &cur));
    if (Newer(cur.stamp, cur.node, op.stamp, node)) return false;
    if (op.xattr_remove) t.Del(kXattrs, k);
    else t.Put(kXattrs, k, op.xattr_value);
    t.Put(kXattrStamps, k, EncodeXattrStamp({op.stamp, node, op.xattr_remove}));
    t.RaiseHlc(op.stamp);
    res.attr_changed.push_back((*r)->attr.ino);
    return true;
  }

  // Replaces op.old_location by op.location in rec (a committed regular file); false (nothing to
  // write) when rec does not reference the old record.
  Result<bool> MoveIn(const InodeRec& r, const ApplyOp& op) {
    if (!r.committed || !r.is_reg()) return false;
    InodeRec n = r;
    if (r.extents) {
      // An extent file: the moved record is replaced in every extent that references it (value
      // offsets unchanged; the record's value is the same bytes).
      ExtentMap m = *r.extents;
      auto replaced = m.ReplaceRecord(op.old_location, op.location);
      if (!replaced.ok()) return replaced.status();
      if (*replaced == 0) return false;
      n.extents = NormalizeExtents(std::move(m), &n.loc);
    } else {
      if (!(r.loc == op.old_location)) return false;
      n.loc = op.location;
    }
    KVFS_RETURN_IF_ERROR(o.UpdateRec(r, n));
    return true;
  }

  // A MOVE applies to the file at its path when that file references the old record. Otherwise it
  // applies to the bound files that do (found through the old record's segfiles keys): a MOVE carries
  // its PUT's stamp but names the path its writer saw when it wrote it, which may lie behind a peer's
  // later rename or exchange (of the file or a directory above it) that this index has not applied yet
  // (a merged replay orders the MOVE by its old stamp, a tailer may read the writer's journal first),
  // or that the redirect rule sent elsewhere. Without this the writer's DROP of the old segment then
  // removed the file. The old record is the writer's own segment, which only its writer re-appends
  // and drops, so a file still referencing it can only be what the MOVE copied: replacing it changes
  // no content (the new record holds the same bytes) and binds no name, so nothing unlinked or
  // replaced later comes back. A record several files share (a link(2) copy of an extent file; one
  // MOVE per file) goes to the file of the MOVE's leaf name when one matches, else to all of them.
  // Cost: only a MOVE that misses at its path reads the old segment's remaining files (one inode each).
  Result<bool> Move(const ApplyOp& op) {
    auto dropped = o.InDroppedSegment(op.location);
    if (!dropped.ok()) return dropped.status();
    if (*dropped) return false;
    std::string leaf;
    bool skip;
    auto parent = Parent(op.path, false, op.attr, &leaf, &skip);
    if (!parent.ok()) return parent.status();
    if (!skip) {
      std::optional<DentryVal> cur;
      KVFS_RETURN_IF_ERROR(o.GetDentry(*parent, leaf, &cur));
      if (cur) {
        std::optional<InodeRec> r;
        KVFS_RETURN_IF_ERROR(o.GetRec(cur->ino, &r));
        if (r) {
          auto moved = MoveIn(*r, op);
          if (!moved.ok() || *moved) return moved;
        }
      }
    } else {
      leaf.clear();
      std::vector<std::string_view> comps;
      if (SplitPath(op.path, &comps).ok() && !comps.empty()) leaf = std::string(comps.back());
    }
    if (op.move_at_path_only) return false;
    return MoveByRecord(op, leaf);
  }

  Result<bool> MoveByRecord(const ApplyOp& op, const std::string& leaf) {
    const std::string prefix = SegKey(op.old_location.segment);
    std::vector<uint64_t> inos;
    KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kSegFiles, prefix, [&](auto& k, auto&) {
      if (k.size() == prefix.size() + 8) inos.push_back(GetBE64(k.data() + prefix.size()));
      return true;
    }));
    std::vector<InodeRec> found;
    for (uint64_t ino : inos) {
      std::optional<InodeRec> r;
      KVFS_RETURN_IF_ERROR(o.GetRec(ino, &r));
      if (!r || !r->committed || !r->is_reg()) continue;
      bool refs = r->loc == op.old_location;
      if (r->extents) {
        ExtentMap m = *r->extents;
        auto n = m.ReplaceRecord(op.old_location, op.location);
        if (!n.ok()) return n.status();
        refs = *n > 0;
      }
      if (!refs) continue;
      std::optional<DentryVal> d;  // bound: a file some name reaches
      KVFS_RETURN_IF_ERROR(o.GetDentry(r->parent, r->name, &d));
      if (d && d->ino == ino) found.push_back(std::move(*r));
    }
    if (std::any_of(found.begin(), found.end(), [&](const InodeRec& r) { return r.name == leaf; })) {
      std::erase_if(found, [&](const InodeRec& r) { return r.name != leaf; });
    }
    bool any = false;
    for (const InodeRec& r : found) {
      auto moved = MoveIn(r, op);
      if (!moved.ok()) return moved.status();
      any = any || *moved;
    }
    return any;
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
      case ApplyOp::Kind::kExchange: return Exchange(op);
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
      case ApplyOp::Kind::kDirRenameRecord: return DirRenameRecordOp(op);
    }
    return Status::InvalidArgument("unknown apply op");
  }
};

}  // namespace

Result<ApplyResult> IndexDb::ApplyBatch(std::span<const ApplyOp> ops, std::string_view node,
                                        std::string_view position) {
  if (position.empty()) return ApplyBatch(ops, node, std::span<const std::pair<std::string, std::string>>{});
  const std::pair<std::string, std::string> p{std::string(node), std::string(position)};
  return ApplyBatch(ops, node, {&p, 1});
}

Result<ApplyResult> IndexDb::ApplyBatch(std::span<const ApplyOp> ops, std::string_view node,
                                        std::span<const std::pair<std::string, std::string>> positions) {
  if (node.empty()) return Status::InvalidArgument("apply without a node");
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  ApplyResult res;
  const std::string batch_node(node);
  Applier a{o, t, batch_node, res};
  for (const ApplyOp& op : ops) {
    a.op_index = &op - ops.data();
    const std::string& op_node = op.node.empty() ? batch_node : op.node;
    if (a.node != op_node) a.node = op_node;
    auto mark = t.GetMark();
    size_t nchanged = res.changed.size(), nattr = res.attr_changed.size();
    auto r = a.Apply(op);
    if (!r.ok()) {
      if (r.status().IsInvalidArgument()) {  // a malformed entry: skip it, keep the batch
        spdlog::warn("index: skipping journal entry of {} on '{}': {}", op_node, op.path, r.status().ToString());
        t.Rollback(mark);
        res.changed.resize(nchanged);
        res.attr_changed.resize(nattr);
        if (!res.no_target.empty() && res.no_target.back() == a.op_index) res.no_target.pop_back();
        res.skipped++;
        continue;
      }
      return r.status();
    }
    if (*r) res.applied++;
    else res.skipped++;
  }
  for (const auto& [n, position] : positions) t.Put(kMeta, std::string(kMetaAppliedPrefix) + n, position);
  KVFS_RETURN_IF_ERROR(t.Commit());
  return res;
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

}  // namespace kvfs
