// LinkArbiter: exactly one winner when several nodes link(2) the same new name at once (the LMCache
// fs_native publish: unique O_EXCL temp, write, close, `link(tmp, final)`, EEXIST = another writer won).
//
// Each node checks its own index first; two nodes that link one name before either has applied the
// other's PUT both find it absent there. They then race for a *claim* on the export: an exclusive create
// of <backing>/.kvfs/v1/links/<key>, an empty directory where the backing has directories
// (Env::CreateDirExclusive: one MKDIR, which an NFS server decides atomically) and else an empty object
// (Env::CreateExclusive: a conditional PUT, If-None-Match: *, on S3). Either kind, made by any version,
// excludes the other: a node only ever asks whether the name exists. The key is XXH3-128 of the
// path and its *incarnation*: the binding the path's tombstone removed (the (stamp, node) of the PUT the
// last UNLINK or rename-away took away; none for a name never removed; StoreImpl::
// LinkIncarnationLocked). Every node that removed or applied the removal of that binding derives the same
// key, and a name unlinked and linked again is a new race under a fresh key, not a loss to the claim of
// its previous life. docs/design.md §5 "link(2) across nodes".
//
// Abandoned claims: a claim at least kStaleAfter old on the server's clock (its ctime against this
// node's HEARTBEAT's) whose name is absent from this node's index no longer decides: its creator crashed
// between the claim and its PUT, or the name was published and removed without a new tombstone (evicted,
// its directory renamed). The next claim goes to <key>.1, then .2, ... (the same race among the nodes
// that found it abandoned), at most kMaxChain. Where the backing has no ctime (S3) the age is how long
// this node has seen the claim. A winner whose PUT takes longer than kStaleAfter to reach a peer can
// lose its exclusivity (docs/semantics.md "link" lists the limits).
// Removal: the creator removes a claim kClaimTtl after its link (ExpireDue, off the FUSE threads): by
// then every live peer has applied the PUT and answers EEXIST from its own index. A crash leaves its
// claims; Sweep removes, in bounded steps, claims whose mtime is kSweepAge older than this node's
// HEARTBEAT (both are the server's clock).
//
// Costs (backing operations per link(2) of a regular file): a won claim is one mkdir (NFS: one MKDIR;
// it was an O_EXCL create, an OPEN and a CLOSE, before 2026-12-03) and, a minute later, one RMDIR off
// the FUSE thread; a lost one is the refused create
// and two stats (the claim's and the HEARTBEAT's ctime).
// Thread safety: every method is thread-safe (mu_ guards the pending removals, the sightings and the
// sweep's state); no lock is held across a backing call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/node_dir.h"
#include "blockstore/status.h"

namespace kvfs {

class LinkArbiter {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kStaleAfter{30};
  static constexpr std::chrono::seconds kClaimTtl{60};
  static constexpr std::chrono::seconds kSweepAge{kLinkClaimSweepAgeS};
  static constexpr std::chrono::seconds kSweepEvery{3600};
  // The first pass, this long after construction (the mount): a claim is swept only when kSweepAge
  // old, so a pass at mount finds nothing a later one would not, and it would put a LIST and a stat
  // into every mount's first seconds.
  static constexpr std::chrono::seconds kFirstSweepAfter{600};
  static constexpr size_t kSweepStatsPerStep = 64;
  static constexpr int kMaxChain = 16;

  // backing: the export's root (StoreOptions::backing_dir); heartbeat: this node's HEARTBEAT file (the
  // server's clock for Sweep).
  // sweep: false on an object store (no server clock to age claims by: nothing would be removed, and
  // each pass would cost a LIST of the bucket).
  LinkArbiter(Env* env, const std::string& backing, std::string heartbeat, bool sweep = true);

  // The claims directory: <backing>/.kvfs/v1/links.
  const std::string& dir() const { return dir_; }
  // mkdir -p of dir().
  Status Init();

  struct Claim {
    bool won = false;
    std::string file;  // won: the claim file this node created (for Keep / Release)
  };
  // Races for (path, incarnation). won: this node holds the claim; !won: a live claim of another
  // link(2) holds it (the caller answers EEXIST). A claim that cannot be created: NoSpace and TimedOut
  // pass on, any other backing error (EACCES, EROFS, EPERM...) is EIO, logged (rate-limited) and counted
  // (errors); a chain longer than kMaxChain is EIO. A missing claims directory is made again.
  Result<Claim> TryClaim(const std::string& path, const std::string& incarnation);
  // The link published (its PUT is queued): remove the claim kClaimTtl from now.
  void Keep(const std::string& file);
  // The claim did not publish (the name appeared meanwhile, or the link failed): remove it now.
  void Release(const std::string& file);
  // Removes the kept claims that are due (with all = true, at an unmount: the oldest kCloseRemovals of
  // them whatever their deadline, so an unmount after heavy publishing costs at most that many
  // removals, ~0.5 s on NFS; the others are left on the export for a later sweep), then runs one Sweep
  // step when one is due. Backing errors are logged (rate-limited), counted (errors, not removed) and the
  // claim is dropped from the list (left on the export for the sweep).
  void Tick(bool all = false);
  static constexpr size_t kCloseRemovals = 1000;

  // The claim file of (path, incarnation), link number `chain` (0 = the first claim).
  std::string ClaimFile(const std::string& path, const std::string& incarnation, int chain) const;

  struct Stats {
    uint64_t won = 0, lost = 0, abandoned = 0, removed = 0, swept = 0, pending = 0, errors = 0;
  };
  Stats GetStats();
  // Tests: the ages that decide (defaults above).
  void SetAgesForTest(std::chrono::milliseconds stale, std::chrono::milliseconds ttl,
                      std::chrono::milliseconds sweep_age);
  // Tests: a sweep pass starts at the next Tick.
  void SweepAtNextTickForTest();

 private:
  std::optional<std::chrono::nanoseconds> ServerAge(const std::string& file);
  // The exclusive create of one claim: a directory, or (where the backing has none) an empty object.
  Status CreateClaim(const std::string& file);
  // One bounded step of the sweep (lists dir() at the start of a pass, then stats up to
  // kSweepStatsPerStep names per call).
  void SweepStep();

  Env* const env_;
  const std::string dir_, heartbeat_;
  const bool sweep_;
  std::atomic<bool> dir_claims_{true};  // false once the backing answered NotSupported to a mkdir claim
  std::mutex mu_;
  std::chrono::milliseconds stale_{kStaleAfter}, ttl_{kClaimTtl}, sweep_age_{kSweepAge};
  std::deque<std::pair<Clock::time_point, std::string>> pending_;  // in deadline order
  std::map<std::string, Clock::time_point> seen_;  // no ctime (S3): claims lost to, when first seen
  std::vector<std::string> sweep_names_;          // the pass in progress (names left to stat)
  int64_t sweep_now_ns_ = 0;                      // the HEARTBEAT's mtime at the pass's start
  Clock::time_point next_sweep_;                  // construction + kFirstSweepAfter, then every kSweepEvery
  Stats stats_;
};

}  // namespace kvfs
