// FUSE callbacks of file I/O: open (and the handle set-up create shares), read, write, flush, release,
// fsync, fallocate, lseek, ioctl. Called by libfuse worker threads through the op table
// (fuse/kvfs_fs.cc). Thread safety and invariants: fuse/kvfs_fs_impl.h.
#include <limits>

#include "fuse/kvfs_fs_impl.h"

#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

namespace kvfs {

// How long a reader's OPEN waits for the RELEASE of direct writers that were all closed (Inode::
// quiet_direct_writers): the kernel sends RELEASE right after close(2) returns; under load it can
// trail the next OPEN by hundreds of ms. Past the wait the reader gets direct_io (correct bytes, but
// MAP_SHARED fails with ENODEV). A writer still open through a dup'd descriptor costs the reader this
// wait once, then direct_io as before. (Which content such a reader gets does not depend on the wait:
// versions take their order at close(2), Impl::PromoteAtClose.)
constexpr std::chrono::milliseconds kReleaseWait{1000};

Status OpenHandle(KvfsFs::Impl* fs, fuse_req_t req, const std::shared_ptr<Inode>& in, fuse_file_info* fi,
                  bool force_trunc, bool retry) {
  int acc = fi->flags & O_ACCMODE;
  bool writable = acc == O_WRONLY || acc == O_RDWR;
  bool trunc = force_trunc || (fi->flags & O_TRUNC);
  auto h = std::make_unique<Handle>();
  h->inode = in;
  h->append = fi->flags & O_APPEND;
  // O_DIRECT asks for FOPEN_DIRECT_IO only on writable handles (and in the forced cases below). A plain
  // O_DIRECT reader gets a page-cache handle: the kernel's O_DIRECT path (generic_file_read_iter ->
  // fuse_direct_IO) still bypasses the page cache, every byte comes from OpRead, and with
  // FUSE_CAP_ASYNC_DIO the requests of one read(2) go out concurrently (FOPEN_DIRECT_IO sends them one
  // after the other). It stays coherent because such a handle is an ordinary page-cache handle here:
  // h->pc counts it in in->pc_handles (a writer then takes a shadow version, as for a buffered reader),
  // keep_cache follows the buffered rule (committed content only), and fuse_direct_IO trims the read at
  // the kernel's i_size, which is this version's size exactly when none of the forced-direct conditions
  // below holds; a short reply below i_size falls back to buffered reads of the same version.
  bool direct = ((fi->flags & O_DIRECT) && writable) || fs->opts.direct_io_all;
  fi->keep_cache = 0;
  if (writable) {
    auto r = fs->AcquireWritable(in, trunc, fuse_req_ctx(req), true, retry);
    if (!r.ok()) return r.status();
    h->version = *r;
    h->writable = true;
    // A shadow version does not share the inode's page cache with the version that owns it.
    if (h->version->direct) direct = true;
  } else {
    if (trunc) {  // O_RDONLY|O_TRUNC truncates on Linux
      auto r = fs->AcquireWritable(in, true, fuse_req_ctx(req), true, retry);
      if (!r.ok()) return r.status();
      Status s = fs->ReleaseWritable(in, *r);
      if (!s.ok()) return s;
    }
    h->rewrites = in->rewrites.load();
    Location unpin;
    {
      std::lock_guard<std::mutex> g(in->mu);
      h->version = in->primary;  // a file being written (visibly): read the staged bytes (POSIX)
      // Closed, its commit pending (commit_delay_ms): a read of the file as it is (atime, relatime).
      if (h->version && h->version->writers == 0) {
        Attr va;
        KvfsFs::Impl::VersionAttr(*h->version, &va);
        if (fs->store->NoteRead(in->ino, va, /*committed=*/false) && fs->session.get()) {
          fuse_lowlevel_notify_inval_inode(fs->session.get(), in->ino, -1, 0);
        }
      }
      // Counted as its reader: if the version is (or gets) committed, its record is held for this
      // handle until RELEASE, as for a reader of committed content (docs/semantics.md §6.10).
      if (h->version) fs->AddReaderLocked(*h->version, &unpin);
    }
    fs->store->UnpinRecord(unpin);
    if (!h->version) {
      auto n = fs->store->GetInode(in->ino);
      if (n.status().IsNotFound()) {
        // An unlink or rename over on this node may have removed the name and not marked the inode
        // yet: wait for those in flight (Impl::WaitUnlinksBefore). Before, such an OPEN was answered
        // ESTALE, and the kernel's retry could meet the next rename over the name the same way: open(2)
        // failed ESTALE (once in 10 minutes of tests/stress/open_hold_stress.py).
        fs->WaitUnlinksBefore();
      }
      if (!n.ok()) {
        // Replaced or unlinked by this node between the kernel's LOOKUP and this OPEN: like a local
        // fs, open the doomed inode and read the version it last had (its record is still in its
        // segment). A peer's replacement answers ESTALE instead: the kernel then finds the new file.
        std::lock_guard<std::mutex> g(in->mu);
        if (!n.status().IsNotFound() || !in->unlinked || !in->last_committed || in->last_attr.ino != in->ino) {
          return n.status();
        }
        h->loc = in->last_loc;
        h->ext = in->last_ext;
        h->size = in->last_attr.size;
      } else {
        h->loc = n->location;
        h->ext = n->extents;
        h->size = n->attr.size;
        // atime, relatime rules: noted at the open, so reads the page cache answers count too; the
        // kernel's cached attributes (attr_timeout) are dropped, attributes only (offset -1), so the
        // next stat asks. Safe from a worker: no inode or page lock is taken for it.
        if (n->committed && fs->store->NoteRead(in->ino, n->attr) && fs->session.get()) {
          fuse_lowlevel_notify_inval_inode(fs->session.get(), in->ino, -1, 0);
        }
      }
      // Held until RELEASE: unlinking or replacing the file, or its segment's reclamation, does not
      // take the bytes from this handle (or a mapping of it), as on a local fs. Already dropped (a
      // cache miss, or a peer dropped it): ENOENT at open, never a failed read later.
      // An extent file: every record of its map (any of them dropped: ENOENT, as for one record).
      const std::vector<Location> recs = ContentRecords(h->loc, h->ext);
      for (size_t i = 0; i < recs.size(); i++) {
        Status p = fs->store->PinRecord(recs[i]);
        if (!p.ok()) {
          for (size_t j = 0; j < i; j++) fs->store->UnpinRecord(recs[j]);
          return p;
        }
      }
      h->held = !recs.empty();
      // Committed content never changes under this inode except through this daemon, which writes
      // through the page cache or invalidates it: keep the cache across opens.
      fi->keep_cache = (n.ok() && n->committed) ? 1 : 0;
    }
  }
  // A number Renumber handed out stops being fresh once its retry is over (no retry pending for its
  // name; checked below that nothing is being written there): see Impl::fresh.
  bool retry_over = false;
  if (!writable && fs->IsFresh(in->ino)) {
    auto n = fs->store->GetInode(in->ino);
    retry_over = n.ok() && !fs->RetryPending(n->parent, n->name);
  }
  {
    std::unique_lock<std::mutex> g(in->mu);
    if (!writable && in->direct_writers != 0 && in->direct_writers == in->quiet_direct_writers) {
      // Every direct writer has been closed (FLUSH) and wrote nothing since: its RELEASE is on its way.
      // Wait for it, briefly, so this reader is not answered direct_io for a writer that is gone.
      in->released.wait_for(g, kReleaseWait, [&] {
        return in->direct_writers == 0 || in->direct_writers != in->quiet_direct_writers;
      });
    }
    if (!writable && in->pc_handles == 0 && in->direct_writers == 0 && !in->unlinked && !in->renumbered &&
        h->version == in->primary && (in->hidden_ever || in->contended || retry_over)) {
      // Quiet: no page-cache handle is open and every version of the inode is closed (at most the
      // visible one, its commit pending; a hidden version became it at its last close, and the
      // readers of the content it replaced read through direct_io). Earlier hidden versions and a fresh number's retry are
      // then history: the kernel's page cache holds at most pages of the content this handle reads,
      // and dropping it at this open (keep_cache 0) leaves none of anything else. The inode becomes
      // an ordinary one again (page cache, MAP_SHARED), not only after a remount.
      bool quiet = true;
      for (const auto& w : in->writing) {
        if (w->writers != 0 || w != in->primary) quiet = false;
      }
      if (quiet) {
        if (in->hidden_ever || in->contended) {
          in->hidden_ever = false;
          in->contended = false;
          fs->hidden_reset++;
        }
        if (retry_over && fs->ForgetUsedFresh(in->ino)) fs->fresh_forgotten++;
        fi->keep_cache = 0;
      }
    }
    if (!writable) {
      // The kernel keeps ONE page cache and ONE i_size per inode. Once an inode has had two versions
      // at a time (a hidden one next to the visible one), a page-cache reader could get pages or a
      // size of the other version (zero-filled tails, or a mix): such readers read through direct_io,
      // which returns exactly the bytes of the version this handle reads. So do readers of a number
      // Renumber handed out (a retried writer may start a version there: IsFresh), and a reader whose
      // inode got a new visible version since it looked (this check and the writers' look at
      // pc_handles are under in->mu).
      if (in->contended || in->hidden_ever || in->primary != h->version || fs->IsFresh(in->ino) ||
          in->direct_writers != 0) {
        direct = true;
      }
    } else if (acc == O_WRONLY && trunc && !direct && in->pc_handles == 0 && in->primary == h->version) {
      // A write-only handle never maps the file (mmap needs read access), so direct_io costs it nothing
      // and saves a round trip per write(2): the kernel's buffered write path asks GETXATTR
      // security.capability before every write (file_remove_privs; FUSE never sets S_NOSEC), its
      // direct_io path does not. Only for O_TRUNC opens (the kernel drops the inode's page cache at
      // such an open) with no page-cache handle open here; readers that open while it is open use
      // direct_io (direct_writers), so no page cache holds bytes it wrote around it.
      direct = true;
    }
    if (writable && direct && in->primary == h->version) {
      h->dw = true;
      in->direct_writers++;
    }
    h->pc = !direct;
    if (h->pc) in->pc_handles++;
  }
  fi->direct_io = direct ? 1 : 0;
  if (direct) fi->keep_cache = 0;
  // A read-only handle's FLUSH does nothing here (OpFlush): FOPEN_NOFLUSH lets close(2) return without
  // that round trip to the daemon (one of the ~3 requests of a warm open/read/close). Kernels before 5.16
  // ignore the flag and keep sending FLUSH, which stays correct.
  fi->noflush = h->writable ? 0 : 1;
  fs->AddHandle(in);
  fi->fh = reinterpret_cast<uint64_t>(h.release());
  return Status::OK();
}

void ReleaseHandle(KvfsFs::Impl* fs, Handle* h) {
  auto in = h->inode;
  if (h->pc || h->dw) {
    // First: the kernel no longer uses this handle, and the commit below makes the inode idle (a
    // retried writable open may then start a version on it).
    std::lock_guard<std::mutex> g(in->mu);
    if (h->pc) in->pc_handles--;
    if (h->dw) {
      in->direct_writers--;
      if (h->dw_quiet.exchange(false)) in->quiet_direct_writers--;
    }
  }
  if (h->dw) in->released.notify_all();
  if (h->writable && h->version) {
    const bool dirty = h->dirty.exchange(false);
    if (dirty) {
      h->version->dirty_handles.fetch_sub(1);  // no FLUSH after its last writes
      fs->NoteDirtyRelease(h->inode, h->version);
    }
    Status s = fs->ReleaseWritable(h->inode, h->version, /*defer=*/true, h->wrote.load(),
                                   dirty ? 0 : h->flushed_close.load());
    if (!s.ok()) {
      LogLimited(spdlog::level::err, LogKey("fuse-release", s), "release of {} (inode {}): {} (version not published)",
                 fs->PathOf(h->inode->ino), h->inode->ino, ErrnoText(s));
    }
  }
  if (h->held) {
    for (const Location& rec : ContentRecords(h->loc, h->ext)) fs->store->UnpinRecord(rec);
  }
  if (!h->writable && h->version) {
    Location unpin;
    {
      std::lock_guard<std::mutex> g(in->mu);
      fs->DropReaderLocked(*h->version, &unpin);
    }
    fs->store->UnpinRecord(unpin);
  }
  delete h;
  fs->DropHandle(in);
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto* fs = FS(req);
  auto in = fs->Get(ino);
  if (!in) {
    auto n = fs->store->GetInode(ino);
    if (!n.ok()) return fs->ReplyOpenError(req, n.status(), KvfsFs::Impl::OpensForWrite(fi->flags));
    in = fs->GetOrMake(ino, n->attr.mode);
  }
  if (S_ISDIR(in->type)) return (void)fuse_reply_err(req, EISDIR);
  Status s = OpenHandle(fs, req, in, fi, false, fs->TakeRetry(fuse_req_ctx(req)));
  if (!s.ok()) return fs->ReplyOpenError(req, s, KvfsFs::Impl::OpensForWrite(fi->flags));
  if (fuse_reply_open(req, fi) != 0) ReleaseHandle(fs, H(fi));  // the kernel never saw the handle
}

// READ of an extent file's committed content: one Store::ReadPinned per piece (verified blocks, the
// LRU), holes as zeros. A range inside one extent replies from the pinned bytes without a copy.
void ReadExtentFile(KvfsFs::Impl* fs, fuse_req_t req, Handle* h, const ExtentMap& map, uint64_t uoff, size_t want) {
  if (want == 0) return (void)fuse_reply_buf(req, nullptr, 0);
  const auto pieces = map.Pieces(uoff, want);
  Status s;
  if (pieces.size() == 1 && pieces[0].extent != nullptr) {
    PinnedBytes p;
    s = fs->store->ReadPinned(pieces[0].extent->record, pieces[0].value_offset, pieces[0].length, &p);
    if (s.ok()) {
      fs->bytes_read.fetch_add(p.len, std::memory_order_relaxed);
      return (void)fuse_reply_buf(req, p.data, p.len);
    }
  } else {
    thread_local std::vector<char> vbuf;
    if (vbuf.size() < want) vbuf.resize(want);
    size_t got = 0;
    s = ReadExtents(map, uoff, want, vbuf.data(), [&](const Location& rec, uint64_t voff, size_t n, char* out) -> Status {
      PinnedBytes p;
      Status rs = fs->store->ReadPinned(rec, voff, n, &p);
      if (!rs.ok()) return rs;
      if (p.len != n) return Status::Corruption("short read of an extent");
      std::memcpy(out, p.data, n);
      return Status::OK();
    }, &got);
    if (s.ok()) {
      fs->bytes_read.fetch_add(got, std::memory_order_relaxed);
      return (void)fuse_reply_buf(req, vbuf.data(), got);
    }
  }
  LogLimited(spdlog::level::err, LogKey("fuse-read", s), "read of {} (inode {}) at {}+{}: {}",
             fs->PathOf(h->inode->ino), h->inode->ino, uoff, want, ErrnoText(s));
  Reply(req, s);
}

// What a handle reads (OpRead, OpLseek): the staged version it reads, else the committed record or map
// it opened; for a reader of a file rewritten in place since it opened (UndoRenumber), what the file
// has now (the version being written or the committed content), as on a local fs. Our own references:
// the reply completes the request, after which the kernel may send RELEASE for the handle and another
// worker may free it and its version while this thread still uses them.
namespace {

struct HandleContent {
  std::shared_ptr<Version> version;
  Location loc;
  ExtentMapRef ext;
  uint64_t size = 0;
};

HandleContent ContentOf(KvfsFs::Impl* fs, const Handle* h) {
  HandleContent c{h->version, h->loc, h->ext, h->size};
  if (h->writable || h->inode->rewrites.load() == h->rewrites) return c;
  {
    std::lock_guard<std::mutex> g(h->inode->mu);
    c.version = h->inode->primary;
  }
  if (!c.version) {
    auto n = fs->store->GetInode(h->inode->ino);
    if (n.ok()) {
      c.loc = n->location;
      c.ext = n->extents;
      c.size = n->attr.size;
    }
  }
  return c;
}

}  // namespace

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  ReadInFlight in_flight(fs);
  if (off < 0) return (void)fuse_reply_err(req, EINVAL);
  // Our own references (an async readahead may hold the last reference to the file): ContentOf.
  HandleContent c = ContentOf(fs, h);
  std::shared_ptr<Version> vp = std::move(c.version);
  Location loc = c.loc;
  ExtentMapRef ext = std::move(c.ext);
  uint64_t hsize = c.size;
  if (vp) {
    std::shared_lock<std::shared_mutex> g(vp->mu);
    const uint64_t uoff = static_cast<uint64_t>(off);
    if (vp->data.InRam(uoff, size)) {
      std::vector<iovec> iov;
      vp->data.Iov(uoff, size, &iov);
      uint64_t n = 0;
      for (const auto& v : iov) n += v.iov_len;
      fs->bytes_read.fetch_add(n, std::memory_order_relaxed);
      fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));  // the kernel copies during the call
      return;
    }
    // Some of the range is on the backing store (copy-on-write base, spilled chunks): verified reads.
    thread_local std::vector<char> vbuf;
    if (vbuf.size() < size) vbuf.resize(size);
    size_t got = 0;
    Status s = vp->data.Read(uoff, size, vbuf.data(), fs->fetch, &got);
    if (!s.ok()) {
      LogLimited(spdlog::level::err, LogKey("fuse-read", s), "read of staged {} (inode {}) at {}+{}: {}",
                 fs->PathOf(h->inode->ino), h->inode->ino, uoff, size, ErrnoText(s));
      return Reply(req, s);
    }
    fs->bytes_read.fetch_add(got, std::memory_order_relaxed);
    fuse_reply_buf(req, vbuf.data(), got);
    return;
  }
  uint64_t uoff = static_cast<uint64_t>(off);
  if (ext) return ReadExtentFile(fs, req, h, *ext, uoff, std::min<uint64_t>(size, hsize > uoff ? hsize - uoff : 0));
  if (uoff >= hsize || loc.empty()) return (void)fuse_reply_buf(req, nullptr, 0);
  size_t want = std::min<uint64_t>(size, hsize - uoff);
  // Reply straight from the verified bytes the store pins (the LRU value, or the blocks it just read):
  // the only copy is the kernel's, into the request's pages. `p` keeps them alive during the call.
  PinnedBytes p;
  Status s;
  if (const uint64_t split = fs->store->ReadUnitEnd(loc, uoff); uoff + want > split) {
    // A READ across two of the store's cache units: each part pinned from its own unit, one reply of
    // both. A buffered reader's read-ahead windows start where its first small read ended (LMCache's
    // 28-byte header read: 16 KiB past each 1 MiB boundary), so every 4th 1 MiB READ of a 36 MiB file
    // crossed a 4 MiB piece; read on its own it loaded those bytes a second time (1.24x the file read
    // from the export, docs/benchmarks.md "Buffered reads").
    PinnedBytes p2;
    s = fs->store->ReadPinned(loc, uoff, split - uoff, &p);
    if (s.ok() && p.len == split - uoff) s = fs->store->ReadPinned(loc, split, want - p.len, &p2);
    if (s.ok()) {
      iovec iov[2] = {{const_cast<char*>(p.data), p.len}, {const_cast<char*>(p2.data), p2.len}};
      fs->bytes_read.fetch_add(p.len + p2.len, std::memory_order_relaxed);
      fuse_reply_iov(req, iov, p2.len ? 2 : 1);
      return;
    }
  } else {
    s = fs->store->ReadPinned(loc, uoff, want, &p);
  }
  if (!s.ok()) {
    LogLimited(spdlog::level::err, LogKey("fuse-read", s), "read of {} (inode {}) at {}+{}: {}",
               fs->PathOf(h->inode->ino), h->inode->ino, uoff, want, ErrnoText(s));
    return Reply(req, s);
  }
  fs->bytes_read.fetch_add(p.len, std::memory_order_relaxed);
  fuse_reply_buf(req, p.data, p.len);
}

