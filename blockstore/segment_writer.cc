#include "blockstore/segment_writer.h"

#include "blockstore/node_dir.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#if defined(__x86_64__)
// XXH3_64bits / XXH3_64bits_update become libxxhash's runtime-dispatched versions (AVX2 or AVX-512
// where the CPU has them; the plain entry points are built for the x86-64 baseline, SSE2). Same
// results on every path (the XXH3 specification), so the format does not change.
#include <xxh_x86dispatch.h>
#endif

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

namespace kvfs {
namespace {

// Zeros used for the value's tail padding in buffered mode (never written to).
alignas(4096) const char kZeros[kAlignment] = {};

uint64_t RandomNonce() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}() ^
                             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  std::lock_guard<std::mutex> lk(mu);
  return rng();
}

// Writes a record's metadata (header, path, checksum table, zero padding up to value_delta) into b
// (docs/format.md "Record"). sums: the value's block checksums.
void EncodeRecordMeta(uint16_t flags, std::string_view path, uint64_t value_len, uint64_t stamp,
                      const std::vector<uint64_t>& sums, uint64_t value_delta, char* b) {
  format::RecordHeader h;
  h.flags = flags;
  h.path_len = static_cast<uint32_t>(path.size());
  h.value_len = value_len;
  h.stamp = stamp;
  h.block_count = static_cast<uint32_t>(sums.size());
  h.meta_checksum = format::MetaChecksum(path, sums.data(), sums.size());
  format::EncodeRecordHeader(h, b);
  std::memcpy(b + format::kRecordHeaderSize, path.data(), path.size());
  // The table may be unaligned for uint64_t: copied bytewise.
  if (!sums.empty()) std::memcpy(b + format::kRecordHeaderSize + path.size(), sums.data(), sums.size() * sizeof(uint64_t));
  const uint64_t meta = format::RecordMetaSize(path.size(), value_len);
  std::memset(b + meta, 0, value_delta - meta);
}

// Block checksums of the value given as parts (a block may span parts).
void ChecksumParts(const std::vector<std::string_view>& parts, uint64_t value_len, uint64_t* table) {
  size_t pi = 0, po = 0;  // current part and offset in it
  XXH3_state_t st;
  for (uint64_t b = 0, left = value_len; left > 0; ++b) {
    uint64_t want = std::min<uint64_t>(kChecksumBlock, left);
    while (pi < parts.size() && po == parts[pi].size()) ++pi, po = 0;
    if (parts[pi].size() - po >= want) {  // block inside one part: one-shot hash
      table[b] = XXH3_64bits(parts[pi].data() + po, want);
      po += want;
    } else {
      XXH3_64bits_reset(&st);
      for (uint64_t need = want; need > 0;) {
        while (po == parts[pi].size()) ++pi, po = 0;
        size_t take = std::min<uint64_t>(need, parts[pi].size() - po);
        XXH3_64bits_update(&st, parts[pi].data() + po, take);
        po += take;
        need -= take;
      }
      table[b] = XXH3_64bits_digest(&st);
    }
    left -= want;
  }
}

// True when O_DIRECT can write the value straight from its parts: every part starts 4 KiB aligned in
// memory and every part but the last is a multiple of 4 KiB long (staged 1 MiB chunks from the buffer
// pool are; fuse/chunk_buffer.h), so each lands at an aligned offset. The last part's partial tail block
// goes through a small aligned buffer.
bool PartsDirectWritable(const std::vector<std::string_view>& parts) {
  size_t last = parts.size();
  while (last > 0 && parts[last - 1].empty()) --last;
  for (size_t i = 0; i < last; ++i) {
    if (parts[i].empty()) continue;
    if (reinterpret_cast<uintptr_t>(parts[i].data()) % kAlignment != 0) return false;
    if (i + 1 < last && parts[i].size() % kAlignment != 0) return false;
  }
  return true;
}

}  // namespace

