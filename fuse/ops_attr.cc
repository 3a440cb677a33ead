// FUSE callbacks of attributes: getattr, setattr (incl. truncate), access, statfs. Called by libfuse
// worker threads through the op table (fuse/kvfs_fs.cc). Thread safety and invariants:
// fuse/kvfs_fs_impl.h.
#include "fuse/kvfs_fs_impl.h"

namespace kvfs {

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto* fs = FS(req);
  Attr a;
  double timeout = 0;
  Handle* h = fi ? H(fi) : nullptr;
  // fstat-like getattr through a handle: that version's own view (a reader's, unless the file was
  // rewritten in place since it opened: then the inode's, as its reads, OpRead).
  if (h && h->version && (h->writable || h->inode->rewrites.load() == h->rewrites)) {
    KvfsFs::Impl::VersionAttr(*h->version, &a);
    a.ino = ino;
    struct stat st;
    FillStat(a, &st);
    return (void)fuse_reply_attr(req, &st, 0);
  }
  ExtentMapRef ext;
  Status s = fs->GetAttr(ino, &a, &timeout, &ext);
  if (!s.ok()) return Reply(req, s, ErrCtx::kInode);
  struct stat st;
  FillStat(a, &st, ext);
  fuse_reply_attr(req, &st, timeout);
}

void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = fi ? H(fi) : nullptr;
  auto in = h ? h->inode : fs->Get(ino);
  int64_t now = NowNs();
  Attr na;
  uint32_t mask = 0;
  uint32_t type = 0;
  if (!in) {
    auto n = fs->store->GetInode(ino);
    if (!n.ok()) return Reply(req, n.status(), ErrCtx::kInode);
    in = fs->GetOrMake(ino, n->attr.mode);
  }
  type = in->type;
  if (to_set & FUSE_SET_ATTR_MODE) {
    na.mode = (attr->st_mode & 07777) | type;
    mask |= kSetMode;
  }
  if (to_set & FUSE_SET_ATTR_UID) {
    na.uid = attr->st_uid;
    mask |= kSetUid;
  }
  if (to_set & FUSE_SET_ATTR_GID) {
    na.gid = attr->st_gid;
    mask |= kSetGid;
  }
  if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
    na.atime_ns = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? now : TsNs(attr->st_atim);
    mask |= kSetAtime;
  }
  if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
    na.mtime_ns = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : TsNs(attr->st_mtim);
    mask |= kSetMtime;
  }
  na.ctime_ns = (to_set & FUSE_SET_ATTR_CTIME) ? TsNs(attr->st_ctim) : now;
  mask |= kSetCtime;

  if (to_set & FUSE_SET_ATTR_SIZE) {
    if (S_ISDIR(type)) return (void)fuse_reply_err(req, EISDIR);
    if (!S_ISREG(type)) return (void)fuse_reply_err(req, EINVAL);
    uint64_t size = static_cast<uint64_t>(attr->st_size);
    std::shared_ptr<Version> v = (h && h->writable) ? h->version : nullptr;
    if (v) {
      Status s = fs->Truncate(*v, size, now);
      if (!s.ok()) return Reply(req, s);
    } else {
      // truncate(2) by name: join the version being written (even one whose last writer is committing
      // it right now, so the new size cannot be lost), else a new version; the last writer commits.
      const fuse_ctx* ctx = fuse_req_ctx(req);
      auto r = fs->AcquireWritable(in, /*trunc=*/false, ctx, /*need_content=*/size != 0, fs->TakeRetry(ctx));
      if (!r.ok()) return fs->ReplyOpenError(req, r.status());  // ESTALE: truncate(2) retries the path
      auto nv = *r;
      Status ts = fs->Truncate(*nv, size, now);
      Status s = fs->ReleaseWritable(in, nv);
      if (!ts.ok()) return Reply(req, ts);
      if (!s.ok()) return Reply(req, s);
    }
  }
  // Other attributes: into every staged version (so a later commit carries them) and into the Store
  // (journaled SETATTR for committed inodes).
  uint32_t amask = mask & ~static_cast<uint32_t>(kSetSize);
  {
    std::lock_guard<std::mutex> g(in->mu);
    for (auto& v : in->writing) {
      std::unique_lock<std::shared_mutex> vg(v->mu);
      if (amask & kSetMode) v->attr.mode = na.mode;
      if (amask & kSetUid) v->attr.uid = na.uid;
      if (amask & kSetGid) v->attr.gid = na.gid;
      if (amask & kSetAtime) v->attr.atime_ns = na.atime_ns;
      if (amask & kSetMtime) v->attr.mtime_ns = na.mtime_ns;
      v->attr.ctime_ns = na.ctime_ns;
      v->attr_gen++;
    }
  }
  if (amask & ~static_cast<uint32_t>(kSetCtime)) {
    auto r = fs->store->SetAttr(ino, na, amask);
    if (!r.ok() && !(r.status().IsNotFound() && fs->IsUnlinked(*in))) return Reply(req, r.status());
  }
  Attr a;
  double timeout = 0;
  if (h && h->version) {
    KvfsFs::Impl::VersionAttr(*h->version, &a);
    a.ino = ino;
  } else {
    Status s = fs->GetAttr(ino, &a, &timeout);
    if (!s.ok()) return Reply(req, s, ErrCtx::kInode);
  }
  struct stat st;
  FillStat(a, &st);
  fuse_reply_attr(req, &st, timeout);
}

