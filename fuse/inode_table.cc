// KvfsFs::Impl, the inode side: the inode table and lookup counts (Ref/Forget/handles, as in libfuse's
// example/passthrough_hp.cc), the renumber/retry bookkeeping of inode numbers (fresh numbers, threads
// whose open was answered ESTALE), kernel cache invalidations (notifier thread), and the attributes and
// entry replies of inodes. Called by the FUSE callbacks (fuse/ops_*.cc) and the rest of Impl.
// Thread safety and invariants: fuse/kvfs_fs_impl.h.
#include "fuse/kvfs_fs_impl.h"

namespace kvfs {

namespace {
int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void KvfsFs::Impl::AddFresh(uint64_t ino, bool virgin) {
  const FreshState st{virgin ? Fresh::kVirgin : Fresh::kUsed, SteadyNs()};
  std::lock_guard<std::mutex> g(fresh_mu);
  auto [it, added] = fresh.emplace(ino, st);
  if (added) {
    fresh_order.push_back(ino);
  } else if (it->second.state == Fresh::kForgotten) {
    it->second = st;  // keeps its place in fresh_order
  } else {
    it->second.since_ns = st.since_ns;
  }
  while (fresh_order.size() > kMaxFresh) {
    fresh.erase(fresh_order.front());
    fresh_order.pop_front();
  }
}

bool KvfsFs::Impl::IsFresh(uint64_t ino) {
  std::lock_guard<std::mutex> g(fresh_mu);
  auto it = fresh.find(ino);
  return it != fresh.end() && it->second.state != Fresh::kForgotten;
}

bool KvfsFs::Impl::TakeVirgin(uint64_t ino) {
  std::lock_guard<std::mutex> g(fresh_mu);
  auto it = fresh.find(ino);
  if (it == fresh.end() || it->second.state != Fresh::kVirgin) return false;
  it->second = FreshState{Fresh::kUsed, SteadyNs()};
  return true;
}

bool KvfsFs::Impl::ForgetUsedFresh(uint64_t ino) {
  const int64_t now = SteadyNs();
  std::lock_guard<std::mutex> g(fresh_mu);
  auto it = fresh.find(ino);
  if (it == fresh.end() || it->second.state != Fresh::kUsed || now - it->second.since_ns < kFreshQuietNs) {
    return false;
  }
  it->second.state = Fresh::kForgotten;
  return true;
}

void KvfsFs::Impl::MarkRetry(const fuse_ctx* ctx, uint64_t parent, const std::string& name) {
  if (!ctx || ctx->pid <= 0) return;
  std::lock_guard<std::mutex> g(retry_mu);
  if (retrying.size() >= kMaxFresh) {
    retrying.clear();
    pending.clear();
  }
  auto [it, added] = retrying.try_emplace(static_cast<uint32_t>(ctx->pid), NameKey{parent, name});
  if (!added) {
    if (parent == 0 || it->second.first != 0) return;  // keep the name a renumber recorded
    it->second = NameKey{parent, name};
  }
  if (parent != 0) pending[it->second]++;
}

KvfsFs::Impl::RetryTicket KvfsFs::Impl::TakeRetry(const fuse_ctx* ctx) {
  if (!ctx || ctx->pid <= 0) return RetryTicket();
  std::lock_guard<std::mutex> g(retry_mu);
  auto it = retrying.find(static_cast<uint32_t>(ctx->pid));
  if (it == retrying.end()) return RetryTicket();
  NameKey k = std::move(it->second);  // stays pending (counted) until the ticket is destroyed
  retrying.erase(it);
  return RetryTicket(this, std::move(k));
}

KvfsFs::Impl::RetryTicket::~RetryTicket() {
  if (!fs_ || key_.first == 0) return;
  std::lock_guard<std::mutex> g(fs_->retry_mu);
  auto p = fs_->pending.find(key_);
  if (p != fs_->pending.end() && --p->second <= 0) fs_->pending.erase(p);
}

void KvfsFs::Impl::RetryLookup(const fuse_ctx* ctx, uint64_t parent, const std::string& name, uint64_t ino) {
  if (!ctx || ctx->pid <= 0) return;
  {
    std::lock_guard<std::mutex> g(retry_mu);
    if (retrying.empty()) return;
    auto it = retrying.find(static_cast<uint32_t>(ctx->pid));
    if (it == retrying.end()) return;
    NameKey k{parent, name};
    if (it->second != k) {
      if (it->second.first != 0) {
        auto p = pending.find(it->second);
        if (p != pending.end() && --p->second <= 0) pending.erase(p);
      }
      it->second = k;
      pending[k]++;
    }
  }
  AddFresh(ino, /*virgin=*/false);
}

bool KvfsFs::Impl::RetryPending(uint64_t parent, const std::string& name, const RetryTicket* own) {
  std::lock_guard<std::mutex> g(retry_mu);
  if (pending.empty()) return false;
  NameKey k{parent, name};
  auto it = pending.find(k);
  if (it == pending.end()) return false;
  return it->second > ((own && *own && own->key() == k) ? 1 : 0);
}

void KvfsFs::Impl::ReplyOpenError(fuse_req_t req, const Status& s, bool writer) {
  int e = ToErrno(s, ErrCtx::kInode);
  if (e == ESTALE && writer) MarkRetry(fuse_req_ctx(req));
  fuse_reply_err(req, e);
}

std::shared_ptr<Inode> KvfsFs::Impl::Ref(uint64_t ino, uint32_t type) {
  std::lock_guard<std::mutex> g(table_mu);
  auto& p = table[ino];
  if (!p) p = std::make_shared<Inode>(ino, type & S_IFMT);
  p->nlookup++;
  return p;
}

std::shared_ptr<Inode> KvfsFs::Impl::Get(uint64_t ino) {
  std::lock_guard<std::mutex> g(table_mu);
  auto it = table.find(ino);
  return it == table.end() ? nullptr : it->second;
}

std::shared_ptr<Inode> KvfsFs::Impl::GetOrMake(uint64_t ino, uint32_t type) {
  std::lock_guard<std::mutex> g(table_mu);
  auto& p = table[ino];
  if (!p) p = std::make_shared<Inode>(ino, type & S_IFMT);
  return p;
}

void KvfsFs::Impl::MaybeEraseLocked(const std::shared_ptr<Inode>& in) {
  if (in->nlookup == 0 && in->open_handles == 0 && in->ino != kRootIno) {
    {
      // A version still committing (deferred) keeps its inode: a new Inode object for the same
      // number would not see it.
      std::lock_guard<std::mutex> g(in->mu);
      if (!in->writing.empty()) return;
    }
    auto it = table.find(in->ino);
    if (it != table.end() && it->second == in) table.erase(it);
  }
}

void KvfsFs::Impl::Forget(uint64_t ino, uint64_t n) {
  std::lock_guard<std::mutex> g(table_mu);
  auto it = table.find(ino);
  if (it == table.end()) return;
  auto in = it->second;
  in->nlookup = n >= in->nlookup ? 0 : in->nlookup - n;
  MaybeEraseLocked(in);
}

void KvfsFs::Impl::AddHandle(const std::shared_ptr<Inode>& in) {
  std::lock_guard<std::mutex> g(table_mu);
  in->open_handles++;
  open_handles++;
}

void KvfsFs::Impl::DropHandle(const std::shared_ptr<Inode>& in) {
  std::lock_guard<std::mutex> g(table_mu);
  in->open_handles--;
  open_handles--;
  MaybeEraseLocked(in);
}

void KvfsFs::Impl::MarkUnlinked(uint64_t ino, uint64_t parent, const std::string& name, bool if_gone) {
  if (ino == 0) return;
  auto in = Get(ino);
  if (!in) return;
  std::lock_guard<std::mutex> g(in->mu);
  if (if_gone && !store->GetInode(ino).status().IsNotFound()) return;
  in->unlinked = true;
  in->last_attr.nlink = 0;
  if (!in->renumbered) {
    in->lost_parent = parent;
    in->lost_name = name;
  }
}

std::string KvfsFs::Impl::PathOf(uint64_t ino) {
  std::vector<std::string> parts;
  for (int depth = 0; ino != kRootIno && depth < 256; ++depth) {
    auto n = store->GetInode(ino);
    if (!n.ok()) return "(unlinked)";
    parts.push_back(n->name);
    ino = n->parent;
  }
  std::string p;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) p += "/" + *it;
  return p.empty() ? "/" : p;
}

void KvfsFs::Impl::QueueInval(uint64_t ino) {
  std::lock_guard<std::mutex> g(nq_mu);
  nq.push_back(Notice{ino, 0, {}});
  nq_cv.notify_one();
}

void KvfsFs::Impl::OnPeerChanges(const PeerChanges& c) {
  // Called by the store with peers' changes applied to the index: on the peer thread, or on a FUSE
  // worker whose Store::PinRecord of a peer's record polled that peer (engine/peer_holds.cc), possibly
  // under the mu of an inode these changes name (an O_RDWR open of a file the peer just rewrote:
  // before, that worker waited on its own lock for good, and the peer tailer with it). So nothing here
  // takes an inode's mu: everything goes to the notifier thread, in this order.
  std::lock_guard<std::mutex> g(nq_mu);
  // A staged file whose name a peer's PUT took (detached in the index): its commit takes the name back
  // and must drop the kernel's dentry then (Commit), and its attributes are no longer cacheable.
  for (const auto& n : c.names) {
    if (n.old_ino != 0) nq.push_back(Notice{n.old_ino, 0, {}, false, /*detach=*/true});
  }
  // The name's dentry (positive, or a negative entry of an absent name), then the parent directory's
  // attributes (mtime, nlink): the kernel drops those itself only when it had a dentry of the name.
  std::vector<uint64_t> parents;
  for (const auto& n : c.names) {
    nq.push_back(Notice{n.old_ino, n.parent, n.name});
    if (std::find(parents.begin(), parents.end(), n.parent) == parents.end()) parents.push_back(n.parent);
  }
  for (uint64_t ino : c.inodes) nq.push_back(Notice{ino, 0, {}});
  for (uint64_t p : parents) nq.push_back(Notice{p, 0, {}, /*attrs_only=*/true});
  nq_cv.notify_one();
}

uint64_t KvfsFs::Impl::MissSeq() {
  std::lock_guard<std::mutex> g(miss_mu);
  return miss_seq;
}

bool KvfsFs::Impl::RecordMissLocked(uint64_t ino, uint64_t parent, const std::string& name) {
  {
    std::lock_guard<std::mutex> g(miss_mu);
    misses.push_back(Miss{++miss_seq, ino, parent, name});
    if (misses.size() > kMaxMisses) misses.pop_front();
  }
  if (ino == 0) return false;
  auto it = table.find(ino);
  return it != table.end() && it->second->nlookup > 0;
}

void KvfsFs::Impl::MissedSince(uint64_t seq0, uint64_t ino, uint64_t parent, const std::string& name,
                               bool* name_missed, bool* attrs_missed) {
  *name_missed = *attrs_missed = false;
  std::lock_guard<std::mutex> g(miss_mu);
  if (seq0 >= miss_seq) return;
  if (misses.empty() || misses.front().seq > seq0 + 1) {  // some misses after seq0 are forgotten
    *name_missed = *attrs_missed = true;
    return;
  }
  for (auto it = misses.rbegin(); it != misses.rend() && it->seq > seq0; ++it) {
    if (it->name.empty() ? it->ino == ino : (it->parent == parent && it->name == name)) {
      if (!it->name.empty()) *name_missed = true;
      *attrs_missed = true;
    }
  }
}

void KvfsFs::Impl::NotifierMain() {
  std::unique_lock<std::mutex> lk(nq_mu);
  for (;;) {
    // Retries that are due come first; otherwise wait for a notice or the next retry's due time.
    auto now = std::chrono::steady_clock::now();
    auto due = std::chrono::steady_clock::time_point::max();
    for (auto& r : inval_retry_q) due = std::min(due, r.due);
    if (!nq_stop && nq.empty() && due > now) {
      if (due == std::chrono::steady_clock::time_point::max()) {
        nq_cv.wait(lk, [&] { return nq_stop || !nq.empty() || !inval_retry_q.empty(); });
      } else {
        nq_cv.wait_until(lk, due);
      }
      continue;
    }
    if (nq_stop) return;
    Notice n;
    int tries = 0;
    bool retry = false;
    if (due <= now) {
      auto it = std::find_if(inval_retry_q.begin(), inval_retry_q.end(), [&](auto& r) { return r.due <= now; });
      n.ino = it->ino;
      n.attrs_only = it->attrs_only;
      tries = it->tries;
      retry = true;
      inval_retry_q.erase(it);
    } else {
      n = std::move(nq.front());
      nq.pop_front();
    }
    lk.unlock();
    if (n.detach) {
      if (auto in = Get(n.ino)) {
        std::lock_guard<std::mutex> ig(in->mu);
        if (in->primary || !in->writing.empty()) in->detached = true;
      }
      lk.lock();
      continue;
    }
    fuse_session* se = session.get();
    bool again = false;
    if (se && !n.name.empty()) {
      if (opts.test_notify_delay_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(opts.test_notify_delay_ms));  // TEST ONLY
      }
      // The kernel takes the parent directory's lock for this: never call it from a FUSE worker.
      inval_calls++;
      int r = fuse_lowlevel_notify_inval_entry(se, n.parent, n.name.data(), n.name.size());
      if (r == -ENOENT) {
        inval_missed++;
        std::lock_guard<std::mutex> g(table_mu);
        RecordMissLocked(0, n.parent, n.name);
      } else if (r != 0) {
        spdlog::debug("inval_entry {}/{}: {}", n.parent, n.name, strerror(-r));
      }
      // Checked again under the inode's mu: a magic-link reopen may have given the name back to it
      // since (UndoRenumber); marked anyway, its next version was discarded at its commit (the
      // close_order_test truncate sequence read the in-place version's zeros, 1 run in 3, 2026-12-07).
      if (n.ino != 0 && store->GetInode(n.ino).status().IsNotFound()) MarkUnlinked(n.ino, n.parent, n.name, /*if_gone=*/true);
    } else if (se && n.ino != 0) {
      inval_calls++;
      if (retry) inval_retries++;
      int r = fuse_lowlevel_notify_inval_inode(se, n.ino, n.attrs_only ? -1 : 0, 0);
      if (r == -ENOENT) {
        inval_missed++;
        std::lock_guard<std::mutex> g(table_mu);
        // A reply holding a lookup reference of it is on its way to the kernel: invalidate again later.
        again = RecordMissLocked(n.ino, 0, {}) && tries < 5;
      } else if (r != 0) {
        spdlog::debug("inval_inode {}: {}", n.ino, strerror(-r));
      }
    }
    lk.lock();
    if (again) {
      if (inval_retry_q.size() >= kMaxInvalRetries) {
        spdlog::warn("inval_inode retries full: dropping the retry of inode {}", inval_retry_q.front().ino);
        inval_retry_q.pop_front();
      }
      // 10, 40, 160, 640, 2560 ms after the miss: the kernel installs a reply right after reading it.
      inval_retry_q.push_back(InvalRetry{std::chrono::steady_clock::now() + std::chrono::milliseconds(10 << (2 * tries)),
                                         n.ino, n.attrs_only, tries + 1});
    }
  }
}

