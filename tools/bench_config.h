// kvfs-bench's run configuration (its command line, parsed by main in tools/kvfs_bench.cc) and the size
// syntax it shares with kvfs's --cache-size. Read by the stack (tools/bench_stack.h), the phases
// (tools/bench_phases.h) and main.
//
// Thread safety: a Config is written once by main, then only read (from any thread).
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvfs {
class S3Client;
}

namespace kvfs::bench {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct Config {
  std::vector<std::string> profiles{"all"}, modes{"direct", "kvfs", "tmpfs"};
  uint64_t chunks = 200, chunk_bytes = 0;
  unsigned threads = 4;
  double hit_ratio = 0.5;
  long latency_us = 500;
  double data_mbps = 0;
  std::string work = "/var/tmp/kvfs-bench", tmpfs = "/dev/shm", build, json_out;
  bool cold_load = true, progress = true;
  std::vector<std::string> kvfs_args, nfsim_args, ceiling_args;
  unsigned lookup_batch = 128;
  unsigned repeat = 1;
  int64_t fill_bytes = 0;  // load_full's cache filler (kvfs mode): -1 = auto (1.25x kvfs's --cache-size), 0 = no load_full
  unsigned ranks = 4;        // vllm-tp-pwrite: writer threads per chunk
  uint64_t file_bytes = 0;   // vllm-slotfile: slot file size (0 = max(chunks x chunk bytes, 64 MiB))
  unsigned trie_depth = 16;  // vua-trie: chunks per sequence (the trie's depth)
  std::string phase_hook;  // sh -c "HOOK PROFILE MODE PHASE begin|end" around every phase (test bed RPC counts)
  // Modes s3-kvfs and s3-object (--modes s3 = both): the bucket (--s3 s3://BUCKET/PREFIX) and how to reach
  // it (the same flags as kvfs mount; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the
  // shared credentials file). s3: the bench's own client (created by main when an s3 mode runs): the
  // one-object-per-chunk baseline's requests, bucket creation and the cleanup of every run's prefix.
  std::string s3_url, s3_endpoint, s3_region = "us-east-1", s3_ca, s3_bucket, s3_prefix;  // prefix: "" or ending '/'
  bool s3_path_style = false, s3_keep = false;  // keep: leave every run's objects in the bucket
  std::shared_ptr<kvfs::S3Client> s3;
};

// "1GiB", "256MiB", "512M", "4096": kvfs's size syntax (binary multiples), enough for --cache-size.
inline uint64_t ParseSizeOr(const std::string& t, uint64_t dflt) {
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || v < 0) return dflt;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case 0: return static_cast<uint64_t>(v);
    case 'K': return static_cast<uint64_t>(v * 1024.0);
    case 'M': return static_cast<uint64_t>(v * 1048576.0);
    case 'G': return static_cast<uint64_t>(v * 1073741824.0);
    case 'T': return static_cast<uint64_t>(v * 1099511627776.0);
    default: return dflt;
  }
}
// kvfs's value cache capacity for this run (--kvfs-arg --cache-size X, else kvfs's default 1 GiB).
inline uint64_t KvfsCacheBytes(const Config& c) {
  uint64_t v = 1ull << 30;
  for (size_t i = 0; i + 1 < c.kvfs_args.size(); ++i) {
    if (c.kvfs_args[i] == "--cache-size") v = ParseSizeOr(c.kvfs_args[i + 1], v);
  }
  for (auto& a : c.kvfs_args) {
    if (a.rfind("--cache-size=", 0) == 0) v = ParseSizeOr(a.substr(13), v);
  }
  return v;
}

}  // namespace kvfs::bench
