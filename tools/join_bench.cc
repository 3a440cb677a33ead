// kvfs-join-bench: how long a node joining a store takes (its first mount = index rebuild from every
// node's newest snapshot + journal tail, or from all journals; docs/design.md §2/§3, engine/checkpoint.h).
//
//   kvfs-join-bench BACKING_DIR N [FILES_PER_DIR=1000] [--no-snapshot] [--rewrites K]
//
// 1. node "writer" (index in BACKING_DIR/../idx-writer) creates N committed 0-byte files in directories
//    of FILES_PER_DIR (d000000/f0000000...), i.e. N journal PUTs (+ N/FILES_PER_DIR MKDIRs), then commits
//    every file K more times (--rewrites: history of (K+1)·N PUTs for N live files), closes. By default
//    the close writes a checkpoint (snapshot of the N live entries); --no-snapshot turns checkpoints off,
//    so the joiner replays every journal entry (the figure before checkpoints existed).
// 2. node "joiner" opens the store with a fresh index dir (BACKING_DIR/../idx-joiner-<pid>): Store::Open
//    rebuilds the index. The time of that Open is the join time.
// Prints one JSON line: entries, journal and snapshot bytes, write / close (checkpoint) / join seconds.
// 0-byte files carry no Location; a real chunk's PUT is ~40 bytes longer (one Location).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "blockstore/node_dir.h"
#include "engine/store.h"

using namespace kvfs;

static double Secs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char** argv) {
  bool snapshots = true;
  uint64_t rewrites = 0;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--no-snapshot") {
      snapshots = false;
    } else if (a == "--rewrites" && i + 1 < argc) {
      rewrites = std::strtoull(argv[++i], nullptr, 10);
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() < 2) {
    std::fprintf(stderr, "usage: kvfs-join-bench BACKING_DIR N [FILES_PER_DIR] [--no-snapshot] [--rewrites K]\n");
    return 2;
  }
  const std::string backing = std::filesystem::absolute(pos[0]).string();
  const uint64_t n = std::strtoull(pos[1].c_str(), nullptr, 10);
  const uint64_t per_dir = pos.size() > 2 ? std::strtoull(pos[2].c_str(), nullptr, 10) : 1000;
  const std::string parent = std::filesystem::path(backing).parent_path().string();
  std::filesystem::create_directories(backing);

  StoreOptions so;
  so.backing_dir = backing;
  so.peer_poll_ms = 0;
  so.node_id = "writer";
  so.index_dir = parent + "/idx-writer";
  so.heartbeat_interval_ms = 60000;
  so.checkpoint_entries = 0;  // one checkpoint, at close (or none)
  so.checkpoint_interval_ms = 0;
  so.checkpoint_on_close = snapshots;
  double close_s = 0;
  auto t0 = std::chrono::steady_clock::now();
  {
    auto st = Store::Open(so);
    if (!st.ok()) {
      std::fprintf(stderr, "open writer: %s\n", st.status().ToString().c_str());
      return 1;
    }
    auto& s = *st;
    uint64_t dir = 0;
    char name[32];
    for (uint64_t i = 0; i < n; ++i) {
      if (i % per_dir == 0) {
        std::snprintf(name, sizeof(name), "d%06llu", static_cast<unsigned long long>(i / per_dir));
        auto d = s->Mkdir(kRootIno, name, S_IFDIR | 0755, 0, 0);
        if (!d.ok()) {
          std::fprintf(stderr, "mkdir: %s\n", d.status().ToString().c_str());
          return 1;
        }
        dir = d->attr.ino;
      }
      std::snprintf(name, sizeof(name), "f%08llu", static_cast<unsigned long long>(i));
      auto f = s->CreateFile(dir, name, S_IFREG | 0644, 0, 0, true);
      if (!f.ok()) {
        std::fprintf(stderr, "create: %s\n", f.status().ToString().c_str());
        return 1;
      }
      Status c = s->CommitFile(f->attr.ino, Location{}, f->attr);
      if (!c.ok()) {
        std::fprintf(stderr, "commit: %s\n", c.ToString().c_str());
        return 1;
      }
    }
    std::vector<std::pair<uint64_t, Attr>> inodes;
    if (rewrites > 0) {
      for (uint64_t d = 0; d * per_dir < n; ++d) {
        std::snprintf(name, sizeof(name), "d%06llu", static_cast<unsigned long long>(d));
        auto dn = s->Lookup(kRootIno, name);
        if (!dn.ok()) return 1;
        Status ls = s->ReadDir(dn->attr.ino, 0, [&](const DirEntry& e) {
          auto node = s->GetInode(e.ino);
          if (node.ok()) inodes.emplace_back(e.ino, node->attr);
          return true;
        });
        if (!ls.ok()) return 1;
      }
    }
    for (uint64_t k = 0; k < rewrites; ++k) {
      for (auto& [ino, attr] : inodes) {
        attr.mtime_ns += 1;
        Status c = s->CommitFile(ino, Location{}, attr);
        if (!c.ok()) {
          std::fprintf(stderr, "rewrite: %s\n", c.ToString().c_str());
          return 1;
        }
      }
    }
    Status c = s->Sync();
    const auto tc = std::chrono::steady_clock::now();
    if (c.ok()) c = s->Close();
    close_s = Secs(tc);
    if (!c.ok()) {
      std::fprintf(stderr, "close writer: %s\n", c.ToString().c_str());
      return 1;
    }
  }
  const double write_s = Secs(t0);
  uint64_t journal_bytes = 0, snapshot_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(NodeDirPath(backing, "writer"))) {
    if (e.path().filename().string().rfind("journal-", 0) == 0) journal_bytes += e.file_size();
    if (e.path().filename().string().rfind("snapshot-", 0) == 0) snapshot_bytes += e.file_size();
  }

  so.node_id = "joiner";
  so.index_dir = parent + "/idx-joiner-" + std::to_string(getpid());
  t0 = std::chrono::steady_clock::now();
  auto jt = Store::Open(so);
  const double join_s = Secs(t0);
  if (!jt.ok()) {
    std::fprintf(stderr, "open joiner: %s\n", jt.status().ToString().c_str());
    return 1;
  }
  const auto stats = (*jt)->GetStats();
  (*jt)->Close();
  std::printf("{\"entries\": %llu, \"rewrites\": %llu, \"snapshots\": %s, \"files_seen_by_joiner\": %llu, "
              "\"journal_bytes\": %llu, \"snapshot_bytes\": %llu, \"write_s\": %.2f, \"close_checkpoint_s\": %.2f, "
              "\"join_s\": %.2f, \"join_entries_per_s\": %.0f}\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(rewrites),
              snapshots ? "true" : "false", static_cast<unsigned long long>(stats.files),
              static_cast<unsigned long long>(journal_bytes), static_cast<unsigned long long>(snapshot_bytes), write_s,
              close_s, join_s, n / join_s);
  return stats.files == n ? 0 : 1;
}
