// The data path (store.h "data"): record appends (WriteRecord, WriteProvisionalRecord,
// WriteRecordStreamed via AppendWith: capacity checks, append, pins), ReleaseRecordPin, CommitFile
// (journal PUT), and reads (Read, ReadPinned, ReadUncached through ReadImpl: LRU, probation
// (engine/read_admission.h), shared whole-value loads, block-range reads, segment file descriptors).
//
// Callers: the FUSE layer (write/flush/commit, read). Thread safety: appends take cap_mu_ briefly
// (tickets, pins, accounting), never across the append; CommitFile takes ns_mu_ then cap_mu_ /
// hits_mu_; reads take files_mu_, flights_mu_, hits_mu_ and a Flight's mutex, never across I/O except
// the Flight a leader is loading.
// Invariants: a record is pinned from its append until released or committed; a read returns verified
// bytes or an error (Corruption -> EIO), NotFound for a dropped or vanished segment (GoneOr).
#include "engine/store_impl.h"

namespace kvfs {
namespace {

// Values up to kPieceLoadMin are loaded whole into the LRU on a miss (one backing read per value, shared
// by concurrent readers); larger ones are loaded and cached in pieces of kPiece bytes (ReadImpl), so the
// first READ of a large value waits for one piece, not for the whole value.
constexpr uint64_t kPieceLoadMin = 8ull << 20;
constexpr uint64_t kPiece = 4ull << 20;  // a multiple of the 64 KiB checksum block

}  // namespace

Result<Location> StoreImpl::AppendRecord(uint64_t ino, const std::vector<std::string_view>& parts,
                                         uint16_t flags) {
  uint64_t len = 0;
  for (auto p : parts) len += p.size();
  return AppendWith(ino, len, flags, [&](const std::string& tag, uint64_t stamp) {
    return Segments()->Append(tag, stamp, parts, flags);
  });
}

Result<Location> StoreImpl::WriteRecordStreamed(uint64_t ino, uint64_t length, const RecordSource& source) {
  return AppendWith(ino, length, 0, [&](const std::string& tag, uint64_t stamp) {
    return Segments()->AppendStreamed(tag, stamp, length, source);
  });
}

void StoreImpl::ReleaseRecordPinLocked(const Location& loc) {
  if (loc.empty() || pinned_records_.erase({loc.segment, loc.record_offset}) == 0) return;
  auto it = pins_.find(loc.segment);
  if (it != pins_.end() && --it->second == 0) {
    pins_.erase(it);
    stuck_ = false;  // a segment may be evictable again
    evict_wake_ = true;
  }
}

void StoreImpl::ReleaseRecordPin(const Location& loc) {
  if (loc.empty()) return;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    ReleaseRecordPinLocked(loc);
  }
  evict_cv_.notify_one();
}

Status StoreImpl::PinRecord(const Location& loc) {
  if (loc.empty()) return Status::OK();
  if (!OwnSegment(loc.segment)) {
    // A peer's segment: only its owner drops it. Held on the export (a marker the owner checks before
    // it unlinks the segment, peer_holds.cc); refused if the owner has dropped it already.
    KVFS_RETURN_IF_ERROR(HoldPeerSegment(loc.segment));
  }
  std::lock_guard<std::mutex> l(cap_mu_);
  // Same critical section as DropSegment's check and mark: either the drop saw this pin, or this
  // sees the drop.
  if (dropped_own_.count(loc.segment)) return Status::NotFound("segment dropped (evicted)");
  held_records_[{loc.segment, loc.record_offset}]++;
  pins_[loc.segment]++;
  return Status::OK();
}

void StoreImpl::UnpinRecord(const Location& loc) {
  if (loc.empty()) return;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    auto h = held_records_.find({loc.segment, loc.record_offset});
    if (h == held_records_.end()) return;
    if (!OwnSegment(loc.segment)) UnholdPeerSegment(loc.segment);  // takes peer_holds_mu_ (a leaf)
    if (--h->second == 0) held_records_.erase(h);
    auto it = pins_.find(loc.segment);
    if (it != pins_.end() && --it->second == 0) {
      pins_.erase(it);
      stuck_ = false;
      evict_wake_ = true;
    }
  }
  evict_cv_.notify_one();
}

