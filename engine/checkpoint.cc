// Journal checkpoints and retirement: see checkpoint.h.
#include "engine/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <spdlog/spdlog.h>

#include "blockstore/node_dir.h"
#include "index/replay.h"

namespace kvfs {
namespace {

constexpr std::string_view kPeersMagic = "kvfs-peers 1";

}  // namespace

bool ParseJournalPosition(std::string_view s, JournalPosition* pos) {
  unsigned long long g = 0, n = 0, off = 0;
  char tail = 0;
  std::string str(s);
  if (sscanf(str.c_str(), "%llu-%llu@%llu%c", &g, &n, &off, &tail) != 3) return false;
  *pos = JournalPosition{g, n, off};
  return true;
}

std::string PeersRecord::Serialize() const {
  std::string out(kPeersMagic);
  out += "\nnode=" + node + "\ngeneration=" + std::to_string(generation) + "\ntime_ns=" + std::to_string(time_ns) + "\n";
  for (const auto& [peer, pos] : read) out += "read " + peer + " " + pos.ToString() + "\n";
  return out;
}

Result<PeersRecord> PeersRecord::Parse(std::string_view text) {
  PeersRecord r;
  std::istringstream in{std::string(text)};
  std::string line;
  if (!std::getline(in, line) || line != kPeersMagic) return Status::Corruption("peers file: bad first line");
  bool have_node = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("node=", 0) == 0) {
      r.node = line.substr(5);
      have_node = true;
    } else if (line.rfind("generation=", 0) == 0) {
      r.generation = std::strtoull(line.c_str() + 11, nullptr, 10);
    } else if (line.rfind("time_ns=", 0) == 0) {
      r.time_ns = std::strtoll(line.c_str() + 8, nullptr, 10);
    } else if (line.rfind("read ", 0) == 0) {
      const size_t sp = line.find(' ', 5);
      JournalPosition p;
      if (sp == std::string::npos || !ParseJournalPosition(std::string_view(line).substr(sp + 1), &p)) {
        return Status::Corruption("peers file: bad line '" + line + "'");
      }
      r.read[line.substr(5, sp - 5)] = p;
    } else {
      return Status::Corruption("peers file: unknown line '" + line + "'");
    }
  }
  if (!have_node) return Status::Corruption("peers file: no node= line");
  return r;
}

Status WritePeersFile(Env* env, const std::string& backing, const PeersRecord& rec) {
  return env->WriteFileAtomic(PeersFilePath(backing, rec.node), rec.Serialize());
}

Result<PeersRecord> ReadPeersFile(Env* env, const std::string& backing, const std::string& node) {
  std::string text;
  KVFS_RETURN_IF_ERROR(env->ReadFileToString(PeersFilePath(backing, node), &text));
  auto r = PeersRecord::Parse(text);
  if (r.ok() && r->node != node) return Status::Corruption("peers file of " + node + " names node " + r->node);
  return r;
}

bool NodeLooksLive(Env* env, const std::string& backing, const std::string& node,
                   std::chrono::milliseconds heartbeat_timeout) {
  std::string text;
  if (!env->ReadFileToString(OwnerFilePath(backing, node), &text).ok()) return false;
  auto owner = OwnerRecord::Parse(text);
  if (!owner.ok() || owner->released) return false;
  text.clear();
  if (!env->ReadFileToString(HeartbeatFilePath(backing, node), &text).ok()) return false;
  auto hb = HeartbeatRecord::Parse(text);
  if (!hb.ok()) return false;
  return WallClockNs() - hb->time_ns <= static_cast<int64_t>(heartbeat_timeout.count()) * 1000000;
}

Result<uint64_t> ReadPurgedGeneration(Env* env, const std::string& backing, const std::string& node) {
  std::string text;
  KVFS_RETURN_IF_ERROR(env->ReadFileToString(NodeDirPath(backing, node) + "/PURGED", &text));
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("generation=", 0) == 0) return static_cast<uint64_t>(std::strtoull(line.c_str() + 11, nullptr, 10));
  }
  return Status::Corruption("PURGED of node " + node + " has no generation");
}

