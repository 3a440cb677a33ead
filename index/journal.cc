#include "index/journal.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

namespace kvfs {
namespace {

constexpr size_t B = kJournalBlockSize;
constexpr size_t H = kJournalFragmentHeaderSize;

uint32_t Fixed32(const char* p) {
  return static_cast<uint32_t>(static_cast<unsigned char>(p[0])) |
         static_cast<uint32_t>(static_cast<unsigned char>(p[1])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(p[2])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(p[3])) << 24;
}
uint16_t Fixed16(const char* p) {
  return static_cast<uint16_t>(static_cast<unsigned char>(p[0]) |
                               static_cast<unsigned char>(p[1]) << 8);
}

std::string Basename(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string JournalPosition::ToString() const {
  return std::to_string(generation) + "-" + std::to_string(file_number) + "@" + std::to_string(offset);
}

const char* JournalEndName(JournalEnd e) {
  switch (e) {
    case JournalEnd::kNotReached: return "not-reached";
    case JournalEnd::kClean: return "clean";
    case JournalEnd::kTorn: return "torn";
    case JournalEnd::kDamaged: return "damaged";
  }
  return "?";
}

Status ListJournalFiles(Env* env, const std::string& node_dir, std::vector<JournalFile>* out) {
  std::vector<std::string> names;
  KVFS_RETURN_IF_ERROR(env->GetChildren(node_dir, &names));
  out->clear();
  for (const auto& name : names) {
    JournalFile f;
    if (!ParseJournalFileName(name, &f.generation, &f.number)) continue;
    f.path = node_dir + "/" + name;
    out->push_back(std::move(f));
  }
  std::sort(out->begin(), out->end(), [](const JournalFile& a, const JournalFile& b) {
    return std::pair(a.generation, a.number) < std::pair(b.generation, b.number);
  });
  return Status::OK();
}

// ======================================== JournalWriter ========================================

JournalWriter::JournalWriter(const JournalWriterOptions& opts) : opts_(opts) {}
JournalWriter::~JournalWriter() = default;

std::string JournalWriter::FilePath(uint64_t number) const {
  return opts_.dir + "/" + JournalFileName(opts_.generation, number);
}

Result<std::unique_ptr<JournalWriter>> JournalWriter::Open(const JournalWriterOptions& opts) {
  if (opts.env == nullptr) return Status::InvalidArgument("JournalWriter: env is required");
  if (opts.dir.empty()) return Status::InvalidArgument("JournalWriter: dir is required");
  if (opts.node.empty() || opts.node.size() > 1024) {
    return Status::InvalidArgument("JournalWriter: node id must have 1..1024 bytes");
  }
  if (opts.max_file_size == 0) return Status::InvalidArgument("JournalWriter: max_file_size is 0");
  std::unique_ptr<JournalWriter> w(new JournalWriter(opts));
  OpenOptions o;
  o.write = o.create = o.exclusive = true;
  auto f = opts.env->Open(w->FilePath(opts.first_file_number), o);
  if (!f.ok()) return f.status();
  w->files_[opts.first_file_number] = std::move(*f);
  w->max_created_ = opts.first_file_number;
  w->dir_sync_needed_ = opts.sync_dir_on_create;
  std::lock_guard<std::mutex> l(w->mu_);
  w->StartFileLocked(opts.first_file_number);
  w->flushed_ = w->synced_ = JournalPosition{opts.generation, opts.first_file_number, 0};
  return w;
}

void JournalWriter::EmitLocked(const char* data, size_t n) {
  if (n == 0) return;
  if (pending_.empty() || pending_.back().file_number != file_number_ ||
      pending_.back().offset + pending_.back().data.size() != file_offset_) {
    pending_.push_back(Chunk{file_number_, file_offset_, {}});
  }
  pending_.back().data.append(data, n);
  file_offset_ += n;
  pending_bytes_ += n;
}

void JournalWriter::StartFileLocked(uint64_t number) {
  file_number_ = number;
  file_offset_ = 0;
  entries_in_file_ = 0;
  JournalFileHeader h;
  h.generation = opts_.generation;
  h.file_number = number;
  h.node = opts_.node;
  AddRecordLocked(FragmentType::kFileHeader, EncodeJournalFileHeader(h));
  appended_ = JournalPosition{opts_.generation, file_number_, file_offset_};
}

// LevelDB log::Writer::AddRecord: fragments never cross a block; a block tail shorter than a header is
// zero-filled.
void JournalWriter::AddRecordLocked(FragmentType single_type, std::string_view payload) {
  static const char kZeros[H] = {};
  const char* ptr = payload.data();
  size_t left = payload.size();
  bool begin = true;
  do {
    const size_t leftover = B - file_offset_ % B;
    if (leftover < H) EmitLocked(kZeros, leftover);
    const size_t avail = B - file_offset_ % B - H;
    const size_t frag = std::min(left, avail);
    const bool end = frag == left;
    FragmentType type;
    if (single_type == FragmentType::kFileHeader) {
      type = FragmentType::kFileHeader;  // always fits: Open bounds the node id
    } else if (begin && end) {
      type = FragmentType::kFull;
    } else if (begin) {
      type = FragmentType::kFirst;
    } else if (end) {
      type = FragmentType::kLast;
    } else {
      type = FragmentType::kMiddle;
    }
    const uint32_t crc = JournalFragmentChecksum(static_cast<uint8_t>(type), ptr, frag);
    const char hdr[H] = {static_cast<char>(crc & 0xff),         static_cast<char>((crc >> 8) & 0xff),
                         static_cast<char>((crc >> 16) & 0xff), static_cast<char>((crc >> 24) & 0xff),
                         static_cast<char>(frag & 0xff),        static_cast<char>((frag >> 8) & 0xff),
                         static_cast<char>(type)};
    EmitLocked(hdr, H);
    EmitLocked(ptr, frag);
    ptr += frag;
    left -= frag;
    begin = false;
  } while (left > 0);
}

JournalPosition JournalWriter::Append(const JournalEntry& entry) {
  std::string payload;
  EncodeJournalEntry(entry, &payload);
  std::lock_guard<std::mutex> l(mu_);
  if (entries_in_file_ > 0 && file_offset_ >= opts_.max_file_size) StartFileLocked(file_number_ + 1);
  AddRecordLocked(FragmentType::kFull, payload);
  entries_in_file_++;
  appended_ = JournalPosition{opts_.generation, file_number_, file_offset_};
  return appended_;
}

uint64_t JournalWriter::Rotate() {
  std::lock_guard<std::mutex> l(mu_);
  if (entries_in_file_ > 0) StartFileLocked(file_number_ + 1);
  return file_number_;
}

Result<BackingFile*> JournalWriter::FileFor(uint64_t number) {
  auto it = files_.find(number);
  if (it != files_.end()) return it->second.get();
  OpenOptions o;
  o.write = true;
  // A file this writer created and already closed (older than the current one) is reopened; a new
  // one is created exclusively.
  o.create = o.exclusive = number > max_created_;
  auto f = opts_.env->Open(FilePath(number), o);
  if (!f.ok()) return f.status();
  if (o.create) {
    max_created_ = number;
    dir_sync_needed_ = dir_sync_needed_ || opts_.sync_dir_on_create;
  }
  BackingFile* raw = f->get();
  files_[number] = std::move(*f);
  return raw;
}

Status JournalWriter::FlushLocked() {
  std::deque<Chunk> work;
  JournalPosition target;
  {
    std::lock_guard<std::mutex> l(mu_);
    work.swap(pending_);
    pending_bytes_ = 0;
    target = appended_;
  }
  size_t i = 0;
  Status s;
  std::vector<WriteOp> ops;
  while (i < work.size()) {
    const uint64_t number = work[i].file_number;
    size_t k = i;
    ops.clear();
    while (k < work.size() && work[k].file_number == number) {
      ops.push_back(WriteOp{work[k].offset, work[k].data.data(), work[k].data.size()});
      k++;
    }
    auto f = FileFor(number);
    if (!f.ok()) {
      s = f.status();
      break;
    }
    s = (*f)->Write(std::span<const WriteOp>(ops.data(), ops.size()));
    if (!s.ok()) {
      // After a timeout the next Flush reopens the file: the descriptor DeadlineEnv poisoned must not
      // keep the journal failing forever. Rewriting is idempotent (every byte of a journal file has one
      // value, written at its one offset), so a late write of the hung request is harmless. Other
      // errors keep the descriptor (ENOSPC, EIO: retried on it).
      if (s.IsTimedOut()) files_.erase(number);
      break;
    }
    for (; i < k; i++) unsynced_.push_back(std::move(work[i]));
  }
  std::lock_guard<std::mutex> l(mu_);
  if (!s.ok()) {
    // Keep the unwritten bytes, in order, ahead of anything appended meanwhile; the next Flush rewrites
    // them at the same offsets.
    for (size_t j = work.size(); j > i; j--) {
      pending_bytes_ += work[j - 1].data.size();
      pending_.push_front(std::move(work[j - 1]));
    }
    return s;
  }
  flushed_ = std::max(flushed_, target);
  return Status::OK();
}

Status JournalWriter::Flush() {
  std::lock_guard<std::mutex> io(io_mu_);
  return FlushLocked();
}

Status JournalWriter::Sync() {
  std::lock_guard<std::mutex> io(io_mu_);
  KVFS_RETURN_IF_ERROR(FlushLocked());
  JournalPosition target;
  {
    std::lock_guard<std::mutex> l(mu_);
    target = flushed_;
  }
  std::set<uint64_t> numbers;
  for (const auto& c : unsynced_) numbers.insert(c.file_number);
  for (uint64_t n : numbers) {
    auto f = FileFor(n);
    Status s = f.ok() ? (*f)->Sync() : f.status();
    if (!s.ok()) {
      // fdatasync failed: the kernel may have dropped the dirty pages; the next Sync writes them again.
      return RequeueUnsynced(n, s);
    }
  }
  unsynced_.clear();
  written_back_chunks_ = 0;
  if (dir_sync_needed_) {
    KVFS_RETURN_IF_ERROR(opts_.env->SyncDir(opts_.dir));
    dir_sync_needed_ = false;
  }
  std::lock_guard<std::mutex> l(mu_);
  synced_ = std::max(synced_, target);
  // Close files that nothing refers to any more (older than the current file and than any pending byte).
  uint64_t keep_from = file_number_;
  for (const auto& c : pending_) keep_from = std::min(keep_from, c.file_number);
  files_.erase(files_.begin(), files_.lower_bound(keep_from));
  return Status::OK();
}

Status JournalWriter::RequeueUnsynced(uint64_t file_number, const Status& s) {
  if (s.IsTimedOut()) files_.erase(file_number);  // reopened by the next Flush (see FlushLocked)
  // Every byte written since the last good Sync goes back to the front of pending_, in order, so the
  // next Flush/Sync rewrites (and syncs) it.
  std::lock_guard<std::mutex> l(mu_);
  for (size_t j = unsynced_.size(); j > 0; j--) {
    pending_bytes_ += unsynced_[j - 1].data.size();
    pending_.push_front(std::move(unsynced_[j - 1]));
  }
  unsynced_.clear();
  written_back_chunks_ = 0;
  return s;
}

Status JournalWriter::WriteBack() {
  std::lock_guard<std::mutex> io(io_mu_);
  KVFS_RETURN_IF_ERROR(FlushLocked());
  std::set<uint64_t> numbers;
  for (size_t i = written_back_chunks_; i < unsynced_.size(); i++) numbers.insert(unsynced_[i].file_number);
  for (uint64_t n : numbers) {
    auto f = FileFor(n);
    Status s = f.ok() ? (*f)->WriteBack() : f.status();
    if (!s.ok()) {
      // A failed write-back may have dropped dirty pages, as a failed fdatasync.
      return RequeueUnsynced(n, s);
    }
  }
  written_back_chunks_ = unsynced_.size();
  return Status::OK();
}

JournalPosition JournalWriter::appended_position() const {
  std::lock_guard<std::mutex> l(mu_);
  return appended_;
}
JournalPosition JournalWriter::flushed_position() const {
  std::lock_guard<std::mutex> l(mu_);
  return flushed_;
}
JournalPosition JournalWriter::synced_position() const {
  std::lock_guard<std::mutex> l(mu_);
  return synced_;
}
uint64_t JournalWriter::buffered_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return pending_bytes_;
}
uint64_t JournalWriter::current_file_number() const {
  std::lock_guard<std::mutex> l(mu_);
  return file_number_;
}

// ======================================== JournalReader ========================================

Result<std::unique_ptr<JournalReader>> JournalReader::Open(Env* env, const std::string& path,
                                                           uint64_t start_offset,
                                                           const JournalReaderOptions& opts) {
  uint64_t gen = 0, number = 0;
  if (!ParseJournalFileName(Basename(path), &gen, &number)) {
    return Status::InvalidArgument("not a journal file name: " + path);
  }
  OpenOptions o;
  o.direct = opts.direct;
  auto f = env->Open(path, o);
  if (!f.ok()) return f.status();
  return std::unique_ptr<JournalReader>(new JournalReader(env, std::move(*f), gen, number, start_offset, opts));
}

Result<std::unique_ptr<JournalReader>> JournalReader::OpenFile(Env* env, std::unique_ptr<BackingFile> file,
                                                               const std::string& path, uint64_t start_offset,
                                                               const JournalReaderOptions& opts) {
  uint64_t gen = 0, number = 0;
  if (!ParseJournalFileName(Basename(path), &gen, &number)) {
    return Status::InvalidArgument("not a journal file name: " + path);
  }
  return std::unique_ptr<JournalReader>(new JournalReader(env, std::move(file), gen, number, start_offset, opts));
}

JournalReader::JournalReader(Env* env, std::unique_ptr<BackingFile> file, uint64_t gen, uint64_t number,
                             uint64_t start, const JournalReaderOptions& opts)
    : env_(env), file_(std::move(file)), generation_(gen), number_(number), opts_(opts), pos_(start) {
  buf_cap_ = std::max<size_t>(B, opts.readahead / B * B);
  buf_ = static_cast<char*>(std::aligned_alloc(4096, buf_cap_));
  report_.valid_end = Pos(start);
}

JournalReader::~JournalReader() { std::free(buf_); }

void JournalReader::DropWindow() {
  win_valid_ = false;
  win_len_ = 0;
  win_eof_ = false;
}

Result<std::pair<const char*, size_t>> JournalReader::Block(uint64_t b) {
  if (win_valid_ && b >= win_block_) {
    const uint64_t off = (b - win_block_) * B;
    if (off < win_len_) return std::pair<const char*, size_t>(buf_ + off, std::min<uint64_t>(B, win_len_ - off));
    if (win_eof_) return std::pair<const char*, size_t>(nullptr, 0);
  }
  if (buf_ == nullptr) return Status::IOError("journal reader: out of memory", ENOMEM);
  size_t got = 0;
  const uint64_t off = b * B;
  const size_t want = opts_.limit <= off ? 0 : static_cast<size_t>(std::min<uint64_t>(buf_cap_, opts_.limit - off));
  // With O_DIRECT the read length must stay aligned: read the whole window, then clamp to the limit.
  if (want > 0) KVFS_RETURN_IF_ERROR(file_->Read(off, buf_cap_, buf_, &got));
  const bool hit_eof = got < buf_cap_;
  got = std::min(got, want);
  win_valid_ = true;
  win_block_ = b;
  win_len_ = got;
  win_eof_ = hit_eof || got < buf_cap_;
  if (win_eof_) report_.file_size = b * B + got;
  if (got == 0) return std::pair<const char*, size_t>(nullptr, 0);
  return std::pair<const char*, size_t>(buf_, std::min<size_t>(B, got));
}

JournalReader::Frag JournalReader::ParseAt(const char* p, size_t len, size_t in_block, uint8_t* type,
                                           const char** payload, size_t* n) const {
  if (B - in_block < H) return Frag::kTrailer;
  if (len - in_block < H) return Frag::kEof;  // partial header at EOF (len < B here)
  const char* hdr = p + in_block;
  const uint32_t crc = Fixed32(hdr);
  const size_t length = Fixed16(hdr + 4);
  const uint8_t t = static_cast<uint8_t>(hdr[6]);
  if (crc == 0 && length == 0 && t == 0) return Frag::kInvalid;  // zero region
  if (in_block + H + length > B) return Frag::kInvalid;           // crosses the block
  if (in_block + H + length > len) return Frag::kEof;             // partial fragment at EOF
  if (t == 0 || t > kMaxFragmentType) return Frag::kInvalid;
  if (JournalFragmentChecksum(t, hdr + H, length) != crc) return Frag::kInvalid;
  *type = t;
  *payload = hdr + H;
  *n = length;
  return Frag::kValid;
}

Result<bool> JournalReader::ValidDataFrom(uint64_t b) {
  for (;; b++) {
    auto blk = Block(b);
    if (!blk.ok()) return blk.status();
    if (blk->second == 0) return false;
    uint8_t t;
    const char* payload;
    size_t n;
    if (ParseAt(blk->first, blk->second, 0, &t, &payload, &n) == Frag::kValid) return true;
  }
}

void JournalReader::Finish(JournalEnd end) {
  report_.end = end;
  report_.tail_bytes = 0;
  report_.tail_zero = false;
  const uint64_t from = report_.valid_end.offset;
  if (end != JournalEnd::kClean && report_.file_size > from) {
    report_.tail_bytes = report_.file_size - from;
    bool zero = true;
    for (uint64_t off = from; zero && off < report_.file_size;) {
      auto blk = Block(off / B);
      if (!blk.ok() || blk->second == 0) break;
      const size_t in_block = off % B;
      for (size_t i = in_block; i < blk->second; i++) {
        if (blk->first[i] != 0) {
          zero = false;
          break;
        }
      }
      off = (off / B + 1) * B;
    }
    report_.tail_zero = zero;
  }
  // Rewind so that a later Next() re-reads whatever follows the last complete entry.
  pos_ = from;
  in_record_ = false;
  record_.clear();
  record_fragments_ = 0;
  bad_pending_ = false;
  tent_regions_ = tent_bytes_ = tent_blocks_ = tent_dropped_ = 0;
  last_bad_block_ = UINT64_MAX;
  DropWindow();
}

Result<bool> JournalReader::Next(JournalEntry* entry, JournalPosition* end) {
  if (!sticky_.ok()) return sticky_;
  report_.end = JournalEnd::kNotReached;
  report_.tail_bytes = 0;
  report_.tail_zero = false;
  for (;;) {
    const uint64_t b = pos_ / B;
    const size_t in_block = pos_ % B;
    if (B - in_block < H) {  // block trailer (padding): the next fragment starts at the next block
      pos_ = (b + 1) * B;
      continue;
    }
    auto blk = Block(b);
    if (!blk.ok()) return blk.status();
    const auto [p, len] = *blk;
    if (in_block >= len) {  // end of the data
      const bool clean = !bad_pending_ && !in_record_ && tent_dropped_ == 0;
      Finish(clean ? JournalEnd::kClean : JournalEnd::kTorn);
      return false;
    }
    uint8_t t = 0;
    const char* payload = nullptr;
    size_t n = 0;
    const Frag frag = ParseAt(p, len, in_block, &t, &payload, &n);
    if (frag == Frag::kEof) {  // a partial header or fragment ends the file
      Finish(JournalEnd::kTorn);
      return false;
    }
    if (frag == Frag::kInvalid) {
      if (!opts_.skip_damage) {
        auto more = ValidDataFrom(b + 1);
        if (!more.ok()) return more.status();
        Finish(*more ? JournalEnd::kDamaged : JournalEnd::kTorn);
        return false;
      }
      if (in_record_) {
        tent_dropped_ += record_fragments_;
        in_record_ = false;
        record_.clear();
        record_fragments_ = 0;
      }
      if (!bad_pending_) {
        bad_pending_ = true;
        bad_start_ = pos_;
      }
      if (b != last_bad_block_) {
        tent_blocks_++;
        last_bad_block_ = b;
      }
      pos_ = (b + 1) * B;
      continue;
    }
    // A valid fragment.
    if (bad_pending_) {
      tent_regions_++;
      tent_bytes_ += pos_ - bad_start_;
      bad_pending_ = false;
    }
    const uint64_t frag_start = pos_;
    pos_ += H + n;
    const FragmentType type = static_cast<FragmentType>(t);
    // A fragment that does not continue the sequence the writer produces means damage around it.
    const bool out_of_sequence =
        (type == FragmentType::kFileHeader && frag_start != 0) ||
        ((type == FragmentType::kFull || type == FragmentType::kFirst || type == FragmentType::kFileHeader) &&
         in_record_) ||
        ((type == FragmentType::kMiddle || type == FragmentType::kLast) && !in_record_);
    if (out_of_sequence) {
      if (!opts_.skip_damage) {
        Finish(JournalEnd::kDamaged);
        return false;
      }
      if (in_record_ && type != FragmentType::kFileHeader) {
        // FULL/FIRST while a record is open: the open record lost its tail; this fragment is fine.
        tent_dropped_ += record_fragments_;
        in_record_ = false;
        record_.clear();
        record_fragments_ = 0;
      } else {
        tent_dropped_++;  // an orphan MIDDLE/LAST, or a file header where none belongs
        continue;
      }
    }
    bool complete = false;
    switch (type) {
      case FragmentType::kFileHeader: {
        JournalFileHeader h;
        Status s = DecodeJournalFileHeader(std::string_view(payload, n), &h);
        if (!s.ok()) return sticky_ = s;
        if (h.generation != generation_ || h.file_number != number_ ||
            (!opts_.expect_node.empty() && h.node != opts_.expect_node)) {
          return sticky_ = Status::Corruption("journal file " + file_->path() + ": header names node '" +
                                              h.node + "' file " + JournalFileName(h.generation, h.file_number));
        }
        report_.header_valid = true;
        report_.header = std::move(h);
        report_.valid_end = Pos(pos_);
        continue;
      }
      case FragmentType::kFull:
        record_.assign(payload, n);
        complete = true;
        break;
      case FragmentType::kFirst:
        record_.assign(payload, n);
        in_record_ = true;
        record_fragments_ = 1;
        break;
      case FragmentType::kMiddle:
        record_.append(payload, n);
        record_fragments_++;
        break;
      case FragmentType::kLast:
        record_.append(payload, n);
        in_record_ = false;
        record_fragments_ = 0;
        complete = true;
        break;
      default:
        break;
    }
    if (!complete) continue;
    // A complete record: everything before it is settled.
    report_.valid_end = Pos(pos_);
    report_.corrupt_regions += tent_regions_;
    report_.corrupt_bytes += tent_bytes_;
    report_.corrupt_blocks += tent_blocks_;
    report_.dropped_fragments += tent_dropped_;
    tent_regions_ = tent_bytes_ = tent_blocks_ = tent_dropped_ = 0;
    Status s = DecodeJournalEntry(record_, entry);
    if (s.ok()) {
      report_.entries++;
      *end = Pos(pos_);
      return true;
    }
    if (s.code() == Status::Code::kNotSupported) return sticky_ = s;
    report_.bad_entries++;
  }
}

Status ReadJournalFile(Env* env, const std::string& path, const JournalReaderOptions& opts,
                       std::vector<std::pair<JournalEntry, JournalPosition>>* out,
                       JournalReadReport* report) {
  auto r = JournalReader::Open(env, path, 0, opts);
  if (!r.ok()) return r.status();
  JournalEntry e;
  JournalPosition pos;
  for (;;) {
    auto got = (*r)->Next(&e, &pos);
    if (!got.ok()) {
      if (report) *report = (*r)->report();
      return got.status();
    }
    if (!*got) break;
    out->emplace_back(std::move(e), pos);
  }
  if (report) *report = (*r)->report();
  return Status::OK();
}

}  // namespace kvfs