void OpAccess(fuse_req_t req, fuse_ino_t ino, int mask) {
  auto* fs = FS(req);
  Attr a;
  double t;
  Status s = fs->GetAttr(ino, &a, &t);
  if (!s.ok()) return Reply(req, s, ErrCtx::kInode);
  if (mask == F_OK) return (void)fuse_reply_err(req, 0);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx->uid == 0) {
    // root: X needs some x bit on regular files.
    bool ok = !(mask & X_OK) || S_ISDIR(a.mode) || (a.mode & 0111);
    return (void)fuse_reply_err(req, ok ? 0 : EACCES);
  }
  unsigned bits;
  if (ctx->uid == a.uid) bits = (a.mode >> 6) & 7;
  else if (ctx->gid == a.gid) bits = (a.mode >> 3) & 7;
  else bits = a.mode & 7;
  bool ok = ((mask & R_OK) == 0 || (bits & 4)) && ((mask & W_OK) == 0 || (bits & 2)) &&
            ((mask & X_OK) == 0 || (bits & 1));
  fuse_reply_err(req, ok ? 0 : EACCES);
}

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  auto* fs = FS(req);
  uint64_t live = 0, files = 0, total = 0, avail = 0;
  Status s = fs->store->StatFs(&live, &files, &total, &avail);
  if (!s.ok()) return Reply(req, s);
  struct statvfs st;
  std::memset(&st, 0, sizeof(st));
  // f_bsize = f_frsize = 4096: LMCache aligns O_DIRECT buffers to statvfs().f_bsize.
  st.f_bsize = 4096;
  st.f_frsize = 4096;
  uint64_t live_blocks = (live + 4095) / 4096;
  uint64_t avail_blocks = avail / 4096;
  st.f_blocks = live_blocks + avail_blocks;  // used = live logical bytes (drops right after unlink)
  // Nothing left to write (backing full of dead bytes, or capacity reached): df shows the real size,
  // 100% used, never 0 blocks.
  if (avail_blocks == 0) st.f_blocks = std::max<uint64_t>(st.f_blocks, total / 4096);
  st.f_bfree = avail_blocks;
  st.f_bavail = avail_blocks;
  st.f_ffree = 1ull << 32;
  st.f_favail = st.f_ffree;
  st.f_files = files + st.f_ffree;
  st.f_namemax = 255;
  fuse_reply_statfs(req, &st);
}

}  // namespace kvfs