// One Append waiting in (or leading) the queue. Lives on the appender's stack.
struct SegmentWriter::Pending {
  std::string_view path;
  uint64_t stamp = 0;
  uint16_t flags = 0;
  const std::vector<std::string_view>* parts = nullptr;
  const ValueSource* source = nullptr;  // streamed record (AppendStreamed): parts is null
  bool rotate = false;                  // Rotate: no record; seals segment rotate_seq if still active
  uint64_t rotate_seq = 0;
  bool rotated = false;
  uint64_t value_len = 0;
  uint64_t value_delta = 0;  // ValueDelta: meta bytes padded to 4 KiB
  uint64_t span = 0;         // RecordSpan
  uint64_t path_hash = 0;
  // Buffered: value_delta bytes (meta + zero pad). Direct: span bytes (meta + pad + value + pad), or,
  // when the parts are aligned (direct_parts), value_delta bytes + one 4 KiB block: the value's last
  // partial block, zero padded.
  AlignedBuf buf;
  bool direct_parts = false;  // O_DIRECT straight from the caller's parts (PartsDirectWritable)
  Status status;
  Location loc;
  bool done = false;
  std::condition_variable cv;
};

void SegmentWriter::AlignedFree::operator()(char* p) const { free(p); }

SegmentWriter::AlignedBuf SegmentWriter::AllocAligned(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, kAlignment, std::max<size_t>(n, kAlignment)) != 0) return AlignedBuf(nullptr);
  return AlignedBuf(static_cast<char*>(p));
}

SegmentWriter::SegmentWriter(Env* env, std::string seg_dir, std::string node, uint64_t generation,
                             SegmentWriterOptions opts)
    : env_(env),
      seg_dir_(std::move(seg_dir)),
      node_(std::move(node)),
      generation_(generation),
      opts_(std::move(opts)),
      next_seq_(opts_.first_seq),
      active_seq_for_readers_(opts_.first_seq) {}

SegmentWriter::~SegmentWriter() = default;

Result<std::unique_ptr<SegmentWriter>> SegmentWriter::Open(Env* env, std::string seg_dir, std::string node,
                                                           uint64_t generation, SegmentWriterOptions opts) {
  if (env == nullptr) env = Env::Posix();
  if (node.empty() || node.size() > format::kMaxNodeIdLength) {
    return Status::InvalidArgument("segment writer: node id must be 1..256 bytes: '" + node + "'");
  }
  if (opts.segment_size < 16 * kAlignment || opts.segment_size % kAlignment != 0) {
    return Status::InvalidArgument("segment writer: segment_size must be a multiple of 4096 and >= 64 KiB, got " +
                                   std::to_string(opts.segment_size));
  }
  while (!seg_dir.empty() && seg_dir.size() > 1 && seg_dir.back() == '/') seg_dir.pop_back();
  KVFS_RETURN_IF_ERROR(env->CreateDirs(seg_dir));
  return std::unique_ptr<SegmentWriter>(
      new SegmentWriter(env, std::move(seg_dir), std::move(node), generation, std::move(opts)));
}

std::string SegmentWriter::SegmentPath(uint64_t seq) const {
  return seg_dir_ + "/" + SegmentFileName(generation_, seq);
}

SegmentId SegmentWriter::ActiveSegment() const {
  std::lock_guard<std::mutex> lk(mu_);
  return SegmentId{node_, generation_, active_seq_for_readers_};
}

SegmentWriterStats SegmentWriter::GetStats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

std::vector<SealedSegment> SegmentWriter::TakeSealed() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<SealedSegment> out;
  out.swap(sealed_);
  return out;
}

