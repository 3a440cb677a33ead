// Env: the one narrow interface through which every backing-store (export) I/O goes.
//
// In LevelDB's sense (include/leveldb/env.h): production code uses Env::Posix(); tests wrap it with a
// FaultInjectionEnv (fault_env.h) that injects errors, hangs and short writes, counts operations and can
// drop every write that was not synced (a power cut / NFS client crash).
//
// Paths are absolute host paths. Every method is thread-safe. BackingFile methods are thread-safe too
// (pread/pwrite at explicit offsets; callers serialize writers of one file themselves).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "blockstore/status.h"

namespace kvfs {

// One pwrite of a batch: len bytes from data at offset. With OpenOptions::direct, offset, len and data
// must be 4 KiB aligned.
struct WriteOp {
  uint64_t offset = 0;
  const void* data = nullptr;
  size_t len = 0;
};

struct OpenOptions {
  bool write = false;      // O_RDWR instead of O_RDONLY
  bool create = false;     // O_CREAT
  bool exclusive = false;  // O_EXCL (with create)
  bool truncate = false;   // O_TRUNC (only for private files such as OWNER.tmp; never segments/journals)
  bool direct = false;     // O_DIRECT (bypasses the page cache; on NFS, reads see peers' growth at once)
  mode_t mode = 0;         // permission bits of a created file; 0 = BackingModes().file (see below)
};

// Permission bits of the files and directories kvfs creates on the export (segments, journals,
// snapshots, node directories, OWNER, HEARTBEAT, ...) and of its local index directory. Default
// owner-only, 0600 / 0700: the export holds users' prompt bytes, whatever modes the files have inside
// the mount. One process-wide setting, made once by a tool's main() before any Env call
// (`kvfs mount --backing-mode`, `kvfs-fsck --backing-mode`); the process umask can only remove bits.
// Thread safety: read by every Env create; SetBackingModes is not synchronised against them.
struct BackingModes {
  mode_t file = 0600;
  mode_t dir = 0700;
};
BackingModes GetBackingModes();
void SetBackingModes(const BackingModes& modes);
// "0640" (octal, leading 0 optional) -> files 0640, directories 0750 (x added wherever r is set).
// The owner must keep read and write (0600); no bits beyond 0777. InvalidArgument with a one-line
// reason otherwise.
Result<BackingModes> ParseBackingMode(const std::string& text);

struct FileInfo {
  uint64_t size = 0;
  bool is_dir = false;
  int64_t mtime_ns = 0;
  // From the same stat, for change detection (PeerTailer's look at the nodes directory); 0 where the
  // backing has none (an object store's).
  int64_t ctime_ns = 0;
  uint64_t nlink = 0;
  uint64_t ino = 0;
};

// Operation counters, by kind. "Metadata" operations are the ones a network file system turns into
// round trips; kvfs exists to make them rare.
struct EnvCounters {
  std::atomic<uint64_t> open{0}, create{0}, close{0}, read{0}, write{0}, write_batches{0}, sync{0}, mkdir{0},
      rename{0}, remove{0}, stat{0}, list{0}, syncdir{0};
  // WriteBack calls (sync_file_range: written pages sent to the backing, not made durable; not a sync).
  std::atomic<uint64_t> writeback{0};
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0};
  // create counts the opens with O_CREAT (also counted in open).
  uint64_t MetadataOps() const {
    return open + close + mkdir + rename + remove + stat + list;
  }
};

class BackingFile {
 public:
  virtual ~BackingFile() = default;
  // Reads up to n bytes at offset into buf; *got = bytes read (< n only at end of file).
  virtual Status Read(uint64_t offset, size_t n, void* buf, size_t* got) = 0;
  // Writes every op fully (Posix Env: one pwritev when the ops are back to back, else one io_uring
  // submission for the batch), or fails.
  // ENOSPC -> Status::NoSpace; a short write that cannot complete -> IOError.
  virtual Status Write(std::span<const WriteOp> ops) = 0;
  Status Write(uint64_t offset, const void* data, size_t len) {
    WriteOp op{offset, data, len};
    return Write(std::span<const WriteOp>(&op, 1));
  }
  // fdatasync: everything written so far is durable when this returns OK.
  virtual Status Sync() = 0;
  // Write-back without durability: the file's dirty pages are written to the backing and the call waits
  // for those writes (Posix: sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)). On NFS that sends them
  // to the server as UNSTABLE WRITEs, so readers on other clients (O_DIRECT, or after their attribute
  // cache expires) see them; a server crash or a power cut may still lose them (only Sync makes them
  // durable). No-op for files without a page cache (O_DIRECT writes, object stores). Default: no-op.
  virtual Status WriteBack() { return Status::OK(); }
  // ftruncate to `size` bytes (durable with the next Sync). Only for bytes nothing refers to: the
  // SegmentWriter drops what a failed write left past its next offset (nothing a peer may read is ever
  // truncated). IOError / NoSpace like Write.
  virtual Status Truncate(uint64_t size) = 0;
  // fstat size. On NFS this flushes the writer's dirty pages first: never on a hot path.
  virtual Result<uint64_t> Size() = 0;
  virtual const std::string& path() const = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // The process-wide POSIX Env (liburing for batched writes). Never deleted.
  static Env* Posix();

