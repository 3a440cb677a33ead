// DeadlineEnv: an Env wrapper that gives every backing request a deadline (docs/design.md §7: "a hung export
// becomes EIO for the caller, not a hung process").
//
// Every call is run on a worker thread of a fixed pool; the caller waits at most `deadline` (measured
// from the call, so time spent queued behind hung requests counts), or until the end of the calling
// thread's BackingDeadlineScope (env.h) if that comes first, and then gets Status::TimedOut
// (errno EIO) naming the operation and path. The request itself cannot be cancelled (a thread stuck in
// a hard-mounted NFS syscall stays stuck): it keeps its worker until the base Env returns, and its result
// is dropped. Requests whose caller gave up before a worker picked them up are skipped.
//
// Memory safety: callers' buffers are never touched after the caller returned. Reads go to a buffer
// owned by the request and are copied out only when the request finished in time; writes copy the
// caller's data into the request first (one extra memcpy per write: the price of abandoning a write).
//
// Write ordering: a write or sync that timed out may still complete later. So that a late write can
// never land on top of data written after it (the SegmentWriter reuses the space of a failed batch), the
// BackingFile is *poisoned* by a write/sync timeout: every later Write/Sync on it fails with IOError
// ("an earlier write timed out"); reads still work. The owner must move to a new file (segment writer:
// a new segment; journal: a new generation), as after a failed fdatasync.
//
// With the kernel's help a hung NFS request also ends by itself: mount the export with `soft,timeo=N,
// retrans=M` (EIO after N/10 s x M tries) or `softerr`; a `hard` mount (the default) blocks forever and
// only this wrapper keeps kvfs responsive.
//
// Thread safety: every method is thread-safe. The destructor waits for the workers' in-flight base calls
// to return (the base Env must outlive this one).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "blockstore/env.h"

namespace kvfs {

struct DeadlineEnvOptions {
  std::chrono::milliseconds deadline{30000};  // per request, from the call
  size_t threads = 16;                        // worker pool size (hung requests each hold one)
};

class DeadlineEnv : public Env {
 public:
  // base: not owned, must outlive this Env.
  DeadlineEnv(Env* base, DeadlineEnvOptions opts);
  ~DeadlineEnv() override;
  DeadlineEnv(const DeadlineEnv&) = delete;
  DeadlineEnv& operator=(const DeadlineEnv&) = delete;

  Result<std::unique_ptr<BackingFile>> Open(const std::string& path, const OpenOptions& opts) override;
  Status CreateDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Status CreateExclusive(const std::string& path) override;
  Status CreateDirExclusive(const std::string& path) override;
  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override;
  Result<FileInfo> Stat(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Status StatFs(const std::string& path, uint64_t* total_bytes, uint64_t* avail_bytes) override;
  EnvCounters& counters() override { return base_->counters(); }

  uint64_t timeouts() const;  // requests that missed their deadline so far

  // Runs fn on the pool; TimedOut after the deadline. fn must own everything it touches (capture by
  // value). Public for the file wrapper.
  template <class T>
  Result<T> Run(const char* what, const std::string& path, std::function<Result<T>()> fn);

 private:
  struct Task {
    std::function<void()> run;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool abandoned = false;
  };
  void Submit(const std::shared_ptr<Task>& t);
  bool Wait(const std::shared_ptr<Task>& t);  // false = deadline missed (task abandoned)
  void Worker();

  Env* const base_;
  const DeadlineEnvOptions opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> timeouts_{0};
};

template <class T>
Result<T> DeadlineEnv::Run(const char* what, const std::string& path, std::function<Result<T>()> fn) {
  auto result = std::make_shared<std::optional<Result<T>>>();
  auto t = std::make_shared<Task>();
  t->run = [result, fn = std::move(fn)] { result->emplace(fn()); };
  Submit(t);
  if (!Wait(t)) {
    return Status::TimedOut(std::string("backing ") + what + " of " + path + " did not finish within " +
                            std::to_string(opts_.deadline.count()) + " ms (or the read's budget)");
  }
  return std::move(**result);
}

}  // namespace kvfs
