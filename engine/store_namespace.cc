// Namespace mutations (store.h "namespace"): Mkdir, Rmdir, Symlink, Mknod, Unlink, Rename, SetAttr, xattrs and
// Renumber. Each applies the change to the index and enqueues its journal entry (group_commit.cc);
// lookups and listings are inline in store_impl.h and go straight to the index.
//
// Callers: the FUSE layer. Thread safety: every method takes ns_mu_ for the index change and its
// enqueue together (journal order = index order); Renumber also takes hits_mu_ (under ns_mu_).
// Invariants: staged files journal nothing until their PUT (CommitFile); shadowing_ tracks staged files
// that replaced a committed name, so removing them journals the UNLINK peers need.
#include "engine/store_impl.h"

#include <tuple>

namespace kvfs {

Result<Node> StoreImpl::Mkdir(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid,
                              uint32_t gid) {
  KVFS_RETURN_IF_ERROR(Fenced());
  std::lock_guard<std::mutex> l(ns_mu_);
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  const uint64_t stamp = hlc_.Now();
  auto n = index_->Mkdir(parent, name, mode, uid, gid, stamp);
  if (!n.ok()) return n;
  EnqueueLocked(JournalEntry::Mkdir(*path, ToEntryAttrs(n->attr), stamp));
  return n;
}

Status StoreImpl::Rmdir(uint64_t parent, std::string_view name) {
  KVFS_RETURN_IF_ERROR(Fenced());
  std::lock_guard<std::mutex> l(ns_mu_);
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  KVFS_RETURN_IF_ERROR(index_->Rmdir(parent, name));
  EnqueueLocked(JournalEntry::Rmdir(*path, hlc_.Now()));
  return Status::OK();
}

Result<Node> StoreImpl::Symlink(uint64_t parent, std::string_view name, std::string_view target, uint32_t uid,
                                uint32_t gid) {
  KVFS_RETURN_IF_ERROR(Fenced());
  std::lock_guard<std::mutex> l(ns_mu_);
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  const uint64_t stamp = hlc_.Now();
  auto n = index_->Symlink(parent, name, target, uid, gid, stamp);
  if (!n.ok()) return n;
  EnqueueLocked(JournalEntry::Symlink(*path, std::string(target), ToEntryAttrs(n->attr), stamp));
  return n;
}

Result<Node> StoreImpl::Mknod(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev, uint32_t uid,
                              uint32_t gid) {
  KVFS_RETURN_IF_ERROR(Fenced());
  std::lock_guard<std::mutex> l(ns_mu_);
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  const uint64_t stamp = hlc_.Now();
  auto n = index_->Mknod(parent, name, mode, rdev, uid, gid, stamp);
  if (!n.ok()) return n;
  EnqueueLocked(JournalEntry::Special(*path, ToEntryAttrs(n->attr), n->attr.rdev, stamp));
  return n;
}

Status StoreImpl::Unlink(uint64_t parent, std::string_view name, uint64_t* ino_out) {
  KVFS_RETURN_IF_ERROR(Fenced());
  std::lock_guard<std::mutex> l(ns_mu_);
  auto existing = index_->Lookup(parent, name);
  if (!existing.ok()) return existing.status();
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  const bool journaled = existing->committed || shadowing_.count(existing->attr.ino) != 0;
  const uint64_t stamp = journaled ? hlc_.Now() : 0;
  auto removed = index_->Unlink(parent, name, stamp);
  if (!removed.ok()) return removed.status();
  shadowing_.erase(removed->attr.ino);
  if (ino_out) *ino_out = removed->attr.ino;
  if (journaled) EnqueueLocked(JournalEntry::Unlink(*path, stamp));
  return Status::OK();
}

Status StoreImpl::DropStaged(uint64_t ino) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto n = index_->GetInode(ino);
  if (!n.ok()) return n.status();
  if (n->committed || !S_ISREG(n->attr.mode)) return Status::InvalidArgument("not a staged file");
  auto existing = index_->Lookup(n->parent, n->name);
  if (!existing.ok()) return existing.status();
  if (existing->attr.ino != ino) return Status::NotFound("staged file has no name");
  auto path = PathOf(n->parent, n->name);
  if (!path.ok()) return path.status();
  const bool journaled = shadowing_.count(ino) != 0;
  const uint64_t stamp = journaled ? hlc_.Now() : 0;
  auto removed = index_->Unlink(n->parent, n->name, stamp);
  if (!removed.ok()) return removed.status();
  shadowing_.erase(ino);
  if (journaled) EnqueueLocked(JournalEntry::Unlink(*path, stamp));
  return Status::OK();
}

