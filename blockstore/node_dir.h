// Node directory: the layout of the backing directory (docs/design.md §2), its FORMAT file, and the ownership
// (takeover) protocol of one node's directory.
//
//   <backing>/.kvfs/v1/FORMAT                                 "kvfs-format\nversion=1\nalignment=4096\n"
//   <backing>/.kvfs/v1/nodes/<node>/OWNER                     key=value lines (OwnerRecord)
//   <backing>/.kvfs/v1/nodes/<node>/HEARTBEAT                 key=value lines (HeartbeatRecord)
//   <backing>/.kvfs/v1/nodes/<node>/journal-<gen>-<n>         <gen>, <n>: 20-digit zero-padded decimal
//   <backing>/.kvfs/v1/nodes/<node>/snapshot-<gen>-<n>
//   <backing>/.kvfs/v1/nodes/<node>/peers
//   <backing>/.kvfs/v1/nodes/<node>/seg/<gen>-<seq>.kseg      e.g.
//   00000000000000000003-00000000000000000001.kseg
//   <backing>/.kvfs/v1/nodes/<node>/holds/<owner>/<gen>-<seq>.kseg   empty: <node> has a file of <owner>'s
//                                                              segment open (engine/peer_holds.cc); <owner>
//                                                              defers the unlink of that segment after its
//                                                              DROP while <node> is live
//
// Zero padding makes lexicographic order = numeric order (a sorted listing is in (gen, seq) order).
// Bump kFormatVersion (and the directory name v1 only for a layout change) if any of this changes.
//
// FORMAT is created once with O_EXCL. A FORMAT with a newer version is refused with InvalidArgument
// "backing store format vN is newer than this kvfs (vM)"; an alignment other than kAlignment too.
//
// Takeover rule (docs/design.md §2). A mount may take over <node>/ only if one of:
//   * there is no OWNER, or the OWNER says state=released (a clean unmount);
//   * the owner is provably dead: same host name and boot id as ours and its pid is gone (/proc/<pid>
//     missing, or alive with a different start time than recorded = the pid was reused);
//   * HEARTBEAT is older than heartbeat_timeout. The age is "our wall clock - the time_ns written inside
//     HEARTBEAT by the owner", not the file's mtime (NFS mtimes are the server's clock and attribute
//     caches make them stale); this needs host clocks within a small fraction of the timeout (NTP).
//     A missing or unreadable HEARTBEAT counts as infinitely old (HEARTBEAT is written before OWNER);
//   * force = true.
// Otherwise Acquire returns Status::Busy naming host, pid, generation and heartbeat age. With
// NodeDirOptions::refuse_running_local_owner, an owner that runs on this host is Busy in every case.
// The new generation is 1 + the maximum of OWNER's generation and every generation in the names of
// journal-, snapshot- and seg/ files. HEARTBEAT and then OWNER are rewritten with Env::WriteFileAtomic;
// OWNER is read back, and if another mount won a concurrent takeover the loser gets Busy (best effort:
// NFS has no atomic compare-and-swap; the generation fencing of docs/design.md §2 keeps the data safe anyway).
//
// Nothing here truncates a shared file; OWNER and FORMAT are only replaced by rename. HEARTBEAT is
// created by rename at takeover and then rewritten in place by the owner's periodic Beat() (same size
// every time; see Beat). Errors: InvalidArgument for a bad backing path, node id or format; IOError (with the path)
// when the backing directory is not writable; Busy as above. Thread safety: NodeDir methods are
// thread-safe; the free functions are pure or go through the (thread-safe) Env.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/status.h"
#include "blockstore/types.h"