Status SegmentWriter::Prepare(Pending* p) {
  if (p->path.empty() || p->path.size() > format::kMaxPathLength) {
    return Status::InvalidArgument("segment writer: path length must be 1..65535");
  }
  if (p->flags & ~format::kRecordKnownFlags) return Status::InvalidArgument("segment writer: unknown record flags");
  uint64_t len = 0;
  for (auto part : *p->parts) len += part.size();
  const uint64_t blocks = format::BlockCount(len);
  if (blocks > UINT32_MAX) return Status::InvalidArgument("segment writer: value too large");
  p->value_len = len;
  p->value_delta = format::ValueDelta(p->path.size(), len);
  p->span = format::RecordSpan(p->path.size(), len);
  p->path_hash = format::Hash64(p->path.data(), p->path.size());

  // O_DIRECT from aligned parts: no copy of the value at all (the kernel reads the caller's memory);
  // only the partial last block is copied, zero padded, into the buffer after the metadata.
  p->direct_parts = opts_.direct_io && PartsDirectWritable(*p->parts);
  const size_t buf_len = p->direct_parts ? p->value_delta + kAlignment : opts_.direct_io ? p->span : p->value_delta;
  p->buf = AllocAligned(buf_len);
  if (!p->buf) return Status::IOError("segment writer: out of memory for a staging buffer", ENOMEM);
  char* b = p->buf.get();
  std::vector<uint64_t> sums(blocks);
  if (p->direct_parts) {
    ChecksumParts(*p->parts, len, sums.data());
    size_t last = p->parts->size();
    while (last > 0 && (*p->parts)[last - 1].empty()) --last;
    const size_t tail = len % kAlignment;
    if (tail) {
      const std::string_view lp = (*p->parts)[last - 1];  // holds the tail: earlier parts are aligned
      std::memcpy(b + p->value_delta, lp.data() + lp.size() - tail, tail);
      std::memset(b + p->value_delta + tail, 0, kAlignment - tail);
    }
  } else if (opts_.direct_io) {
    // The one copy of the value: into the aligned staging buffer (O_DIRECT needs aligned memory).
    char* v = b + p->value_delta;
    for (auto part : *p->parts) {
      std::memcpy(v, part.data(), part.size());
      v += part.size();
    }
    std::memset(v, 0, p->span - p->value_delta - len);  // tail padding
    const char* value = b + p->value_delta;
    for (uint64_t i = 0; i < blocks; ++i) {
      sums[i] = XXH3_64bits(value + i * kChecksumBlock, std::min<uint64_t>(kChecksumBlock, len - i * kChecksumBlock));
    }
  } else {
    ChecksumParts(*p->parts, len, sums.data());
  }
  EncodeRecordMeta(p->flags, p->path, len, p->stamp, sums, p->value_delta, b);
  return Status::OK();
}

Result<Location> SegmentWriter::Append(std::string_view path, uint64_t stamp,
                                       const std::vector<std::string_view>& parts, uint16_t flags) {
  Pending p;
  p.path = path;
  p.stamp = stamp;
  p.flags = flags;
  p.parts = &parts;
  KVFS_RETURN_IF_ERROR(Prepare(&p));
  return Enqueue(&p);
}

Result<Location> SegmentWriter::AppendStreamed(std::string_view path, uint64_t stamp, uint64_t value_len,
                                               const ValueSource& source, uint16_t flags) {
  Pending p;
  p.path = path;
  p.stamp = stamp;
  p.flags = flags;
  p.source = &source;
  if (p.path.empty() || p.path.size() > format::kMaxPathLength) {
    return Status::InvalidArgument("segment writer: path length must be 1..65535");
  }
  if (flags & ~format::kRecordKnownFlags) return Status::InvalidArgument("segment writer: unknown record flags");
  if (format::BlockCount(value_len) > UINT32_MAX) return Status::InvalidArgument("segment writer: value too large");
  p.value_len = value_len;
  p.value_delta = format::ValueDelta(p.path.size(), value_len);
  p.span = format::RecordSpan(p.path.size(), value_len);
  p.path_hash = format::Hash64(p.path.data(), p.path.size());
  p.buf = AllocAligned(p.value_delta);  // the metadata, encoded once the value is written
  if (!p.buf) return Status::IOError("segment writer: out of memory for a staging buffer", ENOMEM);
  return Enqueue(&p);
}

Status SegmentWriter::Rotate(const SegmentId& seg, bool* rotated) {
  if (rotated) *rotated = false;
  if (seg.node != node_ || seg.generation != generation_) return Status::OK();  // not this writer's
  Pending p;
  p.rotate = true;
  p.rotate_seq = seg.seq;
  auto r = Enqueue(&p);
  if (rotated) *rotated = p.rotated;
  return r.status();
}