Status StoreImpl::Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                         std::string_view new_name, unsigned flags, uint64_t* replaced_ino) {
  KVFS_RETURN_IF_ERROR(Fenced());
  std::lock_guard<std::mutex> l(ns_mu_);
  if (replaced_ino) *replaced_ino = 0;
  if (flags & RENAME_EXCHANGE) {
    if (flags != RENAME_EXCHANGE) return Status::InvalidArgument("RENAME_EXCHANGE with other flags");
    return ExchangeLocked(parent, name, new_parent, new_name);
  }
  auto src = index_->Lookup(parent, name);
  if (!src.ok()) return src.status();
  auto from = PathOf(parent, name);
  if (!from.ok()) return from.status();
  auto to = PathOf(new_parent, new_name);
  if (!to.ok()) return to.status();
  // A directory is journaled as RENAME (its entries are journaled by path), a committed source as its
  // binding under the new name (below); a staged file is not in the journal yet: its later PUT goes
  // under the new name.
  const bool journaled = src->committed || S_ISDIR(src->attr.mode);
  const uint64_t stamp = hlc_.Now();
  auto r = index_->Rename(parent, name, new_parent, new_name, flags, journaled ? stamp : 0);
  if (!r.ok()) return r.status();
  if (r->replaced && replaced_ino) *replaced_ino = r->replaced_node.attr.ino;
  const uint64_t src_ino = src->attr.ino;
  if (!r->replaced && r->moved.parent == parent && r->moved.name == name) {
    return Status::OK();  // renamed onto itself: nothing changed
  }
  // Does the journal hold a file at `to` that this rename removes? A committed destination, or a staged
  // one that itself replaced a committed file there.
  bool dst_in_journal = false;
  if (r->replaced) {
    const uint64_t d = r->replaced_node.attr.ino;
    dst_in_journal = r->replaced_node.committed || shadowing_.count(d) != 0;
    shadowing_.erase(d);
  }
  if (journaled && S_ISDIR(src->attr.mode)) {
    EnqueueLocked(JournalEntry::Rename(*from, *to, src->location, stamp));
    // A peer's entry older than this rename, still on its way here, follows it (dir_renames.h).
    dir_renames_.Note(*from, *to, stamp, opts_.node_id);
    return Status::OK();
  }
  if (journaled) {
    // A committed file, symlink or special file: its binding under the new name (its content and
    // xattrs) and an UNLINK of the old one, at the rename's stamp (ContentBinding). A RENAME entry
    // needs its source to be there when it is applied: a node replaying (or joining) after the
    // source's creator checkpointed has no source (the creator's snapshot exports only the names it
    // bound, and this node now binds both), so a peer's file renamed here was lost unless it was a
    // single record (its location alone, without xattrs), and symlinks and extent files were lost.
    auto put = ContentBinding(src_ino, *to, stamp);
    if (!put.ok()) return put.status();
    EnqueueLocked(JournalEntry::Unlink(*from, stamp));
    EnqueueLocked(std::move(*put));
    return Status::OK();
  }
  // A staged source that had replaced a committed file at `from` moves away: that name is gone now, so
  // the file the journal still has there is unlinked.
  if (shadowing_.erase(src_ino) != 0) EnqueueLocked(JournalEntry::Unlink(*from, stamp));
  // A staged source replacing a committed destination journals nothing now: its PUT under the new name
  // (at commit, a few ms later) replaces the destination for peers in one step. Journaling an UNLINK
  // here would show peers an ENOENT window on every temp + rename publish (docs/design.md §11 case 2). If the
  // staged file is discarded instead (unlinked or renamed away before its commit), that UNLINK is
  // journaled then (shadowing_).
  if (dst_in_journal) shadowing_.insert(src_ino);
  return Status::OK();
}

