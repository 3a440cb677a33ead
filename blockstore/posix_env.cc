// Env::Posix(): the production Env over POSIX system calls, with liburing for batched writes.
//
// Error mapping (one place, ErrnoStatus below): ENOENT -> Status::NotFound, EEXIST -> Status::Exists,
// ENOSPC / EDQUOT -> Status::NoSpace, everything else -> Status::IOError(msg, errno). Every message names
// the operation and the path, e.g. "pwrite /x/seg/1-2.kseg @4096+8192: No space left on device".
//
// Writes: BackingFile::Write(ops) with one op is a pwrite(2) loop (one system call, same as one SQE).
// With two or more ops the whole batch goes to the kernel in one io_uring_submit_and_wait() on a ring owned by
// the file (created lazily on the first batch, guarded by a mutex, kRingEntries SQEs; a batch larger
// than that is submitted in waves of kRingEntries). Short writes are resubmitted for the remainder until
// complete; a write that makes no progress twice in a row is an IOError. If io_uring_queue_init fails
// (old kernel, seccomp, RLIMIT_MEMLOCK) the file falls back to a pwrite loop for good.
//
// Every file is opened O_CLOEXEC; OpenOptions::direct adds O_DIRECT (callers align buffers, offsets and
// lengths to 4 KiB). EINTR is retried everywhere.
//
// Counters (EnvCounters): open per Open, close per BackingFile destruction, read per Read call,
// write per WriteOp, write_batches per Write call, sync per Sync, stat per Stat / Size / StatFs,
// mkdir per CreateDir, rename, remove, list per GetChildren, syncdir per SyncDir; bytes_read /
// bytes_written count payload bytes actually transferred.
#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "blockstore/env.h"

namespace kvfs {
namespace {

constexpr unsigned kRingEntries = 64;

Status ErrnoStatus(std::string_view op, const std::string& path, int err) {
  std::string msg;
  msg.reserve(op.size() + path.size() + 48);
  msg.append(op).append(" ").append(path).append(": ").append(std::strerror(err));
  switch (err) {
    case ENOENT: return Status::NotFound(msg);
    case EEXIST: return Status::Exists(msg);
    case ENOSPC:
    case EDQUOT: return Status::NoSpace(msg);
    default: return Status::IOError(msg, err);
  }
}

std::string OpDesc(const char* op, uint64_t off, size_t len) {
  return std::string(op) + " @" + std::to_string(off) + "+" + std::to_string(len);
}

class PosixFile final : public BackingFile {
 public:
  PosixFile(int fd, std::string path, EnvCounters* c) : fd_(fd), path_(std::move(path)), c_(c) {}
  ~PosixFile() override {
    if (ring_state_ == RingState::kReady) io_uring_queue_exit(&ring_);
    ::close(fd_);
    c_->close.fetch_add(1, std::memory_order_relaxed);
  }

  Status Read(uint64_t offset, size_t n, void* buf, size_t* got) override {
    c_->read.fetch_add(1, std::memory_order_relaxed);
    size_t done = 0;
    char* p = static_cast<char*>(buf);
    while (done < n) {
      ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        *got = done;
        c_->bytes_read.fetch_add(done, std::memory_order_relaxed);
        return ErrnoStatus(OpDesc("pread", offset, n), path_, e);
      }
      if (r == 0) break;  // end of file
      done += static_cast<size_t>(r);
    }
    *got = done;
    c_->bytes_read.fetch_add(done, std::memory_order_relaxed);
    return Status::OK();
  }

  Status Write(std::span<const WriteOp> ops) override {
    c_->write_batches.fetch_add(1, std::memory_order_relaxed);
    c_->write.fetch_add(ops.size(), std::memory_order_relaxed);
    if (ops.empty()) return Status::OK();
    if (ops.size() == 1) return PwriteFully(ops[0]);
    // Back to back in the file (a record's metadata, value parts and padding; a batch of records): one
    // pwritev. With O_DIRECT that is one direct write of the whole span, not one per op (io_uring would
    // queue each extending write behind the last on the file's io-wq worker).
    bool contiguous = true;
    for (size_t i = 1; i < ops.size() && contiguous; ++i) contiguous = ops[i].offset == ops[i - 1].offset + ops[i - 1].len;
    if (contiguous) return PwritevFully(ops);
    std::lock_guard<std::mutex> lk(ring_mu_);
    if (ring_state_ == RingState::kUninit) {
      ring_state_ = io_uring_queue_init(kRingEntries, &ring_, 0) == 0 ? RingState::kReady : RingState::kFailed;
    }
    if (ring_state_ == RingState::kFailed) {
      for (const WriteOp& op : ops) KVFS_RETURN_IF_ERROR(PwriteFully(op));
      return Status::OK();
    }
    return RingWrite(ops);
  }