Result<Location> SegmentWriter::Enqueue(Pending* pp) {
  Pending& p = *pp;
  std::unique_lock<std::mutex> lk(mu_);
  if (closed_) return Status::InvalidArgument("segment writer: closed");
  if (!broken_.ok()) return broken_;
  queue_.push_back(&p);
  while (!p.done && queue_.front() != &p) p.cv.wait(lk);
  if (p.done) {
    if (!p.status.ok()) return p.status;
    return p.loc;
  }
  // Leader: take a batch from the front of the queue. A streamed record is a batch of its own (so its
  // source always runs on its appender's thread), and so is a Rotate.
  std::vector<Pending*> batch;
  uint64_t bytes = 0;
  for (Pending* w : queue_) {
    if (!batch.empty() && (w->source || batch[0]->source || w->rotate || batch[0]->rotate ||
                           bytes + w->span > opts_.max_batch_bytes)) {
      break;
    }
    batch.push_back(w);
    bytes += w->span;
  }
  const Status broken = broken_;
  lk.unlock();
  if (broken.ok()) {
    if (batch[0]->rotate) {
      RotateActive(batch[0]);
    } else if (batch[0]->source) {
      WriteStreamed(batch[0]);
    } else {
      WriteBatch(batch);
    }
  } else {
    for (Pending* w : batch) w->status = broken;
  }
  lk.lock();
  for (Pending* w : batch) {
    queue_.pop_front();
    if (w != &p) {
      w->done = true;
      w->cv.notify_one();
    }
  }
  if (!queue_.empty()) queue_.front()->cv.notify_one();
  if (!p.status.ok()) return p.status;
  return p.loc;
}

void SegmentWriter::WriteBatch(const std::vector<Pending*>& batch) {
  std::vector<WriteOp> ops;
  std::vector<Pending*> group;  // records of `ops`, all in the active segment
  uint64_t group_start = next_offset_;

  auto flush = [&]() -> Status {
    if (group.empty()) return Status::OK();
    for (const WriteOp& op : ops) active_extent_ = std::max<uint64_t>(active_extent_, op.offset + op.len);
    Status s = active_->Write(ops);
    if (s.ok()) {
      uint64_t value_bytes = 0;
      for (Pending* w : group) {
        footer_.push_back(format::FooterEntry{w->loc.record_offset, w->loc.value_offset, w->value_len, w->stamp,
                                              w->path_hash});
        w->status = Status::OK();
        value_bytes += w->value_len;
      }
      active_data_bytes_ += value_bytes;
      MarkDirty(next_offset_);
      std::lock_guard<std::mutex> lk(mu_);
      stats_.records += group.size();
      stats_.value_bytes += value_bytes;
      stats_.batches += 1;
    } else {
      for (Pending* w : group) {
        w->status = s;
        w->loc = Location{};
      }
      next_offset_ = group_start;  // reuse the space: nothing points into it
      TrimActive();                // and drop what landed past it (frees it on a full export)
    }
    ops.clear();
    group.clear();
    return s;
  };

  for (size_t i = 0; i < batch.size(); ++i) {
    Pending* w = batch[i];
    // Does w fit in the active segment (with the footer and trailer it would need)?
    const bool has_records = !footer_.empty() || !group.empty();
    if (active_ && has_records) {
      const uint64_t count = footer_.size() + group.size() + 1;
      if (next_offset_ + w->span + format::FooterBytes(count) + format::kTrailerBlockSize > opts_.segment_size) {
        // Write what goes before the seal, then seal. If the seal's write fails (or that of the records
        // before it) the segment is retired unsealed (on_retire; recovery scans it; its records are
        // still synced by Sync) and we move on.
        flush();
        CloseActive();
        Status broken;
        {
          std::lock_guard<std::mutex> lk(mu_);
          broken = broken_;
        }
        if (!broken.ok()) {  // the seal's fdatasync failed
          for (size_t j = i; j < batch.size(); ++j) batch[j]->status = broken;
          return;
        }
      }
    }
    if (!active_) {
      Status o = OpenNextSegment();
      if (!o.ok()) {
        for (size_t j = i; j < batch.size(); ++j) batch[j]->status = o;
        return;
      }
      group_start = next_offset_;
    }
    if (group.empty()) group_start = next_offset_;
    w->loc = Location{SegmentId{node_, generation_, active_seq_}, next_offset_, next_offset_ + w->value_delta,
                      w->value_len};
    if (w->direct_parts) {
      ops.push_back(WriteOp{next_offset_, w->buf.get(), w->value_delta});
      uint64_t off = next_offset_ + w->value_delta;
      for (auto part : *w->parts) {
        const size_t whole = part.size() / kAlignment * kAlignment;  // the last part's tail: below
        if (whole) ops.push_back(WriteOp{off, part.data(), whole});
        off += whole;
      }
      if (w->value_len % kAlignment) ops.push_back(WriteOp{off, w->buf.get() + w->value_delta, kAlignment});
    } else if (opts_.direct_io) {
      ops.push_back(WriteOp{next_offset_, w->buf.get(), w->span});
    } else {
      ops.push_back(WriteOp{next_offset_, w->buf.get(), w->value_delta});
      uint64_t off = next_offset_ + w->value_delta;
      for (auto part : *w->parts) {
        if (part.empty()) continue;
        ops.push_back(WriteOp{off, part.data(), part.size()});
        off += part.size();
      }
      const uint64_t pad = AlignUp(w->value_len) - w->value_len;
      if (pad) ops.push_back(WriteOp{off, kZeros, pad});
    }
    group.push_back(w);
    next_offset_ += w->span;
  }
  flush();
}