Status StoreImpl::Fenced() const {
  if (!node_dir_ || !node_dir_->ownership_lost()) return Status::OK();
  LogLimited(spdlog::level::err, "fenced",
             "kvfs: node directory {} was taken over by another mount: this mount is fenced, writes fail "
             "with EIO (unmount it)",
             node_dir_->dir());
  return Status::IOError("node directory " + node_dir_->dir() + " was taken over by another mount (fenced)");
}

Result<Location> StoreImpl::AppendWith(uint64_t ino, uint64_t len, uint16_t flags,
                                       const std::function<Result<Location>(const std::string&, uint64_t)>& fn) {
  KVFS_RETURN_IF_ERROR(Fenced());
  auto path = index_->FullPath(ino);
  // A staged file that was unlinked (or detached) still writes its record: it may be renamed back or
  // committed; the record tag is informational.
  std::string tag = path.ok() ? *path : "/.kvfs-detached/" + std::to_string(ino);
  uint64_t need = 0;
  if (evict_enabled_) {
    need = AlignUp(len) + kAlignment;  // value + its metadata block (path, checksum table)
    if (hold_reserve_.load()) {
      // The backing was full: one statvfs per record until RESERVE is back (store.h).
      uint64_t total = 0, avail = 0;
      if (env_->StatFs(opts_.backing_dir, &total, &avail).ok() && avail < ReserveBytes() + need) {
        NoteNoSpace(need);
        return Status::NoSpace("backing store full (" + std::to_string(avail) +
                               " bytes free, kept for the journal until deleted files are reclaimed)");
      }
    }
    if (opts_.capacity_bytes) KVFS_RETURN_IF_ERROR(ReserveSpace(need));
  }
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    ticket = next_append_ticket_++;
    appends_in_flight_.insert(ticket);
  }
  auto loc = fn(tag, hlc_.Now());
  {
    std::lock_guard<std::mutex> l(cap_mu_);
    if (loc.ok() && pinned_records_.emplace(loc->segment, loc->record_offset).second) {
      pins_[loc->segment]++;  // until ReleaseRecordPin / CommitFile: never dropped (dead or evicted)
    }
    appends_in_flight_.erase(ticket);
  }
  if (loc.ok()) records_written_++;
  if (evict_enabled_) {
    std::lock_guard<std::mutex> l(cap_mu_);
    if (opts_.capacity_bytes) inflight_bytes_ -= need;
    if (loc.ok()) TrackAppendLocked(*loc);
  }
  if (!loc.ok() && loc.status().IsNoSpace()) NoteNoSpace(need);
  return loc;
}

Status StoreImpl::CommitFile(uint64_t ino, const Location& loc, const Attr& attr, const ExtentMapRef& ext,
                             const Location& written) {
  KVFS_RETURN_IF_ERROR(Fenced());
  std::lock_guard<std::mutex> l(ns_mu_);
  const std::vector<Location> records = ContentRecords(loc, ext);
  if (evict_enabled_) {
    std::lock_guard<std::mutex> c(cap_mu_);
    for (const Location& rec : records) {
      if (OwnSegment(rec.segment) && dropped_own_.count(rec.segment)) {
        return Status::NoSpace("the record's segment was evicted before the file was committed");
      }
    }
  }
  const uint64_t stamp = hlc_.Now();
  IndexDb::CommitBase base;
  auto n = index_->CommitFile(ino, loc, attr, stamp, {}, ext, &base);
  if (!n.ok()) return n.status();
  shadowing_.erase(ino);  // its PUT replaces whatever the journal had at its path
  auto path = index_->FullPath(ino);
  if (!path.ok()) return path.status();
  JournalEntry put = JournalEntry::Put(*path, loc, ToEntryAttrs(n->attr), stamp);
  // The file's xattrs travel with its content (set while it was staged, or kept by a new version).
  auto xattrs = SortedXattrs(ino);
  if (!xattrs.ok()) return xattrs.status();
  put.xattrs = std::move(*xattrs);
  put.extents = ext;  // an extent file: PUT version 3
  ChoosePutContent(base, &put);
  EnqueueLocked(std::move(put));
  if (track_hits_) {
    std::lock_guard<std::mutex> h(hits_mu_);
    for (const Location& rec : records) {
      if (OwnSegment(rec.segment)) loc_ino_[rec.segment][rec.record_offset] = n->attr.ino;
    }
  }
  if (!loc.empty() || !written.empty()) {
    // Committed: from now on the record is the file's content and ages like any other (store.h).
    std::lock_guard<std::mutex> c(cap_mu_);
    ReleaseRecordPinLocked(loc);
    ReleaseRecordPinLocked(written);
  }
  return Status::OK();
}

