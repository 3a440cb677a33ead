// kvfs-bench: KV-cache connector workloads, direct on a (simulated) NFS export vs kvfs mounted over it.
//
//   kvfs-bench [--profile vllm,sglang-file,...|all] [--chunks N] [--threads T] [--chunk-bytes B]
//              [--hit-ratio 0.5] [--latency-us 500] [--data-mbps 0] [--modes direct,ceiling,kvfs,tmpfs]
//              [--work DIR] [--tmpfs DIR] [--build DIR] [--json FILE] [--no-cold-load] [--no-progress]
//              [--repeat R] [--fill-bytes auto|B] [--kvfs-arg ARG]... [--nfsim-arg ARG]... [--ceiling-arg ARG]...
//              [--ranks R (vllm-tp-pwrite)] [--file-bytes B (vllm-slotfile)] [--trie-depth D (vua-trie)]
//              [--s3 s3://BUCKET/PREFIX --s3-endpoint URL [--s3-region R] [--s3-path-style] [--s3-ca FILE]
//               [--s3-keep]]   (modes s3-kvfs, s3-object; --modes s3 = both)
//
// For every profile and mode it builds a fresh stack under --work (default /var/tmp/kvfs-bench):
//   src/   the "NFS server's disk" (a real directory)
//   nfs/   kvfs-nfsim mounted over src/ (counts every operation, adds --latency-us per metadata op)
//   kv/    kvfs mounted with --backing nfs/kvfs-backing (mode kvfs only); idx/ its local index dir
// and replays the connector's exact syscall sequence (docs/design.md §10, tests/data/traces) against
// nfs/direct (mode direct) or kv/ (mode kvfs): init (excluded from counts), store, lookup, [remount of
// the client side: kvfs and nfsim, so the load is cold in every client cache and warm only in the
// "server's" page cache], load, warm load. Every load verifies every byte.
// Mode ceiling is what a minimal FUSE daemon can do over the same directory: the same workload through a
// second kvfs-nfsim at 0 latency (a plain passthrough, no cache, no index) mounted at ceil/ over
// nfs/ceiling-backing, so its bytes take the same two FUSE hops as kvfs's (app -> daemon -> nfsim -> disk).
// With --fill-bytes, a load_full phase (cold load with a full cache) runs after a second client restart;
// in kvfs mode the value cache is first filled with that many bytes of other files (auto: 1.25x kvfs's
// --cache-size), so the measured chunks are loaded while the cache evicts. --repeat R runs every mode R times, interleaved
// (direct, ceiling, kvfs, direct, ...), and reports the ratios of each run and their median.
// Modes s3-kvfs and s3-object (--modes s3 runs both, side by side): s3-kvfs is kvfs mounted over
// s3://BUCKET/PREFIX/<run>/ on --s3-endpoint (a staging and an index directory under --work, no nfsim; the
// client restart is kvfs's unmount, which uploads the active segment and publishes the journal, and a
// mount with the same staging directory and index: the cold load reads every chunk from the bucket);
// s3-object is LMCache's S3 shape on the same bucket through blockstore/s3_client.h: one object per chunk,
// a PUT per store, a HEAD per lookup probe, a GET per load. Every phase reports its S3 requests by type
// and per chunk; every run's objects are deleted afterwards (--s3-keep leaves them).
// Mode tmpfs is the memory baseline of the warm-load target: the same profile, chunk set, threads and
// syscalls on a directory of a tmpfs (--tmpfs, default /dev/shm), no FUSE, no nfsim, no remount.
//
// Why C++: the replay must issue exactly the connectors' syscalls (O_DIRECT with aligned buffers, dup'd
// descriptors, pwrite per 4 KiB page) from N threads and time each one to microseconds; a Python replay
// would add interpreter time to every 10 us kvfs operation and serialize threads on the GIL.
//
// The parts: tools/bench_io.h (timed syscalls, contents), bench_profiles.h (the connectors),
// bench_stack.h (the mounts), bench_phases.h (one profile in one mode), bench_report.h (tables, ratios);
// this file parses the command line and runs the profiles and modes.
#include <unistd.h>

#include <errno.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "blockstore/s3_client.h"
#include "blockstore/s3_env.h"
#include "tools/bench_config.h"
#include "tools/cli_parse.h"
#include "tools/bench_phases.h"
#include "tools/bench_profiles.h"
#include "tools/bench_report.h"
#include "tools/bench_stack.h"