Status SegmentWriter::PlaceRecord(uint64_t span) {
  if (active_ && !footer_.empty()) {
    const uint64_t count = footer_.size() + 1;
    if (next_offset_ + span + format::FooterBytes(count) + format::kTrailerBlockSize > opts_.segment_size) {
      CloseActive();  // a failed seal retires the segment unsealed, as in WriteBatch
      std::lock_guard<std::mutex> lk(mu_);
      if (!broken_.ok()) return broken_;
    }
  }
  if (!active_) return OpenNextSegment();
  return Status::OK();
}

void SegmentWriter::WriteStreamed(Pending* w) {
  Status s = PlaceRecord(w->span);
  if (!s.ok()) {
    w->status = s;
    return;
  }
  const uint64_t record_offset = next_offset_, value_offset = record_offset + w->value_delta;
  const uint64_t len = w->value_len, blocks = format::BlockCount(len);
  std::vector<uint64_t> sums(blocks);
  AlignedBuf piece = AllocAligned(static_cast<size_t>(std::min<uint64_t>(kStreamPiece, AlignUp(len))));
  if (!piece) s = Status::IOError("segment writer: out of memory for a stream buffer", ENOMEM);
  for (uint64_t pos = 0; s.ok() && pos < len;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kStreamPiece, len - pos));
    s = (*w->source)(pos, n, piece.get());
    if (!s.ok()) break;
    for (uint64_t b = pos / kChecksumBlock; b * kChecksumBlock < pos + n; ++b) {
      sums[b] = XXH3_64bits(piece.get() + (b * kChecksumBlock - pos),
                            std::min<uint64_t>(kChecksumBlock, len - b * kChecksumBlock));
    }
    const size_t padded = static_cast<size_t>(AlignUp(n));
    std::memset(piece.get() + n, 0, padded - n);
    active_extent_ = std::max<uint64_t>(active_extent_, value_offset + pos + padded);
    s = active_->Write(value_offset + pos, piece.get(), padded);
    pos += n;
  }
  if (s.ok()) {
    active_extent_ = std::max<uint64_t>(active_extent_, record_offset + w->value_delta);
    char* b = w->buf.get();
    EncodeRecordMeta(w->flags, w->path, len, w->stamp, sums, w->value_delta, b);
    s = active_->Write(record_offset, b, w->value_delta);  // the metadata last: the record is valid now
  }
  MarkDirty(s.ok() ? record_offset + w->span : next_offset_);
  if (!s.ok()) {
    w->status = s;  // next_offset_ unchanged: the next append reuses the space, nothing points into it
    w->loc = Location{};
    TrimActive();   // the value bytes already written past it go (a seal must end the file)
    return;
  }
  w->loc = Location{SegmentId{node_, generation_, active_seq_}, record_offset, value_offset, len};
  w->status = Status::OK();
  next_offset_ += w->span;
  footer_.push_back(format::FooterEntry{record_offset, value_offset, len, w->stamp, w->path_hash});
  active_data_bytes_ += len;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.records += 1;
  stats_.value_bytes += len;
  stats_.batches += 1;
}

