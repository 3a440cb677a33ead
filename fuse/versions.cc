// KvfsFs::Impl, versions: starting or joining the staged version a writable handle writes
// (AcquireWritable, docs/semantics.md), moving a committed file to a new inode number for its new
// version (Store::Renumber) and undoing that for magic-link reopens, and truncating a version. Called by
// open/create/mknod/setattr/fallocate. Thread safety and invariants: fuse/kvfs_fs_impl.h.
#include "fuse/kvfs_fs_impl.h"

namespace kvfs {

namespace {
// UndoRenumber: how long a magic-link reopen waits for the RELEASEs of the writers of the number its
// name got (their close(2) returned; the kernel sends RELEASE after it).
constexpr std::chrono::milliseconds kUndoRenumberWait{1000};
}  // namespace

std::shared_ptr<Version> KvfsFs::Impl::NewVersion(uint64_t ino, bool hidden, bool direct) {
  staged_versions++;
  if (hidden) shadows++;
  auto v = std::make_shared<Version>(next_seq.fetch_add(1), ino, hidden, direct, &staging);
  v->created_order = next_order.fetch_add(1);
  v->last_close_gen = v->gen;  // a close before any change changes nothing: the creation's order stays
  std::lock_guard<std::mutex> g(staging.mu);
  staging.versions.emplace(v.get(), v);
  return v;
}

Result<std::shared_ptr<Version>> KvfsFs::Impl::AcquireWritable(const std::shared_ptr<Inode>& in,
                                                               bool trunc, const fuse_ctx* ctx,
                                                               bool need_content, bool retry) {
  const bool inplace = retry && UndoRenumber(in);
  bool waited = false;
  for (int attempt = 0;; ++attempt) {
    std::vector<std::shared_ptr<Version>> settle;
    auto r = AcquireWritableOnce(in, trunc, ctx, need_content, retry, inplace,
                                 attempt < 2 ? &settle : nullptr, waited);
    if (!r.ok() && r.status().IsBusy() && !waited) {
      // The inode is gone from the index and not marked: an unlink or rename of this node may be
      // between the two (Impl::WaitUnlinksBefore). Wait for those, then look again.
      WaitUnlinksBefore();
      waited = true;
      continue;
    }
    if (settle.empty()) return r;
    // O_TRUNC while the versions of the inode are only waiting for their deferred commit (all
    // writers closed): commit them now, so the new version starts on a committed, idle inode, i.e.
    // on a new inode number. A shadow on this number would make the kernel reset its i_size under
    // the page-cache readers of the closed version (a reader of LMCache's final name read 0 or
    // 131,072 of 262,172 bytes when the second writer of <key>.tmp opened just after the first
    // closed; fs_ops_test SameTempWriters.test_processes, ~1 run in 15).
    for (auto& v : settle) {
      Status s = FinishRelease(in, v);
      if (!s.ok()) spdlog::error("commit of inode {}: {} (version not published)", in->ino, s.ToString());
    }
  }
}

bool KvfsFs::Impl::UndoRenumber(const std::shared_ptr<Inode>& in) {
  uint64_t to, parent;
  std::string name;
  {
    std::lock_guard<std::mutex> g(in->mu);
    if (!in->renumbered || in->renumbered_to == 0 || in->lost_parent == 0) return false;
    to = in->renumbered_to;
    parent = in->lost_parent;
    name = in->lost_name;
  }
  auto cur = store->GetInode(to);
  if (!cur.ok() || cur->parent != parent || cur->name != name) return false;
  auto other = Get(to);
  if (other) {
    // The name's new number may still hold the version of a rewrite by path made since (breaker
    // helper, 2026-12-07: O_PATH fd, a rewrite through /proc/self/fd, a rewrite by path, a reopen
    // through /proc/self/fd answered ESTALE every time): its writers closed, but their RELEASE can be
    // on its way (the kernel sends it after close(2) returned) and its commit is deferred
    // (commit_delay_ms). Wait for the releases, up to kUndoRenumberWait, and commit those versions now;
    // a writer still open after that keeps the name on its number (ESTALE, as before).
    const auto deadline = std::chrono::steady_clock::now() + kUndoRenumberWait;
    for (int round = 0;; ++round) {
      std::vector<std::shared_ptr<Version>> settle;
      bool open = false;
      {
        std::lock_guard<std::mutex> og(other->mu);
        for (const auto& w : other->writing) open = open || w->writers != 0;
        if (!open) settle = other->writing;
      }
      if (!open && settle.empty()) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        spdlog::debug("undo renumber {} -> {}: inode {} still has versions being written", to, in->ino, to);
        return false;
      }
      if (open) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      for (auto& v : settle) {
        Status s = FinishRelease(other, v);
        if (!s.ok()) {
          spdlog::error("commit of inode {}: {} (version not published)", to, s.ToString());
          return false;
        }
      }
    }
    cur = store->GetInode(to);
    if (!cur.ok() || cur->parent != parent || cur->name != name) return false;
  }
  if (!cur->committed) return false;
  auto back = store->Renumber(to, in->ino);
  if (!back.ok()) {
    spdlog::debug("undo renumber {} -> {}: {}", to, in->ino, back.status().ToString());
    return false;
  }
  MoveCompactionCredit(to, in->ino);
  {
    std::lock_guard<std::mutex> g(in->mu);
    in->renumbered = false;
    in->unlinked = false;
    in->renumbered_to = 0;
    in->last_attr = back->attr;
    in->last_loc = back->location;
    in->last_ext = back->extents;
  }
  if (other) {
    // Read-only handles still open on `to` keep the content they opened (pinned at their open), as
    // readers of a file replaced by rename do: fstat answers its last attributes with st_nlink 0.
    std::lock_guard<std::mutex> og(other->mu);
    other->unlinked = true;
    other->lost_parent = parent;
    other->lost_name = name;
    other->last_attr = cur->attr;
    other->last_attr.ino = to;
    other->last_attr.nlink = 0;
    other->last_loc = cur->location;
    other->last_ext = cur->extents;
    other->last_committed = true;
  }
  spdlog::debug("inode {}: renumber to {} undone (a reopen through a magic link)", in->ino, to);
  // Cached dentries of the name that point to `to` (gone now): the notifier drops them and marks
  // `to` unlinked if the kernel still holds it.
  std::lock_guard<std::mutex> qg(nq_mu);
  nq.push_back(Notice{to, parent, name});
  nq_cv.notify_one();
  return true;
}

