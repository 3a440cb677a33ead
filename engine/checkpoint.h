// Journal checkpoints and journal retirement (docs/design.md §2 "Journal"; formats in docs/format.md "## Snapshots"
// and "## Peers file"; rules in docs/operations.md "Checkpoints and journal retirement").
//
// Checkpoint (Checkpointer::CheckpointNow): the Store cuts its journal at a consistent point (writers
// excluded, journal durable, next entries go to a new file journal-<g>-<n>) and hands over a read view of
// its index taken at that point; the node's live entries (snapshot.h) are written to snapshot-<g>-<n>.
// Snapshots beyond the newest kKeepSnapshots are deleted.
//
// Progress ("peers" file, <node dir>/peers): every node publishes how far it has read each peer's
// journal, rewritten atomically (Env::WriteFileAtomic) at most every peers_publish_ms and only when a
// position moved (an idle node writes nothing; nor does a node that has read no peer yet).
//
// Retirement (Checkpointer::RetireNow): journal file (g, n) of this node is deleted when
//   1. it sorts before the cover of the OLDER of the two newest snapshots (so if the newest snapshot is
//      damaged, the older one plus the journals after it still rebuild everything), and
//   2. every LIVE peer's peers file shows a read position in a later file (g', n') > (g, n).
// A peer is live when its OWNER is active (not released) and its HEARTBEAT is younger than
// heartbeat_timeout (30 s, as the takeover rule). Dead, released, retired and purged nodes do not block
// retirement; when such a node comes back and finds the file at its read position gone, it re-reads the
// newest snapshot (engine/peer_tailer.h PeerTailer), so it loses nothing. A live peer that has not published a
// position for this node yet blocks retirement (it may be reading from the start).
//
// Thread safety: Checkpointer's methods are thread-safe (one internal mutex serializes checkpoints,
// publications and retirements); the free functions are reentrant.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/status.h"
#include "index/index_db.h"
#include "index/journal.h"
#include "index/snapshot.h"