void OpWrite(fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  if (!h || !h->version) return (void)fuse_reply_err(req, EBADF);
  if (off < 0) return (void)fuse_reply_err(req, EINVAL);
  if (static_cast<uint64_t>(off) + size > fs->opts.max_file_size) return (void)fuse_reply_err(req, EFBIG);
  if (h->dw && h->dw_quiet.load()) {  // written again after its FLUSH (a dup'd descriptor): not quiet
    std::lock_guard<std::mutex> g(h->inode->mu);
    if (h->dw_quiet.exchange(false)) h->inode->quiet_direct_writers--;
  }
  // Writeback of shared-mmap pages (fi->writepage) may arrive on any writable handle of the inode, also
  // after its FLUSH: it marks the version dirty, so the next flush or the last release writes a record.
  Version& v = *h->version;
  // Over the staging budget: spill first (this write may fail with ENOSPC, and then changes nothing).
  // What it allocates: a chunk per chunk it touches that is not in RAM (ChunkBuffer::WriteNeed), so a
  // write into chunks already in RAM spills nothing. Before, size + 1 MiB was reserved per WRITE: a
  // 3 MiB file written through a 4 MiB budget spilled 2 MiB. Another writer of the version may change
  // its chunks between this count and the write; the budget is then exceeded by at most that write
  // (as when every version is being spilled, docs/semantics.md §1).
  Status s;
  for (int attempt = 0;; ++attempt) {
    uint64_t need;
    bool sealed_conflict;
    {
      std::shared_lock<std::shared_mutex> g(v.mu);
      const uint64_t woff = h->append && v.direct && !fi->writepage ? v.data.size() : static_cast<uint64_t>(off);
      need = v.data.WriteNeed(woff, size);
      sealed_conflict = v.data.SealConflicts(woff, size);
    }
    // Over pages a close sealed (or growing the file, or replacing a referenced chunk): that close's
    // pages are appended first, as its record (design.md §13 "Sealed closes"); a failure fails this write.
    if (sealed_conflict) {
      s = fs->FlushSealed(v);
      if (!s.ok()) return Reply(req, s);
    }
    s = fs->MakeRoom(need);
    if (!s.ok()) return Reply(req, s);
    std::unique_lock<std::shared_mutex> g(v.mu);
    uint64_t cap = v.data.capacity();
    // O_APPEND on a shadow (direct_io) handle: the kernel's append offset is the inode's i_size, which
    // another version may have set; append to this version's end instead (no page cache to disagree).
    if (h->append && v.direct && !fi->writepage) off = static_cast<off_t>(v.data.size());
    // Another close sealed pages meanwhile: append them and look again (ChunkBuffer::Write refuses).
    if (v.data.SealConflicts(static_cast<uint64_t>(off), size) && attempt < 8) continue;
    s = v.data.Write(static_cast<uint64_t>(off), buf, size, fs->fetch);
    fs->AccountRam(v, cap);
    if (s.ok()) {
      v.gen++;
      v.attr.mtime_ns = v.attr.ctime_ns = NowNs();
    }
    break;
  }
  if (!s.ok()) {
    LogLimited(spdlog::level::err, LogKey("fuse-write", s), "write of {} (inode {}) at {}+{}: {}",
               fs->PathOf(h->inode->ino), h->inode->ino, off, size, ErrnoText(s));
    return Reply(req, s);
  }
  fs->bytes_written.fetch_add(size, std::memory_order_relaxed);
  if (!h->dirty.exchange(true)) v.dirty_handles.fetch_add(1);  // before the reply: this writer's close sees it
  h->wrote.store(true, std::memory_order_relaxed);
  fuse_reply_write(req, size);
}