namespace kvfs {

inline constexpr uint32_t kFormatVersion = 1;

// ---- Layout: pure path functions -----------------------------------------------------------------

std::string KvfsRootPath(std::string_view backing);  // <backing>/.kvfs/v1
std::string FormatFilePath(std::string_view backing);
std::string NodesDirPath(std::string_view backing);
// <backing>/.kvfs/v1/links: link(2) claims (engine/link_arbiter.h, docs/format.md "Link claims").
std::string LinkClaimsDirPath(std::string_view backing);
// A link claim at least this old (by its mtime, the server's clock) decides nothing any more: its creator
// removes it a minute after its link; a mount's sweep (LinkArbiter::kSweepAge) and kvfs-fsck --repair
// remove older ones, which a crash left.
inline constexpr int64_t kLinkClaimSweepAgeS = 600;
std::string NodeDirPath(std::string_view backing, std::string_view node);
std::string OwnerFilePath(std::string_view backing, std::string_view node);
std::string HeartbeatFilePath(std::string_view backing, std::string_view node);
std::string PeersFilePath(std::string_view backing, std::string_view node);
std::string SegmentDirPath(std::string_view backing, std::string_view node);
std::string HoldsDirPath(std::string_view backing, std::string_view holder);  // <holder>/holds
// <holder>/holds/<owner>: holder's markers of owner's segments (named SegmentFileName(gen, seq)).
std::string HoldDirPath(std::string_view backing, std::string_view holder, std::string_view owner);

std::string SegmentFileName(uint64_t generation, uint64_t seq);  // "<gen20>-<seq20>.kseg"
std::string JournalFileName(uint64_t generation, uint64_t n);    // "journal-<gen20>-<n20>"
std::string SnapshotFileName(uint64_t generation, uint64_t n);   // "snapshot-<gen20>-<n20>"
std::string SegmentFilePath(std::string_view backing, const SegmentId& id);
std::string JournalFilePath(std::string_view backing, std::string_view node, uint64_t generation, uint64_t n);
std::string SnapshotFilePath(std::string_view backing, std::string_view node, uint64_t generation,
                             uint64_t n);

// Strict parsers (exactly 20 digits each); false for anything else (e.g. "x.kseg.tmp").
bool ParseSegmentFileName(std::string_view name, uint64_t* generation, uint64_t* seq);
bool ParseJournalFileName(std::string_view name, uint64_t* generation, uint64_t* n);
bool ParseSnapshotFileName(std::string_view name, uint64_t* generation, uint64_t* n);

// A node id is 1..128 bytes of [A-Za-z0-9._-], not "." or "..". InvalidArgument otherwise.
Status ValidateNodeId(std::string_view node);

// ---- Backing directory and FORMAT ------------------------------------------------------------------

struct FormatInfo {
  uint32_t version = kFormatVersion;
  uint64_t alignment = kAlignment;
  // This backing store's identity: 32 random hex digits made with FORMAT ("" in a FORMAT written
  // before ids existed). An index remembers the id it was built for (IndexDb::BackingId) and is
  // rebuilt when they differ: a backing wiped and formatted again, or an index dir reused for another
  // backing, must never serve the old index's Locations over new segments (wrong bytes).
  std::string id;
  std::string Serialize() const;
  static Result<FormatInfo> Parse(std::string_view text);  // Corruption if malformed
};

// OK if backing exists and is a directory; InvalidArgument naming the path otherwise.
Status CheckBackingDir(Env* env, const std::string& backing);
// Creates <backing>/.kvfs/v1/FORMAT (O_EXCL) if absent, else reads and validates it.
// IOError "backing directory <path> is not writable: ..." on EROFS/EACCES/EPERM.
Result<FormatInfo> EnsureFormat(Env* env, const std::string& backing);
// Node ids under <backing>/.kvfs/v1/nodes/ (directories only), sorted. Empty if nodes/ is absent.
// Cost: one directory listing plus one stat per name not in `known` (names a previous call returned are
// directories already: a periodic re-listing by the peer thread then costs the listing alone).
Result<std::vector<std::string>> ListNodes(Env* env, const std::string& backing,
                                           const std::vector<std::string>* known = nullptr);

// ---- Ownership records ---------------------------------------------------------------------------

struct HostIdentity {
  std::string host;     // gethostname()
  std::string boot_id;  // /proc/sys/kernel/random/boot_id
  int64_t pid = 0;
  uint64_t pid_start = 0;  // /proc/<pid>/stat field 22 (clock ticks after boot); 0 = unknown
  static HostIdentity Current();
};

struct OwnerRecord {
  HostIdentity owner;
  uint64_t generation = 0;
  int64_t acquired_ns = 0;  // wall clock
  bool released = false;    // a clean unmount wrote state=released
  std::string Serialize() const;
  static Result<OwnerRecord> Parse(std::string_view text);
};

inline constexpr size_t kHeartbeatBytes = 512;  // HEARTBEAT is padded (pad=... line) to a multiple of this

struct HeartbeatRecord {
  int64_t time_ns = 0;  // the owner's wall clock (CLOCK_REALTIME) at the write
  std::string host;
  int64_t pid = 0;
  uint64_t generation = 0;
  // key=value lines, the last one "pad=xxx" so the text is a multiple of kHeartbeatBytes long (the same
  // length at every beat: in-place rewrites never leave a stale tail). Parse ignores pad.
  std::string Serialize() const;
  static Result<HeartbeatRecord> Parse(std::string_view text);
};

// Whether the process recorded in id runs on this host now (/proc/<pid>, start time if recorded).
// A zombie (state Z or X in /proc/<pid>/stat: exited, not yet reaped by its parent) counts as dead.
// Only meaningful when id.host and id.boot_id are this host's.
bool LocalProcessAlive(const HostIdentity& id);

int64_t WallClockNs();

// ---- Heartbeat thread ------------------------------------------------------------------------------

// Calls beat() every interval on its own thread until Stop() (or destruction). Stop() wakes the thread
// at once and joins it. Thread-safe.
class Heartbeat {
 public:
  Heartbeat(std::function<Status()> beat, std::chrono::milliseconds interval);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  void Start();                                           // idempotent
  void Stop();                                            // idempotent
  uint64_t beats() const { return beats_.load(); }        // calls of beat()
  uint64_t failures() const { return failures_.load(); }  // calls that returned non-OK
  Status last_status() const;