Result<std::shared_ptr<Version>> KvfsFs::Impl::AcquireWritableOnce(
    const std::shared_ptr<Inode>& in, bool trunc, const fuse_ctx* ctx, bool need_content, bool retry,
    bool inplace, std::vector<std::shared_ptr<Version>>* settle, bool waited) {
  std::lock_guard<std::mutex> g(in->mu);
  // Newest version being written or being committed by its last release (still in `writing`).
  std::shared_ptr<Version> newest;
  for (auto& w : in->writing) {
    // Older than the committed content: never joined (a version whose last RELEASE is late, still
    // open, is stale once a version closed after its last change committed: a writer that joined it
    // wrote into the replaced content, breaker helper 2026-12-07).
    if (w->superseded || StaleLocked(*in, *w)) continue;
    if (!newest || w->seq > newest->seq) newest = w;
  }
  auto join = [&](const std::shared_ptr<Version>& v) {
    v->writers++;
    // A version committed with no handle left, not yet out of `writing` (its last release is between
    // its commit and the end of FinishRelease): its chunks may be references to the committed record (a
    // spill of a recorded version), which its commit held for nobody. This writer holds it, as a reader
    // does (released with the version's last handle, FinishRelease). Under in->mu, like HoldBase.
    Location unpin;
    HoldCommittedLocked(*v, &unpin);
    store->UnpinRecord(unpin);
    if (std::find(in->writing.begin(), in->writing.end(), v) == in->writing.end()) in->writing.push_back(v);
    return v;
  };
  int64_t now = NowNs();
  if (!trunc) {
    if (newest) return join(newest);  // POSIX: handles of one file see each other's writes
  }
  if (trunc && newest && settle && !in->unlinked &&
      std::all_of(in->writing.begin(), in->writing.end(), [](const auto& w) { return w->writers == 0; })) {
    *settle = in->writing;  // the caller commits them and tries again
    return std::shared_ptr<Version>();
  }
  if (trunc && newest) {
    auto v = NewVersion(in->ino, /*hidden=*/true, /*direct=*/true);
    VersionAttr(*newest, &v->attr);
    v->attr.mtime_ns = v->attr.ctime_ns = now;
    v->data.Resize(0);
    in->contended = true;
    in->hidden_ever = true;
    return join(v);
  }
  auto n = store->GetInode(in->ino);
  Attr a;
  if (!n.ok()) {
    // Gone between the kernel's LOOKUP and this OPEN. Unlinked or renamed over on this node: like a
    // local fs, the open gets the doomed inode (a version that is discarded at its release), as
    // read-only opens do — unless page-cache handles of the old content are open here (this version
    // would reset their i_size). Renumbered, replaced by a peer, or with such handles: NotFound,
    // which the open answers with ESTALE, so the kernel looks the name up again.
    // On the kernel's retry, the number was live at its LOOKUP just now: the unlink or replacement
    // (on this node before its flag is set, or a peer's) came during this open, so it is doomed too.
    if (n.status().IsNotFound() && !retry && !waited && !in->unlinked && !in->renumbered) {
      return Status::Busy("inode gone, not marked: an unlink may be in flight");  // AcquireWritable waits
    }
    if (n.status().IsNotFound() && retry && !in->renumbered) in->unlinked = true;
    if (!n.status().IsNotFound() || !in->unlinked || in->renumbered || in->pc_handles != 0 ||
        in->last_attr.ino != in->ino) {
      if (in->lost_parent != 0) MarkRetry(ctx, in->lost_parent, in->lost_name);
      return n.status();
    }
    // O_TRUNC: hidden like any rewrite of committed content (racing readers of the doomed inode
    // read its last version whole, through direct_io).
    auto v = NewVersion(in->ino, /*hidden=*/trunc, /*direct=*/false);
    a = in->last_attr;
    a.atime_ns = std::max(a.atime_ns, store->PendingAtime(in->ino));  // a read's note not journaled yet
    a.nlink = 0;
    if (!trunc && need_content && in->last_committed && in->last_ext) {
      v->data.SetBacking(in->last_ext.shared());
      v->HoldBases(*in->last_ext);
      a.size = in->last_ext->size();
    } else if (trunc || !need_content || !in->last_committed || in->last_loc.empty()) {
      if (trunc && a.size != 0) a.mtime_ns = a.ctime_ns = now;
      a.size = 0;
    } else {
      a.size = std::min<uint64_t>(a.size, in->last_loc.length);
      v->data.SetBacking(in->last_loc, a.size);
      v->HoldBase(in->last_loc);
    }
    v->attr = a;
    if (trunc) {
      in->contended = true;
      in->hidden_ever = true;
    } else {
      in->primary = v;
    }
    return join(v);
  }
  // A new version may start on this number only if no page-cache handle is open on it. It does so
  // for the first writable open of a number Renumber handed out (virgin) and for the kernel's retry
  // of an open we answered ESTALE (so the retry never fails again).
  bool keep = false;
  if (in->pc_handles == 0) {
    const bool virgin = TakeVirgin(in->ino);  // used up by whichever writer comes first
    keep = virgin || retry || RetryPending(n->parent, n->name);
  }
  if (inplace) {
    keep = true;
    in->rewrites++;
    QueueInval(in->ino);  // off this thread (nq_mu is a leaf lock)
  }
  if (n->committed && S_ISREG(n->attr.mode) && !keep) {
    // New content of a committed file gets a new inode number (docs/design.md §3). The kernel keeps ONE
    // page cache and ONE i_size per inode: were the new version written under this number, a reader
    // that opened the old content (page cache) would read it cut to the new size. So the file moves
    // to a fresh number now, and the open answers ESTALE: the kernel looks the name up again
    // (LOOKUP_REVAL) and retries the open on the new number, once. This number keeps the old content
    // for its open handles (pinned Location) until they close; the kernel forgets it then.
    MarkRetry(ctx, n->parent, n->name);  // before the name moves (OpRename checks it)
    auto nn = store->Renumber(in->ino);
    if (!nn.ok()) return nn.status();
    MoveCompactionCredit(in->ino, nn->attr.ino);  // the file's copy budget goes with its name
    AddFresh(nn->attr.ino);
    in->renumbered_to = nn->attr.ino;
    in->unlinked = true;  // its name now belongs to the new number
    in->renumbered = true;
    in->lost_parent = n->parent;
    in->lost_name = n->name;
    in->last_attr = n->attr;
    in->last_attr.ino = in->ino;
    in->last_loc = n->location;
    in->last_ext = n->extents;
    in->last_committed = true;
    renumbered++;
    {
      // Other processes' cached dentries of the name: the notifier thread (it holds no lock a
      // worker needs) invalidates them.
      std::lock_guard<std::mutex> qg(nq_mu);
      nq.push_back(Notice{in->ino, n->parent, n->name});
      nq_cv.notify_one();
    }
    return Status::FromErrno(ESTALE, "inode " + std::to_string(in->ino) + " renumbered to " +
                                         std::to_string(nn->attr.ino) + " for a new version");
  }
  a = n->attr;
  a.ino = in->ino;
  a.atime_ns = std::max(a.atime_ns, store->PendingAtime(in->ino));  // a read's note not journaled yet
  if (trunc) {
    // In place (inplace): a visible version, as a local fs truncates the file under its readers.
    bool committed = n.ok() && n->committed && !inplace;
    auto v = NewVersion(in->ino, /*hidden=*/committed, /*direct=*/false);
    if (a.size != 0) a.mtime_ns = a.ctime_ns = now;
    a.size = 0;
    v->attr = a;
    if (committed) {
      in->contended = true;
      in->hidden_ever = true;
    } else {
      in->primary = v;
    }
    return join(v);
  }
  // Copy-on-write: a non-truncating writable open of a committed file starts from its content, as
  // references to the committed record (no copy). A chunk is copied into RAM when a write changes
  // part of it (ChunkBuffer); until something changes, the version IS the committed value: its
  // FLUSH writes no record and its last RELEASE journals nothing (an O_RDWR open that only reads
  // costs no backing write).
  auto v = NewVersion(in->ino, false, false);
  if (need_content) {
    if (a.size != 0) {
      if (n->extents) {
        // An extent file: its map is the base; only what changes is appended at FLUSH.
        v->data.SetBacking(n->extents.shared());
        v->HoldBases(*n->extents);
        a.size = n->extents->size();
      } else {
        if (n->location.empty()) return Status::Corruption("committed file without a location");
        a.size = std::min<uint64_t>(a.size, n->location.length);
        v->data.SetBacking(n->location, a.size);
        v->HoldBase(n->location);
      }
    }
    v->has_record = true;
    v->record = a.size == 0 ? Location{} : n->location;
    v->record_ext = a.size == 0 ? ExtentMapRef{} : n->extents;
    v->record_gen = v->gen;
    if (n->committed) {
      v->committed_gen = v->gen;
      v->committed_attr_gen = v->attr_gen;
    }
  } else {
    a.size = 0;
  }
  a.ino = in->ino;
  v->attr = a;
  in->primary = v;
  return join(v);
}