  virtual Result<std::unique_ptr<BackingFile>> Open(const std::string& path, const OpenOptions& opts) = 0;
  // mkdir; OK if it already exists as a directory.
  virtual Status CreateDir(const std::string& path) = 0;
  // rename(2): atomic replace.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status Remove(const std::string& path) = 0;
  // Creates an empty file at path; Exists if something is there. Atomic against other nodes' creates of
  // the same path: the one arbitration primitive the export offers (POSIX / NFS: open O_CREAT|O_EXCL,
  // which an NFS server decides, then close: OPEN + CLOSE; an object store: a conditional PUT,
  // If-None-Match: *, that recognises its own retried request). Used for link(2) claims
  // (engine/link_arbiter.h). Default: Open(create, exclusive).
  virtual Status CreateExclusive(const std::string& path);
  // mkdir of path; Exists if something is there. Atomic against other nodes' mkdirs of the same path
  // (POSIX / NFS: one MKDIR, which the server decides: one round trip where CreateExclusive costs an
  // OPEN and a CLOSE, or on NFSv3 a CREATE and a SETATTR). The link(2) claims of a backing with
  // directories. Default (a backing without directories of its own, the object store's):
  // NotSupported, and the caller uses CreateExclusive.
  virtual Status CreateDirExclusive(const std::string& path);
  virtual Status GetChildren(const std::string& dir, std::vector<std::string>* names) = 0;  // no . / ..
  // GetChildren, plus the sizes the listing itself gave: an object store's listing carries each object's
  // size (S3TierEnv: the bucket's objects not shadowed by a staged file), a directory's does not (this
  // default: none). A name without an entry in *sizes has an unknown size (Stat or Open to learn it).
  virtual Status GetChildrenWithSizes(const std::string& dir, std::vector<std::string>* names,
                                      std::map<std::string, uint64_t>* sizes) {
    sizes->clear();
    return GetChildren(dir, names);
  }
  virtual Result<FileInfo> Stat(const std::string& path) = 0;
  virtual Status SyncDir(const std::string& dir) = 0;
  // statvfs of the file system holding path: total and available bytes.
  virtual Status StatFs(const std::string& path, uint64_t* total_bytes, uint64_t* avail_bytes) = 0;
  virtual EnvCounters& counters() = 0;

  // Helpers built on the primitives above.
  Status CreateDirs(const std::string& path);  // mkdir -p
  Status ReadFileToString(const std::string& path, std::string* out);
  // Writes data to path.tmp, syncs it, renames over path, syncs the directory. If the backing is full
  // (NoSpace) and path exists with at most kInPlaceMax bytes (and data fits too), path is rewritten in
  // place instead (data padded with '\n' to the old length; no new block needed): NOT atomic against a
  // crash during that one write. Only for newline-separated key=value records (OWNER, HEARTBEAT).
  static constexpr uint64_t kInPlaceMax = 512;
  Status WriteFileAtomic(const std::string& path, const std::string& data);
};

// A budget for the backing calls one thread makes one after another while serving one request (a FUSE
// READ: open the segment, read it, check whether it vanished): while a scope is alive on a thread, a
// backing that bounds its calls (the S3 client: S3Config::deadline_ms) ends each call by the earlier of
// its own deadline and the scope's, so the calls together never run past the scope's deadline. Scopes
// nest (the earliest deadline wins). A zero duration makes no scope. Thread-local; not shared with other
// threads (a call that hands work to helpers passes its deadline on itself).
class BackingDeadlineScope {
 public:
  using Clock = std::chrono::steady_clock;
  explicit BackingDeadlineScope(std::chrono::milliseconds budget);
  ~BackingDeadlineScope();
  BackingDeadlineScope(const BackingDeadlineScope&) = delete;
  BackingDeadlineScope& operator=(const BackingDeadlineScope&) = delete;
  // The calling thread's deadline, or Clock::time_point::max() outside any scope.
  static Clock::time_point Current();

 private:
  Clock::time_point saved_;
};

}  // namespace kvfs
