// IndexDb, namespace by inode: lookups and reads (Lookup, GetInode, ReadLink, ReadDir, xattrs,
// FullPath, ResolvePath), the local writes that mirror FUSE operations (Mkdir, Rmdir, CreateFile,
// Symlink, Unlink, Rename, SetAttr, CommitFile, Renumber, Set/RemoveXattr) and tombstones
// (GetTombstone, PruneTombstones).
// Owns the CFs dentries, dircookies, inodes, xattrs, staged and tombstones (layout: index_keys.h);
// journal application by path writes the same CFs (index_apply.cc).
// Callers: Store (engine/) for the FUSE layer; fsck and the tests.
// Thread-safety: writes take Impl::mu and commit one Txn (one atomic WriteBatch); reads take no lock
// (multi-key reads use a snapshot, ReadDir an iterator).
// Invariants: rules of index_db.h (cookies, stamps, tombstones, staged files, inode numbers); every
// record change goes through Ops (index_txn.h) so counters and segment membership stay exact.
#include "index/index_db.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <sys/xattr.h>

#include <mutex>

#include "index/index_keys.h"
#include "index/journal_format.h"
#include "index/index_txn.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

namespace kvfs {

using namespace index_internal;

// ---- reads ----
Result<Node> IndexDb::Lookup(uint64_t parent, std::string_view name) {
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kDentries, DentryKey(parent, name), &v, &found));
  if (!found) return Status::NotFound(std::string(name));
  DentryVal d;
  if (!DecodeDentry(v, &d)) return Status::Corruption("bad dentry");
  auto n = GetInode(d.ino);
  if (n.ok() || !n.status().IsNotFound()) return n;
  // The inode went away after the dentry was read (a rename over the name or an unlink raced this
  // lookup): read the pair again from one snapshot, so the answer is the name's state at one instant.
  const rocksdb::Snapshot* snap = impl_->db->GetSnapshot();
  Status s = impl_->DbGet(kDentries, DentryKey(parent, name), &v, &found, snap);
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
  InodeRec r;
  uint64_t epoch;
  if (impl_->CachedInode(ino, &r, &epoch)) return NodeOf(r);
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kInodes, InoKey(ino), &v, &found));
  if (!found) return Status::NotFound("inode " + std::to_string(ino));
  if (!DecodeInode(v, &r)) return Status::Corruption("bad inode record");
  impl_->CacheInode(ino, r, epoch);
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
  if (target.empty() || target.size() > 4095) return Status::InvalidArgument("bad symlink target");
  return MakeIndexOnly(parent, name, S_IFLNK | 0777, 0, target, uid, gid, stamp);
}

Result<Node> IndexDb::Mknod(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev, uint32_t uid,
                            uint32_t gid, uint64_t stamp) {
  if (!IsSpecialFileMode(mode)) return Status::InvalidArgument("mknod of a type that is not a special file");
  return MakeIndexOnly(parent, name, mode, IsDeviceMode(mode) ? rdev : 0, {}, uid, gid, stamp);
}

