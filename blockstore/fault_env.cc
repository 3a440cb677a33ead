#include "blockstore/fault_env.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace kvfs {

namespace {

std::string ParentDir(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string StripTrailingSlash(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

void ZeroCounters(EnvCounters& c) {
  for (auto* a : {&c.open, &c.create, &c.close, &c.read, &c.write, &c.write_batches, &c.sync, &c.mkdir,
                  &c.rename, &c.remove, &c.stat, &c.list, &c.syncdir, &c.writeback, &c.bytes_read, &c.bytes_written}) {
    a->store(0, std::memory_order_relaxed);
  }
}

Status StaleFile(const std::string& path) {
  return Status::IOError("file opened before a simulated crash (DropUnsyncedData) is stale: " + path, EIO);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// File

class FaultInjectionEnv::File : public BackingFile {
 public:
  File(FaultInjectionEnv* env, std::unique_ptr<BackingFile> base, bool writable)
      : env_(env), base_(std::move(base)), writable_(writable), epoch_(env->epoch()) {}
  ~File() override { env_->counters_.close.fetch_add(1, std::memory_order_relaxed); }

  Status Read(uint64_t offset, size_t n, void* buf, size_t* got) override {
    env_->counters_.read.fetch_add(1, std::memory_order_relaxed);
    *got = 0;
    if (stale()) return StaleFile(path());
    auto inj = env_->Check(kFaultRead, path());
    if (inj.err) return env_->Inject(inj, "read", path());
    KVFS_RETURN_IF_ERROR(base_->Read(offset, n, buf, got));
    env_->counters_.bytes_read.fetch_add(*got, std::memory_order_relaxed);
    return Status::OK();
  }

  Status Write(std::span<const WriteOp> ops) override {
    env_->counters_.write.fetch_add(ops.size(), std::memory_order_relaxed);
    env_->counters_.write_batches.fetch_add(1, std::memory_order_relaxed);
    if (stale()) return StaleFile(path());
    auto inj = env_->Check(kFaultWrite, path());
    if (inj.is_short) {
      // Write the first short_bytes of the batch (in op order), then fail.
      size_t left = inj.short_bytes;
      for (const auto& op : ops) {
        if (left == 0) break;
        size_t n = std::min(left, op.len);
        Status s = base_->Write(op.offset, op.data, n);
        env_->OnWrite(path(), op.offset + n);  // conservatively: part may have landed even on error
        if (!s.ok()) return s;
        env_->counters_.bytes_written.fetch_add(n, std::memory_order_relaxed);
        left -= n;
      }
      return env_->Inject(inj, "short write", path());
    }
    if (inj.err) return env_->Inject(inj, "write", path());
    uint64_t end = 0, bytes = 0;
    for (const auto& op : ops) {
      end = std::max<uint64_t>(end, op.offset + op.len);
      bytes += op.len;
    }
    Status s = base_->Write(ops);
    if (writable_ && end > 0) env_->OnWrite(path(), end);
    if (!s.ok()) return s;
    env_->counters_.bytes_written.fetch_add(bytes, std::memory_order_relaxed);
    return Status::OK();
  }

  Status Sync() override {
    env_->counters_.sync.fetch_add(1, std::memory_order_relaxed);
    if (stale()) return StaleFile(path());
    auto inj = env_->Check(kFaultSync, path());
    if (inj.err) return env_->Inject(inj, "sync", path());
    // Everything written before the sync started is durable once it returns OK.
    uint64_t size = env_->SizeForSync(path());
    KVFS_RETURN_IF_ERROR(base_->Sync());
    env_->OnSynced(path(), size);
    return Status::OK();
  }

  // Not durable: the crash model (DropUnsyncedData) still drops what it wrote.
  Status WriteBack() override {
    env_->counters_.writeback.fetch_add(1, std::memory_order_relaxed);
    if (stale()) return StaleFile(path());
    return base_->WriteBack();
  }

  // kFaultTruncate rules apply. The crash model takes the truncation as durable at once (synced size
  // lowered too): a power cut never brings the dropped bytes back.
  Status Truncate(uint64_t size) override {
    env_->counters_.write.fetch_add(1, std::memory_order_relaxed);
    if (stale()) return StaleFile(path());
    auto inj = env_->Check(kFaultTruncate, path());
    if (inj.err) return env_->Inject(inj, "ftruncate", path());
    KVFS_RETURN_IF_ERROR(base_->Truncate(size));
    env_->OnTruncate(path(), size);
    return Status::OK();
  }

  Result<uint64_t> Size() override {
    env_->counters_.stat.fetch_add(1, std::memory_order_relaxed);
    if (stale()) return StaleFile(path());
    auto inj = env_->Check(kFaultSize, path());
    if (inj.err) return env_->Inject(inj, "fstat", path());
    return base_->Size();
  }

  const std::string& path() const override { return base_->path(); }

 private:
  bool stale() const { return env_->epoch() != epoch_; }

  FaultInjectionEnv* const env_;
  std::unique_ptr<BackingFile> base_;
  const bool writable_;
  const uint64_t epoch_;
};

// ---------------------------------------------------------------------------------------------------
// Faults

FaultInjectionEnv::FaultInjectionEnv(Env* base) : base_(base) {}

FaultInjectionEnv::~FaultInjectionEnv() {
  std::lock_guard<std::mutex> l(mu_);
  shutting_down_ = true;
  ++wake_gen_;
  wake_.notify_all();
}

int FaultInjectionEnv::AddFault(FaultRule rule) {
  std::lock_guard<std::mutex> l(mu_);
  int id = next_rule_id_++;
  rules_.push_back(Rule{id, std::move(rule)});
  return id;
}

void FaultInjectionEnv::RemoveFault(int id) {
  std::lock_guard<std::mutex> l(mu_);
  std::erase_if(rules_, [id](const Rule& r) { return r.id == id; });
  ++wake_gen_;
  wake_.notify_all();
}

void FaultInjectionEnv::ClearFaults() {
  std::lock_guard<std::mutex> l(mu_);
  rules_.clear();
  ++wake_gen_;
  wake_.notify_all();
}

uint64_t FaultInjectionEnv::FaultFired(int id) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& r : rules_) {
    if (r.id == id) return r.fired;
  }
  return 0;
}

int FaultInjectionEnv::FailWrites(int err, std::string path_substr) {
  return AddFault(
      FaultRule{.ops = kFaultWrite, .path_substr = std::move(path_substr), .err = err ? err : EIO});
}

int FaultInjectionEnv::FailReads(int err, std::string path_substr) {
  return AddFault(
      FaultRule{.ops = kFaultRead, .path_substr = std::move(path_substr), .err = err ? err : EIO});
}

int FaultInjectionEnv::FailSyncs(int err, std::string path_substr) {
  return AddFault(
      FaultRule{.ops = kFaultSync, .path_substr = std::move(path_substr), .err = err ? err : EIO});
}

int FaultInjectionEnv::FailMetadata(int err, std::string path_substr) {
  return AddFault(
      FaultRule{.ops = kFaultMetadata, .path_substr = std::move(path_substr), .err = err ? err : EIO});
}

int FaultInjectionEnv::ShortWriteNth(uint64_t n, size_t short_bytes, int err, std::string path_substr) {
  return AddFault(FaultRule{.ops = kFaultWrite,
                            .path_substr = std::move(path_substr),
                            .err = err ? err : EIO,
                            .skip = n > 0 ? n - 1 : 0,
                            .times = 1,
                            .short_bytes = short_bytes});
}

int FaultInjectionEnv::Hang(std::chrono::nanoseconds d, uint32_t ops, std::string path_substr) {
  return AddFault(FaultRule{.ops = ops, .path_substr = std::move(path_substr), .err = 0, .delay = d});
}

int FaultInjectionEnv::Disappear(std::string path_substr, int err) {
  return AddFault(
      FaultRule{.ops = kFaultAll, .path_substr = std::move(path_substr), .err = err ? err : ENOENT});
}

FaultInjectionEnv::Injection FaultInjectionEnv::Check(uint32_t op, const std::string& path,
                                                      const std::string& path2) {
  Injection inj;
  std::chrono::nanoseconds delay{0};
  std::unique_lock<std::mutex> l(mu_);
  if (rules_.empty()) return inj;
  for (auto& r : rules_) {
    if (!(r.rule.ops & op)) continue;
    const std::string& sub = r.rule.path_substr;
    if (!sub.empty() && path.find(sub) == std::string::npos &&
        (path2.empty() || path2.find(sub) == std::string::npos)) {
      continue;
    }
    ++r.seen;
    if (r.seen <= r.rule.skip || r.fired >= r.rule.times) continue;
    ++r.fired;
    delay += r.rule.delay;
    if (inj.err == 0 && r.rule.err != 0) {
      inj.err = r.rule.err;
      if (op == kFaultWrite && r.rule.short_bytes > 0) {
        inj.is_short = true;
        inj.short_bytes = r.rule.short_bytes;
      }
    }
  }
  if (delay.count() > 0) {
    const uint64_t gen = wake_gen_;
    wake_.wait_for(l, delay, [&] { return wake_gen_ != gen || shutting_down_; });
  }
  return inj;
}

Status FaultInjectionEnv::Inject(const Injection& inj, const char* what, const std::string& path) const {
  int err = inj.err ? inj.err : EIO;
  return Status::FromErrno(err,
                           std::string("injected fault (") + std::strerror(err) + "): " + what + " " + path);
}

// ---------------------------------------------------------------------------------------------------
// Tracking for the crash model

void FaultInjectionEnv::OnWrite(const std::string& path, uint64_t end) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(path);
  if (it != files_.end()) it->second.size = std::max(it->second.size, end);
}

void FaultInjectionEnv::OnTruncate(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;
  it->second.size = size;
  it->second.synced_size = std::min(it->second.synced_size, size);
}

uint64_t FaultInjectionEnv::SizeForSync(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? 0 : it->second.size;
}

void FaultInjectionEnv::OnSynced(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;
  it->second.synced_size = std::max(it->second.synced_size, size);
  it->second.new_name = false;  // fsync of a new file makes its name durable too (ext4, NFS CREATE)
}

size_t FaultInjectionEnv::UnsyncedFileCount() const {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (const auto& [p, f] : files_) {
    if (f.new_name || f.size > f.synced_size) ++n;
  }
  return n + renames_.size();
}

Status FaultInjectionEnv::DropUnsyncedData(const std::string& keep_substr) {
  std::map<std::string, FileState> files;
  std::vector<PendingRename> renames;
  {
    std::lock_guard<std::mutex> l(mu_);
    files.swap(files_);
    if (!keep_substr.empty()) {
      // Their written-back pages reached stable storage before the cut: nothing of them is dropped.
      std::erase_if(files, [&](const auto& kv) { return kv.first.find(keep_substr) != std::string::npos; });
    }
    renames.swap(renames_);
    epoch_.fetch_add(1, std::memory_order_acq_rel);
  }
  Status first;
  auto note = [&first](const Status& s) {
    if (!s.ok() && first.ok()) first = s;
  };
  // 1. Undo renames that no SyncDir made durable, newest first.
  for (auto it = renames.rbegin(); it != renames.rend(); ++it) {
    auto st = base_->Stat(it->to);
    if (st.ok()) {
      note(base_->Rename(it->to, it->from));
      auto f = files.find(it->to);
      if (f != files.end()) {
        FileState fs = f->second;
        files.erase(f);
        files[it->from] = fs;
      }
    }
    if (it->had_old_to && it->old_to_restorable) {
      OpenOptions o;
      o.write = o.create = o.truncate = true;
      auto f = base_->Open(it->to, o);
      if (!f.ok()) {
        note(f.status());
        continue;
      }
      if (!it->old_to_content.empty()) {
        note((*f)->Write(0, it->old_to_content.data(), it->old_to_content.size()));
      }
      note((*f)->Sync());
      files.erase(it->to);
    }
  }
  // 2. Remove new files whose name never became durable; cut the others back to their synced length.
  for (const auto& [path, fs] : files) {
    if (fs.new_name) {
      Status s = base_->Remove(path);
      if (!s.IsNotFound()) note(s);
      continue;
    }
    auto st = base_->Stat(path);
    if (!st.ok()) {
      if (!st.status().IsNotFound()) note(st.status());
      continue;
    }
    if (st->size > fs.synced_size) {
      // Test-only simulation of lost page-cache data: the base Env uses host paths.
      if (::truncate(path.c_str(), static_cast<off_t>(fs.synced_size)) != 0) {
        note(Status::IOError("truncate " + path + ": " + std::strerror(errno), errno));
      }
    }
  }
  return first;
}

void FaultInjectionEnv::ResetState() {
  std::lock_guard<std::mutex> l(mu_);
  rules_.clear();
  files_.clear();
  renames_.clear();
  ++wake_gen_;
  wake_.notify_all();
  ZeroCounters(counters_);
}

// ---------------------------------------------------------------------------------------------------
// Env

Result<std::unique_ptr<BackingFile>> FaultInjectionEnv::Open(const std::string& path,
                                                             const OpenOptions& opts) {
  counters_.open.fetch_add(1, std::memory_order_relaxed);
  if (opts.create) counters_.create.fetch_add(1, std::memory_order_relaxed);
  auto inj = Check(kFaultOpen, path);
  if (inj.err) return Inject(inj, "open", path);
  bool tracked = false;
  if (opts.write) {
    std::lock_guard<std::mutex> l(mu_);
    tracked = files_.count(path) > 0;
  }
  bool existed = false;
  uint64_t old_size = 0;
  if (opts.write && !tracked) {
    auto st = base_->Stat(path);
    if (st.ok()) {
      existed = true;
      old_size = st->size;
    }
  }
  auto f = base_->Open(path, opts);
  if (!f.ok()) return f.status();
  if (opts.write) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) {
      FileState fs;
      fs.size = fs.synced_size = (existed && !opts.truncate) ? old_size : 0;
      fs.new_name = !existed;
      files_[path] = fs;
    } else if (opts.truncate) {
      it->second.size = it->second.synced_size = 0;
    }
  }
  return std::unique_ptr<BackingFile>(new File(this, std::move(*f), opts.write));
}

