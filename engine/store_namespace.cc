// Namespace mutations (store.h "namespace"): Mkdir, Rmdir, Symlink, Unlink, Rename, SetAttr, xattrs and
// Renumber. Each applies the change to the index and enqueues its journal entry (group_commit.cc);
// lookups and listings are inline in store_impl.h and go straight to the index.
//
// Callers: the FUSE layer. Thread safety: every method takes ns_mu_ for the index change and its
// enqueue together (journal order = index order); Renumber also takes hits_mu_ (under ns_mu_).
// Invariants: staged files journal nothing until their PUT (CommitFile); shadowing_ tracks staged files
// that replaced a committed name, so removing them journals the UNLINK peers need.
#include "engine/store_impl.h"

namespace kvfs {

Result<Node> StoreImpl::Mkdir(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid,
                              uint32_t gid) {
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
  std::lock_guard<std::mutex> l(ns_mu_);
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  KVFS_RETURN_IF_ERROR(index_->Rmdir(parent, name));
  EnqueueLocked(JournalEntry::Rmdir(*path, hlc_.Now()));
  return Status::OK();
}

Result<Node> StoreImpl::Symlink(uint64_t parent, std::string_view name, std::string_view target, uint32_t uid,
                                uint32_t gid) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto path = PathOf(parent, name);
  if (!path.ok()) return path.status();
  const uint64_t stamp = hlc_.Now();
  auto n = index_->Symlink(parent, name, target, uid, gid, stamp);
  if (!n.ok()) return n;
  EnqueueLocked(JournalEntry::Symlink(*path, std::string(target), ToEntryAttrs(n->attr), stamp));
  return n;
}

Status StoreImpl::Unlink(uint64_t parent, std::string_view name, uint64_t* ino_out) {
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
  std::lock_guard<std::mutex> l(ns_mu_);
  if (replaced_ino) *replaced_ino = 0;
  auto src = index_->Lookup(parent, name);
  if (!src.ok()) return src.status();
  auto from = PathOf(parent, name);
  if (!from.ok()) return from.status();
  auto to = PathOf(new_parent, new_name);
  if (!to.ok()) return to.status();
  // A committed source (or a directory: its entries are journaled by path) is journaled as RENAME; a
  // staged file is not in the journal yet: its later PUT goes under the new name.
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
  if (journaled) {
    EnqueueLocked(JournalEntry::Rename(*from, *to, src->location, stamp));
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

Result<Attr> StoreImpl::SetAttr(uint64_t ino, const Attr& attr, uint32_t mask) {
  std::lock_guard<std::mutex> l(ns_mu_);
  auto n = index_->GetInode(ino);
  if (!n.ok()) return n.status();
  const bool journaled = n->committed || S_ISDIR(n->attr.mode);
  const uint64_t stamp = journaled ? hlc_.Now() : 0;
  auto a = index_->SetAttr(ino, attr, mask, stamp);
  if (!a.ok() || !journaled || ino == kRootIno) return a;
  auto path = index_->FullPath(ino);
  if (path.ok()) EnqueueLocked(JournalEntry::Setattr(*path, ToEntryAttrs(*a), mask, stamp));
  return a;
}

// A staged file's xattrs are journaled with its PUT (the PUT carries the whole set), not one by one: an
// XATTR entry for a path peers do not have yet (or still bind to the file it replaces) would be lost or
// land on the wrong file (breaker-1 item 4).
bool StoreImpl::XattrJournaled(uint64_t ino) {
  auto n = index_->GetInode(ino);
  return ino != kRootIno && n.ok() && (n->committed || !S_ISREG(n->attr.mode));
}

Status StoreImpl::SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags) {
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
  const Location& loc = n->location;
  if (track_hits_ && !loc.empty() && OwnSegment(loc.segment)) {
    std::lock_guard<std::mutex> h(hits_mu_);
    auto it = loc_ino_.find(loc.segment);
    if (it != loc_ino_.end()) {
      auto x = it->second.find(loc.record_offset);
      if (x != it->second.end() && x->second == ino) x->second = n->attr.ino;
    }
  }
  return n;
}

}  // namespace kvfs