 private:
  void Run();
  std::function<Status()> beat_;
  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  Status last_;
  std::thread thread_;
  std::atomic<uint64_t> beats_{0}, failures_{0};
};

// ---- NodeDir ---------------------------------------------------------------------------------------

struct NodeDirOptions {
  Env* env = nullptr;  // default Env::Posix()
  std::string backing_dir;
  std::string node_id;
  bool force = false;
  std::chrono::milliseconds heartbeat_timeout{30000};
  // Tools that work on a node directory from outside its mount (`kvfs node purge`, `kvfs-fsck --repair`)
  // set this: an owner that is a running process on this host (same host name and boot id, pid alive
  // with its recorded start time) is refused (Busy) whatever its heartbeat's age, and even with force.
  // A mount's open files are held by its daemon only (docs/semantics.md §6.10), so nothing outside may
  // take its segments while it runs: a stalled heartbeat (a stopped or hung daemon, a too short
  // --heartbeat-timeout) must not make a running mount look dead. Mounts leave it unset (a new mount
  // may fence off a hung one: the generation rule keeps the data safe).
  bool refuse_running_local_owner = false;
  // An object store's claim of the new generation (S3: S3TierEnv::ClaimGeneration, a PUT of
  // <node>/claim-<G>-... with If-None-Match: *, or the documented fallback), called with the node
  // directory, the generation and this taker's OWNER text before HEARTBEAT and OWNER are written: of two
  // mounts taking a node over at once, exactly one claims G. Exists: another one did (Acquire then fails
  // with Busy). Claimed generations count in the generation scan, so a claim left by a crash only moves
  // the next generation up. Empty (directories): no claim; the OWNER read-back detects such a race.
  std::function<Status(const std::string& node_dir, uint64_t generation, const std::string& owner_text)> claim;
  // Test hooks. self: our identity (default HostIdentity::Current()). process_alive: is the recorded
  // owner (same host and boot id) alive (default LocalProcessAlive).
  std::optional<HostIdentity> self;
  std::function<bool(const HostIdentity&)> process_alive;
};

class NodeDir {
 public:
  // Validates the backing directory, creates or checks FORMAT, creates <node>/ and <node>/seg/, and takes
  // the node directory over (rule above). Writes HEARTBEAT and OWNER for the new generation.
  static Result<std::unique_ptr<NodeDir>> Acquire(NodeDirOptions opts);
  // Stops the heartbeat. Does not release: a NodeDir dropped without Release() looks like a crash.
  ~NodeDir();