Result<Node> IndexDb::MakeIndexOnly(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev,
                                    std::string_view target, uint32_t uid, uint32_t gid, uint64_t stamp) {
  KVFS_RETURN_IF_ERROR(ValidateName(name));
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  auto p = o.MustDir(parent);
  if (!p.ok()) return p.status();
  std::optional<DentryVal> d;
  KVFS_RETURN_IF_ERROR(o.GetDentry(parent, name, &d));
  if (d) return Status::Exists(std::string(name));
  auto r = o.NewRec((mode & S_IFMT) | (mode & 07777), parent, name);
  if (!r.ok()) return r.status();
  r->attr.uid = uid, r->attr.gid = gid;
  r->attr.size = target.size();
  r->attr.rdev = rdev;
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
    KVFS_RETURN_IF_ERROR(o.RaiseTomb(JoinPath(*pp, name), stamp, impl_->node, &*d));
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
    KVFS_RETURN_IF_ERROR(o.RaiseTomb(JoinPath(*pp, name), stamp, impl_->node, &*sd));
    if (src_dir) {
      // The record of this directory rename (index_keys.h dirrenames; exported by our snapshots).
      auto np_path = o.PathOf(new_parent);
      if (!np_path.ok()) return np_path.status();
      DirRenameRecord rec{JoinPath(*pp, name), JoinPath(*np_path, new_name), stamp, impl_->node};
      t.Put(kDirRenames, DirRenameKey(stamp, impl_->node), EncodeDirRename(rec));
    }
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

Result<std::pair<Node, Node>> IndexDb::Exchange(uint64_t parent, std::string_view name, uint64_t new_parent,
                                                std::string_view new_name, uint64_t stamp) {
  KVFS_RETURN_IF_ERROR(ValidateName(name));
  KVFS_RETURN_IF_ERROR(ValidateName(new_name));
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  std::optional<DentryVal> da, db;
  KVFS_RETURN_IF_ERROR(o.GetDentry(parent, name, &da));
  if (!da) return Status::NotFound(std::string(name));
  auto np = o.MustDir(new_parent);
  if (!np.ok()) return np.status();
  KVFS_RETURN_IF_ERROR(o.GetDentry(new_parent, new_name, &db));
  if (!db) return Status::NotFound(std::string(new_name));
  auto ra = o.MustRec(da->ino);
  if (!ra.ok()) return ra.status();
  auto rb = o.MustRec(db->ino);
  if (!rb.ok()) return rb.status();
  if (da->ino == db->ino) return std::make_pair(NodeOf(*ra), NodeOf(*rb));  // one inode: nothing to do
  // Neither directory may end up inside itself.
  if (ra->is_dir() && parent != new_parent) {
    auto under = o.IsUnder(new_parent, da->ino);
    if (!under.ok()) return under.status();
    if (*under) return Status::InvalidArgument("exchange would move a directory into its own subtree");
  }
  if (rb->is_dir() && parent != new_parent) {
    auto under = o.IsUnder(parent, db->ino);
    if (!under.ok()) return under.status();
    if (*under) return Status::InvalidArgument("exchange would move a directory into its own subtree");
  }
  const bool with_dir = ra->is_dir() || rb->is_dir();
  if (with_dir && stamp) {
    // The record of this exchange (index_keys.h dirrenames; exported by our snapshots): both ways at
    // once. With a staged non-directory on the other side (not in the journal yet: the caller journals
    // the directory's RENAME to that name) it is the record of that rename.
    auto pp = o.PathOf(parent);
    if (!pp.ok()) return pp.status();
    auto np_path = o.PathOf(new_parent);
    if (!np_path.ok()) return np_path.status();
    const std::string a_path = JoinPath(*pp, name), b_path = JoinPath(*np_path, new_name);
    DirRenameRecord rec{a_path, b_path, stamp, impl_->node, true};
    if (!ra->is_dir() && !ra->committed) rec = DirRenameRecord{b_path, a_path, stamp, impl_->node, false};
    if (!rb->is_dir() && !rb->committed) rec = DirRenameRecord{a_path, b_path, stamp, impl_->node, false};
    t.Put(kDirRenames, DirRenameKey(stamp, impl_->node), EncodeDirRename(rec));
  }
  // A dentry journaled by this exchange takes its stamp; an unjournaled one (stamp 0) keeps the other's.
  // With a directory on a side every name keeps its binding: the exchange is its record (above).
  KVFS_RETURN_IF_ERROR(o.SwapDentries(parent, name, *da, *ra, new_parent, new_name, *db, *rb, stamp,
                                      stamp ? std::string_view(impl_->node) : std::string_view(), with_dir));
  KVFS_RETURN_IF_ERROR(t.Commit());
  auto a = o.MustRec(da->ino);
  if (!a.ok()) return a.status();
  auto b = o.MustRec(db->ino);
  if (!b.ok()) return b.status();
  return std::make_pair(NodeOf(*a), NodeOf(*b));
}

Result<Attr> IndexDb::SetAttr(uint64_t ino, const Attr& attr, uint32_t mask, uint64_t stamp) {
  std::lock_guard<std::mutex> l(impl_->mu);
  Txn t(impl_.get());
  Ops o{impl_.get(), t};
  auto r = o.MustRec(ino);
  if (!r.ok()) return r.status();
  InodeRec n = *r;
  if ((mask & kSetAtimeOfRead) && !(stamp > r->stamp)) {
    return Status::Exists("changed since the read");  // kSetAtimeOfRead: see inode.h
  }
  ApplyAttrMask(&n.attr, attr, mask);
  ResizeExtents(&n);
  if (stamp && stamp > n.stamp) n.stamp = stamp, n.stamp_node = impl_->node;
  KVFS_RETURN_IF_ERROR(o.UpdateRec(*r, n));
  KVFS_RETURN_IF_ERROR(t.Commit());
  return n.attr;
}

Result<Node> IndexDb::CommitFile(uint64_t ino, const Location& loc, const Attr& attr, uint64_t stamp,
                                 std::string_view node, ExtentMapRef extents, CommitBase* base) {
  if (base) *base = CommitBase{};
  if (extents && (!loc.empty() || extents->size() != attr.size)) {
    return Status::InvalidArgument("commit of an extent map with a location or another size");
  }
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
  n.extents = std::move(extents);
  n.attr.size = attr.size;
  n.attr.mode = S_IFREG | (attr.mode & 07777);
  n.attr.uid = attr.uid, n.attr.gid = attr.gid;
  n.attr.atime_ns = attr.atime_ns, n.attr.mtime_ns = attr.mtime_ns, n.attr.ctime_ns = attr.ctime_ns;
  n.committed = true;
  n.stamp = stamp, n.stamp_node = nd;
  std::optional<DentryVal> d;
  KVFS_RETURN_IF_ERROR(o.GetDentry(r->parent, r->name, &d));
  if (base && d && d->node == nd && d->stamp != 0) {
    std::optional<InodeRec> b;
    if (d->ino == ino) b = *r;
    else KVFS_RETURN_IF_ERROR(o.GetRec(d->ino, &b));
    if (b && DeltaBaseOf(*b, &base->map)) base->found = true, base->stamp = d->stamp;
  }
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
  std::vector<std::pair<std::string, std::string>> xstamps;  // (name, stamp record)
  KVFS_RETURN_IF_ERROR(t.ForEachPrefix(kXattrStamps, prefix, [&](auto& k, auto& v) {
    xstamps.emplace_back(k.substr(prefix.size()), v);
    return true;
  }));
  InodeRec n = *r;
  n.attr.ino = *nino;
  KVFS_RETURN_IF_ERROR(o.PutRec(&*r, nullptr));  // old number: record, xattrs, segment membership
  KVFS_RETURN_IF_ERROR(o.PutRec(nullptr, &n));
  for (auto& [name, value] : xattrs) t.Put(kXattrs, XattrKey(*nino, name), std::move(value));
  for (auto& [name, st] : xstamps) t.Put(kXattrStamps, XattrKey(*nino, name), std::move(st));
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
  if (stamp) {
    t.Put(kXattrStamps, XattrKey(ino, name), EncodeXattrStamp({stamp, impl_->node, false}));
    t.RaiseHlc(stamp);
  }
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
  if (stamp) {
    t.Put(kXattrStamps, XattrKey(ino, name), EncodeXattrStamp({stamp, impl_->node, true}));
    t.RaiseHlc(stamp);
  }
  return t.Commit();
}

// ---- tombstones ----
Result<Tombstone> IndexDb::GetTombstone(std::string_view path) {
  std::string v;
  bool found;
  KVFS_RETURN_IF_ERROR(impl_->DbGet(kTombstones, std::string(path), &v, &found));
  if (!found) return Status::NotFound("no tombstone for " + std::string(path));
  Tombstone tb;
  if (!DecodeTomb(v, &tb)) return Status::Corruption("bad tombstone");
  return tb;
}

Result<std::vector<DirRenameRecord>> IndexDb::ListDirRenames(std::string_view node) {
  std::vector<DirRenameRecord> out;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->H(kDirRenames)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    DirRenameRecord r;
    if (!DecodeDirRename(std::string_view(it->key().data(), it->key().size()),
                         std::string_view(it->value().data(), it->value().size()), &r)) {
      return Status::Corruption("bad directory rename record");
    }
    if (node.empty() || r.node == node) out.push_back(std::move(r));
  }
  KVFS_RETURN_IF_ERROR(ToStatus(it->status(), "list directory renames"));
  return out;
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

}  // namespace kvfs