bool IndexPredatesPurge(Env* env, const std::string& backing, const std::string& node, IndexDb* index) {
  auto purged = ReadPurgedGeneration(env, backing, node);
  if (!purged.ok()) return false;
  uint64_t own = 0;
  auto pos = index->GetAppliedPosition(node);
  JournalPosition p;
  if (pos.ok() && ParseJournalPosition(*pos, &p)) own = p.generation;
  return own <= *purged;
}

Status WriteSnapshotFromIndex(Env* env, IndexDb* index, const IndexDb::View& view, const std::string& node_dir,
                              const std::string& node, uint64_t generation, uint64_t number, uint64_t* entries) {
  auto w = SnapshotWriter::Create(env, node_dir, node, generation, number);
  if (!w.ok()) return w.status();
  SnapshotWriter* sw = w->get();
  using K = IndexDb::ExportItem::Kind;
  Status s = index->ExportLive(view, node, [&](const IndexDb::ExportItem& it) -> Status {
    switch (it.kind) {
      case K::kDir:
        KVFS_RETURN_IF_ERROR(sw->Add(JournalEntry::Mkdir(it.path, ToEntryAttrs(it.attr), 0)));
        break;
      case K::kFile: {
        JournalEntry put = JournalEntry::Put(it.path, it.location, ToEntryAttrs(it.attr), it.stamp);
        put.extents = it.extents;  // an extent file's PUT is version 3 (its map, never a bare location)
        if (it.extents) put.attrs.size = it.extents->size();
        KVFS_RETURN_IF_ERROR(sw->Add(put));
        break;
      }
      case K::kSymlink:
        KVFS_RETURN_IF_ERROR(sw->Add(
            IsSpecialFileMode(it.attr.mode)
                ? JournalEntry::Special(it.path, ToEntryAttrs(it.attr), it.attr.rdev, it.stamp)
                : JournalEntry::Symlink(it.path, it.symlink, ToEntryAttrs(it.attr), it.stamp)));
        break;
      case K::kTombstone:
        return sw->Add(JournalEntry::Unlink(it.path, it.stamp));
      case K::kDirRename: {
        // The record of a directory rename: a snapshot's RENAME is a record, never a move
        // (index/snapshot.h); it makes the snapshot version 4. No location for this node's own; a
        // peer's names that peer in its location's node (every other field 0).
        Location by;
        if (it.record_node != node) by.segment.node = it.record_node;
        if (it.exchange) {
          // A directory exchange's (version 5): marked in the location, which then always names the node
          // (an empty location is encoded as absent).
          by.segment.node = it.record_node;
          by.segment.seq = kSnapshotExchangeRecord;
        }
        return sw->Add(JournalEntry::Rename(it.path, it.to, by, it.stamp));
      }
      case K::kPeerFileChanges:
        // What this node changed last of a file another node bound: its SETATTR (the whole attribute
        // set, as a local SETATTR journals it) and xattr sets/removes, at their own stamps (below). A
        // rebuild applies them after the binding (index/replay.h ReplayNodes).
        break;
      case K::kSegment:
        if (it.segment.state == SegmentState::kDropped) return sw->Add(JournalEntry::Drop(it.segment.id, 0));
        if (it.segment.cut != UINT64_MAX) {
          const SegmentId& id = it.segment.id;
          KVFS_RETURN_IF_ERROR(sw->Add(JournalEntry::Cut(
              FileRef{FileRef::Kind::kSegment, id.node, id.generation, id.seq}, it.segment.cut, 0)));
        }
        if (it.segment.state == SegmentState::kSealed) return sw->Add(JournalEntry::Seal(it.segment.id, 0));
        return Status::OK();
    }
    // Xattrs: a name with a journaled set/remove at that change's stamp (a remove too: an older set in
    // another node's journal must not bring it back); the others at the binding's stamp.
    // A set or remove older than the binding (made on a staged file before its commit, or before the
    // PUT that carried the xattr set) is part of the binding: at the binding's stamp, removes omitted.
    // (A peer's change, kPeerFileChanges, has no binding here: always at its stamp.)
    const bool peer = it.kind == K::kPeerFileChanges;
    auto later = [&](const IndexDb::ExportItem::XattrChange& c) { return peer || c.stamp > it.stamp; };
    for (const auto& [name, value] : it.xattrs) {
      const bool stamped = std::any_of(it.xattr_changes.begin(), it.xattr_changes.end(),
                                       [&](const IndexDb::ExportItem::XattrChange& c) { return c.name == name && later(c); });
      if (!stamped) KVFS_RETURN_IF_ERROR(sw->Add(JournalEntry::Xattr(it.path, name, value, false, it.stamp)));
    }
    for (const auto& c : it.xattr_changes) {
      if (!later(c)) continue;
      KVFS_RETURN_IF_ERROR(sw->Add(JournalEntry::Xattr(it.path, c.name, c.value, c.removed, c.stamp)));
    }
    // An attribute change after the binding, at its stamp (held back by a replay and merged by stamp).
    if (it.setattr) {
      KVFS_RETURN_IF_ERROR(sw->Add(JournalEntry::Setattr(it.path, ToEntryAttrs(it.attr), kSetAttrsWhole, it.attr_stamp)));
    }
    return Status::OK();
  });
  if (!s.ok()) return s;  // the writer's destructor removes the .tmp
  KVFS_RETURN_IF_ERROR(sw->Finish());
  if (entries) *entries = sw->entries();
  return Status::OK();
}