Status FaultInjectionEnv::CreateDir(const std::string& path) {
  counters_.mkdir.fetch_add(1, std::memory_order_relaxed);
  auto inj = Check(kFaultMkdir, path);
  if (inj.err) return Inject(inj, "mkdir", path);
  return base_->CreateDir(path);
}

Status FaultInjectionEnv::CreateDirExclusive(const std::string& path) {
  counters_.mkdir.fetch_add(1, std::memory_order_relaxed);
  auto inj = Check(kFaultMkdir, path);
  if (inj.err) return Inject(inj, "mkdir", path);
  return base_->CreateDirExclusive(path);
}

Status FaultInjectionEnv::Rename(const std::string& from, const std::string& to) {
  counters_.rename.fetch_add(1, std::memory_order_relaxed);
  auto inj = Check(kFaultRename, from, to);
  if (inj.err) return Inject(inj, "rename", from + " -> " + to);
  PendingRename pr;
  pr.from = from;
  pr.to = to;
  auto st = base_->Stat(to);
  if (st.ok() && !st->is_dir) {
    pr.had_old_to = true;
    if (st->size <= kMaxRenameBackupBytes && base_->ReadFileToString(to, &pr.old_to_content).ok()) {
      pr.old_to_restorable = true;
    }
  }
  KVFS_RETURN_IF_ERROR(base_->Rename(from, to));
  std::lock_guard<std::mutex> l(mu_);
  files_.erase(to);
  auto it = files_.find(from);
  if (it != files_.end()) {
    FileState fs = it->second;
    files_.erase(it);
    files_[to] = fs;
  }
  renames_.push_back(std::move(pr));
  return Status::OK();
}

