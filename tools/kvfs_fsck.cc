// kvfs-fsck: check and repair a kvfs backing directory (the shared export). Engine: index/fsck.h.
//
//   kvfs-fsck BACKING [--node ID] [--repair] [--rebuild-index DIR] [--json] [--verify-data]
//             [--verbose] [--heartbeat-timeout SECONDS]
//   kvfs-fsck --dump-index DIR --node ID          (tests: print an index's content as JSON)
//
// Exit codes:
//   0  clean: no problem found (informational findings such as orphan records may be listed)
//   1  problems found (with --repair: the repairable ones were repaired; a second run finds none of those;
//      unrepairable damage — lost journal entries, damaged segment headers or regions — is reported again)
//   2  usage error or bad input (unknown option, not a kvfs backing directory, unknown node, unusable index dir)
//   3  --repair refused for a node owned by a live mount (fresh heartbeat); nothing of that node was changed
//   4  I/O error reading or writing the export or the index (the check could not finish)
// The same table is in the manual below, packaging/man/kvfs-fsck.8 and docs/operations.md; tests/integration/
// fsck_cli_test.py checks one case per code and that the three texts agree.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "blockstore/env.h"
#include "blockstore/s3_client.h"
#include "blockstore/s3_env.h"
#include "index/fsck.h"
#include "index/index_db.h"
#include "tools/cli_parse.h"

namespace {

constexpr int kExitClean = 0, kExitProblems = 1, kExitUsage = 2, kExitRefused = 3, kExitIO = 4;

const char* kManual = R"(NAME
    kvfs-fsck - check and repair a kvfs backing directory

SYNOPSIS
    kvfs-fsck BACKING [--node ID] [--repair] [--rebuild-index DIR] [--json] [--verify-data] [--verbose]
              [--remove-stale-temp AGE]
    kvfs-fsck s3://BUCKET/PREFIX --s3-endpoint URL [--s3-region R] [--s3-path-style] [--s3-ca FILE]
              [--backing-deadline-ms N] [the options above]

DESCRIPTION
    Reads <BACKING>/.kvfs/v1 and checks every node directory (or only --node ID): every journal fragment
    and entry checksum, every segment header, record header, record metadata, footer and trailer checksum
    (with --verify-data also every 64 KiB value block checksum). It reports:
      journal-damaged / journal-bad-entry / journal-unreadable   lost journal entries (unrepairable)
      journal-torn-tail / segment-torn-tail                      bytes after the last complete entry/record
      segment-bad-header / segment-damaged                       damaged header (records checked) / region
      segment-bad-trailer                                        a sealed segment whose footer/trailer is bad
      unsealed-segment                                           unsealed segment of an older generation
      seal-not-journaled                                         sealed on disk without a SEAL entry
      dangling-entry                                             a live file whose record is missing/damaged
      stale-temp-file                                            *.tmp left by an interrupted atomic write
      stale-temp-name                                            --remove-stale-temp: a connector's old temp file
      orphan-record, segment-bad-value (info)                    dead bytes; damage no live file uses
      unresolved-delta (info)                                    extent deltas whose base entry is lost
    and per node: live files, live / dead / orphan bytes, segments, journal entries.
    Torn tails of a node that a live mount owns (fresh heartbeat) are "in progress", not problems.
    An S3 backing (s3://BUCKET/PREFIX, the mount's --s3-* options, credentials from AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY or the shared credentials file) is checked through the bucket alone (listings,
    HEAD, ranged GETs; a temporary staging directory): what a node's staging directory still holds is
    not seen. --repair writes its journal as an object before the node's release, and seals unsealed
    segments logically only (a SEAL entry: objects are never appended to). A segment object that ends
    inside a record (segment-torn-tail) is damage there, not a crash's tail: objects are uploaded whole;
    --repair journals a CUT and unlinks the files whose records it lost (dangling-entry).

OPTIONS
    --node ID             check (and repair) only this node
    --repair              take the node directory over like a mount (refused while a live mount owns it:
                          stop that mount, or wait --heartbeat-timeout after it died),
                          append CUT entries for torn tails and bad trailers (nothing is ever truncated),
                          seal unsealed old segments (footer + trailer appended only when the segment ends
                          cleanly and the old owner is provably dead; otherwise a SEAL entry only), journal
                          UNLINK for dangling files, remove stale temp files, release the directory.
                          The node's next mount applies what the repair journaled to its index (clean or
                          not): nothing else to do
    --rebuild-index DIR   build a complete local index (RocksDB) in DIR from the export alone, for node
                          --node (default: the only node); an existing index in DIR is replaced
    --remove-stale-temp AGE
                          also list live files with a connector temp name (*.tmp, *.tmp<pid>, *.tmp.<word>:
                          what LMCache, vLLM, llm-d write before their rename) last written at least AGE ago
                          (seconds, or with a suffix s, m, h, d) as stale-temp-name problems; dry run unless
                          --repair, which journals an UNLINK for each (as an unlink through a mount would;
                          peers and the next mount apply it)
    --verify-data         also verify every value block checksum (reads every byte)
    --json                print the report as one JSON object
    --verbose             list informational findings (orphans) one by one
    --heartbeat-timeout S a heartbeat older than S seconds (default 30; a number >= 0) means the owner is dead
    --backing-mode MODE   the mode the site's mounts use (kvfs mount --backing-mode; default 0600): files
                          and directories under .kvfs looser than it are warned about (loose-mode; the
                          exit status does not change); files a repair creates get it