  uint64_t generation() const { return generation_; }
  const std::string& node_id() const { return node_; }
  const std::string& backing_dir() const { return backing_; }
  const std::string& dir() const { return dir_; }  // <backing>/.kvfs/v1/nodes/<node>
  std::string seg_dir() const;
  std::string SegmentPath(uint64_t seq) const;  // this generation's segment seq
  std::string JournalPath(uint64_t n) const;    // this generation's journal n
  std::string SnapshotPath(uint64_t n) const;
  // Why Acquire could take over ("fresh", "released", "owner pid 123 gone", "heartbeat 41.0 s old",
  // "force") and the record it replaced, if any.
  const std::string& takeover_reason() const { return reason_; }
  const std::string& format_id() const { return format_id_; }  // FormatInfo::id of the backing
  const std::optional<OwnerRecord>& previous_owner() const { return previous_; }

  // Rewrites HEARTBEAT with the current wall clock (Env::WriteFileAtomic: 5 backing operations).
  Status WriteHeartbeat();
  // One periodic beat (what the heartbeat thread runs), cheap on a network file system:
  //  1. ownership: a stat of OWNER; OWNER is re-read (CheckOwnership) only when its size or mtime
  //     differs from what this mount last wrote or read (a takeover replaces it), so an idle beat costs
  //     one metadata operation instead of open + read + close;
  //  2. HEARTBEAT is rewritten in place through a descriptor kept open: one pwrite of the whole
  //     fixed-size record (kHeartbeatBytes; only the fixed-width time_ns changes between beats, so a
  //     reader racing the write sees old or new digits of one plausible recent time) + fdatasync, no
  //     metadata operation. A takeover replaces HEARTBEAT by rename, so a stale descriptor only writes
  //     the old, unlinked file; a failed write drops the descriptor and the next beat re-opens the path
  //     (after the ownership check), or re-creates it atomically if it is gone.
  // Busy after a lost ownership (then it writes nothing).
  Status Beat();
  // Re-reads OWNER; Busy if another mount has taken over since (then ownership_lost() turns true).
  Status CheckOwnership();
  bool ownership_lost() const { return lost_.load(); }
  // Starts a thread that every interval checks ownership and, while still the owner, writes HEARTBEAT.
  // After a lost ownership it stops writing (so the new owner's heartbeat is not overwritten).
  void StartHeartbeat(std::chrono::milliseconds interval);
  void StopHeartbeat();
  const Heartbeat* heartbeat() const { return heartbeat_.get(); }
  // Clean unmount: stops the heartbeat and rewrites OWNER with state=released (same generation), so the
  // next mount takes over at once. No-op error if ownership was lost (Busy).
  Status Release();

 private:
  NodeDir() = default;
  Env* env_ = nullptr;
  std::string backing_, node_, dir_;
  uint64_t generation_ = 0;
  std::string format_id_;
  OwnerRecord self_record_;
  std::string reason_;
  std::optional<OwnerRecord> previous_;
  std::atomic<bool> lost_{false};
  std::mutex mu_;  // serializes heartbeat/ownership writes
  std::unique_ptr<Heartbeat> heartbeat_;
  std::unique_ptr<BackingFile> hb_file_;    // HEARTBEAT, open for in-place beats (guarded by mu_)
  std::optional<FileInfo> owner_seen_;      // OWNER's size/mtime when last known to be ours (mu_)
};

}  // namespace kvfs