RetirePlan PlanRetirement(const NodeFiles& own, const std::map<std::string, std::optional<JournalPosition>>& live_peers,
                          std::pair<uint64_t, uint64_t> current) {
  RetirePlan plan;
  const size_t ns = own.snapshots.size();
  for (size_t i = 0; i + kKeepSnapshots < ns; i++) plan.snapshots.push_back(own.snapshots[i]);
  if (ns < kKeepSnapshots) return plan;  // retire only what the OLDER kept snapshot covers
  const SnapshotFile& older = own.snapshots[ns - kKeepSnapshots];
  const auto bound = std::make_pair(older.generation, older.number);
  for (const auto& f : own.journals) {
    const auto key = std::make_pair(f.generation, f.number);
    if (key >= bound || key >= current) break;
    bool ok = true;
    for (const auto& [peer, pos] : live_peers) {
      if (!pos || std::make_pair(pos->generation, pos->file_number) <= key) {
        ok = false;
        if (plan.blocked_by.empty()) plan.blocked_by = peer;
        break;
      }
    }
    (ok ? plan.journals : plan.blocked).push_back(f);
  }
  return plan;
}

// ---- Checkpointer ----

Checkpointer::Checkpointer(const CheckpointerOptions& opts, IndexDb* index, std::function<Result<Cut>()> cut,
                           std::function<uint64_t()> journal_entries,
                           std::function<std::pair<uint64_t, uint64_t>()> current_file,
                           std::function<std::map<std::string, JournalPosition>()> read_positions)
    : opts_(opts),
      index_(index),
      cut_(std::move(cut)),
      journal_entries_(std::move(journal_entries)),
      current_file_(std::move(current_file)),
      read_positions_(std::move(read_positions)),
      last_checkpoint_(std::chrono::steady_clock::now()) {
  entries_at_last_ = journal_entries_();
}

Checkpointer::~Checkpointer() { Stop(); }