void OpFlush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  if (!h->writable || !h->version) return (void)fuse_reply_err(req, 0);
  if (h->dw && !h->dw_quiet.load()) {
    std::lock_guard<std::mutex> g(h->inode->mu);
    if (!h->dw_quiet.exchange(true)) h->inode->quiet_direct_writers++;
  }
  if (h->dirty.exchange(false)) h->version->dirty_handles.fetch_sub(1);
  if (h->version->dirty_handles.load() > 0 && h->version->failed.ok()) {
    // Another writer of this version has written since its last close: its FLUSH writes the record
    // (with these bytes) and reports its errors; writing it now too would write the file once per writer.
    fs->staging.flushes_deferred++;
    h->flushed_close.store(0);
    fs->PromoteAtClose(h->inode, h->version);
    return (void)fuse_reply_err(req, 0);
  }
  uint64_t close_no = 0;
  Status s = fs->Flush(*h->inode, *h->version, /*at_close=*/true, &close_no);
  h->flushed_close.store(s.ok() ? close_no : 0);
  if (s.ok()) fs->PromoteAtClose(h->inode, h->version);
  if (!s.ok()) {
    // A failed close publishes nothing: the name goes back to what it was before the open, now if
    // this handle is the version's only writer (its RELEASE comes after close(2) returned).
    fs->MarkFailed(*h->version, s);
    bool last;
    {
      std::lock_guard<std::mutex> g(h->inode->mu);
      last = h->version->writers == 1;
    }
    if (last) fs->Unpublish(h->inode, h->version, s);
  }
  Reply(req, s);
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  auto* fs = FS(req);
  if (fs->opts.test_release_delay_ms > 0 && H(fi)->dw) {  // TEST ONLY (FsOptions::test_release_delay_ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(fs->opts.test_release_delay_ms));
  }
  ReleaseHandle(FS(req), H(fi));
  fuse_reply_err(req, 0);
}

void OpFsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  if (h->writable && h->version) {
    Status s = fs->Commit(h->inode, h->version);
    if (!s.ok()) {
      fs->MarkFailed(*h->version, s);  // as a failed close: never published (at its last release)
      return Reply(req, s);
    }
  }
  fs->DrainDeferred();  // a version closed just before (commit deferred) is covered too
  Reply(req, fs->store->Sync());
}

void OpIoctl(fuse_req_t req, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned, const void*, size_t, size_t) {
  fuse_reply_err(req, ENOTTY);  // Python's isatty() on every open of numpy.tofile: answer at once
}

void OpFallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  // PUNCH_HOLE comes with KEEP_SIZE (the kernel refuses it alone). ZERO_RANGE, with or without
  // KEEP_SIZE, is a punch of the part inside the file (there is no allocation to keep: holes read as
  // zeros and cost nothing, as ext4's unwritten extents read as zeros and count as holes for
  // SEEK_DATA) and, without KEEP_SIZE, a growth to its end. Collapse and insert never get here (the
  // kernel answers EOPNOTSUPP for FUSE itself); any other mode: EOPNOTSUPP.
  const bool punch = mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE);
  const bool zero = (mode & ~FALLOC_FL_KEEP_SIZE) == FALLOC_FL_ZERO_RANGE;
  if (!punch && !zero && (mode & ~FALLOC_FL_KEEP_SIZE)) return (void)fuse_reply_err(req, EOPNOTSUPP);
  if (!h->writable || !h->version) return (void)fuse_reply_err(req, EBADF);
  if (offset < 0 || length <= 0) return (void)fuse_reply_err(req, EINVAL);
  if (static_cast<uint64_t>(length) > std::numeric_limits<int64_t>::max() - static_cast<uint64_t>(offset)) {
    return (void)fuse_reply_err(req, EFBIG);
  }
  Version& v = *h->version;
  if (punch || zero) {
    // The range reads as zeros and becomes holes of the version (ChunkBuffer::Punch): whole chunks
    // free their RAM, a FLUSH writes nothing for them; the kernel drops its cached pages of the range
    // after this reply. At most two partly covered chunks are read in.
    Status s = fs->MakeRoom(2 * ChunkBuffer::kChunk);
    for (int attempt = 0; s.ok() && attempt < 8; ++attempt) {
      s = fs->FlushSealed(v);  // pages a close sealed are appended first (design.md §13 "Sealed closes")
      if (!s.ok()) break;
      std::unique_lock<std::shared_mutex> g(v.mu);
      if (v.data.sealed() && attempt < 7) continue;
      uint64_t cap = v.data.capacity();
      s = v.data.Punch(static_cast<uint64_t>(offset), static_cast<uint64_t>(length), fs->fetch);
      fs->AccountRam(v, cap);
      if (s.ok()) {
        v.gen++;
        v.attr.mtime_ns = v.attr.ctime_ns = NowNs();
      }
      break;
    }
    if (s.ok() && zero && !(mode & FALLOC_FL_KEEP_SIZE)) {
      // The part past the end: the file grows to the range's end (a hole), as fallocate mode 0 does.
      s = fs->Truncate(v, static_cast<uint64_t>(offset) + static_cast<uint64_t>(length), NowNs(),
                       /*grow_only=*/true);
    }
    if (!s.ok()) {
      LogLimited(spdlog::level::err, LogKey("fuse-punch", s), "{} of {} (inode {}) at {}+{}: {}",
                 zero ? "zero-range" : "punch", fs->PathOf(h->inode->ino), h->inode->ino, offset, length,
                 ErrnoText(s));
    }
    return (void)fuse_reply_err(req, ToErrno(s));
  }
  if (mode & FALLOC_FL_KEEP_SIZE) return (void)fuse_reply_err(req, 0);  // nothing to reserve
  uint64_t end = static_cast<uint64_t>(offset) + static_cast<uint64_t>(length);
  uint64_t cur;
  {
    std::shared_lock<std::shared_mutex> g(v.mu);
    cur = v.data.size();
  }
  Status s = Status::OK();
  if (end > cur) s = fs->Truncate(v, end, NowNs(), /*grow_only=*/true);
  fuse_reply_err(req, ToErrno(s));  // never touch the handle after replying (RELEASE may follow at once)
}