void KvfsFs::Impl::VersionAttr(Version& v, Attr* a) {
  std::shared_lock<std::shared_mutex> g(v.mu);
  *a = v.attr;
  a->size = v.data.size();
}

bool KvfsFs::Impl::StagedAttr(Inode& in, Attr* out) {
  std::shared_ptr<Version> v = in.primary;
  for (auto& w : in.writing) {
    if (w->superseded) continue;
    if (!v || w->seq > v->seq) v = w;
  }
  if (!v) return false;
  VersionAttr(*v, out);
  out->ino = in.ino;
  if (in.unlinked) out->nlink = 0;
  return true;
}

bool KvfsFs::Impl::StagedCacheable(Inode& in) {
  if (in.contended || in.hidden_ever || in.unlinked || in.renumbered || in.detached || !in.primary ||
      in.primary->hidden) {
    return false;
  }
  for (const auto& w : in.writing) {
    if (w != in.primary) return false;
  }
  in.staged_cached = true;
  return true;
}

Status KvfsFs::Impl::GetAttr(uint64_t ino, Attr* out, double* timeout, ExtentMapRef* ext) {
  auto in = Get(ino);
  if (in) {
    std::lock_guard<std::mutex> g(in->mu);
    if (StagedAttr(*in, out)) {
      out->atime_ns = std::max(out->atime_ns, store->PendingAtime(ino));
      in->last_attr = *out;
      *timeout = StagedCacheable(*in) ? opts.attr_timeout_s : 0;
      return Status::OK();
    }
  }
  auto n = store->GetInode(ino);
  if (!n.ok()) {
    if (in && n.status().IsNotFound()) {
      // Gone from the index but still open here (unlinked, or replaced by a peer): fstat answers
      // the last attributes, as a local fs does for an open unlinked file.
      uint64_t handles;
      {
        std::lock_guard<std::mutex> tg(table_mu);
        handles = in->open_handles;
      }
      std::lock_guard<std::mutex> g(in->mu);
      if ((in->unlinked || handles > 0) && in->last_attr.ino == ino) {
        *out = in->last_attr;
        out->nlink = 0;
        *timeout = 0;
        return Status::OK();
      }
    }
    return n.status();
  }
  *out = n->attr;
  out->ino = ino;
  out->atime_ns = std::max(out->atime_ns, store->PendingAtime(ino));
  if (ext) *ext = n->extents;
  bool cacheable = S_ISDIR(out->mode) || S_ISLNK(out->mode) || n->committed;
  if (in) {
    std::lock_guard<std::mutex> g(in->mu);
    in->last_attr = *out;
    in->last_loc = n->location;
    in->last_ext = n->extents;
    in->last_committed = n->committed;
    // A hidden version is being written: its writer's lseek(SEEK_END)/append must ask again.
    if (!in->writing.empty()) cacheable = false;
  }
  *timeout = cacheable ? opts.attr_timeout_s : 0;
  return Status::OK();
}