void Checkpointer::Start() {
  {
    // The retirement check of what earlier mounts left runs here, at mount, rather than at the loop's
    // first tick: a mount's start-up listing then ends before it serves, and a node with nothing to
    // retire lists its directory again only after its next checkpoint (one LIST of the node directory
    // a second after every mount, on S3 a request inside whatever the first second was doing).
    std::lock_guard<std::mutex> op(op_mu_);
    Status s = RetireLocked(nullptr);
    if (!s.ok()) spdlog::warn("kvfs: journal retirement: {}", s.ToString());
  }
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Checkpointer::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Checkpointer::checkpoints() const { return checkpoints_; }
uint64_t Checkpointer::journals_retired() const { return retired_; }

void Checkpointer::Loop() {
  using clock = std::chrono::steady_clock;
  const auto tick = std::chrono::milliseconds(
      std::max<uint32_t>(50, std::min<uint32_t>({1000, opts_.peers_publish_ms, opts_.retire_check_ms})));
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_for(l, tick, [&] { return stop_; })) return;
    }
    std::lock_guard<std::mutex> op(op_mu_);
    const auto now = clock::now();
    const uint64_t grown = journal_entries_() - entries_at_last_;
    const bool by_entries = opts_.checkpoint_entries > 0 && grown >= opts_.checkpoint_entries;
    const bool by_time = opts_.checkpoint_interval_ms > 0 && grown > 0 &&
                         now - last_checkpoint_ >= std::chrono::milliseconds(opts_.checkpoint_interval_ms);
    if (by_entries || by_time) {
      Status s = CheckpointLocked(true);
      if (!s.ok()) spdlog::error("kvfs: checkpoint failed: {}", s.ToString());
    }
    if (now - last_publish_ >= std::chrono::milliseconds(opts_.peers_publish_ms)) {
      auto positions = read_positions_();
      if (!published_once_ && positions.empty()) {
        // Nothing read of any peer yet: a peers file naming no peer tells a peer what no file tells it
        // (PlanRetirement: no position of it = it keeps its journals), so skip the write (create, fsync,
        // rename and a directory sync: ~8 backing metadata operations a second after every mount, in
        // the middle of a benchmark's store phase). A stale file of an earlier generation is harmless:
        // a peer this index has no position for is read from its newest snapshot, which covers whatever
        // the stale positions let that peer retire.
        published_once_ = true;
        published_.clear();
        last_publish_ = now;
      } else if (!published_once_ || positions != published_) {
        PeersRecord rec;
        rec.node = opts_.node;
        rec.generation = opts_.generation;
        rec.time_ns = WallClockNs();
        rec.read = positions;
        Status s = WritePeersFile(opts_.env, opts_.backing_dir, rec);
        if (s.ok()) {
          published_ = std::move(positions);
          published_once_ = true;
        } else {
          spdlog::warn("kvfs: writing the peers file: {}", s.ToString());
        }
        last_publish_ = now;
      }
    }
    if (retire_pending_ && now - last_retire_check_ >= std::chrono::milliseconds(opts_.retire_check_ms)) {
      Status s = RetireLocked(nullptr);
      if (!s.ok()) spdlog::warn("kvfs: journal retirement: {}", s.ToString());
    }
  }
}

Status Checkpointer::CheckpointNow(bool skip_if_idle) {
  std::lock_guard<std::mutex> op(op_mu_);
  return CheckpointLocked(skip_if_idle);
}

Status Checkpointer::CheckpointLocked(bool skip_if_idle) {
  const uint64_t entries_now = journal_entries_();
  if (skip_if_idle && entries_now == entries_at_last_) return Status::OK();
  const auto t0 = std::chrono::steady_clock::now();
  auto cut = cut_();
  if (!cut.ok()) return cut.status();
  uint64_t n = 0;
  const std::string dir = NodeDirPath(opts_.backing_dir, opts_.node);
  Status s = WriteSnapshotFromIndex(opts_.env, index_, *cut->view, dir, opts_.node, cut->generation, cut->number, &n);
  cut->view.reset();
  if (!s.ok()) return s;
  entries_at_last_ = entries_now;
  last_checkpoint_ = std::chrono::steady_clock::now();
  checkpoints_++;
  retire_pending_ = true;
  spdlog::info("kvfs: checkpoint {} of node {}: {} entries in {} ms", SnapshotFileName(cut->generation, cut->number),
               opts_.node, n,
               std::chrono::duration_cast<std::chrono::milliseconds>(last_checkpoint_ - t0).count());
  return RetireLocked(nullptr);
}

