// The Prometheus and JSON renderings of a StatsSnapshot, and the FUSE latency histogram.
#include "fuse/stats_render.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "fuse/op_stats.h"

namespace kvfs {
namespace {

// name{labels} -> value, for every sample line.
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

TEST(FuseOpStats, BucketsAreCumulativeAndEndWithTheCount) {
  FuseOpStats st;
  st.Observe(FuseOp::kWrite, 5'000);          // 5 us   -> le 1e-05
  st.Observe(FuseOp::kWrite, 10'000);         // 10 us  -> le 1e-05 (upper bounds are inclusive)
  st.Observe(FuseOp::kWrite, 2'000'000);      // 2 ms   -> le 0.0025
  st.Observe(FuseOp::kWrite, 60'000'000'000); // 60 s   -> +Inf only
  st.Observe(FuseOp::kRead, 300'000);         // 300 us -> le 0.0005
  auto snap = st.Snapshot();
  ASSERT_EQ(snap.size(), kFuseOpCount);
  const FuseOpSnapshot& w = snap[static_cast<size_t>(FuseOp::kWrite)];
  EXPECT_EQ(w.op, FuseOp::kWrite);
  EXPECT_EQ(w.count, 4u);
  EXPECT_DOUBLE_EQ(w.sum_seconds, 60.002015);
  EXPECT_EQ(w.buckets[0], 2u);   // le 1e-05
  EXPECT_EQ(w.buckets[6], 2u);   // le 0.001
  EXPECT_EQ(w.buckets[7], 3u);   // le 0.0025
  EXPECT_EQ(w.buckets[18], 3u);  // le 10
  EXPECT_EQ(w.buckets[19], 4u);  // +Inf
  const FuseOpSnapshot& r = snap[static_cast<size_t>(FuseOp::kRead)];
  EXPECT_EQ(r.count, 1u);
  EXPECT_EQ(r.buckets[4], 0u);  // le 0.00025
  EXPECT_EQ(r.buckets[5], 1u);  // le 0.0005
  EXPECT_EQ(snap[static_cast<size_t>(FuseOp::kLookup)].count, 0u);
  EXPECT_STREQ(FuseOpName(FuseOp::kReaddirplus), "readdirplus");
  EXPECT_STREQ(FuseOpName(FuseOp::kLseek), "lseek");
}

StatsSnapshot Sample() {
  StatsSnapshot s;
  s.pid = 42;
  s.store.files = 3;
  s.store.cache_hits = 7;
  s.store.cache_misses = 1;
  s.store.checksum_failures = 2;
  s.store.backing_ops.rename = 5;
  s.store.backing_ops.stat = 9;
  s.store.segments_dropped = 4;
  NodeSegmentStats n;
  n.node = "gpu\"7\\x";
  n.sealed_segments = 2;
  n.open_segments = 1;
  n.unlinking_segments = 1;
  n.segment_bytes = 1000;
  n.live_bytes = 600;
  n.dead_bytes = 400;
  n.files = 4;
  n.estimated = false;
  s.store.nodes.push_back(n);
  NodeSegmentStats peer;
  peer.node = "gpu8";
  peer.sealed_segments = 1;
  peer.segment_bytes = 5000;
  peer.live_bytes = 4000;
  peer.dead_bytes = 1000;
  peer.files = 1;
  s.store.nodes.push_back(peer);
  s.store.segments_created = 9;
  s.version = "0.1.0";
  s.git_commit = "0123456789ab";
  s.store.capacity_bytes = 10 << 20;
  s.store.evict_high_bytes = 8 << 20;
  s.store.evict_low_bytes = 6 << 20;
  s.store.segment_size = 2 << 20;
  s.store.cache_capacity_bytes = 64 << 20;
  s.store.backing_fs_ok = true;
  s.store.backing_fs_size = 1000000;
  s.store.backing_fs_avail = 250000;
  PeerJournalStats p;
  p.node = "gpu8";
  p.entries_applied = 11;
  p.lag_seconds = 0.25;
  p.last_poll_age_seconds = 1.5;
  s.store.peer_journals.push_back(p);
  s.fs.bytes_written = 4096;
  s.fs.staged_bytes = 123;
  FuseOpStats ops;
  ops.Observe(FuseOp::kWrite, 20'000);
  s.fuse_ops = ops.Snapshot();
  return s;
}

TEST(StatsRender, PrometheusNamesValuesAndEscaping) {
  const std::string text = StatsToPrometheus(Sample());
  auto m = ParseSamples(text);
  EXPECT_EQ(m["kvfs_files"], 3);
  EXPECT_EQ(m["kvfs_cache_hits_total"], 7);
  EXPECT_EQ(m["kvfs_cache_misses_total"], 1);
  EXPECT_EQ(m["kvfs_checksum_failures_total"], 2);
  EXPECT_EQ(m["kvfs_backing_operations_total{op=\"rename\"}"], 5);
  EXPECT_EQ(m["kvfs_backing_operations_total{op=\"stat\"}"], 9);
  EXPECT_EQ(m["kvfs_evicted_segments_total"], 4);
  EXPECT_EQ(m["kvfs_fuse_written_bytes_total"], 4096);
  EXPECT_EQ(m["kvfs_staged_bytes"], 123);
  EXPECT_EQ(m["kvfs_node_live_bytes{node=\"gpu\\\"7\\\\x\"}"], 600);
  EXPECT_EQ(m["kvfs_node_dead_bytes{node=\"gpu\\\"7\\\\x\"}"], 400);
  EXPECT_EQ(m["kvfs_node_segments{node=\"gpu\\\"7\\\\x\",state=\"sealed\"}"], 2);
  EXPECT_EQ(m["kvfs_node_segments{node=\"gpu\\\"7\\\\x\",state=\"unlinking\"}"], 1);
  EXPECT_EQ(m["kvfs_node_files{node=\"gpu8\"}"], 1);
  EXPECT_EQ(m["kvfs_node_overhead_per_file_bytes{node=\"gpu8\"}"], 1000);
  // This node (the first of nodes) without a label: segments on the export now.
  EXPECT_EQ(m["kvfs_export_segments{state=\"open\"}"], 1);
  EXPECT_EQ(m["kvfs_export_segments{state=\"sealed\"}"], 2);
  EXPECT_EQ(m["kvfs_export_segments{state=\"unlinking\"}"], 1);
  EXPECT_EQ(m["kvfs_export_segment_bytes"], 1000);
  EXPECT_EQ(m["kvfs_export_live_bytes"], 600);
  EXPECT_EQ(m["kvfs_export_dead_bytes"], 400);
  EXPECT_EQ(m["kvfs_export_files"], 4);
  EXPECT_EQ(m["kvfs_export_overhead_per_file_bytes"], 100);
  EXPECT_EQ(m["kvfs_segments_created_total"], 9);
  // Build info, configuration and the export's file system.
  EXPECT_EQ(m["kvfs_build_info{version=\"0.1.0\",commit=\"0123456789ab\"}"], 1);
  EXPECT_EQ(m["kvfs_capacity_bytes"], 10 << 20);
  EXPECT_EQ(m["kvfs_eviction_high_bytes"], 8 << 20);
  EXPECT_EQ(m["kvfs_eviction_low_bytes"], 6 << 20);
  EXPECT_EQ(m["kvfs_global_high_watermark_bytes"], 0);
  EXPECT_EQ(m["kvfs_segment_size_bytes"], 2 << 20);
  EXPECT_EQ(m["kvfs_cache_capacity_bytes"], 64 << 20);
  EXPECT_EQ(m["kvfs_backing_fs_size_bytes"], 1000000);
  EXPECT_EQ(m["kvfs_backing_fs_avail_bytes"], 250000);
  EXPECT_EQ(m["kvfs_peer_journal_entries_applied_total{peer=\"gpu8\"}"], 11);
  EXPECT_DOUBLE_EQ(m["kvfs_peer_journal_lag_seconds{peer=\"gpu8\"}"], 0.25);
  EXPECT_EQ(m["kvfs_fuse_operation_duration_seconds_count{op=\"write\"}"], 1);
  EXPECT_EQ(m["kvfs_fuse_operation_duration_seconds_bucket{op=\"write\",le=\"1e-05\"}"], 0);
  EXPECT_EQ(m["kvfs_fuse_operation_duration_seconds_bucket{op=\"write\",le=\"2.5e-05\"}"], 1);
  EXPECT_EQ(m["kvfs_fuse_operation_duration_seconds_bucket{op=\"write\",le=\"+Inf\"}"], 1);
  EXPECT_EQ(m["kvfs_fuse_operation_duration_seconds_count{op=\"lookup\"}"], 0);
  // Every family has HELP and TYPE, and counters end in _total.
  std::istringstream in(text);
  std::string line;
  int families = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    families++;
    std::istringstream f(line.substr(7));
    std::string name, type;
    f >> name >> type;
    if (type == "counter") {
      EXPECT_TRUE(name.size() > 6 && name.substr(name.size() - 6) == "_total") << name;
    }
    EXPECT_NE(text.find("# HELP " + name + " "), std::string::npos) << name;
  }
  EXPECT_GT(families, 30);
  EXPECT_EQ(PrometheusEscape("a\nb"), "a\\nb");
}

TEST(StatsRender, NoBackingFsGaugesWhenStatvfsFailed) {
  StatsSnapshot s = Sample();
  s.store.backing_fs_ok = false;
  const std::string text = StatsToPrometheus(s);
  EXPECT_NE(text.find("# TYPE kvfs_backing_fs_size_bytes gauge"), std::string::npos);
  EXPECT_EQ(ParseSamples(text).count("kvfs_backing_fs_size_bytes"), 0u);  // no sample, not a false 0
}

// An S3 backing (docs/s3.md): the "s3" object and kvfs_s3_* only then.
TEST(StatsRender, S3CountersOnlyForAnS3Backing) {
  StatsSnapshot s = Sample();
  EXPECT_FALSE(nlohmann::json::parse(StatsToJson(s)).contains("s3"));
  EXPECT_EQ(StatsToPrometheus(s).find("kvfs_s3_"), std::string::npos);
  s.store.s3 = true;
  s.store.s3_requests = {{"put", 5}, {"get", 12}, {"head", 4}};
  s.store.s3_requests_total = 21;
  s.store.s3_segments_uploaded = 3;
  s.store.s3_segments_pending = 1;
  s.store.s3_journal_publications = 2;
  s.store.s3_failures = 7;
  auto j = nlohmann::json::parse(StatsToJson(s));
  EXPECT_EQ(j["s3"]["requests"]["put"], 5);
  EXPECT_EQ(j["s3"]["requests"]["get"], 12);
  EXPECT_EQ(j["s3"]["requests"]["total"], 21);
  EXPECT_EQ(j["s3"]["segments_uploaded"], 3);
  EXPECT_EQ(j["s3"]["segments_pending"], 1);
  EXPECT_EQ(j["s3"]["journal_publications"], 2);
  EXPECT_EQ(j["s3"]["failures"], 7);
  auto m = ParseSamples(StatsToPrometheus(s));
  EXPECT_EQ(m["kvfs_s3_requests_total{op=\"put\"}"], 5);
  EXPECT_EQ(m["kvfs_s3_requests_total{op=\"head\"}"], 4);
  EXPECT_EQ(m["kvfs_s3_segments_uploaded_total"], 3);
  EXPECT_EQ(m["kvfs_s3_segments_pending"], 1);
  EXPECT_EQ(m["kvfs_s3_journal_publications_total"], 2);
  EXPECT_EQ(m["kvfs_s3_failures_total"], 7);
}

TEST(StatsRender, JsonKeepsTheStatsKeys) {
  auto j = nlohmann::json::parse(StatsToJson(Sample()));
  EXPECT_EQ(j["pid"], 42);
  EXPECT_EQ(j["files"], 3);
  EXPECT_DOUBLE_EQ(j["cache_hit_rate"].get<double>(), 7.0 / 8.0);
  EXPECT_EQ(j["backing_ops"]["rename"], 5);
  EXPECT_EQ(j["fuse"]["bytes_written"], 4096);
  EXPECT_EQ(j["nodes"][0]["dead_bytes"], 400);
  EXPECT_EQ(j["nodes"][0]["segments"], 4);
  EXPECT_EQ(j["nodes"][1]["node"], "gpu8");
  // On the export now: this node, and all nodes (a peer's figures are estimated).
  EXPECT_EQ(j["segments"], 4);
  EXPECT_EQ(j["segment_bytes"], 1000);
  EXPECT_EQ(j["segments_created"], 9);
  EXPECT_EQ(j["export"]["node"]["files"], 4);
  EXPECT_DOUBLE_EQ(j["export"]["node"]["overhead_bytes_per_file"].get<double>(), 100.0);
  EXPECT_FALSE(j["export"]["node"]["estimated"].get<bool>());
  EXPECT_EQ(j["export"]["all_nodes"]["segments"], 5);
  EXPECT_EQ(j["export"]["all_nodes"]["segment_bytes"], 6000);
  EXPECT_EQ(j["export"]["all_nodes"]["live_bytes"], 4600);
  EXPECT_EQ(j["export"]["all_nodes"]["files"], 5);
  EXPECT_DOUBLE_EQ(j["export"]["all_nodes"]["overhead_bytes_per_file"].get<double>(), 280.0);
  EXPECT_TRUE(j["export"]["all_nodes"]["estimated"].get<bool>());
  EXPECT_EQ(j["version"], "0.1.0");
  EXPECT_EQ(j["commit"], "0123456789ab");
  EXPECT_EQ(j["config"]["capacity_bytes"], 10 << 20);
  EXPECT_EQ(j["config"]["evict_low_bytes"], 6 << 20);
  EXPECT_EQ(j["backing_fs"]["size_bytes"], 1000000);
  EXPECT_EQ(j["backing_fs"]["avail_bytes"], 250000);
  EXPECT_EQ(j["peer_journals"][0]["node"], "gpu8");
  EXPECT_EQ(j["fuse_ops"]["write"]["count"], 1);
  EXPECT_FALSE(j["fuse_ops"].contains("lookup"));  // only operations that ran
  EXPECT_EQ(j["fuse_ops"]["write"]["buckets"].size(), kLatencyBucketsSeconds.size());
}

}  // namespace
}  // namespace kvfs