// renameat2(RENAME_EXCHANGE) of two non-directories (regular files, symlinks, special files; with a
// directory on either side: ExchangeDirLocked). The index swaps the two dentries: each
// inode keeps its number, so open handles, a pending commit and the kernel's pages follow their file.
//
// The journal records what each name holds *now*, as bindings at the exchange's stamp (ContentBinding:
// a PUT with the content and xattrs, or a SYMLINK for a symlink or special file), never an EXCHANGE of
// two bare paths. A binding replays the same in any order and on any node (each name's last writer
// wins), and this node's snapshot exports both names as its own; an EXCHANGE entry (format.md, still
// applied when read) did neither: the names' creator dropped them from its next snapshot (a peer's
// exchange re-bound them), and a replay that met a later write to one of them first skipped it.
// Directories have no content a binding could carry (their files are bound by path by whichever node
// wrote them): an exchange with one is a record instead (ExchangeDirLocked).
//
// A staged side S (not in the journal yet) gets its PUT under its new name at commit. So with one
// journaled side X: X's binding under S's old name, and an UNLINK of the name X left (the journal's file
// there is gone until S commits; S then shadows nothing). Two staged sides journal nothing and swap
// whether the journal has a file under their names (shadowing_).
Status StoreImpl::ExchangeLocked(uint64_t parent, std::string_view name, uint64_t new_parent,
                                 std::string_view new_name) {
  auto a = index_->Lookup(parent, name);
  if (!a.ok()) return a.status();
  auto b = index_->Lookup(new_parent, new_name);
  if (!b.ok()) return b.status();
  auto pa = PathOf(parent, name);
  if (!pa.ok()) return pa.status();
  auto pb = PathOf(new_parent, new_name);
  if (!pb.ok()) return pb.status();
  if (S_ISDIR(a->attr.mode) || S_ISDIR(b->attr.mode)) return ExchangeDirLocked(parent, name, new_parent, new_name, *a, *b, *pa, *pb);
  const bool ja = a->committed, jb = b->committed;
  const uint64_t stamp = hlc_.Now();
  auto r = index_->Exchange(parent, name, new_parent, new_name, ja || jb ? stamp : 0);
  if (!r.ok()) return r.status();
  const uint64_t ia = a->attr.ino, ib = b->attr.ino;
  if (ia == ib) return Status::OK();
  if (!ja && !jb) {
    const bool sa = shadowing_.erase(ia) != 0, sb = shadowing_.erase(ib) != 0;
    if (sa) shadowing_.insert(ib);
    if (sb) shadowing_.insert(ia);
    return Status::OK();
  }
  // Built before anything is enqueued: a failure leaves the journal without half an exchange. Each
  // journaled side is bound under the other's name; a staged side's old name is unlinked there.
  std::vector<JournalEntry> entries;
  for (const auto& [journaled, ino, to] : {std::tuple{ja, ia, &*pb}, std::tuple{jb, ib, &*pa}}) {
    if (!journaled) {
      entries.push_back(JournalEntry::Unlink(*to, stamp));
      continue;
    }
    auto e = ContentBinding(ino, *to, stamp);
    if (!e.ok()) return e.status();
    entries.push_back(std::move(*e));
  }
  if (!ja || !jb) shadowing_.erase(ja ? ib : ia);
  for (auto& e : entries) EnqueueLocked(std::move(e));
  return Status::OK();
}

