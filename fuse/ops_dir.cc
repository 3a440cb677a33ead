// FUSE callbacks of directories: opendir, readdir, readdirplus, releasedir, fsyncdir. Called by libfuse
// worker threads through the op table (fuse/kvfs_fs.cc). Thread safety and invariants:
// fuse/kvfs_fs_impl.h.
#include "fuse/kvfs_fs_impl.h"

namespace kvfs {

namespace {

// Directory offsets: 0 = start, 1 = after ".", 2 = after "..", otherwise the Store cookie of the last
// entry returned (stable: entries created or removed during a listing neither skip nor repeat others).
constexpr off_t kAfterDot = 1, kAfterDotDot = 2;

void DoReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  auto* fs = FS(req);
  std::vector<char> buf(size);
  size_t used = 0;
  bool full = false;
  auto add_plain = [&](const char* name, uint64_t eino, uint32_t mode, off_t next) {
    struct stat st;
    std::memset(&st, 0, sizeof(st));
    st.st_ino = eino;
    st.st_mode = mode;
    size_t n = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, next);
    if (n > size - used) return false;
    used += n;
    return true;
  };
  auto add_dot = [&](const char* name, uint64_t eino, off_t next) {
    if (!plus) return add_plain(name, eino, S_IFDIR, next);
    fuse_entry_param e;
    std::memset(&e, 0, sizeof(e));  // ino 0: the kernel takes no lookup reference for . and ..
    e.attr.st_ino = eino;
    e.attr.st_mode = S_IFDIR;
    size_t n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name, &e, next);
    if (n > size - used) return false;
    used += n;
    return true;
  };
  if (off == 0) {
    if (!add_dot(".", ino, kAfterDot)) full = true;
  }
  if (!full && off <= kAfterDot) {
    uint64_t parent = ino;
    if (ino != kRootIno) {
      auto n = fs->store->GetInode(ino);
      if (n.ok() && n->parent) parent = n->parent;
    }
    if (!add_dot("..", parent, kAfterDotDot)) full = true;
  }
  Status s = Status::OK();
  if (!full) {
    uint64_t after = off <= kAfterDotDot ? 0 : static_cast<uint64_t>(off);
    const uint64_t seq0 = fs->MissSeq();  // invalidations missed from here on: uncached entries (ReplyEntry)
    s = fs->store->ReadDir(ino, after, [&](const DirEntry& d) {
      off_t next = static_cast<off_t>(d.cookie);
      if (!plus) return add_plain(d.name.c_str(), d.ino, d.mode, next);
      fuse_entry_param e;
      std::memset(&e, 0, sizeof(e));
      bool staged = false;
      if (auto in = fs->Get(d.ino)) {
        std::lock_guard<std::mutex> g(in->mu);
        staged = in->primary || !in->writing.empty();
      }
      if (staged) {
        // Being written: attributes from a listing would race with the writer's own i_size updates.
        // nodeid 0 in READDIRPLUS = "name only, no attributes, no lookup reference".
        e.attr.st_ino = d.ino;
        e.attr.st_mode = d.mode;
        size_t n = fuse_add_direntry_plus(req, buf.data() + used, size - used, d.name.c_str(), &e, next);
        if (n > size - used) return false;
        used += n;
        return true;
      }
      auto node = fs->store->GetInode(d.ino);
      if (!node.ok()) return true;  // removed meanwhile: skip it
      Attr a = node->attr;
      double at = (S_ISDIR(a.mode) || S_ISLNK(a.mode) || node->committed) ? fs->opts.attr_timeout_s : 0;
      a.ino = d.ino;
      e.ino = d.ino;
      FillStat(a, &e.attr, node->extents);
      fs->Ref(d.ino, a.mode);  // the kernel will hold a lookup reference for this entry
      bool name_missed = false, attrs_missed = false;
      fs->MissedSince(seq0, d.ino, ino, d.name, &name_missed, &attrs_missed);
      if (attrs_missed) fs->lookups_uncached++;
      e.attr_timeout = attrs_missed ? 0 : at;
      e.entry_timeout = name_missed ? 0 : fs->opts.entry_timeout_s;
      size_t n = fuse_add_direntry_plus(req, buf.data() + used, size - used, d.name.c_str(), &e, next);
      if (n > size - used) {
        fs->Forget(d.ino, 1);  // not sent
        return false;
      }
      used += n;
      return true;
    });
  }
  if (!s.ok() && used == 0) return Reply(req, s);
  fuse_reply_buf(req, buf.data(), used);
}

}  // namespace

// A directory handle counts as an open handle of its inode, so fstat of an open directory that was
// removed (rmdir) answers its last attributes, as on a local fs, not ESTALE (differential seed 267).
void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto* fs = FS(req);
  auto in = fs->Get(ino);
  if (!in) {
    auto n = fs->store->GetInode(ino);
    if (!n.ok()) return Reply(req, n.status(), ErrCtx::kInode);
    in = fs->GetOrMake(ino, n->attr.mode);
    std::lock_guard<std::mutex> g(in->mu);
    in->last_attr = n->attr;
    in->last_attr.ino = ino;
  }
  auto h = std::make_unique<Handle>();
  h->inode = in;
  fs->AddHandle(in);
  fi->fh = reinterpret_cast<uint64_t>(h.release());
  if (fuse_reply_open(req, fi) != 0) ReleaseHandle(fs, H(fi));
}

void OpReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  if (H(fi)) ReleaseHandle(FS(req), H(fi));
  fuse_reply_err(req, 0);
}

void OpFsyncdir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
  FS(req)->DrainDeferred();
  Reply(req, FS(req)->store->Sync());
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  DoReaddir(req, ino, size, off, false);
}

void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  DoReaddir(req, ino, size, off, true);
}

}  // namespace kvfs
