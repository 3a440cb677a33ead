// Journal checkpoints: snapshot file format (see snapshot.h, docs/format.md "## Snapshots").
#include "index/snapshot.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "blockstore/node_dir.h"
#include "index/coding.h"

namespace kvfs {
namespace {

void PutFixed(std::string* out, uint64_t v, int n) {
  for (int i = 0; i < n; i++) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
bool GetVarint(const char** p, const char* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 70 && *p < end; shift += 7) {
    const auto b = static_cast<unsigned char>(*(*p)++);
    if (shift == 63 && b > 1) return false;
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Which entries a snapshot of format `version` may hold (CUT of a segment file since version 2).
bool SnapshotOp(const JournalEntry& e, uint32_t version) {
  switch (e.op) {
    case JournalOp::kCut:
      return version >= 2 && e.cut_file.kind == FileRef::Kind::kSegment;
    case JournalOp::kSetattr:
      return version >= 3;
    case JournalOp::kRename:  // the record of a directory rename: at most a node in its location
      return version >= 4 && e.location.segment.generation == 0 &&
             (e.location.segment.seq == 0 || (version >= 5 && e.location.segment.seq == kSnapshotExchangeRecord)) &&
             e.location.record_offset == 0 && e.location.value_offset == 0 && e.location.length == 0 &&
             !e.extents;
    case JournalOp::kPut:
    case JournalOp::kSymlink:
    case JournalOp::kUnlink:
    case JournalOp::kMkdir:
    case JournalOp::kXattr:
    case JournalOp::kSeal:
    case JournalOp::kDrop:
      return true;
    default:
      return false;
  }
}

// Sequential reader over a file with a window buffer.
class SeqFile {
 public:
  SeqFile(BackingFile* f, uint64_t size) : f_(f), size_(size) {}
  // Reads exactly n bytes at the current position; Corruption if the file ends first.
  Status ReadExact(size_t n, std::string* out, const std::string& what) {
    if (pos_ + n > size_) return Status::Corruption(what + " runs past the end of the file");
    out->resize(n);
    size_t done = 0;
    while (done < n) {
      size_t got = 0;
      KVFS_RETURN_IF_ERROR(f_->Read(pos_ + done, n - done, out->data() + done, &got));
      if (got == 0) return Status::Corruption(what + ": short read (file shrank?)");
      done += got;
    }
    pos_ += n;
    return Status::OK();
  }
  uint64_t pos() const { return pos_; }
  void Seek(uint64_t p) { pos_ = p; }
  uint64_t size() const { return size_; }

 private:
  BackingFile* f_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

struct Parsed {
  SnapshotInfo info;
  uint32_t version = 0;
  uint64_t body_start = 0;
  uint64_t trailer_offset = 0;
};

Status Bad(const std::string& path, const std::string& why) {
  return Status::Corruption("snapshot " + path + ": " + why);
}

// Reads and checks header + trailer. Leaves f positioned at the first chunk.
Status ParseFrame(const std::string& path, SeqFile* f, const std::string& expect_node, Parsed* p) {
  std::string h;
  if (f->size() < kSnapshotHeaderFixed + kSnapshotTrailerSize) return Bad(path, "too short");
  KVFS_RETURN_IF_ERROR(f->ReadExact(kSnapshotHeaderFixed, &h, "header"));
  if (memcmp(h.data(), kSnapshotMagic, 8) != 0) return Bad(path, "bad magic");
  const uint32_t version = static_cast<uint32_t>(GetFixed(h.data() + 8, 4));
  const uint32_t entry_version = static_cast<uint32_t>(GetFixed(h.data() + 12, 4));
  const uint64_t node_len = GetFixed(h.data() + 48, 2);
  std::string node;
  KVFS_RETURN_IF_ERROR(f->ReadExact(node_len, &node, "node id"));
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, h.data(), 56);
  XXH3_64bits_update(&st, node.data(), node.size());
  if (XXH3_64bits_digest(&st) != GetFixed(h.data() + 56, 8)) return Bad(path, "header checksum mismatch");
  if (version > kSnapshotVersion) {
    return Status::NotSupported("snapshot " + path + " has format version " + std::to_string(version) +
                                ", newer than this kvfs (" + std::to_string(kSnapshotVersion) + ")");
  }
  if (version < 1) return Bad(path, "unknown version " + std::to_string(version));
  p->version = version;
  if (entry_version > kJournalEntryVersion) {
    return Status::NotSupported("snapshot " + path + " has entry version " + std::to_string(entry_version) +
                                ", newer than this kvfs");
  }
  p->info.node = node;
  p->info.generation = GetFixed(h.data() + 16, 8);
  p->info.number = GetFixed(h.data() + 24, 8);
  p->info.max_stamp = GetFixed(h.data() + 32, 8);
  p->info.created_ns = static_cast<int64_t>(GetFixed(h.data() + 40, 8));
  p->info.file_size = f->size();
  if (!expect_node.empty() && node != expect_node) {
    return Bad(path, "belongs to node '" + node + "', not '" + expect_node + "'");
  }
  const size_t slash = path.find_last_of('/');
  uint64_t g = 0, n = 0;
  if (ParseSnapshotFileName(slash == std::string::npos ? path : path.substr(slash + 1), &g, &n) &&
      (g != p->info.generation || n != p->info.number)) {
    return Bad(path, "header names snapshot " + std::to_string(p->info.generation) + "-" +
                         std::to_string(p->info.number) + " (misplaced file)");
  }
  p->body_start = f->pos();
  // Trailer.
  f->Seek(f->size() - kSnapshotTrailerSize);
  std::string t;
  KVFS_RETURN_IF_ERROR(f->ReadExact(kSnapshotTrailerSize, &t, "trailer"));
  if (memcmp(t.data(), kSnapshotTrailerMagic, 8) != 0) return Bad(path, "no trailer (incomplete file)");
  if (XXH3_64bits(t.data(), 40) != GetFixed(t.data() + 40, 8)) return Bad(path, "trailer checksum mismatch");
  p->info.chunks = GetFixed(t.data() + 8, 8);
  p->info.entries = GetFixed(t.data() + 16, 8);
  p->trailer_offset = GetFixed(t.data() + 24, 8);
  if (p->trailer_offset != f->size() - kSnapshotTrailerSize || p->trailer_offset < p->body_start) {
    return Bad(path, "trailer offset does not match the file size");
  }
  f->Seek(p->body_start);
  return Status::OK();
}

// Walks the chunks. verify_only: checksums and counts; else also decodes and calls fn.
Status WalkChunks(const std::string& path, SeqFile* f, const Parsed& p, uint64_t expect_digest_from_trailer,
                  const std::function<Status(const JournalEntry&)>* fn) {
  std::string hdr, payload, digest_input;
  uint64_t chunks = 0, entries = 0;
  JournalEntry e;
  while (f->pos() < p.trailer_offset) {
    if (p.trailer_offset - f->pos() < kSnapshotChunkHeader) return Bad(path, "truncated chunk header");
    KVFS_RETURN_IF_ERROR(f->ReadExact(kSnapshotChunkHeader, &hdr, "chunk header"));
    const uint64_t len = GetFixed(hdr.data(), 4);
    const uint64_t count = GetFixed(hdr.data() + 4, 4);
    const uint64_t sum = GetFixed(hdr.data() + 8, 8);
    if (len == 0 || len > kSnapshotMaxChunk || f->pos() + len > p.trailer_offset) {
      return Bad(path, "bad chunk length " + std::to_string(len) + " at offset " + std::to_string(f->pos() - 16));
    }
    KVFS_RETURN_IF_ERROR(f->ReadExact(len, &payload, "chunk"));
    if (XXH3_64bits(payload.data(), payload.size()) != sum) {
      return Bad(path, "chunk checksum mismatch at offset " + std::to_string(f->pos() - len - 16));
    }
    digest_input.append(hdr.data() + 8, 8);
    chunks++;
    entries += count;
    if (fn) {
      const char* q = payload.data();
      const char* end = q + payload.size();
      for (uint64_t i = 0; i < count; i++) {
        uint64_t n = 0;
        if (!GetVarint(&q, end, &n) || n > static_cast<uint64_t>(end - q)) return Bad(path, "bad entry length");
        Status s = DecodeJournalEntry(std::string_view(q, n), &e);
        if (!s.ok()) return s.code() == Status::Code::kNotSupported ? s : Bad(path, "entry does not decode: " + s.ToString());
        if (!SnapshotOp(e, p.version)) return Bad(path, std::string("unexpected ") + JournalOpName(e.op) + " entry");
        q += n;
        KVFS_RETURN_IF_ERROR((*fn)(e));
      }
      if (q != end) return Bad(path, "trailing bytes in a chunk");
    }
  }
  if (chunks != p.info.chunks || entries != p.info.entries) return Bad(path, "chunk/entry counts do not match the trailer");
  if (XXH3_64bits(digest_input.data(), digest_input.size()) != expect_digest_from_trailer) {
    return Bad(path, "digest mismatch (chunks missing or reordered)");
  }
  return Status::OK();
}

Status OpenAndFrame(Env* env, const std::string& path, const std::string& expect_node,
                    std::unique_ptr<BackingFile>* file, Parsed* p, uint64_t* digest) {
  auto f = env->Open(path, OpenOptions{});
  if (!f.ok()) return f.status();
  auto size = (*f)->Size();
  if (!size.ok()) return size.status();
  SeqFile sf(f->get(), *size);
  KVFS_RETURN_IF_ERROR(ParseFrame(path, &sf, expect_node, p));
  std::string t(8, '\0');
  size_t got = 0;
  KVFS_RETURN_IF_ERROR((*f)->Read(p->trailer_offset + 32, 8, t.data(), &got));
  if (got != 8) return Bad(path, "short trailer read");
  *digest = GetFixed(t.data(), 8);
  *file = std::move(*f);
  return Status::OK();
}

}  // namespace

Status ListNodeFiles(Env* env, const std::string& node_dir, NodeFiles* out) {
  std::vector<std::string> names;
  std::map<std::string, uint64_t> sizes;
  KVFS_RETURN_IF_ERROR(env->GetChildrenWithSizes(node_dir, &names, &sizes));
  out->journals.clear();
  out->snapshots.clear();
  for (const auto& name : names) {
    uint64_t g = 0, n = 0;
    if (ParseJournalFileName(name, &g, &n)) {
      auto sz = sizes.find(name);
      out->journals.push_back(JournalFile{g, n, node_dir + "/" + name,
                                          sz == sizes.end() ? -1 : static_cast<int64_t>(sz->second)});
    } else if (ParseSnapshotFileName(name, &g, &n)) {
      out->snapshots.push_back(SnapshotFile{g, n, node_dir + "/" + name});
    }
  }
  std::sort(out->journals.begin(), out->journals.end(), [](const JournalFile& a, const JournalFile& b) {
    return std::pair(a.generation, a.number) < std::pair(b.generation, b.number);
  });
  std::sort(out->snapshots.begin(), out->snapshots.end(), [](const SnapshotFile& a, const SnapshotFile& b) {
    return std::pair(a.generation, a.number) < std::pair(b.generation, b.number);
  });
  return Status::OK();
}

// ---- writer ----

Result<std::unique_ptr<SnapshotWriter>> SnapshotWriter::Create(Env* env, const std::string& dir,
                                                               const std::string& node, uint64_t generation,
                                                               uint64_t number) {
  if (node.empty() || node.size() > 0xffff) return Status::InvalidArgument("snapshot: bad node id");
  std::unique_ptr<SnapshotWriter> w(new SnapshotWriter());
  w->env_ = env;
  w->dir_ = dir;
  w->node_ = node;
  w->generation_ = generation;
  w->number_ = number;
  w->created_ns_ = WallClockNs();
  w->final_ = dir + "/" + SnapshotFileName(generation, number);
  w->tmp_ = w->final_ + ".tmp";
  Status r = env->Remove(w->tmp_);  // a leftover of a crashed checkpoint (private to this node)
  if (!r.ok() && !r.IsNotFound()) return r;
  OpenOptions o;
  o.write = o.create = o.exclusive = true;
  auto f = env->Open(w->tmp_, o);
  if (!f.ok()) return f.status();
  w->file_ = std::move(*f);
  const std::string h = w->HeaderBytes();
  WriteOp op{0, h.data(), h.size()};
  KVFS_RETURN_IF_ERROR(w->file_->Write(std::span<const WriteOp>(&op, 1)));
  w->offset_ = h.size();
  return w;
}

SnapshotWriter::~SnapshotWriter() {
  if (!finished_ && env_ != nullptr) {
    file_.reset();
    env_->Remove(tmp_);
  }
}

std::string SnapshotWriter::HeaderBytes() const {
  std::string h(kSnapshotMagic, 8);
  PutFixed(&h, version_, 4);
  PutFixed(&h, entry_version_, 4);
  PutFixed(&h, generation_, 8);
  PutFixed(&h, number_, 8);
  PutFixed(&h, max_stamp_, 8);
  PutFixed(&h, static_cast<uint64_t>(created_ns_), 8);
  PutFixed(&h, node_.size(), 2);
  h.append(6, '\0');
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, h.data(), 56);
  XXH3_64bits_update(&st, node_.data(), node_.size());
  PutFixed(&h, XXH3_64bits_digest(&st), 8);
  h += node_;
  return h;
}

Status SnapshotWriter::Add(const JournalEntry& e) {
  if (!SnapshotOp(e, kSnapshotVersion)) return Status::InvalidArgument(std::string("snapshot: ") + JournalOpName(e.op) + " entry");
  std::string enc;
  EncodeJournalEntry(e, &enc);
  PutVarint(&chunk_, enc.size());
  chunk_ += enc;
  chunk_entries_++;
  entries_++;
  max_stamp_ = std::max(max_stamp_, e.stamp);
  entry_version_ = std::max<uint32_t>(entry_version_, JournalEntryVersion(e));
  if (e.op == JournalOp::kSetattr) version_ = std::max<uint32_t>(version_, 3);
  if (e.op == JournalOp::kRename) version_ = std::max<uint32_t>(version_, IsExchangeRecord(e) ? 5 : 4);
  if (chunk_.size() >= kSnapshotTargetChunk) return WriteChunk();
  return Status::OK();
}

Status SnapshotWriter::WriteChunk() {
  if (chunk_entries_ == 0) return Status::OK();
  std::string hdr;
  PutFixed(&hdr, chunk_.size(), 4);
  PutFixed(&hdr, chunk_entries_, 4);
  const uint64_t sum = XXH3_64bits(chunk_.data(), chunk_.size());
  PutFixed(&hdr, sum, 8);
  WriteOp ops[2] = {{offset_, hdr.data(), hdr.size()}, {offset_ + hdr.size(), chunk_.data(), chunk_.size()}};
  KVFS_RETURN_IF_ERROR(file_->Write(std::span<const WriteOp>(ops, 2)));
  offset_ += hdr.size() + chunk_.size();
  digest_input_.append(hdr.data() + 8, 8);
  chunks_++;
  chunk_.clear();
  chunk_entries_ = 0;
  return Status::OK();
}

Status SnapshotWriter::Finish() {
  KVFS_RETURN_IF_ERROR(WriteChunk());
  std::string t(kSnapshotTrailerMagic, 8);
  PutFixed(&t, chunks_, 8);
  PutFixed(&t, entries_, 8);
  PutFixed(&t, offset_, 8);
  PutFixed(&t, XXH3_64bits(digest_input_.data(), digest_input_.size()), 8);
  PutFixed(&t, XXH3_64bits(t.data(), 40), 8);
  const std::string h = HeaderBytes();  // now with the max stamp
  WriteOp ops[2] = {{offset_, t.data(), t.size()}, {0, h.data(), h.size()}};
  KVFS_RETURN_IF_ERROR(file_->Write(std::span<const WriteOp>(ops, 2)));
  offset_ += t.size();
  KVFS_RETURN_IF_ERROR(file_->Sync());
  file_.reset();
  KVFS_RETURN_IF_ERROR(env_->Rename(tmp_, final_));
  finished_ = true;
  return env_->SyncDir(dir_);
}

// ---- reader ----

Status VerifySnapshot(Env* env, const std::string& path, const std::string& expect_node, SnapshotInfo* info) {
  std::unique_ptr<BackingFile> file;
  Parsed p;
  uint64_t digest = 0;
  KVFS_RETURN_IF_ERROR(OpenAndFrame(env, path, expect_node, &file, &p, &digest));
  SeqFile sf(file.get(), p.info.file_size);
  sf.Seek(p.body_start);
  KVFS_RETURN_IF_ERROR(WalkChunks(path, &sf, p, digest, nullptr));
  if (info) *info = p.info;
  return Status::OK();
}

Status ReadSnapshot(Env* env, const std::string& path, const std::string& expect_node,
                    const std::function<Status(const JournalEntry&)>& fn, SnapshotInfo* info) {
  std::unique_ptr<BackingFile> file;
  Parsed p;
  uint64_t digest = 0;
  KVFS_RETURN_IF_ERROR(OpenAndFrame(env, path, expect_node, &file, &p, &digest));
  SeqFile sf(file.get(), p.info.file_size);
  sf.Seek(p.body_start);
  // Pass 1: every checksum, before any entry is handed out.
  KVFS_RETURN_IF_ERROR(WalkChunks(path, &sf, p, digest, nullptr));
  // Pass 2: decode (each chunk is verified again: the file is immutable, but never trust a re-read).
  sf.Seek(p.body_start);
  if (info) *info = p.info;
  return WalkChunks(path, &sf, p, digest, &fn);
}

}  // namespace kvfs