// renameat2(RENAME_EXCHANGE) with a directory on at least one side (docs/semantics.md §2). A directory has
// no content a binding could carry (the files below it are bound by path by the nodes that wrote them), so
// the exchange is journaled as one EXCHANGE entry and kept as one *record* (index_db.h DirRenameRecord,
// exchange set) at its stamp, like a directory rename: every name keeps its binding, a peer's entry older
// than the exchange under either path follows its directory to the other path (engine/dir_renames.h live,
// index/dir_redirect.h in every rebuild), and an EXCHANGE entry whose record the index already holds (a
// snapshot that holds the record was applied: its names are swapped already) moves nothing.
//
// With a staged non-directory S on the other side (not in the journal yet, its PUT comes at its commit,
// under its new name), the directory D's move to S's name is a plain directory rename: journaled as the
// RENAME D -> S's name (after an UNLINK of that name if S replaced a committed file there: the journal's
// file there is gone), with a rename's record.
Status StoreImpl::ExchangeDirLocked(uint64_t parent, std::string_view name, uint64_t new_parent,
                                    std::string_view new_name, const Node& a, const Node& b, const std::string& pa,
                                    const std::string& pb) {
  const uint64_t stamp = hlc_.Now();
  auto r = index_->Exchange(parent, name, new_parent, new_name, stamp);
  if (!r.ok()) return r.status();
  if (a.attr.ino == b.attr.ino) return Status::OK();
  const Node* staged = nullptr;  // the staged non-directory side, if any
  const std::string* staged_path = nullptr;
  const std::string* dir_path = nullptr;
  if (!S_ISDIR(a.attr.mode) && !a.committed) staged = &a, staged_path = &pa, dir_path = &pb;
  if (!S_ISDIR(b.attr.mode) && !b.committed) staged = &b, staged_path = &pb, dir_path = &pa;
  if (staged == nullptr) {
    EnqueueLocked(JournalEntry::Exchange(pa, pb, stamp));
    // A peer's entry older than this exchange, still on its way here, follows it (dir_renames.h).
    dir_renames_.Note(pa, pb, stamp, opts_.node_id, /*exchange=*/true);
    return Status::OK();
  }
  // The staged file now has the directory's old name, where the journal has no file.
  if (shadowing_.erase(staged->attr.ino) != 0) EnqueueLocked(JournalEntry::Unlink(*staged_path, stamp));
  EnqueueLocked(JournalEntry::Rename(*dir_path, *staged_path, Location{}, stamp));
  dir_renames_.Note(*dir_path, *staged_path, stamp, opts_.node_id);
  return Status::OK();
}

// The journal entry binding `path` to what committed inode `ino` holds (Rename, ExchangeLocked): a PUT of its
// record or extent map with its xattrs (as BindLink and a snapshot write it), or a SYMLINK entry of a
// symlink or special file. Requires ns_mu_.
Result<JournalEntry> StoreImpl::ContentBinding(uint64_t ino, const std::string& path, uint64_t stamp) {
  auto n = index_->GetInode(ino);
  if (!n.ok()) return n.status();
  const EntryAttrs attrs = ToEntryAttrs(n->attr);
  if (IsSpecialFileMode(n->attr.mode)) return JournalEntry::Special(path, attrs, n->attr.rdev, stamp);
  if (S_ISLNK(n->attr.mode)) {
    auto target = index_->ReadLink(ino);
    if (!target.ok()) return target.status();
    return JournalEntry::Symlink(path, std::move(*target), attrs, stamp);
  }
  JournalEntry put = JournalEntry::Put(path, n->location, attrs, stamp);
  put.extents = n->extents;  // version 3 for an extent file
  if (n->extents) put.attrs.size = n->extents->size();
  auto xattrs = SortedXattrs(ino);
  if (!xattrs.ok()) return xattrs.status();
  put.xattrs = std::move(*xattrs);
  return put;
}

// The incarnation of a path for link claims (engine/link_arbiter.h): the binding its tombstone removed
// ("b<stamp>/<node>": the same on every node that removed or applied the removal of that binding, also
// when two nodes unlinked it at once), else the tombstone itself (an older index, a snapshot's), ""
// without one. Requires ns_mu_.
std::string StoreImpl::LinkIncarnationLocked(const std::string& path) {
  auto t = index_->GetTombstone(path);
  if (!t.ok()) return {};
  if (t->removed_stamp != 0) return "b" + std::to_string(t->removed_stamp) + "/" + t->removed_node;
  return std::to_string(t->stamp) + "/" + t->node;
}

