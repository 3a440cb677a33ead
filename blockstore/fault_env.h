// FaultInjectionEnv: an Env for tests that wraps a base Env and injects errors, short writes and hangs,
// counts operations, and simulates a crash that loses every unsynced write.
//
// Models: LevelDB's FaultInjectionTestEnv (db/fault_injection_test.cc) and RocksDB's FaultInjectionTestFS
// (utilities/fault_injection_fs.h).
//
// Faults are rules (FaultRule): an operation of a kind in `ops` whose path contains `path_substr` first
// sleeps `delay`, then fails with `err` (0 = no error: a pure hang). `skip` lets the first matching
// operations through, `times` bounds how often a rule fires ("fail the 3rd write" = skip 2, times 1).
// For writes, `short_bytes` > 0 makes the failing write short: that many bytes of the batch (in op order)
// reach the base file, then the write returns the error. Rules can be added and removed at any time from
// any thread; they apply to operations that start afterwards (and to files opened before). Operations
// through a BackingFile are matched against the file's path. Hangs sleep on a condition variable, so
// ClearFaults()/RemoveFault()/ResetState() and the destructor wake hung operations at once.
//
// Counting: counters() are this Env's own: every call that reaches this Env is counted once, including
// calls that fail by injection (the base Env counts only what reaches it). close = a BackingFile destroyed;
// StatFs and BackingFile::Size count as stat; write counts WriteOps, write_batches counts Write calls.
//
// Crash model (DropUnsyncedData), for files written through this Env (opened with write=true):
//  * Data: files are append-only. Per path the Env tracks the length at the last successful Sync()
//    (a file that existed before its first write-open counts as synced at its size then). The drop
//    truncates every tracked file back to that length. Overwrites of already-synced bytes are not undone
//    (no kvfs file does that; WriteFileAtomic writes a fresh .tmp file).
//    O_TRUNC at open is treated as durable at once (synced length 0).
//  * New files: a file created through this Env is removed by the drop unless it was Sync()ed or its
//    parent directory was SyncDir()ed after the creation.
//  * Renames: a Rename() is undone by the drop unless SyncDir() of the destination's directory followed
//    it: the file moves back to its old name and the destination gets back its previous content (kept in
//    memory when the rename replaced a file of at most kMaxRenameBackupBytes; a larger replaced file is
//    removed instead). Undone in reverse order.
//  * Not modelled (treated as durable at once): Remove, CreateDir, O_TRUNC.
//  * Truncation uses truncate(2) on the path: the base Env must use host paths (Env::Posix does).
// After DropUnsyncedData() the Env keeps working as after a reboot: BackingFiles opened before it are
// stale (every call fails with IOError), new opens work, and tracking starts afresh.
//
// Thread safety: every method is thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "blockstore/env.h"

namespace kvfs {

// Operation kinds, as a bit mask for FaultRule::ops.
enum FaultOp : uint32_t {
  kFaultOpen = 1u << 0,
  kFaultRead = 1u << 1,
  kFaultWrite = 1u << 2,
  kFaultSync = 1u << 3,
  kFaultSize = 1u << 4,  // BackingFile::Size
  kFaultMkdir = 1u << 5,
  kFaultRename = 1u << 6,
  kFaultRemove = 1u << 7,
  kFaultStat = 1u << 8,
  kFaultList = 1u << 9,
  kFaultSyncDir = 1u << 10,
  kFaultStatFs = 1u << 11,
  kFaultTruncate = 1u << 12,  // BackingFile::Truncate (not a kFaultWrite: it does not count as a write)
  // Open and every namespace operation.
  kFaultMetadata = kFaultOpen | kFaultMkdir | kFaultRename | kFaultRemove | kFaultStat | kFaultList |
                   kFaultSyncDir | kFaultStatFs | kFaultSize,
  kFaultAll = 0x1FFFu,
};

struct FaultRule {
  uint32_t ops = kFaultAll;           // FaultOp mask
  std::string path_substr;            // empty = every path; Rename matches if either path contains it
  int err = EIO;                      // errno to fail with (ENOSPC -> Status::NoSpace); 0 = do not fail
  std::chrono::nanoseconds delay{0};  // sleep before the operation (a hung request)
  uint64_t skip = 0;                  // let this many matching operations through first
  uint64_t times = std::numeric_limits<uint64_t>::max();  // fire at most this many times
  size_t short_bytes = 0;  // writes only: bytes written before failing (0 = write nothing)
};

class FaultInjectionEnv : public Env {
 public:
  // A replaced file of at most this size is restored when its replacing rename is undone.
  static constexpr uint64_t kMaxRenameBackupBytes = 16ull << 20;

  // base: not owned, must outlive this Env.
  explicit FaultInjectionEnv(Env* base);
  ~FaultInjectionEnv() override;
  FaultInjectionEnv(const FaultInjectionEnv&) = delete;
  FaultInjectionEnv& operator=(const FaultInjectionEnv&) = delete;

  Env* base() const { return base_; }