void StoreImpl::ChoosePutContent(const IndexDb::CommitBase& base, JournalEntry* put) {
  const std::string& key = put->path;
  if (delta_chains_.size() > (1u << 16)) delta_chains_.clear();  // bound the memory: chains restart whole
  if (!put->extents) {  // one record (or inline): the PUT is small; a later delta may build on it
    if (!put->location.empty()) delta_chains_[key] = DeltaChain{0, 0, delta_epoch_.load()};
    else delta_chains_.erase(key);
    return;
  }
  std::string whole;
  EncodeExtentMap(*put->extents, &whole);
  auto it = delta_chains_.find(key);
  if (it != delta_chains_.end() && base.found && it->second.epoch == delta_epoch_.load() &&
      it->second.count < kDeltaChainMax) {
    ExtentDelta d = DiffExtentMaps(base.map, *put->extents);
    ExtentMap check;
    // Journaled only when a reader that holds the base rebuilds exactly this map from it.
    if (ApplyExtentDelta(base.map, d, &check).ok() && check == *put->extents) {
      d.base_stamp = base.stamp;
      d.map_checksum = ExtentMapChecksum(*put->extents);
      std::string enc;
      EncodeExtentDelta(d, &enc);
      if (enc.size() < whole.size() && it->second.bytes + enc.size() < whole.size()) {
        it->second.count++;
        it->second.bytes += enc.size();
        delta_puts_++;
        delta_put_bytes_ += enc.size();
        put->extents = {};
        put->delta = std::move(d);
        return;
      }
    }
  }
  delta_chains_[key] = DeltaChain{0, 0, delta_epoch_.load()};
  map_puts_++;
  map_put_bytes_ += whole.size();
}

Result<std::shared_ptr<BackingFile>> StoreImpl::SegmentFile(const SegmentId& id) {
  uint64_t epoch;
  {
    std::lock_guard<std::mutex> l(files_mu_);
    auto it = files_.find(id);
    if (it != files_.end()) return it->second;
    epoch = files_epoch_;
  }
  // Opened without files_mu_: an open that waits on the backing (a HEAD on S3, a hung NFS server) must
  // not hold up the reads of other segments. Two readers may open the same segment at once; the first
  // descriptor entered is kept. One opened while a descriptor was closed (the segment dropped, uploaded,
  // vanished) serves this read only: it may be of a file removed since.
  OpenOptions o;
  o.direct = opts_.read_direct_io;
  auto f = env_->Open(SegmentFilePath(opts_.backing_dir, id), o);
  if (!f.ok() && o.direct && f.status().ToErrno() == EINVAL) {
    // The backing file system refuses O_DIRECT (tmpfs): buffered reads work the same.
    o.direct = false;
    f = env_->Open(SegmentFilePath(opts_.backing_dir, id), o);
  }
  if (!f.ok()) return f.status();
  std::shared_ptr<BackingFile> file(std::move(*f));
  std::lock_guard<std::mutex> l(files_mu_);
  if (files_epoch_ != epoch) return file;
  return files_.emplace(id, std::move(file)).first->second;
}