Status FaultInjectionEnv::Remove(const std::string& path) {
  counters_.remove.fetch_add(1, std::memory_order_relaxed);
  auto inj = Check(kFaultRemove, path);
  if (inj.err) return Inject(inj, "remove", path);
  KVFS_RETURN_IF_ERROR(base_->Remove(path));
  std::lock_guard<std::mutex> l(mu_);
  files_.erase(path);
  // A removal is durable at once (not modelled); a pending rename onto this name is moot.
  std::erase_if(renames_, [&](const PendingRename& r) { return r.to == path; });
  return Status::OK();
}

Status FaultInjectionEnv::GetChildren(const std::string& dir, std::vector<std::string>* names) {
  counters_.list.fetch_add(1, std::memory_order_relaxed);
  auto inj = Check(kFaultList, dir);
  if (inj.err) return Inject(inj, "list", dir);
  return base_->GetChildren(dir, names);
}

Result<FileInfo> FaultInjectionEnv::Stat(const std::string& path) {
  counters_.stat.fetch_add(1, std::memory_order_relaxed);
  auto inj = Check(kFaultStat, path);
  if (inj.err) return Inject(inj, "stat", path);
  return base_->Stat(path);
}

Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  counters_.syncdir.fetch_add(1, std::memory_order_relaxed);
  auto inj = Check(kFaultSyncDir, dir);
  if (inj.err) return Inject(inj, "syncdir", dir);
  KVFS_RETURN_IF_ERROR(base_->SyncDir(dir));
  const std::string d = StripTrailingSlash(dir);
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [path, fs] : files_) {
    if (fs.new_name && ParentDir(path) == d) fs.new_name = false;
  }
  std::erase_if(renames_, [&](const PendingRename& r) { return ParentDir(r.to) == d; });
  return Status::OK();
}

Status FaultInjectionEnv::StatFs(const std::string& path, uint64_t* total_bytes, uint64_t* avail_bytes) {
  counters_.stat.fetch_add(1, std::memory_order_relaxed);
  auto inj = Check(kFaultStatFs, path);
  if (inj.err) return Inject(inj, "statfs", path);
  KVFS_RETURN_IF_ERROR(base_->StatFs(path, total_bytes, avail_bytes));
  const int64_t fake = statfs_avail_.load();
  if (fake >= 0) *avail_bytes = static_cast<uint64_t>(fake);
  return Status::OK();
}

void FaultInjectionEnv::SetStatFsAvail(std::optional<uint64_t> avail_bytes) {
  statfs_avail_ = avail_bytes ? static_cast<int64_t>(*avail_bytes) : -1;
}

}  // namespace kvfs
