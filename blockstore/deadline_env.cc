// DeadlineEnv: see deadline_env.h.
#include "blockstore/deadline_env.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "blockstore/value_buffer.h"

namespace kvfs {
namespace {

struct Unit {};  // Result<Unit> for calls that return a plain Status

Status ToStatus(const Result<Unit>& r) { return r.ok() ? Status::OK() : r.status(); }

class DeadlineFile : public BackingFile {
 public:
  DeadlineFile(DeadlineEnv* env, std::shared_ptr<BackingFile> base)
      : env_(env), base_(std::move(base)), path_(base_->path()), poisoned_(std::make_shared<std::atomic<bool>>(false)) {}

  Status Read(uint64_t offset, size_t n, void* buf, size_t* got) override {
    *got = 0;
    auto base = base_;
    // The worker reads into its own buffer (a late result must not land in the caller's); 4 KiB
    // aligned, uninitialised, so O_DIRECT descriptors work through this Env too.
    auto r = env_->Run<std::shared_ptr<ValueBuffer>>(
        "read", path_, [base, offset, n]() -> Result<std::shared_ptr<ValueBuffer>> {
          auto tmp = ValueBuffer::Allocate(n);
          if (!tmp) return Status::IOError("read: out of memory", ENOMEM);
          size_t g = 0;
          Status s = base->Read(offset, n, tmp->data(), &g);
          if (!s.ok()) return s;
          tmp->SetWindow(0, g);
          return tmp;
        });
    if (!r.ok()) return r.status();
    (*r)->MarkTouched();
    memcpy(buf, (*r)->data(), (*r)->size());
    *got = (*r)->size();
    return Status::OK();
  }

  Status Write(std::span<const WriteOp> ops) override {
    if (poisoned_->load()) return Poisoned();
    // The worker writes from its own copies (a write that outlives its deadline must not read the
    // caller's memory); 4 KiB aligned, so O_DIRECT descriptors (segment files) work through this Env.
    auto copies = std::make_shared<std::vector<std::pair<uint64_t, std::shared_ptr<ValueBuffer>>>>();
    for (const auto& op : ops) {
      auto b = ValueBuffer::Allocate(op.len);
      if (!b) return Status::IOError("write: out of memory", ENOMEM);
      b->MarkTouched();
      if (op.len) memcpy(b->data(), op.data, op.len);
      copies->emplace_back(op.offset, std::move(b));
    }
    auto base = base_;
    auto r = env_->Run<Unit>("write", path_, [base, copies]() -> Result<Unit> {
      std::vector<WriteOp> wops;
      for (const auto& [off, data] : *copies) wops.push_back(WriteOp{off, data->data(), data->size()});
      Status s = base->Write(std::span<const WriteOp>(wops.data(), wops.size()));
      if (!s.ok()) return s;
      return Unit{};
    });
    if (r.status().IsTimedOut()) poisoned_->store(true);
    return ToStatus(r);
  }

  Status Sync() override {
    if (poisoned_->load()) return Poisoned();
    auto base = base_;
    auto r = env_->Run<Unit>("fdatasync", path_, [base]() -> Result<Unit> {
      Status s = base->Sync();
      if (!s.ok()) return s;
      return Unit{};
    });
    if (r.status().IsTimedOut()) poisoned_->store(true);
    return ToStatus(r);
  }

  Status WriteBack() override {
    if (poisoned_->load()) return Poisoned();
    auto base = base_;
    auto r = env_->Run<Unit>("sync_file_range", path_, [base]() -> Result<Unit> {
      Status s = base->WriteBack();
      if (!s.ok()) return s;
      return Unit{};
    });
    if (r.status().IsTimedOut()) poisoned_->store(true);
    return ToStatus(r);
  }

  Status Truncate(uint64_t size) override {
    if (poisoned_->load()) return Poisoned();
    auto base = base_;
    auto r = env_->Run<Unit>("ftruncate", path_, [base, size]() -> Result<Unit> {
      Status s = base->Truncate(size);
      if (!s.ok()) return s;
      return Unit{};
    });
    if (r.status().IsTimedOut()) poisoned_->store(true);
    return ToStatus(r);
  }

  Result<uint64_t> Size() override {
    auto base = base_;
    return env_->Run<uint64_t>("fstat", path_, [base]() { return base->Size(); });
  }
  const std::string& path() const override { return path_; }