Status KvfsFs::Impl::Truncate(Version& v, uint64_t size, int64_t now, bool grow_only) {
  if (size > opts.max_file_size) return Status::IOError("file size over --max-file-size", EFBIG);
  uint64_t cur;
  {
    std::shared_lock<std::shared_mutex> g(v.mu);
    cur = v.data.size();
  }
  // Growth makes holes (no RAM); at most the partial last chunk is copied in (one chunk).
  if (size > cur) KVFS_RETURN_IF_ERROR(MakeRoom(ChunkBuffer::kChunk));
  for (int attempt = 0;; ++attempt) {
    // Pages a close sealed are appended first (design.md §13 "Sealed closes"): a resize ends the seal.
    KVFS_RETURN_IF_ERROR(FlushSealed(v));
    std::unique_lock<std::shared_mutex> g(v.mu);
    if (v.data.sealed() && attempt < 7) continue;
    if (grow_only && size <= v.data.size()) return Status::OK();
    uint64_t cap = v.data.capacity();
    Status s = v.data.Resize(size, fetch);
    AccountRam(v, cap);
    if (!s.ok()) return s;
    v.gen++;
    v.attr.mtime_ns = v.attr.ctime_ns = now;
    break;
  }
  if (size > cur) return MakeRoom(0);
  return Status::OK();
}

}  // namespace kvfs