bool KvfsFs::Impl::ReplyEntry(fuse_req_t req, const Node& n, bool fresh_only, uint64_t seq0, uint32_t test_delay_ms) {
  auto in = Ref(n.attr.ino, n.attr.mode);
  // After Ref: a miss recorded before it is seen here, one after it is retried by the notifier.
  bool name_missed = false, attrs_missed = false;
  if (seq0 != UINT64_MAX) MissedSince(seq0, n.attr.ino, n.parent, n.name, &name_missed, &attrs_missed);
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = n.attr.ino;
  e.generation = 0;
  Attr a = n.attr;
  a.atime_ns = std::max(a.atime_ns, store->PendingAtime(a.ino));
  double at = (S_ISDIR(a.mode) || S_ISLNK(a.mode) || n.committed) ? opts.attr_timeout_s : 0;
  bool staged = false;
  {
    std::unique_lock<std::mutex> g(in->mu);
    if (StagedAttr(*in, &a)) {
      staged = true;
      a.atime_ns = std::max(a.atime_ns, store->PendingAtime(a.ino));
      at = StagedCacheable(*in) ? opts.attr_timeout_s : 0;
    } else if (fresh_only && S_ISREG(n.attr.mode) && !n.committed) {
      g.unlock();
      Forget(n.attr.ino, 1);
      return false;
    }
    in->last_attr = a;
    in->last_loc = n.location;
    in->last_ext = n.extents;
    in->last_committed = n.committed;
    if (S_ISREG(n.attr.mode) && !in->unlinked) {
      in->lost_parent = n.parent;
      in->lost_name = n.name;
    }
  }
  FillStat(a, &e.attr, staged ? ExtentMapRef{} : n.extents);
  e.attr_timeout = attrs_missed ? 0 : at;
  e.entry_timeout = name_missed ? 0 : opts.entry_timeout_s;
  if (attrs_missed) lookups_uncached++;
  if (test_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(test_delay_ms));  // TEST ONLY
  fuse_reply_entry(req, &e);
  return true;
}

void KvfsFs::Impl::ReplyNegative(fuse_req_t req) {
  // ino 0 = a negative entry the kernel caches for entry_timeout (connectors probe absent keys a lot).
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = 0;
  e.entry_timeout = opts.negative_timeout_s;
  fuse_reply_entry(req, &e);
}

}  // namespace kvfs
