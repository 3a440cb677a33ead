// IndexDb, snapshots / rebuild support: consistent read views (NewView), ExportLive (the walk a
// checkpoint writes, index/snapshot.h) and DumpByPath (content by path, to compare two indexes).
// Reads every CF (layout: index_keys.h); writes nothing.
// Callers: the Store (engine/store_checkpoint.cc: NewView), its checkpoint writer (engine/checkpoint.cc:
// ExportLive), fsck and kvfs-fsck (DumpByPath), the tests.
// Thread-safety: no lock; each walk reads one RocksDB snapshot, so it sees one consistent state.
// Invariants: staged files are never exported or dumped; a directory comes before anything under it.
#include "index/index_db.h"

#include <rocksdb/db.h>

#include <algorithm>
#include <vector>

#include "index/index_keys.h"
#include "index/index_txn.h"

namespace kvfs {

using namespace index_internal;

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
        if (r.is_reg()) e.location = r.loc, e.extents = r.extents, e.size = r.attr.size;
        e.symlink = r.symlink;
        e.rdev = r.attr.rdev;
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

// ---- checkpoints ----

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
  // The inodes with a per-name xattr stamp (a set or remove journaled after the file's binding): one
  // pass over the stamps, in inode order (big-endian keys), 8 bytes per inode (8 MB for a million).
  std::vector<uint64_t> xattr_stamped;
  {
    std::unique_ptr<rocksdb::Iterator> sit(db->NewIterator(ro, impl_->H(kXattrStamps)));
    for (sit->SeekToFirst(); sit->Valid(); sit->Next()) {
      if (sit->key().size() < 8) continue;
      const uint64_t ino = GetBE64(sit->key().data());
      if (xattr_stamped.empty() || xattr_stamped.back() != ino) xattr_stamped.push_back(ino);
    }
    KVFS_RETURN_IF_ERROR(ToStatus(sit->status(), "export xattr stamps"));
  }
  // The xattr names of ino with a stamp record (only `node`'s when only_node): set (value) or removed.
  auto stamped_xattrs = [&](uint64_t ino, bool only_node, ExportItem* item) -> Status {
    if (!std::binary_search(xattr_stamped.begin(), xattr_stamped.end(), ino)) return Status::OK();
    std::unique_ptr<rocksdb::Iterator> sit(db->NewIterator(ro, impl_->H(kXattrStamps)));
    const std::string xp = InoKey(ino);
    for (sit->Seek(xp); sit->Valid() && sit->key().starts_with(xp); sit->Next()) {
      XattrStamp x;
      if (!DecodeXattrStamp(std::string_view(sit->value().data(), sit->value().size()), &x)) {
        return Status::Corruption("bad xattr stamp record");
      }
      if (only_node && x.node != node) continue;
      ExportItem::XattrChange c;
      c.name = sit->key().ToString().substr(8);
      c.stamp = x.stamp;
      c.removed = x.removed;
      if (!c.removed) {
        auto s = db->Get(ro, impl_->H(kXattrs), sit->key(), &c.value);
        if (s.IsNotFound()) c.removed = true;
        else if (!s.ok()) return ToStatus(s, "export xattr");
      }
      item->xattr_changes.push_back(std::move(c));
    }
    return ToStatus(sit->status(), "export xattr stamps");
  };
  // A file bound by another node: what `node` changed of it last (nothing: false).
  auto peer_file_changes = [&](uint64_t ino, const InodeRec& r, ExportItem* item) -> Result<bool> {
    item->kind = ExportItem::Kind::kPeerFileChanges;
    item->setattr = r.stamp != 0 && r.stamp_node == node;
    if (item->setattr) item->attr_stamp = r.stamp;
    KVFS_RETURN_IF_ERROR(stamped_xattrs(ino, true, item));
    return item->setattr || !item->xattr_changes.empty();
  };
  // The records of directory renames first (a rebuild collects them before it applies anything:
  // index/replay.h), in (stamp, node) order: `node`'s own, and its peers' that it applied (its names
  // already reflect them, so a rebuild does not redirect its entries by them).
  {
    std::unique_ptr<rocksdb::Iterator> rit(db->NewIterator(ro, impl_->H(kDirRenames)));
    for (rit->SeekToFirst(); rit->Valid(); rit->Next()) {
      DirRenameRecord r;
      if (!DecodeDirRename(std::string_view(rit->key().data(), rit->key().size()),
                           std::string_view(rit->value().data(), rit->value().size()), &r)) {
        return Status::Corruption("bad directory rename record");
      }
      ExportItem item;
      item.kind = ExportItem::Kind::kDirRename;
      item.path = std::move(r.from);
      item.to = std::move(r.to);
      item.stamp = r.stamp;
      item.record_node = std::move(r.node);
      item.exchange = r.exchange;
      KVFS_RETURN_IF_ERROR(fn(item));
    }
    KVFS_RETURN_IF_ERROR(ToStatus(rit->status(), "export directory renames"));
  }
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
        // Directories carry no stamps of their own (MKDIR only creates): their last attribute change,
        // if journaled, goes with its stamp (every node exports every directory).
        item.setattr = r.stamp != 0;
        item.attr_stamp = r.stamp;
      } else {
        std::string dv;
        s = db->Get(ro, impl_->H(kDentries), DentryKey(dir, name), &dv);
        if (!s.ok()) return ToStatus(s, "export: dentry " + item.path);
        DentryVal d;
        if (!DecodeDentry(dv, &d)) return Status::Corruption("bad dentry");
        if (d.stamp == 0) continue;
        if (d.node != node) {
          auto changed = peer_file_changes(ino, r, &item);
          if (!changed.ok()) return changed.status();
          if (*changed) KVFS_RETURN_IF_ERROR(fn(item));
          continue;
        }
        // A symlink or a special file (its mode and rdev in attr): both index-only, journaled as SYMLINK.
        item.kind = r.is_reg() ? ExportItem::Kind::kFile : ExportItem::Kind::kSymlink;
        item.stamp = d.stamp;
        // Attributes changed after the binding (a SETATTR of this node or a peer's): that change's stamp,
        // so an older change in another node's journal does not win over it in a rebuild.
        item.setattr = r.stamp > d.stamp;
        item.attr_stamp = r.stamp;
        item.location = r.loc;
        item.extents = r.extents;
        item.symlink = r.symlink;
      }
      KVFS_RETURN_IF_ERROR(xattrs(ino, &item));
      KVFS_RETURN_IF_ERROR(stamped_xattrs(ino, false, &item));
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