// link(2) of a regular file (docs/semantics.md "link"). With claims on (the default), the new name is
// first claimed on the export (LinkArbiter): of several nodes linking one name before any has applied
// another's PUT, exactly one gets 0, the others EEXIST (after waiting, briefly, for the winner's PUT).
Result<Node> StoreImpl::Link(uint64_t ino, const Location* loc, const Attr* attr, uint64_t new_parent,
                             std::string_view new_name, const ExtentMapRef* ext) {
  KVFS_RETURN_IF_ERROR(Fenced());
  if (!arbiter_) return BindLink(ino, loc, attr, new_parent, new_name, ext, nullptr);
  for (int round = 0;; ++round) {
    std::string path, incarnation;
    {
      std::lock_guard<std::mutex> l(ns_mu_);
      auto existing = index_->Lookup(new_parent, new_name);
      if (existing.ok()) return Status::Exists("link: the new name exists");
      if (!existing.status().IsNotFound()) return existing.status();
      auto p = PathOf(new_parent, new_name);
      if (!p.ok()) return p.status();
      path = std::move(*p);
      incarnation = LinkIncarnationLocked(path);
    }
    auto claim = arbiter_->TryClaim(path, incarnation);
    if (!claim.ok()) return claim.status();
    if (!claim->won) {
      AwaitLinkedName(new_parent, new_name);
      return Status::Exists("link: " + path + " was claimed by another link(2)");
    }
    const LinkClaimCheck check{path, incarnation};
    auto r = BindLink(ino, loc, attr, new_parent, new_name, ext, &check);
    if (r.ok()) {
      arbiter_->Keep(claim->file);
      return r;
    }
    arbiter_->Release(claim->file);
    // The name was removed and its tombstone changed (or it moved) while we claimed: claim again.
    if (!r.status().IsBusy()) return r.status();
    if (round >= 3) return Status::Exists("link: the new name kept changing while it was claimed");
  }
}

// A lost claim: early peer polls until the winner's name is in the index, for at most kLinkLostWait
// (a group commit + an early poll, typically 20-70 ms), so that the loser's next open usually finds it.
// Short: the kernel holds the directory's lock over link(2), so every create in it waits too.
void StoreImpl::AwaitLinkedName(uint64_t parent, std::string_view name) {
  const auto until = std::chrono::steady_clock::now() + kLinkLostWait;
  for (;;) {
    {
      std::lock_guard<std::mutex> l(ns_mu_);
      if (index_->Lookup(parent, name).ok()) return;
    }
    if (std::chrono::steady_clock::now() >= until) return;
    if (tailer_) tailer_->RequestRefresh();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// link(2) as a second committed inode over the same record: an applied PUT of the new path with this
// node's stamp, so the index does exactly what replay and peers do with the journaled PUT (segment live
// bytes/records and segfiles count the record once per name, so it is dead space only when the last
// name goes). check: the claim taken for the new name (Busy if the name's path or incarnation changed
// since), or null without claims.
Result<Node> StoreImpl::BindLink(uint64_t ino, const Location* loc, const Attr* attr, uint64_t new_parent,
                                   std::string_view new_name, const ExtentMapRef* ext, const LinkClaimCheck* check) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto src = index_->GetInode(ino);
  if (!src.ok()) return src.status();
  if (!S_ISREG(src->attr.mode)) return Status::InvalidArgument("link of a non-regular file");
  Location l_loc;
  ExtentMapRef l_ext;  // the committed version's extent map (an extent file; l_loc is then empty)
  Attr a;
  if (loc != nullptr && attr != nullptr) {
    l_loc = *loc;
    if (ext != nullptr) l_ext = *ext;
    a = *attr;
  } else {
    if (!src->committed) return Status::InvalidArgument("link of a file with no committed content");
    l_loc = src->location;
    l_ext = src->extents;
    a = src->attr;
  }
  const std::vector<Location> records = ContentRecords(l_loc, l_ext);
  auto existing = index_->Lookup(new_parent, new_name);
  if (existing.ok()) return Status::Exists("link: the new name exists");
  if (!existing.status().IsNotFound()) return existing.status();
  auto path = PathOf(new_parent, new_name);
  if (!path.ok()) return path.status();
  if (check && (*path != check->path || LinkIncarnationLocked(*path) != check->incarnation)) {
    return Status::Busy("link: the new name changed while it was claimed");
  }
  if (evict_enabled_) {
    std::lock_guard<std::mutex> c(cap_mu_);
    for (const Location& rec : records) {
      if (OwnSegment(rec.segment) && dropped_own_.count(rec.segment)) {
        return Status::NotFound("link: the file's segment was evicted");
      }
    }
  }
  const uint64_t stamp = hlc_.Now();
  ApplyOp op;
  op.kind = ApplyOp::Kind::kPut;
  op.path = *path;
  op.location = l_loc;
  op.extents = l_ext;
  op.attr = a;
  op.attr.mode = S_IFREG | (a.mode & 07777);
  op.stamp = stamp;
  auto xattrs = SortedXattrs(ino);
  if (!xattrs.ok()) return xattrs.status();
  op.xattrs = *xattrs;
  auto r = index_->ApplyBatch(std::span<const ApplyOp>(&op, 1), opts_.node_id);
  if (!r.ok()) return r.status();
  if (r->changed.empty() || r->changed.back().new_ino == 0) {
    return Status::NotFound("link: the file's segment is gone");  // a dropped segment: the PUT was skipped
  }
  auto n = index_->GetInode(r->changed.back().new_ino);
  if (!n.ok()) return n.status();
  JournalEntry put = JournalEntry::Put(*path, l_loc, ToEntryAttrs(n->attr), stamp);
  put.xattrs = std::move(*xattrs);
  put.extents = n->extents;  // version 3 for an extent file
  EnqueueLocked(std::move(put));
  if (track_hits_) {
    // Reinsertion follows the newest name of the record (a publish unlinks the temp name next).
    std::lock_guard<std::mutex> h(hits_mu_);
    for (const Location& rec : records) {
      if (OwnSegment(rec.segment)) loc_ino_[rec.segment][rec.record_offset] = n->attr.ino;
    }
  }
  return n;
}

Result<Attr> StoreImpl::SetAttr(uint64_t ino, const Attr& attr, uint32_t mask) {
  KVFS_RETURN_IF_ERROR(Fenced());
  return SetAttrStamped(ino, attr, mask & ~static_cast<uint32_t>(kSetAtimeOfRead), 0);
}

Result<Attr> StoreImpl::SetAttrStamped(uint64_t ino, const Attr& attr, uint32_t mask, uint64_t given) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto n = index_->GetInode(ino);
  if (!n.ok()) return n.status();
  const bool journaled = n->committed || S_ISDIR(n->attr.mode);
  if ((mask & kSetAtimeOfRead) && !journaled) return Status::Exists("not committed");  // a new version
  const uint64_t stamp = given ? given : journaled ? hlc_.Now() : 0;
  auto a = index_->SetAttr(ino, attr, mask, stamp);
  if (a.ok() && (mask & kSetAtime) && atime_pending_.load(std::memory_order_acquire) != 0) {
    // An explicit atime (utimensat, or FlushAtimes itself) replaces a read's note not journaled yet.
    std::lock_guard<std::mutex> g(atime_mu_);
    atime_notes_.erase(ino);
    atime_pending_.store(atime_notes_.size(), std::memory_order_release);
  }
  if (!a.ok() || !journaled || ino == kRootIno) return a;
  auto path = index_->FullPath(ino);
  if (path.ok()) EnqueueLocked(JournalEntry::Setattr(*path, ToEntryAttrs(*a), mask | kSetAttrsWhole, stamp));  // *a: whole set
  return a;
}