  Status Sync() override {
    c_->sync.fetch_add(1, std::memory_order_relaxed);
    while (::fdatasync(fd_) != 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("fdatasync", path_, errno);
    }
    return Status::OK();
  }

  Status WriteBack() override {
    c_->writeback.fetch_add(1, std::memory_order_relaxed);
    while (::sync_file_range(fd_, 0, 0,
                             SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("sync_file_range", path_, errno);
    }
    return Status::OK();
  }

  Status Truncate(uint64_t size) override {
    c_->write.fetch_add(1, std::memory_order_relaxed);
    while (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("ftruncate " + std::to_string(size), path_, errno);
    }
    return Status::OK();
  }

  Result<uint64_t> Size() override {
    c_->stat.fetch_add(1, std::memory_order_relaxed);
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoStatus("fstat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  const std::string& path() const override { return path_; }

 private:
  enum class RingState { kUninit, kReady, kFailed };

  // ops back to back from ops[0].offset: pwritev of up to IOV_MAX of them at a time, short writes resumed
  // where they stopped.
  Status PwritevFully(std::span<const WriteOp> ops) {
    std::vector<iovec> iov;
    iov.reserve(std::min<size_t>(ops.size(), IOV_MAX));
    size_t i = 0, skip = 0;  // next op, bytes of it already written
    uint64_t off = ops[0].offset, written = 0;
    int stalls = 0;
    while (i < ops.size()) {
      iov.clear();
      for (size_t j = i; j < ops.size() && iov.size() < IOV_MAX; ++j) {
        const size_t k = j == i ? skip : 0;
        if (ops[j].len > k) iov.push_back(iovec{const_cast<char*>(static_cast<const char*>(ops[j].data)) + k, ops[j].len - k});
      }
      if (iov.empty()) break;
      ssize_t r = ::pwritev(fd_, iov.data(), static_cast<int>(iov.size()), static_cast<off_t>(off));
      if (r < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        c_->bytes_written.fetch_add(written, std::memory_order_relaxed);
        return ErrnoStatus(OpDesc("pwritev", off, ops.back().offset + ops.back().len - off), path_, e);
      }
      if (r == 0 && ++stalls > 1) {
        c_->bytes_written.fetch_add(written, std::memory_order_relaxed);
        return Status::IOError(OpDesc("pwritev", off, ops.back().offset + ops.back().len - off) + " " + path_ +
                               ": no progress", EIO);
      }
      size_t left = static_cast<size_t>(r);
      off += left;
      written += left;
      while (left > 0 && i < ops.size()) {
        const size_t rest = ops[i].len - skip;
        if (left >= rest) {
          left -= rest;
          ++i;
          skip = 0;
        } else {
          skip += left;
          left = 0;
        }
      }
      while (i < ops.size() && ops[i].len == skip) ++i, skip = 0;
    }
    c_->bytes_written.fetch_add(written, std::memory_order_relaxed);
    return Status::OK();
  }

  Status PwriteFully(const WriteOp& op) {
    const char* p = static_cast<const char*>(op.data);
    size_t done = 0;
    int stalls = 0;
    while (done < op.len) {
      ssize_t r = ::pwrite(fd_, p + done, op.len - done, static_cast<off_t>(op.offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        c_->bytes_written.fetch_add(done, std::memory_order_relaxed);
        return ErrnoStatus(OpDesc("pwrite", op.offset, op.len), path_, e);
      }
      if (r == 0 && ++stalls > 1) {
        c_->bytes_written.fetch_add(done, std::memory_order_relaxed);
        return Status::IOError(OpDesc("pwrite", op.offset, op.len) + " " + path_ + ": no progress", EIO);
      }
      done += static_cast<size_t>(r);
    }
    c_->bytes_written.fetch_add(done, std::memory_order_relaxed);
    return Status::OK();
  }

  // Requires ring_mu_. Submits all of `ops` (in waves of kRingEntries), resubmitting remainders of short
  // writes. On error, waits for every in-flight SQE before returning (buffers belong to the caller).
  Status RingWrite(std::span<const WriteOp> ops) {
    std::vector<WriteOp> pending(ops.begin(), ops.end());
    std::vector<WriteOp> next;
    Status first_error;
    int no_progress_rounds = 0;
    while (!pending.empty()) {
      next.clear();
      bool progressed = false;
      for (size_t base = 0; base < pending.size(); base += kRingEntries) {
        const size_t n = std::min<size_t>(kRingEntries, pending.size() - base);
        for (size_t i = 0; i < n; ++i) {
          io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // cannot fail: n <= ring size, ring drained
          const WriteOp& op = pending[base + i];
          // One SQE moves at most 1 GiB (len is 32-bit); the remainder goes as a short write below.
          io_uring_prep_write(sqe, fd_, op.data, static_cast<unsigned>(std::min<size_t>(op.len, 1u << 30)),
                              op.offset);
          io_uring_sqe_set_data64(sqe, base + i);
        }
        int submitted;
        do {
          submitted = io_uring_submit_and_wait(&ring_, static_cast<unsigned>(n));  // one enter: submit + reap
        } while (submitted == -EINTR);
        // SQEs are consumed in order: the first `submitted` are in flight, the rest were not taken.
        const size_t taken = submitted < 0 ? 0 : static_cast<size_t>(submitted);
        for (size_t i = 0; i < taken; ++i) {
          io_uring_cqe* cqe = nullptr;
          int w;
          do {
            w = io_uring_wait_cqe(&ring_, &cqe);
          } while (w == -EINTR);
          if (w < 0) {
            if (first_error.ok()) first_error = ErrnoStatus("io_uring_wait_cqe", path_, -w);
            continue;
          }
          const size_t idx = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
          const int res = cqe->res;
          io_uring_cqe_seen(&ring_, cqe);
          const WriteOp& op = pending[idx];
          if (res < 0) {
            if (res == -EINTR || res == -EAGAIN) {
              next.push_back(op);
            } else if (first_error.ok()) {
              first_error = ErrnoStatus(OpDesc("io_uring write", op.offset, op.len), path_, -res);
            }
            continue;
          }
          c_->bytes_written.fetch_add(static_cast<uint64_t>(res), std::memory_order_relaxed);
          if (res > 0) progressed = true;
          if (static_cast<size_t>(res) < op.len) {
            next.push_back(WriteOp{op.offset + static_cast<uint64_t>(res),
                                   static_cast<const char*>(op.data) + res, op.len - static_cast<size_t>(res)});
          }
        }
        if (taken < n) {
          // The ring refused (part of) the wave: give it up for this file and finish with pwrite.
          // Exiting the ring discards the untaken SQEs; every taken one has completed above.
          ring_state_ = RingState::kFailed;
          io_uring_queue_exit(&ring_);
          if (!first_error.ok()) return first_error;
          for (size_t i = base + taken; i < pending.size(); ++i) KVFS_RETURN_IF_ERROR(PwriteFully(pending[i]));
          for (const WriteOp& op : next) KVFS_RETURN_IF_ERROR(PwriteFully(op));
          return Status::OK();
        }
      }
      if (!first_error.ok()) return first_error;
      if (!progressed && !next.empty() && ++no_progress_rounds > 1) {
        return Status::IOError("io_uring write " + path_ + ": no progress", EIO);
      }
      if (progressed) no_progress_rounds = 0;
      pending.swap(next);
    }
    return Status::OK();
  }

  const int fd_;
  const std::string path_;
  EnvCounters* const c_;
  std::mutex ring_mu_;
  RingState ring_state_ = RingState::kUninit;  // guarded by ring_mu_
  io_uring ring_{};                            // guarded by ring_mu_
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<BackingFile>> Open(const std::string& path, const OpenOptions& o) override {
    int flags = O_CLOEXEC | (o.write ? O_RDWR : O_RDONLY);
    if (o.create) flags |= O_CREAT;
    if (o.create && o.exclusive) flags |= O_EXCL;
    if (o.truncate) flags |= O_TRUNC;
    if (o.direct) flags |= O_DIRECT;
    counters_.open.fetch_add(1, std::memory_order_relaxed);
    if (o.create) counters_.create.fetch_add(1, std::memory_order_relaxed);
    int fd;
    do {
      fd = ::open(path.c_str(), flags, o.mode != 0 ? o.mode : GetBackingModes().file);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoStatus(o.direct ? "open(O_DIRECT)" : "open", path, errno);
    return std::unique_ptr<BackingFile>(new PosixFile(fd, path, &counters_));
  }

  Status CreateDir(const std::string& path) override {
    counters_.mkdir.fetch_add(1, std::memory_order_relaxed);
    if (::mkdir(path.c_str(), GetBackingModes().dir) == 0) return Status::OK();
    int e = errno;
    if (e == EEXIST) {
      struct stat st;
      if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::OK();
      return ErrnoStatus("mkdir", path, ENOTDIR);
    }
    return ErrnoStatus("mkdir", path, e);
  }

  Status CreateDirExclusive(const std::string& path) override {
    counters_.mkdir.fetch_add(1, std::memory_order_relaxed);
    if (::mkdir(path.c_str(), GetBackingModes().dir) == 0) return Status::OK();
    return ErrnoStatus("mkdir", path, errno);  // EEXIST -> Exists
  }

  Status Rename(const std::string& from, const std::string& to) override {
    counters_.rename.fetch_add(1, std::memory_order_relaxed);
    if (::rename(from.c_str(), to.c_str()) == 0) return Status::OK();
    return ErrnoStatus("rename", from + " -> " + to, errno);
  }

  // unlink(2); an empty directory is removed with rmdir(2).
  Status Remove(const std::string& path) override {
    counters_.remove.fetch_add(1, std::memory_order_relaxed);
    if (::unlink(path.c_str()) == 0) return Status::OK();
    int e = errno;
    if (e == EISDIR || e == EPERM) {
      if (::rmdir(path.c_str()) == 0) return Status::OK();
      if (errno != ENOTDIR) e = errno;
    }
    return ErrnoStatus("unlink", path, e);
  }

  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override {
    counters_.list.fetch_add(1, std::memory_order_relaxed);
    names->clear();
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return ErrnoStatus("opendir", dir, errno);
    for (;;) {
      errno = 0;
      struct dirent* ent = ::readdir(d);
      if (ent == nullptr) {
        int e = errno;
        ::closedir(d);
        if (e != 0) return ErrnoStatus("readdir", dir, e);
        return Status::OK();
      }
      if (std::strcmp(ent->d_name, ".") == 0 || std::strcmp(ent->d_name, "..") == 0) continue;
      names->emplace_back(ent->d_name);
    }
  }

  Result<FileInfo> Stat(const std::string& path) override {
    counters_.stat.fetch_add(1, std::memory_order_relaxed);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("stat", path, errno);
    FileInfo fi;
    fi.size = static_cast<uint64_t>(st.st_size);
    fi.is_dir = S_ISDIR(st.st_mode);
    fi.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
    fi.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000LL + st.st_ctim.tv_nsec;
    fi.nlink = static_cast<uint64_t>(st.st_nlink);
    fi.ino = static_cast<uint64_t>(st.st_ino);
    return fi;
  }

  Status SyncDir(const std::string& dir) override {
    counters_.syncdir.fetch_add(1, std::memory_order_relaxed);
    int fd;
    do {
      fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoStatus("open dir", dir, errno);
    Status s;
    while (::fsync(fd) != 0) {
      if (errno == EINTR) continue;
      // Some file systems refuse fsync on a directory; the entries are then as durable as they get.
      if (errno != EINVAL && errno != EBADF) s = ErrnoStatus("fsync dir", dir, errno);
      break;
    }
    ::close(fd);
    return s;
  }

  Status StatFs(const std::string& path, uint64_t* total_bytes, uint64_t* avail_bytes) override {
    counters_.stat.fetch_add(1, std::memory_order_relaxed);
    struct statvfs sv;
    if (::statvfs(path.c_str(), &sv) != 0) return ErrnoStatus("statvfs", path, errno);
    const uint64_t frsize = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
    *total_bytes = static_cast<uint64_t>(sv.f_blocks) * frsize;
    *avail_bytes = static_cast<uint64_t>(sv.f_bavail) * frsize;
    return Status::OK();
  }

  EnvCounters& counters() override { return counters_; }

 private:
  EnvCounters counters_;
};

}  // namespace

Env* Env::Posix() {
  static Env* const env = new PosixEnv();  // never deleted: files may outlive static destruction
  return env;
}

}  // namespace kvfs
