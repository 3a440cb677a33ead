// FUSE callbacks of the namespace: lookup, forget, readlink, mkdir, rmdir, unlink, symlink, rename, link,
// mknod, create. Called by libfuse worker threads through the op table (fuse/kvfs_fs.cc).
// Thread safety and invariants: fuse/kvfs_fs_impl.h.
#include "fuse/kvfs_fs_impl.h"

namespace kvfs {

gid_t NewEntryGid(KvfsFs::Impl* fs, fuse_ino_t parent, const fuse_ctx* ctx, mode_t* mode) {
  auto p = fs->store->GetInode(parent);
  if (!p.ok() || !(p->attr.mode & S_ISGID)) return ctx->gid;
  if (S_ISDIR(*mode)) *mode |= S_ISGID;
  return p->attr.gid;
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto* fs = FS(req);
  if (NameTooLong(name)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  // A staged file found here may be committed (its version dropped) before the reply: look again then
  // (ReplyEntry fresh_only). The last attempt replies whatever it finds: a staged node without a version
  // is a file being created right now (CreateFile before its open), empty.
  // Invalidations the kernel missed from here on make this reply uncacheable (ReplyEntry, Impl::misses).
  const uint64_t seq0 = fs->MissSeq();
  for (int attempt = 0;; ++attempt) {
    auto r = fs->store->Lookup(parent, name);
    if (!r.ok()) {
      if (r.status().IsNotFound()) {
        fs->store->RequestPeerRefresh();  // a peer may have just written it (rate-limited, never blocks)
        return fs->ReplyNegative(req);
      }
      return Reply(req, r.status());
    }
    if (S_ISREG(r->attr.mode) && !r->committed && fs->opts.test_lookup_delay_ms > 0 && attempt == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(fs->opts.test_lookup_delay_ms));  // TEST ONLY
    }
    uint32_t delay_ms = 0;  // TEST ONLY
    if (fs->opts.test_lookup_reply_delay_ms > 0 && attempt == 0 && name == fs->opts.test_lookup_reply_delay_name) {
      delay_ms = fs->opts.test_lookup_reply_delay_ms;
      if (!fs->opts.test_lookup_reply_delay_after_ref) {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        delay_ms = 0;
      }
    }
    if (S_ISREG(r->attr.mode)) fs->RetryLookup(fuse_req_ctx(req), parent, name, r->attr.ino);
    if (fs->ReplyEntry(req, *r, /*fresh_only=*/attempt < 3, seq0, delay_ms)) return;
  }
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  FS(req)->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  auto* fs = FS(req);
  for (size_t i = 0; i < count; ++i) fs->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  auto r = FS(req)->store->ReadLink(ino);
  if (!r.ok()) return Reply(req, r.status(), ErrCtx::kInode);
  fuse_reply_readlink(req, r->c_str());
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  auto* fs = FS(req);
  if (NameTooLong(name)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  mode = (mode & 07777) | S_IFDIR;
  const gid_t gid = NewEntryGid(fs, parent, ctx, &mode);
  auto r = fs->store->Mkdir(parent, name, mode, ctx->uid, gid);
  if (!r.ok()) return Reply(req, r.status());
  fs->ReplyEntry(req, *r);
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Reply(req, FS(req)->store->Rmdir(parent, name));
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto* fs = FS(req);
  uint64_t ino = 0;
  const uint64_t ticket = fs->BeginUnlink();  // until the inode is marked (OpenHandle)
  Status s = fs->store->Unlink(parent, name, &ino);
  fs->TestUnlinkMarkDelay();
  if (s.ok()) fs->MarkUnlinked(ino, parent, name);
  fs->EndUnlink(ticket);
  Reply(req, s);
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  auto* fs = FS(req);
  if (NameTooLong(name)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  if (std::strlen(link) >= 4096) return (void)fuse_reply_err(req, ENAMETOOLONG);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  mode_t lmode = S_IFLNK;
  auto r = fs->store->Symlink(parent, name, link, ctx->uid, NewEntryGid(fs, parent, ctx, &lmode));
  if (!r.ok()) return Reply(req, r.status());
  fs->ReplyEntry(req, *r);
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
              unsigned flags) {
  auto* fs = FS(req);
  if (flags & ~static_cast<unsigned>(RENAME_NOREPLACE | RENAME_EXCHANGE)) return (void)fuse_reply_err(req, EINVAL);
  if (NameTooLong(newname)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  // RENAME_EXCHANGE swaps any two names (Store::Rename journals two non-directories' new content as
  // bindings, an exchange with a directory as an EXCHANGE entry and its record: docs/semantics.md §2).
  // Both inodes keep their numbers and their names change in the kernel's dcache by the kernel itself:
  // nothing to invalidate.
  uint64_t replaced = 0;
  if (fs->RetryPending(newparent, newname)) {
    // A writer's open of the destination is being retried (it got ESTALE): the file it will find
    // there must have no page-cache readers (Impl::retrying).
    auto src = fs->store->Lookup(parent, name);
    if (src.ok() && S_ISREG(src->attr.mode)) fs->AddFresh(src->attr.ino, /*virgin=*/false);
  }
  const uint64_t ticket = fs->BeginUnlink();  // until the inode is marked (OpenHandle)
  Status s = fs->store->Rename(parent, name, newparent, newname, flags, &replaced);
  fs->TestUnlinkMarkDelay();
  // The destination's old inode lost its name: its staged versions are discarded, its readers go on.
  if (s.ok() && replaced != 0) fs->MarkUnlinked(replaced, newparent, newname);
  fs->EndUnlink(ticket);
  Reply(req, s);
}

// link(2) (docs/semantics.md §2 "link"): the new name is a second committed file over the SAME record
// (Store::Link: one journal PUT, no data copy). Its content is what a reader opening `ino` now would
// read: a visible staged version (written and closed, commit still deferred, or even still open) is
// flushed to its record first (FlushLocked: nothing is written if its bytes are already the record), so
// the LMCache publish (O_EXCL temp, write, close, link, unlink temp) journals one PUT under the final
// name and the temp's own commit is discarded by its unlink. Directories -> EPERM (as Linux); a symlink
// gets a new symlink with the same target, a special file a new one with the same mode and rdev.
void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  auto* fs = FS(req);
  if (NameTooLong(newname)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  auto n = fs->store->GetInode(ino);
  if (!n.ok()) return Reply(req, n.status(), ErrCtx::kInode);
  if (S_ISDIR(n->attr.mode)) return (void)fuse_reply_err(req, EPERM);
  if (S_ISLNK(n->attr.mode)) {
    auto target = fs->store->ReadLink(ino);
    if (!target.ok()) return Reply(req, target.status());
    auto r = fs->store->Symlink(newparent, newname, *target, n->attr.uid, n->attr.gid);
    if (!r.ok()) return Reply(req, r.status());
    return (void)fs->ReplyEntry(req, *r);
  }
  if (IsSpecialFileMode(n->attr.mode)) {  // a new node of the same type, mode and rdev
    auto r = fs->store->Mknod(newparent, newname, n->attr.mode, n->attr.rdev, n->attr.uid, n->attr.gid);
    if (!r.ok()) return Reply(req, r.status());
    return (void)fs->ReplyEntry(req, *r);
  }
  if (!S_ISREG(n->attr.mode)) return (void)fuse_reply_err(req, EPERM);
  std::shared_ptr<Inode> in = fs->Get(ino);
  std::shared_ptr<Version> v;
  if (in) {
    std::lock_guard<std::mutex> g(in->mu);
    if (in->unlinked) return (void)fuse_reply_err(req, ENOENT);
    v = in->primary;
  }
  Result<Node> r = Status::OK();
  if (v) {
    std::lock_guard<std::mutex> io(v->io_mu);  // the record stays this version's (pinned) until linked
    Status s = fs->FlushLocked(*in, *v);
    if (!s.ok()) return Reply(req, s);
    if (fs->IsUnlinked(*in)) return (void)fuse_reply_err(req, ENOENT);
    Attr a;
    {
      std::shared_lock<std::shared_mutex> vg(v->mu);
      a = v->attr;
      a.size = v->data.size();
    }
    const Location loc = a.size == 0 ? Location{} : v->record;
    const ExtentMapRef ext = a.size == 0 ? ExtentMapRef{} : v->record_ext;  // an extent-form FLUSH
    a.ino = ino;
    r = fs->store->Link(ino, &loc, &a, newparent, newname, &ext);
  } else {
    r = fs->store->Link(ino, nullptr, nullptr, newparent, newname);
  }
  if (!r.ok()) return Reply(req, r.status());
  fs->ReplyEntry(req, *r);
}

// mknod(2): a regular file is created empty and committed at once; a FIFO, socket or character / block
// device is an index-only node (Store::Mknod: mode and rdev kept, journaled at once). The kernel serves
// the opens of a FIFO (pipe) and of a device (nodev mounts refuse them), never kvfs.
void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  auto* fs = FS(req);
  if (NameTooLong(name)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (IsSpecialFileMode(mode)) {
    const gid_t gid = NewEntryGid(fs, parent, ctx, &mode);
    auto r = fs->store->Mknod(parent, name, mode, rdev, ctx->uid, gid);
    if (!r.ok()) return Reply(req, r.status());
    return (void)fs->ReplyEntry(req, *r);
  }
  if (!S_ISREG(mode) && (mode & S_IFMT) != 0) return (void)fuse_reply_err(req, EINVAL);
  mode = (mode & 07777) | S_IFREG;
  const gid_t gid = NewEntryGid(fs, parent, ctx, &mode);
  auto r = fs->store->CreateFile(parent, name, mode, ctx->uid, gid, true);
  if (!r.ok()) return Reply(req, r.status());
  auto in = fs->GetOrMake(r->attr.ino, S_IFREG);
  auto v = fs->AcquireWritable(in, true, ctx);  // an empty version, committed at once
  if (!v.ok()) return Reply(req, v.status());
  Status s = fs->ReleaseWritable(in, *v);
  if (!s.ok()) return Reply(req, s);
  auto n = fs->store->GetInode(r->attr.ino);
  if (!n.ok()) return Reply(req, n.status());
  fs->ReplyEntry(req, *n);
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  auto* fs = FS(req);
  if (NameTooLong(name)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  const auto retry_ticket = fs->TakeRetry(ctx);  // the name stays pending until this call is over
  const bool retry = retry_ticket;
  bool excl = fi->flags & O_EXCL;
  mode = (mode & 07777) | S_IFREG;
  const gid_t gid = NewEntryGid(fs, parent, ctx, &mode);
  auto r = fs->store->CreateFile(parent, name, mode, ctx->uid, gid, excl);
  if (!r.ok()) return Reply(req, r.status());
  const Node& n = *r;
  if (S_ISDIR(n.attr.mode)) return (void)fuse_reply_err(req, EISDIR);
  // A writer's open of this name is being retried: keep page-cache readers off what it will find.
  if (S_ISREG(n.attr.mode) && fs->RetryPending(parent, name, &retry_ticket)) fs->AddFresh(n.attr.ino, /*virgin=*/false);
  if (!S_ISREG(n.attr.mode)) return (void)fuse_reply_err(req, EEXIST);
  // A new staged file starts an empty version; an existing one (a lost race, or the kernel had no
  // dentry) is opened like open(2) with these flags.
  auto in = fs->Ref(n.attr.ino, n.attr.mode);
  Status s = OpenHandle(fs, req, in, fi, false, retry);
  if (!s.ok()) {
    fs->Forget(n.attr.ino, 1);
    return fs->ReplyOpenError(req, s, KvfsFs::Impl::OpensForWrite(fi->flags));
  }
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = n.attr.ino;
  Attr a = n.attr;
  Handle* h = H(fi);
  if (h->version) KvfsFs::Impl::VersionAttr(*h->version, &a);
  a.ino = n.attr.ino;
  FillStat(a, &e.attr);
  {
    // One visible version written only through this kernel: it may keep these attributes (its WRITEs
    // mark size and mtime stale themselves), so the commit costs the next access no GETATTR.
    std::lock_guard<std::mutex> g(in->mu);
    e.attr_timeout = h->version && h->version == in->primary && KvfsFs::Impl::StagedCacheable(*in)
                         ? fs->opts.attr_timeout_s
                         : 0;
  }
  e.entry_timeout = fs->opts.entry_timeout_s;
  if (fuse_reply_create(req, &e, fi) != 0) {
    ReleaseHandle(fs, h);
    fs->Forget(n.attr.ino, 1);
  }
}

}  // namespace kvfs