void SegmentWriter::RotateActive(Pending* w) {
  w->status = Status::OK();
  if (!active_ || active_seq_ != w->rotate_seq || footer_.empty()) return;  // nothing to reclaim by sealing
  CloseActive();
  w->rotated = true;
  std::lock_guard<std::mutex> lk(mu_);
  if (!broken_.ok()) w->status = broken_;  // the seal's fdatasync failed
}

void SegmentWriter::CloseActive() {
  if (active_) SealActive();  // a failed write retires it (on_retire); a failed fdatasync breaks the writer
  active_.reset();
}

Status SegmentWriter::OpenNextSegment() {
  const uint64_t seq = next_seq_;
  OpenOptions o;
  o.write = o.create = o.exclusive = true;
  o.direct = opts_.direct_io && !direct_refused_;
  auto f = env_->Open(SegmentPath(seq), o);
  if (!f.ok() && o.direct && f.status().ToErrno() == EINVAL) {
    // The file system refuses O_DIRECT (tmpfs before Linux 6.6): the open created the file and then
    // failed. It is ours (this seq is never reused): open it buffered; aligned writes work the same.
    direct_refused_ = true;
    o.direct = o.exclusive = false;
    f = env_->Open(SegmentPath(seq), o);
  }
  if (!f.ok()) return f.status();
  std::shared_ptr<BackingFile> file(std::move(*f));
  format::SegmentHeader h;
  h.node = node_;
  h.generation = generation_;
  h.seq = seq;
  h.create_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  h.nonce = RandomNonce();
  AlignedBuf hb = AllocAligned(format::kSegmentHeaderSize);
  if (!hb) return Status::IOError("segment writer: out of memory", ENOMEM);
  format::EncodeSegmentHeader(h, hb.get());
  // The file exists from here on: never reuse its seq, even if writing the header fails.
  next_seq_ = seq + 1;
  {
    std::lock_guard<std::mutex> lk(mu_);
    dir_dirty_ = true;
    created_[seq] = false;
  }
  KVFS_RETURN_IF_ERROR(file->Write(0, hb.get(), format::kSegmentHeaderSize));
  active_ = std::move(file);
  active_seq_ = seq;
  active_nonce_ = h.nonce;
  next_offset_ = format::kSegmentHeaderSize;
  active_extent_ = format::kSegmentHeaderSize;
  active_data_bytes_ = 0;
  footer_.clear();
  MarkDirty(next_offset_);
  std::lock_guard<std::mutex> lk(mu_);
  active_seq_for_readers_ = seq;
  stats_.segments_created += 1;
  return Status::OK();
}

Status SegmentWriter::TrimActive() {
  if (active_extent_ <= next_offset_) return Status::OK();
  Status s = active_->Truncate(next_offset_);
  if (s.ok()) active_extent_ = next_offset_;
  return s;
}

Status SegmentWriter::SealActive() {
  // The trailer must end the file: bytes a failed write left past the footer would hide it (the segment
  // would read as unsealed with a torn tail after a clean stop).
  Status w = TrimActive();
  const uint64_t count = footer_.size();
  const uint64_t footer_bytes = format::FooterBytes(count);
  AlignedBuf fb;
  if (w.ok()) {
    fb = AllocAligned(footer_bytes + format::kTrailerBlockSize);
    if (!fb) w = Status::IOError("segment writer: out of memory", ENOMEM);
  }
  if (!w.ok()) {
    RetireActive();
    return w;
  }
  char* p = fb.get();
  for (uint64_t i = 0; i < count; ++i) format::EncodeFooterEntry(footer_[i], p + i * format::kFooterEntrySize);
  std::memset(p + count * format::kFooterEntrySize, 0, footer_bytes - count * format::kFooterEntrySize);
  format::Trailer t;
  t.footer_offset = next_offset_;
  t.record_count = count;
  t.footer_checksum = format::Hash64(p, count * format::kFooterEntrySize);
  t.nonce = active_nonce_;
  format::EncodeTrailerBlock(t, p + footer_bytes);
  active_extent_ = std::max<uint64_t>(active_extent_, next_offset_ + footer_bytes + format::kTrailerBlockSize);
  w = active_->Write(next_offset_, p, footer_bytes + format::kTrailerBlockSize);
  if (!w.ok()) {
    RetireActive();
    return w;
  }
  Status s = active_->Sync();
  SealedSegment sealed{SegmentId{node_, generation_, active_seq_},
                       format::SealedFileSize(next_offset_, count), count, active_data_bytes_};
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!s.ok()) {
      broken_ = s;
      return s;
    }
    // Durable now; a concurrent Sync that already took it just syncs it again.
    dirty_.erase(active_seq_);
    // Not after an earlier failed fdatasync: this one may succeed without the pages that one dropped.
    if (broken_.ok()) durable_end_[active_seq_] = sealed.file_size;
    sealed_.push_back(sealed);
    stats_.segments_sealed += 1;
  }
  if (opts_.on_seal) opts_.on_seal(sealed);
  return Status::OK();
}