  // --- Faults -------------------------------------------------------------------------------------
  // Adds a rule; returns its id for RemoveFault. Rules are checked in insertion order; the first rule
  // that fires decides the error, but every matching rule's delay is slept.
  int AddFault(FaultRule rule);
  void RemoveFault(int id);
  void ClearFaults();
  // How many times the rule has fired (0 for an unknown id).
  uint64_t FaultFired(int id) const;

  // Convenience wrappers (each adds one rule and returns its id; err 0 is not allowed here).
  int FailWrites(int err, std::string path_substr = "");  // EIO, ENOSPC, EDQUOT...
  int FailReads(int err = EIO, std::string path_substr = "");
  int FailSyncs(int err = EIO, std::string path_substr = "");
  int FailMetadata(int err = EIO, std::string path_substr = "");  // opens and namespace operations
  // The nth (1-based, counted from now among matching writes) write batch writes only short_bytes and
  // then fails with err (EIO -> IOError "short write", ENOSPC -> NoSpace).
  int ShortWriteNth(uint64_t n, size_t short_bytes, int err = EIO, std::string path_substr = "");
  // Every operation in ops sleeps for d (then proceeds).
  int Hang(std::chrono::nanoseconds d, uint32_t ops = kFaultAll, std::string path_substr = "");
  // Everything under path_substr "disappears": every operation fails with err (ENOENT or EIO).
  int Disappear(std::string path_substr, int err = ENOENT);

  // StatFs reports this many bytes available (the base's total) instead of the base's figure: a backing
  // with little room left, without filling one. nullopt: the base's figure again.
  void SetStatFsAvail(std::optional<uint64_t> avail_bytes);

  // --- Crash model --------------------------------------------------------------------------------
  // Simulates a power cut / NFS client crash: see the header comment. Returns the first error of the
  // underlying file operations (the drop continues past errors).
  // keep_substr (non-empty): files whose path contains it lose nothing, as if their written-back pages
  // had reached stable storage (an NFS server that wrote them back, a disk that persisted them) while the
  // other files' did not: the reordering a power cut may show between files that were never fdatasync'd.
  Status DropUnsyncedData(const std::string& keep_substr = "");
  // Forgets every tracked file (as if everything were durable now), clears the faults and this Env's
  // counters. Open BackingFiles stay usable.
  void ResetState();
  // Number of files currently tracked as having unsynced data or an unsynced name (for tests).
  size_t UnsyncedFileCount() const;

  // --- Env ----------------------------------------------------------------------------------------
  Result<std::unique_ptr<BackingFile>> Open(const std::string& path, const OpenOptions& opts) override;
  Status CreateDir(const std::string& path) override;
  Status CreateDirExclusive(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override;
  Result<FileInfo> Stat(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Status StatFs(const std::string& path, uint64_t* total_bytes, uint64_t* avail_bytes) override;
  EnvCounters& counters() override { return counters_; }

 private:
  class File;
  friend class File;

  struct Rule {
    int id;
    FaultRule rule;
    uint64_t seen = 0;   // matching operations so far
    uint64_t fired = 0;  // times it injected
  };
  // Outcome of consulting the rules for one operation.
  struct Injection {
    int err = 0;
    size_t short_bytes = 0;
    bool is_short = false;
  };

  // Per tracked path (files opened for write through this Env).
  struct FileState {
    uint64_t size = 0;         // bytes written so far (max end offset, at least the size at first open)
    uint64_t synced_size = 0;  // size at the last successful Sync
    bool new_name = false;     // created by this Env, name not yet durable
  };
  struct PendingRename {
    std::string from, to;
    bool had_old_to = false;         // `to` existed before the rename
    bool old_to_restorable = false;  // its content is in old_to_content
    std::string old_to_content;
  };

  // Sleeps the matching rules' delays and returns the injection to apply (err 0 = none).
  Injection Check(uint32_t op, const std::string& path, const std::string& path2 = "");
  Status Inject(const Injection& inj, const char* what, const std::string& path) const;

  // Called by File.
  void OnWrite(const std::string& path, uint64_t end);
  void OnTruncate(const std::string& path, uint64_t size);
  uint64_t SizeForSync(const std::string& path);
  void OnSynced(const std::string& path, uint64_t size);
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

  Env* const base_;
  EnvCounters counters_;
  std::atomic<int64_t> statfs_avail_{-1};  // SetStatFsAvail; -1: the base's figure

  mutable std::mutex mu_;
  std::condition_variable wake_;  // hung operations wait on it
  uint64_t wake_gen_ = 0;         // bumped by ClearFaults/RemoveFault/ResetState/destructor
  bool shutting_down_ = false;
  std::vector<Rule> rules_;
  int next_rule_id_ = 1;
  std::map<std::string, FileState> files_;
  std::vector<PendingRename> renames_;
  std::atomic<uint64_t> epoch_{0};  // bumped by DropUnsyncedData; files of older epochs are stale
};

}  // namespace kvfs
