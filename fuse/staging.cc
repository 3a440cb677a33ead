// KvfsFs::Impl, the staging budget (docs/design.md §4: "a FUSE worker never waits for memory"): RAM accounting
// of versions and spills of the version holding the most RAM to provisional records. Called by the
// write/truncate paths before they allocate (MakeRoom). Thread safety and invariants:
// fuse/kvfs_fs_impl.h.
#include "fuse/kvfs_fs_impl.h"

namespace kvfs {

void KvfsFs::Impl::AccountRam(Version& v, uint64_t cap_before) {
  uint64_t cap = v.data.capacity();
  staging.ram_bytes += static_cast<int64_t>(cap) - static_cast<int64_t>(cap_before);
  v.ram.store(cap);
}

Status KvfsFs::Impl::MakeRoom(uint64_t need) {
  const uint64_t budget = opts.staging_bytes;
  for (int round = 0; round < 64; ++round) {
    int64_t ram = staging.ram_bytes.load();
    if (ram < 0 || static_cast<uint64_t>(ram) + need <= budget) return Status::OK();
    std::shared_ptr<Version> victim = PickVictim();
    if (!victim) return Status::OK();
    Status s = Spill(*victim);
    victim->spilling.store(false);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

std::shared_ptr<Version> KvfsFs::Impl::PickVictim() {
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::shared_ptr<Version> best;
    uint64_t best_ram = 0;
    // Candidates a better one displaced: released after staging.mu (the last reference to a version
    // runs ~Version, which takes staging.mu).
    std::vector<std::shared_ptr<Version>> displaced;
    {
      std::lock_guard<std::mutex> g(staging.mu);
      for (auto& [p, w] : staging.versions) {
        uint64_t r = p->ram.load();
        if (r <= best_ram || p->spilling.load()) continue;
        if (auto v = w.lock()) {
          if (best) displaced.push_back(std::move(best));
          best = std::move(v);
          best_ram = r;
        }
      }
    }
    if (!best) return nullptr;
    bool expected = false;
    if (best->spilling.compare_exchange_strong(expected, true)) return best;
  }
  return nullptr;
}

Status KvfsFs::Impl::Spill(Version& v) {
  // io_mu (taken before mu, as Commit does) only if free: it guards the version's last record.
  std::unique_lock<std::mutex> io(v.io_mu, std::try_to_lock);
  bool sealed;
  {
    std::shared_lock<std::shared_mutex> sg(v.mu);
    sealed = v.data.sealed();
  }
  if (sealed) {
    // Pages a close sealed (design.md §13 "Sealed closes") are appended first, as that close's record:
    // a spill would mix them with later writes. Not now if the version's I/O lock is taken (a FLUSH or
    // commit is running, and appends them): skipped, as a version being spilled.
    if (!io.owns_lock()) return Status::OK();
    KVFS_RETURN_IF_ERROR(FlushSealedLocked(v));
  }
  std::unique_lock<std::shared_mutex> g(v.mu);
  if (v.data.sealed()) return Status::OK();  // a close sealed pages meanwhile (io_mu was not ours): skipped
  if (io.owns_lock() && v.has_record && v.record_gen == v.gen && !v.record.empty() &&
      v.record.length == v.data.size()) {
    // Closed and recorded, waiting for its commit: its bytes are that record already. No I/O.
    uint64_t cap = v.data.capacity();
    v.data.SetBacking(v.record, v.data.size());
    AccountRam(v, cap);
    return Status::OK();
  }
  std::vector<size_t> ram = v.data.RamChunks();
  std::vector<size_t> pick;
  for (size_t i : ram) {
    if (v.data.ChunkFull(i)) pick.push_back(i);
  }
  if (pick.empty()) pick = ram;
  if (pick.empty()) return Status::OK();
  if (!std::all_of(pick.begin(), pick.end(), [&](size_t i) { return v.data.ChunkAllDirty(i); })) {
    // Some of them hold clean pages: bytes already on the export (a copy-on-write base, what an
    // earlier FLUSH appended: Rebase / RebaseWhole) or holes. Only the dirty pages are appended; the
    // clean ones become references to what they already are (no I/O), and the chunks leave RAM
    // (ChunkBuffer::SpillDirty). Before, every picked chunk was written whole: a version kept open
    // by reopens wrote each slot a second time (breaker F2: 24 MiB through the mount, 44 MiB to the
    // export). Every record the new references name is already held by the version (its base holds,
    // spills, flushed records, Version::held), as the chunks' bases were.
    std::vector<std::string_view> parts = v.data.DirtyPartsOf(pick);
    Location rec;
    if (!parts.empty()) {
      auto r = store->WriteProvisionalRecord(v.ino, parts);
      if (!r.ok()) {
        staging.spill_errors++;
        LogLimited(spdlog::level::warn, LogKey("fuse-spill", r.status()),
                   "spill of {} (inode {}, dirty pages of {} chunks): {}", PathOf(v.ino), v.ino, pick.size(),
                   ErrnoText(r.status()));
        return r.status();
      }
      rec = *r;
    }
    uint64_t cap = v.data.capacity();
    v.data.SpillDirty(pick, rec);
    AccountRam(v, cap);
    if (!rec.empty()) {
      v.spills.push_back(rec);
      v.spilled += rec.length;
      staging.spilled_bytes += static_cast<int64_t>(rec.length);
      staging.spilled_total += rec.length;
      staging.spills++;
    }
    return Status::OK();
  }
  std::vector<std::string_view> parts;
  parts.reserve(pick.size());
  for (size_t i : pick) parts.push_back(v.data.ChunkView(i));
  auto r = store->WriteProvisionalRecord(v.ino, parts);
  if (!r.ok()) {
    staging.spill_errors++;
    LogLimited(spdlog::level::warn, LogKey("fuse-spill", r.status()), "spill of {} (inode {}, {} chunks): {}",
               PathOf(v.ino), v.ino, pick.size(), ErrnoText(r.status()));
    return r.status();
  }
  uint64_t cap = v.data.capacity(), off = 0;
  for (size_t k = 0; k < pick.size(); ++k) {
    v.data.ToRef(pick[k], *r, off);
    off += parts[k].size();
  }
  AccountRam(v, cap);
  v.spills.push_back(*r);
  v.spilled += r->length;
  staging.spilled_bytes += static_cast<int64_t>(r->length);
  staging.spilled_total += r->length;
  staging.spills++;
  return Status::OK();
}

}  // namespace kvfs
