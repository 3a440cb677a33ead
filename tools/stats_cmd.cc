// `kvfs stats` (tools/stats_cmd.h).
#include "tools/stats_cmd.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "tools/cli_util.h"

namespace kvfs::cli {

int RunStats(const std::string& mp_in, bool json) {
  // A mount whose daemon died (killed, crashed) answers every access with ENOTCONN: say so and how to
  // clear it, instead of "does not exist" or "not a kvfs mount".
  auto dead = [&](const std::string& mp) {
    Die(kExitFail, "'" + mp + "' is a dead mount (its daemon is gone: " + strerror(ENOTCONN) +
                       "); clear it with: kvfs umount " + mp);
  };
  struct stat st;
  if (stat(mp_in.c_str(), &st) != 0 && errno == ENOTCONN) dead(mp_in);
  if (!IsDir(mp_in)) Die(kExitUsage, "mountpoint '" + mp_in + "' does not exist");
  std::string mp = RealPath(mp_in);
  std::string raw;
  if (!ReadXattr(mp, "user.kvfs.stats", &raw)) {
    if (errno == ENOTCONN) dead(mp);
    Die(kExitUsage, "'" + mp + "' is not a kvfs mount (no user.kvfs.stats: " + strerror(errno) + ")");
  }
  nlohmann::json j = nlohmann::json::parse(raw, nullptr, false);
  if (j.is_discarded()) Die(kExitFail, "daemon returned malformed stats");
  if (json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  auto u = [&](const char* k) { return j.value(k, uint64_t{0}); };
  const std::string version = j.value("version", std::string()), commit = j.value("commit", std::string());
  if (!version.empty()) {
    std::printf("version                kvfs %s%s\n", version.c_str(),
                commit.empty() ? "" : (" (git " + commit + ")").c_str());
  }
  std::printf("files                  %llu\n", (unsigned long long)u("files"));
  std::printf("directories            %llu\n", (unsigned long long)u("directories"));
  std::printf("live bytes             %llu\n", (unsigned long long)u("live_bytes"));
  // Segment files on the export now (not since the mount): this node's exact, all nodes' with the peers'
  // sizes from their files (a segment not sized yet counts its live bytes: "estimated"). Overhead per
  // record = (segment bytes - live bytes) / live records. The JSON keys say "files" (kept for scripts):
  // they count live records, which is the number of files while every file is one record; a file
  // rewritten in place or spilled while written counts once per record its extents use.
  if (j.contains("export")) {
    auto n = [](const nlohmann::json& o, const char* k) { return (unsigned long long)o.value(k, uint64_t{0}); };
    const auto& own = j["export"]["node"];
    const auto& all = j["export"]["all_nodes"];
    std::printf("segments               %llu on the export (%llu open, %llu sealed, %llu being unlinked), %llu bytes\n",
                n(own, "segments"), n(own, "open_segments"), n(own, "sealed_segments"), n(own, "unlinking_segments"),
                n(own, "segment_bytes"));
    std::printf("segment bytes          %llu live (%llu records), %llu dead; overhead %.0f bytes per record\n",
                n(own, "live_bytes"), n(own, "files"), n(own, "dead_bytes"), own.value("overhead_bytes_per_file", 0.0));
    std::printf("all nodes              %llu segments, %llu bytes%s: %llu live (%llu records), %llu dead; overhead %.0f bytes per record\n",
                n(all, "segments"), n(all, "segment_bytes"), all.value("estimated", false) ? " (estimated: peer segments not sized yet count their live bytes)" : "",
                n(all, "live_bytes"), n(all, "files"), n(all, "dead_bytes"), all.value("overhead_bytes_per_file", 0.0));
  }
  if (j.contains("backing_fs") && j["backing_fs"].value("ok", false)) {
    const auto& b = j["backing_fs"];
    const uint64_t size = b.value("size_bytes", uint64_t{0}), avail = b.value("avail_bytes", uint64_t{0});
    std::printf("export file system     %llu bytes, %llu available (%.1f%% used)\n", (unsigned long long)size,
                (unsigned long long)avail, size ? 100.0 * double(size - std::min(size, avail)) / double(size) : 0.0);
  }
  if (j.contains("config")) {
    const auto& c = j["config"];
    auto n = [&](const char* k) { return (unsigned long long)c.value(k, uint64_t{0}); };
    if (n("capacity_bytes")) {
      std::printf("capacity               %llu bytes (evict above %llu down to %llu)\n", n("capacity_bytes"),
                  n("evict_high_bytes"), n("evict_low_bytes"));
    } else {
      std::printf("capacity               unlimited (dead segments reclaimed only)\n");
    }
    if (n("read_ahead_bytes")) {
      std::printf("read-ahead             %llu KiB (buffered sequential reads; --read-ahead)\n", n("read_ahead_bytes") >> 10);
    }
    if (n("global_high_watermark_bytes")) {
      std::printf("global watermarks      high %llu, low %llu bytes (all nodes)\n", n("global_high_watermark_bytes"),
                  n("global_low_watermark_bytes"));
    }
  }
  std::printf("records written        %llu (%llu segments created since the mount)\n",
              (unsigned long long)u("records_written"), (unsigned long long)u("segments_created"));
  std::printf("journal entries        %llu (%llu group commits)\n", (unsigned long long)u("journal_entries"),
              (unsigned long long)u("group_commits"));
  if (u("journal_retries")) {
    std::printf("unjournaled entries    %llu (%llu failed group commits retried)\n",
                (unsigned long long)u("unjournaled_entries"), (unsigned long long)u("journal_retries"));
  } else if (u("unjournaled_entries")) {
    // No round failed: these wait for the next group commit (e.g. the atimes of a load, batched ~1 s).
    std::printf("unjournaled entries    %llu (queued for the next group commit; none failed)\n",
                (unsigned long long)u("unjournaled_entries"));
  }
  if (u("lost_entries")) {
    std::printf("lost entries           %llu (records written before a failed segment sync; remount)\n",
                (unsigned long long)u("lost_entries"));
  }
  // Per value read (a read from offset 0: a load, or a re-read from the start), not per FUSE request:
  // the other 1 MiB requests of a read count nothing. The bytes loaded are per byte.
  std::printf("cache hit rate         %.1f%% of value reads from offset 0 (%llu hits, %llu misses; %llu bytes cached)\n",
              100.0 * j.value("cache_hit_rate", 0.0), (unsigned long long)u("cache_hits"),
              (unsigned long long)u("cache_misses"), (unsigned long long)u("cache_bytes"));
  {
    const uint64_t fuse_read = j.contains("fuse") ? j["fuse"].value("bytes_read", uint64_t{0}) : 0;
    std::printf("read bytes loaded      %llu from the export for %llu FUSE bytes read (per byte)\n",
                (unsigned long long)u("read_loaded_bytes"), (unsigned long long)fuse_read);
  }
  std::printf("probation              %llu reads, %llu bytes (loaded values read once so far)\n",
              (unsigned long long)u("probation_reads"), (unsigned long long)u("probation_bytes"));
  if (j.contains("buffer_pool")) {
    const auto& bp = j["buffer_pool"];
    std::printf("buffer pool            %llu reused, %llu fresh (%llu bytes), %llu bytes free\n",
                (unsigned long long)bp.value("reused", uint64_t{0}), (unsigned long long)bp.value("fresh", uint64_t{0}),
                (unsigned long long)bp.value("fresh_bytes", uint64_t{0}),
                (unsigned long long)bp.value("free_bytes", uint64_t{0}));
  }
  if (j.contains("verify_copy")) {  // how loads into never-touched memory are verified (--verify-copy)
    std::printf("verify copy            %s\n", j["verify_copy"].value("description", std::string()).c_str());
  }
  std::printf("checksum failures      %llu\n", (unsigned long long)u("checksum_failures"));
  std::printf("backing metadata ops   %llu\n", (unsigned long long)u("backing_metadata_ops"));
  std::printf("backing syncs          %llu\n", (unsigned long long)u("backing_syncs"));
  std::printf("backing bytes written  %llu\n", (unsigned long long)u("backing_bytes_written"));
  std::printf("backing bytes read     %llu\n", (unsigned long long)u("backing_bytes_read"));
  std::printf("backing files created  %llu\n", (unsigned long long)u("backing_files_created"));
  if (j.contains("fuse")) {
    const auto& f = j["fuse"];
    std::printf("open handles           %llu\n", (unsigned long long)f.value("open_handles", uint64_t{0}));
    std::printf("staged versions        %llu (%llu bytes)\n", (unsigned long long)f.value("staged_versions", uint64_t{0}),
                (unsigned long long)f.value("staged_bytes", uint64_t{0}));
    std::printf("fuse bytes read        %llu\n", (unsigned long long)f.value("bytes_read", uint64_t{0}));
    std::printf("fuse bytes written     %llu\n", (unsigned long long)f.value("bytes_written", uint64_t{0}));
    std::printf("staging                %llu bytes in RAM of %llu budget, %llu bytes spilled (%llu spills, %llu bytes since mount)\n",
                (unsigned long long)f.value("staged_bytes", uint64_t{0}),
                (unsigned long long)f.value("staging_budget", uint64_t{0}),
                (unsigned long long)f.value("spilled_bytes", uint64_t{0}),
                (unsigned long long)f.value("spills", uint64_t{0}),
                (unsigned long long)f.value("spilled_bytes_total", uint64_t{0}));
  }
  if (j.contains("backing_ops") && j["backing_ops"].is_object()) {
    std::string line;
    for (const auto& [op, n] : j["backing_ops"].items()) {
      if (n.is_number_unsigned() && n.get<uint64_t>() > 0) line += " " + op + "=" + std::to_string(n.get<uint64_t>());
    }
    std::printf("backing ops by kind   %s\n", line.empty() ? " none" : line.c_str());
  }
  if (j.contains("s3") && j["s3"].is_object()) {
    // An S3 backing (docs/s3.md): requests by type (what a site is billed for), uploads, publications.
    const auto& s3 = j["s3"];
    std::string line;
    if (s3.contains("requests") && s3["requests"].is_object()) {
      for (const auto& [op, n] : s3["requests"].items()) {
        if (op != "total" && n.is_number_unsigned() && n.get<uint64_t>() > 0) {
          line += " " + op + "=" + std::to_string(n.get<uint64_t>());
        }
      }
    }
    std::printf("s3 requests            %llu:%s\n",
                (unsigned long long)(s3.contains("requests") ? s3["requests"].value("total", uint64_t{0}) : 0),
                line.empty() ? " none" : line.c_str());
    std::printf("s3 segments uploaded   %llu (%llu waiting), %llu journal publications, %llu failures\n",
                (unsigned long long)s3.value("segments_uploaded", uint64_t{0}),
                (unsigned long long)s3.value("segments_pending", uint64_t{0}),
                (unsigned long long)s3.value("journal_publications", uint64_t{0}),
                (unsigned long long)s3.value("failures", uint64_t{0}));
    std::printf("s3 split reads         %llu (%llu ranged GETs, %llu on helpers), %llu GETs in flight at most\n",
                (unsigned long long)s3.value("split_reads", uint64_t{0}),
                (unsigned long long)s3.value("read_parts", uint64_t{0}),
                (unsigned long long)s3.value("read_parts_parallel", uint64_t{0}),
                (unsigned long long)s3.value("gets_in_flight_peak", uint64_t{0}));
  }
  if (j.contains("link_claims") && j["link_claims"].is_object()) {
    // link(2) claims on the export (docs/design.md §5 "link(2) across nodes").
    const auto& c = j["link_claims"];
    auto v = [&](const char* k) { return (unsigned long long)c.value(k, uint64_t{0}); };
    std::printf("link claims            %llu won, %llu lost, %llu abandoned passed over, %llu removed, %llu swept, "
                "%llu pending removal, %llu errors\n",
                v("won"), v("lost"), v("abandoned"), v("removed"), v("swept"), v("pending"), v("errors"));
  }
  if (j.contains("eviction")) {
    const auto& e = j["eviction"];
    std::printf("evicted segments       %llu (%llu bytes)\n", (unsigned long long)e.value("segments_dropped", uint64_t{0}),
                (unsigned long long)e.value("segment_bytes_dropped", uint64_t{0}));
  }
  if (j.contains("nodes")) {
    for (const auto& n : j["nodes"]) {
      std::printf("node %-17s %llu segments, %llu bytes%s: %llu live (%llu records), %llu dead\n",
                  n.value("node", std::string()).c_str(), (unsigned long long)n.value("segments", uint64_t{0}),
                  (unsigned long long)n.value("segment_bytes", uint64_t{0}), n.value("estimated", true) ? " (est.)" : "",
                  (unsigned long long)n.value("live_bytes", uint64_t{0}), (unsigned long long)n.value("files", uint64_t{0}),
                  (unsigned long long)n.value("dead_bytes", uint64_t{0}));
    }
  }
  if (j.contains("peer_journals")) {
    for (const auto& p : j["peer_journals"]) {
      std::printf("peer %-17s %llu entries applied, lag %.3f s, last poll %.1f s ago\n",
                  p.value("node", std::string()).c_str(), (unsigned long long)p.value("entries_applied", uint64_t{0}),
                  p.value("lag_seconds", 0.0), p.value("last_poll_age_seconds", -1.0));
    }
  }
  if (j.contains("fuse_ops") && j["fuse_ops"].is_object()) {
    std::printf("fuse operations        count      mean latency\n");
    for (const auto& [op, o] : j["fuse_ops"].items()) {
      const uint64_t n = o.value("count", uint64_t{0});
      std::printf("  %-20s %10llu %10.1f us\n", op.c_str(), (unsigned long long)n,
                  n ? 1e6 * o.value("sum_seconds", 0.0) / double(n) : 0.0);
    }
  }
  return 0;
}

}  // namespace kvfs::cli