namespace {
// relatime (mount(8)): a read updates atime when atime is not after mtime or ctime, or is a day old.
constexpr int64_t kRelatimeAgeNs = 24ll * 3600 * 1000 * 1000 * 1000;
constexpr auto kAtimeFlushDelay = std::chrono::seconds(1);
}  // namespace

bool StoreImpl::NoteRead(uint64_t ino, const Attr& a, bool committed) {
  if (!opts_.atime || !S_ISREG(a.mode)) return false;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  if (a.atime_ns > a.mtime_ns && a.atime_ns > a.ctime_ns && now - a.atime_ns < kRelatimeAgeNs) return false;
  std::lock_guard<std::mutex> l(atime_mu_);
  if (atime_notes_.empty()) atime_oldest_ = std::chrono::steady_clock::now();
  // A second read before the flush changes nothing under relatime (the first made atime > mtime).
  if (!atime_notes_.try_emplace(ino, AtimeNote{now, committed ? hlc_.Now() : 0}).second) return false;
  atime_pending_.store(atime_notes_.size(), std::memory_order_release);
  return true;
}

int64_t StoreImpl::PendingAtime(uint64_t ino) {
  if (atime_pending_.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard<std::mutex> l(atime_mu_);
  auto it = atime_notes_.find(ino);
  return it == atime_notes_.end() ? 0 : it->second.atime_ns;
}

// Journals the pending notes: SETATTR of atime alone (the dentry's stamp, which decides between
// versions of a name, is untouched; ctime too). The notes stay answerable by PendingAtime until their
// SetAttr is in the index. A file unlinked or replaced since its read has nothing left to update.
void StoreImpl::FlushAtimes(bool all) {
  std::vector<std::pair<uint64_t, AtimeNote>> notes;
  {
    std::lock_guard<std::mutex> l(atime_mu_);
    if (atime_notes_.empty()) return;
    if (!all && std::chrono::steady_clock::now() - atime_oldest_ < kAtimeFlushDelay) return;
    notes.assign(atime_notes_.begin(), atime_notes_.end());
  }
  uint64_t done = 0;
  for (const auto& [ino, t] : notes) {
    Attr a;
    a.atime_ns = t.atime_ns;
    auto r = SetAttrStamped(ino, a, kSetAtime | kSetAtimeOfRead, t.stamp);
    if (r.ok()) {
      done++;
    } else if (!r.status().IsNotFound() && !r.status().IsExists()) {  // not: gone, or changed since the read
      LogLimited(spdlog::level::warn, "atime-flush", "kvfs: atime of inode {}: {}", ino, r.status().ToString());
    }
  }
  atime_updates_ += done;
  std::lock_guard<std::mutex> l(atime_mu_);
  for (const auto& [ino, t] : notes) {
    auto it = atime_notes_.find(ino);
    if (it != atime_notes_.end() && it->second.stamp == t.stamp && it->second.atime_ns == t.atime_ns) atime_notes_.erase(it);
  }
  atime_oldest_ = std::chrono::steady_clock::now();  // later notes: at most one more delay
  atime_pending_.store(atime_notes_.size(), std::memory_order_release);
}

// A staged file's xattrs are journaled with its PUT (the PUT carries the whole set), not one by one: an
// XATTR entry for a path peers do not have yet (or still bind to the file it replaces) would be lost or
// land on the wrong file (breaker-1 item 4).
bool StoreImpl::XattrJournaled(uint64_t ino) {
  auto n = index_->GetInode(ino);
  return ino != kRootIno && n.ok() && (n->committed || !S_ISREG(n->attr.mode));
}

Status StoreImpl::SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags) {
  KVFS_RETURN_IF_ERROR(Fenced());
  std::lock_guard<std::mutex> l(ns_mu_);
  const uint64_t stamp = hlc_.Now();
  KVFS_RETURN_IF_ERROR(index_->SetXattr(ino, name, value, flags, stamp));
  auto path = index_->FullPath(ino);
  if (path.ok() && XattrJournaled(ino)) {
    EnqueueLocked(JournalEntry::Xattr(*path, std::string(name), std::string(value), false, stamp));
  }
  return Status::OK();
}