Status Checkpointer::PublishPeers(bool force) {
  std::lock_guard<std::mutex> op(op_mu_);
  auto positions = read_positions_();
  if (!force && published_once_ && positions == published_) return Status::OK();
  PeersRecord rec;
  rec.node = opts_.node;
  rec.generation = opts_.generation;
  rec.time_ns = WallClockNs();
  rec.read = positions;
  KVFS_RETURN_IF_ERROR(WritePeersFile(opts_.env, opts_.backing_dir, rec));
  published_ = std::move(positions);
  published_once_ = true;
  last_publish_ = std::chrono::steady_clock::now();
  return Status::OK();
}

Status Checkpointer::RetireNow(RetirePlan* plan) {
  std::lock_guard<std::mutex> op(op_mu_);
  return RetireLocked(plan);
}

Status Checkpointer::RetireLocked(RetirePlan* out) {
  last_retire_check_ = std::chrono::steady_clock::now();
  const std::string dir = NodeDirPath(opts_.backing_dir, opts_.node);
  NodeFiles own;
  KVFS_RETURN_IF_ERROR(ListNodeFiles(opts_.env, dir, &own));
  std::map<std::string, std::optional<JournalPosition>> live;
  // Only ask the peers when something could be retired.
  bool candidates = own.snapshots.size() > kKeepSnapshots;
  if (own.snapshots.size() >= kKeepSnapshots) {
    const SnapshotFile& older = own.snapshots[own.snapshots.size() - kKeepSnapshots];
    candidates = candidates || (!own.journals.empty() &&
                                std::make_pair(own.journals.front().generation, own.journals.front().number) <
                                    std::make_pair(older.generation, older.number));
  }
  if (!candidates) {
    retire_pending_ = false;
    if (out) *out = RetirePlan{};
    return Status::OK();
  }
  auto nodes = ListNodes(opts_.env, opts_.backing_dir);
  if (!nodes.ok()) return nodes.status();
  for (const auto& peer : *nodes) {
    if (peer == opts_.node) continue;
    if (!NodeLooksLive(opts_.env, opts_.backing_dir, peer, opts_.heartbeat_timeout)) continue;
    auto rec = ReadPeersFile(opts_.env, opts_.backing_dir, peer);
    std::optional<JournalPosition> pos;
    if (rec.ok()) {
      auto it = rec->read.find(opts_.node);
      if (it != rec->read.end()) pos = it->second;
    }
    live[peer] = pos;
  }
  RetirePlan plan = PlanRetirement(own, live, current_file_());
  for (const auto& f : plan.journals) {
    Status s = opts_.env->Remove(f.path);
    if (!s.ok() && !s.IsNotFound()) return s;
    retired_++;
  }
  for (const auto& f : plan.snapshots) {
    Status s = opts_.env->Remove(f.path);
    if (!s.ok() && !s.IsNotFound()) return s;
  }
  if (!plan.journals.empty() || !plan.snapshots.empty()) {
    KVFS_RETURN_IF_ERROR(opts_.env->SyncDir(dir));
    spdlog::info("kvfs: node {}: retired {} journal file(s), {} old snapshot(s)", opts_.node, plan.journals.size(),
                 plan.snapshots.size());
  }
  if (!plan.blocked.empty()) {
    spdlog::debug("kvfs: node {}: {} journal file(s) wait for peer {}", opts_.node, plan.blocked.size(),
                  plan.blocked_by);
  }
  retire_pending_ = !plan.blocked.empty();
  if (out) *out = std::move(plan);
  return Status::OK();
}

}  // namespace kvfs