namespace kvfs {

inline constexpr size_t kKeepSnapshots = 2;

// ---- peers file ----
struct PeersRecord {
  std::string node;          // the node that wrote it
  uint64_t generation = 0;   // its generation at the write
  int64_t time_ns = 0;       // its wall clock at the write
  std::map<std::string, JournalPosition> read;  // peer node -> position read up to (end of an applied entry)
  std::string Serialize() const;
  static Result<PeersRecord> Parse(std::string_view text);  // Corruption if malformed
};
Status WritePeersFile(Env* env, const std::string& backing, const PeersRecord& rec);
// NotFound if the node has not published one.
Result<PeersRecord> ReadPeersFile(Env* env, const std::string& backing, const std::string& node);

// Parses "<gen>-<n>@<offset>" (JournalPosition::ToString). false if malformed.
bool ParseJournalPosition(std::string_view s, JournalPosition* pos);

// Whether `node` is live: OWNER active (not released) and HEARTBEAT time_ns within heartbeat_timeout of
// our wall clock. Two reads. A node without OWNER/HEARTBEAT is not live.
bool NodeLooksLive(Env* env, const std::string& backing, const std::string& node,
                   std::chrono::milliseconds heartbeat_timeout);

// ---- purged nodes (tools/node_cmd.h: `kvfs node purge` leaves <node>/PURGED with generation=G) ----
// The generation of the purge that wrote <node>/PURGED; NotFound if there is none.
Result<uint64_t> ReadPurgedGeneration(Env* env, const std::string& backing, const std::string& node);
// Whether `index` (of `node`) was last used before `node` was purged: PURGED exists and the generation of
// the index's applied position of its own node (recorded at every clean close; none counts as 0) is not
// above the purge's. Then the index still holds the purged data and must be rebuilt.
bool IndexPredatesPurge(Env* env, const std::string& backing, const std::string& node, IndexDb* index);

// ---- building a snapshot ----
// Writes snapshot-<cover.generation>-<cover.file_number> of `node` into node_dir from the index view
// (the entries of snapshot.h). *entries = entries written.
Status WriteSnapshotFromIndex(Env* env, IndexDb* index, const IndexDb::View& view, const std::string& node_dir,
                              const std::string& node, uint64_t generation, uint64_t number, uint64_t* entries);

// ---- retirement decision (pure) ----
struct RetirePlan {
  std::vector<JournalFile> journals;    // to delete
  std::vector<SnapshotFile> snapshots;  // older than the newest kKeepSnapshots: to delete
  std::vector<JournalFile> blocked;     // covered, but some live peer has not read past them
  std::string blocked_by;               // the first live peer that blocks (for logs)
};
// own: this node's files. live_peers: every live peer -> its published position for this node
// (nullopt = none published). current: (generation, number) of the file this node writes now (never
// retired).
RetirePlan PlanRetirement(const NodeFiles& own,
                          const std::map<std::string, std::optional<JournalPosition>>& live_peers,
                          std::pair<uint64_t, uint64_t> current);

// ---- the background part ----
struct CheckpointerOptions {
  Env* env = nullptr;
  std::string backing_dir;
  std::string node;
  uint64_t generation = 0;
  uint64_t checkpoint_entries = 1000000;   // checkpoint after this many journal entries (0 = never)
  uint32_t checkpoint_interval_ms = 600000; // ... or this long after the last one, if any entry was written
  uint32_t peers_publish_ms = 10000;       // peers file rewrite period (when a position moved)
  uint32_t retire_check_ms = 10000;        // retirement check period while covered files remain
  std::chrono::milliseconds heartbeat_timeout{30000};
};

class Checkpointer {
 public:
  struct Cut {
    uint64_t generation = 0, number = 0;     // the snapshot covers journal files before (generation, number)
    std::shared_ptr<const IndexDb::View> view;  // the index at the cut
  };
  // cut(): excludes writers, makes the journal durable, starts journal file (g, n) for later entries,
  // returns (g, n) and a view of the index. journal_entries(): entries journaled so far (monotonic).
  // current_file(): (g, n) of the journal file being written. read_positions(): how far this node has
  // read each peer.
  Checkpointer(const CheckpointerOptions& opts, IndexDb* index, std::function<Result<Cut>()> cut,
               std::function<uint64_t()> journal_entries, std::function<std::pair<uint64_t, uint64_t>()> current_file,
               std::function<std::map<std::string, JournalPosition>()> read_positions);
  ~Checkpointer();

  void Start();  // one retirement check now (logged if it fails), then the background thread (checkpoint / publish / retire when due)
  void Stop();   // idempotent

  // Writes a snapshot now (skipped, OK, if no entry was journaled since the last one and skip_if_idle),
  // deletes snapshots beyond kKeepSnapshots, then tries retirement.
  Status CheckpointNow(bool skip_if_idle = false);
  Status PublishPeers(bool force);
  Status RetireNow(RetirePlan* plan = nullptr);

  uint64_t checkpoints() const;
  uint64_t journals_retired() const;

 private:
  void Loop();
  Status CheckpointLocked(bool skip_if_idle);
  Status RetireLocked(RetirePlan* plan);

  const CheckpointerOptions opts_;
  IndexDb* index_;
  std::function<Result<Cut>()> cut_;
  std::function<uint64_t()> journal_entries_;
  std::function<std::pair<uint64_t, uint64_t>()> current_file_;
  std::function<std::map<std::string, JournalPosition>()> read_positions_;

  std::mutex op_mu_;  // serializes checkpoint / publish / retire
  uint64_t entries_at_last_ = 0;
  std::chrono::steady_clock::time_point last_checkpoint_, last_publish_{}, last_retire_check_{};
  std::map<std::string, JournalPosition> published_;
  bool published_once_ = false;
  bool retire_pending_ = true;
  uint64_t checkpoints_ = 0, retired_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kvfs