void SegmentWriter::RetireActive() {
  TrimActive();  // what part of the footer landed goes, if it can (best effort: the export is full)
  SealedSegment retired{SegmentId{node_, generation_, active_seq_}, active_extent_, footer_.size(),
                        active_data_bytes_};
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.segments_retired += 1;
  }
  if (opts_.on_retire) opts_.on_retire(retired);
}

void SegmentWriter::MarkDirty(uint64_t end) {
  std::lock_guard<std::mutex> lk(mu_);
  Dirty& d = dirty_[active_seq_];
  d.file = active_;
  d.end = std::max(d.end, end);
}

bool SegmentWriter::MayBeLost(const Location& loc) const {
  if (loc.segment.node != node_ || loc.segment.generation != generation_) return false;
  std::lock_guard<std::mutex> lk(mu_);
  auto c = created_.find(loc.segment.seq);
  if (c == created_.end()) return false;
  if (!c->second) return true;  // its name may not survive a crash
  auto d = durable_end_.find(loc.segment.seq);
  return d == durable_end_.end() || loc.record_offset >= d->second;
}

Status SegmentWriter::Sync() {
  std::lock_guard<std::mutex> sync_lk(sync_mu_);
  std::map<uint64_t, Dirty> files;
  std::vector<uint64_t> names;  // segments whose directory entry the SyncDir below covers
  bool dir = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!broken_.ok()) return broken_;
    files.swap(dirty_);
    std::swap(dir, dir_dirty_);
    if (dir) {
      for (const auto& [seq, durable] : created_) {
        if (!durable) names.push_back(seq);
      }
    }
    stats_.syncs += 1;
  }
  for (auto& [seq, d] : files) {
    Status s = d.file->Sync();
    std::lock_guard<std::mutex> lk(mu_);
    if (s.ok() && !broken_.ok()) return broken_;  // a seal's fdatasync failed meanwhile (see SealActive)
    if (!s.ok()) {
      // Every record of this segment past its durable end may be lost (MayBeLost), for good: the
      // kernel may have dropped the dirty pages, so a retried fdatasync could succeed without them.
      broken_ = s;
      return s;
    }
    uint64_t& e = durable_end_[seq];
    e = std::max(e, d.end);
  }
  if (dir) {
    Status s = env_->SyncDir(seg_dir_);
    std::lock_guard<std::mutex> lk(mu_);
    if (!s.ok()) {
      dir_dirty_ = true;
      return s;
    }
    for (uint64_t seq : names) created_[seq] = true;
  }
  return Status::OK();
}

Status SegmentWriter::WriteBack() {
  std::vector<std::shared_ptr<BackingFile>> files;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!broken_.ok()) return broken_;
    if (opts_.direct_io && !direct_refused_) return Status::OK();  // O_DIRECT: written means at the backing
    for (const auto& [seq, d] : dirty_) files.push_back(d.file);
  }
  for (const auto& f : files) KVFS_RETURN_IF_ERROR(f->WriteBack());
  return Status::OK();
}

Status SegmentWriter::Close() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) return Status::OK();
    closed_ = true;  // new Appends fail from here on
  }
  Status s = Sync();
  // A segment whose every record write failed is sealed too (0 records): a clean stop leaves no segment
  // of its generation unsealed.
  if (s.ok() && opts_.seal_on_close && active_) s = SealActive();
  active_.reset();
  std::lock_guard<std::mutex> lk(mu_);
  dirty_.clear();
  return s;
}

}  // namespace kvfs