void OpLseek(fuse_req_t req, fuse_ino_t, off_t off, int whence, fuse_file_info* fi) {
  auto* fs = FS(req);
  Handle* h = H(fi);
  if (off < 0) return (void)fuse_reply_err(req, EINVAL);
  if (whence != SEEK_DATA && whence != SEEK_HOLE) return (void)fuse_reply_err(req, EINVAL);
  const bool want_hole = whence == SEEK_HOLE;
  const uint64_t o = static_cast<uint64_t>(off);
  // The content this handle reads, as OpRead picks it.
  HandleContent c = ContentOf(fs, h);
  std::shared_ptr<Version> vp = std::move(c.version);
  ExtentMapRef ext = std::move(c.ext);
  uint64_t size = c.size;
  // Data and holes as the content has them (docs/semantics.md "Holes"): a staged version's holes
  // (ChunkBuffer), a committed extent map's holes (ExtentMap); a one-record file is data up to its
  // size. The end of file counts as a hole; at or past it both answer ENXIO (POSIX, Linux), and
  // SEEK_DATA in a trailing hole too.
  uint64_t at;
  if (vp) {
    std::shared_lock<std::shared_mutex> g(vp->mu);
    size = vp->data.size();
    at = o >= size ? size : (want_hole ? vp->data.NextHole(o) : vp->data.NextData(o));
  } else if (ext) {
    size = ext->size();
    at = o >= size ? size : (want_hole ? ext->NextHole(o) : ext->NextData(o));
  } else {
    at = o >= size ? size : (want_hole ? size : o);
  }
  if (o >= size || (!want_hole && at >= size)) return (void)fuse_reply_err(req, ENXIO);
  fuse_reply_lseek(req, static_cast<off_t>(at));
}

}  // namespace kvfs