Result<LruCache::Value> StoreImpl::LoadPiece(const Location& loc, uint64_t off, uint64_t len) {
  auto file = SegmentFile(loc.segment);
  if (!file.ok()) return file.status();
  // The first piece brings the metadata in the same read; later pieces use it (or read it once).
  auto meta = meta_cache_.Find(loc);
  RecordMeta parsed;
  auto v = meta ? ReadValueRange(file->get(), *meta, off, len) : ReadValueRange(file->get(), loc, off, len, &parsed);
  if (!v.ok()) return v.status();
  if (!meta) meta_cache_.Insert(loc, std::move(parsed));
  return LruCache::Value(std::move(*v));
}

Result<LruCache::Value> StoreImpl::LoadValue(const Location& loc) {
  auto file = SegmentFile(loc.segment);
  if (!file.ok()) return file.status();
  // One read of metadata + value straight into an aligned, uninitialised buffer, verified in place.
  auto v = LoadWholeValue(file->get(), loc);
  if (!v.ok()) return v.status();
  return LruCache::Value(std::move(*v));
}

Status StoreImpl::Read(const Location& loc, uint64_t offset, size_t len, char* buf, size_t* got) {
  *got = 0;
  BackingDeadlineScope budget(std::chrono::milliseconds(opts_.read_deadline_ms));
  PinnedBytes p;
  KVFS_RETURN_IF_ERROR(ReadImpl(loc, offset, len, buf, &p, got));
  if (p.owner) {
    if (p.len) memcpy(buf, p.data, p.len);
    *got = p.len;
  }
  return Status::OK();
}

Status StoreImpl::ReadUncached(const Location& loc, uint64_t offset, size_t len, char* buf, size_t* got) {
  *got = 0;
  if (loc.empty() || offset >= loc.length || len == 0) return Status::OK();
  const size_t n = static_cast<size_t>(std::min<uint64_t>(len, loc.length - offset));
  BackingDeadlineScope budget(std::chrono::milliseconds(opts_.read_deadline_ms));
  // Not a value read of a user (a commit streaming spilled chunks): no hit or miss is counted.
  if (auto v = cache_.Lookup(CacheKey(loc))) {
    std::memcpy(buf, v->data() + offset, n);
    *got = n;
    return Status::OK();
  }
  auto file = SegmentFile(loc.segment);
  if (!file.ok()) return GoneOr(loc, file.status());
  Status s = ReadValue(file->get(), loc, offset, n, buf, got);
  if (s.ok()) read_loaded_bytes_ += *got;
  if (s.IsCorruption()) {
    checksum_failures_++;
    LogLimited(spdlog::level::err, "checksum", "kvfs: checksum mismatch reading segment {}/{}-{} record @{}: {}",
               loc.segment.node, loc.segment.generation, loc.segment.seq, loc.record_offset, ErrnoText(s));
  }
  return GoneOr(loc, s);
}

uint64_t StoreImpl::ReadUnitEnd(const Location& loc, uint64_t offset) const {
  if (loc.length <= kPieceLoadMin || kPiece > cache_.ShardCapacity() / 4) return loc.length;
  return std::min<uint64_t>(loc.length, (offset / kPiece + 1) * kPiece);
}

Status StoreImpl::ReadPinned(const Location& loc, uint64_t offset, size_t len, PinnedBytes* out) {
  *out = PinnedBytes{};
  size_t got = 0;
  BackingDeadlineScope budget(std::chrono::milliseconds(opts_.read_deadline_ms));
  return ReadImpl(loc, offset, len, nullptr, out, &got);
}