 private:
  Status Poisoned() const {
    return Status::IOError("backing file " + path_ + ": an earlier write or sync timed out; file state unknown");
  }
  DeadlineEnv* env_;
  std::shared_ptr<BackingFile> base_;  // shared with in-flight requests
  const std::string path_;
  std::shared_ptr<std::atomic<bool>> poisoned_;
};

}  // namespace

DeadlineEnv::DeadlineEnv(Env* base, DeadlineEnvOptions opts) : base_(base), opts_(opts) {
  const size_t n = std::max<size_t>(1, opts_.threads);
  for (size_t i = 0; i < n; ++i) workers_.emplace_back([this] { Worker(); });
}

DeadlineEnv::~DeadlineEnv() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

uint64_t DeadlineEnv::timeouts() const { return timeouts_.load(); }

void DeadlineEnv::Submit(const std::shared_ptr<Task>& t) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(t);
  }
  cv_.notify_one();
}

bool DeadlineEnv::Wait(const std::shared_ptr<Task>& t) {
  std::unique_lock<std::mutex> l(t->mu);
  // The request's own deadline, or the thread's BackingDeadlineScope (a FUSE READ's budget) if earlier.
  const auto until = std::min(std::chrono::steady_clock::now() + opts_.deadline, BackingDeadlineScope::Current());
  if (t->cv.wait_until(l, until, [&] { return t->done; })) return true;
  t->abandoned = true;
  timeouts_++;
  return false;
}

void DeadlineEnv::Worker() {
  for (;;) {
    std::shared_ptr<Task> t;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    {
      std::lock_guard<std::mutex> l(t->mu);
      if (t->abandoned) continue;  // the caller gave up before we started
    }
    t->run();
    {
      std::lock_guard<std::mutex> l(t->mu);
      t->done = true;
    }
    t->cv.notify_all();
  }
}

Result<std::unique_ptr<BackingFile>> DeadlineEnv::Open(const std::string& path, const OpenOptions& opts) {
  Env* base = base_;
  auto r = Run<std::shared_ptr<BackingFile>>("open", path, [base, path, opts]() -> Result<std::shared_ptr<BackingFile>> {
    auto f = base->Open(path, opts);
    if (!f.ok()) return f.status();
    return std::shared_ptr<BackingFile>(std::move(*f));
  });
  if (!r.ok()) return r.status();
  return std::unique_ptr<BackingFile>(new DeadlineFile(this, std::move(*r)));
}

#define KVFS_DEADLINE_STATUS(what, path, call)                                  \
  do {                                                                          \
    Env* base = base_;                                                          \
    return ToStatus(Run<Unit>(what, path, [=]() -> Result<Unit> {               \
      Status s = call;                                                          \
      if (!s.ok()) return s;                                                    \
      return Unit{};                                                            \
    }));                                                                        \
  } while (0)

Status DeadlineEnv::CreateDir(const std::string& path) { KVFS_DEADLINE_STATUS("mkdir", path, base->CreateDir(path)); }
Status DeadlineEnv::Rename(const std::string& from, const std::string& to) {
  KVFS_DEADLINE_STATUS("rename", from, base->Rename(from, to));
}
Status DeadlineEnv::Remove(const std::string& path) { KVFS_DEADLINE_STATUS("unlink", path, base->Remove(path)); }
Status DeadlineEnv::CreateExclusive(const std::string& path) {
  KVFS_DEADLINE_STATUS("create exclusive", path, base->CreateExclusive(path));
}
Status DeadlineEnv::CreateDirExclusive(const std::string& path) {
  KVFS_DEADLINE_STATUS("mkdir exclusive", path, base->CreateDirExclusive(path));
}
Status DeadlineEnv::SyncDir(const std::string& dir) { KVFS_DEADLINE_STATUS("fsync dir", dir, base->SyncDir(dir)); }
#undef KVFS_DEADLINE_STATUS

Status DeadlineEnv::GetChildren(const std::string& dir, std::vector<std::string>* names) {
  Env* base = base_;
  auto r = Run<std::vector<std::string>>("readdir", dir, [base, dir]() -> Result<std::vector<std::string>> {
    std::vector<std::string> out;
    Status s = base->GetChildren(dir, &out);
    if (!s.ok()) return s;
    return out;
  });
  if (!r.ok()) return r.status();
  *names = std::move(*r);
  return Status::OK();
}

Result<FileInfo> DeadlineEnv::Stat(const std::string& path) {
  Env* base = base_;
  return Run<FileInfo>("stat", path, [base, path]() { return base->Stat(path); });
}

Status DeadlineEnv::StatFs(const std::string& path, uint64_t* total_bytes, uint64_t* avail_bytes) {
  Env* base = base_;
  auto r = Run<std::pair<uint64_t, uint64_t>>("statfs", path, [base, path]() -> Result<std::pair<uint64_t, uint64_t>> {
    uint64_t t = 0, a = 0;
    Status s = base->StatFs(path, &t, &a);
    if (!s.ok()) return s;
    return std::make_pair(t, a);
  });
  if (!r.ok()) return r.status();
  *total_bytes = r->first;
  *avail_bytes = r->second;
  return Status::OK();
}

}  // namespace kvfs