EXIT STATUS
    0  clean: no problem found (informational findings may be listed)
    1  problems found (with --repair: the repairable ones were repaired; unrepairable ones are listed)
    2  usage error or bad input (unknown option, not a kvfs backing directory, unknown node)
    3  repair refused: a live mount owns the node; nothing of that node was changed
    4  I/O error reading or writing the export or the index: the check could not finish
)";

// Files and directories under <backing>/.kvfs whose permission bits give group or others more than the
// site's backing mode (--backing-mode, default 0600 files / 0700 directories): the export holds users'
// prompt bytes, whatever modes the files have inside the mount. A warning, not a problem (exit code
// unchanged): kvfs before issue #17 created 0644 / 0755.
struct LooseMode {
  std::string path;
  unsigned mode = 0;
};

std::vector<LooseMode> FindLooseModes(const std::string& backing, const kvfs::BackingModes& m) {
  namespace fs = std::filesystem;
  std::vector<LooseMode> out;
  std::error_code ec;
  const fs::path root = fs::path(backing) / ".kvfs";
  auto check = [&](const fs::path& p, bool is_dir) {
    struct stat st;
    if (lstat(p.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) return;
    const unsigned allowed = is_dir ? m.dir : m.file;
    if ((st.st_mode & 0077 & ~allowed) != 0) out.push_back({p.string(), static_cast<unsigned>(st.st_mode & 07777)});
  };
  if (!fs::is_directory(root, ec)) return out;
  check(root, true);
  for (fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    check(it->path(), it->is_directory(ec) && !it->is_symlink(ec));
  }
  return out;
}

std::string Octal(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04o", mode);
  return buf;
}

std::string Human(uint64_t b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int i = 0;
  while (v >= 1024 && i < 4) v /= 1024, i++;
  char buf[64];
  snprintf(buf, sizeof(buf), i ? "%.1f %s" : "%.0f %s", v, u[i]);
  return buf;
}

int DumpIndex(const std::string& dir, const std::string& node) {
  kvfs::IndexDbOptions io;
  io.dir = dir;
  io.node_id = node;
  struct stat st;
  if (stat((dir + "/CURRENT").c_str(), &st) != 0) {
    std::fprintf(stderr, "kvfs-fsck: '%s' is not an index directory\n", dir.c_str());
    return kExitUsage;
  }
  auto idx = kvfs::IndexDb::Open(io);
  if (!idx.ok()) {
    std::fprintf(stderr, "kvfs-fsck: %s\n", idx.status().ToString().c_str());
    return idx.status().IsIOError() ? kExitIO : kExitUsage;
  }
  auto d = (*idx)->DumpByPath();
  if (!d.ok()) {
    std::fprintf(stderr, "kvfs-fsck: %s\n", d.status().ToString().c_str());
    return kExitIO;
  }
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [path, e] : *d) {
    nlohmann::json x;
    x["mode"] = e.mode;
    x["size"] = e.size;
    x["uid"] = e.uid;
    x["gid"] = e.gid;
    x["mtime_ns"] = e.mtime_ns;
    if (!e.symlink.empty()) x["symlink"] = e.symlink;
    if (e.rdev != 0) x["rdev"] = e.rdev;
    if (!e.location.empty()) {
      x["location"] = {{"node", e.location.segment.node}, {"generation", e.location.segment.generation},
                       {"seq", e.location.segment.seq}, {"record_offset", e.location.record_offset},
                       {"value_offset", e.location.value_offset}, {"length", e.location.length}};
    }
    if (e.extents) {  // an extent file: its map (docs/design.md §13)
      nlohmann::json ext = nlohmann::json::array();
      for (const auto& xe : e.extents->extents()) {
        const kvfs::Location& r = xe.record;
        ext.push_back({{"file_offset", xe.file_offset}, {"length", xe.length}, {"value_offset", xe.value_offset},
                       {"node", r.segment.node}, {"generation", r.segment.generation}, {"seq", r.segment.seq},
                       {"record_offset", r.record_offset}, {"record_value_offset", r.value_offset},
                       {"record_length", r.length}});
      }
      x["extents"] = ext;
    }
    if (!e.xattrs.empty()) x["xattrs"] = e.xattrs;
    j[path] = x;
  }
  std::cout << j.dump(1) << "\n";
  (*idx)->Close();
  return kExitClean;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvfs-fsck: check and repair a kvfs backing directory"};
  app.set_help_flag("");
  bool help = false;
  app.add_flag("-h,--help", help, "print the manual");
  kvfs::FsckOptions o;
  bool json = false, verbose = false;
  double hb_timeout = 30;
  std::string dump_index, backing_mode;
  app.add_option("backing", o.backing_dir, "the backing directory (the export)");
  app.add_option("--node", o.node, "check/repair only this node");
  app.add_flag("--repair", o.repair, "repair (CUT, SEAL, UNLINK dangling, remove temp files)");
  app.add_option("--rebuild-index", o.rebuild_index_dir, "build a local index in DIR from the export");
  app.add_flag("--json", json, "JSON report");
  app.add_flag("--verify-data", o.verify_data, "verify every value checksum");
  app.add_flag("--verbose,-v", verbose, "list informational findings too");
  app.add_option("--heartbeat-timeout", hb_timeout, "seconds after which a heartbeat is stale (default 30)")
      ->check(kvfs::cli::NonNegativeSeconds());
  app.add_option("--backing-mode", backing_mode,
                 "the site's kvfs mount --backing-mode (default 0600): modes looser than it are warned "
                 "about; files a --repair creates get it");
  struct {
    std::string endpoint, region = "us-east-1", ca;
    bool path_style = false;
    uint32_t deadline_ms = 0;
  } s3;
  app.add_option("--s3-endpoint", s3.endpoint, "S3 endpoint URL of an s3://BUCKET/PREFIX backing (as kvfs mount)");
  app.add_option("--s3-region", s3.region, "S3 region signed into requests (default us-east-1)");
  app.add_flag("--s3-path-style", s3.path_style, "path-style S3 URLs (ENDPOINT/BUCKET/KEY)");
  app.add_option("--s3-ca", s3.ca, "PEM CA bundle to trust for the S3 endpoint's TLS certificate");
  app.add_option("--backing-deadline-ms", s3.deadline_ms, "S3: deadline of each request, retries included (ms)");
  std::string stale_temp;
  app.add_option("--remove-stale-temp", stale_temp,
                 "list (with --repair: unlink) connector temp files (*.tmp) older than AGE (s, m, h, d)");
  app.add_option("--dump-index", dump_index, "print the content of an index directory as JSON (tests)");
  if (int rc = kvfs::cli::Parse(&app, "kvfs-fsck", std::vector<std::string>(argv + 1, argv + argc)); rc >= 0) {
    return rc;
  }
  if (help) {
    std::fputs(kManual, stdout);
    return kExitClean;
  }
  spdlog::set_level(verbose ? spdlog::level::warn : spdlog::level::off);
  if (!dump_index.empty()) {
    if (o.node.empty()) {
      std::fprintf(stderr, "kvfs-fsck: --dump-index needs --node\n");
      return kExitUsage;
    }
    return DumpIndex(dump_index, o.node);
  }
  if (o.backing_dir.empty()) {
    std::fprintf(stderr, "kvfs-fsck: missing BACKING directory (see kvfs-fsck --help)\n");
    return kExitUsage;
  }
  // An S3 backing (docs/s3.md): the same check through the mount's tiered Env over a fresh, empty staging
  // directory, so every byte read comes from the bucket (HEAD + ranged GETs, listings).
  std::unique_ptr<kvfs::S3TierEnv> s3_env;
  std::string s3_url, s3_staging;
  if (o.backing_dir.rfind("s3://", 0) == 0) {
    s3_url = o.backing_dir;
    std::string prefix;
    kvfs::S3Config cfg;
    if (kvfs::Status u = kvfs::ParseS3Url(s3_url, &cfg.bucket, &prefix); !u.ok()) {
      std::fprintf(stderr, "kvfs-fsck: %s\n", u.message().c_str());
      return kExitUsage;
    }
    if (s3.endpoint.empty()) {
      std::fprintf(stderr, "kvfs-fsck: %s needs --s3-endpoint URL (as kvfs mount)\n", s3_url.c_str());
      return kExitUsage;
    }
    auto creds = kvfs::S3Credentials::FromEnvironment();
    if (!creds.ok()) {
      std::fprintf(stderr, "kvfs-fsck: %s\n", creds.status().message().c_str());
      return kExitUsage;
    }
    cfg.endpoint = s3.endpoint;
    cfg.region = s3.region;
    cfg.path_style = s3.path_style;
    cfg.ca_file = s3.ca;
    cfg.credentials = *creds;
    if (s3.deadline_ms > 0) cfg.deadline_ms = s3.deadline_ms;
    auto client = kvfs::S3Client::Create(cfg);
    if (!client.ok()) {
      std::fprintf(stderr, "kvfs-fsck: %s\n", client.status().message().c_str());
      return kExitUsage;
    }
    std::shared_ptr<kvfs::S3Client> shared(std::move(*client));
    if (auto probe = shared->ListDelimited(prefix, "", 1); !probe.ok()) {
      std::fprintf(stderr, "kvfs-fsck: %s at %s: %s\n", s3_url.c_str(), cfg.endpoint.c_str(),
                   probe.status().ToString().c_str());
      return probe.status().IsInvalidArgument() ? kExitUsage : kExitIO;
    }
    char tmpl[] = "/tmp/kvfs-fsck-staging-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::fprintf(stderr, "kvfs-fsck: cannot create a staging directory in /tmp: %s\n", std::strerror(errno));
      return kExitIO;
    }
    s3_staging = tmpl;
    s3_env = std::make_unique<kvfs::S3TierEnv>(shared, prefix, s3_staging);
    o.env = s3_env.get();
    o.backing_dir = s3_staging;
    o.append_in_place = false;
    kvfs::S3TierEnv* env = s3_env.get();
    o.claim = [env](const std::string& dir, uint64_t g, const std::string& owner) {
      return env->ClaimGeneration(dir, g, owner);
    };
    // The repair journal is written to the staging directory: made an object before the node's release.
    o.after_repair = [env](const std::string& node_dir) -> kvfs::Status {
      std::vector<std::string> names;
      kvfs::Status ls = env->ListStaged(node_dir, &names);
      if (ls.IsNotFound()) return kvfs::Status::OK();
      KVFS_RETURN_IF_ERROR(ls);
      for (const auto& n : names) {
        if (n.rfind("journal-", 0) != 0) continue;
        auto size = env->StagedSize(node_dir + "/" + n);
        if (!size.ok()) return size.status();
        KVFS_RETURN_IF_ERROR(env->PublishPrefix(node_dir + "/" + n, *size));
      }
      return kvfs::Status::OK();
    };
  } else if (!s3.endpoint.empty() || !s3.ca.empty() || s3.path_style) {
    std::fprintf(stderr, "kvfs-fsck: --s3-* options need an s3://BUCKET/PREFIX backing\n");
    return kExitUsage;
  }
  struct StagingCleanup {
    std::string dir;
    ~StagingCleanup() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } staging_cleanup{s3_staging};
  if (!backing_mode.empty()) {
    auto m = kvfs::ParseBackingMode(backing_mode);
    if (!m.ok()) {
      std::fprintf(stderr, "kvfs-fsck: --backing-mode: %s\n", m.status().message().c_str());
      return kExitUsage;
    }
    kvfs::SetBackingModes(*m);
  }
  if (!stale_temp.empty()) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(stale_temp, &used);
    } catch (...) {
      used = 0;
    }
    const std::string unit = stale_temp.substr(used);
    const long long mult = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : 0;
    if (used == 0 || v < 0 || mult == 0) {
      std::fprintf(stderr, "kvfs-fsck: --remove-stale-temp: '%s' is not an age (e.g. 3600, 90m, 2h, 7d)\n",
                   stale_temp.c_str());
      return kExitUsage;
    }
    o.stale_temp_age_s = v * mult;
  }
  // Relative paths are taken from the current directory, as `kvfs mount` does.
  if (s3_url.empty()) o.backing_dir = std::filesystem::absolute(o.backing_dir).lexically_normal().string();
  if (o.backing_dir.size() > 1 && o.backing_dir.back() == '/') o.backing_dir.pop_back();
  if (!o.rebuild_index_dir.empty()) {
    o.rebuild_index_dir = std::filesystem::absolute(o.rebuild_index_dir).lexically_normal().string();
  }
  o.heartbeat_timeout = std::chrono::milliseconds(static_cast<int64_t>(hb_timeout * 1000));
  const bool tty = isatty(2);
  if (tty) {
    o.progress = [](const std::string& phase, uint64_t done, uint64_t total) {
      std::fprintf(stderr, "\r\033[K%s %llu/%llu", phase.c_str(), (unsigned long long)done, (unsigned long long)total);
      std::fflush(stderr);
    };
  }
  // S3: findings and errors name the objects (s3://BUCKET/PREFIX/...), not the temporary staging directory.
  auto shown = [&](std::string text) {
    if (s3_url.empty()) return text;
    std::string u = s3_url;
    while (!u.empty() && u.back() == '/') u.pop_back();
    for (size_t p = text.find(s3_staging); p != std::string::npos; p = text.find(s3_staging, p + u.size())) {
      text.replace(p, s3_staging.size(), u);
    }
    return text;
  };
  auto r = kvfs::RunFsck(o);
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!r.ok()) {
    const auto& s = r.status();
    const std::string text = shown(s.ToString());
    std::fprintf(stderr, "kvfs-fsck: %s\n", text.c_str());
    if (json) std::cout << nlohmann::json{{"error", text}}.dump() << "\n";
    return s.IsInvalidArgument() || s.IsBusy() ? kExitUsage : kExitIO;
  }
  const auto& rep = *r;
  const std::vector<LooseMode> loose =
      s3_url.empty() ? FindLooseModes(o.backing_dir, kvfs::GetBackingModes()) : std::vector<LooseMode>{};
  const std::string backing_shown = s3_url.empty() ? o.backing_dir : s3_url;
  int code = rep.problems == 0 ? kExitClean : kExitProblems;
  if (rep.repair_refused) code = kExitRefused;
  if (json) {
    nlohmann::json j;
    j["backing"] = backing_shown;
    j["problems"] = rep.problems;
    j["repaired"] = rep.repaired;
    j["unrepaired"] = rep.unrepaired;
    j["repair_refused"] = rep.repair_refused;
    j["link_claims"] = {{"entries", rep.link_claims}, {"stale", rep.link_claims_stale},
                        {"removed", rep.link_claims_removed}};
    j["exit_code"] = code;
    if (!o.rebuild_index_dir.empty()) j["index"] = {{"dir", o.rebuild_index_dir}, {"files", rep.index_files}};
    j["loose_modes"] = nlohmann::json::array();
    for (const auto& l : loose) j["loose_modes"].push_back({{"path", l.path}, {"mode", Octal(l.mode)}});
    j["findings"] = nlohmann::json::array();
    for (const auto& f : rep.findings) {
      j["findings"].push_back({{"kind", kvfs::FsckKindName(f.kind)},
                               {"severity", f.severity == kvfs::FsckSeverity::kProblem ? "problem" : "info"},
                               {"node", f.node}, {"file", shown(f.file)}, {"offset", f.offset}, {"bytes", f.bytes},
                               {"path", f.path}, {"detail", shown(f.detail)}, {"repairable", f.repairable},
                               {"repaired", f.repaired}, {"repair", f.repair}});
    }
    j["nodes"] = nlohmann::json::array();
    for (const auto& n : rep.nodes) {
      j["nodes"].push_back({{"node", n.node}, {"live", n.live}, {"owner", n.owner},
                            {"owner_generation", n.owner_generation}, {"journal_files", n.journal_files},
                            {"journal_entries", n.journal_entries}, {"journal_bytes", n.journal_bytes},
                            {"snapshots", n.snapshots}, {"snapshot", shown(n.snapshot)},
                            {"snapshot_entries", n.snapshot_entries},
                            {"segments", n.segments}, {"sealed_segments", n.sealed_segments},
                            {"segment_file_bytes", n.segment_file_bytes}, {"records", n.records},
                            {"record_value_bytes", n.record_value_bytes}, {"live_files", n.live_files},
                            {"live_bytes", n.live_bytes}, {"dead_bytes", n.dead_bytes},
                            {"orphan_records", n.orphan_records}, {"orphan_bytes", n.orphan_bytes},
                            {"provisional_records", n.provisional_records},
                            {"unresolved_deltas", n.unresolved_deltas},
                            {"verified_value_bytes", n.verified_value_bytes},
                            {"repair_refused", n.repair_refused}, {"repair_refused_reason", shown(n.repair_refused_reason)},
                            {"repair_generation", n.repair_generation}});
    }
    std::cout << j.dump(2) << "\n";
    return code;
  }
  for (const auto& n : rep.nodes) {
    std::printf("node %s: %s\n", n.node.c_str(), n.owner.c_str());
    std::printf("  journal   %llu file(s), %llu entries, %s\n", (unsigned long long)n.journal_files,
                (unsigned long long)n.journal_entries, Human(n.journal_bytes).c_str());
    if (n.snapshots > 0) {
      std::printf("  snapshots %llu file(s); in use: %s (%llu entries)\n", (unsigned long long)n.snapshots,
                  n.snapshot.empty() ? "none" : shown(n.snapshot).c_str(), (unsigned long long)n.snapshot_entries);
    }
    std::printf("  segments  %llu (%llu sealed), %s on disk, %llu records\n", (unsigned long long)n.segments,
                (unsigned long long)n.sealed_segments, Human(n.segment_file_bytes).c_str(),
                (unsigned long long)n.records);
    std::printf("  bytes     live %s in %llu files, dead %s (orphans: %llu records, %s)\n", Human(n.live_bytes).c_str(),
                (unsigned long long)n.live_files, Human(n.dead_bytes).c_str(), (unsigned long long)n.orphan_records,
                Human(n.orphan_bytes).c_str());
    if (n.unresolved_deltas) {
      std::printf("  deltas    %llu unresolved (their base entry is lost; applied as UNLINKs)\n",
                  (unsigned long long)n.unresolved_deltas);
    }
    if (o.verify_data) std::printf("  verified  %s of values\n", Human(n.verified_value_bytes).c_str());
    if (n.repair_refused) {
      std::printf("  REPAIR REFUSED: %s; stop that mount first, or wait --heartbeat-timeout after it died\n",
                  shown(n.repair_refused_reason).c_str());
    }
    if (n.repair_generation) {
      std::printf("  repair journal: generation %llu (the node's next mount applies it to its index)\n",
                  (unsigned long long)n.repair_generation);
    }
  }
  size_t infos = 0;
  for (const auto& f : rep.findings) {
    const bool problem = f.severity == kvfs::FsckSeverity::kProblem;
    if (!problem && !verbose) {
      infos++;
      continue;
    }
    std::printf("%s %-20s %s %s", problem ? (f.repaired ? "REPAIRED" : "PROBLEM ") : "info    ",
                kvfs::FsckKindName(f.kind), f.node.c_str(), shown(f.detail).c_str());
    if (!f.file.empty()) std::printf(" [%s", shown(f.file).c_str()), std::printf(f.offset ? " @%llu]" : "]", (unsigned long long)f.offset);
    if (problem && !f.repaired) std::printf(f.repairable ? " (--repair: %s)" : " (not repairable)", f.repair.c_str());
    if (problem && f.repaired) std::printf(" -> %s", f.repair.c_str());
    std::printf("\n");
  }
  if (infos) std::printf("%zu informational finding(s) (orphan records etc.; --verbose lists them)\n", infos);
  {
    // What a crash (kill -9, power cut) leaves, and the node's next mount repairs by itself (recovery:
    // CUT of torn tails, SEAL of the crashed generation's segments): no reason for alarm or --repair.
    size_t crash = 0;
    for (const auto& f : rep.findings) {
      if (f.severity != kvfs::FsckSeverity::kProblem || f.repaired) continue;
      // On S3 a segment object is uploaded whole: a torn one is damage in the bucket, no crash's leftover.
      if (f.kind == kvfs::FsckKind::kUnsealedSegment || f.kind == kvfs::FsckKind::kSealNotJournaled ||
          (f.kind == kvfs::FsckKind::kSegmentTornTail && s3_url.empty()) ||
          f.kind == kvfs::FsckKind::kJournalTornTail) {
        crash++;
      }
    }
    if (crash) {
      std::printf("note: %zu of these (unsealed-segment, seal-not-journaled, *-torn-tail) are what a crash of the "
                  "node leaves (kill -9, power cut): expected after one; the node's next mount cuts and seals them "
                  "itself (--repair does the same now)\n", crash);
    }
  }
  if (!loose.empty()) {
    const size_t shown = verbose ? loose.size() : std::min<size_t>(loose.size(), 3);
    for (size_t i = 0; i < shown; ++i) {
      std::printf("WARNING  loose-mode           %s %s\n", Octal(loose[i].mode).c_str(), loose[i].path.c_str());
    }
    std::printf("WARNING: %zu file(s) or directories under %s/.kvfs give group/others more than --backing-mode "
                "%s%s; to restrict: chmod -R go-rwx %s/.kvfs (or the site's mode)\n",
                loose.size(), o.backing_dir.c_str(), Octal(kvfs::GetBackingModes().file).c_str(),
                shown < loose.size() ? " (--verbose lists all)" : "", o.backing_dir.c_str());
  }
  if (rep.link_claims) {
    std::printf("link claims: %llu under .kvfs/v1/links, %llu at least %llds old (left by a crash)%s\n",
                (unsigned long long)rep.link_claims, (unsigned long long)rep.link_claims_stale,
                (long long)kvfs::kLinkClaimSweepAgeS,
                rep.link_claims_removed ? (", " + std::to_string(rep.link_claims_removed) + " removed").c_str()
                : rep.link_claims_stale ? "; --repair removes them (a mount's hourly sweep does too)" : "");
  }
  if (!o.rebuild_index_dir.empty()) {
    std::printf("index rebuilt in %s: %llu files\n", o.rebuild_index_dir.c_str(), (unsigned long long)rep.index_files);
  }
  std::printf("%llu problem(s): %llu repaired, %llu left%s\n", (unsigned long long)rep.problems,
              (unsigned long long)rep.repaired, (unsigned long long)rep.unrepaired,
              rep.repair_refused ? "; repair REFUSED for a node owned by a live mount" : "");
  return code;
}