// buf != nullptr: a large uncached range is read straight into buf (*got set); everything else comes
// back pinned in *pin (the caller copies if it wants the bytes in buf).
//
// The unit of loading and caching is the whole value up to kPieceLoadMin, above it a kPiece-sized piece
// of the value (value offsets [i * kPiece, (i + 1) * kPiece), LRU key CacheKey + "#i"): a 36 MiB value's
// first 1 MiB READ waits for one verified 4 MiB read, not for all 36 MiB, the READs of one read(2)
// (sent at once for O_DIRECT readers) load different pieces in parallel, and each piece enters the LRU
// (or probation) as a value of its own. A request that crosses a piece boundary, and every request when
// a piece is too large for a cache shard's quarter (caches under 64 MiB), reads just its blocks
// (uncached, metadata from meta_cache_).
Status StoreImpl::ReadImpl(const Location& loc, uint64_t offset, size_t len, char* buf, PinnedBytes* pin,
                           size_t* got) {
  *got = 0;
  if (loc.empty() || offset >= loc.length || len == 0) return Status::OK();
  const size_t n = static_cast<size_t>(std::min<uint64_t>(len, loc.length - offset));
  // The cache hit rate is per value read: the request at offset 0 of a value counts one hit (answered
  // from the LRU, or promoted from probation) or one miss (it waited for the export); the other
  // requests of the read (3 for a 2.25 MiB value read in 1 MiB FUSE requests, sent at once by an
  // O_DIRECT reader) count nothing. Bytes loaded from the export are counted per byte (read_loaded_bytes_).
  const bool value_read = offset == 0;
  if (track_hits_ && offset == 0 && OwnSegment(loc.segment)) {
    std::lock_guard<std::mutex> l(hits_mu_);
    uint32_t& h = hits_[loc.segment][loc.record_offset];
    if (h < UINT32_MAX) h++;
  }
  const bool pieces = loc.length > kPieceLoadMin;
  const uint64_t unit_off = pieces ? offset / kPiece * kPiece : 0;
  const uint64_t unit_len = pieces ? std::min<uint64_t>(kPiece, loc.length - unit_off) : loc.length;
  const uint64_t rel = offset - unit_off;  // the request's offset in its unit
  std::string key = CacheKey(loc);
  if (pieces) key += "#" + std::to_string(unit_off / kPiece);
  if (auto v = cache_.Lookup(key)) {
    if (rel + n <= v->size()) {
      if (value_read) cache_hits_++;
      pin->data = v->data() + rel;
      pin->len = n;
      pin->owner = std::move(v);
      return Status::OK();
    }
  }
  // Probation (engine/read_admission.h): the rest of a read that loaded the value, or a second read
  // from the start, which earns the value its place in the LRU.
  bool promote = false;
  if (rel + n <= unit_len) {
    if (auto v = admission_.Find(key, rel == 0, &promote)) {
      if (promote) {
        cache_.Insert(key, v);
        if (value_read) cache_hits_++;  // a second use of a loaded value
      } else {
        probation_reads_++;
      }
      pin->data = v->data() + rel;
      pin->len = n;
      pin->owner = std::move(v);
      return Status::OK();
    }
  }
  if (value_read) cache_misses_++;
  // Whole-value (or piece) loads only for units well below a cache shard's budget: two hot values that
  // each fill a shard would evict each other between the 1 MiB FUSE reads of one load (and each miss
  // would re-read and re-verify the whole unit).
  if (rel + n > unit_len || unit_len > cache_.ShardCapacity() / 4) {
    // Read and verify just the blocks covering the range (the READs of one value go out as they come:
    // the first does not wait for the rest). The record's metadata is read by the first of them and
    // kept (record_meta_cache.h): each later range is one backing read.
    auto file = SegmentFile(loc.segment);
    if (!file.ok()) return GoneOr(loc, file.status());
    auto meta = meta_cache_.Find(loc);
    RecordMeta parsed;
    if (buf) {
      Status s = meta ? ReadValue(file->get(), *meta, offset, n, buf, got)
                      : ReadValue(file->get(), loc, offset, n, buf, got, &parsed);
      if (s.IsCorruption()) checksum_failures_++;
      if (s.ok()) read_loaded_bytes_ += *got;
      if (!s.ok()) meta_cache_.Erase(loc);
      else if (!meta) meta_cache_.Insert(loc, std::move(parsed));
      return GoneOr(loc, s);
    }
    auto r = meta ? ReadValueRange(file->get(), *meta, offset, n) : ReadValueRange(file->get(), loc, offset, n, &parsed);
    if (!r.ok()) {
      if (r.status().IsCorruption()) checksum_failures_++;
      meta_cache_.Erase(loc);
      return GoneOr(loc, r.status());
    }
    if (!meta) meta_cache_.Insert(loc, std::move(parsed));
    read_loaded_bytes_ += (*r)->size();
    pin->data = (*r)->data();
    pin->len = (*r)->size();
    pin->owner = std::move(*r);
    return Status::OK();
  }
  // One backing load per unit, shared by concurrent readers.
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    std::lock_guard<std::mutex> l(flights_mu_);
    if (auto t = timed_out_loads_.find(key); t != timed_out_loads_.end()) {
      if (std::chrono::steady_clock::now() < t->second.until) return t->second.status;
      timed_out_loads_.erase(t);
    }
    auto& slot = flights_[key];
    if (!slot) {
      slot = std::make_shared<Flight>();
      leader = true;
    }
    flight = slot;
  }
  if (leader) {
    auto load = [&]() -> Result<LruCache::Value> {
      return pieces ? LoadPiece(loc, unit_off, unit_len) : LoadValue(loc);
    };
    auto v = load();
    if (!v.ok() && v.status().IsCorruption()) {
      // Retry once through a fresh descriptor (the damage may be a transient read fault, or a peer's
      // segment whose growth this descriptor's cache does not show yet), then report EIO.
      {
        std::lock_guard<std::mutex> l(files_mu_);
        ForgetSegmentFileLocked(loc.segment);
      }
      meta_cache_.Erase(loc);
      v = load();
    }
    if (!v.ok()) v = GoneOr(loc, v.status());
    if (v.ok()) read_loaded_bytes_ += (*v)->size();
    // Into the LRU while it has room (caching then pushes nothing out, and the memory, once used, is
    // reused through the buffer pool), or if it was loaded (and left probation) recently; else on
    // probation, so a scan of once-read values cannot flush a full LRU.
    if (v.ok()) {
      const bool room = cache_.Usage() + (*v)->size() <= cache_.Capacity() / 8 * 7;
      if (room || admission_.OnLoaded(key, *v, rel == 0)) cache_.Insert(key, *v);
    }
    {
      std::lock_guard<std::mutex> l(flight->mu);
      flight->done = true;
      flight->status = v.ok() ? Status::OK() : v.status();
      if (v.ok()) flight->value = *v;
    }
    flight->cv.notify_all();
    std::lock_guard<std::mutex> l(flights_mu_);
    flights_.erase(key);
    if (v.ok() && !timed_out_loads_.empty()) timed_out_loads_.clear();  // the backing answers again
    if (!v.ok() && v.status().IsTimedOut() && opts_.read_deadline_ms > 0) {
      const auto now = std::chrono::steady_clock::now();
      if (timed_out_loads_.size() >= 1024) std::erase_if(timed_out_loads_, [&](const auto& e) { return e.second.until <= now; });
      timed_out_loads_[key] = {now + std::chrono::milliseconds(opts_.read_deadline_ms),
                               Status::TimedOut(v.status().message() + " (later reads of this value fail at once "
                                                "for the read deadline)")};
    }
  } else {
    std::unique_lock<std::mutex> l(flight->mu);
    flight->cv.wait(l, [&] { return flight->done; });
  }
  if (!flight->status.ok()) {
    if (flight->status.IsCorruption() && leader) {
      checksum_failures_++;
      LogLimited(spdlog::level::err, "checksum", "kvfs: checksum mismatch reading segment {}/{}-{} record @{}: {}",
                 loc.segment.node, loc.segment.generation, loc.segment.seq, loc.record_offset,
                 ErrnoText(flight->status));
    }
    return flight->status;
  }
  pin->data = flight->value->data() + rel;
  pin->len = n;
  pin->owner = flight->value;
  return Status::OK();
}

Result<std::vector<std::pair<std::string, std::string>>> StoreImpl::SortedXattrs(uint64_t ino) {
  auto names = index_->ListXattr(ino);
  if (!names.ok()) return names.status();
  std::sort(names->begin(), names->end());
  std::vector<std::pair<std::string, std::string>> xattrs;
  xattrs.reserve(names->size());
  for (auto& name : *names) {
    auto v = index_->GetXattr(ino, name);
    if (!v.ok()) return v.status();
    xattrs.emplace_back(std::move(name), std::move(*v));
  }
  return xattrs;
}

}  // namespace kvfs