namespace kvfs::bench {
namespace {

// Bad arguments: one line, exit 2 (tools/cli_parse.h); --help: the usage on stdout, exit 0.
[[noreturn]] void Usage(const char* msg) {
  if (msg) std::exit(kvfs::cli::UsageError("kvfs-bench", msg));
  std::fprintf(stdout,
               "usage: kvfs-bench [--profile P[,P...]|all] [--chunks N (200)] [--threads T (4)] [--chunk-bytes B]\n"
               "  [--hit-ratio F (0.5)] [--latency-us US (500)] [--data-mbps MBPS (0)]\n"
               "  [--modes direct,kvfs,tmpfs (default) | any of direct,ceiling,kvfs,tmpfs] [--repeat R (1)]\n"
               "  [--fill-bytes auto|B (0: no cold load with a full cache; auto: 1.25x kvfs --cache-size)]\n"
               "  [--work DIR (/var/tmp/kvfs-bench)] [--tmpfs DIR (/dev/shm)] [--build DIR (this binary's build dir)]\n"
               "  [--json FILE]\n"
               "  [--lookup-batch N (128)] [--no-cold-load] [--no-progress] [--kvfs-arg A]... [--nfsim-arg A]...\n"
               "  [--ceiling-arg A]... (added to the ceiling's kvfs-nfsim --latency-us 0)\n"
               "  [--phase-hook CMD (run as: sh -c 'CMD PROFILE MODE PHASE begin|end')]\n"
               "  [--s3 s3://BUCKET/PREFIX --s3-endpoint URL [--s3-region R] [--s3-path-style] [--s3-ca FILE] [--s3-keep]]\n"
               "   (modes s3-kvfs: kvfs over the bucket; s3-object: one object per chunk; --modes s3 = both;\n"
               "   credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or ~/.aws/credentials)\n"
               "  [--ranks R (4: vllm-tp-pwrite writers per chunk)] [--file-bytes B (vllm-slotfile: slot file size;\n"
               "   default max(chunks x chunk bytes, 64MiB))] [--trie-depth D (16: vua-trie chunks per sequence = levels)]\n"
               "profiles: vllm llmd lmcache-fs lmcache-nixl sglang-file sglang-nixl creates\n"
               "  lmcache-link dynamo-g4 vua-trie vllm-tp-pwrite vllm-slotfile\n");
  std::exit(0);
}

// Checked values: a flag's value that is not what it should be is a usage error, never an exception
// (std::stoull threw on "abc" and wrapped "-3" around).
uint64_t Count(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || !std::isdigit(static_cast<unsigned char>(v[0])) || *end != 0 || errno == ERANGE) {
    Usage((flag + ": '" + v + "' is not a whole number >= 0").c_str());
  }
  return n;
}
unsigned SmallCount(const std::string& flag, const std::string& v) {
  const uint64_t n = Count(flag, v);
  if (n > 1000000000ull) Usage((flag + ": " + v + " is too large").c_str());
  return static_cast<unsigned>(n);
}
double Number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != 0 || !std::isfinite(d) || d < 0) {
    Usage((flag + ": '" + v + "' is not a number >= 0").c_str());
  }
  return d;
}
uint64_t Size(const std::string& flag, const std::string& v) {
  const uint64_t n = ParseSizeOr(v, UINT64_MAX);
  if (n == UINT64_MAX) Usage((flag + ": '" + v + "' is not a size (e.g. 4096, 256MiB, 1G)").c_str());
  return n;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) {
    if (!x.empty()) v.push_back(x);
  }
  return v;
}

}  // namespace
}  // namespace kvfs::bench

