// `kvfs node list | retire | purge` (tools/node_cmd.h).
#include "tools/node_cmd.h"

#include <stdlib.h>

#include <filesystem>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/node_dir.h"
#include "blockstore/s3_env.h"
#include "engine/peer_holds.h"
#include "index/hlc.h"
#include "index/journal.h"
#include "index/journal_format.h"

namespace kvfs {
namespace {

constexpr int kExitOk = 0, kExitFail = 1, kExitUsage = 2;

int Fail(int code, const std::string& msg) {
  std::fprintf(stderr, "kvfs: %s\n", msg.c_str());
  return code;
}

struct NodeInfo {
  std::string id;
  std::string state;  // live | released | dead | retired | purged
  std::optional<OwnerRecord> owner;
  std::optional<HeartbeatRecord> heartbeat;
  std::optional<int64_t> heartbeat_age_ns;
  bool retired_mark = false, purged_mark = false;
  uint64_t journal_bytes = 0, journal_files = 0, snapshot_bytes = 0, segment_bytes = 0, segments = 0;
  std::vector<SegmentId> segment_ids;
  std::vector<std::string> files;  // every file of the node dir except OWNER/PURGED (relative, "seg/" ...)
};

bool Exists(Env* env, const std::string& p) { return env->Stat(p).ok(); }

Result<NodeInfo> Inspect(Env* env, const std::string& backing, const std::string& node) {
  NodeInfo n;
  n.id = node;
  const std::string dir = NodeDirPath(backing, node);
  std::string text;
  if (env->ReadFileToString(OwnerFilePath(backing, node), &text).ok()) {
    auto o = OwnerRecord::Parse(text);
    if (o.ok()) n.owner = *o;
  }
  text.clear();
  if (env->ReadFileToString(HeartbeatFilePath(backing, node), &text).ok()) {
    auto h = HeartbeatRecord::Parse(text);
    if (h.ok()) {
      n.heartbeat = *h;
      n.heartbeat_age_ns = WallClockNs() - h->time_ns;
    }
  }
  n.retired_mark = Exists(env, dir + "/RETIRED");
  n.purged_mark = Exists(env, dir + "/PURGED");
  std::vector<std::string> names;
  Status s = env->GetChildren(dir, &names);
  if (!s.ok()) return s;
  for (const auto& name : names) {
    if (name == "OWNER" || name == "PURGED" || name == "seg" || name == "holds") continue;
    n.files.push_back(name);
    uint64_t g, k;
    if (ParseJournalFileName(name, &g, &k)) {
      auto st = env->Stat(dir + "/" + name);
      if (st.ok()) n.journal_bytes += st->size;
      n.journal_files++;
    } else if (ParseSnapshotFileName(name, &g, &k)) {
      auto st = env->Stat(dir + "/" + name);
      if (st.ok()) n.snapshot_bytes += st->size;
    }
  }
  names.clear();
  s = env->GetChildren(SegmentDirPath(backing, node), &names);
  if (!s.ok() && !s.IsNotFound()) return s;
  for (const auto& name : names) {
    n.files.push_back("seg/" + name);
    SegmentId id;
    id.node = node;
    if (!ParseSegmentFileName(name, &id.generation, &id.seq)) continue;
    auto st = env->Stat(SegmentFilePath(backing, id));
    if (st.ok()) n.segment_bytes += st->size;
    n.segments++;
    n.segment_ids.push_back(id);
  }
  // Its hold markers of other nodes' segments (engine/peer_holds.h), files before their directories.
  std::vector<std::string> owners;
  if (env->GetChildren(HoldsDirPath(backing, node), &owners).ok()) {
    for (const auto& owner : owners) {
      std::vector<std::string> marks;
      env->GetChildren(HoldDirPath(backing, node, owner), &marks);
      for (const auto& m : marks) n.files.push_back("holds/" + owner + "/" + m);
    }
    for (const auto& owner : owners) n.files.push_back("holds/" + owner);
    n.files.push_back("holds");
  }
  // State.
  const HostIdentity self = HostIdentity::Current();
  const int64_t timeout_ns = kNodeHeartbeatTimeoutMs * 1000000;
  bool live = false;
  if (n.owner && !n.owner->released) {
    live = n.heartbeat_age_ns && *n.heartbeat_age_ns <= timeout_ns;
    if (n.owner->owner.host == self.host && n.owner->owner.boot_id == self.boot_id) {
      // Same host and boot: the pid decides, not the heartbeat. Gone: provably dead. Running: a mount
      // whose heartbeat stalled (stopped, hung) is still live: its open files hold segments that a purge
      // would remove under it (docs/semantics.md §6.10).
      live = LocalProcessAlive(n.owner->owner);
    }
  }
  if (live) n.state = "live";
  // (segments left: files a live node held open at the purge; a new purge removes them)
  else if (n.purged_mark && n.journal_files == 0) n.state = "purged";
  else if (n.retired_mark) n.state = "retired";
  else if (n.owner && n.owner->released) n.state = "released";
  else n.state = "dead";
  return n;
}

std::string Age(const NodeInfo& n) {
  if (!n.heartbeat_age_ns) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1fs", static_cast<double>(*n.heartbeat_age_ns) / 1e9);
  return buf;
}

nlohmann::json ToJson(const NodeInfo& n) {
  nlohmann::json j;
  j["node"] = n.id;
  j["state"] = n.state;
  j["heartbeat_age_s"] = n.heartbeat_age_ns ? nlohmann::json(static_cast<double>(*n.heartbeat_age_ns) / 1e9)
                                            : nlohmann::json(nullptr);
  j["generation"] = n.owner ? n.owner->generation : 0;
  j["host"] = n.owner ? n.owner->owner.host : "";
  j["pid"] = n.owner ? n.owner->owner.pid : 0;
  j["retired"] = n.retired_mark;
  j["journal_files"] = n.journal_files;
  j["journal_bytes"] = n.journal_bytes;
  j["snapshot_bytes"] = n.snapshot_bytes;
  j["segments"] = n.segments;
  j["segment_bytes"] = n.segment_bytes;
  return j;
}

int List(Env* env, const std::string& backing, bool json) {
  auto nodes = ListNodes(env, backing);
  if (!nodes.ok()) return Fail(kExitFail, "listing nodes of " + backing + ": " + nodes.status().ToString());
  nlohmann::json arr = nlohmann::json::array();
  if (!json) {
    std::printf("%-20s %-9s %10s %5s %-24s %14s %14s\n", "NODE", "STATE", "HEARTBEAT", "GEN", "OWNER",
                "JOURNAL_BYTES", "SEGMENT_BYTES");
  }
  for (const auto& id : *nodes) {
    auto n = Inspect(env, backing, id);
    if (!n.ok()) return Fail(kExitFail, "node " + id + ": " + n.status().ToString());
    if (json) {
      arr.push_back(ToJson(*n));
      continue;
    }
    std::string owner = n->owner ? n->owner->owner.host + "/" + std::to_string(n->owner->owner.pid) : "-";
    std::printf("%-20s %-9s %10s %5llu %-24s %14llu %14llu\n", id.c_str(), n->state.c_str(), Age(*n).c_str(),
                static_cast<unsigned long long>(n->owner ? n->owner->generation : 0), owner.c_str(),
                static_cast<unsigned long long>(n->journal_bytes),
                static_cast<unsigned long long>(n->segment_bytes));
  }
  if (json) std::cout << arr.dump(2) << "\n";
  return kExitOk;
}

std::string Describe(const NodeInfo& n) {
  std::string s = "node '" + n.id + "' is " + n.state;
  if (n.owner) s += " (host " + n.owner->owner.host + " pid " + std::to_string(n.owner->owner.pid) +
                    " generation " + std::to_string(n.owner->generation);
  if (n.owner) s += ", heartbeat " + Age(n) + " old)";
  return s;
}

int Retire(Env* env, const std::string& backing, const NodeInfo& n, bool force) {
  if (n.state == "live" && !force) {
    return Fail(kExitUsage, Describe(n) + ": its heartbeat is fresh (timeout " +
                                std::to_string(kNodeHeartbeatTimeoutMs / 1000) +
                                " s); refusing to retire a live node (use --force if it is gone for sure)");
  }
  const HostIdentity self = HostIdentity::Current();
  std::string rec = "time_ns=" + std::to_string(WallClockNs()) + "\nhost=" + self.host +
                    "\npid=" + std::to_string(self.pid) + "\nprevious_state=" + n.state + "\n";
  Status s = env->WriteFileAtomic(NodeDirPath(backing, n.id) + "/RETIRED", rec);
  if (!s.ok()) return Fail(kExitFail, "writing RETIRED of node '" + n.id + "': " + s.ToString());
  std::printf("node %s retired (was %s)\n", n.id.c_str(), n.state.c_str());
  return kExitOk;
}

int Purge(Env* env, const std::string& backing, const NodeInfo& n, bool force, uint32_t grace_ms, bool json) {
  if (n.state == "live") {
    const HostIdentity self = HostIdentity::Current();
    if (n.owner && n.owner->owner.host == self.host && n.owner->owner.boot_id == self.boot_id) {
      return Fail(kExitUsage, Describe(n) + ": refusing to purge a live node: its daemon (pid " +
                                  std::to_string(n.owner->owner.pid) + ") runs on this host; unmount it first");
    }
    return Fail(kExitUsage, Describe(n) + ": refusing to purge a live node (unmount it, or wait until its "
                                          "heartbeat is older than " +
                                std::to_string(kNodeHeartbeatTimeoutMs / 1000) + " s)");
  }
  if (n.state == "released" && !force) {
    return Fail(kExitUsage, Describe(n) + " (unmounted cleanly, it may come back): retire it first or use --force");
  }
  if (n.state == "purged" && n.segments == 0) {
    std::printf("node %s is already purged\n", n.id.c_str());
    return kExitOk;
  }
  // Take the directory over by the normal rule (not forced): a mount that started meanwhile wins.
  NodeDirOptions no;
  no.env = env;
  no.backing_dir = backing;
  no.node_id = n.id;
  no.heartbeat_timeout = std::chrono::milliseconds(kNodeHeartbeatTimeoutMs);
  no.refuse_running_local_owner = true;
  auto nd = NodeDir::Acquire(no);
  if (!nd.ok()) {
    return Fail(nd.status().IsBusy() ? kExitUsage : kExitFail,
                "cannot take over node '" + n.id + "' for purge: " + nd.status().ToString());
  }
  // Re-inspect under ownership: segments written between the first look and the takeover count too.
  auto again = Inspect(env, backing, n.id);
  if (!again.ok()) return Fail(kExitFail, again.status().ToString());
  // DROP every segment in a journal of the new generation, durable, so peers forget its files.
  JournalWriterOptions jo;
  jo.env = env;
  jo.dir = (*nd)->dir();
  jo.node = n.id;
  jo.generation = (*nd)->generation();
  auto jw = JournalWriter::Open(jo);
  if (!jw.ok()) return Fail(kExitFail, "journal for purge: " + jw.status().ToString());
  HybridClock clock;
  for (const auto& id : again->segment_ids) (*jw)->Append(JournalEntry::Drop(id, clock.Now()));
  Status s = (*jw)->Sync();
  if (!s.ok()) return Fail(kExitFail, "journaling DROPs: " + s.ToString());
  const std::string drop_journal = (*jw)->FilePath((*jw)->current_file_number());
  jw->reset();
  if (!json) {
    std::printf("node %s: generation %llu journaled DROP for %zu segment(s); waiting %u ms for peers\n",
                n.id.c_str(), static_cast<unsigned long long>((*nd)->generation()), again->segment_ids.size(),
                grace_ms);
    std::fflush(stdout);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(grace_ms));
  // A segment that a live node has a file of open (its hold marker, engine/peer_holds.h) stays: that
  // node read the DROPs above when it made its marker, or its marker is listed here (the mounts' rule,
  // docs/semantics.md §6.10 "Across nodes"). A later purge removes it.
  // A reader that has just closed its files keeps its marker for 5 s: held segments are looked at again
  // every second for up to 10 s before they are kept.
  bool complete = true;
  std::vector<std::string> holders;
  std::set<SegmentId> held;
  for (int waited = 0;; waited++) {
    holders.clear();
    held = SegmentsHeldByLivePeers(env, backing, n.id, again->segment_ids, &complete, nullptr, &holders);
    if ((complete && held.empty()) || waited >= 10) break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (!complete) {
    return Fail(kExitFail, "cannot list the other nodes' hold markers of node '" + n.id +
                               "' segments; nothing removed (run kvfs node purge again)");
  }
  std::set<std::string> kept;
  uint64_t kept_bytes = 0;
  for (const auto& id : held) {
    kept.insert("seg/" + SegmentFileName(id.generation, id.seq));
    auto st = env->Stat(SegmentFilePath(backing, id));
    if (st.ok()) kept_bytes += st->size;
  }
  // Remove everything but OWNER; segments first (peers that missed the DROPs then get ENOENT on read).
  const std::string dir = (*nd)->dir();
  uint64_t removed = 0, bytes = again->segment_bytes + again->journal_bytes + again->snapshot_bytes - kept_bytes;
  std::vector<std::string> order;
  for (const auto& f : again->files) if (f.rfind("seg/", 0) == 0) order.push_back(f);
  for (const auto& f : again->files) if (f.rfind("seg/", 0) != 0 && f != "HEARTBEAT") order.push_back(f);
  std::vector<std::string> names;
  if (env->GetChildren(dir, &names).ok()) {
    for (const auto& nm : names) {
      uint64_t g, k;
      if (ParseJournalFileName(nm, &g, &k) && std::find(order.begin(), order.end(), nm) == order.end()) {
        order.push_back(nm);  // the purge's own journal
      }
    }
  }
  (void)drop_journal;
  for (const auto& f : order) {
    if (kept.count(f)) continue;
    Status r = env->Remove(dir + "/" + f);
    if (!r.ok() && !r.IsNotFound()) return Fail(kExitFail, "removing " + dir + "/" + f + ": " + r.ToString());
    removed++;
  }
  s = (*nd)->Release();  // OWNER state=released with the purge's generation: the next mount starts above it
  if (!s.ok()) return Fail(kExitFail, "releasing node '" + n.id + "': " + s.ToString());
  env->Remove(dir + "/HEARTBEAT");
  const HostIdentity self = HostIdentity::Current();
  s = env->WriteFileAtomic(dir + "/PURGED", "time_ns=" + std::to_string(WallClockNs()) + "\nhost=" + self.host +
                                                "\ngeneration=" + std::to_string((*nd)->generation()) + "\n");
  if (!s.ok()) return Fail(kExitFail, "writing PURGED: " + s.ToString());
  env->SyncDir(dir);
  if (json) {
    nlohmann::json j{{"node", n.id}, {"purged", true}, {"segments_dropped", again->segment_ids.size()},
                     {"files_removed", removed}, {"bytes_removed", bytes}, {"segments_kept", held.size()}, {"generation", (*nd)->generation()}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("node %s purged: %llu file(s), %llu bytes removed\n", n.id.c_str(),
                static_cast<unsigned long long>(removed), static_cast<unsigned long long>(bytes));
  }
  if (!held.empty()) {
    std::string who;
    for (const auto& h : holders) who += (who.empty() ? "" : ", ") + h;
    std::fprintf(stderr, "kvfs: kept %zu segment file(s) of node '%s' that live node(s) %s have files of open; "
                         "run kvfs node purge again once they are closed\n",
                 held.size(), n.id.c_str(), who.c_str());
  }
  return kExitOk;
}

}  // namespace

int RunNodeCommand(const std::string& sub, const std::string& backing_in, const std::string& node, bool json,
                   bool force, uint32_t grace_ms, const NodeS3Options& s3) {
  // The command prints its own one-line results and errors; the library's info lines (e.g. "took over
  // node directory ..." when purge takes the node) would interleave with them.
  spdlog::set_level(spdlog::level::warn);
  Env* env = Env::Posix();
  std::string backing, shown = backing_in;
  // An S3 backing: the mount's tiered Env over a temporary, empty staging directory (removed at exit), so
  // every byte read comes from the bucket and what retire writes is PUT.
  std::unique_ptr<S3TierEnv> s3_env;
  struct Staging {
    std::string dir;
    ~Staging() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } staging;
  if (backing_in.rfind("s3://", 0) == 0) {
    // The S3 client logs a failed request as a warning; the command prints its error itself (once).
    spdlog::set_level(spdlog::level::err);
    S3Config cfg;
    std::string prefix;
    if (Status u = ParseS3Url(backing_in, &cfg.bucket, &prefix); !u.ok()) return Fail(kExitUsage, u.message());
    if (sub == "purge") {
      return Fail(kExitUsage, "kvfs node purge does not support S3 backings yet (list and retire do; docs/s3.md)");
    }
    if (s3.endpoint.empty()) return Fail(kExitUsage, backing_in + " needs --s3-endpoint URL (as kvfs mount)");
    auto creds = S3Credentials::FromEnvironment();
    if (!creds.ok()) return Fail(kExitUsage, creds.status().message());
    cfg.endpoint = s3.endpoint;
    cfg.region = s3.region;
    cfg.path_style = s3.path_style;
    cfg.ca_file = s3.ca;
    cfg.credentials = *creds;
    if (s3.deadline_ms > 0) cfg.deadline_ms = s3.deadline_ms;
    auto client = S3Client::Create(cfg);
    if (!client.ok()) return Fail(kExitUsage, "s3: " + client.status().message());
    std::shared_ptr<S3Client> shared(std::move(*client));
    if (auto probe = shared->ListDelimited(prefix, "", 1); !probe.ok()) {
      return Fail(kExitFail, backing_in + " at " + s3.endpoint + ": " + probe.status().ToString());
    }
    char tmpl[] = "/tmp/kvfs-node-staging-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return Fail(kExitFail, "cannot create a staging directory in /tmp");
    staging.dir = tmpl;
    s3_env = std::make_unique<S3TierEnv>(shared, prefix, staging.dir);
    env = s3_env.get();
    backing = staging.dir;
  } else {
    if (!s3.endpoint.empty() || !s3.ca.empty() || s3.path_style) {
      return Fail(kExitUsage, "--s3-* options need --backing s3://BUCKET/PREFIX");
    }
    // Relative paths as kvfs mount takes them.
    backing = std::filesystem::absolute(backing_in).lexically_normal().string();
    while (backing.size() > 1 && backing.back() == '/') backing.pop_back();
    shown = backing;
  }
  Status s = CheckBackingDir(env, backing);
  if (!s.ok()) return Fail(kExitUsage, s.message());
  if (!Exists(env, FormatFilePath(backing))) {
    return Fail(kExitUsage, "'" + shown + "' is not a kvfs backing " + (s3_env ? "" : "directory ") +
                                "(no .kvfs/v1/FORMAT)");
  }
  if (sub == "list") return List(env, backing, json);
  if (sub != "retire" && sub != "purge") {
    return Fail(kExitUsage, "unknown node command '" + sub + "' (use list, retire or purge)");
  }
  if (node.empty()) return Fail(kExitUsage, "kvfs node " + sub + " needs --node ID");
  if (!ValidateNodeId(node).ok()) return Fail(kExitUsage, "invalid node id '" + node + "'");
  if (!Exists(env, NodeDirPath(backing, node))) {
    return Fail(kExitUsage, "no node '" + node + "' in " + shown + " (see kvfs node list)");
  }
  auto n = Inspect(env, backing, node);
  if (!n.ok()) return Fail(kExitFail, "node " + node + ": " + n.status().ToString());
  if (sub == "retire") return Retire(env, backing, *n, force);
  return Purge(env, backing, *n, force, grace_ms, json);
}

}  // namespace kvfs