Status StoreImpl::RemoveXattr(uint64_t ino, std::string_view name) {
  KVFS_RETURN_IF_ERROR(Fenced());
  std::lock_guard<std::mutex> l(ns_mu_);
  const uint64_t stamp = hlc_.Now();
  KVFS_RETURN_IF_ERROR(index_->RemoveXattr(ino, name, stamp));
  auto path = index_->FullPath(ino);
  if (path.ok() && XattrJournaled(ino)) EnqueueLocked(JournalEntry::Xattr(*path, std::string(name), "", true, stamp));
  return Status::OK();
}

Result<Node> StoreImpl::Renumber(uint64_t ino, uint64_t to) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto n = index_->Renumber(ino, to);
  if (!n.ok()) return n.status();
  if (atime_pending_.load(std::memory_order_acquire) != 0) {  // a read's note follows the file
    std::lock_guard<std::mutex> g(atime_mu_);
    auto it = atime_notes_.find(ino);
    if (it != atime_notes_.end()) {
      const AtimeNote note = it->second;
      atime_notes_.erase(it);
      atime_notes_[n->attr.ino] = note;
    }
  }
  if (track_hits_) {
    std::lock_guard<std::mutex> h(hits_mu_);
    for (const Location& loc : ContentRecords(n->location, n->extents)) {
      if (!OwnSegment(loc.segment)) continue;
      auto it = loc_ino_.find(loc.segment);
      if (it != loc_ino_.end()) {
        auto x = it->second.find(loc.record_offset);
        if (x != it->second.end() && x->second == ino) x->second = n->attr.ino;
      }
    }
  }
  return n;
}

}  // namespace kvfs