int main(int argc, char** argv) {
  using namespace kvfs::bench;  // NOLINT: the parts (tools/bench_*.h)
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--profile" || a == "--profiles") cfg.profiles = Split(val());
    else if (a == "--modes") cfg.modes = Split(val());
    else if (a == "--chunks") cfg.chunks = Count(a, val());
    else if (a == "--chunk-bytes") cfg.chunk_bytes = Size(a, val());
    else if (a == "--threads") cfg.threads = SmallCount(a, val());
    else if (a == "--hit-ratio") cfg.hit_ratio = Number(a, val());
    else if (a == "--latency-us") cfg.latency_us = static_cast<long>(Count(a, val()));
    else if (a == "--data-mbps") cfg.data_mbps = Number(a, val());
    else if (a == "--work") cfg.work = val();
    else if (a == "--tmpfs") cfg.tmpfs = val();
    else if (a == "--build") cfg.build = val();
    else if (a == "--json") cfg.json_out = val();
    else if (a == "--lookup-batch") cfg.lookup_batch = SmallCount(a, val());
    else if (a == "--no-cold-load") cfg.cold_load = false;
    else if (a == "--no-progress") cfg.progress = false;
    else if (a == "--kvfs-arg") cfg.kvfs_args.push_back(val());
    else if (a == "--nfsim-arg") cfg.nfsim_args.push_back(val());
    else if (a == "--ceiling-arg") cfg.ceiling_args.push_back(val());
    else if (a == "--repeat") cfg.repeat = SmallCount(a, val());
    else if (a == "--fill-bytes") {
      std::string v = val();
      cfg.fill_bytes = v == "auto" ? -1 : static_cast<int64_t>(Size(a, v));
    }
    else if (a == "--phase-hook") cfg.phase_hook = val();
    else if (a == "--ranks") cfg.ranks = SmallCount(a, val());
    else if (a == "--file-bytes") cfg.file_bytes = Size(a, val());
    else if (a == "--trie-depth") cfg.trie_depth = SmallCount(a, val());
    else if (a == "--s3") cfg.s3_url = val();
    else if (a == "--s3-endpoint") cfg.s3_endpoint = val();
    else if (a == "--s3-region") cfg.s3_region = val();
    else if (a == "--s3-ca") cfg.s3_ca = val();
    else if (a == "--s3-path-style") cfg.s3_path_style = true;
    else if (a == "--s3-keep") cfg.s3_keep = true;
    else if (a == "-h" || a == "--help") Usage(nullptr);
    else Usage(("unknown argument " + a).c_str());
  }
  if (cfg.threads == 0 || cfg.chunks == 0 || cfg.lookup_batch == 0 || cfg.repeat == 0) {
    Usage("threads, chunks, lookup batch and repeat must be > 0");
  }
  if (cfg.ranks == 0 || cfg.trie_depth == 0) Usage("ranks and trie depth must be > 0");
  {
    std::vector<std::string> modes;
    for (auto& m : cfg.modes) {
      if (m == "s3") {
        modes.insert(modes.end(), {"s3-kvfs", "s3-object"});
      } else {
        modes.push_back(m);
      }
    }
    cfg.modes = modes;
  }
  bool s3 = false;
  for (auto& m : cfg.modes) {
    if (m != "direct" && m != "kvfs" && m != "tmpfs" && m != "ceiling" && m != "s3-kvfs" && m != "s3-object") {
      Usage(("unknown mode " + m + " (direct, ceiling, kvfs, tmpfs, s3 = s3-kvfs + s3-object)").c_str());
    }
    s3 = s3 || m.rfind("s3-", 0) == 0;
  }
  if (s3) {
    if (cfg.s3_url.empty() || cfg.s3_endpoint.empty()) Usage("the s3 modes need --s3 s3://BUCKET/PREFIX and --s3-endpoint URL");
    if (kvfs::Status u = kvfs::ParseS3Url(cfg.s3_url, &cfg.s3_bucket, &cfg.s3_prefix); !u.ok()) {
      Usage(("--s3: " + u.message()).c_str());
    }
    auto creds = kvfs::S3Credentials::FromEnvironment();
    if (!creds.ok()) Usage(creds.status().message().c_str());
    kvfs::S3Config sc;
    sc.endpoint = cfg.s3_endpoint;
    sc.bucket = cfg.s3_bucket;
    sc.region = cfg.s3_region;
    sc.path_style = cfg.s3_path_style;
    sc.ca_file = cfg.s3_ca;
    sc.credentials = *creds;
    // The s3-object baseline is LMCache's shape: one plain GET per chunk load (no parallel ranged parts).
    sc.read_parts = 1;
    auto client = kvfs::S3Client::Create(sc);
    if (!client.ok()) Usage(("--s3-endpoint: " + client.status().message()).c_str());
    cfg.s3 = std::move(*client);
    if (kvfs::Status b = cfg.s3->CreateBucket(); !b.ok()) {
      std::fprintf(stderr, "kvfs-bench: s3 bucket %s at %s: %s\n", cfg.s3_bucket.c_str(), cfg.s3_endpoint.c_str(),
                   b.ToString().c_str());
      return 1;
    }
  }
  if (cfg.build.empty()) {
    fs::path self = fs::canonical("/proc/self/exe");
    cfg.build = self.parent_path().parent_path().string();
  }
  cfg.work = fs::absolute(cfg.work).string();
  fs::create_directories(cfg.work);

  std::vector<Profile> all = Profiles(), chosen;
  for (auto& name : cfg.profiles) {
    if (name == "all") {
      chosen = all;
      break;
    }
    auto it = std::find_if(all.begin(), all.end(), [&](const Profile& p) { return p.name == name; });
    if (it == all.end()) Usage(("unknown profile " + name).c_str());
    chosen.push_back(*it);
  }

  std::atomic<bool> stop{false};
  std::thread prog(ProgressLoop, &stop, cfg.progress && isatty(2));
  json report;
  report["config"] = {{"chunks", cfg.chunks}, {"threads", cfg.threads}, {"hit_ratio", cfg.hit_ratio},
                      {"latency_us", cfg.latency_us}, {"data_mbps", cfg.data_mbps}, {"cold_load", cfg.cold_load},
                      {"lookup_batch", cfg.lookup_batch}, {"kvfs_args", cfg.kvfs_args}, {"nfsim_args", cfg.nfsim_args},
                      {"ceiling_args", cfg.ceiling_args}, {"repeat", cfg.repeat}, {"fill_bytes", cfg.fill_bytes},
                      {"modes", cfg.modes}};
  if (s3) report["config"]["s3"] = {{"url", cfg.s3_url}, {"endpoint", cfg.s3_endpoint}, {"path_style", cfg.s3_path_style}};
  report["loadavg_start"] = LoadAvg();
  report["profiles"] = json::array();
  bool all_ok = true;
  for (auto& p : chosen) {
    size_t size = cfg.chunk_bytes ? cfg.chunk_bytes : p.default_size;
    if (p.name == "lmcache-fs" && size <= kLmcHeader) Usage("lmcache-fs needs more than 28 bytes");
    json pj = {{"profile", p.name}, {"what", p.what}, {"chunks", cfg.chunks}, {"chunk_bytes", size},
               {"threads", cfg.threads}, {"hit_ratio", cfg.hit_ratio}, {"latency_us", cfg.latency_us}};
    if (p.bytes_per_unit) pj["bytes_per_unit"] = true;  // the report prints backing bytes per chunk
    if (p.name == "vllm-tp-pwrite") pj["ranks"] = cfg.ranks;
    if (p.name == "vua-trie") pj["trie_depth"] = cfg.trie_depth;
    if (p.name == "vllm-slotfile") {
      pj["file_bytes"] = cfg.file_bytes ? (cfg.file_bytes + size - 1) / size * size
                                        : (std::max<uint64_t>(cfg.chunks * size, 64ull << 20) + size - 1) / size * size;
    }
    // --repeat: the modes run interleaved (direct, ceiling, kvfs, direct, ...), so slow drifts of the
    // machine's load hit every mode alike. "modes" is the first run (what bench_plot.py reads).
    json runs = json::array();
    for (unsigned rep = 0; rep < cfg.repeat; ++rep) {
      json rm;
      for (auto& m : cfg.modes) {
        rm[m] = RunMode(cfg, p, size, m);
        all_ok = all_ok && rm[m].value("ok", false);
      }
      runs.push_back({{"modes", rm}, {"ratios", RunRatios(rm)}});
    }
    json modes = runs[0]["modes"];
    pj["modes"] = modes;
    pj["runs"] = runs;
    pj["median"] = MedianRatios(runs);
    // Warm-load target: bandwidth relative to the same loads from tmpfs (same chunks, threads, syscalls).
    if (modes.contains("tmpfs") && modes["tmpfs"].value("ok", false)) {
      // Both tmpfs loads read memory; the better one is the baseline (short phases on a shared machine
      // are noisy, and the higher baseline is the conservative one for the ratio).
      double base = std::max(modes["tmpfs"]["phases"]["load"]["mb_per_s"].get<double>(),
                             modes["tmpfs"]["phases"]["warm_load"]["mb_per_s"].get<double>());
      json vs = {{"tmpfs_mb_per_s", base}};
      for (const char* m : {"direct", "kvfs"}) {
        if (modes.contains(m) && modes[m].value("ok", false) && base > 0) {
          vs[m] = modes[m]["phases"]["warm_load"]["mb_per_s"].get<double>() / base;
        }
      }
      pj["warm_load_vs_tmpfs"] = vs;
    }
    report["profiles"].push_back(pj);
    ClearProgressLabel();
    std::fprintf(stderr, "\r\033[K");
    PrintProfile(pj);
    PrintS3(pj);
    PrintRuns(pj);
    std::fflush(stdout);
  }
  stop = true;
  prog.join();
  report["loadavg_end"] = LoadAvg();
  std::printf("\nload average (1 min) at start %.2f, at end %.2f\n", report["loadavg_start"]["1m"].get<double>(),
              report["loadavg_end"]["1m"].get<double>());
  if (!cfg.json_out.empty()) {
    std::ofstream f(cfg.json_out);
    f << report.dump(1) << "\n";
  }
  return all_ok ? 0 : 1;
}
